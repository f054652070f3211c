//! Review of issue #12 (TLS, authentication providers, AuthChallenge refresh, OAuth2): one test
//! per defect found, each `#[ignore = "review: ..."]` so the branch stays green. Run them with
//! `cargo test --test protocol security::tls_auth_probes -- --ignored`. Tests without `#[ignore]` pin behaviour the
//! review tried to break and found sound. All defects are fixed now, so nothing is ignored.

use support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use common::certs::{fresh_dir, Ca};
use pulsar_sdk::auth::oauth2::OAuth2ClientCredentials;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{Connection, ConnectionConfig};
use pulsar_sdk::mock::{MockAuth, MockBroker, MockBrokerConfig, MockTls, REFRESH_AUTH_DATA};
use pulsar_sdk::{AuthenticationProvider, Error, SubscriptionType, TlsFailure, TokenAuth};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------------------------
// A scriptable HTTP endpoint for the OAuth2 flow.
// ---------------------------------------------------------------------------------------------

/// One request as the endpoint saw it.
#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    head: String,
    body: String,
}

/// What the endpoint does with a request.
enum Answer {
    /// Writes these bytes, then closes.
    Close(String),
    /// Writes these bytes and keeps the connection open (like a keep-alive server that ignores
    /// `Connection: close`).
    KeepOpen(String),
    /// Never answers.
    Hang,
}

type Handler = Arc<dyn Fn(&Seen, &str) -> Answer + Send + Sync>;

struct Endpoint {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Endpoint {
    fn issuer(&self) -> String {
        format!("{}/issuer", self.base)
    }
    fn token_requests(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.request_line.starts_with("POST "))
            .count()
    }
    fn last_form(&self) -> Vec<(String, String)> {
        let seen = self.seen.lock().unwrap();
        let last = seen
            .iter()
            .rev()
            .find(|s| s.request_line.starts_with("POST "))
            .expect("a token request");
        url::form_urlencoded::parse(last.body.as_bytes())
            .into_owned()
            .collect()
    }
}

fn http(status: u16, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Serves discovery at `/issuer/.well-known/openid-configuration` (pointing at `/token`) and
/// hands every other request to `handler` (given the request and the base URL).
async fn endpoint(handler: impl Fn(&Seen, &str) -> Answer + Send + Sync + 'static) -> Endpoint {
    let handler: Handler = Arc::new(handler);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (b, s) = (base.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let (handler, base, seen) = (handler.clone(), b.clone(), s.clone());
            tokio::spawn(async move { one(sock, handler, &base, seen).await });
        }
    });
    Endpoint { base, seen }
}

async fn one(mut sock: TcpStream, handler: Handler, base: &str, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, length) = loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (end + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let request = Seen {
        request_line: head.lines().next().unwrap_or_default().to_owned(),
        head: head.clone(),
        body: String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string(),
    };
    seen.lock().unwrap().push(request.clone());
    let answer = if request
        .request_line
        .starts_with("GET /issuer/.well-known/openid-configuration ")
    {
        Answer::Close(http(
            200,
            &format!(r#"{{"issuer":"{base}/issuer","token_endpoint":"{base}/token"}}"#),
        ))
    } else {
        handler(&request, base)
    };
    match answer {
        Answer::Close(raw) => {
            let _ = sock.write_all(raw.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
        Answer::KeepOpen(raw) => {
            let _ = sock.write_all(raw.as_bytes()).await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Answer::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
    }
}

fn key_data_url(secret: &str) -> String {
    let json = format!(
        r#"{{"type":"client_credentials","client_id":"my-app","client_secret":"{secret}"}}"#
    );
    format!(
        "data:application/json;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(json)
    )
}

fn provider(ep: &Endpoint, secret: &str) -> OAuth2ClientCredentials {
    OAuth2ClientCredentials::new(&ep.issuer(), key_data_url(secret), Some("aud"))
        .unwrap()
        .retry(1, Duration::from_millis(10))
}

async fn token(p: &OAuth2ClientCredentials) -> Result<String, String> {
    p.auth_data()
        .await
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .map_err(|e| e.to_string())
}

/// A token endpoint that issues `tok-N` with the given `expires_in` JSON value (or none).
async fn issuing(expires_in: Option<&'static str>) -> Endpoint {
    let n = Arc::new(AtomicUsize::new(0));
    endpoint(move |_, _| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        let body = match expires_in {
            Some(e) => format!(r#"{{"access_token":"tok-{i}","expires_in":{e}}}"#),
            None => format!(r#"{{"access_token":"tok-{i}"}}"#),
        };
        Answer::Close(http(200, &body))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// OAuth2 defects
// ---------------------------------------------------------------------------------------------

/// Upstream (FlowBase / TokenClient) bounds every request: 10 s connect, 30 s read. Here
/// `auth/http.rs` has no timeout, so an endpoint that accepts and never answers blocks the
/// provider for ever; it holds the provider's lock meanwhile, so every other connection's
/// CONNECT (and every AuthChallenge answer) queues behind it.
#[tokio::test]
async fn oauth2_hanging_token_endpoint_times_out() {
    let ep = endpoint(|_, _| Answer::Hang).await;
    // Short configured bounds keep the test quick; the defaults are upstream's 10 s / 30 s.
    let p = provider(&ep, "s3cret")
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(2));
    let started = Instant::now();
    match tokio::time::timeout(Duration::from_secs(10), token(&p)).await {
        Ok(Err(e)) => {
            assert!(started.elapsed() < Duration::from_secs(5), "{e}");
            assert!(e.contains("within 2s"), "{e}");
        }
        Ok(Ok(t)) => panic!("a token from a hanging endpoint: {t}"),
        Err(_) => panic!("token() still waiting after 10 s with a 2 s read timeout"),
    }
}

/// The HTTP client reads until EOF and ignores Content-Length, so a server (or a proxy in
/// between) that keeps the connection open despite `Connection: close` leaves a complete
/// answer unread for ever.
#[tokio::test]
async fn oauth2_complete_response_on_a_kept_alive_connection_is_used() {
    let ep = endpoint(|_, _| {
        Answer::KeepOpen(http(200, r#"{"access_token":"tok-1","expires_in":3600}"#))
    })
    .await;
    let p = provider(&ep, "s3cret");
    let got = tokio::time::timeout(Duration::from_secs(10), token(&p))
        .await
        .expect("the full response arrived but token() kept waiting for EOF");
    assert_eq!(got.unwrap(), "tok-1");
}

/// Upstream `AuthenticationOAuth2.CachedToken`: `expiresAt = now + expires_in` (0 when the
/// field is missing), so such a token counts as expired on the next call and is fetched again.
/// Here `oauth2.rs` turns a missing / zero `expires_in` into "never refresh": the first token is
/// served for the life of the process, long after the IdP's `exp` has passed, and every
/// AuthChallenge is answered with it (the broker then drops the connection, again and again).
#[tokio::test]
async fn oauth2_token_without_expires_in_is_not_cached_for_ever() {
    for expires_in in [None, Some("0")] {
        let ep = issuing(expires_in).await;
        let p = provider(&ep, "s3cret");
        assert_eq!(token(&p).await.unwrap(), "tok-1");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = token(&p).await.unwrap();
        assert_eq!(
            (second.as_str(), ep.token_requests()),
            ("tok-2", 2),
            "expires_in {expires_in:?}: the first token was reused"
        );
    }
}

/// A huge `expires_in` from the endpoint panics the caller: `Duration::from_secs_f64` panics
/// above ~1.8e19 s, and `Instant + Duration` panics on overflow well below that. The provider is
/// called inside the CONNECT handshake (the application's own task) and in the connection task.
#[tokio::test]
async fn oauth2_huge_expires_in_does_not_panic() {
    // 1e300: Duration::from_secs_f64 panics; 1e19: fits a Duration, Instant + it overflows.
    let mut panics = Vec::new();
    for expires_in in ["1e300", "1e19"] {
        let ep = issuing(Some(expires_in)).await;
        let p = Arc::new(provider(&ep, "s3cret"));
        let task = tokio::spawn(async move { token(&p).await });
        match task.await {
            Ok(r) => assert!(r.is_ok(), "expires_in {expires_in}: {r:?}"),
            Err(e) => panics.push(format!("expires_in {expires_in}: {e}")),
        }
    }
    assert!(panics.is_empty(), "token() panicked: {panics:#?}");
}

/// `Debug` of the provider, and its discovery / token errors, print the issuer URL whole,
/// user-info password included.
#[test]
fn oauth2_debug_hides_issuer_url_password() {
    let p = OAuth2ClientCredentials::new(
        "http://svc:hunter2@127.0.0.1:1/issuer",
        key_data_url("x"),
        None,
    )
    .unwrap();
    let debug = format!("{p:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
}

/// A plain (non-base64) `data:` key file is decoded as an HTML form
/// (`url::form_urlencoded::parse`): `+` becomes a space and `&` disappears. Upstream
/// (`DataURLStreamHandler`) only percent-decodes the URI, like RFC 2397. A secret with `+` or
/// `&` (both common in generated secrets) is silently changed and the IdP answers 401.
#[tokio::test]
async fn oauth2_plain_data_url_keeps_plus_and_ampersand() {
    let ep = issuing(Some("3600")).await;
    // Percent-encode only what a URI cannot hold raw; `+`, `&` and `=` are legal there.
    let json = r#"{"client_id":"my-app","client_secret":"a+b&c=d"}"#;
    let encoded: String = json
        .chars()
        .map(|c| match c {
            '{' => "%7B".to_owned(),
            '}' => "%7D".to_owned(),
            '"' => "%22".to_owned(),
            c => c.to_string(),
        })
        .collect();
    let p = OAuth2ClientCredentials::new(
        &ep.issuer(),
        format!("data:application/json,{encoded}"),
        None,
    )
    .unwrap()
    .retry(1, Duration::from_millis(10));
    let result = token(&p).await;
    assert!(result.is_ok(), "{result:?}");
    let form = ep.last_form();
    let secret = form
        .iter()
        .find(|(k, _)| k == "client_secret")
        .map(|(_, v)| v.as_str());
    assert_eq!(secret, Some("a+b&c=d"));
}

/// Upstream's HTTP client follows redirects (`setFollowRedirect(true)` in FlowBase and
/// TokenClient). Here any non-200 is an error, so an issuer or token endpoint behind a redirect
/// (a moved realm, http→https, a trailing-slash redirect) cannot be used.
#[tokio::test]
async fn oauth2_token_endpoint_redirect_is_followed() {
    let ep = endpoint(|seen, base| {
        if seen.request_line.starts_with("POST /token ") {
            Answer::Close(format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {base}/v2/token\r\nContent-Length: 0\r\n\r\n"
            ))
        } else if seen.request_line.starts_with("POST /v2/token ") {
            Answer::Close(http(200, r#"{"access_token":"tok-moved","expires_in":3600}"#))
        } else {
            Answer::Close(http(404, "not found"))
        }
    })
    .await;
    let p = provider(&ep, "s3cret");
    assert_eq!(token(&p).await, Ok("tok-moved".to_owned()));
}

/// A 307/308 repeats the POST with the client secret: it is only followed to the same origin,
/// never to another host (here: another port of 127.0.0.1, which must not see the secret).
#[tokio::test]
async fn oauth2_redirect_to_another_origin_does_not_carry_the_secret() {
    let elsewhere =
        endpoint(|_, _| Answer::Close(http(200, r#"{"access_token":"stolen","expires_in":3600}"#)))
            .await;
    let target = format!("{}/token", elsewhere.base);
    let ep = endpoint(move |_, _| {
        Answer::Close(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n"
        ))
    })
    .await;
    let p = provider(&ep, "s3cret");
    let err = token(&p).await.unwrap_err();
    assert!(err.contains("another origin"), "{err}");
    assert!(
        elsewhere.seen.lock().unwrap().is_empty(),
        "the other origin received the credentials"
    );
}

/// An endpoint (or a WAF / gateway in front of it) that echoes the request in its error body
/// puts the client_secret into the error the provider returns, into
/// `Error::Authentication`'s source, and into the WARN log `oauth2: token request failed`.
/// Upstream reports only `error` / `error_description` of a 400/401 and the status line
/// otherwise, never the raw body.
#[tokio::test]
async fn oauth2_error_never_contains_the_client_secret() {
    let ep =
        endpoint(|seen, _| Answer::Close(http(400, &format!("bad request: {}", seen.body)))).await;
    let p = provider(&ep, "SECRET-9f8e7d");
    let err = token(&p).await.unwrap_err();
    assert!(
        !err.contains("SECRET-9f8e7d"),
        "the secret is in the error: {err}"
    );
}

/// RFC 9110 §7.2: the Host header carries the port when the URI has one. `http.rs` sends only
/// the host name, so a virtual-hosting IdP or reverse proxy on a non-default port may route
/// the request elsewhere or refuse it.
#[tokio::test]
async fn oauth2_host_header_carries_the_port() {
    let ep = issuing(Some("3600")).await;
    let p = provider(&ep, "s3cret");
    token(&p).await.unwrap();
    let authority = ep.base.strip_prefix("http://").unwrap().to_owned();
    let seen = ep.seen.lock().unwrap().clone();
    for s in seen {
        let host = s
            .head
            .lines()
            .find_map(|l| l.strip_prefix("Host: "))
            .unwrap_or_default()
            .to_owned();
        assert_eq!(host, authority, "{}", s.request_line);
    }
}

/// `OAuth2ClientCredentials::new` always builds a TLS connector from the platform's roots and
/// fails when there are none, even for an `http://` issuer (a local IdP, a sidecar): on a
/// distroless / scratch image without CA certificates OAuth2 cannot be set up at all. Run in a
/// child process because it changes the environment rustls-native-certs reads.
#[test]
fn oauth2_http_issuer_needs_no_platform_roots() {
    if std::env::var_os("REVIEW12_CHILD").is_some() {
        let r = OAuth2ClientCredentials::new("http://127.0.0.1:1/issuer", key_data_url("x"), None);
        assert!(r.is_ok(), "{:?}", r.err());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "security::tls_auth_probes::oauth2_http_issuer_needs_no_platform_roots",
            "--nocapture",
        ])
        .env("REVIEW12_CHILD", "1")
        .env("SSL_CERT_FILE", "/dev/null")
        .env("SSL_CERT_DIR", "/nonexistent-review12")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// What held up (not ignored)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn oauth2_concurrent_callers_fetch_once_and_chunked_answers_parse() {
    let n = Arc::new(AtomicUsize::new(0));
    let ep = endpoint(move |_, _| {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        let body = format!(r#"{{"access_token":"tok-{i}","expires_in":3600}}"#);
        let (a, b) = body.split_at(7);
        Answer::Close(format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        ))
    })
    .await;
    let p = Arc::new(provider(&ep, "s3cret"));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { token(&p).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap(), "tok-1");
    }
    assert_eq!(ep.token_requests(), 1);
}

#[tokio::test]
async fn oauth2_huge_body_is_bounded() {
    let ep = endpoint(|_, _| {
        Answer::Close(format!(
            "HTTP/1.1 200 OK\r\n\r\n{}",
            "x".repeat(3 * 1024 * 1024)
        ))
    })
    .await;
    let err = token(&provider(&ep, "s3cret")).await.unwrap_err();
    assert!(err.contains("larger than 1 MiB"), "{err}");
}

#[tokio::test]
async fn token_file_rotation_is_picked_up_on_challenge() {
    let dir = fresh_dir("review12-token");
    let path = dir.join("token");
    std::fs::write(&path, "tok-a\n").unwrap();
    let auth = TokenAuth::from_param(&format!("file://{}", path.display()));
    assert_eq!(&auth.auth_data().await.unwrap()[..], b"tok-a");
    std::fs::write(&path, "tok-b").unwrap();
    assert_eq!(&auth.auth_data().await.unwrap()[..], b"tok-b");
    assert!(!format!("{auth:?}").contains("tok-"));
}

fn challenge() -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::AuthChallenge as i32,
        auth_challenge: Some(wire::CommandAuthChallenge {
            challenge: Some(wire::AuthData {
                auth_method_name: Some("token".into()),
                auth_data: Some(REFRESH_AUTH_DATA.to_vec().into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A provider that takes 3 s on a challenge: the connection keeps serving the producer and
/// the consumer meanwhile, a flood of challenges gets coalesced answers, and the connection
/// survives.
#[tokio::test]
async fn slow_provider_on_challenge_does_not_stall_the_connection() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|t| t.starts_with("tok-"))),
        ..Default::default()
    })
    .await
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let auth = TokenAuth::from_async_fn(move || {
        let i = c.fetch_add(1, Ordering::SeqCst);
        async move {
            if i > 0 {
                // Far longer than the round trips below take: they must not wait for it.
                tokio::time::sleep(Duration::from_secs(6)).await;
            }
            Ok(format!("tok-{i}"))
        }
    });
    let client = common::test_client(&broker.service_url())
        .auth_provider(auth)
        .build()
        .unwrap();
    let topic = "persistent://public/default/review12-slow";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    let id = broker.connections()[0];
    for _ in 0..500 {
        broker.push(id, challenge());
    }
    let started = Instant::now();
    for i in 0..20 {
        producer.send(format!("m{i}")).await.unwrap().await.unwrap();
        let m = common::within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
    }
    // Observable, not timed: had the round trips waited for the provider, its answer (the
    // AUTH_RESPONSE) would have reached the broker before they finished.
    assert!(
        broker.received_of(Type::AuthResponse).is_empty(),
        "the round trips waited for the provider ({:?})",
        started.elapsed()
    );
    common::wait_until("an auth response", || {
        !broker.received_of(Type::AuthResponse).is_empty()
    })
    .await;
    assert_eq!(client.connections_opened(), 1);
    assert!(
        calls.load(Ordering::SeqCst) < 10,
        "the flood was not coalesced"
    );
}

#[tokio::test]
async fn provider_with_another_method_name_is_refused_clearly() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|_| true)),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = common::test_client(&broker.service_url())
        .auth_provider(pulsar_sdk::BasicAuth::new("u", "p"))
        .build()
        .unwrap();
    let err = client.lookup_topic("t").await.unwrap_err().to_string();
    assert!(err.contains("basic"), "{err}");
}

async fn tls_broker(ca: &Ca) -> MockBroker {
    let pem = ca.local_server("server");
    MockBroker::start_with(MockBrokerConfig {
        tls: Some(MockTls::new(pem.cert.clone(), pem.key.clone())),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A `pulsar://` URL pointed at a TLS port fails at once (good), but with
/// "frame of 352518916 bytes exceeds the maximum frame size": 352518916 is 0x15030300, the
/// TLS alert record the broker answered with. Nothing tells the user to use `pulsar+ssl://`.
#[tokio::test]
async fn plain_client_to_tls_broker_says_tls() {
    let dir = fresh_dir("review12-plain-tls");
    let ca = Ca::new(&dir, "ca");
    let tls = tls_broker(&ca).await;
    let plain_url = tls.service_url().replace("pulsar+ssl://", "pulsar://");
    let client = common::test_client(&plain_url)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let err = client.lookup_topic("t").await.unwrap_err().to_string();
    assert!(err.contains("TLS") || err.contains("pulsar+ssl"), "{err}");
}

#[tokio::test]
async fn plain_client_to_tls_broker_and_tls_client_to_plain_broker_fail_fast() {
    let dir = fresh_dir("review12-mismatch");
    let ca = Ca::new(&dir, "ca");
    let tls = tls_broker(&ca).await;
    let plain_url = tls.service_url().replace("pulsar+ssl://", "pulsar://");
    let client = common::test_client(&plain_url)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.lookup_topic("t").await.unwrap_err();
    eprintln!("plain->tls: {err} ({:?})", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5));

    let plain = MockBroker::start().await.unwrap();
    let tls_url = plain.service_url().replace("pulsar://", "pulsar+ssl://");
    let client = common::test_client(&tls_url)
        .connect_timeout(Duration::from_secs(3))
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.lookup_topic("t").await.unwrap_err();
    eprintln!("tls->plain: {err} ({:?})", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn hostname_verification_covers_ip_addresses_and_tls_config_errors_are_clear() {
    let dir = fresh_dir("review12-ip");
    let ca = Ca::new(&dir, "ca");
    let pem = ca.server("dns-only", &["localhost"]);
    let broker = MockBroker::start_with(MockBrokerConfig {
        tls: Some(MockTls::new(pem.cert.clone(), pem.key.clone())),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(broker.service_url().contains("127.0.0.1"));
    let client = common::test_client(&broker.service_url())
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    match client.lookup_topic("t").await {
        Err(Error::Tls { kind, .. }) => assert_eq!(kind, TlsFailure::HostnameMismatch),
        other => panic!("{other:?}"),
    }

    // Several CAs in one file; a bad PEM; a missing file; a certificate without its key.
    let other = Ca::new(&dir, "other");
    let bundle = dir.join("bundle.pem");
    std::fs::write(&bundle, format!("{}{}", other.pem.cert, ca.pem.cert)).unwrap();
    let ok_broker = tls_broker(&ca).await;
    let client = common::test_client(&ok_broker.service_url())
        .tls_trust_certs_file_path(&bundle)
        .build()
        .unwrap();
    client.lookup_topic("t").await.unwrap();
    let bad = dir.join("bad.pem");
    std::fs::write(
        &bad,
        "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    for (path, what) in [(&bad, "bad.pem"), (&dir.join("missing.pem"), "missing.pem")] {
        let err = common::test_client(&ok_broker.service_url())
            .tls_trust_certs_file_path(path)
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{err}");
    }
    let client_cert = ca.client("c");
    let err = common::test_client(&ok_broker.service_url())
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .tls_cert_file_path(&client_cert.cert_path)
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("go together"), "{err}");
}

#[tokio::test]
async fn a_failing_provider_closes_only_its_connection() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|t| t.starts_with("tok-"))),
        ..Default::default()
    })
    .await
    .unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    let auth = TokenAuth::from_fn(move || match c.fetch_add(1, Ordering::SeqCst) {
        1 => Err("boom".into()),
        i => Ok(format!("tok-{i}")),
    });
    let config = ConnectionConfig {
        auth: Some(Arc::new(auth)),
        ..Default::default()
    };
    let conn = Connection::connect_with_stream(
        broker.connect_duplex(),
        &broker.service_url(),
        None,
        &config,
    )
    .await
    .unwrap();
    broker.push(broker.connections()[0], challenge());
    let reason = common::within("close", conn.closed()).await;
    assert!(matches!(reason, Error::Authentication { .. }), "{reason:?}");
    assert!(!format!("{reason:?}").contains("tok-"));
}
