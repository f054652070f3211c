//! Transactions (PIP-31), the state: the coordinator's transactions, each topic's transaction
//! buffer and each subscription's pending acknowledgements. A leaf (it imports no handler);
//! the rules that change it are in [`super::transactions`], with the upstream code each
//! follows.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::Instant;

/// A transaction id: (most bits = coordinator id, least bits = its sequence).
pub(crate) type TxnKey = (u64, u64);

/// An open transaction, as the coordinator keeps it (upstream `TxnMeta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnMeta {
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
    /// Open transactions.
    pub(crate) open: BTreeMap<TxnKey, TxnMeta>,
    /// Ended transactions and whether they committed (for the topics' refusal of late
    /// sends: upstream's low water mark).
    pub(crate) ended: HashMap<TxnKey, bool>,
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
        self.open.values().map(|m| m.deadline).min()
    }

    /// Open transactions whose timeout passed at `now`.
    pub(crate) fn expired(&self, now: Instant) -> Vec<TxnKey> {
        self.open
            .iter()
            .filter(|(_, m)| m.deadline <= now)
            .map(|(k, _)| *k)
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
