//! Turns a MESSAGE frame into application [`Message`]s: decompression, batch unpacking with
//! batch-index ids, metadata fields.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::batch::parse_batch;
use crate::codec::Payload;
use crate::compression::{self, CompressionType};
use crate::error::Error;
use crate::message::Message;
use crate::message_id::MessageId;
use crate::proto;
use crate::proto::command_ack::ValidationError;
use crate::topic::TopicName;

fn props(kvs: &[proto::KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

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

/// Decodes one delivered entry into its messages (one, or the messages of a batch).
pub(crate) fn decode(
    topic: &TopicName,
    partition: i32,
    cmd: &proto::CommandMessage,
    payload: Payload,
    max_size: usize,
) -> std::result::Result<Vec<Message>, Undecodable> {
    let meta = payload.metadata;
    let mut id = MessageId::from_proto(&cmd.message_id);
    id.partition = partition;
    id.batch_index = -1;
    id.batch_size = 0;
    if meta.num_chunks_from_msg.unwrap_or(1) > 1 {
        return Err(Undecodable {
            error: Error::InvalidMessage(format!(
                "message {id} is chunked ({} chunks); chunked messages are not supported yet",
                meta.num_chunks_from_msg.unwrap_or(0)
            )),
            validation: ValidationError::BatchDeSerializeError,
        });
    }
    let decompression = undecodable(ValidationError::DecompressionError);
    let kind = CompressionType::from_proto(meta.compression.unwrap_or(0)).map_err(decompression)?;
    let data = if kind == CompressionType::None {
        payload.data
    } else {
        compression::decompress(
            kind,
            &payload.data,
            meta.uncompressed_size.unwrap_or(0) as usize,
            max_size,
        )
        .map_err(undecodable(ValidationError::DecompressionError))?
    };
    let redelivery_count = cmd.redelivery_count.unwrap_or(0);
    let base = |payload: Bytes, id: MessageId| Message {
        topic: topic.clone(),
        id,
        payload,
        key: meta.partition_key.clone(),
        ordering_key: meta.ordering_key.clone(),
        properties: props(&meta.properties),
        event_time: meta.event_time.filter(|t| *t > 0),
        publish_time: meta.publish_time,
        producer_name: meta.producer_name.clone(),
        sequence_id: meta.sequence_id,
        redelivery_count,
        source: 0,
    };
    let Some(n) = meta.num_messages_in_batch else {
        return Ok(vec![base(data, id)]);
    };
    let n = u32::try_from(n)
        .map_err(|_| Error::InvalidMessage(format!("negative batch size {n} in {id}")))
        .map_err(undecodable(ValidationError::BatchDeSerializeError))?;
    let parts =
        parse_batch(data, n).map_err(undecodable(ValidationError::BatchDeSerializeError))?;
    let mut out = Vec::with_capacity(parts.len());
    for (i, (single, body)) in parts.into_iter().enumerate() {
        if single.compacted_out.unwrap_or(false) {
            continue;
        }
        // A redelivered, partly acked batch carries the broker's ack set: a clear bit marks a
        // message already acked (batch-index ack), which is not delivered again.
        if !cmd.ack_set.is_empty() {
            let word = cmd.ack_set.get(i / 64).copied().unwrap_or(0) as u64;
            if word & (1u64 << (i % 64)) == 0 {
                continue;
            }
        }
        let mut mid = id;
        mid.batch_index = i as i32;
        mid.batch_size = n as i32;
        let mut m = base(body, mid);
        m.key = single.partition_key;
        m.ordering_key = single.ordering_key;
        m.properties = props(&single.properties);
        m.event_time = single.event_time.filter(|t| *t > 0);
        m.sequence_id = single
            .sequence_id
            .unwrap_or(meta.sequence_id.wrapping_add(i as u64));
        out.push(m);
    }
    Ok(out)
}
