//! The acks of one partition consumer as one state the task owns ([`Acks`]): the trackers
//! (batch entries, acks waiting to be sent, negative acks waiting for their delay), the ack
//! timeout's bookkeeping, and the grouping timer; plus the pure steps of a cumulative ack and
//! of a redelivery. The task applies the application's ops to it and sends what it returns.

mod tracker;
mod unacked;

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::commands;
use crate::consumer::engine::io::Io;
use crate::consumer::options::ConsumerOptions;
use crate::message_id::MessageId;
use crate::util::deadline_after;

pub(crate) use tracker::{AckFlush, AckTracker, EntryAcks, NackTracker};
pub(crate) use unacked::Unacked;

/// The most message ids one REDELIVER_UNACKNOWLEDGED_MESSAGES carries (Java
/// `ConsumerImpl.MAX_REDELIVER_UNACKNOWLEDGED`).
pub(crate) const MAX_REDELIVER_IDS: usize = 1000;

/// How long acks kept while detached wait before the task looks again (at least).
const DETACHED_RETRY: Duration = Duration::from_millis(100);

/// A partition consumer's ack state (see the module).
#[derive(Debug)]
pub(crate) struct Acks {
    /// Batch entries and the acks waiting to be sent.
    pub tracker: AckTracker,
    /// Negative acks waiting for their redelivery delay.
    pub nacks: NackTracker,
    /// Unacked messages, for the ack timeout.
    pub unacked: Unacked,
    /// When the acks waiting go out (the group's timer, or the next look while they are kept).
    pub deadline: Option<Instant>,
    /// Acks applied by the intake (chunk entries) are to be sent now: the task flushes them
    /// once the step that applied them is done (see [`Acks::take_flush_due`]).
    flush_due: bool,
    group_time: Duration,
    group_max: usize,
    batch_index_ack: bool,
}

impl Acks {
    pub(crate) fn new(opts: &ConsumerOptions) -> Self {
        Acks {
            tracker: AckTracker::new(opts.ack_group_max).with_batch_index_ack(opts.batch_index_ack),
            nacks: NackTracker::default(),
            unacked: Unacked::default(),
            deadline: None,
            flush_due: false,
            group_time: opts.ack_group_time,
            group_max: opts.ack_group_max,
            batch_index_ack: opts.batch_index_ack,
        }
    }

    /// See [`AckTracker::delivered_entry`].
    #[inline]
    pub(crate) fn delivered_entry(&mut self, id: &MessageId, ack_set: &[i64]) -> EntryAcks {
        self.tracker.delivered_entry(id, ack_set)
    }

    /// An individual ack; true when the group is full (see [`AckTracker::ack`]).
    #[inline]
    pub(crate) fn ack(&mut self, id: MessageId) -> bool {
        self.tracker.ack(id)
    }

    /// Acks were applied (`full`: a group filled up): whether to send them now (a full group,
    /// or no grouping); otherwise the group's timer is started if it is not running.
    #[inline]
    pub(crate) fn after_ack(&mut self, full: bool) -> bool {
        if full || self.group_time.is_zero() {
            return true;
        }
        if self.deadline.is_none() {
            self.deadline = Some(deadline_after(self.group_time));
        }
        false
    }

    /// A negative ack of a message delivered `redelivery_count` times before: redelivered
    /// after the negative-ack backoff's delay for that count, or the fixed delay.
    pub(crate) fn nack(&mut self, opts: &ConsumerOptions, id: MessageId, redelivery_count: u32) {
        let delay = match &opts.negative_ack_backoff {
            Some(b) => b.delay(redelivery_count),
            None => opts.negative_ack_delay,
        };
        self.nacks.add(id, Instant::now(), delay);
    }

    /// Acks entries one by one (a chunked message's chunks); a flush is due when the group
    /// filled up or acks are not grouped.
    pub(crate) fn ack_entries(&mut self, ids: Vec<MessageId>) {
        let mut full = false;
        for id in ids {
            full |= self.ack(id.entry());
        }
        if self.after_ack(full) {
            self.flush_due = true;
        }
    }

    /// Whether acks applied since the last look are to be sent now (see
    /// [`Acks::ack_entries`]).
    #[inline]
    pub(crate) fn take_flush_due(&mut self) -> bool {
        std::mem::take(&mut self.flush_due)
    }

    /// How many more individual acks fill the group waiting to be sent (at least 1).
    pub(crate) fn group_room(&self) -> usize {
        self.group_max
            .saturating_sub(self.tracker.pending_len())
            .max(1)
    }

    /// Whether acks wait to be sent.
    pub(crate) fn has_pending(&self) -> bool {
        self.tracker.has_pending()
    }

    /// What to send now, or `None` while `keep_until` is set (the acks are kept: no
    /// connection, or a seek's disconnect awaited): then the timer looks again at that time.
    pub(crate) fn flush(&mut self, keep_until: Option<Instant>) -> Option<AckFlush> {
        self.deadline = None;
        if let Some(until) = keep_until {
            if self.has_pending() {
                self.deadline = Some(until);
            }
            return None;
        }
        Some(self.tracker.take_flush())
    }

    /// Sends the acks waiting, unless they are kept: until `keep` (a seek's disconnect
    /// awaited), or without a connection (the broker redelivers unacked messages; the acks
    /// still apply after re-subscribing).
    pub(crate) fn send(&mut self, io: &mut Io, keep: Option<Instant>) {
        let keep = keep.or_else(|| io.entity.conn.is_none().then(|| self.detached_retry()));
        let Some(AckFlush {
            individual,
            cumulative,
            partial,
        }) = self.flush(keep)
        else {
            return;
        };
        let id = io.entity.id;
        let sent = individual.len() + partial.len() + usize::from(cumulative.is_some());
        io.shared.stats.acks_sent(sent);
        if !individual.is_empty() || !partial.is_empty() {
            io.entity
                .send_control(commands::ack_individual(id, &individual, partial));
        }
        if let Some(c) = cumulative {
            io.entity.send_control(commands::ack_cumulative(id, c));
        }
    }

    /// When acks kept while detached are looked at again.
    pub(crate) fn detached_retry(&self) -> Instant {
        deadline_after(self.group_time.max(DETACHED_RETRY))
    }

    /// Upstream `flushAndClean` after a seek (the acks were flushed when it was sent) and its
    /// cleared unacked / negative-ack trackers: the rewound messages are delivered again even
    /// if they were acked, negatively acked or counted for the ack timeout before.
    pub(crate) fn reset(&mut self) {
        self.tracker = AckTracker::new(self.group_max).with_batch_index_ack(self.batch_index_ack);
        self.deadline = None;
        self.nacks = NackTracker::default();
        self.unacked.clear();
    }
}

/// `map.remove(key)`, without hashing the key when the map is empty: on the ack path the maps
/// of optional features (DLQ candidates, chunked messages) are nearly always empty, and
/// hashing a `MessageId` (SipHash) cost more than the rest of an ack (issue #18's profile).
#[inline]
pub(crate) fn remove_if_any<V>(map: &mut HashMap<MessageId, V>, key: &MessageId) -> Option<V> {
    if map.is_empty() {
        None
    } else {
        map.remove(key)
    }
}

/// What a cumulative ack through `id` acks on the broker: the cumulative position (`None`:
/// none) and the entries acked one by one. `first_chunk`: the first chunk of the earliest
/// incomplete chunked message; `covered`: the delivered chunked messages at or before `id`,
/// with their chunk entries.
///
/// An incomplete chunked message whose first chunk is before `id` (chunks of several
/// producers interleave) must not be covered: a cumulative ack through `id` would ack that
/// first chunk, and after a reconnect the rest of the message would come without it (lost).
/// Like an unfinished batch, the cumulative ack then stops before it; the chunked messages
/// delivered after it (and `id`) are acked entry by entry. Other messages in between stay
/// unacked until a later cumulative ack (redelivered after a reconnect: at least once).
/// Beyond upstream, whose cumulative ack loses the incomplete message.
pub(crate) fn cumulative_plan(
    id: MessageId,
    first_chunk: Option<MessageId>,
    covered: Vec<(MessageId, Vec<MessageId>)>,
) -> (Option<MessageId>, Vec<MessageId>) {
    match first_chunk.filter(|f| *f < id.entry()) {
        Some(first) => {
            let through = (first.entry_id > 0)
                .then(|| MessageId::new(first.ledger_id, first.entry_id - 1, first.partition));
            let mut entries: Vec<MessageId> = covered
                .into_iter()
                .filter(|(k, _)| *k > first)
                .flat_map(|(_, chunks)| chunks)
                .collect();
            if !id.is_chunked() && !id.is_batch() {
                entries.push(id.entry());
            }
            (through, entries)
        }
        None => (Some(id), Vec::new()),
    }
}

/// Takes out the chunked messages at or before `id` (a cumulative ack covers their chunks).
pub(crate) fn take_chunks_through(
    chunk_ids: &mut HashMap<MessageId, Vec<MessageId>>,
    id: MessageId,
) -> Vec<(MessageId, Vec<MessageId>)> {
    if chunk_ids.is_empty() {
        return Vec::new();
    }
    let done: Vec<MessageId> = chunk_ids.keys().filter(|k| **k <= id).copied().collect();
    done.into_iter()
        .filter_map(|k| chunk_ids.remove_entry(&k))
        .collect()
}

/// The entries to ask the broker for again, for these message ids: a chunked message with
/// all its chunks, each entry once, in order.
pub(crate) fn redelivery_entries(
    mut ids: Vec<MessageId>,
    chunk_ids: &HashMap<MessageId, Vec<MessageId>>,
) -> Vec<MessageId> {
    if !chunk_ids.is_empty() {
        let chunks: Vec<MessageId> = ids
            .iter()
            .filter_map(|id| chunk_ids.get(id))
            .flatten()
            .copied()
            .collect();
        ids.extend(chunks);
    }
    for id in &mut ids {
        *id = id.entry();
    }
    ids.sort();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(e: u64) -> MessageId {
        MessageId::new(1, e, -1)
    }

    #[test]
    fn a_cumulative_ack_stops_before_an_incomplete_chunked_message() {
        assert_eq!(
            cumulative_plan(id(9), None, Vec::new()),
            (Some(id(9)), vec![])
        );
        // The incomplete message's first chunk is at 4: the cumulative ack stops at 3, and
        // the chunked message delivered after it (chunks 6, 7) and 9 are acked one by one.
        let covered = vec![(id(2), vec![id(1), id(2)]), (id(7), vec![id(6), id(7)])];
        assert_eq!(
            cumulative_plan(id(9), Some(id(4)), covered),
            (Some(id(3)), vec![id(6), id(7), id(9)])
        );
        // A first chunk after the ack changes nothing.
        assert_eq!(
            cumulative_plan(id(3), Some(id(4)), Vec::new()),
            (Some(id(3)), vec![])
        );
        assert_eq!(cumulative_plan(id(3), Some(id(0)), Vec::new()).0, None);
    }

    #[test]
    fn a_redelivery_asks_for_every_chunk_once() {
        let mut chunks = HashMap::new();
        chunks.insert(id(5), vec![id(3), id(5)]);
        assert_eq!(
            redelivery_entries(vec![id(5), id(1), id(3)], &chunks),
            vec![id(1), id(3), id(5)]
        );
        let mut taken = chunks.clone();
        assert_eq!(take_chunks_through(&mut taken, id(4)), vec![]);
        assert_eq!(take_chunks_through(&mut taken, id(5)).len(), 1);
        assert!(taken.is_empty());
    }

    #[test]
    fn grouped_acks_wait_for_the_timer_and_kept_ones_for_the_next_look() {
        let opts = ConsumerOptions {
            ack_group_time: Duration::from_millis(100),
            ..ConsumerOptions::default()
        };
        let mut a = Acks::new(&opts);
        let full = a.ack(id(1));
        assert!(!a.after_ack(full), "grouped");
        assert!(a.deadline.is_some());
        let later = Instant::now() + Duration::from_secs(1);
        assert!(a.flush(Some(later)).is_none(), "kept");
        assert_eq!(a.deadline, Some(later));
        assert_eq!(a.flush(None).unwrap().individual, vec![id(1)]);
        assert!(a.deadline.is_none() && !a.has_pending());
        a.ack(id(2));
        a.reset();
        assert!(!a.has_pending(), "a seek's reset forgets what was not sent");
    }
}
