//! How the application's acks reach a partition's task: gathered in a buffer shared with the
//! task, with one [`ConsumerOp::Acks`] wake-up per batch of them, instead of one channel
//! message each (issue #18: the channel's push, pop, receive and the op's drop cost more than
//! the rest of an ack).
//!
//! Order is kept as if every ack were its own op. Acks join the buffer and the first one of a
//! batch sends `Acks(generation)`; every other op goes through [`PartitionShared::send_op`],
//! which first sends the buffered acks as [`ConsumerOp::AckIds`] and starts a new generation.
//! A stale `Acks` (of an older generation) then finds nothing to take, so no ack made after an
//! op is applied before it. Flow permits (no order to keep with acks) are sent directly.

use std::sync::MutexGuard;

use super::task::{remove_if_any, ConsumerOp, ConsumerTask, PartitionShared};
use crate::message_id::MessageId;
use crate::util::deadline_after;

/// Acks made by the application and not yet taken by the task.
#[derive(Debug, Default)]
pub(crate) struct AckBuffer {
    ids: Vec<MessageId>,
    /// Bumped each time another op is sent behind the buffered acks.
    generation: u64,
    /// Whether an `Acks` of this generation is on its way to the task (then `ids` is not
    /// empty, or about to be filled).
    signalled: bool,
}

type Ops = tokio::sync::mpsc::UnboundedSender<ConsumerOp>;

impl AckBuffer {
    fn push(&mut self, ops: &Ops, id: MessageId) -> Result<(), ()> {
        if self.signalled {
            // The task takes it with the acks before it (unless it is gone).
            if ops.is_closed() {
                return Err(());
            }
        } else {
            ops.send(ConsumerOp::Acks(self.generation))
                .map_err(|_| ())?;
            self.signalled = true;
        }
        self.ids.push(id);
        Ok(())
    }

    fn send_op(
        &mut self,
        ops: &Ops,
        op: ConsumerOp,
    ) -> Result<(), tokio::sync::mpsc::error::SendError<ConsumerOp>> {
        if self.signalled {
            let ids = std::mem::take(&mut self.ids);
            self.generation = self.generation.wrapping_add(1);
            self.signalled = false;
            if !ids.is_empty() {
                // Fails only if the task is gone, and then so does `op` below.
                let _ = ops.send(ConsumerOp::AckIds(ids));
            }
        }
        ops.send(op)
    }

    fn take(&mut self, generation: u64, into: &mut Vec<MessageId>) {
        if self.generation == generation && self.signalled {
            std::mem::swap(&mut self.ids, into);
            self.signalled = false;
        }
    }
}

impl PartitionShared {
    fn ack_buffer(&self) -> MutexGuard<'_, AckBuffer> {
        self.acks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Acks `id` (an individual ack). `Err` once the task is gone.
    pub(crate) fn send_ack(&self, id: MessageId) -> Result<(), ()> {
        self.ack_buffer().push(&self.ops, id)
    }

    /// Sends any other op to the task, after the acks made before it. `Err` (with the op)
    /// once the task is gone.
    pub(crate) fn send_op(
        &self,
        op: ConsumerOp,
    ) -> Result<(), tokio::sync::mpsc::error::SendError<ConsumerOp>> {
        self.ack_buffer().send_op(&self.ops, op)
    }

    /// The task takes the acks an `Acks(generation)` signalled into `into` (nothing if the
    /// generation is stale: they came with an `AckIds` already). The buffers are swapped, so
    /// neither side allocates once they have grown to the usual batch.
    fn take_acks(&self, generation: u64, into: &mut Vec<MessageId>) {
        self.ack_buffer().take(generation, into);
    }
}

impl ConsumerTask {
    /// An individual ack from the application.
    pub(super) fn on_ack(&mut self, id: MessageId) {
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

    /// `ConsumerOp::Acks`: applies the acks buffered in this generation, in order.
    pub(super) fn on_buffered_acks(&mut self, generation: u64) {
        let mut ids = std::mem::take(&mut self.ack_ids);
        ids.clear();
        self.shared.take_acks(generation, &mut ids);
        for id in ids.drain(..) {
            self.on_ack(id);
        }
        // Kept for the next batch, unless a burst grew it past the usual size: the channel
        // the buffer replaced gave its memory back once drained, so a burst's room is not
        // kept for the consumer's lifetime either (it would ping-pong with the buffer's).
        self.ack_ids = recycle(ids);
    }
}

/// Acks a kept buffer has room for at most (a few batches of the default group size).
const KEPT_ACK_IDS: usize = 4096;

/// `ids` (empty) to keep, or a new one if it grew past [`KEPT_ACK_IDS`].
fn recycle(ids: Vec<MessageId>) -> Vec<MessageId> {
    debug_assert!(ids.is_empty());
    if ids.capacity() > KEPT_ACK_IDS {
        Vec::new()
    } else {
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(e: u64) -> MessageId {
        MessageId::new(1, e, -1)
    }

    #[test]
    fn a_burst_of_acks_does_not_keep_its_buffer() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut b = AckBuffer::default();
        for e in 0..100_000 {
            b.push(&tx, id(e)).unwrap();
        }
        let mut taken = Vec::new();
        b.take(0, &mut taken);
        assert_eq!(taken.len(), 100_000);
        taken.clear();
        // What the task keeps after applying them, and hands back to the buffer next time.
        assert!(recycle(taken).capacity() <= KEPT_ACK_IDS);
        let mut usual = Vec::with_capacity(1000);
        usual.push(id(1));
        usual.clear();
        assert_eq!(recycle(usual).capacity(), 1000, "the usual size is kept");
    }

    #[test]
    fn acks_keep_their_order_with_other_ops() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut b = AckBuffer::default();
        b.push(&tx, id(1)).unwrap();
        b.push(&tx, id(2)).unwrap();
        b.send_op(&tx, ConsumerOp::Redeliver(id(9))).unwrap();
        b.push(&tx, id(3)).unwrap();
        let mut taken = Vec::new();
        // The first signal is stale: its acks came with the AckIds before the op.
        let Ok(ConsumerOp::Acks(g)) = rx.try_recv() else {
            panic!("signal first")
        };
        b.take(g, &mut taken);
        assert!(taken.is_empty());
        match rx.try_recv() {
            Ok(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(1), id(2)]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rx.try_recv(), Ok(ConsumerOp::Redeliver(_))));
        let Ok(ConsumerOp::Acks(g)) = rx.try_recv() else {
            panic!("a new signal after the op")
        };
        b.take(g, &mut taken);
        assert_eq!(taken, vec![id(3)]);
        assert!(rx.try_recv().is_err());
        // One signal per batch: the next ack signals again once the batch was taken.
        b.push(&tx, id(4)).unwrap();
        b.push(&tx, id(5)).unwrap();
        let Ok(ConsumerOp::Acks(g)) = rx.try_recv() else {
            panic!("signal")
        };
        assert!(rx.try_recv().is_err());
        taken.clear();
        b.take(g, &mut taken);
        assert_eq!(taken, vec![id(4), id(5)]);
        // An op with no acks buffered is sent alone.
        b.send_op(&tx, ConsumerOp::Flow(1)).unwrap();
        assert!(matches!(rx.try_recv(), Ok(ConsumerOp::Flow(1))));
        drop(rx);
        assert!(b.push(&tx, id(6)).is_err());
        b.push(&tx, id(7)).unwrap_err();
    }
}
