//! Transactions (PIP-31): messages produced and acknowledgements made across topics and
//! partitions commit or abort together (cargo feature `transactions`).
//!
//! ```no_run
//! # async fn demo() -> pulsar_sdk::Result<()> {
//! use std::time::Duration;
//! use pulsar_sdk::{Client, ProducerMessage};
//!
//! let client = Client::builder()
//!     .service_url("pulsar://localhost:6650")
//!     .enable_transaction(true)
//!     .build()?;
//! let mut input = client.consumer("in").subscription("pipeline").subscribe().await?;
//! let output = client.producer("out").create().await?;
//! let msg = input.recv().await?;
//! let txn = client.transaction().timeout(Duration::from_secs(30)).begin().await?;
//! output.send(ProducerMessage::new(msg.payload.clone()).transaction(&txn)).await?;
//! input.ack_with_transaction(&msg, &txn).await?;
//! txn.commit().await?;
//! # Ok(()) }
//! ```
//!
//! What follows upstream (Java `TransactionImpl`, `TransactionCoordinatorClientImpl`,
//! `TransactionMetaStoreHandler`): coordinators are discovered through the partitions of
//! `persistent://pulsar/system/transaction_coordinator_assign`; a send joins
//! the transaction after its partition was registered with the coordinator (once per
//! partition); an acknowledgement after its subscription was, and waits for the broker's
//! answer (a conflict is [`Error::Broker`] with `TransactionConflict`); `commit` waits for
//! every send and acknowledgement made in the transaction, and aborts instead (failing with
//! [`TransactionError::OperationFailed`]) if one of them failed; the timeout is kept on the
//! client too (the state becomes [`TransactionState::TimedOut`]; the coordinator aborts it).

pub(crate) mod coordinator;
pub(crate) mod types;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result, ServerError};
use coordinator::Coordinators;
pub use types::{TransactionError, TransactionState, TxnId};

/// Upstream's default transaction timeout (`TransactionBuilderImpl`: 60 s).
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts a transaction; see [`Client::transaction`](crate::Client::transaction).
#[derive(Debug, Clone)]
#[must_use = "a transaction starts with `begin().await`"]
pub struct TransactionBuilder {
    coordinators: Option<Arc<Coordinators>>,
    timeout: Duration,
}

impl TransactionBuilder {
    pub(crate) fn new(coordinators: Option<Arc<Coordinators>>) -> Self {
        TransactionBuilder {
            coordinators,
            timeout: DEFAULT_TRANSACTION_TIMEOUT,
        }
    }

    /// How long the transaction may stay open: past it, the coordinator aborts it and the
    /// client refuses new work in it ([`TransactionState::TimedOut`]). Default 60 s (Java's
    /// `withTransactionTimeout`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Opens the transaction on a coordinator (NEW_TXN). Fails with
    /// [`TransactionError::NotEnabled`] on a client without
    /// [`enable_transaction`](crate::ClientBuilder::enable_transaction), and with
    /// [`TransactionError::NoCoordinator`] when the cluster has none (after at most one
    /// operation timeout per discovery step).
    pub async fn begin(self) -> Result<Transaction> {
        let coordinators = self
            .coordinators
            .ok_or(Error::Transaction(TransactionError::NotEnabled))?;
        if self.timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "transaction timeout must be greater than zero".into(),
            ));
        }
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let tc_id = coordinators.next_coordinator().await?;
        let answer = coordinators
            .request(
                tc_id,
                |rid| crate::commands::new_txn(tc_id, timeout_ms, rid),
                "new transaction",
            )
            .await?;
        let r = answer
            .new_txn_response
            .as_ref()
            .ok_or_else(|| Error::Protocol("NEW_TXN answered without its response".into()))?;
        let id = TxnId::new(r.txnid_most_bits(), r.txnid_least_bits());
        tracing::debug!(txn = %id, "transaction opened");
        Ok(Transaction {
            inner: Arc::new(Inner {
                id,
                deadline: crate::util::deadline_after(self.timeout),
                coordinators,
                tracked: Mutex::new(Tracked {
                    state: TransactionState::Open,
                    partitions: HashMap::new(),
                    subscriptions: HashMap::new(),
                    failed: false,
                }),
                ops: watch::Sender::new(0),
            }),
        })
    }
}

/// A registration with the coordinator, shared by the operations waiting for it.
type Registration = Shared<BoxFuture<'static, Result<()>>>;

struct Tracked {
    state: TransactionState,
    /// Partitions registered (AddPartitionToTxn), by name: upstream `registerPartitionMap`.
    partitions: HashMap<String, Registration>,
    /// Subscriptions registered (AddSubscriptionToTxn), by topic then subscription name (so
    /// that both are looked up by `&str`): upstream `registerSubscriptionMap`.
    subscriptions: HashMap<String, HashMap<String, Registration>>,
    /// A send or acknowledgement of the transaction failed (upstream `hasOpsFailed`).
    failed: bool,
}

struct Inner {
    id: TxnId,
    /// When the client stops taking work in it (upstream's timer: OPEN → TIME_OUT).
    deadline: Instant,
    coordinators: Arc<Coordinators>,
    tracked: Mutex<Tracked>,
    /// Sends and acknowledgements not finished (upstream `opCount` / `opFuture`).
    ops: watch::Sender<usize>,
}

/// A transaction: produced messages and acknowledgements made in it commit or abort together.
///
/// Cheap to clone (clones share it), `Send + Sync`. Made by
/// [`Client::transaction`](crate::Client::transaction); messages join it with
/// [`ProducerMessage::transaction`](crate::ProducerMessage::transaction), acknowledgements
/// with [`Consumer::ack_with_transaction`](crate::Consumer::ack_with_transaction). Dropping
/// every clone without ending it leaves it to its timeout (the coordinator aborts it), as
/// upstream.
#[derive(Clone)]
pub struct Transaction {
    inner: Arc<Inner>,
}

impl fmt::Debug for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("id", &self.inner.id)
            .field("state", &self.state())
            .finish()
    }
}

impl PartialEq for Transaction {
    /// The same transaction (clones of one handle).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Transaction {}

impl Transaction {
    /// The id the coordinator gave it.
    pub fn id(&self) -> TxnId {
        self.inner.id
    }

    /// Its state now.
    pub fn state(&self) -> TransactionState {
        self.tracked().state
    }

    /// The tracked state, with the timeout applied (upstream's timer task moves OPEN to
    /// TIME_OUT; here it is read from the deadline, so paused test time works alike).
    fn tracked(&self) -> MutexGuard<'_, Tracked> {
        let mut t = self.inner.tracked.lock().unwrap_or_else(|e| e.into_inner());
        if t.state == TransactionState::Open && Instant::now() >= self.inner.deadline {
            t.state = TransactionState::TimedOut;
        }
        t
    }

    fn invalid(&self, state: TransactionState) -> Error {
        Error::Transaction(TransactionError::InvalidState {
            txn: self.inner.id,
            state,
        })
    }

    /// The wire form of the id (most, least), for SEND and ACK.
    pub(crate) fn raw_id(&self) -> (u64, u64) {
        (self.inner.id.most_bits(), self.inner.id.least_bits())
    }

    /// Starts a send or acknowledgement in the transaction: refused unless it is open
    /// (upstream `checkIfOpen`); the commit waits for it to finish.
    pub(crate) fn begin_op(&self) -> Result<OpGuard> {
        let t = self.tracked();
        if t.state != TransactionState::Open {
            return Err(self.invalid(t.state));
        }
        self.inner.ops.send_modify(|n| *n += 1);
        Ok(OpGuard {
            txn: self.clone(),
            finished: false,
        })
    }

    /// Registers `partition` as produced to, once (upstream `registerProducedTopic`).
    pub(crate) async fn register_partition(&self, partition: &str) -> Result<()> {
        let registration = {
            let mut t = self.tracked();
            if t.state != TransactionState::Open {
                return Err(self.invalid(t.state));
            }
            // Looked up first: a send to a registered partition allocates nothing.
            if let Some(r) = t.partitions.get(partition) {
                r.clone()
            } else {
                t.partitions
                    .entry(partition.to_owned())
                    .or_insert_with(|| {
                        // The coordinators and the id, not the transaction: the map holds this.
                        let (tcs, id) = (self.inner.coordinators.clone(), self.raw_id());
                        let partition = partition.to_owned();
                        async move {
                            tcs.request(
                                id.0,
                                |rid| crate::commands::add_partition_to_txn(id, &partition, rid),
                                "add partition to transaction",
                            )
                            .await
                            .map(|_| ())
                        }
                        .boxed()
                        .shared()
                    })
                    .clone()
            }
        };
        registration.await
    }

    /// Registers `subscription` of `topic` as acknowledged on, once (upstream
    /// `registerAckedTopic`).
    pub(crate) async fn register_subscription(
        &self,
        topic: &str,
        subscription: &str,
    ) -> Result<()> {
        let registration = {
            let mut t = self.tracked();
            if t.state != TransactionState::Open {
                return Err(self.invalid(t.state));
            }
            // Looked up first: an ack on a registered subscription allocates nothing.
            if let Some(r) = t.subscriptions.get(topic).and_then(|s| s.get(subscription)) {
                r.clone()
            } else {
                t.subscriptions
                    .entry(topic.to_owned())
                    .or_default()
                    .entry(subscription.to_owned())
                    .or_insert_with(|| {
                        let (tcs, id) = (self.inner.coordinators.clone(), self.raw_id());
                        let (topic, subscription) = (topic.to_owned(), subscription.to_owned());
                        async move {
                            tcs.request(
                                id.0,
                                |rid| {
                                    crate::commands::add_subscription_to_txn(
                                        id,
                                        &topic,
                                        &subscription,
                                        rid,
                                    )
                                },
                                "add subscription to transaction",
                            )
                            .await
                            .map(|_| ())
                        }
                        .boxed()
                        .shared()
                    })
                    .clone()
            }
        };
        registration.await
    }

    /// Commits: waits for the sends and acknowledgements made in the transaction, then asks
    /// the coordinator to commit (END_TXN COMMIT). If one of them failed, the transaction is
    /// aborted instead and this fails with [`TransactionError::OperationFailed`] (upstream
    /// `TransactionImpl.commit`). Refused with [`TransactionError::InvalidState`] unless the
    /// transaction is open (or a commit failed before without an answer: then it is tried
    /// again). The coordinator's `TransactionNotFound` / `InvalidTxnStatus` end it in
    /// [`TransactionState::Error`] (upstream `TransactionImpl.commit`): the coordinator
    /// aborted it for its timeout, or, when the END_TXN was sent again after the coordinator
    /// connection was lost, it had already committed and forgotten it. The outcome is then
    /// the coordinator's (see the guide's `transactions` chapter); a coordinator that was
    /// still committing it finishes the commit for the resend, which succeeds.
    pub async fn commit(&self) -> Result<()> {
        {
            let mut t = self.tracked();
            match t.state {
                TransactionState::Open | TransactionState::Committing => {
                    t.state = TransactionState::Committing
                }
                s => return Err(self.invalid(s)),
            }
        }
        self.ops_done().await;
        if self.tracked().failed {
            // Upstream aborts on the coordinator, then fails the commit.
            if let Err(e) = self.end(false).await {
                tracing::debug!(txn = %self.inner.id, error = %e, "abort after a failed operation");
            }
            return Err(Error::Transaction(TransactionError::OperationFailed {
                txn: self.inner.id,
            }));
        }
        self.end(true).await
    }

    /// Aborts: waits for the sends and acknowledgements made in the transaction, then asks
    /// the coordinator to abort (END_TXN ABORT): its messages are never delivered, its
    /// acknowledgements are dropped (the messages can be received again). Refused with
    /// [`TransactionError::InvalidState`] unless it is open (or an abort failed before
    /// without an answer). Upstream `TransactionImpl.abort`.
    pub async fn abort(&self) -> Result<()> {
        {
            let mut t = self.tracked();
            match t.state {
                TransactionState::Open | TransactionState::Aborting => {
                    t.state = TransactionState::Aborting
                }
                s => return Err(self.invalid(s)),
            }
        }
        self.ops_done().await;
        self.end(false).await
    }

    async fn ops_done(&self) {
        let mut rx = self.inner.ops.subscribe();
        // The sender lives in `inner`, which `self` holds: the wait ends when the count does.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// END_TXN, and the state it leaves.
    async fn end(&self, commit: bool) -> Result<()> {
        let id = self.raw_id();
        {
            let mut t = self.tracked();
            t.state = if commit {
                TransactionState::Committing
            } else {
                TransactionState::Aborting
            };
        }
        let r = self
            .inner
            .coordinators
            .request(
                id.0,
                |rid| crate::commands::end_txn(id, commit, rid),
                if commit {
                    "commit transaction"
                } else {
                    "abort transaction"
                },
            )
            .await;
        let mut t = self.tracked();
        match &r {
            Ok(_) if commit => t.state = TransactionState::Committed,
            Ok(_) => t.state = TransactionState::Aborted,
            Err(Error::Broker {
                code: ServerError::TransactionNotFound | ServerError::InvalidTxnStatus,
                ..
            }) => t.state = TransactionState::Error,
            Err(_) => {}
        }
        tracing::debug!(txn = %self.inner.id, state = %t.state, "transaction ended");
        r.map(|_| ())
    }

    fn op_finished(&self, ok: bool) {
        if !ok {
            self.inner
                .tracked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .failed = true;
        }
        self.inner.ops.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A send or acknowledgement in flight in a transaction: [`finish`](Self::finish) it with
/// its outcome; dropped unfinished, it counts as failed (the operation was abandoned).
pub(crate) struct OpGuard {
    txn: Transaction,
    finished: bool,
}

impl OpGuard {
    /// The operation ended, successfully or not.
    pub(crate) fn finish(mut self, ok: bool) {
        self.finished = true;
        self.txn.op_finished(ok);
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.txn.op_finished(false);
        }
    }
}
