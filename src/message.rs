//! Messages: [`ProducerMessage`] to send, [`Message`] received.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::message_id::MessageId;
use crate::topic::TopicName;

/// A message to publish. Build it from a payload and add what you need:
///
/// ```
/// use pulsar_sdk::ProducerMessage;
/// let msg = ProducerMessage::new("hello")
///     .key("user-42")
///     .property("origin", "docs")
///     .event_time(1_700_000_000_000);
/// assert_eq!(&msg.payload[..], b"hello");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerMessage {
    /// The payload.
    pub payload: Bytes,
    /// The partition key: routes the message (same key, same partition) and drives Key_Shared.
    pub key: Option<String>,
    /// Whether `key` is base64 of binary key bytes (`partition_key_b64_encoded`; set by a
    /// separated [`KeyValueSchema`](crate::schema::KeyValueSchema)).
    pub key_b64_encoded: bool,
    /// The ordering key for Key_Shared dispatch (overrides `key` there).
    pub ordering_key: Option<Bytes>,
    /// Application properties.
    pub properties: BTreeMap<String, String>,
    /// Application event time, milliseconds since the Unix epoch.
    pub event_time: Option<u64>,
    /// An explicit sequence id (must increase); by default the producer assigns them.
    pub sequence_id: Option<u64>,
    /// Deliver no earlier than this time, milliseconds since the Unix epoch (Shared and
    /// Key_Shared subscriptions; brokers without delayed delivery deliver at once).
    pub deliver_at: Option<u64>,
    /// The transaction the message is produced in (PIP-31): consumers see it once the
    /// transaction commits, never if it aborts. See [`ProducerMessage::transaction`].
    #[cfg(feature = "transactions")]
    #[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
    pub transaction: Option<crate::transaction::Transaction>,
}

impl ProducerMessage {
    /// A message with this payload.
    #[inline]
    pub fn new(payload: impl Into<Bytes>) -> Self {
        ProducerMessage {
            payload: payload.into(),
            ..Default::default()
        }
    }

    /// Sets the partition key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the ordering key.
    pub fn ordering_key(mut self, key: impl Into<Bytes>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Adds a property.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// Sets the event time (ms since the Unix epoch).
    pub fn event_time(mut self, millis: u64) -> Self {
        self.event_time = Some(millis);
        self
    }

    /// Sets an explicit sequence id.
    pub fn sequence_id(mut self, id: u64) -> Self {
        self.sequence_id = Some(id);
        self
    }

    /// Delivers the message no earlier than `delay` from now.
    pub fn deliver_after(mut self, delay: Duration) -> Self {
        self.deliver_at = Some(now_millis().saturating_add(delay.as_millis() as u64));
        self
    }

    /// Produces the message in `txn` (Java's `newMessage(txn)`): the send registers the
    /// partition with the transaction's coordinator first (once per partition), and the
    /// transaction's commit waits for the message's receipt. Sent on its own (never in a
    /// batch with other messages). Fails with
    /// [`TransactionError::InvalidState`](crate::transaction::TransactionError::InvalidState)
    /// unless the transaction is open.
    #[cfg(feature = "transactions")]
    #[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
    pub fn transaction(mut self, txn: &crate::transaction::Transaction) -> Self {
        self.transaction = Some(txn.clone());
        self
    }

    /// Delivers the message no earlier than `at`.
    pub fn deliver_at(mut self, at: SystemTime) -> Self {
        self.deliver_at = Some(
            at.duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        );
        self
    }
}

impl From<Bytes> for ProducerMessage {
    #[inline]
    fn from(payload: Bytes) -> Self {
        ProducerMessage::new(payload)
    }
}

impl From<Vec<u8>> for ProducerMessage {
    #[inline]
    fn from(payload: Vec<u8>) -> Self {
        ProducerMessage::new(payload)
    }
}

impl From<String> for ProducerMessage {
    #[inline]
    fn from(payload: String) -> Self {
        ProducerMessage::new(payload)
    }
}

impl From<&'static str> for ProducerMessage {
    #[inline]
    fn from(payload: &'static str) -> Self {
        ProducerMessage::new(payload)
    }
}

impl From<&'static [u8]> for ProducerMessage {
    #[inline]
    fn from(payload: &'static [u8]) -> Self {
        ProducerMessage::new(payload)
    }
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The topic (the partition, for a partitioned topic) it came from.
    pub topic: TopicName,
    /// Its id.
    pub id: MessageId,
    /// The payload (a zero-copy slice of the received frame).
    pub payload: Bytes,
    /// The partition key, if any.
    pub key: Option<String>,
    /// Whether `key` is base64 of binary key bytes (`partition_key_b64_encoded`).
    pub key_b64_encoded: bool,
    /// The version of the schema the producer wrote it with (`None` without a schema; empty
    /// from a broker without a schema registry).
    pub schema_version: Option<Bytes>,
    /// The ordering key, if any.
    pub ordering_key: Option<Bytes>,
    /// Application properties.
    pub properties: BTreeMap<String, String>,
    /// Application event time (ms since the Unix epoch), if set.
    pub event_time: Option<u64>,
    /// When the broker received it (ms since the Unix epoch, from the producer's clock).
    pub publish_time: u64,
    /// The producer's name (shared by the messages of a batch: one copy per entry).
    pub producer_name: Arc<str>,
    /// The producer's sequence id for it.
    pub sequence_id: u64,
    /// How many times it was delivered before (0 on first delivery).
    pub redelivery_count: u32,
    /// The producer sent no value (upstream `null_value`: a tombstone, Java's
    /// `value(null)`); the payload is empty. Typed handles do not decode it
    /// ([`SchemaError::NullValue`](crate::schema::SchemaError::NullValue)).
    pub null_value: bool,
    /// Which of the consumer's partition tasks delivered it (routes its ack).
    pub(crate) source: usize,
    /// The cluster generation it was received in (cluster-level failover): once the client
    /// has moved to another cluster, its id names another message there, so it is not acked.
    pub(crate) cluster: u64,
    /// Set on a message delivered still encrypted (see
    /// [`encryption_context`](Self::encryption_context)).
    #[cfg(feature = "encryption")]
    pub(crate) encryption: Option<Arc<crate::crypto::EncryptionContext>>,
}

impl Message {
    /// A received message with the fields of `m` (unit tests).
    #[cfg(test)]
    pub(crate) fn for_tests(m: ProducerMessage) -> Message {
        Message {
            topic: TopicName::new("t").expect("valid topic"),
            id: MessageId::EARLIEST,
            payload: m.payload,
            key: m.key,
            key_b64_encoded: m.key_b64_encoded,
            schema_version: None,
            ordering_key: m.ordering_key,
            properties: m.properties,
            event_time: m.event_time,
            publish_time: 0,
            producer_name: Arc::from("p"),
            sequence_id: 0,
            redelivery_count: 0,
            null_value: false,
            source: 0,
            cluster: 0,
            #[cfg(feature = "encryption")]
            encryption: None,
        }
    }

    /// The payload as UTF-8, if it is.
    pub fn payload_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.payload).ok()
    }

    /// For a message delivered still encrypted (a consumer with
    /// [`ConsumerCryptoFailureAction::Consume`](crate::crypto::ConsumerCryptoFailureAction::Consume)
    /// that could not decrypt it): its encryption keys, cipher parameters, compression and
    /// batch size; the payload is then the ciphertext. `None` for every other message
    /// (a decrypted one included).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn encryption_context(&self) -> Option<&crate::crypto::EncryptionContext> {
        self.encryption.as_deref()
    }
}

pub(crate) fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
