//! [`ServiceInfo`]: what the client needs to reach one cluster (its service URL, and the
//! credentials and TLS trust that go with it). A client moves between clusters with
//! [`Client::update_service_info`](crate::Client::update_service_info), or by itself with a
//! [`ServiceInfoProvider`](crate::failover::ServiceInfoProvider) (see [`crate::failover`]).
//!
//! Upstream's `ServiceInfo` (C++ 4.1 `pulsar::ServiceInfo`, Python 3.11 `pulsar.ServiceInfo`):
//! a service URL, an optional authentication and an optional TLS trust-certificates path.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::auth::{Authentication, AuthenticationProvider, SharedAuthProvider, TokenAuth};
use crate::error::Result;
use crate::service_url::ServiceUrl;

/// One cluster as the client reaches it: the service URL, the authentication sent to its
/// brokers and the certificate authorities its TLS is checked against.
///
/// Made with [`ServiceInfo::builder`] (or [`ServiceInfo::new`] for a URL alone). Its `Debug`
/// output names the authentication method, never the credentials.
#[derive(Clone)]
pub struct ServiceInfo {
    service_url: ServiceUrl,
    auth: Option<SharedAuthProvider>,
    tls_trust_certs_file_path: Option<PathBuf>,
}

impl fmt::Debug for ServiceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceInfo")
            .field("service_url", &self.service_url.to_string())
            .field("auth_method", &self.auth_method())
            .field("tls_trust_certs_file_path", &self.tls_trust_certs_file_path)
            .finish()
    }
}

impl ServiceInfo {
    /// A cluster reached at `service_url` (`pulsar://host:6650`, `pulsar+ssl://h1,h2:6651`),
    /// without authentication or a trust file of its own. Fails with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a URL the client cannot use.
    pub fn new(service_url: &str) -> Result<ServiceInfo> {
        ServiceInfo::builder(service_url).build()
    }

    /// Starts building the [`ServiceInfo`] of the cluster at `service_url`.
    pub fn builder(service_url: impl Into<String>) -> ServiceInfoBuilder {
        ServiceInfoBuilder {
            service_url: service_url.into(),
            auth: None,
            tls_trust_certs_file_path: None,
        }
    }

    /// The service URL.
    pub fn service_url(&self) -> &ServiceUrl {
        &self.service_url
    }

    /// The authentication method sent to this cluster (`token`, `basic`, ...), if any.
    pub fn auth_method(&self) -> Option<&str> {
        self.auth.as_deref().map(|a| a.method_name())
    }

    /// The PEM file of the certificate authorities this cluster's TLS is checked against
    /// (`None`: the client's own TLS trust settings).
    pub fn tls_trust_certs_file_path(&self) -> Option<&Path> {
        self.tls_trust_certs_file_path.as_deref()
    }

    pub(crate) fn auth(&self) -> Option<&SharedAuthProvider> {
        self.auth.as_ref()
    }

    /// The info of a client built without a provider: its URL and its own settings.
    pub(crate) fn from_parts(
        service_url: ServiceUrl,
        auth: Option<SharedAuthProvider>,
        tls_trust_certs_file_path: Option<PathBuf>,
    ) -> ServiceInfo {
        ServiceInfo {
            service_url,
            auth,
            tls_trust_certs_file_path,
        }
    }
}

/// Builds a [`ServiceInfo`]; see [`ServiceInfo::builder`].
#[derive(Clone)]
pub struct ServiceInfoBuilder {
    service_url: String,
    auth: Option<SharedAuthProvider>,
    tls_trust_certs_file_path: Option<PathBuf>,
}

impl fmt::Debug for ServiceInfoBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceInfoBuilder")
            .field("service_url", &self.service_url)
            .field(
                "auth_method",
                &self.auth.as_deref().map(|a| a.method_name()),
            )
            .field("tls_trust_certs_file_path", &self.tls_trust_certs_file_path)
            .finish()
    }
}

impl ServiceInfoBuilder {
    /// Fixed authentication data for this cluster.
    pub fn authentication(mut self, auth: Authentication) -> Self {
        self.auth = Some(Arc::new(auth));
        self
    }

    /// The authentication provider for this cluster (see [`crate::auth`]).
    pub fn auth_provider(mut self, provider: impl AuthenticationProvider + 'static) -> Self {
        self.auth = Some(Arc::new(provider));
        self
    }

    /// Like [`auth_provider`](Self::auth_provider), with a provider shared with others.
    pub fn auth_provider_shared(mut self, provider: SharedAuthProvider) -> Self {
        self.auth = Some(provider);
        self
    }

    /// Token authentication for this cluster, with the Java client's parameter syntax
    /// (`file:PATH`, `token:VALUE` or the bare token; see [`TokenAuth`]).
    pub fn auth_token(self, token: impl Into<String>) -> Self {
        self.auth_provider(TokenAuth::from_param(&token.into()))
    }

    /// PEM file of the certificate authorities to trust for this cluster
    /// (`tlsTrustCertsFilePath`); the client's other TLS settings apply as they are.
    pub fn tls_trust_certs_file_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_trust_certs_file_path = Some(path.into());
        self
    }

    /// Checks the service URL and builds the [`ServiceInfo`].
    pub fn build(self) -> Result<ServiceInfo> {
        Ok(ServiceInfo {
            service_url: ServiceUrl::parse(&self.service_url)?,
            auth: self.auth,
            tls_trust_certs_file_path: self.tls_trust_certs_file_path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_method_never_the_token() {
        let info = ServiceInfo::builder("pulsar://h:6650")
            .auth_token("s3cret-token")
            .build()
            .unwrap();
        let shown = format!("{info:?}");
        assert!(shown.contains("token"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(info.auth_method(), Some("token"));
    }

    #[test]
    fn a_bad_url_is_refused() {
        assert!(ServiceInfo::new("http://h:8080").is_err());
        assert!(ServiceInfo::new("").is_err());
        assert_eq!(
            ServiceInfo::new("pulsar://h")
                .unwrap()
                .service_url()
                .to_string(),
            "pulsar://h:6650"
        );
    }
}
