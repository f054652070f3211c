//! The queue between a consumer's partition tasks and the application: its items, and each
//! partition's share of it.

use std::sync::Arc;

use super::entry::{Entry, EntryHead, Record, Records};
use crate::error::Error;

use super::task::PartitionShared;

/// What the task puts in the consumer's queue, tagged with the partition's epoch so messages
/// from before a reconnect, seek or redeliver-all can be discarded.
#[derive(Debug)]
pub(crate) enum Item {
    /// The messages of one delivered entry (a batch's, or one), in order; never empty. One
    /// item per entry, not per message: a `Message` is ~270 bytes, and queueing each one
    /// moved it through the channel's push, pop and receive and cost a channel operation per
    /// message (issue #18's profile: a third of the consume path). Kept compact (see
    /// [`Entry`]); the handle takes them out one at a time (`Consumer::take_buffered`), so
    /// each still counts, for flow permits and the queue's room, only once the application
    /// takes it.
    Messages(Entry),
    /// An entry discarded as undecodable: it holds a place in the queue (and one flow permit)
    /// like a message until the application takes it, so a broker sending only corrupt
    /// entries cannot grow the queue either.
    Discarded(Error),
    Error(Error),
    /// The broker said the subscription reached the end of its terminated topic (sent once
    /// per partition): the handle reports it once every partition of every topic got there.
    EndOfTopic,
}

impl Item {
    /// How many places the item holds in the partition's share of the queue.
    pub(crate) fn counted(&self) -> u64 {
        match self {
            Item::Messages(e) => e.records.len() as u64,
            Item::Discarded(_) => 1,
            Item::Error(_) | Item::EndOfTopic => 0,
        }
    }
}

/// A partition's share of the queue between its task and the application. Nothing is taken
/// out of the queue when the partition re-subscribes (the handle discards stale items as it
/// reads them), so unlike upstream, which clears its receiver queue before the new
/// subscription's first FLOW, a new subscription is granted only the room that is free, and
/// the rest as the stale items are taken out. Together with the flow-control check this
/// bounds the queue by the receiver queue size, the overshoot tolerance and one batch, across
/// any number of reconnects.
#[derive(Debug, Default)]
pub(crate) struct QueueRoom {
    /// Counted items of this partition in the queue, of every epoch.
    pub queued: u64,
    /// Permits the current subscription's first FLOW left out because older items filled the
    /// queue: granted one by one as those items are taken out.
    pub withheld: u64,
    /// Messages counted as consumed for flow control since the last FLOW refill (see
    /// [`QueueRoom::consume`]).
    pub consumed: u32,
    /// Messages the application has taken from the queue (of any epoch): the ack timeout's
    /// clock of a message starts then (see `unacked`).
    pub taken: u64,
}

impl QueueRoom {
    /// Counts `n` messages as consumed for flow control; returns the permits to grant now
    /// (once half the receiver queue, `refill_at`, is due).
    pub(crate) fn consume(&mut self, n: u32, refill_at: u32) -> Option<u32> {
        self.consumed = self.consumed.saturating_add(n);
        if self.consumed >= refill_at {
            Some(std::mem::take(&mut self.consumed))
        } else {
            None
        }
    }
}

/// The messages of the entry the handle is handing out (taken from the queue as one item, out
/// of it one by one: they count as queued until the application takes each).
#[derive(Debug)]
pub(crate) struct Buffered {
    /// The task that delivered them (looked up once per entry, not per message).
    pub part: Option<Arc<PartitionShared>>,
    /// The epoch they were queued in.
    pub epoch: u64,
    /// What the messages share (`Some` whenever `part` is).
    pub head: Option<EntryHead>,
    pub records: smallvec::IntoIter<[Record; 1]>,
}

impl Default for Buffered {
    fn default() -> Self {
        Buffered {
            part: None,
            epoch: 0,
            head: None,
            records: Records::new().into_iter(),
        }
    }
}
