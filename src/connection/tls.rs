//! TLS for broker connections (`pulsar+ssl://`): rustls with the ring provider, no OpenSSL.
//!
//! [`TlsOptions`] are the options Java and Go users know (`tlsTrustCertsFilePath`,
//! `tlsAllowInsecureConnection`, `tlsHostnameVerificationEnable`, `tlsCertificateFilePath`,
//! `tlsKeyFilePath`). The client builds one [`TlsConnector`] from them; each connection is a TCP
//! stream wrapped by it, with SNI set to the host connected to, then the same connection core as
//! plain TCP (it runs over any `AsyncRead + AsyncWrite`).
//!
//! Failures are typed ([`TlsFailure`]): an untrusted issuer, a hostname mismatch, an expired
//! certificate and a refusal by the broker are told apart. With TLS 1.3 a broker that requires a
//! client certificate refuses only after the client's side of the handshake is done, on the
//! first read; [`ErrorRecorder`] keeps the TLS error seen then so the CONNECT exchange reports
//! it as [`Error::Tls`] too.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::error::{Error, Result, TlsFailure};

/// TLS settings of a client (see [`ClientBuilder`](crate::ClientBuilder)'s `tls_*` methods).
///
/// Which certificate authorities are trusted: the PEM file `trust_certs_file_path`, plus the
/// platform's root store if `use_platform_roots`, plus the bundled Mozilla roots if
/// `use_webpki_roots`. With none of the three, the platform's root store is used (like the Java
/// client, which falls back to the JVM's trust store).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TlsOptions {
    /// PEM file of trusted CA certificates (`tlsTrustCertsFilePath`).
    pub trust_certs_file_path: Option<PathBuf>,
    /// Also trust the operating system's root certificates.
    pub use_platform_roots: bool,
    /// Also trust the Mozilla root certificates bundled with the client (`webpki-roots`).
    pub use_webpki_roots: bool,
    /// Check that the broker's certificate names the host connected to. Default `true`;
    /// turning it off logs a warning once.
    pub hostname_verification: bool,
    /// Accept any broker certificate (no verification at all). Default `false`; turning it on
    /// logs a warning once. For tests only.
    pub allow_insecure_connection: bool,
    /// PEM file of the client certificate chain, for mutual TLS (`tlsCertificateFilePath`).
    pub cert_file_path: Option<PathBuf>,
    /// PEM file of the client's private key, for mutual TLS (`tlsKeyFilePath`). Only its path
    /// is kept; the key is read when the client is built.
    pub key_file_path: Option<PathBuf>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            trust_certs_file_path: None,
            use_platform_roots: false,
            use_webpki_roots: false,
            hostname_verification: true,
            allow_insecure_connection: false,
            cert_file_path: None,
            key_file_path: None,
        }
    }
}

/// Wraps TCP streams in TLS, configured once from [`TlsOptions`].
#[derive(Clone)]
pub(crate) struct TlsConnector {
    inner: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector").finish_non_exhaustive()
    }
}

/// The TLS stream of one connection, recording the TLS error that ends it.
pub(crate) type TlsStream = ErrorRecorder<tokio_rustls::client::TlsStream<TcpStream>>;

fn config_error(what: String) -> Error {
    Error::InvalidConfig(what)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &PathBuf, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| config_error(format!("{what} `{}`: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_error(format!(
            "{what} `{}` holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

static INSECURE_WARNING: Once = Once::new();
static NO_HOSTNAME_WARNING: Once = Once::new();

impl TlsConnector {
    /// Builds the connector: reads the trust store and the client certificate and key.
    /// Fails with [`Error::InvalidConfig`] if a file cannot be read or holds nothing usable.
    pub(crate) fn new(options: &TlsOptions) -> Result<TlsConnector> {
        Self::build(options, false)
    }

    /// Like [`new`](Self::new), but when `options` name no trust source and the platform's root
    /// store turns out empty (a distroless or scratch image), the bundled Mozilla roots
    /// (`webpki-roots`) are trusted instead of failing. Used by the OAuth2 HTTP client.
    #[cfg(any(feature = "oauth2", feature = "controlled-failover"))]
    pub(crate) fn with_fallback_roots(options: &TlsOptions) -> Result<TlsConnector> {
        let implicit = options.trust_certs_file_path.is_none()
            && !options.use_platform_roots
            && !options.use_webpki_roots;
        Self::build(options, implicit)
    }

    fn build(options: &TlsOptions, webpki_fallback: bool) -> Result<TlsConnector> {
        let provider = provider();
        let mut roots = RootCertStore::empty();
        if let Some(path) = &options.trust_certs_file_path {
            for cert in read_certs(path, "tls_trust_certs_file_path")? {
                roots.add(cert).map_err(|e| {
                    config_error(format!(
                        "tls_trust_certs_file_path `{}`: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        let platform = options.use_platform_roots
            || (options.trust_certs_file_path.is_none() && !options.use_webpki_roots);
        if platform {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "platform root certificates: some could not be read");
            }
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, "platform root certificates loaded");
        }
        if options.use_webpki_roots || (webpki_fallback && roots.is_empty()) {
            if !options.use_webpki_roots {
                tracing::info!(
                    "the platform's root store is empty: trusting the bundled Mozilla roots"
                );
            }
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        let verifier = if options.allow_insecure_connection {
            INSECURE_WARNING.call_once(|| {
                tracing::warn!(
                    "TLS: tls_allow_insecure_connection is on: broker certificates are NOT verified"
                )
            });
            None
        } else {
            if roots.is_empty() {
                return Err(config_error(
                    "TLS: no trusted certificate authority (set tls_trust_certs_file_path, or \
                     the platform's root store is empty)"
                        .into(),
                ));
            }
            if !options.hostname_verification {
                NO_HOSTNAME_WARNING.call_once(|| {
                    tracing::warn!(
                        "TLS: tls_hostname_verification is off: certificates for any host accepted"
                    )
                });
            }
            Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| config_error(format!("TLS trust store: {e}")))?,
            )
        };
        let verifier = Arc::new(Verifier {
            inner: verifier,
            hostname_verification: options.hostname_verification,
            provider: provider.clone(),
        });
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&options.cert_file_path, &options.key_file_path) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "tls_cert_file_path")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    config_error(format!("tls_key_file_path `{}`: {e}", key.display()))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| config_error(format!("TLS client certificate: {e}")))?
            }
            _ => {
                return Err(config_error(
                    "tls_cert_file_path and tls_key_file_path go together".into(),
                ))
            }
        };
        Ok(TlsConnector {
            inner: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Runs the TLS handshake over `tcp`, with SNI (and hostname verification) for `host`.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        host: &str,
        addr: &str,
    ) -> Result<TlsStream> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| Error::Tls {
            addr: addr.to_owned(),
            kind: TlsFailure::Handshake,
            source: Some(Arc::new(e)),
        })?;
        let stream =
            self.inner.connect(name, tcp).await.map_err(|e| {
                io_error_to_tls(&e, addr).unwrap_or_else(|| tls_error(addr, None, e))
            })?;
        Ok(ErrorRecorder {
            inner: stream,
            error: Arc::default(),
        })
    }
}

fn tls_error(addr: &str, kind: Option<TlsFailure>, e: std::io::Error) -> Error {
    Error::Tls {
        addr: addr.to_owned(),
        kind: kind.unwrap_or(TlsFailure::Handshake),
        source: Some(Arc::new(e)),
    }
}

/// The [`Error::Tls`] an I/O error of a TLS stream stands for, if it carries a rustls error.
fn io_error_to_tls(e: &std::io::Error, addr: &str) -> Option<Error> {
    let rustls_error = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(Error::Tls {
        addr: addr.to_owned(),
        kind: classify(rustls_error),
        source: Some(Arc::new(rustls_error.clone())),
    })
}

/// Maps a rustls error to the failure a user acts on.
pub(crate) fn classify(e: &rustls::Error) -> TlsFailure {
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => TlsFailure::UntrustedIssuer,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsFailure::HostnameMismatch
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsFailure::CertificateExpired
            }
            _ => TlsFailure::InvalidCertificate,
        },
        rustls::Error::AlertReceived(_) => TlsFailure::RefusedByServer,
        _ => TlsFailure::Handshake,
    }
}

/// Verifies broker certificates with webpki, optionally without the hostname check, or not at
/// all (insecure).
#[derive(Debug)]
struct Verifier {
    /// `None`: insecure, everything is accepted.
    inner: Option<Arc<WebPkiServerVerifier>>,
    hostname_verification: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(inner) = &self.inner else {
            return Ok(ServerCertVerified::assertion());
        };
        match inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // webpki checks the chain before the name: this error means the chain is trusted.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.hostname_verification => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A stream that remembers the first TLS error it returned (see the module docs).
#[derive(Debug)]
pub(crate) struct ErrorRecorder<S> {
    inner: S,
    error: Arc<Mutex<Option<rustls::Error>>>,
}

impl<S> ErrorRecorder<S> {
    /// Where the TLS error will be (shared with the stream).
    pub(crate) fn error_slot(&self) -> Arc<Mutex<Option<rustls::Error>>> {
        self.error.clone()
    }

    fn record<T>(&self, r: &Poll<std::io::Result<T>>) {
        if let Poll::Ready(Err(e)) = r {
            if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| t.clone());
            }
        }
    }
}

/// Turns the error of a failed CONNECT exchange over TLS into [`Error::Tls`] when the TLS
/// layer caused it (e.g. a TLS 1.3 broker refusing our missing client certificate).
pub(crate) fn explain(slot: &Arc<Mutex<Option<rustls::Error>>>, addr: &str, error: Error) -> Error {
    let seen = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match seen {
        Some(e) => Error::Tls {
            addr: addr.to_owned(),
            kind: classify(&e),
            source: Some(Arc::new(e)),
        },
        None => error,
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ErrorRecorder<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.record(&r);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ErrorRecorder<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.record(&r);
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.record(&r);
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.record(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified() {
        let cert = |c| rustls::Error::InvalidCertificate(c);
        assert_eq!(
            classify(&cert(CertificateError::UnknownIssuer)),
            TlsFailure::UntrustedIssuer
        );
        assert_eq!(
            classify(&cert(CertificateError::NotValidForName)),
            TlsFailure::HostnameMismatch
        );
        assert_eq!(
            classify(&cert(CertificateError::Expired)),
            TlsFailure::CertificateExpired
        );
        assert_eq!(
            classify(&rustls::Error::AlertReceived(
                rustls::AlertDescription::CertificateRequired
            )),
            TlsFailure::RefusedByServer
        );
    }

    #[test]
    fn missing_files_are_config_errors() {
        let options = TlsOptions {
            trust_certs_file_path: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = TlsConnector::new(&options).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let options = TlsOptions {
            allow_insecure_connection: true,
            cert_file_path: Some("/x".into()),
            ..Default::default()
        };
        let err = TlsConnector::new(&options).unwrap_err().to_string();
        assert!(err.contains("go together"), "{err}");
    }
}
