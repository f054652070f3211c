//! Where a table view has read to, per partition, and when that covers the last message a
//! refresh asked the broker about (upstream `AbstractTableViewImpl.lastReadPositions`,
//! `filterReceivedMessages` and `checkFreshTask`).

use crate::consumer::op::LastIds;
use crate::error::{Error, Result, ServerError};
use crate::message_id::MessageId;

/// The id of the last message read from each partition (slot 0: a non-partitioned topic,
/// slot `p + 1`: partition `p`). Grows with the partitions; one id each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Positions(Vec<Option<MessageId>>);

impl Positions {
    fn slot(partition: i32) -> usize {
        usize::try_from(partition.saturating_add(1)).unwrap_or(0)
    }

    /// `id` was read (its partition's position moves to it).
    pub(crate) fn record(&mut self, id: MessageId) {
        let slot = Self::slot(id.partition);
        if self.0.len() <= slot {
            self.0.resize(slot + 1, None);
        }
        self.0[slot] = Some(id);
    }

    /// The last message read from `partition`, if any.
    pub(crate) fn get(&self, partition: i32) -> Option<MessageId> {
        self.0.get(Self::slot(partition)).copied().flatten()
    }

    /// Whether every partition of `targets` was read up to its target.
    pub(crate) fn covers(&self, targets: &[MessageId]) -> bool {
        targets
            .iter()
            .all(|t| self.get(t.partition).is_some_and(|read| reached(read, *t)))
    }
}

/// Whether a partition read up to `read` has read `last`, the last message stored on it when
/// a refresh asked (both ids of that partition).
///
/// Upstream completes a partition once `messageId.compareTo(lastMessageId) >= 0`. A broker
/// names the last message of a batch with its batch index (Apache Pulsar's
/// `ServerCnx.handleGetLastMessageId` reads the entry's batch size); one that names the whole
/// entry (pulsar-lite: no batch index) is read once the batch's last message is, never after
/// its first only: the other messages of that batch would be missing from the view.
pub(crate) fn reached(read: MessageId, last: MessageId) -> bool {
    let r = (read.ledger_id as i64, read.entry_id as i64);
    let l = (last.ledger_id as i64, last.entry_id as i64);
    if r != l {
        return r > l;
    }
    if last.is_batch() {
        return !read.is_batch() || read.batch_index >= last.batch_index;
    }
    // The whole entry: its last message (a batch size we do not know counts as read).
    !read.is_batch() || read.batch_size <= 0 || read.batch_index >= read.batch_size - 1
}

/// The last stored message of each partition that has one, from the answers to
/// GET_LAST_MESSAGE_ID (upstream `getLastMessageIdOfNonEmptyTopics`: an entry id below 0 is an
/// empty partition, with nothing to read). The first failure fails the whole.
pub(crate) fn targets(answers: Vec<Result<LastIds>>) -> Result<Vec<MessageId>> {
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        match answer {
            Ok(ids) if (ids.last.entry_id as i64) >= 0 => out.push(ids.last),
            Ok(_) => {}
            // pulsar-lite answers an empty topic with an error instead of an empty position
            // (shared/design/pulsar-lite.md): that partition has nothing stored.
            Err(Error::Broker {
                code: ServerError::UnknownError,
                message,
            }) if message.contains("no messages") => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(entry: u64, index: i32, size: i32) -> MessageId {
        MessageId {
            batch_index: index,
            batch_size: size,
            ..MessageId::new(3, entry, 1)
        }
    }

    #[test]
    fn a_last_id_with_its_batch_index_is_reached_at_that_message() {
        let last = batch(5, 2, 4);
        assert!(!reached(batch(5, 1, 4), last));
        assert!(reached(batch(5, 2, 4), last));
        assert!(reached(batch(6, 0, 1), last));
        assert!(!reached(batch(4, 3, 4), last));
    }

    #[test]
    fn a_last_id_of_a_whole_entry_is_reached_at_the_last_message_of_its_batch() {
        let last = MessageId::new(3, 5, 1);
        assert!(!reached(batch(5, 0, 3), last), "the batch's first only");
        assert!(reached(batch(5, 2, 3), last));
        assert!(reached(MessageId::new(3, 5, 1), last), "not a batch");
        assert!(!reached(MessageId::new(3, 4, 1), last));
        assert!(reached(MessageId::new(4, 0, 1), last), "a later ledger");
    }

    #[test]
    fn positions_cover_targets_per_partition() {
        let mut p = Positions::default();
        let t0 = MessageId::new(1, 2, 0);
        let t2 = MessageId::new(1, 7, 2);
        assert!(p.covers(&[]));
        assert!(!p.covers(&[t0]));
        p.record(MessageId::new(1, 2, 0));
        assert!(p.covers(&[t0]));
        assert!(!p.covers(&[t0, t2]), "nothing read from partition 2");
        p.record(MessageId::new(1, 8, 2));
        assert!(p.covers(&[t0, t2]));
        p.record(MessageId::new(9, 9, -1));
        assert_eq!(p.get(-1), Some(MessageId::new(9, 9, -1)));
    }

    #[test]
    fn empty_partitions_have_no_target_and_a_failure_fails_the_whole() {
        let empty = LastIds {
            last: MessageId::new(4, u64::MAX, 0),
            mark_delete: None,
        };
        let full = LastIds {
            last: MessageId::new(4, 3, 1),
            mark_delete: None,
        };
        let lite = Err(Error::Broker {
            code: ServerError::UnknownError,
            message: "Topic has no messages".into(),
        });
        assert_eq!(
            targets(vec![Ok(empty), Ok(full), lite]).unwrap(),
            vec![full.last]
        );
        assert!(targets(vec![Ok(full), Err(Error::Closed)]).is_err());
    }
}
