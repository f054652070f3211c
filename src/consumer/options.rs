//! Consumer configuration.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::message_id::MessageId;

use crate::consumer::dlq::DeadLetterPolicy;

/// Redelivery delays that grow with a message's redelivery count:
/// `min_delay * multiplier^redelivery_count`, capped at `max_delay` (like Java's
/// `MultiplierRedeliveryBackoff`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedeliveryBackoff {
    /// Delay of the first redelivery.
    pub min_delay: Duration,
    /// Largest delay.
    pub max_delay: Duration,
    /// Growth per redelivery (default 2).
    pub multiplier: f64,
}

impl RedeliveryBackoff {
    /// An exponential backoff between `min_delay` and `max_delay`, doubling each time.
    pub fn exponential(min_delay: Duration, max_delay: Duration) -> Self {
        RedeliveryBackoff {
            min_delay,
            max_delay,
            multiplier: 2.0,
        }
    }

    /// The delay for a message redelivered `redelivery_count` times so far.
    pub fn delay(&self, redelivery_count: u32) -> Duration {
        let factor = self
            .multiplier
            .max(1.0)
            .powi(redelivery_count.min(64) as i32);
        let secs = self.min_delay.as_secs_f64() * factor;
        if !secs.is_finite() || secs >= self.max_delay.as_secs_f64() {
            self.max_delay
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

/// The bounds of a [`Consumer::batch_recv`](crate::Consumer::batch_recv) (Java's
/// `BatchReceivePolicy`): a batch is complete as soon as one of them is reached, and holds what
/// had arrived by then.
///
/// - `max_num_messages`: the most messages in a batch (0: no bound, the default);
/// - `max_num_bytes`: the most payload bytes in a batch (0: no bound; default 10 MiB). The
///   first message of a batch is always taken, however large;
/// - `timeout`: how long a call waits, from the moment it is made, for the other bounds
///   (zero: no timeout; default 100 ms). A batch cut by the timeout holds what had arrived,
///   possibly nothing;
/// - `messages_from_multi_topics`: whether one batch may hold messages of several topics or
///   partitions (default `true`). With `false`, a batch ends before the first message of a
///   topic (partition) other than its first message's: then
///   [`Consumer::ack_cumulative_all`](crate::Consumer::ack_cumulative_all) acks one partition.
///
/// As upstream (`ConsumerBase`), when the consumer subscribes: a policy with all three bounds
/// at zero is refused; a `max_num_messages` above the receiver queue size is lowered to it (a
/// batch could never fill); a policy with a timeout only gets the default byte bound.
///
/// Without a timeout a batch waits until a bound is reached, as upstream's. What a consumer
/// can queue is also bounded by its byte budget (half the client's
/// [`memory_limit`](crate::ClientBuilder::memory_limit), shared by its consumers: see
/// [`receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size)), which upstream's
/// receiver queue is not: bounds the budget cannot hold (more bytes than it, or more messages
/// than fit in it) are never reached, so keep a timeout with large bounds.
///
/// ```
/// use std::time::Duration;
/// use pulsar_sdk::consumer::BatchReceivePolicy;
///
/// let policy = BatchReceivePolicy::default()
///     .max_num_messages(100)
///     .max_num_bytes(1024 * 1024)
///     .timeout(Duration::from_millis(50));
/// assert_eq!(policy.max_num_messages, 100);
/// assert_eq!(BatchReceivePolicy::default().max_num_bytes, 10 * 1024 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BatchReceivePolicy {
    /// The most messages in a batch; 0 = no bound (the default, Java's -1).
    pub max_num_messages: u32,
    /// The most payload bytes in a batch; 0 = no bound. Default 10 MiB.
    pub max_num_bytes: usize,
    /// How long a batch waits for the other bounds, counted from the call; zero = no
    /// timeout. Default 100 ms.
    pub timeout: Duration,
    /// Whether a batch may hold messages of several topics (partitions). Default `true`.
    pub messages_from_multi_topics: bool,
}

impl Default for BatchReceivePolicy {
    /// Upstream's `BatchReceivePolicy.DEFAULT_POLICY`: no message bound, 10 MiB, 100 ms,
    /// messages of several topics together.
    fn default() -> Self {
        BatchReceivePolicy {
            max_num_messages: 0,
            max_num_bytes: 10 * 1024 * 1024,
            timeout: Duration::from_millis(100),
            messages_from_multi_topics: true,
        }
    }
}

impl BatchReceivePolicy {
    /// The most messages in a batch (0: no bound).
    pub fn max_num_messages(mut self, n: u32) -> Self {
        self.max_num_messages = n;
        self
    }

    /// The most payload bytes in a batch (0: no bound).
    pub fn max_num_bytes(mut self, n: usize) -> Self {
        self.max_num_bytes = n;
        self
    }

    /// How long a batch waits for the other bounds, from the call (zero: no timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether a batch may hold messages of several topics (partitions).
    pub fn messages_from_multi_topics(mut self, enabled: bool) -> Self {
        self.messages_from_multi_topics = enabled;
        self
    }

    /// The policy a consumer with `receiver_queue_size` applies, as upstream's `ConsumerBase`
    /// constructor adjusts the one it is given: more messages than the receiver queue holds
    /// are lowered to it (the queue would never hold a full batch), and a policy with neither
    /// a message nor a byte bound gets the default ones (a timeout alone keeps its timeout).
    /// Both adjustments are logged, as upstream warns.
    pub(crate) fn effective(self, receiver_queue_size: u32) -> Self {
        let mut p = self;
        if receiver_queue_size > 0 && p.max_num_messages > receiver_queue_size {
            tracing::warn!(
                max_num_messages = p.max_num_messages,
                receiver_queue_size,
                "batch receive: max_num_messages is above the receiver queue size; lowered to it"
            );
            p.max_num_messages = receiver_queue_size;
        } else if p.max_num_messages == 0 && p.max_num_bytes == 0 {
            let d = BatchReceivePolicy::default();
            tracing::warn!(
                max_num_bytes = d.max_num_bytes,
                "batch receive: neither max_num_messages nor max_num_bytes set; the default \
                 byte bound applies"
            );
            p.max_num_messages = d.max_num_messages;
            p.max_num_bytes = d.max_num_bytes;
        }
        p
    }
}

/// How a subscription shares messages between its consumers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubscriptionType {
    /// One consumer only (the default).
    #[default]
    Exclusive,
    /// Messages spread round-robin over all consumers.
    Shared,
    /// One active consumer; the others take over when it leaves.
    Failover,
    /// Messages of one key always go to the same consumer.
    KeyShared,
}

impl SubscriptionType {
    pub(crate) fn to_proto(self) -> i32 {
        use crate::proto::command_subscribe::SubType;
        (match self {
            SubscriptionType::Exclusive => SubType::Exclusive,
            SubscriptionType::Shared => SubType::Shared,
            SubscriptionType::Failover => SubType::Failover,
            SubscriptionType::KeyShared => SubType::KeyShared,
        }) as i32
    }
}

/// Where a new subscription starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum InitialPosition {
    /// At the end: only messages published from now on (the default).
    #[default]
    Latest,
    /// At the beginning of the stored messages.
    Earliest,
}

/// Whether the subscription's position is stored by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscriptionMode {
    /// The broker keeps the subscription and its position (the default on persistent topics).
    Durable,
    /// The subscription lives only while a consumer is connected (always the case on
    /// non-persistent topics, PIP-245).
    NonDurable,
}

/// Everything a consumer is configured with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// The subscription name (required).
    pub subscription: String,
    /// The subscription type. Default Exclusive.
    pub subscription_type: SubscriptionType,
    /// Where a new subscription starts. Default Latest.
    pub initial_position: InitialPosition,
    /// Durable or not; `None` (the default) = durable on persistent topics and non-durable on
    /// non-persistent ones.
    pub subscription_mode: Option<SubscriptionMode>,
    /// The consumer name; random when unset.
    pub consumer_name: Option<String>,
    /// Messages the broker may push ahead of the application (flow permits). Default 1000;
    /// refilled when half are consumed. 0: a zero-size receiver queue, one permit per
    /// receive (see [`ConsumerBuilder::receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size)).
    ///
    /// A `u32` (unlike the producer's `max_pending_messages: usize`) on purpose: it is a
    /// count of flow permits, which the protocol carries as a `uint32` (`CommandFlow`), so no
    /// value the broker cannot be given is accepted.
    pub receiver_queue_size: u32,
    /// Bounds the receiver queues of a partitioned consumer in all: each partition gets
    /// `min(receiver_queue_size, this / partitions)` (at least 1), like upstream's
    /// `maxTotalReceiverQueueSizeAcrossPartitions`. Default 50,000; at least 1.
    pub max_total_receiver_queue_size_across_partitions: u32,
    /// Acks are grouped for this long before being sent. Default 100 ms; zero sends each ack
    /// at once.
    pub ack_group_time: Duration,
    /// At most this many acks in one group. Default 1000.
    pub ack_group_max: usize,
    /// Delay before a negatively acked message is redelivered. Default 60 s.
    pub negative_ack_delay: Duration,
    /// Properties of the subscription (set when it is created).
    pub subscription_properties: BTreeMap<String, String>,
    /// Consumer priority for Shared subscriptions (lower = higher priority).
    pub priority_level: Option<i32>,
    /// Read a compacted view of the topic.
    pub read_compacted: bool,
    /// Opt-in batch-index acknowledgement (acks parts of a batch on the broker). Off by default:
    /// brokers that ignore `ack_set` (e.g. pulsar-lite) would ack the whole batch.
    pub batch_index_ack: bool,
    /// Dead-letter (and retry) topics (PIP-124); only used on Shared and Key_Shared
    /// subscriptions, like upstream.
    pub dead_letter_policy: Option<DeadLetterPolicy>,
    /// Also consume the retry-letter topic and allow [`crate::Consumer::reconsume_later`].
    /// Without a dead-letter policy, retries are bounded by upstream's default of 16.
    pub retry_enable: bool,
    /// PIP-74's auto-scaled receiver queue (Java `autoScaledReceiverQueueSizeEnabled`): each
    /// partition's queue starts at 1 message and doubles, up to `receiver_queue_size`, each
    /// time the application found it empty after it had filled, while the client memory
    /// limit is less than 75 % used; it halves when the usage passes 95 %. Default off.
    pub auto_scaled_receiver_queue_size: bool,
    /// Redeliver messages not acked within this time (zero = off, the default; at least 1 s).
    pub ack_timeout: Duration,
    /// How often unacked messages are checked for the ack timeout. Default 1 s.
    pub ack_timeout_tick: Duration,
    /// Grow negative-ack delays with the redelivery count (instead of `negative_ack_delay`).
    pub negative_ack_backoff: Option<RedeliveryBackoff>,
    /// Grow with the topic when it gains partitions (PIP-247 push, or polling). Default on.
    pub auto_update_partitions: bool,
    /// Chunked messages (PIP-37) being reassembled at once; when one more starts, the oldest
    /// is evicted (upstream `maxPendingChunkedMessage`). Default 10; at least 1.
    pub max_pending_chunked_messages: usize,
    /// When the oldest incomplete chunked message is evicted, ack its chunks (it is lost)
    /// instead of letting the broker redeliver them (upstream
    /// `autoAckOldestChunkedMessageOnQueueFull`). Default off.
    pub auto_ack_oldest_chunked_message_on_queue_full: bool,
    /// An incomplete chunked message older than this is dropped and its chunks acked
    /// (upstream `expireTimeOfIncompleteChunkedMessage`). Default 60 s; zero = never.
    pub expire_time_of_incomplete_chunked_message: Duration,
    /// The bytes claimed by incomplete chunked messages, in all, for one (partition) consumer
    /// (what arrived is what is held, and it counts in the consumer's byte budget: see
    /// [`ClientBuilder::memory_limit`](crate::ClientBuilder::memory_limit));
    /// also the largest chunked message accepted (a larger `total_chunk_msg_size` claim is
    /// refused with an error item, never allocated), and of the size a compressed message may
    /// declare once decompressed (at least twice the broker's `max_message_size`). Default
    /// 128 MiB; at least 1.
    pub max_chunked_message_bytes: usize,
    /// The bounds of [`Consumer::batch_recv`](crate::Consumer::batch_recv). Default
    /// [`BatchReceivePolicy::default`] (upstream's: no message bound, 10 MiB, 100 ms).
    pub batch_receive_policy: BatchReceivePolicy,
    /// Start position of a non-durable subscription (readers).
    pub(crate) start_message_id: Option<MessageId>,
    /// Whether the start position itself is included.
    pub(crate) start_inclusive: bool,
    /// A reader's `start_message_from_rollback_duration`, in whole seconds (0: none).
    pub(crate) start_message_rollback_secs: u64,
    /// The consumer's schema (`CommandSubscribe.schema`), checked by the broker against the
    /// topic's; set by [`ConsumerBuilder::schema`](crate::ConsumerBuilder::schema).
    pub schema: Option<crate::schema::SchemaInfo>,
    /// Whether SUBSCRIBE may create the topic (a pattern consumer's may not: a topic deleted
    /// while it subscribes must stay deleted, like upstream's `createTopicIfDoesNotExist`).
    pub(crate) force_topic_creation: bool,
    /// End-to-end encryption (PIP-4): where the private keys of encrypted messages come from.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub crypto_key_reader: Option<std::sync::Arc<dyn crate::crypto::CryptoKeyReader>>,
    /// What happens to a message that cannot be decrypted (default: not delivered, an error
    /// item in its place).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub crypto_failure_action: crate::crypto::ConsumerCryptoFailureAction,
    /// The interceptors, in order ([`ConsumerBuilder::interceptor`](crate::ConsumerBuilder::interceptor)).
    pub(crate) interceptors:
        crate::interceptor::Interceptors<dyn crate::interceptor::ConsumerInterceptor>,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            subscription: String::new(),
            subscription_type: SubscriptionType::Exclusive,
            initial_position: InitialPosition::Latest,
            subscription_mode: None,
            consumer_name: None,
            receiver_queue_size: 1000,
            max_total_receiver_queue_size_across_partitions: 50_000,
            ack_group_time: Duration::from_millis(100),
            ack_group_max: 1000,
            negative_ack_delay: Duration::from_secs(60),
            subscription_properties: BTreeMap::new(),
            priority_level: None,
            read_compacted: false,
            batch_index_ack: false,
            dead_letter_policy: None,
            retry_enable: false,
            auto_scaled_receiver_queue_size: false,
            ack_timeout: Duration::ZERO,
            ack_timeout_tick: Duration::from_secs(1),
            negative_ack_backoff: None,
            auto_update_partitions: true,
            max_pending_chunked_messages: 10,
            auto_ack_oldest_chunked_message_on_queue_full: false,
            expire_time_of_incomplete_chunked_message: Duration::from_secs(60),
            max_chunked_message_bytes: 128 * 1024 * 1024,
            batch_receive_policy: BatchReceivePolicy::default(),
            start_message_id: None,
            start_inclusive: false,
            start_message_rollback_secs: 0,
            schema: None,
            force_topic_creation: true,
            #[cfg(feature = "encryption")]
            crypto_key_reader: None,
            #[cfg(feature = "encryption")]
            crypto_failure_action: Default::default(),
            interceptors: None,
        }
    }
}

/// A zero-size receiver queue asked of a consumer of more than one topic or partition, which
/// upstream refuses (`MultiTopicsConsumerImpl`: "Receiver queue size needs to be greater than
/// 0 for Topics Consumer"): one permit per receive cannot be shared fairly by several
/// partitions without prefetching from each.
pub(crate) fn zero_queue_refused(what: &str) -> Error {
    Error::InvalidConfig(format!(
        "receiver_queue_size(0) (a zero-size receiver queue) works on one non-partitioned \
         topic only, like upstream's; refused for {what}; a receiver queue of 1 prefetches \
         at most one message per partition"
    ))
}

impl ConsumerOptions {
    /// The options of each partition consumer of a topic with `partitions` partitions (0: not
    /// partitioned): the receiver queue bounded across partitions, like upstream's
    /// `MultiTopicsConsumerImpl` (`min(receiverQueueSize, maxTotal / partitions)`).
    pub(crate) fn for_partitions(&self, partitions: u32) -> ConsumerOptions {
        let mut o = self.clone();
        if let Some(share) = self
            .max_total_receiver_queue_size_across_partitions
            .checked_div(partitions)
        {
            o.receiver_queue_size = self.receiver_queue_size.min(share.max(1));
        }
        o
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.subscription.trim().is_empty() {
            return Err(Error::InvalidConfig(
                "subscription name must not be empty".into(),
            ));
        }
        if self.receiver_queue_size == 0 && self.auto_scaled_receiver_queue_size {
            // Java `ZeroQueueConsumerImpl.initReceiverQueueSize`: NotImplementedException.
            return Err(Error::InvalidConfig(
                "auto_scaled_receiver_queue_size needs a receiver_queue_size of at least 1 \
                 (a zero-size queue never grows)"
                    .into(),
            ));
        }
        if self.receiver_queue_size == 0 && self.retry_enable {
            // Java subscribes the retry topic too, through a MultiTopicsConsumerImpl.
            return Err(zero_queue_refused(
                "retry_enable (the retry topic is a second topic)",
            ));
        }
        if self.max_total_receiver_queue_size_across_partitions == 0 {
            return Err(Error::InvalidConfig(
                "max_total_receiver_queue_size_across_partitions must be at least 1".into(),
            ));
        }
        if self.ack_group_max == 0 {
            return Err(Error::InvalidConfig(
                "ack_group_max must be at least 1".into(),
            ));
        }
        if !self.ack_timeout.is_zero() && self.ack_timeout < Duration::from_secs(1) {
            return Err(Error::InvalidConfig(
                "ack_timeout must be zero (off) or at least 1 s".into(),
            ));
        }
        if self.ack_timeout_tick.is_zero() {
            return Err(Error::InvalidConfig("ack_timeout_tick must be > 0".into()));
        }
        if let Some(b) = &self.negative_ack_backoff {
            if !(b.multiplier.is_finite() && b.multiplier >= 1.0) {
                return Err(Error::InvalidConfig(
                    "negative_ack_backoff: multiplier must be a finite number >= 1".into(),
                ));
            }
            if b.min_delay > b.max_delay {
                return Err(Error::InvalidConfig(
                    "negative_ack_backoff: min_delay must not exceed max_delay".into(),
                ));
            }
        }
        if self.max_pending_chunked_messages == 0 || self.max_chunked_message_bytes == 0 {
            return Err(Error::InvalidConfig(
                "max_pending_chunked_messages and max_chunked_message_bytes must be at least 1"
                    .into(),
            ));
        }
        if let Some(p) = &self.dead_letter_policy {
            p.validate()?;
        }
        let b = &self.batch_receive_policy;
        if b.max_num_messages == 0 && b.max_num_bytes == 0 && b.timeout.is_zero() {
            // Upstream `BatchReceivePolicy.verify`.
            return Err(Error::InvalidConfig(
                "batch_receive_policy: at least one of max_num_messages, max_num_bytes and \
                 timeout must be set"
                    .into(),
            ));
        }
        if let Some(name) = &self.consumer_name {
            if name.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "consumer name must not be empty".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_queue_is_shared_across_partitions() {
        let o = ConsumerOptions::default();
        assert_eq!(o.for_partitions(0).receiver_queue_size, 1000);
        assert_eq!(o.for_partitions(10).receiver_queue_size, 1000);
        assert_eq!(o.for_partitions(100).receiver_queue_size, 500);
        assert_eq!(o.for_partitions(100_000).receiver_queue_size, 1);
        let zero = ConsumerOptions {
            subscription: "s".into(),
            max_total_receiver_queue_size_across_partitions: 0,
            ..Default::default()
        };
        assert!(zero.validate().is_err());
    }

    #[test]
    fn batch_receive_policies_are_adjusted_as_upstream() {
        let d = BatchReceivePolicy::default();
        // Upstream DEFAULT_POLICY: -1 messages (no bound), 10 MiB, 100 ms.
        assert_eq!(
            (d.max_num_messages, d.max_num_bytes, d.timeout),
            (0, 10 * 1024 * 1024, Duration::from_millis(100))
        );
        assert!(d.messages_from_multi_topics);
        assert_eq!(d.effective(1000), d);
        // More messages than the receiver queue holds: lowered to it.
        let big = d.max_num_messages(5000).max_num_bytes(0);
        assert_eq!(big.effective(1000), big.max_num_messages(1000));
        // A timeout alone: the default message and byte bounds, the timeout kept.
        let timeout_only = d
            .max_num_messages(0)
            .max_num_bytes(0)
            .timeout(Duration::from_secs(3));
        assert_eq!(
            timeout_only.effective(1000),
            d.timeout(Duration::from_secs(3))
        );
        // No bound at all: refused (upstream `verify`).
        let none = ConsumerOptions {
            subscription: "s".into(),
            batch_receive_policy: timeout_only.timeout(Duration::ZERO),
            ..Default::default()
        };
        assert!(matches!(none.validate(), Err(Error::InvalidConfig(_))));
        let count_only = ConsumerOptions {
            batch_receive_policy: none.batch_receive_policy.max_num_messages(10),
            ..none
        };
        assert!(count_only.validate().is_ok());
    }
}
