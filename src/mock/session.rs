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

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::codec::Encoder;
use tokio_util::codec::Framed;
use tracing::Instrument;

use super::handlers;
use super::inject::{self, Injection};
use super::reply::{self, SessionView, Step};
use super::wire::base_command::Type;
use super::{consume, lock, ConnectionId, Shared};
use crate::codec::{BoxedFrameCodec, Frame, PulsarCodec};

/// What a test pushes to a session.
#[derive(Debug)]
pub(crate) enum Pushed {
    /// A frame, sent as it is (no delay, even when unresponsive).
    Frame(Box<Frame>),
    /// Write half of a frame, then close the connection.
    CutMidFrame,
}

/// Something the session does when its time comes.
#[derive(Debug)]
enum Due {
    /// Send a frame.
    Send(Box<Frame>),
    /// Apply a FLOW whose dispatch was failed by a pushed error.
    Flow(super::wire::CommandFlow),
}

/// The handle's side of one live session.
#[derive(Debug)]
pub(crate) struct SessionControl {
    /// What a test pushes to the client.
    pub(crate) push_tx: mpsc::UnboundedSender<Pushed>,
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
        framed: Framed::new(
            io,
            BoxedFrameCodec(PulsarCodec::with_max_message_size(max_frame)),
        ),
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
    framed: Framed<T, BoxedFrameCodec>,
    push_rx: mpsc::UnboundedReceiver<Pushed>,
    /// Frames the broker originates for this connection.
    out_rx: mpsc::UnboundedReceiver<Box<Frame>>,
    kill: oneshot::Receiver<()>,
    connected: bool,
    /// Frames waiting for their delay (and deferred FLOWs), ordered by (due time, arrival
    /// order) so frames with the same delay leave in the order they were queued.
    delayed: BTreeMap<(Instant, u64), Due>,
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
                    Some(Pushed::Frame(frame)) => self.write(&frame).await?,
                    Some(Pushed::CutMidFrame) => return self.cut_mid_frame().await,
                    None => return Err("dropped by the test".into()),
                },
                Some(frame) = self.out_rx.recv() => {
                    let faults = *lock(&self.shared.faults);
                    if !faults.unresponsive {
                        self.send_after(frame, faults.round_trip_time).await?;
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

    async fn on_frame(&mut self, frame: Box<Frame>) -> Result<(), Closed> {
        if let Some(k) = &mut self.keepalive {
            k.awaiting_pong = false;
            k.deadline = Instant::now() + k.interval;
        }
        let (command, payload) = (&frame.command, frame.payload.as_ref());
        let ty = command.r#type;
        let (step, injected) = {
            let view = SessionView {
                config: &self.shared.config,
                service_url: &self.shared.service_url,
                connected: self.connected,
                conn: self.id,
            };
            let mut state = lock(&self.shared.state);
            match self
                .connected
                .then(|| inject::intercept(&mut state, view, command))
                .flatten()
            {
                Some(injection) => (Step::Ignore, Some(injection)),
                None => {
                    let step = handlers::handle(&mut state, view, command, payload);
                    // A command may have created or removed topics: tell topic-list watchers.
                    super::topic_lists::sync(&mut state);
                    (step, None)
                }
            }
        };
        let deferred_flow = matches!(injected, Some(Injection::DeferFlow(_)))
            .then(|| command.flow)
            .flatten();
        // Recorded before anything is answered, so a test that sees the answer finds the request.
        self.shared.log.record(
            self.id,
            command,
            payload.map(|p| (&p.metadata, p.data.clone())),
        );
        match injected {
            Some(Injection::Reply { response, delay }) => {
                self.shared.served.record(ty);
                return self
                    .respond_after(Box::new(Frame::simple(*response)), delay)
                    .await;
            }
            Some(Injection::DeferFlow(delay)) => {
                if let (Some(delay), Some(flow)) = (delay, deferred_flow) {
                    self.seq += 1;
                    self.delayed
                        .insert((Instant::now() + delay, self.seq), Due::Flow(flow));
                }
                return Ok(());
            }
            None => {}
        }
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
                self.respond(Box::new(Frame::simple(connected))).await
            }
            Step::Refuse(answer, reason) => {
                tracing::info!(%reason, "mock broker: authentication refused; closing");
                self.write(&Frame::simple(answer)).await?;
                Err(reason)
            }
            Step::Reply(response) => {
                self.shared.served.record(ty);
                self.respond(Box::new(Frame::simple(response))).await
            }
            Step::Pong => {
                let faults = *lock(&self.shared.faults);
                if faults.unresponsive {
                    return Ok(());
                }
                let pong = Box::new(Frame::simple(reply::ping_or_pong(Type::Pong)));
                self.send_after(pong, faults.round_trip_time).await
            }
            Step::Ignore => Ok(()),
            Step::Forward(target) => match self.relay(*target).await {
                Ok(never) => match never {},
                Err(reason) => Err(reason),
            },
            Step::Close(reason) => {
                tracing::warn!(%reason, "mock broker: closing connection");
                Err(reason)
            }
        }
    }

    /// Sends a response now, or queues it for the configured delay; drops it when unresponsive.
    async fn respond(&mut self, response: Box<Frame>) -> Result<(), Closed> {
        self.respond_after(response, Duration::ZERO).await
    }

    /// Like [`respond`](Self::respond), `extra` later.
    async fn respond_after(&mut self, response: Box<Frame>, extra: Duration) -> Result<(), Closed> {
        let faults = *lock(&self.shared.faults);
        if faults.unresponsive {
            tracing::debug!("mock broker: unresponsive, response dropped");
            return Ok(());
        }
        let delay = faults.response_delay + faults.round_trip_time + extra;
        self.send_after(response, delay).await
    }

    /// Writes `frame` now, or queues it for `delay`.
    async fn send_after(&mut self, frame: Box<Frame>, delay: Duration) -> Result<(), Closed> {
        if delay.is_zero() {
            return self.write(&frame).await;
        }
        self.seq += 1;
        self.delayed
            .insert((Instant::now() + delay, self.seq), Due::Send(frame));
        Ok(())
    }

    async fn release_due(&mut self) -> Result<(), Closed> {
        let now = Instant::now();
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Due::Send(frame) => {
                    if !self.unresponsive() {
                        self.write(&frame).await?;
                    }
                }
                Due::Flow(flow) => {
                    let view = SessionView {
                        config: &self.shared.config,
                        service_url: &self.shared.service_url,
                        connected: self.connected,
                        conn: self.id,
                    };
                    consume::flow(&mut lock(&self.shared.state), view, &flow);
                }
            }
        }
        Ok(())
    }

    /// Writes the first half of a frame (the first one waiting for its delay, else a PING),
    /// then ends the session: the client sees a frame cut short by the end of the stream.
    async fn cut_mid_frame(&mut self) -> Result<Infallible, Closed> {
        let frame = self
            .delayed
            .values()
            .find_map(|due| match due {
                Due::Send(frame) => Some((**frame).clone()),
                Due::Flow(_) => None,
            })
            .unwrap_or_else(|| Frame::simple(reply::ping_or_pong(Type::Ping)));
        let mut bytes = BytesMut::new();
        if let Err(e) = self.framed.codec_mut().encode(&frame, &mut bytes) {
            return Err(format!("cut mid-frame: encoding failed: {e}"));
        }
        let half = bytes.len() / 2;
        let written = async {
            SinkExt::<&Frame>::flush(&mut self.framed)
                .await
                .map_err(io_error)?;
            let io = self.framed.get_mut();
            io.write_all(&bytes[..half]).await?;
            io.flush().await
        }
        .await;
        match written {
            Ok(()) => Err(format!(
                "cut by the test after {half} of {} bytes",
                bytes.len()
            )),
            Err(e) => Err(format!("cut by the test (write failed: {e})")),
        }
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
        self.write(&Frame::simple(reply::ping_or_pong(Type::Ping)))
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
        self.write(&Frame::simple(challenge)).await
    }

    /// Proxy mode: connects to the target broker, sends it the client's CONNECT and relays
    /// frames both ways until either side ends (upstream `DirectProxyHandler`). The target's
    /// CONNECTED reaches the client as the proxy writes it (upstream
    /// `ProxyConnection.handleBrokerConnected`: `Commands.newConnected(protocol_version,
    /// max_message_size)`, so the broker's feature flags stay behind the proxy).
    async fn relay(&mut self, target: super::proxy::Target) -> Result<Infallible, Closed> {
        let super::proxy::Target {
            host,
            port,
            connect,
        } = target;
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("proxy: cannot reach the target broker {host}:{port}: {e}"))?;
        let mut broker = Framed::new(stream, PulsarCodec::new());
        broker
            .send(Frame::simple(connect))
            .await
            .map_err(|e| format!("proxy: write to the target broker failed: {e}"))?;
        loop {
            tokio::select! {
                biased;
                _ = &mut self.kill => return Err("dropped by the test".into()),
                from_broker = broker.next() => match from_broker {
                    Some(Ok(mut frame)) => {
                        if !self.connected && frame.command.r#type == Type::Connected as i32 {
                            self.connected = true;
                            if let Some(c) = frame.command.connected.as_mut() {
                                c.server_version = self.shared.config.server_version.clone();
                                c.feature_flags = Some(super::wire::FeatureFlags {
                                    supports_topic_watchers: Some(false),
                                    ..Default::default()
                                });
                            }
                        }
                        self.write(&frame).await?;
                    }
                    Some(Err(e)) => return Err(format!("proxy: decode error from the broker: {e}")),
                    None => return Err("proxy: the target broker closed the connection".into()),
                },
                from_client = self.framed.next() => match from_client {
                    Some(Ok(frame)) => {
                        self.shared.log.record(
                            self.id,
                            &frame.command,
                            frame.payload.as_ref().map(|p| (&p.metadata, p.data.clone())),
                        );
                        broker
                            .send(&*frame)
                            .await
                            .map_err(|e| format!("proxy: write to the target broker failed: {e}"))?;
                    }
                    Some(Err(e)) => return Err(format!("decode error: {e}")),
                    None => return Err("closed by the client".into()),
                },
            }
        }
    }

    fn unresponsive(&self) -> bool {
        lock(&self.shared.faults).unresponsive
    }

    /// Writes one frame; a kill while the client is not reading still ends the session.
    async fn write(&mut self, frame: &Frame) -> Result<(), Closed> {
        tokio::select! {
            biased;
            _ = &mut self.kill => Err("dropped by the test".into()),
            sent = self.framed.send(frame) => sent.map_err(|e| format!("write failed: {e}")),
        }
    }
}

/// A codec error as an I/O error.
fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
