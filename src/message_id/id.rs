//! [`MessageId`]: where a message is stored. A leaf: it imports nothing of the crate but the
//! protocol types, so `crate::error` can hold an id (in `CryptoError::Undelivered`) without an
//! import cycle; its parsing, which fails with a crate [`Error`](crate::Error), is in `parse`.

use std::cmp::Ordering;
use std::fmt;

use crate::proto;

/// The id of a stored message: ledger and entry, the partition (-1 if the topic is not
/// partitioned), and for a message in a batch its index and the batch size (-1 / 0 otherwise).
///
/// Displays exactly as upstream Java's `MessageId.toString()`: `ledger:entry:partition` for a
/// message outside a batch (`MessageIdImpl`), `ledger:entry:partition:batch_index` for one in a
/// batch (`BatchMessageIdImpl`), and parses back from either to an equal id (dead-letter copies
/// carry this form in `ORIGIN_MESSAGE_ID`, as Java's and Go's do).
///
/// Identity: two ids are equal (and hash equally, and compare `Equal`) when their ledger, entry,
/// partition and batch index are equal. `batch_size` is data carried along (the acknowledgment
/// of a batch needs it), not part of the identity, so an id the application passes back (e.g.
/// parsed from its string form, which has no batch size) finds the id the client handed out.
/// This follows upstream Java's `MessageIdImpl`/`BatchMessageIdImpl` (`MessageIdAdvUtils.equals`
/// and `hashCode` use ledger, entry, partition and batch index; the batch size is left out).
///
/// A chunked message (PIP-37) is identified by its **last** chunk, and carries where its first
/// chunk is in [`first_chunk`](Self::first_chunk) (upstream's `ChunkMessageIdImpl`, whose
/// identity is also the last chunk's). It displays as `first-last`
/// (`ledger:entry:partition-ledger:entry:partition`, upstream's `toString`), which parses
/// back to an equal id that keeps its first chunk.
///
/// `#[non_exhaustive]`: build ids with [`MessageId::new`] or by parsing; fields stay readable
/// and writable.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct MessageId {
    /// The ledger (a storage segment) holding the message.
    pub ledger_id: u64,
    /// The entry within the ledger.
    pub entry_id: u64,
    /// The partition index, -1 for a non-partitioned topic.
    pub partition: i32,
    /// The index within a batch, -1 if the entry is not a batch.
    pub batch_index: i32,
    /// The number of messages in the batch (0 if unknown or not batched).
    pub batch_size: i32,
    /// For a chunked message: where its first chunk is stored (this id is the last chunk's).
    /// Carried data, not identity (like `batch_size`).
    pub first_chunk: Option<ChunkStart>,
}

/// Where the first chunk of a chunked message is stored (same topic and partition as the
/// message id that carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkStart {
    /// The ledger of the first chunk.
    pub ledger_id: u64,
    /// The entry of the first chunk.
    pub entry_id: u64,
}

impl MessageId {
    /// The position before the first message of a topic (upstream's `MessageId.earliest`).
    pub const EARLIEST: MessageId = MessageId {
        ledger_id: u64::MAX,
        entry_id: u64::MAX,
        partition: -1,
        batch_index: -1,
        batch_size: 0,
        first_chunk: None,
    };

    /// The position after the last message of a topic (upstream's `MessageId.latest`).
    pub const LATEST: MessageId = MessageId {
        ledger_id: i64::MAX as u64,
        entry_id: i64::MAX as u64,
        partition: -1,
        batch_index: -1,
        batch_size: 0,
        first_chunk: None,
    };

    /// A message id of a non-batched message.
    pub fn new(ledger_id: u64, entry_id: u64, partition: i32) -> Self {
        MessageId {
            ledger_id,
            entry_id,
            partition,
            batch_index: -1,
            batch_size: 0,
            first_chunk: None,
        }
    }

    /// Whether this id points into a batch.
    pub fn is_batch(&self) -> bool {
        self.batch_index >= 0
    }

    /// The id of the whole entry (batch index cleared; for a chunked message, its last
    /// chunk's entry).
    pub fn entry(&self) -> MessageId {
        MessageId {
            batch_index: -1,
            batch_size: 0,
            first_chunk: None,
            ..*self
        }
    }

    /// Whether this is the id of a chunked message (it spans a first and a last chunk).
    pub fn is_chunked(&self) -> bool {
        self.first_chunk.is_some()
    }

    /// For a chunked message, the id of its first chunk's entry (`None` otherwise).
    pub fn first_chunk_id(&self) -> Option<MessageId> {
        self.first_chunk
            .map(|c| MessageId::new(c.ledger_id, c.entry_id, self.partition))
    }

    /// The sort key: by ledger, entry (both compared signed, as upstream's `Long.compare`, so
    /// [`EARLIEST`](Self::EARLIEST) sorts first), then batch index with an entry's non-batch id
    /// after every message of that batch, then partition.
    ///
    /// The key holds exactly the identity fields, each mapped injectively, so `cmp` is `Equal`
    /// exactly when `==` holds. Upstream's current `MessageIdAdv.compareTo` orders by ledger,
    /// entry, partition, batch index with a plain integer compare, which puts a non-batch id
    /// (-1) *before* the messages of its batch; its own comment calls that a legacy behaviour
    /// kept for compatibility (apache/pulsar#18981). This crate keeps the order it always had
    /// (the one upstream calls correct: a batch's messages precede the whole entry); the
    /// equality and hash follow upstream exactly.
    fn key(&self) -> (i64, i64, bool, i32, i32) {
        (
            self.ledger_id as i64,
            self.entry_id as i64,
            self.batch_index < 0,
            self.batch_index,
            self.partition,
        )
    }

    pub(crate) fn to_proto(self) -> proto::MessageIdData {
        proto::MessageIdData {
            ledger_id: self.ledger_id,
            entry_id: self.entry_id,
            partition: (self.partition >= 0).then_some(self.partition),
            batch_index: (self.batch_index >= 0).then_some(self.batch_index),
            batch_size: (self.batch_size > 0).then_some(self.batch_size),
            // Upstream `ChunkMessageIdImpl.toByteArray` / seek: the first chunk travels along.
            first_chunk_message_id: self.first_chunk_id().map(|f| Box::new(f.to_proto())),
            ..Default::default()
        }
    }

    pub(crate) fn from_proto(id: &proto::MessageIdData) -> Self {
        MessageId {
            ledger_id: id.ledger_id,
            entry_id: id.entry_id,
            partition: id.partition.unwrap_or(-1),
            batch_index: id.batch_index.unwrap_or(-1),
            batch_size: id.batch_size.unwrap_or(0),
            first_chunk: id.first_chunk_message_id.as_ref().map(|f| ChunkStart {
                ledger_id: f.ledger_id,
                entry_id: f.entry_id,
            }),
        }
    }
}

impl PartialEq for MessageId {
    fn eq(&self, other: &Self) -> bool {
        // The identity fields only: `batch_size` is carried data (see the type's docs).
        self.ledger_id == other.ledger_id
            && self.entry_id == other.entry_id
            && self.partition == other.partition
            && self.batch_index == other.batch_index
    }
}

impl Eq for MessageId {}

impl std::hash::Hash for MessageId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The same fields as `eq`, so equal ids hash equally.
        self.ledger_id.hash(state);
        self.entry_id.hash(state);
        self.partition.hash(state);
        self.batch_index.hash(state);
    }
}

impl PartialOrd for MessageId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MessageId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(first) = self.first_chunk_id() {
            // Upstream `ChunkMessageIdImpl.toString`: first chunk, `-`, last chunk.
            write!(f, "{first}-")?;
        }
        // Java MessageIdImpl.toString is `ledger:entry:partition`; BatchMessageIdImpl adds
        // `:batchIndex`. An id outside a batch (index -1) has no batch part; any other index,
        // even one no broker gives, is printed so that the string parses back to this id.
        write!(
            f,
            "{}:{}:{}",
            self.ledger_id as i64, self.entry_id as i64, self.partition
        )?;
        if self.batch_index != -1 {
            write!(f, ":{}", self.batch_index)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let id = MessageId {
            ledger_id: 5,
            entry_id: 7,
            partition: 2,
            batch_index: 3,
            batch_size: 0,
            first_chunk: None,
        };
        assert_eq!(id.to_string(), "5:7:2:3");
        assert_eq!("5:7:2:3".parse::<MessageId>().unwrap(), id);
        assert_eq!(MessageId::EARLIEST.to_string(), "-1:-1:-1");
        // An id outside a batch has no batch part (Java `MessageIdImpl.toString`).
        assert_eq!(MessageId::new(5, 7, -1).to_string(), "5:7:-1");
        assert_eq!(MessageId::new(5, 7, 2).to_string(), "5:7:2");
        assert_eq!(
            "5:7:2".parse::<MessageId>().unwrap(),
            MessageId::new(5, 7, 2)
        );
        assert_eq!("-1:-1".parse::<MessageId>().unwrap(), MessageId::EARLIEST);
        assert!("x:1".parse::<MessageId>().is_err());
        assert!("1".parse::<MessageId>().is_err());
    }

    #[test]
    fn chunked_ids_display_parse_and_identity() {
        let mut id = MessageId::new(7, 12, 2);
        id.first_chunk = Some(ChunkStart {
            ledger_id: 7,
            entry_id: 9,
        });
        assert_eq!(id.to_string(), "7:9:2-7:12:2");
        let back: MessageId = id.to_string().parse().unwrap();
        assert_eq!(back, id);
        assert_eq!(back.first_chunk, id.first_chunk);
        assert_eq!(back.first_chunk_id(), Some(MessageId::new(7, 9, 2)));
        // Identity is the last chunk's (upstream `ChunkMessageIdImpl` equality).
        assert_eq!(id, MessageId::new(7, 12, 2));
        assert_eq!(hash_of(&id), hash_of(&MessageId::new(7, 12, 2)));
        assert_eq!(id.cmp(&MessageId::new(7, 12, 2)), Ordering::Equal);
        assert_eq!(
            MessageId::from_proto(&id.to_proto()).first_chunk,
            id.first_chunk
        );
        assert!(!id.entry().is_chunked());
        assert!("1:2:0:-1-1:3:1:-1".parse::<MessageId>().is_err());
        assert!("1:2-".parse::<MessageId>().is_err());
        let neg: MessageId = "-1:-1:-1:-1".parse().unwrap();
        assert!(!neg.is_chunked());
    }

    #[test]
    fn ordering_follows_storage_order() {
        let a = MessageId::new(1, 1, -1);
        let b = MessageId::new(1, 2, -1);
        let c = MessageId::new(2, 0, -1);
        assert!(a < b && b < c);
        let mut in_batch = b;
        in_batch.batch_index = 4;
        assert!(
            a < in_batch && in_batch < b,
            "batch members sort before the whole entry"
        );
        assert!(
            MessageId::EARLIEST < a,
            "earliest sorts before every stored message"
        );
        assert!(c < MessageId::LATEST);
    }

    #[test]
    fn proto_round_trip() {
        let id = MessageId {
            ledger_id: 9,
            entry_id: 8,
            partition: 1,
            batch_index: 0,
            batch_size: 3,
            first_chunk: None,
        };
        assert_eq!(MessageId::from_proto(&id.to_proto()), id);
        let plain = MessageId::new(9, 8, -1);
        let p = plain.to_proto();
        assert_eq!(p.partition, None);
        assert_eq!(MessageId::from_proto(&p), plain);
    }

    fn hash_of(id: &MessageId) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(id)
    }

    #[test]
    fn batch_size_is_carried_data_not_identity() {
        // A batched id as the consumer hands it out (with the batch size) ...
        let received = MessageId {
            ledger_id: 12,
            entry_id: 34,
            partition: 1,
            batch_index: 2,
            batch_size: 5,
            first_chunk: None,
        };
        // ... and the same id passed back by the application through its string form.
        let parsed: MessageId = received.to_string().parse().unwrap();
        assert_eq!(parsed.batch_size, 0, "the string form has no batch size");
        assert_eq!(parsed, received);
        assert_eq!(parsed.cmp(&received), Ordering::Equal);
        assert_eq!(hash_of(&parsed), hash_of(&received));
        let mut acked = std::collections::HashMap::new();
        acked.insert(received, "pending");
        assert_eq!(
            acked.get(&parsed),
            Some(&"pending"),
            "a map keyed by id finds it"
        );
        let mut set = std::collections::BTreeSet::new();
        set.insert(received);
        assert!(set.contains(&parsed));
    }

    #[test]
    fn negative_batch_indexes_are_distinct_and_ordered_consistently() {
        // -1 and other negative values (or i32::MAX) must not collapse into one sort key while
        // `==` tells them apart.
        let base = MessageId::new(1, 1, 0);
        let odd = MessageId {
            batch_index: -5,
            ..base
        };
        let max = MessageId {
            batch_index: i32::MAX,
            ..base
        };
        assert_ne!(base, odd);
        assert_ne!(base.cmp(&odd), Ordering::Equal);
        assert_ne!(base, max);
        assert_ne!(base.cmp(&max), Ordering::Equal);
        assert!(
            max < base,
            "batch members (any index) precede the whole entry"
        );
    }

    fn any_id() -> impl proptest::strategy::Strategy<Value = MessageId> {
        use proptest::prelude::*;
        (
            any::<u64>(),
            any::<u64>(),
            prop_oneof![Just(-1), 0..64i32, any::<i32>()],
            prop_oneof![Just(-1), 0..64i32, any::<i32>()],
            prop_oneof![Just(0), 1..64i32, any::<i32>()],
        )
            .prop_map(
                |(ledger_id, entry_id, partition, batch_index, batch_size)| MessageId {
                    ledger_id,
                    entry_id,
                    partition,
                    batch_index,
                    batch_size,
                    first_chunk: None,
                },
            )
    }

    /// Two ids, the second made from the first by changing some fields (often none of the
    /// identity ones, often only the batch size), so equal and near-equal pairs are common.
    fn id_pair() -> impl proptest::strategy::Strategy<Value = (MessageId, MessageId)> {
        use proptest::prelude::*;
        (
            any_id(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(-2..3i32),
            proptest::option::of(-2..3i32),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(|(a, l, e, p, bi, bs)| {
                let b = MessageId {
                    ledger_id: l.unwrap_or(a.ledger_id),
                    entry_id: e.unwrap_or(a.entry_id),
                    partition: p.unwrap_or(a.partition),
                    batch_index: bi.unwrap_or(a.batch_index),
                    batch_size: bs.unwrap_or(a.batch_size),
                    first_chunk: None,
                };
                (a, b)
            })
    }

    proptest::proptest! {
        #[test]
        fn display_then_parse_gives_an_equal_id(id in any_id()) {
            let back: MessageId = id.to_string().parse().unwrap();
            proptest::prop_assert_eq!(back, id);
            proptest::prop_assert_eq!(back.cmp(&id), Ordering::Equal);
            proptest::prop_assert_eq!(hash_of(&back), hash_of(&id));
            proptest::prop_assert_eq!(back.to_string(), id.to_string());
        }

        #[test]
        fn eq_ord_and_hash_agree((a, b) in id_pair()) {
            proptest::prop_assert_eq!(a == b, a.cmp(&b) == Ordering::Equal);
            proptest::prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
            proptest::prop_assert_eq!(a.partial_cmp(&b), Some(a.cmp(&b)));
            if a == b {
                proptest::prop_assert_eq!(hash_of(&a), hash_of(&b));
            }
        }

        #[test]
        fn proto_round_trip_keeps_identity_and_batch_size(id in any_id()) {
            let back = MessageId::from_proto(&id.to_proto());
            // Negative partition / batch index all encode as "absent" (-1).
            let expected = MessageId {
                partition: id.partition.max(-1),
                batch_index: id.batch_index.max(-1),
                batch_size: id.batch_size.max(0),
                ..id
            };
            proptest::prop_assert_eq!(back, expected);
            proptest::prop_assert_eq!(back.batch_size, expected.batch_size);
        }
    }
}
