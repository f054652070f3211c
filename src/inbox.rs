//! The bounded queue from an entity's handles into its task, shared by producers and
//! consumers (one implementation of both inboxes).
//!
//! A tokio bounded mpsc costs about 250 instructions per message here (a lock-free list push
//! and pop, and a semaphore permit given back under the semaphore's lock for every message).
//! This queue is a `VecDeque` behind a mutex that the task empties in one swap, so an op
//! costs one short uncontended lock on the handle's side and almost nothing on the task's.
//! The bound works as the mpsc's does: a semaphore of [`CAPACITY`] permits, one taken per
//! queued op (waiting for one, or failing fast with [`TrySendError::Full`]) and given back,
//! in bulk, once the task has taken the ops out; tokio's semaphore hands released permits to
//! queued waiters first, so waiting senders get room in order.
//!
//! Beside the ops, the queue holds a `F: Fold<Op>`, state the handles change under the
//! queue's lock without taking room: the producer's receipts (handed out as a send is
//! queued), the consumer's acks and permits (folded into the sets of ids they end up in
//! anyway, so a full queue never blocks nor drops an ack; only control ops take room, and
//! the whole bound is kept for them). What is folded in comes out as ops *after* the ops
//! queued before it ([`Fold::drain_into`] runs when the task takes the queue, and before any
//! op is queued behind it), so the task sees every op in the order it was made.
//!
//! The task is woken through a [`Notify`] only when it is idle: [`InboxReceiver::recv`] found
//! nothing and is about to wait (it says so under the queue's lock, in the same look that
//! found the queue empty). A task that is running, or has work queued already, is not woken
//! again: it takes what was queued or folded in the next time it looks, before it waits (so
//! nothing is left behind), and a sender does not pay for a wake-up per batch (the consumer's
//! acks: one lock and a push each). The Notify's stored permit covers a wake-up that comes
//! between that look and the wait. A task that waits with a deadline armed, at which it takes
//! what is folded in anyway, may say so ([`InboxReceiver::set_folds_may_wait`], with how much
//! may wait): folds then wake it only when [`Fold::must_wake`] says so (the consumer's acks wait for the ack
//! group's timer, as upstream's grouping tracker holds them, instead of waking the task once
//! per ack). Closing (the task ends)
//! refuses later sends and fails waiting ones; the task then takes what is still queued. When
//! the handle is dropped, [`InboxReceiver::recv`] returns `None` once the queue is empty, like
//! an mpsc whose senders are gone.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore, SemaphorePermit, TryAcquireError};

/// Ops queued at most (the task's backlog; beyond it senders wait or fail fast).
pub(crate) const CAPACITY: usize = 4096;

/// State kept beside the queued ops and changed by senders under the queue's lock, without
/// taking room (see the module docs).
pub(crate) trait Fold<Op> {
    /// Whether nothing is folded in (then there is nothing for [`drain_into`](Self::drain_into)
    /// to hand the task).
    fn is_empty(&self) -> bool;
    /// Hands what is folded in to the task as ops, appended to `ops`.
    fn drain_into(&mut self, ops: &mut VecDeque<Op>);
    /// Whether what is folded in must wake a waiting task even when the task said folds may
    /// wait for its deadline, up to `room` of them ([`InboxReceiver::set_folds_may_wait`]).
    #[inline]
    fn must_wake(&self, room: usize) -> bool {
        let _ = room;
        true
    }
}

/// Nothing folded (an inbox of ops only).
impl<Op> Fold<Op> for () {
    #[inline]
    fn is_empty(&self) -> bool {
        true
    }
    #[inline]
    fn drain_into(&mut self, _: &mut VecDeque<Op>) {}
}

#[derive(Debug)]
struct Queue<Op, F> {
    ops: VecDeque<Op>,
    /// What senders fold in without taking room.
    folded: F,
    /// How many of `ops` took room (those drained from `folded` did not).
    with_room: usize,
    /// The task ended: sends are refused.
    closed: bool,
    /// The handle is gone: no op will come after those queued.
    sender_gone: bool,
    /// The task found the queue empty and waits (or is about to): the next sender wakes it.
    idle: bool,
    /// The waiting task has a deadline armed at which it takes what is folded in, and how
    /// much may wait for it: a fold wakes it only if [`Fold::must_wake`].
    folds_may_wait: Option<usize>,
}

#[derive(Debug)]
struct Shared<Op, F> {
    queue: Mutex<Queue<Op, F>>,
    wake_task: Notify,
    room: Semaphore,
}

impl<Op, F> Shared<Op, F> {
    fn lock(&self) -> MutexGuard<'_, Queue<Op, F>> {
        // Poisoned only by a panic while held; the queue is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A new queue: the handle's end and the task's, with `folded` kept beside the ops.
pub(crate) fn inbox<Op, F: Fold<Op>>(folded: F) -> (InboxSender<Op, F>, InboxReceiver<Op, F>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            ops: VecDeque::new(),
            folded,
            with_room: 0,
            closed: false,
            sender_gone: false,
            idle: false,
            folds_may_wait: None,
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
            folds_may_wait: None,
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

/// The task ended: nothing more is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

/// The handle's end (dropping it ends the task's input).
#[derive(Debug)]
pub(crate) struct InboxSender<Op, F> {
    shared: Arc<Shared<Op, F>>,
}

impl<Op, F: Fold<Op>> InboxSender<Op, F> {
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

    /// Queues `op` if there is room, without waiting.
    pub(crate) fn try_send(&self, op: Op) -> Result<(), TrySendError<Op>> {
        match self.try_room() {
            Ok(room) => self
                .push(room, |_| (op, ()))
                .map_err(|_| TrySendError::Closed),
            Err(TrySendError::Full(())) => Err(TrySendError::Full(op)),
            Err(TrySendError::Closed) => Err(TrySendError::Closed),
        }
    }

    /// Queues `op`, waiting for room. Dropped while waiting, nothing was queued. Fails once
    /// the task ended.
    pub(crate) async fn send(&self, op: Op) -> Result<(), TrySendError<()>> {
        let room = self.room().await?;
        self.push(room, |_| (op, ()))
    }

    /// Queues the op `make` builds (it may change the folded state too, e.g. hand out a
    /// send's receipt) in `room`, under the queue's lock, behind what is folded in; once
    /// closed, `make` is dropped uncalled.
    #[inline]
    pub(crate) fn push<R>(
        &self,
        room: Room<'_>,
        make: impl FnOnce(&mut F) -> (Op, R),
    ) -> Result<R, TrySendError<()>> {
        let mut guard = self.shared.lock();
        if guard.closed {
            // `room` goes back to the (closed) bound.
            return Err(TrySendError::Closed);
        }
        let queue = &mut *guard;
        let wake = std::mem::take(&mut queue.idle);
        if !queue.folded.is_empty() {
            // What was folded in before this op is taken before it.
            queue.folded.drain_into(&mut queue.ops);
        }
        let (op, out) = make(&mut queue.folded);
        queue.ops.push_back(op);
        queue.with_room += 1;
        drop(guard);
        room.0.forget(); // given back by the task once it took the op
        if wake {
            self.shared.wake_task.notify_one();
        }
        Ok(out)
    }

    /// Changes the folded state with `f` under the queue's lock, taking no room (an ack, a
    /// flow permit): never waits, never fails but once the task ended.
    #[inline]
    pub(crate) fn fold<R>(&self, f: impl FnOnce(&mut F) -> R) -> Result<R, Closed> {
        let mut queue = self.shared.lock();
        if queue.closed {
            return Err(Closed);
        }
        let out = f(&mut queue.folded);
        // Only an idle task is woken (see the module docs); a fold that added nothing wakes
        // it for nothing, which is harmless (it looks, finds nothing, and waits again). A
        // task waiting for a deadline that takes the folds anyway is woken only if they must.
        let wake = queue.idle
            && queue
                .folds_may_wait
                .is_none_or(|room| queue.folded.must_wake(room));
        if wake {
            queue.idle = false;
        }
        drop(queue);
        if wake {
            self.shared.wake_task.notify_one();
        }
        Ok(out)
    }
}

/// Room for one op in the queue, taken from its bound; given back if dropped unused.
#[derive(Debug)]
pub(crate) struct Room<'a>(SemaphorePermit<'a>);

impl<Op, F> Drop for InboxSender<Op, F> {
    fn drop(&mut self) {
        self.shared.lock().sender_gone = true;
        self.shared.wake_task.notify_one();
    }
}

/// The task's end.
#[derive(Debug)]
pub(crate) struct InboxReceiver<Op, F: Fold<Op>> {
    shared: Arc<Shared<Op, F>>,
    /// Ops taken from the queue in one swap, handed out one at a time.
    taken: VecDeque<Op>,
    /// Room to give back once `taken` is empty (so queued plus taken ops never exceed
    /// [`CAPACITY`], as in a bounded channel).
    to_release: usize,
    /// How many swaps in a row took few ops (fewer than `SHRINK_ABOVE / 4`).
    quiet_swaps: u32,
    /// See [`InboxReceiver::set_folds_may_wait`].
    folds_may_wait: Option<usize>,
}

/// Buffers with room for more ops than this are shrunk once the bursts that grew them end.
const SHRINK_ABOVE: usize = 1024;

/// Swaps in a row that take few ops before the buffers are shrunk: a sender that runs ahead
/// of the task in waves (the task takes a few ops, then a full queue, and so on) would
/// otherwise have both buffers shrunk and grown again on every wave, each growth touching
/// fresh pages (a page fault each: about a tenth of the produce run's faults in `perf`).
const QUIET_SWAPS: u32 = 64;

impl<Op, F: Fold<Op>> InboxReceiver<Op, F> {
    /// The next op; `None` once the handle is gone and nothing is queued. Cancel safe: an op
    /// is only taken out by a call that returns it.
    pub(crate) async fn recv(&mut self) -> Option<Op> {
        loop {
            if self.taken.is_empty() {
                let gone = self.refill(true);
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
    pub(crate) fn try_recv(&mut self) -> Option<Op> {
        if self.taken.is_empty() {
            self.refill(false);
        }
        self.pop()
    }

    /// The next op of those taken, giving the room back once they are all out.
    #[inline]
    fn pop(&mut self) -> Option<Op> {
        let op = self.taken.pop_front();
        if self.taken.is_empty() {
            self.release();
        }
        op
    }

    /// Takes what is queued into the (empty) `taken`, in one swap, and what is folded in
    /// after it; whether the handle is gone (no op will be queued after those taken). `wait`:
    /// the task waits if nothing is taken, so it is marked idle in the same look.
    fn refill(&mut self, wait: bool) -> bool {
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
        // Only the ops queued with room give room back; what is folded in comes after them.
        self.to_release = std::mem::take(&mut queue.with_room);
        if !queue.folded.is_empty() {
            queue.folded.drain_into(&mut self.taken);
        }
        let gone = queue.sender_gone;
        queue.idle = wait && self.taken.is_empty();
        queue.folds_may_wait = self.folds_may_wait;
        drop(queue);
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

    /// Whether, while the task waits from its next look at the queue on, what is folded in
    /// may wait for a deadline the task has armed (at which it takes it): `Some(room)`, with
    /// how much may wait ([`Fold::must_wake`] decides), `None` for no wait. Set before each
    /// wait.
    #[inline]
    pub(crate) fn set_folds_may_wait(&mut self, room: Option<usize>) {
        self.folds_may_wait = room;
    }

    /// Changes the folded state with `f` under the queue's lock (the task giving back a
    /// buffer to reuse).
    pub(crate) fn with_folded<R>(&self, f: impl FnOnce(&mut F) -> R) -> R {
        f(&mut self.shared.lock().folded)
    }

    /// Refuses later sends (and fails those waiting for room); what is queued stays for
    /// [`try_recv`](Self::try_recv).
    pub(crate) fn close(&mut self) {
        self.shared.lock().closed = true;
        self.shared.room.close();
    }
}

impl<Op, F: Fold<Op>> Drop for InboxReceiver<Op, F> {
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

    /// An op with a responder (like a flush), to see whether it was taken or dropped.
    #[derive(Debug)]
    struct Flush(oneshot::Sender<crate::Result<()>>);

    fn inbox() -> (InboxSender<Flush, ()>, InboxReceiver<Flush, ()>) {
        super::inbox(())
    }

    fn op() -> (Flush, oneshot::Receiver<crate::Result<()>>) {
        let (tx, rx) = oneshot::channel();
        (Flush(tx), rx)
    }

    #[tokio::test]
    async fn ops_arrive_in_order_and_room_comes_back() {
        let (tx, mut rx) = inbox();
        let mut kept = Vec::new();
        for _ in 0..CAPACITY {
            let (o, r) = op();
            tx.try_send(o).unwrap();
            kept.push(r);
        }
        let (o, _r) = op();
        assert!(matches!(tx.try_send(o), Err(TrySendError::Full(_))));
        for (i, sent) in kept.iter_mut().enumerate() {
            let Some(Flush(t)) = rx.recv().await else {
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

    #[tokio::test]
    async fn buffers_shrink_after_a_burst() {
        let (tx, mut rx) = inbox();
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
        let (tx, mut rx) = inbox();
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
        let (tx, mut rx) = inbox();
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

    #[tokio::test]
    async fn dropping_the_receiver_drops_what_it_never_took() {
        // As a tokio mpsc does: whoever waits on a queued op's result learns it is gone.
        let (tx, rx) = inbox();
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
