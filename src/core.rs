//! [`ClientCore`]: the state every producer, consumer, reader and watcher of one client shares
//! (connection pool, lookup, id allocators, backoff policy, memory limit, partition updates,
//! and the client-wide shutdown signal). It sits below the entities: it knows no producer or
//! consumer, so they can take it without importing the [`crate::Client`] handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use crate::backoff_policy::{Backoff, BackoffPolicy};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lookup::LookupService;
use crate::pool::ConnectionPool;
use crate::retry::{retry, AtDeadline, Schedule, Verdict};
use crate::service_info::ServiceInfo;
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;

/// A shared reference to the core (what entities hold).
pub(crate) type CoreRef = Arc<ClientCore>;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ClientCore {
    /// The cluster the client uses now; replaced by [`ClientCore::switch_service`].
    pub(crate) service: watch::Sender<ServiceInfo>,
    /// Serializes cluster switches.
    switching: std::sync::Mutex<()>,
    /// The client's TLS settings, from which a switch builds the connector of a cluster with
    /// its own trust file.
    #[cfg(feature = "tls")]
    pub(crate) tls_options: crate::connection::tls::TlsOptions,
    pub(crate) pool: Arc<ConnectionPool>,
    pub(crate) lookup: LookupService,
    pub(crate) operation_timeout: Duration,
    pub(crate) backoff: BackoffPolicy,
    pub(crate) memory: Arc<Semaphore>,
    pub(crate) memory_limit: usize,
    /// The consumers' bounded share of `memory` (see [`ConsumerShare`]).
    pub(crate) consumer_share: Arc<ConsumerShare>,
    /// The labels of this client's operator metrics.
    pub(crate) metric_labels: crate::stats::sink::LabelPolicy,
    next_producer_id: AtomicU64,
    next_consumer_id: AtomicU64,
    next_watcher_id: AtomicU64,
    pub(crate) partition_updates: Arc<crate::partitions::PartitionUpdates>,
    /// Set once the client is closing: every entity task closes itself gracefully.
    shutdown: watch::Sender<bool>,
    /// Entity tasks still running (for a graceful client close).
    live_tasks: watch::Sender<usize>,
    /// The client's cache of parsed writer schemas (the schema layer's type, made there on
    /// first use: this layer does not name it).
    #[cfg_attr(not(feature = "avro"), allow(dead_code))]
    pub(crate) schema_cache: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    /// `ClientBuilder::enable_transaction` (PIP-31): sent as `txn_enabled` when producers
    /// attach.
    #[cfg(feature = "transactions")]
    pub(crate) transactions: bool,
    /// OpenTelemetry tracing, when the application turned it on.
    #[cfg(feature = "opentelemetry")]
    pub(crate) tracing: Option<crate::otel::source::Tracing>,
}

/// The part of the client memory limit consumers may hold, all together: half of it
/// ([`CONSUMER_SHARE_DIVISOR`]). Consumers take from the limit (the same semaphore producers
/// wait on) only within this share and never wait for it, so a consume-then-produce pipeline
/// always keeps at least the other half for its sends: prefetch can never block the
/// application's own `send`, which would never return to `recv`.
///
/// Upstream differs: Java's `MemoryLimitController.forceReserveMemory` (called from
/// `ConsumerBase.increaseIncomingMessageSize`) adds every received message to the usage,
/// without bound, so a consumer's prefetch can starve the client's producers; only its
/// auto-scaled receiver queue looks at the usage (it grows while `currentUsagePercent` is under
/// `MEMORY_THRESHOLD_FOR_RECEIVER_QUEUE_SIZE_EXPANSION`, 75 %).
#[derive(Debug)]
pub(crate) struct ConsumerShare {
    memory: Arc<Semaphore>,
    /// The most bytes all consumers may hold of `memory` together.
    pub(crate) bytes: usize,
    /// What they hold now (taken from `memory`).
    held: std::sync::Mutex<usize>,
    /// The whole client memory limit (producers' and consumers').
    limit: usize,
    /// Bumped when room frees up while a consumer task waits for it (see
    /// [`ConsumerShare::room_freed`]).
    freed: watch::Sender<u64>,
    /// A consumer task withholds permits for want of room: the next
    /// [`room_freed`](Self::room_freed) wakes it.
    waiting: std::sync::atomic::AtomicBool,
}

/// Consumers together hold at most `memory_limit / CONSUMER_SHARE_DIVISOR` of the client
/// memory limit.
pub(crate) const CONSUMER_SHARE_DIVISOR: usize = 2;

impl ConsumerShare {
    pub(crate) fn new(memory: Arc<Semaphore>, memory_limit: usize) -> Self {
        ConsumerShare {
            memory,
            bytes: (memory_limit / CONSUMER_SHARE_DIVISOR).max(1),
            held: std::sync::Mutex::new(0),
            limit: memory_limit.max(1),
            freed: watch::Sender::new(0),
            waiting: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Room may have freed up for consumers: wakes every consumer task that withholds permits
    /// for want of it, if any does (otherwise two atomic loads). The one wake-up for every
    /// way bytes come back: a consumer's queued entries or chunks released (its own or another
    /// consumer's budget), a consumer's reservation or a watcher's queue given back to the
    /// limit ([`give_back`](Self::give_back)), a producer's pending messages released.
    pub(crate) fn room_freed(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.waiting.load(SeqCst) && self.waiting.swap(false, SeqCst) {
            self.freed.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    /// [`room_freed`](Self::room_freed), only if consumers could take some of the limit
    /// now ([`free`](Self::free)): for releases that change nothing else of their room (a
    /// producer's bytes given back to the limit).
    pub(crate) fn room_freed_if_free(&self) {
        if self.waiting.load(std::sync::atomic::Ordering::SeqCst) && self.free() > 0 {
            self.room_freed();
        }
    }

    /// Says a consumer task withholds permits until room frees up (call before reading the
    /// room once more, so a release in between is not missed).
    pub(crate) fn wait_for_room(&self) {
        self.waiting
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// A receiver woken by [`room_freed`](Self::room_freed) while a task waits for room.
    pub(crate) fn freed(&self) -> watch::Receiver<u64> {
        self.freed.subscribe()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, usize> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes up to `n` bytes of the limit without waiting: what is free of it, within what is
    /// left of the consumers' share. Returns what was taken.
    pub(crate) fn take(&self, n: usize) -> usize {
        let mut held = self.held();
        let n = n
            .min(self.bytes.saturating_sub(*held))
            .min(self.memory.available_permits())
            .min(u32::MAX as usize);
        if n == 0 {
            return 0;
        }
        match self.memory.try_acquire_many(n as u32) {
            Ok(p) => {
                p.forget();
                *held += n;
                n
            }
            // Taken by a producer in between: nothing this time.
            Err(_) => 0,
        }
    }

    /// The part of the whole client memory limit in use now (producers' and consumers'), from
    /// 0 to 1, like Java's `MemoryLimitController.currentUsagePercent`.
    pub(crate) fn usage(&self) -> f64 {
        let free = self.memory.available_permits().min(self.limit);
        (self.limit - free) as f64 / self.limit as f64
    }

    /// What [`take`](Self::take) could take now.
    pub(crate) fn free(&self) -> usize {
        let held = self.held();
        self.bytes
            .saturating_sub(*held)
            .min(self.memory.available_permits())
    }

    /// Gives back `n` bytes taken with [`take`](Self::take) (producers waiting are woken).
    pub(crate) fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut held = self.held();
        let n = n.min(*held);
        *held -= n;
        self.memory.add_permits(n);
        drop(held);
        self.room_freed();
    }
}

/// Held by each entity task while it runs; the client's close waits for all to drop.
#[derive(Debug)]
pub(crate) struct TaskGuard {
    live: watch::Sender<usize>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.live.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl ClientCore {
    pub(crate) fn new(
        service_url: ServiceUrl,
        pool: Arc<ConnectionPool>,
        lookup: LookupService,
        operation_timeout: Duration,
        backoff: BackoffPolicy,
        memory_limit: usize,
        partitions_interval: Duration,
    ) -> Self {
        // The lookup's bound is the client's `max_partitions`: one bound for both.
        let max_partitions = lookup.max_partitions();
        let memory = Arc::new(Semaphore::new(memory_limit));
        ClientCore {
            service: watch::Sender::new(ServiceInfo::from_parts(service_url, None, None)),
            switching: std::sync::Mutex::new(()),
            #[cfg(feature = "tls")]
            tls_options: Default::default(),
            pool,
            lookup,
            operation_timeout,
            backoff,
            consumer_share: Arc::new(ConsumerShare::new(memory.clone(), memory_limit)),
            memory,
            memory_limit,
            metric_labels: Default::default(),
            next_producer_id: AtomicU64::new(0),
            next_consumer_id: AtomicU64::new(0),
            next_watcher_id: AtomicU64::new(0),
            partition_updates: crate::partitions::PartitionUpdates::new(
                partitions_interval,
                max_partitions,
            ),
            shutdown: watch::Sender::new(false),
            live_tasks: watch::Sender::new(0),
            schema_cache: std::sync::OnceLock::new(),
            #[cfg(feature = "transactions")]
            transactions: false,
            #[cfg(feature = "opentelemetry")]
            tracing: None,
        }
    }

    /// Whether the client has transactions on (always `false` without the feature).
    pub(crate) fn transactions_enabled(&self) -> bool {
        #[cfg(feature = "transactions")]
        return self.transactions;
        #[cfg(not(feature = "transactions"))]
        false
    }

    pub(crate) fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    pub(crate) fn backoff_policy(&self) -> &BackoffPolicy {
        &self.backoff
    }

    /// A fresh backoff sequence with the client's policy.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(&self.backoff)
    }

    pub(crate) fn new_producer_id(&self) -> u64 {
        self.next_producer_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn new_consumer_id(&self) -> u64 {
        self.next_consumer_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn new_watcher_id(&self) -> u64 {
        self.next_watcher_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn partition_updates(&self) -> &Arc<crate::partitions::PartitionUpdates> {
        &self.partition_updates
    }

    /// The number of partitions of `topic` (0: not partitioned).
    ///
    /// Retriable failures (no connection to the broker, a timeout, a retriable broker error)
    /// are retried with the client's backoff until the operation timeout, like upstream's
    /// `BinaryProtoLookupService.getPartitionedTopicMetadata` (which retries with a backoff
    /// bounded by the remaining operation time); then the last error is returned.
    pub(crate) async fn partitioned_topic_metadata(&self, topic: &str) -> Result<u32> {
        self.partitioned_topic_metadata_with(topic, true).await
    }

    /// [`partitioned_topic_metadata`](Self::partitioned_topic_metadata), asking the broker not
    /// to create the topic when `auto_create` is false (see
    /// [`LookupService::partitioned_metadata_with`](crate::lookup::LookupService::partitioned_metadata_with)).
    pub(crate) async fn partitioned_topic_metadata_with(
        &self,
        topic: &str,
        auto_create: bool,
    ) -> Result<u32> {
        self.partitioned_metadata_of(&TopicName::new(topic)?, auto_create)
            .await
    }

    /// [`partitioned_topic_metadata_with`](Self::partitioned_topic_metadata_with) of a name
    /// already parsed.
    pub(crate) async fn partitioned_metadata_of(
        &self,
        topic: &TopicName,
        auto_create: bool,
    ) -> Result<u32> {
        let deadline = crate::util::deadline_after(self.operation_timeout);
        // Never past the deadline: the last attempt is made at it.
        let schedule = Schedule::until(deadline, AtDeadline::LastAttemptAt);
        retry(
            &mut self.backoff(),
            schedule,
            || self.lookup.partitioned_metadata_with(topic, auto_create),
            |e| {
                if e.is_retriable() && !self.is_shut_down() {
                    tracing::debug!(%topic, error = %e, "partitioned metadata failed; retrying");
                    Verdict::Retry
                } else {
                    Verdict::Fail
                }
            },
        )
        .await
    }

    /// A connection to one of the service URL's brokers (lookups, metadata, watchers).
    pub(crate) async fn lookup_service_connection(&self) -> Result<Connection> {
        self.lookup.service_connection().await
    }

    /// The connection to a broker named by URL (PIP-307 assigned broker), without lookup.
    /// `generation` is the cluster generation in which the broker was named (that of the
    /// connection the close came on): once the client has switched clusters, the broker is
    /// one of the cluster left, and the answer is a retriable [`Error::ConnectionLost`].
    pub(crate) async fn connection_to(
        &self,
        broker: &ServiceUrl,
        generation: u64,
    ) -> Result<(Connection, u64)> {
        let conn = self
            .pool
            .get(generation, broker, broker.first_host())
            .await?;
        Ok((conn, generation))
    }

    /// The connection to the broker serving `topic` (lookup, then the pool), and the cluster
    /// generation it belongs to. The lookup and the connection are made in the generation
    /// read first: if the client switches clusters meanwhile, the answer (which may name a
    /// broker of the cluster left) is never connected to; the caller gets a retriable
    /// [`Error::ConnectionLost`] and retries, on the new cluster.
    pub(crate) async fn connection_for(&self, topic: &TopicName) -> Result<(Connection, u64)> {
        let cluster = self.pool.cluster();
        let found = self.lookup.lookup_in(&cluster, topic).await?;
        let conn = self
            .pool
            .get(
                cluster.generation,
                &found.logical_url,
                &found.physical_address,
            )
            .await?;
        Ok((conn, cluster.generation))
    }

    /// Moves the client to the cluster `info` names (see `Client::update_service_info`):
    /// lookups go to its service URL, new connections carry its credentials and TLS trust,
    /// and every connection open now closes as lost, so every producer, consumer, reader and
    /// watcher reconnects through its usual path, to the new cluster. Fails (and nothing
    /// changes) if the client is closed or `info`'s TLS settings cannot be loaded.
    pub(crate) fn switch_service(&self, info: ServiceInfo) -> Result<()> {
        let _one_at_a_time = self.switching.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_shut_down() {
            return Err(Error::Closed);
        }
        let tls = self.tls_for(&info)?;
        let from = self.service.borrow().service_url().clone();
        // The lookups' URL, the credentials and the generation change together (one lock in
        // the pool); then every connection to the old cluster closes, and whatever reconnects
        // looks up on the new one.
        let switches = self
            .pool
            .switch(info.service_url().clone(), info.auth().cloned(), tls);
        tracing::info!(from = %from, to = %info.service_url(), switches,
            "switched to another cluster");
        self.service.send_replace(info);
        Ok(())
    }

    /// The TLS connector for `info`'s cluster: for a `pulsar+ssl://` URL (or a trust file of
    /// its own) built anew from the client's TLS options with the cluster's trust file, so a
    /// cluster without one trusts what the client was built with, never the trust file of the
    /// cluster switched from; `None` (a plain URL) keeps the pool's.
    #[cfg(feature = "tls")]
    fn tls_for(&self, info: &ServiceInfo) -> Result<Option<crate::connection::Connector>> {
        if info.tls_trust_certs_file_path().is_none() && !info.service_url().is_tls() {
            return Ok(None);
        }
        let mut options = self.tls_options.clone();
        if let Some(path) = info.tls_trust_certs_file_path() {
            options.trust_certs_file_path = Some(path.to_path_buf());
        }
        crate::connection::tls::TlsConnector::new(&options).map(Some)
    }

    #[cfg(not(feature = "tls"))]
    fn tls_for(&self, info: &ServiceInfo) -> Result<Option<crate::connection::Connector>> {
        if info.service_url().is_tls() {
            return Err(Error::InvalidConfig(format!(
                "`{}`: TLS (pulsar+ssl://) needs the `tls` cargo feature",
                info.service_url()
            )));
        }
        Ok(None)
    }

    /// Registers a running entity task; drop the guard when the task ends.
    pub(crate) fn task_started(&self) -> TaskGuard {
        self.live_tasks.send_modify(|n| *n += 1);
        TaskGuard {
            live: self.live_tasks.clone(),
        }
    }

    /// Resolves once the client is closing (at once if it already is).
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Tells every entity to close, waits (up to `timeout`) until their tasks have ended, then
    /// closes every connection. Returns whether every task ended in time.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> bool {
        self.shutdown.send_replace(true);
        let mut live = self.live_tasks.subscribe();
        let done = tokio::time::timeout(timeout, live.wait_for(|n| *n == 0))
            .await
            .is_ok();
        self.pool.close_all();
        done
    }
}

/// The client's watchers queue what brokers push within the consumers' share of the memory
/// limit: like a consumer's queue, what they hold is consumed on the client's side, and it
/// never takes from the producers' half.
impl crate::connection::QueueMemory for ConsumerShare {
    fn take(&self, n: usize) -> usize {
        ConsumerShare::take(self, n)
    }
    fn give_back(&self, n: usize) {
        ConsumerShare::give_back(self, n)
    }
}

impl crate::watcher::WatchHost for ClientCore {
    fn backoff_policy(&self) -> BackoffPolicy {
        self.backoff
    }

    fn new_watcher_id(&self) -> u64 {
        ClientCore::new_watcher_id(self)
    }

    fn service_connection(self: Arc<Self>) -> crate::watcher::Pending<Result<Connection>> {
        Box::pin(async move { self.lookup_service_connection().await })
    }

    fn partitioned_metadata(
        self: Arc<Self>,
        topic: String,
    ) -> crate::watcher::Pending<Result<u32>> {
        Box::pin(async move { self.partitioned_topic_metadata(&topic).await })
    }

    fn queue_memory(&self) -> Arc<dyn crate::connection::QueueMemory> {
        self.consumer_share.clone()
    }
}

/// Waits until `rx` says the client is closing (never, if its sender is gone).
pub(crate) async fn shut_down(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        futures::future::pending::<()>().await;
    }
}
