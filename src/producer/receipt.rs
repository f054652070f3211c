//! Receipts: how a send's result reaches its [`SendFuture`].
//!
//! A oneshot channel per message costs an allocation and a free per message, and with tens of
//! thousands of receipts pending (pipelined sends) the allocator's slow paths dominate (about
//! 500 instructions per message, measured with `benches/hot_paths.rs`). Here the receipts of
//! [`GROUP`] consecutive sends of a partition producer share one allocation: a small array of
//! slots behind a mutex. A send takes the next slot of the current group (a new group once it
//! is used up); the task fills the slot and wakes its future. The mutex is held only to read or
//! write one slot (or a few, for a batch), so it is uncontended in practice.
//!
//! Semantics are those of the oneshot it replaces: the [`Responder`] fills its slot once; one
//! dropped unfilled (the message was dropped with the task) resolves the future to
//! [`Error::Closed`]; a dropped [`SendFuture`] only leaves its result unread. A group is
//! freed once every future and responder of it is gone.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::limits::{Limits, Reservation};
use crate::error::{Error, Result};
use crate::message_id::MessageId;

/// Receipts per shared allocation: one allocation per 32 sends, and a group kept alive by one
/// forgotten future holds a few KB at most.
const GROUP: usize = 32;

/// A stored message id of the common kind: of the group's partition, not chunked. Kept as
/// these four fields (24 bytes) rather than a whole `Result<MessageId>` (which carries the
/// large `Error` inline), so a slot is 32 bytes, not 72: each pending message holds one.
#[derive(Debug, Clone, Copy)]
struct StoredId {
    ledger_id: u64,
    entry_id: u64,
    batch_index: i32,
    batch_size: i32,
}

#[derive(Debug, Default)]
enum Slot {
    /// Not completed yet; the waker of the future that polled it, if it did.
    #[default]
    Waiting,
    Polled(Waker),
    Done(StoredId),
    /// Any other result (an error, a chunked message's id): rare, so boxed.
    DoneOther(Box<Result<MessageId>>),
    /// The future took the result.
    Taken,
}

/// What runs when a send completes, with its result (see [`SendFuture::on_complete`]).
pub(crate) type Hook = Box<dyn FnOnce(Result<&MessageId, &Error>) + Send>;

/// The hooks of the slots a completion filled, with their results: run once every lock is
/// released and before the futures' wakers (as Java runs the interceptors before it completes
/// the send's future).
type Hooks = Vec<(Hook, Result<MessageId>)>;

/// Runs the hooks collected by a completion.
#[cold]
#[inline(never)]
fn run_hooks(hooks: Hooks) {
    for (hook, result) in hooks {
        hook(result.as_ref());
    }
}

/// A group's slots and, apart from them, the completion hooks of its sends.
#[derive(Default)]
struct Slots {
    slots: [Slot; GROUP],
    /// The hooks of the group's pending sends (the producer's interceptors), by slot:
    /// allocated by the first [`SendFuture::on_complete`], so on a producer without
    /// interceptors the slots are those of a plain receipt and a completion pays one check
    /// per group it fills.
    hooks: Option<Box<[Option<Hook>; GROUP]>>,
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("slots", &self.slots)
            .field("hooked", &self.hooks.is_some())
            .finish()
    }
}

#[derive(Debug)]
struct Group {
    /// The partition of every id stored compactly ([`Slot::Done`]).
    partition: i32,
    /// Where what the group's sends hold goes back to (see [`Responder::release`]).
    limits: Arc<Limits>,
    slots: Mutex<Slots>,
}

impl Group {
    fn new(partition: i32, limits: Arc<Limits>) -> Self {
        Group {
            partition,
            limits,
            slots: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // A poisoned lock only means a panic elsewhere while it was held; the slots stay valid.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `id` in its compact form, if it has one: of the group's partition and not chunked
    /// (always, for ids from the task).
    fn stored(&self, id: &MessageId) -> Option<StoredId> {
        (id.first_chunk.is_none() && id.partition == self.partition).then_some(StoredId {
            ledger_id: id.ledger_id,
            entry_id: id.entry_id,
            batch_index: id.batch_index,
            batch_size: id.batch_size,
        })
    }

    /// The result a completed slot holds (a copy), if it is completed.
    fn result_of(&self, slot: &Slot) -> Option<Result<MessageId>> {
        match slot {
            Slot::Done(id) => Some(Ok(MessageId {
                ledger_id: id.ledger_id,
                entry_id: id.entry_id,
                partition: self.partition,
                batch_index: id.batch_index,
                batch_size: id.batch_size,
                first_chunk: None,
            })),
            Slot::DoneOther(r) => Some((**r).clone()),
            _ => None,
        }
    }

    /// The hooks of `range`'s slots, just filled, with their results (to `out`): only on a
    /// group some of whose sends have hooks.
    #[cold]
    #[inline(never)]
    fn take_hooks(&self, slots: &mut Slots, range: std::ops::Range<usize>, out: &mut Hooks) {
        let Some(hooks) = slots.hooks.as_mut() else {
            return;
        };
        for i in range {
            if let Some(hook) = hooks[i].take() {
                if let Some(r) = self.result_of(&slots.slots[i]) {
                    out.push((hook, r));
                }
            }
        }
    }

    /// The slot that holds `result`.
    fn done(&self, result: Result<MessageId>) -> Slot {
        match result {
            Ok(id) => match self.stored(&id) {
                Some(stored) => Slot::Done(stored),
                None => Slot::DoneOther(Box::new(Ok(id))),
            },
            other => Slot::DoneOther(Box::new(other)),
        }
    }
}

/// Hands out receipt slots for one partition producer's sends. Not locked itself: it lives
/// in the producer's inbox queue and hands out a send's receipt under the lock that queues
/// the send (one lock per send instead of two).
#[derive(Debug)]
pub(crate) struct Receipts {
    /// The partition whose sends these are (-1: not partitioned).
    partition: i32,
    /// The producer's limits, which every group holds.
    limits: Arc<Limits>,
    /// The group being handed out and its next free slot.
    current: Option<(Arc<Group>, usize)>,
}

#[cfg(test)]
impl Default for Receipts {
    fn default() -> Self {
        Receipts::new(-1, Limits::unlimited())
    }
}

impl Receipts {
    /// Receipts of the sends of `partition` (its ids are stored compactly; any other id
    /// still works, boxed), taking from `limits`.
    pub(crate) fn new(partition: i32, limits: Arc<Limits>) -> Self {
        Receipts {
            partition,
            limits,
            current: None,
        }
    }

    /// A new receipt: the task's half and the application's.
    pub(crate) fn next(&mut self) -> (Responder, SendFuture) {
        let (group, index) = match self.current.as_mut() {
            Some((group, next)) if *next < GROUP => {
                let i = *next;
                *next += 1;
                (group.clone(), i)
            }
            _ => {
                let group = Arc::new(Group::new(self.partition, self.limits.clone()));
                self.current = Some((group.clone(), 1));
                (group, 0)
            }
        };
        // GROUP is far below u32::MAX.
        let index = index as u32;
        (
            Responder {
                group: group.clone(),
                index,
                sent: false,
            },
            SendFuture { group, index },
        )
    }
}

/// Completes one send's [`SendFuture`] (once).
#[derive(Debug)]
pub(crate) struct Responder {
    group: Arc<Group>,
    // u32 (not usize): keeps a completion two words smaller.
    index: u32,
    sent: bool,
}

impl Responder {
    /// Gives back what a send of this producer holds: through the responder's receipt group,
    /// so a send's counts need no handle of their own (see `limits`).
    pub(crate) fn release(&self, held: Reservation) {
        self.group.limits.release(held);
    }

    /// Fills the slot and wakes the future (if it waits).
    pub(crate) fn send(mut self, result: Result<MessageId>) {
        self.fill(result);
    }

    fn fill(&mut self, result: Result<MessageId>) {
        self.sent = true;
        let mut slots = self.group.lock();
        let index = self.index as usize;
        let waiting = std::mem::replace(&mut slots.slots[index], self.group.done(result));
        if slots.hooks.is_some() {
            let mut hooks = Vec::new();
            self.group
                .take_hooks(&mut slots, index..index + 1, &mut hooks);
            drop(slots);
            run_hooks(hooks);
        } else {
            drop(slots);
        }
        if let Slot::Polled(waker) = waiting {
            waker.wake();
        }
    }
}

/// The receipts of a batch's messages, in batch order, kept as runs of consecutive slots of
/// one group: the sends of a partition take consecutive slots, so a batch of 1,000 messages
/// holds ~32 runs (16 bytes each) instead of 1,000 responders, and its receipt fills each run
/// under one lock, without a reference count per message. Dropped unfilled, its sends
/// resolve to `Closed` (as their responders would have).
#[derive(Debug, Default)]
pub(crate) struct BatchReceipts {
    runs: Vec<Run>,
    len: usize,
}

/// Slots `start..start + len` of `group`.
#[derive(Debug)]
struct Run {
    group: Arc<Group>,
    start: u32,
    len: u32,
}

impl Run {
    /// Fills the run's slots with `done(i)` for its i-th slot; the wakers of the futures that
    /// wait go to `wakers` and the hooks of its sends, with their results, to `hooks` (run,
    /// then woken, by the caller once every lock is released, with one list each for the
    /// whole batch). The run is left empty.
    fn fill(
        &mut self,
        wakers: &mut Vec<Waker>,
        hooks: &mut Hooks,
        mut done: impl FnMut(usize) -> Slot,
    ) {
        let range = self.start as usize..(self.start + self.len) as usize;
        self.len = 0;
        let mut slots = self.group.lock();
        for (i, slot) in slots.slots[range.clone()].iter_mut().enumerate() {
            if let Slot::Polled(w) = std::mem::replace(slot, done(i)) {
                wakers.push(w);
            }
        }
        if slots.hooks.is_some() {
            self.group.take_hooks(&mut slots, range, hooks);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Like dropped responders: the sends resolve to `Closed`.
        if self.len > 0 {
            let (mut wakers, mut hooks) = (Vec::new(), Vec::new());
            self.fill(&mut wakers, &mut hooks, |_| {
                Slot::DoneOther(Box::new(Err(Error::Closed)))
            });
            run_hooks(hooks);
            wakers.into_iter().for_each(Waker::wake);
        }
    }
}

impl BatchReceipts {
    /// How many sends these complete.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds the next message's receipt (its responder's slot is this batch's from now on).
    pub(crate) fn push(&mut self, mut r: Responder) {
        r.sent = true;
        self.len += 1;
        if let Some(last) = self.runs.last_mut() {
            if Arc::ptr_eq(&last.group, &r.group) && last.start + last.len == r.index {
                last.len += 1;
                return;
            }
        }
        self.runs.push(Run {
            group: r.group.clone(),
            start: r.index,
            len: 1,
        });
    }

    /// Gives back what the batch's sends hold (through their receipt group, as
    /// [`Responder::release`]).
    pub(crate) fn release(&self, held: Reservation) {
        match self.runs.first() {
            Some(run) => run.group.limits.release(held),
            None => debug_assert!(held.is_empty(), "a batch holds {held:?} without sends"),
        }
    }

    /// Completes every send of the batch stored at `id`: the i-th with batch index i and the
    /// batch's size. Each slot is written from the entry's id directly (the compact form
    /// whenever the id has one), one lock per run; the waiting futures are woken after.
    pub(crate) fn complete(mut self, id: MessageId) {
        // Batches hold far fewer than i32::MAX messages.
        let size = self.len as i32;
        let mut index = 0i32;
        let (mut wakers, mut hooks) = (Vec::new(), Vec::new());
        for run in &mut self.runs {
            let compact = run.group.stored(&id);
            let first = index;
            index += run.len as i32;
            run.fill(&mut wakers, &mut hooks, |i| {
                let batch_index = first + i as i32;
                match compact {
                    Some(stored) => Slot::Done(StoredId {
                        batch_index,
                        batch_size: size,
                        ..stored
                    }),
                    None => Slot::DoneOther(Box::new(Ok(MessageId {
                        batch_index,
                        batch_size: size,
                        ..id
                    }))),
                }
            });
        }
        if !hooks.is_empty() {
            run_hooks(hooks);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Completes every send with `error`.
    pub(crate) fn fail(mut self, error: &Error) {
        let (mut wakers, mut hooks) = (Vec::new(), Vec::new());
        for run in &mut self.runs {
            run.fill(&mut wakers, &mut hooks, |_| {
                Slot::DoneOther(Box::new(Err(error.clone())))
            });
        }
        run_hooks(hooks);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// The sends' responders again, in batch order (to fail each on its own).
    pub(crate) fn into_responders(mut self) -> impl Iterator<Item = Responder> {
        std::mem::take(&mut self.runs)
            .into_iter()
            .flat_map(|mut run| {
                let (start, len) = (run.start, run.len);
                run.len = 0;
                (start..start + len).map(move |index| Responder {
                    group: run.group.clone(),
                    index,
                    sent: false,
                })
            })
    }

    /// Runs held (tests: a batch's bookkeeping stays small).
    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.sent {
            // Like a dropped oneshot sender: the future resolves to `Closed`.
            self.fill(Err(Error::Closed));
        }
    }
}

/// Resolves to the message's id once the broker has stored it. Dropping it does not cancel
/// the send (the message is still sent; only its receipt is ignored), so it can be raced in
/// a `tokio::select!` or awaited later.
#[derive(Debug)]
#[must_use = "a send is only known to succeed once its SendFuture resolves"]
pub struct SendFuture {
    group: Arc<Group>,
    index: u32,
}

impl SendFuture {
    /// Runs `hook` with the send's result when it completes (at once if it has), on whichever
    /// task completes it, whether or not this future is awaited: the producer's interceptors.
    pub(crate) fn on_complete(&mut self, hook: Hook) {
        let mut slots = self.group.lock();
        let index = self.index as usize;
        match &slots.slots[index] {
            Slot::Waiting | Slot::Polled(_) => {
                slots.hooks.get_or_insert_with(Box::default)[index] = Some(hook);
            }
            done => {
                let result = self.group.result_of(done);
                drop(slots);
                if let Some(r) = result {
                    hook(r.as_ref());
                }
            }
        }
    }

    /// The result, if the send is complete (unit tests).
    #[cfg(test)]
    pub(crate) fn try_result(&mut self) -> Option<Result<MessageId>> {
        let waker = futures::task::noop_waker();
        match Pin::new(self).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }
}

impl Future for SendFuture {
    type Output = Result<MessageId>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut slots = this.group.lock();
        let slot = &mut slots.slots[this.index as usize];
        match slot {
            Slot::Done(id) => {
                let id = *id;
                *slot = Slot::Taken;
                Poll::Ready(Ok(MessageId {
                    ledger_id: id.ledger_id,
                    entry_id: id.entry_id,
                    partition: this.group.partition,
                    batch_index: id.batch_index,
                    batch_size: id.batch_size,
                    first_chunk: None,
                }))
            }
            Slot::DoneOther(_) => match std::mem::replace(slot, Slot::Taken) {
                Slot::DoneOther(r) => Poll::Ready(*r),
                _ => Poll::Ready(Err(Error::Closed)),
            },
            Slot::Polled(w) if w.will_wake(cx.waker()) => Poll::Pending,
            Slot::Waiting | Slot::Polled(_) => {
                *slot = Slot::Polled(cx.waker().clone());
                Poll::Pending
            }
            // Polled again after it completed (a misuse): it stays "closed".
            Slot::Taken => Poll::Ready(Err(Error::Closed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_receipt_gets_its_own_result_across_groups() {
        let mut r = Receipts::default();
        let mut pairs: Vec<_> = (0..GROUP * 2 + 3).map(|_| r.next()).collect();
        let mut futures = Vec::new();
        for (i, (tx, rx)) in pairs.drain(..).enumerate() {
            assert!(futures.len() == i);
            if i % 3 == 0 {
                drop(tx); // dropped unfilled: Closed
            } else {
                tx.send(Ok(MessageId::new(1, i as u64, -1)));
            }
            futures.push(rx);
        }
        for (i, f) in futures.iter_mut().enumerate() {
            match f.try_result().expect("complete") {
                Ok(id) => assert_eq!(id.entry_id, i as u64),
                Err(Error::Closed) => assert_eq!(i % 3, 0),
                Err(e) => panic!("{e:?}"),
            }
        }
    }

    /// A batch's receipts are kept as runs of consecutive slots: one run per group crossed,
    /// a new one after a gap (a send of another batch in between). Completed, each send gets
    /// the entry's id with its batch index and the batch size; a waiting future is woken.
    #[tokio::test]
    async fn a_batch_completes_its_runs_in_order_and_wakes_waiters() {
        let mut r = Receipts::default();
        // GROUP - 3 sends fill most of the first group, so the batch crosses into the next.
        let _before: Vec<_> = (0..GROUP - 3).map(|_| r.next()).collect();
        let mut batch = BatchReceipts::default();
        let mut futures = Vec::new();
        for i in 0..8 {
            let (tx, rx) = r.next();
            if i == 5 {
                drop(tx); // another batch's send: a gap (it resolves to `Closed`)
                futures.push((None, rx));
                continue;
            }
            batch.push(tx);
            futures.push((Some(batch.len() as i32 - 1), rx));
        }
        assert_eq!(
            (batch.len(), batch.runs()),
            (7, 3),
            "3 + 2 slots, a gap, then 2"
        );
        let (_, waiting) = futures.remove(0);
        let first = tokio::spawn(waiting);
        tokio::task::yield_now().await;
        batch.complete(MessageId::new(1, 9, -1));
        let got = first.await.unwrap().unwrap();
        assert_eq!((got.entry_id, got.batch_index, got.batch_size), (9, 0, 7));
        for (index, mut f) in futures {
            match (index, f.try_result().unwrap()) {
                (Some(i), Ok(got)) => assert_eq!((got.batch_index, got.batch_size), (i, 7)),
                (None, Err(Error::Closed)) => {}
                other => panic!("{other:?}"),
            }
        }
        // Another partition's id (kept boxed).
        let mut batch = BatchReceipts::default();
        let (tx, mut rx) = r.next();
        batch.push(tx);
        batch.complete(MessageId::new(1, 10, 2));
        let got = rx.try_result().unwrap().unwrap();
        assert_eq!((got.partition, got.batch_index, got.batch_size), (2, 0, 1));
    }

    /// Failed, every send of a batch gets the error; dropped unfilled, `Closed`; taken apart
    /// again, each responder completes its own send.
    #[test]
    fn a_batch_fails_closes_or_comes_apart_send_by_send() {
        let mut r = Receipts::default();
        let mut batch = |n: usize| {
            let mut b = BatchReceipts::default();
            let futures: Vec<_> = (0..n)
                .map(|_| {
                    let (tx, rx) = r.next();
                    b.push(tx);
                    rx
                })
                .collect();
            (b, futures)
        };
        let (b, futures) = batch(GROUP + 2);
        b.fail(&Error::InvalidConfig("no".into()));
        for mut f in futures {
            assert!(matches!(f.try_result(), Some(Err(Error::InvalidConfig(_)))));
        }
        let (b, futures) = batch(3);
        drop(b);
        for mut f in futures {
            assert!(matches!(f.try_result(), Some(Err(Error::Closed))));
        }
        let (b, futures) = batch(GROUP + 1);
        for (i, (tx, mut f)) in b.into_responders().zip(futures).enumerate() {
            assert!(f.try_result().is_none(), "still pending");
            tx.send(Ok(MessageId::new(1, i as u64, -1)));
            assert_eq!(f.try_result().unwrap().unwrap().entry_id, i as u64);
        }
    }

    #[tokio::test]
    async fn a_waiting_future_is_woken() {
        let mut r = Receipts::default();
        let (tx, rx) = r.next();
        let waiter = tokio::spawn(rx);
        tokio::task::yield_now().await;
        tx.send(Ok(MessageId::new(2, 3, -1)));
        assert_eq!(waiter.await.unwrap().unwrap().entry_id, 3);
    }

    /// A future moved to another task (re-polled with another waker) is woken there, once,
    /// and a dropped future leaves its responder harmless.
    #[test]
    fn the_last_waker_is_woken_and_a_dropped_future_is_harmless() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (first, second) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let mut r = Receipts::default();
        let (tx, mut rx) = r.next();
        let poll = |rx: &mut SendFuture, w: &Arc<Count>| {
            let waker = Waker::from(w.clone());
            Pin::new(rx).poll(&mut Context::from_waker(&waker))
        };
        assert!(poll(&mut rx, &first).is_pending());
        assert!(poll(&mut rx, &second).is_pending());
        tx.send(Ok(MessageId::new(1, 2, -1)));
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(matches!(poll(&mut rx, &second), Poll::Ready(Ok(id)) if id.entry_id == 2));
        // Dropped before its result: the responder completes into nothing, alone or in a
        // batch.
        let (tx, rx) = r.next();
        drop(rx);
        tx.send(Err(Error::Closed));
        let (tx, rx) = r.next();
        drop(rx);
        let mut batch = BatchReceipts::default();
        batch.push(tx);
        batch.complete(MessageId::new(1, 3, -1));
    }

    /// Ids kept compactly and those kept boxed (another partition, a chunked message, an
    /// error) come back whole.
    #[test]
    fn every_kind_of_result_comes_back_whole() {
        let mut r = Receipts::new(3, Limits::unlimited());
        let compact = MessageId {
            batch_size: 10,
            ..MessageId::new(7, 8, 3)
        };
        let other_partition = MessageId::new(7, 8, 4);
        let chunked = MessageId {
            first_chunk: Some(crate::message_id::ChunkStart {
                ledger_id: 7,
                entry_id: 6,
            }),
            ..MessageId::new(7, 8, 3)
        };
        for sent in [compact, other_partition, chunked] {
            let (tx, mut rx) = r.next();
            tx.send(Ok(sent));
            let got = rx.try_result().unwrap().unwrap();
            assert_eq!(
                (got, got.batch_size, got.first_chunk),
                (sent, sent.batch_size, sent.first_chunk)
            );
        }
        let (tx, mut rx) = r.next();
        tx.send(Err(Error::InvalidConfig("x".into())));
        assert!(matches!(
            rx.try_result(),
            Some(Err(Error::InvalidConfig(_)))
        ));
    }

    /// A completion hook runs once with its send's result, whichever way the send completes
    /// (alone, in a batch, failed, dropped unfilled, or before the hook was added), and before
    /// the waiting future is woken; sends without a hook in the same group are unaffected.
    #[test]
    fn hooks_run_once_with_their_result_before_the_waker() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Mutex as StdMutex;
        use std::task::Wake;
        type Log = Arc<StdMutex<Vec<String>>>;
        let log: Log = Arc::default();
        let hook = |name: &'static str, log: &Log| -> Hook {
            let log = log.clone();
            Box::new(move |r| {
                let got = match r {
                    Ok(id) => format!("{name}:{}:{}", id.entry_id, id.batch_index),
                    Err(e) => format!("{name}:{e}"),
                };
                log.lock().unwrap().push(got);
            })
        };
        /// Records, when woken, whether its hook had run by then.
        struct Seen(Log, AtomicBool, usize);
        impl Wake for Seen {
            fn wake(self: Arc<Self>) {
                let hooked = self.0.lock().unwrap().len() >= self.2;
                self.1.store(hooked, Ordering::SeqCst);
            }
        }
        let mut r = Receipts::default();
        // Alone: polled first (a waker), then hooked, then filled.
        let (tx, mut rx) = r.next();
        let seen = Arc::new(Seen(log.clone(), AtomicBool::new(false), 1));
        let waker = Waker::from(seen.clone());
        assert!(Pin::new(&mut rx)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        rx.on_complete(hook("alone", &log));
        tx.send(Ok(MessageId::new(1, 5, -1)));
        assert!(
            seen.1.load(Ordering::SeqCst),
            "the hook ran before the wake"
        );
        assert_eq!(rx.try_result().unwrap().unwrap().entry_id, 5);
        // A batch: hooked and plain sends mixed; then a failed one and a dropped one.
        let mut batch = BatchReceipts::default();
        let mut futures = Vec::new();
        for i in 0..3 {
            let (tx, mut rx) = r.next();
            if i != 1 {
                rx.on_complete(hook(["b0", "", "b2"][i], &log));
            }
            batch.push(tx);
            futures.push(rx);
        }
        batch.complete(MessageId::new(1, 6, -1));
        for (i, mut f) in futures.into_iter().enumerate() {
            assert_eq!(f.try_result().unwrap().unwrap().batch_index, i as i32);
        }
        let mut failed = BatchReceipts::default();
        let (tx, mut rx) = r.next();
        rx.on_complete(hook("failed", &log));
        failed.push(tx);
        failed.fail(&Error::Closed);
        let (tx, mut rx) = r.next();
        rx.on_complete(hook("dropped", &log));
        drop(tx);
        // Hooked once already complete: runs at once.
        let (tx, mut rx) = r.next();
        tx.send(Ok(MessageId::new(1, 7, -1)));
        rx.on_complete(hook("late", &log));
        assert_eq!(
            *log.lock().unwrap(),
            [
                "alone:5:-1",
                "b0:6:0",
                "b2:6:2",
                "failed:already closed",
                "dropped:already closed",
                "late:7:-1"
            ]
        );
    }

    #[test]
    fn a_pending_future_stays_pending() {
        let mut r = Receipts::default();
        let (_tx, mut rx) = r.next();
        assert!(rx.try_result().is_none());
        assert!(rx.try_result().is_none());
    }
}
