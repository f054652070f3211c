//! OAuth2 client credentials (cargo feature `oauth2`), compatible with the Java client's
//! `AuthenticationOAuth2` parameters: an issuer URL (the token endpoint is discovered from
//! `ISSUER/.well-known/openid-configuration`), a key file holding `client_id` and
//! `client_secret` (the JSON the Java client reads, from a path, a `file://` URL or a
//! `data:application/json;base64,...` URL), an audience and a scope.
//!
//! Like upstream (`ClientCredentialsFlow`, `TokenClient`), the token request is a form POST with
//! `grant_type=client_credentials`, `client_id`, `client_secret`, and `audience` / `scope` when
//! set, and the access token is sent with auth method `token`. The token is cached and fetched
//! again once 80% of its lifetime (`expires_in`) has passed, so it is replaced before it
//! expires. A token without `expires_in` (or with 0) counts as expired at once, as upstream's
//! `CachedToken` does, so it is fetched again on the next call; a huge `expires_in` is capped at
//! a year. A failed fetch is retried with exponential backoff; while the cached token is still
//! valid it keeps being used. When no valid token can be had, the error ([`OAuth2Error`]) says
//! what the endpoint answered: the status line, and for 400 / 401 the standard OAuth2 `error`
//! and `error_description` fields, never the raw body (an endpoint echoing the request would
//! put the client secret there).
//!
//! HTTP, like upstream's: each request is bounded (10 s to connect, 30 s for the answer; see
//! [`OAuth2ClientCredentials::connect_timeout`] and [`OAuth2ClientCredentials::read_timeout`]),
//! and up to 5 redirects are followed (never from `https` to `http`). `https://` goes over the
//! client's rustls stack; the trusted roots are loaded on the first `https` request only (an
//! `http://` issuer needs none): the platform's roots, or the bundled Mozilla roots
//! (`webpki-roots`) when the platform has none, or what [`OAuth2ClientCredentials::tls`] says.
//!
//! A `data:` key file is either base64 (`data:application/json;base64,...`) or plain, and a
//! plain one is only percent-decoded (RFC 2397, like upstream's `DataURLStreamHandler`): `+`
//! and `&` stay as they are.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;
use url::Url;

use super::http::{self, redact, HttpError, Timeouts};
use super::{AuthError, AuthenticationProvider};
use crate::connection::tls::{TlsConnector, TlsOptions};

/// Default bound on connecting to the issuer (TCP and TLS), as upstream's 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default bound on the issuer's answer once connected, as upstream's 30 s.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest token lifetime believed (a larger `expires_in` is capped to it).
const MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest `error` / `error_description` quoted from the endpoint.
const MAX_QUOTED: usize = 200;

/// Why no OAuth2 token could be had. Its message names the endpoint (without a password in
/// its URL) and what it answered; it never holds the client secret or a token. The source,
/// when there is one, is the underlying I/O, TLS or parse error.
#[derive(Debug)]
pub struct OAuth2Error {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl OAuth2Error {
    fn new(message: impl Into<String>) -> Self {
        OAuth2Error {
            message: message.into(),
            source: None,
        }
    }

    fn with_source(
        message: impl fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        OAuth2Error {
            message: format!("{message}: {source}"),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for OAuth2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OAuth2Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// OAuth2 client-credentials authentication (see the module docs). `Debug` never shows the
/// client secret, the token, a `data:` key file or a password in the issuer URL.
pub struct OAuth2ClientCredentials {
    issuer_url: Url,
    key_file: String,
    audience: Option<String>,
    scope: Option<String>,
    /// Built on the first `https` request, unless [`tls`](Self::tls) set it.
    tls: OnceLock<TlsConnector>,
    timeouts: Timeouts,
    attempts: u32,
    initial_backoff: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    token_endpoint: Option<Url>,
    token: Option<Cached>,
}

struct Cached {
    token: String,
    refresh_at: Instant,
    expires_at: Instant,
}

impl fmt::Debug for OAuth2ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key_file = if self.key_file.starts_with("data:") {
            "data:<redacted>"
        } else {
            &self.key_file
        };
        f.debug_struct("OAuth2ClientCredentials")
            .field("issuer_url", &redact(&self.issuer_url))
            .field("key_file", &key_file)
            .field("audience", &self.audience)
            .field("scope", &self.scope)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// The key file's credentials.
struct KeyFile {
    client_id: String,
    client_secret: String,
}

/// Percent-decodes `s` (RFC 3986; `+` stays `+`).
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                // Two hex digits: at most 0xff.
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Printable text from the endpoint, bounded, without `secret` (in any of its spellings).
fn quote(text: &str, secret: &str) -> String {
    let mut text: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED)
        .collect();
    if !secret.is_empty() {
        let encoded: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        for spelling in [secret, encoded.as_str()] {
            text = text.replace(spelling, "<redacted>");
        }
    }
    text
}

/// What a non-200 answer says: the status line, and for 400 / 401 the standard OAuth2 error
/// fields (upstream `TokenClient`); never the raw body.
fn answered(what: &str, url: &Url, r: &http::Response, secret: &str) -> OAuth2Error {
    let mut message = format!(
        "{what} {} answered HTTP {} {}",
        redact(url),
        r.status,
        quote(&r.reason, secret)
    );
    if matches!(r.status, 400 | 401) {
        if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&r.body) {
            let field = |name: &str| json.get(name).and_then(|v| v.as_str());
            if let Some(error) = field("error") {
                message.push_str(&format!(": {}", quote(error, secret)));
            }
            if let Some(description) = field("error_description") {
                message.push_str(&format!(" ({})", quote(description, secret)));
            }
        }
    }
    OAuth2Error::new(message.trim_end().to_owned())
}

/// When a token with `expires_in` (seconds; missing, 0 or invalid: expired at once) fetched at
/// `started` should be replaced, and when it expires. Never panics.
fn lifetime_of(expires_in: Option<&serde_json::Value>, started: Instant) -> (Instant, Instant) {
    let secs = expires_in
        .and_then(|v| {
            v.as_f64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse::<f64>().ok()))
        })
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(0.0);
    let lifetime = if secs >= MAX_LIFETIME.as_secs_f64() {
        MAX_LIFETIME
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO)
    };
    let refresh = lifetime / 5 * 4;
    (
        started.checked_add(refresh).unwrap_or(started),
        started.checked_add(lifetime).unwrap_or(started),
    )
}

impl OAuth2ClientCredentials {
    /// The flow for `issuer_url`, with credentials from `key_file` (a path, `file://` URL or
    /// `data:` URL of the Java client's JSON key file) and the given `audience`. Nothing is
    /// read or fetched yet (root certificates included: they are loaded on the first `https`
    /// request). Fails with [`Error::InvalidConfig`](crate::Error::InvalidConfig) if the issuer
    /// URL does not parse.
    pub fn new(
        issuer_url: &str,
        key_file: impl Into<String>,
        audience: Option<&str>,
    ) -> crate::Result<Self> {
        let issuer_url = Url::parse(issuer_url).map_err(|e| {
            // The text as given may hold a password: name only the parse error.
            crate::Error::InvalidConfig(format!("oauth2 issuer URL: {e}"))
        })?;
        Ok(OAuth2ClientCredentials {
            issuer_url,
            key_file: key_file.into(),
            audience: audience.filter(|a| !a.is_empty()).map(str::to_owned),
            scope: None,
            tls: OnceLock::new(),
            timeouts: Timeouts {
                connect: DEFAULT_CONNECT_TIMEOUT,
                read: DEFAULT_READ_TIMEOUT,
            },
            attempts: 4,
            initial_backoff: Duration::from_millis(200),
            state: Mutex::default(),
        })
    }

    /// The scope requested (sent only when set).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// TLS options of the HTTPS requests (e.g. a trusted CA file). Read at once, so a bad file
    /// fails here. With options naming no trust source, the platform's roots are used, or the
    /// bundled Mozilla roots when the platform has none.
    pub fn tls(mut self, options: &TlsOptions) -> crate::Result<Self> {
        self.tls = OnceLock::from(TlsConnector::with_fallback_roots(options)?);
        Ok(self)
    }

    /// Bound on connecting to the issuer or token endpoint, TLS handshake included, per
    /// request. Default [`DEFAULT_CONNECT_TIMEOUT`] (10 s, as upstream).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Bound on receiving the whole answer once connected, per request. Default
    /// [`DEFAULT_READ_TIMEOUT`] (30 s, as upstream).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.read = timeout;
        self
    }

    /// Attempts per token fetch, and the first backoff between them (doubling). Default 4
    /// attempts, 200 ms.
    pub fn retry(mut self, attempts: u32, initial_backoff: Duration) -> Self {
        self.attempts = attempts.max(1);
        self.initial_backoff = initial_backoff;
        self
    }

    /// The connector for `https` requests, built on first use.
    fn connector(&self) -> crate::Result<TlsConnector> {
        if let Some(c) = self.tls.get() {
            return Ok(c.clone());
        }
        let built = TlsConnector::with_fallback_roots(&TlsOptions::default())?;
        Ok(self.tls.get_or_init(|| built).clone())
    }

    async fn request(
        &self,
        method: &'static str,
        url: &Url,
        form: Option<&str>,
    ) -> Result<(Url, http::Response), HttpError> {
        http::request(&|| self.connector(), self.timeouts, method, url, form, &[]).await
    }

    fn read_key_file(&self) -> Result<KeyFile, OAuth2Error> {
        let text = if let Some(data) = self.key_file.strip_prefix("data:") {
            let (meta, payload) = data
                .split_once(',')
                .ok_or_else(|| OAuth2Error::new("the key file data: URL has no `,`"))?;
            let bytes = if meta.ends_with(";base64") {
                base64::engine::general_purpose::STANDARD
                    .decode(percent_decode(payload.trim()))
                    .map_err(|e| {
                        OAuth2Error::with_source("the key file data: URL is not base64", e)
                    })?
            } else {
                percent_decode(payload)
            };
            String::from_utf8(bytes).map_err(|_| OAuth2Error::new("the key file is not UTF-8"))?
        } else {
            let path = PathBuf::from(
                self.key_file
                    .strip_prefix("file://")
                    .unwrap_or(&self.key_file),
            );
            std::fs::read_to_string(&path).map_err(|e| {
                OAuth2Error::with_source(format!("cannot read the key file {}", path.display()), e)
            })?
        };
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| OAuth2Error::with_source("the key file is not JSON", e))?;
        let field = |name: &str| {
            json.get(name)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .ok_or_else(|| OAuth2Error::new(format!("the key file has no `{name}`")))
        };
        Ok(KeyFile {
            client_id: field("client_id")?,
            client_secret: field("client_secret")?,
        })
    }

    async fn discover(&self) -> Result<Url, OAuth2Error> {
        let mut url = self.issuer_url.clone();
        let path = format!(
            "{}/.well-known/openid-configuration",
            url.path().trim_end_matches('/')
        );
        url.set_path(&path);
        let (url, r) = self
            .request("GET", &url, None)
            .await
            .map_err(|e| OAuth2Error::with_source(format!("discovery at {}", redact(&url)), e))?;
        if r.status != 200 {
            return Err(answered("discovery at", &url, &r, ""));
        }
        let json: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| {
            OAuth2Error::with_source(format!("discovery at {}: not JSON", redact(&url)), e)
        })?;
        let endpoint = json
            .get("token_endpoint")
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                OAuth2Error::new(format!("discovery at {}: no token_endpoint", redact(&url)))
            })?;
        Url::parse(endpoint)
            .map_err(|e| OAuth2Error::with_source("discovery: the token_endpoint is not a URL", e))
    }

    /// One token request.
    async fn fetch(&self, state: &mut State) -> Result<Cached, OAuth2Error> {
        let endpoint = match &state.token_endpoint {
            Some(e) => e.clone(),
            None => {
                let e = self.discover().await?;
                state.token_endpoint = Some(e.clone());
                e
            }
        };
        let key = self.read_key_file()?;
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials")
                .append_pair("client_id", &key.client_id)
                .append_pair("client_secret", &key.client_secret);
            if let Some(a) = &self.audience {
                form.append_pair("audience", a);
            }
            if let Some(s) = &self.scope {
                form.append_pair("scope", s);
            }
            form.finish()
        };
        let started = Instant::now();
        let (url, r) = self
            .request("POST", &endpoint, Some(&form))
            .await
            .map_err(|e| {
                OAuth2Error::with_source(format!("token endpoint {}", redact(&endpoint)), e)
            })?;
        if r.status != 200 {
            return Err(answered("token endpoint", &url, &r, &key.client_secret));
        }
        let json: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| {
            OAuth2Error::with_source(format!("token endpoint {}: not JSON", redact(&url)), e)
        })?;
        let token = json
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                OAuth2Error::new(format!(
                    "token endpoint {}: no access_token in the answer",
                    redact(&url)
                ))
            })?;
        let (refresh_at, expires_at) = lifetime_of(json.get("expires_in"), started);
        tracing::debug!(
            lifetime = ?expires_at.saturating_duration_since(started),
            "oauth2: got an access token"
        );
        Ok(Cached {
            token: token.to_owned(),
            refresh_at,
            expires_at,
        })
    }

    async fn token(&self) -> Result<String, OAuth2Error> {
        let mut state = self.state.lock().await;
        if let Some(c) = &state.token {
            if Instant::now() < c.refresh_at {
                return Ok(c.token.clone());
            }
        }
        let mut backoff = self.initial_backoff;
        let mut last = None;
        for attempt in 1..=self.attempts {
            match self.fetch(&mut state).await {
                Ok(c) => {
                    let token = c.token.clone();
                    state.token = Some(c);
                    return Ok(token);
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "oauth2: token request failed");
                    last = Some(e);
                }
            }
            // A still valid token carries on; the next call tries again.
            if let Some(c) = &state.token {
                if Instant::now() < c.expires_at {
                    return Ok(c.token.clone());
                }
            }
            if attempt < self.attempts {
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
        }
        let message = format!("no OAuth2 token after {} attempts", self.attempts);
        Err(match last {
            Some(e) => OAuth2Error::with_source(message, e),
            None => OAuth2Error::new(message),
        })
    }
}

impl AuthenticationProvider for OAuth2ClientCredentials {
    /// Upstream sends the OAuth2 access token with method `token`.
    fn method_name(&self) -> &str {
        "token"
    }

    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
        Box::pin(async move { self.token().await.map(Bytes::from).map_err(AuthError::from) })
    }
}

/// Parses the examples' `ISSUER,KEYFILE[,AUDIENCE]` into a provider. A `data:` key file keeps
/// its own first comma (`data:application/json;base64,...`).
pub fn from_cli_param(param: &str) -> crate::Result<Arc<OAuth2ClientCredentials>> {
    let bad = || crate::Error::InvalidConfig("oauth2: expected ISSUER,KEYFILE[,AUDIENCE]".into());
    let (issuer, rest) = param.split_once(',').ok_or_else(bad)?;
    let skip = if rest.starts_with("data:") {
        rest.find(',').map_or(0, |i| i + 1)
    } else {
        0
    };
    let (key_file, audience) = match rest[skip..].find(',') {
        Some(i) => (&rest[..skip + i], Some(&rest[skip + i + 1..])),
        None => (rest, None),
    };
    Ok(Arc::new(OAuth2ClientCredentials::new(
        issuer, key_file, audience,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_clamped_and_missing_ones_expire_at_once() {
        let now = Instant::now();
        let json = |v: &str| serde_json::from_str::<serde_json::Value>(v).unwrap();
        for v in ["0", "-5", "\"nope\""] {
            assert_eq!(lifetime_of(Some(&json(v)), now), (now, now), "{v}");
        }
        assert_eq!(lifetime_of(None, now), (now, now));
        let (refresh, expires) = lifetime_of(Some(&json("1e300")), now);
        assert_eq!(expires - now, MAX_LIFETIME);
        assert!(refresh < expires);
        let (refresh, expires) = lifetime_of(Some(&json("\"100\"")), now);
        assert_eq!(
            (refresh - now, expires - now),
            (Duration::from_secs(80), Duration::from_secs(100))
        );
    }

    #[test]
    fn data_urls_are_only_percent_decoded() {
        assert_eq!(percent_decode("a+b&c=%7Bd%7d%zz%4"), b"a+b&c={d}%zz%4");
    }

    #[test]
    fn quoted_text_never_holds_the_secret() {
        let q = quote("bad secret a+b/c or a%2Bb%2Fc\r\n", "a+b/c");
        assert!(!q.contains("a+b/c") && !q.contains("a%2Bb%2Fc"), "{q}");
    }
}
