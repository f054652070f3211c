//! PIP-74's auto-scaled receiver queue (`auto_scaled_receiver_queue_size(true)`), the task's
//! side: the queue's size now, which the permits follow instead of `receiver_queue_size`.
//!
//! Upstream (`ConsumerBase` / `ConsumerImpl`):
//! - the queue starts at its minimum, 1 (`initReceiverQueueSize`, `minReceiverQueueSize`);
//! - as messages are queued, a hint records whether the consumer used its whole window
//!   (`updateAutoScaleReceiverQueueHint`: permits not yet sent back plus queued messages
//!   reach the current size, i.e. the broker has no permit left);
//! - a receive that finds the queue empty (`expectMoreIncomingMessages`) doubles the size, up
//!   to `receiver_queue_size`, if the hint is set and the client memory limit is less than
//!   `MEMORY_THRESHOLD_FOR_RECEIVER_QUEUE_SIZE_EXPANSION` (75 %) used; the new room is granted
//!   at once (`setCurrentReceiverQueueSize` → `increaseAvailablePermits(delta)`);
//! - when the memory usage passes `THRESHOLD_FOR_CONSUMER_RECEIVER_QUEUE_SIZE_SHRINKING`
//!   (95 %), every consumer halves its size, not below the minimum
//!   (`reduceCurrentReceiverQueueSize`); the permits it gave beyond the new size are taken
//!   back from the next grants (its available permits go negative).
//!
//! Here the hint is set when an entry arrives with no permit left at the broker, the handle
//! tells each partition when a receive waits on an empty queue
//! ([`ConsumerOp::RecvWaits`](crate::consumer::op::ConsumerOp)), and the shrink is checked as
//! entries arrive (upstream's is a callback of the memory controller as the usage crosses
//! the threshold). The byte budget still bounds what the queue holds, whatever its size.

use crate::consumer::engine::io::Io;

/// Upstream `ConsumerBase.MEMORY_THRESHOLD_FOR_RECEIVER_QUEUE_SIZE_EXPANSION`.
const GROW_BELOW_USAGE: f64 = 0.75;
/// Upstream `PulsarClientImpl.THRESHOLD_FOR_CONSUMER_RECEIVER_QUEUE_SIZE_SHRINKING`.
const SHRINK_ABOVE_USAGE: f64 = 0.95;
/// Upstream `ConsumerImpl.minReceiverQueueSize` without a batch bound
/// (`INITIAL_RECEIVER_QUEUE_SIZE`); see [`min_size`].
const MIN_SIZE: u32 = 1;

/// The smallest size of an auto-scaled queue (upstream `ConsumerImpl.minReceiverQueueSize`):
/// 1, or with a batch bound of `n` messages `2 * n - 2`, so that a whole batch can arrive
/// while up to half a window of taken messages waits to be granted back (permits go back in
/// halves, `room::refill_at`). Never beyond `receiver_queue_size` (upstream's may be: here
/// the auto-scaled queue never holds more than the fixed one would, and `effective` already
/// lowered `n` to it). Starting at 1 instead, a batch held its first message (held messages
/// give no permit back) and waited for its timeout, or forever without one.
pub(crate) fn min_size(options: &crate::consumer::ConsumerOptions) -> u32 {
    let rqs = options.receiver_queue_size;
    // As `BatchReceivePolicy::effective` lowers it (without its warning, given once).
    let batch = options.batch_receive_policy.max_num_messages.min(rqs);
    let size = if batch > 0 {
        MIN_SIZE.max(batch.saturating_mul(2).saturating_sub(2))
    } else {
        MIN_SIZE
    };
    size.min(rqs)
}

/// An auto-scaled queue's state (see the module).
#[derive(Debug)]
pub(crate) struct AutoScale {
    /// The queue's size now, from `min` to `receiver_queue_size`.
    pub current: u32,
    /// Its smallest size ([`min_size`]): where it starts, and the floor of a shrink.
    min: u32,
    /// The window was used up since the last growth (upstream's `scaleReceiverQueueHint`).
    hint: bool,
    /// Permits granted beyond the size after a shrink, taken back from the next grants.
    debt: u32,
}

impl AutoScale {
    pub(crate) fn new(options: &crate::consumer::ConsumerOptions) -> Self {
        let min = min_size(options);
        AutoScale {
            current: min,
            min,
            hint: false,
            debt: 0,
        }
    }

    /// A new subscription: its first FLOW grants the size now, nothing is owed back.
    pub(crate) fn restart(&mut self) {
        self.debt = 0;
    }

    /// Of `n` permits to grant, what is left once the debt of a shrink is paid.
    pub(crate) fn repay(&mut self, n: u32) -> u32 {
        let paid = self.debt.min(n);
        self.debt -= paid;
        n - paid
    }
}

/// The refill point of a queue of `size` (see `room::refill_at`).
fn refill_of(size: u32) -> u32 {
    super::room::refill_at(size)
}

impl super::Flow {
    /// The receiver queue's size now: the auto-scaled one, or `receiver_queue_size`.
    pub(crate) fn queue_size(&self, io: &Io) -> u32 {
        self.auto
            .as_ref()
            .map_or(io.opts.receiver_queue_size, |a| a.current)
    }

    /// After an entry arrived: the hint (no permit left at the broker: the window is used
    /// up), and the shrink once the client memory limit is nearly full.
    pub(crate) fn auto_after_entry(&mut self, io: &mut Io) {
        let usage = self.budget().client_usage();
        let used_up = self.permits <= 0;
        let Some(a) = &mut self.auto else {
            return;
        };
        if used_up {
            a.hint = true;
        }
        // Upstream `reduceCurrentReceiverQueueSize`: halved, not below the minimum.
        if usage > SHRINK_ABOVE_USAGE && a.current > a.min {
            let smaller = (a.current / 2).max(a.min);
            a.debt = a.debt.saturating_add(a.current - smaller);
            a.current = smaller;
            io.shared.room().scaled_refill_at = refill_of(smaller);
            tracing::debug!(topic = %io.entity.topic, size = smaller, usage,
                "auto-scaled receiver queue shrunk");
        }
    }

    /// A receive found the queue empty: the queue doubles if its window was used up and the
    /// client memory limit is less than 75 % used; the new room is granted at once.
    pub(crate) fn expect_more(&mut self, io: &mut Io) {
        let usage = self.budget().client_usage();
        let max = io.opts.receiver_queue_size;
        let Some(a) = &mut self.auto else {
            return;
        };
        if !a.hint || usage >= GROW_BELOW_USAGE {
            return;
        }
        a.hint = false;
        let larger = a.current.saturating_mul(2).min(max);
        if larger <= a.current {
            return;
        }
        let delta = larger - a.current;
        a.current = larger;
        io.shared.room().scaled_refill_at = refill_of(larger);
        tracing::debug!(topic = %io.entity.topic, size = larger, "auto-scaled receiver queue grew");
        self.grant(io, delta);
    }
}
