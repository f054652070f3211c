//! Producer configuration.

use std::time::Duration;

use crate::compression::CompressionType;
use crate::error::{Error, Result};

/// Who may publish to the topic alongside this producer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProducerAccessMode {
    /// Any number of producers (the default).
    #[default]
    Shared,
    /// Only this producer; creation fails if another producer is connected.
    Exclusive,
    /// Wait until this producer can be the only one.
    WaitForExclusive,
    /// Become the only producer, fencing out any other.
    ExclusiveWithFencing,
}

impl ProducerAccessMode {
    pub(crate) fn to_proto(self) -> i32 {
        use crate::proto::ProducerAccessMode as P;
        (match self {
            ProducerAccessMode::Shared => P::Shared,
            ProducerAccessMode::Exclusive => P::Exclusive,
            ProducerAccessMode::WaitForExclusive => P::WaitForExclusive,
            ProducerAccessMode::ExclusiveWithFencing => P::ExclusiveWithFencing,
        }) as i32
    }
}

/// Batching settings. Defaults: 1000 messages and 128 KiB like every upstream client, and a
/// 10 ms delay like the Go and C++ clients (Java's `batchingMaxPublishDelay` is 1 ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchingOptions {
    /// Most messages in one batch.
    pub max_messages: usize,
    /// Most payload bytes in one batch.
    pub max_bytes: usize,
    /// Longest a message waits for its batch to fill.
    pub max_publish_delay: Duration,
    /// Keep one batch per key (for Key_Shared consumers): messages of different keys never share
    /// a batch.
    pub key_based: bool,
}

impl Default for BatchingOptions {
    fn default() -> Self {
        BatchingOptions {
            max_messages: 1000,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_millis(10),
            key_based: false,
        }
    }
}

/// Everything a producer is configured with.
///
/// `#[non_exhaustive]` (house rule for option structs, like [`ConsumerOptions`]): start from
/// [`ProducerOptions::default()`] and set fields, or use the [`ProducerBuilder`] methods, so
/// new options (e.g. `chunking`) are not breaking changes.
///
/// [`ConsumerOptions`]: crate::consumer::ConsumerOptions
/// [`ProducerBuilder`]: crate::producer::ProducerBuilder
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProducerOptions {
    /// The producer name; the broker assigns one when unset.
    pub name: Option<String>,
    /// Batching, or `None` to send each message on its own.
    pub batching: Option<BatchingOptions>,
    /// Payload compression.
    pub compression: CompressionType,
    /// How long a message may wait for its receipt before it fails with a timeout (its outcome
    /// is then unknown); every other pending message fails with it (upstream's send-timeout
    /// task). Zero disables the timeout. Default 30 s.
    pub send_timeout: Duration,
    /// Most messages pending a receipt; 0 means no count limit (the client memory limit still
    /// applies), like the modern Java client.
    ///
    /// A `usize` (unlike the consumer's `receiver_queue_size: u32`) on purpose: it counts
    /// messages held in this process, bounded by what memory can hold (at most
    /// `tokio::sync::Semaphore::MAX_PERMITS`), and never goes on the wire.
    pub max_pending_messages: usize,
    /// When the pending queue or client memory is full: wait (`true`) or fail the send at once
    /// with [`Error::ProducerQueueFull`] (`false`, the default, like upstream).
    pub block_if_queue_full: bool,
    /// Access mode.
    pub access_mode: ProducerAccessMode,
    /// PIP-124: ask the broker to create this subscription when this producer creates the topic.
    pub initial_subscription_name: Option<String>,
    /// Properties attached to the producer.
    pub properties: Vec<(String, String)>,
    /// Grow with the topic when it gains partitions (PIP-247 push, or polling). Default on.
    pub auto_update_partitions: bool,
    /// PIP-37: split a message bigger than the broker's `max_message_size` into chunks (after
    /// compression) instead of failing it with [`Error::MessageTooBig`]. Needs batching off
    /// and a persistent topic. Default off.
    pub chunking: bool,
    /// With [`chunking`](Self::chunking): the largest chunk (metadata included), below the
    /// broker's `max_message_size`; 0 (the default) uses the broker's. Upstream's
    /// `chunkMaxMessageSize`.
    pub chunk_max_message_size: usize,
    /// The schema registered with the broker (`CommandProducer.schema`); set by
    /// [`ProducerBuilder::schema`](crate::ProducerBuilder::schema). `None`: plain bytes.
    pub schema: Option<crate::schema::SchemaInfo>,
    /// End-to-end encryption (PIP-4): the names of the public keys every message's data key
    /// is encrypted for (each asked of [`crypto_key_reader`](Self::crypto_key_reader)).
    /// Empty: messages are not encrypted.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub encryption_keys: Vec<String>,
    /// Where the public keys come from (needed with [`encryption_keys`](Self::encryption_keys)).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub crypto_key_reader: Option<std::sync::Arc<dyn crate::crypto::CryptoKeyReader>>,
    /// What a send does when it cannot encrypt (default: fail).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub crypto_failure_action: crate::crypto::ProducerCryptoFailureAction,
    /// The running encryption, set by `create` (shared by the partitions).
    #[cfg(feature = "encryption")]
    pub(crate) encryptor: Option<std::sync::Arc<crate::crypto::Encryptor>>,
    /// The interceptors, in order ([`ProducerBuilder::interceptor`](crate::ProducerBuilder::interceptor)).
    pub(crate) interceptors:
        crate::interceptor::Interceptors<dyn crate::interceptor::ProducerInterceptor>,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            name: None,
            batching: Some(BatchingOptions::default()),
            compression: CompressionType::None,
            send_timeout: Duration::from_secs(30),
            max_pending_messages: 0,
            block_if_queue_full: false,
            access_mode: ProducerAccessMode::Shared,
            initial_subscription_name: None,
            properties: Vec::new(),
            auto_update_partitions: true,
            chunking: false,
            chunk_max_message_size: 0,
            schema: None,
            #[cfg(feature = "encryption")]
            encryption_keys: Vec::new(),
            #[cfg(feature = "encryption")]
            crypto_key_reader: None,
            #[cfg(feature = "encryption")]
            crypto_failure_action: Default::default(),
            #[cfg(feature = "encryption")]
            encryptor: None,
            interceptors: None,
        }
    }
}

impl ProducerOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(name) = &self.name {
            if name.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "producer name must not be empty".into(),
                ));
            }
        }
        if self.max_pending_messages > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(Error::InvalidConfig(format!(
                "max_pending_messages must be at most {} (0 = no count limit)",
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        if let Some(b) = &self.batching {
            if b.max_messages == 0 {
                return Err(Error::InvalidConfig(
                    "batching max_messages must be at least 1".into(),
                ));
            }
            if b.max_bytes == 0 {
                return Err(Error::InvalidConfig(
                    "batching max_bytes must be at least 1".into(),
                ));
            }
        }
        // Upstream `ProducerBuilderImpl.createAsync`: "Batching and chunking of messages can't
        // be enabled together".
        if self.chunking && self.batching.is_some() {
            return Err(Error::InvalidConfig(
                "batching and chunking can't be enabled together: turn batching off to chunk \
                 large messages"
                    .into(),
            ));
        }
        // Upstream `ProducerBuilderImpl.createAsync`: "CryptoKeyReader must be set".
        #[cfg(feature = "encryption")]
        if !self.encryption_keys.is_empty() && self.crypto_key_reader.is_none() {
            return Err(Error::InvalidConfig(
                "encryption keys are set but no crypto key reader: set crypto_key_reader".into(),
            ));
        }
        #[cfg(feature = "encryption")]
        if self.encryption_keys.iter().any(|k| k.trim().is_empty()) {
            return Err(Error::InvalidConfig(
                "an encryption key name is empty".into(),
            ));
        }
        if let Some(sub) = &self.initial_subscription_name {
            if sub.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "initial_subscription_name must not be empty".into(),
                ));
            }
        }
        Ok(())
    }
}
