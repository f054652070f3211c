//! [`ConsumerBuilder`]: what a consumer receives from and how.

use std::time::Duration;

use crate::consumer::{
    BatchReceivePolicy, Consumer, ConsumerOptions, DeadLetterPolicy, InitialPosition,
    RedeliveryBackoff, SubscriptionMode, SubscriptionType,
};
use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::topic::TopicName;
use crate::topic_list::{RegexSubscriptionMode, TopicsPattern};

/// Builds a [`Consumer`]; see [`Client::consumer`](crate::Client::consumer).
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    client: CoreRef,
    topics: Vec<String>,
    pattern: Option<String>,
    pub(crate) options: ConsumerOptions,
    mode: RegexSubscriptionMode,
    discovery_period: Duration,
    max_topics: usize,
}

impl ConsumerBuilder {
    pub(crate) fn new(client: CoreRef, topics: Vec<String>) -> Self {
        ConsumerBuilder {
            client,
            topics,
            pattern: None,
            options: ConsumerOptions::default(),
            mode: RegexSubscriptionMode::default(),
            discovery_period: Duration::from_secs(60),
            max_topics: crate::consumer::topics::pattern::DEFAULT_MAX_TOPICS,
        }
    }

    /// Receives from all of these topics (replacing the topic given before): any mix of
    /// partitioned and non-partitioned topics, merged into one stream, each message telling
    /// its topic ([`Message::topic`](crate::Message::topic)). Like upstream's
    /// `ConsumerBuilder.topics`.
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
    /// let mut consumer = client
    ///     .multi_topic_consumer(["orders", "payments", "refunds"])
    ///     .subscription("billing")
    ///     .subscribe()
    ///     .await?;
    /// let msg = consumer.recv().await?;
    /// println!("{} from {}", msg.id, msg.topic);
    /// consumer.ack(&msg)?;
    /// # Ok(()) }
    /// ```
    pub fn topics<I, T>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.topics = topics.into_iter().map(Into::into).collect();
        self.pattern = None;
        self
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

    /// The consumer's name (Java's `consumerName`; the noun alone, like
    /// [`ProducerBuilder::name`](crate::ProducerBuilder::name)).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.consumer_name = Some(name.into());
        self
    }

    /// Renamed [`name`](Self::name).
    #[deprecated(note = "use `name`")]
    pub fn consumer_name(self, name: impl Into<String>) -> Self {
        self.name(name)
    }

    /// Messages the broker may push ahead of the application. Default 1000. A `u32`: flow
    /// permits travel as a `uint32` (see [`ConsumerOptions::receiver_queue_size`]).
    ///
    /// The queue's bound is the smaller of this many messages and the consumer's byte budget
    /// (half the client's [`memory_limit`](crate::ClientBuilder::memory_limit), shared by the
    /// client's consumers). The consumer keeps at most `free budget / expected message size`
    /// permits out (for a consumer of many partitions or topics, each gets its part), with the
    /// expected size the largest seen lately; before any message it is the broker's maximum
    /// message size (5 MiB by default). So when the budget cannot hold this many messages of
    /// the maximum size, the first FLOW is smaller than the queue (a slow start: 6 permits for
    /// the default 32 MiB budget, at least 1) and the rest follows the first messages' sizes;
    /// the broker is never granted more than this many. The bytes held stay under the budget
    /// plus the permits in flight times the size by which messages outgrow the expectation:
    /// permits are counted in messages (as upstream's), so after a run of small messages the
    /// permits out (at most this many, and at most the free budget over the small size) may
    /// each legitimately bring a message of the broker's maximum size. The expectation jumps
    /// to a larger message at once, so no permit is granted on the old one after the first
    /// large message arrives; what was already out is bounded by `permits out × maximum
    /// message size` (per partition; with the defaults up to 1,000 × 5 MiB in the worst case,
    /// as upstream's receiver queue).
    /// On a non-persistent topic the first FLOW is always this many, whatever the budget holds
    /// (its broker drops what it cannot dispatch for want of permits, as upstream): such a
    /// consumer may hold up to this many messages beyond the budget. A broker sending beyond
    /// its permits is a flow-control violation (the connection closes, the consumer reads the
    /// error and re-subscribes) past 10 × this + 10,000 messages, or once the consumer holds
    /// more bytes of such messages than its budget plus 4 maximum-size messages (a compressed
    /// message counted by the uncompressed size it declares, before it is decompressed).
    ///
    /// 0 makes a zero-size receiver queue (Java's `ZeroQueueConsumerImpl`): nothing is
    /// prefetched; one permit is granted when a [`recv`](crate::Consumer::recv) waits with
    /// nothing queued (a cancelled `recv` leaves its message queued for the next one), and a
    /// batched message is handed out whole before the next permit. One non-partitioned topic
    /// only: with a partitioned topic, [`topics`](Self::topics) of more than one, a pattern or
    /// [`retry_enable`](Self::retry_enable), `subscribe` fails with
    /// [`Error::InvalidConfig`], as upstream refuses them. See the guide's consuming chapter.
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

    /// PIP-74's auto-scaled receiver queue (Java `autoScaledReceiverQueueSizeEnabled`; default
    /// off, as upstream). Each partition's queue starts at 1 message and doubles, up to
    /// [`receiver_queue_size`](Self::receiver_queue_size), each time a `recv` finds it empty
    /// after the broker had used every permit it was given (the application keeps up with
    /// what the queue allowed), while the client [`memory_limit`](crate::ClientBuilder::memory_limit)
    /// is less than 75 % used; it halves (not below 1) once the usage passes 95 %. A consumer
    /// that is slower than its messages keeps a small queue, and so holds little memory; one
    /// that keeps up grows to its full queue. The byte budget still bounds what is held
    /// (see `receiver_queue_size`). Refused with a zero-size receiver queue.
    pub fn auto_scaled_receiver_queue_size(mut self, on: bool) -> Self {
        self.options.auto_scaled_receiver_queue_size = on;
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

    /// The bounds of [`Consumer::batch_recv`] (Java's `batchReceivePolicy`): the most
    /// messages and payload bytes in a batch, and how long a call waits for them. Default
    /// [`BatchReceivePolicy::default`] (upstream's: no message bound, 10 MiB, 100 ms). A
    /// policy with all three at zero is refused by [`subscribe`](Self::subscribe); see
    /// [`BatchReceivePolicy`] for how it is adjusted to the receiver queue.
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
    /// use std::time::Duration;
    /// use pulsar_sdk::consumer::BatchReceivePolicy;
    ///
    /// let mut consumer = client
    ///     .consumer("orders")
    ///     .subscription("s")
    ///     .batch_receive_policy(
    ///         BatchReceivePolicy::default()
    ///             .max_num_messages(100)
    ///             .timeout(Duration::from_millis(20)),
    ///     )
    ///     .subscribe()
    ///     .await?;
    /// let batch = consumer.batch_recv().await?;
    /// consumer.ack_all(&batch)?;
    /// # Ok(()) }
    /// ```
    pub fn batch_receive_policy(mut self, policy: BatchReceivePolicy) -> Self {
        self.options.batch_receive_policy = policy;
        self
    }

    /// Opt-in batch-index acks: acking part of a batch tells the broker exactly which messages
    /// (an `ack_set`). Off by default; brokers that ignore the set (pulsar-lite) would ack the
    /// whole batch and lose the rest.
    pub fn batch_index_ack(mut self, enabled: bool) -> Self {
        self.options.batch_index_ack = enabled;
        self
    }

    /// End-to-end encryption (PIP-4): where the private keys of encrypted messages come from
    /// (asked in a task of its own; see the [guide](crate::guide::encryption)).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_key_reader(
        mut self,
        reader: impl crate::crypto::CryptoKeyReader + 'static,
    ) -> Self {
        self.options.crypto_key_reader = Some(std::sync::Arc::new(reader));
        self
    }

    /// What happens to a message that cannot be decrypted (no key reader, no key for any
    /// recipient, a tampered payload): see
    /// [`ConsumerCryptoFailureAction`](crate::crypto::ConsumerCryptoFailureAction). Default
    /// `Fail`.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_failure_action(
        mut self,
        action: crate::crypto::ConsumerCryptoFailureAction,
    ) -> Self {
        self.options.crypto_failure_action = action;
        self
    }

    /// Adds an interceptor (upstream `ConsumerBuilder.intercept`): several run in the order
    /// they were added (see [`crate::interceptor`]).
    pub fn interceptor(
        mut self,
        interceptor: impl crate::interceptor::ConsumerInterceptor,
    ) -> Self {
        self.options.interceptors = crate::interceptor::Chain::push(
            &self.options.interceptors,
            std::sync::Arc::new(interceptor),
        );
        self
    }

    /// Replaces all options at once (the interceptors added before are kept).
    pub fn options(mut self, options: ConsumerOptions) -> Self {
        let interceptors = self.options.interceptors.take();
        self.options = options;
        self.options.interceptors = interceptors;
        self
    }

    /// Makes this a typed consumer of `S::Type` values: the broker checks the schema against
    /// the topic's, and each message is decoded (see [`crate::schema`]).
    pub fn schema<S: crate::schema::Schema>(
        self,
        schema: S,
    ) -> crate::schema::TypedConsumerBuilder<S> {
        crate::schema::TypedConsumerBuilder::new(self, schema)
    }

    pub(crate) fn schema_info(mut self, info: Option<crate::schema::SchemaInfo>) -> Self {
        self.options.schema = info;
        self
    }

    pub(crate) fn core(&self) -> &CoreRef {
        &self.client
    }

    /// Receives from every topic of one namespace whose name matches `pattern`:
    /// `[persistent://]tenant/namespace/REGEX` (the whole `tenant/namespace/local` name must
    /// match, like upstream), including topics created later, which join on their own; deleted
    /// topics leave. Discovery uses the broker's PIP-145 topic-list watcher when it has one and
    /// polls GetTopicsOfNamespace every [`pattern_auto_discovery_period`] in any case; see
    /// [`Consumer::topic_updates`]. Replaces a topic list given before.
    ///
    /// A broker that answers neither (pulsar-lite) makes `subscribe` fail after the operation
    /// timeout with [`Error::Timeout`] naming GetTopicsOfNamespace.
    ///
    /// [`pattern_auto_discovery_period`]: Self::pattern_auto_discovery_period
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
    /// let mut consumer = client
    ///     .pattern_consumer("persistent://public/default/orders-.*")
    ///     .subscription("audit")
    ///     .subscribe()
    ///     .await?;
    /// let mut changes = consumer.topic_updates();
    /// # let _ = &mut changes;
    /// let msg = consumer.recv().await?;
    /// consumer.ack(&msg)?;
    /// # Ok(()) }
    /// ```
    pub fn topics_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.pattern = Some(pattern.into());
        self
    }

    /// Which topics a pattern consumer takes (like Java's `subscriptionTopicsMode`): persistent
    /// ones (the default), non-persistent ones, or all. The topic-list watcher is used for
    /// persistent-only consumers (as upstream); the others poll.
    pub fn subscription_topics_mode(mut self, mode: RegexSubscriptionMode) -> Self {
        self.mode = mode;
        self
    }

    /// How often a pattern consumer lists its namespace's topics (default 1 minute, like
    /// Java's `patternAutoDiscoveryPeriod`; must not be zero).
    pub fn pattern_auto_discovery_period(mut self, period: Duration) -> Self {
        self.discovery_period = period;
        self
    }

    /// The most topics a pattern consumer subscribes at once (default 10,000; each costs a
    /// consumer per partition, ~15 KB each). Matching topics beyond it are not subscribed:
    /// they are counted in [`TopicsChanged::skipped`](crate::TopicsChanged::skipped) and
    /// [`Consumer::pattern_topics_skipped`], logged as a warning, and subscribed once room
    /// frees (a subscribed topic deleted or no longer matching). The first ones in name order
    /// are taken at subscribe time; later, the first found. Upstream has no such bound.
    /// Must not be zero.
    pub fn pattern_max_topics(mut self, max: usize) -> Self {
        self.max_topics = max;
        self
    }

    /// Subscribes (on every partition of a partitioned topic, on every topic of a
    /// [`topics`](Self::topics) list). Fails if any topic cannot be subscribed (nothing is
    /// left subscribed then).
    pub async fn subscribe(
        #[cfg_attr(not(feature = "opentelemetry"), allow(unused_mut))] mut self,
    ) -> Result<Consumer> {
        self.options.validate()?;
        // Tracing runs after the application's interceptors (a `process` span per message).
        #[cfg(feature = "opentelemetry")]
        if let Some(t) = &self.client.tracing {
            let tracer = t.consumer(&self.options.subscription);
            self.options.interceptors =
                crate::interceptor::Chain::push(&self.options.interceptors, tracer);
        }
        if self.options.receiver_queue_size == 0 && self.pattern.is_some() {
            return Err(crate::consumer::options::zero_queue_refused(
                "a pattern consumer",
            ));
        }
        if let Some(p) = &self.pattern {
            if self.discovery_period.is_zero() {
                return Err(Error::InvalidConfig(
                    "pattern_auto_discovery_period must not be zero".into(),
                ));
            }
            if self.max_topics == 0 {
                return Err(Error::InvalidConfig(
                    "pattern_max_topics must not be zero".into(),
                ));
            }
            let cfg = crate::consumer::topics::pattern::PatternConfig {
                pattern: TopicsPattern::new(p)?,
                mode: self.mode,
                period: self.discovery_period,
                own_letters: crate::consumer::topics::pattern::OwnLetters::of(&self.options),
                max_topics: self.max_topics,
            };
            return Box::pin(Consumer::subscribe_pattern(self.client, cfg, self.options)).await;
        }
        let mut topics = Vec::with_capacity(self.topics.len());
        for t in &self.topics {
            let t = TopicName::new(t)?;
            if !topics.contains(&t) {
                topics.push(t);
            }
        }
        if topics.is_empty() {
            return Err(Error::InvalidConfig(
                "a consumer needs at least one topic".into(),
            ));
        }
        if self.options.receiver_queue_size == 0 && topics.len() > 1 {
            return Err(crate::consumer::options::zero_queue_refused(
                "a multi-topic consumer",
            ));
        }
        // Boxed: keeps the caller's future (and stack, in debug builds) small.
        Box::pin(Consumer::subscribe_many(self.client, topics, self.options)).await
    }
}
