//! Consumers: [`Consumer`] receives from a subscription (all partitions of a partitioned topic,
//! merged into one stream), and [`Reader`] reads a topic from a chosen position.
//!
//! Each partition has a task that keeps the broker's flow permits topped up (refilled when
//! half the receiver queue has been consumed), unpacks batches zero-copy, groups acks, and
//! re-subscribes after a connection loss — discarding queued messages the broker will
//! redeliver.

mod acker;
mod builder;
mod close;
pub mod dlq;
pub(crate) mod engine;
mod entry;
pub(crate) mod handle;
pub(crate) mod op;
mod options;
pub(crate) mod queue;
mod reader;
mod seek;
pub(crate) mod topics;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};

pub use acker::Acker;
pub use builder::ConsumerBuilder;
pub use dlq::DeadLetterPolicy;
pub use options::{
    ConsumerOptions, InitialPosition, RedeliveryBackoff, SubscriptionMode, SubscriptionType,
};
pub use reader::{Reader, ReaderBuilder};
pub use topics::pattern::TopicsChanged;

use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::topic::TopicName;

use crate::lifecycle::{aggregate_until_all_end, State, StateStream};
use crate::topic_list::RegexSubscriptionMode;
pub(crate) use topics::registry::Registry;
use topics::topic::{SubscribeContext, TopicGroup};

/// The topics of a consumer (shared with a pattern consumer's discovery, which adds and
/// removes topics).
pub(crate) type Groups = Arc<Mutex<Vec<TopicGroup>>>;

#[cfg(feature = "fuzzing")]
pub(crate) use engine::flow::overshoot_bound;
use handle::PartitionShared;
use op::ConsumerOp;
use queue::Item;

/// Receives messages from a subscription. Use [`Consumer::recv`] or the
/// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) impl; ack
/// each message with [`Consumer::ack`] (acks are grouped and sent in the background), or from
/// other tasks with an [`Acker`] ([`Consumer::acker`]).
///
/// Dropping the consumer closes it in the background (pending acks are flushed first, then
/// the broker is told); [`Consumer::close`] does the same and reports how it went.
#[derive(Debug)]
pub struct Consumer {
    /// The topic (the first one of a multi-topic consumer).
    topic: TopicName,
    subscription: String,
    rx: mpsc::UnboundedReceiver<(usize, u64, Item)>,
    /// Messages received but not yet handed out (from `has_message_available` peeks).
    peeked: Option<Message>,
    /// The rest of the entry being handed out (see [`Item::Messages`]).
    buffered: queue::Buffered,
    /// The (first) topic's dead-letter / retry publisher, when a policy applies.
    dlq: Option<Arc<engine::dlq::DeadLetterSink>>,
    /// Every partition task of every topic by index.
    registry: Registry,
    /// The topics, each with its partitions, dead-letter sink and partition registration.
    groups: Groups,
    /// The number of partitions of the (first) topic, for observers (0 if not partitioned).
    count: watch::Receiver<usize>,
    /// Acks and nacks (shared with [`Consumer::acker`]).
    acker: Acker,
    /// A pattern consumer's topic discovery.
    discovery: Option<topics::pattern::Discovery>,
    /// Whether `recv` reported the end of the topics (once, see [`Consumer::recv`]).
    end_reported: bool,
    /// Set by [`Consumer::close`]: from then on nothing more is handed out (Java
    /// `ConsumerBase.receive` → `verifyConsumerState` fails with AlreadyClosed even with
    /// messages queued: they were never handed out, can no longer be acked, and the broker
    /// gives them to another consumer).
    closed_by_app: AtomicBool,
    /// The consumer's interceptors (`None`: none, the only check a message pays).
    interceptors: crate::interceptor::Interceptors<dyn crate::interceptor::ConsumerInterceptor>,
}

impl Consumer {
    /// A single-topic consumer (readers use this).
    pub(crate) async fn subscribe(
        client: CoreRef,
        topic: TopicName,
        options: ConsumerOptions,
    ) -> Result<Consumer> {
        Self::subscribe_many(client, vec![topic], options).await
    }

    /// A consumer of every topic in `topics` (at least one).
    pub(crate) async fn subscribe_many(
        client: CoreRef,
        topics: Vec<TopicName>,
        options: ConsumerOptions,
    ) -> Result<Consumer> {
        let first = topics
            .first()
            .cloned()
            .ok_or_else(|| Error::InvalidConfig("a consumer needs at least one topic".into()))?;
        let (ctx, tx, rx) = SubscribeContext::new(client, options);
        let groups = topics::topic::subscribe_all(&ctx, topics).await?;
        let count = groups[0].count.clone();
        // The tasks hold the senders from now on: the queue ends once they all ended.
        drop(tx);
        Ok(Self::assemble(ctx, first, rx, groups, count))
    }

    /// The handle over subscribed topics.
    pub(crate) fn assemble(
        ctx: SubscribeContext,
        topic: TopicName,
        rx: mpsc::UnboundedReceiver<(usize, u64, Item)>,
        groups: Vec<TopicGroup>,
        count: watch::Receiver<usize>,
    ) -> Consumer {
        let options = &ctx.options;
        let groups: Groups = Arc::new(Mutex::new(groups));
        Consumer {
            subscription: options.subscription.clone(),
            rx,
            peeked: None,
            buffered: queue::Buffered::default(),
            dlq: first_sink(&groups),
            acker: Acker::new(
                topic.clone(),
                options.subscription.clone(),
                options.subscription_type,
                ctx.registry.clone(),
                Arc::downgrade(&groups),
                options.retry_enable,
                options.interceptors.clone(),
            ),
            topic,
            registry: ctx.registry.clone(),
            groups,
            count,
            discovery: None,
            end_reported: false,
            closed_by_app: AtomicBool::new(false),
            interceptors: options.interceptors.clone(),
        }
    }

    /// A consumer of the topics matching `cfg` (see [`pattern`]).
    pub(crate) async fn subscribe_pattern(
        client: CoreRef,
        cfg: topics::pattern::PatternConfig,
        mut options: ConsumerOptions,
    ) -> Result<Consumer> {
        let initial = topics::pattern::initial_topics(&client, &cfg).await?;
        // A topic deleted while the consumer subscribes must not be re-created by it.
        options.force_topic_creation = false;
        let (ctx, tx, rx) = SubscribeContext::new(client, options);
        let (groups, initial) =
            topics::pattern::subscribe_initial(&ctx, initial, cfg.max_topics).await?;
        let shown = TopicName::new(&format!(
            "{}://{}/{}",
            if cfg.mode == RegexSubscriptionMode::NonPersistentOnly {
                "non-persistent"
            } else {
                "persistent"
            },
            cfg.pattern.namespace,
            "pattern"
        ))?;
        let count = watch::channel(0).1;
        let mut consumer = Self::assemble(ctx.clone(), shown, rx, groups, count);
        consumer.discovery = Some(topics::pattern::Discovery::start(
            ctx,
            consumer.groups.clone(),
            cfg,
            initial,
            tx,
        ));
        Ok(consumer)
    }

    /// A pattern consumer's topic changes: one [`TopicsChanged`] each time topics were
    /// subscribed or closed, from now on (see [`TopicUpdates`](crate::TopicUpdates) for a
    /// stream that falls behind). Other consumers' stream ends at once.
    pub fn topic_updates(&self) -> crate::updates::TopicUpdates {
        crate::updates::TopicUpdates::new(
            match &self.discovery {
                Some(d) => d.subscribe(),
                None => tokio::sync::broadcast::channel(1).1,
            },
            self.closed(),
        )
    }

    /// How many topics matching a pattern consumer's pattern are not subscribed because it has
    /// [`pattern_max_topics`](crate::ConsumerBuilder::pattern_max_topics) of them (0 for
    /// other consumers); each change is also in [`TopicsChanged::skipped`].
    pub fn pattern_topics_skipped(&self) -> usize {
        self.discovery.as_ref().map_or(0, |d| d.skipped())
    }

    /// The topics this consumer receives from, in the order given (a pattern consumer's
    /// current set, in the order they were found).
    pub fn topics(&self) -> Vec<TopicName> {
        self.lock_groups().iter().map(|g| g.topic.clone()).collect()
    }

    fn lock_groups(&self) -> std::sync::MutexGuard<'_, Vec<TopicGroup>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The topic (the partitioned topic's name for a partitioned consumer; the first topic of
    /// a multi-topic consumer: see [`Consumer::topics`]; for a pattern consumer a name standing
    /// for it, `persistent://tenant/namespace/pattern`).
    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// The subscription name.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// Number of partitions (0 for a non-partitioned topic; of the first topic of a multi-topic
    /// consumer; 0 for a pattern consumer, which lists partitions as topics).
    pub fn partitions(&self) -> usize {
        *self.count.borrow()
    }

    /// The number of partitions, and its changes: it changes once the consumer also receives
    /// from partitions the topic gained (like Java's `onTopicsExtended`).
    pub fn partition_updates(&self) -> crate::updates::Updates<usize> {
        crate::updates::Updates::until(self.count.clone(), self.closed())
    }

    /// Every partition task of every topic, in index order.
    fn all(&self) -> Vec<Arc<PartitionShared>> {
        topics::registry::lock(&self.registry)
            .iter()
            .cloned()
            .collect()
    }

    /// Accepts a queued item (only once the entry before it is handed out): discards messages
    /// from before a reconnect or seek, counts consumption for flow permits, remembers the
    /// position. `None` = discarded.
    fn accept(&mut self, index: usize, epoch: u64, item: Item) -> Option<Result<Message>> {
        // None: the task's topic was removed (a pattern consumer); its items are dropped.
        let p = topics::registry::lock(&self.registry).get(index)?;
        match item {
            Item::Messages(entry, charge) => {
                debug_assert!(self.buffered.records.as_slice().is_empty());
                self.buffered = queue::Buffered {
                    part: Some(p),
                    epoch,
                    head: Some(entry.head),
                    records: entry.records.into_iter(),
                    charge: Some(charge),
                };
                self.take_buffered().map(Ok)
            }
            Item::Discarded(e) => {
                // Out of the queue: room for another message (see `QueueRoom`).
                if let Some(n) = p.taken(epoch, p.refill_at, false) {
                    let _ = p.send_op(ConsumerOp::Flow(n));
                }
                Some(Err(e))
            }
            // Errors are never sent again: they reach the application whatever the epoch.
            Item::Error(e) => Some(Err(e)),
            // One partition (or topic) at its end is no error (Java MultiTopicsConsumerImpl);
            // the end is reported once, when every one of them got there.
            // Counted once the handle took the notice, so every message the partitions queued
            // before their notices is handed out before the end is.
            // A notice queued before a seek: the consumer is no longer at the end.
            Item::EndOfTopic if epoch < p.end_epoch.load(Ordering::Acquire) => None,
            Item::EndOfTopic => {
                p.handles.end_taken.store(true, Ordering::Release);
                let all_taken = self.every_current(|p| p.handles.end_taken.load(Ordering::Acquire));
                if self.end_reported || !all_taken {
                    return None;
                }
                self.end_reported = true;
                Some(Err(Error::TopicTerminated {
                    topic: self.topic.to_string(),
                }))
            }
        }
    }

    /// Whether the consumer reached the end of its terminated topic: the broker said so for
    /// every partition of every topic (a multi-topic or pattern consumer: of each topic it
    /// has now; with `retry_enable`, of the retry topic too), like Java's
    /// `hasReachedEndOfTopic` (`MultiTopicsConsumerImpl`: all of its consumers). `false`
    /// while the consumer has no topic (a pattern consumer that matched none).
    ///
    /// A consumer at the end stays a consumer, as in Java: attached to its subscription,
    /// able to ack, seek and unsubscribe, and [`close`](Self::close) detaches it on the
    /// broker. The flag stays set once set (also after a seek, as Java's).
    pub fn has_reached_end_of_topic(&self) -> bool {
        self.every_current(|p| p.reached_end.load(Ordering::Acquire))
    }

    /// Whether the consumer has a current partition (topic not deleted nor removed) and
    /// `check` holds for each.
    fn every_current(&self, check: impl Fn(&PartitionShared) -> bool) -> bool {
        let live = self.live();
        let mut current = live
            .iter()
            .filter(|p| !p.handles.removed.load(Ordering::Acquire))
            .peekable();
        current.peek().is_some() && current.all(|p| check(p))
    }

    /// The next message of the entry being handed out, if any. Each one counts as taken out
    /// of the queue here (flow permits, room, the ack timeout's clock), like one queued alone.
    /// The public `Message` is built here, from its compact record (see `entry`), straight
    /// into the result (inlined into `recv`: a `Message` is ~270 bytes, each move a `memcpy`).
    #[inline]
    fn take_buffered(&mut self) -> Option<Message> {
        loop {
            let b = &mut self.buffered;
            let p = b.part.as_ref()?;
            let Some(r) = b.records.as_slice().first() else {
                // Done with the entry: its task and buffer are let go.
                self.buffered = queue::Buffered::default();
                return None;
            };
            if p.handles.removed.load(Ordering::Acquire) {
                // The task's topic was removed: what it queued is dropped uncounted.
                self.buffered = queue::Buffered::default();
                return None;
            }
            // Out of the queue: room for another message (see `QueueRoom`).
            if let Some(n) = p.taken(b.epoch, p.refill_at, true) {
                let _ = p.send_op(ConsumerOp::Flow(n));
            }
            // A message queued before a reconnect, seek or redeliver-all is discarded (the
            // broker sends it again); its permit was counted above like upstream's
            // `messageProcessed` on a stale message, so the broker can send its replacement.
            let current = if p.durable {
                b.epoch == p.epoch.load(Ordering::Acquire)
            } else {
                // Checked and recorded under one lock, which a new epoch takes too (see
                // `PartitionShared::new_epoch`): a reader resumes exactly after what it handed
                // out.
                let mut last = p.last_dequeued();
                let current = b.epoch == p.epoch.load(Ordering::Acquire);
                if let (true, Some(head)) = (current, &b.head) {
                    *last = Some(head.id_of(r));
                }
                current
            };
            if current {
                p.stats.received(r.payload.len());
                let head = b.head.as_ref()?;
                let r = b.records.next()?;
                if b.records.as_slice().is_empty() {
                    // The entry's last message: its bytes leave the consumer's budget now,
                    // not at the next `recv` (a task waiting for room must not wait for it).
                    b.charge = None;
                }
                return Some(head.message(r));
            }
            b.records.next();
        }
    }

    /// Waits for the next message. After the consumer is closed for good (closed by the broker,
    /// failed ...) this returns that error once, then [`Error::Closed`]. After
    /// [`close`](Self::close) it fails with [`Error::Closed`] at once, even with messages still
    /// queued (as Java's `receive`): they were never handed out and the broker gives them to
    /// another consumer.
    ///
    /// Once every partition of every topic reached the end of its terminated topic (see
    /// [`has_reached_end_of_topic`](Self::has_reached_end_of_topic)), this returns
    /// [`Error::TopicTerminated`] once, after the messages received before; the consumer
    /// stays open (Java tells its listener `reachedEndOfTopic` and its `receive` waits): a
    /// later `recv` waits for messages (e.g. after a seek), and [`close`](Self::close)
    /// detaches it on the broker.
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
        if self.closed_by_app.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        if let Some(m) = self.peeked.take() {
            return Ok(self.consumed(m));
        }
        if let Some(m) = self.take_buffered() {
            return Ok(self.consumed(m));
        }
        loop {
            let Some((index, epoch, item)) = self.rx.recv().await else {
                return Err(Error::Closed);
            };
            if let Some(r) = self.accept(index, epoch, item) {
                return r.map(|m| self.consumed(m));
            }
        }
    }

    /// A message the application takes: through the interceptors' `before_consume`, if any
    /// (Java `ConsumerBase.beforeConsume`, called as `receive` returns the message). Passed
    /// by value, so that without interceptors the message goes straight to the result (no
    /// place of its own whose address escapes) and the check is all that is left.
    #[inline(always)]
    fn consumed(&self, m: Message) -> Message {
        match &self.interceptors {
            None => m,
            Some(c) => before_consume(c, m),
        }
    }

    /// The task of the main topic that owns `id`; `Err` when several topics could
    /// (a multi-topic consumer: an id names no topic).
    fn partition_of(&self, id: &MessageId) -> Result<Option<Arc<PartitionShared>>> {
        let owners = topics::registry::lock(&self.registry).owners_of_id(id);
        if owners.mains > 1 {
            return Err(Error::InvalidOperation(format!(
                "message id {id} may belong to any of this consumer's {} topics: an id \
                 names no topic (seek by time, or to earliest / latest)",
                self.topics().len()
            )));
        }
        Ok(owners.main)
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
        shared
            .send_control(make(tx))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.unwrap_or(Err(Error::Closed))
    }

    /// The consumer's lifecycle state (aggregated over partitions like
    /// [`crate::Producer::state`]).
    ///
    /// A pattern consumer's topic that was deleted does not count (its consumer ended; the
    /// topic leaves the consumer). On a multi-topic or pattern consumer (or one with
    /// `retry_enable`) a topic that ended for good (closed by the broker,
    /// failed) does not end the consumer while its other topics run, like upstream's
    /// `MultiTopicsConsumerImpl`: the state is terminal once every topic ended.
    pub fn state(&self) -> State {
        let states: Vec<State> = self.state_watchers().iter().map(|w| *w.borrow()).collect();
        aggregate_until_all_end(&states)
    }

    /// What the state follows: the live tasks, and a pattern consumer's discovery (open while
    /// it has no topic).
    fn state_watchers(&self) -> Vec<watch::Receiver<State>> {
        let mut all: Vec<_> = self.live().iter().map(|p| p.state.clone()).collect();
        if let Some(d) = &self.discovery {
            all.push(d.state());
        }
        all
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
        let mut members = Vec::with_capacity(parts.len());
        for p in &parts {
            let state = *p.state.borrow();
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
        let mut stats = crate::stats::ConsumerStats::aggregate(self.state(), members);
        stats.interceptor_panics = crate::interceptor::panics(&self.interceptors);
        stats
    }

    /// The tasks whose topic was not deleted under them.
    fn live(&self) -> Vec<Arc<PartitionShared>> {
        let mut all = self.all();
        all.retain(|p| !p.topic_deleted.load(Ordering::Acquire));
        all
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
    ///
    /// A multi-topic or pattern consumer's stream follows the partitions subscribed when it was
    /// made (and a pattern consumer's discovery: it stays open without topics).
    pub fn states(&self) -> StateStream {
        StateStream::until_all_end(self.state_watchers())
    }

    /// Resolves once the consumer reached a terminal state ([`State::is_terminal`]), with
    /// that state: [`State::Closed`] after a close by the application (its
    /// [`close`](Self::close), dropping it, or [`Client::close`](crate::Client::close)), else
    /// why it ended (e.g. [`State::ClosedByBroker`], [`State::Failed`]; reaching the end of a
    /// terminated topic is no end, see [`Consumer::has_reached_end_of_topic`]). The future is
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
    pub fn closed(&self) -> impl std::future::Future<Output = State> + Send + 'static + use<> {
        self.states().terminal()
    }

    /// Failover subscriptions: whether this consumer is the active one (`None` until the
    /// broker says), and its changes: [`Updates::current`](crate::Updates::current),
    /// [`Updates::changed`](crate::Updates::changed) or the stream. (Of the first partition of
    /// the first topic; a pattern consumer with no topic yet: `None`, never changing.)
    pub fn active_updates(&self) -> crate::updates::Updates<Option<bool>> {
        crate::updates::Updates::until(
            match self.all().first() {
                Some(p) => p.active.subscribe(),
                None => watch::channel(None).1,
            },
            self.closed(),
        )
    }

    /// Deletes the subscription (the consumer must be its only one) on every topic and
    /// partition, and closes the consumer. When the broker refuses (e.g. another consumer is
    /// attached), the error is returned and the consumer stays usable, as upstream's
    /// `unsubscribeAsync` leaves it Ready (a pattern consumer stops discovering topics from
    /// the first unsubscribe on, as upstream's, which is Closing from then on).
    pub async fn unsubscribe(&self) -> Result<()> {
        if let Some(d) = &self.discovery {
            // Java PatternMultiTopicsConsumerImpl: the consumer is Closing before it
            // unsubscribes, and topic changes are ignored from then on. Discovery left running
            // would see the unsubscribed topics' consumers end and subscribe them again,
            // re-creating the subscription. A subscribe in flight is waited for: its topic
            // is unsubscribed with the others.
            d.stop_settled().await;
        }
        // Concurrently, like upstream's MultiTopicsConsumerImpl.unsubscribeAsync.
        let all = self.all();
        let asks = all.iter().map(|p| Self::ask(p, ConsumerOp::Unsubscribe));
        let result: Result<()> = futures::future::join_all(asks).await.into_iter().collect();
        if result.is_ok() {
            // Gone from the broker: nothing more is handed out (as after `close`).
            self.closed_by_app.store(true, Ordering::Relaxed);
        }
        result
    }

    /// The dead-letter topic, when this consumer publishes to one: a dead-letter policy on a
    /// Shared or Key_Shared subscription, or `retry_enable` on any subscription (retries past
    /// the maximum go there). A multi-topic consumer has one per topic (unless the policy
    /// names one); this is the first topic's.
    pub fn dead_letter_topic(&self) -> Option<&str> {
        self.dlq.as_ref().map(|d| d.dlq_topic.as_str())
    }

    /// Publishes `msg` to the retry-letter topic, to be delivered again after `delay` (with
    /// RECONSUMETIMES and DELAY_TIME properties), then acks it. Past the policy's maximum it
    /// goes to the dead-letter topic instead (with the RECONSUMETIMES and DELAY_TIME of this
    /// call), and counts as dead-lettered in [`stats`](Self::stats) and metrics.
    ///
    /// Needs `retry_enable`; works on every subscription type, like Java and Go: on Exclusive
    /// and Failover the retry topic is subscribed with the same type, and the message is acked
    /// individually. Fails with [`Error::InvalidConfig`] without `retry_enable`.
    ///
    /// It waits for the broker to store the retry copy; to keep receiving meanwhile, call
    /// [`Acker::reconsume_later`] from another task (the same code). Cancel safety: dropped
    /// after the copy was published but before the ack, the message is also redelivered
    /// (at-least-once, never lost).
    pub async fn reconsume_later(&self, msg: &Message, delay: Duration) -> Result<()> {
        self.acker.reconsume_later(msg, delay).await
    }
}

/// The interceptors' `before_consume`, out of line (the hot path only checks for them).
#[cold]
#[inline(never)]
fn before_consume(
    c: &crate::interceptor::Chain<dyn crate::interceptor::ConsumerInterceptor>,
    mut m: Message,
) -> Message {
    c.before_consume(&mut m);
    m
}

/// The (first) topic's dead-letter / retry publisher.
fn first_sink(groups: &Groups) -> Option<Arc<engine::dlq::DeadLetterSink>> {
    let groups = groups.lock().unwrap_or_else(|e| e.into_inner());
    groups.first().and_then(|g| g.sink.clone())
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
        if self.closed_by_app.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        if let Some(m) = self.peeked.take() {
            return Poll::Ready(Some(Ok(self.consumed(m))));
        }
        if let Some(m) = self.take_buffered() {
            return Poll::Ready(Some(Ok(self.consumed(m))));
        }
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some((index, epoch, item))) => {
                    if let Some(r) = self.accept(index, epoch, item) {
                        return Poll::Ready(Some(r.map(|m| self.consumed(m))));
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
