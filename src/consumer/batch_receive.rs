//! Batch receive, the handle's side: [`Consumer::batch_recv`] (Java's `batchReceive`), the
//! [`Messages`] it returns, and acking (or negatively acking) a batch at once.
//!
//! A batch waits in the queue, not in the future: while a call waits for its bounds it moves
//! the items it counts from the channel to the front of the queue (`Inbound::held`), where
//! they are still queued in every respect (no flow permit, queue room or ack-timeout clock
//! taken, as upstream leaves them in `incomingMessages` until the batch completes). Messages
//! are taken out only in the poll that returns the batch, one by one through the same path as
//! [`Consumer::recv`] (`take_buffered`: permits, room, stats, the ack timeout's count; then the
//! interceptors' `before_consume`). So a call dropped before it completes took nothing: the
//! next `batch_recv`, `recv` or stream poll hands out the same messages, in order.

use std::ops::Deref;
use std::sync::atomic::Ordering;

use crate::consumer::options::BatchReceivePolicy;
use crate::consumer::queue::Item;
use crate::consumer::{topics, Acker, Consumer};
use crate::error::{Error, Result};
use crate::message::Message;

/// The messages of one [`Consumer::batch_recv`], in the order they were received (Java's
/// `Messages`). Derefs to a slice (`len`, `iter`, indexing, `last`, ...); iterate it by
/// value or by reference; ack it whole with [`Consumer::ack_all`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    messages: Vec<Message>,
}

impl Messages {
    /// The messages, as a `Vec`.
    pub fn into_vec(self) -> Vec<Message> {
        self.messages
    }
}

impl Deref for Messages {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.messages
    }
}

impl IntoIterator for Messages {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.into_iter()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

impl From<Messages> for Vec<Message> {
    fn from(m: Messages) -> Self {
        m.messages
    }
}

/// What is queued towards a batch's bounds (upstream `hasEnoughMessagesForBatchReceive`,
/// which counts `incomingMessages` and `incomingMessagesSize`).
#[derive(Debug, Default)]
struct Ready {
    messages: usize,
    /// Payload bytes (upstream `Message.size()`).
    bytes: usize,
    /// An error or end-of-topic notice is queued: the batch ends before it (see
    /// [`Consumer::batch_recv`]).
    stop: bool,
}

impl Ready {
    fn add(&mut self, item: &Item) {
        match item {
            Item::Messages(entry, _) => {
                self.messages += entry.records.len();
                self.bytes += entry.records.iter().map(|r| r.payload.len()).sum::<usize>();
            }
            Item::Discarded(_) | Item::Error(_) | Item::EndOfTopic => self.stop = true,
        }
    }

    fn enough(&self, p: &BatchReceivePolicy) -> bool {
        self.stop
            || (p.max_num_messages > 0 && self.messages >= p.max_num_messages as usize)
            || (p.max_num_bytes > 0 && self.bytes >= p.max_num_bytes)
    }
}

/// A batch being taken out of the queue.
#[derive(Default)]
struct Batch {
    messages: Vec<Message>,
    /// Their payload bytes.
    bytes: usize,
    /// The task of the first message.
    first: Option<usize>,
}

impl Batch {
    /// Adds a message taken out of the queue, through the interceptors.
    fn push(&mut self, consumer: &Consumer, m: Message) {
        self.bytes += m.payload.len();
        self.first.get_or_insert(m.source);
        self.messages.push(if consumer.interceptors.is_some() {
            consumer.consumed(m)
        } else {
            m
        });
    }

    /// Whether a message of task `index` may join (upstream
    /// `notifyPendingBatchReceivedCallBack`: without `messagesFromMultiTopicsEnabled`, only
    /// messages of the first message's topic partition).
    fn joins(&self, p: &BatchReceivePolicy, index: usize) -> bool {
        p.messages_from_multi_topics || self.first.is_none_or(|f| f == index)
    }
}

impl Consumer {
    /// Waits for a batch of messages (Java's `batchReceive`): it completes as soon as one of
    /// the bounds of the consumer's [`BatchReceivePolicy`] is reached (set with
    /// [`ConsumerBuilder::batch_receive_policy`](crate::ConsumerBuilder::batch_receive_policy);
    /// by default 10 MiB of payload or 100 ms) with what was queued then, up to the bounds:
    /// at most `max_num_messages` messages and `max_num_bytes` payload bytes (the first
    /// message always, however large). The timeout counts from the call; a batch cut by it
    /// holds what had arrived, possibly nothing. A consumer of several partitions or topics
    /// fills one batch from all of them (see
    /// [`messages_from_multi_topics`](BatchReceivePolicy#structfield.messages_from_multi_topics)).
    ///
    /// Each message goes through everything [`recv`](Self::recv) does as it is taken (flow
    /// permits, the ack timeout's clock, statistics, the interceptors' `before_consume`), at
    /// the moment the batch completes. `recv` and `batch_recv` can be mixed: both take from
    /// the same queue, in order.
    ///
    /// Errors end a batch, as `recv` reports them: the messages queued before an error (or
    /// before the end of a terminated topic) are returned, and the next call returns it.
    /// Fails with [`Error::Closed`] after [`close`](Self::close), or once the consumer ended
    /// and everything queued was handed out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the messages a call waits with stay queued until the poll that returns
    /// them, so dropping the future (a losing `tokio::select!` branch) loses none; the next
    /// `batch_recv` or `recv` returns them.
    ///
    /// ```no_run
    /// # async fn demo(mut consumer: pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
    /// loop {
    ///     let batch = consumer.batch_recv().await?;
    ///     for msg in &batch {
    ///         // ... process each message
    /// #       let _ = msg;
    ///     }
    ///     consumer.ack_all(&batch)?;
    /// }
    /// # }
    /// ```
    pub async fn batch_recv(&mut self) -> Result<Messages> {
        if self.closed_by_app.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let policy = self.batch_policy;
        // Upstream `ConsumerBase.verifyBatchReceive`: a zero-size queue prefetches nothing, so
        // a batch could only ever wait for its timeout.
        if self.zero_queue.is_some() {
            return Err(Error::InvalidConfig(
                "batch receive needs a receiver queue (receiver_queue_size is 0)".into(),
            ));
        }
        let timeout = (!policy.timeout.is_zero()).then_some(policy.timeout);
        let deadline = tokio::time::sleep(timeout.unwrap_or_default());
        tokio::pin!(deadline);
        let mut ready = self.ready(&policy);
        let mut asked_for_more = false;
        loop {
            if ready.enough(&policy) {
                if let Some(r) = self.take_batch(&policy) {
                    return r;
                }
                // Only stale messages or notices were taken: wait on.
                ready = self.ready(&policy);
                continue;
            }
            // An auto-scaled queue may grow: once per call, as upstream's
            // `internalBatchReceiveAsync` calls `expectMoreIncomingMessages` when the batch is
            // not complete (see `flow::auto_scale`).
            if self.auto_scaled && !asked_for_more {
                asked_for_more = true;
                self.expect_more();
            }
            let next = tokio::select! {
                // The timeout first: upstream's timer completes the batch with what is queued
                // even while more keeps arriving.
                biased;
                () = &mut deadline, if timeout.is_some() => {
                    return self.take_batch(&policy).unwrap_or(Ok(Messages::default()));
                }
                next = self.inbound().rx.recv() => next,
            };
            match next {
                Some(q) => {
                    ready.add(&q.2);
                    self.inbound().held.push_back(q);
                }
                // Every task ended: what is queued, then `Closed` (as `recv`).
                None => return self.take_batch(&policy).unwrap_or(Err(Error::Closed)),
            }
        }
    }

    /// Counts what is queued (a peeked message, the rest of the entry being handed out, the
    /// held items), as far as needed to know whether the batch is complete.
    fn ready(&mut self, p: &BatchReceivePolicy) -> Ready {
        let mut r = Ready::default();
        if let Some(m) = &self.peeked {
            r.messages += 1;
            r.bytes += m.payload.len();
        }
        let inbound = self.inbound();
        for rec in inbound.buffered.records.as_slice() {
            r.messages += 1;
            r.bytes += rec.payload.len();
        }
        for (_, _, item) in &inbound.held {
            if r.enough(p) {
                break;
            }
            r.add(item);
        }
        r
    }

    /// Takes the batch out of the queue (held items first, then the channel's): messages
    /// while they fit (upstream `MessagesImpl.canAdd`: the first always, then within both
    /// bounds), up to an error or notice, or (without `messages_from_multi_topics`) up to a
    /// message of another partition. `None` when nothing but stale messages and notices was
    /// taken; `Some(Err)` when an error comes first.
    fn take_batch(&mut self, p: &BatchReceivePolicy) -> Option<Result<Messages>> {
        let max_messages = match p.max_num_messages {
            0 => usize::MAX,
            n => n as usize,
        };
        let max_bytes = match p.max_num_bytes {
            0 => usize::MAX,
            n => n,
        };
        let mut batch = Batch::default();
        // Sized once for what is queued (a `Message` is ~270 bytes: growing by doubling would
        // move each one again).
        let queued = self.ready(p).messages;
        batch.messages.reserve(queued.min(max_messages));
        if let Some(m) = self.peeked.take() {
            batch.push(self, m);
        }
        while batch.messages.len() < max_messages {
            // The first message always fits (upstream `MessagesImpl.canAdd`).
            let room = if batch.messages.is_empty() {
                usize::MAX
            } else {
                max_bytes.saturating_sub(batch.bytes)
            };
            if let Some(head) = &self.inbound().buffered.head {
                if !batch.joins(p, head.source) {
                    break;
                }
                match self.take_buffered_within(room) {
                    Some(m) => batch.push(self, m),
                    // The next message does not fit.
                    None if self.inbound().buffered.head.is_some() => break,
                    // The entry is done.
                    None => {}
                }
                continue;
            }
            let Some((index, epoch, item)) = self.inbound().try_next() else {
                break;
            };
            match item {
                Item::Messages(..) if !batch.joins(p, index) => {
                    self.inbound().held.push_front((index, epoch, item));
                    break;
                }
                Item::Messages(entry, charge) => {
                    // None: the task's topic was removed (a pattern consumer), as in `accept`.
                    let part = topics::registry::lock(&self.registry).get(index);
                    if let Some(part) = part {
                        self.buffer(part, epoch, entry, charge);
                    }
                }
                // Errors and notices end a batch; the next call takes them.
                item if !batch.messages.is_empty() => {
                    self.inbound().held.push_front((index, epoch, item));
                    break;
                }
                item => match self.accept(index, epoch, item) {
                    Some(Err(e)) => return Some(Err(e)),
                    Some(Ok(m)) => batch.push(self, m),
                    None => {}
                },
            }
        }
        (!batch.messages.is_empty()).then(|| {
            Ok(Messages {
                messages: batch.messages,
            })
        })
    }

    /// Acknowledges every message of a batch (Java's `acknowledge(Messages)`), each as
    /// [`ack`](Self::ack) does; see [`Acker::ack_all`].
    pub fn ack_all<'a>(&self, msgs: impl IntoIterator<Item = &'a Message>) -> Result<()> {
        self.acker.ack_all(msgs)
    }

    /// Negatively acknowledges every message of a batch (Java's
    /// `negativeAcknowledge(Messages)`); see [`Acker::nack_all`].
    pub fn nack_all<'a>(&self, msgs: impl IntoIterator<Item = &'a Message>) -> Result<()> {
        self.acker.nack_all(msgs)
    }

    /// Acknowledges a batch cumulatively: the last message of each partition in it, with
    /// everything before it on that partition; see [`Acker::ack_cumulative_all`].
    pub fn ack_cumulative_all<'a>(
        &self,
        msgs: impl IntoIterator<Item = &'a Message>,
    ) -> Result<()> {
        self.acker.ack_cumulative_all(msgs)
    }
}

impl Acker {
    /// Acknowledges every message of a batch (Java's `acknowledge(Messages)`), each as
    /// [`Acker::ack`] does (one ack each, grouped in the background; interceptors see each).
    /// Takes a [`Messages`] by reference, or any messages: `&Vec<Message>`, a slice, an
    /// iterator of `&Message`.
    ///
    /// Every message is acked that can be; the first error is returned (e.g.
    /// [`Error::Closed`] once the consumer is closed, or a message of another consumer).
    pub fn ack_all<'a>(&self, msgs: impl IntoIterator<Item = &'a Message>) -> Result<()> {
        each(msgs, |m| self.ack(m))
    }

    /// Negatively acknowledges every message of a batch (Java's
    /// `negativeAcknowledge(Messages)`), each as [`Acker::nack`] does; the first error is
    /// returned, after the others were tried.
    pub fn nack_all<'a>(&self, msgs: impl IntoIterator<Item = &'a Message>) -> Result<()> {
        each(msgs, |m| self.nack(m))
    }

    /// Acknowledges a batch cumulatively: for each partition (topic) its messages came from,
    /// [`Acker::ack_cumulative`] of the last one received, which acks everything before it
    /// there too. One cumulative ack would not do for a batch of several partitions: a
    /// cumulative ack is a position on one partition.
    ///
    /// Only on Exclusive and Failover subscriptions: on Shared and Key_Shared ones it fails
    /// with [`Error::InvalidOperation`] and sends nothing (as `ack_cumulative`).
    pub fn ack_cumulative_all<'a>(
        &self,
        msgs: impl IntoIterator<Item = &'a Message>,
    ) -> Result<()> {
        // Refused before anything is sent.
        self.check_cumulative()?;
        // The last message of each task (its topic too: a message of another consumer is
        // refused by `ack_cumulative`, not merged with one of ours).
        let mut last: std::collections::BTreeMap<(usize, &str), &Message> = Default::default();
        for m in msgs {
            last.insert((m.source, m.topic.as_str()), m);
        }
        let last = last.into_values();
        each(last, |m| self.ack_cumulative(m))
    }
}

/// Applies `f` to every message; the first error, once all were tried.
fn each<'a>(
    msgs: impl IntoIterator<Item = &'a Message>,
    mut f: impl FnMut(&Message) -> Result<()>,
) -> Result<()> {
    let mut result = Ok(());
    for m in msgs {
        let r = f(m);
        if result.is_ok() {
            result = r;
        }
    }
    result
}
