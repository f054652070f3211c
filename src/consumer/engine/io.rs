//! What a partition task talks through, as one state its parts borrow: the entity (the broker
//! side: connection, control frames, reconnects), the queue to the application, the state it
//! shares with the handles, and its options. The task's other states (`Flow`, `Intake`,
//! `Acks`, `Seeks`) take it as an argument instead of reaching into the task.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::consumer::handle::PartitionShared;
use crate::consumer::options::{ConsumerOptions, SubscriptionType};
use crate::consumer::queue::Item;
use crate::entity::Entity;

/// A partition task's ends (see the module).
pub(crate) struct Io {
    pub entity: Entity,
    pub partition: i32,
    pub index: usize,
    pub opts: Arc<ConsumerOptions>,
    pub out: crate::consumer::queue::QueueSender,
    pub shared: Arc<PartitionShared>,
}

impl Io {
    pub(crate) fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Puts an item in the queue. The messages of an [`Item::Messages`] come with their
    /// `source` set and numbered in `queued_messages` (see `Intake::deliver`).
    pub(crate) fn emit(&mut self, item: Item) {
        let counted = item.counted();
        if counted > 0 {
            self.shared.room().queued += counted;
        }
        if self.out.send((self.index, self.epoch(), item)).is_err() && counted > 0 {
            // The handle is gone: nothing will take it out.
            let mut room = self.shared.room();
            room.queued = room.queued.saturating_sub(counted);
        }
    }

    /// Upstream keeps no ack state for non-persistent topics (a no-op ack tracker): their
    /// messages all carry the same id, and acks mean nothing to the broker.
    pub(crate) fn persistent(&self) -> bool {
        self.entity.topic.is_persistent()
    }

    /// Exclusive and Failover subscriptions have one active consumer: the broker cannot
    /// redeliver single messages to it, only rewind (upstream ConsumerImpl redelivers all on
    /// those subscription types).
    pub(crate) fn single_active(&self) -> bool {
        matches!(
            self.opts.subscription_type,
            SubscriptionType::Exclusive | SubscriptionType::Failover
        )
    }

    /// The broker's maximum message size (the client's default before it said).
    pub(crate) fn max_message_size(&self) -> usize {
        self.entity
            .conn
            .as_ref()
            .map_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE, |c| {
                c.info().max_message_size
            })
    }
}
