//! [`Acker`]: acknowledges a consumer's messages from any task.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::consumer::handle::PartitionShared;
use crate::consumer::op::ConsumerOp;
use crate::consumer::{ended_error, Registry, SubscriptionType, TopicGroup};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// Acknowledges (or negatively acknowledges) the messages of one [`Consumer`](crate::consumer::Consumer)
/// from any task. Get one with [`Consumer::acker`](crate::consumer::Consumer::acker).
///
/// Cheap to clone (an `Arc`), `Send + Sync` and `'static`, so spawned workers can ack what
/// they processed while one loop keeps receiving. It is the same code path as
/// [`Consumer::ack`](crate::consumer::Consumer::ack) and friends: acks are grouped and sent in the
/// background by the partition's task, and keep working across reconnects (acks made while
/// the consumer re-subscribes are sent once it is back).
///
/// Once the consumer is closing or closed (by [`Consumer::close`](crate::consumer::Consumer::close), by
/// dropping it, or by [`Client::close`](crate::Client::close)) every call fails with
/// [`Error::Closed`] and sends nothing. (Dropping a consumer starts its close in the
/// background: an ack made in that instant, before the close began, still returns `Ok` and
/// is sent with the close's final ack flush.) when it ended otherwise, with the error that ended it
/// (e.g. [`Error::ClosedByBroker`]). An acker does not keep its consumer alive.
///
/// ```no_run
/// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
/// let mut consumer = client.consumer("orders").subscription("s").subscribe().await?;
/// let acker = consumer.acker();
/// let msg = consumer.recv().await?;
/// tokio::spawn(async move {
///     // ... process the message somewhere else, then:
///     if msg.payload.is_empty() {
///         acker.nack(&msg)
///     } else {
///         acker.ack(&msg)
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Acker {
    inner: Arc<AckerInner>,
}

#[derive(Debug)]
struct AckerInner {
    topic: TopicName,
    subscription: String,
    subscription_type: SubscriptionType,
    registry: Registry,
    /// The consumer's topics with their dead-letter / retry publishers (weak: an acker does
    /// not keep its consumer's publishers alive).
    groups: Weak<std::sync::Mutex<Vec<TopicGroup>>>,
    /// Whether `reconsume_later` may publish to the retry topic.
    retry_enable: bool,
    /// The consumer's interceptors (`on_acknowledge`, `on_acknowledge_cumulative`).
    interceptors: crate::interceptor::Interceptors<dyn crate::interceptor::ConsumerInterceptor>,
}

impl Acker {
    pub(crate) fn new(
        topic: TopicName,
        subscription: String,
        subscription_type: SubscriptionType,
        registry: Registry,
        groups: Weak<std::sync::Mutex<Vec<TopicGroup>>>,
        retry_enable: bool,
        interceptors: crate::interceptor::Interceptors<dyn crate::interceptor::ConsumerInterceptor>,
    ) -> Self {
        Acker {
            inner: Arc::new(AckerInner {
                topic,
                subscription,
                subscription_type,
                registry,
                groups,
                retry_enable,
                interceptors,
            }),
        }
    }

    /// [`Consumer::reconsume_later`](crate::consumer::Consumer::reconsume_later) from any task: publishes
    /// `msg` to the retry-letter topic, to be delivered again after `delay`, then acks it (past
    /// the policy's maximum it goes to the dead-letter topic, counted as dead-lettered). The
    /// receive loop goes on meanwhile. Needs `retry_enable` ([`Error::InvalidConfig`]
    /// otherwise); fails with [`Error::Closed`] once the consumer is closed.
    ///
    /// Cancel safety: dropped after the copy was published but before the ack, the message is
    /// also redelivered (at-least-once, never lost).
    ///
    /// ```no_run
    /// # async fn demo(acker: pulsar_sdk::consumer::Acker, msg: pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// tokio::spawn(async move {
    ///     // ... the work failed for now: try again in a minute.
    ///     let _ = acker.reconsume_later(&msg, std::time::Duration::from_secs(60)).await;
    /// });
    /// # Ok(()) }
    /// ```
    pub async fn reconsume_later(&self, msg: &Message, delay: Duration) -> Result<()> {
        if !self.inner.retry_enable {
            return Err(Error::InvalidConfig(
                "reconsume_later needs retry_enable".into(),
            ));
        }
        let (source, sink) = {
            let tasks = crate::consumer::topics::registry::lock(&self.inner.registry);
            let p = self.source_of(&tasks, msg)?;
            Self::check_open(p)?;
            let groups = self.inner.groups.upgrade().ok_or(Error::Closed)?;
            let groups = groups.lock().unwrap_or_else(|e| e.into_inner());
            let sink = groups
                .iter()
                .find(|g| g.topic == p.base)
                .and_then(|g| g.sink.clone())
                .ok_or_else(|| Error::InvalidConfig("reconsume_later needs retry_enable".into()))?;
            (p.clone(), sink)
        };
        let dead_lettered = Box::pin(sink.retry_later(msg, delay)).await?;
        if dead_lettered {
            // Every path into the dead-letter topic counts (stats and metrics).
            source.stats.dead_lettered();
        }
        self.ack(msg)
    }

    /// Acknowledges one message. For a message of a batch, the broker is told once every
    /// message of that batch is acknowledged.
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// acker.ack(msg)?;
    /// # Ok(()) }
    /// ```
    pub fn ack(&self, msg: &Message) -> Result<()> {
        // The hot path: straight into the source task's ack buffer (no op built and matched).
        // With interceptors, the same out of line: the check is all this path pays for them.
        if self.inner.interceptors.is_some() {
            return self.ack_intercepted(msg);
        }
        self.ack_source(msg)
    }

    /// [`Acker::ack`] with the interceptors' `on_acknowledge`.
    #[cold]
    #[inline(never)]
    fn ack_intercepted(&self, msg: &Message) -> Result<()> {
        let r = self.ack_source(msg);
        self.acked(false, &msg.topic, &msg.id, &r);
        r
    }

    #[inline(always)]
    fn ack_source(&self, msg: &Message) -> Result<()> {
        let tasks = crate::consumer::topics::registry::lock(&self.inner.registry);
        let p = self.source_of(&tasks, msg)?;
        Self::check_open(p)?;
        if Self::from_cluster_left(p, msg) {
            return Ok(());
        }
        p.send_ack(msg.id).map_err(|_| Error::Closed)
    }

    /// Whether `msg` was received on a cluster the client has left (cluster-level failover):
    /// its id names another message on the cluster in use, so acking (or negatively acking)
    /// it there would ack that one. Such an op is dropped: the message stays unacked on its
    /// own cluster. (Java's consumer sends it on the new connection as it is.)
    #[inline(always)]
    pub(super) fn from_cluster_left(p: &PartitionShared, msg: &Message) -> bool {
        let left = msg.cluster != p.client_cluster.load(std::sync::atomic::Ordering::Acquire);
        if left {
            tracing::debug!(topic = %msg.topic, id = %msg.id,
                "not acked: received on a cluster the client has left");
        }
        left
    }

    /// The interceptors' `on_acknowledge` / `on_acknowledge_cumulative` for an ack the
    /// application made (Java calls them as the ack completes, with its error if it failed).
    #[cold]
    fn acked(&self, cumulative: bool, topic: &TopicName, id: &MessageId, r: &Result<()>) {
        if let Some(c) = &self.inner.interceptors {
            let r = r.as_ref().map(|_| ());
            if cumulative {
                c.on_acknowledge_cumulative(topic, id, r)
            } else {
                c.on_acknowledge(topic, id, r)
            }
        }
    }

    /// Acknowledges a message by id (of this consumer's topic).
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// let id = msg.id;
    /// acker.ack_id(id)?;
    /// # Ok(()) }
    /// ```
    pub fn ack_id(&self, id: MessageId) -> Result<()> {
        self.to_partition(&id, ConsumerOp::Ack(id))
    }

    /// Negatively acknowledges a message: it is redelivered after the consumer's
    /// negative-ack delay (or its backoff for the message's redelivery count), or goes to the
    /// dead-letter topic once it was delivered too often.
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// acker.nack(msg)?;
    /// # Ok(()) }
    /// ```
    pub fn nack(&self, msg: &Message) -> Result<()> {
        self.to_source(msg, ConsumerOp::Nack(msg.id, msg.redelivery_count))
    }

    /// Negatively acknowledges a message by id. Like upstream's
    /// `negativeAcknowledge(MessageId)`, a [`negative_ack_backoff`] counts the message as
    /// delivered once (the id does not carry its redelivery count): prefer [`Acker::nack`]
    /// when the message is at hand.
    ///
    /// [`negative_ack_backoff`]: crate::consumer::ConsumerBuilder::negative_ack_backoff
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// acker.nack_id(msg.id)?;
    /// # Ok(()) }
    /// ```
    pub fn nack_id(&self, id: MessageId) -> Result<()> {
        self.to_partition(&id, ConsumerOp::Nack(id, 0))
    }

    /// Acknowledges every message up to and including this one (on its partition).
    ///
    /// Only on Exclusive and Failover subscriptions: on Shared and Key_Shared ones the broker
    /// ignores cumulative acks, so this fails with [`Error::InvalidOperation`] and sends
    /// nothing (like upstream: "Cannot use cumulative acks on a non-exclusive subscription").
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// acker.ack_cumulative(msg)?; // everything before `msg` on its partition too
    /// # Ok(()) }
    /// ```
    pub fn ack_cumulative(&self, msg: &Message) -> Result<()> {
        let r = self
            .check_cumulative()
            .and_then(|_| self.to_source(msg, ConsumerOp::AckCumulative(msg.id)));
        if self.inner.interceptors.is_some() {
            self.acked(true, &msg.topic, &msg.id, &r);
        }
        r
    }

    /// [`Acker::ack_cumulative`] by id.
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// acker.ack_cumulative_id(msg.id)?;
    /// # Ok(()) }
    /// ```
    pub fn ack_cumulative_id(&self, id: MessageId) -> Result<()> {
        self.check_cumulative()?;
        self.to_partition(&id, ConsumerOp::AckCumulative(id))
    }

    pub(super) fn check_cumulative(&self) -> Result<()> {
        match self.inner.subscription_type {
            SubscriptionType::Shared | SubscriptionType::KeyShared => {
                Err(Error::InvalidOperation(format!(
                    "cannot use cumulative acks on a {:?} subscription ({}); ack each message",
                    self.inner.subscription_type, self.inner.subscription
                )))
            }
            _ => Ok(()),
        }
    }

    /// The task that delivered `msg` and the subscription, for an acknowledgement in a
    /// transaction (PIP-31): refused like a plain one when the consumer is closed, or for a
    /// cumulative ack on a Shared or Key_Shared subscription.
    #[cfg(feature = "transactions")]
    pub(crate) fn txn_target(
        &self,
        msg: &Message,
        cumulative: bool,
    ) -> Result<(Arc<PartitionShared>, &str)> {
        if cumulative {
            self.check_cumulative()?;
        }
        let tasks = crate::consumer::topics::registry::lock(&self.inner.registry);
        let p = self.source_of(&tasks, msg)?;
        Self::check_open(p)?;
        Ok((p.clone(), &self.inner.subscription))
    }

    /// Routes an op about a received message to the partition task it came from.
    fn to_source(&self, msg: &Message, op: ConsumerOp) -> Result<()> {
        // Sent under the registry's lock (sending never blocks): no `Arc` clone per ack.
        let tasks = crate::consumer::topics::registry::lock(&self.inner.registry);
        let p = self.source_of(&tasks, msg)?;
        if Self::from_cluster_left(p, msg) {
            return Ok(());
        }
        self.send(p, op)
    }

    /// The task that delivered `msg`. (Always inlined: the ack hot path pays for a call
    /// otherwise, issue #18.)
    #[inline(always)]
    fn source_of<'a>(
        &self,
        tasks: &'a crate::consumer::topics::registry::Tasks,
        msg: &Message,
    ) -> Result<&'a Arc<PartitionShared>> {
        match tasks.get_ref(msg.source) {
            Some(p) if p.topic == msg.topic => Ok(p),
            _ => Err(self.not_ours(msg)),
        }
    }

    #[cold]
    fn not_ours(&self, msg: &Message) -> Error {
        Error::InvalidConfig(format!(
            "message {} of {} is not from this consumer (of {})",
            msg.id, msg.topic, self.inner.topic
        ))
    }

    /// Routes an op about an id to the partition of the consumer's topic that owns it. An id
    /// carries no topic: with `retry_enable` it could name a message of the retry topic as
    /// well (same partition number), and acking it on the main topic would return `Ok` and
    /// ack nothing; such ids are refused (ack the [`Message`] instead, which knows its source).
    ///
    /// Likewise on a multi-topic consumer, an id that several topics could own is refused;
    /// use [`Acker::ack_topic_id`] / [`Acker::nack_topic_id`], which name the topic.
    fn to_partition(&self, id: &MessageId, op: ConsumerOp) -> Result<()> {
        let owners = crate::consumer::topics::registry::lock(&self.inner.registry).owners_of_id(id);
        if owners.retry {
            return Err(Error::InvalidOperation(format!(
                "message id {id} may belong to the topic or to its retry topic \
                 (retry_enable): acknowledge the Message, not its id"
            )));
        }
        if owners.mains > 1 {
            return Err(Error::InvalidOperation(format!(
                "message id {id} may belong to any of this consumer's topics: acknowledge \
                 the Message, or use ack_topic_id / nack_topic_id with its topic"
            )));
        }
        let p = owners.main.ok_or_else(|| {
            Error::InvalidOperation(format!("message id {id} is not from this consumer"))
        })?;
        self.send_by_id(&p, op)
    }

    /// Routes an op about an id of `topic` (the message's [`Message::topic`]: the partition's
    /// name for a partitioned topic) to the task that subscribes it.
    fn to_topic(&self, topic: &TopicName, id: &MessageId, op: ConsumerOp) -> Result<()> {
        let p = crate::consumer::topics::registry::lock(&self.inner.registry)
            .owner_of_topic(topic, id)
            .ok_or_else(|| {
                Error::InvalidOperation(format!(
                    "message id {id} of {topic}: no such topic in this consumer"
                ))
            })?;
        self.send_by_id(&p, op)
    }

    /// Acknowledges a message by its topic and id: what a multi-topic consumer needs when only
    /// the id was kept (an id names no topic). `topic` is the message's
    /// [`Message::topic`] (a partition's name, or the partitioned topic's name with the id's
    /// partition).
    ///
    /// ```no_run
    /// # fn demo(acker: &pulsar_sdk::consumer::Acker, msg: &pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// let (topic, id) = (msg.topic.clone(), msg.id);
    /// acker.ack_topic_id(&topic, id)?;
    /// # Ok(()) }
    /// ```
    pub fn ack_topic_id(&self, topic: &TopicName, id: MessageId) -> Result<()> {
        self.to_topic(topic, &id, ConsumerOp::Ack(id))
    }

    /// Negatively acknowledges a message by its topic and id (see [`Acker::ack_topic_id`]
    /// and [`Acker::nack_id`]).
    pub fn nack_topic_id(&self, topic: &TopicName, id: MessageId) -> Result<()> {
        self.to_topic(topic, &id, ConsumerOp::Nack(id, 0))
    }

    /// Refused at once while closing: the close flushes the acks made before it, and an ack
    /// made after it would be lost silently.
    fn check_open(p: &PartitionShared) -> Result<()> {
        let state = p.state_now.get();
        if state.refuses_work() {
            return Err(ended_error(state, &p.base));
        }
        // `close()` began (its Close op may not be taken yet): refused as on a Closing
        // consumer (Java `closeAsync` sets Closing before it flushes and closes).
        if p.handles.close_gate.refuses() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn send(&self, p: &PartitionShared, op: ConsumerOp) -> Result<()> {
        Self::check_open(p)?;
        match op {
            // Individual acks, the hot path, gather in the ack buffer (see `ops`).
            ConsumerOp::Ack(id) => p.send_ack(id).map_err(|_| Error::Closed),
            op => p.send_op(op).map_err(|_| Error::Closed),
        }
    }

    /// [`Self::send`] of an op by id, whose topic is known once its task is: an ack goes
    /// through the interceptors with it (an ack of a `Message` does, with the message's).
    fn send_by_id(&self, p: &PartitionShared, op: ConsumerOp) -> Result<()> {
        let acked = match (&self.inner.interceptors, &op) {
            (Some(_), ConsumerOp::Ack(id)) => Some((false, *id)),
            (Some(_), ConsumerOp::AckCumulative(id)) => Some((true, *id)),
            _ => None,
        };
        let r = self.send(p, op);
        if let Some((cumulative, id)) = acked {
            self.acked(cumulative, &p.topic, &id, &r);
        }
        r
    }
}
