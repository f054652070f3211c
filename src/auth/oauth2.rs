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
//! expires. A failed fetch is retried with exponential backoff; while the cached token is
//! still valid it keeps being used. When no valid token can be had, the error says what the
//! endpoint answered (status and body). HTTP goes over the client's rustls stack for `https://`
//! (trusting the platform's roots, or a PEM file given with [`OAuth2ClientCredentials::tls`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;
use url::Url;

use super::http;
use super::{AuthError, AuthenticationProvider};
use crate::connection::tls::{TlsConnector, TlsOptions};

/// Share of a token's lifetime after which it is fetched again.
const REFRESH_AT: f64 = 0.8;

/// OAuth2 client-credentials authentication (see the module docs). `Debug` never shows the
/// client secret or the token.
pub struct OAuth2ClientCredentials {
    issuer_url: Url,
    key_file: String,
    audience: Option<String>,
    scope: Option<String>,
    tls: TlsConnector,
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
    refresh_at: Option<Instant>,
    expires_at: Option<Instant>,
}

impl fmt::Debug for OAuth2ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key_file = if self.key_file.starts_with("data:") {
            "data:<redacted>"
        } else {
            &self.key_file
        };
        f.debug_struct("OAuth2ClientCredentials")
            .field("issuer_url", &self.issuer_url.as_str())
            .field("key_file", &key_file)
            .field("audience", &self.audience)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The key file's credentials. `Debug` hides the secret.
struct KeyFile {
    client_id: String,
    client_secret: String,
}

impl OAuth2ClientCredentials {
    /// The flow for `issuer_url`, with credentials from `key_file` (a path, `file://` URL or
    /// `data:` URL of the Java client's JSON key file) and the given `audience`.
    pub fn new(
        issuer_url: &str,
        key_file: impl Into<String>,
        audience: Option<&str>,
    ) -> crate::Result<Self> {
        let issuer_url = Url::parse(issuer_url).map_err(|e| {
            crate::Error::InvalidConfig(format!("oauth2 issuer URL `{issuer_url}`: {e}"))
        })?;
        Ok(OAuth2ClientCredentials {
            issuer_url,
            key_file: key_file.into(),
            audience: audience.filter(|a| !a.is_empty()).map(str::to_owned),
            scope: None,
            tls: TlsConnector::new(&TlsOptions::default())?,
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

    /// TLS options of the HTTPS requests (e.g. a trusted CA file).
    pub fn tls(mut self, options: &TlsOptions) -> crate::Result<Self> {
        self.tls = TlsConnector::new(options)?;
        Ok(self)
    }

    /// Attempts per token fetch, and the first backoff between them (doubling). Default 4
    /// attempts, 200 ms.
    pub fn retry(mut self, attempts: u32, initial_backoff: Duration) -> Self {
        self.attempts = attempts.max(1);
        self.initial_backoff = initial_backoff;
        self
    }

    fn read_key_file(&self) -> Result<KeyFile, String> {
        let text = if let Some(data) = self.key_file.strip_prefix("data:") {
            let (meta, payload) = data
                .split_once(',')
                .ok_or("the key file data: URL has no `,`")?;
            if meta.ends_with(";base64") {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(payload.trim())
                    .map_err(|e| format!("the key file data: URL is not base64: {e}"))?;
                String::from_utf8(bytes).map_err(|_| "the key file is not UTF-8")?
            } else {
                url::form_urlencoded::parse(payload.as_bytes())
                    .map(|(k, v)| {
                        if v.is_empty() {
                            k.into_owned()
                        } else {
                            format!("{k}={v}")
                        }
                    })
                    .collect()
            }
        } else {
            let path = PathBuf::from(
                self.key_file
                    .strip_prefix("file://")
                    .unwrap_or(&self.key_file),
            );
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?
        };
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("the key file is not JSON: {e}"))?;
        let field = |name: &str| {
            json.get(name)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .ok_or_else(|| format!("the key file has no `{name}`"))
        };
        Ok(KeyFile {
            client_id: field("client_id")?,
            client_secret: field("client_secret")?,
        })
    }

    async fn discover(&self) -> Result<Url, String> {
        let mut url = self.issuer_url.clone();
        let path = format!(
            "{}/.well-known/openid-configuration",
            url.path().trim_end_matches('/')
        );
        url.set_path(&path);
        let r = http::request(&self.tls, "GET", &url, None).await?;
        if r.status != 200 {
            return Err(format!(
                "discovery at {url} answered HTTP {}: {}",
                r.status,
                excerpt(&r.body)
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(&r.body)
            .map_err(|e| format!("discovery at {url}: not JSON: {e}"))?;
        let endpoint = json
            .get("token_endpoint")
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("discovery at {url}: no token_endpoint"))?;
        Url::parse(endpoint).map_err(|e| format!("token_endpoint `{endpoint}`: {e}"))
    }

    /// One token request.
    async fn fetch(&self, state: &mut State) -> Result<Cached, String> {
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
        let r = http::request(&self.tls, "POST", &endpoint, Some(&form)).await?;
        if r.status != 200 {
            return Err(format!(
                "token endpoint {endpoint} answered HTTP {}: {}",
                r.status,
                excerpt(&r.body)
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(&r.body)
            .map_err(|e| format!("token endpoint {endpoint}: not JSON: {e}"))?;
        let token = json
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("token endpoint {endpoint}: no access_token in the answer"))?;
        let lifetime = json
            .get("expires_in")
            .and_then(|v| v.as_f64())
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64);
        tracing::debug!(?lifetime, "oauth2: got an access token");
        Ok(Cached {
            token: token.to_owned(),
            refresh_at: lifetime.map(|l| started + l.mul_f64(REFRESH_AT)),
            expires_at: lifetime.map(|l| started + l),
        })
    }

    async fn token(&self) -> Result<String, String> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(c) = &state.token {
            if c.refresh_at.is_none_or(|r| now < r) {
                return Ok(c.token.clone());
            }
        }
        let mut backoff = self.initial_backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            match self.fetch(&mut state).await {
                Ok(c) => {
                    let token = c.token.clone();
                    state.token = Some(c);
                    return Ok(token);
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "oauth2: token request failed");
                    last = e;
                }
            }
            // A still valid token carries on; the next call tries again.
            if let Some(c) = &state.token {
                if c.expires_at.is_some_and(|x| Instant::now() < x) {
                    return Ok(c.token.clone());
                }
            }
            if attempt < self.attempts {
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
        }
        Err(format!(
            "no OAuth2 token after {} attempts: {last}",
            self.attempts
        ))
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.chars().count() > 300 {
        format!("{}...", text.chars().take(300).collect::<String>())
    } else {
        text.to_owned()
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
