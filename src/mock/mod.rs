//! A scriptable in-process Pulsar broker, for tests (this crate's and applications').
//!
//! [`MockBroker::start`] binds `127.0.0.1:0` and serves the binary protocol with the same codec
//! as the client. It behaves like a broker rather than echoing the test: it answers the
//! handshake (advertising the configured feature flags and max message size), lookups
//! (`Connect` for itself, or `Redirect` to another broker), partitioned-topic metadata from a
//! table the test fills, and PING with PONG. Requests it does not implement yet are refused with
//! an ERROR carrying their request id, as a broker refuses what it cannot serve.
//!
//! It is also an in-memory broker, so one protocol-level test can run against it and against
//! a real broker: topics (auto-created) store what producers send (kept forever; a batch is
//! one entry) and answer with receipts; subscriptions keep a cursor and dispatch to consumers
//! by their flow permits and subscription type (Exclusive, Failover with
//! ACTIVE_CONSUMER_CHANGE, Shared round robin, Key_Shared by key hash), take individual,
//! batch-index and cumulative acks, redeliver (on request, or when a consumer leaves), seek,
//! unsubscribe and answer GET_LAST_MESSAGE_ID. Non-persistent topics store nothing. What it
//! holds is visible through the admin methods ([`MockBroker::topic_messages`],
//! [`MockBroker::subscription_backlog`], ...). The exact behaviours, and where they simplify
//! upstream Apache Pulsar, are documented in the `produce`, `consume`, `dispatch` and
//! `subscription` modules.
//!
//! Topics belong to namespaces and tenants, created with their first topic or explicitly
//! ([`MockBroker::create_namespace`]). Lifecycle operations act as a real broker's admin API:
//! namespace deletion closing clients for good (PIP-139, [`MockBroker::delete_namespace`]),
//! terminated namespaces that refuse new topics ([`MockBroker::terminate_namespace`]), topic
//! unload, also to another broker (PIP-307, [`MockBroker::unload_topic_to`]), termination
//! (producers disconnected, REACHED_END_OF_TOPIC) and deletion; see the `ops` module. Message
//! deduplication is a namespace policy, off by default as on a broker
//! ([`MockBroker::set_deduplication`]). Several brokers can share one
//! storage as a cluster ([`MockBroker::start_cluster`]), and a broker can restart on the same
//! port keeping its data ([`MockBroker::restart`]).
//!
//! PIP-247 partition update watchers are served as `protocol-extensions.md` fixes them
//! (versions, resend on failure or timeout; [`MockBroker::update_partitions`], see the
//! `watchers` module), messages with a future `deliver_at_time` wait on Shared/Key_Shared
//! subscriptions (`timers`), and a per-namespace permission table restricts producers,
//! consumers and PIP-124 initial subscriptions by the connection's role
//! ([`MockBroker::grant_permission`], `permissions` module).
//!
//! For assertions it records every command it decodes ([`MockBroker::received`],
//! [`MockBroker::wait_for_command`]). For scripting it pushes any command to a chosen connection
//! ([`MockBroker::push`]). For fault injection it answers the next requests of a type with a
//! pushed error ([`MockBroker::push_error`]), adds a round-trip time
//! ([`MockBroker::set_round_trip_time`]), drops connections (also mid-frame), stops answering,
//! delays responses, goes down and comes back ([`MockBroker::take_down`]), and loses its
//! storage ([`MockBroker::set_storage_cut`]); [`MockCluster`] gathers the cluster operations.
//! The [`guide`] shows an application's test suite running against the kit.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use pulsar_sdk::mock::{wire::base_command::Type, MockBroker};
//!
//! let broker = MockBroker::start().await?;
//! broker.set_partitions("persistent://public/default/orders", 3);
//! // ... point a client at broker.service_url() ...
//! let lookup = broker.wait_for_command(Type::Lookup, Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```
//!
//! The broker runs while any [`MockBroker`] handle exists; dropping the last one (or calling
//! [`MockBroker::shutdown`]) stops it and closes every connection. Methods that start tasks
//! ([`MockBroker::start`], [`MockBroker::connect_duplex`]) must run inside a tokio runtime.
//!
//! Layout, bottom up (each layer imports only those below it; no import cycle):
//! - leaf state, importing no handler: `conns` (the registry of live connections and their
//!   producers and consumers), `namespace` (tenants, namespaces, topic names), `permissions`
//!   (roles and grants), `schemas` (the registry), `topic` and `subscription` (stored entries,
//!   cursors), `txn_state` (PIP-31: transactions, transaction buffers, pending acks),
//!   `timers` (deadlines), `topic_list_watchers` (PIP-145) and `partition_watchers`
//!   (PIP-247), `injected` (pushed errors), `admin_error`; `state` gathers them (what the
//!   broker knows: topics, lookup rules, connections);
//! - `reply`: what every handler answers with (`Step`, `SessionView`, SUCCESS/ERROR);
//! - handlers, pure functions of (state, command): `produce`, `consume`, `dispatch` (messages
//!   to consumers), `topic_lists`, `watchers`, `inject` (what a pushed error answers),
//!   `lifecycle` (unload, termination, deletion on the state), `timer_task` (firing what is
//!   due), `transactions` (the coordinator's commands and what a transaction does to topics
//!   and subscriptions);
//! - `handlers`, the one dispatcher (what a broker answers to each command), and `session`
//!   (one task per connection) on top; `admin` and `ops` (the test-facing view and admin
//!   operations), `cluster` (shared storage, restart, counters), `record` (the command log).

mod admin;
mod admin_error;
mod bitset;
mod cluster;
mod conns;
mod consume;
mod dispatch;
pub mod guide;
mod handlers;
mod hashing;
mod inject;
mod injected;
mod kit;
mod kit_cluster;
mod lifecycle;
mod namespace;
mod ops;
mod partition_watchers;
mod permissions;
mod produce;
mod proxy;
mod record;
mod reply;
mod schemas;
mod secure;
mod session;
mod state;
mod subscription;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_auth;
#[cfg(test)]
mod tests_consume;
#[cfg(test)]
mod tests_kit;
#[cfg(test)]
mod tests_lifecycle;
#[cfg(test)]
mod tests_produce;
#[cfg(test)]
mod tests_support;
#[cfg(test)]
mod tests_txn;
#[cfg(test)]
mod tests_watchers;
mod timer_task;
mod timers;
mod topic;
mod topic_list_watchers;
mod topic_lists;
mod transactions;
mod txn_state;
mod watchers;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::DuplexStream;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One raw client connection (CONNECT handshake, keep-alive, close) over any
/// `AsyncRead + AsyncWrite`, for protocol tests that talk to a broker below the producer and
/// consumer layer ([`Connection::connect_with_stream`]). Not needed by applications: the
/// client opens and pools its connections itself.
pub use crate::connection::{Connection, ConnectionConfig};
pub use admin::MockBrokerStats;
pub use admin_error::MockAdminError;
pub use injected::{ConsumedError, MockError, MockRequest};
pub use kit_cluster::{MockCluster, TopicMove};
pub use permissions::MockAction;
pub use record::Received;
pub use schemas::MockSchemaCompatibility;
#[cfg(feature = "tls")]
pub use secure::MockTls;
pub use secure::{MockAuth, REFRESH_AUTH_DATA};
pub use txn_state::MockCoordinatorCrash;

use crate::codec::Frame;
use crate::error::ServerError;
use record::CommandLog;
use session::SessionControl;
use state::{BrokerState, Faults, LookupAnswer};

pub mod wire {
    //! Raw protocol types (prost-generated from `PulsarApi.proto`) for scripting the mock broker
    //! and inspecting what it received.
    //!
    //! Not covered by semver: these types follow the protocol definition and may change in any
    //! release. The client API never exposes them.
    pub use crate::proto::*;
}

/// The mock broker's configuration. Build it with `..Default::default()`: fields are added as
/// the mock grows.
#[derive(Debug, Clone)]
pub struct MockBrokerConfig {
    /// Sent as `server_version` in CONNECTED. Default `"pulsar-sdk-mock"`.
    pub server_version: String,
    /// Advertised as `max_message_size` in CONNECTED (`None`: not advertised, so clients assume
    /// 5 MiB), and the largest message the broker's own decoder accepts. Default `Some(5 MiB)`.
    pub max_message_size: Option<u32>,
    /// Advertised as FeatureFlags `supports_partition_update_watchers` (PIP-247, field 1000)
    /// in CONNECTED. Default `true`.
    pub supports_partition_update_watchers: bool,
    /// Advertised as FeatureFlags `supports_topic_watchers` (PIP-145) in CONNECTED, and whether
    /// WATCH_TOPIC_LIST is served (off: answered ERROR NotAllowed, so clients poll
    /// GET_TOPICS_OF_NAMESPACE). Default `true`; changed at runtime with
    /// [`MockBroker::set_topic_watchers`] (for connections made from then on).
    pub supports_topic_watchers: bool,
    /// The broker setting `enableBrokerSideSubscriptionPatternEvaluation`: whether
    /// GET_TOPICS_OF_NAMESPACE filters by the pattern (`filtered = true`) or lists the whole
    /// namespace (`filtered = false`, its hash over everything listed). Default `true`.
    pub broker_side_pattern_evaluation: bool,
    /// When set, the broker sends a PING after the connection has been silent (nothing
    /// received) this long, and closes it if nothing (e.g. the PONG) arrives within another
    /// interval. A connection still without CONNECT after one interval is closed. Default
    /// `None`: the broker never pings.
    pub keepalive_interval: Option<Duration>,
    /// Whether any command before CONNECT closes the connection (as a real broker does).
    /// Default `true`.
    pub require_connect_first: bool,
    /// The broker setting `allowAutoSubscriptionCreation`: whether a producer creating its topic
    /// also creates its PIP-124 `initial_subscription_name` subscription (if its role may
    /// consume). Default `true`; changed at runtime with
    /// [`MockBroker::set_allow_auto_subscription_creation`].
    pub allow_auto_subscription_creation: bool,
    /// How long a PIP-247 PARTITION_UPDATE waits for its result before the broker sends the
    /// current counts again with a new version. Default 30 s; changed at runtime with
    /// [`MockBroker::set_partition_update_resend_timeout`].
    pub partition_update_resend_timeout: Duration,
    /// Authentication the broker requires, and its auth challenge schedule (see [`MockAuth`]).
    /// Default `None`: any CONNECT is accepted.
    pub auth: Option<MockAuth>,
    /// Whether the broker runs a transaction coordinator (PIP-31; see [`MockTransactions`]).
    /// Default [`MockTransactions::Disabled`], as a broker's `transactionCoordinatorEnabled`.
    pub transactions: MockTransactions,
    /// Serve TLS on the listener (see [`MockTls`]): the service URL is then
    /// `pulsar+ssl://HOST:PORT` and lookup answers carry `brokerServiceUrlTls`. In-memory
    /// connections ([`MockBroker::connect_duplex`]) stay plain. Default `None`.
    #[cfg(feature = "tls")]
    pub tls: Option<MockTls>,
}

impl Default for MockBrokerConfig {
    fn default() -> Self {
        MockBrokerConfig {
            server_version: "pulsar-sdk-mock".to_owned(),
            max_message_size: Some(5 * 1024 * 1024),
            supports_partition_update_watchers: true,
            supports_topic_watchers: true,
            broker_side_pattern_evaluation: true,
            keepalive_interval: None,
            require_connect_first: true,
            allow_auto_subscription_creation: true,
            partition_update_resend_timeout: partition_watchers::DEFAULT_RESEND_TIMEOUT,
            auth: None,
            transactions: MockTransactions::Disabled,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// What the mock broker does with the transaction coordinator's commands
/// ([`MockBrokerConfig::transactions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MockTransactions {
    /// No coordinator: TC_CLIENT_CONNECT and the other coordinator commands are answered
    /// ERROR NotAllowed, as a broker with `transactionCoordinatorEnabled=false`.
    #[default]
    Disabled,
    /// A coordinator, a transaction buffer per topic and pending acknowledgements per
    /// subscription (coordinator ids `0..max(1, partitions of
    /// persistent://pulsar/system/transaction_coordinator_assign)`): messages of an open
    /// transaction (and everything after them on their topic) are not dispatched until it
    /// ends, an aborted transaction's never are, acknowledgements in a transaction apply at
    /// its commit and conflict as the broker's, and a transaction past its timeout is
    /// aborted. Ending one goes through the COMMITTING / ABORTING status as the broker's
    /// (a resend of the same END_TXN finishes it; see
    /// [`MockBroker::crash_coordinator_on_next_end`]). Simplified: the topics and
    /// subscriptions are told at once, and topics get no commit/abort marker entries
    /// (acknowledging part of a batch in a transaction is modelled with ack sets).
    Enabled,
    /// No answer at all to the coordinator commands, as a broker that does not know them
    /// (pulsar-lite ignores TC_CLIENT_CONNECT).
    Unanswered,
}

/// Identifies one connection accepted by a [`MockBroker`] (numbered from 1 in accept order;
/// the brokers of a cluster number their connections together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(u64);

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn-{}", self.0)
    }
}

/// A handle to a running mock broker. Cheap to clone; the broker stops when the last handle is
/// dropped.
#[derive(Clone)]
pub struct MockBroker {
    inner: Arc<Handle>,
}

impl fmt::Debug for MockBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockBroker")
            .field("service_url", &self.inner.shared.service_url)
            .finish_non_exhaustive()
    }
}

/// Owned by the handles only; its drop stops the broker.
struct Handle {
    shared: Arc<Shared>,
    accept_task: Mutex<Option<JoinHandle<()>>>,
    /// Fires the deadlines of the state ([`timers`]).
    timer_task: JoinHandle<()>,
}

/// State shared by the handles, the accept loop and every session.
pub(crate) struct Shared {
    pub(crate) config: MockBrokerConfig,
    pub(crate) addr: SocketAddr,
    pub(crate) service_url: String,
    /// Shared by the brokers of a cluster.
    pub(crate) state: Arc<Mutex<BrokerState>>,
    pub(crate) faults: Mutex<Faults>,
    pub(crate) log: CommandLog,
    pub(crate) connections: Mutex<Registry>,
    /// Lookups and metadata requests answered.
    pub(crate) served: partition_watchers::Served,
    /// Wraps accepted connections in TLS.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The live connections.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Connections ever accepted.
    pub(crate) accepted: usize,
    /// Live sessions, in accept order.
    pub(crate) live: BTreeMap<ConnectionId, SessionControl>,
    /// Set by shutdown: no new session starts.
    pub(crate) closed: bool,
    /// Set while restarting: no new session starts.
    pub(crate) paused: bool,
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not wedge the broker).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MockBroker {
    /// Starts a broker with the default configuration on `127.0.0.1:0`.
    pub async fn start() -> std::io::Result<MockBroker> {
        Self::start_with(MockBrokerConfig::default()).await
    }

    /// Starts a broker with `config` on `127.0.0.1:0`.
    pub async fn start_with(config: MockBrokerConfig) -> std::io::Result<MockBroker> {
        Self::start_on(config, Arc::default()).await
    }

    /// Starts a broker with `config` on `127.0.0.1:0`, serving the cluster state `state`.
    pub(crate) async fn start_on(
        config: MockBrokerConfig,
        state: Arc<Mutex<BrokerState>>,
    ) -> std::io::Result<MockBroker> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let service_url = format!("pulsar://{addr}");
        #[cfg(feature = "tls")]
        let (service_url, tls) = match &config.tls {
            Some(t) => (
                format!("pulsar+ssl://{}:{}", t.host(), addr.port()),
                Some(t.acceptor()?),
            ),
            None => (service_url, None),
        };
        lock(&state).settings.insert(
            service_url.clone(),
            state::BrokerSettings::from_config(&config),
        );
        let timer_task = timer_task::spawn(Arc::clone(&state));
        let shared = Arc::new(Shared {
            config,
            addr,
            service_url,
            state,
            faults: Mutex::new(Faults::default()),
            log: CommandLog::new(),
            connections: Mutex::new(Registry::default()),
            served: partition_watchers::Served::default(),
            #[cfg(feature = "tls")]
            tls,
        });
        let accept_task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        tracing::debug!(%addr, "mock broker started");
        Ok(MockBroker {
            inner: Arc::new(Handle {
                shared,
                accept_task: Mutex::new(Some(accept_task)),
                timer_task,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The configuration the broker was started with.
    pub fn config(&self) -> &MockBrokerConfig {
        &self.shared().config
    }

    /// The address the broker listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// The broker's service URL, `pulsar://127.0.0.1:PORT` (`pulsar+ssl://HOST:PORT` with
    /// TLS); also what it answers in a lookup it serves itself.
    pub fn service_url(&self) -> String {
        self.shared().service_url.clone()
    }

    /// Opens an in-memory connection to the broker and returns the client's end. The broker
    /// serves the other end exactly like an accepted TCP connection (it counts in
    /// [`accepted_connections`](Self::accepted_connections)). Works with tokio time paused.
    ///
    /// After shutdown, or while restarting, the returned stream is already closed.
    pub fn connect_duplex(&self) -> DuplexStream {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let _ = session::spawn(&self.inner.shared, server);
        client
    }

    /// How many connections the broker has accepted so far (TCP and duplex, live or not).
    pub fn accepted_connections(&self) -> usize {
        lock(&self.shared().connections).accepted
    }

    /// The live connections, in accept order.
    pub fn connections(&self) -> Vec<ConnectionId> {
        lock(&self.shared().connections)
            .live
            .keys()
            .copied()
            .collect()
    }

    /// Every command received so far, on all connections, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared().log.all()
    }

    /// The commands of type `ty` received so far, in arrival order.
    pub fn received_of(&self, ty: wire::base_command::Type) -> Vec<Received> {
        self.shared().log.of_type(ty)
    }

    /// Waits until a command of type `ty` has been received (returning immediately if one
    /// already was) and returns the first one; `None` after `timeout`.
    pub async fn wait_for_command(
        &self,
        ty: wire::base_command::Type,
        timeout: Duration,
    ) -> Option<Received> {
        let mut first = self.shared().log.wait_for(ty, 1, timeout).await?;
        first.pop()
    }

    /// Waits until at least `count` commands of type `ty` have been received and returns the
    /// first `count` of them; `None` after `timeout`.
    pub async fn wait_for_commands(
        &self,
        ty: wire::base_command::Type,
        count: usize,
        timeout: Duration,
    ) -> Option<Vec<Received>> {
        self.shared().log.wait_for(ty, count, timeout).await
    }

    /// Queues `command` to be sent on connection `conn`, after anything already queued. Pushed
    /// frames are never delayed and are sent even when the broker is unresponsive. Returns
    /// `false` if the connection is gone.
    pub fn push(&self, conn: ConnectionId, command: wire::BaseCommand) -> bool {
        self.push_frame(conn, Frame::simple(command))
    }

    /// Like [`push`](Self::push), for a payload frame (e.g. MESSAGE): `command`, then the
    /// message `metadata` and `data`, with the checksum computed by the codec.
    pub fn push_with_payload(
        &self,
        conn: ConnectionId,
        command: wire::BaseCommand,
        metadata: wire::MessageMetadata,
        data: Bytes,
    ) -> bool {
        self.push_frame(conn, Frame::with_payload(command, metadata, data))
    }

    fn push_frame(&self, conn: ConnectionId, frame: Frame) -> bool {
        lock(&self.shared().connections)
            .live
            .get(&conn)
            .is_some_and(|s| {
                s.push_tx
                    .send(session::Pushed::Frame(Box::new(frame)))
                    .is_ok()
            })
    }

    /// Closes connection `conn` (the client sees the socket closed, without any command).
    /// Returns `false` if it was already gone. Its producers and consumers are detached before
    /// this returns (a consumer's unacknowledged messages go to the other consumers).
    pub fn drop_connection(&self, conn: ConnectionId) -> bool {
        let removed = lock(&self.shared().connections).live.remove(&conn);
        handlers::connection_closed(&mut lock(&self.shared().state), conn);
        removed.is_some() // dropping its control closes the session
    }

    /// Closes every live connection; the broker keeps accepting new ones. Their producers and
    /// consumers are detached before this returns.
    pub fn drop_all_connections(&self) {
        let live = std::mem::take(&mut lock(&self.shared().connections).live);
        let mut state = lock(&self.shared().state);
        for id in live.keys() {
            handlers::connection_closed(&mut state, *id);
        }
        drop(state);
        drop(live);
    }

    /// Stops (`true`) or resumes (`false`) answering: a stalled broker. While unresponsive the
    /// broker keeps accepting connections, reading and recording commands, but sends nothing
    /// of its own: no CONNECTED, no responses, no PONG, no keepalive PING, no MESSAGE (frames
    /// pushed by the test still go out). Responses due meanwhile are lost, not sent on resume.
    pub fn set_unresponsive(&self, on: bool) {
        lock(&self.shared().faults).unresponsive = on;
    }

    /// Delays every response to a client command (including CONNECTED) by `delay`, without
    /// holding up other traffic; responses with the same delay keep their order. PONG is never
    /// delayed: a real broker answers PING on its I/O thread even when slow to serve requests
    /// (use [`set_unresponsive`](Self::set_unresponsive) to starve keepalive). Applies to
    /// commands received from now on; `Duration::ZERO` turns it off. Adds to the round-trip
    /// time ([`set_round_trip_time`](Self::set_round_trip_time)), which delays every frame.
    pub fn set_response_delay(&self, delay: Duration) {
        lock(&self.shared().faults).response_delay = delay;
    }

    /// Sets how new schemas are checked against a topic's latest (default
    /// [`MockSchemaCompatibility::Full`], upstream's broker default), for every topic.
    pub fn set_schema_compatibility(&self, strategy: MockSchemaCompatibility) {
        lock(&self.shared().state).schemas.strategy = strategy;
    }

    /// Leaves GetSchema and GetOrCreateSchema unanswered (`true`), like a broker without a
    /// schema registry (pulsar-lite), or answers them again (`false`, the default).
    pub fn set_schema_requests_unanswered(&self, on: bool) {
        lock(&self.shared().state).schemas.unanswered = on;
    }

    /// The schemas registered on `topic` (a partition reads its topic's), oldest version
    /// first: version `n` is index `n`.
    pub fn schemas(&self, topic: &str) -> Vec<crate::schema::SchemaInfo> {
        let topic = namespace::canonical_topic(topic);
        lock(&self.shared().state)
            .schemas
            .versions(&topic)
            .iter()
            .filter_map(crate::schema::SchemaInfo::from_proto)
            .collect()
    }

    /// Sets the partition count of `topic` in the broker's metadata (0: not partitioned).
    /// `topic` is a full name (`persistent://public/default/t`); short forms (`t`,
    /// `tenant/ns/t`) are completed the usual way. Unknown topics have 0 partitions.
    ///
    /// Meant for setting up topics; a change of a watched topic's count still sends its PIP-247
    /// watchers a PARTITION_UPDATE (see [`update_partitions`](Self::update_partitions) for the
    /// admin update, which only grows and creates the new partitions).
    pub fn set_partitions(&self, topic: &str, partitions: u32) {
        watchers::set_partitions(&mut lock(&self.shared().state), topic, partitions);
    }

    /// Answers every lookup with `Redirect` to `target_service_url` (e.g. another mock
    /// broker's [`service_url`](Self::service_url)), with the given `authoritative` flag.
    /// Per-topic rules and lookup errors take precedence.
    pub fn redirect_lookups_to(&self, target_service_url: &str, authoritative: bool) {
        self.lookup_rules(|rules| rules.redirect_all(target_service_url, authoritative));
    }

    /// Acts as a proxy: every lookup is answered `Connect` to `target_service_url` with
    /// `proxy_through_service_url`, so clients keep connecting here and name the target broker
    /// in CONNECT's `proxy_to_broker_url`. Such a CONNECT is checked as upstream's proxy
    /// checks it (`host:port` only: a `pulsar://` URL or a missing port is refused with an
    /// ERROR and the connection closed), then relayed to the named broker: the proxy opens its
    /// own connection there and passes frames both ways, recording what the client sent.
    /// Cleared by [`MockBroker::clear_lookup_redirect`].
    pub fn proxy_lookups_to(&self, target_service_url: &str) {
        self.lookup_rules(|rules| rules.proxy_all(target_service_url));
    }

    /// Acts as a lookup service for another broker: every lookup is answered `Connect` to
    /// `target_service_url` (without `proxy_through_service_url`), so clients connect to the
    /// target directly. Cleared by [`MockBroker::clear_lookup_redirect`].
    pub fn connect_lookups_to(&self, target_service_url: &str) {
        self.lookup_rules(|rules| rules.connect_all(target_service_url));
    }

    /// Removes the broker-wide redirect: lookups are answered `Connect` again.
    pub fn clear_lookup_redirect(&self) {
        self.lookup_rules(|rules| rules.clear_redirect());
    }

    /// Runs `f` on this broker's lookup rules.
    fn lookup_rules(&self, f: impl FnOnce(&mut state::LookupRules)) {
        f(lock(&self.shared().state).lookup_rules(&self.shared().service_url));
    }

    /// Answers lookups of `topic` only with `Redirect` to `target_service_url` (e.g. to spread
    /// partitions over several mock brokers). Cleared by
    /// [`clear_topic_lookup`](Self::clear_topic_lookup).
    pub fn redirect_topic_lookups_to(
        &self,
        topic: &str,
        target_service_url: &str,
        authoritative: bool,
    ) {
        self.lookup_rules(|rules| {
            rules.set_topic(
                topic,
                LookupAnswer::Redirect {
                    service_url: target_service_url.to_owned(),
                    authoritative,
                },
            )
        });
    }

    /// Fails lookups (`response = Failed` with `code` and `message`): of `topic` only, or of
    /// every topic without a per-topic rule when `topic` is `None`.
    pub fn set_lookup_error(&self, topic: Option<&str>, code: ServerError, message: &str) {
        self.lookup_rules(|rules| match topic {
            Some(topic) => rules.set_topic(
                topic,
                LookupAnswer::Failed {
                    code,
                    message: message.to_owned(),
                },
            ),
            None => rules.fail_all(code, message),
        });
    }

    /// Removes every lookup error set with [`set_lookup_error`](Self::set_lookup_error).
    pub fn clear_lookup_errors(&self) {
        self.lookup_rules(|rules| rules.clear_failures());
    }

    /// Removes the per-topic lookup rule (redirect or error) of `topic`.
    pub fn clear_topic_lookup(&self, topic: &str) {
        self.lookup_rules(|rules| rules.clear_topic(topic));
    }

    /// Stops the broker: stops accepting (the port is closed when this returns) and closes
    /// every connection, waiting for their sessions to end. Other handles stay valid but the
    /// broker no longer serves.
    pub async fn shutdown(self) {
        // Closed first: a concurrent restart installs its new accept task only while not closed.
        let live = {
            let mut registry = lock(&self.shared().connections);
            registry.closed = true;
            std::mem::take(&mut registry.live)
        };
        let accept = lock(&self.inner.accept_task).take();
        if let Some(task) = accept {
            task.abort();
            let _ = task.await;
        }
        self.inner.timer_task.abort();
        close_sessions(live).await;
        tracing::debug!(addr = %self.addr(), "mock broker stopped");
    }
}

/// Closes sessions taken from the registry and waits until they have ended.
pub(crate) async fn close_sessions(live: BTreeMap<ConnectionId, SessionControl>) {
    for (_, control) in live {
        let SessionControl {
            push_tx,
            kill,
            task,
        } = control;
        drop((push_tx, kill));
        let _ = task.await;
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let live = {
            let mut registry = lock(&self.shared.connections);
            registry.closed = true;
            std::mem::take(&mut registry.live)
        };
        if let Some(task) = lock(&self.accept_task).take() {
            task.abort();
        }
        self.timer_task.abort();
        drop(live);
    }
}

pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                #[cfg(feature = "tls")]
                if let Some(acceptor) = shared.tls.clone() {
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        match acceptor.accept(stream).await {
                            Ok(tls) => {
                                if let Some(id) = session::spawn(&shared, tls) {
                                    tracing::debug!(%peer, conn = %id, "mock broker: accepted (TLS)");
                                }
                            }
                            Err(e) => {
                                tracing::debug!(%peer, error = %e, "mock broker: TLS handshake failed")
                            }
                        }
                    });
                    continue;
                }
                if let Some(id) = session::spawn(&shared, stream) {
                    tracing::debug!(%peer, conn = %id, "mock broker: accepted");
                }
            }
            Err(e) => {
                // E.g. out of file descriptors: back off briefly instead of spinning.
                tracing::warn!(error = %e, "mock broker: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
