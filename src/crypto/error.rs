//! [`CryptoError`]: why encryption or decryption failed.
//!
//! A leaf: it imports only the message id's type (itself a leaf), so `crate::error` can wrap
//! it ([`Error::Crypto`](crate::Error::Crypto)) without an import cycle.

use std::sync::Arc;

use crate::message_id::id::MessageId;

/// The key reader's own error (the same type as
/// [`error::SourceError`](crate::error::SourceError), spelled out so this leaf does not import
/// `crate::error`).
type Source = Arc<dyn std::error::Error + Send + Sync>;

/// Why encryption or decryption failed (see [`Error::Crypto`](crate::Error::Crypto)).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// An encrypted message arrived at a consumer without a
    /// [`CryptoKeyReader`](super::CryptoKeyReader).
    #[error("the message is encrypted and the consumer has no crypto key reader")]
    NoKeyReader,
    /// The key reader failed for this key.
    #[error("crypto key reader failed for key `{key}`: {source}")]
    KeyReader {
        /// The key name asked for.
        key: String,
        /// The reader's error.
        #[source]
        source: Source,
    },
    /// The key the reader gave is not a usable RSA key (bad PEM or DER, or a size aws-lc
    /// refuses: 2048 to 8192 bits).
    #[error("key `{key}` is not a usable RSA key: {reason}")]
    InvalidKey {
        /// The key name.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// The key is of a kind this client does not encrypt with (EC: see the module docs).
    #[error("key `{key}` is an {kind} key; only RSA keys are supported")]
    UnsupportedKey {
        /// The key name.
        key: String,
        /// The key kind found.
        kind: &'static str,
    },
    /// None of the message's recipients' data keys could be decrypted with the private keys
    /// the reader gave (the consumer is not a recipient, or holds the wrong key). A consumer
    /// tries the first 64 recipients a message lists (the official clients list one per key
    /// name the producer was given; a hostile producer can list thousands).
    #[error("no private key decrypts the data key of any recipient ({keys:?})")]
    NoUsableKey {
        /// The key names of the recipients tried, in the message's order.
        keys: Vec<String>,
    },
    /// The payload failed its AES-GCM authentication with the data key the message carries:
    /// it (or its IV) was altered.
    #[error("the encrypted payload failed authentication (tampered or corrupted)")]
    Tampered,
    /// The message names a cipher or parameters this client cannot use.
    #[error("unsupported encryption: {0}")]
    UnsupportedAlgorithm(String),
    /// A message the consumer could not decrypt and did not deliver
    /// ([`ConsumerCryptoFailureAction::Fail`](super::ConsumerCryptoFailureAction::Fail)): it
    /// stays unacknowledged.
    #[error("message {id} not delivered: {cause}")]
    Undelivered {
        /// The message's (entry's) id.
        id: MessageId,
        /// Why it could not be decrypted.
        #[source]
        cause: Box<CryptoError>,
    },
    /// The producer could not encrypt (no data key: the key reader failed at every attempt).
    #[error("encryption failed: {0}")]
    Encrypt(String),
}
