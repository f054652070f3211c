//! The producer's pending queue: messages sent (or ready to send) and not yet receipted, in
//! sequence order. Pure bookkeeping, unit-tested without a socket.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::{Duration, Instant};

use crate::codec::EncodedFrame;
use crate::error::{Error, Result};
use crate::message::ProducerMessage;
use crate::message_id::{ChunkStart, MessageId};
use bytes::Bytes;

use super::limits::Limits;
pub(crate) use super::limits::Reservation;
use super::receipt::{BatchReceipts, Responder};

/// A message on its way to the task: its payload and key, and its other fields boxed only
/// when it has any. Most messages are a payload (and perhaps a key), so what moves through the
/// queue (and the calls in between) is a few words instead of a whole [`ProducerMessage`], and
/// nothing is allocated for them.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub payload: Bytes,
    /// The partition key.
    pub key: Option<String>,
    extras: Option<Box<Extras>>,
}

/// The fields of a [`ProducerMessage`] other than its payload and key.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    pub key_b64_encoded: bool,
    pub ordering_key: Option<Bytes>,
    pub properties: std::collections::BTreeMap<String, String>,
    pub event_time: Option<u64>,
    pub sequence_id: Option<u64>,
    pub deliver_at: Option<u64>,
    /// The transaction's id (most, least bits) for a message produced in one (PIP-31).
    pub txn: Option<(u64, u64)>,
}

/// The extras of a message that has none.
static NONE: Extras = Extras {
    key_b64_encoded: false,
    ordering_key: None,
    properties: std::collections::BTreeMap::new(),
    event_time: None,
    sequence_id: None,
    deliver_at: None,
    txn: None,
};

impl Outgoing {
    /// Marks the message as produced in the transaction with this id (most, least bits).
    #[cfg(feature = "transactions")]
    pub(crate) fn set_txn(&mut self, txn: (u64, u64)) {
        self.extras.get_or_insert_with(Default::default).txn = Some(txn);
    }

    /// The message's fields other than its payload and key.
    pub(crate) fn extras(&self) -> &Extras {
        self.extras.as_deref().unwrap_or(&NONE)
    }

    /// The bytes the message holds while pending besides its payload and what its producer
    /// adds to every message: the key, and the ordering key and properties when it has any
    /// (each property also costs its two length prefixes and tags).
    #[inline]
    pub(crate) fn metadata_len(&self) -> usize {
        let key = self.key.as_ref().map_or(0, String::len);
        match &self.extras {
            None => key,
            Some(x) => {
                key + x.ordering_key.as_ref().map_or(0, Bytes::len)
                    + x.properties
                        .iter()
                        .map(|(k, v)| k.len() + v.len() + 8)
                        .sum::<usize>()
            }
        }
    }
}

impl From<ProducerMessage> for Outgoing {
    // Inlined into `Producer::send`: the message is taken apart where it was built, not
    // copied into a call first (~25 instructions a send). The drop of its empty properties
    // map (~55) stays: `BTreeMap`'s drop is not inlined even for a map known to be empty.
    #[inline(always)]
    fn from(msg: ProducerMessage) -> Self {
        // Every field by name, so a field added to `ProducerMessage` must be handled here.
        // Checked by reference first: the common message moves only its payload and key.
        let ProducerMessage {
            payload: _,
            key: _,
            key_b64_encoded,
            ordering_key,
            properties,
            event_time,
            sequence_id,
            deliver_at,
            #[cfg(feature = "transactions")]
                transaction: _,
        } = &msg;
        let none = !key_b64_encoded
            && ordering_key.is_none()
            && properties.is_empty()
            && event_time.is_none()
            && sequence_id.is_none()
            && deliver_at.is_none();
        if none {
            return Outgoing {
                payload: msg.payload,
                key: msg.key,
                extras: None,
            };
        }
        Outgoing {
            payload: msg.payload,
            key: msg.key,
            extras: Some(Box::new(Extras {
                key_b64_encoded: msg.key_b64_encoded,
                ordering_key: msg.ordering_key,
                properties: msg.properties,
                event_time: msg.event_time,
                sequence_id: msg.sequence_id,
                deliver_at: msg.deliver_at,
                txn: None,
            })),
        }
    }
}

/// Completes one application `send`: its responder and what it holds until it is queued.
#[derive(Debug)]
pub(crate) struct Completion {
    /// Given back (through the responder's receipt group) when this is dropped, unless handed
    /// on to its entry: before the send completes, so that the caller, on another thread,
    /// finds it back once it sees the result (as for an entry leaving the pending queue).
    /// Counts are only set on a completion with a responder (the inbox attaches both).
    pub reserved: Reservation,
    pub responder: Option<Responder>,
}

impl Completion {
    pub(crate) fn complete(mut self, result: Result<MessageId>) {
        self.give_back();
        if let Some(tx) = self.responder.take() {
            tx.send(result);
        }
    }

    /// What the send holds and its responder, handed on to the entry that carries it.
    pub(crate) fn into_parts(self) -> (Reservation, Option<Responder>) {
        // Taken apart without running `Drop` (nothing is left to give back): this is on every
        // batched message's path (~20 instructions a message).
        let mut this = std::mem::ManuallyDrop::new(self);
        (this.reserved, this.responder.take())
    }

    /// Gives back what the send holds (before its responder, if any, completes it).
    fn give_back(&mut self) {
        let held = std::mem::take(&mut self.reserved);
        if held.is_empty() {
            return;
        }
        match &self.responder {
            Some(tx) => tx.release(held),
            None => debug_assert!(false, "a send holds {held:?} without a responder"),
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // Before `responder` drops (which resolves the send to `Closed`).
        self.give_back();
    }
}

/// The sends one entry completes. Kept per entry without a [`Completion`] each: what the
/// messages hold is the entry's [`Reservation`], and a message sent on its own needs no
/// allocation of its own for its one responder.
#[derive(Debug, Default)]
pub(crate) enum Senders {
    /// A chunk before the last of its message: it completes nothing.
    #[default]
    None,
    /// A message sent on its own (or the last chunk of a chunked message).
    One(Responder),
    /// The messages of a batch, in batch order (batch indexes from 0). Boxed: one more small
    /// allocation per batch keeps this 16 bytes instead of 40 for every entry.
    Batch(Box<BatchReceipts>),
}

impl Senders {
    /// How many sends this completes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Senders::None => 0,
            Senders::One(_) => 1,
            Senders::Batch(b) => b.len(),
        }
    }

    /// Completes every send with `error`.
    pub(crate) fn fail(self, error: &Error) {
        match self {
            Senders::None => {}
            Senders::One(r) => r.send(Err(error.clone())),
            Senders::Batch(b) => b.fail(error),
        }
    }
}

/// Which chunk of a chunked message (PIP-37) an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkPos {
    /// The chunk's index, from 0.
    pub id: u32,
    /// How many chunks the message has (at least 2).
    pub of: u32,
}

impl ChunkPos {
    fn is_last(self) -> bool {
        self.id + 1 >= self.of
    }
}

/// One entry on the wire as built: a single message, a batch, or one chunk of a chunked
/// message (the chunks of a message are consecutive entries with the same sequence id; only
/// the last one completes the message). [`PendingQueue::push`] keeps it packed.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub first_seq: u64,
    pub last_seq: u64,
    /// The encoded-once SEND frame, kept for re-sending after a reconnect.
    pub encoded: EncodedFrame,
    pub senders: Senders,
    /// Set on a chunk of a chunked message.
    pub chunk: Option<ChunkPos>,
    pub enqueued_at: Instant,
    /// What the entry's messages hold, given back when the entry leaves the queue. An entry
    /// is built and queued (or failed, giving this back) within one call of the task; it is
    /// never dropped in between.
    pub reserved: Reservation,
}

impl InFlight {
    /// How many sends the entry completes.
    pub(crate) fn messages(&self) -> usize {
        self.senders.len()
    }

    /// Whether the entry is a batch.
    #[cfg(test)]
    pub(crate) fn is_batch(&self) -> bool {
        matches!(self.senders, Senders::Batch(_))
    }
}

/// A queued entry: an [`InFlight`] packed (72 bytes instead of 136 plus a 48-byte completion
/// in its own allocation), since tens of thousands of them can be pending. Its permits are
/// kept as counts, given back to the producer's limits when it leaves; its enqueue time as
/// nanoseconds since the queue's base.
#[derive(Debug)]
pub(crate) struct Queued {
    pub first_seq: u64,
    pub last_seq: u64,
    pub encoded: EncodedFrame,
    senders: Senders,
    /// A chunk's position, `of` 0 when the entry is not a chunk (4 bytes less than an
    /// `Option`, which makes the entry 8 bytes smaller).
    chunk: ChunkPos,
    enqueued: Stamp,
    /// What the entry's messages hold.
    reserved: Reservation,
}

impl Queued {
    /// How many sends the entry completes.
    pub(crate) fn messages(&self) -> usize {
        self.senders.len()
    }
}

/// A point in time as nanoseconds since a queue's base (8 bytes instead of an `Instant`'s 16;
/// 2^64 ns are 584 years).
#[derive(Debug, Clone, Copy)]
struct Stamp(u64);

/// The queue's clock for enqueue times.
#[derive(Debug)]
struct Clock {
    base: Instant,
}

impl Clock {
    fn nanos(&self, at: Instant) -> u64 {
        // An instant before the base counts as the base: an age is then never more than the
        // real one (not expected: entries are built after their queue).
        let d = at.saturating_duration_since(self.base);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    fn stamp(&self, at: Instant) -> Stamp {
        Stamp(self.nanos(at))
    }

    fn age(&self, stamp: Stamp, now: Instant) -> Duration {
        Duration::from_nanos(self.nanos(now).saturating_sub(stamp.0))
    }
}

/// What a receipt did to the queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReceiptOutcome {
    /// The head entry completed with this many messages.
    Completed(usize),
    /// A receipt for an entry no longer queued (already completed, timed out or failed).
    Stale,
    /// A receipt ahead of the head: the broker and client disagree (the caller reconnects).
    AheadOfHead { expected: u64, got: u64 },
}

#[derive(Debug)]
pub(crate) struct PendingQueue {
    queue: VecDeque<Queued>,
    messages: usize,
    /// Encoded bytes of the queued entries.
    bytes: usize,
    /// Where the first chunk of the chunked message being receipted was stored (upstream
    /// `ChunkedMessageCtx.firstChunkMessageId`), keyed by its sequence id.
    first_chunk: Option<(u64, ChunkStart)>,
    clock: Clock,
    /// Where the queued entries' permits go back to.
    limits: Arc<Limits>,
}

impl PendingQueue {
    /// An empty queue of a producer taking from `limits`.
    pub(crate) fn new(limits: Arc<Limits>) -> Self {
        PendingQueue {
            queue: VecDeque::new(),
            messages: 0,
            bytes: 0,
            first_chunk: None,
            clock: Clock {
                base: Instant::now(),
            },
            limits,
        }
    }
}

impl Drop for PendingQueue {
    /// Whatever is still queued leaves with the queue: its permits go back (its sends resolve
    /// to `Closed` as their responders drop).
    fn drop(&mut self) {
        for e in self.queue.drain(..) {
            self.limits.release(e.reserved);
        }
    }
}

impl PendingQueue {
    pub(crate) fn push(&mut self, entry: InFlight) {
        let InFlight {
            first_seq,
            last_seq,
            encoded,
            senders,
            chunk,
            enqueued_at,
            reserved,
        } = entry;
        self.messages += senders.len();
        self.bytes += encoded.len();
        self.queue.push_back(Queued {
            first_seq,
            last_seq,
            encoded,
            senders,
            chunk: chunk.unwrap_or(ChunkPos { id: 0, of: 0 }),
            enqueued: self.clock.stamp(enqueued_at),
            reserved,
        });
    }

    /// Gives back what an entry that never reached the queue held.
    pub(crate) fn release(&self, held: Reservation) {
        self.limits.release(held);
    }

    /// Messages pending (not entries).
    pub(crate) fn messages(&self) -> usize {
        self.messages
    }

    /// Encoded bytes pending.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.queue.iter()
    }

    /// The oldest entry.
    pub(crate) fn head(&self) -> Option<&Queued> {
        self.queue.front()
    }

    /// How long `entry` has been queued at `now`.
    pub(crate) fn age(&self, entry: &Queued, now: Instant) -> Duration {
        self.clock.age(entry.enqueued, now)
    }

    /// The highest sequence id queued, if any.
    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.queue.back().map(|e| e.last_seq)
    }

    /// Takes the head entry off the queue: its counts and permits go (the permits before its
    /// sends complete, so a caller whose send completed finds them back).
    fn pop(&mut self) -> Option<(Senders, Option<ChunkPos>, u64)> {
        let e = self.queue.pop_front()?;
        self.messages -= e.senders.len();
        self.bytes -= e.encoded.len();
        self.limits.release(e.reserved);
        let chunk = (e.chunk.of > 0).then_some(e.chunk);
        Some((e.senders, chunk, e.first_seq))
    }

    /// Applies a send receipt. `entry_id(batch_index)` builds the entry's id (called once per
    /// entry; a batch's messages get it with their own batch index and the batch size).
    pub(crate) fn on_receipt(
        &mut self,
        sequence_id: u64,
        entry_id: impl Fn(Option<i32>) -> MessageId,
    ) -> ReceiptOutcome {
        let Some(head) = self.queue.front() else {
            return ReceiptOutcome::Stale;
        };
        if sequence_id < head.first_seq {
            return ReceiptOutcome::Stale;
        }
        if sequence_id > head.first_seq {
            // A later entry's receipt while the head is unanswered. If the head timed out and
            // was removed this is simply the next entry; otherwise the broker skipped one.
            return ReceiptOutcome::AheadOfHead {
                expected: head.first_seq,
                got: sequence_id,
            };
        }
        let Some((senders, chunk, _)) = self.pop() else {
            return ReceiptOutcome::Stale;
        };
        let n = senders.len();
        if let Some(chunk) = chunk {
            // Upstream `ProducerImpl.ackReceived`: every chunk has its own receipt, in order;
            // the first chunk's id is kept and only the last chunk completes the send, with a
            // chunk message id spanning both (`ChunkMessageIdImpl`).
            let here = entry_id(None);
            if chunk.id == 0 {
                self.first_chunk = Some((
                    sequence_id,
                    ChunkStart {
                        ledger_id: here.ledger_id,
                        entry_id: here.entry_id,
                    },
                ));
            }
            if chunk.is_last() {
                let first = self
                    .first_chunk
                    .take()
                    .filter(|(seq, _)| *seq == sequence_id)
                    .map(|(_, start)| start);
                let id = MessageId {
                    first_chunk: first,
                    ..here
                };
                // A chunk's senders are its message's one responder (a chunk is never a
                // batch).
                if let Senders::One(r) = senders {
                    r.send(Ok(id));
                }
            }
            return ReceiptOutcome::Completed(n);
        }
        match senders {
            Senders::None => {}
            Senders::One(r) => r.send(Ok(entry_id(None))),
            // The i-th message of a batch gets the entry's id with batch index i and the
            // batch size.
            Senders::Batch(b) => b.complete(entry_id(Some(0))),
        }
        ReceiptOutcome::Completed(n)
    }

    /// Fails the head message with `error` (e.g. a SendError for exactly that message). A
    /// chunk takes the rest of its chunked message along: a message missing a chunk cannot be
    /// completed.
    #[cfg(test)]
    pub(crate) fn fail_head(&mut self, error: Error) -> usize {
        self.fail_head_counted(error, |_| {})
    }

    /// [`fail_head`](Self::fail_head), calling `count` with the number of failed messages
    /// before completing them (the stats see a failure before its sender does, like upstream's
    /// send callback, which records the stats before completing the application's future).
    pub(crate) fn fail_head_counted(&mut self, error: Error, count: impl FnOnce(usize)) -> usize {
        let Some((senders, chunk, seq)) = self.pop() else {
            return 0;
        };
        let mut failed = vec![senders];
        if let Some(chunk) = chunk {
            self.first_chunk = None;
            let mut last = chunk;
            while !last.is_last() {
                match self.queue.front() {
                    Some(next)
                        if next.first_seq == seq
                            && next.chunk.of > 0
                            && next.chunk.id > last.id =>
                    {
                        last = next.chunk;
                        failed.extend(self.pop().map(|(s, _, _)| s));
                    }
                    _ => break,
                }
            }
        }
        let n: usize = failed.iter().map(Senders::len).sum();
        count(n);
        for senders in failed {
            senders.fail(&error);
        }
        n
    }

    /// Whether the head (oldest) entry has been queued for `timeout` at `now`: upstream's
    /// send-timeout task then fails every pending message (see `ProducerTask::fail_pending`).
    pub(crate) fn head_timed_out(&self, now: Instant, timeout: Duration) -> bool {
        self.queue
            .front()
            .is_some_and(|head| self.clock.age(head.enqueued, now) >= timeout)
    }

    /// Fails everything with `error`, in order; `count` sees each failed message count before
    /// those sends complete.
    pub(crate) fn fail_all(&mut self, error: &Error, mut count: impl FnMut(usize)) -> usize {
        let mut failed = 0;
        while !self.queue.is_empty() {
            failed += self.fail_head_counted(error.clone(), &mut count);
        }
        failed
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
