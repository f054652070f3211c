//! The ops a consumer's handles send a partition's task, and the inbox they go through (the
//! same small queue the producer uses: see [`crate::inbox`]).
//!
//!
//! Acks, negative acks, redeliveries and flow permits never take room in the inbox: they are
//! folded into [`Folded`] under its lock (issue #18: one channel message per ack cost more
//! than the rest of an ack), so a full inbox neither blocks an ack nor drops one, and the
//! whole bound is kept for the control ops (seek, last message id, unsubscribe, close),
//! which wait for room. Order is kept as if every op were queued on its own: the inbox hands
//! the task what was folded in after the ops queued before it, and queues a control op only
//! behind what was folded in before it; consecutive individual acks share one
//! [`ConsumerOp::AckIds`] (the set of ids they end up in anyway). Flow permits, which keep
//! no order with acks, are summed.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::inbox::{Fold, InboxReceiver, InboxSender};
use crate::message_id::MessageId;
use tokio::sync::oneshot;

/// The handle's end of a partition task's inbox.
pub(crate) type OpSender = InboxSender<ConsumerOp, Folded>;
/// The task's end of a partition task's inbox.
pub(crate) type OpReceiver = InboxReceiver<ConsumerOp, Folded>;

/// A new inbox for a partition's task.
pub(crate) fn inbox() -> (OpSender, OpReceiver) {
    crate::inbox::inbox(Folded::default())
}

/// What the application made that takes no room in the inbox, not yet taken by the task.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    /// Acks, negative acks and redeliveries in the order made, up to the last that is not an
    /// individual ack (individual acks in a row gathered in one [`ConsumerOp::AckIds`]).
    ops: Vec<ConsumerOp>,
    /// The individual acks made after those `ops`, in order: the ack path's own buffer, so
    /// that an ack is a push (no `ConsumerOp` built, moved, matched nor dropped per ack: the
    /// hot path's profile).
    acks: Vec<MessageId>,
    /// Flow permits to grant.
    flow: u32,
    /// A receive waits on an empty queue (see [`ConsumerOp::RecvWaits`]).
    want: bool,
    /// An empty buffer the task gave back, for the next acks.
    spare: Vec<MessageId>,
    /// Something other than an individual or cumulative ack is folded in (see
    /// [`Folded::must_wake`]).
    urgent: bool,
}

impl Folded {
    /// Folds in an ack-like op (see [`ConsumerOp::folds`]).
    pub(crate) fn push(&mut self, op: ConsumerOp) {
        if let ConsumerOp::Ack(id) = op {
            return self.push_ack(id);
        }
        self.urgent |= !matches!(op, ConsumerOp::AckCumulative(_));
        // The individual acks made before this op are taken before it.
        self.end_acks();
        match op {
            ConsumerOp::Flow(n) => self.flow = self.flow.saturating_add(n),
            // One asks as much as several: the task keeps one permit out while one waits.
            ConsumerOp::RecvWaits => self.want = true,
            // Cumulative acks in a row keep only the furthest (Java
            // `PersistentAcknowledgmentsGroupingTracker.doCumulativeAck` keeps the greater id),
            // so a stream of them folds into one entry.
            ConsumerOp::AckCumulative(id) => match self.ops.last_mut() {
                Some(ConsumerOp::AckCumulative(last)) => *last = (*last).max(id),
                _ => self.ops.push(ConsumerOp::AckCumulative(id)),
            },
            op => self.ops.push(op),
        }
    }

    /// Folds in an individual ack.
    #[inline(always)]
    pub(crate) fn push_ack(&mut self, id: MessageId) {
        // The same id again (an application acking in a loop while the task is busy) adds
        // nothing: the folded acks grow with distinct ids only in that case.
        if self.acks.last() != Some(&id) {
            self.acks.push(id);
        }
    }

    /// The individual acks made so far become one op, behind the ops made before them.
    fn end_acks(&mut self) {
        if !self.acks.is_empty() {
            let ids = std::mem::replace(&mut self.acks, std::mem::take(&mut self.spare));
            self.ops.push(ConsumerOp::AckIds(ids));
        }
    }

    /// Keeps `ids` (emptied by the task) for the next acks, unless a buffer is kept already.
    pub(crate) fn give_back(&mut self, ids: Vec<MessageId>) {
        if self.acks.capacity() == 0 {
            self.acks = ids;
        } else if self.spare.capacity() == 0 {
            self.spare = ids;
        }
    }
}

impl Fold<ConsumerOp> for Folded {
    #[inline]
    fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.acks.is_empty() && self.flow == 0 && !self.want
    }

    fn drain_into(&mut self, ops: &mut VecDeque<ConsumerOp>) {
        self.urgent = false;
        self.end_acks();
        ops.extend(self.ops.drain(..));
        if self.flow > 0 {
            ops.push_back(ConsumerOp::Flow(std::mem::take(&mut self.flow)));
        }
        if std::mem::take(&mut self.want) {
            ops.push_back(ConsumerOp::RecvWaits);
        }
    }

    /// Acks alone wait for the task's ack group timer, which takes them when it fires (the
    /// task says so while it runs: see `InboxReceiver::set_folds_may_wait`), as upstream's
    /// `PersistentAcknowledgmentsGroupingTracker` keeps them until its flush: a consumer
    /// acking each message then wakes its task once per group, not once per ack. A full
    /// group wakes it (the tracker's `maxAckGroupSize` flush); anything else (a negative
    /// ack, a redelivery, flow permits, a receive waiting) wakes it at once. `room`: the
    /// acks that fill the task's group (what its tracker holds counted).
    #[inline]
    fn must_wake(&self, room: usize) -> bool {
        self.urgent || self.acks.len() >= room
    }
}

impl ConsumerOp {
    /// Whether the op is folded into the inbox without taking room (never waits, never is
    /// refused for room): acks, negative acks, redeliveries, flow permits.
    pub(crate) fn folds(&self) -> bool {
        matches!(
            self,
            ConsumerOp::Ack(_)
                | ConsumerOp::AckIds(_)
                | ConsumerOp::AckCumulative(_)
                | ConsumerOp::Nack(..)
                | ConsumerOp::Redeliver(_)
                | ConsumerOp::Flow(_)
                | ConsumerOp::RecvWaits
        )
    }
}

/// Where a seek goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SeekTarget {
    Id(MessageId),
    PublishTime(u64),
}

/// Requests from the consumer handle to a partition's task.
#[derive(Debug)]
pub(crate) enum ConsumerOp {
    /// An individual ack (folded into an `AckIds` on its way: see `ops`).
    Ack(MessageId),
    /// Individual acks made in a row (see `ops`).
    AckIds(Vec<MessageId>),
    AckCumulative(MessageId),
    /// A negative ack, with the message's redelivery count (for the backoff).
    Nack(MessageId, u32),
    /// Ask the broker to redeliver now (e.g. after a failed dead-letter publish).
    Redeliver(MessageId),
    Flow(u32),
    /// A receive found the queue empty and waits. With a zero-size receiver queue the task
    /// keeps one permit out (see `flow::zero`), like Java `ZeroQueueConsumerImpl`'s FLOW of 1
    /// per receive; with an auto-scaled one the queue may grow (see `flow::auto_scale`), like
    /// Java's `expectMoreIncomingMessages`. Sent by no other consumer.
    RecvWaits,
    Seek(SeekTarget, oneshot::Sender<Result<()>>),
    LastMessageId(oneshot::Sender<Result<LastIds>>),
    Unsubscribe(oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
    /// An acknowledgement in a transaction, answered by the broker (PIP-31).
    #[cfg(feature = "transactions")]
    TxnAck(TxnAck),
}

/// One transactional acknowledgement of the application (the task's side:
/// `engine::txn_ack`).
#[cfg(feature = "transactions")]
#[derive(Debug)]
pub(crate) struct TxnAck {
    /// The message (for a cumulative ack: the last one covered).
    pub(crate) id: MessageId,
    pub(crate) cumulative: bool,
    /// The transaction's id (most, least bits).
    pub(crate) txn: (u64, u64),
    pub(crate) done: oneshot::Sender<Result<()>>,
}

/// A partition's answer to get-last-message-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastIds {
    /// The id of the last stored message (for a batch, with the index of its last message);
    /// entry -1 on an empty partition.
    pub last: MessageId,
    /// The subscription's mark-delete position (everything at or before it is acknowledged),
    /// when the broker says.
    pub mark_delete: Option<MessageId>,
}

/// A seek or get-last-message-id of the application, in flight or waiting for the consumer to
/// be subscribed again.
#[derive(Debug)]
pub(crate) enum IdRequest {
    Seek(SeekTarget, oneshot::Sender<Result<()>>),
    LastMessageId(oneshot::Sender<Result<LastIds>>),
}

impl IdRequest {
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            IdRequest::Seek(..) => "seek",
            IdRequest::LastMessageId(_) => "get last message id",
        }
    }

    pub(crate) fn fail(self, e: Error) {
        match self {
            IdRequest::Seek(_, tx) => {
                let _ = tx.send(Err(e));
            }
            IdRequest::LastMessageId(tx) => {
                let _ = tx.send(Err(e));
            }
        }
    }
}

/// Acks a kept buffer has room for at most (a few batches of the default group size).
const KEPT_ACK_IDS: usize = 4096;

/// `ids` (empty) to keep, or a new one if it grew past [`KEPT_ACK_IDS`].
pub(crate) fn recycle(ids: Vec<MessageId>) -> Vec<MessageId> {
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
    fn repeated_acks_fold_into_one_entry() {
        let mut b = Folded::default();
        for _ in 0..10_000 {
            b.push(ConsumerOp::Ack(id(7)));
        }
        for e in [3, 9, 5] {
            b.push(ConsumerOp::AckCumulative(id(e)));
        }
        b.push(ConsumerOp::Ack(id(8)));
        let mut taken = VecDeque::new();
        b.drain_into(&mut taken);
        assert_eq!(taken.len(), 3, "{taken:?}");
        match (&taken[0], &taken[1], &taken[2]) {
            (
                ConsumerOp::AckIds(first),
                ConsumerOp::AckCumulative(furthest),
                ConsumerOp::AckIds(after),
            ) => {
                assert_eq!(first, &vec![id(7)]);
                assert_eq!(*furthest, id(9));
                assert_eq!(after, &vec![id(8)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_burst_of_acks_does_not_keep_its_buffer() {
        let mut b = Folded::default();
        for e in 0..100_000 {
            b.push(ConsumerOp::Ack(id(e)));
        }
        let mut taken = VecDeque::new();
        b.drain_into(&mut taken);
        let Some(ConsumerOp::AckIds(mut taken)) = taken.pop_front() else {
            panic!("one batch of acks")
        };
        assert_eq!(taken.len(), 100_000);
        taken.clear();
        // What the task keeps after applying them, and hands back to the buffer next time.
        assert!(recycle(taken).capacity() <= KEPT_ACK_IDS);
        let mut usual = Vec::with_capacity(1000);
        usual.push(id(1));
        usual.clear();
        assert_eq!(recycle(usual).capacity(), 1000, "the usual size is kept");
    }

    #[tokio::test]
    async fn acks_keep_their_order_with_other_ops() {
        let (tx, mut rx) = inbox();
        let send_ack = |e| tx.fold(|f| f.push(ConsumerOp::Ack(id(e))));
        send_ack(1).unwrap();
        send_ack(2).unwrap();
        tx.fold(|f| f.push(ConsumerOp::Redeliver(id(9)))).unwrap();
        send_ack(3).unwrap();
        let (seek, _r) = tokio::sync::oneshot::channel();
        let target = SeekTarget::PublishTime(1);
        tx.send(ConsumerOp::Seek(target, seek)).await.unwrap();
        send_ack(4).unwrap();
        send_ack(5).unwrap();
        match rx.try_recv() {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(1), id(2)]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rx.try_recv(), Some(ConsumerOp::Redeliver(_))));
        match rx.try_recv() {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(3)]),
            other => panic!("{other:?}"),
        }
        // The control op comes after the acks made before it, and before those made after.
        assert!(matches!(rx.try_recv(), Some(ConsumerOp::Seek(..))));
        match rx.try_recv() {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(4), id(5)]),
            other => panic!("{other:?}"),
        }
        assert!(rx.try_recv().is_none());
        // Flow permits are summed (no order to keep with acks).
        tx.fold(|f| f.push(ConsumerOp::Flow(1))).unwrap();
        tx.fold(|f| f.push(ConsumerOp::Flow(2))).unwrap();
        assert!(matches!(rx.try_recv(), Some(ConsumerOp::Flow(3))));
        drop(rx);
        assert!(send_ack(6).is_err());
        send_ack(7).unwrap_err();
    }

    /// Only an idle task is woken (issue #32): an ack folded in while the task is busy (it
    /// looked and does not wait) is taken the next time it looks, before it waits; one folded
    /// in while it waits wakes it.
    #[tokio::test]
    async fn a_folded_ack_reaches_a_busy_task_and_wakes_an_idle_one() {
        let (tx, mut rx) = inbox();
        assert!(rx.try_recv().is_none(), "busy: looked, not waiting");
        tx.fold(|f| f.push_ack(id(1))).unwrap();
        match rx.recv().await {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(1)]),
            other => panic!("{other:?}"),
        }
        let waiting = tokio::spawn(async move {
            match rx.recv().await {
                Some(ConsumerOp::AckIds(ids)) => ids,
                other => panic!("{other:?}"),
            }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "idle: waits for the inbox");
        tx.fold(|f| f.push_ack(id(2))).unwrap();
        assert_eq!(waiting.await.unwrap(), vec![id(2)]);
    }

    /// While the task waits with its ack group's timer running, acks wait for the timer
    /// (no wake-up per ack) until a group's worth is folded in; anything else wakes it at
    /// once, and nothing folded in is lost or reordered.
    #[tokio::test]
    async fn acks_wait_for_the_group_timer_unless_a_group_is_full() {
        let (tx, mut rx) = inbox();
        rx.set_folds_may_wait(Some(3));
        let waiting = tokio::spawn(async move {
            let first = rx.recv().await;
            (first, rx)
        });
        tokio::task::yield_now().await;
        tx.fold(|f| f.push_ack(id(1))).unwrap();
        tx.fold(|f| f.push_ack(id(2))).unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "two acks of a group of three: not woken"
        );
        tx.fold(|f| f.push_ack(id(3))).unwrap();
        let (first, mut rx) = waiting.await.unwrap();
        match first {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(1), id(2), id(3)]),
            other => panic!("{other:?}"),
        }
        // A negative ack is not held back.
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        tx.fold(|f| f.push_ack(id(4))).unwrap();
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one ack: not woken");
        tx.fold(|f| f.push(ConsumerOp::Nack(id(5), 0))).unwrap();
        match waiting.await.unwrap() {
            Some(ConsumerOp::AckIds(ids)) => assert_eq!(ids, vec![id(4)], "the ack first"),
            other => panic!("{other:?}"),
        }
    }

    /// A full inbox (control ops queued up to the bound) neither blocks nor refuses an ack,
    /// nor loses one: it comes after the control ops made before it.
    #[tokio::test]
    async fn a_full_inbox_still_takes_every_ack() {
        let (tx, mut rx) = inbox();
        for _ in 0..crate::inbox::CAPACITY {
            let (t, _r) = tokio::sync::oneshot::channel();
            tx.try_send(ConsumerOp::Unsubscribe(t)).unwrap();
        }
        let (t, _r) = tokio::sync::oneshot::channel();
        assert!(matches!(
            tx.try_send(ConsumerOp::Unsubscribe(t)),
            Err(crate::inbox::TrySendError::Full(_))
        ));
        for e in 0..10_000 {
            tx.fold(|f| f.push(ConsumerOp::Ack(id(e)))).unwrap();
        }
        tx.fold(|f| f.push(ConsumerOp::AckCumulative(id(20_000))))
            .unwrap();
        let mut controls = 0;
        let mut acks = Vec::new();
        let mut cumulative = None;
        while let Some(op) = rx.try_recv() {
            match op {
                ConsumerOp::Unsubscribe(_) => {
                    assert!(acks.is_empty(), "the acks come after the ops before them");
                    controls += 1;
                }
                ConsumerOp::AckIds(ids) => acks.extend(ids),
                ConsumerOp::AckCumulative(c) => cumulative = Some(c),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(controls, crate::inbox::CAPACITY);
        assert_eq!(acks, (0..10_000).map(id).collect::<Vec<_>>());
        assert_eq!(cumulative, Some(id(20_000)));
    }
}
