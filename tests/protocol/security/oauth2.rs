//! OAuth2 client credentials against a token endpoint served in the test (plain HTTP on
//! loopback): discovery, the form fields the Java client sends, one fetch then reuse, refresh
//! before expiry, surviving the endpoint being down while the token is valid, a clear error
//! (with the endpoint's answer) once it is not, and recovery.

use support as common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use pulsar_sdk::auth::oauth2::OAuth2ClientCredentials;
use pulsar_sdk::mock::{MockAuth, MockBroker, MockBrokerConfig};
use pulsar_sdk::AuthenticationProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Tokens live this long; the provider refreshes at 80 % of it, so the test's "refreshed
/// before expiry" has a 1 s margin (wide enough for a loaded CI machine; the HTTP runs over
/// real sockets, so paused time cannot be used).
const LIFETIME: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Endpoint {
    discoveries: AtomicUsize,
    token_requests: AtomicUsize,
    issued: AtomicUsize,
    down: AtomicBool,
    last_form: Mutex<HashMap<String, String>>,
}

/// Serves `/issuer/.well-known/openid-configuration` and `/token`; returns the issuer URL.
async fn serve(endpoint: Arc<Endpoint>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let token_url = format!("{base}/token");
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let endpoint = endpoint.clone();
            let token_url = token_url.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head_end, length) = loop {
                    let n = sock.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "request cut short");
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
                    let n = sock.read(&mut chunk).await.unwrap();
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let body = &buf[head_end..head_end + length];
                let request_line = head.lines().next().unwrap().to_owned();
                let (status, reply) = if request_line
                    .starts_with("GET /issuer/.well-known/openid-configuration ")
                {
                    endpoint.discoveries.fetch_add(1, Ordering::SeqCst);
                    (
                        200,
                        format!(r#"{{"issuer":"x","token_endpoint":"{token_url}"}}"#),
                    )
                } else if request_line.starts_with("POST /token ") {
                    endpoint.token_requests.fetch_add(1, Ordering::SeqCst);
                    assert!(head
                        .to_lowercase()
                        .contains("content-type: application/x-www-form-urlencoded"));
                    let form: HashMap<String, String> =
                        url::form_urlencoded::parse(body).into_owned().collect();
                    *endpoint.last_form.lock().unwrap() = form.clone();
                    if endpoint.down.load(Ordering::SeqCst) {
                        (503, "maintenance window".to_owned())
                    } else if form.get("client_secret").map(String::as_str) != Some("s3cret") {
                        (401, r#"{"error":"invalid_client"}"#.to_owned())
                    } else {
                        let n = endpoint.issued.fetch_add(1, Ordering::SeqCst) + 1;
                        (
                            200,
                            format!(
                                r#"{{"access_token":"tok-{n}","token_type":"Bearer","expires_in":{}}}"#,
                                LIFETIME.as_secs()
                            ),
                        )
                    }
                } else {
                    (404, "not found".to_owned())
                };
                let response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                sock.write_all(response.as_bytes()).await.unwrap();
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("{base}/issuer")
}

fn key_data_url(secret: &str) -> String {
    let json = format!(
        r#"{{"type":"client_credentials","client_id":"my-app","client_secret":"{secret}","issuer_url":"x"}}"#
    );
    format!(
        "data:application/json;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(json)
    )
}

async fn token(p: &OAuth2ClientCredentials) -> Result<String, String> {
    p.auth_data()
        .await
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn fetch_once_reuse_refresh_before_expiry_and_survive_an_outage() {
    let endpoint = Arc::new(Endpoint::default());
    let issuer = serve(endpoint.clone()).await;
    let provider = OAuth2ClientCredentials::new(&issuer, key_data_url("s3cret"), Some("aud-1"))
        .unwrap()
        .scope("pulsar:all")
        .retry(3, Duration::from_millis(50));
    assert!(!format!("{provider:?}").contains("s3cret"));
    assert_eq!(provider.method_name(), "token");

    // Fetch once, with the fields the Java client sends.
    let first = token(&provider).await.unwrap();
    let fetched_at = Instant::now();
    assert_eq!(first, "tok-1");
    let form = endpoint.last_form.lock().unwrap().clone();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_id"], "my-app");
    assert_eq!(form["client_secret"], "s3cret");
    assert_eq!(form["audience"], "aud-1");
    assert_eq!(form["scope"], "pulsar:all");
    assert_eq!(endpoint.discoveries.load(Ordering::SeqCst), 1);

    // Reuse.
    for _ in 0..10 {
        assert_eq!(token(&provider).await.unwrap(), "tok-1");
    }
    assert_eq!(endpoint.token_requests.load(Ordering::SeqCst), 1);

    // Refreshed before it expires.
    let second = loop {
        let t = token(&provider).await.unwrap();
        if t != first {
            break t;
        }
        assert!(
            fetched_at.elapsed() < LIFETIME,
            "not refreshed before expiry"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(second, "tok-2");
    assert!(fetched_at.elapsed() < LIFETIME);
    assert_eq!(endpoint.token_requests.load(Ordering::SeqCst), 2);
    assert_eq!(
        endpoint.discoveries.load(Ordering::SeqCst),
        1,
        "discovered once"
    );

    // The endpoint goes down: the valid token is used meanwhile; once it has expired the error
    // says what the endpoint answered.
    endpoint.down.store(true, Ordering::SeqCst);
    let error = loop {
        match token(&provider).await {
            Ok(t) => assert_eq!(t, second, "the cached token while the endpoint is down"),
            Err(e) => break e,
        }
        assert!(fetched_at.elapsed() < LIFETIME * 4, "never failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The status line only: a body is never quoted (it could echo the client secret).
    assert!(
        error.contains("HTTP 503") && !error.contains("maintenance window"),
        "{error}"
    );
    assert!(error.contains("after 3 attempts"), "{error}");

    // Back up: a new token.
    endpoint.down.store(false, Ordering::SeqCst);
    assert_eq!(token(&provider).await.unwrap(), "tok-3");
}

#[tokio::test]
async fn a_refused_client_gets_the_endpoints_answer_and_key_files_load_from_paths() {
    let endpoint = Arc::new(Endpoint::default());
    let issuer = serve(endpoint.clone()).await;
    let bad = OAuth2ClientCredentials::new(&issuer, key_data_url("wrong"), None)
        .unwrap()
        .retry(2, Duration::from_millis(10));
    let err = token(&bad).await.unwrap_err();
    assert!(
        err.contains("HTTP 401") && err.contains("invalid_client"),
        "{err}"
    );
    assert!(!endpoint.last_form.lock().unwrap().contains_key("audience"));

    let dir = common::certs::fresh_dir("oauth2-key");
    let path = dir.join("key.json");
    std::fs::write(
        &path,
        r#"{"type":"client_credentials","client_id":"my-app","client_secret":"s3cret"}"#,
    )
    .unwrap();
    let from_file =
        OAuth2ClientCredentials::new(&issuer, format!("file://{}", path.display()), None).unwrap();
    assert!(token(&from_file).await.unwrap().starts_with("tok-"));
}

#[tokio::test]
async fn a_client_authenticates_to_the_broker_with_oauth2_tokens() {
    let endpoint = Arc::new(Endpoint::default());
    let issuer = serve(endpoint.clone()).await;
    let broker = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|t| t.starts_with("tok-"))),
        ..Default::default()
    })
    .await
    .unwrap();
    let param = format!("{issuer},{},aud", key_data_url("s3cret"));
    let client = common::test_client(&broker.service_url())
        .auth_provider_shared(pulsar_sdk::auth::oauth2::from_cli_param(&param).unwrap())
        .build()
        .unwrap();
    client.lookup_topic("t").await.unwrap();
    assert_eq!(endpoint.token_requests.load(Ordering::SeqCst), 1);
}
