//! Transactions (PIP-31), the state: the coordinator's transactions, each topic's transaction
//! buffer and each subscription's pending acknowledgements. A leaf (it imports no handler);
//! the rules that change it are in [`super::transactions`], with the upstream code each
//! follows.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::Instant;

/// A transaction id: (most bits = coordinator id, least bits = its sequence).
pub(crate) type TxnKey = (u64, u64);

/// Where a transaction the coordinator still keeps is (upstream `TxnStatus`; COMMITTED and
/// ABORTED ones are forgotten at once, as `MLTransactionMetadataStore.updateTxnStatus` removes
/// them from its map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnStatus {
    Open,
    /// END_TXN COMMIT recorded; the transaction buffers and pending acks not all told yet.
    Committing,
    /// END_TXN ABORT recorded, likewise.
    Aborting,
}

impl TxnStatus {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TxnStatus::Open => "OPEN",
            TxnStatus::Committing => "COMMITTING",
            TxnStatus::Aborting => "ABORTING",
        }
    }
}

/// Where the coordinator fails while it ends a transaction
/// ([`MockBroker::crash_coordinator_on_next_end`](super::MockBroker::crash_coordinator_on_next_end)):
/// the END_TXN gets no answer and the connection it came on is closed, as when the broker
/// serving the coordinator goes away and another one loads it from its transaction log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MockCoordinatorCrash {
    /// After the COMMITTING (or ABORTING) status was recorded, before the topics and
    /// subscriptions were told: the transaction stays in that status. An END_TXN of the same
    /// action (the client's resend) finishes it and succeeds; one of the other action is
    /// refused with `InvalidTxnStatus`; a broker restart finishes it (upstream
    /// `TransactionRecoverTrackerImpl.handleCommittingAndAbortingTransaction`). Its timeout
    /// no longer aborts it.
    BeforeEnding,
    /// After the transaction ended everywhere (committed or aborted, and forgotten), before
    /// the answer: a resend is answered `TransactionNotFound`.
    BeforeAnswer,
}

/// A transaction the coordinator keeps (upstream `TxnMeta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnMeta {
    /// Open, or being ended.
    pub(crate) status: TxnStatus,
    /// When the coordinator aborts it (its timeout from NEW_TXN).
    pub(crate) deadline: Instant,
    /// Partitions it produced to (ADD_PARTITION_TO_TXN).
    pub(crate) partitions: BTreeSet<String>,
    /// (topic, subscription) it acknowledged on (ADD_SUBSCRIPTION_TO_TXN).
    pub(crate) subscriptions: BTreeSet<(String, String)>,
}

/// The transaction coordinators of the cluster (one table for all of them).
#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    /// The last sequence handed out per coordinator id.
    sequences: HashMap<u64, u64>,
    /// Transactions not ended yet (open, committing, aborting).
    pub(crate) open: BTreeMap<TxnKey, TxnMeta>,
    /// Ended transactions and whether they committed (for the topics' refusal of late
    /// sends: upstream's low water mark).
    pub(crate) ended: HashMap<TxnKey, bool>,
    /// Where the next END_TXN crashes the coordinator, if a test asked.
    pub(crate) crash_on_end: Option<MockCoordinatorCrash>,
}

impl Coordinator {
    /// A new transaction id of coordinator `tc_id` (sequences from 0, as upstream's
    /// `MLTransactionSequenceIdGenerator` starts).
    pub(crate) fn next_id(&mut self, tc_id: u64) -> TxnKey {
        let seq = self.sequences.entry(tc_id).or_insert(0);
        let id = (tc_id, *seq);
        *seq += 1;
        id
    }

    /// The earliest timeout of an open transaction.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.open
            .values()
            .filter(|m| m.status == TxnStatus::Open)
            .map(|m| m.deadline)
            .min()
    }

    /// Open transactions whose timeout passed at `now` (one being ended is left to its end:
    /// upstream `endTransactionForTimeout` aborts only an OPEN one).
    pub(crate) fn expired(&self, now: Instant) -> Vec<TxnKey> {
        self.open
            .iter()
            .filter(|(_, m)| m.status == TxnStatus::Open && m.deadline <= now)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Transactions left committing (`true`) or aborting (`false`).
    pub(crate) fn being_ended(&self) -> Vec<(TxnKey, bool)> {
        self.open
            .iter()
            .filter_map(|(k, m)| match m.status {
                TxnStatus::Open => None,
                TxnStatus::Committing => Some((*k, true)),
                TxnStatus::Aborting => Some((*k, false)),
            })
            .collect()
    }
}

/// A topic's transaction buffer (upstream `TopicTransactionBuffer`).
#[derive(Debug, Default)]
pub(crate) struct TopicTxns {
    /// Open transactions with entries here, and the first entry of each.
    ongoing: BTreeMap<TxnKey, u64>,
    /// The entries of open transactions.
    entries: HashMap<u64, TxnKey>,
    /// Entries of aborted transactions: never dispatched.
    aborted: BTreeSet<u64>,
}

impl TopicTxns {
    /// Entry `e` was stored for open transaction `txn`.
    pub(crate) fn append(&mut self, txn: TxnKey, e: u64) {
        self.ongoing.entry(txn).or_insert(e);
        self.entries.insert(e, txn);
    }

    /// Entries at or after this are not dispatched (the max read position plus one).
    pub(crate) fn max_read(&self, len: u64) -> u64 {
        self.ongoing.values().copied().min().unwrap_or(len).min(len)
    }

    /// Whether entry `e` belongs to an aborted transaction.
    pub(crate) fn is_aborted(&self, e: u64) -> bool {
        self.aborted.contains(&e)
    }

    /// Transaction `txn` ended: its entries become readable (commit) or are dropped (abort).
    pub(crate) fn end(&mut self, txn: TxnKey, commit: bool) {
        self.ongoing.remove(&txn);
        let mine: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, t)| **t == txn)
            .map(|(e, _)| *e)
            .collect();
        for e in mine {
            self.entries.remove(&e);
            if !commit {
                self.aborted.insert(e);
            }
        }
    }
}

/// A subscription's acknowledgements pending in transactions (upstream
/// `PendingAckHandleImpl`).
#[derive(Debug, Default)]
pub(crate) struct PendingAcks {
    /// Entries acknowledged individually in an open transaction.
    pub(crate) individual: HashMap<u64, TxnKey>,
    /// The one cumulative acknowledgement pending, and its transaction.
    pub(crate) cumulative: Option<(TxnKey, u64)>,
}

impl PendingAcks {
    /// Takes what transaction `txn` acknowledged: (individual entries, cumulative position).
    pub(crate) fn take(&mut self, txn: TxnKey) -> (Vec<u64>, Option<u64>) {
        let mut mine: Vec<u64> = self
            .individual
            .iter()
            .filter(|(_, t)| **t == txn)
            .map(|(e, _)| *e)
            .collect();
        mine.sort_unstable();
        for e in &mine {
            self.individual.remove(e);
        }
        let cumulative = match self.cumulative {
            Some((t, e)) if t == txn => {
                self.cumulative = None;
                Some(e)
            }
            _ => None,
        };
        (mine, cumulative)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_holds_reads_behind_the_first_open_transaction() {
        let mut b = TopicTxns::default();
        assert_eq!(b.max_read(3), 3);
        b.append((0, 1), 3);
        b.append((0, 2), 5);
        b.append((0, 1), 6);
        assert_eq!(b.max_read(7), 3);
        b.end((0, 1), false);
        assert!(b.is_aborted(3) && b.is_aborted(6) && !b.is_aborted(5));
        assert_eq!(b.max_read(7), 5);
        b.end((0, 2), true);
        assert_eq!(b.max_read(7), 7);
        assert!(!b.is_aborted(5));
    }
}
