//! The in-memory broker's admin view: what a test can ask or set besides the wire protocol
//! (topics, subscriptions, backlogs), like a real broker's admin REST API.
//!
//! Topic names may be given in any form (`t`, `tenant/ns/t`, `persistent://tenant/ns/t`).

use super::state::canonical_topic;
use super::{lock, MockBroker};

impl MockBroker {
    /// Creates partitioned topic `topic` with `partitions` partitions: sets its partition
    /// count in the metadata (as [`set_partitions`](Self::set_partitions)) and creates the
    /// partitions `<topic>-partition-<i>`, which are ordinary topics.
    pub fn create_partitioned_topic(&self, topic: &str, partitions: u32) {
        let topic = canonical_topic(topic);
        let mut state = lock(&self.shared().state);
        state.topics.set_partitions(&topic, partitions);
        for i in 0..partitions {
            state
                .topics
                .get_or_create(&format!("{topic}-partition-{i}"));
        }
    }

    /// Creates topic `topic` (non-partitioned) if it does not exist.
    pub fn create_topic(&self, topic: &str) {
        lock(&self.shared().state).topics.get_or_create(topic);
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
