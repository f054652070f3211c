//! Receiving, the handle's side: taking the partition tasks' queued items in order
//! (discarding what a reconnect or seek made stale, counting what is taken for flow permits),
//! the end of the topics, [`Consumer::recv`] and the `Stream` impl, and the interceptors'
//! `before_consume` as a message is handed out.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;

use crate::consumer::entry::Record;
use crate::consumer::handle::PartitionShared;
use crate::consumer::op::ConsumerOp;
use crate::consumer::queue::{self, Item, Queued};
use crate::consumer::{topics, Consumer};
use crate::error::{Error, Result};
use crate::message::Message;

impl Consumer {
    /// The queue and the entry being handed out, without a lock (see [`queue::Inbound`]).
    #[inline]
    pub(super) fn inbound(&mut self) -> &mut queue::Inbound {
        self.queue
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Accepts a queued item (only once the entry before it is handed out): discards messages
    /// from before a reconnect or seek, counts consumption for flow permits, remembers the
    /// position. `None` = discarded.
    pub(super) fn accept(
        &mut self,
        index: usize,
        epoch: u64,
        item: Item,
    ) -> Option<Result<Message>> {
        // None: the task's topic was removed (a pattern consumer); its items are dropped.
        let p = topics::registry::lock(&self.registry).get(index)?;
        match item {
            Item::Messages(entry, charge) => {
                self.buffer(p, epoch, entry, charge);
                self.take_buffered().map(Ok)
            }
            Item::Discarded(e) => {
                // Out of the queue: room for another message (see `QueueRoom`).
                if let Some(n) = p.taken(epoch, p.refill_at, false) {
                    let _ = p.send_op(ConsumerOp::Flow(n));
                }
                Some(Err(*e))
            }
            // Errors are never sent again: they reach the application whatever the epoch.
            Item::Error(e) => Some(Err(*e)),
            // One partition (or topic) at its end is no error (Java MultiTopicsConsumerImpl);
            // the end is reported once, when every one of them got there.
            // Counted once the handle took the notice, so every message the partitions queued
            // before their notices is handed out before the end is.
            // A notice queued before a seek: the consumer is no longer at the end.
            Item::EndOfTopic if epoch < p.end_epoch.load(Ordering::Acquire) => None,
            Item::EndOfTopic => {
                p.handles.end_taken.store(true, Ordering::Release);
                let all_taken = self.every_current(|p| p.handles.end_taken.load(Ordering::Acquire));
                if self.end_reported || !all_taken {
                    return None;
                }
                self.end_reported = true;
                Some(Err(Error::TopicTerminated {
                    topic: self.topic.to_string(),
                }))
            }
        }
    }

    /// Makes a queued entry of `p` the one being handed out (the one before it is done).
    #[inline]
    pub(super) fn buffer(
        &mut self,
        p: std::sync::Arc<PartitionShared>,
        epoch: u64,
        entry: crate::consumer::entry::Entry,
        charge: crate::consumer::engine::budget::Charge,
    ) {
        debug_assert!(self.inbound().buffered.records.as_slice().is_empty());
        self.inbound().buffered = queue::Buffered {
            part: Some(p),
            epoch,
            head: Some(entry.head),
            records: entry.records.into_iter(),
            charge: Some(charge),
        };
    }

    /// Whether the consumer reached the end of its terminated topic: the broker said so for
    /// every partition of every topic (a multi-topic or pattern consumer: of each topic it
    /// has now; with `retry_enable`, of the retry topic too), like Java's
    /// `hasReachedEndOfTopic` (`MultiTopicsConsumerImpl`: all of its consumers). `false`
    /// while the consumer has no topic (a pattern consumer that matched none).
    ///
    /// A consumer at the end stays a consumer, as in Java: attached to its subscription,
    /// able to ack, seek and unsubscribe, and [`close`](Self::close) detaches it on the
    /// broker. The flag stays set once set (also after a seek, as Java's).
    pub fn has_reached_end_of_topic(&self) -> bool {
        self.every_current(|p| p.reached_end.load(Ordering::Acquire))
    }

    /// Whether the consumer has a current partition (topic not deleted nor removed) and
    /// `check` holds for each.
    fn every_current(&self, check: impl Fn(&PartitionShared) -> bool) -> bool {
        let live = self.live();
        let mut current = live
            .iter()
            .filter(|p| !p.handles.removed.load(Ordering::Acquire))
            .peekable();
        current.peek().is_some() && current.all(|p| check(p))
    }

    /// The next message of the entry being handed out, if any. Each one counts as taken out
    /// of the queue here (flow permits, room, the ack timeout's clock), like one queued alone.
    /// The public `Message` is built here, from its compact record (see `entry`), straight
    /// into the result (inlined into `recv`: a `Message` is ~270 bytes, each move a `memcpy`).
    #[inline]
    pub(super) fn take_buffered(&mut self) -> Option<Message> {
        // No bound: the check below is compiled out.
        self.take_buffered_within(usize::MAX)
    }

    /// [`Consumer::take_buffered`], but a current message whose payload is longer than
    /// `max_bytes` stays where it is, untaken and uncounted (a batch it does not fit in ends
    /// before it, see `batch_receive`): `None` with the entry still buffered.
    #[inline(always)]
    pub(super) fn take_buffered_within(&mut self, max_bytes: usize) -> Option<Message> {
        let r = self.take_record_within(max_bytes)?;
        Some(self.message_of(r))
    }

    /// The public message of a record just taken from the entry being handed out.
    #[inline(always)]
    fn message_of(&mut self, r: Record) -> Message {
        match &self.inbound().buffered.head {
            Some(head) => head.message(r),
            // `take_record_within` hands out records only with their head.
            None => unreachable!("a buffered record without its head"),
        }
    }

    /// [`Consumer::take_buffered_within`]'s record, its message not built yet: the caller
    /// builds it where it returns it (see [`Consumer::poll_recv`]).
    #[inline(always)]
    fn take_record_within(&mut self, max_bytes: usize) -> Option<Record> {
        loop {
            let b = &mut self.inbound().buffered;
            let p = b.part.as_ref()?;
            let Some(r) = b.records.as_slice().first() else {
                // Done with the entry: its task and buffer are let go.
                self.inbound().buffered = queue::Buffered::default();
                return None;
            };
            if p.handles.removed.load(Ordering::Acquire) {
                // The task's topic was removed: what it queued is dropped uncounted.
                self.inbound().buffered = queue::Buffered::default();
                return None;
            }
            if r.payload.len() > max_bytes && b.epoch == p.epoch.load(Ordering::Acquire) {
                return None;
            }
            // Out of the queue: room for another message (see `QueueRoom`).
            if let Some(n) = p.taken(b.epoch, p.refill_at, true) {
                let _ = p.send_op(ConsumerOp::Flow(n));
            }
            // A message queued before a reconnect, seek or redeliver-all is discarded (the
            // broker sends it again); its permit was counted above like upstream's
            // `messageProcessed` on a stale message, so the broker can send its replacement.
            let current = if p.durable {
                b.epoch == p.epoch.load(Ordering::Acquire)
            } else {
                // Checked and recorded under one lock, which a new epoch takes too (see
                // `PartitionShared::new_epoch`): a reader resumes exactly after what it handed
                // out.
                let mut last = p.last_dequeued();
                let current = b.epoch == p.epoch.load(Ordering::Acquire);
                if let (true, Some(head)) = (current, &b.head) {
                    *last = Some(head.id_of(r));
                }
                current
            };
            if current && b.head.is_some() {
                p.stats.received(r.payload.len());
                let r = b.records.next()?;
                if b.records.as_slice().is_empty() {
                    // The entry's last message: its bytes leave the consumer's budget now,
                    // not at the next `recv` (a task waiting for room must not wait for it).
                    b.charge = None;
                }
                return Some(r);
            }
            b.records.next();
        }
    }

    /// Waits for the next message. After the consumer is closed for good (closed by the broker,
    /// failed ...) this returns that error once, then [`Error::Closed`]. After
    /// [`close`](Self::close) it fails with [`Error::Closed`] at once, even with messages still
    /// queued (as Java's `receive`): they were never handed out and the broker gives them to
    /// another consumer.
    ///
    /// Once every partition of every topic reached the end of its terminated topic (see
    /// [`has_reached_end_of_topic`](Self::has_reached_end_of_topic)), this returns
    /// [`Error::TopicTerminated`] once, after the messages received before; the consumer
    /// stays open (Java tells its listener `reachedEndOfTopic` and its `receive` waits): a
    /// later `recv` waits for messages (e.g. after a seek), and [`close`](Self::close)
    /// detaches it on the broker.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it completes (e.g. when another branch of a
    /// `tokio::select!` wins) never loses a message; the next `recv` returns it. A message
    /// is taken out of the queue only in the poll that returns it. The same holds for the
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) impl.
    ///
    /// The recommended loop receives, hands the message to a task with an
    /// [`Acker`](crate::Acker) and stops
    /// on a shutdown signal (see `examples/pipeline.rs` for a complete service):
    ///
    /// ```no_run
    /// # async fn demo(mut consumer: pulsar_sdk::Consumer,
    /// #     shutdown: impl std::future::Future<Output = ()>) -> pulsar_sdk::Result<()> {
    /// let acker = consumer.acker();
    /// tokio::pin!(shutdown);
    /// loop {
    ///     tokio::select! {
    ///         _ = &mut shutdown => break,
    ///         msg = consumer.recv() => {
    ///             let msg = msg?;
    ///             let acker = acker.clone();
    ///             tokio::spawn(async move {
    ///                 // ... process, then:
    ///                 let _ = acker.ack(&msg);
    ///             });
    ///         }
    ///     }
    /// }
    /// consumer.close().await
    /// # }
    /// ```
    // A future written by hand rather than an `async fn`: its `poll` returns the message
    // built straight into the caller's `Poll` (a `Message` is ~290 bytes). The `async fn`'s
    // state machine (two await points and the interceptors' branch) built it in a slot of
    // its own and copied it out: ~64 instructions per message on the consume loop.
    pub fn recv(&mut self) -> impl std::future::Future<Output = Result<Message>> + '_ {
        Recv {
            consumer: self,
            asking: Asking::NotYet,
        }
    }

    /// [`Consumer::recv`]'s poll: a message of the entry being handed out, else the next
    /// queued item; with a zero-size or auto-scaled receiver queue the receive asks for one
    /// (see [`Consumer::poll_asking`]).
    #[inline(always)]
    fn poll_recv(&mut self, cx: &mut Context<'_>, asking: &mut Asking) -> Poll<Result<Message>> {
        if self.closed_by_app.load(Ordering::Relaxed) {
            return Poll::Ready(Err(Error::Closed));
        }
        // Each message the application takes goes through the interceptors' `before_consume`
        // (Java `ConsumerBase.beforeConsume`, as `receive` returns it) on a path of its own:
        // without interceptors the message goes to the result as it did before there were
        // any, and the check is all that is left.
        // The result is built where it is returned, the interceptors given it in place: a
        // message moved by value (into a call, out of an `Option`) is copied each time.
        if let Some(m) = self.peeked.take() {
            let mut out = Poll::Ready(Ok(m));
            self.intercept(&mut out);
            return out;
        }
        if let Some(r) = self.take_record_within(usize::MAX) {
            if self.interceptors.is_some() {
                return self.intercepted_record(r);
            }
            return Poll::Ready(Ok(self.message_of(r)));
        }
        loop {
            let next = if self.zero_queue.is_none() && !self.auto_scaled {
                self.inbound().poll_next(cx)
            } else {
                self.poll_asking(cx, asking)
            };
            let Some((index, epoch, item)) = std::task::ready!(next) else {
                return Poll::Ready(Err(Error::Closed));
            };
            // Taken: a zero-size queue's wait ends here (not when the future is dropped).
            *asking = Asking::NotYet;
            if let Some(r) = self.accept(index, epoch, item) {
                let mut out = Poll::Ready(r);
                self.intercept(&mut out);
                return out;
            }
            // Discarded: the next item is asked for as by a receive of its own.
        }
    }

    /// The next item of a zero-size or auto-scaled receiver queue: one queued already, else
    /// one asked of the broker while the receive waits (see [`Waiting`]), or, auto-scaled,
    /// after telling the partition tasks that the application found the queue empty.
    #[cold]
    fn poll_asking(&mut self, cx: &mut Context<'_>, asking: &mut Asking) -> Poll<Option<Queued>> {
        if let Asking::Waits { .. } = asking {
            return self.inbound().poll_next(cx);
        }
        // A receive asks for itself (a stream's earlier ask is no longer its wait).
        self.more_expected = false;
        // What a cancelled `batch_recv` left at the front of the queue comes first (only
        // with an auto-scaled queue: a zero-size one refuses batch receive), then what is
        // queued already.
        if let Poll::Ready(next) = self.inbound().poll_next(cx) {
            // Asked for by a stream poll left waiting, perhaps: no longer waited for.
            if let (Some(p), Some(_)) = (&self.zero_queue, &next) {
                p.room().waiting = false;
            }
            return Poll::Ready(next);
        }
        // Nothing queued (and this poll's waker is registered): ask, and wait.
        *asking = Asking::Waits {
            _wait: self.zero_queue.clone().map(Waiting::begin),
        };
        if self.auto_scaled {
            self.expect_more();
        }
        Poll::Pending
    }

    /// An auto-scaled receiver queue was found empty: each partition task hears of it (Java
    /// `expectMoreIncomingMessages`, see `flow::auto_scale`).
    ///
    /// Sent under the registry's lock (sending never blocks): nothing is allocated.
    #[cold]
    pub(super) fn expect_more(&self) {
        let tasks = topics::registry::lock(&self.registry);
        for p in tasks
            .iter()
            .filter(|p| !p.topic_deleted.load(Ordering::Acquire))
        {
            let _ = p.send_op(ConsumerOp::RecvWaits);
        }
    }

    /// The interceptors' `before_consume` on a message `recv` returns, in place (see
    /// [`Consumer::poll_recv`]): without interceptors the check is all it costs.
    #[inline(always)]
    fn intercept(&self, out: &mut Poll<Result<Message>>) {
        if self.interceptors.is_some() {
            if let Poll::Ready(Ok(m)) = out {
                self.intercepted(m);
            }
        }
    }

    /// The message of a record taken, through the interceptors' `before_consume`; out of
    /// line, so that without interceptors the message is built right into `recv`'s result.
    #[cold]
    #[inline(never)]
    fn intercepted_record(&mut self, r: Record) -> Poll<Result<Message>> {
        let mut m = self.message_of(r);
        self.intercepted(&mut m);
        Poll::Ready(Ok(m))
    }

    /// [`Consumer::intercept`]'s call, out of line.
    #[cold]
    #[inline(never)]
    fn intercepted(&self, m: &mut Message) {
        if let Some(c) = &self.interceptors {
            c.before_consume(m);
        }
    }

    /// A message the application takes, through the interceptors' `before_consume`; out of
    /// line (see [`Consumer::recv`]).
    #[cold]
    #[inline(never)]
    pub(super) fn consumed(&self, mut m: Message) -> Message {
        self.intercepted(&mut m);
        m
    }
}

/// The future of [`Consumer::recv`]. Cancel safe: an item is taken out of the queue only in
/// the poll that returns its message; dropped while waiting, its [`Waiting`] (if any) ends.
struct Recv<'a> {
    consumer: &'a mut Consumer,
    asking: Asking,
}

/// Where a receive of a zero-size or auto-scaled receiver queue is in asking for a message.
enum Asking {
    /// Not asked yet: the next empty look asks.
    NotYet,
    /// Asked (with the zero-size queue's wait, if it is one): the receive waits.
    Waits {
        /// Held until the receive returns or is dropped.
        _wait: Option<Waiting>,
    },
}

impl std::future::Future for Recv<'_> {
    type Output = Result<Message>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Message>> {
        let this = self.get_mut();
        this.consumer.poll_recv(cx, &mut this.asking)
    }
}

/// A receive of a zero-size receiver queue waiting for a message (Java
/// `ZeroQueueConsumerImpl.waitingOnReceiveForZeroQueueSize`): the task keeps one permit out
/// meanwhile (see `flow::zero`). Dropped with the receive (it returned, or was cancelled): no
/// more is asked, and a message already asked for waits in the queue for the next receive.
struct Waiting(Arc<PartitionShared>);

impl Waiting {
    /// A receive begins to wait: asks, whatever was asked before (the task never keeps more
    /// than one permit out, so asking again costs nothing on the wire).
    fn begin(p: Arc<PartitionShared>) -> Self {
        p.room().waiting = true;
        let _ = p.send_op(ConsumerOp::RecvWaits);
        Waiting(p)
    }

    /// A stream poll found nothing: marks the partition's receive waiting and asks its task
    /// for one message, once per wait (a stream is polled at every wake-up).
    fn ask(p: &PartitionShared) {
        let asked = std::mem::replace(&mut p.room().waiting, true);
        if !asked {
            let _ = p.send_op(ConsumerOp::RecvWaits);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.room().waiting = false;
    }
}

impl Stream for Consumer {
    type Item = Result<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.closed_by_app.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        // As in `recv`: the interceptors on a path of their own.
        if let Some(m) = self.peeked.take() {
            if self.interceptors.is_some() {
                return Poll::Ready(Some(Ok(self.consumed(m))));
            }
            return Poll::Ready(Some(Ok(m)));
        }
        if let Some(r) = self.take_record_within(usize::MAX) {
            if self.interceptors.is_some() {
                return self.intercepted_record(r).map(Some);
            }
            return Poll::Ready(Some(Ok(self.message_of(r))));
        }
        loop {
            match self.inbound().poll_next(cx) {
                Poll::Ready(Some((index, epoch, item))) => {
                    if let Some(p) = &self.zero_queue {
                        p.room().waiting = false;
                    }
                    // The wait (if any) is over: the next one tells the tasks again.
                    self.more_expected = false;
                    if let Some(r) = self.accept(index, epoch, item) {
                        if self.interceptors.is_some() {
                            return Poll::Ready(Some(r.map(|m| self.consumed(m))));
                        }
                        return Poll::Ready(Some(r));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => {
                    // A zero-size queue: asked once per wait (see `Waiting`); a stream polled
                    // no more keeps its ask, so at most one message waits for its next poll.
                    if let Some(p) = &self.zero_queue {
                        Waiting::ask(p);
                    } else if self.auto_scaled && !self.more_expected {
                        // Auto-scaled: the tasks are told once per wait too (one growth per
                        // empty queue found, as upstream's one `expectMoreIncomingMessages`
                        // per receive), not at every wake-up of a stream polled again.
                        self.more_expected = true;
                        self.expect_more();
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
