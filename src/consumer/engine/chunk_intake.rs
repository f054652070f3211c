//! The intake's side of chunked messages: each chunk goes to the
//! [`ChunkAssembler`](crate::consumer::engine::chunks::ChunkAssembler), and its [`Outcome`] is
//! acted on (acks, redeliveries, permits, the reassembled message, an error item).

use tokio::time::Instant;

use crate::codec::Payload;
use crate::message_id::MessageId;
use crate::proto;

use crate::consumer::engine::acks::Acks;
use crate::consumer::engine::chunks::{ChunkHeader, Outcome};
use crate::consumer::engine::decode::decode_sized;
use crate::consumer::engine::flow::Flow;
use crate::consumer::engine::intake::Intake;
use crate::consumer::engine::io::Io;
use crate::consumer::queue::Item;

impl Intake {
    /// A chunk (stored at `entry`) of a chunked message.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_chunk(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        header: ChunkHeader,
        entry: MessageId,
        mut cmd: proto::CommandMessage,
        payload: Payload,
    ) {
        let Payload {
            broker_entry_metadata,
            mut metadata,
            data,
        } = payload;
        flow.observe(data.len(), 1);
        let mut out = self.chunks.add(&header, entry, data, Instant::now());
        let complete = out.complete.take();
        let error = out.error.is_some();
        self.apply_chunk_outcome(io, acks, out);
        let Some((data, whole, ids)) = complete else {
            // A chunk that completes no message gives its permit back at once (upstream
            // `increaseAvailablePermits` for each non-final chunk), so an incomplete message
            // never holds permits (apache/pulsar#26675, #26661). An error item gives it back
            // when the application takes it.
            if !error {
                flow.release(io, 1);
            }
            return;
        };
        // The whole message decodes like one entry: its metadata (the last chunk's; all chunks
        // carry the producer's) without the chunk fields, its id the chunk message id.
        metadata.num_chunks_from_msg = None;
        metadata.chunk_id = None;
        metadata.total_chunk_msg_size = None;
        cmd.message_id = whole.to_proto();
        let max = io.opts.max_chunked_message_bytes;
        let mut payload = Payload {
            broker_entry_metadata,
            metadata,
            data,
        };
        let (messages, held) =
            match decode_sized(&io.entity.topic, io.partition, &cmd, &mut payload, max) {
                Ok(decoded) => decoded,
                Err(bad) => {
                    tracing::warn!(topic = %io.entity.topic, id = %whole, error = %bad.error,
                    "undecodable chunked message discarded");
                    self.ack_chunks(io, acks, ids);
                    io.emit(Item::Discarded(Box::new(bad.error)));
                    return;
                }
            };
        if io.persistent() {
            self.chunk_ids.insert(whole, ids);
        }
        self.deliver(io, flow, acks, messages, held, &cmd.ack_set, 1);
    }

    /// Acts on what the assembler decided, except a completed message.
    pub(crate) fn apply_chunk_outcome(&mut self, io: &mut Io, acks: &mut Acks, out: Outcome) {
        let Outcome {
            ack,
            mut redeliver,
            unassembled,
            error,
            ..
        } = out;
        if !ack.is_empty() {
            self.ack_chunks(io, acks, ack);
        }
        // On Exclusive / Failover a redelivery rewinds the whole subscription (every unacked
        // message comes again), and chunks come in order to this one consumer: an unassembled
        // chunk's first chunk is behind the subscription's position (seek, cumulative ack) or
        // among the chunks of an evicted message, whose own redelivery brings it back. Giving
        // it back after `negative_ack_delay` would rewind the subscription that often until
        // the chunk expires; it is given back once, when it has expired (it is then acked as
        // such when it comes again, leaving no ack hole). Upstream `trackMessage`s it, which
        // without an ack timeout leaves it unacked.
        let expire = io.opts.expire_time_of_incomplete_chunked_message;
        if io.single_active() {
            if !unassembled.is_empty() && io.persistent() && !expire.is_zero() {
                let now = Instant::now();
                for id in unassembled {
                    acks.nacks.add(id, now, expire);
                }
            }
        } else {
            redeliver.extend(unassembled);
        }
        if !redeliver.is_empty() && io.persistent() {
            // Given back through the negative-ack delay: redelivered later, not at once (an
            // evicted message redelivered at once would be evicted again).
            let now = Instant::now();
            for id in redeliver {
                acks.nacks.add(id, now, io.opts.negative_ack_delay);
            }
        }
        if let Some(e) = error {
            tracing::warn!(topic = %io.entity.topic, error = %e, "chunked message refused");
            io.shared
                .discarded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            io.emit(Item::Discarded(Box::new(e)));
        }
    }

    /// Acks chunk entries individually (the task flushes them if that is due: see
    /// [`Acks::ack_entries`]).
    pub(crate) fn ack_chunks(&mut self, io: &Io, acks: &mut Acks, ids: Vec<MessageId>) {
        if io.persistent() {
            acks.ack_entries(ids);
        }
    }
}

impl crate::consumer::ConsumerBuilder {
    /// Chunked messages reassembled at once (default 10, upstream's
    /// `maxPendingChunkedMessage`); see [`ConsumerOptions::max_pending_chunked_messages`].
    ///
    /// [`ConsumerOptions::max_pending_chunked_messages`]: crate::consumer::ConsumerOptions::max_pending_chunked_messages
    pub fn max_pending_chunked_messages(mut self, n: usize) -> Self {
        self.options.max_pending_chunked_messages = n;
        self
    }

    /// Ack (lose) the oldest incomplete chunked message when too many are pending, instead of
    /// letting it be redelivered (default off, upstream's
    /// `autoAckOldestChunkedMessageOnQueueFull`).
    pub fn auto_ack_oldest_chunked_message_on_queue_full(mut self, on: bool) -> Self {
        self.options.auto_ack_oldest_chunked_message_on_queue_full = on;
        self
    }

    /// Drop (and ack) an incomplete chunked message after this long (default 60 s; zero =
    /// never), upstream's `expireTimeOfIncompleteChunkedMessage`.
    pub fn expire_time_of_incomplete_chunked_message(mut self, t: std::time::Duration) -> Self {
        self.options.expire_time_of_incomplete_chunked_message = t;
        self
    }

    /// Bytes held in incomplete chunked messages, in all, per (partition) consumer, and the
    /// largest chunked message accepted (default 128 MiB).
    pub fn max_chunked_message_bytes(mut self, n: usize) -> Self {
        self.options.max_chunked_message_bytes = n;
        self
    }
}
