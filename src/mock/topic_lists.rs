//! Topic lists of a namespace: GET_TOPICS_OF_NAMESPACE and the PIP-145 topic-list watcher, as
//! upstream's broker serves them (`ServerCnx.handleGetTopicsOfNamespace`, `TopicListService`).
//!
//! - GET_TOPICS_OF_NAMESPACE `{namespace, mode, topics_pattern, topics_hash}` lists the
//!   namespace's existing topics of that domain (partitions by their own names, as upstream
//!   lists them), filtered by the pattern when one is given and valid (`filtered = true`),
//!   with the hash of the list (`TopicList.calculateHash`). When the request's hash equals it,
//!   the answer is `changed = false` with no topics.
//! - WATCH_TOPIC_LIST `{watcher_id, namespace, topics_pattern, topics_hash}` registers a
//!   watcher of the namespace's persistent topics matching the pattern and answers
//!   WATCH_TOPIC_LIST_SUCCESS with the hash, and the topics unless the client's hash equals it.
//!   The same watcher id on the same connection replaces the watcher. From then on every
//!   creation or deletion of a matching topic sends WATCH_TOPIC_UPDATE with the new and deleted
//!   topics and the new hash. Refused (ERROR NotAllowed) while topic watchers are off
//!   ([`MockBroker::set_topic_watchers`]); an invalid pattern gets ERROR InvalidTopicName.
//! - WATCH_TOPIC_LIST_CLOSE removes the watcher (Success, also for an unknown one). Watchers go
//!   with their connection.

use std::collections::BTreeSet;

use super::reply::{error, success, SessionView, Step};
use super::state::BrokerState;
use super::topic_list_watchers::Watcher;
use super::wire::{self, base_command::Type};
use super::{lock, ConnectionId, MockBroker};
use crate::codec::Frame;
use crate::error::ServerError;
use crate::topic::TopicName;
use crate::topic_list::{is_system_topic, topics_hash, RegexSubscriptionMode, TopicsPattern};

/// The existing topics of `namespace` in `mode`, sorted.
fn listing(state: &BrokerState, namespace: &str, mode: RegexSubscriptionMode) -> Vec<String> {
    state
        .topics
        .names_in(namespace)
        .into_iter()
        .filter(|t| TopicName::new(t).is_ok_and(|t| mode.admits(&t)))
        // Upstream `getListOfUserTopics` (both GetTopicsOfNamespace and the watcher's list).
        .filter(|t| !is_system_topic(t))
        .collect()
}

fn mode_of(cmd: &wire::CommandGetTopicsOfNamespace) -> RegexSubscriptionMode {
    use wire::command_get_topics_of_namespace::Mode;
    match cmd.mode() {
        Mode::Persistent => RegexSubscriptionMode::PersistentOnly,
        Mode::NonPersistent => RegexSubscriptionMode::NonPersistentOnly,
        Mode::All => RegexSubscriptionMode::AllTopics,
    }
}

/// GET_TOPICS_OF_NAMESPACE.
/// `evaluate`: the broker's `enableBrokerSideSubscriptionPatternEvaluation`.
pub(crate) fn get_topics(
    state: &BrokerState,
    cmd: &wire::CommandGetTopicsOfNamespace,
    evaluate: bool,
) -> Step {
    let mut topics = listing(state, &cmd.namespace, mode_of(cmd));
    let pattern = cmd
        .topics_pattern
        .as_deref()
        .filter(|_| evaluate)
        .and_then(|p| TopicsPattern::new(p).ok());
    let filtered = pattern.is_some();
    if let Some(p) = &pattern {
        topics.retain(|t| p.matches(t));
    }
    let hash = topics_hash(&topics);
    let changed = cmd.topics_hash.as_deref() != Some(hash.as_str());
    Step::Reply(wire::BaseCommand {
        r#type: Type::GetTopicsOfNamespaceResponse as i32,
        get_topics_of_namespace_response: Some(wire::CommandGetTopicsOfNamespaceResponse {
            request_id: cmd.request_id,
            topics: if changed { topics } else { Vec::new() },
            filtered: Some(filtered),
            topics_hash: Some(hash),
            changed: Some(changed),
        }),
        ..Default::default()
    })
}

fn matching(state: &BrokerState, w: &Watcher) -> BTreeSet<String> {
    listing(state, &w.namespace, RegexSubscriptionMode::PersistentOnly)
        .into_iter()
        .filter(|t| w.pattern.matches(t))
        .collect()
}

/// WATCH_TOPIC_LIST.
pub(crate) fn watch(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandWatchTopicList,
) -> Step {
    if !state.settings(view.service_url, view.config).topic_watchers {
        return Step::Reply(error(
            cmd.request_id,
            ServerError::NotAllowed,
            "Topic list watchers are not supported by this broker",
        ));
    }
    let pattern = match TopicsPattern::new(&cmd.topics_pattern) {
        Ok(p) => p,
        Err(e) => {
            return Step::Reply(error(
                cmd.request_id,
                ServerError::InvalidTopicName,
                &e.to_string(),
            ))
        }
    };
    sync(state);
    let mut w = Watcher {
        namespace: cmd.namespace.clone(),
        pattern,
        topics: BTreeSet::new(),
    };
    w.topics = matching(state, &w);
    let list: Vec<String> = w.topics.iter().cloned().collect();
    let hash = topics_hash(&list);
    let same = cmd.topics_hash.as_deref() == Some(hash.as_str());
    state.topic_lists.map.insert((view.conn, cmd.watcher_id), w);
    Step::Reply(wire::BaseCommand {
        r#type: Type::WatchTopicListSuccess as i32,
        watch_topic_list_success: Some(wire::CommandWatchTopicListSuccess {
            request_id: cmd.request_id,
            watcher_id: cmd.watcher_id,
            topic: if same { Vec::new() } else { list },
            topics_hash: hash,
        }),
        ..Default::default()
    })
}

/// WATCH_TOPIC_LIST_CLOSE.
pub(crate) fn close(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandWatchTopicListClose,
) -> Step {
    state.topic_lists.map.remove(&(view.conn, cmd.watcher_id));
    Step::Reply(success(cmd.request_id))
}

/// Brings every watcher up to date with the topic table: each whose matching topics changed
/// gets a WATCH_TOPIC_UPDATE. Cheap when no topic was created or removed since the last call.
pub(crate) fn sync(state: &mut BrokerState) {
    if state.topic_lists.seen == state.topics.version {
        return;
    }
    state.topic_lists.seen = state.topics.version;
    let keys: Vec<(ConnectionId, u64)> = state.topic_lists.map.keys().copied().collect();
    for key in keys {
        let Some(w) = state.topic_lists.map.get(&key) else {
            continue;
        };
        let now = matching(state, w);
        if now == w.topics {
            continue;
        }
        let new_topics: Vec<String> = now.difference(&w.topics).cloned().collect();
        let deleted_topics: Vec<String> = w.topics.difference(&now).cloned().collect();
        let list: Vec<&String> = now.iter().collect();
        let hash = topics_hash(&list);
        if let Some(w) = state.topic_lists.map.get_mut(&key) {
            w.topics = now;
        }
        if state.topic_lists.drop_updates > 0 {
            state.topic_lists.drop_updates -= 1;
            tracing::debug!(?key, "mock broker: topic list update dropped");
            continue;
        }
        state.topic_lists.updates_sent += 1;
        state.conns.send(
            key.0,
            Frame::simple(wire::BaseCommand {
                r#type: Type::WatchTopicUpdate as i32,
                watch_topic_update: Some(wire::CommandWatchTopicUpdate {
                    watcher_id: key.1,
                    new_topics,
                    deleted_topics,
                    topics_hash: hash,
                }),
                ..Default::default()
            }),
        );
    }
}

/// Connection `conn` ended: its watchers go.
pub(crate) fn connection_closed(state: &mut BrokerState, conn: ConnectionId) {
    state.topic_lists.map.retain(|key, _| key.0 != conn);
}

impl MockBroker {
    /// Turns PIP-145 topic-list watchers on or off (initially
    /// [`MockBrokerConfig::supports_topic_watchers`](super::MockBrokerConfig)): connections
    /// made from now on see the flag in CONNECTED, and WATCH_TOPIC_LIST is refused while off.
    /// Watchers already registered stay.
    pub fn set_topic_watchers(&self, on: bool) {
        let url = self.service_url();
        lock(&self.shared().state)
            .settings_mut(&url, self.config())
            .topic_watchers = on;
    }

    /// The topic-list watchers registered on the brokers sharing this state: (connection,
    /// watcher id, namespace, pattern as the client sent it).
    pub fn topic_list_watchers(&self) -> Vec<(ConnectionId, u64, String, String)> {
        lock(&self.shared().state)
            .topic_lists
            .map
            .iter()
            .map(|(k, w)| (k.0, k.1, w.namespace.clone(), w.pattern.text.clone()))
            .collect()
    }

    /// Fault injection: loses the next `n` WATCH_TOPIC_UPDATEs (the broker's watcher moves on
    /// as if they were sent), so the client's set drifts until a later update's hash or a poll
    /// shows it.
    pub fn drop_next_topic_list_updates(&self, n: usize) {
        lock(&self.shared().state).topic_lists.drop_updates = n;
    }

    /// How many WATCH_TOPIC_UPDATEs were sent.
    pub fn topic_list_updates_sent(&self) -> u64 {
        lock(&self.shared().state).topic_lists.updates_sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pattern: Option<&str>, hash: Option<String>) -> wire::CommandGetTopicsOfNamespace {
        wire::CommandGetTopicsOfNamespace {
            request_id: 7,
            namespace: "public/default".into(),
            mode: None,
            topics_pattern: pattern.map(str::to_string),
            topics_hash: hash,
            properties: Vec::new(),
        }
    }

    fn answer(step: Step) -> wire::CommandGetTopicsOfNamespaceResponse {
        match step {
            Step::Reply(c) => c.get_topics_of_namespace_response.expect("a response"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lists_filters_hashes_and_reports_unchanged() {
        let mut state = BrokerState::default();
        for t in [
            "persistent://public/default/a-1",
            "persistent://public/default/a-2",
            "persistent://public/default/b-1",
            "non-persistent://public/default/a-np",
            "persistent://public/other/a-3",
        ] {
            state.topics.get_or_create(t);
        }
        // No pattern: every persistent topic of the namespace, not filtered.
        let all = answer(get_topics(&state, &request(None, None), true));
        assert_eq!(all.topics.len(), 3, "{:?}", all.topics);
        assert_eq!(all.filtered, Some(false));
        // A pattern: filtered, with upstream's hash of the filtered list.
        let a = answer(get_topics(
            &state,
            &request(Some("public/default/a-.*"), None),
            true,
        ));
        let expected = vec![
            "persistent://public/default/a-1".to_string(),
            "persistent://public/default/a-2".to_string(),
        ];
        assert_eq!(a.topics, expected);
        assert_eq!(a.filtered, Some(true));
        assert_eq!(a.changed, Some(true));
        assert_eq!(
            a.topics_hash.as_deref(),
            Some(topics_hash(&expected).as_str())
        );
        // The same hash back: unchanged, no topics.
        let again = answer(get_topics(
            &state,
            &request(Some("public/default/a-.*"), a.topics_hash.clone()),
            true,
        ));
        assert_eq!(again.changed, Some(false));
        assert!(again.topics.is_empty());
        // A new matching topic changes the hash.
        state
            .topics
            .get_or_create("persistent://public/default/a-4");
        let later = answer(get_topics(
            &state,
            &request(Some("public/default/a-.*"), a.topics_hash),
            true,
        ));
        assert_eq!(later.changed, Some(true));
        assert_eq!(later.topics.len(), 3);
    }
}
