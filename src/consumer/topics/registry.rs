//! The registry of a consumer's partition tasks: every task of every topic it receives from
//! (partitions, the retry topic's partitions), by a stable index that queued items and
//! messages carry (`Message::source`) so acks route back to the task that delivered them.
//!
//! Indexes are never reused: an item still queued from a task that was removed (a topic that a
//! pattern consumer dropped) must not be taken for an item of a new task. Removed tasks leave
//! the map, so its size follows the live tasks, not the history.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::consumer::handle::PartitionShared;
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    by_index: BTreeMap<usize, Arc<PartitionShared>>,
    next: usize,
    /// Woken when a task ends because its topic was deleted.
    pub(crate) ended: Arc<tokio::sync::Notify>,
}

/// Shared between the consumer handle, its [`Acker`](crate::consumer::Acker) and the tasks that add
/// partitions or topics.
pub(crate) type Registry = Arc<Mutex<Tasks>>;

/// Locks a registry (a poisoned lock still holds consistent data: every change is one call).
pub(crate) fn lock(registry: &Registry) -> std::sync::MutexGuard<'_, Tasks> {
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tasks {
    /// Reserves `n` fresh indexes (filled in as their tasks start).
    pub(crate) fn reserve(&mut self, n: usize) -> Range<usize> {
        let start = self.next;
        self.next += n;
        start..self.next
    }

    /// Puts a task at its (reserved) index.
    pub(crate) fn insert(&mut self, index: usize, shared: Arc<PartitionShared>) {
        self.next = self.next.max(index + 1);
        self.by_index.insert(index, shared);
    }

    /// The task at `index`, if it is live.
    pub(crate) fn get(&self, index: usize) -> Option<Arc<PartitionShared>> {
        self.by_index.get(&index).cloned()
    }

    /// The task at `index`, if it is live, borrowed (while the registry is locked).
    pub(crate) fn get_ref(&self, index: usize) -> Option<&Arc<PartitionShared>> {
        self.by_index.get(&index)
    }

    /// Forgets the task at `index` (its topic was removed); the handle discards its messages
    /// still queued (it holds the task of the entry it hands out, not its index: the flag
    /// tells it).
    pub(crate) fn remove(&mut self, index: usize) -> Option<Arc<PartitionShared>> {
        let removed = self.by_index.remove(&index);
        if let Some(p) = &removed {
            p.handles
                .removed
                .store(true, std::sync::atomic::Ordering::Release);
        }
        removed
    }

    /// Every live task, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<PartitionShared>> {
        self.by_index.values()
    }

    /// Every live task with its index.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (usize, &Arc<PartitionShared>)> {
        self.by_index.iter().map(|(i, p)| (*i, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_never_reused() {
        let mut t = Tasks::default();
        assert_eq!(t.reserve(3), 0..3);
        assert_eq!(t.reserve(2), 3..5);
        assert!(t.remove(1).is_none());
        assert_eq!(t.reserve(1), 5..6);
        assert_eq!(t.iter().count(), 0);
    }
}

/// The tasks that could own an id, which names no topic (only its partition number).
#[derive(Debug)]
pub(crate) struct IdOwners {
    /// A task of a main topic with the id's partition number (the first one found).
    pub main: Option<Arc<PartitionShared>>,
    /// How many main-topic tasks have that partition number (more than one: ambiguous).
    pub mains: usize,
    /// Whether a retry-topic task has it too (the id may be the retry topic's).
    pub retry: bool,
}

impl Tasks {
    /// Who could own `id`, without allocating (acks by id take this on every call).
    pub(crate) fn owners_of_id(&self, id: &MessageId) -> IdOwners {
        let mut owners = IdOwners {
            main: None,
            mains: 0,
            retry: false,
        };
        for p in self.iter().filter(|p| p.partition == id.partition) {
            if p.main {
                owners.mains += 1;
                if owners.main.is_none() {
                    owners.main = Some(p.clone());
                }
            } else {
                owners.retry = true;
            }
        }
        owners
    }

    /// The task of `topic` (a partition's name, or a partitioned topic's name with the id's
    /// partition) that owns `id`: how ids that name their topic are routed (acks, seeks).
    pub(crate) fn owner_of_topic(
        &self,
        topic: &TopicName,
        id: &MessageId,
    ) -> Option<Arc<PartitionShared>> {
        self.iter()
            .find(|p| {
                &p.topic == topic || (p.main && &p.base == topic && p.partition == id.partition)
            })
            .cloned()
    }
}
