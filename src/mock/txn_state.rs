//! Transactions (PIP-31), the state: the coordinator's transactions, each topic's transaction
//! buffer and each subscription's pending acknowledgements. A leaf (it imports no handler);
//! the rules that change it are in [`super::transactions`], with the upstream code each
//! follows.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::Instant;

use super::subscription::full_bitset;

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
    /// Where the next END_TXN crashes the coordinator, if a test asked.
    pub(crate) crash_on_end: Option<MockCoordinatorCrash>,
    /// GET_LAST_MESSAGE_ID names the last entry stored even if an aborted transaction's, as
    /// brokers before apache/pulsar#22610 (see `MockBroker::set_last_message_id_names_aborted`).
    pub(crate) last_id_names_aborted: bool,
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

    /// Coordinator `tc_id`'s low water mark (upstream `MLTransactionMetadataStore
    /// .getLowWaterMark`, which END_TXN_ON_PARTITION / _SUBSCRIPTION carry): the highest
    /// sequence at or below which every transaction it issued has ended. `None` while none
    /// has. Read from the transactions still kept, so an ended one costs nothing.
    pub(crate) fn low_water_mark(&self, tc_id: u64) -> Option<u64> {
        let first_kept = self.open.range((tc_id, 0)..=(tc_id, u64::MAX)).next();
        let first_not_ended = match first_kept {
            Some(((_, seq), _)) => *seq,
            None => self.sequences.get(&tc_id).copied().unwrap_or(0),
        };
        first_not_ended.checked_sub(1)
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
    /// Entries of aborted transactions: never dispatched. One mark per aborted entry, kept
    /// as long as the entry is (the mock never trims a topic's entries).
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

    /// Transactions of coordinator `tc_id` with entries here that are at or below its low
    /// water mark `lwm`: ended (or never issued to this topic's knowledge) without this
    /// partition being told, e.g. sent to without ADD_PARTITION_TO_TXN.
    pub(crate) fn below(&self, tc_id: u64, lwm: u64) -> Vec<TxnKey> {
        self.ongoing
            .range((tc_id, 0)..=(tc_id, lwm))
            .map(|(k, _)| *k)
            .collect()
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

/// What one transaction acknowledged of an entry: all of it (`None`), or the messages of a
/// batch whose bit is clear in the `ack_set` (`Some`; a set bit is a message left alone).
pub(crate) type AckedPart = Option<Vec<i64>>;

/// A subscription's acknowledgements pending in transactions (upstream
/// `PendingAckHandleImpl`: `individualAckOfTransaction` per transaction, merged per position in
/// `individualAckPositions`, and `cumulativeAckOfTransaction`).
#[derive(Debug, Default)]
pub(crate) struct PendingAcks {
    /// Entries acknowledged individually in open transactions: per entry, each transaction
    /// and what it acknowledged (a transaction acknowledging more of a batch ANDs the sets,
    /// upstream `handleIndividualAck` → `andAckSet`).
    pub(crate) individual: HashMap<u64, Vec<(TxnKey, AckedPart)>>,
    /// The one cumulative acknowledgement pending: its transaction, entry and `ack_set`
    /// (empty: the whole entry).
    pub(crate) cumulative: Option<(TxnKey, u64, Vec<i64>)>,
}

/// The messages `part` acknowledges of an entry of `n` (set bit = acknowledged).
fn acked_bits(part: &AckedPart, n: u32) -> Vec<i64> {
    let mut bits = full_bitset(n);
    if let Some(set) = part {
        for (i, w) in bits.iter_mut().enumerate() {
            *w &= !set.get(i).copied().unwrap_or(0);
        }
    }
    bits
}

fn overlap(a: &[i64], b: &[i64]) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

impl PendingAcks {
    /// The messages of entry `e` (of `n`) pending in any transaction (set bit = pending).
    fn pending_bits(&self, e: u64, n: u32) -> Vec<i64> {
        let mut bits = vec![0; full_bitset(n).len()];
        for (_, part) in self.individual.get(&e).into_iter().flatten() {
            for (w, a) in bits.iter_mut().zip(acked_bits(part, n)) {
                *w |= a;
            }
        }
        bits
    }

    /// Transaction `txn` acknowledges `part` of entry `e` (of `n` messages; `remaining`: the
    /// cursor's still-unacknowledged messages of it, if it is partly acknowledged), as
    /// upstream `PendingAckHandleImpl.internalIndividualAcknowledgeMessage`: with an ack set,
    /// a message already acknowledged on the cursor (`getBatchPositionAckSet` overlap) or
    /// pending in any transaction (`individualAckPositions` overlap) is a conflict; without,
    /// an entry pending in any transaction at all is. Different messages of one batch may be
    /// pending in different transactions. `Err`: the conflict's message.
    pub(crate) fn add(
        &mut self,
        txn: TxnKey,
        e: u64,
        part: AckedPart,
        n: u32,
        remaining: Option<&[i64]>,
    ) -> Result<(), String> {
        let held = self.individual.get(&e).is_some_and(|h| !h.is_empty());
        match &part {
            None if held => return Err(format!("message {e} is in pending ack status")),
            None => {}
            Some(_) => {
                let mine = acked_bits(&part, n);
                if let Some(rem) = remaining {
                    let on_cursor = acked_bits(&Some(rem.to_vec()), n);
                    if overlap(&mine, &on_cursor) {
                        return Err(format!("batch message of {e} already acked before"));
                    }
                }
                if held && overlap(&mine, &self.pending_bits(e, n)) {
                    return Err(format!("batch message of {e} is in pending ack status"));
                }
            }
        }
        let holders = self.individual.entry(e).or_default();
        match holders.iter_mut().find(|(t, _)| *t == txn) {
            Some((_, mine)) => {
                *mine = match (mine.take(), part) {
                    (Some(a), Some(b)) => Some(a.iter().zip(&b).map(|(x, y)| x & y).collect()),
                    _ => None,
                }
            }
            None => holders.push((txn, part)),
        }
        Ok(())
    }

    /// Whether every message of entry `e` (of `n`; `remaining` as for [`add`](Self::add)) is
    /// acknowledged on the cursor or pending in a transaction: the consumer then no longer
    /// holds it (upstream `Consumer.checkCanRemovePendingAcksAndHandle` with
    /// `PendingAckHandleImpl.checkIsCanDeleteConsumerPendingAck`).
    pub(crate) fn covers(&self, e: u64, n: u32, remaining: Option<&[i64]>) -> bool {
        let pending = self.pending_bits(e, n);
        let on_cursor = remaining.map_or_else(
            || vec![0; pending.len()],
            |r| acked_bits(&Some(r.to_vec()), n),
        );
        let full = full_bitset(n);
        full.iter()
            .zip(pending.iter().zip(&on_cursor))
            .all(|(f, (p, c))| f & !(p | c) == 0)
    }

    /// Transactions of coordinator `tc_id` at or below its low water mark `lwm` holding
    /// individual acknowledgements here (as [`TopicTxns::below`]; upstream
    /// `PendingAckHandleImpl.handleLowWaterMark` looks at `individualAckOfTransaction` only,
    /// not at a pending cumulative acknowledgement).
    pub(crate) fn below(&self, tc_id: u64, lwm: u64) -> BTreeSet<TxnKey> {
        self.individual
            .values()
            .flatten()
            .map(|(t, _)| *t)
            .filter(|t| t.0 == tc_id && t.1 <= lwm)
            .collect()
    }

    /// Takes what transaction `txn` acknowledged: (individual entries with their parts, the
    /// cumulative position with its `ack_set`).
    #[allow(clippy::type_complexity)]
    pub(crate) fn take(&mut self, txn: TxnKey) -> (Vec<(u64, AckedPart)>, Option<(u64, Vec<i64>)>) {
        let mut mine = Vec::new();
        self.individual.retain(|e, holders| {
            if let Some(at) = holders.iter().position(|(t, _)| *t == txn) {
                mine.push((*e, holders.swap_remove(at).1));
            }
            !holders.is_empty()
        });
        mine.sort_unstable_by_key(|(e, _)| *e);
        let cumulative = match self.cumulative.take() {
            Some((t, e, set)) if t == txn => Some((e, set)),
            other => {
                self.cumulative = other;
                None
            }
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

    #[test]
    fn batch_messages_pending_in_transactions_conflict_only_on_the_same_message() {
        let mut p = PendingAcks::default();
        let (t1, t2) = ((0, 1), (0, 2));
        // Entry 4 is a batch of 3: t1 acks message 0, t2 message 1.
        assert!(p.add(t1, 4, Some(vec![0b110]), 3, None).is_ok());
        assert!(p.add(t2, 4, Some(vec![0b101]), 3, None).is_ok());
        assert!(
            p.add(t2, 4, Some(vec![0b110]), 3, None).is_err(),
            "0 is t1's"
        );
        assert!(
            p.add(t2, 4, None, 3, None).is_err(),
            "the whole entry overlaps"
        );
        // Message 2 acknowledged on the cursor already.
        assert!(p.add(t2, 4, Some(vec![0b011]), 3, Some(&[0b011])).is_err());
        assert!(!p.covers(4, 3, None));
        assert!(p.covers(4, 3, Some(&[0b011])));
        assert_eq!(p.take(t1), (vec![(4, Some(vec![0b110]))], None));
        assert!(
            p.add(t2, 4, Some(vec![0b110]), 3, None).is_ok(),
            "free again"
        );
        assert_eq!(p.take(t2), (vec![(4, Some(vec![0b100]))], None));
        assert!(p.individual.is_empty());
    }
}
