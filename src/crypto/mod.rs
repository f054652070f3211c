//! End-to-end encryption (PIP-4), byte-compatible with the official clients (feature
//! `encryption`).
//!
//! A producer configured with [`encryption_key`](crate::ProducerBuilder::encryption_key) and a
//! [`CryptoKeyReader`] encrypts every payload (after compression; a batch as a whole, each chunk
//! of a chunked message on its own) with AES-256-GCM under a random 256-bit data key, and
//! attaches that data key encrypted with each recipient's RSA public key (RSA-OAEP, SHA-1 and
//! MGF1-SHA-1, as Java's `MessageCryptoBc` and C++'s `MessageCrypto`) in the message metadata's
//! `encryption_keys`; the 12-byte IV goes in `encryption_param`. A consumer with a reader that
//! knows one of the private keys decrypts. The broker only sees ciphertext. See the
//! [guide chapter](crate::guide::encryption).
//!
//! The key reader is asked for keys off every connection's and consumer's event loop (its
//! futures run in their own tasks), so a slow or remote key store delays only the messages that
//! need its answer.
//!
//! EC keys are refused ([`CryptoError::UnsupportedKey`]): Java encrypts data keys for EC
//! recipients with BouncyCastle's `ECIES` cipher, whose default parameters are not pinned down
//! by any other client (C++, Go and Python support RSA only).

mod cipher;
mod consumer;
pub(crate) mod error;
mod keys;
mod producer;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::compression::CompressionType;
use crate::error::SourceError;

pub use error::CryptoError;

pub(crate) use consumer::{context as consumer_context, recipients, Decrypted, Decryptor};
pub(crate) use producer::Encryptor;

/// A key (public for producers, private for consumers) in PEM form, with the metadata that
/// travels with the encrypted data key (upstream `EncryptionKeyInfo`).
///
/// Its `Debug` output shows the key's length and metadata, never the key.
#[derive(Clone, Default)]
pub struct EncryptionKeyInfo {
    /// The key: PEM text (`PUBLIC KEY` / `RSA PUBLIC KEY` for producers, `PRIVATE KEY` /
    /// `RSA PRIVATE KEY` for consumers), or its DER bytes.
    pub key: Bytes,
    /// Key metadata: the producer's is sent with the encrypted data key; the consumer's
    /// reader is given what the message carries (e.g. a key version).
    pub metadata: BTreeMap<String, String>,
}

impl EncryptionKeyInfo {
    /// A key without metadata.
    pub fn new(key: impl Into<Bytes>) -> Self {
        EncryptionKeyInfo {
            key: key.into(),
            metadata: BTreeMap::new(),
        }
    }

    /// Adds a metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

impl fmt::Debug for EncryptionKeyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionKeyInfo")
            .field("key", &format_args!("<{} bytes>", self.key.len()))
            .field("metadata", &self.metadata)
            .finish()
    }
}

/// Where producers find public keys and consumers private keys, by name (upstream
/// `CryptoKeyReader`). The futures run in their own tasks, never on a connection's or a
/// consumer's event loop: a reader may be slow or remote.
///
/// An error is reported as [`CryptoError::KeyReader`] (producer creation or send fails, or the
/// consumer applies its [`ConsumerCryptoFailureAction`]).
pub trait CryptoKeyReader: fmt::Debug + Send + Sync {
    /// The public key `name` (a name given to
    /// [`encryption_key`](crate::ProducerBuilder::encryption_key)).
    fn public_key(
        &self,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>>;

    /// The private key `name`, with the metadata the message carries for it.
    fn private_key(
        &self,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>>;
}

/// A [`CryptoKeyReader`] over one public and one private PEM file, whatever the key name (as
/// upstream's `DefaultCryptoKeyReader` with one file each, and the Python and C++ clients'
/// `CryptoKeyReader(public_key_path, private_key_path)`). The files are read on each request,
/// so a replaced key file is picked up at the next data-key rotation.
#[derive(Debug, Clone, Default)]
pub struct PemFileKeyReader {
    public: Option<PathBuf>,
    private: Option<PathBuf>,
}

impl PemFileKeyReader {
    /// A reader with both files (either may be unused: a producer needs only the public key, a
    /// consumer only the private one).
    pub fn new(public_key: impl Into<PathBuf>, private_key: impl Into<PathBuf>) -> Self {
        PemFileKeyReader {
            public: Some(public_key.into()),
            private: Some(private_key.into()),
        }
    }

    /// A producer's reader: the public key only.
    pub fn public_only(public_key: impl Into<PathBuf>) -> Self {
        PemFileKeyReader {
            public: Some(public_key.into()),
            private: None,
        }
    }

    /// A consumer's reader: the private key only.
    pub fn private_only(private_key: impl Into<PathBuf>) -> Self {
        PemFileKeyReader {
            public: None,
            private: Some(private_key.into()),
        }
    }

    fn read(
        path: Option<&PathBuf>,
        which: &str,
    ) -> BoxFuture<'static, Result<EncryptionKeyInfo, SourceError>> {
        let path = path.cloned();
        let which = which.to_string();
        Box::pin(async move {
            let Some(path) = path else {
                return Err(Arc::new(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("this reader has no {which} key file"),
                )) as SourceError);
            };
            let bytes = tokio::fs::read(&path).await.map_err(|e| {
                Arc::new(std::io::Error::new(
                    e.kind(),
                    format!("reading the {which} key {}: {e}", path.display()),
                )) as SourceError
            })?;
            Ok(EncryptionKeyInfo::new(bytes))
        })
    }
}

impl CryptoKeyReader for PemFileKeyReader {
    fn public_key(
        &self,
        _name: &str,
        _metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        Self::read(self.public.as_ref(), "public")
    }

    fn private_key(
        &self,
        _name: &str,
        _metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        Self::read(self.private.as_ref(), "private")
    }
}

/// What a producer does when it cannot encrypt a message (upstream
/// `ProducerCryptoFailureAction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProducerCryptoFailureAction {
    /// The send fails with [`Error::Crypto`](crate::Error::Crypto) (the default).
    #[default]
    Fail,
    /// The message is sent unencrypted (logged as a warning), and the keys are loaded again
    /// in the background (one load at a time): the messages after a successful load are
    /// encrypted (upstream loads a missing key before each message).
    Send,
}

/// What a consumer (or reader) does with a message it cannot decrypt (upstream
/// `ConsumerCryptoFailureAction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumerCryptoFailureAction {
    /// The message is not delivered: the application receives an
    /// [`Error::Crypto`](crate::Error::Crypto) item in its place, and the message stays
    /// unacknowledged (the broker redelivers it after a reconnect, the ack timeout, whose
    /// clock starts when decryption fails, or `redeliver_unacknowledged_messages`); it is
    /// never dead-lettered, as it is never delivered (as upstream). The default.
    #[default]
    Fail,
    /// The message is acknowledged (with validation error `DecryptionError`, as upstream) and
    /// dropped; counted in the consumer's discarded messages.
    Discard,
    /// The message is delivered still encrypted, one message per entry (a batch is not
    /// unpacked), with its [`EncryptionContext`] (`Message::encryption_context`) so that the
    /// application can decrypt it itself.
    Consume,
}

/// One recipient's encrypted data key, as a message carries it (`encryption_keys`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EncryptedDataKey {
    /// The key name the producer encrypted for.
    pub name: String,
    /// The data key, encrypted with that recipient's public key.
    pub value: Bytes,
    /// The key metadata the producer's reader supplied.
    pub metadata: BTreeMap<String, String>,
}

impl fmt::Debug for EncryptedDataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedDataKey")
            .field("name", &self.name)
            .field("value", &format_args!("<{} bytes>", self.value.len()))
            .field("metadata", &self.metadata)
            .finish()
    }
}

/// What a message delivered still encrypted ([`ConsumerCryptoFailureAction::Consume`]) needs
/// to be decrypted by the application (upstream `EncryptionContext`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EncryptionContext {
    /// The encrypted data keys, one per recipient.
    pub keys: Vec<EncryptedDataKey>,
    /// The payload cipher's name as the message says it (empty from the official clients,
    /// which always use AES-256-GCM).
    pub algorithm: String,
    /// The cipher's parameters: the 12-byte GCM IV.
    pub param: Bytes,
    /// The compression applied before encryption.
    pub compression: CompressionType,
    /// The payload's size once decrypted and decompressed.
    pub uncompressed_size: u32,
    /// The number of messages in the encrypted batch (`None`: not a batch).
    pub batch_size: Option<i32>,
}

impl EncryptionContext {
    /// The bytes it holds, as a consumer's byte budget counts them: each recipient's name,
    /// wrapped key and metadata, with 80 bytes per recipient and 48 per metadata entry for
    /// their structures (a hostile producer can list tens of thousands of recipients in one
    /// message whose payload is a few bytes).
    pub(crate) fn cost(&self) -> usize {
        self.keys
            .iter()
            .map(|k| {
                80 + k.name.len()
                    + k.value.len()
                    + k.metadata
                        .iter()
                        .map(|(key, value)| key.len() + value.len() + 48)
                        .sum::<usize>()
            })
            .sum::<usize>()
            + self.algorithm.len()
            + self.param.len()
            + 64
    }
}

impl From<CryptoError> for crate::Error {
    fn from(e: CryptoError) -> Self {
        crate::Error::Crypto(e)
    }
}

/// Keys for tests with the [mock broker](crate::mock) (features `encryption` and
/// `mock-broker`): a fresh RSA key pair to encrypt for and decrypt with, without key files.
/// Production keys come from the application's key store (`openssl genrsa`, a KMS).
#[cfg(feature = "mock-broker")]
#[cfg_attr(docsrs, doc(cfg(all(feature = "encryption", feature = "mock-broker"))))]
pub mod testing {
    use super::CryptoError;

    /// A fresh RSA key pair of `bits` (2048, 3072, 4096 or 8192): (public key as `PUBLIC KEY`
    /// PEM, private key as `PRIVATE KEY` PEM), ready for an
    /// [`EncryptionKeyInfo`](super::EncryptionKeyInfo) or a
    /// [`PemFileKeyReader`](super::PemFileKeyReader)'s files.
    /// Another size, or a failure of the system's random source, is an
    /// [`InvalidKey`](CryptoError::InvalidKey) error.
    pub fn rsa_key_pair_pem(bits: usize) -> Result<(String, String), CryptoError> {
        super::keys::generate_pem(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_material_in_debug_output() {
        let (_, private) = keys::generate_pem(2048).unwrap();
        let info = EncryptionKeyInfo::new(private.clone().into_bytes()).with_metadata("v", "1");
        let shown = format!("{info:?}");
        assert!(
            !shown.contains("BEGIN") && shown.contains("bytes"),
            "{shown}"
        );
        let (key, _) = cipher::DataKey::generate().unwrap();
        assert_eq!(format!("{key:?}"), "DataKey(<redacted>)");
        let wrapped = EncryptedDataKey {
            name: "k".into(),
            value: Bytes::from_static(&[1, 2, 3]),
            metadata: BTreeMap::new(),
        };
        assert!(!format!("{wrapped:?}").contains("[1, 2, 3]"));
    }
}
