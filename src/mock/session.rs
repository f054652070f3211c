//! One task per accepted connection: it owns the framed socket, records every decoded command,
//! asks [`handlers`] for the answer and applies the injected faults.
//!
//! The test-facing handle reaches a session only through its [`SessionControl`]: an unbounded
//! channel of frames to push, and a kill switch (dropping it closes the connection). The broker
//! reaches it through a second channel, registered in the state's connection registry
//! ([`super::conns`]): frames the broker originates (MESSAGE, ACTIVE_CONSUMER_CHANGE, ...),
//! dropped while the broker is unresponsive. When the session ends, its producers and consumers
//! are detached ([`handlers::connection_closed`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::codec::Framed;
use tracing::Instrument;

use super::handlers::{self, SessionView, Step};
use super::record::Received;
use super::wire::base_command::Type;
use super::{lock, ConnectionId, Shared};
use crate::codec::{Frame, PulsarCodec};

/// The handle's side of one live session.
#[derive(Debug)]
pub(crate) struct SessionControl {
    /// Frames a test pushes to the client, sent as they are (no delay, even when unresponsive).
    pub(crate) push_tx: mpsc::UnboundedSender<Frame>,
    /// Dropping (or firing) this closes the connection.
    pub(crate) kill: oneshot::Sender<()>,
    /// The session task.
    pub(crate) task: JoinHandle<()>,
}

/// Registers a new connection and spawns its session. Returns `None` if the broker is shut
/// down or restarting (the transport is dropped, so the client sees the connection closed).
pub(crate) fn spawn<T>(shared: &Arc<Shared>, io: T) -> Option<ConnectionId>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (push_tx, push_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::unbounded_channel();
    let (kill, kill_rx) = oneshot::channel();
    let mut registry = lock(&shared.connections);
    if registry.closed || registry.paused {
        return None;
    }
    registry.accepted += 1;
    let id = {
        let mut state = lock(&shared.state);
        let id = state.next_connection_id();
        state.conns.register(id, out_tx);
        id
    };
    let max_frame = shared
        .config
        .max_message_size
        .map_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE, |n| n as usize);
    let session = Session {
        shared: Arc::clone(shared),
        id,
        framed: Framed::new(io, PulsarCodec::with_max_message_size(max_frame)),
        push_rx,
        out_rx,
        kill: kill_rx,
        connected: false,
        delayed: BTreeMap::new(),
        seq: 0,
        keepalive: shared.config.keepalive_interval.map(|interval| Keepalive {
            interval,
            deadline: Instant::now() + interval,
            awaiting_pong: false,
        }),
        challenge: None,
    };
    let span = tracing::debug_span!("mock_broker_session", conn = %id);
    let task = tokio::spawn(session.run().instrument(span));
    registry.live.insert(
        id,
        SessionControl {
            push_tx,
            kill,
            task,
        },
    );
    Some(id)
}

struct Keepalive {
    interval: Duration,
    deadline: Instant,
    awaiting_pong: bool,
}

struct Session<T> {
    shared: Arc<Shared>,
    id: ConnectionId,
    framed: Framed<T, PulsarCodec>,
    push_rx: mpsc::UnboundedReceiver<Frame>,
    /// Frames the broker originates for this connection.
    out_rx: mpsc::UnboundedReceiver<Frame>,
    kill: oneshot::Receiver<()>,
    connected: bool,
    /// Responses waiting for their delay, ordered by (due time, arrival order) so responses with
    /// the same delay leave in the order their requests came.
    delayed: BTreeMap<(Instant, u64), Frame>,
    seq: u64,
    keepalive: Option<Keepalive>,
    /// The auth challenge schedule, once connected (see [`super::secure`]).
    challenge: Option<Challenge>,
}

struct Challenge {
    interval: Duration,
    deadline: Instant,
    /// A challenge went out and its AuthResponse has not arrived yet.
    awaiting: bool,
}

/// Why a session ended (for the log).
type Closed = String;

impl<T> Session<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    async fn run(mut self) {
        let Err(reason) = self.serve().await;
        tracing::debug!(%reason, "mock broker: connection closed");
        let shared = Arc::clone(&self.shared);
        let id = self.id;
        drop(self); // closes the transport before the handle stops listing the connection
        handlers::connection_closed(&mut lock(&shared.state), id);
        lock(&shared.connections).live.remove(&id);
    }

    /// Serves until the connection ends.
    async fn serve(&mut self) -> Result<Infallible, Closed> {
        loop {
            let next_due = self.delayed.keys().next().map(|(at, _)| *at);
            let keepalive_at = self.keepalive.as_ref().map(|k| k.deadline);
            let challenge_at = self.challenge.as_ref().map(|c| c.deadline);
            tokio::select! {
                biased;
                _ = &mut self.kill => return Err("dropped by the test".into()),
                pushed = self.push_rx.recv() => match pushed {
                    Some(frame) => self.write(frame).await?,
                    None => return Err("dropped by the test".into()),
                },
                Some(frame) = self.out_rx.recv() => {
                    if !self.unresponsive() {
                        self.write(frame).await?;
                    }
                }
                _ = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                    self.release_due().await?;
                }
                _ = sleep_until(keepalive_at.unwrap_or_else(Instant::now)), if keepalive_at.is_some() => {
                    self.on_keepalive_timer().await?;
                }
                _ = sleep_until(challenge_at.unwrap_or_else(Instant::now)), if challenge_at.is_some() => {
                    self.on_challenge_timer().await?;
                }
                read = self.framed.next() => match read {
                    Some(Ok(frame)) => self.on_frame(frame).await?,
                    Some(Err(e)) => return Err(format!("decode error: {e}")),
                    None => return Err("closed by the client".into()),
                },
            }
        }
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), Closed> {
        if let Some(k) = &mut self.keepalive {
            k.awaiting_pong = false;
            k.deadline = Instant::now() + k.interval;
        }
        let Frame { command, payload } = frame;
        let ty = command.r#type;
        let step = {
            let view = SessionView {
                config: &self.shared.config,
                service_url: &self.shared.service_url,
                connected: self.connected,
                conn: self.id,
            };
            handlers::handle(
                &mut lock(&self.shared.state),
                view,
                &command,
                payload.as_ref(),
            )
        };
        // Recorded before anything is answered, so a test that sees the answer finds the request.
        self.shared.log.record(Received {
            connection: self.id,
            command,
            payload: payload.map(|p| (p.metadata, p.data)),
        });
        if ty == Type::AuthResponse as i32 && step == Step::Ignore {
            if let Some(c) = &mut self.challenge {
                c.awaiting = false;
            }
        }
        match step {
            Step::Handshake(connected) => {
                self.connected = true;
                let interval = self
                    .shared
                    .config
                    .auth
                    .as_ref()
                    .and_then(|a| a.challenge_interval());
                self.challenge = interval.map(|interval| Challenge {
                    interval,
                    deadline: Instant::now() + interval,
                    awaiting: false,
                });
                self.respond(connected).await
            }
            Step::Refuse(answer, reason) => {
                tracing::info!(%reason, "mock broker: authentication refused; closing");
                self.write(Frame::simple(answer)).await?;
                Err(reason)
            }
            Step::Reply(response) => {
                self.shared.served.record(ty);
                self.respond(response).await
            }
            Step::Pong => {
                if self.unresponsive() {
                    return Ok(());
                }
                self.write(Frame::simple(handlers::ping_or_pong(Type::Pong)))
                    .await
            }
            Step::Ignore => Ok(()),
            Step::Close(reason) => {
                tracing::warn!(%reason, "mock broker: closing connection");
                Err(reason)
            }
        }
    }

    /// Sends a response now, or queues it for the configured delay; drops it when unresponsive.
    async fn respond(&mut self, response: super::wire::BaseCommand) -> Result<(), Closed> {
        let faults = *lock(&self.shared.faults);
        if faults.unresponsive {
            tracing::debug!("mock broker: unresponsive, response dropped");
            return Ok(());
        }
        let frame = Frame::simple(response);
        if faults.response_delay.is_zero() {
            return self.write(frame).await;
        }
        self.seq += 1;
        self.delayed
            .insert((Instant::now() + faults.response_delay, self.seq), frame);
        Ok(())
    }

    async fn release_due(&mut self) -> Result<(), Closed> {
        let now = Instant::now();
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let frame = entry.remove();
            if !self.unresponsive() {
                self.write(frame).await?;
            }
        }
        Ok(())
    }

    async fn on_keepalive_timer(&mut self) -> Result<(), Closed> {
        let unresponsive = self.unresponsive();
        let connected = self.connected;
        let Some(k) = &mut self.keepalive else {
            return Ok(());
        };
        k.deadline = Instant::now() + k.interval;
        if unresponsive {
            // A stuck broker neither pings nor notices a silent client.
            return Ok(());
        }
        if !connected {
            return Err("no CONNECT within the keepalive interval".into());
        }
        if k.awaiting_pong {
            return Err("no PONG within the keepalive interval".into());
        }
        k.awaiting_pong = true;
        self.write(Frame::simple(handlers::ping_or_pong(Type::Ping)))
            .await
    }

    async fn on_challenge_timer(&mut self) -> Result<(), Closed> {
        let Some(c) = &mut self.challenge else {
            return Ok(());
        };
        if c.awaiting {
            // Upstream ServerCnx: "client didn't respond to auth challenge on time".
            return Err("no AuthResponse to the auth challenge in time".into());
        }
        c.awaiting = true;
        c.deadline = Instant::now() + c.interval;
        let Some(auth) = &self.shared.config.auth else {
            return Ok(());
        };
        let challenge = super::secure::refresh_challenge(auth, &self.shared.config.server_version);
        self.write(Frame::simple(challenge)).await
    }

    fn unresponsive(&self) -> bool {
        lock(&self.shared.faults).unresponsive
    }

    /// Writes one frame; a kill while the client is not reading still ends the session.
    async fn write(&mut self, frame: Frame) -> Result<(), Closed> {
        tokio::select! {
            biased;
            _ = &mut self.kill => Err("dropped by the test".into()),
            sent = self.framed.send(frame) => sent.map_err(|e| format!("write failed: {e}")),
        }
    }
}
