//! Acknowledgement bookkeeping of one partition consumer: batch entries held until all their
//! messages are acked, grouping of acks into few ACK commands, and negative acks waiting for
//! their redelivery delay. Pure, unit-tested without a socket.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::{Duration, Instant};

use crate::message_id::MessageId;

/// An entry (ledger, entry) of the topic.
pub(crate) type EntryKey = (u64, u64);

fn entry_of(id: &MessageId) -> EntryKey {
    (id.ledger_id, id.entry_id)
}

/// Which messages of a batch entry are still unacked.
#[derive(Debug, Clone)]
struct BatchState {
    /// Bit i set = message i not yet acked (by a plain ack).
    unacked: Vec<u64>,
    remaining: usize,
    /// Bit i set = message i acked in a transaction (the broker accepted it; the
    /// transaction's commit acks it there). Such a message is never acked again by a plain
    /// ack: the batch's plain ack carries an `ack_set` that leaves it out. Empty (nothing
    /// allocated) until the batch's first transactional ack.
    in_txn: Vec<u64>,
}

impl BatchState {
    fn new(size: usize) -> Self {
        let mut unacked = vec![u64::MAX; size.div_ceil(64)];
        if size % 64 != 0 {
            if let Some(last) = unacked.last_mut() {
                *last = (1u64 << (size % 64)) - 1;
            }
        }
        BatchState {
            in_txn: Vec::new(),
            unacked,
            remaining: size,
        }
    }

    /// Whether every message is acked, by a plain ack or in a transaction.
    fn complete(&self) -> bool {
        if self.in_txn.is_empty() {
            return self.remaining == 0;
        }
        self.unacked
            .iter()
            .zip(&self.in_txn)
            .all(|(u, t)| u & !t == 0)
    }

    /// Whether some message is acked only in a transaction (the plain ack of the batch must
    /// then carry an `ack_set`).
    fn has_txn_only(&self) -> bool {
        self.unacked
            .iter()
            .zip(&self.in_txn)
            .any(|(u, t)| u & t != 0)
    }

    /// Marks messages `from..=to` acked in a transaction.
    #[cfg(feature = "transactions")]
    fn txn_ack(&mut self, from: usize, to: usize) {
        if self.in_txn.is_empty() {
            self.in_txn = vec![0; self.unacked.len()];
        }
        for i in from..=to {
            if let Some(w) = self.in_txn.get_mut(i / 64) {
                *w |= 1 << (i % 64);
            }
        }
    }

    /// The batch's plain `ack_set` (set bit = not acked by a plain ack).
    fn ack_set(&self) -> Vec<i64> {
        self.unacked.iter().map(|w| *w as i64).collect()
    }

    fn is_unacked(&self, i: usize) -> bool {
        self.unacked
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Marks acked every message whose bit is clear in `ack_set` (set bit = still unacked).
    fn keep_only(&mut self, ack_set: &[i64]) {
        for (i, w) in self.unacked.iter_mut().enumerate() {
            *w &= ack_set.get(i).map_or(0, |a| *a as u64);
        }
        self.remaining = self.unacked.iter().map(|w| w.count_ones() as usize).sum();
    }

    /// Marks message `i` acked; true when that completes the batch.
    fn ack(&mut self, i: usize) -> bool {
        if self.is_unacked(i) {
            self.unacked[i / 64] &= !(1 << (i % 64));
            self.remaining -= 1;
        }
        self.complete()
    }
}

/// Which messages of a delivered entry the application acked already (see
/// [`AckTracker::delivered_entry`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EntryAcks {
    /// None of them.
    None,
    /// Every one (the entry's ack waits to be sent).
    All,
    /// Those of a batch whose bit is clear (bit i set = message i not yet acked).
    Some(Vec<u64>),
}

impl EntryAcks {
    /// Whether the message at `batch_index` was acked.
    pub(crate) fn acked(&self, batch_index: i32) -> bool {
        match self {
            EntryAcks::None => false,
            EntryAcks::All => true,
            EntryAcks::Some(unacked) => {
                let i = batch_index.max(0) as usize;
                // Not unacked (also past the bitmap, as `BatchState::is_unacked` reads it).
                unacked.get(i / 64).is_none_or(|w| w & (1 << (i % 64)) == 0)
            }
        }
    }
}

/// The acks waiting to be sent, grouped.
#[derive(Debug)]
pub(crate) struct AckTracker {
    // Ordered maps, not hash maps: every delivered and every acked message looks its entry up
    // here, and few entries are tracked at a time (about a receiver queue's worth), where a
    // B-tree search over `(u64, u64)` keys costs a fraction of SipHashing the key (issue #18).
    batches: BTreeMap<EntryKey, BatchState>,
    /// Individual acks not yet sent.
    pending_individual: Vec<MessageId>,
    /// The same entries, for constant-time lookups on every delivery.
    pending_set: BTreeSet<EntryKey>,
    /// The newest cumulative ack not yet sent.
    pending_cumulative: Option<MessageId>,
    max_group: usize,
    /// Opt-in batch-index acks: partial batch acks go to the broker with an `ack_set`.
    batch_index_ack: bool,
    /// Batch entries partly acked, with their ack sets (set bit = message not yet acked).
    pending_partial: Vec<(MessageId, Vec<i64>)>,
}

/// What to put on the wire now.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AckFlush {
    pub individual: Vec<MessageId>,
    pub cumulative: Option<MessageId>,
    /// Partial batch acks (batch-index ack): the entry and its ack set.
    pub partial: Vec<(MessageId, Vec<i64>)>,
}

impl AckFlush {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.individual.is_empty() && self.cumulative.is_none() && self.partial.is_empty()
    }
}

impl AckTracker {
    pub(crate) fn new(max_group: usize) -> Self {
        AckTracker {
            batches: BTreeMap::new(),
            pending_individual: Vec::new(),
            pending_set: BTreeSet::new(),
            pending_cumulative: None,
            max_group: max_group.max(1),
            batch_index_ack: false,
            pending_partial: Vec::new(),
        }
    }

    /// Sends partial batch acks with an `ack_set` (off by default: brokers that ignore the
    /// set would ack the whole batch).
    pub(crate) fn with_batch_index_ack(mut self, enabled: bool) -> Self {
        self.batch_index_ack = enabled;
        self
    }

    /// Records that a message was delivered (so batch entries are tracked). `ack_set` is the
    /// broker's ack set of the entry (empty: none): the messages it marks acked (a clear bit)
    /// are acked already, so the batch completes once the application acks the others. Without
    /// that, a redelivered, partly acked batch would never complete and its ack never leave
    /// (upstream builds the batch's ack state from the same set).
    pub(crate) fn delivered(&mut self, id: &MessageId, ack_set: &[i64]) {
        if id.is_batch() && id.batch_size > 1 {
            match self.batches.entry(entry_of(id)) {
                // Delivered again (an aborted transaction's messages, a redelivery): what
                // the application acked in transactions reaches it again and is to be acked
                // again, so it no longer counts as acked here.
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    o.get_mut().in_txn = Vec::new();
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    let mut b = BatchState::new(id.batch_size as usize);
                    if !ack_set.is_empty() {
                        b.keep_only(ack_set);
                    }
                    v.insert(b);
                }
            }
        }
    }

    /// [`delivered`](Self::delivered) and [`ack_pending`](Self::ack_pending) for the
    /// messages of one entry at once (`id` is any of them), and which of them the application
    /// acked already (its batch state). One lookup per entry instead of
    /// three per message (a batch's messages share the entry and its state).
    pub(crate) fn delivered_entry(&mut self, id: &MessageId, ack_set: &[i64]) -> EntryAcks {
        self.delivered(id, ack_set);
        if self.ack_pending(id) {
            return EntryAcks::All;
        }
        if !id.is_batch() {
            return EntryAcks::None;
        }
        match self.batches.get(&entry_of(id)) {
            Some(b) if b.remaining < id.batch_size.max(0) as usize => {
                EntryAcks::Some(b.unacked.clone())
            }
            _ => EntryAcks::None,
        }
    }

    /// Whether the application already acked this message and the ack is still waiting to be
    /// sent (a redelivery of it must not reach the application again).
    pub(crate) fn ack_pending(&self, id: &MessageId) -> bool {
        let entry = id.entry();
        self.pending_cumulative.is_some_and(|c| {
            (entry.ledger_id as i64, entry.entry_id as i64)
                <= (c.ledger_id as i64, c.entry_id as i64)
        }) || self.pending_set.contains(&entry_of(&entry))
    }

    /// An individual ack. Returns true when the group is full and should be sent now.
    pub(crate) fn ack(&mut self, id: MessageId) -> bool {
        if id.is_batch() {
            if let Some(b) = self.batches.get_mut(&entry_of(&id)) {
                if !b.ack(id.batch_index as usize) {
                    if !self.batch_index_ack {
                        return false; // held until the whole batch is acked
                    }
                    let set = b.ack_set();
                    return self.push_partial(id, set);
                }
                if let Some(b) = self.batches.remove(&entry_of(&id)) {
                    if b.has_txn_only() {
                        return self.push_partial(id, b.ack_set());
                    }
                }
                // A complete batch supersedes its partial acks.
                self.pending_partial
                    .retain(|(e, _)| (e.ledger_id, e.entry_id) != entry_of(&id));
            }
        }
        self.pending_individual.push(id.entry());
        self.pending_set.insert(entry_of(&id));
        self.pending_individual.len() >= self.max_group
    }

    /// The acks waiting to be sent, as the group's size counts them.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending_individual.len() + self.pending_partial.len()
    }

    /// A partial ack of `id`'s batch entry: the messages acked by plain acks (clear bits of
    /// the set). True when the group is full.
    fn push_partial(&mut self, id: MessageId, set: Vec<i64>) -> bool {
        let entry = id.entry();
        match self.pending_partial.iter_mut().find(|(e, _)| *e == entry) {
            Some(p) => p.1 = set,
            None => self.pending_partial.push((
                MessageId {
                    batch_size: id.batch_size,
                    ..entry
                },
                set,
            )),
        }
        self.pending_individual.len() + self.pending_partial.len() >= self.max_group
    }

    /// The broker accepted a transactional ack of `id` (PIP-31). Upstream's
    /// `doTransactionAcknowledgeForResponse` sends it apart from the grouped acks and leaves
    /// the batch's acker alone, so a batch acked partly in a transaction and partly by plain
    /// acks never completes there; here the message counts as acked for its batch, and the
    /// batch's plain ack, once the rest is acked, carries an `ack_set` leaving out the
    /// messages acked in the transaction (the broker's `PendingAckHandleImpl` holds those
    /// until the transaction ends; a plain ack of the whole entry would ack them outside it).
    /// A batch acked wholly in transactions sends nothing. A cumulative one covers the
    /// batch's messages through `id` and forgets the batches before it (its commit acks
    /// them). True when a flush is due (a partial ack completed its group).
    #[cfg(feature = "transactions")]
    pub(crate) fn txn_acked(&mut self, id: MessageId, cumulative: bool) -> bool {
        let key = entry_of(&id);
        if cumulative {
            self.batches.retain(|&(l, e), _| {
                (l as i64, e as i64) >= (id.ledger_id as i64, id.entry_id as i64)
            });
        }
        if !id.is_batch() {
            self.batches.remove(&key);
            return false;
        }
        let Some(b) = self.batches.get_mut(&key) else {
            return false;
        };
        let index = id.batch_index.max(0) as usize;
        b.txn_ack(if cumulative { 0 } else { index }, index);
        if !b.complete() {
            return false;
        }
        let Some(b) = self.batches.remove(&key) else {
            return false;
        };
        if b.remaining == id.batch_size.max(0) as usize {
            // Nothing acked by a plain ack: nothing to send.
            return false;
        }
        if b.has_txn_only() {
            self.push_partial(id, b.ack_set())
        } else {
            self.pending_individual.push(id.entry());
            self.pending_set.insert(key);
            self.pending_individual.len() >= self.max_group
        }
    }

    /// A cumulative ack of everything up to and including `id`. Inside an unfinished batch the
    /// ack stops at the previous entry (the rest of the batch stays unacked), like upstream.
    pub(crate) fn ack_cumulative(&mut self, id: MessageId) -> bool {
        let target = if id.is_batch() && id.batch_size > 0 && id.batch_index + 1 < id.batch_size {
            if id.entry_id == 0 {
                return false;
            }
            MessageId::new(id.ledger_id, id.entry_id - 1, id.partition)
        } else {
            id.entry()
        };
        // Everything at or before the target is done: forget those batches.
        self.batches.retain(|&(l, e), _| {
            (l as i64, e as i64) > (target.ledger_id as i64, target.entry_id as i64)
        });
        if self.pending_cumulative.is_none_or(|c| c < target) {
            self.pending_cumulative = Some(target);
        }
        false
    }

    /// Forgets batch state of entries that will be redelivered whole (e.g. after reconnect the
    /// broker redelivers them and acked indexes must still be skipped, so this keeps it).
    pub(crate) fn take_flush(&mut self) -> AckFlush {
        self.pending_set.clear();
        AckFlush {
            individual: std::mem::take(&mut self.pending_individual),
            cumulative: self.pending_cumulative.take(),
            partial: std::mem::take(&mut self.pending_partial),
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending_individual.is_empty()
            || self.pending_cumulative.is_some()
            || !self.pending_partial.is_empty()
    }
}

/// Negative acks waiting for their redelivery delay.
#[derive(Debug, Default)]
pub(crate) struct NackTracker {
    due: BTreeMap<Instant, Vec<MessageId>>,
}

impl NackTracker {
    pub(crate) fn add(&mut self, id: MessageId, now: Instant, delay: Duration) {
        self.due
            .entry(crate::util::later(now, delay))
            .or_default()
            .push(id.entry());
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.due.keys().next().copied()
    }

    /// The entries whose delay has passed (deduplicated).
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<MessageId> {
        let later = self.due.split_off(&(now + Duration::from_nanos(1)));
        let due = std::mem::replace(&mut self.due, later);
        let mut ids: Vec<MessageId> = due.into_values().flatten().collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_id(entry: u64, index: i32, size: i32) -> MessageId {
        MessageId {
            ledger_id: 1,
            entry_id: entry,
            partition: -1,
            batch_index: index,
            batch_size: size,
            first_chunk: None,
        }
    }

    #[test]
    fn a_batch_entry_is_acked_only_when_all_its_messages_are() {
        let mut t = AckTracker::new(1000);
        for i in 0..3 {
            t.delivered(&batch_id(5, i, 3), &[]);
        }
        t.ack(batch_id(5, 0, 3));
        t.ack(batch_id(5, 2, 3));
        assert!(t.take_flush().is_empty(), "acking 2 of 3 acks nothing");
        // What a redelivery of the entry now would skip.
        let acks = t.delivered_entry(&batch_id(5, 0, 3), &[]);
        assert!(acks.acked(0) && acks.acked(2));
        assert!(!acks.acked(1));
        t.ack(batch_id(5, 1, 3));
        let f = t.take_flush();
        assert_eq!(f.individual, vec![MessageId::new(1, 5, -1)]);
    }

    #[test]
    #[cfg(feature = "transactions")]
    fn messages_acked_in_a_transaction_are_left_out_of_the_batchs_plain_ack() {
        let mut t = AckTracker::new(1000);
        t.delivered(&batch_id(5, 0, 3), &[]);
        assert!(!t.ack(batch_id(5, 0, 3)));
        assert!(!t.txn_acked(batch_id(5, 1, 3), false));
        assert!(t.take_flush().is_empty(), "message 2 is not acked yet");
        t.ack(batch_id(5, 2, 3));
        let f = t.take_flush();
        assert!(f.individual.is_empty(), "not the whole entry: {f:?}");
        assert_eq!(f.partial, vec![(batch_id(5, -1, 3), vec![0b010])]);
        // Wholly in transactions: nothing to send.
        t.delivered(&batch_id(6, 0, 2), &[]);
        t.txn_acked(batch_id(6, 0, 2), false);
        t.txn_acked(batch_id(6, 1, 2), false);
        assert!(t.take_flush().is_empty());
        // Completed by the transactional ack: the plain acks held go now.
        t.delivered(&batch_id(7, 0, 2), &[]);
        t.ack(batch_id(7, 0, 2));
        t.txn_acked(batch_id(7, 1, 2), false);
        assert_eq!(
            t.take_flush().partial,
            vec![(batch_id(7, -1, 2), vec![0b10])]
        );
        // Delivered again (an abort): the transactional acks no longer count.
        t.delivered(&batch_id(8, 0, 2), &[]);
        t.txn_acked(batch_id(8, 0, 2), false);
        t.delivered(&batch_id(8, 0, 2), &[]);
        t.ack(batch_id(8, 1, 2));
        assert!(t.take_flush().is_empty(), "message 0 is to be acked again");
        // A cumulative one covers the batch through its message.
        t.delivered(&batch_id(9, 0, 3), &[]);
        t.txn_acked(batch_id(9, 1, 3), true);
        t.ack(batch_id(9, 2, 3));
        assert_eq!(
            t.take_flush().partial,
            vec![(batch_id(9, -1, 3), vec![0b011])]
        );
    }

    #[test]
    fn acks_waiting_to_be_sent_are_recognised() {
        let mut t = AckTracker::new(100);
        t.ack(MessageId::new(1, 4, -1));
        assert!(t.ack_pending(&MessageId::new(1, 4, -1)));
        assert!(!t.ack_pending(&MessageId::new(1, 5, -1)));
        t.ack_cumulative(MessageId::new(1, 9, -1));
        assert!(t.ack_pending(&MessageId::new(1, 7, -1)));
        assert!(!t.ack_pending(&MessageId::new(1, 10, -1)));
        t.take_flush();
        assert!(!t.ack_pending(&MessageId::new(1, 4, -1)));
    }

    #[test]
    fn batch_index_ack_sends_partial_acks_with_the_unacked_set() {
        let mut t = AckTracker::new(1000).with_batch_index_ack(true);
        for i in 0..3 {
            t.delivered(&batch_id(5, i, 3), &[]);
        }
        t.ack(batch_id(5, 1, 3));
        let f = t.take_flush();
        assert!(f.individual.is_empty());
        assert_eq!(f.partial.len(), 1);
        assert_eq!(
            f.partial[0].1,
            vec![0b101],
            "messages 0 and 2 still unacked"
        );
        t.ack(batch_id(5, 0, 3));
        t.ack(batch_id(5, 2, 3));
        let f = t.take_flush();
        assert_eq!(
            f.individual,
            vec![MessageId::new(1, 5, -1)],
            "complete: a plain ack"
        );
        assert!(f.partial.is_empty());
    }

    #[test]
    fn acks_are_grouped_up_to_the_limit() {
        let mut t = AckTracker::new(3);
        assert!(!t.ack(MessageId::new(1, 1, -1)));
        assert!(!t.ack(MessageId::new(1, 2, -1)));
        assert!(t.ack(MessageId::new(1, 3, -1)), "third ack fills the group");
        assert_eq!(t.take_flush().individual.len(), 3);
        assert!(!t.has_pending());
    }

    #[test]
    fn cumulative_ack_inside_a_batch_stops_at_the_previous_entry() {
        let mut t = AckTracker::new(10);
        t.delivered(&batch_id(7, 0, 2), &[]);
        t.ack_cumulative(batch_id(7, 0, 2));
        assert_eq!(t.take_flush().cumulative, Some(MessageId::new(1, 6, -1)));
        t.ack_cumulative(batch_id(7, 1, 2));
        assert_eq!(t.take_flush().cumulative, Some(MessageId::new(1, 7, -1)));
        // An older cumulative ack never moves the position back.
        t.ack_cumulative(MessageId::new(1, 9, -1));
        t.ack_cumulative(MessageId::new(1, 8, -1));
        assert_eq!(t.take_flush().cumulative, Some(MessageId::new(1, 9, -1)));
    }

    #[test]
    fn batch_bitsets_handle_more_than_64_messages() {
        let mut b = BatchState::new(130);
        for i in 0..129 {
            assert!(!b.ack(i));
        }
        assert!(b.ack(129));
        assert!(!b.is_unacked(64));
    }

    #[test]
    fn nacks_come_due_after_their_delay() {
        let start = Instant::now();
        let mut n = NackTracker::default();
        n.add(MessageId::new(1, 1, -1), start, Duration::from_secs(1));
        n.add(batch_id(2, 0, 2), start, Duration::from_secs(1));
        n.add(batch_id(2, 1, 2), start, Duration::from_secs(1));
        n.add(MessageId::new(1, 3, -1), start, Duration::from_secs(5));
        assert!(n.take_due(start).is_empty());
        let due = n.take_due(start + Duration::from_secs(1));
        assert_eq!(
            due,
            vec![MessageId::new(1, 1, -1), MessageId::new(1, 2, -1)]
        );
        assert_eq!(n.next_deadline(), Some(start + Duration::from_secs(5)));
    }

    #[test]
    fn a_partly_acked_redelivered_batch_completes_with_the_rest() {
        let mut t = AckTracker::new(100);
        // Batch of 3 redelivered with messages 0 and 2 already acked: only 1 is delivered.
        t.delivered(&batch_id(9, 1, 3), &[0b010]);
        assert_eq!(
            t.delivered_entry(&batch_id(9, 1, 3), &[0b010]),
            EntryAcks::Some(vec![0b010]),
            "0 and 2 count as acked, 1 does not"
        );
        t.ack(batch_id(9, 1, 3));
        assert!(t.has_pending(), "the batch is complete: its ack goes out");
        assert!(t.batches.is_empty(), "and its state is freed");
    }
}
