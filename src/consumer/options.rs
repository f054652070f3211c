//! Consumer configuration.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::message_id::MessageId;

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
    /// refilled when half are consumed.
    pub receiver_queue_size: u32,
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
    /// Start position of a non-durable subscription (readers).
    pub(crate) start_message_id: Option<MessageId>,
    /// Whether the start position itself is included.
    pub(crate) start_inclusive: bool,
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
            ack_group_time: Duration::from_millis(100),
            ack_group_max: 1000,
            negative_ack_delay: Duration::from_secs(60),
            subscription_properties: BTreeMap::new(),
            priority_level: None,
            read_compacted: false,
            batch_index_ack: false,
            start_message_id: None,
            start_inclusive: false,
        }
    }
}

impl ConsumerOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.subscription.trim().is_empty() {
            return Err(Error::InvalidConfig(
                "subscription name must not be empty".into(),
            ));
        }
        if self.receiver_queue_size == 0 {
            return Err(Error::InvalidConfig(
                "receiver_queue_size must be at least 1".into(),
            ));
        }
        if self.ack_group_max == 0 {
            return Err(Error::InvalidConfig(
                "ack_group_max must be at least 1".into(),
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
