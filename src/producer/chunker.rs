//! Splits a message too big for the broker into chunks (PIP-37), like upstream
//! `ProducerImpl.sendAsync` / `serializeAndSendMessage`:
//!
//! - the payload is compressed first; only when metadata plus compressed payload exceed the
//!   broker's `max_message_size` (or the producer's `chunk_max_message_size`) is it split;
//! - every chunk is its own entry (the broker stores each as a normal message) with the
//!   message's sequence id, the same metadata plus `uuid` = `"<producer name>-<sequence id>"`,
//!   `num_chunks_from_msg`, `total_chunk_msg_size` (the compressed size) and `chunk_id`, and
//!   CommandSend `is_chunk`;
//! - the chunks are consecutive entries of the pending queue, so no other message of this
//!   producer comes between them, and after a reconnect they are re-sent in order with the
//!   rest of the queue; only the last chunk's receipt completes the send.
//!
//! Upstream sizes a chunk as `max_message_size - metadata size` measured *before* the chunk
//! fields are added (the broker's 10 KB frame padding absorbs the difference). Here the
//! metadata is measured with the chunk fields at their largest encoding, so every chunk's
//! metadata plus payload stays within the limit the broker checks.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::proto;

use super::batch_container::{compress, entry, message_metadata, single_entry_from, FrameContext};
use super::pending::{ChunkPos, Completion, InFlight, Outgoing, Senders};

/// The pending entries of one message: one entry when it fits (or chunking is off), else one
/// per chunk with the completion on the last.
pub(crate) fn message_entries(
    ctx: &FrameContext,
    chunk_max_message_size: usize,
    msg: Outgoing,
    sequence_id: u64,
    completion: Completion,
) -> std::result::Result<Vec<InFlight>, (Error, Completion)> {
    use prost::Message as _;
    let limit = match chunk_max_message_size {
        0 => ctx.max_message_size,
        n => n.min(ctx.max_message_size),
    };
    let data = match compress(ctx, msg.payload.clone()) {
        Ok(d) => d,
        Err(e) => return Err((e, completion)),
    };
    let mut metadata = message_metadata(ctx, &msg, sequence_id);
    if metadata.encoded_len() + data.len() <= limit {
        // Fits in one entry: a normal message, from what was built to measure it.
        return single_entry_from(ctx, metadata, data, sequence_id, completion).map(|e| vec![e]);
    }
    let total = match i32::try_from(data.len()) {
        Ok(n) => n,
        Err(_) => {
            // `total_chunk_msg_size` is an int32 on the wire.
            let size = data.len();
            return Err((
                Error::MessageTooBig {
                    size,
                    max: i32::MAX as usize,
                },
                completion,
            ));
        }
    };
    metadata.uuid = Some(format!("{}-{}", ctx.producer_name, sequence_id));
    metadata.total_chunk_msg_size = Some(total);
    // The largest encodings of the per-chunk fields, for a bound of every chunk's metadata.
    metadata.num_chunks_from_msg = Some(i32::MAX);
    metadata.chunk_id = Some(i32::MAX);
    let bound = metadata.encoded_len();
    let Some(chunk_size) = limit.checked_sub(bound).filter(|n| *n > 0) else {
        return Err((
            Error::InvalidConfig(format!(
                "a message's metadata ({bound} bytes) leaves no room for a chunk within \
                 {limit} bytes"
            )),
            completion,
        ));
    };
    let chunks = data.len().div_ceil(chunk_size);
    let Ok(of) = u32::try_from(chunks).map(|n| n.min(i32::MAX as u32)) else {
        return Err((
            Error::MessageTooBig {
                size: data.len(),
                max: limit,
            },
            completion,
        ));
    };
    metadata.num_chunks_from_msg = Some(of as i32);
    match split(ctx, &metadata, &data, chunk_size, of, sequence_id) {
        Ok(mut entries) => {
            if let Some(last) = entries.last_mut() {
                let (reserved, responder) = completion.into_parts();
                last.senders = responder.map_or(Senders::None, Senders::One);
                last.reserved = reserved;
            }
            Ok(entries)
        }
        Err(e) => Err((e, completion)),
    }
}

/// Encodes the chunks of `data` (each SEND frame owns a copy of its part of the payload).
fn split(
    ctx: &FrameContext,
    metadata: &proto::MessageMetadata,
    data: &Bytes,
    chunk_size: usize,
    of: u32,
    sequence_id: u64,
) -> Result<Vec<InFlight>> {
    let mut entries = Vec::with_capacity(of as usize);
    for id in 0..of {
        let start = (id as usize).saturating_mul(chunk_size).min(data.len());
        let end = start.saturating_add(chunk_size).min(data.len());
        let mut meta = metadata.clone();
        meta.chunk_id = Some(id as i32);
        entries.push(entry(
            ctx,
            crate::commands::send_chunk(ctx.producer_id, sequence_id),
            meta,
            data.slice(start..end),
            sequence_id,
            Some(ChunkPos { id, of }),
        )?);
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Frame, PulsarCodec};
    use crate::compression::CompressionType;
    use tokio_util::codec::Decoder as _;

    fn ctx(max: usize, compression: CompressionType) -> FrameContext {
        FrameContext {
            producer_id: 3,
            producer_name: "prod".into(),
            compression,
            max_message_size: max,
            schema_version: None,
            sealer: Default::default(),
        }
    }

    fn completion() -> Completion {
        Completion {
            responder: Some(crate::producer::receipt::Receipts::default().next().0),
            reserved: crate::producer::pending::Reservation::default(),
        }
    }

    fn decode(bytes: &[u8]) -> Frame {
        let mut codec = PulsarCodec::with_max_message_size(1 << 20);
        let mut buf = bytes::BytesMut::from(bytes);
        codec.decode(&mut buf).unwrap().unwrap()
    }

    fn outgoing(payload: Vec<u8>) -> Outgoing {
        crate::message::ProducerMessage::from(payload).into()
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_message_that_fits_is_one_plain_entry() {
        let c = ctx(10_000, CompressionType::None);
        let out = message_entries(&c, 0, outgoing(payload(100)), 5, completion()).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].chunk.is_none());
        let f = decode(&out[0].encoded);
        assert_eq!(f.command.send.unwrap().is_chunk, None);
        assert_eq!(f.payload.unwrap().metadata.uuid, None);
    }

    #[test]
    fn a_big_message_is_split_into_chunks_within_the_limit() {
        let max = 1000;
        let c = ctx(max, CompressionType::None);
        let whole = payload(4500);
        let out = message_entries(&c, 0, outgoing(whole.clone()), 9, completion()).unwrap();
        assert!(out.len() >= 5, "{} chunks", out.len());
        let n = out.len() as i32;
        let mut joined = Vec::new();
        for (i, e) in out.iter().enumerate() {
            assert_eq!(e.first_seq, 9);
            assert_eq!(
                e.chunk,
                Some(ChunkPos {
                    id: i as u32,
                    of: n as u32
                })
            );
            assert_eq!(e.messages(), usize::from(i as i32 == n - 1));
            let f = decode(&e.encoded);
            let send = f.command.send.unwrap();
            assert_eq!((send.sequence_id, send.is_chunk), (9, Some(true)));
            let p = f.payload.unwrap();
            use prost::Message as _;
            assert!(p.metadata.encoded_len() + p.data.len() <= max);
            assert_eq!(p.metadata.uuid.as_deref(), Some("prod-9"));
            assert_eq!(p.metadata.chunk_id, Some(i as i32));
            assert_eq!(p.metadata.num_chunks_from_msg, Some(n));
            assert_eq!(p.metadata.total_chunk_msg_size, Some(4500));
            assert_eq!(p.metadata.sequence_id, 9);
            joined.extend_from_slice(&p.data);
        }
        assert_eq!(joined, whole);
    }

    #[test]
    fn compression_comes_first_and_the_total_is_the_compressed_size() {
        let c = ctx(2000, CompressionType::Zlib);
        // Poorly compressible: still several chunks after compression.
        let mut x: u64 = 88172645463325252;
        let whole: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let out = message_entries(&c, 0, outgoing(whole.clone()), 1, completion()).unwrap();
        assert!(out.len() > 1);
        let mut joined = Vec::new();
        let mut total = 0;
        for e in &out {
            let p = decode(&e.encoded).payload.unwrap();
            assert_eq!(p.metadata.uncompressed_size, Some(20_000));
            total = p.metadata.total_chunk_msg_size.unwrap();
            joined.extend_from_slice(&p.data);
        }
        assert_eq!(joined.len(), total as usize);
        let back = crate::compression::decompress(CompressionType::Zlib, &joined, 20_000, 1 << 20)
            .unwrap();
        assert_eq!(&back[..], &whole[..]);
        // A compressible payload that fits once compressed is not chunked.
        let out = message_entries(&c, 0, outgoing(vec![0u8; 20_000]), 2, completion()).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].chunk.is_none());
    }

    #[test]
    fn chunk_max_message_size_caps_the_chunks() {
        let c = ctx(100_000, CompressionType::None);
        let out = message_entries(&c, 500, outgoing(payload(2000)), 1, completion()).unwrap();
        assert!(out.len() >= 4);
        for e in &out {
            let p = decode(&e.encoded).payload.unwrap();
            use prost::Message as _;
            assert!(p.metadata.encoded_len() + p.data.len() <= 500);
        }
    }

    #[test]
    fn metadata_larger_than_the_limit_is_an_error_not_a_panic() {
        let c = ctx(50, CompressionType::None);
        let mut msg: crate::message::ProducerMessage = payload(500).into();
        msg.properties.insert("k".repeat(100), "v".into());
        let r = message_entries(&c, 0, msg.into(), 1, completion());
        assert!(matches!(r, Err((Error::InvalidConfig(_), _))));
    }
}
