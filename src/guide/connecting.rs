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
//! ## Many producers and consumers in one client
//!
//! All of a client's producers and consumers on a broker share one connection, and an idle
//! one costs little: about 3.9 KB of heap per idle producer and 7.6 KB per idle consumer
//! (mock broker, 10,000 of each: its task, the queue from its handle, its registration on the
//! connection, its statistics; a consumer also its receive queue), measured by
//! `cargo bench --bench scale`, which also shows where the bytes go. Against pulsar-lite
//! (2,000 of each) that is about 5.5 KB of resident memory per idle producer and 6.2 KB per
//! idle consumer, where the official C++ client (through Python) takes about 12.6 KB and
//! 21 KB (`benches/scale_official.py`, same run). What traffic needs (batch buffers, receipt
//! slots, the send-latency histogram, queued events) is allocated when traffic comes. Idle
//! entities cost no CPU either: a connection's keep-alive is one PING and PONG per interval
//! however many entities use it, and an idle producer or consumer does not wake.
//!
//! Each create is three round trips, as upstream's (partitioned metadata, lookup, then the
//! create itself), so creating thousands one after the other is bound by the round-trip time
//! (about 900 a second against the mock broker on one machine). Create them concurrently,
//! with a bound on how many are under way (50,000 producers at 512 at once take 2.5-4.5 s
//! against the mock broker on a 2-core machine, 11,000-20,000 a second as the host's speed
//! varies: each create costs the client 60-100 µs of CPU and the mock broker 30-50 µs, on
//! the same cores; against a real broker, the broker sets the pace):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::{StreamExt, TryStreamExt};
//! use pulsar_sdk::{mock::MockBroker, Client};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producers: Vec<pulsar_sdk::Producer> = futures::stream::iter(0..100)
//!     .map(|i| client.producer(format!("device-{i}")).create())
//!     .buffer_unordered(32) // at most 32 creates under way at once
//!     .try_collect()
//!     .await?;
//! assert_eq!(producers.len(), 100);
//! assert_eq!(client.connections_opened(), 1); // all on one connection
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
//! ## Cluster-level failover
//!
//! A client can move to a standby cluster when its own is down, and back (upstream PIP-121),
//! without a DNS change or a restart. [`Client::update_service_info`] moves it to the cluster a
//! [`ServiceInfo`] names (service URL, authentication, TLS trust file): every connection to the
//! old cluster closes, lookups go to the new one, producers re-send what they hold in order,
//! consumers and readers subscribe again, with the new cluster's credentials. A
//! [`ServiceInfoProvider`] makes the decision for you:
//!
//! ```no_run
//! # async fn demo() -> pulsar_sdk::Result<()> {
//! use std::time::Duration;
//! use pulsar_sdk::{AutoClusterFailover, Client, ServiceInfo};
//!
//! let failover = AutoClusterFailover::builder()
//!     .primary(ServiceInfo::builder("pulsar://east:6650").auth_token("east-token").build()?)
//!     .secondary(ServiceInfo::builder("pulsar://west:6650").auth_token("west-token").build()?)
//!     .check_interval(Duration::from_secs(5)) // the default
//!     .failover_threshold(3) // three failed probes in a row: move (default 1)
//!     .switch_back_threshold(12) // a minute of good probes of the primary: back (default 1)
//!     .build()?;
//! let client = Client::builder().service_info_provider(failover).build()?;
//! let mut clusters = client.service_info_updates();
//! tokio::spawn(async move {
//!     while let Some(now) = clusters.changed().await {
//!         println!("now on {}", now.service_url());
//!     }
//! });
//! # Ok(()) }
//! ```
//!
//! [`AutoClusterFailover`] probes as upstream does (a TCP connection to the service URL's
//! hosts): it sees a cluster that is unreachable, not one whose brokers accept connections but
//! fail. `ControlledClusterFailover` (cargo feature `controlled-failover`) asks an HTTP(S)
//! service of yours instead, in the JSON form the Java client reads; an answer it cannot use
//! never moves the client. Unlike Java's, it refuses a token given as `file:PATH` in the
//! answer: a remote answer never makes the client read a local file (and send it to brokers).
//!
//! A switch of your own ([`Client::update_service_info`]) while an [`AutoClusterFailover`] runs:
//! if it names one of the provider's clusters, the provider follows (that cluster is probed
//! from then on; on a secondary the primary is taken back once it answers
//! `switch_back_threshold` probes); a cluster it does not know leaves it probing the cluster it
//! chose last, as upstream's. [`Client::stats`] tells the active cluster and how many switches
//! were made.
//!
//! **What the brokers need for nothing to be missed.** The client moves; the data does not.
//! Two clusters share nothing unless the brokers replicate:
//! - **Geo-replication** of the namespaces the client uses, between the clusters (the
//!   namespace's `replication_clusters` names both): messages produced on one are copied to the
//!   other, so a consumer that moved finds what was produced before the switch. Without it, what
//!   the primary stored and had not delivered waits there until the client comes back, and what
//!   was produced on the standby stays on the standby after the switch back.
//! - **Replicated subscriptions** (`replicateSubscriptionState(true)` on the subscription, and
//!   `enableReplicatedSubscriptions` on the brokers, the default): the subscription's position is
//!   copied too, so a consumer that moves carries on from about where it was. Without it, the
//!   subscription on the other cluster is a different one: created at the consumer's initial
//!   position if it does not exist there (`Latest` skips what was produced meanwhile; `Earliest`
//!   redelivers everything), or at wherever it was last left.
//! - Replication is asynchronous: messages acknowledged by the primary just before it died may
//!   not have reached the standby yet; they are not lost (they are delivered when the primary
//!   is back), but they can come late and, with replicated subscriptions, some messages can be
//!   delivered twice. Consume idempotently.
//! - Producers re-send what had no receipt when the switch happened; a message the old cluster
//!   stored whose receipt was lost is then stored twice (deduplication is per cluster).
//! - A message received before a switch is not acknowledged after it (`ack`, `nack` and
//!   cumulative acks of it are dropped, and acks waiting in the ack group are forgotten): its
//!   id names another message on the new cluster. It stays unacknowledged on its own cluster
//!   and is delivered again there when the client comes back (or through replicated
//!   subscriptions). Do not ack by bare id ([`Consumer::ack_id`]) across a switch.
//! - A reader resumes after the last message it handed out, by its id, on the new cluster
//!   too (as upstream's readers do). Message ids are per cluster (each stores its own
//!   ledgers): on the new cluster that id names another position, so the reader may skip
//!   messages or read some again. A reader that must see everything after a switch watches
//!   [`Client::service_info_updates`] and seeks (by publish time, [`Reader::seek_by_time`]) when
//!   the cluster changes.
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
//! [`Client::update_service_info`]: crate::Client::update_service_info
//! [`Client::stats`]: crate::Client::stats
//! [`Client::service_info_updates`]: crate::Client::service_info_updates
//! [`Consumer::ack_id`]: crate::Consumer::ack_id
//! [`Reader::seek_by_time`]: crate::Reader::seek_by_time
//! [`ServiceInfo`]: crate::ServiceInfo
//! [`ServiceInfoProvider`]: crate::ServiceInfoProvider
//! [`AutoClusterFailover`]: crate::AutoClusterFailover
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
