//! Accumulates messages into batches and turns messages and batches into SEND frames.

use bytes::Bytes;
use tokio::time::Instant;

use crate::batch::{BatchBuilder, SingleMessageFields};
use crate::codec::Frame;
use crate::compression::{self, CompressionType};
use crate::error::{Error, Result};
use crate::message::{now_millis, ProducerMessage};
use crate::proto::{self, base_command::Type, BaseCommand};

use super::options::BatchingOptions;
use super::pending::{Completion, InFlight};

/// What every SEND of one producer shares.
#[derive(Debug, Clone)]
pub(crate) struct FrameContext {
    pub producer_id: u64,
    pub producer_name: String,
    pub compression: CompressionType,
    pub max_message_size: usize,
}

fn send_command(producer_id: u64, first: u64, last: u64, num_messages: usize) -> BaseCommand {
    BaseCommand {
        r#type: Type::Send as i32,
        send: Some(proto::CommandSend {
            producer_id,
            sequence_id: first,
            num_messages: Some(num_messages as i32),
            highest_sequence_id: (last != first).then_some(last),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn properties(msg: &ProducerMessage) -> Vec<proto::KeyValue> {
    msg.properties
        .iter()
        .map(|(k, v)| proto::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// Compresses `payload` (when the producer compresses).
fn compress(ctx: &FrameContext, payload: Bytes) -> Result<Bytes> {
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
fn encode(ctx: &FrameContext, frame: &Frame) -> Result<Bytes> {
    let mut buf = bytes::BytesMut::new();
    crate::codec::encode_frame(
        frame,
        &mut buf,
        ctx.max_message_size
            .saturating_add(crate::codec::FRAME_HEADROOM),
    )?;
    Ok(buf.freeze())
}

/// Builds the frame of a single, non-batched message.
pub(crate) fn single_message_entry(
    ctx: &FrameContext,
    msg: ProducerMessage,
    sequence_id: u64,
    completion: Completion,
) -> std::result::Result<InFlight, (Error, Completion)> {
    let data = match compress(ctx, msg.payload.clone()) {
        Ok(d) => d,
        Err(e) => return Err((e, completion)),
    };
    let metadata = proto::MessageMetadata {
        producer_name: ctx.producer_name.clone(),
        sequence_id,
        publish_time: now_millis(),
        properties: properties(&msg),
        partition_key: msg.key.clone(),
        ordering_key: msg.ordering_key.clone(),
        event_time: msg.event_time,
        compression: (ctx.compression != CompressionType::None).then(|| ctx.compression.to_proto()),
        uncompressed_size: (ctx.compression != CompressionType::None)
            .then_some(msg.payload.len() as u32),
        deliver_at_time: msg.deliver_at.map(|t| t as i64),
        ..Default::default()
    };
    if let Err(e) = check_size(ctx, &metadata, &data) {
        return Err((e, completion));
    }
    let frame = Frame::with_payload(
        send_command(ctx.producer_id, sequence_id, sequence_id, 1),
        metadata,
        data,
    );
    let encoded = match encode(ctx, &frame) {
        Ok(b) => b,
        Err(e) => return Err((e, completion)),
    };
    Ok(InFlight {
        first_seq: sequence_id,
        last_seq: sequence_id,
        encoded,
        completions: vec![completion],
        batched: false,
        enqueued_at: Instant::now(),
    })
}

/// One open batch.
#[derive(Debug)]
struct OpenBatch {
    key: Option<String>,
    builder: BatchBuilder,
    completions: Vec<Completion>,
    first_seq: u64,
    last_seq: u64,
    opened_at: Instant,
}

/// Open batches (one, or one per key with key-based batching).
#[derive(Debug)]
pub(crate) struct BatchContainer {
    options: BatchingOptions,
    open: Vec<OpenBatch>,
}

impl BatchContainer {
    pub(crate) fn new(options: BatchingOptions) -> Self {
        BatchContainer {
            options,
            open: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// When the oldest open batch must be sent.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.open
            .iter()
            .map(|b| b.opened_at + self.options.max_publish_delay)
            .min()
    }

    /// Whether the message should not join a batch: it fills one on its own, or it may be over
    /// the broker's limit (it is then sent on its own, so a failure is only its own).
    pub(crate) fn too_big_for_batch(&self, msg: &ProducerMessage, max_message_size: usize) -> bool {
        msg.payload.len() >= self.options.max_bytes || msg.payload.len() >= max_message_size / 2
    }

    /// Adds a message; returns the batches that became full and must be sent now.
    pub(crate) fn add(
        &mut self,
        ctx: &FrameContext,
        msg: ProducerMessage,
        sequence_id: u64,
        completion: Completion,
        out: &mut Vec<InFlight>,
        failed: &mut Vec<(Error, Completion)>,
    ) {
        let key = if self.options.key_based {
            msg.ordering_key
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .or_else(|| msg.key.clone())
        } else {
            None
        };
        // Would this message overflow its open batch? Send the open batches first — all of
        // them, in sequence order, so batches of different keys never overtake each other.
        if self.open.iter().any(|b| {
            b.key == key && b.builder.size_bytes() + msg.payload.len() > self.options.max_bytes
        }) {
            self.flush(ctx, out, failed);
        }
        let idx = match self.open.iter().position(|b| b.key == key) {
            Some(i) => i,
            None => self.open_batch(key, sequence_id),
        };
        let b = &mut self.open[idx];
        let props = properties(&msg);
        let fields = SingleMessageFields {
            properties: &props,
            partition_key: msg.key.as_deref(),
            event_time: msg.event_time,
            ordering_key: msg.ordering_key.as_deref(),
            sequence_id: Some(sequence_id),
            ..Default::default()
        };
        b.builder.push(&fields, &msg.payload);
        b.last_seq = sequence_id;
        b.completions.push(completion);
        if b.completions.len() >= self.options.max_messages
            || b.builder.size_bytes() >= self.options.max_bytes
        {
            self.flush(ctx, out, failed);
        }
    }

    fn open_batch(&mut self, key: Option<String>, first_seq: u64) -> usize {
        self.open.push(OpenBatch {
            key,
            builder: BatchBuilder::new(),
            completions: Vec::new(),
            first_seq,
            last_seq: first_seq,
            opened_at: Instant::now(),
        });
        self.open.len() - 1
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
        let n = b.completions.len();
        let raw = b.builder.take();
        let raw_len = raw.len();
        let data = match compress(ctx, raw) {
            Ok(d) => d,
            Err(e) => {
                failed.extend(b.completions.drain(..).map(|c| (e.clone(), c)));
                return;
            }
        };
        let metadata = proto::MessageMetadata {
            producer_name: ctx.producer_name.clone(),
            sequence_id: b.first_seq,
            highest_sequence_id: Some(b.last_seq),
            publish_time: now_millis(),
            num_messages_in_batch: Some(n as i32),
            compression: (ctx.compression != CompressionType::None)
                .then(|| ctx.compression.to_proto()),
            uncompressed_size: (ctx.compression != CompressionType::None).then_some(raw_len as u32),
            ..Default::default()
        };
        let frame = Frame::with_payload(
            send_command(ctx.producer_id, b.first_seq, b.last_seq, n),
            metadata,
            data,
        );
        let encoded = match encode(ctx, &frame) {
            Ok(bytes) => bytes,
            Err(e) => {
                failed.extend(b.completions.drain(..).map(|c| (e.clone(), c)));
                return;
            }
        };
        out.push(InFlight {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            encoded,
            completions: b.completions,
            batched: true,
            enqueued_at: b.opened_at,
        });
    }
}
