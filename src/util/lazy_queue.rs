//! A multi-producer, single-consumer queue that allocates nothing until its first item: a
//! `VecDeque` behind a mutex, which grows with what traffic queues and gives storage back as
//! it empties (see [`State::pop`]).
//!
//! Every producer and consumer holds such queues, idle or not (issue #39): a tokio unbounded
//! mpsc allocated a block of 32 slots and a cache-padded channel (~0.5 KB) up front for each.
//! Sending is one short lock, and a wake-up only when the receiver waits; receiving takes
//! part in tokio's cooperative budget as the mpsc's receiver did, and is cancel safe (an item
//! is taken out only by a poll that returns it).
//!
//! The queue is unbounded: its owners bound it (the connection's entity channels by flow
//! permits and bytes, a consumer's receive queue by its permits). An owner keeps state of its
//! own beside the items: `L`, under the same lock (updated with each item sent or taken:
//! [`Sender::send_with`], [`Receiver::poll_recv_with`]), and `X`, outside it ([`Chan::ext`]).
//! The receiver's end is the end of the queue: later sends give their item back, and what is
//! queued is dropped with it. The receiver sees the end (`None`) once every sender is gone
//! and the queue is empty.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

pub(crate) use tokio::sync::mpsc::error::TryRecvError;

/// How much of its storage an emptied queue keeps, in slots: at least `min` (a queue that
/// empties after every item would otherwise allocate and free at each one), at most `max`,
/// and in between the size of the recent bursts (see [`State::pop`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retain {
    pub min: u32,
    pub max: u32,
}

/// The owner's state outside the lock (`X`): how much storage its queue keeps, and what
/// happens beside the queue when its receiver goes (nothing unless the owner waits for it:
/// [`Sender::closed`]). A constant, not a field: every queue's bytes count (issue #39).
pub(crate) trait Owner: Send + Sync {
    /// What an emptied queue keeps of its storage.
    const RETAIN: Retain;

    /// The receiver is gone (called once, outside the lock, before what was queued is
    /// dropped).
    fn receiver_closed(&self) {}
}

/// A new queue with the owner's state `locked` (kept under the lock) and `ext` (outside it).
pub(crate) fn channel<T, L, X: Owner>(locked: L, ext: X) -> (Sender<T, L, X>, Receiver<T, L, X>) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            items: VecDeque::new(),
            burst: 0,
            recent: 0,
            senders: 1,
            receiver_gone: false,
            waiting: None,
            locked,
        }),
        ext,
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// What both ends share.
#[derive(Debug)]
pub(crate) struct Chan<T, L, X> {
    state: Mutex<State<T, L>>,
    /// The owner's state outside the lock.
    pub(crate) ext: X,
}

impl<T, L, X> Chan<T, L, X> {
    /// The queue, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<T, L>> {
        // Poisoned only by a panic while held; the queue is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The queue under its lock.
#[derive(Debug)]
pub(crate) struct State<T, L> {
    /// Empty and unallocated until the first item.
    items: VecDeque<T>,
    /// The most items queued at once since the queue was last empty (saturating: `u32`s
    /// keep the queue small, and a burst that large is kept at `Retain::max` anyway).
    burst: u32,
    /// The recent bursts' size: the last one's, or half the one before if larger.
    recent: u32,
    /// Live senders: the receiver sees the end once they are all gone and the queue is empty.
    senders: u32,
    receiver_gone: bool,
    /// The receiver found the queue empty and waits: the next item (or the last sender's
    /// end) wakes it.
    waiting: Option<Waker>,
    /// The owner's state.
    pub(crate) locked: L,
}

impl<T, L> State<T, L> {
    /// Whether the receiver is gone.
    pub(crate) fn receiver_gone(&self) -> bool {
        self.receiver_gone
    }

    /// The slots the queue's storage holds (0 before the first item).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.items.capacity()
    }

    fn push(&mut self, item: T) {
        self.items.push_back(item);
        let len = u32::try_from(self.items.len()).unwrap_or(u32::MAX);
        self.burst = self.burst.max(len);
    }

    /// The next item. An emptied queue gives back the storage beyond what the recent bursts
    /// needed (within [`Retain`]): the size of the last one, or half the size of the one
    /// before if that was larger, so a burst's storage is kept while bursts keep coming and
    /// given back as they shrink. It shrinks only when it holds more than twice that, so a
    /// queue that empties after every item does not reallocate at each.
    #[inline]
    fn pop(&mut self, retain: Retain) -> Option<T> {
        // Inlined (items may be a few hundred bytes: one copy less), the emptying apart.
        let item = self.items.pop_front();
        if item.is_some() && self.items.is_empty() {
            self.emptied(retain);
        }
        item
    }

    /// The queue was just emptied: see [`pop`](Self::pop).
    #[inline(never)]
    fn emptied(&mut self, retain: Retain) {
        self.recent = std::mem::take(&mut self.burst).max(self.recent / 2);
        let keep = self.recent.clamp(retain.min, retain.max) as usize;
        if self.items.capacity() > 2 * keep {
            self.items.shrink_to(keep);
        }
    }
}

/// The sending end; cloned for each sender.
#[derive(Debug)]
pub(crate) struct Sender<T, L, X> {
    chan: Arc<Chan<T, L, X>>,
}

impl<T, L, X> Clone for Sender<T, L, X> {
    fn clone(&self) -> Self {
        self.chan.lock().senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T, L, X> Drop for Sender<T, L, X> {
    /// The last sender's end wakes a waiting receiver (it sees the end once it has taken
    /// what is queued).
    fn drop(&mut self) {
        let mut s = self.chan.lock();
        s.senders -= 1;
        let waiting = if s.senders == 0 {
            s.waiting.take()
        } else {
            None
        };
        drop(s);
        if let Some(w) = waiting {
            w.wake();
        }
    }
}

impl<T, L, X> Sender<T, L, X> {
    /// What both ends share.
    pub(crate) fn chan(&self) -> &Arc<Chan<T, L, X>> {
        &self.chan
    }

    /// Queues `item`, unless the receiver is gone (then it is given back).
    #[inline]
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        self.send_with(item, |_, _| ())
    }

    /// Queues `item` as [`send`](Self::send), after `f` has seen it with the owner's state,
    /// under the lock; returns what `f` returned.
    #[inline]
    pub(crate) fn send_with<R>(&self, item: T, f: impl FnOnce(&mut L, &T) -> R) -> Result<R, T> {
        let mut s = self.chan.lock();
        if s.receiver_gone {
            return Err(item);
        }
        let r = f(&mut s.locked, &item);
        s.push(item);
        let waiting = s.waiting.take();
        drop(s);
        if let Some(w) = waiting {
            w.wake();
        }
        Ok(r)
    }

    /// A sender that does not keep the queue open ([`WeakSender::upgrade`]).
    pub(crate) fn downgrade(&self) -> WeakSender<T, L, X> {
        WeakSender {
            chan: self.chan.clone(),
        }
    }

    /// Whether the receiver is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.chan.lock().receiver_gone
    }
}

impl<T, L, X: AsRef<tokio::sync::Notify>> Sender<T, L, X> {
    /// Completes once the receiver is gone (as `mpsc::UnboundedSender::closed`). One future
    /// waits for many wake-ups without registering again.
    pub(crate) async fn closed(&self) {
        loop {
            // Made before the check: a receiver gone after it wakes it (`notify_waiters`
            // reaches every `Notified` made before the call, polled or not).
            let notified = self.chan.ext.as_ref().notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// A sender that does not count as one: the receiver may see the end while it exists.
#[derive(Debug)]
pub(crate) struct WeakSender<T, L, X> {
    chan: Arc<Chan<T, L, X>>,
}

impl<T, L, X> Clone for WeakSender<T, L, X> {
    fn clone(&self) -> Self {
        WeakSender {
            chan: self.chan.clone(),
        }
    }
}

impl<T, L, X> WeakSender<T, L, X> {
    /// A sender again, unless every sender is gone (the receiver may have seen the end).
    pub(crate) fn upgrade(&self) -> Option<Sender<T, L, X>> {
        let mut s = self.chan.lock();
        if s.senders == 0 {
            return None;
        }
        s.senders += 1;
        drop(s);
        Some(Sender {
            chan: self.chan.clone(),
        })
    }
}

/// The receiving end.
#[derive(Debug)]
pub(crate) struct Receiver<T, L, X: Owner> {
    chan: Arc<Chan<T, L, X>>,
}

impl<T, L, X: Owner> Drop for Receiver<T, L, X> {
    /// Later sends find the queue closed; what is queued is dropped now.
    fn drop(&mut self) {
        let (items, ()) = self.close_with(|_| ());
        drop(items);
    }
}

impl<T, L, X: Owner> Receiver<T, L, X> {
    /// What both ends share.
    pub(crate) fn chan(&self) -> &Arc<Chan<T, L, X>> {
        &self.chan
    }

    /// The next item, with what `f` returned having seen it (taken) with the owner's state,
    /// under the lock; `None` once every sender is gone and nothing is left. Like tokio's
    /// channels, an item taken costs the task's cooperative budget, and a task out of budget
    /// yields first.
    #[inline]
    pub(crate) fn poll_recv_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(&mut L, &T) -> R,
    ) -> Poll<Option<(T, R)>> {
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut s = self.chan.lock();
        match s.pop(X::RETAIN) {
            Some(item) => {
                coop.made_progress();
                let r = f(&mut s.locked, &item);
                Poll::Ready(Some((item, r)))
            }
            None if s.senders == 0 => Poll::Ready(None),
            None => {
                match &s.waiting {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.waiting = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    /// [`poll_recv_with`](Self::poll_recv_with) without the owner's state.
    #[inline]
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_recv_with(cx, |_, _| ())
            .map(|next| next.map(|(item, ())| item))
    }

    /// The next item (see [`poll_recv`](Self::poll_recv)). Cancel safe.
    #[inline]
    pub(crate) async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// An item already queued, without waiting, with what `f` returned (as
    /// [`poll_recv_with`](Self::poll_recv_with)).
    #[inline]
    pub(crate) fn try_recv_with<R>(
        &mut self,
        f: impl FnOnce(&mut L, &T) -> R,
    ) -> Result<(T, R), TryRecvError> {
        let mut s = self.chan.lock();
        match s.pop(X::RETAIN) {
            Some(item) => {
                let r = f(&mut s.locked, &item);
                Ok((item, r))
            }
            None if s.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// An item already queued, without waiting.
    #[inline]
    pub(crate) fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.try_recv_with(|_, _| ()).map(|(item, ())| item)
    }

    /// Closes the queue (later sends give their item back) and takes what it holds, for the
    /// caller to drop outside the lock; `f` updates the owner's state under it. The first
    /// call tells the owner ([`Owner::receiver_closed`]); later ones find the queue empty.
    pub(crate) fn close_with<R>(&mut self, f: impl FnOnce(&mut L) -> R) -> (VecDeque<T>, R) {
        let (items, r, first) = {
            let mut s = self.chan.lock();
            let first = !std::mem::replace(&mut s.receiver_gone, true);
            s.waiting = None;
            let r = f(&mut s.locked);
            (std::mem::take(&mut s.items), r, first)
        };
        if first {
            self.chan.ext.receiver_closed();
        }
        (items, r)
    }
}

#[cfg(test)]
#[path = "lazy_queue_tests.rs"]
mod tests;
