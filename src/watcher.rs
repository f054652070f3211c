//! The one watcher mechanism of the client's broker-side watchers: partition updates
//! (PIP-247, [`crate::partitions`]) and topic lists (PIP-145, the pattern consumer's).
//!
//! A [`WatchLink`] owns one watcher's registration as a state machine that an event loop polls
//! in its own `select!` ([`WatchLink::next`] is cancel safe: every future it waits on is kept
//! in the link), so the loop never awaits a connection, a watch request or a close:
//!
//! ```text
//!   Idle ──connect_now──► Connecting ──Ready──► Connected ──send_watch──► Requesting
//!     ▲                      │ (no feature: Unsupported → Idle)               │
//!     │                      ▼ failed                                         ▼ answered
//!   Closed ◄── Closing ◄─ Waiting (backoff) ◄── Lost (connection, refusal) ◄─ Watching
//!                                                                  (rewatch ─┘ on the same id)
//! ```
//!
//! What is watched stays with the owner: the command to send (built from its state when the
//! link is [`Ready`](LinkEvent::Ready)), what an answer or an update means, what to poll. Every
//! retry (no connection, a watcher lost with its connection, a retriable refusal) waits the
//! client's backoff through [`RetryTimer`], which starts over once a watch is answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use crate::backoff_policy::BackoffPolicy;
use crate::codec::Frame;
use crate::connection::{
    BrokerFeatures, Connection, EntityEvent, EntityKind, QueueMemory, WatchSlot,
};
use crate::error::{Error, Result};
use crate::proto::BaseCommand;
use crate::retry::RetryTimer;

/// How many pushed commands a watcher queues untaken (one update per topic change or
/// partition version; a backlog this deep is a broker flooding us).
pub(crate) const UPDATE_QUEUE: usize = 1024;

/// How many bytes of pushed commands a watcher queues untaken (at least one command is
/// always taken, however large: at most the max frame size). A queue's bound is the smaller
/// of this and [`UPDATE_QUEUE`], and its bytes are taken from the client memory limit (the
/// consumers' share of it, [`WatchHost::queue_memory`]), so a queue also holds no more than
/// what is free of that; past it, updates are dropped and the owner re-reads
/// ([`LinkEvent::Lagged`]) instead of the queue growing: 1,024 updates of 5 MiB topic lists
/// were 5 GiB (issue #31 §3).
pub(crate) const UPDATE_QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// A boxed future a watcher keeps while it runs.
pub(crate) type Pending<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a watcher needs of its client: a connection to the service URL, watcher ids, the
/// backoff policy and partitioned metadata. Implemented by the client core; the watchers take
/// this, not the core, so the core (which holds the partition update service) is not
/// imported back.
pub(crate) trait WatchHost: Send + Sync + std::fmt::Debug + 'static {
    /// The client's backoff policy.
    fn backoff_policy(&self) -> BackoffPolicy;
    /// A fresh watcher id (unique in the client).
    fn new_watcher_id(&self) -> u64;
    /// A connection to one of the service URL's brokers.
    fn service_connection(self: Arc<Self>) -> Pending<Result<Connection>>;
    /// The partition count of `topic`, with the client's retries within the operation timeout.
    fn partitioned_metadata(self: Arc<Self>, topic: String) -> Pending<Result<u32>>;
    /// Where a watcher's queue takes its bytes from: the client memory limit.
    fn queue_memory(&self) -> Arc<dyn QueueMemory>;
}

/// What happened to a watcher ([`WatchLink::next`]).
#[derive(Debug)]
pub(crate) enum LinkEvent {
    /// A connection whose broker has the feature: send the watch ([`WatchLink::send_watch`]).
    Ready,
    /// The broker lacks the feature: the link is idle.
    Unsupported,
    /// The watch (first or again) was answered: the answer, to apply.
    Watching(Box<BaseCommand>),
    /// A command pushed to the watcher.
    Update(Box<Frame>),
    /// Commands pushed to the watcher were dropped: more than its queue holds, in count or in
    /// bytes (see [`WatchLink::new`]). The owner re-reads the whole state (a re-listing, the
    /// partition counts); what was queued before the drop was dropped with them (it is older
    /// than what the re-reading finds).
    Lagged,
    /// The watcher is gone or could not be had (no connection, the connection lost, a
    /// retriable failure of the watch); a new one is attempted after the backoff.
    Lost(Error),
    /// The broker refused the watch for good (a non-retriable error): the link is idle.
    Refused(Error),
    /// The close was answered (or failed): the link is idle.
    Closed,
}

enum Phase {
    Idle,
    Waiting(Instant),
    Connecting(Pending<Result<Connection>>),
    Connected(Connection),
    Requesting {
        slot: WatchSlot,
        request: Pending<Result<Box<BaseCommand>>>,
    },
    Watching {
        slot: WatchSlot,
        rewatch: Option<Pending<Result<Box<BaseCommand>>>>,
    },
    Closing(Pending<Result<Box<BaseCommand>>>),
}

/// One watcher's registration (see the module docs).
pub(crate) struct WatchLink {
    host: Arc<dyn WatchHost>,
    kind: EntityKind,
    supports: fn(&BrokerFeatures) -> bool,
    /// How many pushed commands the watcher may hold untaken, and how many bytes of them:
    /// past either, they are dropped and the owner re-reads ([`LinkEvent::Lagged`]).
    bound: usize,
    bytes: usize,
    phase: Phase,
    retry: RetryTimer,
}

impl std::fmt::Debug for WatchLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchLink")
            .field("kind", &self.kind)
            .field("watcher_id", &self.watcher_id())
            .finish()
    }
}

fn request(
    conn: &Connection,
    cmd: BaseCommand,
    request_id: u64,
    what: &'static str,
) -> Pending<Result<Box<BaseCommand>>> {
    let conn = conn.clone();
    Box::pin(async move { conn.request(request_id, cmd, what).await })
}

impl WatchLink {
    /// A link for watchers of `kind` on brokers that `supports` them, whose pushed commands
    /// queue up to `bound` commands and `bytes` of them (the smaller bound applies).
    pub(crate) fn new(
        host: Arc<dyn WatchHost>,
        kind: EntityKind,
        supports: fn(&BrokerFeatures) -> bool,
        bound: usize,
        bytes: usize,
    ) -> Self {
        let retry = RetryTimer::new(host.backoff_policy());
        WatchLink {
            host,
            kind,
            supports,
            bound,
            bytes,
            phase: Phase::Idle,
            retry,
        }
    }

    /// Looks for a connection now (dropping any watcher held).
    pub(crate) fn connect_now(&mut self) {
        self.phase = Phase::Connecting(self.host.clone().service_connection());
    }

    /// Drops any watcher held and tries again after the backoff's next delay.
    pub(crate) fn retry_later(&mut self) {
        self.phase = Phase::Waiting(self.retry.failed(Instant::now()));
    }

    /// Whether nothing is held or scheduled (idle, or unsupported / refused).
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self.phase, Phase::Idle)
    }

    /// Whether the watch is answered and no re-watch is in flight.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self.phase, Phase::Watching { rewatch: None, .. })
    }

    /// The id of the watcher registered (watching, or its watch in flight).
    pub(crate) fn watcher_id(&self) -> Option<u64> {
        match &self.phase {
            Phase::Requesting { slot, .. } | Phase::Watching { slot, .. } => Some(slot.id()),
            _ => None,
        }
    }

    /// After [`LinkEvent::Ready`]: registers a new watcher and sends `build(request_id,
    /// watcher_id)`. Or, while watching, sends it again on the same watcher (a re-watch, e.g.
    /// with a new topic list). Otherwise nothing is sent.
    pub(crate) fn send_watch(
        &mut self,
        build: impl FnOnce(u64, u64) -> BaseCommand,
        what: &'static str,
    ) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Connected(conn) => {
                let id = self.host.new_watcher_id();
                let memory = self.host.queue_memory();
                let registered =
                    WatchSlot::register(&conn, self.kind, id, self.bound, self.bytes, memory);
                let Ok(slot) = registered else {
                    // The connection closed meanwhile.
                    self.retry_later();
                    return;
                };
                let request_id = conn.new_request_id();
                let request = request(&conn, build(request_id, id), request_id, what);
                self.phase = Phase::Requesting { slot, request };
            }
            Phase::Watching { slot, .. } => {
                let request_id = slot.conn().new_request_id();
                let cmd = build(request_id, slot.id());
                let rewatch = Some(request(slot.conn(), cmd, request_id, what));
                self.phase = Phase::Watching { slot, rewatch };
            }
            other => self.phase = other,
        }
    }

    /// Closes the watcher held (its answer is [`LinkEvent::Closed`]); without one the link
    /// just goes idle.
    pub(crate) fn close(
        &mut self,
        build: impl FnOnce(u64, u64) -> BaseCommand,
        what: &'static str,
    ) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Requesting { slot, .. } | Phase::Watching { slot, .. } => {
                let request_id = slot.conn().new_request_id();
                let cmd = build(request_id, slot.id());
                // The slot goes with this: late commands of the closed watcher go nowhere.
                Phase::Closing(request(slot.conn(), cmd, request_id, what))
            }
            _ => Phase::Idle,
        };
    }

    /// Sends a frame that gets no answer on the watcher's connection (e.g. an update's
    /// result); without a watcher it is not sent (the broker forgot it with its connection).
    pub(crate) fn send_control(&self, frame: Frame) -> Result<()> {
        match &self.phase {
            Phase::Requesting { slot, .. } | Phase::Watching { slot, .. } => {
                slot.conn().send_control(frame)
            }
            _ => Ok(()),
        }
    }

    /// The next event. Cancel safe: whatever it waits on stays in the link.
    pub(crate) async fn next(&mut self) -> LinkEvent {
        loop {
            match &mut self.phase {
                Phase::Idle | Phase::Connected(_) => futures::future::pending::<()>().await,
                Phase::Waiting(at) => {
                    tokio::time::sleep_until(*at).await;
                    self.connect_now();
                }
                Phase::Connecting(connecting) => {
                    let result = connecting.await;
                    return match result {
                        Ok(conn) if (self.supports)(&conn.info().features) => {
                            self.phase = Phase::Connected(conn);
                            LinkEvent::Ready
                        }
                        Ok(_) => {
                            self.phase = Phase::Idle;
                            LinkEvent::Unsupported
                        }
                        Err(e) => {
                            self.retry_later();
                            LinkEvent::Lost(e)
                        }
                    };
                }
                Phase::Requesting { request, .. } => {
                    let result = request.await;
                    return self.answered(result);
                }
                Phase::Watching { slot, rewatch } => {
                    if slot.events.take_dropped() {
                        // What is still queued is older than what the owner re-reads: drop
                        // it too (a connection loss among it is reported after).
                        let mut closed = None;
                        while let Ok(ev) = slot.events.try_recv() {
                            if let EntityEvent::ConnectionClosed(e) = ev {
                                closed = Some(e);
                            }
                        }
                        if let Some(e) = closed {
                            self.retry_later();
                            return LinkEvent::Lost(e);
                        }
                        return LinkEvent::Lagged;
                    }
                    let ev = tokio::select! {
                        r = async { rewatch.as_mut().expect("guarded").await }, if rewatch.is_some() => {
                            return self.answered(r);
                        }
                        ev = slot.events.recv() => ev,
                    };
                    match ev {
                        Some(EntityEvent::Command(frame)) => return LinkEvent::Update(frame),
                        Some(EntityEvent::Message(_) | EntityEvent::Receipt(_)) => continue,
                        Some(EntityEvent::ConnectionClosed(e)) => {
                            self.retry_later();
                            return LinkEvent::Lost(e);
                        }
                        None => {
                            self.retry_later();
                            return LinkEvent::Lost(Error::ConnectionLost(
                                "watcher channel closed".into(),
                            ));
                        }
                    }
                }
                Phase::Closing(closing) => {
                    let _ = closing.await;
                    self.phase = Phase::Idle;
                    return LinkEvent::Closed;
                }
            }
        }
    }

    /// A watch request's answer (first or again).
    fn answered(&mut self, result: Result<Box<BaseCommand>>) -> LinkEvent {
        match result {
            Ok(answer) => {
                self.phase = match std::mem::replace(&mut self.phase, Phase::Idle) {
                    Phase::Requesting { slot, .. } | Phase::Watching { slot, .. } => {
                        Phase::Watching {
                            slot,
                            rewatch: None,
                        }
                    }
                    other => other,
                };
                // Watching works again: the next loss starts from the initial delay.
                self.retry.reset();
                LinkEvent::Watching(answer)
            }
            Err(e @ Error::Broker { code, .. }) if !code.is_retriable() => {
                self.phase = Phase::Idle;
                LinkEvent::Refused(e)
            }
            Err(e) => {
                self.retry_later();
                LinkEvent::Lost(e)
            }
        }
    }
}
