//! Service discovery over the binary protocol: topic lookup (following redirects) and
//! partitioned-topic metadata.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::connection::Connection;
use crate::error::{Error, Result, ServerError};
use crate::pool::{Cluster, ConnectionPool};
use crate::proto::{
    command_lookup_topic_response::LookupType,
    command_partitioned_topic_metadata_response::LookupType as MetadataResult,
};
use crate::service_url::{BrokerAddress, ServiceUrl};
use crate::topic::TopicName;

/// Upstream's default bound on lookup redirects (`maxLookupRedirects`).
pub(crate) const DEFAULT_MAX_LOOKUP_REDIRECTS: u32 = 20;

/// The largest partition count a client accepts from a broker by default (partitioned
/// metadata, a polled count, a PIP-247 update); `ClientBuilder::max_partitions` sets it.
///
/// Upstream brokers bound it only if configured: `maxNumPartitionsPerPartitionedTopic`
/// defaults to 0 (no limit), and the count is a signed 32-bit int there. A client that took any
/// count at face value would start that many concurrent creates (connections, lookups, memory)
/// on one bad or hostile answer, so this is a hard client bound: 65,536 partitions is far above
/// any deployment upstream documents (hundreds to a few thousand per topic) while keeping a
/// topic's producers/consumers within what one process can hold.
pub(crate) const MAX_PARTITIONS: u32 = 65_536;

/// `partitions` for `topic` if within `max` (the client's `max_partitions`), otherwise an
/// error naming both.
pub(crate) fn check_partition_count(topic: &str, partitions: u32, max: u32) -> Result<u32> {
    if partitions > max {
        return Err(Error::Protocol(format!(
            "topic {topic}: the broker reports {partitions} partitions, more than the client \
             accepts ({max}, its max_partitions); refused"
        )));
    }
    Ok(partitions)
}

/// What a failed lookup or metadata answer says about the connection it came on.
///
/// Java `ClientCnx.checkServerError` (called from `handleLookupResponse` and
/// `handlePartitionResponse`): `ServiceNotReady` means the broker is not ready to serve (starting,
/// shutting down, losing its metadata session), so the connection is closed; the entities on it
/// reconnect, and the next lookup opens a fresh connection (to the next service host).
fn check_server_error(conn: &Connection, code: ServerError) {
    if code == ServerError::ServiceNotReady {
        tracing::warn!(broker = %conn.info().broker_url, "lookup answered ServiceNotReady; closing the connection");
        conn.drop_as_lost("the broker answered a lookup with ServiceNotReady");
    }
}

/// Where a topic is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLookup {
    /// The broker that owns the topic (its service URL).
    pub logical_url: ServiceUrl,
    /// Where to open the TCP connection: the broker itself, or the service URL's host when the
    /// broker asked to be reached through the proxy (`proxy_through_service_url`).
    pub physical_address: BrokerAddress,
    /// Whether the connection goes through a proxy.
    pub proxied: bool,
}

/// Binary lookups against the service URL's brokers.
#[derive(Debug)]
pub(crate) struct LookupService {
    /// Also where the service URL lives: the pool's [`Cluster`], replaced by a switch.
    pool: Arc<ConnectionPool>,
    max_redirects: u32,
    /// The client's `max_partitions`.
    max_partitions: u32,
    next_host: AtomicUsize,
    /// Topic lookups in flight, shared by concurrent callers, by (pool generation, topic): a
    /// lookup begun before a cluster switch is not joined after it.
    lookups: InFlight<(u64, TopicName), BrokerLookup>,
    /// Partitioned-metadata requests in flight, by (pool generation, topic, auto-create).
    metadata: InFlight<(u64, TopicName, bool), u32>,
    /// Broker URLs of lookup answers, parsed (see [`BrokerUrls`]).
    broker_urls: BrokerUrls,
}

impl LookupService {
    pub(crate) fn new(pool: Arc<ConnectionPool>, max_redirects: u32, max_partitions: u32) -> Self {
        LookupService {
            pool,
            max_redirects,
            max_partitions,
            next_host: AtomicUsize::new(0),
            lookups: InFlight::default(),
            metadata: InFlight::default(),
            broker_urls: BrokerUrls::default(),
        }
    }

    /// The most partitions a topic may have (the client's `max_partitions`).
    pub(crate) fn max_partitions(&self) -> u32 {
        self.max_partitions
    }

    /// The cluster's service URL host to use next (round-robin over the host list).
    fn service_host(&self, cluster: &Cluster) -> (ServiceUrl, BrokerAddress) {
        let url = &cluster.service_url;
        let hosts = url.hosts();
        let i = self.next_host.fetch_add(1, Ordering::Relaxed) % hosts.len();
        let host = hosts[i].clone();
        (url.with_host(host.clone()), host)
    }

    /// A connection to one of the service URL's brokers (for lookups and metadata), in the
    /// cluster the client uses now.
    pub(crate) async fn service_connection(&self) -> Result<Connection> {
        self.service_connection_in(&self.pool.cluster()).await
    }

    /// [`service_connection`](Self::service_connection) in `cluster` (refused once the client
    /// has switched away from it).
    async fn service_connection_in(&self, cluster: &Cluster) -> Result<Connection> {
        let (url, host) = self.service_host(cluster);
        self.pool.get(cluster.generation, &url, &host).await
    }

    /// Finds the broker serving `topic`, following redirects up to the configured bound.
    /// Concurrent lookups of one topic share one LOOKUP (Java `BinaryProtoLookupService`'s
    /// `lookupInProgress`), its answer or its error.
    pub(crate) async fn lookup(&self, topic: &TopicName) -> Result<BrokerLookup> {
        self.lookup_in(&self.pool.cluster(), topic).await
    }

    /// [`lookup`](Self::lookup) in `cluster`: every connection it takes is asked for in that
    /// cluster's generation, so a switch during the lookup fails it with a retriable
    /// [`Error::ConnectionLost`] instead of opening a connection to the cluster left.
    pub(crate) async fn lookup_in(
        &self,
        cluster: &Cluster,
        topic: &TopicName,
    ) -> Result<BrokerLookup> {
        self.lookups
            .run((cluster.generation, topic.clone()), || async {
                let started = tokio::time::Instant::now();
                let r = self.lookup_uncounted(cluster, topic).await;
                crate::stats::sink::lookup("topic", started.elapsed(), r.is_ok());
                r
            })
            .await
    }

    async fn lookup_uncounted(&self, cluster: &Cluster, topic: &TopicName) -> Result<BrokerLookup> {
        let (mut logical, mut physical) = self.service_host(cluster);
        let mut authoritative = false;
        let mut redirects = 0u32;
        loop {
            let conn = self
                .pool
                .get(cluster.generation, &logical, &physical)
                .await?;
            let request_id = conn.new_request_id();
            let cmd = crate::commands::lookup(topic.as_str(), request_id, authoritative);
            let response = conn.request(request_id, cmd, "lookup").await?;
            let r = response.lookup_topic_response.ok_or_else(|| {
                Error::Protocol("lookup answered without a LookupTopicResponse".into())
            })?;
            let kind = r.response.and_then(|k| LookupType::try_from(k).ok());
            match kind {
                Some(LookupType::Failed) | None => {
                    let code = ServerError::from_code(r.error.unwrap_or(0));
                    check_server_error(&conn, code);
                    return Err(Error::Broker {
                        code,
                        message: r.message.unwrap_or_else(|| "lookup failed".into()),
                    });
                }
                Some(kind) => {
                    let broker = self.broker_urls.parse(
                        r.broker_service_url.as_deref(),
                        r.broker_service_url_tls.as_deref(),
                        logical.is_tls(),
                    )?;
                    let proxied = r.proxy_through_service_url.unwrap_or(false);
                    let next_physical = if proxied {
                        self.service_host(cluster).1
                    } else {
                        broker.first_host().clone()
                    };
                    if kind == LookupType::Connect {
                        tracing::debug!(%topic, broker = %broker, proxied, "lookup done");
                        return Ok(BrokerLookup {
                            logical_url: broker,
                            physical_address: next_physical,
                            proxied,
                        });
                    }
                    redirects += 1;
                    if redirects > self.max_redirects {
                        return Err(Error::Lookup {
                            topic: topic.to_string(),
                            reason: format!(
                                "too many redirects (more than {}), last to {broker}",
                                self.max_redirects
                            ),
                        });
                    }
                    tracing::debug!(%topic, to = %broker, redirects, "lookup redirected");
                    authoritative = r.authoritative.unwrap_or(false);
                    logical = broker;
                    physical = next_physical;
                }
            }
        }
    }

    /// The number of partitions of `topic` (0 for a non-partitioned topic). A count above
    /// [`MAX_PARTITIONS`] is an error (never that many
    /// creates).
    pub(crate) async fn partitioned_metadata(&self, topic: &TopicName) -> Result<u32> {
        self.partitioned_metadata_with(topic, true).await
    }

    /// [`partitioned_metadata`](Self::partitioned_metadata); with `auto_create = false` the
    /// broker is asked not to create the topic's metadata (PIP-344), like upstream's
    /// `getPartitionedTopicMetadata(topic, metadataAutoCreationEnabled = false,
    /// useFallbackForNonPIP344Brokers = true)`: sent only to a broker that advertises
    /// `supports_get_partitioned_metadata_without_auto_creation` (an older one is asked the
    /// old way). A topic that does not exist is then TopicNotFound.
    pub(crate) async fn partitioned_metadata_with(
        &self,
        topic: &TopicName,
        auto_create: bool,
    ) -> Result<u32> {
        // Shared by concurrent callers like lookups (Java's `partitionedMetadataInProgress`).
        let cluster = self.pool.cluster();
        self.metadata
            .run((cluster.generation, topic.clone(), auto_create), || async {
                let started = tokio::time::Instant::now();
                let r = self
                    .partitioned_metadata_uncounted(&cluster, topic, auto_create)
                    .await;
                crate::stats::sink::lookup("metadata", started.elapsed(), r.is_ok());
                r
            })
            .await
    }

    async fn partitioned_metadata_uncounted(
        &self,
        cluster: &Cluster,
        topic: &TopicName,
        auto_create: bool,
    ) -> Result<u32> {
        let conn = self.service_connection_in(cluster).await?;
        let request_id = conn.new_request_id();
        let auto_creation = (!auto_create
            && conn
                .info()
                .features
                .supports_get_partitioned_metadata_without_auto_creation)
            .then_some(false);
        let cmd = crate::commands::partitioned_metadata(topic.as_str(), request_id, auto_creation);
        let response = conn
            .request(request_id, cmd, "partitioned topic metadata")
            .await?;
        let r = response.partition_metadata_response.ok_or_else(|| {
            Error::Protocol("metadata answered without a PartitionMetadataResponse".into())
        })?;
        // Java `ClientCnx.handlePartitionResponse`: an answer without a result (or with an
        // unknown one) is a failure like `Failed` ("Empty lookup response" when it names no
        // error), never a count of 0, which would make a partitioned topic look plain.
        match r.response.and_then(|k| MetadataResult::try_from(k).ok()) {
            Some(MetadataResult::Success) => check_partition_count(
                topic.as_str(),
                r.partitions.unwrap_or(0),
                self.max_partitions,
            ),
            Some(MetadataResult::Failed) | None => {
                let code = ServerError::from_code(r.error.unwrap_or(0));
                check_server_error(&conn, code);
                let fallback = if r.error.is_some() {
                    "partitioned metadata failed"
                } else {
                    "empty partitioned metadata response"
                };
                Err(Error::Broker {
                    code,
                    message: r.message.unwrap_or_else(|| fallback.into()),
                })
            }
        }
    }
}

/// The broker URLs lookup answers named lately, parsed: a cluster has few brokers, and every
/// lookup answer names one of them, so the URL is parsed once per broker rather than once per
/// lookup (with tens of thousands of producers created at once, parsing was a tenth of the
/// client's work per create). Bounded in bytes: at most [`BrokerUrls::MAX`] entries (when
/// full, the oldest goes), each of at most [`BrokerUrls::MAX_KEY_BYTES`] of URL text (the
/// broker picks the strings; a longer answer is parsed every time, never kept).
#[derive(Debug, Default)]
struct BrokerUrls(Mutex<VecDeque<(BrokerUrlKey, ServiceUrl)>>);

/// A lookup answer's `brokerServiceUrl`, `brokerServiceUrlTls`, and whether the client uses
/// TLS: all [`ServiceUrl::from_lookup_response`] reads.
type BrokerUrlKey = (Option<Box<str>>, Option<Box<str>>, bool);

impl BrokerUrls {
    /// The most answers remembered (far more brokers than a cluster usually has).
    const MAX: usize = 64;
    /// The most URL text an answer remembered may hold (both URLs together; a real one is a
    /// host name and a port, tens of bytes).
    const MAX_KEY_BYTES: usize = 1024;

    /// [`ServiceUrl::from_lookup_response`], remembered.
    fn parse(&self, url: Option<&str>, url_tls: Option<&str>, use_tls: bool) -> Result<ServiceUrl> {
        let same =
            |k: &BrokerUrlKey| k.0.as_deref() == url && k.1.as_deref() == url_tls && k.2 == use_tls;
        let lock = || self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, parsed)) = lock().iter().find(|(k, _)| same(k)) {
            return Ok(parsed.clone());
        }
        // Parsed without the lock (concurrent answers do not wait for it). Only what parses
        // is kept: an invalid URL is refused again, with its reason.
        let parsed = ServiceUrl::from_lookup_response(url, url_tls, use_tls)?;
        let text = url.map_or(0, str::len) + url_tls.map_or(0, str::len);
        if text > Self::MAX_KEY_BYTES {
            return Ok(parsed);
        }
        let mut known = lock();
        if known.iter().any(|(k, _)| same(k)) {
            return Ok(parsed);
        }
        if known.len() >= Self::MAX {
            known.pop_front();
        }
        known.push_back((
            (url.map(Into::into), url_tls.map(Into::into), use_tls),
            parsed.clone(),
        ));
        Ok(parsed)
    }
}

/// Requests in flight by key: the first caller for a key (the leader) sends the request and
/// publishes its result; callers arriving meanwhile wait for that result instead of sending
/// their own. A leader dropped before it finishes (its caller cancelled) leaves the key, and
/// whoever waited tries again (one of them leading).
#[derive(Debug)]
struct InFlight<K, T> {
    calls: Mutex<HashMap<K, Call<T>>>,
    next_id: AtomicU64,
}

/// One request in flight: its leader's id and where its result appears.
type Call<T> = (u64, watch::Receiver<Option<Result<T>>>);

impl<K, T> Default for InFlight<K, T> {
    fn default() -> Self {
        InFlight {
            calls: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl<K: Eq + Hash + Clone, T: Clone> InFlight<K, T> {
    async fn run<F, Fut>(&self, key: K, request: F) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut request = Some(request);
        loop {
            let joined = {
                let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
                match calls.get(&key) {
                    // A closed channel is a leader dropped a moment ago: replace its entry.
                    Some((_, rx)) if rx.has_changed().is_ok() => Err(rx.clone()),
                    _ => {
                        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                        let (tx, rx) = watch::channel(None);
                        calls.insert(key.clone(), (id, rx));
                        Ok((id, tx))
                    }
                }
            };
            match joined {
                Ok((id, tx)) => {
                    let _leave = Leave {
                        flight: self,
                        key: &key,
                        id,
                    };
                    let Some(request) = request.take() else {
                        unreachable!("a caller leads at most once: it returns after leading");
                    };
                    let result = request().await;
                    let _ = tx.send(Some(result.clone()));
                    return result;
                }
                Err(mut rx) => match rx.wait_for(Option::is_some).await {
                    Ok(done) => {
                        if let Some(result) = done.as_ref() {
                            return result.clone();
                        }
                    }
                    // The leader was dropped before it finished: try again.
                    Err(_) => continue,
                },
            }
        }
    }
}

/// Removes a leader's entry when it finishes or is dropped (only its own: a later leader's
/// entry for the same key stays).
struct Leave<'a, K: Eq + Hash, T> {
    flight: &'a InFlight<K, T>,
    key: &'a K,
    id: u64,
}

impl<K: Eq + Hash, T> Drop for Leave<'_, K, T> {
    fn drop(&mut self) {
        let mut calls = self.flight.calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.get(self.key).is_some_and(|(id, _)| *id == self.id) {
            calls.remove(self.key);
            crate::util::shrink_after_burst(&mut calls);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_as_before_and_the_memo_stays_bounded() {
        let urls = BrokerUrls::default();
        let a = Some("pulsar://a:6650");
        let tls = Some("pulsar+ssl://a:6651");
        for _ in 0..2 {
            assert_eq!(
                urls.parse(a, tls, false).unwrap(),
                ServiceUrl::from_lookup_response(a, tls, false).unwrap()
            );
            // The same strings read with TLS name the other URL.
            assert_eq!(
                urls.parse(a, tls, true).unwrap(),
                ServiceUrl::parse("pulsar+ssl://a:6651").unwrap()
            );
            // What does not parse is refused every time, and not kept.
            assert!(matches!(
                urls.parse(Some("http://a:8080"), None, false),
                Err(Error::InvalidServiceUrl { .. })
            ));
            assert!(urls.parse(None, tls, false).is_err());
        }
        for i in 0..BrokerUrls::MAX * 2 {
            let url = format!("pulsar://b{i}:6650");
            assert_eq!(
                urls.parse(Some(&url), None, false).unwrap(),
                ServiceUrl::parse(&url).unwrap()
            );
        }
        assert_eq!(urls.0.lock().unwrap().len(), BrokerUrls::MAX);
        // A URL longer than the memo keeps is parsed but never kept, so a broker's answers
        // cannot grow the memo past its bytes.
        let long = format!("pulsar://{}:6650", "h".repeat(BrokerUrls::MAX_KEY_BYTES));
        let held = |urls: &BrokerUrls| -> usize {
            let known = urls.0.lock().unwrap();
            known
                .iter()
                .map(|(k, _)| {
                    k.0.as_deref().map_or(0, str::len) + k.1.as_deref().map_or(0, str::len)
                })
                .sum()
        };
        let before = held(&urls);
        assert_eq!(
            urls.parse(Some(&long), None, false).unwrap(),
            ServiceUrl::parse(&long).unwrap()
        );
        assert_eq!(held(&urls), before);
        assert!(before <= BrokerUrls::MAX * BrokerUrls::MAX_KEY_BYTES);
    }
}
