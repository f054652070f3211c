//! The ack timeout's bookkeeping (upstream `UnAckedMessageTracker`).
//!
//! A message's clock starts when the application takes it from the queue, as upstream starts
//! tracking in `messageProcessed`, not when it reaches the queue: an application slower than
//! the ack timeout must not have messages it never saw redelivered (and then delivered twice,
//! the queued copy and the redelivered one). The task cannot see the application take a
//! message, so it numbers the messages it puts in the queue; the handle counts those it takes
//! (`QueueRoom::taken`), and the queue keeps order: every message numbered
//! below that count has been taken.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::message_id::MessageId;

/// Where a tracked message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Since {
    /// In the queue as the message numbered so: its clock starts when that number is taken.
    Queued(u64),
    /// Taken by the application (or never queued) then: its clock runs.
    Taken(Instant),
}

/// Unacked messages and when the application took each.
///
/// A message can be queued twice under one id: after a reconnect, the broker redelivers what
/// was unacked while the old subscription's copies are still in the queue (the handle drops
/// them as stale, counting them taken). Each copy is numbered, and only the taking of the
/// copy tracked last starts the clock: the stale copy's number taken first must not start the
/// clock of the redelivered copy still waiting in the queue (an application slower than the
/// ack timeout would have it redelivered while it never saw it, then get it twice).
#[derive(Debug, Default)]
pub(crate) struct Unacked {
    /// Tracked messages and where each is.
    since: HashMap<MessageId, Since>,
    /// The numbers of the messages put in the queue while tracked, in queue order (some may
    /// no longer be tracked, or tracked under a later number).
    queued: VecDeque<(u64, MessageId)>,
}

impl Unacked {
    /// Tracks a message put in the queue as number `number` (numbers count every message the
    /// partition puts in the queue, tracked or not).
    pub(crate) fn queued(&mut self, number: u64, id: MessageId) {
        self.since.insert(id, Since::Queued(number));
        self.queued.push_back((number, id));
    }

    /// Tracks a message that never reaches the queue, its clock started at `now`: one the
    /// consumer could not decrypt under `ConsumerCryptoFailureAction::Fail` (upstream
    /// `ConsumerImpl.decryptPayloadIfNeeded` adds it to the `UnAckedMessageTracker` when it
    /// fails, so the ack timeout redelivers it).
    #[cfg(feature = "encryption")]
    pub(crate) fn undelivered(&mut self, id: MessageId, now: Instant) {
        self.since.insert(id, Since::Taken(now));
    }

    /// Starts the clock of every tracked message numbered below `taken` (the application has
    /// taken them).
    pub(crate) fn taken(&mut self, taken: u64, now: Instant) {
        while let Some(&(number, id)) = self.queued.front() {
            if number >= taken {
                break;
            }
            self.queued.pop_front();
            if let Some(since) = self.since.get_mut(&id) {
                if *since == Since::Queued(number) {
                    *since = Since::Taken(now);
                }
            }
        }
    }

    /// Stops tracking `id` (acked, nacked, dead-lettered).
    #[inline]
    pub(crate) fn remove(&mut self, id: &MessageId) {
        // Nearly always empty (no ack timeout): skips hashing the id on every ack.
        if !self.since.is_empty() {
            self.since.remove(id);
            self.forget_if_empty();
        }
    }

    /// Nothing tracked: the queue numbers kept are all stale (acked, nacked or expired
    /// messages'), dropped now rather than when their numbers are taken (the task looks at
    /// them only while something is tracked).
    fn forget_if_empty(&mut self) {
        if self.since.is_empty() {
            self.queued.clear();
        }
    }

    /// Stops tracking everything up to and including `id` (a cumulative ack).
    pub(crate) fn remove_through(&mut self, id: MessageId) {
        self.since.retain(|k, _| *k > id);
        self.forget_if_empty();
    }

    /// Stops tracking everything (a redeliver-all).
    pub(crate) fn clear(&mut self) {
        self.since.clear();
        self.queued.clear();
    }

    /// Whether nothing is tracked.
    pub(crate) fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// Removes and returns the messages taken at least `timeout` ago and still unacked.
    pub(crate) fn expired(&mut self, now: Instant, timeout: Duration) -> Vec<MessageId> {
        let expired: Vec<MessageId> = self
            .since
            .iter()
            .filter(|(_, since)| {
                matches!(since, Since::Taken(t) if now.saturating_duration_since(*t) >= timeout)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            self.since.remove(id);
        }
        self.forget_if_empty();
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(e: u64) -> MessageId {
        MessageId::new(1, e, -1)
    }

    #[test]
    fn the_clock_starts_when_the_application_takes_the_message() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(10);
        let mut u = Unacked::default();
        for n in 0..3 {
            u.queued(n, id(n));
        }
        // Long after arrival, nothing taken: nothing expires.
        assert!(u.expired(t0 + Duration::from_secs(60), timeout).is_empty());
        // The application took the first two at t0 + 60 s.
        u.taken(2, t0 + Duration::from_secs(60));
        assert!(u.expired(t0 + Duration::from_secs(69), timeout).is_empty());
        let mut e = u.expired(t0 + Duration::from_secs(70), timeout);
        e.sort();
        assert_eq!(e, vec![id(0), id(1)]);
        assert!(!u.is_empty(), "the third is still tracked");
    }

    #[test]
    fn acked_messages_are_not_tracked_when_taken() {
        let t0 = Instant::now();
        let mut u = Unacked::default();
        u.queued(0, id(0));
        u.queued(1, id(1));
        u.remove(&id(0));
        u.taken(2, t0);
        assert_eq!(
            u.expired(t0 + Duration::from_secs(5), Duration::from_secs(1)),
            vec![id(1)]
        );
        assert!(u.is_empty());
    }

    #[test]
    fn cumulative_ack_and_clear_stop_tracking() {
        let t0 = Instant::now();
        let mut u = Unacked::default();
        for n in 0..4 {
            u.queued(n, id(n));
        }
        u.taken(4, t0);
        u.remove_through(id(1));
        let mut e = u.expired(t0 + Duration::from_secs(5), Duration::from_secs(1));
        e.sort();
        assert_eq!(e, vec![id(2), id(3)]);
        u.queued(4, id(4));
        u.clear();
        u.taken(5, t0);
        assert!(u.is_empty());
    }

    /// Found by review: after a reconnect the broker redelivers a queued, unacked message under
    /// the same id while the old copy is still in the queue. The old copy's number taken (the
    /// handle drops it as stale) started the new copy's clock, still in the queue.
    #[test]
    fn a_stale_copy_taken_does_not_start_the_clock_of_its_redelivered_copy() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(1);
        let mut u = Unacked::default();
        u.queued(0, id(7));
        u.queued(1, id(8));
        // Reconnected: the same two redelivered behind the stale copies.
        u.queued(2, id(7));
        u.queued(3, id(8));
        // The stale copies taken (dropped by the handle).
        u.taken(2, t0);
        assert!(
            u.expired(t0 + Duration::from_secs(60), timeout).is_empty(),
            "the redelivered copies are still in the queue"
        );
        u.taken(4, t0 + Duration::from_secs(60));
        let mut e = u.expired(t0 + Duration::from_secs(61), timeout);
        e.sort();
        assert_eq!(e, vec![id(7), id(8)]);
    }

    #[test]
    fn numbers_of_messages_no_longer_tracked_are_not_kept() {
        let mut u = Unacked::default();
        for n in 0..100 {
            u.queued(n, id(n));
            u.remove(&id(n));
        }
        assert!(u.queued.is_empty(), "{} numbers kept", u.queued.len());
    }
}
