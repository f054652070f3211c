//! Reassembly of chunked messages (PIP-37): the chunks of one message, keyed by the uuid the
//! producer gave it, are appended in order into one buffer; the last chunk completes it.
//!
//! Follows upstream `ConsumerImpl.processMessageChunk` / `ChunkedMessageCtx`, with the bugs
//! upstream fixed later avoided by construction (each named where it applies):
//! - bounded: at most `max_pending_chunked_messages` contexts (the oldest is evicted) and at
//!   most `max_chunked_message_bytes` claimed by them in all; a claim above that is refused
//!   before anything is allocated for it. Memory follows what arrived, not what a first chunk
//!   claims (the buffer grows with the chunks), and it is charged to the consumer's byte
//!   budget (see `budget`), with what each chunk costs besides its bytes: with the budget
//!   full, only the task holding the consumer's oldest incomplete message gets permits, so
//!   incomplete messages complete one after the other instead of all growing; at most
//!   [`MAX_CHUNKS_PER_MESSAGE`] chunks per message;
//! - constant work per chunk: a duplicate is recognised by its chunk id's slot, not by a scan
//!   of the chunks held;
//! - one index (`contexts`, with `order` holding the same uuids oldest first): every removal
//!   goes through [`ChunkAssembler::remove`], so nothing is left behind in either
//!   (apache/pulsar#26658);
//! - no permits are held by a context: the task gives back the permit of every chunk that
//!   does not complete a message as it arrives (upstream `increaseAvailablePermits` for each
//!   non-final chunk), so an evicted or expired context owes the broker nothing
//!   (apache/pulsar#26675, #26661);
//! - expiry runs on the consumer task, like assembly: a context is either completed or expired,
//!   never both (apache/pulsar#26084).
//!
//! The assembler only decides; the task acts on an [`Outcome`] (acks, redeliveries, the
//! completed payload, an error item).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::consumer::engine::budget::{Charge, ChunkedTicket, ConsumerBudget};

use crate::error::Error;
use crate::message_id::{ChunkStart, MessageId};
use crate::proto;

/// How many refused uuids are remembered (so their later chunks are dropped, not treated as
/// orphans); bounded, oldest forgotten first.
const REFUSED_MEMORY: usize = 64;

/// The most chunks one chunked message may have (a larger `num_chunks_from_msg` is refused
/// with the first chunk). Upstream producers split at the broker's maximum message size
/// (5 MiB by default: 26 chunks for a 128 MiB message); 262,144 chunks are a 128 MiB message
/// in chunks of 512 bytes. What each chunk costs besides its bytes ([`CHUNK_COST`]) is charged
/// to the budget as well.
pub(crate) const MAX_CHUNKS_PER_MESSAGE: u32 = 1 << 18;

/// What the assembler keeps per chunk besides its bytes (its entry id, with room to grow).
pub(crate) const CHUNK_COST: usize = 2 * std::mem::size_of::<MessageId>();

/// The reassembly knobs (from [`ConsumerOptions`](crate::consumer::ConsumerOptions)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkLimits {
    pub max_pending: usize,
    pub auto_ack_oldest: bool,
    pub expire: Duration,
    pub max_bytes: usize,
}

impl ChunkLimits {
    pub(crate) fn from_options(o: &crate::consumer::ConsumerOptions) -> Self {
        ChunkLimits {
            max_pending: o.max_pending_chunked_messages.max(1),
            auto_ack_oldest: o.auto_ack_oldest_chunked_message_on_queue_full,
            expire: o.expire_time_of_incomplete_chunked_message,
            max_bytes: o.max_chunked_message_bytes.max(1),
        }
    }
}

/// One incomplete chunked message.
#[derive(Debug)]
struct Ctx {
    num_chunks: u32,
    /// The size the first chunk claimed (what is counted against the byte cap).
    total_size: usize,
    /// The chunks' bytes so far; grown as they arrive (never to the claim up front).
    buf: Vec<u8>,
    /// The entry ids of the chunks appended so far, in chunk order.
    ids: Vec<MessageId>,
    created: Instant,
    /// Its place among the consumer's incomplete chunked messages (dropped before `charge`,
    /// so the release that `charge` wakes tasks with already sees it gone).
    _ticket: Option<ChunkedTicket>,
    /// The bytes this message holds in the consumer's budget (its buffer's capacity and
    /// [`CHUNK_COST`] per chunk); given back when the context goes (completed, evicted,
    /// expired, refused or cleared), by dropping it.
    charge: Option<Charge>,
}

impl Ctx {
    /// Whether chunk `chunk_id` was appended from entry `id` (a redelivery of the same
    /// entry): its slot is looked at, in constant time.
    fn holds_chunk(&self, chunk_id: u32, id: &MessageId) -> bool {
        self.ids
            .get(chunk_id as usize)
            .is_some_and(|c| c.ledger_id == id.ledger_id && c.entry_id == id.entry_id)
    }

    /// Appends a chunk's bytes, growing the buffer (doubling, at most to the claim) and the
    /// charge with it.
    fn append(&mut self, data: &[u8]) {
        let before = self.buf.capacity();
        let need = self.buf.len() + data.len();
        if need > before {
            let target = need
                .max(self.buf.len().saturating_mul(2))
                .min(self.total_size);
            self.buf.reserve_exact(target.max(need) - self.buf.len());
        }
        self.buf.extend_from_slice(data);
        if let Some(c) = &mut self.charge {
            c.grow(self.buf.capacity() - before + CHUNK_COST);
        }
    }
}

/// What the task does after a chunk (or an expiry pass).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// A completed message: its whole payload (as the producer compressed it) and the id
    /// spanning its first and last chunk.
    pub complete: Option<(Bytes, MessageId, Vec<MessageId>)>,
    /// Chunks to ack now: duplicates, chunks of a corrupted or expired message, or of one
    /// evicted with `auto_ack_oldest_chunked_message_on_queue_full`.
    pub ack: Vec<MessageId>,
    /// Chunks of an evicted message, to give back for redelivery.
    pub redeliver: Vec<MessageId>,
    /// Chunks that cannot be assembled now (first chunk missing, out of order) and are not
    /// yet old enough to be acked: the task gives them back on a Shared subscription (the
    /// first chunk may be on its way to this consumer again) and leaves them on a
    /// single-active one (see `Intake::apply_chunk_outcome`).
    pub unassembled: Vec<MessageId>,
    /// An error item for the application (a refused or corrupted chunked message).
    pub error: Option<Error>,
}

/// The chunk fields of a message's metadata.
#[derive(Debug, Clone)]
pub(crate) struct ChunkHeader {
    pub uuid: String,
    pub chunk_id: i32,
    pub num_chunks: i32,
    pub total_size: i32,
    pub publish_time: u64,
}

impl ChunkHeader {
    /// The chunk fields of `meta` when it is a chunk of a message split in more than one.
    pub(crate) fn of(meta: &proto::MessageMetadata) -> Option<ChunkHeader> {
        let num_chunks = meta.num_chunks_from_msg?;
        (num_chunks > 1).then(|| ChunkHeader {
            uuid: meta.uuid.clone().unwrap_or_default(),
            chunk_id: meta.chunk_id.unwrap_or(-1),
            num_chunks,
            total_size: meta.total_chunk_msg_size.unwrap_or(-1),
            publish_time: meta.publish_time,
        })
    }
}

/// The chunked messages of one (partition) consumer being reassembled.
#[derive(Debug)]
pub(crate) struct ChunkAssembler {
    limits: ChunkLimits,
    contexts: HashMap<String, Ctx>,
    /// The uuids of `contexts`, oldest first.
    order: VecDeque<String>,
    /// Bytes claimed by the contexts (their `total_size`s).
    claimed: usize,
    refused: VecDeque<String>,
    /// The consumer's byte budget, which incomplete messages count in, and this task's
    /// index in it.
    budget: Option<(Arc<ConsumerBudget>, usize)>,
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ChunkAssembler {
    pub(crate) fn new(limits: ChunkLimits) -> Self {
        ChunkAssembler {
            limits,
            contexts: HashMap::new(),
            order: VecDeque::new(),
            claimed: 0,
            refused: VecDeque::new(),
            budget: None,
        }
    }

    /// Counts the bytes of incomplete messages in the consumer's byte budget (drawn from the
    /// client memory limit within the consumers' share: see `budget`). Like upstream's
    /// `MemoryLimitController.forceReserveMemory` for received messages, charging never waits
    /// and never fails; a full budget makes the tasks withhold permits, except the one
    /// holding the consumer's oldest incomplete message (`ConsumerBudget::may_force`).
    pub(crate) fn with_budget(mut self, budget: Arc<ConsumerBudget>, task: usize) -> Self {
        self.budget = Some((budget, task));
        self
    }

    /// Incomplete chunked messages held.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.contexts.len()
    }

    /// Bytes claimed by the incomplete messages held.
    #[cfg(test)]
    pub(crate) fn claimed(&self) -> usize {
        self.claimed
    }

    /// The entry of the earliest first chunk of the incomplete messages held (where a
    /// non-durable subscription created again must resume for them to complete).
    pub(crate) fn earliest_first_chunk(&self) -> Option<MessageId> {
        self.contexts
            .values()
            .filter_map(|c| c.ids.first())
            .min()
            .copied()
    }

    /// Forgets everything (a re-subscribe: the broker redelivers every unacked chunk).
    pub(crate) fn clear(&mut self) {
        self.contexts.clear();
        self.order.clear();
        self.claimed = 0;
    }

    /// The one way out of both indexes (apache/pulsar#26658: nothing left behind).
    fn remove(&mut self, uuid: &str) -> Option<Ctx> {
        let ctx = self.contexts.remove(uuid)?;
        self.order.retain(|u| u != uuid);
        self.claimed = self.claimed.saturating_sub(ctx.total_size);
        Some(ctx)
    }

    /// Evicts the oldest context (upstream `removeOldestPendingChunkedMessage`): its chunks
    /// are acked with `auto_ack_oldest`, otherwise given back for redelivery.
    fn evict_oldest(&mut self, out: &mut Outcome) {
        let Some(uuid) = self.order.front().cloned() else {
            return;
        };
        if let Some(ctx) = self.remove(&uuid) {
            tracing::info!(%uuid, chunks = ctx.ids.len(), acked = self.limits.auto_ack_oldest,
                "evicting the oldest incomplete chunked message");
            if self.limits.auto_ack_oldest {
                out.ack.extend(ctx.ids);
            } else {
                out.redeliver.extend(ctx.ids);
            }
        }
    }

    /// Chunks that cannot be assembled (out of order, first chunk missing): acked if the
    /// message is older than the expiry (it can no longer complete), otherwise given back for
    /// redelivery (upstream acks or `trackMessage`s the chunk; here the whole context's
    /// chunks go with it, so none is left unacked and untracked: #21101, #26395).
    fn give_up(&self, publish_time: u64, ids: Vec<MessageId>, out: &mut Outcome) {
        let expire = self.limits.expire.as_millis() as u64;
        if expire > 0 && now_millis() > publish_time.saturating_add(expire) {
            out.ack.extend(ids);
        } else {
            out.unassembled.extend(ids);
        }
    }

    fn refuse(&mut self, uuid: &str, id: MessageId, why: String, out: &mut Outcome) {
        if let Some(ctx) = self.remove(uuid) {
            out.ack.extend(ctx.ids);
        }
        if !self.refused.iter().any(|u| u == uuid) {
            if self.refused.len() >= REFUSED_MEMORY {
                self.refused.pop_front();
            }
            self.refused.push_back(uuid.to_owned());
        }
        out.ack.push(id);
        out.error = Some(Error::InvalidMessage(format!(
            "chunked message {uuid} (chunk at {id}) refused: {why}"
        )));
    }

    /// Adds the chunk stored at `id` (its entry id). `data` is the chunk's payload as stored.
    pub(crate) fn add(
        &mut self,
        h: &ChunkHeader,
        id: MessageId,
        data: Bytes,
        now: Instant,
    ) -> Outcome {
        let mut out = Outcome::default();
        let uuid = h.uuid.as_str();
        if let Some(i) = self.refused.iter().position(|u| u == uuid) {
            if h.chunk_id != 0 {
                // A later chunk of a message already refused: dropped like it.
                out.ack.push(id);
                return out;
            }
            // A first chunk again starts a new message (like #21070 below): the uuid is
            // `producerName-sequenceId`, which a producer of the same name started again (its
            // sequence ids from 0, without deduplication) reuses. The refusal was for the old
            // one (its first chunk is acked); forget it rather than drop the new message.
            self.refused.remove(i);
        }
        let (Ok(num_chunks), Ok(chunk_id), Ok(total)) = (
            u32::try_from(h.num_chunks),
            u32::try_from(h.chunk_id),
            usize::try_from(h.total_size),
        ) else {
            self.refuse(uuid, id, "negative chunk header fields".into(), &mut out);
            return out;
        };
        if uuid.is_empty() || chunk_id >= num_chunks || num_chunks > MAX_CHUNKS_PER_MESSAGE {
            self.refuse(
                uuid,
                id,
                format!("chunk {chunk_id} of {num_chunks}"),
                &mut out,
            );
            return out;
        }
        // Every producer (upstream's `ProducerImpl` and the other official clients) chunks
        // only a non-empty payload, into `ceil(size / chunk size)` chunks of at least one
        // byte each. A chunk without bytes, or a count above the claimed size, is a broken
        // header: refused, so a context's chunk ids stay bounded by the bytes it claims (and
        // `max_chunked_message_bytes`) instead of growing with every empty chunk until expiry.
        if data.is_empty() || (chunk_id == 0 && num_chunks as usize > total) {
            let why = format!(
                "chunk {chunk_id} of {num_chunks} carries {} of {total} bytes",
                data.len()
            );
            self.refuse(uuid, id, why, &mut out);
            return out;
        }
        if chunk_id == 0 {
            if total > self.limits.max_bytes {
                // Refused before anything is reserved or allocated for the claim.
                let why = format!(
                    "it claims {total} bytes, above max_chunked_message_bytes ({})",
                    self.limits.max_bytes
                );
                self.refuse(uuid, id, why, &mut out);
                return out;
            }
            if let Some(old) = self.remove(uuid) {
                // A first chunk again (apache/pulsar#21070): the producer re-sent the message,
                // or the broker redelivers it. The new first chunk starts a new context (the
                // old one is not kept, and the new one is not lost with it). If the old chunks
                // are other entries than the ones coming again, they will never be part of a
                // delivered message: acked, so they leave no ack hole (#21101).
                if !old.holds_chunk(0, &id) {
                    out.ack.extend(old.ids);
                }
            }
            while self.contexts.len() >= self.limits.max_pending
                || self.claimed.saturating_add(total) > self.limits.max_bytes
            {
                if self.order.is_empty() {
                    break;
                }
                self.evict_oldest(&mut out);
            }
            let (ticket, charge) = match &self.budget {
                Some((b, task)) => (Some(b.chunked_message(*task)), Some(b.charge(0, false))),
                None => (None, None),
            };
            self.contexts.insert(
                uuid.to_owned(),
                Ctx {
                    num_chunks,
                    total_size: total,
                    buf: Vec::new(),
                    ids: Vec::new(),
                    created: now,
                    _ticket: ticket,
                    charge,
                },
            );
            self.order.push_back(uuid.to_owned());
            self.claimed = self.claimed.saturating_add(total);
        }
        let Some(ctx) = self.contexts.get_mut(uuid) else {
            // A chunk whose first chunk was not seen (or whose context is gone).
            tracing::info!(%uuid, %id, chunk_id, "chunk without its message's first chunk");
            self.give_up(h.publish_time, vec![id], &mut out);
            return out;
        };
        let expected = ctx.ids.len() as u32;
        if chunk_id < expected {
            // A duplicate (apache/pulsar#21101): filtered, the context kept. Acked only when
            // it is another entry than the one assembled (a producer's duplicate); the same
            // entry again is a redelivery, acked with the message.
            if !ctx.holds_chunk(chunk_id, &id) {
                out.ack.push(id);
            }
            return out;
        }
        if chunk_id > expected || num_chunks != ctx.num_chunks {
            // Out of order (apache/pulsar#16796): a chunk is missing. The context is dropped.
            tracing::info!(%uuid, %id, chunk_id, expected, "chunk out of order; message dropped");
            if let Some(ctx) = self.remove(uuid) {
                let mut ids = ctx.ids;
                ids.push(id);
                self.give_up(h.publish_time, ids, &mut out);
            }
            return out;
        }
        if ctx.buf.len().saturating_add(data.len()) > ctx.total_size {
            let why = format!("its chunks exceed the {} bytes it claimed", ctx.total_size);
            self.refuse(uuid, id, why, &mut out);
            return out;
        }
        ctx.append(&data);
        ctx.ids.push(id);
        if chunk_id + 1 < num_chunks {
            return out;
        }
        let Some(ctx) = self.remove(uuid) else {
            return out;
        };
        if ctx.buf.len() != ctx.total_size {
            // Corrupted: acked (it can never be delivered), with an error item.
            out.error = Some(Error::InvalidMessage(format!(
                "chunked message {uuid} (last chunk at {id}) refused: {} bytes assembled of {} \
                 claimed",
                ctx.buf.len(),
                ctx.total_size
            )));
            out.ack.extend(ctx.ids);
            return out;
        }
        let mut whole = id;
        whole.first_chunk = ctx.ids.first().map(|f| ChunkStart {
            ledger_id: f.ledger_id,
            entry_id: f.entry_id,
        });
        out.complete = Some((Bytes::from(ctx.buf), whole, ctx.ids));
        out
    }

    /// When the oldest incomplete message expires (`None`: nothing held or no expiry).
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        if self.limits.expire.is_zero() {
            return None;
        }
        let oldest = self.order.front()?;
        self.contexts
            .get(oldest)
            .map(|c| c.created + self.limits.expire)
    }

    /// Drops the incomplete messages older than the expiry; their chunks are acked
    /// (upstream `removeExpireIncompleteChunkedMessages` acks them too).
    pub(crate) fn expire(&mut self, now: Instant) -> Outcome {
        let mut out = Outcome::default();
        while let Some(due) = self.next_expiry() {
            if due > now {
                break;
            }
            let Some(uuid) = self.order.front().cloned() else {
                break;
            };
            if let Some(ctx) = self.remove(&uuid) {
                tracing::info!(%uuid, chunks = ctx.ids.len(), "incomplete chunked message expired");
                out.ack.extend(ctx.ids);
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "chunks_tests.rs"]
mod tests;
