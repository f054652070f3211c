//! A delivered entry's messages as the queue holds them until the application takes each:
//! what they share, once per entry ([`EntryHead`]), and what differs, once per message
//! ([`Record`], 64 bytes). The public [`Message`] (~270 bytes) is built only when handed out
//! (issue #18: building it at decode time cost a `memcpy` of the whole message into the queue's
//! vector and another out of it, and a batch of 1,000 filled 270 KB where this fills 64 KB).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::message::Message;
use crate::message_id::MessageId;
use crate::proto;
use crate::topic::TopicName;

/// What the messages of one entry share.
#[derive(Debug, Clone)]
pub(crate) struct EntryHead {
    pub topic: TopicName,
    /// The entry's id: its batch size set for a batch, the batch index taken from each record.
    pub id: MessageId,
    pub schema_version: Option<Bytes>,
    pub publish_time: u64,
    pub producer_name: Arc<str>,
    pub redelivery_count: u32,
    /// Which of the consumer's partition tasks delivered it (routes acks).
    pub source: usize,
    /// The cluster generation it was received in (see [`Message`]'s `cluster`).
    pub cluster: u64,
}

/// What one message of an entry has of its own.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub payload: Bytes,
    pub sequence_id: u64,
    /// 0: none (a message's event time is set only when positive).
    pub event_time: u64,
    /// -1 for an entry that is not a batch.
    pub batch_index: i32,
    pub key_b64_encoded: bool,
    pub null_value: bool,
    /// Key, ordering key and properties, boxed only when one is set (rare on the hot path).
    pub extras: Option<Box<Extras>>,
}

/// The rarely set fields of a [`Record`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Extras {
    pub key: Option<String>,
    pub ordering_key: Option<Bytes>,
    pub properties: BTreeMap<String, String>,
    /// A message delivered still encrypted: what decrypting it takes.
    #[cfg(feature = "encryption")]
    pub encryption: Option<Arc<crate::crypto::EncryptionContext>>,
}

impl Extras {
    /// The bytes these fields hold, as the consumer's byte budget counts them: their text,
    /// 48 bytes per property and 64 for the box and the map (and a message delivered still
    /// encrypted, its encryption context).
    pub(crate) fn cost(&self) -> usize {
        #[cfg(feature = "encryption")]
        let context = self.encryption.as_ref().map_or(0, |c| c.cost());
        #[cfg(not(feature = "encryption"))]
        let context = 0;
        context
            + self.key.as_ref().map_or(0, String::len)
            + self.ordering_key.as_ref().map_or(0, |k| k.len())
            + self
                .properties
                .iter()
                .map(|(k, v)| k.len() + v.len() + 48)
                .sum::<usize>()
            + 64
    }

    /// Boxed only if any is set (no map is built, and none dropped, for a plain message).
    #[inline(always)]
    pub(crate) fn of(
        key: &mut Option<String>,
        ordering_key: &mut Option<Bytes>,
        properties: &[proto::KeyValue],
    ) -> Option<Box<Extras>> {
        if key.is_none() && ordering_key.is_none() && properties.is_empty() {
            return None;
        }
        Self::boxed(key.take(), ordering_key.take(), properties)
    }

    #[cold]
    fn boxed(
        key: Option<String>,
        ordering_key: Option<Bytes>,
        properties: &[proto::KeyValue],
    ) -> Option<Box<Extras>> {
        Some(Box::new(Extras {
            key,
            ordering_key,
            properties: properties
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
            #[cfg(feature = "encryption")]
            encryption: None,
        }))
    }
}

/// The messages of one delivered entry (a batch's, or one), in order.
#[derive(Debug)]
pub(crate) struct Entry {
    pub head: EntryHead,
    pub records: Records,
}

/// An entry's records: the one record of an entry that is not a batch is kept inline, so a
/// message sent on its own costs no allocation (and free) of its own on its way to the
/// application.
pub(crate) type Records = smallvec::SmallVec<[Record; 1]>;

impl EntryHead {
    /// The id of one of the entry's messages.
    #[inline]
    pub(crate) fn id_of(&self, r: &Record) -> MessageId {
        let mut id = self.id;
        id.batch_index = r.batch_index;
        id
    }

    /// The public message of a record (built where the application takes it).
    // Always inlined: built where the receive returns it, the message is written straight
    // into the result (a call returns it through a slot of its own, copied out after).
    #[inline(always)]
    pub(crate) fn message(&self, r: Record) -> Message {
        let id = self.id_of(&r);
        #[cfg(feature = "encryption")]
        let mut encryption = None;
        let (key, ordering_key, properties) = match r.extras {
            None => (None, None, BTreeMap::new()),
            Some(e) => {
                let e = *e;
                #[cfg(feature = "encryption")]
                {
                    encryption = e.encryption;
                }
                (e.key, e.ordering_key, e.properties)
            }
        };
        Message {
            topic: self.topic.clone(),
            id,
            payload: r.payload,
            key,
            key_b64_encoded: r.key_b64_encoded,
            schema_version: self.schema_version.clone(),
            ordering_key,
            properties,
            event_time: (r.event_time > 0).then_some(r.event_time),
            publish_time: self.publish_time,
            producer_name: self.producer_name.clone(),
            sequence_id: r.sequence_id,
            redelivery_count: self.redelivery_count,
            null_value: r.null_value,
            source: self.source,
            cluster: self.cluster,
            #[cfg(feature = "encryption")]
            encryption,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_stays_small() {
        // The point of the split: what the queue holds per message.
        assert!(std::mem::size_of::<Record>() <= 64);
    }
}
