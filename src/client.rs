//! The [`Client`]: the entry point of the SDK, holding the connection pool and lookup service.

use std::sync::Arc;
use std::time::Duration;

use crate::backoff_policy::BackoffPolicy;
use crate::consumer::{ConsumerBuilder, ReaderBuilder};
use crate::core::{ClientCore, CoreRef};
use crate::producer::ProducerBuilder;

use crate::connection::{Authentication, ConnectionConfig};

use crate::error::{Error, Result};
use crate::lookup::{BrokerLookup, LookupService, DEFAULT_MAX_LOOKUP_REDIRECTS};
use crate::pool::ConnectionPool;
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;

/// A Pulsar client: one per application is typical. Cheap to clone; clones share the
/// connections (one per broker).
#[derive(Debug, Clone)]
pub struct Client {
    core: CoreRef,
}

/// Upstream's default client memory limit for pending messages (64 MiB).
pub const DEFAULT_MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// Builds a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    service_url: Option<String>,
    connection: ConnectionConfig,
    max_lookup_redirects: u32,
    backoff: BackoffPolicy,
    memory_limit: usize,
    auto_update_partitions_interval: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            service_url: None,
            connection: ConnectionConfig::default(),
            max_lookup_redirects: DEFAULT_MAX_LOOKUP_REDIRECTS,
            backoff: BackoffPolicy::default(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            auto_update_partitions_interval: Duration::from_secs(60),
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

    /// Timeout of each broker operation (lookup, create, ...). Default 30 s.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.connection.operation_timeout = timeout;
        self
    }

    /// Timeout for opening a connection, handshake included. Default 10 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection.connect_timeout = timeout;
        self
    }

    /// Keep-alive interval of broker connections. Default 30 s.
    pub fn keepalive_interval(mut self, interval: Duration) -> Self {
        self.connection.keepalive_interval = interval;
        self
    }

    /// Authentication sent when connecting.
    pub fn authentication(mut self, auth: Authentication) -> Self {
        self.connection.auth = Some(auth);
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

    /// Memory all producers of this client may hold in pending messages (payload bytes).
    /// Default 64 MiB, like upstream.
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

    /// Validates the configuration and builds the client. No connection is opened yet.
    pub fn build(self) -> Result<Client> {
        let url = self
            .service_url
            .ok_or_else(|| Error::InvalidConfig("service_url is required".into()))?;
        let service_url = ServiceUrl::parse(&url)?;
        let c = &self.connection;
        for (name, d) in [
            ("operation_timeout", c.operation_timeout),
            ("connection_timeout", c.connect_timeout),
            ("keepalive_interval", c.keepalive_interval),
        ] {
            if d.is_zero() {
                return Err(Error::InvalidConfig(format!(
                    "{name} must be greater than zero"
                )));
            }
        }
        if service_url.is_tls() {
            return Err(Error::InvalidConfig(format!(
                "`{service_url}`: TLS (pulsar+ssl://) is not supported yet"
            )));
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
        let pool = Arc::new(ConnectionPool::new(self.connection));
        let lookup =
            LookupService::new(pool.clone(), service_url.clone(), self.max_lookup_redirects);
        Ok(Client {
            core: Arc::new(ClientCore::new(
                service_url,
                pool,
                lookup,
                operation_timeout,
                self.backoff,
                self.memory_limit,
                self.auto_update_partitions_interval,
            )),
        })
    }
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The service URL the client bootstraps from.
    pub fn service_url(&self) -> &ServiceUrl {
        &self.core.service_url
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

    /// Starts building a producer for `topic`.
    pub fn producer(&self, topic: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder::new(self.core.clone(), topic.into())
    }

    /// Starts building a consumer for `topic`.
    pub fn consumer(&self, topic: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(self.core.clone(), topic.into())
    }

    /// Starts building a reader for `topic`.
    pub fn reader(&self, topic: impl Into<String>) -> ReaderBuilder {
        ReaderBuilder::new(self.core.clone(), topic.into())
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
    /// Closing twice is fine; the client cannot be used afterwards.
    pub async fn close(&self) -> Result<()> {
        let timeout = self.core.operation_timeout();
        if self.core.shutdown(timeout).await {
            Ok(())
        } else {
            Err(Error::Timeout {
                operation: "client close",
                after: timeout,
            })
        }
    }
}
