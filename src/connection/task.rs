//! The task that owns one broker socket: writes outbound frames, routes inbound ones, keeps the
//! connection alive and times requests out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::Instrument;

use super::handshake::auth_response;
use super::router::{lost_for_requests, PendingRequest, Router, Step};
use super::routing::{self, EntityKind, Route};
use super::writer::{write_loop, Outgoing};
use super::{ConnectionStats, Op};
use crate::auth::{Credentials, SharedAuthProvider};
use crate::codec::{Frame, Inbound, InboundCodec, PulsarCodec};
use crate::error::{Error, Result};
use crate::proto::BaseCommand;
use crate::util::{later, sleep_until_opt};

/// How many ops from handles are taken in one go.
const WRITE_BATCH: usize = 128;

/// How many queued ops are taken after each inbound frame (see the inbound branch).
const OPS_PER_FRAME: usize = 16;

/// Frames queued for the writer task.
const WRITE_QUEUE: usize = 1024;

/// At most this many frames wait behind a full writer queue. Only control commands (bounded
/// by what entities received) and the rare handle op get there; more means the broker has not
/// read thousands of our frames, and the connection is closed rather than queueing without
/// bound (upstream's Netty outbound buffer has no bound).
const MAX_BACKLOG: usize = 1024;

pub(super) struct TaskParams<S> {
    pub reader: FramedRead<ReadHalf<S>, InboundCodec>,
    pub writer: FramedWrite<WriteHalf<S>, PulsarCodec>,
    pub ops: mpsc::Receiver<Op>,
    pub control: mpsc::UnboundedReceiver<Op>,
    pub closed: watch::Sender<Option<Error>>,
    pub stats: watch::Sender<ConnectionStats>,
    pub keepalive: Duration,
    pub auth: Option<SharedAuthProvider>,
    pub broker_url: String,
    /// The negotiated maximum message size (backlog frames are encoded with its limit).
    pub max_message_size: usize,
}

pub(super) fn spawn<S>(params: TaskParams<S>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    // A process-wide number tells apart two connections to the same broker in the logs.
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let span = tracing::debug_span!("connection", id, broker = %params.broker_url);
    tokio::spawn(run(params).instrument(span));
}

/// Frames on their way to the writer. The reading side must never wait for the socket to
/// accept writes (a broker blocked on writing to us would then never read from us: a
/// deadlock), so frames the writer's queue cannot take yet wait here, and no new ops are
/// taken from handles until it drains — backpressure without ever stopping to read for it.
/// (The one pause in reading is a consumer's channel past its byte allowance: see
/// `entity_channel::Backpressure`.)
struct Outbox {
    tx: mpsc::Sender<Outgoing>,
    backlog: VecDeque<Outgoing>,
    /// Maximum frame size, for encoding frames that wait in the backlog.
    max_frame_size: usize,
    /// Raised while a PONG waits to be written: it answers every PING received meanwhile.
    pong_pending: Arc<AtomicBool>,
}

/// Answers to auth challenges: the provider is asked in the background (the task never awaits
/// it in its loop) and its answer sent when it comes. Challenges arriving while one is being
/// fetched are answered by that one (fetched after they were sent, so it is as fresh).
struct AuthState {
    provider: Option<SharedAuthProvider>,
    fetching: Option<futures::future::BoxFuture<'static, Result<Credentials>>>,
}

impl AuthState {
    fn on_challenge(&mut self, out: &mut Outbox) -> Step {
        let Some(provider) = &self.provider else {
            // Nothing to refresh: answer without credentials, as upstream does without auth.
            return out.push(Outgoing::Frame(Box::new(Frame::simple(auth_response(
                None,
            )))));
        };
        if self.fetching.is_none() {
            let provider = provider.clone();
            self.fetching = Some(Box::pin(async move {
                crate::auth::fetch(provider.as_ref()).await
            }));
        }
        Step::Continue
    }

    fn on_fetched(&mut self, result: Result<Credentials>, out: &mut Outbox) -> Step {
        self.fetching = None;
        match result {
            Ok(creds) => {
                tracing::debug!(method = %creds.method, "answering the broker's auth challenge");
                out.push(Outgoing::Frame(Box::new(Frame::simple(auth_response(
                    Some(&creds),
                )))))
            }
            Err(e) => {
                // Upstream ClientCnx closes the connection when it cannot answer a challenge.
                tracing::warn!(error = %e, "cannot answer the broker's auth challenge; closing");
                Step::Stop(e)
            }
        }
    }
}

impl Outbox {
    fn new(tx: mpsc::Sender<Outgoing>, max_message_size: usize) -> Outbox {
        Outbox {
            tx,
            backlog: VecDeque::new(),
            max_frame_size: max_message_size.saturating_add(crate::codec::FRAME_HEADROOM),
            pong_pending: Arc::default(),
        }
    }

    fn push(&mut self, frame: Outgoing) -> Step {
        if !self.backlog.is_empty() {
            return self.push_back(frame);
        }
        match self.tx.try_send(frame) {
            Ok(()) => Step::Continue,
            Err(mpsc::error::TrySendError::Full(frame)) => self.push_back(frame),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Step::Stop(Error::ConnectionLost("connection writer stopped".into()))
            }
        }
    }

    /// Queues a reply of which at most one may wait (PONG): coalesced with
    /// the one already waiting, if any. Upstream answers each PING; a waiting PONG is written
    /// after every PING received so far, so it answers them all.
    fn push_reply(&mut self, pending: Arc<AtomicBool>, command: BaseCommand) -> Step {
        if pending.swap(true, Ordering::AcqRel) {
            return Step::Continue;
        }
        match self.encode(&Frame::simple(command)) {
            Some(bytes) => self.push(Outgoing::Reply(pending, bytes)),
            None => {
                pending.store(false, Ordering::Release);
                Step::Continue
            }
        }
    }

    fn encode(&self, frame: &Frame) -> Option<Bytes> {
        let mut buf = BytesMut::new();
        match crate::codec::encode_frame(frame, &mut buf, self.max_frame_size) {
            Ok(()) => Some(buf.freeze()),
            Err(e) => {
                tracing::warn!(error = %e, "outbound frame could not be encoded; not sent");
                None
            }
        }
    }

    /// Adds to the backlog (encoded: a boxed command is several KiB), within its bound.
    fn push_back(&mut self, frame: Outgoing) -> Step {
        if self.backlog.len() >= MAX_BACKLOG {
            return Step::Stop(Error::ConnectionLost(format!(
                "the broker is not reading: {} frames wait to be written",
                WRITE_QUEUE + self.backlog.len()
            )));
        }
        let frame = match frame {
            Outgoing::Frame(f) => match self.encode(&f) {
                Some(bytes) => Outgoing::Raw(bytes),
                None => return Step::Continue,
            },
            other => other,
        };
        self.backlog.push_back(frame);
        Step::Continue
    }
}

/// Moves backlog frames to the writer while it has room.
fn drain(
    backlog: &mut VecDeque<Outgoing>,
    tx: &mpsc::Sender<Outgoing>,
    permit: mpsc::OwnedPermit<Outgoing>,
) {
    if let Some(f) = backlog.pop_front() {
        permit.send(f);
    }
    while let Some(f) = backlog.pop_front() {
        if let Err(e) = tx.try_send(f) {
            match e {
                mpsc::error::TrySendError::Full(f) | mpsc::error::TrySendError::Closed(f) => {
                    backlog.push_front(f);
                }
            }
            break;
        }
    }
}

async fn run<S>(p: TaskParams<S>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let TaskParams {
        mut reader,
        writer,
        mut ops,
        mut control,
        closed,
        stats,
        keepalive,
        auth,
        broker_url: _,
        max_message_size,
    } = p;
    let keepalive = keepalive.max(Duration::from_millis(1));
    let (write_tx, write_rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let stall_limit = keepalive.saturating_mul(2);
    let mut writer_task = tokio::spawn(write_loop(writer, write_rx, stall_limit).in_current_span());
    let mut out = Outbox::new(write_tx, max_message_size);
    let mut router = Router::default();
    let mut auth = AuthState {
        provider: auth,
        fetching: None,
    };
    let mut alive = KeepAlive {
        interval: keepalive,
        last_inbound: Instant::now(),
        ping_sent: false,
        paused_since: None,
    };
    let keepalive_timer = tokio::time::sleep_until(alive.next_wake());
    tokio::pin!(keepalive_timer);
    let mut published = *stats.borrow();

    let mut control_open = true;
    let reason = loop {
        let deadline = router.next_deadline();
        let backlogged = !out.backlog.is_empty();
        let reserve_tx = backlogged.then(|| out.tx.clone());
        let step = tokio::select! {
            biased;
            op = control.recv(), if control_open => match op {
                Some(op) => handle_op(op, &mut router, &mut out, &mut control),
                // Every handle is gone (each holds both channels): a closed channel answers
                // `None` at once on every poll, so it is not polled again (polled first, it
                // would keep this loop spinning and hide the ops branch that ends it).
                None => {
                    control_open = false;
                    Step::Continue
                }
            },
            // Ahead of the inbound frames: a flood of them must not hide a dead writer or
            // a keep-alive verdict.
            written = &mut writer_task => Step::Stop(match written {
                Ok(e) => e,
                Err(_) => Error::ConnectionLost("connection writer failed".into()),
            }),
            _ = &mut keepalive_timer => {
                let step = if router.backpressure.is_some() {
                    alive.paused(&mut out)
                } else {
                    alive.check(&mut out)
                };
                keepalive_timer.as_mut().reset(alive.next_wake());
                step
            }
            // A consumer's channel past its byte allowance: read again once its task has
            // taken it back within it (polled with a waker: the loop never waits on it).
            () = async { router.backpressure.as_ref().expect("guarded").drained().await }, if router.backpressure.is_some() => {
                router.backpressure = None;
                alive.paused_since = None;
                Step::Continue
            }
            inbound = reader.next(), if router.backpressure.is_none() => match inbound {
                Some(Ok(frame)) => {
                    // Any frame shows the broker alive (upstream's messageReceived()).
                    alive.heard(Instant::now());
                    match handle_inbound(frame, &mut router, &mut out, &mut auth) {
                        // The ops branch comes after this one: while the broker keeps the
                        // socket readable it would never run, and sends and requests from
                        // handles would wait behind the whole inbound stream. Take a few of
                        // those already queued after each frame.
                        Step::Continue => take_ready_ops(&mut ops, &mut control, &mut router, &mut out, OPS_PER_FRAME),
                        stop => stop,
                    }
                }
                Some(Err(e)) => Step::Stop(Error::from(e)),
                None => Step::Stop(Error::ConnectionLost("broker closed the connection".into())),
            },
            permit = async { reserve_tx.expect("guarded").reserve_owned().await }, if backlogged => match permit {
                Ok(permit) => {
                    drain(&mut out.backlog, &out.tx, permit);
                    Step::Continue
                }
                Err(_) => Step::Stop(Error::ConnectionLost("connection writer stopped".into())),
            },
            op = ops.recv(), if !backlogged => match op {
                Some(op) => match handle_op(op, &mut router, &mut out, &mut control) {
                    Step::Continue => take_ready_ops(&mut ops, &mut control, &mut router, &mut out, WRITE_BATCH - 1),
                    stop => stop,
                },
                // Every handle is gone: nobody can use this connection any more.
                None => Step::Stop(Error::Closed),
            },
            creds = async { auth.fetching.as_mut().expect("guarded").await }, if auth.fetching.is_some() => {
                auth.on_fetched(creds, &mut out)
            }
            _ = sleep_until_opt(deadline) => {
                router.expire(Instant::now());
                Step::Continue
            }
        };
        // Compared here, so the watch (a lock) is only written when the figures change, not
        // once per frame.
        let now = router.stats();
        if now != published {
            published = now;
            stats.send_replace(now);
        }
        if let Step::Stop(reason) = step {
            break reason;
        }
    };
    // Our own close is routine; any other end (lost, broken by the broker) is a lifecycle
    // event an operator may want to see.
    if matches!(reason, Error::Closed) {
        tracing::debug!("connection closed");
    } else {
        tracing::info!(%reason, "connection closed");
    }
    crate::stats::sink::connection_closed();
    let _ = closed.send(Some(reason.clone()));
    router.shutdown(&reason);
    let _ = stats.send(router.stats());
    // Fail whatever is still queued by handles.
    ops.close();
    while let Ok(op) = ops.try_recv() {
        fail_op(op, &reason);
    }
    control.close();
    while let Ok(op) = control.try_recv() {
        fail_op(op, &reason);
    }

    // Dropping the outbox ends the writer, which closes the socket's write side.
    drop(out);
    writer_task.abort();
}

/// Handles up to `limit` ops already queued by handles, without waiting, while the writer
/// takes frames (none while frames wait in the backlog: that is the backpressure).
fn take_ready_ops(
    ops: &mut mpsc::Receiver<Op>,
    control: &mut mpsc::UnboundedReceiver<Op>,
    router: &mut Router,
    out: &mut Outbox,
    limit: usize,
) -> Step {
    for _ in 0..limit {
        if !out.backlog.is_empty() {
            break;
        }
        let Ok(op) = ops.try_recv() else {
            break;
        };
        if let Step::Stop(reason) = handle_op(op, router, out, control) {
            return Step::Stop(reason);
        }
    }
    Step::Continue
}

/// Handles every op waiting on the control lane, without waiting.
fn drain_control(
    control: &mut mpsc::UnboundedReceiver<Op>,
    router: &mut Router,
    out: &mut Outbox,
) -> Step {
    while let Ok(op) = control.try_recv() {
        if let Step::Stop(reason) = handle_op(op, router, out, control) {
            return Step::Stop(reason);
        }
    }
    Step::Continue
}

fn fail_op(op: Op, reason: &Error) {
    match op {
        Op::Issue { responder, .. } => {
            let _ = responder.send(Err(lost_for_requests(reason)));
        }
        Op::Register { sender, .. } => sender.notify_closed(reason),
        _ => {}
    }
}

/// The keep-alive: a PING after one interval without a frame from the broker, and the
/// connection declared dead after two. Upstream (PulsarHandler) pings at every tick of a
/// fixed-rate timer and closes at the tick that finds its PING unanswered, so it closes within
/// two intervals of the last frame; deadlines measured from the last frame give exactly two.
struct KeepAlive {
    interval: Duration,
    last_inbound: Instant,
    /// A PING went out since the last frame from the broker.
    ping_sent: bool,
    /// Since when the connection does not read (a consumer's channel past its allowance),
    /// and whether that was logged.
    paused_since: Option<(Instant, bool)>,
}

impl KeepAlive {
    /// A frame arrived (or the connection is not reading for its own reasons) at `now`.
    fn heard(&mut self, now: Instant) {
        self.last_inbound = now;
        self.ping_sent = false;
    }

    /// When the keep-alive has something to decide next.
    fn next_wake(&self) -> Instant {
        let after = if self.ping_sent {
            self.interval.saturating_mul(2)
        } else {
            self.interval
        };
        later(self.last_inbound, after)
    }

    /// The keep-alive's tick while the connection does not read (a consumer's channel past
    /// its byte allowance): the broker's frames, its PONG too, wait in the socket for a
    /// consumer task of ours, so no verdict is reached; a PING still goes out every interval,
    /// so the broker keeps hearing from us. Upstream's `PulsarHandler.handleKeepAliveTimeout`
    /// likewise skips its verdict while the channel's auto-read is off and pings anyway.
    fn paused(&mut self, out: &mut Outbox) -> Step {
        let now = Instant::now();
        let (since, logged) = self.paused_since.get_or_insert((now, false));
        // Every entity on the connection waits meanwhile (its requests time out, its sends
        // too): said once, so such a timeout can be traced to its cause.
        if !*logged && now.duration_since(*since) >= self.interval.saturating_mul(2) {
            *logged = true;
            tracing::warn!(paused = ?now.duration_since(*since),
                "connection not reading: a consumer's task has not taken its messages in;                  every producer and consumer on this connection waits");
        }
        self.heard(now);
        out.push(Outgoing::Frame(Box::new(Frame::simple(
            crate::commands::ping(),
        ))))
    }

    fn check(&mut self, out: &mut Outbox) -> Step {
        let now = Instant::now();
        let dead_at = later(self.last_inbound, self.interval.saturating_mul(2));
        if now >= dead_at {
            return Step::Stop(Error::ConnectionLost(format!(
                "no frame from the broker for {:?}: keep-alive PING unanswered",
                now.duration_since(self.last_inbound)
            )));
        }
        if !self.ping_sent && now >= later(self.last_inbound, self.interval) {
            self.ping_sent = true;
            return out.push(Outgoing::Frame(Box::new(Frame::simple(
                crate::commands::ping(),
            ))));
        }
        Step::Continue
    }
}

fn handle_op(
    op: Op,
    router: &mut Router,
    out: &mut Outbox,
    control: &mut mpsc::UnboundedReceiver<Op>,
) -> Step {
    let frame = match op {
        Op::Issue {
            request_id,
            operation,
            timeout,
            deadline,
            responder,
        } => {
            if !responder.is_closed() {
                router.add_request(
                    request_id,
                    PendingRequest {
                        responder,
                        operation,
                        timeout,
                        deadline,
                        sent: false,
                    },
                );
            }
            return Step::Continue;
        }
        Op::Request { request_id, frame } => {
            if !router.is_pending(request_id) {
                // Its Issue went on the control lane before this frame went on the ops lane,
                // but this loop may have polled the control lane just before it arrived: take
                // what is there first (`try_recv` does not miss a completed send).
                if let Step::Stop(reason) = drain_control(control, router, out) {
                    return Step::Stop(reason);
                }
            }
            if !router.take_frame(request_id) {
                tracing::debug!(
                    request_id,
                    "request timed out or given up before it was sent; not sent"
                );
                return Step::Continue;
            }
            frame
        }
        Op::Cancel { request_id } => {
            router.cancel(request_id);
            return Step::Continue;
        }
        Op::Send(frame) => frame,
        Op::SendRaw(bytes) => return out.push(Outgoing::Raw(bytes)),
        Op::Register { kind, id, sender } => {
            if router.entities.insert((kind, id), sender).is_some() {
                tracing::warn!(?kind, id, "entity id registered twice; the newer one wins");
            }
            return Step::Continue;
        }
        Op::Unregister { kind, id } => {
            router.entities.remove(&(kind, id));
            crate::util::shrink_after_burst(&mut router.entities);
            return Step::Continue;
        }
        Op::Close => return Step::Stop(Error::Closed),
        Op::Drop(why) => {
            return Step::Stop(Error::ConnectionLost(format!(
                "dropped by the client: {why}"
            )))
        }
    };
    out.push(Outgoing::Frame(frame))
}

fn handle_inbound(
    inbound: Inbound,
    router: &mut Router,
    out: &mut Outbox,
    auth: &mut AuthState,
) -> Step {
    let frame = match inbound {
        // The per-message commands, decoded without their envelope.
        Inbound::Message(m) => {
            let id = m.command.consumer_id;
            return router.deliver(EntityKind::Consumer, id, Inbound::Message(m));
        }
        Inbound::Receipt(r) => {
            let id = r.producer_id;
            return router.deliver(EntityKind::Producer, id, Inbound::Receipt(r));
        }
        Inbound::Other(frame) => frame,
    };
    match routing::route(&frame.command) {
        Route::Request(id) => router.complete(id, Box::new(frame.command)),
        Route::Entity(kind, id) => return router.deliver(kind, id, Inbound::Other(frame)),
        Route::Ping => {
            let pending = out.pong_pending.clone();
            return out.push_reply(pending, crate::commands::pong());
        }
        Route::Pong => {}
        Route::AuthChallenge => return auth.on_challenge(out),
        Route::Unhandled => {
            tracing::debug!(command = %routing::type_name(&frame.command),
                "command not handled by this client; ignored");
        }
    }
    Step::Continue
}
