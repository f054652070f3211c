//! What a secured broker adds: TLS on the listener ([`MockTls`], cargo feature `tls`) and
//! required authentication with scheduled auth challenges ([`MockAuth`]).
//!
//! Authentication follows upstream `ServerCnx`: a CONNECT whose method or credentials are not
//! accepted gets ERROR `AuthenticationError` and the connection is closed; with a challenge
//! interval, the broker sends `AuthChallenge` with the data `PulsarAuthRefresh` every interval
//! (upstream `refreshAuthenticationCredentials`), checks the `AuthResponse` like a CONNECT, and
//! closes a connection that has not answered the previous challenge by the next tick.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::wire::{self, base_command::Type};

/// The challenge data asking the client for fresh credentials (upstream
/// `AuthData.REFRESH_AUTH_DATA`).
pub const REFRESH_AUTH_DATA: &[u8] = b"PulsarAuthRefresh";

type Validator = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Authentication the mock broker requires (see the module docs). `Debug` shows the method
/// only.
#[derive(Clone)]
pub struct MockAuth {
    method: String,
    validator: Validator,
    challenge_interval: Option<Duration>,
}

impl fmt::Debug for MockAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockAuth")
            .field("method", &self.method)
            .field("challenge_interval", &self.challenge_interval)
            .finish_non_exhaustive()
    }
}

impl MockAuth {
    /// Requires auth method `method`, with credentials `validator` accepts.
    pub fn new(
        method: impl Into<String>,
        validator: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
    ) -> Self {
        MockAuth {
            method: method.into(),
            validator: Arc::new(validator),
            challenge_interval: None,
        }
    }

    /// Requires method `token`, with tokens `accept` accepts.
    pub fn token(accept: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self::new("token", move |data| {
            std::str::from_utf8(data).is_ok_and(&accept)
        })
    }

    /// Sends every connection an AuthChallenge(`PulsarAuthRefresh`) every `interval`.
    pub fn challenge_every(mut self, interval: Duration) -> Self {
        self.challenge_interval = Some(interval);
        self
    }

    /// The interval of auth challenges, if any.
    pub fn challenge_interval(&self) -> Option<Duration> {
        self.challenge_interval
    }

    /// Why `method` + `data` are refused, or `None` if accepted.
    pub(crate) fn check(&self, method: Option<&str>, data: Option<&[u8]>) -> Option<String> {
        if method != Some(self.method.as_str()) {
            return Some(format!(
                "Authentication method {} is not supported (the broker requires `{}`)",
                method.unwrap_or("none"),
                self.method
            ));
        }
        if !(self.validator)(data.unwrap_or_default()) {
            return Some(format!(
                "Unable to authenticate: invalid `{}` credentials",
                self.method
            ));
        }
        None
    }
}

/// The AuthChallenge asking for fresh credentials.
pub(crate) fn refresh_challenge(auth: &MockAuth, server_version: &str) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::AuthChallenge as i32,
        auth_challenge: Some(wire::CommandAuthChallenge {
            server_version: Some(server_version.to_owned()),
            challenge: Some(wire::AuthData {
                auth_method_name: Some(auth.method.clone()),
                auth_data: Some(REFRESH_AUTH_DATA.to_vec().into()),
            }),
            protocol_version: Some(super::reply::MAX_PROTOCOL_VERSION),
        }),
        ..Default::default()
    }
}

#[cfg(feature = "tls")]
pub use tls::MockTls;

#[cfg(feature = "tls")]
mod tls {
    use std::fmt;
    use std::io;
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    /// TLS on the mock broker's listener: its certificate chain and key (PEM), optionally
    /// requiring client certificates signed by a CA. `Debug` never shows the key.
    #[derive(Clone)]
    pub struct MockTls {
        cert_chain_pem: String,
        key_pem: String,
        client_ca_pem: Option<String>,
        host: String,
    }

    impl fmt::Debug for MockTls {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("MockTls")
                .field("host", &self.host)
                .field("requires_client_cert", &self.client_ca_pem.is_some())
                .finish_non_exhaustive()
        }
    }

    impl MockTls {
        /// Serves TLS with this certificate chain and private key (PEM text).
        pub fn new(cert_chain_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
            MockTls {
                cert_chain_pem: cert_chain_pem.into(),
                key_pem: key_pem.into(),
                client_ca_pem: None,
                host: "127.0.0.1".to_owned(),
            }
        }

        /// Requires a client certificate signed by one of the CAs in `ca_pem` (mutual TLS).
        pub fn require_client_cert(mut self, ca_pem: impl Into<String>) -> Self {
            self.client_ca_pem = Some(ca_pem.into());
            self
        }

        /// The host named in the broker's service URL (`pulsar+ssl://HOST:PORT`, also in its
        /// lookup answers). Default `127.0.0.1`.
        pub fn advertised_host(mut self, host: impl Into<String>) -> Self {
            self.host = host.into();
            self
        }

        pub(crate) fn host(&self) -> &str {
            &self.host
        }

        pub(crate) fn acceptor(&self) -> io::Result<tokio_rustls::TlsAcceptor> {
            let invalid =
                |e: &dyn fmt::Display| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
            let certs = CertificateDer::pem_slice_iter(self.cert_chain_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(&e))?;
            let key =
                PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| invalid(&e))?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(&e))?;
            let builder = match &self.client_ca_pem {
                None => builder.with_no_client_auth(),
                Some(ca) => {
                    let mut roots = rustls::RootCertStore::empty();
                    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                        roots
                            .add(cert.map_err(|e| invalid(&e))?)
                            .map_err(|e| invalid(&e))?;
                    }
                    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                        Arc::new(roots),
                        provider,
                    )
                    .build()
                    .map_err(|e| invalid(&e))?;
                    builder.with_client_cert_verifier(verifier)
                }
            };
            let config = builder
                .with_single_cert(certs, key)
                .map_err(|e| invalid(&e))?;
            Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
        }
    }
}
