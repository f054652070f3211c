//! [`MessageId`]: where a message is stored.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::proto;

/// The id of a stored message: ledger and entry, the partition (-1 if the topic is not
/// partitioned), and for a message in a batch its index and the batch size (-1 / 0 otherwise).
///
/// Displays as `ledger:entry:partition:batch_index` (the form the official clients print) and
/// parses back from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

impl MessageId {
    /// The position before the first message of a topic (upstream's `MessageId.earliest`).
    pub const EARLIEST: MessageId = MessageId {
        ledger_id: u64::MAX,
        entry_id: u64::MAX,
        partition: -1,
        batch_index: -1,
        batch_size: 0,
    };

    /// The position after the last message of a topic (upstream's `MessageId.latest`).
    pub const LATEST: MessageId = MessageId {
        ledger_id: i64::MAX as u64,
        entry_id: i64::MAX as u64,
        partition: -1,
        batch_index: -1,
        batch_size: 0,
    };

    /// A message id of a non-batched message.
    pub fn new(ledger_id: u64, entry_id: u64, partition: i32) -> Self {
        MessageId {
            ledger_id,
            entry_id,
            partition,
            batch_index: -1,
            batch_size: 0,
        }
    }

    /// Whether this id points into a batch.
    pub fn is_batch(&self) -> bool {
        self.batch_index >= 0
    }

    /// The id of the whole entry (batch index cleared).
    pub fn entry(&self) -> MessageId {
        MessageId {
            batch_index: -1,
            batch_size: 0,
            ..*self
        }
    }

    /// The order of two ids on one topic: by ledger, entry, then batch index (an entry's
    /// non-batch id sorts after every message of that batch, like upstream).
    fn key(&self) -> (i64, i64, i32) {
        let batch = if self.batch_index < 0 {
            i32::MAX
        } else {
            self.batch_index
        };
        (self.ledger_id as i64, self.entry_id as i64, batch)
    }

    pub(crate) fn to_proto(self) -> proto::MessageIdData {
        proto::MessageIdData {
            ledger_id: self.ledger_id,
            entry_id: self.entry_id,
            partition: (self.partition >= 0).then_some(self.partition),
            batch_index: (self.batch_index >= 0).then_some(self.batch_index),
            batch_size: (self.batch_size > 0).then_some(self.batch_size),
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
        }
    }
}

impl PartialOrd for MessageId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MessageId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key()
            .cmp(&other.key())
            .then(self.partition.cmp(&other.partition))
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.ledger_id as i64, self.entry_id as i64, self.partition, self.batch_index
        )
    }
}

impl FromStr for MessageId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::InvalidConfig(format!("invalid message id `{s}`: {why}"));
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() < 2 || parts.len() > 4 {
            return Err(bad("expected ledger:entry[:partition[:batch_index]]"));
        }
        let num = |p: &str| p.parse::<i64>().map_err(|_| bad("not a number"));
        let ledger = num(parts[0])?;
        let entry = num(parts[1])?;
        let partition = parts.get(2).map(|p| num(p)).transpose()?.unwrap_or(-1);
        let batch = parts.get(3).map(|p| num(p)).transpose()?.unwrap_or(-1);
        let small = |v: i64| i32::try_from(v).map_err(|_| bad("out of range"));
        Ok(MessageId {
            ledger_id: ledger as u64,
            entry_id: entry as u64,
            partition: small(partition)?,
            batch_index: small(batch)?,
            batch_size: 0,
        })
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
        };
        assert_eq!(id.to_string(), "5:7:2:3");
        assert_eq!("5:7:2:3".parse::<MessageId>().unwrap(), id);
        assert_eq!(MessageId::EARLIEST.to_string(), "-1:-1:-1:-1");
        assert_eq!("-1:-1".parse::<MessageId>().unwrap(), MessageId::EARLIEST);
        assert!("x:1".parse::<MessageId>().is_err());
        assert!("1".parse::<MessageId>().is_err());
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
        };
        assert_eq!(MessageId::from_proto(&id.to_proto()), id);
        let plain = MessageId::new(9, 8, -1);
        let p = plain.to_proto();
        assert_eq!(p.partition, None);
        assert_eq!(MessageId::from_proto(&p), plain);
    }
}
