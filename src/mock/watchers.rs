//! PIP-247 partition update watchers, as `/work/shared/design/protocol-extensions.md` fixes
//! them (the broker's `PartitonUpdateWatcherService`), and the admin "update partitioned
//! topic" that drives them.
//!
//! - WATCH_PARTITION_UPDATE `{request_id, watcher_id, topics}` registers a watcher (the same
//!   watcher id on the same connection replaces its topic list, and forgets an update in
//!   flight: the answer carries the full state) and is answered
//!   WATCH_PARTITION_UPDATE_SUCCESS with the current partition count of each topic (0 for a
//!   non-partitioned or unknown one). On a broker with
//!   [`MockBrokerConfig::supports_partition_update_watchers`](super::MockBrokerConfig) off, it
//!   (and WATCH_PARTITION_UPDATE_CLOSE) is answered ERROR NotAllowed with the request id.
//! - Every change of the partition count of a watched topic sends PARTITION_UPDATE with ALL
//!   topics of the watcher, their current counts and a version that strictly increases per
//!   watcher (1, 2, ...); the update becomes the watcher's one in flight `(version, sent_at)`,
//!   replacing an older one.
//! - PARTITION_UPDATE_RESULT: for another version than the one in flight (older, or none in
//!   flight) it is ignored (counted in [`MockBroker::partition_update_results_ignored`]); for
//!   the one in flight, `success` ends it, a failure sends the current counts again with a new
//!   version. An update without a result within the resend timeout
//!   ([`MockBroker::set_partition_update_resend_timeout`], tokio time) is sent again with a
//!   new version, re-reading the counts.
//! - WATCH_PARTITION_UPDATE_CLOSE removes the watcher (Success, also for an unknown one).
//!   Watchers go with their connection, so a restart drops them all.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::admin_error::MockAdminError;
use super::namespace::canonical_topic;
use super::namespace::namespace_of;
use super::partition_watchers::{InFlight, Watcher, WatcherKey, DEFAULT_RESEND_TIMEOUT};
use super::reply::{error, success, SessionView, Step};
use super::state::{BrokerState, TopicTable};
use super::wire::{self, base_command::Type};
use super::{lock, ConnectionId, MockBroker};
use crate::codec::Frame;
use crate::error::ServerError;

fn counts(topics: &TopicTable, names: &[String]) -> Vec<u32> {
    names.iter().map(|t| topics.partitions(t)).collect()
}

/// WATCH_PARTITION_UPDATE.
pub(crate) fn watch(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandWatchPartitionUpdate,
) -> Step {
    if let Some(refusal) = unsupported(view, cmd.request_id) {
        return refusal;
    }
    state.settings_mut(view.service_url, view.config);
    let watcher = state
        .watchers
        .map
        .entry((view.conn, cmd.watcher_id))
        .or_insert_with(|| Watcher {
            service_url: view.service_url.to_owned(),
            topics: Vec::new(),
            version: 0,
            in_flight: None,
            versions_sent: Vec::new(),
        });
    watcher.topics.clone_from(&cmd.topics);
    watcher.in_flight = None;
    Step::Reply(wire::BaseCommand {
        r#type: Type::WatchPartitionUpdateSuccess as i32,
        watch_partition_update_success: Some(wire::CommandWatchPartitionUpdateSuccess {
            request_id: cmd.request_id,
            watcher_id: cmd.watcher_id,
            topics: cmd.topics.clone(),
            partitions: counts(&state.topics, &cmd.topics),
        }),
        ..Default::default()
    })
}

fn unsupported(view: SessionView<'_>, request_id: u64) -> Option<Step> {
    (!view.config.supports_partition_update_watchers).then(|| {
        Step::Reply(error(
            request_id,
            ServerError::NotAllowed,
            "Partition update watchers are not supported by this broker",
        ))
    })
}

/// WATCH_PARTITION_UPDATE_CLOSE.
pub(crate) fn close(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandWatchPartitionUpdateClose,
) -> Step {
    if let Some(refusal) = unsupported(view, cmd.request_id) {
        return refusal;
    }
    state.watchers.map.remove(&(view.conn, cmd.watcher_id));
    Step::Reply(success(cmd.request_id))
}

/// PARTITION_UPDATE_RESULT.
pub(crate) fn result(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandPartitionUpdateResult,
) {
    let key = (view.conn, cmd.watcher_id);
    let watchers = &mut state.watchers;
    if watchers.drop_results > 0 {
        watchers.drop_results -= 1;
        watchers.ignored += 1;
        tracing::debug!(
            ?key,
            version = cmd.version,
            "mock broker: partition update result dropped"
        );
        return;
    }
    let in_flight = watchers.map.get(&key).and_then(|w| w.in_flight);
    match in_flight {
        Some(f) if f.version == cmd.version => {
            if let Some(w) = watchers.map.get_mut(&key) {
                w.in_flight = None;
            }
            if !cmd.success {
                tracing::debug!(?key, version = cmd.version, reason = ?cmd.error_message,
                    "mock broker: partition update failed on the client, sending again");
                send_update(state, key);
            }
        }
        _ => {
            watchers.ignored += 1;
            tracing::debug!(?key, version = cmd.version, in_flight = ?in_flight.map(|f| f.version),
                "mock broker: partition update result ignored");
        }
    }
}

/// Sends watcher `key` the current counts of all its topics with a new version, in flight
/// from now.
fn send_update(state: &mut BrokerState, key: WatcherKey) {
    let BrokerState {
        topics,
        watchers,
        settings,
        conns,
        timers,
        ..
    } = state;
    let Some(w) = watchers.map.get_mut(&key) else {
        return;
    };
    let timeout = settings
        .get(&w.service_url)
        .map_or(DEFAULT_RESEND_TIMEOUT, |s| {
            s.partition_update_resend_timeout
        });
    let now = Instant::now();
    w.version += 1;
    w.versions_sent.push(w.version);
    w.in_flight = Some(InFlight {
        version: w.version,
        sent_at: now,
        resend_at: now + timeout,
    });
    let update = wire::CommandPartitionUpdate {
        watcher_id: key.1,
        topics: w.topics.clone(),
        partitions: counts(topics, &w.topics),
        version: w.version,
    };
    conns.send(
        key.0,
        Frame::simple(wire::BaseCommand {
            r#type: Type::PartitionUpdate as i32,
            partition_update: Some(update),
            ..Default::default()
        }),
    );
    timers.wake();
}

/// The partition count of `topic` changed: every watcher of it gets an update.
pub(crate) fn partitions_changed(state: &mut BrokerState, topic: &str) {
    let topic = canonical_topic(topic);
    let keys: Vec<WatcherKey> = state
        .watchers
        .map
        .iter()
        .filter(|(_, w)| w.topics.iter().any(|t| canonical_topic(t) == topic))
        .map(|(k, _)| *k)
        .collect();
    for key in keys {
        send_update(state, key);
    }
}

/// Sets the partition count of `topic` (0: not partitioned) and, if it changed, notifies its
/// watchers.
pub(crate) fn set_partitions(state: &mut BrokerState, topic: &str, partitions: u32) {
    let before = state.topics.partitions(topic);
    state.topics.set_partitions(topic, partitions);
    if before != partitions {
        partitions_changed(state, topic);
    }
    // Partitions created with the count are topics of their namespace's topic list.
    super::topic_lists::sync(state);
}

/// Connection `conn` ended: its watchers go.
pub(crate) fn connection_closed(state: &mut BrokerState, conn: ConnectionId) {
    state.watchers.map.retain(|key, _| key.0 != conn);
}

/// Sends again every update whose resend timeout passed at `now`.
pub(crate) fn fire_due(state: &mut BrokerState, now: Instant) {
    let due: Vec<WatcherKey> = state
        .watchers
        .map
        .iter()
        .filter(|(_, w)| w.in_flight.is_some_and(|f| f.resend_at <= now))
        .map(|(k, _)| *k)
        .collect();
    for key in due {
        if let Some(f) = state.watchers.map.get(&key).and_then(|w| w.in_flight) {
            tracing::debug!(?key, version = f.version, sent = ?f.sent_at,
                "mock broker: no partition update result, sending again");
        }
        send_update(state, key);
    }
}

/// The earliest resend deadline.
pub(crate) fn next_deadline(state: &BrokerState) -> Option<Instant> {
    state
        .watchers
        .map
        .values()
        .filter_map(|w| w.in_flight.map(|f| f.resend_at))
        .min()
}

impl MockBroker {
    /// Updates partitioned topic `topic` to `partitions` partitions, as the admin API's "update
    /// partitioned topic": the count may only grow (a count not above the current one fails
    /// with [`MockAdminError::PartitionCountNotIncreased`]); the new partitions
    /// `<topic>-partition-<i>` are created, and every PIP-247 watcher of the topic gets a
    /// PARTITION_UPDATE. Fails with [`MockAdminError::TopicNotFound`] if `topic` is not
    /// partitioned, and if topics cannot be created in its namespace (being deleted:
    /// [`MockAdminError::NamespaceBeingDeleted`], terminated: [`MockAdminError::NotSupported`]).
    pub fn update_partitions(&self, topic: &str, partitions: u32) -> Result<(), MockAdminError> {
        let topic = canonical_topic(topic);
        let mut state = lock(&self.shared().state);
        let current = state.topics.partitions(&topic);
        if current == 0 {
            return Err(MockAdminError::TopicNotFound(topic));
        }
        if partitions <= current {
            return Err(MockAdminError::PartitionCountNotIncreased {
                topic,
                current,
                requested: partitions,
            });
        }
        let ns = namespace_of(&topic);
        if state.topics.namespaces.is_deleting(&ns) {
            return Err(MockAdminError::NamespaceBeingDeleted(ns));
        }
        if let Some(reason) = state.topics.namespaces.creation_refusal(&ns) {
            return Err(MockAdminError::NotSupported(reason));
        }
        for i in current..partitions {
            state
                .topics
                .get_or_create(&format!("{topic}-partition-{i}"));
        }
        set_partitions(&mut state, &topic, partitions);
        Ok(())
    }

    /// The PIP-247 watchers registered on this broker's connections: (connection, watcher id,
    /// topics as the client named them), by connection and watcher id.
    pub fn partition_watchers(&self) -> Vec<(ConnectionId, u64, Vec<String>)> {
        let url = &self.shared().service_url;
        lock(&self.shared().state)
            .watchers
            .map
            .iter()
            .filter(|(_, w)| w.service_url == *url)
            .map(|(k, w)| (k.0, k.1, w.topics.clone()))
            .collect()
    }

    /// The versions of the PARTITION_UPDATEs sent to watcher `watcher_id` of connection `conn`,
    /// in order (empty for an unknown watcher).
    pub fn partition_update_versions_sent(&self, conn: ConnectionId, watcher_id: u64) -> Vec<u64> {
        lock(&self.shared().state)
            .watchers
            .map
            .get(&(conn, watcher_id))
            .map_or_else(Vec::new, |w| w.versions_sent.clone())
    }

    /// The version of the PARTITION_UPDATE in flight (sent, no result yet) to watcher
    /// `watcher_id` of connection `conn`.
    pub fn partition_update_in_flight(&self, conn: ConnectionId, watcher_id: u64) -> Option<u64> {
        lock(&self.shared().state)
            .watchers
            .map
            .get(&(conn, watcher_id))
            .and_then(|w| w.in_flight.map(|f| f.version))
    }

    /// Fault injection: ignores the next `n` PARTITION_UPDATE_RESULTs (as if the client's acks
    /// were lost), so the updates are sent again after the resend timeout.
    pub fn drop_next_partition_update_results(&self, n: usize) {
        lock(&self.shared().state).watchers.drop_results = n;
    }

    /// How many PARTITION_UPDATE_RESULTs were ignored: stale versions, results without an
    /// update in flight, and those dropped by
    /// [`drop_next_partition_update_results`](Self::drop_next_partition_update_results).
    pub fn partition_update_results_ignored(&self) -> u64 {
        lock(&self.shared().state).watchers.ignored
    }

    /// Sets how long a PARTITION_UPDATE waits for its result before it is sent again
    /// (initially [`MockBrokerConfig::partition_update_resend_timeout`](super::MockBrokerConfig));
    /// applies to updates sent from now on.
    pub fn set_partition_update_resend_timeout(&self, timeout: Duration) {
        let url = self.service_url();
        lock(&self.shared().state)
            .settings_mut(&url, self.config())
            .partition_update_resend_timeout = timeout;
    }

    /// How many LOOKUP requests this broker has answered.
    pub fn lookups_served(&self) -> u64 {
        self.shared().served.lookups.load(Ordering::Relaxed)
    }

    /// How many PARTITIONED_METADATA requests this broker has answered.
    pub fn metadata_requests_served(&self) -> u64 {
        self.shared().served.metadata.load(Ordering::Relaxed)
    }
}
