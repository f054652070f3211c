//! Subscriptions: a cursor over the topic's entries, the consumers attached, what is
//! dispatched and not yet acknowledged, and what waits for redelivery.
//!
//! The cursor follows a managed cursor: every entry below `ack_floor` is acknowledged (the
//! mark-delete position is `ack_floor - 1`); above it, entries acknowledged individually are in
//! `acked`, and batch entries acknowledged in part keep the bitset of their still-unacknowledged
//! messages in `partial` (upstream `batchDeletedIndexes`: a set bit is a message not yet
//! acknowledged; acks AND their `ack_set` in, an empty set acknowledges the entry). Entries at or
//! above `read_pos` have never been dispatched since the last reset.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::bitset::full_bitset;
use super::hashing;
use super::wire;
use super::ConnectionId;

pub(crate) use wire::command_subscribe::SubType;

/// A consumer: (connection, consumer id).
pub(crate) type ConsumerKey = (ConnectionId, u64);

/// A consumer attached to a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Consumer {
    /// Who.
    pub(crate) key: ConsumerKey,
    /// `consumer_name` from SUBSCRIBE (may be empty).
    pub(crate) name: String,
    /// `priority_level` from SUBSCRIBE (lower is served first; default 0).
    pub(crate) priority: i32,
    /// Flow permits left. May go negative: an entry is sent to a consumer with any permit left
    /// and costs its number of messages, as upstream.
    pub(crate) permits: i64,
    /// The consumer epoch (from SUBSCRIBE, raised by REDELIVER), echoed in MESSAGE.
    pub(crate) epoch: Option<u64>,
    /// Whether it was sent REACHED_END_OF_TOPIC (sent once per attachment).
    pub(crate) reached_end: bool,
    /// Tells apart consumers of the same name on the Key_Shared hash ring: the lowest index no
    /// other attached consumer of that name holds (upstream `ConsumerNameIndexTracker`).
    pub(crate) name_index: u32,
    /// Subscribed with an AUTO_CONSUME schema (does not make the topic busy for a schema
    /// check, upstream `addSchemaIfIdleOrCheckCompatible`).
    pub(crate) auto_consume: bool,
}

/// One subscription of a topic.
#[derive(Debug)]
pub(crate) struct Subscription {
    /// Its name.
    pub(crate) name: String,
    /// The type; may change while no consumer is attached.
    pub(crate) sub_type: SubType,
    /// `false` for non-durable subscriptions (readers, non-persistent topics): removed when
    /// the last consumer leaves.
    pub(crate) durable: bool,
    /// `subscription_properties` given when it was created.
    pub(crate) properties: Vec<wire::KeyValue>,
    /// Attached consumers, in subscribe order.
    pub(crate) consumers: Vec<Consumer>,
    /// Exclusive/Failover: the consumer dispatched to.
    pub(crate) active: Option<ConsumerKey>,
    /// Every entry below this is acknowledged.
    pub(crate) ack_floor: u64,
    /// The next entry never dispatched.
    pub(crate) read_pos: u64,
    /// Entries at or above `ack_floor` fully acknowledged.
    acked: BTreeSet<u64>,
    /// Batch entries partly acknowledged: bitset of the messages still unacknowledged.
    partial: BTreeMap<u64, Vec<i64>>,
    /// Dispatched, unacknowledged entries and the consumer holding each.
    pub(crate) pending: BTreeMap<u64, ConsumerKey>,
    /// Entries to dispatch again (before new ones), in entry order.
    pub(crate) replay: BTreeSet<u64>,
    /// Redelivery counts (Shared/Key_Shared only; upstream disables the tracker for
    /// Exclusive/Failover, so those always deliver 0).
    redelivery: HashMap<u64, u32>,
    /// Round-robin cursor over `consumers` (Shared).
    rr: usize,
    /// Key_Shared hash ring (point → consumer, sorted by point) and the consumers it was built
    /// for; rebuilt when they change.
    ring: Vec<(u32, ConsumerKey)>,
    ring_of: Vec<ConsumerKey>,
    /// Acknowledgements pending in open transactions (PIP-31).
    pub(crate) txn_acks: super::txn_state::PendingAcks,
}

impl Subscription {
    /// A subscription whose cursor starts at entry `start`.
    pub(crate) fn new(name: &str, sub_type: SubType, durable: bool, start: u64) -> Self {
        Subscription {
            name: name.to_owned(),
            sub_type,
            durable,
            properties: Vec::new(),
            consumers: Vec::new(),
            active: None,
            ack_floor: start,
            read_pos: start,
            acked: BTreeSet::new(),
            partial: BTreeMap::new(),
            pending: BTreeMap::new(),
            replay: BTreeSet::new(),
            redelivery: HashMap::new(),
            rr: 0,
            ring: Vec::new(),
            ring_of: Vec::new(),
            txn_acks: Default::default(),
        }
    }

    /// Whether one consumer at a time receives (Exclusive, Failover).
    pub(crate) fn single_active(&self) -> bool {
        matches!(self.sub_type, SubType::Exclusive | SubType::Failover)
    }

    /// The consumer `key`, if attached.
    pub(crate) fn consumer_mut(&mut self, key: ConsumerKey) -> Option<&mut Consumer> {
        self.consumers.iter_mut().find(|c| c.key == key)
    }

    /// Whether entry `e` is fully acknowledged.
    pub(crate) fn is_acked(&self, e: u64) -> bool {
        e < self.ack_floor || self.acked.contains(&e)
    }

    /// The still-unacknowledged messages of a partly acknowledged batch entry.
    pub(crate) fn remaining(&self, e: u64) -> Option<&Vec<i64>> {
        self.partial.get(&e)
    }

    /// The redelivery count to put in a MESSAGE for entry `e`.
    pub(crate) fn redelivery_count(&self, e: u64) -> u32 {
        self.redelivery.get(&e).copied().unwrap_or(0)
    }

    /// Entries not yet acknowledged, out of `len` stored (a partly acknowledged batch counts
    /// as one, like upstream's entry backlog).
    pub(crate) fn backlog(&self, len: u64) -> usize {
        if self.ack_floor >= len {
            return 0;
        }
        let above = self.acked.range(self.ack_floor..len).count() as u64;
        len.saturating_sub(self.ack_floor).saturating_sub(above) as usize
    }

    /// Individual ack of entry `e` holding `num_messages` messages; a non-empty `ack_set`
    /// acknowledges only the messages whose bit is clear.
    pub(crate) fn ack_individual(&mut self, e: u64, ack_set: &[i64], num_messages: u32) {
        if self.is_acked(e) {
            return;
        }
        if !ack_set.is_empty() {
            let remaining = self
                .partial
                .entry(e)
                .or_insert_with(|| full_bitset(num_messages));
            for (i, word) in remaining.iter_mut().enumerate() {
                *word &= ack_set.get(i).copied().unwrap_or(0);
            }
            if remaining.iter().any(|w| *w != 0) {
                return;
            }
        }
        self.partial.remove(&e);
        self.pending.remove(&e);
        self.replay.remove(&e);
        self.redelivery.remove(&e);
        self.acked.insert(e);
        while self.acked.remove(&self.ack_floor) {
            self.ack_floor += 1;
        }
    }

    /// Cumulative ack up to and including entry `e` (with a non-empty `ack_set`, the entries
    /// before `e` and the acknowledged messages of `e`).
    pub(crate) fn ack_cumulative(&mut self, e: u64, ack_set: &[i64], num_messages: u32) {
        let floor = if ack_set.is_empty() { e + 1 } else { e };
        if floor > self.ack_floor {
            self.ack_floor = floor;
            self.acked = self.acked.split_off(&floor);
            self.partial = self.partial.split_off(&floor);
            self.pending = self.pending.split_off(&floor);
            self.replay = self.replay.split_off(&floor);
            self.redelivery.retain(|entry, _| *entry >= floor);
            self.read_pos = self.read_pos.max(floor);
        }
        if !ack_set.is_empty() {
            self.ack_individual(e, ack_set, num_messages);
        }
        while self.acked.remove(&self.ack_floor) {
            self.ack_floor += 1;
        }
    }

    /// Returns the entries `key` holds to the subscription for redelivery (on disconnect,
    /// close, or REDELIVER without ids). With `count`, their redelivery counts go up.
    pub(crate) fn return_pending_of(&mut self, key: ConsumerKey, count: bool) {
        let held: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, holder)| **holder == key)
            .map(|(e, _)| *e)
            .collect();
        for e in held {
            self.return_entry(e, count);
        }
    }

    /// Returns every dispatched, unacknowledged entry to the subscription for redelivery
    /// (its consumers were all detached), without counting a redelivery.
    pub(crate) fn return_all_pending(&mut self) {
        let held: Vec<u64> = self.pending.keys().copied().collect();
        for e in held {
            self.return_entry(e, false);
        }
    }

    /// Whether everything stored (`len` entries) was dispatched and acknowledged: on a
    /// terminated topic, the consumers have reached its end.
    pub(crate) fn at_end(&self, len: u64) -> bool {
        self.read_pos >= len && self.replay.is_empty() && self.backlog(len) == 0
    }

    /// Returns entry `e` to the subscription if `key` holds it (REDELIVER with ids).
    pub(crate) fn return_if_held(&mut self, key: ConsumerKey, e: u64, count: bool) {
        if self.pending.get(&e) == Some(&key) {
            self.return_entry(e, count);
        }
    }

    fn return_entry(&mut self, e: u64, count: bool) {
        self.pending.remove(&e);
        self.replay.insert(e);
        if count && !self.single_active() {
            *self.redelivery.entry(e).or_default() += 1;
        }
    }

    /// Resets the cursor to entry `pos` (seek): everything before is acknowledged, nothing
    /// after, nothing pending or waiting for redelivery.
    pub(crate) fn reset(&mut self, pos: u64) {
        self.ack_floor = pos;
        self.read_pos = pos;
        self.acked.clear();
        self.partial.clear();
        self.pending.clear();
        self.replay.clear();
        self.redelivery.clear();
    }

    /// Exclusive/Failover: who should be active. Failover orders the consumers of the best
    /// (lowest) priority level by name (stable: ties keep subscribe order) and picks
    /// `partition % count` (the first one on a non-partitioned topic), as upstream's
    /// `AbstractDispatcherSingleActiveConsumer` does for partitions.
    pub(crate) fn pick_active(&self, partition: i32) -> Option<ConsumerKey> {
        let best = self.consumers.iter().map(|c| c.priority).min()?;
        let mut candidates: Vec<&Consumer> = self
            .consumers
            .iter()
            .filter(|c| c.priority == best)
            .collect();
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        let index = usize::try_from(partition.max(0)).unwrap_or(0) % candidates.len();
        Some(candidates[index].key)
    }

    /// Shared: the next consumer, round robin, among those of the best priority level that
    /// have permits.
    pub(crate) fn next_shared(&mut self) -> Option<ConsumerKey> {
        let best = self
            .consumers
            .iter()
            .filter(|c| c.permits > 0)
            .map(|c| c.priority)
            .min()?;
        let n = self.consumers.len();
        let start = self.rr % n;
        let index = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.consumers[i].permits > 0 && self.consumers[i].priority == best)?;
        self.rr = index + 1;
        Some(self.consumers[index].key)
    }

    /// The name index a consumer named `name` joining now gets (upstream
    /// `ConsumerNameIndexTracker`: the lowest one not held by an attached consumer of that name).
    pub(crate) fn free_name_index(&self, name: &str) -> u32 {
        (0..)
            .find(|i| {
                !self
                    .consumers
                    .iter()
                    .any(|c| c.name == name && c.name_index == *i)
            })
            .unwrap_or(0)
    }

    /// Key_Shared: the consumer owning `key`, as upstream's default selector in AUTO_SPLIT mode
    /// (`ConsistentHashingStickyKeyConsumerSelector`): the key's slot is
    /// [`hashing::sticky_key_hash`]; every consumer puts [`hashing::RING_POINTS`] points on a
    /// ring ([`hashing::ring_point`]; on a collision the consumer added first keeps the point);
    /// the key goes to the consumer of the first point at or after its slot, wrapping around.
    pub(crate) fn key_owner(&mut self, key: &[u8]) -> Option<ConsumerKey> {
        if self.consumers.is_empty() {
            return None;
        }
        let keys: Vec<ConsumerKey> = self.consumers.iter().map(|c| c.key).collect();
        if self.ring_of != keys {
            let mut ring: BTreeMap<u32, ConsumerKey> = BTreeMap::new();
            for c in &self.consumers {
                for point in 0..hashing::RING_POINTS {
                    ring.entry(hashing::ring_point(&c.name, c.name_index, point))
                        .or_insert(c.key);
                }
            }
            self.ring = ring.into_iter().collect();
            self.ring_of = keys;
        }
        let slot = hashing::sticky_key_hash(key);
        let at = self.ring.partition_point(|(point, _)| *point < slot);
        Some(self.ring.get(at).unwrap_or(&self.ring[0]).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> ConsumerKey {
        (ConnectionId(1), n)
    }

    #[test]
    fn individual_and_batch_acks_move_the_floor() {
        let mut s = Subscription::new("s", SubType::Shared, true, 0);
        s.ack_individual(1, &[], 1);
        assert_eq!((s.ack_floor, s.backlog(4)), (0, 3));
        s.ack_individual(0, &[], 1);
        assert_eq!((s.ack_floor, s.backlog(4)), (2, 2));
        // Entry 2 is a batch of 3: ack message 0, then 1 and 2.
        s.ack_individual(2, &[0b110], 3);
        assert!(!s.is_acked(2));
        assert_eq!(s.remaining(2), Some(&vec![0b110]));
        s.ack_individual(2, &[0b001], 3);
        assert!(s.is_acked(2));
        assert_eq!((s.ack_floor, s.backlog(4)), (3, 1));
    }

    #[test]
    fn cumulative_acks_and_redelivery() {
        let mut s = Subscription::new("s", SubType::Shared, true, 0);
        s.pending.insert(0, key(1));
        s.pending.insert(1, key(1));
        s.pending.insert(2, key(2));
        s.return_pending_of(key(1), true);
        assert_eq!(s.replay.iter().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(s.redelivery_count(0), 1);
        s.ack_cumulative(1, &[], 1);
        assert!(s.replay.is_empty());
        assert_eq!(s.ack_floor, 2);
        s.return_if_held(key(1), 2, true); // held by 2: untouched
        assert_eq!(s.pending.get(&2), Some(&key(2)));
        s.ack_cumulative(2, &[0b10], 2); // batch of 2, message 0 acked
        assert_eq!((s.ack_floor, s.remaining(2)), (2, Some(&vec![0b10])));
    }

    #[test]
    fn consumer_selection() {
        let mut s = Subscription::new("s", SubType::Failover, true, 0);
        for (id, name, priority) in [(1, "b", 0), (2, "a", 0), (3, "0", 1)] {
            s.consumers.push(Consumer {
                key: key(id),
                name: name.into(),
                priority,
                permits: 1,
                epoch: None,
                reached_end: false,
                name_index: 0,
                auto_consume: false,
            });
        }
        assert_eq!(s.pick_active(-1), Some(key(2)));
        assert_eq!(s.pick_active(1), Some(key(1)));
        assert_eq!(s.next_shared(), Some(key(1)));
        assert_eq!(s.next_shared(), Some(key(2)));
        assert_eq!(s.next_shared(), Some(key(1)));
        s.consumers[0].permits = 0;
        s.consumers[1].permits = 0;
        assert_eq!(s.next_shared(), Some(key(3)));
        assert_eq!(s.key_owner(b"k"), s.key_owner(b"k"));
    }
}
