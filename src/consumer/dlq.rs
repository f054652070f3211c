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

use crate::error::{Error, Result};
use crate::topic::TopicName;

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
    let mut r = crate::consumer::rand_u32() as usize;
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
