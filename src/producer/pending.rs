//! The producer's pending queue: messages sent (or ready to send) and not yet receipted, in
//! sequence order. Pure bookkeeping, unit-tested without a socket.

use std::collections::VecDeque;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::message::ProducerMessage;
use crate::message_id::{ChunkStart, MessageId};
use bytes::Bytes;

use super::receipt::Responder;

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
}

/// The extras of a message that has none.
static NONE: Extras = Extras {
    key_b64_encoded: false,
    ordering_key: None,
    properties: std::collections::BTreeMap::new(),
    event_time: None,
    sequence_id: None,
    deliver_at: None,
};

impl Outgoing {
    /// The message's fields other than its payload and key.
    pub(crate) fn extras(&self) -> &Extras {
        self.extras.as_deref().unwrap_or(&NONE)
    }
}

impl From<ProducerMessage> for Outgoing {
    // Inlined into `Producer::send`: the message is taken apart where it was built, not
    // copied into a call first (~25 instructions a send). The drop of its empty properties
    // map (~55) stays: `BTreeMap`'s drop is not inlined even for a map known to be empty.
    #[inline]
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
            })),
        }
    }
}

/// What a message holds while it is pending: client memory for its payload and a slot of the
/// producer's `max_pending_messages`, both given back when this is dropped.
///
/// The messages of a batch hand theirs to the batch ([`merge`](Self::merge)), so the
/// semaphores are released once per entry rather than once per message (each release takes
/// the semaphore's waiter lock). Every message of an entry completes at the same time (receipt,
/// failure, timeout), so they are released exactly when they were before.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    pub memory: Option<OwnedSemaphorePermit>,
    pub slot: Option<OwnedSemaphorePermit>,
}

fn merge_permit(into: &mut Option<OwnedSemaphorePermit>, from: Option<OwnedSemaphorePermit>) {
    match (into.as_mut(), from) {
        (Some(held), Some(more)) => held.merge(more),
        (None, more) => *into = more,
        (Some(_), None) => {}
    }
}

impl Reservation {
    /// Takes over what `other` holds (all permits of a client come from the same semaphores).
    pub(crate) fn merge(&mut self, other: Reservation) {
        merge_permit(&mut self.memory, other.memory);
        merge_permit(&mut self.slot, other.slot);
    }
}

/// Completes one application `send`: its responder and what it holds while pending.
#[derive(Debug)]
pub(crate) struct Completion {
    pub responder: Option<Responder>,
    /// Released when this is dropped (unless handed to its batch).
    pub reserved: Reservation,
}

impl Completion {
    pub(crate) fn complete(mut self, result: Result<MessageId>) {
        if let Some(tx) = self.responder.take() {
            tx.send(result);
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

/// One entry on the wire: a single message, a batch, or one chunk of a chunked message (the
/// chunks of a message are consecutive entries with the same sequence id; only the last one
/// holds the message's completion).
#[derive(Debug)]
pub(crate) struct InFlight {
    pub first_seq: u64,
    pub last_seq: u64,
    /// The encoded-once SEND frame, kept for re-sending after a reconnect.
    pub encoded: Bytes,
    /// One completion per message (in batch order).
    pub completions: Vec<Completion>,
    pub batched: bool,
    /// Set on a chunk of a chunked message.
    pub chunk: Option<ChunkPos>,
    pub enqueued_at: Instant,
    /// What a batch's messages hold (a single message's stays in its completion), released
    /// when the entry leaves the queue.
    pub _reserved: Reservation,
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

#[derive(Debug, Default)]
pub(crate) struct PendingQueue {
    queue: VecDeque<InFlight>,
    messages: usize,
    /// Encoded bytes of the queued entries.
    bytes: usize,
    /// Where the first chunk of the chunked message being receipted was stored (upstream
    /// `ChunkedMessageCtx.firstChunkMessageId`), keyed by its sequence id.
    first_chunk: Option<(u64, ChunkStart)>,
}

impl PendingQueue {
    pub(crate) fn push(&mut self, entry: InFlight) {
        self.messages += entry.completions.len();
        self.bytes += entry.encoded.len();
        self.queue.push_back(entry);
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

    pub(crate) fn iter(&self) -> impl Iterator<Item = &InFlight> {
        self.queue.iter()
    }

    /// The highest sequence id queued, if any.
    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.queue.back().map(|e| e.last_seq)
    }

    /// Applies a send receipt. `entry_id(batch_index)` builds the entry's id (called once; a
    /// batch's messages get it with their own batch index and the batch size).
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
        let Some(entry) = self.queue.pop_front() else {
            return ReceiptOutcome::Stale;
        };
        let n = entry.completions.len();
        self.messages -= n;
        self.bytes -= entry.encoded.len();
        if let Some(chunk) = entry.chunk {
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
                for c in entry.completions {
                    c.complete(Ok(MessageId {
                        first_chunk: first,
                        ..here
                    }));
                }
            }
            return ReceiptOutcome::Completed(n);
        }
        // The i-th message of a batch gets `entry_id(Some(i))`: the entry's id with batch
        // index i (and the batch size), filled in by `send_entry`.
        let batch_size = entry.batched.then_some(n as i32);
        let id = entry_id(batch_size.map(|_| 0));
        super::receipt::send_entry(
            entry
                .completions
                .into_iter()
                .map(|mut c| c.responder.take()),
            id,
            batch_size,
        );
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
        let Some(entry) = self.queue.pop_front() else {
            return 0;
        };
        let mut entries = vec![entry];
        if let Some(chunk) = entries[0].chunk {
            self.first_chunk = None;
            let seq = entries[0].first_seq;
            let mut last = chunk;
            while !last.is_last() {
                match self.queue.front() {
                    Some(next)
                        if next.first_seq == seq && next.chunk.is_some_and(|c| c.id > last.id) =>
                    {
                        last = next.chunk.unwrap_or(last);
                        entries.extend(self.queue.pop_front());
                    }
                    _ => break,
                }
            }
        }
        let n: usize = entries.iter().map(|e| e.completions.len()).sum();
        self.messages -= n;
        for entry in &entries {
            self.bytes -= entry.encoded.len();
        }
        count(n);
        for entry in entries {
            for c in entry.completions {
                c.complete(Err(error.clone()));
            }
        }
        n
    }

    /// Fails, in order, exactly the entries older than `timeout`; returns how many messages.
    /// `count` sees each failed message count before those sends complete.
    pub(crate) fn expire(
        &mut self,
        now: Instant,
        timeout: Duration,
        mut count: impl FnMut(usize),
    ) -> usize {
        let mut failed = 0;
        while let Some(head) = self.queue.front() {
            if now.saturating_duration_since(head.enqueued_at) < timeout {
                break;
            }
            let error = Error::Timeout {
                operation: "send",
                after: timeout,
            };
            failed += self.fail_head_counted(error, &mut count);
        }
        failed
    }

    /// Fails everything with `error`; `count` as for [`expire`](Self::expire).
    pub(crate) fn fail_all(&mut self, error: &Error, mut count: impl FnMut(usize)) -> usize {
        let mut failed = 0;
        while !self.queue.is_empty() {
            failed += self.fail_head_counted(error.clone(), &mut count);
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::receipt::{Receipts, SendFuture};

    fn entry(first: u64, last: u64, at: Instant) -> (InFlight, Vec<SendFuture>) {
        let mut completions = Vec::new();
        let mut rxs = Vec::new();
        for _ in first..=last {
            let (tx, rx) = Receipts::default().next();
            completions.push(Completion {
                responder: Some(tx),
                reserved: Reservation::default(),
            });
            rxs.push(rx);
        }
        (
            InFlight {
                first_seq: first,
                last_seq: last,
                encoded: Bytes::from_static(b"frame"),
                completions,
                batched: last > first,
                chunk: None,
                enqueued_at: at,
                _reserved: Reservation::default(),
            },
            rxs,
        )
    }

    fn id(batch: Option<i32>) -> MessageId {
        MessageId {
            ledger_id: 1,
            entry_id: 2,
            partition: -1,
            batch_index: batch.unwrap_or(-1),
            batch_size: 0,
            first_chunk: None,
        }
    }

    #[tokio::test]
    async fn receipts_complete_in_order_with_batch_indexes() {
        let now = Instant::now();
        let mut q = PendingQueue::default();
        let (a, mut ra) = entry(0, 2, now);
        let (b, mut rb) = entry(3, 3, now);
        q.push(a);
        q.push(b);
        assert_eq!(q.messages(), 4);
        assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Completed(3));
        for (i, rx) in ra.iter_mut().enumerate() {
            let got = rx.try_result().unwrap().unwrap();
            assert_eq!(got.batch_index, i as i32);
            assert_eq!(got.batch_size, 3);
        }
        // A duplicate receipt for the completed batch is stale, not an error.
        assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Stale);
        assert!(rb[0].try_result().is_none(), "still pending");
        assert_eq!(q.on_receipt(3, id), ReceiptOutcome::Completed(1));
        assert_eq!(rb[0].try_result().unwrap().unwrap().batch_index, -1);
        assert!(q.is_empty());
        assert_eq!(q.messages(), 0);
        assert_eq!(q.bytes(), 0);
    }

    #[tokio::test]
    async fn a_receipt_ahead_of_the_head_is_reported() {
        let now = Instant::now();
        let mut q = PendingQueue::default();
        let (a, _ra) = entry(5, 5, now);
        q.push(a);
        assert_eq!(
            q.on_receipt(6, id),
            ReceiptOutcome::AheadOfHead {
                expected: 5,
                got: 6
            }
        );
        assert_eq!(q.messages(), 1);
    }

    #[tokio::test]
    async fn expire_fails_exactly_the_old_entries_in_order() {
        let start = Instant::now();
        let mut q = PendingQueue::default();
        let (a, mut ra) = entry(0, 0, start);
        let (b, mut rb) = entry(1, 1, start + Duration::from_secs(5));
        q.push(a);
        q.push(b);
        assert_eq!(
            q.expire(
                start + Duration::from_secs(31),
                Duration::from_secs(30),
                |_| {}
            ),
            1
        );
        assert!(matches!(
            ra[0].try_result().unwrap(),
            Err(Error::Timeout { .. })
        ));
        assert!(
            rb[0].try_result().is_none(),
            "the younger entry is still pending"
        );
        // Its late receipt would now be for seq 0: stale.
        assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Stale);
        assert_eq!(q.on_receipt(1, id), ReceiptOutcome::Completed(1));
        assert!(rb[0].try_result().unwrap().is_ok());
    }

    #[tokio::test]
    async fn fail_all_fails_everything_once() {
        let now = Instant::now();
        let mut q = PendingQueue::default();
        let (a, mut ra) = entry(0, 1, now);
        q.push(a);
        assert_eq!(q.fail_all(&Error::Closed, |_| {}), 2);
        for rx in ra.iter_mut() {
            assert!(matches!(rx.try_result().unwrap(), Err(Error::Closed)));
        }
        assert_eq!(q.fail_all(&Error::Closed, |_| {}), 0);
    }

    fn chunks(seq: u64, of: u32) -> (Vec<InFlight>, SendFuture) {
        let (tx, rx) = Receipts::default().next();
        let mut out: Vec<InFlight> = (0..of)
            .map(|id| InFlight {
                first_seq: seq,
                last_seq: seq,
                encoded: Bytes::from_static(b"chunk"),
                completions: Vec::new(),
                batched: false,
                chunk: Some(ChunkPos { id, of }),
                enqueued_at: Instant::now(),
                _reserved: Reservation::default(),
            })
            .collect();
        out.last_mut().unwrap().completions.push(Completion {
            responder: Some(tx),
            reserved: Reservation::default(),
        });
        (out, rx)
    }

    #[tokio::test]
    async fn only_the_last_chunk_receipt_completes_with_a_chunk_message_id() {
        let mut q = PendingQueue::default();
        let (entries, mut rx) = chunks(4, 3);
        for e in entries {
            q.push(e);
        }
        assert_eq!(q.messages(), 1, "a chunked message counts once");
        let at = |entry| move |_: Option<i32>| MessageId::new(7, entry, -1);
        assert_eq!(q.on_receipt(4, at(10)), ReceiptOutcome::Completed(0));
        assert!(rx.try_result().is_none());
        assert_eq!(q.on_receipt(4, at(11)), ReceiptOutcome::Completed(0));
        assert!(rx.try_result().is_none());
        assert_eq!(q.on_receipt(4, at(12)), ReceiptOutcome::Completed(1));
        let id = rx.try_result().unwrap().unwrap();
        assert_eq!((id.ledger_id, id.entry_id), (7, 12));
        assert_eq!(id.first_chunk_id(), Some(MessageId::new(7, 10, -1)));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn failing_a_chunk_fails_its_whole_message_and_nothing_else() {
        let mut q = PendingQueue::default();
        let (entries, mut rx) = chunks(1, 3);
        for e in entries {
            q.push(e);
        }
        let (next, mut rnext) = entry(2, 2, Instant::now());
        q.push(next);
        assert_eq!(
            q.on_receipt(1, |_| MessageId::new(1, 1, -1)),
            ReceiptOutcome::Completed(0)
        );
        assert_eq!(q.fail_head(Error::Closed), 1);
        assert!(matches!(rx.try_result().unwrap(), Err(Error::Closed)));
        assert!(
            rnext[0].try_result().is_none(),
            "the next message is untouched"
        );
        assert_eq!(q.messages(), 1);
        assert_eq!(q.iter().next().unwrap().first_seq, 2);
    }
}
