//! Producers: [`Producer`] publishes to a topic (all partitions of a partitioned topic).
//!
//! Each partition has its own task owning its pending queue and batches; sends are pipelined:
//! [`Producer::send`] returns once the message is queued, with a [`SendFuture`] that resolves to
//! the [`MessageId`] when the broker's receipt arrives. After a connection loss the task
//! reconnects with backoff and re-sends everything not yet receipted, in order, with the same
//! sequence ids.

mod batch_container;
mod chunker;
mod create;
mod frame_charge;
mod handle;
mod limits;
mod options;
mod pending;
mod queueing;
mod receipt;
pub(crate) mod task;
#[cfg(feature = "transactions")]
mod transactional;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

pub use options::{BatchingOptions, ProducerAccessMode, ProducerOptions};
pub use receipt::SendFuture;

use crate::compression::CompressionType;
use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::ProducerMessage;
use crate::message_id::MessageId;
use crate::routing_hash::java_partition_for_key;
use crate::topic::TopicName;

use handle::{PartitionProducer, Queued, Waiting};

/// A send that found no room: the partition it goes to and where it must wait.
type MustWait = (Arc<PartitionProducer>, Box<Waiting>);

/// How [`Producer::send`] goes on after its synchronous start (`Producer::start_send`).
enum Start<'a> {
    /// Queued, or failed.
    Done(Result<SendFuture>),
    /// Through the interceptors, or in a transaction.
    Boxed(std::pin::Pin<Box<dyn std::future::Future<Output = Result<SendFuture>> + Send + 'a>>),
    /// Waits for room in the queue.
    Wait(Arc<PartitionProducer>, Box<Waiting>),
}
use pending::Outgoing;

use crate::lifecycle::{aggregate_state, GroupClose, State, StateStream};
use tokio::sync::watch;

/// Builds a [`Producer`]; see [`Client::producer`](crate::Client::producer).
#[derive(Debug, Clone)]
pub struct ProducerBuilder {
    client: CoreRef,
    topic: String,
    options: ProducerOptions,
}

impl ProducerBuilder {
    pub(crate) fn new(client: CoreRef, topic: String) -> Self {
        ProducerBuilder {
            client,
            topic,
            options: ProducerOptions::default(),
        }
    }

    /// Sets the producer name (unique per topic); by default the broker assigns one.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// Turns batching on (default settings) or off. On by default.
    pub fn batching(mut self, enabled: bool) -> Self {
        self.options.batching = enabled.then(BatchingOptions::default);
        self
    }

    /// PIP-37: split a message bigger than the broker's `max_message_size` (after compression)
    /// into chunks that consumers reassemble, instead of failing it with
    /// [`Error::MessageTooBig`]. `chunking(true)` turns batching off (the two cannot be
    /// combined: a later [`batching(true)`](Self::batching) makes [`create`](Self::create) fail
    /// with [`Error::InvalidConfig`]); the topic must be persistent. Default off.
    pub fn chunking(mut self, enabled: bool) -> Self {
        self.options.chunking = enabled;
        if enabled {
            self.options.batching = None;
        }
        self
    }

    /// With [`chunking`](Self::chunking): the largest chunk in bytes (metadata included); 0
    /// (the default) means the broker's `max_message_size`, and a larger value is capped by it.
    pub fn chunk_max_message_size(mut self, bytes: usize) -> Self {
        self.options.chunk_max_message_size = bytes;
        self
    }

    /// Batching with explicit settings.
    pub fn batching_options(mut self, options: BatchingOptions) -> Self {
        self.options.batching = Some(options);
        self
    }

    /// Payload compression. Default none.
    pub fn compression(mut self, compression: CompressionType) -> Self {
        self.options.compression = compression;
        self
    }

    /// Send timeout (default 30 s; zero disables it). When the oldest pending message has
    /// waited that long for its receipt, every pending message fails with [`Error::Timeout`]
    /// (upstream's behaviour), and the producer goes on.
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.options.send_timeout = timeout;
        self
    }

    /// Most messages pending a receipt (0 = no count limit, the default). A `usize`: a local
    /// count that never goes on the wire (see [`ProducerOptions::max_pending_messages`]).
    pub fn max_pending_messages(mut self, n: usize) -> Self {
        self.options.max_pending_messages = n;
        self
    }

    /// Wait for room when the queue is full instead of failing the send. Default false.
    pub fn block_if_queue_full(mut self, block: bool) -> Self {
        self.options.block_if_queue_full = block;
        self
    }

    /// Access mode. Default Shared.
    pub fn access_mode(mut self, mode: ProducerAccessMode) -> Self {
        self.options.access_mode = mode;
        self
    }

    /// PIP-124: ask the broker to create this subscription if this producer creates the topic,
    /// so messages are retained before any consumer subscribes.
    pub fn initial_subscription_name(mut self, name: impl Into<String>) -> Self {
        self.options.initial_subscription_name = Some(name.into());
        self
    }

    /// Adds a producer property (sent to the broker as producer metadata).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.properties.push((key.into(), value.into()));
        self
    }

    /// Grow with the topic when it gains partitions (default on).
    pub fn auto_update_partitions(mut self, enabled: bool) -> Self {
        self.options.auto_update_partitions = enabled;
        self
    }

    /// Adds an interceptor (upstream `ProducerBuilder.intercept`): several run in the order
    /// they were added (see [`crate::interceptor`]).
    pub fn interceptor(
        mut self,
        interceptor: impl crate::interceptor::ProducerInterceptor,
    ) -> Self {
        self.options.interceptors =
            crate::interceptor::Chain::push(&self.options.interceptors, Arc::new(interceptor));
        self
    }

    /// Replaces all options at once (the interceptors added before are kept).
    pub fn options(mut self, options: ProducerOptions) -> Self {
        let interceptors = self.options.interceptors.take();
        self.options = options;
        self.options.interceptors = interceptors;
        self
    }

    /// Makes this a typed producer of `S::Type` values: the broker registers the schema (type,
    /// definition, properties) and every message carries its version.
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
    /// use pulsar_sdk::schema::Int64Schema;
    /// let producer = client.producer("counts").schema(Int64Schema).create().await?;
    /// producer.send_and_wait(&42).await?;
    /// # Ok(()) }
    /// ```
    pub fn schema<S: crate::schema::Schema>(
        self,
        schema: S,
    ) -> crate::schema::TypedProducerBuilder<S> {
        crate::schema::TypedProducerBuilder::new(self, schema)
    }

    pub(crate) fn schema_info(mut self, info: Option<crate::schema::SchemaInfo>) -> Self {
        self.options.schema = info;
        self
    }

    /// End-to-end encryption (PIP-4): encrypts every message's data key for the public key
    /// `name` too (call once per recipient; the names are asked of the
    /// [`crypto_key_reader`](Self::crypto_key_reader)). See the
    /// [guide](crate::guide::encryption).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn encryption_key(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.options.encryption_keys.contains(&name) {
            self.options.encryption_keys.push(name);
        }
        self
    }

    /// Where the [`encryption_key`](Self::encryption_key)s' public keys come from.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_key_reader(
        mut self,
        reader: impl crate::crypto::CryptoKeyReader + 'static,
    ) -> Self {
        self.options.crypto_key_reader = Some(Arc::new(reader));
        self
    }

    /// What a send does when it cannot encrypt: fail it (the default) or send it
    /// unencrypted.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_failure_action(
        mut self,
        action: crate::crypto::ProducerCryptoFailureAction,
    ) -> Self {
        self.options.crypto_failure_action = action;
        self
    }

    /// Creates the producer (on every partition of a partitioned topic).
    pub async fn create(self) -> Result<Producer> {
        // Boxed: keeps the caller's future (and stack, in debug builds) small.
        Box::pin(self.create_inner()).await
    }

    async fn create_inner(self) -> Result<Producer> {
        self.options.validate()?;
        let topic = TopicName::new(&self.topic)?;
        if self.options.chunking && !topic.is_persistent() {
            // Upstream chunks only on persistent topics (a non-persistent broker does not
            // store the chunks, so no consumer could reassemble them reliably). Java then
            // silently sends unchunked, so oversized messages fail one by one; refused here.
            return Err(Error::InvalidConfig(format!(
                "chunking needs a persistent topic; {topic} is non-persistent"
            )));
        }
        let client = self.client;
        let partitions = client.partitioned_metadata_of(&topic, true).await?;
        #[allow(unused_mut)]
        let mut options = self.options;
        // The recipients' keys are loaded before any partition's producer is created (Java's
        // first key-generator run fails the creation); one data key for all partitions.
        #[cfg(feature = "encryption")]
        if let (false, Some(reader)) = (
            options.encryption_keys.is_empty(),
            &options.crypto_key_reader,
        ) {
            options.encryptor = Some(
                crate::crypto::Encryptor::start(
                    options.encryption_keys.clone(),
                    reader.clone(),
                    options.crypto_failure_action,
                )
                .await?,
            );
        }
        // Tracing runs after the application's interceptors: the span covers the message as
        // they left it, and its context is the last property written.
        #[cfg(feature = "opentelemetry")]
        if let Some(t) = &client.tracing {
            options.interceptors =
                crate::interceptor::Chain::push(&options.interceptors, t.producer());
        }
        let options = Arc::new(options);
        // A non-partitioned topic never gains partitions: its producer is a group of its own.
        let group = if partitions == 0 {
            GroupClose::solo()
        } else {
            GroupClose::new()
        };
        let handles = if partitions == 0 {
            vec![
                Box::pin(PartitionProducer::create(
                    &client,
                    topic.clone(),
                    -1,
                    &options,
                    &group,
                    None,
                ))
                .await?,
            ]
        } else {
            // Java `PartitionedProducerImpl.start`: the first partition's producer is created
            // first; when the application set no name, the others take the name the broker
            // gave it (`overrideProducerName`), so deduplication and stats see one producer.
            let first = Box::pin(PartitionProducer::create(
                &client,
                topic.partition(0),
                0,
                &options,
                &group,
                None,
            ))
            .await?;
            let shared_name = first.name.clone();
            let creates = (1..partitions).map(|i| {
                Box::pin(PartitionProducer::create(
                    &client,
                    topic.partition(i),
                    i as i32,
                    &options,
                    &group,
                    Some(shared_name.as_str()),
                ))
            });
            let (rest, first_error) = crate::entity::create_all(creates).await;
            let mut handles = vec![first];
            handles.extend(rest);
            if let Some(e) = first_error {
                for h in &handles {
                    let _ = h.close().await;
                }
                return Err(e);
            }
            handles
        };
        let auto_update = partitions > 0 && options.auto_update_partitions;
        let (registration, grow_rx) = if auto_update {
            let (r, rx) = client
                .partition_updates()
                .register(&client, &topic, partitions);
            (Some(r), Some(rx))
        } else {
            (None, None)
        };
        let mut partitions_list: Vec<Arc<PartitionProducer>> =
            handles.into_iter().map(Arc::new).collect();
        // The collect reuses the handles' allocation (~150 bytes a partition) for pointers:
        // given back, not kept for the producer's life (issue #39).
        partitions_list.shrink_to_fit();
        let inner = Arc::new(ProducerInner {
            name: partitions_list[0].name.clone(),
            // A non-partitioned topic never gains partitions (only partitioned ones grow).
            single: (partitions == 0).then(|| partitions_list[0].clone()),
            topic,
            partitioned: partitions > 0,
            partitions: RwLock::new(partitions_list),
            round_robin: AtomicUsize::new(0),
            switch_every: options
                .batching
                .as_ref()
                .map(|b| b.max_publish_delay.max(Duration::from_millis(1))),
            started: Instant::now(),
            count: std::sync::OnceLock::new(),
            interceptors: options.interceptors.clone(),
            _registration: registration,
        });
        if let Some(rx) = grow_rx {
            tokio::spawn(grow(Arc::downgrade(&inner), client, options, group, rx));
        }
        Ok(Producer { inner })
    }
}

/// Adds partition producers when the topic grows (PIP-247 updates or polling).
async fn grow(
    inner: std::sync::Weak<ProducerInner>,
    client: CoreRef,
    options: Arc<ProducerOptions>,
    group: GroupClose,
    mut rx: mpsc::UnboundedReceiver<crate::partitions::Grow>,
) {
    while let Some(req) = rx.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let mut result = Ok(());
        let current = inner.snapshot().len() as u32;
        for i in current..req.partitions {
            // New partitions take the shared name too (Java `PartitionedProducerImpl`
            // creates them with `overrideProducerName`).
            let created = Box::pin(PartitionProducer::create(
                &client,
                inner.topic.partition(i),
                i as i32,
                &options,
                &group,
                Some(inner.name.as_str()),
            ))
            .await;
            match created {
                Ok(p) => {
                    inner
                        .partitions
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Arc::new(p));
                }
                Err(e) => {
                    tracing::warn!(topic = %inner.topic, partition = i, error = %e,
                        "could not create the producer of a new partition");
                    result = Err(e);
                    break;
                }
            }
        }
        let n = inner.snapshot().len();
        inner.count().send_replace(n);
        if let Some(c) = &options.interceptors {
            c.on_partitions_change(&inner.topic, n as u32);
        }
        let _ = req.done.send(result);
    }
}

#[derive(Debug)]
struct ProducerInner {
    topic: TopicName,
    name: String,
    partitioned: bool,
    partitions: RwLock<Vec<Arc<PartitionProducer>>>,
    /// The producer of a non-partitioned topic (also in `partitions`), reached without the
    /// lock on every send.
    single: Option<Arc<PartitionProducer>>,
    /// The number of partitions, for observers, made by the first `partition_updates` (or
    /// growth): most producers never ask, and a watch channel is ~350 bytes (issue #39).
    count: std::sync::OnceLock<watch::Sender<usize>>,
    /// Keeps the topic registered for partition updates.
    _registration: Option<crate::partitions::Registration>,
    round_robin: AtomicUsize,
    /// With batching, messages without a key stay on one partition for this long, so batches
    /// fill (upstream's round-robin router).
    switch_every: Option<Duration>,
    started: Instant,
    /// The producer's interceptors (`None`: none, the only check a send pays).
    interceptors: crate::interceptor::Interceptors<dyn crate::interceptor::ProducerInterceptor>,
}

impl ProducerInner {
    /// The partition count's watch, made at the first call with the current count.
    fn count(&self) -> &watch::Sender<usize> {
        self.count.get_or_init(|| {
            let n = if self.partitioned {
                self.snapshot().len()
            } else {
                0
            };
            watch::Sender::new(n)
        })
    }

    fn snapshot(&self) -> Vec<Arc<PartitionProducer>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Publishes messages to a topic. Cheap to clone; clones share the producer. Dropping the
/// last clone lets pending messages finish, then closes the producer on the broker.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<ProducerInner>,
}

impl Producer {
    /// The topic (the partitioned topic's name for a partitioned producer).
    pub fn topic(&self) -> &TopicName {
        &self.inner.topic
    }

    /// The producer's name (of its first partition for a partitioned topic).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Number of partitions (0 for a non-partitioned topic). Grows when the topic does.
    pub fn partitions(&self) -> usize {
        if self.inner.partitioned {
            self.inner.snapshot().len()
        } else {
            0
        }
    }

    /// The number of partitions, and its changes: it changes when the topic gains partitions
    /// and the producer has started producing to them (like Java's `onTopicsExtended`).
    pub fn partition_updates(&self) -> crate::updates::Updates<usize> {
        crate::updates::Updates::until(self.inner.count().subscribe(), self.closed())
    }

    /// The producer's lifecycle state. For a partitioned producer: a terminal state if any
    /// partition is in one, else Reconnecting if any partition is, else Ready.
    pub fn state(&self) -> State {
        let states: Vec<State> = self
            .inner
            .snapshot()
            .iter()
            .map(|p| p.state.get())
            .collect();
        aggregate_state(&states)
    }

    /// A snapshot of the producer's statistics: per partition and summed (see
    /// [`crate::stats`]). Cheap enough to call every few seconds; it reads atomics and copies
    /// each partition's latency histogram (about 2.4 KB).
    ///
    /// ```no_run
    /// # fn demo(producer: &pulsar_sdk::Producer) {
    /// let s = producer.stats();
    /// println!("{} sent, p99 {:?}", s.totals.messages_sent, s.totals.send_latency.p99);
    /// # }
    /// ```
    pub fn stats(&self) -> crate::stats::ProducerStats {
        let parts = self.inner.snapshot();
        let states: Vec<State> = parts.iter().map(|p| p.state.get()).collect();
        let mut stats = crate::stats::ProducerStats::aggregate(
            aggregate_state(&states),
            parts
                .iter()
                .zip(&states)
                .map(|(p, s)| (p.partition, *s, &*p.stats))
                .collect(),
        );
        stats.interceptor_panics = crate::interceptor::panics(&self.inner.interceptors);
        stats
    }

    /// The producer's lifecycle states as a
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html): the current state
    /// first, then each change, ending after a terminal state. This is the documented way to
    /// follow the state (it hides the channel type, and is `Send + 'static`).
    ///
    /// ```no_run
    /// # async fn demo(producer: pulsar_sdk::Producer) {
    /// use futures::StreamExt;
    /// let mut states = producer.states();
    /// while let Some(state) = states.next().await {
    ///     println!("{state}"); // Ready, Reconnecting, Ready, ..., Closed
    /// }
    /// # }
    /// ```
    pub fn states(&self) -> StateStream {
        StateStream::new(
            self.inner
                .snapshot()
                .iter()
                .map(|p| p.state.watch())
                .collect(),
        )
    }

    /// Resolves once the producer reached a terminal state ([`State::is_terminal`]), with
    /// that state: [`State::Closed`] after a close by the application (this handle's, another
    /// clone's, or [`Client::close`](crate::Client::close)), else why it ended (e.g.
    /// [`State::ClosedByBroker`], [`State::Fenced`]). The future is `Send + 'static`: spawn it
    /// or `select!` on it.
    ///
    /// ```no_run
    /// # async fn demo(producer: pulsar_sdk::Producer) {
    /// let ended = producer.closed();
    /// tokio::spawn(async move {
    ///     let state = ended.await;
    ///     eprintln!("producer ended: {state}");
    /// });
    /// # }
    /// ```
    pub fn closed(&self) -> impl std::future::Future<Output = State> + Send + 'static + use<> {
        self.states().terminal()
    }

    /// Which partition `msg` goes to, of `n`.
    fn pick(&self, msg: &Outgoing, n: usize) -> usize {
        if n == 1 {
            return 0;
        }
        if let Some(key) = &msg.key {
            java_partition_for_key(key, n as u32) as usize
        } else {
            match self.inner.switch_every {
                Some(period) => {
                    let slot = self.inner.started.elapsed().as_millis() / period.as_millis().max(1);
                    (slot as usize).wrapping_add(self.inner.round_robin.load(Ordering::Relaxed)) % n
                }
                None => self.inner.round_robin.fetch_add(1, Ordering::Relaxed) % n,
            }
        }
    }

    /// Queues `msg` on its partition without waiting if there is room; otherwise returns the
    /// partition's handle and where the send must wait.
    fn try_send(&self, msg: Outgoing) -> Result<std::result::Result<SendFuture, MustWait>> {
        let queued = |p: &Arc<PartitionProducer>, msg| {
            Ok(match p.try_send(msg)? {
                Queued::Done(receipt) => Ok(receipt),
                Queued::Wait(blocked) => Err((p.clone(), blocked)),
            })
        };
        if let Some(p) = &self.inner.single {
            return queued(p, msg);
        }
        let parts = self
            .inner
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let i = self.pick(&msg, parts.len());
        queued(&parts[i], msg)
    }

    /// Queues a message and returns a future of its id, without waiting for earlier sends:
    /// sends are pipelined. Fails at once when the producer is closed, or the queue is full and
    /// `block_if_queue_full` is off.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: this future only waits for room in the queue (with `block_if_queue_full`).
    /// Dropped before it completes, the message was not queued and will not be sent; once it
    /// returns `Ok`, the message is queued and is sent (and re-sent across reconnects)
    /// whether or not the returned [`SendFuture`] is awaited. Dropping the `SendFuture`
    /// only gives up the receipt; it does not cancel the send.
    ///
    /// ```no_run
    /// # async fn demo(producer: pulsar_sdk::Producer) -> pulsar_sdk::Result<()> {
    /// // Pipelined: queue many, then collect the receipts.
    /// let mut receipts = Vec::new();
    /// for i in 0..100 {
    ///     receipts.push(producer.send(format!("message {i}")).await?);
    /// }
    /// for receipt in receipts {
    ///     let id = receipt.await?;
    ///     println!("stored as {id}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn send(&self, msg: impl Into<ProducerMessage>) -> Result<SendFuture> {
        // Cooperative like the tokio channel this replaced: a loop of sends that never has to
        // wait still yields to the scheduler now and then. One budget unit per 8 sends of this
        // thread (a unit per send cost ~125 instructions a message, mostly in the extra task
        // switches), so a loop yields at least every ~1,000 sends instead of only when the
        // partition's queue (4,096) is full. Before queueing, so a send dropped here has
        // queued nothing (see "Cancel safety").
        thread_local!(static SENDS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) });
        if SENDS.with(|n| {
            let next = n.get().wrapping_add(1);
            n.set(next);
            next % 8 == 0
        }) {
            tokio::task::consume_budget().await;
        }
        // The common case queues synchronously; only a send that must wait for room builds
        // (and boxes, so this future stays small to move) the waiting future.
        match self.start_send(msg.into()) {
            Start::Done(r) => r,
            Start::Boxed(f) => f.await,
            Start::Wait(p, blocked) => Box::pin(p.send_waiting(blocked)).await,
        }
    }

    /// The synchronous start of [`Producer::send`]. Out of the `async fn` so that the
    /// `ProducerMessage` (~170 bytes) lives in this call's frame, not in the send's future:
    /// held there, it made every send's future that much larger to build and move (two
    /// copies per send in a loop of sends, ~60 instructions; issue #32).
    #[inline(always)]
    fn start_send(&self, msg: ProducerMessage) -> Start<'_> {
        #[cfg(feature = "transactions")]
        if msg.transaction.is_some() {
            return Start::Boxed(Box::pin(self.send_transactional(msg)));
        }
        if let Some(chain) = &self.inner.interceptors {
            return Start::Boxed(Box::pin(self.send_intercepted(chain.clone(), msg)));
        }
        match self.try_send(Outgoing::from(msg)) {
            Ok(Ok(receipt)) => Start::Done(Ok(receipt)),
            Ok(Err((p, blocked))) => Start::Wait(p, blocked),
            Err(e) => Start::Done(Err(e)),
        }
    }

    /// A send through the producer's interceptors: `before_send` first, then
    /// `on_send_acknowledgement` when the receipt completes (Java `ProducerImpl` calls it from
    /// the send callback, whether or not the application waits for the result), also when the
    /// send fails before it is queued.
    async fn send_intercepted(
        &self,
        chain: Arc<crate::interceptor::Chain<dyn crate::interceptor::ProducerInterceptor>>,
        mut msg: ProducerMessage,
    ) -> Result<SendFuture> {
        let topic = &self.inner.topic;
        chain.before_send(topic, &mut msg);
        let sent = msg.clone();
        let queued = match self.try_send(Outgoing::from(msg)) {
            Ok(Ok(receipt)) => Ok(receipt),
            Ok(Err((p, blocked))) => p.send_waiting(blocked).await,
            Err(e) => Err(e),
        };
        match queued {
            Ok(mut receipt) => {
                let topic = topic.clone();
                receipt.on_complete(Box::new(move |result| {
                    chain.on_send_acknowledgement(&topic, &sent, result)
                }));
                Ok(receipt)
            }
            Err(e) => {
                chain.on_send_acknowledgement(topic, &sent, Err(&e));
                Err(e)
            }
        }
    }

    /// Sends a message and waits for its receipt.
    pub async fn send_and_wait(&self, msg: impl Into<ProducerMessage>) -> Result<MessageId> {
        self.send(msg).await?.await
    }

    /// Sends open batches now and waits until every message sent before this call is receipted
    /// or failed.
    ///
    /// `flush` is a barrier, not a result: it returns `Ok` even when some of those messages
    /// failed (each failure is reported by that message's receipt, which the application holds),
    /// and fails only when the producer itself ended (e.g. [`Error::Closed`]). Java's `flush`
    /// instead fails once when the last send before it failed; this crate reports every failed
    /// message on its receipt rather than one of them on `flush`.
    pub async fn flush(&self) -> Result<()> {
        let parts = self.inner.snapshot();
        let results = futures::future::join_all(parts.iter().map(|p| p.flush())).await;
        results.into_iter().collect()
    }

    /// Sends the batch being assembled, then closes the producer on the broker (every
    /// partition) at once, like upstream: CloseProducer follows the messages already sent, and
    /// the broker answers it once those are persisted, so their receipts arrive first. Messages
    /// still pending when the close ends fail with [`Error::Closed`] ("already closed"). The
    /// whole close takes at most the operation timeout (while reconnecting, it waits within
    /// that time for the pending messages to be sent again first).
    ///
    /// Returns `Ok` once it is closed by the application (closing twice is fine),
    /// [`Error::Timeout`] when the broker did not confirm in time (the producer is closed
    /// anyway), or the error that ended it otherwise: e.g. [`Error::ClosedByBroker`] when the
    /// broker closed it for good before or during the close (pending messages then fail with
    /// that error). To be sure every message is stored, [`flush`](Self::flush) (or await the
    /// receipts) before closing.
    pub async fn close(&self) -> Result<()> {
        let parts = self.inner.snapshot();
        let results = futures::future::join_all(parts.iter().map(|p| p.close())).await;
        results.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let mut o = ProducerOptions::default();
        assert!(o.validate().is_ok());
        o.name = Some(" ".into());
        assert!(o.validate().is_err());
        let o = ProducerOptions {
            batching: Some(BatchingOptions {
                max_messages: 0,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(o.validate(), Err(Error::InvalidConfig(_))));
        let o = ProducerOptions {
            chunking: true,
            ..Default::default()
        };
        match o.validate() {
            Err(Error::InvalidConfig(e)) => assert!(e.contains("batching and chunking"), "{e}"),
            other => panic!("batching with chunking accepted: {other:?}"),
        }
        let o = ProducerOptions {
            chunking: true,
            batching: None,
            ..Default::default()
        };
        assert!(o.validate().is_ok());
    }
}
