//! A producer's encryption: the current data key wrapped for every recipient, renewed on
//! upstream's schedule, and the sealing of each SEND payload.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::cipher::{self, DataKey, IV_LEN, TAG_LEN};
use super::{keys, CryptoError, CryptoKeyReader, ProducerCryptoFailureAction};
use crate::proto;

/// How often a producer draws a new data key and wraps it again for its recipients (Java
/// `ProducerImpl`'s key generator task, every 4 hours; it also re-reads the public keys).
pub(crate) const DATA_KEY_ROTATION: Duration = Duration::from_secs(4 * 3600);

/// One data key and its wrapped forms, as every message sealed with it carries them.
#[derive(Debug)]
struct KeySet {
    key: DataKey,
    recipients: Vec<proto::EncryptionKeys>,
}

/// The encryption shared by the producers of one `Producer` (all its partitions).
#[derive(Debug)]
pub(crate) struct Encryptor {
    names: Vec<String>,
    reader: Arc<dyn CryptoKeyReader>,
    action: ProducerCryptoFailureAction,
    current: Mutex<Option<Arc<KeySet>>>,
}

impl Encryptor {
    /// Loads the recipients' keys (failing as upstream's producer creation does when its
    /// first key load fails, unless the failure action is `Send`) and starts the rotation.
    pub(crate) async fn start(
        names: Vec<String>,
        reader: Arc<dyn CryptoKeyReader>,
        action: ProducerCryptoFailureAction,
    ) -> Result<Arc<Encryptor>, CryptoError> {
        let encryptor = Arc::new(Encryptor {
            names,
            reader,
            action,
            current: Mutex::new(None),
        });
        match encryptor.refresh().await {
            Ok(()) => {}
            Err(e) if action == ProducerCryptoFailureAction::Send => {
                tracing::warn!(error = %e, "no encryption key loaded; messages go unencrypted \
                    until a key load succeeds (crypto failure action Send)");
            }
            Err(e) => return Err(e),
        }
        // The rotation task holds the encryptor weakly: it ends with the producer.
        let weak = Arc::downgrade(&encryptor);
        tokio::spawn(rotate(weak));
        Ok(encryptor)
    }

    /// A new data key wrapped for every recipient, swapped in only when all succeeded (the
    /// previous set stays in use otherwise).
    async fn refresh(&self) -> Result<(), CryptoError> {
        let (key, raw) = DataKey::generate()?;
        let mut recipients = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let info = self
                .reader
                .public_key(name, &BTreeMap::new())
                .await
                .map_err(|source| CryptoError::KeyReader {
                    key: name.clone(),
                    source,
                })?;
            let public = keys::public_key(name, &info.key)?;
            recipients.push(proto::EncryptionKeys {
                key: name.clone(),
                value: cipher::wrap(name, &public, &raw)?,
                metadata: info
                    .metadata
                    .iter()
                    .map(|(k, v)| proto::KeyValue {
                        key: k.clone(),
                        value: v.clone(),
                    })
                    .collect(),
            });
        }
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Arc::new(KeySet { key, recipients }));
        Ok(())
    }

    fn current(&self) -> Option<Arc<KeySet>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What sealing adds to a message's size (metadata and tag), for the size limits. A
    /// rotation may change it slightly (other key metadata); 64 bytes of slack cover that.
    pub(crate) fn overhead(&self) -> usize {
        use prost::Message as _;
        let keys = self.current().map_or(
            // Unknown yet: room for 4096-bit keys.
            self.names.iter().map(|n| n.len() + 512 + 16).sum(),
            |set| {
                set.recipients
                    .iter()
                    .map(|k| k.encoded_len() + 4)
                    .sum::<usize>()
            },
        );
        keys + TAG_LEN + IV_LEN + 4 + 64
    }

    /// Seals `data` (a message's, a batch's or a chunk's payload, compressed) and records the
    /// recipients and IV in `metadata`. Without a data key (every load failed): an error, or
    /// `data` unchanged with the `Send` action.
    pub(crate) fn seal(
        &self,
        metadata: &mut proto::MessageMetadata,
        data: Bytes,
    ) -> Result<Bytes, CryptoError> {
        let sealed = self.current().ok_or_else(|| {
            CryptoError::Encrypt(format!(
                "no data key: the public keys {:?} could not be loaded",
                self.names
            ))
        });
        let result = sealed.and_then(|set| {
            let (sealed, iv) = set.key.seal(&data)?;
            metadata.encryption_keys = set.recipients.clone();
            metadata.encryption_param = Some(Bytes::copy_from_slice(&iv));
            Ok(sealed)
        });
        match result {
            Ok(sealed) => Ok(sealed),
            Err(e) if self.action == ProducerCryptoFailureAction::Send => {
                tracing::warn!(error = %e, "sending unencrypted (crypto failure action Send)");
                Ok(data)
            }
            Err(e) => Err(e),
        }
    }
}

async fn rotate(weak: Weak<Encryptor>) {
    loop {
        tokio::time::sleep(DATA_KEY_ROTATION).await;
        let Some(encryptor) = weak.upgrade() else {
            return;
        };
        if let Err(e) = encryptor.refresh().await {
            tracing::warn!(error = %e, "data key rotation failed; the current key stays in use");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::EncryptionKeyInfo;
    use crate::error::SourceError;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug)]
    struct Counting {
        pem: String,
        calls: AtomicUsize,
    }

    impl CryptoKeyReader for Counting {
        fn public_key(
            &self,
            _name: &str,
            _metadata: &BTreeMap<String, String>,
        ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let pem = self.pem.clone();
            Box::pin(async move { Ok(EncryptionKeyInfo::new(pem.into_bytes())) })
        }

        fn private_key(
            &self,
            _name: &str,
            _metadata: &BTreeMap<String, String>,
        ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
            unreachable!("a producer asks for public keys only")
        }
    }

    fn wrapped(e: &Encryptor) -> Bytes {
        e.current().expect("a key set").recipients[0].value.clone()
    }

    /// Upstream's producer draws a new data key every 4 hours (and reads the public keys
    /// again); messages sealed before and after carry different wrapped keys.
    #[tokio::test(start_paused = true)]
    async fn the_data_key_rotates_every_four_hours() {
        let reader = Arc::new(Counting {
            pem: keys::generate_pem(2048).0,
            calls: AtomicUsize::new(0),
        });
        let e = Encryptor::start(
            vec!["k".into()],
            reader.clone(),
            ProducerCryptoFailureAction::Fail,
        )
        .await
        .unwrap();
        let first = wrapped(&e);
        let mut meta = proto::MessageMetadata::default();
        e.seal(&mut meta, Bytes::from_static(b"x")).unwrap();
        assert_eq!(meta.encryption_keys[0].value, first);
        tokio::time::sleep(DATA_KEY_ROTATION - Duration::from_secs(1)).await;
        assert_eq!(reader.calls.load(Ordering::SeqCst), 1, "not before 4 h");
        assert_eq!(wrapped(&e), first);
        tokio::time::sleep(Duration::from_secs(2)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(reader.calls.load(Ordering::SeqCst), 2, "rotated at 4 h");
        assert_ne!(wrapped(&e), first, "a new data key");
        // The task ends with the producer.
        let weak = Arc::downgrade(&e);
        drop(e);
        assert!(weak.upgrade().is_none());
    }
}
