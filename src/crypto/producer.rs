//! A producer's encryption: the current data key wrapped for every recipient, renewed on
//! upstream's schedule, and the sealing of each SEND payload.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// A key load started by [`Encryptor::seal`] is running (at most one at a time).
    loading: AtomicBool,
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
            loading: AtomicBool::new(false),
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
    /// `data` unchanged with the `Send` action; either way the keys are loaded again.
    pub(crate) fn seal(
        self: &Arc<Self>,
        metadata: &mut proto::MessageMetadata,
        data: Bytes,
    ) -> Result<Bytes, CryptoError> {
        let sealed = self.current().ok_or_else(|| {
            self.load_again();
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

impl Encryptor {
    /// Upstream `MessageCryptoBc.encrypt` loads the public key of every recipient that has no
    /// wrapped data key yet before each message it encrypts ("to load keys as soon as a new
    /// key is added"), so with `ProducerCryptoFailureAction.SEND` encryption resumes at the
    /// first message after the key store recovers, not at the next 4-hourly rotation. The same
    /// here, except that the reader is never awaited on the producer's task: each message sent
    /// without a key starts a load in a task of its own unless one is running, and the
    /// messages after it succeeded are encrypted (the one that started it went unencrypted).
    fn load_again(self: &Arc<Self>) {
        if self.loading.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            match this.refresh().await {
                Ok(()) => tracing::info!(keys = ?this.names, "encryption keys loaded; \
                    messages are encrypted again"),
                Err(e) => tracing::debug!(error = %e, "encryption keys still not loadable"),
            }
            this.loading.store(false, Ordering::Release);
        });
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
        /// The first this many calls fail (the key store is down).
        fail_first: usize,
    }

    impl CryptoKeyReader for Counting {
        fn public_key(
            &self,
            _name: &str,
            _metadata: &BTreeMap<String, String>,
        ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let pem = self.pem.clone();
            let fail = n < self.fail_first;
            Box::pin(async move {
                if fail {
                    return Err(Arc::new(std::io::Error::other("key store down")) as SourceError);
                }
                Ok(EncryptionKeyInfo::new(pem.into_bytes()))
            })
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
            pem: keys::generate_pem(2048).unwrap().0,
            calls: AtomicUsize::new(0),
            fail_first: 0,
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

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// Upstream `MessageCryptoBc.encrypt` loads a missing recipient key again before each
    /// message: with `Send`, a producer created while the key store was down encrypts again
    /// once it is back, not 4 hours later. Before: every message went unencrypted until the
    /// rotation.
    #[tokio::test(start_paused = true)]
    async fn with_send_a_failed_key_load_is_retried_by_the_next_message() {
        let reader = Arc::new(Counting {
            pem: keys::generate_pem(2048).unwrap().0,
            calls: AtomicUsize::new(0),
            // Creation and the first retry fail.
            fail_first: 2,
        });
        let e = Encryptor::start(
            vec!["k".into()],
            reader.clone(),
            ProducerCryptoFailureAction::Send,
        )
        .await
        .unwrap();
        assert_eq!(reader.calls.load(Ordering::SeqCst), 1);
        let seal = |e: &Arc<Encryptor>| {
            let mut meta = proto::MessageMetadata::default();
            let out = e.seal(&mut meta, Bytes::from_static(b"plain")).unwrap();
            (meta.encryption_keys.len(), out)
        };
        // Sent unencrypted; each starts a load, one at a time.
        assert_eq!(seal(&e), (0, Bytes::from_static(b"plain")));
        assert_eq!(seal(&e).0, 0);
        settle().await;
        assert_eq!(reader.calls.load(Ordering::SeqCst), 2, "one load for both");
        // That load failed: the next message tries again, and that one succeeds.
        assert_eq!(seal(&e).0, 0);
        settle().await;
        assert_eq!(reader.calls.load(Ordering::SeqCst), 3);
        let (keys, sealed) = seal(&e);
        assert_eq!(keys, 1, "encrypted again, long before the 4-hour rotation");
        assert_ne!(sealed, Bytes::from_static(b"plain"));
        // Loaded: no more loads until the rotation.
        settle().await;
        assert_eq!(reader.calls.load(Ordering::SeqCst), 3);
    }
}
