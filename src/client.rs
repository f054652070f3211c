//! The [`Client`]: the entry point of the SDK, holding the connection pool and lookup service.

use std::sync::Arc;
use std::time::Duration;

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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    service_url: ServiceUrl,
    pool: Arc<ConnectionPool>,
    lookup: LookupService,
}

/// Builds a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    service_url: Option<String>,
    connection: ConnectionConfig,
    max_lookup_redirects: u32,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            service_url: None,
            connection: ConnectionConfig::default(),
            max_lookup_redirects: DEFAULT_MAX_LOOKUP_REDIRECTS,
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
        let pool = Arc::new(ConnectionPool::new(self.connection));
        let lookup =
            LookupService::new(pool.clone(), service_url.clone(), self.max_lookup_redirects);
        Ok(Client {
            inner: Arc::new(Inner {
                service_url,
                pool,
                lookup,
            }),
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
        &self.inner.service_url
    }

    /// Finds the broker that serves `topic` (following redirects).
    pub async fn lookup_topic(&self, topic: &str) -> Result<BrokerLookup> {
        let topic = TopicName::new(topic)?;
        self.inner.lookup.lookup(&topic).await
    }

    /// The number of partitions of `topic`; 0 means it is not partitioned.
    pub async fn partitioned_topic_metadata(&self, topic: &str) -> Result<u32> {
        let topic = TopicName::new(topic)?;
        self.inner.lookup.partitioned_metadata(&topic).await
    }

    /// The partitions of `topic` (just the topic itself if it is not partitioned), like the
    /// upstream `getPartitionsForTopic`.
    pub async fn partitions_for_topic(&self, topic: &str) -> Result<Vec<TopicName>> {
        let topic = TopicName::new(topic)?;
        let n = self.inner.lookup.partitioned_metadata(&topic).await?;
        if n == 0 {
            Ok(vec![topic])
        } else {
            Ok((0..n).map(|i| topic.partition(i)).collect())
        }
    }

    /// How many broker connections this client has opened so far.
    pub fn connections_opened(&self) -> usize {
        self.inner.pool.connections_opened()
    }

    /// Closes every connection of this client.
    pub fn close(&self) {
        self.inner.pool.close_all();
    }
}
