//! The PIP-145 topic-list watchers the brokers keep: state only (a leaf under the broker
//! state); what WATCH_TOPIC_LIST does with them is in [`super::topic_lists`].

use std::collections::{BTreeMap, BTreeSet};

use super::ConnectionId;
use crate::topic_list::TopicsPattern;

/// One registered topic-list watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    pub(crate) namespace: String,
    pub(crate) pattern: TopicsPattern,
    /// What the client was last told (the matching topics).
    pub(crate) topics: BTreeSet<String>,
}

/// The topic-list watchers of every connection of the brokers sharing the state.
#[derive(Debug, Default)]
pub(crate) struct TopicListWatchers {
    pub(crate) map: BTreeMap<(ConnectionId, u64), Watcher>,
    /// The topic table version the watchers were last brought up to date with.
    pub(crate) seen: u64,
    /// Updates sent (for tests and benchmarks).
    pub(crate) updates_sent: u64,
    /// Updates still to lose (fault injection: the watcher's view moves on, the client hears
    /// nothing).
    pub(crate) drop_updates: usize,
}
