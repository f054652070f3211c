//! Accumulates messages into batches and turns messages and batches into SEND frames.

use bytes::Bytes;
use tokio::time::Instant;

use crate::batch::{BatchBuilder, SingleMessageFields};
use crate::compression::{self, CompressionType};
use crate::error::{Error, Result};
use crate::message::now_millis;
use crate::proto;

use super::options::BatchingOptions;
use super::pending::{ChunkPos, Completion, InFlight, Outgoing, Reservation, Senders};
use super::receipt::BatchReceipts;

/// What every SEND of one producer shares.
#[derive(Debug, Clone)]
pub(crate) struct FrameContext {
    pub producer_id: u64,
    pub producer_name: String,
    pub compression: CompressionType,
    pub max_message_size: usize,
    /// The schema version of ProducerSuccess, carried by every message.
    pub schema_version: Option<Bytes>,
    /// End-to-end encryption of every SEND payload (feature `encryption`).
    pub sealer: Sealer,
}

/// What seals a producer's payloads: its encryptor, when it encrypts.
#[cfg(feature = "encryption")]
pub(crate) type Sealer = Option<std::sync::Arc<crate::crypto::Encryptor>>;
/// Nothing without the `encryption` feature.
#[cfg(not(feature = "encryption"))]
pub(crate) type Sealer = ();

impl FrameContext {
    /// The size limit messages are built to: the broker's, less what encryption adds to each
    /// SEND (its metadata and tag), so that a sealed batch or chunk still fits.
    pub(crate) fn limit_for(sealer: &Sealer, broker_max: usize) -> usize {
        #[cfg(feature = "encryption")]
        if let Some(e) = sealer {
            return broker_max.saturating_sub(e.overhead()).max(1);
        }
        let _ = sealer;
        broker_max
    }
}

fn properties(msg: &Outgoing) -> Vec<proto::KeyValue> {
    let msg = msg.extras();
    if msg.properties.is_empty() {
        // The common case, without setting up an iterator over an empty map.
        return Vec::new();
    }
    msg.properties
        .iter()
        .map(|(k, v)| proto::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// Compresses `payload` (when the producer compresses).
pub(super) fn compress(ctx: &FrameContext, payload: Bytes) -> Result<Bytes> {
    if ctx.compression == CompressionType::None {
        Ok(payload)
    } else {
        compression::compress(ctx.compression, &payload)
    }
}

/// Checks metadata plus payload against the broker's size limit, as the broker counts it.
fn check_size(ctx: &FrameContext, metadata: &proto::MessageMetadata, data: &Bytes) -> Result<()> {
    use prost::Message as _;
    let size = metadata.encoded_len() + data.len();
    if size > ctx.max_message_size {
        return Err(Error::MessageTooBig {
            size,
            max: ctx.max_message_size,
        });
    }
    Ok(())
}

/// Encodes a SEND frame once: it is written from these bytes, and re-sent from them after a
/// reconnect (the checksum is computed here, in place).
pub(super) fn encode(
    ctx: &FrameContext,
    send: &proto::CommandSend,
    metadata: proto::MessageMetadata,
    data: Bytes,
) -> Result<crate::codec::EncodedFrame> {
    // Upstream order: compress, (chunk,) encrypt, send: each SEND payload (a message, a whole
    // batch, or one chunk) is sealed on its own, with its own IV (Java `ProducerImpl
    // .encryptMessage`, called per chunk by `serializeAndSendMessage`).
    #[cfg(feature = "encryption")]
    let (metadata, data) = match &ctx.sealer {
        Some(e) => {
            let mut metadata = metadata;
            let data = e.seal(&mut metadata, data)?;
            (metadata, data)
        }
        None => (metadata, data),
    };
    let payload = crate::codec::Payload {
        broker_entry_metadata: None,
        metadata,
        data,
    };
    Ok(crate::codec::encode_send(
        send,
        &payload,
        ctx.max_message_size
            .saturating_add(crate::codec::FRAME_HEADROOM),
    )?)
}

/// The metadata of a message sent on its own (not in a batch); `raw_len` is its
/// uncompressed payload size.
pub(super) fn message_metadata(
    ctx: &FrameContext,
    msg: &Outgoing,
    sequence_id: u64,
) -> proto::MessageMetadata {
    let (payload_len, props, key) = (msg.payload.len(), properties(msg), &msg.key);
    let msg = msg.extras();
    let compressed = ctx.compression != CompressionType::None;
    proto::MessageMetadata {
        producer_name: ctx.producer_name.clone(),
        sequence_id,
        publish_time: now_millis(),
        properties: props,
        partition_key: key.clone(),
        partition_key_b64_encoded: msg.key_b64_encoded.then_some(true),
        ordering_key: msg.ordering_key.clone(),
        event_time: msg.event_time,
        schema_version: ctx.schema_version.clone(),
        compression: compressed.then(|| ctx.compression.to_proto()),
        uncompressed_size: compressed.then_some(payload_len as u32),
        deliver_at_time: msg.deliver_at.map(|t| t as i64),
        // Upstream `ProducerImpl` sets the txn id in the metadata and on CommandSend.
        txnid_most_bits: msg.txn.map(|t| t.0),
        txnid_least_bits: msg.txn.map(|t| t.1),
        ..Default::default()
    }
}

/// The pending entry of one SEND frame, without completions (the caller adds the message's
/// to its last entry).
pub(super) fn entry(
    ctx: &FrameContext,
    mut send: proto::CommandSend,
    metadata: proto::MessageMetadata,
    data: Bytes,
    sequence_id: u64,
    chunk: Option<ChunkPos>,
) -> Result<InFlight> {
    // A message of a transaction (never batched) carries its id on each SEND too, every chunk
    // included (upstream `Commands.newSend` with the txn id; the broker reads it from there).
    send.txnid_most_bits = metadata.txnid_most_bits;
    send.txnid_least_bits = metadata.txnid_least_bits;
    Ok(InFlight {
        first_seq: sequence_id,
        last_seq: sequence_id,
        encoded: encode(ctx, &send, metadata, data)?,
        senders: Senders::None,
        chunk,
        enqueued_at: Instant::now(),
        reserved: Reservation::default(),
    })
}

/// Builds the frame of a single, non-batched message.
pub(crate) fn single_message_entry(
    ctx: &FrameContext,
    msg: Outgoing,
    sequence_id: u64,
    completion: Completion,
) -> std::result::Result<InFlight, (Error, Completion)> {
    let data = match compress(ctx, msg.payload.clone()) {
        Ok(d) => d,
        Err(e) => return Err((e, completion)),
    };
    let metadata = message_metadata(ctx, &msg, sequence_id);
    single_entry_from(ctx, metadata, data, sequence_id, completion)
}

/// [`single_message_entry`] from the message's metadata and (compressed) payload, already
/// built (the chunker builds them to measure the message).
pub(crate) fn single_entry_from(
    ctx: &FrameContext,
    metadata: proto::MessageMetadata,
    data: Bytes,
    sequence_id: u64,
    completion: Completion,
) -> std::result::Result<InFlight, (Error, Completion)> {
    if let Err(e) = check_size(ctx, &metadata, &data) {
        return Err((e, completion));
    }
    let send = crate::commands::send(ctx.producer_id, sequence_id, sequence_id, 1);
    match entry(ctx, send, metadata, data, sequence_id, None) {
        Ok(mut e) => {
            let (reserved, responder) = completion.into_parts();
            e.senders = responder.map_or(Senders::None, Senders::One);
            e.reserved = reserved;
            Ok(e)
        }
        Err(e) => Err((e, completion)),
    }
}

/// The `SingleMessageMetadata` of `msg` in a batch.
fn single_fields<'a>(
    msg: &'a Outgoing,
    properties: &'a [proto::KeyValue],
    sequence_id: u64,
) -> SingleMessageFields<'a> {
    let key = msg.key.as_deref();
    let msg = msg.extras();
    SingleMessageFields {
        properties,
        partition_key: key,
        partition_key_b64_encoded: msg.key_b64_encoded,
        event_time: msg.event_time,
        ordering_key: msg.ordering_key.as_deref(),
        sequence_id: Some(sequence_id),
        ..Default::default()
    }
}

/// Which key-based batch a message joins: its ordering key when it has one, else its partition
/// key (Java's `BatchMessageKeyBasedContainer.getKey`, Go's `getMessageKey`). Without key-based
/// batching every message joins the one open batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BatchKey {
    Any,
    Ordering(Bytes),
    Partition(String),
    NoKey,
}

impl BatchKey {
    fn of(msg: &Outgoing, key_based: bool) -> Self {
        match (key_based, &msg.extras().ordering_key, &msg.key) {
            (false, _, _) => BatchKey::Any,
            (true, Some(k), _) => BatchKey::Ordering(k.clone()),
            (true, None, Some(k)) => BatchKey::Partition(k.clone()),
            (true, None, None) => BatchKey::NoKey,
        }
    }

    /// Whether `msg` belongs to a batch of this key (without allocating).
    fn matches(&self, msg: &Outgoing) -> bool {
        match (self, &msg.extras().ordering_key, &msg.key) {
            (BatchKey::Any, _, _) => true,
            (BatchKey::Ordering(k), Some(o), _) => k == o,
            (BatchKey::Partition(k), None, Some(p)) => k == p,
            (BatchKey::NoKey, None, None) => true,
            _ => false,
        }
    }
}

/// Fails every message of `b` with `error`: their completions again, the first one holding
/// what the whole batch held (given back before any of them completes).
fn fail_batch(b: &mut OpenBatch, error: &Error, failed: &mut Vec<(Error, Completion)>) {
    let mut reserved = std::mem::take(&mut b.reserved);
    let receipts = std::mem::take(&mut b.receipts);
    failed.extend(receipts.into_responders().map(|responder| {
        let completion = Completion {
            reserved: std::mem::take(&mut reserved),
            responder: Some(responder),
        };
        (error.clone(), completion)
    }));
}

/// One open batch.
#[derive(Debug)]
struct OpenBatch {
    key: BatchKey,
    /// The first message's partition key and ordering key, which the batch's own metadata
    /// carries: the broker routes a Key_Shared entry by them.
    partition_key: Option<String>,
    key_b64_encoded: bool,
    ordering_key: Option<Bytes>,
    /// An upper bound of the encoded size of the batch's `MessageMetadata`.
    metadata_bound: usize,
    builder: BatchBuilder,
    /// The messages' receipts (what they hold is merged into `reserved`).
    receipts: BatchReceipts,
    /// What the batch's messages hold, released once for the whole entry.
    reserved: Reservation,
    first_seq: u64,
    last_seq: u64,
    opened_at: Instant,
}

impl Drop for OpenBatch {
    /// A batch dropped open (its task ended without flushing it) gives back what its
    /// messages hold, through their receipt group; a finished batch handed it on.
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.reserved);
        if !held.is_empty() {
            self.receipts.release(held);
        }
    }
}

/// The parts of a batch's metadata known only when it is sent.
struct BatchFields {
    last_seq: u64,
    messages: usize,
    /// The uncompressed payload size.
    raw_len: usize,
    publish_time: u64,
    compression: CompressionType,
}

impl BatchFields {
    /// The largest values each field can take, for a bound of the metadata's encoded size.
    fn upper_bound(compression: CompressionType) -> Self {
        BatchFields {
            last_seq: u64::MAX,
            messages: i32::MAX as usize,
            raw_len: u32::MAX as usize,
            publish_time: u64::MAX,
            compression,
        }
    }
}

/// The `MessageMetadata` of a batch. Like Java's `Commands.initBatchMessageMetadata` (called by
/// `BatchMessageContainerImpl.add` for a batch's first message), the batch carries its first
/// message's partition key and ordering key: the broker's Key_Shared dispatcher picks the
/// consumer of a whole entry from them. With key-based batching every message of the batch has
/// that key; the consumer reads each message's own keys from its `SingleMessageMetadata`.
fn batch_metadata(
    ctx: &FrameContext,
    first_seq: u64,
    b: &OpenBatch,
    f: BatchFields,
) -> proto::MessageMetadata {
    let compressed = f.compression != CompressionType::None;
    proto::MessageMetadata {
        producer_name: ctx.producer_name.clone(),
        sequence_id: first_seq,
        highest_sequence_id: Some(f.last_seq),
        publish_time: f.publish_time,
        num_messages_in_batch: Some(f.messages as i32),
        partition_key: b.partition_key.clone(),
        partition_key_b64_encoded: b.key_b64_encoded.then_some(true),
        ordering_key: b.ordering_key.clone(),
        schema_version: ctx.schema_version.clone(),
        compression: compressed.then(|| f.compression.to_proto()),
        uncompressed_size: compressed.then_some(f.raw_len as u32),
        ..Default::default()
    }
}

impl OpenBatch {
    fn new(
        ctx: &FrameContext,
        msg: &Outgoing,
        key: BatchKey,
        first_seq: u64,
        builder: BatchBuilder,
    ) -> Self {
        let partition_key = msg.key.clone();
        let msg = msg.extras();
        let mut b = OpenBatch {
            key,
            partition_key,
            key_b64_encoded: msg.key_b64_encoded,
            ordering_key: msg.ordering_key.clone(),
            metadata_bound: 0,
            builder,
            receipts: BatchReceipts::default(),
            reserved: Reservation::default(),
            first_seq,
            last_seq: first_seq,
            opened_at: Instant::now(),
        };
        use prost::Message as _;
        b.metadata_bound =
            batch_metadata(ctx, u64::MAX, &b, BatchFields::upper_bound(ctx.compression))
                .encoded_len();
        b
    }

    /// Whether `record` more payload bytes keep the batch within the broker's limit (metadata
    /// plus uncompressed payload, as Go's `batchContainer.hasSpace` bounds it).
    fn fits(&self, record: usize, max_message_size: usize) -> bool {
        self.metadata_bound + self.builder.size_bytes() + record <= max_message_size
    }
}

/// Open batches (one, or one per key with key-based batching).
#[derive(Debug)]
pub(crate) struct BatchContainer {
    options: BatchingOptions,
    open: Vec<OpenBatch>,
    /// The builder of the last batch sent, for the next batch: its buffer's allocation is
    /// reused once the sent batch's bytes are dropped (at the latest when the frame is
    /// encoded), instead of a new buffer growing from empty for every batch.
    spare: BatchBuilder,
}

impl BatchContainer {
    pub(crate) fn new(options: BatchingOptions) -> Self {
        BatchContainer {
            options,
            open: Vec::new(),
            spare: BatchBuilder::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// When the oldest open batch must be sent.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.open
            .iter()
            .map(|b| crate::util::later(b.opened_at, self.options.max_publish_delay))
            .min()
    }

    /// Whether the message should not join a batch: it fills one on its own, or its payload
    /// alone is over the broker's limit (it is then sent on its own, where the limit is checked
    /// after compression, so a failure is only its own). [`add`](Self::add) also sends a message
    /// alone when the metadata of a batch would push it over the limit.
    pub(crate) fn too_big_for_batch(&self, msg: &Outgoing, max_message_size: usize) -> bool {
        msg.payload.len() >= self.options.max_bytes || msg.payload.len() >= max_message_size
    }

    /// Adds a message; batches that became full, or must close before it to keep every entry
    /// within the broker's `max_message_size`, go to `out` (failures to `failed`).
    // Its one caller is the send path (`ProducerTask::build_send`): inlined there whichever
    // codegen unit each lands in (outlined, a send paid ~40 instructions more, hot_paths).
    #[inline]
    pub(crate) fn add(
        &mut self,
        ctx: &FrameContext,
        msg: Outgoing,
        sequence_id: u64,
        completion: Completion,
        out: &mut Vec<InFlight>,
        failed: &mut Vec<(Error, Completion)>,
    ) {
        // A message with neither key nor extras (the common case) has a two-field
        // `SingleMessageMetadata`, encoded without visiting every optional field.
        let plain = msg.key.is_none() && {
            let x = msg.extras();
            !x.key_b64_encoded
                && x.ordering_key.is_none()
                && x.properties.is_empty()
                && x.event_time.is_none()
        };
        // Any other message's fields and record head (built only for such a message).
        let props;
        let general = if plain {
            None
        } else {
            props = properties(&msg);
            let fields = single_fields(&msg, &props, sequence_id);
            let head = BatchBuilder::head(&fields, msg.payload.len());
            Some((fields, head))
        };
        let meta_len = match &general {
            Some((_, head)) => head.metadata_len(),
            None => BatchBuilder::plain_metadata_len(msg.payload.len(), sequence_id),
        };
        // What `push` adds: the 4-byte metadata size, the metadata and the payload.
        let record = 4 + meta_len + msg.payload.len();
        let max = ctx.max_message_size;
        // Without key-based batching there is at most one open batch, and every message
        // joins it (its key is `BatchKey::Any`): no key to compare.
        let mut idx = if !self.options.key_based {
            (!self.open.is_empty()).then_some(0)
        } else {
            self.open.iter().position(|b| b.key.matches(&msg))
        };
        // Would this message overflow its open batch (its byte budget, or the broker's limit:
        // Java's `haveEnoughSpace`, Go's `hasSpace`)? Send the open batches first — all of
        // them, in sequence order, so batches of different keys never overtake each other.
        if let Some(i) = idx {
            let b = &self.open[i];
            if b.builder.size_bytes() + msg.payload.len() > self.options.max_bytes
                || !b.fits(record, max)
            {
                self.flush(ctx, out, failed);
                idx = None;
            }
        }
        let idx = match idx {
            Some(i) => i,
            None => {
                let key = BatchKey::of(&msg, self.options.key_based);
                let builder = std::mem::take(&mut self.spare);
                let mut b = OpenBatch::new(ctx, &msg, key, sequence_id, builder);
                if !b.fits(record, max) {
                    self.spare = std::mem::take(&mut b.builder);
                    // Too big for any batch: it goes on its own, after everything before it,
                    // and fails alone (MessageTooBig) if it is over the limit by itself.
                    self.flush(ctx, out, failed);
                    match single_message_entry(ctx, msg, sequence_id, completion) {
                        Ok(entry) => out.push(entry),
                        Err(f) => failed.push(f),
                    }
                    return;
                }
                self.open.push(b);
                self.open.len() - 1
            }
        };
        let b = &mut self.open[idx];
        match &general {
            Some((fields, head)) => b.builder.push_head(head, fields, &msg.payload),
            None => b.builder.push_plain(&msg.payload, sequence_id),
        }
        b.last_seq = sequence_id;
        let (reserved, responder) = completion.into_parts();
        b.reserved.merge(reserved);
        if let Some(r) = responder {
            b.receipts.push(r);
        }
        if b.receipts.len() >= self.options.max_messages
            || b.builder.size_bytes() >= self.options.max_bytes
        {
            self.flush(ctx, out, failed);
        }
    }

    /// Closes every open batch (oldest first).
    pub(crate) fn flush(
        &mut self,
        ctx: &FrameContext,
        out: &mut Vec<InFlight>,
        failed: &mut Vec<(Error, Completion)>,
    ) {
        let mut open = std::mem::take(&mut self.open);
        open.sort_by_key(|b| b.first_seq);
        for b in open {
            self.finish(ctx, b, out, failed);
        }
    }

    /// Closes only the batches whose delay has passed.
    pub(crate) fn flush_due(
        &mut self,
        ctx: &FrameContext,
        now: Instant,
        out: &mut Vec<InFlight>,
        failed: &mut Vec<(Error, Completion)>,
    ) {
        // Key-based batches must still go out in sequence order: flush all when any is due.
        if self.deadline().is_some_and(|d| d <= now) {
            self.flush(ctx, out, failed);
        }
    }

    fn finish(
        &mut self,
        ctx: &FrameContext,
        mut b: OpenBatch,
        out: &mut Vec<InFlight>,
        failed: &mut Vec<(Error, Completion)>,
    ) {
        let n = b.receipts.len();
        let raw = b.builder.take();
        // Empty now; its allocation comes back once `raw` (and what shares it) is dropped.
        self.spare = std::mem::take(&mut b.builder);
        let raw_len = raw.len();
        let fields = |compression| BatchFields {
            last_seq: b.last_seq,
            messages: n,
            raw_len,
            publish_time: now_millis(),
            compression,
        };
        let mut data = match compress(ctx, raw.clone()) {
            Ok(d) => d,
            Err(e) => {
                fail_batch(&mut b, &e, failed);
                return;
            }
        };
        let mut metadata = batch_metadata(ctx, b.first_seq, &b, fields(ctx.compression));
        if ctx.compression != CompressionType::None && check_size(ctx, &metadata, &data).is_err() {
            // The batch was bounded by its uncompressed size; compression made incompressible
            // data larger than that. It goes uncompressed (the metadata says so).
            metadata = batch_metadata(ctx, b.first_seq, &b, fields(CompressionType::None));
            data = raw;
        }
        // Only when the broker's limit shrank (after a reconnect) while the batch was open.
        if let Err(e) = check_size(ctx, &metadata, &data) {
            fail_batch(&mut b, &e, failed);
            return;
        }
        let send = crate::commands::send(ctx.producer_id, b.first_seq, b.last_seq, n);
        let encoded = match encode(ctx, &send, metadata, data) {
            Ok(bytes) => bytes,
            Err(e) => {
                fail_batch(&mut b, &e, failed);
                return;
            }
        };
        out.push(InFlight {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            encoded,
            senders: Senders::Batch(Box::new(std::mem::take(&mut b.receipts))),
            chunk: None,
            // Its send timeout counts from now, when the batch goes out, not from when it
            // opened: upstream's batch `OpSendMsg` is created (`createdAt`) as the batch is
            // flushed, and the timeout check looks only at those ops.
            enqueued_at: Instant::now(),
            reserved: std::mem::take(&mut b.reserved),
        });
    }
}

#[cfg(test)]
#[path = "batch_container_tests.rs"]
mod tests;
