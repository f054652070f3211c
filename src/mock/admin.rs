//! The in-memory broker's admin view: what a test can ask or set besides the wire protocol
//! (topics, subscriptions, backlogs), like a real broker's admin REST API.
//!
//! Topic names may be given in any form (`t`, `tenant/ns/t`, `persistent://tenant/ns/t`).
//! Lifecycle operations (namespaces, unload, termination, deletion) are in `ops`.

use super::namespace::canonical_topic;
use super::namespace::namespace_of;
use super::{lock, MockBroker};

/// Counters of a mock broker, for leak checks (see [`MockBroker::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MockBrokerStats {
    /// Connections accepted so far (TCP and duplex, live or not).
    pub accepted_connections: usize,
    /// Live connections.
    pub connections: usize,
    /// Producers on this broker's live connections (including those queued for exclusive
    /// access).
    pub producers: usize,
    /// Consumers on this broker's live connections.
    pub consumers: usize,
    /// Topics that exist (in the storage, shared by the brokers of a cluster).
    pub topics: usize,
    /// Namespaces that exist (in the storage, shared by the brokers of a cluster).
    pub namespaces: usize,
}

impl MockBroker {
    /// Creates partitioned topic `topic` with `partitions` partitions: sets its partition
    /// count in the metadata (as [`set_partitions`](Self::set_partitions), which notifies
    /// PIP-247 watchers of a change) and creates the
    /// partitions `<topic>-partition-<i>`, which are ordinary topics. Returns `false` (and
    /// does nothing) if topics cannot be created in its namespace (terminated, or being
    /// deleted).
    pub fn create_partitioned_topic(&self, topic: &str, partitions: u32) -> bool {
        let topic = canonical_topic(topic);
        let mut state = lock(&self.shared().state);
        let ns = namespace_of(&topic);
        if state.topics.namespaces.creation_refusal(&ns).is_some() {
            return false;
        }
        for i in 0..partitions {
            state
                .topics
                .get_or_create(&format!("{topic}-partition-{i}"));
        }
        super::watchers::set_partitions(&mut state, &topic, partitions);
        true
    }

    /// Creates topic `topic` (non-partitioned) if it does not exist. Returns whether it exists
    /// now: `false` if it did not and topics cannot be created in its namespace (terminated,
    /// or being deleted).
    pub fn create_topic(&self, topic: &str) -> bool {
        let mut state = lock(&self.shared().state);
        if state.topics.get(topic).is_none() {
            let ns = namespace_of(&canonical_topic(topic));
            if state.topics.namespaces.creation_refusal(&ns).is_some() {
                return false;
            }
        }
        state.topics.get_or_create(topic);
        super::topic_lists::sync(&mut state);
        true
    }

    /// Stores an entry in persistent topic `topic` (created if needed) exactly as given, as if
    /// a producer had sent it, and dispatches it to the topic's consumers. For entries no
    /// well-behaved producer writes: corrupt payloads, chunks, odd metadata. Returns the
    /// entry id, or `None` if the topic cannot be created or is not persistent.
    pub fn publish_raw(
        &self,
        topic: &str,
        metadata: super::wire::MessageMetadata,
        data: bytes::Bytes,
    ) -> Option<u64> {
        if !self.create_topic(topic) {
            return None;
        }
        let mut state = lock(&self.shared().state);
        let super::state::BrokerState { topics, conns, .. } = &mut *state;
        let topic = topics.get_mut(topic)?;
        if !topic.persistent {
            return None;
        }
        let entry = topic.append(metadata, data);
        super::dispatch::dispatch_all(topic, conns);
        Some(entry)
    }

    /// Whether topic `topic` exists (was created by a producer, a consumer or the admin API;
    /// a partitioned topic itself does not, its partitions do).
    pub fn topic_exists(&self, topic: &str) -> bool {
        lock(&self.shared().state).topics.get(topic).is_some()
    }

    /// How many entries topic `topic` stores (a batch is one entry; 0 for an unknown or
    /// non-persistent topic). Entries are never trimmed, whatever is acknowledged.
    pub fn topic_messages(&self, topic: &str) -> usize {
        lock(&self.shared().state)
            .topics
            .get(topic)
            .map_or(0, |t| t.messages.len())
    }

    /// The subscriptions of topic `topic`, sorted by name.
    pub fn subscriptions(&self, topic: &str) -> Vec<String> {
        lock(&self.shared().state)
            .topics
            .get(topic)
            .map_or_else(Vec::new, |t| t.subscriptions.keys().cloned().collect())
    }

    /// The properties subscription `subscription` of topic `topic` was created with
    /// (`subscription_properties` of the SUBSCRIBE that created it), as (key, value) pairs;
    /// `None` if it does not exist.
    pub fn subscription_properties(
        &self,
        topic: &str,
        subscription: &str,
    ) -> Option<Vec<(String, String)>> {
        let state = lock(&self.shared().state);
        let sub = state.topics.get(topic)?.subscriptions.get(subscription)?;
        Some(
            sub.properties
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
        )
    }

    /// How many entries subscription `subscription` of topic `topic` has not acknowledged (a
    /// partly acknowledged batch counts as one); 0 if it does not exist.
    pub fn subscription_backlog(&self, topic: &str, subscription: &str) -> usize {
        let state = lock(&self.shared().state);
        state.topics.get(topic).map_or(0, |t| {
            t.subscriptions
                .get(subscription)
                .map_or(0, |s| s.backlog(t.len()))
        })
    }

    /// How many entries of topic `topic` subscription `subscription` dispatched to its
    /// consumers that are not acknowledged yet (a batch is one entry; 0 if it does not
    /// exist): what the consumers were sent and hold, in their receiver queues or handed out.
    pub fn subscription_dispatched(&self, topic: &str, subscription: &str) -> usize {
        let state = lock(&self.shared().state);
        state
            .topics
            .get(topic)
            .and_then(|t| t.subscriptions.get(subscription))
            .map_or(0, |s| s.pending.len())
    }

    /// How many times entry `entry_id` of topic `topic` was redelivered on subscription
    /// `subscription` (the `redelivery_count` its next MESSAGE carries): counted on
    /// Shared/Key_Shared subscriptions when a consumer asks for redelivery (negative ack, ack
    /// timeout), not when a consumer leaves; always 0 on Exclusive/Failover, as upstream.
    /// 0 for an unknown topic, subscription or entry, and once the entry is acknowledged.
    pub fn redelivery_count(&self, topic: &str, subscription: &str, entry_id: u64) -> u32 {
        let state = lock(&self.shared().state);
        state
            .topics
            .get(topic)
            .and_then(|t| t.subscriptions.get(subscription))
            .map_or(0, |s| s.redelivery_count(entry_id))
    }

    /// How many producers are attached to topic `topic` (not counting `WaitForExclusive`
    /// producers still queued).
    pub fn producers(&self, topic: &str) -> usize {
        lock(&self.shared().state)
            .topics
            .get(topic)
            .map_or(0, |t| t.producers.len())
    }

    /// How many consumers are attached to subscription `subscription` of topic `topic`.
    pub fn consumers(&self, topic: &str, subscription: &str) -> usize {
        let state = lock(&self.shared().state);
        state.topics.get(topic).map_or(0, |t| {
            t.subscriptions
                .get(subscription)
                .map_or(0, |s| s.consumers.len())
        })
    }
}
