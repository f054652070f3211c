//! The bounded queue from a partition producer's handle into its task.
//!
//! A tokio bounded mpsc costs about 250 instructions per message here (a lock-free list push
//! and pop, and a semaphore permit given back under the semaphore's lock for every message).
//! This queue is a `VecDeque` behind a mutex that the task empties in one swap, so a message
//! costs one short uncontended lock on the handle's side and almost nothing on the task's.
//! The bound works as the mpsc's does: a semaphore of [`CAPACITY`] permits, one taken per
//! queued op (waiting for one, or failing fast with [`TrySendError::Full`]) and given back,
//! in bulk, once the task has taken the ops out; tokio's semaphore hands released permits to
//! queued waiters first, so waiting senders get room in order.
//!
//! The task is woken through a [`Notify`] when the queue goes from empty to non-empty (its
//! stored permit covers a wake-up that comes before the task waits). Closing (the task ends)
//! refuses later sends and fails waiting ones; the task then takes what is still queued. When
//! the handle is dropped, [`InboxReceiver::recv`] returns `None` once the queue is empty, like
//! an mpsc whose senders are gone.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore, SemaphorePermit, TryAcquireError};

use super::pending::{Completion, Outgoing, Reservation};
use super::receipt::{Receipts, SendFuture};
use super::task::ProducerOp;

/// Ops queued at most (the task's backlog; beyond it senders wait or fail fast).
pub(crate) const CAPACITY: usize = 4096;

#[derive(Debug)]
struct Queue {
    ops: VecDeque<ProducerOp>,
    /// Each queued send's receipt is handed out here, under the lock that queues it.
    receipts: Receipts,
    /// The task ended: sends are refused.
    closed: bool,
    /// The handle is gone: no op will come after those queued.
    sender_gone: bool,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    wake_task: Notify,
    room: Semaphore,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Poisoned only by a panic while held; the queue is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A new queue: the handle's end and the task's; the sends' receipts come from `receipts`.
pub(crate) fn inbox(receipts: Receipts) -> (InboxSender, InboxReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            ops: VecDeque::new(),
            receipts,
            closed: false,
            sender_gone: false,
        }),
        wake_task: Notify::new(),
        room: Semaphore::new(CAPACITY),
    });
    (
        InboxSender {
            shared: shared.clone(),
        },
        InboxReceiver {
            shared,
            taken: VecDeque::new(),
            to_release: 0,
            quiet_swaps: 0,
        },
    )
}

/// Why an op could not be queued at once.
#[derive(Debug)]
pub(crate) enum TrySendError<T> {
    /// The queue is full (what was to be queued is given back).
    Full(T),
    /// The task ended.
    Closed,
}

/// The handle's end (one per partition producer; dropping it ends the task's input).
#[derive(Debug)]
pub(crate) struct InboxSender {
    shared: Arc<Shared>,
}

impl InboxSender {
    /// Room for one op if the queue has some, without waiting.
    #[inline]
    pub(crate) fn try_room(&self) -> Result<Room<'_>, TrySendError<()>> {
        match self.shared.room.try_acquire() {
            Ok(permit) => Ok(Room(permit)),
            Err(TryAcquireError::NoPermits) => Err(TrySendError::Full(())),
            Err(TryAcquireError::Closed) => Err(TrySendError::Closed),
        }
    }

    /// Room for one op, waiting for it. Fails once the task ended.
    pub(crate) async fn room(&self) -> Result<Room<'_>, TrySendError<()>> {
        match self.shared.room.acquire().await {
            Ok(permit) => Ok(Room(permit)),
            Err(_) => Err(TrySendError::Closed),
        }
    }

    /// Queues a send of `msg` in `room`; returns its receipt. The op is built under the
    /// queue's lock with both halves of what completes it: the receipt's responder, and the
    /// counts of what the send holds (`held`, which forgets its permits into counts, is called
    /// only once the send is sure to be queued; otherwise the permits it owns go back as it is
    /// dropped). From then on the counts go back through the responder's receipt group.
    #[inline]
    pub(crate) fn send_message(
        &self,
        room: Room<'_>,
        msg: Outgoing,
        held: impl FnOnce() -> Reservation,
    ) -> Result<SendFuture, TrySendError<()>> {
        self.push(room, |receipts| {
            let (responder, receipt) = receipts.next();
            let completion = Completion {
                reserved: held(),
                responder: Some(responder),
            };
            (ProducerOp::Send { msg, completion }, receipt)
        })
    }

    /// Queues `op` if there is room, without waiting (unit tests; the handle queues flushes
    /// and closes with [`send`](Self::send)).
    #[cfg(test)]
    fn try_send(&self, op: ProducerOp) -> Result<(), TrySendError<ProducerOp>> {
        match self.try_room() {
            Ok(room) => self
                .push(room, |_| (op, ()))
                .map_err(|_| TrySendError::Closed),
            Err(TrySendError::Full(())) => Err(TrySendError::Full(op)),
            Err(TrySendError::Closed) => Err(TrySendError::Closed),
        }
    }

    /// Queues `op` (a flush or close), waiting for room. Dropped while waiting, nothing was
    /// queued. Fails once the task ended.
    pub(crate) async fn send(&self, op: ProducerOp) -> Result<(), TrySendError<()>> {
        let room = self.room().await?;
        self.push(room, |_| (op, ()))
    }

    /// Queues the op `make` builds (with a send's receipt, handed out here) in `room`, under
    /// the queue's lock; once closed, `make` is dropped uncalled.
    #[inline]
    fn push<R>(
        &self,
        room: Room<'_>,
        make: impl FnOnce(&mut Receipts) -> (ProducerOp, R),
    ) -> Result<R, TrySendError<()>> {
        let mut queue = self.shared.lock();
        if queue.closed {
            // `room` goes back to the (closed) bound.
            return Err(TrySendError::Closed);
        }
        let was_empty = queue.ops.is_empty();
        let (op, out) = make(&mut queue.receipts);
        queue.ops.push_back(op);
        drop(queue);
        room.0.forget(); // given back by the task once it took the op
        if was_empty {
            self.shared.wake_task.notify_one();
        }
        Ok(out)
    }
}

/// Room for one op in the queue, taken from its bound; given back if dropped unused.
#[derive(Debug)]
pub(crate) struct Room<'a>(SemaphorePermit<'a>);

impl Drop for InboxSender {
    fn drop(&mut self) {
        self.shared.lock().sender_gone = true;
        self.shared.wake_task.notify_one();
    }
}

/// The task's end.
#[derive(Debug)]
pub(crate) struct InboxReceiver {
    shared: Arc<Shared>,
    /// Ops taken from the queue in one swap, handed out one at a time.
    taken: VecDeque<ProducerOp>,
    /// Room to give back once `taken` is empty (so queued plus taken ops never exceed
    /// [`CAPACITY`], as in a bounded channel).
    to_release: usize,
    /// How many swaps in a row took few ops (fewer than `SHRINK_ABOVE / 4`).
    quiet_swaps: u32,
}

/// Buffers with room for more ops than this are shrunk once the bursts that grew them end.
const SHRINK_ABOVE: usize = 1024;

/// Swaps in a row that take few ops before the buffers are shrunk: a sender that runs ahead
/// of the task in waves (the task takes a few ops, then a full queue, and so on) would
/// otherwise have both buffers shrunk and grown again on every wave, each growth touching
/// fresh pages (a page fault each: about a tenth of the produce run's faults in `perf`).
const QUIET_SWAPS: u32 = 64;

impl InboxReceiver {
    /// The next op; `None` once the handle is gone and nothing is queued. Cancel safe: an op
    /// is only taken out by a call that returns it.
    pub(crate) async fn recv(&mut self) -> Option<ProducerOp> {
        loop {
            if self.taken.is_empty() {
                let gone = self.refill();
                if self.taken.is_empty() {
                    if gone {
                        return None;
                    }
                    self.shared.wake_task.notified().await;
                    continue;
                }
            }
            return self.pop();
        }
    }

    /// The next op if one is queued.
    // Inlined into the task's drain loop, like `pop`: an op is ~110 bytes, and each function
    // boundary it crosses by value is another copy of it (~15 instructions).
    #[inline]
    pub(crate) fn try_recv(&mut self) -> Option<ProducerOp> {
        if self.taken.is_empty() {
            self.refill();
        }
        self.pop()
    }

    /// The next op of those taken, giving the room back once they are all out.
    #[inline]
    fn pop(&mut self) -> Option<ProducerOp> {
        let op = self.taken.pop_front();
        if self.taken.is_empty() {
            self.release();
        }
        op
    }

    /// Takes what is queued into the (empty) `taken`, in one swap; whether the handle is gone
    /// (no op will be queued after those taken).
    fn refill(&mut self) -> bool {
        self.release();
        // After a burst (up to the bound of ops queued at once) the two buffers would keep
        // their room for good: once swaps have taken few ops for a while ([`QUIET_SWAPS`]),
        // the empty one is shrunk before it goes back to the senders (the other one on the
        // next swap).
        if self.taken.capacity() > SHRINK_ABOVE && self.quiet_swaps >= QUIET_SWAPS {
            self.taken.shrink_to(SHRINK_ABOVE / 4);
        }
        let mut queue = self.shared.lock();
        std::mem::swap(&mut queue.ops, &mut self.taken);
        let gone = queue.sender_gone;
        drop(queue);
        self.to_release = self.taken.len();
        if self.taken.len() < SHRINK_ABOVE / 4 {
            self.quiet_swaps = self.quiet_swaps.saturating_add(1);
        } else {
            self.quiet_swaps = 0;
        }
        gone
    }

    fn release(&mut self) {
        if self.to_release > 0 {
            self.shared.room.add_permits(self.to_release);
            self.to_release = 0;
        }
    }

    /// Refuses later sends (and fails those waiting for room); what is queued stays for
    /// [`try_recv`](Self::try_recv).
    pub(crate) fn close(&mut self) {
        self.shared.lock().closed = true;
        self.shared.room.close();
    }
}

impl Drop for InboxReceiver {
    fn drop(&mut self) {
        // However the task ends, a sender must not wait for room forever.
        self.close();
        // Like a dropped mpsc receiver, drop the ops never taken (the task's normal end takes
        // them all first; this is for a task dropped without ending, e.g. with its runtime):
        // a queued send's receipt then resolves to `Closed` and a flush or close fails,
        // instead of waiting for as long as the handle lives. Dropped outside the lock.
        let left = std::mem::take(&mut self.shared.lock().ops);
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn op() -> (ProducerOp, oneshot::Receiver<crate::Result<()>>) {
        let (tx, rx) = oneshot::channel();
        (ProducerOp::Flush(tx), rx)
    }

    #[tokio::test]
    async fn ops_arrive_in_order_and_room_comes_back() {
        let (tx, mut rx) = inbox(Receipts::default());
        let mut kept = Vec::new();
        for _ in 0..CAPACITY {
            let (o, r) = op();
            tx.try_send(o).unwrap();
            kept.push(r);
        }
        let (o, _r) = op();
        assert!(matches!(tx.try_send(o), Err(TrySendError::Full(_))));
        for (i, sent) in kept.iter_mut().enumerate() {
            let Some(ProducerOp::Flush(t)) = rx.recv().await else {
                panic!("op {i}")
            };
            t.send(Ok(())).unwrap();
            // Order: the i-th op sent is the i-th received.
            assert!(sent.try_recv().is_ok());
        }
        let (o, _r) = op();
        tx.try_send(o).unwrap();
        assert!(rx.try_recv().is_some());
        assert!(rx.try_recv().is_none());
        drop(tx);
        assert!(rx.recv().await.is_none());
    }

    /// Each queued send carries the responder of the receipt it returned.
    #[tokio::test]
    async fn sends_get_their_own_receipts_in_order() {
        let (tx, mut rx) = inbox(Receipts::default());
        let msg = || Outgoing::from(crate::ProducerMessage::new("m"));
        let mut receipts = vec![tx
            .send_message(tx.try_room().unwrap(), msg(), Reservation::default)
            .unwrap()];
        let room = tx.room().await.unwrap();
        receipts.push(tx.send_message(room, msg(), Reservation::default).unwrap());
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
    #[tokio::test]
    async fn buffers_shrink_after_a_burst() {
        let (tx, mut rx) = inbox(Receipts::default());
        for _ in 0..CAPACITY {
            tx.try_send(op().0).unwrap();
        }
        while rx.try_recv().is_some() {}
        let grown = rx.taken.capacity().max(tx.shared.lock().ops.capacity());
        assert!(grown >= CAPACITY, "the burst grew a buffer: {grown}");
        // A lull shorter than QUIET_SWAPS keeps the room (the next wave needs it again).
        for _ in 0..4 {
            tx.try_send(op().0).unwrap();
            assert!(rx.try_recv().is_some());
        }
        let kept = rx.taken.capacity().max(tx.shared.lock().ops.capacity());
        assert!(kept >= CAPACITY, "a short lull shrank a buffer: {kept}");
        // Quiet rounds of one op each: every buffer is back under the threshold.
        for _ in 0..QUIET_SWAPS + 2 {
            tx.try_send(op().0).unwrap();
            assert!(rx.try_recv().is_some());
        }
        assert!(
            rx.taken.capacity() <= SHRINK_ABOVE,
            "{}",
            rx.taken.capacity()
        );
        let queued = tx.shared.lock().ops.capacity();
        assert!(queued <= SHRINK_ABOVE, "{queued}");
    }

    #[tokio::test]
    async fn a_full_queue_makes_senders_wait_until_the_task_takes_ops() {
        let (tx, mut rx) = inbox(Receipts::default());
        for _ in 0..CAPACITY {
            tx.try_send(op().0).unwrap();
        }
        let tx = Arc::new(tx);
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(op().0).await.is_ok() })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        for _ in 0..CAPACITY {
            rx.recv().await.unwrap();
        }
        assert!(waiting.await.unwrap());
        assert!(rx.recv().await.is_some());
    }

    #[tokio::test]
    async fn closing_refuses_sends_and_fails_waiters() {
        let (tx, mut rx) = inbox(Receipts::default());
        for _ in 0..CAPACITY {
            tx.try_send(op().0).unwrap();
        }
        let tx = Arc::new(tx);
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(op().0).await.is_err() })
        };
        tokio::task::yield_now().await;
        rx.close();
        assert!(waiting.await.unwrap(), "a waiting send fails");
        assert!(matches!(tx.try_send(op().0), Err(TrySendError::Closed)));
        let mut left = 0;
        while rx.try_recv().is_some() {
            left += 1;
        }
        assert_eq!(left, CAPACITY, "what was queued is still taken");
    }

    /// What a send holds comes with it: its counts once queued (given back when its op is
    /// dropped or completed), its permits when the queue refuses it (given back at once).
    #[tokio::test]
    async fn what_a_send_holds_goes_back_whether_or_not_it_is_queued() {
        use crate::producer::limits::Limits;
        let limits = Arc::new(Limits {
            memory: Arc::new(Semaphore::new(100)),
            slots: Some(Arc::new(Semaphore::new(3))),
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
            tx.send_message(room, msg, held)
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

    #[tokio::test]
    async fn dropping_the_receiver_drops_what_it_never_took() {
        // As a tokio mpsc does: whoever waits on a queued op's result learns it is gone.
        let (tx, rx) = inbox(Receipts::default());
        let (o, mut waiting) = op();
        tx.try_send(o).unwrap();
        drop(rx);
        assert!(matches!(
            waiting.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert!(matches!(tx.try_send(op().0), Err(TrySendError::Closed)));
    }
}
