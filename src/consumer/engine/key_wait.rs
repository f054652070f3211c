//! What a consumer task keeps for decryption (PIP-4, feature `encryption`): the decryptor,
//! the entries waiting for a data key and the key reader's task. The step itself is
//! [`decrypt`](super::decrypt); this leaf holds only the state, so the intake that owns it
//! and the step that works on the intake do not import each other.

#[cfg(feature = "encryption")]
pub(crate) use enabled::CryptoIntake;

/// Without the `encryption` feature: nothing to decrypt, nothing parked.
#[cfg(not(feature = "encryption"))]
#[derive(Debug, Default)]
pub(crate) struct CryptoIntake;

#[cfg(not(feature = "encryption"))]
impl CryptoIntake {
    pub(crate) fn new(_opts: &crate::consumer::ConsumerOptions) -> Self {
        CryptoIntake
    }
    pub(crate) fn loading(&self) -> bool {
        false
    }
    pub(crate) async fn loaded(&mut self) {
        std::future::pending().await
    }
    pub(crate) fn clear(&mut self) {}
}

#[cfg(feature = "encryption")]
mod enabled {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use tokio::task::JoinHandle;

    use crate::codec::Payload;
    use crate::crypto::{CryptoError, Decryptor};
    use crate::proto;

    type Parked = (proto::CommandMessage, Payload);

    /// The decryption state of one consumer task.
    #[derive(Debug)]
    pub(crate) struct CryptoIntake {
        pub(crate) decryptor: Arc<Decryptor>,
        /// Entries waiting for a data key, in arrival order.
        pub(crate) parked: VecDeque<Parked>,
        /// The key reader's task, while it runs.
        loading: Option<JoinHandle<Result<(), CryptoError>>>,
        /// Set while a parked entry goes through the intake again.
        pub(crate) replaying: bool,
    }

    impl CryptoIntake {
        pub(crate) fn new(opts: &crate::consumer::ConsumerOptions) -> Self {
            CryptoIntake {
                decryptor: Arc::new(Decryptor::new(
                    opts.crypto_key_reader.clone(),
                    opts.crypto_failure_action,
                )),
                parked: VecDeque::new(),
                loading: None,
                replaying: false,
            }
        }

        pub(crate) fn loading(&self) -> bool {
            self.loading.is_some()
        }

        /// The key reader's answer (pending while none is asked; cancel-safe).
        pub(crate) async fn loaded(&mut self) -> Result<(), CryptoError> {
            let Some(handle) = self.loading.as_mut() else {
                return std::future::pending().await;
            };
            let done = handle.await;
            self.loading = None;
            done.unwrap_or_else(|e| {
                Err(CryptoError::KeyReader {
                    key: String::new(),
                    source: Arc::new(e),
                })
            })
        }

        /// A re-subscribe: the broker redelivers what is parked.
        pub(crate) fn clear(&mut self) {
            self.parked.clear();
        }

        pub(crate) fn start_load(&mut self, keys: Vec<proto::EncryptionKeys>) {
            if self.loading.is_none() {
                let decryptor = self.decryptor.clone();
                self.loading = Some(tokio::spawn(async move { decryptor.load(keys).await }));
            }
        }
    }
}

/// What the key reader's task answers (see [`CryptoIntake::loaded`]).
#[cfg(feature = "encryption")]
pub(crate) type Loaded = Result<(), crate::crypto::CryptoError>;
/// What the key reader's task answers: nothing ever, without the feature.
#[cfg(not(feature = "encryption"))]
pub(crate) type Loaded = ();
