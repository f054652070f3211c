//! Dead-letter and retry-letter topics (PIP-124), like the Java client.
//!
//! A message whose redelivery count reaches `max_redeliver_count` is still delivered; when the
//! application negatively acks it (or its ack times out) it is published to the dead-letter
//! topic instead of being redelivered, and only once that publish succeeded is it acked on the
//! original topic. A message that arrives with a count above the maximum goes straight to the
//! dead-letter topic. A failed publish leaves the message for redelivery: nothing is lost.
//!
//! The dead-letter producer is created lazily, without batching, with chunking on a persistent
//! topic (like upstream, so a large message, e.g. a reassembled chunked one, can be
//! dead-lettered or retried), and with `initial_subscription_name` from the policy, so the broker can create that subscription with
//! the topic and keep the dead-lettered messages until someone reads them.

use std::time::Duration;

use tokio::sync::OnceCell;

use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::{Message, ProducerMessage};
use crate::producer::Producer;
use crate::producer::ProducerBuilder;
use crate::topic::TopicName;

use super::task::ConsumerOp;

/// Property naming the topic a dead-lettered or retried message came from.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Property naming the subscription it was consumed on.
pub const REAL_SUBSCRIPTION: &str = "REAL_SUBSCRIPTION";
/// Property holding the original message id.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Property counting how many times a message was sent to the retry topic.
pub const RECONSUME_TIMES: &str = "RECONSUMETIMES";
/// Property holding the retry delay in milliseconds.
pub const DELAY_TIME: &str = "DELAY_TIME";

/// Where messages go after too many redeliveries (PIP-124).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterPolicy {
    /// Deliveries allowed beyond the first: a message is dead-lettered when it is negatively
    /// acked (or times out) after its redelivery count reached this. Must be > 0.
    pub max_redeliver_count: u32,
    /// The dead-letter topic; default `<topic>-<subscription>-DLQ`.
    pub dead_letter_topic: Option<String>,
    /// The retry-letter topic; default `<topic>-<subscription>-RETRY`.
    pub retry_letter_topic: Option<String>,
    /// PIP-124: the subscription the broker should create with the dead-letter topic, so its
    /// messages are retained before anyone subscribes.
    pub initial_subscription_name: Option<String>,
}

impl DeadLetterPolicy {
    /// A policy with the default topic names.
    pub fn new(max_redeliver_count: u32) -> Self {
        DeadLetterPolicy {
            max_redeliver_count,
            dead_letter_topic: None,
            retry_letter_topic: None,
            initial_subscription_name: None,
        }
    }

    /// Sets the dead-letter topic.
    pub fn dead_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter_topic = Some(topic.into());
        self
    }

    /// Sets the retry-letter topic.
    pub fn retry_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.retry_letter_topic = Some(topic.into());
        self
    }

    /// Sets the initial subscription of the dead-letter topic.
    pub fn initial_subscription_name(mut self, name: impl Into<String>) -> Self {
        self.initial_subscription_name = Some(name.into());
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_redeliver_count == 0 {
            return Err(Error::InvalidConfig(
                "dead letter policy: max_redeliver_count must be greater than 0".into(),
            ));
        }
        for (what, topic) in [
            ("dead_letter_topic", &self.dead_letter_topic),
            ("retry_letter_topic", &self.retry_letter_topic),
        ] {
            if let Some(t) = topic {
                TopicName::new(t).map_err(|e| {
                    Error::InvalidConfig(format!("dead letter policy: {what}: {e}"))
                })?;
            }
        }
        if let Some(s) = &self.initial_subscription_name {
            if s.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "dead letter policy: initial_subscription_name must not be empty".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The default name of a dead-letter (`suffix = "-DLQ"`) or retry (`"-RETRY"`) topic: the
/// topic without its partition suffix, then the subscription.
pub(crate) fn default_topic(topic: &TopicName, subscription: &str, suffix: &str) -> String {
    format!("{}-{subscription}{suffix}", topic.partitioned_topic_name())
}

/// The dead-letter producer's name, as upstream's `ConsumerImpl.initDeadLetterProducerIfNeeded`:
/// `<topic>-<subscription>-<consumer name>-<5 random alphanumerics>-DLQ`, so two consumers
/// dead-lettering to one topic never share a producer name (which deduplication and an
/// Exclusive DLQ producer would trip over) and the broker's stats say whose it is. Upstream
/// has one per partition consumer (its topic is the partition); here one serves all the
/// partitions of a topic, so the topic is the partitioned one.
pub(crate) fn dlq_producer_name(topic: &TopicName, subscription: &str, consumer: &str) -> String {
    const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut r = super::rand_u32() as usize;
    let suffix: String = (0..5)
        .map(|_| {
            let c = ALPHANUMERIC[r % ALPHANUMERIC.len()] as char;
            r /= ALPHANUMERIC.len();
            c
        })
        .collect();
    format!(
        "{}-{subscription}-{consumer}-{suffix}-DLQ",
        topic.partitioned_topic_name()
    )
}

/// Publishes dead-lettered and retried messages for one consumer.
#[derive(Debug)]
pub(crate) struct DeadLetterSink {
    client: CoreRef,
    pub policy: DeadLetterPolicy,
    pub dlq_topic: String,
    pub retry_topic: String,
    subscription: String,
    /// The dead-letter producer's name (see [`dlq_producer_name`]).
    dlq_producer_name: String,
    dlq: OnceCell<Producer>,
    retry: OnceCell<Producer>,
    /// The schema the dead-letter and retry producers register: the consumer's, like
    /// upstream's `Schema.AUTO_PRODUCE_BYTES(schema)` producers (the payloads are passed on
    /// as they are). None for AUTO_CONSUME, whose info is no writer schema.
    schema: Option<crate::schema::SchemaInfo>,
}

impl DeadLetterSink {
    pub(crate) fn new(
        client: CoreRef,
        topic: &TopicName,
        subscription: &str,
        consumer_name: &str,
        policy: DeadLetterPolicy,
        schema: Option<crate::schema::SchemaInfo>,
    ) -> Self {
        let dlq_topic = policy
            .dead_letter_topic
            .clone()
            .unwrap_or_else(|| default_topic(topic, subscription, "-DLQ"));
        let retry_topic = policy
            .retry_letter_topic
            .clone()
            .unwrap_or_else(|| default_topic(topic, subscription, "-RETRY"));
        DeadLetterSink {
            client,
            policy,
            dlq_topic,
            retry_topic,
            subscription: subscription.to_string(),
            dlq_producer_name: dlq_producer_name(topic, subscription, consumer_name),
            dlq: OnceCell::new(),
            retry: OnceCell::new(),
            schema: schema.filter(|s| s.schema_type != crate::schema::SchemaType::AutoConsume),
        }
    }

    async fn dlq_producer(&self) -> Result<&Producer> {
        self.dlq
            .get_or_try_init(|| async {
                let mut b = ProducerBuilder::new(self.client.clone(), self.dlq_topic.clone())
                    .name(self.dlq_producer_name.clone())
                    .batching(false)
                    .chunking(persistent(&self.dlq_topic))
                    .schema_info(self.schema.clone());
                if let Some(sub) = &self.policy.initial_subscription_name {
                    b = b.initial_subscription_name(sub);
                }
                b.create().await
            })
            .await
    }

    async fn retry_producer(&self) -> Result<&Producer> {
        self.retry
            .get_or_try_init(|| async {
                ProducerBuilder::new(self.client.clone(), self.retry_topic.clone())
                    .batching(false)
                    .chunking(persistent(&self.retry_topic))
                    .schema_info(self.schema.clone())
                    .create()
                    .await
            })
            .await
    }

    /// The message to publish: the original payload, key, properties and event time, plus
    /// where it came from.
    fn letter(&self, msg: &Message) -> ProducerMessage {
        let mut out = ProducerMessage::new(msg.payload.clone());
        out.key = msg.key.clone();
        // A binary key (separated key/value schema) stays binary (upstream copies `keyBytes`
        // when the key is base64-encoded).
        out.key_b64_encoded = msg.key_b64_encoded;
        out.ordering_key = msg.ordering_key.clone();
        out.event_time = msg.event_time;
        out.properties = msg.properties.clone();
        out.properties
            .entry(REAL_TOPIC.into())
            .or_insert_with(|| msg.topic.partitioned_topic_name().to_string());
        out.properties
            .entry(REAL_SUBSCRIPTION.into())
            .or_insert_with(|| self.subscription.clone());
        out.properties
            .entry(ORIGIN_MESSAGE_ID.into())
            .or_insert_with(|| msg.id.to_string());
        out
    }

    /// Publishes `msg` to the dead-letter topic.
    pub(crate) async fn dead_letter(&self, msg: &Message) -> Result<()> {
        self.publish_dead_letter(self.letter(msg)).await
    }

    async fn publish_dead_letter(&self, letter: ProducerMessage) -> Result<()> {
        let producer = self.dlq_producer().await?;
        producer.send_and_wait(letter).await.map(|_| ())
    }

    /// Publishes `msg` to the retry topic (or, past the maximum, to the dead-letter topic).
    /// Returns true when it went to the dead-letter topic.
    ///
    /// Like upstream's `ConsumerImpl.doReconsumeLater`, RECONSUMETIMES and DELAY_TIME are set
    /// to this call's values first, so the dead-letter copy made after the last retry carries
    /// them too (the count past the maximum, and this call's delay), not the previous retry's.
    pub(crate) async fn retry_later(&self, msg: &Message, delay: Duration) -> Result<bool> {
        let times = msg
            .properties
            .get(RECONSUME_TIMES)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
            .saturating_add(1);
        let mut letter = self.letter(msg);
        letter
            .properties
            .insert(RECONSUME_TIMES.into(), times.to_string());
        letter
            .properties
            .insert(DELAY_TIME.into(), delay.as_millis().to_string());
        if times > self.policy.max_redeliver_count {
            // Delivered at once: the dead-letter topic is not delayed.
            self.publish_dead_letter(letter).await?;
            return Ok(true);
        }
        let producer = self.retry_producer().await?;
        producer.send_and_wait(letter.deliver_after(delay)).await?;
        Ok(false)
    }

    pub(crate) async fn close(&self) {
        if let Some(p) = self.dlq.get() {
            let _ = p.close().await;
        }
        if let Some(p) = self.retry.get() {
            let _ = p.close().await;
        }
    }
}

/// Dead-letters `msg` in the background, then acks it on its topic; if publishing fails, asks
/// for a normal redelivery instead (nothing is lost).
pub(crate) fn spawn_dead_letter(
    sink: std::sync::Arc<DeadLetterSink>,
    msg: Message,
    partition: std::sync::Arc<super::task::PartitionShared>,
) {
    tokio::spawn(async move {
        match sink.dead_letter(&msg).await {
            Ok(()) => {
                partition.stats.dead_lettered();
                tracing::info!(topic = %msg.topic, id = %msg.id, dlq = %sink.dlq_topic,
                    redelivery_count = msg.redelivery_count, "message dead-lettered");
                let _ = partition.send_op(ConsumerOp::Ack(msg.id));
            }
            Err(e) => {
                tracing::warn!(topic = %msg.topic, id = %msg.id, error = %e,
                    "dead-letter publish failed; the message stays for redelivery");
                let _ = partition.send_op(ConsumerOp::Redeliver(msg.id));
            }
        }
    });
}

/// Whether `topic` names a persistent topic (upstream's DLQ and retry producers chunk; chunking
/// needs a persistent topic). An invalid name is left for `create` to report.
fn persistent(topic: &str) -> bool {
    crate::topic::TopicName::new(topic).is_ok_and(|t| t.is_persistent())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_strip_the_partition_suffix() {
        let t = TopicName::new("persistent://t/n/orders-partition-3").unwrap();
        assert_eq!(
            default_topic(&t, "sub", "-DLQ"),
            "persistent://t/n/orders-sub-DLQ"
        );
        let t = TopicName::new("orders").unwrap();
        assert_eq!(
            default_topic(&t, "sub", "-RETRY"),
            "persistent://public/default/orders-sub-RETRY"
        );
    }

    #[test]
    fn policies_are_validated() {
        assert!(DeadLetterPolicy::new(0).validate().is_err());
        assert!(DeadLetterPolicy::new(3).validate().is_ok());
        assert!(DeadLetterPolicy::new(3)
            .dead_letter_topic("a/b")
            .validate()
            .is_err());
        assert!(DeadLetterPolicy::new(3)
            .initial_subscription_name(" ")
            .validate()
            .is_err());
    }
}
