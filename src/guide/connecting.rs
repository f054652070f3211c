//! # Connecting
//!
//! Everything starts with a [`Client`]: build one per application and clone it where it is
//! needed (clones share the connections: one per broker, multiplexed). Building validates the
//! configuration and opens nothing; the first producer, consumer, reader or lookup connects.
//!
//! ```no_run
//! use std::time::Duration;
//! use pulsar_sdk::Client;
//!
//! # fn demo() -> pulsar_sdk::Result<()> {
//! let client = Client::builder()
//!     // One broker, or several to bootstrap from: `pulsar://h1:6650,h2:6650`.
//!     .service_url("pulsar://localhost:6650")
//!     .operation_timeout(Duration::from_secs(30)) // lookups, creates, closes (default 30 s)
//!     .connect_timeout(Duration::from_secs(10)) // TCP + TLS + handshake (default 10 s)
//!     .build()?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! [`ClientBuilder`] also sets the keep-alive interval, the reconnect [`BackoffPolicy`]
//! (100 ms → 60 s with jitter by default), the memory producers' pending messages and
//! consumers' received ones may hold ([`memory_limit`], 64 MiB; consumers at most half of it) and the partition polling interval (see
//! [`partitions`](super::partitions)). A bad value fails [`build`](crate::ClientBuilder::build) with
//! [`Error::InvalidConfig`]; a bad URL with [`Error::InvalidServiceUrl`] (see [`ServiceUrl`]
//! for what is accepted: `pulsar://` and `pulsar+ssl://`, host lists, IPv6 in brackets; not
//! the `http://` admin URL).
//!
//! A client that works against the crate's mock broker works against a real one; only the URL
//! changes:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client};
//!
//! let broker = MockBroker::start().await?; // pulsar://127.0.0.1:<port>
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! assert_eq!(client.partitions_for_topic("orders").await?.len(), 1); // not partitioned
//! assert_eq!(client.connections_opened(), 1);
//! client.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## TLS
//!
//! A `pulsar+ssl://` URL (default port 6651) connects over TLS: rustls with the ring provider,
//! no OpenSSL (cargo feature `tls`, on by default; without it such a URL fails `build` with
//! [`Error::InvalidConfig`]). The broker's certificate is checked against the CAs you name, and
//! must name the host connected to.
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # fn demo() -> pulsar_sdk::Result<()> {
//! let client = pulsar_sdk::Client::builder()
//!     .service_url("pulsar+ssl://broker.example.com:6651")
//!     .tls_trust_certs_file_path("/etc/pulsar/ca.pem") // else the platform's roots
//!     .build()?; // reads the files now: a missing file fails here
//! # let _ = client; Ok(()) }
//! ```
//!
//! The trust sources are [`tls_trust_certs_file_path`], [`tls_use_platform_roots`] and
//! [`tls_use_webpki_roots`] (the bundled Mozilla roots); with none set, the platform's roots
//! are used. [`tls_hostname_verification`] (default on) and
//! [`tls_allow_insecure_connection`] (default off; accepts any certificate, for tests only)
//! each log a warning once when weakened. [`tls_options`] sets everything from one
//! [`TlsOptions`]. A TLS failure is [`Error::Tls`] with a [`TlsFailure`] saying why
//! (`UntrustedIssuer`, `HostnameMismatch`, `CertificateExpired`, `RefusedByServer`, ...) and
//! the rustls error as its source.
//!
//! ### Mutual TLS
//!
//! Give the client a certificate and key (PEM) and it presents them in the handshake. With
//! [`auth_tls`] the certificate is also the credential (auth method `tls`, what a broker with
//! `AuthenticationProviderTls` expects); with [`tls_cert_file_path`] and
//! [`tls_key_file_path`] alone it is only presented, and another auth method can be used on
//! top:
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # fn demo() -> pulsar_sdk::Result<()> {
//! let client = pulsar_sdk::Client::builder()
//!     .service_url("pulsar+ssl://broker.example.com:6651")
//!     .tls_trust_certs_file_path("/etc/pulsar/ca.pem")
//!     .auth_tls("/etc/pulsar/client.cert.pem", "/etc/pulsar/client.key-pk8.pem")
//!     .build()?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! ## Authentication
//!
//! The client asks its [`AuthenticationProvider`] for credentials on every new connection and
//! on every auth challenge the broker sends, so rotated credentials are used without
//! reconnecting. Built in:
//!
//! | Method | Provider | Builder shortcut |
//! |---|---|---|
//! | `token` (JWT) | [`TokenAuth`]: a fixed token, a file read again each time, or a (sync or async) supplier | [`auth_token`]: `"file:/path"` or the token (Java's parameter syntax) |
//! | `basic` | [`BasicAuth`]: user and password | [`auth_provider`]`(BasicAuth::new(..))` |
//! | `tls` | [`TlsAuth`]: the client certificate is the credential | [`auth_tls`] (cargo feature `tls`) |
//! | OAuth2 client credentials | [`OAuth2ClientCredentials`]: issuer, key file, audience, scope (sent as a `token`) | [`auth_provider`] (cargo feature `oauth2`) |
//! | anything fixed | [`Authentication`]: a method name and bytes | [`authentication`] |
//!
//! ```no_run
//! use pulsar_sdk::{BasicAuth, Client, TokenAuth};
//!
//! # fn demo() -> pulsar_sdk::Result<()> {
//! // A token file that an operator (or a sidecar) rotates: re-read on every connection and
//! // every auth challenge.
//! let client = Client::builder()
//!     .service_url("pulsar+ssl://broker.example.com:6651")
//!     .auth_token("file:/var/run/secrets/pulsar/token")
//!     .build()?;
//!
//! // A token from your own secret store.
//! let client = Client::builder()
//!     .service_url("pulsar://localhost:6650")
//!     .auth_provider(TokenAuth::from_fn(|| {
//!         std::env::var("PULSAR_TOKEN").map_err(Into::into)
//!     }))
//!     .build()?;
//!
//! // Basic authentication.
//! let client = Client::builder()
//!     .service_url("pulsar://localhost:6650")
//!     .auth_provider(BasicAuth::new("app", "secret"))
//!     .build()?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! OAuth2 (cargo feature `oauth2`) takes the Java client's parameters: the issuer URL (the
//! token endpoint is discovered from its `.well-known/openid-configuration`), the key file
//! holding `client_id` and `client_secret` (a path, a `file://` URL or a `data:` URL), and the
//! audience. The token is cached and fetched again at 80% of its lifetime; a failed fetch is
//! retried with backoff while the cached token is still used.
//!
//! ```no_run
//! # #[cfg(feature = "oauth2")]
//! # fn demo() -> pulsar_sdk::Result<()> {
//! use pulsar_sdk::auth::oauth2::OAuth2ClientCredentials;
//!
//! let oauth2 = OAuth2ClientCredentials::new(
//!     "https://auth.example.com/",
//!     "/etc/pulsar/credentials.json",
//!     Some("urn:pulsar:cluster"),
//! )?
//! .scope("pulsar");
//! let client = pulsar_sdk::Client::builder()
//!     .service_url("pulsar+ssl://broker.example.com:6651")
//!     .auth_provider(oauth2)
//!     .build()?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! Your own provider implements [`AuthenticationProvider`]: a method name and an async
//! `auth_data`. Answer with *current* credentials each time, and keep secrets out of `Debug`:
//!
//! ```
//! use bytes::Bytes;
//! use futures::future::BoxFuture;
//! use pulsar_sdk::auth::{AuthError, AuthenticationProvider};
//!
//! struct Vault; // fetches a token from your secret store
//!
//! impl std::fmt::Debug for Vault {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         f.write_str("Vault") // no secrets here
//!     }
//! }
//!
//! impl AuthenticationProvider for Vault {
//!     fn method_name(&self) -> &str {
//!         "token"
//!     }
//!     fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
//!         Box::pin(async { Ok(Bytes::from("a-fresh-token")) })
//!     }
//! }
//!
//! let builder = pulsar_sdk::Client::builder().auth_provider(Vault);
//! # let _ = builder;
//! ```
//!
//! When a provider fails, the connection asking is closed with [`Error::Authentication`]
//! (retriable: the producers and consumers on it reconnect with backoff and ask again). When
//! the broker refuses the credentials, creating a producer or consumer fails at once with
//! [`Error::Broker`] and [`ServerError::AuthenticationError`] (not retriable); see
//! [`errors`](super::errors). The crate never logs credentials.
//!
//! [`Client`]: crate::Client
//! [`ClientBuilder`]: crate::ClientBuilder
//! [`BackoffPolicy`]: crate::BackoffPolicy
//! [`memory_limit`]: crate::ClientBuilder::memory_limit
//! [`Error::InvalidConfig`]: crate::Error::InvalidConfig
//! [`Error::InvalidServiceUrl`]: crate::Error::InvalidServiceUrl
//! [`Error::Tls`]: crate::Error::Tls
//! [`Error::Authentication`]: crate::Error::Authentication
//! [`Error::Broker`]: crate::Error::Broker
//! [`ServerError::AuthenticationError`]: crate::ServerError::AuthenticationError
//! [`ServiceUrl`]: crate::ServiceUrl
//! [`TlsFailure`]: crate::TlsFailure
//! [`AuthenticationProvider`]: crate::AuthenticationProvider
//! [`TokenAuth`]: crate::TokenAuth
//! [`BasicAuth`]: crate::BasicAuth
//! [`TlsAuth`]: crate::TlsAuth
//! [`Authentication`]: crate::Authentication
//! [`auth_token`]: crate::ClientBuilder::auth_token
//! [`auth_provider`]: crate::ClientBuilder::auth_provider
//! [`authentication`]: crate::ClientBuilder::authentication
#![cfg_attr(
    feature = "tls",
    doc = "[`auth_tls`]: crate::ClientBuilder::auth_tls
[`tls_trust_certs_file_path`]: crate::ClientBuilder::tls_trust_certs_file_path
[`tls_use_platform_roots`]: crate::ClientBuilder::tls_use_platform_roots
[`tls_use_webpki_roots`]: crate::ClientBuilder::tls_use_webpki_roots
[`tls_hostname_verification`]: crate::ClientBuilder::tls_hostname_verification
[`tls_allow_insecure_connection`]: crate::ClientBuilder::tls_allow_insecure_connection
[`tls_options`]: crate::ClientBuilder::tls_options
[`tls_cert_file_path`]: crate::ClientBuilder::tls_cert_file_path
[`tls_key_file_path`]: crate::ClientBuilder::tls_key_file_path
[`TlsOptions`]: crate::TlsOptions"
)]
#![cfg_attr(
    not(feature = "tls"),
    doc = "[`auth_tls`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.auth_tls
[`tls_trust_certs_file_path`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_trust_certs_file_path
[`tls_use_platform_roots`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_use_platform_roots
[`tls_use_webpki_roots`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_use_webpki_roots
[`tls_hostname_verification`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_hostname_verification
[`tls_allow_insecure_connection`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_allow_insecure_connection
[`tls_options`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_options
[`tls_cert_file_path`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_cert_file_path
[`tls_key_file_path`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/client/struct.ClientBuilder.html#method.tls_key_file_path
[`TlsOptions`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/connection/tls/struct.TlsOptions.html"
)]
#![cfg_attr(
    feature = "oauth2",
    doc = "[`OAuth2ClientCredentials`]: crate::auth::oauth2::OAuth2ClientCredentials"
)]
#![cfg_attr(
    not(feature = "oauth2"),
    doc = "[`OAuth2ClientCredentials`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/auth/oauth2/struct.OAuth2ClientCredentials.html"
)]
