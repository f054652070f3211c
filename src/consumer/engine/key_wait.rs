//! What a consumer task keeps for decryption (PIP-4, feature `encryption`): the decryptor,
//! the entries waiting for a data key and the key reader's task. The step itself is
//! [`decrypt`](super::decrypt); this leaf holds only the state, so the intake that owns it
//! and the step that works on the intake do not import each other.
//!
//! The entries waiting for a key are held in the consumer's byte budget (issue #31's rule:
//! whatever the broker can make the consumer hold counts), each charged with its wire bytes
//! until it goes on or is dropped: a flood of messages behind a slow key reader takes no more
//! permits than the budget has room for.

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
    use crate::consumer::engine::budget::{Charge, ConsumerBudget, ENTRY_COST};
    use crate::crypto::{CryptoError, Decryptor};
    use crate::proto;

    /// An entry waiting for a key, and its bytes in the consumer's budget.
    type Parked = (proto::CommandMessage, Payload, Charge);

    /// The decryption state of one consumer task.
    #[derive(Debug)]
    pub(crate) struct CryptoIntake {
        pub(crate) decryptor: Arc<Decryptor>,
        /// Entries waiting for a data key, in arrival order.
        parked: VecDeque<Parked>,
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

        /// A re-subscribe: the broker redelivers what is parked (its bytes are given back).
        pub(crate) fn clear(&mut self) {
            self.parked.clear();
        }

        /// Whether entries wait for a key.
        pub(crate) fn is_parked(&self) -> bool {
            !self.parked.is_empty()
        }

        /// Holds an entry until its key comes, charged to `budget`: at the back (behind
        /// another), or at the front (the entry that needs the key).
        pub(crate) fn park(
            &mut self,
            budget: &Arc<ConsumerBudget>,
            cmd: proto::CommandMessage,
            payload: Payload,
            front: bool,
        ) {
            use prost::Message as _;
            let bytes = ENTRY_COST + payload.metadata.encoded_len() + payload.data.len();
            let parked = (cmd, payload, budget.charge(bytes, false));
            if front {
                self.parked.push_front(parked);
            } else {
                self.parked.push_back(parked);
            }
        }

        /// The oldest entry waiting, its bytes given back to the budget.
        pub(crate) fn unpark(&mut self) -> Option<(proto::CommandMessage, Payload)> {
            self.parked
                .pop_front()
                .map(|(cmd, payload, _charge)| (cmd, payload))
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
