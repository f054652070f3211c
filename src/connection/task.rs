//! The task that owns one broker socket: writes outbound frames, routes inbound ones, keeps the
//! connection alive and times requests out.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::Instrument;

use super::handshake::auth_response;
use super::routing::{self, EntityKind, Route};
use super::{Authentication, ConnectionStats, EntityEvent, EntitySender, Op};
use crate::codec::{Frame, PulsarCodec};
use crate::error::{Error, Result, ServerError};
use crate::proto::{base_command::Type, BaseCommand};
use crate::util::sleep_until_opt;

/// How many queued frames are written before the socket is flushed.
const WRITE_BATCH: usize = 128;

/// Frames queued for the writer task.
const WRITE_QUEUE: usize = 1024;

pub(super) struct TaskParams<S> {
    pub reader: FramedRead<ReadHalf<S>, PulsarCodec>,
    pub writer: FramedWrite<WriteHalf<S>, PulsarCodec>,
    pub ops: mpsc::Receiver<Op>,
    pub control: mpsc::UnboundedReceiver<Op>,
    pub closed: watch::Sender<Option<Error>>,
    pub stats: watch::Sender<ConnectionStats>,
    pub keepalive: Duration,
    pub auth: Option<Authentication>,
    pub broker_url: String,
}

struct PendingRequest {
    responder: oneshot::Sender<Result<BaseCommand>>,
    operation: &'static str,
    timeout: Duration,
    deadline: Instant,
}

/// The routing state: pending requests and registered entities. No I/O, so it is testable.
#[derive(Default)]
pub(super) struct Router {
    pending: HashMap<u64, PendingRequest>,
    deadlines: BTreeSet<(Instant, u64)>,
    entities: HashMap<(EntityKind, u64), EntitySender>,
}

impl Router {
    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            pending_requests: self.pending.len(),
            registered_entities: self.entities.len(),
        }
    }

    fn add_request(&mut self, id: u64, req: PendingRequest) {
        self.deadlines.insert((req.deadline, id));
        if let Some(old) = self.pending.insert(id, req) {
            // A reused request id: the older request can never be matched now.
            self.deadlines.remove(&(old.deadline, id));
            let _ = old.responder.send(Err(Error::Protocol(format!(
                "request id {id} reused before its response arrived"
            ))));
        }
    }

    fn complete(&mut self, id: u64, cmd: BaseCommand) {
        if cmd
            .producer_success
            .as_ref()
            .is_some_and(|p| p.producer_ready == Some(false))
        {
            // WaitForExclusive: the producer is queued on the broker; a second ProducerSuccess
            // with the same request id follows when it may produce. Wait for it, without a
            // timeout (like upstream), until then or until the connection closes.
            if let Some(req) = self.pending.get(&id) {
                self.deadlines.remove(&(req.deadline, id));
                tracing::info!(request_id = id, "producer waiting for exclusive access");
            }
            return;
        }
        let Some(req) = self.pending.remove(&id) else {
            tracing::debug!(request_id = id, command = %routing::type_name(&cmd),
                "response for an unknown or timed-out request; dropped");
            return;
        };
        self.deadlines.remove(&(req.deadline, id));
        let result = match (Type::try_from(cmd.r#type), cmd.error.as_ref()) {
            (Ok(Type::Error), Some(e)) => Err(Error::Broker {
                code: ServerError::from_code(e.error),
                message: e.message.clone(),
            }),
            _ => Ok(cmd),
        };
        let _ = req.responder.send(result);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Fails every request whose deadline has passed; only those.
    fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(req) = self.pending.remove(&id) {
                tracing::warn!(
                    request_id = id,
                    operation = req.operation,
                    "request timed out"
                );
                let _ = req.responder.send(Err(Error::Timeout {
                    operation: req.operation,
                    after: req.timeout,
                }));
            }
        }
    }

    fn deliver(&mut self, kind: EntityKind, id: u64, frame: Frame) {
        let Some(sender) = self.entities.get(&(kind, id)) else {
            tracing::debug!(?kind, id, command = %routing::type_name(&frame.command),
                "command for an unknown entity; dropped");
            return;
        };
        let event = EntityEvent::Command(Box::new(frame));
        let gone = match sender {
            EntitySender::Unbounded(tx) => tx.send(event).is_err(),
            EntitySender::Bounded(tx) => match tx.try_send(event) {
                Ok(()) => false,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Flow control should make this impossible: report it loudly.
                    tracing::error!(
                        ?kind,
                        id,
                        "entity channel full; command dropped (flow-control bug)"
                    );
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => true,
            },
        };
        if gone {
            tracing::debug!(?kind, id, "entity is gone; unregistering");
            self.entities.remove(&(kind, id));
        }
    }

    /// Fails everything: each pending request and each entity is told once.
    fn shutdown(&mut self, reason: &Error) {
        self.deadlines.clear();
        for (_, req) in self.pending.drain() {
            let _ = req.responder.send(Err(reason.clone()));
        }
        for (_, sender) in self.entities.drain() {
            sender.notify_closed(reason);
        }
    }
}

pub(super) fn spawn<S>(params: TaskParams<S>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let span = tracing::debug_span!("connection", broker = %params.broker_url);
    tokio::spawn(run(params).instrument(span));
}

enum Step {
    Continue,
    Stop(Error),
}

/// Frames on their way to the writer. The reading side must never wait for the socket to
/// accept writes (a broker blocked on writing to us would then never read from us: a
/// deadlock), so frames the writer's queue cannot take yet wait here, and no new ops are
/// taken from handles until it drains — backpressure without ever stopping to read.
struct Outbox {
    tx: mpsc::Sender<Outgoing>,
    backlog: VecDeque<Outgoing>,
}

impl Outbox {
    fn push(&mut self, frame: Outgoing) -> Step {
        if !self.backlog.is_empty() {
            self.backlog.push_back(frame);
            return Step::Continue;
        }
        match self.tx.try_send(frame) {
            Ok(()) => Step::Continue,
            Err(mpsc::error::TrySendError::Full(frame)) => {
                self.backlog.push_back(frame);
                Step::Continue
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Step::Stop(Error::ConnectionLost("connection writer stopped".into()))
            }
        }
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

/// Owns the write half: writes frames in batches, one flush per batch.
async fn write_loop<W>(
    mut writer: FramedWrite<W, PulsarCodec>,
    mut rx: mpsc::Receiver<Outgoing>,
) -> Error
where
    W: AsyncWrite + Unpin,
{
    loop {
        let Some(frame) = rx.recv().await else {
            let _ = SinkExt::<Frame>::close(&mut writer).await;
            return Error::Closed;
        };
        let mut next = Some(frame);
        let mut n = 0;
        while let Some(item) = next.take() {
            let frame = match item {
                Outgoing::Frame(frame) => *frame,
                Outgoing::Raw(bytes) => {
                    // Already encoded (and size-checked) by its producer.
                    writer.write_buffer_mut().extend_from_slice(&bytes);
                    n += 1;
                    if n < WRITE_BATCH {
                        next = rx.try_recv().ok();
                    }
                    continue;
                }
            };
            match writer.feed(frame).await {
                Ok(()) => {}
                Err(crate::codec::CodecError::FrameTooLarge { size, max }) => {
                    // Nothing was written; the connection is fine.
                    tracing::warn!(size, max, "outbound frame over the size limit; not sent");
                }
                Err(e) => return Error::from(e),
            }
            n += 1;
            if n < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = SinkExt::<Frame>::flush(&mut writer).await {
            return Error::from(e);
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
    } = p;
    let (write_tx, write_rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let mut writer_task = tokio::spawn(write_loop(writer, write_rx).in_current_span());
    let mut out = Outbox {
        tx: write_tx,
        backlog: VecDeque::new(),
    };
    let mut router = Router::default();
    let keepalive = keepalive.max(Duration::from_millis(1));
    let mut last_inbound = Instant::now();
    let mut ping_sent_at: Option<Instant> = None;
    let mut keepalive_tick =
        tokio::time::interval_at(crate::util::deadline_after(keepalive), keepalive);
    keepalive_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let reason = loop {
        let deadline = router.next_deadline();
        let backlogged = !out.backlog.is_empty();
        let reserve_tx = backlogged.then(|| out.tx.clone());
        let step = tokio::select! {
            biased;
            op = control.recv() => match op {
                Some(op) => handle_op(op, &mut router, &mut out),
                None => Step::Continue,
            },
            inbound = reader.next() => match inbound {
                Some(Ok(frame)) => {
                    last_inbound = Instant::now();
                    ping_sent_at = None;
                    handle_inbound(frame, &mut router, &mut out, auth.as_ref())
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
                Some(op) => {
                    let mut step = handle_op(op, &mut router, &mut out);
                    let mut n = 1;
                    while matches!(step, Step::Continue) && n < WRITE_BATCH && out.backlog.is_empty() {
                        match ops.try_recv() {
                            Ok(op) => step = handle_op(op, &mut router, &mut out),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    step
                }
                // Every handle is gone: nobody can use this connection any more.
                None => Step::Stop(Error::Closed),
            },
            _ = keepalive_tick.tick() => keepalive_step(&mut out, last_inbound, &mut ping_sent_at, keepalive),
            _ = sleep_until_opt(deadline) => {
                router.expire(Instant::now());
                Step::Continue
            }
            written = &mut writer_task => Step::Stop(match written {
                Ok(e) => e,
                Err(_) => Error::ConnectionLost("connection writer failed".into()),
            }),
        };
        let _ = stats.send_if_modified(|s| {
            let new = router.stats();
            let changed = *s != new;
            *s = new;
            changed
        });
        if let Step::Stop(reason) = step {
            break reason;
        }
    };
    tracing::debug!(%reason, "connection closed");
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

fn fail_op(op: Op, reason: &Error) {
    match op {
        Op::Request { responder, .. } => {
            let _ = responder.send(Err(reason.clone()));
        }
        Op::Register { sender, .. } => sender.notify_closed(reason),
        _ => {}
    }
}

fn keepalive_step(
    out: &mut Outbox,
    last_inbound: Instant,
    ping_sent_at: &mut Option<Instant>,
    interval: Duration,
) -> Step {
    let now = Instant::now();
    if let Some(sent) = *ping_sent_at {
        if now.duration_since(sent) >= interval {
            return Step::Stop(Error::ConnectionLost(format!(
                "broker did not answer keep-alive PING within {interval:?}"
            )));
        }
        return Step::Continue;
    }
    if now.duration_since(last_inbound) >= interval {
        *ping_sent_at = Some(now);
        return out.push(Outgoing::Frame(Box::new(Frame::simple(
            crate::commands::ping(),
        ))));
    }
    Step::Continue
}

fn handle_op(op: Op, router: &mut Router, out: &mut Outbox) -> Step {
    let frame = match op {
        Op::Request {
            request_id,
            frame,
            operation,
            timeout,
            responder,
        } => {
            if responder.is_closed() {
                return Step::Continue; // the caller gave up before it was sent
            }
            router.add_request(
                request_id,
                PendingRequest {
                    responder,
                    operation,
                    timeout,
                    deadline: crate::util::deadline_after(timeout),
                },
            );
            frame
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
            return Step::Continue;
        }
        Op::Close => return Step::Stop(Error::Closed),
    };
    out.push(Outgoing::Frame(frame))
}

impl EntitySender {
    /// Tells the entity its connection is gone (never blocks).
    fn notify_closed(&self, reason: &Error) {
        let event = EntityEvent::ConnectionClosed(reason.clone());
        match self {
            EntitySender::Bounded(tx) => {
                let _ = tx.try_send(event);
            }
            EntitySender::Unbounded(tx) => {
                let _ = tx.send(event);
            }
        }
    }
}

/// What the writer task writes.
enum Outgoing {
    /// Boxed: a command is several KiB, encoded bytes are small.
    Frame(Box<Frame>),
    /// An already encoded frame.
    Raw(Bytes),
}

fn handle_inbound(
    frame: Frame,
    router: &mut Router,
    out: &mut Outbox,
    auth: Option<&Authentication>,
) -> Step {
    let reply = match routing::route(&frame.command) {
        Route::Request(id) => {
            router.complete(id, frame.command);
            None
        }
        Route::Entity(kind, id) => {
            router.deliver(kind, id, frame);
            None
        }
        Route::Ping => Some(crate::commands::pong()),
        Route::Pong => None,
        Route::AuthChallenge => Some(auth_response(auth)),
        Route::Unhandled => {
            tracing::debug!(command = %routing::type_name(&frame.command),
                "command not handled by this client; ignored");
            None
        }
    };
    match reply {
        Some(reply) => out.push(Outgoing::Frame(Box::new(Frame::simple(reply)))),
        None => Step::Continue,
    }
}
