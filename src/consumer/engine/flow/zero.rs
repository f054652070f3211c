//! The task's side of a zero-size receiver queue (`receiver_queue_size(0)`): no prefetch,
//! one permit out while a receive waits, like Java `ZeroQueueConsumerImpl`.
//!
//! Upstream sends a FLOW of 1 when a receive finds nothing queued
//! (`fetchSingleMessageFromBroker`, `internalReceiveAsync`), and again on a new connection
//! while a receive waits (`consumerIsReconnectedToBroker`); a message from an older
//! connection is discarded and waited for again. Here the handle marks the receive waiting
//! (`QueueRoom::waiting`) and sends [`ConsumerOp::RecvWaits`](crate::consumer::op::ConsumerOp);
//! the task keeps one permit out while a receive waits with nothing queued for it:
//!
//! - on `RecvWaits` (a receive begins to wait, or waits again after discarding a stale item);
//! - after an entry that queued nothing (a chunk of an unfinished message, a message filtered
//!   out, dead-lettered or acked already): its permit is spent, the receive still waits;
//! - on a new subscription (a reconnect, a seek): whatever is queued is stale.
//!
//! A permit already out is never doubled: a receive dropped while its permit was out leaves
//! the message it brings queued for the next receive (never lost), which then sends nothing.
//!
//! Batched messages, where upstream closes the consumer: a batch is one entry, queued as
//! one item, whose messages the next receives hand out before any permit is asked. The
//! broker counts all of the batch's messages against the one permit (upstream's dispatcher
//! subtracts the messages of each entry), leaving it owed `n - 1`: the next FLOW repays
//! that, so it carries `n` and leaves exactly one permit out again.

use crate::consumer::engine::io::Io;

impl super::Flow {
    /// Keeps one permit out for a waiting receive of a zero-size queue (see the module):
    /// sends a FLOW for what the broker needs to have one permit, if a receive waits, no
    /// permit is out and nothing is queued (`fresh`: a new subscription, whose queued items
    /// are all stale).
    pub(crate) fn want_one(&mut self, io: &mut Io, fresh: bool) {
        // No connection: the new subscription asks (`fresh`). Entries waiting for a key: the
        // one they spent is what the receive waits for.
        if io.entity.conn.is_none() || self.key_wait || self.permits > 0 {
            return;
        }
        {
            let room = io.shared.room();
            if !room.waiting || (!fresh && room.queued > 0) {
                return;
            }
        }
        let n = u32::try_from(1 - self.permits).unwrap_or(u32::MAX);
        self.permits += i64::from(n);
        let id = io.entity.id;
        io.entity.send_control(crate::commands::flow(id, n));
    }
}
