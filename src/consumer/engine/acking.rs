//! The task's side of the application's acks: each applied to the trackers, chunked
//! messages acked chunk by chunk, and the buffer of a batch of acks given back to the inbox.

use crate::consumer::engine::{remove_if_any, ConsumerTask};
use crate::consumer::op::recycle;
use crate::message_id::MessageId;
use crate::util::deadline_after;

impl ConsumerTask {
    /// An individual ack from the application.
    pub(crate) fn on_ack(&mut self, id: MessageId) {
        self.shared.stats.acked();
        self.forget(&id);
        if !self.persistent() {
            return;
        }
        if let Some(chunks) = remove_if_any(&mut self.chunk_ids, &id) {
            // A chunked message: every chunk is acked (upstream acks each chunk of a
            // `ChunkMessageIdImpl`).
            self.ack_chunks(chunks);
            return;
        }
        if self.acks.ack(id) || self.opts.ack_group_time.is_zero() {
            self.flush_acks();
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(deadline_after(self.opts.ack_group_time));
        }
    }

    /// `ConsumerOp::AckIds`: applies acks made in a row, in order, then gives their buffer
    /// back for the next ones.
    pub(crate) fn on_ack_ids(&mut self, mut ids: Vec<MessageId>) {
        for id in ids.drain(..) {
            self.on_ack(id);
        }
        // Kept for the next batch, unless a burst grew it past the usual size: the channel
        // the buffer replaced gave its memory back once drained, so a burst's room is not
        // kept for the consumer's lifetime either.
        let ids = recycle(ids);
        if ids.capacity() > 0 {
            self.ops.with_folded(|f| f.give_back(ids));
        }
    }
}
