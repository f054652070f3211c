//! The [`Client`]: the entry point of the SDK, holding the connection pool and lookup service.

use std::sync::Arc;
use std::time::Duration;

use crate::backoff_policy::BackoffPolicy;
use crate::consumer::{ConsumerBuilder, ReaderBuilder};
use crate::core::{ClientCore, CoreRef};
use crate::producer::ProducerBuilder;

use crate::auth::{Authentication, AuthenticationProvider, SharedAuthProvider, TokenAuth};
#[cfg(feature = "tls")]
use crate::connection::tls::{TlsConnector, TlsOptions};
use crate::connection::ConnectionConfig;

use crate::error::{Error, Result};
use crate::failover::{ServiceInfoProvider, ServiceInfoUpdater};
use crate::lookup::{BrokerLookup, LookupService, DEFAULT_MAX_LOOKUP_REDIRECTS};
use crate::pool::ConnectionPool;
use crate::service_info::ServiceInfo;
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;
use crate::updates::Updates;

/// A Pulsar client: one per application is typical. Cheap to clone; clones share the
/// connections (one per broker).
#[derive(Debug, Clone)]
pub struct Client {
    core: CoreRef,
    /// The transaction coordinators (`enable_transaction`); `None`: transactions are off.
    #[cfg(feature = "transactions")]
    coordinators: Option<Arc<crate::transaction::coordinator::Coordinators>>,
}

/// Upstream's default client memory limit for pending messages (64 MiB).
pub const DEFAULT_MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// Builds a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    service_url: Option<String>,
    connection: ConnectionConfig,
    max_lookup_redirects: u32,
    max_partitions: u32,
    backoff: BackoffPolicy,
    memory_limit: usize,
    auto_update_partitions_interval: Duration,
    metrics_topic_labels: bool,
    service_info_provider: Option<Arc<dyn ServiceInfoProvider>>,
    #[cfg(feature = "tls")]
    tls: TlsOptions,
    #[cfg(feature = "opentelemetry")]
    tracing: Option<crate::otel::Tracing>,
    #[cfg(feature = "transactions")]
    enable_transaction: bool,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            service_url: None,
            connection: ConnectionConfig::default(),
            max_lookup_redirects: DEFAULT_MAX_LOOKUP_REDIRECTS,
            max_partitions: crate::lookup::MAX_PARTITIONS,
            backoff: BackoffPolicy::default(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            auto_update_partitions_interval: Duration::from_secs(60),
            metrics_topic_labels: false,
            service_info_provider: None,
            #[cfg(feature = "tls")]
            tls: TlsOptions::default(),
            #[cfg(feature = "opentelemetry")]
            tracing: None,
            #[cfg(feature = "transactions")]
            enable_transaction: false,
        }
    }
}

impl ClientBuilder {
    /// The broker (or proxy) to bootstrap from: `pulsar://host:6650`, or a comma-separated host
    /// list `pulsar://h1:6650,h2:6650`. Required.
    pub fn service_url(mut self, url: impl Into<String>) -> Self {
        self.service_url = Some(url.into());
        self
    }

    /// Where the client's cluster comes from, and when it moves to another (cluster-level
    /// failover; see [`crate::failover`]): the provider's
    /// [`initial_service_info`](ServiceInfoProvider::initial_service_info) gives the service
    /// URL, the authentication and the TLS trust file, replacing
    /// [`authentication`](Self::authentication)/[`auth_provider`](Self::auth_provider) and the
    /// trust file set here (the other TLS settings apply to every cluster). Not together with
    /// [`service_url`](Self::service_url). The client must then be built inside a tokio
    /// runtime: the provider starts when it is built.
    pub fn service_info_provider(mut self, provider: impl ServiceInfoProvider) -> Self {
        self.service_info_provider = Some(Arc::new(provider));
        self
    }

    /// Like [`service_info_provider`](Self::service_info_provider), with a provider shared with
    /// others.
    pub fn service_info_provider_shared(mut self, provider: Arc<dyn ServiceInfoProvider>) -> Self {
        self.service_info_provider = Some(provider);
        self
    }

    /// Timeout of each broker operation (lookup, create, ...). Default 30 s.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.connection.operation_timeout = timeout;
        self
    }

    /// Timeout for opening a connection, handshake included (Java's `connectionTimeout`).
    /// Default 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connection.connect_timeout = timeout;
        self
    }

    /// Renamed [`connect_timeout`](Self::connect_timeout).
    #[deprecated(note = "use `connect_timeout`")]
    pub fn connection_timeout(self, timeout: Duration) -> Self {
        self.connect_timeout(timeout)
    }

    /// Keep-alive interval of broker connections. Default 30 s.
    pub fn keepalive_interval(mut self, interval: Duration) -> Self {
        self.connection.keepalive_interval = interval;
        self
    }

    /// Fixed authentication data sent when connecting and answering auth challenges.
    pub fn authentication(mut self, auth: Authentication) -> Self {
        self.connection.auth = Some(std::sync::Arc::new(auth));
        self
    }

    /// The authentication provider, asked for credentials on every new connection and every
    /// auth challenge (see [`crate::auth`]).
    pub fn auth_provider(mut self, provider: impl AuthenticationProvider + 'static) -> Self {
        self.connection.auth = Some(std::sync::Arc::new(provider));
        self
    }

    /// Like [`auth_provider`](Self::auth_provider), with a provider shared with others.
    pub fn auth_provider_shared(mut self, provider: SharedAuthProvider) -> Self {
        self.connection.auth = Some(provider);
        self
    }

    /// Token authentication, with the Java client's parameter syntax: `file:PATH` reads the
    /// token from the file on every connection and auth challenge; `token:VALUE` or a bare value
    /// is the token itself (see [`TokenAuth`]).
    pub fn auth_token(self, token: impl Into<String>) -> Self {
        self.auth_provider(TokenAuth::from_param(&token.into()))
    }

    /// TLS client authentication (method `tls`): the client certificate and key (PEM files)
    /// are presented in the TLS handshake and are the credential.
    #[cfg(feature = "tls")]
    pub fn auth_tls(
        self,
        cert_file_path: impl Into<std::path::PathBuf>,
        key_file_path: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls_cert_file_path(cert_file_path)
            .tls_key_file_path(key_file_path)
            .auth_provider(crate::auth::TlsAuth)
    }

    /// All TLS options at once (used with a `pulsar+ssl://` service URL).
    #[cfg(feature = "tls")]
    pub fn tls_options(mut self, options: TlsOptions) -> Self {
        self.tls = options;
        self
    }

    /// PEM file of the certificate authorities to trust (`tlsTrustCertsFilePath`).
    #[cfg(feature = "tls")]
    pub fn tls_trust_certs_file_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.trust_certs_file_path = Some(path.into());
        self
    }

    /// Also trust the operating system's root certificates (the default when no other trust
    /// source is set).
    #[cfg(feature = "tls")]
    pub fn tls_use_platform_roots(mut self, on: bool) -> Self {
        self.tls.use_platform_roots = on;
        self
    }

    /// Also trust the Mozilla root certificates bundled with the client.
    #[cfg(feature = "tls")]
    pub fn tls_use_webpki_roots(mut self, on: bool) -> Self {
        self.tls.use_webpki_roots = on;
        self
    }

    /// Whether the broker's certificate must name the host connected to
    /// (`tlsHostnameVerificationEnable`). Default `true`; off logs a warning once.
    #[cfg(feature = "tls")]
    pub fn tls_hostname_verification(mut self, on: bool) -> Self {
        self.tls.hostname_verification = on;
        self
    }

    /// Accept any broker certificate (`tlsAllowInsecureConnection`). Default `false`; on logs
    /// a warning once. For tests only.
    #[cfg(feature = "tls")]
    pub fn tls_allow_insecure_connection(mut self, on: bool) -> Self {
        self.tls.allow_insecure_connection = on;
        self
    }

    /// PEM file of the client certificate chain for mutual TLS (`tlsCertificateFilePath`).
    #[cfg(feature = "tls")]
    pub fn tls_cert_file_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.cert_file_path = Some(path.into());
        self
    }

    /// PEM file of the client's private key for mutual TLS (`tlsKeyFilePath`).
    #[cfg(feature = "tls")]
    pub fn tls_key_file_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.key_file_path = Some(path.into());
        self
    }

    /// Bound on lookup redirects before a lookup fails. Default 20, like upstream.
    pub fn max_lookup_redirects(mut self, n: u32) -> Self {
        self.max_lookup_redirects = n;
        self
    }

    /// Backoff between reconnect and retry attempts (default 100 ms → 60 s with jitter).
    pub fn backoff(mut self, policy: BackoffPolicy) -> Self {
        self.backoff = policy;
        self
    }

    /// The most partitions a topic may have for this client (default 65,536): a partitioned
    /// producer or consumer creates one producer or consumer per partition, so a broker's
    /// count (its metadata, a poll, a partition update) above this is refused with
    /// [`Error::Protocol`] and nothing is created for it.
    ///
    /// Cost, measured: about 3.6 KB of client memory per idle partition producer (so the
    /// default lets one partitioned producer claim ~225 MiB) and about 10 KB per idle
    /// partition consumer (~660 MiB); 1,024 partitions cost ~4 MB and ~10 MB. Lower it when
    /// no topic you use is that wide. Must be at least 1.
    pub fn max_partitions(mut self, n: u32) -> Self {
        self.max_partitions = n;
        self
    }

    /// Memory this client's producers and consumers may hold, in bytes. Default 64 MiB, like
    /// upstream.
    ///
    /// - Producers hold their pending messages in it: payload, key and properties, and the
    ///   producer name and schema version each frame carries (per message unbatched, per
    ///   built batch when batching); a send waits for room (or fails with
    ///   `block_if_queue_full(false)`).
    /// - Consumers hold what they received for the application in it: queued messages
    ///   (decompressed payloads and what the queue keeps per message) until the application
    ///   takes them, and incomplete chunked messages. **Consumers together take at most half
    ///   of the limit**, and never wait for it, so a consume-then-produce pipeline always keeps
    ///   the other half for its sends (upstream's Java client force-reserves whatever its
    ///   consumers receive, so their prefetch can starve its producers). Each consumer has one
    ///   byte budget of that half (shared with the client's other consumers, and by all the
    ///   partitions and topics of a partitioned, multi-topic or pattern consumer): when its
    ///   bytes reach it, it grants the broker no more flow permits until the application takes
    ///   messages out. Nothing is dropped or failed for it, and a single message larger than
    ///   the whole budget is still delivered (with nothing queued one permit is always out).
    ///   So a consumer's queue is bounded by the smaller of
    ///   [`receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size) messages and its
    ///   budget in bytes (plus what the permits in flight bring: see `receiver_queue_size`).
    ///   A consumer withholding permits for want of room grants again as soon as room comes
    ///   back anywhere (its own or another consumer's messages taken, a watcher's queue or a
    ///   producer's pending messages released). A closed consumer's queued messages leave the
    ///   limit at its `close`.
    /// - Between each partition's connection and its consumer, outside the limit: at most
    ///   1 MiB of received messages (or a quarter of the budget, if smaller) plus one message
    ///   wait to be taken into the queue; past that the connection stops reading its socket
    ///   until the consumer has caught up (as upstream, which hands each message over on the
    ///   connection's thread).
    /// - The topic-list and partition watchers' queues of pushed updates, within the
    ///   consumers' half too (at most 4 MiB each; past it, the watcher re-reads).
    /// - Writer schemas, outside the limit but bounded by it: the client's typed consumers and
    ///   readers (AUTO_CONSUME, Avro, generic Avro) parse each writer schema version once
    ///   through one cache per client of at most `limit / 8` bytes (definitions plus 1 KiB
    ///   each; a larger definition is parsed each time), and each typed consumer keeps the
    ///   definitions it fetched within `limit / 8` bytes (past it, it fetches again).
    ///
    /// At most 4 GiB, at least 1 byte.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// How often partition counts are polled when the broker cannot push partition updates
    /// (PIP-247 watchers). Default 60 s, like upstream.
    pub fn auto_update_partitions_interval(mut self, interval: Duration) -> Self {
        self.auto_update_partitions_interval = interval;
        self
    }

    /// Whether operator metrics (cargo feature `metrics`, see `pulsar_sdk::metrics`) carry
    /// `pulsar.topic` and `pulsar.partition` labels. Off by default: series are per namespace,
    /// since per-topic series multiply with the topics and partitions a client uses. Without
    /// the `metrics` feature this has no effect.
    pub fn metrics_topic_labels(mut self, on: bool) -> Self {
        self.metrics_topic_labels = on;
        self
    }

    /// OpenTelemetry tracing with the global tracer provider's tracer (cargo feature
    /// `opentelemetry`; Java's `enableTracing`): every producer and consumer this client
    /// creates records a `send` span per message and a `process` span per message received,
    /// and carries the W3C trace context in the message properties (see the guide's
    /// "Tracing" section). Off by default. Readers are not traced (as in Java).
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn tracing(mut self, on: bool) -> Self {
        self.tracing = on.then_some(crate::otel::Tracing::Global);
        self
    }

    /// OpenTelemetry tracing with this tracer (cargo feature `opentelemetry`; Java's
    /// `openTelemetry(..)`): as [`tracing(true)`](Self::tracing), with the application's
    /// tracer instead of the global provider's, e.g. an SDK `TracerProvider`'s
    /// `tracer("my-service")`.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn tracer<T>(mut self, tracer: T) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        self.tracing = Some(crate::otel::Tracing::Given(std::sync::Arc::new(
            opentelemetry::global::BoxedTracer::new(Box::new(tracer)),
        )));
        self
    }

    /// Turns transactions on (PIP-31, cargo feature `transactions`; Java's
    /// `enableTransaction`): the client finds the cluster's transaction coordinators when
    /// its first transaction begins ([`Client::transaction`]). Default `false`.
    #[cfg(feature = "transactions")]
    #[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
    pub fn enable_transaction(mut self, on: bool) -> Self {
        self.enable_transaction = on;
        self
    }

    /// Validates the configuration and builds the client. No connection is opened yet.
    pub fn build(mut self) -> Result<Client> {
        let initial = match (&self.service_url, &self.service_info_provider) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidConfig(
                    "set either service_url or service_info_provider, not both".into(),
                ))
            }
            (None, None) => {
                return Err(Error::InvalidConfig("service_url is required".into()));
            }
            (Some(url), None) => {
                ServiceInfo::from_parts(ServiceUrl::parse(url)?, self.connection.auth.clone(), None)
            }
            (None, Some(provider)) => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(Error::InvalidConfig(
                        "a client with a service_info_provider must be built inside a tokio \
                         runtime"
                            .into(),
                    ));
                }
                let info = provider.initial_service_info();
                self.connection.auth = info.auth().cloned();
                #[cfg(feature = "tls")]
                if let Some(path) = info.tls_trust_certs_file_path() {
                    self.tls.trust_certs_file_path = Some(path.to_path_buf());
                }
                info
            }
        };
        let service_url = initial.service_url().clone();
        let c = &self.connection;
        for (name, d) in [
            ("operation_timeout", c.operation_timeout),
            ("connect_timeout", c.connect_timeout),
            ("keepalive_interval", c.keepalive_interval),
        ] {
            if d.is_zero() {
                return Err(Error::InvalidConfig(format!(
                    "{name} must be greater than zero"
                )));
            }
        }
        #[cfg(feature = "tls")]
        let tls = if service_url.is_tls() {
            Some(TlsConnector::new(&self.tls)?)
        } else {
            None
        };
        #[cfg(not(feature = "tls"))]
        let tls = if service_url.is_tls() {
            return Err(Error::InvalidConfig(format!(
                "`{service_url}`: TLS (pulsar+ssl://) needs the `tls` cargo feature"
            )));
        } else {
            None
        };
        if self.max_partitions == 0 {
            return Err(Error::InvalidConfig(
                "max_partitions must be at least 1".into(),
            ));
        }
        if self.memory_limit == 0 || self.memory_limit > u32::MAX as usize {
            return Err(Error::InvalidConfig(
                "memory_limit must be between 1 byte and 4 GiB".into(),
            ));
        }
        self.backoff.validate()?;
        if self.auto_update_partitions_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "auto_update_partitions_interval must be greater than zero".into(),
            ));
        }
        let operation_timeout = self.connection.operation_timeout;
        let pool = Arc::new(ConnectionPool::new(
            service_url.clone(),
            self.connection,
            tls,
        ));
        let lookup =
            LookupService::new(pool.clone(), self.max_lookup_redirects, self.max_partitions);
        let mut core = ClientCore::new(
            service_url,
            pool,
            lookup,
            operation_timeout,
            self.backoff,
            self.memory_limit,
            self.auto_update_partitions_interval,
        );
        core.metric_labels.topic = self.metrics_topic_labels;
        core.service = tokio::sync::watch::Sender::new(initial);
        #[cfg(feature = "tls")]
        {
            core.tls_options = self.tls;
        }
        #[cfg(feature = "opentelemetry")]
        {
            core.tracing = self.tracing;
        }
        #[cfg(feature = "transactions")]
        {
            core.transactions = self.enable_transaction;
        }
        let core = Arc::new(core);
        if let Some(provider) = self.service_info_provider {
            provider.initialize(ServiceInfoUpdater::new(&core));
        }
        #[cfg(feature = "transactions")]
        let coordinators = self.enable_transaction.then(|| {
            Arc::new(crate::transaction::coordinator::Coordinators::new(
                core.clone(),
            ))
        });
        Ok(Client {
            core,
            #[cfg(feature = "transactions")]
            coordinators,
        })
    }
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Starts a transaction (PIP-31, cargo feature `transactions`): set its timeout, then
    /// `begin().await`. Needs [`ClientBuilder::enable_transaction`]. See
    /// [`transaction`](crate::transaction).
    #[cfg(feature = "transactions")]
    #[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
    pub fn transaction(&self) -> crate::transaction::TransactionBuilder {
        crate::transaction::TransactionBuilder::new(self.coordinators.clone())
    }

    /// The service URL the client uses now (that of its current cluster: see
    /// [`service_info`](Self::service_info)).
    pub fn service_url(&self) -> ServiceUrl {
        self.core.service.borrow().service_url().clone()
    }

    /// The cluster the client uses now: its service URL, authentication method and TLS
    /// trust file.
    pub fn service_info(&self) -> ServiceInfo {
        self.core.service.borrow().clone()
    }

    /// The cluster the client uses, as it changes: one value per switch (by
    /// [`update_service_info`](Self::update_service_info) or a
    /// [`ServiceInfoProvider`]). Ends when the client is gone. A watcher that may miss values
    /// (it sees the latest) finds the number of switches in [`stats`](Self::stats).
    pub fn service_info_updates(&self) -> Updates<ServiceInfo> {
        Updates::new(self.core.service.subscribe())
    }

    /// Moves the client to another cluster (cluster-level failover, PIP-121; Java's
    /// `updateServiceUrl`, C++/Python's service-info update):
    /// - every connection to the old cluster closes at once, and lookups go to `info`'s
    ///   service URL from now on;
    /// - every producer, consumer and reader of this client reconnects there through its
    ///   usual reconnect path ([`State::Reconnecting`](crate::State) meanwhile): producers
    ///   re-send the messages they hold, in order (receipts come from the new cluster);
    ///   consumers and readers subscribe again (a subscription the new cluster does not have
    ///   starts at the consumer's initial position: see the guide's connecting chapter for the
    ///   replication that must be set up for nothing to be missed);
    /// - new connections carry `info`'s authentication (none if it has none), and its TLS
    ///   trust file if it names one.
    ///
    /// Returns once the switch is made (not once everything has reconnected: watch
    /// [`states`](crate::Producer::states) for that). Fails with [`Error::Closed`] on a closed
    /// client, or [`Error::InvalidConfig`] if `info`'s TLS settings cannot be loaded; nothing
    /// changes then. Logged at `info`; [`service_info_updates`](Self::service_info_updates)
    /// sees it.
    pub fn update_service_info(&self, info: ServiceInfo) -> Result<()> {
        self.core.switch_service(info)
    }

    /// Finds the broker that serves `topic` (following redirects).
    pub async fn lookup_topic(&self, topic: &str) -> Result<BrokerLookup> {
        let topic = TopicName::new(topic)?;
        self.core.lookup.lookup(&topic).await
    }

    /// The number of partitions of `topic`; 0 means it is not partitioned.
    pub async fn partitioned_topic_metadata(&self, topic: &str) -> Result<u32> {
        let topic = TopicName::new(topic)?;
        self.core.lookup.partitioned_metadata(&topic).await
    }

    /// The partitions of `topic` (just the topic itself if it is not partitioned), like the
    /// upstream `getPartitionsForTopic`.
    pub async fn partitions_for_topic(&self, topic: &str) -> Result<Vec<TopicName>> {
        let topic = TopicName::new(topic)?;
        let n = self.core.lookup.partitioned_metadata(&topic).await?;
        if n == 0 {
            Ok(vec![topic])
        } else {
            Ok((0..n).map(|i| topic.partition(i)).collect())
        }
    }

    /// The schema registered on `topic` at `version` (its latest when `None`), with the
    /// version the broker names (GetSchema). Upstream brokers answer
    /// [`ServerError::TopicNotFound`](crate::ServerError::TopicNotFound) when there is none;
    /// a broker that never answers fails it with [`Error::Timeout`]
    /// after the operation timeout.
    pub async fn get_schema(
        &self,
        topic: &str,
        version: Option<&crate::schema::SchemaVersion>,
    ) -> Result<(crate::schema::SchemaInfo, crate::schema::SchemaVersion)> {
        let topic = TopicName::new(topic)?;
        crate::schema::registry_get_schema(&self.core, &topic, version).await
    }

    /// Registers `info` on `topic`, or finds it registered, and answers its version
    /// (GetOrCreateSchema, checked for compatibility like a producer's schema: an incompatible
    /// one fails with [`ServerError::IncompatibleSchema`](crate::ServerError)).
    pub async fn get_or_create_schema(
        &self,
        topic: &str,
        info: &crate::schema::SchemaInfo,
    ) -> Result<crate::schema::SchemaVersion> {
        let topic = TopicName::new(topic)?;
        crate::schema::registry_get_or_create_schema(&self.core, &topic, info).await
    }

    /// Starts building a producer for `topic`.
    pub fn producer(&self, topic: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder::new(self.core.clone(), topic.into())
    }

    /// Starts building a consumer for `topic`.
    pub fn consumer(&self, topic: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(self.core.clone(), vec![topic.into()])
    }

    /// Starts building a consumer of several topics, merged into one stream (Java's
    /// `newConsumer().topics(..)`; see [`ConsumerBuilder::topics`]).
    pub fn multi_topic_consumer<I, T>(&self, topics: I) -> ConsumerBuilder
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        ConsumerBuilder::new(self.core.clone(), Vec::new()).topics(topics)
    }

    /// Starts building a consumer of every topic of a namespace whose name matches `pattern`
    /// (Java's `newConsumer().topicsPattern(..)`; see [`ConsumerBuilder::topics_pattern`]).
    pub fn pattern_consumer(&self, pattern: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(self.core.clone(), Vec::new()).topics_pattern(pattern)
    }

    /// A consumer builder with no topic yet.
    #[deprecated(note = "use `multi_topic_consumer(topics)` or `pattern_consumer(pattern)`")]
    pub fn new_consumer(&self) -> ConsumerBuilder {
        ConsumerBuilder::new(self.core.clone(), Vec::new())
    }

    /// Starts building a reader for `topic`.
    pub fn reader(&self, topic: impl Into<String>) -> ReaderBuilder {
        ReaderBuilder::new(self.core.clone(), topic.into())
    }

    /// Starts building a table view of `topic`: a key → latest value map of its messages,
    /// kept current (Java's `newTableView`; see [`TableView`](crate::TableView)).
    pub fn table_view(&self, topic: impl Into<String>) -> crate::TableViewBuilder {
        crate::TableViewBuilder::new(self.core.clone(), topic.into())
    }

    /// The client's own statistics: the cluster it uses now and the number of cluster
    /// switches so far (see [`ClientStats`](crate::ClientStats)).
    pub fn stats(&self) -> crate::ClientStats {
        let cluster = self.core.pool.cluster();
        crate::ClientStats {
            service_url: ServiceUrl::clone(&cluster.service_url),
            cluster_switches: cluster.generation,
            connections_opened: self.core.pool.connections_opened() as u64,
        }
    }

    /// How many broker connections this client has opened so far.
    pub fn connections_opened(&self) -> usize {
        self.core.pool.connections_opened()
    }

    /// Counters of each live broker connection: pending requests and registered producers,
    /// consumers and watchers (useful to check nothing is left behind).
    pub fn connection_stats(&self) -> Vec<crate::connection::ConnectionStats> {
        self.core.pool.stats()
    }

    /// Closes the client gracefully: every producer, consumer and reader of this client closes
    /// (producers first send what they hold and wait for its receipts, consumers flush their
    /// acks), then every connection closes. Waits at most the operation timeout for them;
    /// returns [`Error::Timeout`] if some did not finish in time (they are then cut off).
    /// Closing twice is fine; the client cannot be used afterwards. To bound the wait by a
    /// deadline of your own (a shutdown budget), use [`Client::close_within`].
    pub async fn close(&self) -> Result<()> {
        self.close_within(self.core.operation_timeout()).await
    }

    /// Closes the client as [`Client::close`] does, waiting at most `deadline` for the whole
    /// of it: one deadline for every producer, consumer and reader together, however many
    /// there are and however unresponsive the broker is. Closing the client this way also
    /// closes its entities, so a shutdown needs no `close()` of each (each of those waits up
    /// to the operation timeout on its own).
    ///
    /// When the deadline passes it returns [`Error::Timeout`] and cuts every connection off.
    /// What was not finished by then:
    /// - messages a producer still held, or had sent without a receipt yet, fail on their
    ///   receipts (the application sees each failure; the broker may still have stored some
    ///   of them, which a re-send would duplicate, as after any failed send);
    /// - acknowledgements not yet sent are not recorded by the broker: those messages are
    ///   delivered again to the subscription's next consumer (at-least-once, as after a crash).
    ///
    /// Nothing else is lost: no message is dropped without its receipt failing.
    pub async fn close_within(&self, deadline: Duration) -> Result<()> {
        if self.core.shutdown(deadline).await {
            Ok(())
        } else {
            Err(Error::Timeout {
                operation: "client close",
                after: deadline,
            })
        }
    }
}
