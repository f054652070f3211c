//! # pulsar-sdk
//!
//! A Rust client SDK for the Apache Pulsar binary protocol, built on tokio.
//!
//! Start with [`Client`]: it creates [`Producer`]s, [`Consumer`]s, [`Reader`]s and
//! [`TableView`]s. New here?
//! The [`guide`] walks through connecting, producing, consuming, partitioned topics, errors,
//! testing with the mock broker and the differences from the Java client.
//!
//! ## The public API, and how it is named
//!
//! Public modules are the ones an application uses: [`client`], [`producer`], [`consumer`]
//! (readers too), [`message`] and [`message_id`], [`schema`], [`auth`] (token, basic, TLS,
//! OAuth2 with the `oauth2` feature), [`compression`], [`error`], [`lifecycle`], [`stats`],
//! [`topic`], [`table_view`] (a topic as a key → latest value map), [`service_url`],
//! [`service_info`] and [`failover`] (cluster-level failover),
//! [`interceptor`] and, behind cargo features, `transaction` (PIP-31), `metrics` and `mock` (a scriptable
//! in-memory broker for tests, `mock-broker`). The layers under them (the frame codec, one
//! multiplexed connection per broker, the connection pool, lookup, the backoff policy) are
//! internal; the few types of theirs an application meets are re-exported here
//! ([`BackoffPolicy`], [`BrokerLookup`], [`ConnectionStats`], [`TlsOptions`], ...).
//!
//! One naming rule, for the builders and entry points there are and those to come:
//! - **An entry point is the noun of what it builds, and takes what that needs first**:
//!   `client.producer(topic)`, `client.consumer(topic)`, `client.reader(topic)` return
//!   builders; a variant says how it differs, before the noun:
//!   [`Client::multi_topic_consumer`]`(topics)`, [`Client::pattern_consumer`]`(regex)`. A
//!   type with no parent to build it from has `Type::builder()` ([`Client::builder`]). The
//!   builders of transactions, table views and failover providers follow it:
//!   `client.transaction()`, `client.table_view(topic)`, [`ServiceInfoProvider`] types with
//!   [`AutoClusterFailover::builder()`], set on the client with a noun setter
//!   ([`ClientBuilder::service_info_provider`]; upstream C++/Python's name: a provider gives
//!   the service URL *and* its credentials and TLS trust, which Java's `ServiceUrlProvider`
//!   name does not say).
//! - **A builder ends with the verb of the broker operation**: `create()` (producer, reader),
//!   `subscribe()` (consumer), `begin()` (a transaction, opened on its coordinator), `build()`
//!   (a client, or anything made without the broker).
//! - **Setters are the noun, without `set_` or `with_`**, take strings as
//!   `impl Into<String>` and paths as `impl Into<PathBuf>`, durations as [`Duration`](std::time::Duration),
//!   and switches as `bool`: `.subscription("s")`, `.connect_timeout(d)`, `.batching(false)`.
//!   Names follow the Java client's where it has one (`receiver_queue_size`,
//!   `ack_timeout`), in snake case, without the builder's own noun or a `_name` suffix:
//!   `ProducerBuilder::name` and `ConsumerBuilder::name` (Java's `producerName`,
//!   `consumerName`), `subscription` on consumer and reader builders alike.
//! - **Reads are nouns** (`state()`, `partitions()`, `topics()`, `stats()`); **streams of
//!   changes are plural nouns** returning a crate type that is a
//!   [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html), never a tokio
//!   channel: `states()` ([`StateStream`]), `partition_updates()`, `active_updates()` and
//!   `service_info_updates()` ([`Updates`]: the current value, `changed().await`,
//!   `wait_for(..)`), `topic_updates()`
//!   ([`TopicUpdates`]), a table view's `updates()` ([`TableViewUpdates`]).
//! - A renamed item keeps its old name for a while as a `#[deprecated]` forwarder where that
//!   is free, and every rename is listed in `CHANGELOG.md`.

//! ## Closing, and when things end
//!
//! Every producer, consumer and reader has a lifecycle [`State`]; `state()` reads it,
//! `states()` is a [`StateStream`] of its changes and `closed()` resolves with the terminal
//! state it ends in (both `Send + 'static`, to move into spawned tasks).
//!
//! - [`Producer::close`] closes the producer for **every clone** (clones share it). Sends made
//!   once it is closing or closed fail at once with [`Error::Closed`]; messages still pending
//!   when the close ends fail with it too. [`Producer::flush`] first to wait for every
//!   receipt. Dropping the last clone lets pending messages finish, then closes it.
//! - [`Consumer::close`] / [`Reader::close`] flush the acks made before it, then close on the
//!   broker; dropping one does the same in the background. Afterwards `recv` fails with
//!   [`Error::Closed`], the [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html)
//!   impl ends (`None`), and acks (on the
//!   consumer or an [`Acker`]) fail with [`Error::Closed`].
//! - `close()` returns `Ok` for a close by the application (twice is fine), or the error that
//!   ended the entity before (e.g. [`Error::ClosedByBroker`]).
//! - [`Client::close`] is awaitable and graceful: from its first poll, sends on the client's
//!   producers and new producers, consumers and readers are refused with [`Error::Closed`];
//!   producers then send what they hold and wait for its receipts, consumers flush their acks,
//!   everything ends in [`State::Closed`] (never `Reconnecting`: nothing reconnects after a
//!   close), and the connections close. Consumers' streams end as above. Bounded by the
//!   operation timeout ([`Error::Timeout`] if something did not finish), or by a deadline of
//!   your own with [`Client::close_within`], one budget for every entity together: a service
//!   shutting down calls that alone rather than `close()` on each entity (each of which may
//!   wait one operation timeout against an unresponsive broker); its doc says what is cut off
//!   when the deadline passes.
//! - When the broker ends an entity for good, it ends in [`State::ClosedByBroker`],
//!   [`State::Terminated`] (a producer of a terminated topic), [`State::Fenced`] or
//!   [`State::Failed`], and its calls fail with the matching error. (A consumer that reached
//!   the end of a terminated topic does not end: it stays attached until closed, as in Java;
//!   see [`Consumer::has_reached_end_of_topic`].) A lost connection is not an end: the entity is `Reconnecting` and
//!   carries on (producers keep what they hold, acks are kept for the new subscription).
//!
//! ## Logging
//!
//! The crate logs through [`tracing`](https://docs.rs/tracing); install any subscriber, e.g.
//! `tracing_subscriber::fmt().with_env_filter("pulsar_sdk=info").init()`. Targets are the
//! module paths (`pulsar_sdk::connection::task`, `pulsar_sdk::producer::task`,
//! `pulsar_sdk::consumer::task`, `pulsar_sdk::entity`, `pulsar_sdk::partitions`, ...), so a
//! filter such as `pulsar_sdk=info,pulsar_sdk::connection=debug` works. Levels:
//! - `error`: an internal bug (an invalid lifecycle transition); never expected;
//! - `warn`: trouble being handled or reported elsewhere: a connection closed for a protocol
//!   violation, a send timeout, a close that timed out, a failed dead-letter publish, a
//!   partition that failed to be added, an insecure TLS setting;
//! - `info`: rare, notable events: a connection opened, or lost (with its cause), a producer
//!   or consumer detached (with why) and re-created, one closed for good by the broker
//!   (PIP-139), a consumer re-subscribed, a topic gained partitions, a message dead-lettered,
//!   a Failover active consumer change, a switch to another cluster (PIP-121);
//! - `debug`: every state change, create and close, and connection detail.
//!
//! Nothing is logged per message above `trace` (anomalies aside: a malformed message from the
//! broker is a `warn`). Connections, producers and consumers run in `connection` (id, broker),
//! `producer` (topic, id, name) and `consumer` (topic, id, subscription) spans. Credentials
//! (tokens, passwords, keys) are never logged, at any level.
//!
//! ## Statistics and metrics
//!
//! [`Producer::stats`], [`Consumer::stats`] and [`Reader::stats`] return snapshots of cheap
//! counters (see [`stats`]). With the cargo feature `metrics`, the client also records
//! upstream's PIP-342 metrics through the [`metrics`](https://docs.rs/metrics) facade for the
//! application's exporter (see `pulsar_sdk::metrics` and `examples/prometheus.rs`).
//!
//! ## Interceptors and tracing
//!
//! [`interceptor`]s run code of the application's at each step of a message's life (Java's
//! `ProducerInterceptor` / `ConsumerInterceptor`). With the cargo feature `opentelemetry`,
//! `ClientBuilder::tracing(true)` (or `tracer(..)`) records OpenTelemetry `send` and `process`
//! spans and carries the W3C trace context in message properties: see
//! [`guide::observing`] and `examples/tracing.rs`.
#![warn(missing_docs)]
#![deny(unreachable_pub)]
// On docs.rs (nightly, `--cfg docsrs`), items behind a cargo feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod auth;
pub(crate) mod backoff_policy;
pub(crate) mod batch;
pub mod client;
pub(crate) mod codec;
pub(crate) mod commands;
pub mod compression;
pub(crate) mod connection;
pub mod consumer;
pub(crate) mod core;
#[cfg(feature = "encryption")]
#[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
pub mod crypto;
pub(crate) mod entity;
pub mod error;
pub mod failover;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod guide;
pub(crate) mod inbox;
pub mod interceptor;
pub mod lifecycle;
pub(crate) mod lookup;
pub mod message;
pub mod message_id;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "opentelemetry")]
pub(crate) mod otel;
pub(crate) mod partitions;
pub(crate) mod pool;
pub mod producer;
pub(crate) mod proto;
pub(crate) mod retry;
pub(crate) mod routing_hash;
pub mod schema;
pub mod service_info;
pub mod service_url;
pub mod stats;
pub mod table_view;
pub mod topic;
pub(crate) mod topic_list;
#[cfg(feature = "transactions")]
#[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
pub mod transaction;
pub(crate) mod updates;
pub(crate) mod util;
pub(crate) mod watcher;

#[cfg(feature = "mock-broker")]
pub mod mock;

pub use auth::{Authentication, AuthenticationProvider, BasicAuth, TlsAuth, TokenAuth};
pub use backoff_policy::BackoffPolicy;
pub use client::{Client, ClientBuilder};
pub use compression::CompressionType;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use connection::tls::TlsOptions;
pub use connection::{BrokerFeatures, ConnectionInfo, ConnectionStats};
pub use consumer::TopicsChanged;
pub use consumer::{
    Acker, BatchReceivePolicy, Consumer, ConsumerBuilder, ConsumerOptions, DeadLetterPolicy,
    InitialPosition, Messages, Reader, ReaderBuilder, RedeliveryBackoff, SubscriptionMode,
    SubscriptionType,
};
pub use error::{Error, QueueLimit, Result, ServerError, TlsFailure};
pub use failover::{AutoClusterFailover, ServiceInfoProvider, ServiceInfoUpdater};
pub use lifecycle::{State, StateStream};
pub use lookup::BrokerLookup;
pub use message::{Message, ProducerMessage};
pub use message_id::{ChunkStart, MessageId};
pub use producer::{Producer, ProducerBuilder, SendFuture};
pub use schema::{Schema, SchemaError, SchemaInfo, SchemaType};
pub use service_info::{ServiceInfo, ServiceInfoBuilder};
pub use service_url::ServiceUrl;
pub use stats::{ClientStats, ConsumerStats, ProducerStats};
pub use table_view::{TableView, TableViewBuilder, TableViewUpdate, TableViewUpdates};
pub use topic::TopicName;
pub use topic_list::RegexSubscriptionMode;
#[cfg(feature = "transactions")]
#[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
pub use transaction::{Transaction, TransactionBuilder, TransactionError, TransactionState, TxnId};
pub use updates::{TopicUpdates, Updates};

/// The Pulsar protocol version this client speaks (upstream `ProtocolVersion.v21`).
pub const PROTOCOL_VERSION: i32 = 21;

/// The client version string sent in CONNECT.
pub const CLIENT_VERSION: &str = concat!("pulsar-sdk-rust-", env!("CARGO_PKG_VERSION"));
