//! The task that owns one broker socket: writes outbound frames, routes inbound ones, keeps the
//! connection alive and times requests out.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::Framed;
use tracing::Instrument;

use super::handshake::auth_response;
use super::routing::{self, EntityKind, Route};
use super::{Authentication, ConnectionStats, EntityEvent, Op};
use crate::codec::{Frame, PulsarCodec};
use crate::error::{Error, Result, ServerError};
use crate::proto::{self, base_command::Type, BaseCommand};

/// How many queued ops are written before the socket is flushed.
const WRITE_BATCH: usize = 128;

pub(super) struct TaskParams<S> {
    pub framed: Framed<S, PulsarCodec>,
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
    entities: HashMap<(EntityKind, u64), mpsc::Sender<EntityEvent>>,
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
        match sender.try_send(EntityEvent::Command(Box::new(frame))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Flow control should make this impossible: report it loudly.
                tracing::error!(
                    ?kind,
                    id,
                    "entity channel full; command dropped (flow-control bug)"
                );
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!(?kind, id, "entity is gone; unregistering");
                self.entities.remove(&(kind, id));
            }
        }
    }

    /// Fails everything: each pending request and each entity is told once.
    fn shutdown(&mut self, reason: &Error) {
        self.deadlines.clear();
        for (_, req) in self.pending.drain() {
            let _ = req.responder.send(Err(reason.clone()));
        }
        for (_, sender) in self.entities.drain() {
            let _ = sender.try_send(EntityEvent::ConnectionClosed(reason.clone()));
        }
    }
}

pub(super) fn spawn<S>(params: TaskParams<S>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let span = tracing::debug_span!("connection", broker = %params.broker_url);
    tokio::spawn(run(params).instrument(span));
}

enum Step {
    Continue,
    Stop(Error),
}

async fn run<S>(mut p: TaskParams<S>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut router = Router::default();
    let keepalive = p.keepalive.max(Duration::from_millis(1));
    let mut last_inbound = Instant::now();
    let mut ping_sent_at: Option<Instant> = None;
    let mut keepalive_tick = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
    keepalive_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let reason = loop {
        let deadline = router.next_deadline();
        let step = tokio::select! {
            biased;
            op = p.control.recv() => match op {
                Some(op) => handle_op(op, &mut router, &mut p.framed).await,
                None => Step::Continue,
            },
            inbound = p.framed.next() => match inbound {
                Some(Ok(frame)) => {
                    last_inbound = Instant::now();
                    ping_sent_at = None;
                    handle_inbound(frame, &mut router, &mut p.framed, p.auth.as_ref()).await
                }
                Some(Err(e)) => Step::Stop(Error::from(e)),
                None => Step::Stop(Error::ConnectionLost("broker closed the connection".into())),
            },
            op = p.ops.recv() => match op {
                Some(op) => {
                    let mut step = handle_op(op, &mut router, &mut p.framed).await;
                    let mut n = 1;
                    while matches!(step, Step::Continue) && n < WRITE_BATCH {
                        match p.ops.try_recv() {
                            Ok(op) => step = handle_op(op, &mut router, &mut p.framed).await,
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    match step {
                        Step::Continue => match SinkExt::<Frame>::flush(&mut p.framed).await {
                            Ok(()) => Step::Continue,
                            Err(e) => Step::Stop(Error::from(e)),
                        },
                        stop => stop,
                    }
                }
                // Every handle is gone: nobody can use this connection any more.
                None => Step::Stop(Error::Closed),
            },
            _ = keepalive_tick.tick() => {
                keepalive_step(&mut p.framed, last_inbound, &mut ping_sent_at, keepalive).await
            }
            _ = sleep_until_opt(deadline) => {
                router.expire(Instant::now());
                Step::Continue
            }
        };
        let _ = p.stats.send_if_modified(|s| {
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
    let _ = p.closed.send(Some(reason.clone()));
    router.shutdown(&reason);
    let _ = p.stats.send(router.stats());
    // Fail whatever is still queued by handles.
    p.ops.close();
    while let Ok(op) = p.ops.try_recv() {
        fail_op(op, &reason);
    }
    p.control.close();
    while let Ok(op) = p.control.try_recv() {
        fail_op(op, &reason);
    }
    let _ = SinkExt::<Frame>::close(&mut p.framed).await;
}

fn fail_op(op: Op, reason: &Error) {
    match op {
        Op::Request { responder, .. } => {
            let _ = responder.send(Err(reason.clone()));
        }
        Op::Register { sender, .. } => {
            let _ = sender.try_send(EntityEvent::ConnectionClosed(reason.clone()));
        }
        _ => {}
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => futures::future::pending().await,
    }
}

async fn keepalive_step<S>(
    framed: &mut Framed<S, PulsarCodec>,
    last_inbound: Instant,
    ping_sent_at: &mut Option<Instant>,
    interval: Duration,
) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
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
        let ping = BaseCommand {
            r#type: Type::Ping as i32,
            ping: Some(proto::CommandPing {}),
            ..Default::default()
        };
        if let Err(e) = framed.send(Frame::simple(ping)).await {
            return Step::Stop(Error::from(e));
        }
    }
    Step::Continue
}

async fn handle_op<S>(op: Op, router: &mut Router, framed: &mut Framed<S, PulsarCodec>) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
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
                    deadline: Instant::now() + timeout,
                },
            );
            frame
        }
        Op::Send(frame) => frame,
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
    // Feed only: the caller flushes after a batch of ops.
    match framed.feed(frame).await {
        Ok(()) => Step::Continue,
        Err(crate::codec::CodecError::FrameTooLarge { size, max }) => {
            // Nothing was written; the connection is fine. The request (if any) fails.
            tracing::warn!(size, max, "outbound frame over the size limit; not sent");
            Step::Continue
        }
        Err(e) => Step::Stop(Error::from(e)),
    }
}

async fn handle_inbound<S>(
    frame: Frame,
    router: &mut Router,
    framed: &mut Framed<S, PulsarCodec>,
    auth: Option<&Authentication>,
) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let reply = match routing::route(&frame.command) {
        Route::Request(id) => {
            router.complete(id, frame.command);
            None
        }
        Route::Entity(kind, id) => {
            router.deliver(kind, id, frame);
            None
        }
        Route::Ping => Some(BaseCommand {
            r#type: Type::Pong as i32,
            pong: Some(proto::CommandPong {}),
            ..Default::default()
        }),
        Route::Pong => None,
        Route::AuthChallenge => Some(auth_response(auth)),
        Route::Unhandled => {
            tracing::debug!(command = %routing::type_name(&frame.command),
                "command not handled by this client; ignored");
            None
        }
    };
    if let Some(reply) = reply {
        if let Err(e) = framed.send(Frame::simple(reply)).await {
            return Step::Stop(Error::from(e));
        }
    }
    Step::Continue
}
