//! Flow control of one partition consumer: the overshoot a broker is allowed beyond its
//! permits, and each partition's share of the queue to the application (what the handle
//! counts as it takes messages out, and the task reads to size its FLOWs).

/// How far beyond its flow permits a broker may push (in messages: this many receiver queues
/// plus the slack) before the consumer treats it as a flow-control violation. Generous, so
/// brokers that overshoot by batches (a Pulsar dispatcher may send several batched entries in
/// one round against a per-entry estimate; pulsar-lite dispatches duplicates) keep flowing;
/// bounded, so none can make the client buffer without limit.
const OVERSHOOT_FACTOR: i64 = 10;
const OVERSHOOT_SLACK: i64 = 10_000;

/// The overshoot tolerated for a receiver queue of `receiver_queue_size`.
pub(crate) fn overshoot_bound(receiver_queue_size: u32) -> i64 {
    OVERSHOOT_FACTOR * i64::from(receiver_queue_size) + OVERSHOOT_SLACK
}

/// A partition's share of the queue between its task and the application. Nothing is taken
/// out of the queue when the partition re-subscribes (the handle discards stale items as it
/// reads them), so unlike upstream, which clears its receiver queue before the new
/// subscription's first FLOW, a new subscription is granted only the room that is free, and
/// the rest as the stale items are taken out. Together with the flow-control check this
/// bounds the queue by the receiver queue size, the overshoot tolerance and one batch, across
/// any number of reconnects.
#[derive(Debug, Default)]
pub(crate) struct QueueRoom {
    /// Counted items of this partition in the queue, of every epoch.
    pub queued: u64,
    /// Permits the current subscription's first FLOW left out because older items filled the
    /// queue: granted one by one as those items are taken out.
    pub withheld: u64,
    /// Messages counted as consumed for flow control since the last FLOW refill (see
    /// [`QueueRoom::consume`]).
    pub consumed: u32,
    /// Messages the application has taken from the queue (of any epoch): the ack timeout's
    /// clock of a message starts then (see `unacked`).
    pub taken: u64,
}

impl QueueRoom {
    /// Counts `n` messages as consumed for flow control; returns the permits to grant now
    /// (once half the receiver queue, `refill_at`, is due).
    pub(crate) fn consume(&mut self, n: u32, refill_at: u32) -> Option<u32> {
        self.consumed = self.consumed.saturating_add(n);
        if self.consumed >= refill_at {
            Some(std::mem::take(&mut self.consumed))
        } else {
            None
        }
    }
}

/// The smallest bytes-per-permit estimate a task plans with (so that a run of empty messages
/// cannot make one grant huge).
const MIN_PERMIT_BYTES: usize = 256;

/// A partition task's side of its consumer's byte budget: the permits it owes the broker but
/// withholds for want of room, and what it expects one permit to bring.
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
/// message, if any: see `ConsumerBudget::may_force`), so a message larger than the whole budget
/// is delivered.
#[derive(Debug)]
pub(crate) struct ByteFlow {
    share: super::budget::TaskShare,
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
}

impl ByteFlow {
    pub(crate) fn new(budget: &std::sync::Arc<super::budget::ConsumerBudget>) -> Self {
        ByteFlow {
            share: budget.task(),
            owed: 0,
            estimate: 0,
            freed: budget.freed(),
            no_slow_start: false,
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
        if cap == 0 && budget.may_force(task) {
            // Never a deadlock: with nothing queued, one message always comes, whatever its
            // size (upstream force-reserves memory for what it receives).
            1
        } else {
            cap
        }
    }
}

impl super::ConsumerTask {
    /// Grants the broker `n` more permits, as far as the consumer's byte budget has room for
    /// them; the rest is owed (see [`ByteFlow`]).
    pub(crate) fn grant(&mut self, n: u32) {
        self.bytes.owed = self.bytes.owed.saturating_add(n);
        self.grant_owed();
    }

    /// Grants what is owed and fits. Sends one FLOW for all of it, or for at least half of
    /// what fits, so that a task near its cap does not send a FLOW per message.
    pub(crate) fn grant_owed(&mut self) {
        if self.entity.conn.is_none() {
            // The next subscription's first FLOW grants afresh (see `start_flow`).
            self.bytes.owed = 0;
            return;
        }
        let max_message = self.max_message_size();
        for attempt in 0..2 {
            let owed = self.bytes.owed;
            if owed == 0 {
                return;
            }
            self.bytes.freed.borrow_and_update();
            let out = self.permits.max(0) as u64;
            let cap = self.bytes.cap(self.index, max_message);
            let fits = cap.saturating_sub(out).min(u64::from(owed)) as u32;
            let worth = fits == owed || u64::from(fits) * 2 >= cap.max(1);
            if fits > 0 && worth {
                self.bytes.owed -= fits;
                self.permits += i64::from(fits);
                self.entity
                    .send_control(crate::commands::flow(self.entity.id, fits));
            }
            if self.bytes.owed == 0 || attempt == 1 {
                break;
            }
            // Withheld: ask to be woken by the next release, then look once more (a release
            // between the look above and the flag would otherwise go unnoticed).
            self.bytes.budget().wait_for_room();
        }
    }
}
