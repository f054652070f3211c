//! A consumer's decryption: data keys from its cache (AES-GCM only, done where the message is
//! decoded), or unwrapped with a private key its reader gives (in a task of its own, see
//! `consumer::engine::decrypt`), as upstream `MessageCryptoBc.decrypt`: the cached key of any
//! recipient first, then each recipient's private key in the message's order until one
//! unwraps the data key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::time::Instant;

use super::cipher::{self, DataKeyCache};
use super::{keys, ConsumerCryptoFailureAction, CryptoError, CryptoKeyReader};
use crate::proto;

/// The most recipients of one message a consumer tries, in the message's order (upstream
/// tries every one). Each untried recipient costs a key-reader call and an RSA decryption, and
/// a hostile producer can list thousands in one message's metadata; the official clients list
/// one per `encryption_key` the producer was given.
pub(crate) const MAX_RECIPIENTS: usize = 64;

/// The recipients a consumer tries: the first [`MAX_RECIPIENTS`] of the message.
pub(crate) fn recipients(meta: &proto::MessageMetadata) -> &[proto::EncryptionKeys] {
    &meta.encryption_keys[..meta.encryption_keys.len().min(MAX_RECIPIENTS)]
}

/// What [`Decryptor::try_decrypt`] found.
#[derive(Debug)]
pub(crate) enum Decrypted {
    /// The payload, decrypted.
    Plain(Bytes),
    /// No cached data key of any recipient: the reader must be asked ([`Decryptor::load`]).
    NeedKeys,
    /// It cannot be decrypted.
    Failed(CryptoError),
}

/// One consumer's (partition's) decryption state.
#[derive(Debug)]
pub(crate) struct Decryptor {
    reader: Option<Arc<dyn CryptoKeyReader>>,
    pub(crate) action: ConsumerCryptoFailureAction,
    cache: Mutex<DataKeyCache>,
}

impl Decryptor {
    pub(crate) fn new(
        reader: Option<Arc<dyn CryptoKeyReader>>,
        action: ConsumerCryptoFailureAction,
    ) -> Self {
        Decryptor {
            reader,
            action,
            cache: Mutex::new(DataKeyCache::default()),
        }
    }

    /// Decrypts with a cached data key, without waiting for anything.
    pub(crate) fn try_decrypt(&self, meta: &proto::MessageMetadata, data: &[u8]) -> Decrypted {
        if self.reader.is_none() {
            return Decrypted::Failed(CryptoError::NoKeyReader);
        }
        // The official clients never set `encryption_algo` (their cipher is fixed).
        if let Some(algo) = meta.encryption_algo.as_deref().filter(|a| !a.is_empty()) {
            if !algo.eq_ignore_ascii_case("AES-256-GCM")
                && !algo.eq_ignore_ascii_case("AES/GCM/NoPadding")
            {
                return Decrypted::Failed(CryptoError::UnsupportedAlgorithm(format!(
                    "payload cipher `{algo}`"
                )));
            }
        }
        let Some(iv) = meta.encryption_param.as_deref() else {
            return Decrypted::Failed(CryptoError::UnsupportedAlgorithm(
                "an encrypted message without its IV (encryption_param)".into(),
            ));
        };
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for k in recipients(meta) {
            // The cache is keyed by the wrapped key's bytes: a hit is this message's data key,
            // so a failure is the payload's (or the IV's), not a stale key.
            if let Some(key) = cache.get(&k.value, now) {
                drop(cache);
                return match key.open(iv, data) {
                    Ok(plain) => Decrypted::Plain(plain),
                    Err(e) => Decrypted::Failed(e),
                };
            }
        }
        Decrypted::NeedKeys
    }

    /// Asks the reader for the recipients' private keys in order until one unwraps the data
    /// key, and caches it. Run in a task of its own (the reader may be slow). `keys` is what
    /// [`recipients`] gives.
    pub(crate) async fn load(&self, keys: Vec<proto::EncryptionKeys>) -> Result<(), CryptoError> {
        let Some(reader) = &self.reader else {
            return Err(CryptoError::NoKeyReader);
        };
        let mut first_error = None;
        for k in &keys {
            let metadata: BTreeMap<String, String> = k
                .metadata
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect();
            let attempt = match reader.private_key(&k.key, &metadata).await {
                Ok(info) => {
                    let unwrapped = keys::private_key(&k.key, &info.key)
                        .map(|private| cipher::unwrap(&private, &k.value));
                    wipe(info.key);
                    unwrapped
                }
                Err(source) => Err(CryptoError::KeyReader {
                    key: k.key.clone(),
                    source,
                }),
            };
            match attempt {
                Ok(Some(data_key)) => {
                    self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(
                        k.value.clone(),
                        Arc::new(data_key),
                        Instant::now(),
                    );
                    return Ok(());
                }
                // Not this key's (or the wrapped key was altered): the next recipient.
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(key = %k.key, error = %e, "private key unusable");
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| CryptoError::NoUsableKey {
            keys: keys.iter().map(|k| k.key.clone()).collect(),
        }))
    }
}

/// Zeroizes a private key the reader gave once it is parsed, when nothing else holds its
/// buffer (a reader that keeps its key, e.g. in a `Bytes` it clones, keeps its copy).
fn wipe(key: Bytes) {
    if let Ok(mut unique) = key.try_into_mut() {
        zeroize::Zeroize::zeroize(&mut unique[..]);
    }
}

/// The encryption context of a message delivered still encrypted.
pub(crate) fn context(meta: &proto::MessageMetadata) -> super::EncryptionContext {
    super::EncryptionContext {
        keys: meta
            .encryption_keys
            .iter()
            .map(|k| super::EncryptedDataKey {
                name: k.key.clone(),
                value: k.value.clone(),
                metadata: k
                    .metadata
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
            })
            .collect(),
        algorithm: meta.encryption_algo.clone().unwrap_or_default(),
        param: meta.encryption_param.clone().unwrap_or_default(),
        compression: crate::compression::CompressionType::from_proto(meta.compression.unwrap_or(0))
            .unwrap_or(crate::compression::CompressionType::None),
        uncompressed_size: meta.uncompressed_size.unwrap_or(0),
        batch_size: meta.num_messages_in_batch,
    }
}
