//! The connection pool: one connection per broker, shared by everything that talks to it.
//!
//! Connections are keyed by (logical broker URL, physical address): normally both name the
//! same broker; through a proxy the physical address is the proxy and the logical URL is the
//! broker the proxy forwards to (`proxy_to_broker_url` in CONNECT). Concurrent callers asking
//! for the same key share one connection attempt; a closed connection is replaced on the next
//! request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::OnceCell;

use crate::connection::{Connection, ConnectionConfig, Connector};
use crate::error::{Error, Result};
use crate::service_url::{BrokerAddress, ServiceUrl};

/// Once the pool holds this many connections, opening another first closes those that serve
/// nobody (no producer, consumer or watcher registered, no request pending). Lookup answers
/// and broker closes name the brokers, so without this a broker naming ever new URLs would
/// grow the pool by a connection each time. (Upstream closes idle connections after
/// `connectionMaxIdleSeconds`.)
const SWEEP_AT: usize = 16;

/// Closes and forgets the connections that are closed or serve nobody.
fn sweep(slots: &mut HashMap<PoolKey, Slot>) {
    slots.retain(|key, slot| {
        let Some(conn) = slot.get() else {
            return true; // still connecting: someone is waiting for it
        };
        let stats = conn.stats();
        let idle = stats.registered_entities == 0 && stats.pending_requests == 0;
        if conn.is_closed() || idle {
            tracing::debug!(broker = %key.logical, "closing an idle pooled connection");
            // As lost, not closed: an entity that took it a moment ago (its attach not yet
            // registered) retries on a new one. Only the client's shutdown means `Closed`.
            conn.drop_as_lost("idle pooled connection closed");
            return false;
        }
        true
    });
}

/// What CONNECT's `proxy_to_broker_url` names: the logical broker as `host:port`, not as a
/// URL. Java `ClientCnx.setTargetBroker` formats `getHostString():port` (an IPv6 host keeps
/// the brackets `URI.getHost` gives it: `[::1]:6650`), and the proxy
/// (`BrokerProxyValidator.resolveAndCheckTargetAddress`) splits at the last `:` and refuses
/// anything it cannot resolve, such as `pulsar://host`.
fn proxy_target(logical: &ServiceUrl) -> String {
    logical.first_host().to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    /// The broker as named (its URL is only formatted when a connection is opened).
    logical: ServiceUrl,
    physical: BrokerAddress,
}

/// A connection being opened or open, with the cluster generation it belongs to (see
/// [`ConnectionPool::switch`]).
#[derive(Debug, Default)]
struct SlotCell {
    generation: u64,
    cell: OnceCell<Connection>,
}

impl std::ops::Deref for SlotCell {
    type Target = OnceCell<Connection>;
    fn deref(&self) -> &OnceCell<Connection> {
        &self.cell
    }
}

type Slot = Arc<SlotCell>;

/// The cluster the pool serves: its service URL and the generation of the switch that made
/// it current, always read together (one lock), so nothing pairs one cluster's URL with
/// another's generation.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// Bumped by every cluster switch: a connection asked for in an earlier generation, or
    /// opened for one, is never handed out.
    pub(crate) generation: u64,
    /// Where lookups go (Java `LookupService.getServiceUrl`). Shared: every lookup reads the
    /// cluster.
    pub(crate) service_url: Arc<ServiceUrl>,
}

/// What a connection to the current cluster is opened with: its credentials and TLS, and the
/// cluster itself.
#[derive(Debug, Clone)]
struct Settings {
    config: ConnectionConfig,
    /// Wraps connections to `pulsar+ssl://` brokers; `None` if the client has no TLS.
    tls: Option<Connector>,
    cluster: Cluster,
}

/// Why a connection of a previous cluster is refused or closed.
pub(crate) const SWITCHED: &str = "the client switched to another cluster";

/// One connection per broker (see the module docs).
#[derive(Debug)]
pub(crate) struct ConnectionPool {
    /// Written only with `slots` locked too (a switch), so a slot is made in the generation
    /// it names.
    settings: RwLock<Arc<Settings>>,
    /// The generation, also readable without a lock (the consumers' ack path; see
    /// [`generation_cell`](Self::generation_cell)); written with `settings`.
    generation_cell: Arc<AtomicU64>,
    slots: Mutex<HashMap<PoolKey, Slot>>,
    opened: AtomicUsize,
    /// Set by [`ConnectionPool::close_all`]: no new connections after the client is closed.
    closed: AtomicBool,
}

impl ConnectionPool {
    pub(crate) fn new(
        service_url: ServiceUrl,
        config: ConnectionConfig,
        tls: Option<Connector>,
    ) -> Self {
        ConnectionPool {
            settings: RwLock::new(Arc::new(Settings {
                config,
                tls,
                cluster: Cluster {
                    generation: 0,
                    service_url: Arc::new(service_url),
                },
            })),
            generation_cell: Arc::new(AtomicU64::new(0)),
            slots: Mutex::new(HashMap::new()),
            opened: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// How many connections this pool has opened so far.
    pub(crate) fn connections_opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }

    /// The connection to `logical`, reached at `physical` (the same broker unless proxied),
    /// for a caller that learnt of that broker in cluster generation `generation` (read with
    /// [`cluster`](Self::cluster) before its lookup). If the client has switched clusters
    /// since, nothing is opened: the answer is [`Error::ConnectionLost`] ([`SWITCHED`]), which
    /// callers retry, on the new cluster. The check is made under the lock a switch takes,
    /// so a connection of the cluster left is never handed out.
    pub(crate) async fn get(
        &self,
        generation: u64,
        logical: &ServiceUrl,
        physical: &BrokerAddress,
    ) -> Result<Connection> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if logical.is_tls() && self.settings().tls.is_none() {
            return Err(Error::InvalidConfig(format!(
                "`{logical}` needs TLS, but the client has none (a pulsar+ssl:// service \
                 URL turns it on; it needs the `tls` cargo feature)"
            )));
        }
        let key = PoolKey {
            logical: logical.clone(),
            physical: physical.clone(),
        };
        // Two rounds at most: a cached connection found closed is replaced once.
        for _ in 0..2 {
            let (slot, settings) = self.slot(generation, &key)?;
            let tls = settings.tls.as_ref().filter(|_| logical.is_tls());
            let conn = slot
                .get_or_try_init(|| async {
                    let proxy_to =
                        (logical.first_host() != physical).then(|| proxy_target(logical));
                    let conn = open(
                        physical.clone(),
                        key.logical.to_string(),
                        proxy_to,
                        settings.config.clone(),
                        tls.cloned(),
                    )
                    .await;
                    crate::stats::sink::connection_attempt(conn.is_ok());
                    let conn = conn?;
                    self.opened.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, Error>(conn)
                })
                .await?;
            if slot.generation != self.generation() {
                // Opened for the cluster the client just left (its slot is gone from the map
                // with the switch): closed, and the caller retries on the new one.
                conn.drop_as_lost(SWITCHED);
                return Err(Error::ConnectionLost(SWITCHED.into()));
            }
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
            self.evict(&key, &slot);
        }
        Err(Error::ConnectionLost(format!(
            "connection to {physical} closed right after opening"
        )))
    }

    fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The slot of `key`, and the settings of its generation (read under the same lock a
    /// switch takes, so they match); refused if `generation` is no longer the pool's.
    fn slot(&self, generation: u64, key: &PoolKey) -> Result<(Slot, Arc<Settings>)> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let settings = self.settings();
        if settings.cluster.generation != generation {
            return Err(Error::ConnectionLost(SWITCHED.into()));
        }
        if !slots.contains_key(key) && slots.len() >= SWEEP_AT {
            sweep(&mut slots);
        }
        let slot = slots
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(SlotCell {
                    generation,
                    cell: OnceCell::new(),
                })
            })
            .clone();
        Ok((slot, settings))
    }

    /// Moves the pool to the cluster at `service_url` (Java `PulsarClientImpl.updateServiceUrl`,
    /// which updates the lookup service's URL and calls `ConnectionPool.closeAllConnections`):
    /// lookups go there, new connections are opened with `auth` and `tls` (`None`: keep the
    /// TLS connector), and every connection open now is closed as lost, so everything on it
    /// reconnects through its usual path. URL, credentials and generation change under one
    /// lock: nobody sees the new URL with the old generation, or the reverse. A connection
    /// still being opened is refused when it completes. Returns the new generation.
    pub(crate) fn switch(
        &self,
        service_url: ServiceUrl,
        auth: Option<crate::auth::SharedAuthProvider>,
        tls: Option<Connector>,
    ) -> u64 {
        let (taken, generation) = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let mut shared = self.settings.write().unwrap_or_else(|e| e.into_inner());
            let mut settings = Settings::clone(&shared);
            settings.config.auth = auth;
            if tls.is_some() {
                settings.tls = tls;
            }
            settings.cluster = Cluster {
                generation: settings.cluster.generation + 1,
                service_url: Arc::new(service_url),
            };
            let generation = settings.cluster.generation;
            *shared = Arc::new(settings);
            self.generation_cell.store(generation, Ordering::Release);
            (std::mem::take(&mut *slots), generation)
        };
        for slot in taken.values() {
            if let Some(conn) = slot.get() {
                conn.drop_as_lost(SWITCHED);
            }
        }
        generation
    }

    /// The cluster served now: its generation and service URL, read together. A caller reads
    /// it before a lookup and hands the generation to [`get`](Self::get).
    pub(crate) fn cluster(&self) -> Cluster {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cluster
            .clone()
    }

    /// The generation as a shared cell, for readers that must not take the pool's lock (the
    /// consumers' ack path). It changes under that lock, with the service URL.
    pub(crate) fn generation_cell(&self) -> Arc<AtomicU64> {
        self.generation_cell.clone()
    }

    /// The generation of [`cluster`](Self::cluster): the number of cluster switches so far.
    pub(crate) fn generation(&self) -> u64 {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .cluster
            .generation
    }

    fn evict(&self, key: &PoolKey, slot: &Slot) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            slots.remove(key);
        }
    }

    /// The live connections' counters (pending requests, registered entities).
    pub(crate) fn stats(&self) -> Vec<crate::connection::ConnectionStats> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .values()
            .filter_map(|s| s.get())
            .filter(|c| !c.is_closed())
            .map(|c| c.stats())
            .collect()
    }

    /// Closes every connection; no new ones are opened afterwards.
    pub(crate) fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        let slots = std::mem::take(&mut *self.slots.lock().unwrap_or_else(|e| e.into_inner()));
        for slot in slots.values() {
            if let Some(conn) = slot.get() {
                conn.close();
            }
        }
    }
}

/// Opens a connection (TCP, TLS, the CONNECT handshake) in a task of its own, so its deep
/// chain of futures is polled on that task's stack, not under the lookup or create that asked
/// for it (a debug build's handshake alone takes ~100 KB of stack). The attempt is aborted if
/// the caller stops waiting, as it was when it ran inline.
async fn open(
    physical: BrokerAddress,
    logical: String,
    proxy_to: Option<String>,
    config: ConnectionConfig,
    tls: Option<Connector>,
) -> Result<Connection> {
    let task = tokio::spawn(async move {
        Connection::connect(
            &physical.host,
            physical.port,
            &logical,
            proxy_to.as_deref(),
            &config,
            tls.as_ref(),
        )
        .await
    });
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(result) => result,
        Err(e) => Err(Error::ConnectionLost(format!(
            "the connection attempt failed: {e}"
        ))),
    }
}

/// Aborts a task when dropped (never blocks, never spawns).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_target_is_host_colon_port_with_ipv6_in_brackets() {
        let target = |url: &str| proxy_target(&ServiceUrl::from_broker_url(url).unwrap());
        assert_eq!(
            target("pulsar://broker-1.internal:6650"),
            "broker-1.internal:6650"
        );
        assert_eq!(target("pulsar://10.0.0.7:6650"), "10.0.0.7:6650");
        assert_eq!(target("pulsar+ssl://broker-1:6651"), "broker-1:6651");
        // Java `getHostString()` of a host taken from `URI.getHost()` keeps the brackets; the
        // proxy splits at the last `:`, so the port is still found.
        assert_eq!(target("pulsar://[::1]:6650"), "[::1]:6650");
        assert_eq!(target("pulsar://[fe80::1]:6650"), "[fe80::1]:6650");
        // No scheme, whatever the logical URL's.
        assert!(!target("pulsar://h:1").contains("://"));
    }

    /// A caller that read the cluster before a switch (its lookup was under way) and asks for
    /// a connection after it gets none: nothing is opened to the cluster left, and the pool
    /// answers a retriable error; the new generation gets its connections.
    #[tokio::test]
    async fn a_connection_asked_for_in_a_generation_left_is_never_opened() {
        use crate::mock::MockBroker;
        let (a, b) = (
            MockBroker::start().await.unwrap(),
            MockBroker::start().await.unwrap(),
        );
        let url = |m: &MockBroker| ServiceUrl::parse(&m.service_url()).unwrap();
        let pool = ConnectionPool::new(url(&a), ConnectionConfig::default(), None);
        let before = pool.cluster();
        assert_eq!((before.generation, &*before.service_url), (0, &url(&a)));

        assert_eq!(pool.switch(url(&b), None, None), 1);
        let after = pool.cluster();
        assert_eq!((after.generation, &*after.service_url), (1, &url(&b)));

        let (a_url, a_host) = (url(&a), url(&a).first_host().clone());
        let stale = pool.get(before.generation, &a_url, &a_host).await;
        assert!(
            matches!(&stale, Err(Error::ConnectionLost(m)) if m == SWITCHED),
            "{stale:?}"
        );
        assert!(stale.unwrap_err().is_retriable());
        assert_eq!(pool.connections_opened(), 0);
        assert_eq!(
            a.accepted_connections(),
            0,
            "nothing opened to the cluster left"
        );

        let b_url = url(&b);
        pool.get(after.generation, &b_url, b_url.first_host())
            .await
            .unwrap();
        assert_eq!(pool.connections_opened(), 1);
    }
}
