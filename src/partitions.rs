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
//! Counts above [`MAX_PARTITIONS`](crate::lookup::MAX_PARTITIONS) are refused (never created).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::{FutureExt, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::codec::Frame;
use crate::commands;
use crate::connection::EntityKind;
use crate::error::{Error, Result};
use crate::lookup::check_partition_count;
#[cfg(test)]
use crate::lookup::MAX_PARTITIONS;
use crate::retry::RetryTimer;
use crate::topic::TopicName;
use crate::watcher::{LinkEvent, Pending, WatchHost, WatchLink};

/// What the service holds of its client (not the whole core: see [`WatchHost`]).
type Client = Arc<dyn WatchHost>;

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
    pub(crate) fn register<H: WatchHost>(
        self: &Arc<Self>,
        client: &Arc<H>,
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
            let client: Client = client.clone();
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
    /// The counts are taken at once (an update right after is compared with them); the
    /// returned future waits until the new partitions are live and gives an error naming
    /// what failed. It is a future the watcher's loop polls, never awaited inside it.
    fn apply(self: &Arc<Self>, update: &[(String, u32)]) -> Pending<Result<()>> {
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
                previous.insert(topic.clone(), (*known, *n));
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
        let service = Arc::downgrade(self);
        Box::pin(async move {
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
            // Growth failed: go back to the old count so the next update (or poll) tries
            // again (entities grow idempotently); unless a newer count was taken meanwhile.
            if let Some(service) = service.upgrade() {
                let mut st = service.lock();
                for (topic, _) in &failures {
                    if let (Some((known, _)), Some((prev, set))) =
                        (st.topics.get_mut(topic), previous.get(topic))
                    {
                        if *known == *set {
                            *known = *prev;
                        }
                    }
                }
            }
            let text: Vec<String> = failures.iter().map(|(t, e)| format!("{t}: {e}")).collect();
            Err(Error::Protocol(format!(
                "creating new partitions failed: {}",
                text.join("; ")
            )))
        })
    }
}

/// What the watcher's loop was waiting for, finished.
enum Done {
    /// A state applied: the watch's answer (no result to send) or an update's, to be
    /// answered on watcher `watcher_id` for `version`, with the counts refused (if any).
    Applied {
        answer: Option<(u64, u64, Option<Error>)>,
        result: Result<()>,
    },
    /// A poll ended (its counts applied or its failures logged).
    Polled,
}

/// A state's growth as the watcher's loop keeps it: shared, so that a later update can wait
/// for it too.
type Growth = Shared<Pending<Result<()>>>;

/// The growth of a state, joined with the growth of an earlier state that is still pending.
/// A state that repeats counts an earlier one already took (the broker's resend with a new
/// version, after its resend timeout, of an update whose growth is slow) starts no growth of
/// its own, yet its partitions are live only once the earlier growth is: PIP-247 answers
/// success "once the new partitions are live" (protocol-extensions.md), and the earlier
/// update's own result is never sent (only the newest version is answered). A failure of the
/// earlier growth fails this one (its error first), so the broker sends again and the growth
/// is retried.
fn join_pending(pending: Option<&Growth>, growth: Pending<Result<()>>) -> Growth {
    let before = pending.filter(|g| g.peek().is_none()).cloned();
    let joined: Pending<Result<()>> = Box::pin(async move {
        let before = match before {
            Some(g) => g.await,
            None => Ok(()),
        };
        let now = growth.await;
        before.and(now)
    });
    joined.shared()
}

/// How the service learns of new counts, decided by the first connection's features.
#[derive(PartialEq, Eq)]
enum Mode {
    /// Not known yet (no connection).
    Unknown,
    /// PIP-247 watcher.
    Watch,
    /// The polling fallback: every `interval` at a fixed rate.
    Poll,
}

/// Watches (or re-watches, on the same watcher) every topic of `topics`, named in full.
fn send_watch(link: &mut WatchLink, topics: &[(String, u32)]) {
    link.send_watch(
        |request_id, watcher_id| {
            commands::watch_partition_update(
                request_id,
                watcher_id,
                topics.iter().map(|(t, _)| t.clone()),
            )
        },
        "watch partitions",
    );
}

/// The service's loop, until the topic set empties. An event loop over the one watcher
/// mechanism ([`WatchLink`]): it never awaits inside; growth, polls, the watch and its close
/// are futures it polls and whose results it handles as events.
///
/// Each watcher the link registers has its own id, event channel and version state: after a
/// close (when a topic came back while closing) a new watcher starts, so the closed one's last
/// version cannot make the new one's first updates (versions from 1 again on the broker) look
/// stale, and late events of the closed watcher are not delivered to it.
async fn run(service: Weak<PartitionUpdates>, client: Client) {
    let Some(s) = service.upgrade() else { return };
    drop(service);
    // One update per version the broker pushes; a backlog this deep is a broker that
    // ignores the results we send.
    let mut link = WatchLink::new(
        client.clone(),
        EntityKind::PartitionWatcher,
        |f| f.supports_partition_update_watchers,
        crate::watcher::UPDATE_QUEUE,
        crate::watcher::UPDATE_QUEUE_BYTES,
    );
    link.connect_now();
    let mut mode = Mode::Unknown;
    let mut work: FuturesUnordered<Pending<Done>> = FuturesUnordered::new();
    let mut polling = false;
    // Polling: the schedule is not reset by registrations (an application that creates or
    // drops producers more often than the interval still gets polled); a newly registered
    // topic is checked at the next tick. A tick missed (a slow poll) is not made up for.
    let mut ticks = tokio::time::interval_at(crate::util::deadline_after(s.interval), s.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Watching: the generation of the topic set last sent, the last version applied.
    let mut watched_generation: Option<u64> = None;
    let mut last_version: Option<u64> = None;
    // A failure answer to an update refused for its counts, sent after a delay: the broker
    // resends at once after a failure, and a refused count would refuse again, so answering at
    // once would make the two sides ping-pong as fast as the network allows.
    let mut refusal: Option<(tokio::time::Instant, Frame)> = None;
    let mut refusal_delay = RetryTimer::new(client.backoff_policy());
    let mut closing = false;
    // The growth of the last state applied from the watcher, while other states may join it.
    let mut growing: Option<Growth> = None;
    loop {
        let (generation, topics) = s.snapshot();
        if topics.is_empty() {
            if mode != Mode::Watch || (link.watcher_id().is_none() && !closing) {
                // Nothing to watch and no watcher to close: stop; a new registration starts
                // the service again.
                if stop_if_empty(&s) {
                    return;
                }
            } else if link.is_settled() && !closing {
                // Close the watcher (a watch in flight is let answer first); stopped once the
                // close is answered, unless a topic came back meanwhile.
                link.close(
                    commands::watch_partition_update_close,
                    "close partition watcher",
                );
                closing = true;
            }
        } else if mode == Mode::Watch && link.is_settled() && watched_generation != Some(generation)
        {
            // Re-watch on the same watcher with the full topic list; the answer is applied.
            send_watch(&mut link, &topics);
            watched_generation = Some(generation);
        }
        let refusal_due = refusal.as_ref().map(|(at, _)| *at);
        tokio::select! {
            ev = link.next() => match ev {
                LinkEvent::Ready => {
                    mode = Mode::Watch;
                    closing = false;
                    let (generation, topics) = s.snapshot();
                    if topics.is_empty() {
                        link.close(commands::watch_partition_update_close, "close partition watcher");
                        continue;
                    }
                    last_version = None;
                    refusal = None;
                    send_watch(&mut link, &topics);
                    watched_generation = Some(generation);
                }
                LinkEvent::Unsupported => {
                    mode = Mode::Poll;
                    ticks = tokio::time::interval_at(
                        crate::util::deadline_after(s.interval),
                        s.interval,
                    );
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                LinkEvent::Watching(response) => {
                    let Some(ok) = response.watch_partition_update_success else {
                        tracing::debug!("watch answered without WatchPartitionUpdateSuccess; restarting");
                        link.retry_later();
                        continue;
                    };
                    let (state, refused) =
                        within_bound(pairs(&ok.topics, &ok.partitions), s.max_partitions);
                    if let Some(e) = refused {
                        tracing::warn!(error = %e, "partition counts refused after watching");
                    }
                    let growth = join_pending(growing.as_ref(), s.apply(&state));
                    growing = Some(growth.clone());
                    work.push(Box::pin(async move {
                        Done::Applied { answer: None, result: growth.await }
                    }));
                }
                LinkEvent::Update(frame) => {
                    let Some(update) = frame.command.partition_update else { continue };
                    let Some(watcher_id) = link.watcher_id() else { continue };
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
                    let growth = join_pending(growing.as_ref(), s.apply(&state));
                    growing = Some(growth.clone());
                    let version = update.version;
                    work.push(Box::pin(async move {
                        Done::Applied {
                            answer: Some((watcher_id, version, refused)),
                            result: growth.await,
                        }
                    }));
                }
                LinkEvent::Refused(e) => {
                    // Refused for good (a non-retriable error, e.g. NotAllowed): poll instead,
                    // as without the feature, and as the pattern consumer's topic-list watcher
                    // does on a refusal (upstream clients poll partitioned metadata anyway).
                    tracing::debug!(error = %e, "partition watcher refused; polling");
                    mode = Mode::Poll;
                    watched_generation = None;
                    refusal = None;
                    closing = false;
                    ticks = tokio::time::interval_at(
                        crate::util::deadline_after(s.interval),
                        s.interval,
                    );
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                LinkEvent::Lost(e) => {
                    tracing::debug!(error = %e, "partition updates: restarting");
                    if link.is_idle() {
                        link.retry_later();
                    }
                    watched_generation = None;
                    refusal = None;
                    refusal_delay.reset();
                    closing = false;
                }
                // Updates were dropped (the queue's count or byte bound): watch again on the
                    // same watcher with the full topic list (at the loop's top), whose answer
                    // carries every count; the broker also re-sends an update left unanswered.
                LinkEvent::Lagged => {
                    tracing::debug!("partition updates dropped; watching again");
                    watched_generation = None;
                }
                LinkEvent::Closed => {
                    closing = false;
                    if stop_if_empty(&s) {
                        return;
                    }
                    tracing::debug!("topics registered while closing; watching anew");
                    link.connect_now();
                }
            },
            Some(done) = work.next(), if !work.is_empty() => match done {
                Done::Polled => polling = false,
                Done::Applied { answer: None, result } => {
                    if let Err(e) = result {
                        tracing::warn!(error = %e, "partition growth failed after watching");
                    }
                }
                Done::Applied { answer: Some((watcher_id, version, refused)), result } => {
                    // One result per watcher state, not per version: an update a newer one
                    // replaced while its growth was pending is not answered. The broker keeps
                    // one version in flight per watcher and ignores a result for an older one
                    // (protocol-extensions.md, PIP-247), so answering it would be a frame it
                    // drops; the newest version's result covers the growths before it (see
                    // `join_pending`). Ledger: "PIP-247 watcher (a result per version)".
                    if link.watcher_id() != Some(watcher_id) || last_version != Some(version) {
                        continue; // an older watcher's, or a newer update came
                    }
                    match refused {
                        None => {
                            refusal_delay.reset();
                            if let Err(e) = link.send_control(result_frame(watcher_id, version, &result)) {
                                tracing::debug!(error = %e, "partition update result not sent");
                            }
                        }
                        Some(refused) => {
                            let why = match result {
                                Ok(()) => refused,
                                Err(e) => Error::Protocol(format!("{refused}; {e}")),
                            };
                            let at = refusal_delay.failed(tokio::time::Instant::now());
                            refusal = Some((at, result_frame(watcher_id, version, &Err(why))));
                        }
                    }
                }
            },
            _ = ticks.tick(), if mode == Mode::Poll && !polling => {
                let (_, topics) = s.snapshot();
                if topics.is_empty() {
                    continue; // stopped at the top
                }
                polling = true;
                work.push(poll_once(s.clone(), client.clone(), topics));
            }
            _ = crate::util::sleep_until_opt(refusal_due) => {
                if let Some((_, frame)) = refusal.take() {
                    if let Err(e) = link.send_control(frame) {
                        tracing::debug!(error = %e, "partition update result not sent");
                    }
                }
            }
            _ = s.changed.notified() => {}
        }
    }
}

/// One poll of the fallback: the counts of `topics`, one after the other, then applied.
fn poll_once(
    s: Arc<PartitionUpdates>,
    client: Client,
    topics: Vec<(String, u32)>,
) -> Pending<Done> {
    Box::pin(async move {
        let mut update = Vec::new();
        for (topic, _) in &topics {
            // The metadata refuses a count above the client's max_partitions.
            match client.clone().partitioned_metadata(topic.clone()).await {
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
        Done::Polled
    })
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
