//! The producer's side of the shared [`inbox`](crate::inbox): a partition producer's ops,
//! with the sends' receipts handed out under the queue's lock that queues them.

use std::collections::VecDeque;

use crate::inbox::{self, Fold, InboxReceiver, InboxSender, Room, TrySendError};

use super::pending::{Completion, Outgoing, Reservation};
use super::receipt::{Receipts, SendFuture};
use super::task::ProducerOp;

/// The handle's end of a partition producer's inbox.
pub(crate) type OpSender = InboxSender<ProducerOp, Receipts>;
/// The task's end of a partition producer's inbox.
pub(crate) type OpReceiver = InboxReceiver<ProducerOp, Receipts>;

/// The receipts are only changed beside the ops (a send's is handed out as it is queued):
/// nothing is folded in for the task.
impl Fold<ProducerOp> for Receipts {
    #[inline]
    fn is_empty(&self) -> bool {
        true
    }
    #[inline]
    fn drain_into(&mut self, _: &mut VecDeque<ProducerOp>) {}
}

/// A new inbox whose sends' receipts come from `receipts`.
pub(crate) fn inbox(receipts: Receipts) -> (OpSender, OpReceiver) {
    inbox::inbox(receipts)
}

/// Queues a send of `msg` in `room`; returns its receipt. The op is built under the queue's
/// lock with both halves of what completes it: the receipt's responder, and the counts of
/// what the send holds (`held`, which forgets its permits into counts, is called only once
/// the send is sure to be queued; otherwise the permits it owns go back as it is dropped).
/// From then on the counts go back through the responder's receipt group.
#[inline]
pub(crate) fn send_message(
    ops: &OpSender,
    room: Room<'_>,
    msg: Outgoing,
    held: impl FnOnce() -> Reservation,
) -> Result<SendFuture, TrySendError<()>> {
    ops.push(room, |receipts| {
        let (responder, receipt) = receipts.next();
        let completion = Completion {
            reserved: held(),
            responder: Some(responder),
        };
        (ProducerOp::Send { msg, completion }, receipt)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    /// Each queued send carries the responder of the receipt it returned.
    #[tokio::test]
    async fn sends_get_their_own_receipts_in_order() {
        let (tx, mut rx) = inbox(Receipts::default());
        let msg = || Outgoing::from(crate::ProducerMessage::new("m"));
        let mut receipts =
            vec![send_message(&tx, tx.try_room().unwrap(), msg(), Reservation::default).unwrap()];
        let room = tx.room().await.unwrap();
        receipts.push(send_message(&tx, room, msg(), Reservation::default).unwrap());
        for entry_id in 0..2u64 {
            let Some(ProducerOp::Send { completion, .. }) = rx.recv().await else {
                panic!("send {entry_id}")
            };
            completion.complete(Ok(crate::MessageId::new(1, entry_id, -1)));
        }
        for (entry_id, mut receipt) in receipts.into_iter().enumerate() {
            let id = receipt.try_result().unwrap().unwrap();
            assert_eq!(id.entry_id, entry_id as u64);
        }
    }

    /// Both buffers give back the room a full burst grew them to once sends are few again.
    /// What a send holds comes with it: its counts once queued (given back when its op is
    /// dropped or completed), its permits when the queue refuses it (given back at once).
    #[tokio::test]
    async fn what_a_send_holds_goes_back_whether_or_not_it_is_queued() {
        use crate::producer::limits::Limits;
        let limits = Arc::new(Limits {
            memory: Arc::new(Semaphore::new(100)),
            slots: Some(Arc::new(Semaphore::new(3))),
            consumers: None,
        });
        let (tx, mut rx) = inbox(Receipts::new(-1, limits.clone()));
        let available = || {
            let slots = limits.slots.as_ref().map(|s| s.available_permits());
            (limits.memory.available_permits(), slots)
        };
        let send = |room, bytes| {
            let memory = limits.memory.try_acquire_many(bytes).unwrap();
            let slot = limits.slots.as_ref().unwrap().try_acquire().unwrap();
            let held = || Reservation::of(memory, Some(slot));
            let msg = Outgoing::from(crate::ProducerMessage::new("m"));
            send_message(&tx, room, msg, held)
        };
        let mut first = send(tx.try_room().unwrap(), 30).unwrap();
        let second = send(tx.try_room().unwrap(), 20).unwrap();
        assert_eq!(available(), (50, Some(1)));
        let Some(ProducerOp::Send { completion, .. }) = rx.recv().await else {
            panic!("a send")
        };
        completion.complete(Ok(crate::MessageId::new(1, 1, -1)));
        assert_eq!(available(), (80, Some(2)));
        assert!(first.try_result().unwrap().is_ok());
        // Dropped unprocessed: its counts go back, and its receipt resolves to `Closed`.
        drop(rx.recv().await);
        assert_eq!(available(), (100, Some(3)));
        assert!(matches!(second.await, Err(crate::Error::Closed)));
        // Refused (the task ended after the sender took room): its permits go back.
        let room = tx.try_room().unwrap();
        rx.close();
        assert!(matches!(send(room, 40), Err(TrySendError::Closed)));
        assert_eq!(available(), (100, Some(3)));
    }
}
