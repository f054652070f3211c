//! Consumers: [`Consumer`] receives from a subscription (all partitions of a partitioned topic,
//! merged into one stream), and [`Reader`] reads a topic from a chosen position.
//!
//! Each partition has a task that keeps the broker's flow permits topped up (refilled when
//! half the receiver queue has been consumed), unpacks batches zero-copy, groups acks, and
//! re-subscribes after a connection loss — discarding queued messages the broker will
//! redeliver.

mod acker;
mod acks;
mod chunk_intake;
mod chunks;
pub(crate) mod decode;
pub mod dlq;
mod intake;
mod options;
mod partition;
mod queue;
mod reader;
mod seek;
mod subscribe;
mod task;
mod unacked;

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};

pub use acker::Acker;
pub use dlq::DeadLetterPolicy;
pub use options::{
    ConsumerOptions, InitialPosition, RedeliveryBackoff, SubscriptionMode, SubscriptionType,
};
pub use reader::{Reader, ReaderBuilder};

use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::topic::TopicName;

use crate::lifecycle::{aggregate_state, GroupClose, State, StateStream};
use partition::{grow, spawn_partition, GrowContext};

/// Every partition task of a consumer by index, filled in before each task starts (so the
/// handle can always resolve the index of a queued item). Grows with the topic.
pub(crate) type Registry = Arc<Mutex<Vec<Option<Arc<PartitionShared>>>>>;

#[cfg(feature = "fuzzing")]
pub(crate) use task::overshoot_bound;
use task::{ConsumerOp, Item, PartitionShared};

/// Builds a [`Consumer`]; see [`Client::consumer`](crate::Client::consumer).
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    client: CoreRef,
    topic: String,
    options: ConsumerOptions,
}

impl ConsumerBuilder {
    pub(crate) fn new(client: CoreRef, topic: String) -> Self {
        ConsumerBuilder {
            client,
            topic,
            options: ConsumerOptions::default(),
        }
    }

    /// The subscription name (required).
    pub fn subscription(mut self, name: impl Into<String>) -> Self {
        self.options.subscription = name.into();
        self
    }

    /// The subscription type. Default Exclusive.
    pub fn subscription_type(mut self, t: SubscriptionType) -> Self {
        self.options.subscription_type = t;
        self
    }

    /// Where a new subscription starts. Default Latest.
    pub fn initial_position(mut self, p: InitialPosition) -> Self {
        self.options.initial_position = p;
        self
    }

    /// Durable or non-durable (by default durable, except on non-persistent topics).
    pub fn subscription_mode(mut self, mode: SubscriptionMode) -> Self {
        self.options.subscription_mode = Some(mode);
        self
    }

    /// The consumer name.
    pub fn consumer_name(mut self, name: impl Into<String>) -> Self {
        self.options.consumer_name = Some(name.into());
        self
    }

    /// Messages the broker may push ahead of the application. Default 1000. A `u32`: flow
    /// permits travel as a `uint32` (see [`ConsumerOptions::receiver_queue_size`]).
    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.options.receiver_queue_size = n;
        self
    }

    /// Bounds the receiver queues of a partitioned consumer in all (default 50,000): each
    /// partition gets `min(receiver_queue_size, this / partitions)`, at least 1, like
    /// upstream's `maxTotalReceiverQueueSizeAcrossPartitions`. Must be at least 1. Partitions
    /// the topic gains later get the share computed at subscribe time.
    pub fn max_total_receiver_queue_size_across_partitions(mut self, n: u32) -> Self {
        self.options.max_total_receiver_queue_size_across_partitions = n;
        self
    }

    /// How long acks are grouped before being sent (default 100 ms; zero = at once).
    pub fn ack_group_time(mut self, d: Duration) -> Self {
        self.options.ack_group_time = d;
        self
    }

    /// Delay before a negatively acked message is redelivered. Default 60 s.
    pub fn negative_ack_delay(mut self, d: Duration) -> Self {
        self.options.negative_ack_delay = d;
        self
    }

    /// Adds a subscription property.
    pub fn subscription_property(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.options
            .subscription_properties
            .insert(k.into(), v.into());
        self
    }

    /// Dead-letter policy (PIP-124): Shared and Key_Shared subscriptions only.
    pub fn dead_letter_policy(mut self, policy: DeadLetterPolicy) -> Self {
        self.options.dead_letter_policy = Some(policy);
        self
    }

    /// Enables the retry-letter topic and [`Consumer::reconsume_later`].
    pub fn retry_enable(mut self, enable: bool) -> Self {
        self.options.retry_enable = enable;
        self
    }

    /// Redeliver messages not acked within `timeout` (off by default; at least 1 s).
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        self.options.ack_timeout = timeout;
        self
    }

    /// Grow negative-ack redelivery delays with the redelivery count.
    pub fn negative_ack_backoff(mut self, backoff: RedeliveryBackoff) -> Self {
        self.options.negative_ack_backoff = Some(backoff);
        self
    }

    /// Grow with the topic when it gains partitions (default on).
    pub fn auto_update_partitions(mut self, enabled: bool) -> Self {
        self.options.auto_update_partitions = enabled;
        self
    }

    /// Opt-in batch-index acks: acking part of a batch tells the broker exactly which messages
    /// (an `ack_set`). Off by default; brokers that ignore the set (pulsar-lite) would ack the
    /// whole batch and lose the rest.
    pub fn batch_index_ack(mut self, enabled: bool) -> Self {
        self.options.batch_index_ack = enabled;
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, options: ConsumerOptions) -> Self {
        self.options = options;
        self
    }

    /// Subscribes (on every partition of a partitioned topic).
    pub async fn subscribe(self) -> Result<Consumer> {
        self.options.validate()?;
        let topic = TopicName::new(&self.topic)?;
        // Boxed: keeps the caller's future (and stack, in debug builds) small.
        Box::pin(Consumer::subscribe(self.client, topic, self.options)).await
    }
}

/// Receives messages from a subscription. Use [`Consumer::recv`] or the
/// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) impl; ack
/// each message with [`Consumer::ack`] (acks are grouped and sent in the background), or from
/// other tasks with an [`Acker`] ([`Consumer::acker`]).
///
/// Dropping the consumer closes it in the background (pending acks are flushed first, then
/// the broker is told); [`Consumer::close`] does the same and reports how it went.
#[derive(Debug)]
pub struct Consumer {
    topic: TopicName,
    subscription: String,
    partitions: Vec<Arc<PartitionShared>>,
    rx: mpsc::UnboundedReceiver<(usize, u64, Item)>,
    /// Messages received but not yet handed out (from `has_message_available` peeks).
    peeked: Option<Message>,
    /// Dead-letter / retry publishing, when a policy applies or retries are enabled.
    dlq: Option<Arc<dlq::DeadLetterSink>>,
    /// Whether `reconsume_later` may publish to the retry topic.
    retry_enable: bool,
    /// Every partition task by index (the source of `partitions`).
    registry: Registry,
    /// The number of partitions of the topic, for observers (0 if not partitioned).
    count: watch::Receiver<usize>,
    /// Keeps the topic registered for partition updates.
    _registration: Option<crate::partitions::Registration>,
    /// Acks and nacks (shared with [`Consumer::acker`]).
    acker: Acker,
}

impl Consumer {
    pub(crate) async fn subscribe(
        client: CoreRef,
        topic: TopicName,
        options: ConsumerOptions,
    ) -> Result<Consumer> {
        let partitions = client.partitioned_topic_metadata(topic.as_str()).await?;
        if partitions > 0 {
            if let Some(start) = options.start_message_id {
                // Upstream PulsarClientImpl.createReaderAsync: a reader of a partitioned topic
                // starts at earliest or latest only (an id names one partition's position).
                if start != MessageId::EARLIEST && start != MessageId::LATEST {
                    return Err(Error::InvalidConfig(format!(
                        "the partitioned topic startMessageId is illegal: {topic} has \
                         {partitions} partitions; a reader of a partitioned topic starts at \
                         earliest or latest (then seek a partition by id)"
                    )));
                }
            }
        }
        let mut options = options;
        if options.retry_enable && options.dead_letter_policy.is_none() {
            // Upstream's bound on retries without a policy (MAX_RECONSUMETIMES).
            options.dead_letter_policy = Some(DeadLetterPolicy::new(16));
        }
        let main_options = Arc::new(options.for_partitions(partitions));
        let options = Arc::new(options);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut names: Vec<(TopicName, i32)> = if partitions == 0 {
            vec![(topic.clone(), -1)]
        } else {
            (0..partitions)
                .map(|i| (topic.partition(i), i as i32))
                .collect()
        };
        let main_count = names.len();
        let shared_type = matches!(
            options.subscription_type,
            SubscriptionType::Shared | SubscriptionType::KeyShared
        );
        // The dead-letter and retry topics' publisher. `reconsume_later` works on every
        // subscription type, like Java and Go (the retry topic is subscribed on all of them);
        // dead-lettering after too many redeliveries applies to Shared and Key_Shared only,
        // like upstream (Exclusive / Failover redeliver by rewinding, without counts).
        let sink = options
            .dead_letter_policy
            .clone()
            .filter(|_| shared_type || options.retry_enable)
            .map(|policy| {
                Arc::new(dlq::DeadLetterSink::new(
                    client.clone(),
                    &topic,
                    &options.subscription,
                    policy,
                ))
            });
        let dlq = sink.clone().filter(|_| shared_type);
        let mut retry_options = None;
        if options.retry_enable {
            let retry_topic = match &sink {
                Some(sink) => TopicName::new(&sink.retry_topic)?,
                None => {
                    TopicName::new(&dlq::default_topic(&topic, &options.subscription, "-RETRY"))?
                }
            };
            let n = client
                .partitioned_topic_metadata(retry_topic.as_str())
                .await?;
            retry_options = Some(Arc::new(options.for_partitions(n)));
            if n == 0 {
                names.push((retry_topic, -1));
            } else {
                names.extend((0..n).map(|i| (retry_topic.partition(i), i as i32)));
            }
        }
        let durable = task::effective_durable(&topic, &options);
        let consumer_name = options
            .consumer_name
            .clone()
            .unwrap_or_else(|| format!("consumer-{:08x}", rand_u32()));
        let group = GroupClose::new();
        let registry: Registry = Arc::new(Mutex::new(Vec::new()));
        // Indexed, not `names.iter()`: a closure over borrowed items makes this future
        // non-`Send` (rustc cannot prove the higher-ranked bound), and applications spawn
        // subscribes.
        let creates = (0..names.len()).map(|index| {
            let (t, partition) = &names[index];
            Box::pin(spawn_partition(
                &client,
                t.clone(),
                *partition,
                index,
                match &retry_options {
                    Some(retry) if index >= main_count => retry,
                    _ => &main_options,
                },
                &consumer_name,
                durable,
                tx.clone(),
                &group,
                dlq.clone(),
                &registry,
                index < main_count,
            ))
        });
        let (shared, failure) = crate::entity::create_all(creates).await;
        if let Some(e) = failure {
            for s in &shared {
                let (t, _r) = oneshot::channel();
                let _ = s.ops.send(ConsumerOp::Close(t));
            }
            return Err(e);
        }
        let main_partitions = partitions;
        let (count_tx, count) = watch::channel(main_partitions as usize);
        let registration = if partitions > 0 && options.auto_update_partitions {
            let (r, grow_rx) = client
                .partition_updates()
                .register(&client, &topic, partitions);
            let ctx = GrowContext {
                client: client.clone(),
                topic: topic.clone(),
                options: main_options.clone(),
                consumer_name: consumer_name.clone(),
                durable,
                out: tx.downgrade(),
                group: group.clone(),
                dlq: dlq.clone(),
                registry: registry.clone(),
                count: count_tx,
                current: partitions,
            };
            tokio::spawn(grow(ctx, grow_rx));
            Some(r)
        } else {
            None
        };
        drop(tx);
        Ok(Consumer {
            subscription: options.subscription.clone(),
            partitions: shared,
            rx,
            peeked: None,
            dlq: sink,
            retry_enable: options.retry_enable,
            acker: Acker::new(
                topic.clone(),
                options.subscription.clone(),
                options.subscription_type,
                registry.clone(),
            ),
            topic,
            registry,
            count,
            _registration: registration,
        })
    }

    /// The topic (the partitioned topic's name for a partitioned consumer).
    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// The subscription name.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// Number of partitions (0 for a non-partitioned topic).
    pub fn partitions(&self) -> usize {
        *self.count.borrow()
    }

    /// Watches the number of partitions: it changes once the consumer also receives from
    /// partitions the topic gained (like Java's `onTopicsExtended`).
    pub fn partition_changes(&self) -> watch::Receiver<usize> {
        self.count.clone()
    }

    /// Re-reads the partition list (it grows with the topic).
    fn refresh(&mut self) {
        self.partitions = self.all();
    }

    /// Every partition task, in index order.
    fn all(&self) -> Vec<Arc<PartitionShared>> {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map_while(|p| p.clone())
            .collect()
    }

    /// Accepts a queued item: discards messages from before a reconnect or seek, counts
    /// consumption for flow permits, remembers the position. `None` = discarded.
    fn accept(&mut self, index: usize, epoch: u64, item: Item) -> Option<Result<Message>> {
        if index >= self.partitions.len() {
            self.refresh();
        }
        let p = self.partitions.get(index)?;
        if item.counted() {
            // Out of the queue: room for another message (see `QueueRoom`).
            if let Some(n) = p.taken(epoch, p.refill_at) {
                let _ = p.ops.send(ConsumerOp::Flow(n));
            }
        }
        if let Item::Message(_) = item {
            p.taken_messages.fetch_add(1, Ordering::AcqRel);
        }
        match item {
            // A message queued before a reconnect, seek or redeliver-all is discarded (the
            // broker sends it again); its permit was counted above like upstream's
            // `messageProcessed` on a stale message, so the broker can send its replacement.
            Item::Message(_) if epoch != p.epoch.load(Ordering::Acquire) => None,
            Item::Message(m) => {
                p.stats.received(m.payload.len());
                *p.last_dequeued.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.id);
                Some(Ok(m))
            }
            // Errors are never sent again: they reach the application whatever the epoch.
            Item::Discarded(e) | Item::Error(e) => Some(Err(e)),
        }
    }

    /// Waits for the next message. After the consumer is closed for good (closed by the broker,
    /// topic terminated ...) this returns that error once, then [`Error::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it completes (e.g. when another branch of a
    /// `tokio::select!` wins) never loses a message; the next `recv` returns it. A message
    /// is taken out of the queue only in the poll that returns it. The same holds for the
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) impl.
    ///
    /// The recommended loop receives, hands the message to a task with an [`Acker`] and stops
    /// on a shutdown signal (see `examples/pipeline.rs` for a complete service):
    ///
    /// ```no_run
    /// # async fn demo(mut consumer: pulsar_sdk::Consumer,
    /// #     shutdown: impl std::future::Future<Output = ()>) -> pulsar_sdk::Result<()> {
    /// let acker = consumer.acker();
    /// tokio::pin!(shutdown);
    /// loop {
    ///     tokio::select! {
    ///         _ = &mut shutdown => break,
    ///         msg = consumer.recv() => {
    ///             let msg = msg?;
    ///             let acker = acker.clone();
    ///             tokio::spawn(async move {
    ///                 // ... process, then:
    ///                 let _ = acker.ack(&msg);
    ///             });
    ///         }
    ///     }
    /// }
    /// consumer.close().await
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Result<Message> {
        if let Some(m) = self.peeked.take() {
            return Ok(m);
        }
        loop {
            let Some((index, epoch, item)) = self.rx.recv().await else {
                return Err(Error::Closed);
            };
            if let Some(r) = self.accept(index, epoch, item) {
                return r;
            }
        }
    }

    fn partition_of(&self, id: &MessageId) -> Option<Arc<PartitionShared>> {
        self.all()
            .into_iter()
            .find(|p| p.main && p.partition == id.partition)
    }

    /// A cheap, cloneable, `Send + Sync` handle that acknowledges this consumer's messages
    /// from any task (see [`Acker`]). The consumer's own [`ack`](Self::ack),
    /// [`nack`](Self::nack) etc. go through the same code.
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
    /// let mut consumer = client.consumer("orders").subscription("s").subscribe().await?;
    /// let acker = consumer.acker();
    /// while let Ok(msg) = consumer.recv().await {
    ///     let acker = acker.clone();
    ///     tokio::spawn(async move {
    ///         // ... work on the message, then:
    ///         let _ = acker.ack(&msg);
    ///     });
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acker(&self) -> Acker {
        self.acker.clone()
    }

    /// Acknowledges one message. For a message of a batch, the broker is told once every
    /// message of that batch is acknowledged. Fails with [`Error::Closed`] once the consumer
    /// is closing or closed. See also [`Consumer::acker`] to ack from other tasks.
    pub fn ack(&self, msg: &Message) -> Result<()> {
        self.acker.ack(msg)
    }

    /// Acknowledges a message by id.
    pub fn ack_id(&self, id: MessageId) -> Result<()> {
        self.acker.ack_id(id)
    }

    /// Acknowledges every message up to and including this one (on its partition).
    ///
    /// Only on Exclusive and Failover subscriptions: on Shared and Key_Shared ones the broker
    /// ignores cumulative acks, so this fails with [`Error::InvalidOperation`] and sends
    /// nothing (like upstream: "Cannot use cumulative acks on a non-exclusive subscription").
    pub fn ack_cumulative(&self, msg: &Message) -> Result<()> {
        self.acker.ack_cumulative(msg)
    }

    /// [`Consumer::ack_cumulative`] by id.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
    /// let id = consumer.recv().await?.id;
    /// consumer.ack_cumulative_id(id)?;
    /// # Ok(()) }
    /// ```
    pub fn ack_cumulative_id(&self, id: MessageId) -> Result<()> {
        self.acker.ack_cumulative_id(id)
    }

    /// Negatively acknowledges a message: it is redelivered after the negative-ack delay.
    pub fn nack(&self, msg: &Message) -> Result<()> {
        self.acker.nack(msg)
    }

    /// Negatively acknowledges a message by id (see [`Acker::nack_id`]: with a
    /// negative-ack backoff, prefer [`Consumer::nack`]).
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
    /// let id = consumer.recv().await?.id;
    /// consumer.nack_id(id)?; // redelivered after the negative-ack delay
    /// # Ok(()) }
    /// ```
    pub fn nack_id(&self, id: MessageId) -> Result<()> {
        self.acker.nack_id(id)
    }

    async fn ask<T>(
        shared: &PartitionShared,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> ConsumerOp,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        shared.ops.send(make(tx)).map_err(|_| Error::Closed)?;
        rx.await.unwrap_or(Err(Error::Closed))
    }

    /// The consumer's lifecycle state (aggregated over partitions like
    /// [`crate::Producer::state`]).
    pub fn state(&self) -> State {
        let states: Vec<State> = self.all().iter().map(|p| *p.state.borrow()).collect();
        aggregate_state(&states)
    }

    /// A snapshot of the consumer's statistics: per partition (and retry-topic member) and
    /// summed (see [`crate::stats`]).
    ///
    /// ```no_run
    /// # fn demo(consumer: &pulsar_sdk::Consumer) {
    /// let s = consumer.stats();
    /// println!("{} received, {} in the queue", s.totals.messages_received,
    ///     s.totals.receiver_queue_len);
    /// # }
    /// ```
    pub fn stats(&self) -> crate::stats::ConsumerStats {
        let parts = self.all();
        let mut states = Vec::with_capacity(parts.len());
        let mut members = Vec::with_capacity(parts.len());
        for p in &parts {
            let state = *p.state.borrow();
            states.push(state);
            let mut counts = p.stats.snapshot();
            counts.discarded_undecodable = p.discarded.load(Ordering::Relaxed);
            counts.receiver_queue_len = p.room().queued;
            members.push(crate::stats::PartitionConsumerStats {
                topic: p.stats.topic().to_string(),
                partition: p.partition,
                state,
                counts,
            });
        }
        crate::stats::ConsumerStats::aggregate(aggregate_state(&states), members)
    }

    /// How many entries were discarded because they could not be decoded (each was reported
    /// as an error item and acked with its validation error, like upstream).
    pub fn discarded_entries(&self) -> u64 {
        self.all()
            .iter()
            .map(|p| p.discarded.load(Ordering::Relaxed))
            .sum()
    }

    /// The consumer's lifecycle states as a
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html): the current state
    /// first, then each
    /// change, ending after a terminal state. This is the documented way to follow the state
    /// (it hides the channel type, and is `Send + 'static`).
    ///
    /// ```no_run
    /// # async fn demo(consumer: pulsar_sdk::Consumer) {
    /// use futures::StreamExt;
    /// let mut states = consumer.states();
    /// tokio::spawn(async move {
    ///     while let Some(state) = states.next().await {
    ///         println!("consumer is now {state}");
    ///     }
    /// });
    /// # }
    /// ```
    pub fn states(&self) -> StateStream {
        StateStream::new(self.all().iter().map(|p| p.state.clone()).collect())
    }

    /// Resolves once the consumer reached a terminal state ([`State::is_terminal`]), with
    /// that state: [`State::Closed`] after a close by the application (its
    /// [`close`](Self::close), dropping it, or [`Client::close`](crate::Client::close)), else
    /// why it ended (e.g. [`State::ClosedByBroker`], [`State::Terminated`]). The future is
    /// `Send + 'static`.
    ///
    /// ```no_run
    /// # async fn demo(mut consumer: pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
    /// let ended = consumer.closed();
    /// tokio::pin!(ended);
    /// loop {
    ///     tokio::select! {
    ///         state = &mut ended => { eprintln!("consumer ended: {state}"); break }
    ///         msg = consumer.recv() => consumer.ack(&msg?)?,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn closed(&self) -> impl std::future::Future<Output = State> + Send + 'static {
        self.states().terminal()
    }

    /// Watches the lifecycle state (of the first partition; partitions close together).
    /// Prefer [`Consumer::states`] and [`Consumer::closed`], which hide the channel type.
    pub fn state_changes(&self) -> watch::Receiver<State> {
        self.all()[0].state.clone()
    }

    /// Failover subscriptions: whether this consumer is the active one (`None` until the
    /// broker says). Wait for changes with `changed().await` on the receiver.
    pub fn active_state(&self) -> watch::Receiver<Option<bool>> {
        self.all()[0].active.subscribe()
    }

    /// Deletes the subscription (the consumer must be its only one) and closes the consumer.
    pub async fn unsubscribe(self) -> Result<()> {
        for p in &self.all() {
            Self::ask(p, ConsumerOp::Unsubscribe).await?;
        }
        Ok(())
    }

    /// The dead-letter topic, when this consumer publishes to one: a dead-letter policy on a
    /// Shared or Key_Shared subscription, or `retry_enable` on any subscription (retries past
    /// the maximum go there).
    pub fn dead_letter_topic(&self) -> Option<&str> {
        self.dlq.as_ref().map(|d| d.dlq_topic.as_str())
    }

    /// Publishes `msg` to the retry-letter topic, to be delivered again after `delay` (with
    /// RECONSUMETIMES and DELAY_TIME properties), then acks it. Past the policy's maximum it
    /// goes to the dead-letter topic instead (with the RECONSUMETIMES and DELAY_TIME of this
    /// call).
    ///
    /// Needs `retry_enable`; works on every subscription type, like Java and Go: on Exclusive
    /// and Failover the retry topic is subscribed with the same type, and the message is acked
    /// individually. Fails with [`Error::InvalidConfig`] without `retry_enable`.
    pub async fn reconsume_later(&self, msg: &Message, delay: Duration) -> Result<()> {
        let sink = self
            .dlq
            .as_ref()
            .filter(|_| self.retry_enable)
            .ok_or_else(|| Error::InvalidConfig("reconsume_later needs retry_enable".into()))?;
        Box::pin(sink.retry_later(msg, delay)).await?;
        self.ack(msg)
    }

    /// Flushes pending acks and closes the consumer on the broker (and its dead-letter and
    /// retry producers). Returns `Ok` once it is closed by the application (closing twice is
    /// fine), or the error that ended it otherwise: e.g. [`Error::ClosedByBroker`] when the
    /// broker closed it for good before or during the close.
    ///
    /// Dropping the consumer closes it too, in the background.
    pub async fn close(&self) -> Result<()> {
        let mut result = Ok(());
        for p in &self.all() {
            let r = match Self::ask(p, ConsumerOp::Close).await {
                // The task is gone: it ended before; its state says how.
                Err(Error::Closed) => match *p.state.borrow() {
                    State::Closed => Ok(()),
                    other => Err(ended_error(other, &self.topic)),
                },
                r => r,
            };
            if result.is_ok() {
                result = r;
            }
        }
        if let Some(sink) = &self.dlq {
            sink.close().await;
        }
        result
    }
}

/// The error of an entity that ended in `state` (for calls made after it ended).
pub(crate) fn ended_error(state: State, topic: &TopicName) -> Error {
    let topic = topic.to_string();
    match state {
        State::ClosedByBroker => Error::ClosedByBroker { topic },
        State::Terminated => Error::TopicTerminated { topic },
        State::Fenced => Error::ProducerFenced { topic },
        // Failed for good (the cause was reported once, as an error item): later calls get
        // what upstream gives on a consumer that is gone, never a retriable error.
        State::Failed => Error::Closed,
        _ => Error::Closed,
    }
}

impl Stream for Consumer {
    type Item = Result<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(m) = self.peeked.take() {
            return Poll::Ready(Some(Ok(m)));
        }
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some((index, epoch, item))) => {
                    if let Some(r) = self.accept(index, epoch, item) {
                        return Poll::Ready(Some(r));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish() as u32
}
