//! Authentication providers: where the credentials sent to the broker come from.
//!
//! The client asks its [`AuthenticationProvider`] for credentials on every new connection
//! (CONNECT) and on every `AuthChallenge` the broker sends, so rotated credentials are picked up
//! without reconnecting (upstream `ClientCnx.handleAuthChallenge`: a `REFRESH_AUTH_DATA`
//! challenge is answered with data from a fresh provider). When the provider fails, the
//! connection asking for them is closed with [`Error::Authentication`](crate::Error) and its
//! producers and consumers reconnect through their usual backoff.
//!
//! Built in: [`TokenAuth`] (method `token`; a static token, a supplier closure, or a file read
//! again on each request), [`BasicAuth`] (method `basic`), [`TlsAuth`] (method `tls`: the
//! client certificate is the credential), the static [`Authentication`],
//! and with the cargo feature `oauth2` the OAuth2 client-credentials flow (`oauth2` module).
//!
//! No provider shows its secrets in `Debug` output, and the client never logs them.

mod basic;
#[cfg(any(feature = "oauth2", feature = "controlled-failover"))]
pub(crate) mod http;
#[cfg(feature = "oauth2")]
pub mod oauth2;
mod token;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

pub use basic::BasicAuth;
pub use token::TokenAuth;

use crate::error::Error;

/// The error an [`AuthenticationProvider`] returns (any error type; it is kept as the source of
/// [`Error::Authentication`]).
pub type AuthError = Box<dyn std::error::Error + Send + Sync>;

/// A source of credentials, asked on every new connection and on every auth challenge.
///
/// Implementations must answer with *current* credentials each time (fetching, re-reading or
/// refreshing as needed), must not log secrets, and must implement `Debug` without them.
pub trait AuthenticationProvider: fmt::Debug + Send + Sync {
    /// The auth method name sent to the broker (`token`, `basic`, `tls`, ...).
    fn method_name(&self) -> &str;

    /// The credentials to send now (the `auth_data` of CONNECT or AUTH_RESPONSE).
    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>>;
}

/// Fixed authentication data sent in CONNECT and in answers to auth challenges (e.g. method
/// `token` with the token as data). For credentials that change (rotated tokens, OAuth2) use an
/// [`AuthenticationProvider`].
///
/// Its `Debug` output never shows the data.
#[derive(Clone)]
pub struct Authentication {
    /// The auth method name, e.g. `"token"`.
    pub method: String,
    /// The credentials.
    pub data: Bytes,
}

impl Authentication {
    /// Token authentication (`method = "token"`).
    pub fn token(token: impl Into<String>) -> Self {
        Authentication {
            method: "token".to_string(),
            data: Bytes::from(token.into()),
        }
    }
}

impl fmt::Debug for Authentication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authentication")
            .field("method", &self.method)
            .field("data", &"<redacted>")
            .finish()
    }
}

/// A shared provider, as the client and its connections hold it.
pub type SharedAuthProvider = Arc<dyn AuthenticationProvider>;

/// TLS client authentication (method `tls`): the client certificate presented in the TLS
/// handshake is the credential, and no data is sent in CONNECT (like upstream
/// `AuthenticationTls`). Configure the certificate with
/// [`ClientBuilder::auth_tls`](crate::ClientBuilder::auth_tls) (or the `tls_cert_file_path` /
/// `tls_key_file_path` options).
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsAuth;

impl AuthenticationProvider for TlsAuth {
    fn method_name(&self) -> &str {
        "tls"
    }

    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
        Box::pin(async { Ok(Bytes::new()) })
    }
}

impl AuthenticationProvider for Authentication {
    fn method_name(&self) -> &str {
        &self.method
    }

    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
        let data = self.data.clone();
        Box::pin(async move { Ok(data) })
    }
}

/// Credentials fetched from a provider for one CONNECT or AUTH_RESPONSE. `Debug` redacts the
/// data.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) method: String,
    pub(crate) data: Bytes,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("method", &self.method)
            .field("data", &"<redacted>")
            .finish()
    }
}

/// Asks `provider` for credentials; its failure becomes [`Error::Authentication`].
pub(crate) async fn fetch(provider: &dyn AuthenticationProvider) -> Result<Credentials, Error> {
    let method = provider.method_name().to_owned();
    match provider.auth_data().await {
        Ok(data) => Ok(Credentials { method, data }),
        Err(e) => Err(Error::Authentication {
            method,
            source: Arc::from(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tls_auth_sends_method_tls_and_no_data() {
        let c = fetch(&TlsAuth).await.unwrap();
        assert_eq!(c.method, "tls");
        assert!(c.data.is_empty());
    }

    #[test]
    fn credentials_debug_is_redacted() {
        let c = Credentials {
            method: "token".into(),
            data: Bytes::from_static(b"s3cret"),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
