//! Topic discovery of a pattern consumer (`ConsumerBuilder::topics_pattern`), like upstream's
//! `PatternMultiTopicsConsumerImpl` with its `TopicListWatcher` (PIP-145).
//!
//! One task per pattern consumer keeps the set of matching topics the broker reports (the
//! *desired* set) and makes the consumer's topics follow it:
//!
//! - **Polling** of GetTopicsOfNamespace every `pattern_auto_discovery_period` (upstream's
//!   default: 1 minute), sending the pattern and the hash of the desired set: the broker filters
//!   (`filtered`; otherwise the client filters) and answers `changed = false` when nothing
//!   changed. Polling keeps running while the watcher works, as a safety net (upstream lost
//!   messages after a watcher reconnect with nothing behind it, apache/pulsar#21853).
//! - **The PIP-145 watcher**, when the broker's CONNECTED advertises `supports_topic_watchers`
//!   and the mode is persistent-only (upstream creates one only then): WatchTopicList answered
//!   with the full list and its hash, then WatchTopicUpdate with new and deleted topics. After a
//!   connection loss it watches again (with backoff) sending the hash of the set it holds, so
//!   the broker sends the list only if it changed. An update whose hash does not match the set
//!   after applying it triggers a poll at once.
//! - **Reconciling**: topics of the desired set not yet subscribed are subscribed (without
//!   creating the topic: a deleted topic must stay deleted), subscribed topics no longer in it
//!   are closed. A subscribe that fails is retried with the client's backoff and logged once
//!   (a warning on the first failure of that topic, debug after), so one error never drops a
//!   topic for good; a topic the broker says does not exist leaves the desired set until a poll
//!   or update lists it again. Changes are applied one at a time, in order (upstream's
//!   `PatternConsumerUpdateQueue`).
//!
//! Every applied change is published as a [`TopicsChanged`] event.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::time::Instant;

use crate::commands;
use crate::connection::EntityKind;
use crate::consumer::topics::topic::{subscribe_all, SubscribeContext, TopicGroup};
use crate::consumer::Groups;
use crate::error::{Error, Result, ServerError};
use crate::lifecycle::State;
use crate::retry::RetryTimer;
use crate::topic::TopicName;
use crate::topic_list::{topics_hash, RegexSubscriptionMode};
use crate::watcher::{LinkEvent, Pending, WatchLink};

use super::listing::{admits, list_once, Listing};
pub(crate) use super::listing::{initial_topics, OwnLetters, PatternConfig};

pub use crate::updates::TopicsChanged;

/// How many change events a slow observer may lag behind before it misses some.
pub(crate) const CHANGE_EVENTS: usize = 256;

/// The default of `ConsumerBuilder::pattern_max_topics`. Upstream has no bound: a pattern
/// matching a million topics subscribes a million consumers (~15 KB each here, issue #39).
pub(crate) const DEFAULT_MAX_TOPICS: usize = 10_000;

/// Subscribes a pattern consumer's first topics, several at a time. A topic deleted since it
/// was listed (TopicNotFound: it is never re-created) is left out; any other failure fails the
/// subscribe, closing what was subscribed. Returns the groups and the topics discovery starts
/// from: those they cover, and those left out because of `max_topics`.
pub(crate) async fn subscribe_initial(
    ctx: &SubscribeContext,
    mut topics: Vec<String>,
    max_topics: usize,
) -> Result<(Vec<TopicGroup>, Vec<String>)> {
    // At most `max_topics` (the first in name order); the rest stays desired, and discovery's
    // first reconcile reports it as skipped.
    let skipped = topics.split_off(max_topics.min(topics.len()));
    let attempts = futures::stream::iter(topics.into_iter().map(|t| async move {
        let result = match TopicName::new(&t) {
            Ok(name) => subscribe_all(ctx, vec![name]).await,
            Err(e) => Err(e),
        };
        (t, result)
    }))
    .buffer_unordered(crate::entity::MAX_CONCURRENT_CREATES);
    let results: Vec<(String, Result<Vec<TopicGroup>>)> = attempts.collect().await;
    let mut groups = Vec::new();
    let mut kept = Vec::new();
    let mut failure = None;
    for (t, result) in results {
        match result {
            Ok(g) => {
                groups.extend(g);
                kept.push(t);
            }
            Err(Error::Broker {
                code: ServerError::TopicNotFound,
                ..
            }) => {
                tracing::debug!(topic = %t, "pattern consumer: listed topic gone before subscribing")
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        for g in groups {
            g.close(&ctx.registry).await;
        }
        return Err(e);
    }
    // In name order (what `Consumer::topics` shows first).
    groups.sort_by(|a, b| a.topic.as_str().cmp(b.topic.as_str()));
    kept.extend(skipped);
    Ok((groups, kept))
}

/// A stop of discovery: whether to wait for the reconcile in flight (`settle`, for
/// `unsubscribe`), and whom to tell once the task ended.
#[derive(Debug)]
struct StopRequest {
    settle: bool,
    done: oneshot::Sender<()>,
}

/// The running discovery of one pattern consumer; dropping it stops the task.
#[derive(Debug)]
pub(crate) struct Discovery {
    stop: std::sync::Mutex<Option<oneshot::Sender<StopRequest>>>,
    /// Matching topics not subscribed because of `max_topics`, as of the last reconcile.
    skipped: Arc<AtomicUsize>,
    events: broadcast::Sender<TopicsChanged>,
    /// `Ready` while discovery runs, `Closed` once it ended (the consumer closed or dropped,
    /// or the client closed): a pattern consumer is open while it has no topic, like
    /// upstream's, so its state does not follow its topics' alone.
    state: watch::Receiver<State>,
}

impl Discovery {
    /// Starts discovery for a consumer whose topics are `groups` (subscribed from `initial`).
    /// `out` keeps the consumer's queue open while it has no topic.
    pub(crate) fn start(
        ctx: SubscribeContext,
        groups: Groups,
        cfg: PatternConfig,
        initial: Vec<String>,
        out: crate::consumer::queue::QueueSender,
    ) -> Discovery {
        let (stop, stop_rx) = oneshot::channel();
        let (events, _) = broadcast::channel(CHANGE_EVENTS);
        let (state_tx, state) = watch::channel(State::Ready);
        // One update per topic change; a backlog this deep is a broker flooding us.
        let mut link = WatchLink::new(
            ctx.client.clone(),
            EntityKind::TopicListWatcher,
            |f| f.supports_topic_watchers,
            crate::watcher::UPDATE_QUEUE,
            crate::watcher::UPDATE_QUEUE_BYTES,
        );
        // Upstream creates a watcher only for a persistent-only pattern consumer.
        if cfg.mode == RegexSubscriptionMode::PersistentOnly {
            link.connect_now();
        }
        let skipped = Arc::new(AtomicUsize::new(0));
        let task = Task {
            state: state_tx,
            work: None,
            again: false,
            polling: None,
            poll_again: false,
            skipped: skipped.clone(),
            retry: RetryTimer::new(*ctx.client.backoff_policy()),
            ctx,
            groups,
            desired: initial.into_iter().collect(),
            cfg,
            events: events.clone(),
            failed: HashSet::new(),
            retry_at: None,
            link,
            watching: false,
            rewatch: false,
            poll_hash: None,
            _out: out,
        };
        tokio::spawn(task.run(stop_rx));
        Discovery {
            stop: std::sync::Mutex::new(Some(stop)),
            skipped,
            events,
            state,
        }
    }

    /// The discovery's own state (see the field).
    pub(crate) fn state(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    /// Change events from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<TopicsChanged> {
        self.events.subscribe()
    }

    /// Matching topics not subscribed because of `max_topics`.
    pub(crate) fn skipped(&self) -> usize {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Stops the task (closing its watcher) and waits until it ended. A reconcile in flight
    /// is finished in the background (what it subscribes is closed once answered): for
    /// `close`.
    pub(crate) async fn stop(&self) {
        self.stop_with(false).await
    }

    /// Stops the task like [`stop`](Self::stop), but waits for the reconcile in flight, whose
    /// topics then join the consumer: for `unsubscribe`, which must unsubscribe them too.
    pub(crate) async fn stop_settled(&self) {
        self.stop_with(true).await
    }

    async fn stop_with(&self, settle: bool) {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(stop) = stop {
            let (done, wait) = oneshot::channel();
            if stop.send(StopRequest { settle, done }).is_ok() {
                let _ = wait.await;
            }
        }
    }
}

struct Task {
    /// Set to `Closed` when the task ends.
    state: watch::Sender<State>,
    ctx: SubscribeContext,
    groups: Groups,
    cfg: PatternConfig,
    /// The matching topics the broker reported last.
    desired: BTreeSet<String>,
    events: broadcast::Sender<TopicsChanged>,
    /// Topics whose subscribe failed (logged once).
    failed: HashSet<String>,
    /// When to retry failed subscribes.
    retry_at: Option<Instant>,
    retry: RetryTimer,
    /// The PIP-145 watcher (the one watcher mechanism, [`crate::watcher`]): idle when the
    /// mode is not persistent-only, the broker lacks the feature or refused it.
    link: WatchLink,
    /// Whether the watch was answered (and not lost since).
    watching: bool,
    /// Whether a watcher was lost: the next one is followed by a poll.
    rewatch: bool,
    /// The broker's hash from the last poll answer (sent back on the next poll).
    poll_hash: Option<String>,
    /// The reconcile in flight (its closes and subscribes), a future the loop polls: one at a
    /// time, in order (upstream's `PatternConsumerUpdateQueue`).
    work: Option<Pending<Reconciled>>,
    /// A reconcile was asked for while one ran: another one follows it.
    again: bool,
    /// The poll in flight (the loop polls it).
    polling: Option<Pending<Result<Listing>>>,
    /// A poll was asked for while one ran (a hash mismatch, a lag): another one follows it.
    poll_again: bool,
    /// Matching topics not subscribed because of `max_topics` (shared with the handle).
    skipped: Arc<AtomicUsize>,
    /// Keeps the consumer's queue open.
    _out: crate::consumer::queue::QueueSender,
}

/// What one reconcile did: the topics it closed, and each subscribe's outcome.
struct Reconciled {
    removed: Vec<TopicName>,
    results: Vec<(String, Result<Vec<TopicGroup>>)>,
}

/// How many names the desired set may hold from watcher updates before the watcher's view is
/// dropped for a full re-listing (which replaces the set; one listing is bounded by the frame
/// size). Far above `max_topics` (the topics subscribed), so the hash stays meaningful.
fn desired_bound(max_topics: usize) -> usize {
    max_topics.saturating_mul(2).max(10_000)
}

impl Task {
    fn hash(&self) -> String {
        topics_hash(&self.desired.iter().collect::<Vec<_>>())
    }

    async fn run(mut self, mut stop: oneshot::Receiver<StopRequest>) {
        let stopped = self.serve(&mut stop).await;
        // A stop interrupts a poll waiting for the broker (like upstream's close, which does
        // not wait for a pending GetTopicsOfNamespace), but not a subscribe or close of a
        // topic: a SUBSCRIBE dropped while in flight leaves its consumer attached on the
        // broker, out of the consumer's tasks. On `close` (and drop, and the client's close)
        // the reconcile in flight is finished in the background and what it subscribed is
        // closed once the broker answers, like upstream's `ConsumerImpl` closed while
        // subscribing (it sends CloseConsumer once answered): the close does not wait for
        // an unresponsive broker's SUBSCRIBE. On `unsubscribe` it is waited for, so the
        // topics it adds are unsubscribed with the others.
        self.polling = None;
        if let Some(work) = self.work.take() {
            if stopped.as_ref().is_some_and(|s| s.settle) {
                let done = work.await;
                self.reconciled(done);
            } else {
                let registry = self.ctx.registry.clone();
                tokio::spawn(async move {
                    let done = work.await;
                    for (_, result) in done.results {
                        for g in result.into_iter().flatten() {
                            g.close(&registry).await;
                        }
                    }
                });
            }
        }
        self.close_watch().await;
        self.state.send_replace(State::Closed);
        if let Some(s) = stopped {
            let _ = s.done.send(());
        }
    }

    /// Discovery until the consumer's queue or the client closes (`None`), or until stopped.
    /// Nothing is awaited here but the `select!`: the link, the poll and the reconcile in
    /// flight are futures the loop polls (issue #32: no await inside an event loop).
    async fn serve(&mut self, stop: &mut oneshot::Receiver<StopRequest>) -> Option<StopRequest> {
        let period = self.cfg.period;
        let mut ticks =
            tokio::time::interval_at(crate::util::later(Instant::now(), period), period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poll_failed_logged = false;
        let mut shutdown = self.ctx.client.shutdown_signal();
        let ended = crate::consumer::topics::registry::lock(&self.ctx.registry)
            .ended
            .clone();
        // Anything listed at subscribe time but not subscribed (skipped) is reconciled at once.
        self.want_reconcile();
        loop {
            tokio::select! {
                r = &mut *stop => return r.ok(),
                _ = self._out.closed() => break,
                // The client closes: its consumers close themselves; no topic joins any more,
                // and the consumer's queue ends once they are gone.
                _ = crate::core::shut_down(&mut shutdown) => break,
                _ = ticks.tick() => {
                    self.start_poll();
                    if self.link.is_idle() && self.cfg.mode == RegexSubscriptionMode::PersistentOnly {
                        // A broker that refused the watcher (or had none) may serve one on a
                        // new connection.
                        self.link.connect_now();
                    }
                }
                listed = async { self.polling.as_mut().expect("guarded").await }, if self.polling.is_some() => {
                    self.polling = None;
                    match listed {
                        Ok(listing) => {
                            poll_failed_logged = false;
                            self.apply(listing);
                        }
                        Err(e) => {
                            // Logged once per run of failures; the next tick retries.
                            if !poll_failed_logged {
                                tracing::warn!(pattern = %self.cfg.pattern.text, error = %e,
                                    "pattern consumer: listing topics failed; retrying at the next poll");
                                poll_failed_logged = true;
                            } else {
                                tracing::debug!(error = %e, "pattern consumer: listing topics failed again");
                            }
                        }
                    }
                    if std::mem::take(&mut self.poll_again) {
                        self.start_poll();
                    }
                }
                done = async { self.work.as_mut().expect("guarded").await }, if self.work.is_some() => {
                    self.work = None;
                    self.reconciled(done);
                    if std::mem::take(&mut self.again) {
                        self.want_reconcile();
                    }
                }
                // A topic was deleted under its consumer: drop it now (and subscribe it again if
                // the broker still lists it).
                _ = ended.notified() => self.want_reconcile(),
                _ = crate::util::sleep_until_opt(self.retry_at) => {
                    self.retry_at = None;
                    self.want_reconcile();
                }
                ev = self.link.next() => self.on_link_event(ev),
            }
        }
        None
    }

    /// Starts a poll, unless one is in flight.
    fn start_poll(&mut self) {
        if self.polling.is_some() {
            return;
        }
        self.polling = Some(Box::pin(self.list()));
    }

    /// Asks for a poll now: after the one in flight, if any.
    fn poll_soon(&mut self) {
        if self.polling.is_some() {
            self.poll_again = true;
        } else {
            self.start_poll();
        }
    }

    /// One poll's listing. It holds nothing of the task while it waits.
    fn list(&self) -> impl std::future::Future<Output = Result<Listing>> + Send + 'static + use<> {
        let client = self.ctx.client.clone();
        let cfg = self.cfg.clone();
        let timeout = client.operation_timeout();
        // Upstream `PatternMultiTopicsConsumerImpl` sends back the hash the broker gave last
        // (of its own list: the whole namespace when it does not filter), so an unchanged
        // namespace is answered `changed = false`; our own hash until the broker has given one.
        let hash = self.poll_hash.clone().unwrap_or_else(|| self.hash());
        async move {
            let conn = client.lookup_service_connection().await?;
            list_once(&conn, &cfg, Some(hash), timeout).await
        }
    }

    /// Applies one poll's listing: replaces the desired set if the broker's list changed.
    fn apply(&mut self, listing: Listing) {
        if listing.hash.is_some() {
            self.poll_hash = listing.hash;
        }
        if let Some(topics) = listing.topics {
            self.desired = topics;
        }
        self.want_reconcile();
    }

    /// Handles what happened to the watcher: its connection and watch are futures the link
    /// keeps, never awaited here.
    fn on_link_event(&mut self, ev: LinkEvent) {
        match ev {
            LinkEvent::Ready => {
                let (ns, text, hash) = (
                    &self.cfg.pattern.namespace,
                    &self.cfg.pattern.text,
                    self.hash(),
                );
                self.link.send_watch(
                    |request_id, id| {
                        commands::watch_topic_list(request_id, id, ns, text, Some(hash))
                    },
                    "watch topic list",
                );
            }
            // Polling only (checked again after the next poll, on whatever connection).
            LinkEvent::Unsupported => {}
            LinkEvent::Watching(resp) => {
                let Some(ok) = resp.watch_topic_list_success else {
                    self.link.retry_later();
                    return;
                };
                tracing::debug!(
                    watcher_id = self.link.watcher_id(),
                    topics = ok.topic.len(),
                    "topic list watcher registered"
                );
                self.watching = true;
                // The broker sends the list only if it differs from the hash we sent.
                if !(ok.topic.is_empty() && ok.topics_hash == self.hash()) {
                    self.desired = ok
                        .topic
                        .into_iter()
                        .filter(|t| admits(&self.cfg, t, false))
                        .collect();
                }
                self.want_reconcile();
                if std::mem::take(&mut self.rewatch) {
                    // Like upstream's `recheckTopicsChangeAfterReconnect`: after a watcher was
                    // lost, list the topics once more (apache/pulsar#21853 lost messages when
                    // only the watcher's answer was trusted after a reconnect).
                    self.poll_soon();
                }
            }
            LinkEvent::Lost(e) => {
                // Watched again (with the hash of what we hold) after the backoff.
                tracing::debug!(error = %e, "topic list watcher lost or failed; retrying");
                if std::mem::take(&mut self.watching) {
                    self.rewatch = true;
                }
            }
            // Refused (e.g. NotAllowed): polling carries on; tried again after the next poll.
            LinkEvent::Refused(e) => {
                tracing::debug!(error = %e, "topic list watcher refused; polling");
                self.watching = false;
            }
            LinkEvent::Closed => self.watching = false,
            LinkEvent::Lagged => {
                // Updates were dropped (more than the watcher's queue holds, in count or
                // bytes): what we hold may miss some, so list the namespace again, as
                // upstream does when an update's hash does not match.
                tracing::debug!("topic list watcher: updates dropped; polling");
                self.poll_soon();
            }
            LinkEvent::Update(frame) => {
                let Some(update) = frame.command.watch_topic_update else {
                    return;
                };
                let bound = desired_bound(self.cfg.max_topics);
                let grows = update
                    .new_topics
                    .len()
                    .saturating_sub(update.deleted_topics.len());
                if self.desired.len().saturating_add(grows) > bound {
                    // Past the bound of what updates may add: re-list rather than grow.
                    tracing::debug!(bound, "topic list watcher: too many topics; polling");
                    self.poll_soon();
                    return;
                }
                for t in &update.deleted_topics {
                    self.desired.remove(t);
                }
                for t in update.new_topics {
                    if admits(&self.cfg, &t, false) {
                        self.desired.insert(t);
                    }
                }
                let drift = update.topics_hash != self.hash();
                self.want_reconcile();
                if drift {
                    // The set we hold differs from the broker's: list again now.
                    tracing::debug!("topic list watcher: hash mismatch; polling");
                    self.poll_soon();
                }
            }
        }
    }

    /// Closes the watcher (a watch in flight too: the broker may have made it) and waits for
    /// the answer (after the loop: nothing else is served any more).
    async fn close_watch(&mut self) {
        if self.link.watcher_id().is_some() {
            self.link
                .close(commands::watch_topic_list_close, "close topic list watcher");
            let _ = self.link.next().await;
        }
    }

    /// Starts a reconcile, or asks for another one after the one in flight.
    fn want_reconcile(&mut self) {
        if self.work.is_some() {
            self.again = true;
            return;
        }
        self.work = self.start_reconcile();
    }

    /// Works out what to subscribe and close (now, from the sets) and returns the future that
    /// does it; `None` when there is nothing to do.
    fn start_reconcile(&mut self) -> Option<Pending<Reconciled>> {
        // A topic whose consumers all ended (deleted on the broker, which ends them without an
        // error) is no longer subscribed: if the broker lists it again it is subscribed anew,
        // never left out for good.
        let registry = self.ctx.registry.clone();
        let mut leaving: Vec<TopicGroup> = {
            let mut groups = lock(&self.groups);
            let (dead, live): (Vec<_>, Vec<_>) =
                std::mem::take(&mut *groups).into_iter().partition(|g| {
                    g.tasks(&registry)
                        .iter()
                        .all(|(_, p)| p.state.get().is_terminal())
                });
            *groups = live;
            for g in &dead {
                tracing::debug!(topic = %g.topic, "pattern consumer: topic's consumer ended");
            }
            dead
        };
        let current: BTreeSet<String> = lock(&self.groups)
            .iter()
            .map(|g| g.topic.to_string())
            .collect();
        let removed: HashSet<String> = current.difference(&self.desired).cloned().collect();
        if !removed.is_empty() {
            let mut groups = lock(&self.groups);
            let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *groups)
                .into_iter()
                .partition(|g| removed.contains(g.topic.as_str()));
            *groups = keep;
            leaving.extend(gone);
        }
        let staying = current.len() - removed.len();
        let mut wanted: Vec<String> = self.desired.difference(&current).cloned().collect();
        // `max_topics`: never more topics subscribed than that; the rest is reported.
        let room = self.cfg.max_topics.saturating_sub(staying);
        let skipped = wanted.len().saturating_sub(room);
        wanted.truncate(room);
        let before = self.skipped.swap(skipped, Ordering::Relaxed);
        if skipped != before {
            if before == 0 {
                tracing::warn!(pattern = %self.cfg.pattern.text, skipped,
                    max_topics = self.cfg.max_topics,
                    "pattern consumer: more matching topics than max_topics; not subscribing the rest");
            }
            if leaving.is_empty() && wanted.is_empty() {
                // Nothing else changes: the count alone is the news.
                let _ = self.events.send(TopicsChanged {
                    skipped: skipped as u64,
                    ..Default::default()
                });
            }
        }
        if leaving.is_empty() && wanted.is_empty() {
            return None;
        }
        let ctx = self.ctx.clone();
        Some(Box::pin(async move {
            let mut removed = Vec::new();
            for g in leaving {
                removed.push(g.topic.clone());
                g.close(&ctx.registry).await;
            }
            // Several at a time (like the first subscribe), applied in the order they finish.
            let ctx = &ctx;
            let attempts = futures::stream::iter(wanted.into_iter().map(|t| async move {
                let result = match TopicName::new(&t) {
                    Ok(name) => subscribe_all(ctx, vec![name]).await,
                    Err(e) => Err(e),
                };
                (t, result)
            }))
            .buffer_unordered(crate::entity::MAX_CONCURRENT_CREATES);
            let results = attempts.collect().await;
            Reconciled { removed, results }
        }))
    }

    /// Applies what a reconcile did: the new topics join, failures are retried later, and the
    /// change is published.
    fn reconciled(&mut self, done: Reconciled) {
        let removed_names = done.removed;
        let mut added_names = Vec::new();
        let mut retry = false;
        for (t, result) in done.results {
            match result {
                Ok(mut g) => {
                    self.failed.remove(&t);
                    added_names.extend(g.iter().map(|g| g.topic.clone()));
                    lock(&self.groups).append(&mut g);
                }
                Err(Error::Broker {
                    code: ServerError::TopicNotFound,
                    ..
                }) => {
                    // Deleted meanwhile: never re-created; a later listing adds it back if
                    // it exists again.
                    tracing::debug!(topic = %t, "pattern consumer: topic gone before subscribing");
                    self.desired.remove(&t);
                    self.failed.remove(&t);
                }
                Err(e @ Error::InvalidConfig(_)) => {
                    tracing::debug!(topic = %t, error = %e, "pattern consumer: not a topic name");
                    self.desired.remove(&t);
                }
                Err(e) => {
                    if self.failed.insert(t.clone()) {
                        tracing::warn!(topic = %t, error = %e,
                            "pattern consumer: subscribing a new topic failed; retrying");
                    } else {
                        tracing::debug!(topic = %t, error = %e, "pattern consumer: subscribe failed again");
                    }
                    retry = true;
                }
            }
        }
        // Forget failures of topics no longer wanted (bounded by the desired set).
        let desired = &self.desired;
        self.failed.retain(|t| desired.contains(t));
        if retry {
            self.retry_at = Some(self.retry.failed(Instant::now()));
        } else {
            self.retry.reset();
        }
        if !added_names.is_empty() || !removed_names.is_empty() {
            tracing::info!(pattern = %self.cfg.pattern.text, added = added_names.len(),
                removed = removed_names.len(), "pattern consumer: topics changed");
            let _ = self.events.send(TopicsChanged {
                added: added_names,
                removed: removed_names,
                missed: 0,
                skipped: self.skipped.load(Ordering::Relaxed) as u64,
            });
        }
    }
}

fn lock(groups: &Groups) -> std::sync::MutexGuard<'_, Vec<TopicGroup>> {
    groups.lock().unwrap_or_else(|e| e.into_inner())
}
