//! The queue room a partition's task shares with the consumer's handles, and the overshoot
//! a broker is allowed: plain data and arithmetic, imported by the handles (`handle`) as well
//! as the task, so it imports nothing of either.

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

/// After how many messages taken the handle grants permits again: half the receiver queue
/// (upstream `ConsumerImpl.increaseAvailablePermits` refills at half), at least 1; 0 for a
/// zero-size receiver queue, which is never refilled: its receives ask one permit each (see
/// `flow::zero`).
pub(crate) fn refill_at(receiver_queue_size: u32) -> u32 {
    if receiver_queue_size == 0 {
        0
    } else {
        (receiver_queue_size / 2).max(1)
    }
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
    /// A zero-size receiver queue only: a receive waits for a message with nothing queued for
    /// it. Set by the handle while it waits (cleared when the receive returns or is dropped),
    /// read by the task, which keeps one permit out meanwhile (see `flow::zero`).
    pub waiting: bool,
    /// An auto-scaled receiver queue only: its refill point now (half its current size, see
    /// `flow::auto_scale`), which replaces the partition's fixed one; 0 otherwise.
    pub scaled_refill_at: u32,
}

impl QueueRoom {
    /// Counts `n` messages as consumed for flow control; returns the permits to grant now
    /// (once half the receiver queue, `refill_at`, is due; never for a zero-size queue,
    /// whose `refill_at` is 0).
    pub(crate) fn consume(&mut self, n: u32, refill_at: u32) -> Option<u32> {
        let refill_at = if self.scaled_refill_at > 0 {
            self.scaled_refill_at
        } else {
            refill_at
        };
        if refill_at == 0 {
            return None;
        }
        self.consumed = self.consumed.saturating_add(n);
        if self.consumed >= refill_at {
            Some(std::mem::take(&mut self.consumed))
        } else {
            None
        }
    }
}
