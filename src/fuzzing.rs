//! Entry points for the fuzz targets in `fuzz/` and for the smoke test that replays their
//! corpus on stable (`tests/fuzz_smoke.rs`): thin wrappers around crate-private decoders.
//!
//! Enabled by the `fuzzing` cargo feature and hidden from the documentation: this is not a
//! supported API and may change in any release.

use bytes::{Buf, Bytes, BytesMut};
use prost::Message as _;
use tokio_util::codec::Decoder;

use crate::codec::{Payload, PulsarCodec, DEFAULT_MAX_MESSAGE_SIZE};
use crate::compression::CompressionType;
use crate::consumer::engine::decode;
use crate::proto;
use crate::topic::TopicName;

/// What one input produced, for the caller to check bounds on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Frames, records or messages produced.
    pub items: usize,
    /// Payload bytes they hold.
    pub bytes: usize,
    /// Whether the input was refused (an error, not a panic).
    pub refused: bool,
}

/// Feeds `data` to the frame decoder (maximum message size `max_message_size`) in chunks of
/// `chunk` bytes (at least 1), as a connection would, until it fails or needs more bytes.
pub fn frame_decoder(data: &[u8], max_message_size: usize, chunk: usize) -> Outcome {
    let mut codec = PulsarCodec::with_max_message_size(max_message_size);
    let mut buf = BytesMut::new();
    let mut out = Outcome::default();
    for piece in data.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    out.items += 1;
                    out.bytes += frame.payload.map_or(0, |p| p.data.len());
                }
                Ok(None) => break,
                Err(_) => {
                    out.refused = true;
                    return out;
                }
            }
        }
    }
    out
}

/// Splits `data` as a batch payload of `count` records.
pub fn parse_batch(data: &[u8], count: u32) -> Outcome {
    match crate::batch::parse_batch(Bytes::copy_from_slice(data), count) {
        Ok(records) => Outcome {
            items: records.len(),
            bytes: records.iter().map(|(_, b)| b.len()).sum(),
            refused: false,
        },
        Err(_) => Outcome {
            refused: true,
            ..Default::default()
        },
    }
}

/// Decompresses `data` with the codec numbered `kind` in the protocol, declaring
/// `uncompressed_size`, with a limit of `max_size` bytes.
pub fn decompress(kind: i32, data: &[u8], uncompressed_size: usize, max_size: usize) -> Outcome {
    let r = CompressionType::from_proto(kind)
        .and_then(|k| crate::compression::decompress(k, data, uncompressed_size, max_size));
    match r {
        Ok(d) => Outcome {
            items: 1,
            bytes: d.len(),
            refused: false,
        },
        Err(_) => Outcome {
            refused: true,
            ..Default::default()
        },
    }
}

/// The input of [`consumer_decode`]: a MESSAGE frame without its framing or checksum (which
/// mutations would almost always break):
/// `[u32 BE size][CommandMessage][u32 BE size][MessageMetadata][payload]`.
pub fn consumer_input(cmd: &[u8], metadata: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + cmd.len() + metadata.len() + payload.len());
    v.extend_from_slice(&(cmd.len() as u32).to_be_bytes());
    v.extend_from_slice(cmd);
    v.extend_from_slice(&(metadata.len() as u32).to_be_bytes());
    v.extend_from_slice(metadata);
    v.extend_from_slice(payload);
    v
}

/// Runs a delivered entry through the consumer's decode the way a consumer task with the
/// default receiver queue (1000) and maximum message size does: the flow-control check on the
/// permits it spends first, then decompression, batch unpacking and the ack-set filter.
/// `input` is laid out as [`consumer_input`] writes it.
pub fn consumer_decode(input: &[u8]) -> Outcome {
    let refused = Outcome {
        refused: true,
        ..Default::default()
    };
    let mut rest = Bytes::copy_from_slice(input);
    let mut part = || -> Option<Bytes> {
        if rest.len() < 4 {
            return None;
        }
        let n = rest.get_u32() as usize;
        (n <= rest.len()).then(|| rest.split_to(n))
    };
    let (Some(cmd), Some(meta)) = (part(), part()) else {
        return refused;
    };
    let (Ok(cmd), Ok(metadata)) = (
        proto::CommandMessage::decode(cmd),
        proto::MessageMetadata::decode(meta),
    ) else {
        return refused;
    };
    let queue = 1000u32;
    let spent = decode::permits_spent(&cmd, &metadata);
    if i64::from(spent) > i64::from(queue) + crate::consumer::overshoot_bound(queue) {
        return refused; // a flow-control violation: the task closes the connection
    }
    let topic = TopicName::new("persistent://public/default/fuzz").expect("a valid topic");
    let payload = Payload {
        broker_entry_metadata: None,
        metadata,
        data: rest,
    };
    let max = decode::max_decompressed(DEFAULT_MAX_MESSAGE_SIZE);
    match decode::decode(&topic, -1, &cmd, payload, max) {
        Ok(entry) => {
            // Built as the handle builds them when handing them out.
            let head = entry.head;
            let messages: Vec<_> = entry.records.into_iter().map(|r| head.message(r)).collect();
            assert!(
                messages.len() <= spent as usize,
                "more messages than permits spent"
            );
            Outcome {
                items: messages.len(),
                bytes: messages.iter().map(|m| m.payload.len()).sum(),
                refused: false,
            }
        }
        Err(_) => refused,
    }
}

/// Compresses `data` with the codec numbered `kind` in the protocol (for building inputs:
/// bombs, corpus files); `None` for an unknown or unavailable codec.
pub fn compress(kind: i32, data: &[u8]) -> Option<Vec<u8>> {
    let kind = CompressionType::from_proto(kind).ok()?;
    crate::compression::compress(kind, data)
        .ok()
        .map(|b| b.to_vec())
}

/// The frame decoder's target: `[chunk size byte][stream]`, a 64 KiB maximum message size.
pub fn target_frame_decoder(input: &[u8]) -> Outcome {
    let Some((&chunk, stream)) = input.split_first() else {
        return Outcome::default();
    };
    frame_decoder(stream, 64 * 1024, usize::from(chunk) * 64 + 1)
}

/// The batch parser's target: `[u32 BE record count][batch payload]`.
pub fn target_batch(input: &[u8]) -> Outcome {
    if input.len() < 4 {
        return Outcome::default();
    }
    let count = u32::from_be_bytes([input[0], input[1], input[2], input[3]]);
    parse_batch(&input[4..], count)
}

/// The largest decompressed size the decompression target allows: what a consumer allows
/// with the default maximum message size.
pub const FUZZ_MAX_DECOMPRESSED: usize = 2 * DEFAULT_MAX_MESSAGE_SIZE;

/// The decompression target: `[codec byte][u32 BE declared size][compressed bytes]`, the
/// declared size taken modulo twice the limit (so both sides of it are tried).
pub fn target_decompress(input: &[u8]) -> Outcome {
    if input.len() < 5 {
        return Outcome::default();
    }
    let kind = i32::from(input[0] % 5);
    let declared = u32::from_be_bytes([input[1], input[2], input[3], input[4]]) as usize
        % (2 * FUZZ_MAX_DECOMPRESSED + 1);
    decompress(kind, &input[5..], declared, FUZZ_MAX_DECOMPRESSED)
}

/// The consumer decode's target: [`consumer_decode`].
pub fn target_consumer_decode(input: &[u8]) -> Outcome {
    consumer_decode(input)
}

/// Decodes `payload` with the Avro `definition` both ways a consumer does: as a
/// `GenericAvroSchema` of that definition, and as AUTO_CONSUME with it as the writer's.
#[cfg(feature = "avro")]
pub fn avro_decode(definition: &str, payload: &[u8]) -> Outcome {
    use crate::schema::{AutoConsumeSchema, GenericAvroSchema, Schema, SchemaInfo, SchemaType};
    let writer = SchemaInfo::new(SchemaType::Avro, "").with_definition(definition.to_string());
    let auto = AutoConsumeSchema.decode(payload, Some(&writer)).is_ok();
    let generic = GenericAvroSchema::new(definition).map(|s| s.decode(payload, None).is_ok());
    let ok = usize::from(auto) + usize::from(matches!(generic, Ok(true)));
    Outcome {
        items: ok,
        bytes: if ok > 0 { payload.len() } else { 0 },
        refused: ok == 0,
    }
}

/// The schemas the Avro payload target decodes with, chosen by the input's first byte: each
/// shape the decoder's limits are about (arrays, maps, unions, recursion through a union and an
/// array, zero-sized items, enums, fixed, logical types).
#[cfg(feature = "avro")]
pub const AVRO_SCHEMAS: [&str; 8] = [
    r#"{"type":"record","name":"Tags","fields":[{"name":"tags","type":{"type":"array","items":["null","string"]}}]}"#,
    r#"{"type":"record","name":"N","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","N"]}]}"#,
    r#"{"type":"record","name":"T","fields":[{"name":"kids","type":{"type":"array","items":"T"}}]}"#,
    r#"{"type":"map","values":{"type":"array","items":"null"}}"#,
    r#"{"type":"array","items":{"type":"record","name":"E","fields":[]}}"#,
    r#"{"type":"record","name":"R","fields":[{"name":"e","type":{"type":"enum","name":"C","symbols":["A","B"]}},{"name":"f","type":{"type":"fixed","name":"F","size":4}},{"name":"d","type":"double"},{"name":"b","type":"boolean"}]}"#,
    r#"{"type":"record","name":"L","fields":[{"name":"u","type":{"type":"string","logicalType":"uuid"}},{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"m","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}"#,
    r#"{"type":"array","items":{"type":"map","values":["null","int","string"]}}"#,
];

/// The Avro payload target: `[schema selector byte][payload]` ([`AVRO_SCHEMAS`]).
#[cfg(feature = "avro")]
pub fn target_avro_payload(input: &[u8]) -> Outcome {
    let Some((&which, payload)) = input.split_first() else {
        return Outcome::default();
    };
    avro_decode(
        AVRO_SCHEMAS[usize::from(which) % AVRO_SCHEMAS.len()],
        payload,
    )
}

/// The Avro schema-definition target: `[u16 BE definition length][definition][payload]`.
#[cfg(feature = "avro")]
pub fn target_avro_schema(input: &[u8]) -> Outcome {
    if input.len() < 2 {
        return Outcome::default();
    }
    let n = usize::from(u16::from_be_bytes([input[0], input[1]])).min(input.len() - 2);
    let (def, payload) = input[2..].split_at(n);
    match std::str::from_utf8(def) {
        Ok(def) => avro_decode(def, payload),
        Err(_) => Outcome {
            refused: true,
            ..Default::default()
        },
    }
}
