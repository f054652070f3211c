//! Turns a MESSAGE frame into application [`Message`]s: decompression, batch unpacking with
//! batch-index ids, metadata fields.
//!
//! The work and memory spent on one frame are bounded by the frame itself, whatever its
//! metadata claims: the decompressed size by the (client-capped) maximum message size, the
//! number of batch records by what the decompressed bytes can hold, and only the records the
//! ack set and compaction leave are built into messages. The outer metadata is read once per
//! frame and shared by the messages of a batch (upstream keeps one `MessageMetadata` per entry
//! for all of them, too).

use std::sync::Arc;

use bytes::Bytes;

use crate::batch::BatchRecords;
use crate::codec::Payload;
use crate::compression::{self, CompressionType};
use crate::consumer::entry::{Entry, EntryHead, Extras, Record, Records};
use crate::error::Error;
use crate::message_id::MessageId;
use crate::proto;
use crate::proto::command_ack::ValidationError;
use crate::topic::TopicName;

/// How large a payload may be once decompressed, for a broker advertising `advertised` as its
/// maximum message size: twice that (a batch's uncompressed size may exceed the limit its
/// compressed size obeys), with the advertised value capped by the client's
/// [`MAX_MESSAGE_SIZE_LIMIT`](crate::codec::MAX_MESSAGE_SIZE_LIMIT) (the connection caps it
/// already; capped again here so that no caller can pass more).
pub(crate) fn max_decompressed(advertised: usize) -> usize {
    advertised
        .min(crate::codec::MAX_MESSAGE_SIZE_LIMIT)
        .saturating_mul(2)
}

/// The bytes an entry holds once decoded, as far as its metadata says before anything is
/// decoded: a compressed entry's declared `uncompressed_size` (decompression yields exactly
/// that or fails; at most `max`, above which it is refused before anything is allocated),
/// else its `wire` size. What a broker sending beyond the flow permits is counted in (see
/// `Flow::spend`): a highly compressible entry of a few hundred bytes may decode to `max`.
/// A chunk counts its wire size: its metadata declares the whole message's size, and the
/// chunks are decompressed only once reassembled (within the budget, see `chunks`).
pub(crate) fn decoded_size(meta: &proto::MessageMetadata, wire: usize, max: usize) -> usize {
    let compressed = meta.compression.is_some_and(|c| c != 0);
    let chunk = meta.num_chunks_from_msg.unwrap_or(1) > 1;
    if !compressed || chunk {
        return wire;
    }
    let declared = meta.uncompressed_size.unwrap_or(0) as usize;
    wire.max(declared.min(max))
}

/// The most messages of a batch [`decode`] makes room for before reading any (the upstream
/// producers' default `batchingMaxMessages` is 1000).
const PREALLOCATED_MESSAGES: usize = 1024;

/// An entry the client cannot decode, with the validation error it is discarded with
/// (upstream `ConsumerImpl.discardCorruptedMessage`).
#[derive(Debug)]
pub(crate) struct Undecodable {
    pub error: Error,
    pub validation: ValidationError,
}

fn undecodable(validation: ValidationError) -> impl FnOnce(Error) -> Undecodable {
    move |error| Undecodable {
        error: match error {
            e @ Error::InvalidMessage(_) => e,
            e => Error::InvalidMessage(e.to_string()),
        },
        validation,
    }
}

/// Whether the broker's ack set still delivers batch index `i`. A redelivered, partly acked
/// batch carries the broker's ack set: a clear bit marks a message already acked (batch-index
/// ack), which is not delivered again (upstream `receiveIndividualMessagesFromBatch`, whose
/// `BitSet.valueOf(ackSet)` numbers bits the same way: word `i / 64`, bit `i % 64`).
fn ack_set_delivers(ack_set: &[i64], i: usize) -> bool {
    ack_set.is_empty()
        || ack_set
            .get(i / 64)
            .is_some_and(|w| (*w as u64) >> (i % 64) & 1 == 1)
}

/// The batch index after which an ack set delivers nothing more (`None` for no ack set).
fn ack_set_end(ack_set: &[i64]) -> Option<usize> {
    if ack_set.is_empty() {
        return None;
    }
    let end = ack_set
        .iter()
        .enumerate()
        .rev()
        .find(|(_, w)| **w != 0)
        .map_or(0, |(i, w)| {
            i * 64 + 64 - (*w as u64).leading_zeros() as usize
        });
    Some(end)
}

/// The flow permits a delivered entry spends: the batch's messages, or only those its ack set
/// still delivers. [`decode`] never yields more messages than this, so the flow-control check
/// on it (before decoding) also bounds what one entry can put in the queue.
pub(crate) fn permits_spent(cmd: &proto::CommandMessage, meta: &proto::MessageMetadata) -> u32 {
    if cmd.ack_set.is_empty() {
        meta.num_messages_in_batch.unwrap_or(1).max(1) as u32
    } else {
        cmd.ack_set
            .iter()
            .map(|w| w.count_ones())
            .fold(0u32, u32::saturating_add)
            .max(1)
    }
}

/// Decodes one delivered entry into its messages (one, or those of a batch that the ack set
/// and compaction leave), kept compact until handed out (see [`Entry`]). (The fuzz entry
/// points' way in; the consumer uses [`decode_sized`].)
#[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
pub(crate) fn decode(
    topic: &TopicName,
    partition: i32,
    cmd: &proto::CommandMessage,
    mut payload: Payload,
    max_size: usize,
) -> std::result::Result<Entry, Undecodable> {
    decode_sized(topic, partition, cmd, &mut payload, max_size).map(|(entry, _)| entry)
}

/// [`decode`], with the bytes the messages keep alive: the decompressed payload (a batch's
/// messages are slices of it, so any of them holds all of it) plus their keys and properties
/// (`Extras::cost`), what the consumer's byte budget charges for the entry (see `budget`).
pub(crate) fn decode_sized(
    topic: &TopicName,
    partition: i32,
    cmd: &proto::CommandMessage,
    payload: &mut Payload,
    max_size: usize,
) -> std::result::Result<(Entry, usize), Undecodable> {
    // By reference: the fields the records keep are taken out, the rest stays (moving the
    // metadata, several hundred bytes, was a copy per entry).
    let meta = &mut payload.metadata;
    let mut id = MessageId::from_proto(&cmd.message_id);
    id.partition = partition;
    id.batch_index = -1;
    id.batch_size = 0;
    // The consumer reassembles chunks before decoding (consumer/chunks.rs), so only a direct
    // caller (the fuzz entry points) can get here with one; refuse it rather than decode a
    // fragment as a message.
    if meta.num_chunks_from_msg.unwrap_or(1) > 1 {
        return Err(Undecodable {
            error: Error::InvalidMessage(format!(
                "message {id} is one chunk of {}: chunks are reassembled before decoding",
                meta.num_chunks_from_msg.unwrap_or(0)
            )),
            validation: ValidationError::BatchDeSerializeError,
        });
    }
    let decompression = undecodable(ValidationError::DecompressionError);
    let kind = CompressionType::from_proto(meta.compression.unwrap_or(0)).map_err(decompression)?;
    let data = if kind == CompressionType::None {
        if payload.data.len() > max_size {
            // Upstream checks the payload against the maximum message size before
            // decompressing (UncompressedSizeCorruption).
            return Err(Undecodable {
                error: Error::InvalidMessage(format!(
                    "payload of {} bytes exceeds the limit of {max_size} bytes",
                    payload.data.len()
                )),
                validation: ValidationError::UncompressedSizeCorruption,
            });
        }
        std::mem::take(&mut payload.data)
    } else {
        // Refuses a declared size above `max_size` before allocating anything for it.
        compression::decompress(
            kind,
            &payload.data,
            meta.uncompressed_size.unwrap_or(0) as usize,
            max_size,
        )
        .map_err(undecodable(ValidationError::DecompressionError))?
    };
    // The payload buffer the records share, plus the keys and properties they hold (counted
    // here as they are built, so the budget needs no second walk over the records).
    let mut held = data.len();
    let head =
        |id: MessageId, schema_version: Option<Bytes>, meta: &proto::MessageMetadata| EntryHead {
            topic: topic.clone(),
            id,
            schema_version,
            publish_time: meta.publish_time,
            producer_name: Arc::from(meta.producer_name.as_str()),
            redelivery_count: cmd.redelivery_count.unwrap_or(0),
            source: 0,
            cluster: 0,
        };
    // One schema version per entry (upstream batches never mix versions).
    let schema_version = meta.schema_version.take();
    let Some(n) = meta.num_messages_in_batch else {
        let extras = Extras::of(
            &mut meta.partition_key,
            &mut meta.ordering_key,
            &meta.properties,
        );
        held += extras.as_ref().map_or(0, |e| e.cost());
        let record = Record {
            payload: data,
            sequence_id: meta.sequence_id,
            event_time: meta.event_time.unwrap_or(0),
            batch_index: -1,
            key_b64_encoded: meta.partition_key_b64_encoded.unwrap_or(false),
            null_value: meta.null_value.unwrap_or(false),
            extras,
        };
        return Ok((
            Entry {
                head: head(id, schema_version, meta),
                records: smallvec::smallvec![record],
            },
            held,
        ));
    };
    let batch = undecodable(ValidationError::BatchDeSerializeError);
    let n = u32::try_from(n)
        .map_err(|_| Error::InvalidMessage(format!("negative batch size {n} in {id}")))
        .map_err(undecodable(ValidationError::BatchDeSerializeError))?;
    // At most one record per 4 bytes: a lying count is refused before any record is read.
    let mut records = BatchRecords::new(data, n).map_err(batch)?;
    let end = ack_set_end(&cmd.ack_set).map_or(n as usize, |e| e.min(n as usize));
    // Sized for the batch up front (growing it would copy every message built so far about
    // ten times for a batch of 1000), but never beyond `PREALLOCATED_MESSAGES` on the word of
    // the metadata alone: a lying count must not make the client allocate for it.
    let mut out = Records::with_capacity(end.min(PREALLOCATED_MESSAGES));
    // Records are read in order (each one's size is in its metadata); those after the last
    // one the ack set delivers are not read at all.
    // One metadata reused for every record (see `BatchRecords::next_into`).
    let mut single = proto::SingleMessageMetadata::default();
    for i in 0..end {
        let Some(record) = records.next_into(&mut single) else {
            break;
        };
        let body = record.map_err(undecodable(ValidationError::BatchDeSerializeError))?;
        // Skipped before anything is built for them: compacted-out records and those the ack
        // set marks as acked (upstream skips both the same way, and gives their permits back).
        if single.compacted_out.unwrap_or(false) || !ack_set_delivers(&cmd.ack_set, i) {
            continue;
        }
        // A batched message has its own key, properties and event time (upstream
        // `MessageImpl.create` for a batch entry does not inherit the outer ones); the
        // producer name, publish time and topic are the entry's, shared.
        let extras = Extras::of(
            &mut single.partition_key,
            &mut single.ordering_key,
            &single.properties,
        );
        if let Some(e) = &extras {
            held += e.cost();
        }
        out.push(Record {
            payload: body,
            sequence_id: single
                .sequence_id
                .unwrap_or(meta.sequence_id.wrapping_add(i as u64)),
            event_time: single.event_time.unwrap_or(0),
            batch_index: i as i32,
            key_b64_encoded: single.partition_key_b64_encoded.unwrap_or(false),
            null_value: single.null_value.unwrap_or(false),
            extras,
        });
    }
    let mut batch_id = id;
    batch_id.batch_size = i32::try_from(n).unwrap_or(i32::MAX);
    Ok((
        Entry {
            head: head(batch_id, schema_version, meta),
            records: out,
        },
        held,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_set_bits() {
        assert!(ack_set_delivers(&[], 5));
        assert!(ack_set_delivers(&[1], 0));
        assert!(!ack_set_delivers(&[1], 1));
        assert!(!ack_set_delivers(&[1], 64));
        assert!(ack_set_delivers(&[0, 1 << 3], 67));
        assert!(ack_set_delivers(&[-1], 63));
        assert_eq!(ack_set_end(&[]), None);
        assert_eq!(ack_set_end(&[0]), Some(0));
        assert_eq!(ack_set_end(&[1]), Some(1));
        assert_eq!(ack_set_end(&[1 << 5, 0]), Some(6));
        assert_eq!(ack_set_end(&[0, 1]), Some(65));
        assert_eq!(ack_set_end(&[-1]), Some(64));
    }
}
