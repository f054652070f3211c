//! One multiplexed connection to one broker (a `ClientCnx` in upstream terms).
//!
//! A single task owns the socket. [`Connection`] handles are cheap clones around a bounded
//! channel into that task; every request carries its own responder, so registering a request
//! and sending it is one message. The task routes inbound commands without awaiting: responses
//! by `request_id`, producer / consumer / watcher commands by their id to the registered
//! entity's channel (`try_send`). When the connection dies, every pending request fails and
//! every registered entity is told, once.
//!
//! The transport is injectable: [`Connection::connect_with_stream`] runs the protocol over any
//! `AsyncRead + AsyncWrite`, which the tests use with in-memory pipes. The pool's connector opens
//! TCP, wrapped in TLS (the `tls` module, cargo feature `tls`) for `pulsar+ssl://` brokers.
//!
//! Authentication: the configured [`AuthenticationProvider`](crate::auth::AuthenticationProvider)
//! is asked for credentials for CONNECT and again for every AuthChallenge, in the background of
//! the connection task (which never awaits it in its event loop); if it fails, the connection
//! closes with [`Error::Authentication`].

mod entity_channel;
mod handshake;
mod router;
pub(crate) mod routing;
mod task;
#[cfg(feature = "tls")]
pub(crate) mod tls;
mod writer;

#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod pause_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use crate::codec::Frame;
use crate::error::{Error, Result};
use crate::proto::BaseCommand;
#[cfg(test)]
pub(crate) use entity_channel::entity_channel;
pub(crate) use entity_channel::{
    consumer_channel, EntityReceiver, EntitySender, QueueMemory, WatchSlot,
};
pub(crate) use routing::EntityKind;

/// Settings of each broker connection (`pub` for `mock::ConnectionConfig`, as
/// [`Connection`]).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "mock-broker"), allow(unreachable_pub))]
pub struct ConnectionConfig {
    /// Timeout of one request (lookup, producer create, ...): it fails only that request.
    /// Default 30 s, like upstream's operation timeout.
    pub operation_timeout: Duration,
    /// Time allowed to open the TCP connection and complete the CONNECT handshake. Default 10 s.
    pub connect_timeout: Duration,
    /// Keep-alive interval: a PING is sent after this long without a frame from the broker,
    /// and the connection is closed when no frame arrives for twice this long (upstream closes
    /// at the first keep-alive tick that finds its PING unanswered, i.e. within two
    /// intervals). A broker that reads nothing we write for twice this long is dead as well.
    /// Default 30 s, like upstream.
    pub keepalive_interval: Duration,
    /// Where the credentials sent in CONNECT and in answers to auth challenges come from.
    pub auth: Option<crate::auth::SharedAuthProvider>,
    /// Capacity of the channel from handles into the connection task. Default 1024.
    pub command_queue: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            operation_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            auth: None,
            command_queue: 1024,
        }
    }
}

/// The TLS connector connections are wrapped with (a stand-in without the `tls` feature).
#[cfg(feature = "tls")]
pub(crate) type Connector = tls::TlsConnector;
/// The TLS connector connections are wrapped with (a stand-in without the `tls` feature).
#[cfg(not(feature = "tls"))]
pub(crate) type Connector = std::convert::Infallible;

/// What the broker advertised about itself in CONNECTED (its FeatureFlags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerFeatures {
    /// Auth data can be refreshed on the connection.
    pub supports_auth_refresh: bool,
    /// The broker can prepend broker entry metadata to messages.
    pub supports_broker_entry_metadata: bool,
    /// PIP-145 topic-list watchers.
    pub supports_topic_watchers: bool,
    /// Producers may be created before the topic is fully ready (WaitForExclusive).
    pub supports_partial_producer: bool,
    /// Partitioned metadata can be fetched without auto-creating the topic.
    pub supports_get_partitioned_metadata_without_auto_creation: bool,
    /// PIP-247 partition-update watchers (this project's extension, FeatureFlags field 1000).
    pub supports_partition_update_watchers: bool,
}

/// What the handshake established about the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The broker's (logical) service URL this connection serves, e.g. `pulsar://host:6650`.
    pub broker_url: String,
    /// The broker's version string.
    pub server_version: String,
    /// The negotiated protocol version.
    pub protocol_version: i32,
    /// The broker's maximum message size: its advertised value capped at 128 MiB, or 5 MiB
    /// when it says nothing.
    pub max_message_size: usize,
    /// The broker's feature flags.
    pub features: BrokerFeatures,
}

pub(crate) use crate::codec::MessageFrame;

/// The answer to a request: the broker's response, boxed (a `BaseCommand` is several KB, and
/// request answers travel up through lookups, creates and subscribes).
pub(crate) type Response = Result<Box<BaseCommand>>;

/// A request in flight ([`Connection::request`]), boxed: a pointer in its caller's state.
pub(crate) type ResponseFuture<'a> = Pin<Box<dyn Future<Output = Response> + Send + 'a>>;

/// Something the connection delivers to a registered entity.
// Producers and consumers (built on this) consume these; until then only tests do.
#[derive(Debug)]
pub(crate) enum EntityEvent {
    /// A command addressed to this entity (not a MESSAGE).
    Command(Box<Frame>),
    /// A MESSAGE with its payload: only the parts a consumer needs, not the whole
    /// `BaseCommand` (several KB), since a consumer may hold thousands of them.
    Message(Box<MessageFrame>),
    /// A SEND_RECEIPT, without the `BaseCommand` envelope: a producer may have many queued.
    Receipt(crate::proto::CommandSendReceipt),
    /// The connection is gone; the entity must reconnect or fail. Sent once.
    ConnectionClosed(Error),
}

/// Messages from handles into the connection task.
pub(crate) enum Op {
    /// Register a request the moment it is issued, on the control lane (which the task
    /// always drains, even while the writer is stalled): from then on the router alone times
    /// it out, queueing included. Its frame follows on the ops lane as [`Op::Request`].
    Issue {
        request_id: u64,
        operation: &'static str,
        timeout: Duration,
        /// `timeout` after the request was issued (upstream's `RequestTime` starts when
        /// `ClientCnx.sendRequestAndHandleTimeout` registers it, before the write).
        deadline: tokio::time::Instant,
        responder: oneshot::Sender<Response>,
    },
    /// The frame of a request already issued ([`Op::Issue`]): written if the request is still
    /// pending, dropped if it timed out or its caller left while it was queued.
    Request { request_id: u64, frame: Box<Frame> },
    /// The caller of a request stopped waiting: its pending entry goes (if still pending
    /// for that caller: the router checks that the responder is closed).
    Cancel { request_id: u64 },
    /// Send a frame that gets no response (boxed: a command is several KiB).
    Send(Box<Frame>),
    /// Send an already encoded frame (producers encode each entry once).
    SendRaw(Bytes),
    /// Register an entity's channel for commands addressed to it.
    Register {
        kind: EntityKind,
        id: u64,
        sender: EntitySender,
    },
    /// Forget an entity.
    Unregister { kind: EntityKind, id: u64 },
    /// Close the connection.
    Close,
    /// Close the connection as lost, not closed, for everyone on it: a user of it found it
    /// broken (a producer's SEND_ERROR, a receipt out of order), or the pool closes it idle.
    Drop(String),
}

/// Counters of a connection's registrations and pending requests (for leak checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Requests awaiting a response.
    pub pending_requests: usize,
    /// Registered producers, consumers and watchers.
    pub registered_entities: usize,
}

struct Shared {
    info: ConnectionInfo,
    next_request_id: AtomicU64,
    operation_timeout: Duration,
}

/// A handle to one broker connection. Cloning is cheap; the connection lives while its task
/// runs (until the broker goes away, the keep-alive fails, or [`Connection::close`]).
///
/// `pub` for the mock broker's protocol tests (`mock::Connection`, feature `mock-broker`);
/// crate-private otherwise.
#[derive(Clone)]
#[cfg_attr(not(feature = "mock-broker"), allow(unreachable_pub))]
pub struct Connection {
    ops: mpsc::Sender<Op>,
    control: mpsc::UnboundedSender<Op>,
    shared: Arc<Shared>,
    closed: watch::Receiver<Option<Error>>,
    stats: watch::Receiver<ConnectionStats>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("broker_url", &self.shared.info.broker_url)
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg_attr(not(feature = "mock-broker"), allow(unreachable_pub))]
impl Connection {
    /// Opens a TCP connection to `host:port` (wrapped in TLS with `tls`) and performs the
    /// handshake. `broker_url` is the logical broker URL; `proxy_to_broker_url` is set when
    /// connecting through a proxy.
    pub(crate) async fn connect(
        host: &str,
        port: u16,
        broker_url: &str,
        proxy_to_broker_url: Option<&str>,
        config: &ConnectionConfig,
        tls: Option<&Connector>,
    ) -> Result<Connection> {
        let addr = format!("{host}:{port}");
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(&addr))
            .await
            .map_err(|_| Error::Timeout {
                operation: "TCP connect",
                after: config.connect_timeout,
            })?
            .map_err(|e| Error::Connect {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        #[cfg(feature = "tls")]
        if let Some(tls) = tls {
            let stream =
                tokio::time::timeout(config.connect_timeout, tls.connect(stream, host, &addr))
                    .await
                    .map_err(|_| Error::Timeout {
                        operation: "TLS handshake",
                        after: config.connect_timeout,
                    })??;
            let slot = stream.error_slot();
            return Box::pin(Self::connect_with_stream(
                stream,
                broker_url,
                proxy_to_broker_url,
                config,
            ))
            .await
            .map_err(|e| tls::explain(&slot, &addr, e));
        }
        #[cfg(not(feature = "tls"))]
        let _: Option<&Connector> = tls;
        Box::pin(Self::connect_with_stream(
            stream,
            broker_url,
            proxy_to_broker_url,
            config,
        ))
        .await
    }

    /// Runs the handshake over an already open transport and spawns the connection task.
    pub async fn connect_with_stream<S>(
        stream: S,
        broker_url: &str,
        proxy_to_broker_url: Option<&str>,
        config: &ConnectionConfig,
    ) -> Result<Connection>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        // Boxed, as the connect below: a handshake's state is large, and a debug build copies
        // it into every poll frame that holds it.
        let ((reader, writer), info) = tokio::time::timeout(
            config.connect_timeout,
            Box::pin(handshake::handshake(
                stream,
                broker_url,
                proxy_to_broker_url,
                config,
            )),
        )
        .await
        .map_err(|_| Error::Timeout {
            operation: "connection handshake",
            after: config.connect_timeout,
        })??;
        let (ops_tx, ops_rx) = mpsc::channel(config.command_queue.max(1));
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (closed_tx, closed_rx) = watch::channel(None);
        let (stats_tx, stats_rx) = watch::channel(ConnectionStats::default());
        let shared = Arc::new(Shared {
            info,
            next_request_id: AtomicU64::new(0),
            operation_timeout: config.operation_timeout,
        });
        task::spawn(task::TaskParams {
            reader: reader.map_decoder(crate::codec::InboundCodec),
            writer,
            ops: ops_rx,
            control: control_rx,
            closed: closed_tx,
            stats: stats_tx,
            keepalive: config.keepalive_interval,
            auth: config.auth.clone(),
            broker_url: shared.info.broker_url.clone(),
            max_message_size: shared.info.max_message_size,
        });
        Ok(Connection {
            ops: ops_tx,
            control: control_tx,
            shared,
            closed: closed_rx,
            stats: stats_rx,
        })
    }

    /// What the handshake established about the broker.
    pub fn info(&self) -> &ConnectionInfo {
        &self.shared.info
    }

    /// Whether the connection has closed (it never reopens; the pool makes a new one).
    pub fn is_closed(&self) -> bool {
        self.closed.borrow().is_some() || self.ops.is_closed()
    }

    /// Waits until the connection closes and returns why.
    #[cfg_attr(not(feature = "mock-broker"), allow(dead_code))] // used by the mock's tests
    pub async fn closed(&self) -> Error {
        let mut rx = self.closed.clone();
        // The watch's borrow guard is a tail-expression temporary: edition 2024 drops it
        // before `rx`.
        match rx.wait_for(|c| c.is_some()).await {
            Ok(reason) => reason.clone().unwrap_or(Error::Closed),
            Err(_) => Error::ConnectionLost("connection task ended".into()),
        }
    }

    /// Closes the connection: pending requests fail and registered entities are told.
    pub fn close(&self) {
        let _ = self.control.send(Op::Close);
    }

    /// Closes the connection as lost (`why`): its pending requests and registered entities
    /// (and an attach that has just taken it) see [`Error::ConnectionLost`], as when the
    /// broker goes away, so they retry; only a [`close`](Self::close) (the client's own
    /// shutdown) ends them with `Closed`.
    pub(crate) fn drop_as_lost(&self, why: &str) {
        let _ = self.control.send(Op::Drop(why.to_string()));
    }

    /// Current counts of pending requests and registered entities.
    pub fn stats(&self) -> ConnectionStats {
        *self.stats.borrow()
    }

    /// A fresh request id, unique on this connection.
    pub(crate) fn new_request_id(&self) -> u64 {
        self.shared.next_request_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request and waits for its response, within the operation timeout.
    /// A broker `CommandError` response becomes [`Error::Broker`].
    pub(crate) fn request(
        &self,
        request_id: u64,
        command: BaseCommand,
        operation: &'static str,
    ) -> ResponseFuture<'_> {
        self.request_with_timeout(
            request_id,
            Box::new(Frame::simple(command)),
            operation,
            self.shared.operation_timeout,
        )
    }

    /// Like [`Connection::request`] with an explicit frame and timeout.
    ///
    /// The frame comes boxed (a `BaseCommand` is ~6 KB, and each move of it is a copy) and the
    /// future is boxed too: a request's state is a pointer in its caller's, whatever the
    /// command's size, so the lookups, creates and subscribes that await requests deep in
    /// their chains stay small (a debug build copies every value a poll holds into its stack
    /// frame).
    pub(crate) fn request_with_timeout(
        &self,
        request_id: u64,
        frame: Box<Frame>,
        operation: &'static str,
        timeout: Duration,
    ) -> ResponseFuture<'_> {
        // The timeout covers the whole request, queueing included: a broker that stops
        // reading stalls the queue, and the caller must still hear back in time (upstream's
        // operation timeout starts when the request is issued too).
        let deadline = crate::util::deadline_after(timeout);
        // A command too large for a frame would be dropped by the writer and the caller would
        // only hear of it at the timeout: refuse it here, naming the sizes.
        if frame.payload.is_none() {
            let size = frame.command.encoded_len().saturating_add(8);
            let max = self
                .info()
                .max_message_size
                .saturating_add(crate::codec::FRAME_HEADROOM);
            if size > max {
                return Box::pin(std::future::ready(Err(Error::Codec(
                    crate::codec::CodecError::FrameTooLarge { size, max },
                ))));
            }
        }
        Box::pin(self.issue(request_id, frame, operation, timeout, deadline))
    }

    async fn issue(
        &self,
        request_id: u64,
        frame: Box<Frame>,
        operation: &'static str,
        timeout: Duration,
        deadline: tokio::time::Instant,
    ) -> Response {
        // One deadline per request, kept by the router from the moment the request is issued
        // (Java `ClientCnx.sendRequestAndHandleTimeout` registers it in `pendingRequests` and
        // `requestTimeoutQueue` before the write; `checkRequestTimeout` fails it). The
        // registration goes on the control lane, which the task drains even while the
        // broker does not read, so a request queued behind a stalled writer still times out
        // at its deadline; and the router may drop the deadline of a request the broker
        // answered "wait" (`ClientCnx.handleProducerSuccess` with `producer_ready = false`).
        // This caller keeps no clock of its own: it waits for the answer.
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Op::Issue {
                request_id,
                operation,
                timeout,
                deadline,
                responder: tx,
            })
            .map_err(|_| self.close_reason())?;
        let mut answer = Answer {
            rx,
            request_id,
            control: &self.control,
            answered: false,
        };
        let queued = self.submit(Op::Request { request_id, frame });
        // Waiting for room in the queue ends when the router answers (a timeout) first.
        // A refused submit means the task is ending: it fails the issued request.
        tokio::select! {
            biased;
            result = &mut answer.rx => return answer.finish(result, self),
            _ = queued => {}
        }
        let result = (&mut answer.rx).await;
        answer.finish(result, self)
    }

    /// Sends a control command that gets no response (flow, ack, redeliver) on the control
    /// path: it goes ahead of queued data, never waits and is never dropped for lack of room
    /// (only a closed connection refuses it). Its volume is bounded by what the entity
    /// received: one ack or permit per delivered message at most.
    pub(crate) fn send_control(&self, frame: Frame) -> Result<()> {
        self.control
            .send(Op::Send(Box::new(frame)))
            .map_err(|_| self.close_reason())
    }

    /// Registers an entity's channel; commands addressed to `(kind, id)` go there, and so does
    /// the news of the connection closing. Registration goes ahead of any inbound command the
    /// task has yet to route, so a response to a command sent after this cannot miss it.
    /// Fails if the connection is already closed.
    pub(crate) fn register(&self, kind: EntityKind, id: u64, sender: EntitySender) -> Result<()> {
        self.control
            .send(Op::Register { kind, id, sender })
            .map_err(|_| self.close_reason())
    }

    /// Forgets an entity. Never blocks and never spawns (safe in `Drop`); a no-op if the
    /// connection is gone.
    pub(crate) fn unregister(&self, kind: EntityKind, id: u64) {
        let _ = self.control.send(Op::Unregister { kind, id });
    }

    /// Queues an encoded frame without waiting; gives it back if the queue is full (wait with
    /// [`Connection::ready`]) or fails if the connection is closed.
    pub(crate) fn try_send_raw(&self, bytes: Bytes) -> std::result::Result<(), Option<Bytes>> {
        match self.ops.try_send(Op::SendRaw(bytes)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(Op::SendRaw(b))) => Err(Some(b)),
            Err(_) => Err(None),
        }
    }

    /// Resolves when the connection's queue has room (or the connection closed).
    pub(crate) async fn ready(&self) {
        let _ = self.ops.reserve().await;
    }

    async fn submit(&self, op: Op) -> Result<()> {
        self.ops.send(op).await.map_err(|_| self.close_reason())
    }

    fn close_reason(&self) -> Error {
        self.closed
            .borrow()
            .clone()
            .unwrap_or_else(|| Error::ConnectionLost("connection closed".into()))
    }
}

/// The caller's side of an issued request. Dropped before its answer (the caller gave up),
/// it tells the router, which removes the pending entry at once rather than at its deadline
/// (or never, for a request the broker answered "wait").
struct Answer<'a> {
    rx: oneshot::Receiver<Response>,
    request_id: u64,
    control: &'a mpsc::UnboundedSender<Op>,
    answered: bool,
}

impl Answer<'_> {
    fn finish(
        &mut self,
        result: std::result::Result<Response, oneshot::error::RecvError>,
        conn: &Connection,
    ) -> Response {
        self.answered = true;
        match result {
            Ok(result) => result,
            Err(_) => Err(conn.close_reason()),
        }
    }
}

impl Drop for Answer<'_> {
    fn drop(&mut self) {
        if !self.answered {
            // Closed first: the router removes an entry only once its responder is closed,
            // so a Cancel can never remove a newer request that reused the id.
            self.rx.close();
            let _ = self.control.send(Op::Cancel {
                request_id: self.request_id,
            });
        }
    }
}
