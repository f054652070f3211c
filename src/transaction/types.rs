//! The transaction's plain types: its id, its states and its errors. A leaf (it imports
//! nothing of the crate), so that [`crate::error::Error`] can wrap [`TransactionError`]
//! without an import cycle.

use std::fmt;
use std::sync::Arc;

/// A transaction's id, as the coordinator assigned it (upstream `TxnID`): the most
/// significant bits name the coordinator (its `tc_id`), the least significant bits count its
/// transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId {
    most_bits: u64,
    least_bits: u64,
}

impl TxnId {
    /// An id from its two halves (the wire's `txnid_most_bits` and `txnid_least_bits`).
    pub fn new(most_bits: u64, least_bits: u64) -> Self {
        TxnId {
            most_bits,
            least_bits,
        }
    }

    /// The most significant bits: the id of the coordinator that owns the transaction.
    pub fn most_bits(&self) -> u64 {
        self.most_bits
    }

    /// The least significant bits: the transaction's number at its coordinator.
    pub fn least_bits(&self) -> u64 {
        self.least_bits
    }
}

impl fmt::Display for TxnId {
    /// `(most,least)`, as upstream's `TxnID.toString`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.most_bits, self.least_bits)
    }
}

/// Where a transaction is in its life (upstream `Transaction.State`):
///
/// ```text
///            commit()               EndTxn(COMMIT) ok
///   Open ──────────────► Committing ─────────────────► Committed
///    │  │                    │ NotFound / InvalidTxnStatus
///    │  │ abort()            └───────────────────────► Error
///    │  └──────────────► Aborting ───────────────────► Aborted
///    │                       │ NotFound / InvalidTxnStatus ──► Error
///    └── its timeout passes (client side) ───────────► TimedOut
/// ```
///
/// A commit or abort that failed otherwise (a timeout, a lost connection) leaves the state
/// `Committing` / `Aborting`, and may be called again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransactionState {
    /// Sends and acknowledgements may join it.
    Open,
    /// A commit is under way.
    Committing,
    /// An abort is under way.
    Aborting,
    /// Committed: its messages are visible and its acknowledgements applied.
    Committed,
    /// Aborted: its messages are never delivered, its acknowledgements dropped.
    Aborted,
    /// The coordinator no longer knows it, or refused its end for its state; what happened
    /// to it is the coordinator's decision (a timed-out transaction was aborted).
    Error,
    /// Its timeout passed before it was committed or aborted (upstream `TIME_OUT`): the
    /// coordinator aborts it.
    TimedOut,
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransactionState::Open => "OPEN",
            TransactionState::Committing => "COMMITTING",
            TransactionState::Aborting => "ABORTING",
            TransactionState::Committed => "COMMITTED",
            TransactionState::Aborted => "ABORTED",
            TransactionState::Error => "ERROR",
            TransactionState::TimedOut => "TIME_OUT",
        })
    }
}

/// Why a transaction operation failed on the client's side (the broker's refusals are
/// [`Error::Broker`](crate::Error::Broker) with their code: `TransactionConflict`,
/// `TransactionNotFound`, `InvalidTxnStatus`, `TransactionCoordinatorNotFound`).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The client was built without [`enable_transaction`](crate::ClientBuilder::enable_transaction).
    /// Not retriable.
    #[error("transactions are not enabled on this client (ClientBuilder::enable_transaction)")]
    NotEnabled,

    /// No transaction coordinator could be reached: the broker refused the coordinator
    /// connection (a broker with `transactionCoordinatorEnabled=false` answers NotAllowed)
    /// or did not answer it within the operation timeout (a broker without a coordinator,
    /// such as pulsar-lite, ignores it). Not retriable: the cluster must enable transactions.
    #[error("no transaction coordinator available: {source}")]
    NoCoordinator {
        /// What the attempt to reach the coordinator ended with.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },

    /// The transaction is not in a state that allows the operation (upstream
    /// `InvalidTxnStatusException`, raised by the client): a send or acknowledgement after
    /// its commit, abort or timeout, a commit after an abort. Not retriable.
    #[error("transaction {txn} is {state}: the operation needs it OPEN")]
    InvalidState {
        /// The transaction.
        txn: TxnId,
        /// Its state when the operation was refused.
        state: TransactionState,
    },

    /// A send or acknowledgement made in the transaction failed, so the commit did not
    /// happen: the transaction was aborted instead (upstream
    /// `TransactionHasOperationFailedException`). Not retriable: run the work again in a
    /// new transaction.
    #[error("an operation of transaction {txn} failed: it was aborted instead of committed")]
    OperationFailed {
        /// The transaction.
        txn: TxnId,
    },
}

impl TransactionError {
    /// Whether retrying the same operation may succeed: none of these (see each variant).
    pub fn is_retriable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_states_print_as_upstream() {
        let id = TxnId::new(1, 42);
        assert_eq!(id.to_string(), "(1,42)");
        assert_eq!((id.most_bits(), id.least_bits()), (1, 42));
        assert_eq!(TransactionState::TimedOut.to_string(), "TIME_OUT");
        let e = TransactionError::InvalidState {
            txn: id,
            state: TransactionState::Committed,
        };
        assert!(e.to_string().contains("(1,42) is COMMITTED"));
        assert!(!e.is_retriable());
    }
}
