//! One consumer's byte budget: what all its partition tasks (of every topic, for a multi-topic
//! or pattern consumer) hold for the application, in bytes, drawn from the client memory limit
//! within the consumers' share of it ([`ConsumerShare`]).
//!
//! What counts: every entry in the queue to the application (its decompressed payload and what
//! the queue keeps per message) until the application has taken its last message, and the
//! chunks of incomplete chunked messages. Each is held as a [`Charge`], which gives its bytes
//! back when dropped, whichever way the item leaves (taken, discarded as stale, dropped with a
//! removed topic or the consumer).
//!
//! The budget is enforced through flow permits, never by dropping or failing a message: a task
//! grants the broker only the permits whose messages fit in what is free of the budget (see
//! `flow`), so a consumer over its budget stops granting until the application takes messages
//! out. A message larger than the whole budget is still delivered (upstream's force
//! reservation): a consumer whose queue is empty always has one permit out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::consumer::entry::{Entry, Record};
use crate::core::ConsumerShare;

/// The budget's reservation of the client memory limit grows and shrinks in steps of this
/// size (or the budget, if smaller), so that the limit's semaphore is not touched per entry.
const RESERVE_STEP: usize = 256 * 1024;

/// What the queue keeps per message besides its payload (its compact record), in bytes.
pub(crate) const RECORD_COST: usize = std::mem::size_of::<Record>();

/// What the queue keeps per entry besides its records (the shared head, the channel slot).
pub(crate) const ENTRY_COST: usize = 256;

/// See [`ConsumerBudget::beyond_bound`].
const BEYOND_MAX_MESSAGES: usize = 4;

/// See [`ConsumerBudget::channel_bytes`].
const CHANNEL_BYTES: usize = 1024 * 1024;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ConsumerBudget {
    /// The budget in bytes: the consumers' share of the client memory limit.
    limit: usize,
    /// Bytes held: queued entries and incomplete chunked messages.
    used: AtomicUsize,
    /// Of `used`, the bytes of queued entries (not of chunks).
    queued: AtomicUsize,
    /// The bytes of queued entries the broker sent beyond its flow permits, each counted by
    /// what it decodes to (see [`ConsumerBudget::beyond_bound`]).
    beyond: AtomicUsize,
    /// The consumer's live partition tasks (each plans for its part of the free room).
    tasks: AtomicUsize,
    share: Arc<ConsumerShare>,
    /// Bytes this budget holds of the client memory limit (within `share`).
    reserved: Mutex<usize>,
    /// The same, read without the lock (see [`ConsumerBudget::reserve_held`]).
    reserved_now: AtomicUsize,
    /// The incomplete chunked messages of every task, oldest first (a number each, and the
    /// task holding it): with the budget full, only the task holding the oldest one is
    /// granted a permit (see [`ConsumerBudget::may_force`]).
    chunked: Mutex<std::collections::BTreeMap<u64, usize>>,
    next_chunked: std::sync::atomic::AtomicU64,
}

impl ConsumerBudget {
    pub(crate) fn new(share: Arc<ConsumerShare>) -> Arc<Self> {
        Arc::new(ConsumerBudget {
            limit: share.bytes,
            used: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            beyond: AtomicUsize::new(0),
            tasks: AtomicUsize::new(0),
            share,
            reserved: Mutex::new(0),
            reserved_now: AtomicUsize::new(0),
            chunked: Mutex::new(Default::default()),
            next_chunked: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn chunked(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, usize>> {
        self.chunked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an incomplete chunked message of task `task` until the ticket drops.
    pub(crate) fn chunked_message(self: &Arc<Self>, task: usize) -> ChunkedTicket {
        let n = self.next_chunked.fetch_add(1, Ordering::Relaxed);
        self.chunked().insert(n, task);
        ChunkedTicket {
            budget: self.clone(),
            n,
        }
    }

    /// Whether task `task` may have one permit out though the budget is full: only with
    /// nothing queued (the application has taken everything), and only the task holding the
    /// consumer's oldest incomplete chunked message, if there is one. So a message larger
    /// than the whole budget is still delivered, and chunked messages that fill the budget
    /// complete one after the other (the others' partitions wait, their chunks kept) instead
    /// of all growing at once; never a deadlock.
    pub(crate) fn may_force(&self, task: usize) -> bool {
        self.queued() == 0
            && self
                .chunked()
                .first_key_value()
                .is_none_or(|(_, owner)| *owner == task)
    }

    /// The budget in bytes.
    #[cfg(test)]
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Bytes of queued entries held now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// The bytes of queued entries that arrived beyond the flow permits, now.
    pub(crate) fn beyond(&self) -> usize {
        self.beyond.load(Ordering::SeqCst)
    }

    /// The most bytes of entries sent beyond the flow permits the consumer holds before the
    /// broker is in violation of flow control (the byte side of `overshoot_bound`): the
    /// budget plus four messages of the broker's maximum size `max_message`. A broker that
    /// honours its permits never comes near it (it overshoots by at most the entry that
    /// crosses zero); one that ignores them cannot make the consumer hold more than this
    /// beyond what its permits brought, however large its messages. Each entry counts what it
    /// decodes to, as its metadata declares before decoding (a compressed entry: its
    /// uncompressed size), so a broker ignoring the permits with highly compressible
    /// payloads (a few hundred bytes on the wire, megabytes decoded) is bounded too.
    pub(crate) fn beyond_bound(&self, max_message: usize) -> usize {
        self.limit
            .saturating_add(max_message.saturating_mul(BEYOND_MAX_MESSAGES))
    }

    /// The bytes of MESSAGE frames each partition's channel from its connection holds ahead of
    /// the partition's task before the connection stops reading its socket
    /// (`connection::consumer_channel`): 1 MiB, or a quarter of the budget if smaller. The
    /// channel holds at most this plus one frame (of at most the broker's maximum message
    /// size), whatever the broker sends and however far the task lags behind the socket.
    pub(crate) fn channel_bytes(&self) -> usize {
        CHANNEL_BYTES.min(self.limit / 4).max(1)
    }

    /// The part of the client memory limit in use (see [`ConsumerShare::usage`]).
    pub(crate) fn client_usage(&self) -> f64 {
        self.share.usage()
    }

    /// The live partition tasks sharing the budget (at least 1).
    pub(crate) fn tasks(&self) -> usize {
        self.tasks.load(Ordering::Relaxed).max(1)
    }

    /// Counts a partition task in until the returned guard drops.
    pub(crate) fn task(self: &Arc<Self>) -> TaskShare {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        TaskShare(self.clone())
    }

    /// A receiver woken whenever room frees up for consumers while a task waits for it: held
    /// bytes released by any consumer of the client, bytes given back to the memory limit by
    /// a consumer, a watcher or a producer (one mechanism: [`ConsumerShare::room_freed`]).
    pub(crate) fn freed(&self) -> watch::Receiver<u64> {
        self.share.freed()
    }

    /// Says a task withholds permits until room frees up (call before reading the room once
    /// more, so a release in between is not missed).
    pub(crate) fn wait_for_room(&self) {
        self.share.wait_for_room();
    }

    /// Charges `bytes` of a queued entry (`queued`) or of chunks.
    pub(crate) fn charge(self: &Arc<Self>, bytes: usize, queued: bool) -> Charge {
        let mut c = Charge {
            budget: self.clone(),
            bytes: 0,
            queued,
            beyond: 0,
        };
        c.grow(bytes);
        c
    }

    fn release(&self, bytes: usize, queued: bool) {
        if bytes == 0 {
            return;
        }
        if queued {
            self.queued.fetch_sub(bytes, Ordering::SeqCst);
        }
        self.used.fetch_sub(bytes, Ordering::SeqCst);
        // Well above what is held now, the reservation shrinks here (if no task is looking
        // at it), so that the room this frees is other consumers' at once: they are woken
        // below. Left to this consumer's next look at its room, it could stay reserved for
        // as long as this consumer asks for nothing (all its permits out, the application
        // pausing), while another consumer starves.
        let step = RESERVE_STEP.min(self.limit);
        if self.reserved_now.load(Ordering::Relaxed) > self.used().saturating_add(2 * step) {
            if let Ok(mut reserved) = self.reserved.try_lock() {
                self.shrink(&mut reserved, self.used().min(self.limit), step);
            }
        }
        // The room of this consumer grew, and so may another's.
        self.share.room_freed();
    }

    /// Gives back to the client memory limit what `reserved` holds beyond `want` (what is
    /// held) plus a step, if it holds more than two steps beyond it.
    fn shrink(&self, reserved: &mut usize, want: usize, step: usize) {
        if *reserved > want.saturating_add(2 * step) {
            let keep = want.saturating_add(step);
            self.share.give_back(*reserved - keep);
            *reserved = keep;
            self.reserved_now.store(keep, Ordering::Relaxed);
        }
    }

    /// The bytes free for permits to bring: what the budget could hold (its reservation of
    /// the client memory limit and what is free of the consumers' share, never waiting, at
    /// most the budget) less what it holds. The reservation follows what is held (rounded up
    /// to a step, shrunk when well above it), not what permits in flight may bring: a
    /// consumer that was granted permits and got nothing holds nothing of the limit, so an
    /// idle consumer does not keep other consumers or producers from it.
    pub(crate) fn room(&self) -> usize {
        let used = self.used();
        let want = used.min(self.limit);
        let step = RESERVE_STEP.min(self.limit);
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if want > *reserved {
            let target = (want.saturating_add(step - 1) / step * step).min(self.limit);
            *reserved += self.share.take(target - *reserved);
        } else {
            self.shrink(&mut reserved, want, step);
        }
        self.reserved_now.store(*reserved, Ordering::Relaxed);
        let could = reserved.saturating_add(self.share.free()).min(self.limit);
        could.saturating_sub(used)
    }

    /// Takes from the client memory limit what is held beyond the reservation (a task calls
    /// this after each arrival: two atomic loads unless the reservation must grow).
    pub(crate) fn reserve_held(&self) {
        if self.used() > self.reserved_now.load(Ordering::Relaxed) {
            self.room();
        }
    }
}

impl Drop for ConsumerBudget {
    fn drop(&mut self) {
        let reserved = *self.reserved.get_mut().unwrap_or_else(|e| e.into_inner());
        self.share.give_back(reserved);
    }
}

/// Counts a partition task in its consumer's budget (see [`ConsumerBudget::task`]).
#[derive(Debug)]
pub(crate) struct TaskShare(Arc<ConsumerBudget>);

impl TaskShare {
    pub(crate) fn budget(&self) -> &Arc<ConsumerBudget> {
        &self.0
    }
}

impl Drop for TaskShare {
    fn drop(&mut self) {
        self.0.tasks.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An incomplete chunked message in its consumer's budget (see
/// [`ConsumerBudget::chunked_message`]).
#[derive(Debug)]
pub(crate) struct ChunkedTicket {
    budget: Arc<ConsumerBudget>,
    n: u64,
}

impl Drop for ChunkedTicket {
    fn drop(&mut self) {
        self.budget.chunked().remove(&self.n);
    }
}

/// Bytes held in a consumer's budget, given back when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<ConsumerBudget>,
    bytes: usize,
    queued: bool,
    /// Bytes of an entry that arrived beyond the permits (see `ConsumerBudget::beyond`).
    beyond: usize,
}

impl Charge {
    /// Adds `bytes` to what this charge holds.
    pub(crate) fn grow(&mut self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        if self.queued {
            self.budget.queued.fetch_add(bytes, Ordering::SeqCst);
        }
        self.budget.used.fetch_add(bytes, Ordering::SeqCst);
        self.bytes += bytes;
    }
}

impl Charge {
    /// The budget this charge holds bytes of.
    pub(crate) fn budget(&self) -> &Arc<ConsumerBudget> {
        &self.budget
    }

    /// Counts `bytes` of this entry as sent beyond the flow permits, until it drops.
    pub(crate) fn beyond_permits(&mut self, bytes: usize) {
        self.budget.beyond.fetch_add(bytes, Ordering::SeqCst);
        self.beyond += bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.beyond > 0 {
            self.budget.beyond.fetch_sub(self.beyond, Ordering::SeqCst);
        }
        self.budget.release(self.bytes, self.queued);
    }
}

/// What a queued entry holds: `held` bytes (the decompressed buffer its records share, which
/// any of them keeps alive, and their keys and properties: `decode` counts them as it builds
/// the records, see `Extras::cost`) and what the queue keeps per message.
pub(crate) fn entry_cost(entry: &Entry, held: usize) -> usize {
    ENTRY_COST
        + entry.head.producer_name.len()
        + entry.head.schema_version.as_ref().map_or(0, |v| v.len())
        + held
        + entry.records.len() * RECORD_COST
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    fn budget(limit: usize) -> (Arc<Semaphore>, Arc<ConsumerBudget>) {
        let memory = Arc::new(Semaphore::new(limit));
        let share = Arc::new(ConsumerShare::new(memory.clone(), limit));
        (memory, ConsumerBudget::new(share))
    }

    #[test]
    fn charges_are_given_back_when_dropped() {
        let (_, b) = budget(4 << 20);
        let mut c = b.charge(100, true);
        c.grow(50);
        let d = b.charge(10, false);
        assert_eq!((b.used(), b.queued()), (160, 150));
        drop(c);
        assert_eq!((b.used(), b.queued()), (10, 0));
        drop(d);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn consumers_take_at_most_their_share_of_the_limit_and_give_it_back() {
        let limit = 4 << 20;
        let (memory, b) = budget(limit);
        assert_eq!(b.limit(), limit / 2);
        // Room for the whole share, none of it taken while nothing is held.
        assert_eq!(b.room(), limit / 2);
        assert_eq!(memory.available_permits(), limit);
        // What is held is taken from the limit, within the share.
        let c = b.charge(limit / 2, true);
        assert_eq!(b.room(), 0);
        assert_eq!(memory.available_permits(), limit / 2, "producers keep half");
        let more = b.charge(limit, true);
        assert_eq!(b.room(), 0);
        assert_eq!(
            memory.available_permits(),
            limit / 2,
            "never beyond the share"
        );
        // A second consumer of the same client has no room left.
        let other = ConsumerBudget::new(b.share.clone());
        assert_eq!(other.room(), 0);
        // Released: the reservation shrinks back, and the other consumer has room.
        drop((c, more));
        b.room();
        assert!(memory.available_permits() >= limit - 2 * RESERVE_STEP);
        assert!(other.room() >= limit / 2 - 2 * RESERVE_STEP);
        drop((b, other));
        assert_eq!(memory.available_permits(), limit);
    }

    #[test]
    fn what_arrives_is_taken_from_the_limit_as_it_arrives() {
        let limit = 4 << 20;
        let (memory, b) = budget(limit);
        let c = b.charge(1 << 20, true);
        b.reserve_held();
        assert_eq!(memory.available_permits(), limit - (1 << 20));
        drop(c);
    }

    #[test]
    fn producers_holding_the_limit_leave_the_budget_no_room() {
        let limit = 4 << 20;
        let (memory, b) = budget(limit);
        let held = memory.clone().try_acquire_many_owned(limit as u32).unwrap();
        assert_eq!(b.room(), 0, "never waits, takes what is free");
        drop(held);
        assert_eq!(b.room(), limit / 2);
    }

    /// Issue #31 (leftover): a consumer withholding permits for want of room was woken only by
    /// its own releases, so one over the budget that granted nothing stayed so while the
    /// shared pool freed up elsewhere. Every way room comes back now wakes it: another
    /// consumer's release, a watcher's queue or a consumer's reservation given back to the
    /// limit, a producer's pending messages released.
    #[test]
    fn room_freed_anywhere_wakes_a_waiting_consumer() {
        let limit = 4 << 20;
        let (_, a) = budget(limit);
        let b = ConsumerBudget::new(a.share.clone());
        let mut woken = b.freed();
        let held = a.charge(limit / 2, true);
        a.room();
        assert_eq!(b.room(), 0, "the other consumer holds the whole share");
        // Another consumer's release.
        b.wait_for_room();
        drop(held);
        assert!(woken.has_changed().unwrap(), "another consumer's release");
        woken.borrow_and_update();
        // The release gave the releasing consumer's reservation back to the limit at once
        // (not at its next look at its room, which a consumer asking for nothing may not
        // take for a long while).
        assert!(b.room() > 0, "the other consumer's reservation is back");
        assert!(!woken.has_changed().unwrap());
        // A watcher's queue giving its bytes back.
        let taken = crate::connection::QueueMemory::take(&*a.share, 1024);
        assert_eq!(taken, 1024);
        b.wait_for_room();
        crate::connection::QueueMemory::give_back(&*a.share, taken);
        assert!(woken.has_changed().unwrap(), "a watcher's queue");
        woken.borrow_and_update();
        // (A producer's release: see `producer::limits`.)
        // Nobody waiting: no wake-up.
        let c = a.charge(10, true);
        drop(c);
        assert!(!woken.has_changed().unwrap());
    }

    #[test]
    fn a_release_wakes_a_waiting_task_once() {
        let (_, b) = budget(4 << 20);
        let mut rx = b.freed();
        let c = b.charge(10, true);
        b.wait_for_room();
        drop(c);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        let c = b.charge(10, true);
        drop(c);
        assert!(!rx.has_changed().unwrap(), "no task was waiting");
    }
}
