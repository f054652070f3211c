//! Consumers: [`Consumer`] receives from a subscription (all partitions of a partitioned topic,
//! merged into one stream), and [`Reader`] reads a topic from a chosen position.
//!
//! Each partition has a task that keeps the broker's flow permits topped up (refilled when
//! half the receiver queue has been consumed), unpacks batches zero-copy, groups acks, and
//! re-subscribes after a connection loss — discarding queued messages the broker will
//! redeliver.

mod acker;
mod batch_receive;
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
mod receive;
mod seek;
mod status;
pub(crate) mod topics;
#[cfg(feature = "transactions")]
mod transactional;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

pub use acker::Acker;
pub use batch_receive::Messages;
pub use builder::ConsumerBuilder;
pub use dlq::DeadLetterPolicy;
pub use options::{
    BatchReceivePolicy, ConsumerOptions, InitialPosition, RedeliveryBackoff, SubscriptionMode,
    SubscriptionType,
};
pub use reader::{Reader, ReaderBuilder};
pub(crate) use seek::LastIdsQuery;
pub use topics::pattern::TopicsChanged;

use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::topic::TopicName;

use crate::lifecycle::State;
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
    /// The queue from the partition tasks and the rest of the entry being handed out (see
    /// [`queue::Item::Messages`]); reached through [`Consumer::inbound`] (no lock) but in `close`.
    queue: Mutex<queue::Inbound>,
    /// Messages received but not yet handed out (from `has_message_available` peeks).
    peeked: Option<Message>,
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
    /// With a zero-size receiver queue, its one partition task: a receive that waits asks it
    /// for one message (see `receive::Waiting`); `None` otherwise.
    zero_queue: Option<Arc<PartitionShared>>,
    /// An auto-scaled receiver queue (PIP-74): a receive that finds the queue empty tells the
    /// partition tasks, whose queues may grow (see `flow::auto_scale`).
    auto_scaled: bool,
    /// Auto-scaled: a stream poll that found the queue empty told the tasks, and no item was
    /// taken since (see the `Stream` impl: once per wait).
    more_expected: bool,
    /// The bounds of [`Consumer::batch_recv`], as adjusted to the receiver queue.
    batch_policy: BatchReceivePolicy,
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
        rx: crate::consumer::queue::QueueReceiver,
        groups: Vec<TopicGroup>,
        count: watch::Receiver<usize>,
    ) -> Consumer {
        let options = &ctx.options;
        let groups: Groups = Arc::new(Mutex::new(groups));
        Consumer {
            subscription: options.subscription.clone(),
            queue: Mutex::new(queue::Inbound::new(rx)),
            peeked: None,
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
            // Refused with more than one task (`topics::topic::refuse_zero_queue`).
            zero_queue: (options.receiver_queue_size == 0)
                .then(|| topics::registry::lock(&ctx.registry).iter().next().cloned())
                .flatten(),
            auto_scaled: options.auto_scaled_receiver_queue_size,
            more_expected: false,
            batch_policy: options
                .batch_receive_policy
                .effective(options.receiver_queue_size),
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
            self.clear_queue();
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
