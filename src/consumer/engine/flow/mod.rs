//! Flow control of one partition consumer: its permits ([`Flow`]: granted, spent, owed for
//! want of byte budget), the overshoot a broker is allowed beyond them, and each partition's
//! share of the queue to the application ([`QueueRoom`], in `room`: what the handle counts as
//! it takes messages out, and the task reads to size its FLOWs; a leaf the handles import).

use crate::consumer::engine::io::Io;
use crate::error::Error;

mod auto_scale;
pub(crate) mod room;
mod zero;

pub(crate) use auto_scale::AutoScale;

pub(crate) use room::{overshoot_bound, refill_at, QueueRoom};

/// The smallest bytes-per-permit estimate a task plans with (so that a run of empty messages
/// cannot make one grant huge).
const MIN_PERMIT_BYTES: usize = 256;

/// A partition task's flow permits: those out with the broker (`permits`), and its side of
/// its consumer's byte budget: the permits it owes the broker but withholds for want of room,
/// and what it expects one permit to bring.
///
/// The rule (see `budget` for what counts): a task keeps at most `room / tasks / estimate`
/// permits out, where `room` is what is free of the consumer's budget, `tasks` the consumer's
/// partition tasks and `estimate` the bytes one permit brought lately (the largest seen,
/// decaying towards smaller ones). The rest of what the receiver queue allows is owed and
/// granted as room frees up: the application taking messages out, or smaller messages. Before
/// any message the estimate is the broker's maximum message size, so the first FLOW of a
/// consumer whose budget cannot hold a receiver queue of maximum-size messages is smaller than
/// the receiver queue (a slow start; the rest follows the first messages). When the queue is
/// empty one permit is always out (for the task holding the consumer's oldest incomplete chunked
/// message, if any: see `ConsumerBudget::may_force`; never for a task whose entries wait for a
/// decryption key, see `key_wait`), so a message larger than the whole budget is delivered.
#[derive(Debug)]
pub(crate) struct Flow {
    share: super::budget::TaskShare,
    /// Flow permits granted to the broker minus messages it delivered.
    pub permits: i64,
    /// Permits the receiver queue allows that are not granted yet for want of room.
    pub owed: u32,
    /// Bytes one permit is expected to bring (0: nothing seen yet).
    estimate: usize,
    /// Woken when the consumer's held bytes are released while this task waits for room.
    pub freed: tokio::sync::watch::Receiver<u64>,
    /// No slow start: before any message, the whole receiver queue is granted, even while
    /// the client's other consumers hold the whole consumers' share. Set for non-persistent topics, whose broker drops what it cannot
    /// dispatch for want of permits (`NonPersistentDispatcher`): a slow start there would
    /// lose messages that upstream's consumer, which grants its whole receiver queue at
    /// once, receives.
    pub no_slow_start: bool,
    /// The bytes of the entry being taken in if it arrived beyond the flow permits, else 0:
    /// its queued item counts them (see `ConsumerBudget::beyond`).
    pub arrived_beyond: usize,
    /// Entries wait for a decryption key (`key_wait`): nothing this task receives can reach
    /// the queue before the key comes, so it is not granted a forced permit (it would only
    /// grow what waits, one message at a time, past the budget).
    pub key_wait: bool,
    /// A zero-size receiver queue: one permit out while a receive waits, none otherwise
    /// (see `zero`); nothing is granted by the receiver queue's rules.
    pub zero_queue: bool,
    /// An auto-scaled receiver queue's size and hint (see `auto_scale`); `None` otherwise.
    pub auto: Option<AutoScale>,
}

impl Flow {
    pub(crate) fn new(budget: &std::sync::Arc<super::budget::ConsumerBudget>) -> Self {
        Flow {
            share: budget.task(),
            permits: 0,
            owed: 0,
            estimate: 0,
            freed: budget.freed(),
            no_slow_start: false,
            arrived_beyond: 0,
            key_wait: false,
            zero_queue: false,
            auto: None,
        }
    }

    pub(crate) fn budget(&self) -> &std::sync::Arc<super::budget::ConsumerBudget> {
        self.share.budget()
    }

    /// Learns from an entry (or a chunk) that brought `bytes` for `permits` permits: the
    /// estimate jumps to a larger size at once and decays towards smaller ones by an eighth
    /// per entry.
    pub(crate) fn observe(&mut self, bytes: usize, permits: u32) {
        let sample = (bytes.saturating_add(super::budget::ENTRY_COST) / permits.max(1) as usize)
            .max(MIN_PERMIT_BYTES);
        let before = self.estimate;
        self.estimate = if before == 0 || sample >= before {
            sample
        } else {
            before - (before - sample) / 8
        };
    }

    /// How many permits this task may have out now, given `max_message` (the broker's limit,
    /// the estimate before any message).
    pub(crate) fn cap(&self, task: usize, max_message: usize) -> u64 {
        let budget = self.budget();
        if self.estimate == 0 && self.no_slow_start {
            // Whatever the budget's room, even none: upstream's first FLOW is the receiver
            // queue and it force-reserves what arrives; a smaller grant here loses messages.
            return u64::MAX;
        }
        let per_permit = if self.estimate == 0 {
            max_message.max(MIN_PERMIT_BYTES)
        } else {
            self.estimate
        };
        let tasks = budget.tasks();
        let cap = (budget.room() / tasks / per_permit) as u64;
        if cap == 0 && !self.key_wait && budget.may_force(task) {
            // Never a deadlock: with nothing queued, one message always comes, whatever its
            // size (upstream force-reserves memory for what it receives).
            1
        } else {
            cap
        }
    }
}

impl Flow {
    /// Sends the first FLOW of a (new) subscription: the receiver queue's free room (see
    /// [`QueueRoom`]), as far as the consumer's byte budget has room for it (the rest follows
    /// as it does: see [`Flow`]).
    pub(crate) fn start(&mut self, io: &mut Io) {
        if self.zero_queue {
            // Java `ZeroQueueConsumerImpl.consumerIsReconnectedToBroker`: a FLOW of 1 only if
            // a receive waits; what is queued is of the old subscription (see `zero`).
            self.restart();
            self.want_one(io, true);
            return;
        }
        let size = self.queue_size(io);
        let occupied = {
            let mut room = io.shared.room();
            let occupied = room.queued.min(u64::from(size)) as u32;
            room.withheld = u64::from(occupied);
            occupied
        };
        self.restart();
        self.grant(io, size - occupied);
    }

    /// A new subscription: nothing is out or owed (its first FLOW grants afresh).
    pub(crate) fn restart(&mut self) {
        self.permits = 0;
        self.owed = 0;
        if let Some(a) = &mut self.auto {
            a.restart();
        }
    }

    /// The broker delivered what spent `spent` permits, with `queued` items of this partition
    /// in the queue. Whether that breaks flow control: far beyond the permits it was given,
    /// or into a queue that older subscriptions' items (the application is not reading)
    /// already fill. Checked before anything is decoded, so the queue holds at most the
    /// receiver queue, the tolerance and one entry's messages. `bytes`: what the entry holds
    /// once decoded, as far as its metadata tells before decoding (`decode::decoded_size`).
    pub(crate) fn spend(
        &mut self,
        spent: u32,
        queued: u64,
        receiver_queue_size: u32,
        bytes: usize,
        max_message_size: usize,
    ) -> bool {
        // No permit was left for this entry: it counts in bytes too (`beyond_bound`).
        self.arrived_beyond = if self.permits <= 0 { bytes.max(1) } else { 0 };
        self.permits -= i64::from(spent);
        let bound = overshoot_bound(receiver_queue_size);
        let over_bytes = self.arrived_beyond > 0 && {
            let budget = self.budget();
            budget.beyond().saturating_add(self.arrived_beyond)
                > budget.beyond_bound(max_message_size)
        };
        self.permits < -bound
            || queued >= (i64::from(receiver_queue_size) + bound) as u64
            || over_bytes
    }

    /// The error a flow-control violation is reported with (see [`Flow::spend`]).
    pub(crate) fn violation(&self, io: &Io, queued: u64) -> Error {
        let size = io.opts.receiver_queue_size;
        let budget = self.budget();
        Error::Protocol(format!(
            "flow control violated by the broker for {}: {} messages delivered beyond the \
             permits granted and {queued} queued, above the bound of {} for a receiver queue \
             of {size} (or {} bytes sent beyond the permits held, above {}); connection \
             closed, re-subscribing (unacked messages are redelivered)",
            io.entity.topic,
            (-self.permits).max(0),
            i64::from(size) + overshoot_bound(size),
            budget.beyond().saturating_add(self.arrived_beyond),
            budget.beyond_bound(io.max_message_size()),
        ))
    }

    /// Gives back the permits of `n` messages the application will never consume.
    pub(crate) fn release(&mut self, io: &mut Io, n: u32) {
        if let Some(permits) = io.shared.consume(n, refill_at(io.opts.receiver_queue_size)) {
            self.grant(io, permits);
        }
    }

    /// After an entry (or a chunk) arrived: withholding permits for want of room, what arrived
    /// may have changed the estimate (whatever became of it: queued, filtered, refused, a
    /// chunk).
    #[inline]
    pub(crate) fn after_entry(&mut self, io: &mut Io) {
        if self.zero_queue {
            // The entry may have queued nothing while a receive waits (see `zero`).
            self.want_one(io, false);
            return;
        }
        if self.auto.is_some() {
            self.auto_after_entry(io);
        }
        if self.owed > 0 {
            self.grant_owed(io);
        } else {
            self.budget().reserve_held();
        }
    }

    /// Grants the broker `n` more permits, as far as the consumer's byte budget has room for
    /// them; the rest is owed (see [`Flow`]).
    pub(crate) fn grant(&mut self, io: &mut Io, n: u32) {
        if self.zero_queue {
            // Permits given back (messages never handed out): one is out again only if a
            // receive waits for it (see `zero`).
            self.want_one(io, false);
            return;
        }
        let n = match &mut self.auto {
            Some(a) => a.repay(n),
            None => n,
        };
        self.owed = self.owed.saturating_add(n);
        self.grant_owed(io);
    }

    /// Grants what is owed and fits. Sends one FLOW for all of it, or for at least half of
    /// what fits, so that a task near its cap does not send a FLOW per message.
    pub(crate) fn grant_owed(&mut self, io: &mut Io) {
        if io.entity.conn.is_none() {
            // The next subscription's first FLOW grants afresh (see `Flow::start`).
            self.owed = 0;
            return;
        }
        let max_message = io.max_message_size();
        // Marked seen once, before the first look: a release after it (before or after the
        // flag below is raised) leaves the receiver changed, so the task looks again. Marked
        // again before the second look, a release between the flag and that look would be
        // swallowed while the flag was already lowered by it: no later release would wake
        // the task (found by review; a consumer starved by the budget could stall for good).
        self.freed.borrow_and_update();
        for attempt in 0..2 {
            let owed = self.owed;
            if owed == 0 {
                return;
            }
            let out = self.permits.max(0) as u64;
            let cap = self.cap(io.index, max_message);
            let fits = cap.saturating_sub(out).min(u64::from(owed)) as u32;
            let worth = fits == owed || u64::from(fits) * 2 >= cap.max(1);
            if fits > 0 && worth {
                self.owed -= fits;
                self.permits += i64::from(fits);
                let id = io.entity.id;
                io.entity.send_control(crate::commands::flow(id, fits));
            }
            if self.owed == 0 || attempt == 1 {
                break;
            }
            // Withheld: ask to be woken by the next release, then look once more (a release
            // between the look above and the flag would otherwise go unnoticed).
            self.budget().wait_for_room();
        }
    }
}
