//! Partition growth (PIP-247): one service per client keeps the partition counts of every
//! auto-updating partitioned topic current, and asks producers/consumers to grow.
//!
//! When the broker behind the service URL advertises `supports_partition_update_watchers`,
//! the service registers one watcher for all topics (re-watching with the full list when topics
//! are added, closing it when none are left), applies every `CommandPartitionUpdate` whose
//! version is newer than the last one seen, and answers `CommandPartitionUpdateResult` once the
//! new partitions are live (or with the failure). On connection loss it watches again and
//! applies the current state. Without the feature it polls partitioned metadata every
//! `auto_update_partitions_interval` (60 s by default, like upstream). Counts never shrink: a
//! smaller count is ignored with a warning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

use crate::codec::Frame;
use crate::connection::{Connection, EntityEvent, EntityKind};
use crate::core::CoreRef as Client;
use crate::error::{Error, Result};
use crate::proto::{self, base_command::Type, BaseCommand};
use crate::topic::TopicName;

/// A request to a producer/consumer to grow to `partitions`; answered once they are live.
#[derive(Debug)]
pub(crate) struct Grow {
    pub partitions: u32,
    pub done: oneshot::Sender<Result<()>>,
}

struct Subscriber {
    id: u64,
    tx: mpsc::UnboundedSender<Grow>,
}

#[derive(Default)]
struct State {
    /// Topic → (known partition count, subscribers).
    topics: HashMap<String, (u32, Vec<Subscriber>)>,
    next_subscriber: u64,
    running: bool,
    /// Bumped whenever the topic set changes (the watcher then re-watches).
    generation: u64,
}

/// The per-client partition update service.
pub(crate) struct PartitionUpdates {
    state: Mutex<State>,
    changed: Notify,
    interval: Duration,
}

impl std::fmt::Debug for PartitionUpdates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionUpdates")
            .field("interval", &self.interval)
            .finish()
    }
}

/// Keeps a topic registered; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Registration {
    service: Weak<PartitionUpdates>,
    topic: String,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(s) = self.service.upgrade() {
            s.unregister(&self.topic, self.id);
        }
    }
}

impl PartitionUpdates {
    pub(crate) fn new(interval: Duration) -> Arc<Self> {
        Arc::new(PartitionUpdates {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            interval,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an entity for growth notices of `topic`, which now has `partitions`.
    pub(crate) fn register(
        self: &Arc<Self>,
        client: &Client,
        topic: &TopicName,
        partitions: u32,
    ) -> (Registration, mpsc::UnboundedReceiver<Grow>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (id, start) = {
            let mut st = self.lock();
            st.next_subscriber += 1;
            let id = st.next_subscriber;
            let entry = st
                .topics
                .entry(topic.to_string())
                .or_insert((partitions, Vec::new()));
            entry.0 = entry.0.max(partitions);
            entry.1.push(Subscriber { id, tx });
            st.generation += 1;
            let start = !st.running;
            st.running = true;
            (id, start)
        };
        if start {
            let service = Arc::downgrade(self);
            let client = client.clone();
            tokio::spawn(async move { run(service, client).await });
        }
        self.changed.notify_one();
        (
            Registration {
                service: Arc::downgrade(self),
                topic: topic.to_string(),
                id,
            },
            rx,
        )
    }

    fn unregister(&self, topic: &str, id: u64) {
        let mut st = self.lock();
        if let Some((_, subs)) = st.topics.get_mut(topic) {
            subs.retain(|s| s.id != id);
            if subs.is_empty() {
                st.topics.remove(topic);
            }
        }
        st.generation += 1;
        drop(st);
        self.changed.notify_one();
    }

    fn snapshot(&self) -> (u64, Vec<(String, u32)>) {
        let st = self.lock();
        let mut topics: Vec<(String, u32)> = st
            .topics
            .iter()
            .map(|(t, (n, _))| (t.clone(), *n))
            .collect();
        topics.sort();
        (st.generation, topics)
    }

    /// Applies a full state (topic, count) pairs: grows subscribers where a count increased.
    /// Returns an error naming what failed.
    async fn apply(&self, update: &[(String, u32)]) -> Result<()> {
        let mut waits = Vec::new();
        let mut previous = HashMap::new();
        {
            let mut st = self.lock();
            for (topic, n) in update {
                let Some((known, subs)) = st.topics.get_mut(topic) else {
                    continue;
                };
                if *n < *known {
                    tracing::warn!(%topic, known = *known, got = n,
                        "partition count decreased; shrinking is not supported, ignored");
                    continue;
                }
                if *n == *known {
                    continue;
                }
                tracing::info!(%topic, from = *known, to = n, "topic gained partitions");
                previous.insert(topic.clone(), *known);
                *known = *n;
                for s in subs.iter() {
                    let (done, rx) = oneshot::channel();
                    if s.tx
                        .send(Grow {
                            partitions: *n,
                            done,
                        })
                        .is_ok()
                    {
                        waits.push((topic.clone(), rx));
                    }
                }
            }
        }
        let mut failures = Vec::new();
        for (topic, rx) in waits {
            match rx.await {
                Ok(Ok(())) | Err(_) => {} // Err: the entity is gone, nothing to grow
                Ok(Err(e)) => failures.push((topic, e)),
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        // Growth failed: go back to the old count so the next update (or poll) tries again;
        // entities grow idempotently.
        let mut st = self.lock();
        for (topic, _) in &failures {
            if let (Some((known, _)), Some(prev)) = (st.topics.get_mut(topic), previous.get(topic))
            {
                *known = *prev;
            }
        }
        let text: Vec<String> = failures.iter().map(|(t, e)| format!("{t}: {e}")).collect();
        Err(Error::Protocol(format!(
            "creating new partitions failed: {}",
            text.join("; ")
        )))
    }
}

async fn run(service: Weak<PartitionUpdates>, client: Client) {
    let mut backoff = client.backoff();
    loop {
        let Some(s) = service.upgrade() else { return };
        if s.snapshot().1.is_empty() {
            // Nothing to watch: stop; a new registration starts the service again.
            let mut st = s.lock();
            if st.topics.is_empty() {
                st.running = false;
                return;
            }
            continue;
        }
        let conn = match client.lookup_service_connection().await {
            Ok(c) => c,
            Err(e) => {
                drop(s);
                let d = backoff.next_delay();
                tracing::debug!(error = %e, ?d, "partition updates: no connection; retrying");
                tokio::time::sleep(d).await;
                continue;
            }
        };
        let outcome = if conn.info().features.supports_partition_update_watchers {
            watch(&s, &client, &conn).await
        } else {
            poll(&s, &client).await
        };
        match outcome {
            Ok(()) => return, // nothing left to watch
            Err(e) => {
                drop(s);
                let d = backoff.next_delay();
                tracing::debug!(error = %e, ?d, "partition updates: restarting");
                tokio::time::sleep(d).await;
            }
        }
    }
}

/// Polling fallback: until the topic set empties.
async fn poll(s: &Arc<PartitionUpdates>, client: &Client) -> Result<()> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(s.interval) => {}
            _ = s.changed.notified() => {
                if s.snapshot().1.is_empty() {
                    stop_if_empty(s);
                    return Ok(());
                }
                continue;
            }
        }
        let (_, topics) = s.snapshot();
        if topics.is_empty() && stop_if_empty(s) {
            return Ok(());
        }
        let mut update = Vec::new();
        for (topic, _) in &topics {
            let t = TopicName::new(topic)?;
            match client.partitioned_topic_metadata(t.as_str()).await {
                Ok(n) => update.push((topic.clone(), n)),
                Err(e) => tracing::debug!(%topic, error = %e, "partition poll failed"),
            }
        }
        if let Err(e) = s.apply(&update).await {
            tracing::warn!(error = %e, "partition growth failed; retrying at the next poll");
        }
    }
}

fn stop_if_empty(s: &PartitionUpdates) -> bool {
    let mut st = s.lock();
    if st.topics.is_empty() {
        st.running = false;
        true
    } else {
        false
    }
}

fn watch_command(request_id: u64, watcher_id: u64, topics: &[(String, u32)]) -> BaseCommand {
    BaseCommand {
        r#type: Type::WatchPartitionUpdate as i32,
        watch_partition_update: Some(proto::CommandWatchPartitionUpdate {
            request_id,
            watcher_id,
            topics: topics.iter().map(|(t, _)| t.clone()).collect(),
        }),
        ..Default::default()
    }
}

fn result_frame(watcher_id: u64, version: u64, result: &Result<()>) -> Frame {
    Frame::simple(BaseCommand {
        r#type: Type::PartitionUpdateResult as i32,
        partition_update_result: Some(proto::CommandPartitionUpdateResult {
            watcher_id,
            version,
            success: result.is_ok(),
            error_message: result.as_ref().err().map(|e| e.to_string()),
        }),
        ..Default::default()
    })
}

fn pairs(topics: &[String], partitions: &[u32]) -> Vec<(String, u32)> {
    topics
        .iter()
        .cloned()
        .zip(partitions.iter().copied())
        .collect()
}

/// Watcher mode on `conn`, until the topic set empties (Ok) or the connection fails (Err).
async fn watch(s: &Arc<PartitionUpdates>, client: &Client, conn: &Connection) -> Result<()> {
    let watcher_id = client.new_watcher_id();
    let (tx, mut events) = mpsc::channel(64);
    conn.register(EntityKind::PartitionWatcher, watcher_id, tx)?;
    let result = watch_on(s, conn, watcher_id, &mut events).await;
    conn.unregister(EntityKind::PartitionWatcher, watcher_id);
    result
}

async fn watch_on(
    s: &Arc<PartitionUpdates>,
    conn: &Connection,
    watcher_id: u64,
    events: &mut mpsc::Receiver<EntityEvent>,
) -> Result<()> {
    let mut last_version: Option<u64> = None;
    let mut watched_generation = None;
    loop {
        let (generation, topics) = s.snapshot();
        if topics.is_empty() {
            let request_id = conn.new_request_id();
            let close = BaseCommand {
                r#type: Type::WatchPartitionUpdateClose as i32,
                watch_partition_update_close: Some(proto::CommandWatchPartitionUpdateClose {
                    request_id,
                    watcher_id,
                }),
                ..Default::default()
            };
            let _ = conn
                .request(request_id, close, "close partition watcher")
                .await;
            if stop_if_empty(s) {
                return Ok(());
            }
            continue;
        }
        if watched_generation != Some(generation) {
            // (Re-)watch with the full topic list; apply the state in the answer.
            let request_id = conn.new_request_id();
            let response = conn
                .request(
                    request_id,
                    watch_command(request_id, watcher_id, &topics),
                    "watch partitions",
                )
                .await?;
            let ok = response.watch_partition_update_success.ok_or_else(|| {
                Error::Protocol("watch answered without WatchPartitionUpdateSuccess".into())
            })?;
            watched_generation = Some(generation);
            if let Err(e) = s.apply(&pairs(&ok.topics, &ok.partitions)).await {
                tracing::warn!(error = %e, "partition growth failed after watching");
            }
            continue;
        }
        tokio::select! {
            ev = events.recv() => match ev {
                None => return Err(Error::ConnectionLost("watcher channel closed".into())),
                Some(EntityEvent::ConnectionClosed(e)) => return Err(e),
                Some(EntityEvent::Command(frame)) => {
                    let Some(update) = frame.command.partition_update else { continue };
                    if last_version.is_some_and(|v| update.version <= v) {
                        tracing::debug!(version = update.version, "stale partition update ignored");
                        continue;
                    }
                    last_version = Some(update.version);
                    let result = s.apply(&pairs(&update.topics, &update.partitions)).await;
                    conn.send_control(result_frame(watcher_id, update.version, &result))?;
                }
            },
            _ = s.changed.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_pairs_zip_topics_and_counts() {
        let p = pairs(&["a".into(), "b".into()], &[3, 5]);
        assert_eq!(p, vec![("a".to_string(), 3), ("b".to_string(), 5)]);
    }
}
