//! The queue between a consumer's partition tasks and the application: its items, and each
//! partition's share of it.

use crate::error::Error;
use crate::message::Message;

/// What the task puts in the consumer's queue, tagged with the partition's epoch so messages
/// from before a reconnect, seek or redeliver-all can be discarded.
// Nearly every item is a message: boxing it would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Item {
    Message(Message),
    /// An entry discarded as undecodable: it holds a place in the queue (and one flow permit)
    /// like a message until the application takes it, so a broker sending only corrupt
    /// entries cannot grow the queue either.
    Discarded(Error),
    Error(Error),
}

impl Item {
    /// Whether the item holds a place in the partition's share of the queue.
    pub(crate) fn counted(&self) -> bool {
        matches!(self, Item::Message(_) | Item::Discarded(_))
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
}
