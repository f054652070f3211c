//! Partition growth (PIP-247): one service per client keeps the partition counts of every
//! auto-updating partitioned topic current, and asks producers/consumers to grow.
//!
//! When the broker behind the service URL advertises `supports_partition_update_watchers`,
//! the service registers one watcher for all topics (re-watching with the full list when topics
//! are added, closing it when none are left), applies every `CommandPartitionUpdate` whose
//! version is newer than the last one seen, and answers `CommandPartitionUpdateResult` once the
//! new partitions are live (or with the failure). On connection loss it watches again and
//! applies the current state. Without the feature it polls partitioned metadata every
//! `auto_update_partitions_interval` (60 s by default, like upstream), at a fixed rate that
//! registrations do not reset. Counts never shrink: a smaller count is ignored with a warning.
//! Counts above [`MAX_PARTITIONS`] are refused (never created).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

use crate::backoff_policy::Backoff;
use crate::codec::Frame;
use crate::commands;
use crate::connection::{Connection, EntityEvent, EntityKind};
use crate::core::CoreRef as Client;
use crate::error::{Error, Result};
use crate::topic::TopicName;

/// The largest partition count a client accepts from a broker by default (partitioned
/// metadata, a polled count, a PIP-247 update); `ClientBuilder::max_partitions` sets it.
///
/// Upstream brokers bound it only if configured: `maxNumPartitionsPerPartitionedTopic`
/// defaults to 0 (no limit), and the count is a signed 32-bit int there. A client that took any
/// count at face value would start that many concurrent creates (connections, lookups, memory)
/// on one bad or hostile answer, so this is a hard client bound: 65,536 partitions is far above
/// any deployment upstream documents (hundreds to a few thousand per topic) while keeping a
/// topic's producers/consumers within what one process can hold.
pub(crate) const MAX_PARTITIONS: u32 = 65_536;

/// `partitions` for `topic` if within `max` (the client's `max_partitions`), otherwise an
/// error naming both.
pub(crate) fn check_partition_count(topic: &str, partitions: u32, max: u32) -> Result<u32> {
    if partitions > max {
        return Err(Error::Protocol(format!(
            "topic {topic}: the broker reports {partitions} partitions, more than the client \
             accepts ({max}, its max_partitions); refused"
        )));
    }
    Ok(partitions)
}

/// Splits a full state into the counts within the bound and an error naming the others.
fn within_bound(update: Vec<(String, u32)>, max: u32) -> (Vec<(String, u32)>, Option<Error>) {
    let mut refused = Vec::new();
    let mut ok = Vec::with_capacity(update.len());
    for (topic, n) in update {
        match check_partition_count(&topic, n, max) {
            Ok(_) => ok.push((topic, n)),
            Err(e) => {
                tracing::warn!(%topic, partitions = n, max,
                    "partition count above the client's bound; not applied");
                refused.push(e.to_string());
            }
        }
    }
    let error = (!refused.is_empty()).then(|| Error::Protocol(refused.join("; ")));
    (ok, error)
}

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
    /// The client's `max_partitions`.
    max_partitions: u32,
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
    pub(crate) fn new(interval: Duration, max_partitions: u32) -> Arc<Self> {
        Arc::new(PartitionUpdates {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            interval,
            max_partitions,
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
            watch(&s, &client, &conn, &mut backoff).await
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

/// Polling fallback, until the topic set empties: every `interval` at a fixed rate. The
/// schedule is not reset by registrations (an application that creates or drops producers more
/// often than the interval still gets polled); a newly registered topic is checked at the next
/// tick.
async fn poll(s: &Arc<PartitionUpdates>, client: &Client) -> Result<()> {
    let mut ticks = tokio::time::interval_at(crate::util::deadline_after(s.interval), s.interval);
    // A tick missed (a slow poll) is not made up for with a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = s.changed.notified() => {
                if s.snapshot().1.is_empty() && stop_if_empty(s) {
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
            // `partitioned_topic_metadata` refuses a count above MAX_PARTITIONS.
            match client.partitioned_topic_metadata(t.as_str()).await {
                Ok(n) => update.push((topic.clone(), n)),
                Err(e @ Error::Protocol(_)) => {
                    tracing::warn!(%topic, error = %e, "partition poll refused")
                }
                Err(e) => tracing::debug!(%topic, error = %e, "partition poll failed"),
            }
        }
        let (update, _) = within_bound(update, s.max_partitions);
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

fn result_frame(watcher_id: u64, version: u64, result: &Result<()>) -> Frame {
    let error = result.as_ref().err().map(|e| e.to_string());
    Frame::simple(commands::partition_update_result(
        watcher_id, version, error,
    ))
}

fn pairs(topics: &[String], partitions: &[u32]) -> Vec<(String, u32)> {
    topics
        .iter()
        .cloned()
        .zip(partitions.iter().copied())
        .collect()
}

/// How one watcher ended without a connection failure.
enum WatchEnd {
    /// No topic left: the service stopped.
    Stopped,
    /// The watcher was closed (no topic left) but a topic was registered meanwhile.
    Closed,
}

/// Watcher mode on `conn`, until the topic set empties (Ok) or the connection fails (Err).
///
/// Each watcher gets its own id, event channel and version state: after a close (when a topic
/// came back while closing) a new watcher starts, so the closed one's last version cannot make
/// the new one's first updates (versions from 1 again on the broker) look stale, and late
/// events of the closed watcher are not delivered to it.
async fn watch(
    s: &Arc<PartitionUpdates>,
    client: &Client,
    conn: &Connection,
    backoff: &mut Backoff,
) -> Result<()> {
    loop {
        let watcher_id = client.new_watcher_id();
        // One update per version the broker pushes; a backlog this deep is a broker that
        // ignores the results we send.
        let mut slot = crate::connection::WatchSlot::register(
            conn,
            EntityKind::PartitionWatcher,
            watcher_id,
            1024,
        )?;
        let result = watch_on(s, client, conn, watcher_id, &mut slot.events, backoff).await;
        drop(slot);
        match result? {
            WatchEnd::Stopped => return Ok(()),
            WatchEnd::Closed => {
                tracing::debug!(watcher_id, "topics registered while closing; watching anew")
            }
        }
    }
}

async fn watch_on(
    s: &Arc<PartitionUpdates>,
    client: &Client,
    conn: &Connection,
    watcher_id: u64,
    events: &mut crate::connection::EntityReceiver,
    backoff: &mut Backoff,
) -> Result<WatchEnd> {
    let mut last_version: Option<u64> = None;
    let mut watched_generation = None;
    // A failure answer to an update refused for its counts, sent after a delay: the broker
    // resends at once after a failure, and a refused count would refuse again, so answering at
    // once would make the two sides ping-pong as fast as the network allows.
    let mut refusal: Option<(tokio::time::Instant, Frame)> = None;
    let mut refusal_backoff: Option<Backoff> = None;
    loop {
        let (generation, topics) = s.snapshot();
        if topics.is_empty() {
            let request_id = conn.new_request_id();
            let close = commands::watch_partition_update_close(request_id, watcher_id);
            let _ = conn
                .request(request_id, close, "close partition watcher")
                .await;
            return Ok(if stop_if_empty(s) {
                WatchEnd::Stopped
            } else {
                WatchEnd::Closed
            });
        }
        if watched_generation != Some(generation) {
            // (Re-)watch with the full topic list; apply the state in the answer.
            let request_id = conn.new_request_id();
            let response = conn
                .request(
                    request_id,
                    commands::watch_partition_update(
                        request_id,
                        watcher_id,
                        topics.iter().map(|(t, _)| t.clone()),
                    ),
                    "watch partitions",
                )
                .await?;
            let ok = response.watch_partition_update_success.ok_or_else(|| {
                Error::Protocol("watch answered without WatchPartitionUpdateSuccess".into())
            })?;
            // Watching works again: the next connection loss starts from the initial delay.
            *backoff = client.backoff();
            watched_generation = Some(generation);
            let (state, refused) =
                within_bound(pairs(&ok.topics, &ok.partitions), s.max_partitions);
            if let Some(e) = refused {
                tracing::warn!(error = %e, "partition counts refused after watching");
            }
            if let Err(e) = s.apply(&state).await {
                tracing::warn!(error = %e, "partition growth failed after watching");
            }
            continue;
        }
        let refusal_due = refusal.as_ref().map(|(at, _)| *at);
        tokio::select! {
            ev = events.recv() => match ev {
                None => return Err(Error::ConnectionLost("watcher channel closed".into())),
                Some(EntityEvent::ConnectionClosed(e)) => return Err(e),
                Some(EntityEvent::Message(_) | EntityEvent::Receipt(_)) => continue,
                Some(EntityEvent::Command(frame)) => {
                    let Some(update) = frame.command.partition_update else { continue };
                    if last_version.is_some_and(|v| update.version <= v) {
                        tracing::debug!(version = update.version, "stale partition update ignored");
                        continue;
                    }
                    last_version = Some(update.version);
                    // A newer update replaces a refusal not yet answered (the broker ignores
                    // results for older versions anyway).
                    refusal = None;
                    let (state, refused) = within_bound(
                        pairs(&update.topics, &update.partitions),
                        s.max_partitions,
                    );
                    let result = s.apply(&state).await;
                    match refused {
                        None => {
                            refusal_backoff = None;
                            conn.send_control(result_frame(watcher_id, update.version, &result))?;
                        }
                        Some(refused) => {
                            let why = match result {
                                Ok(()) => refused,
                                Err(e) => Error::Protocol(format!("{refused}; {e}")),
                            };
                            let delay = refusal_backoff
                                .get_or_insert_with(|| client.backoff())
                                .next_delay();
                            let frame = result_frame(watcher_id, update.version, &Err(why));
                            refusal = Some((crate::util::deadline_after(delay), frame));
                        }
                    }
                }
            },
            _ = crate::util::sleep_until_opt(refusal_due) => {
                if let Some((_, frame)) = refusal.take() {
                    conn.send_control(frame)?;
                }
            }
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

    #[test]
    fn counts_above_the_bound_are_refused_with_count_and_bound() {
        assert_eq!(check_partition_count("t", 0, MAX_PARTITIONS).unwrap(), 0);
        assert_eq!(
            check_partition_count("t", MAX_PARTITIONS, MAX_PARTITIONS).unwrap(),
            MAX_PARTITIONS
        );
        let e = check_partition_count("t", MAX_PARTITIONS + 1, MAX_PARTITIONS).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("65537") && text.contains("65536"), "{text}");

        let (ok, refused) = within_bound(
            vec![
                ("a".into(), 4),
                ("b".into(), u32::MAX),
                ("c".into(), 100_000),
            ],
            MAX_PARTITIONS,
        );
        assert_eq!(
            ok,
            vec![("a".to_string(), 4)],
            "the counts within the bound still apply"
        );
        let text = refused.expect("refused").to_string();
        assert!(
            text.contains("topic b") && text.contains(&u32::MAX.to_string()),
            "{text}"
        );
        assert!(
            text.contains("topic c") && text.contains("100000"),
            "{text}"
        );
        assert!(within_bound(vec![("a".into(), 1)], MAX_PARTITIONS)
            .1
            .is_none());
    }
}
