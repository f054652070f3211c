//! # pulsar-sdk
//!
//! A Rust client SDK for the Apache Pulsar binary protocol, built on tokio.
//!
//! Start with [`Client`]: it creates [`Producer`]s, [`Consumer`]s and [`Reader`]s. New here?
//! The [`guide`] walks through connecting, producing, consuming, partitioned topics, errors,
//! testing with the mock broker and the differences from the Java client. The crate is
//! layered:
//! - [`codec`]: the frame codec (simple and payload frames, CRC32C, size limits);
//! - [`connection`]: one multiplexed connection per broker (a ClientCnx in upstream terms), over
//!   TCP or TLS (cargo feature `tls`, on by default: rustls, no OpenSSL);
//! - [`auth`]: authentication providers (token, basic, TLS, OAuth2 with the `oauth2` feature);
//! - the connection pool and [`lookup`] (topic lookup with redirects, partitioned metadata);
//! - [`producer`] and [`consumer`]: one task per partition, each with its [`lifecycle`];
//! - [`topic`] and [`service_url`]: topic-name normalisation and service URL parsing;
//! - `mock` (cargo feature `mock-broker`): a scriptable in-memory broker for tests.
//!
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
//!   a Failover active consumer change;
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
#![warn(missing_docs)]
// On docs.rs (nightly, `--cfg docsrs`), items behind a cargo feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod auth;
pub mod backoff_policy;
pub(crate) mod batch;
pub mod client;
pub mod codec;
pub(crate) mod commands;
pub mod compression;
pub mod connection;
pub mod consumer;
pub(crate) mod core;
pub(crate) mod entity;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod guide;
pub mod lifecycle;
pub mod lookup;
pub mod message;
pub mod message_id;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
pub(crate) mod partitions;
pub(crate) mod pool;
pub mod producer;
pub(crate) mod proto;
pub(crate) mod routing_hash;
pub mod schema;
pub mod service_url;
pub mod stats;
pub mod topic;
pub(crate) mod topic_list;
pub(crate) mod updates;
pub(crate) mod util;

#[cfg(feature = "mock-broker")]
pub mod mock;

pub use auth::{Authentication, AuthenticationProvider, BasicAuth, TlsAuth, TokenAuth};
pub use backoff_policy::BackoffPolicy;
pub use client::{Client, ClientBuilder};
pub use compression::CompressionType;
pub use connection::{BrokerFeatures, ConnectionInfo, ConnectionStats};
pub use consumer::TopicsChanged;
pub use consumer::{
    Acker, Consumer, ConsumerBuilder, ConsumerOptions, DeadLetterPolicy, InitialPosition, Reader,
    ReaderBuilder, RedeliveryBackoff, SubscriptionMode, SubscriptionType,
};
pub use error::{Error, QueueLimit, Result, ServerError, TlsFailure};
pub use lifecycle::{State, StateStream};
pub use lookup::BrokerLookup;
pub use message::{Message, ProducerMessage};
pub use message_id::{ChunkStart, MessageId};
pub use producer::{Producer, ProducerBuilder, SendFuture};
pub use schema::{Schema, SchemaError, SchemaInfo, SchemaType};
pub use service_url::ServiceUrl;
pub use stats::{ConsumerStats, ProducerStats};
pub use topic::TopicName;
pub use topic_list::RegexSubscriptionMode;
pub use updates::{TopicUpdates, Updates};

/// The Pulsar protocol version this client speaks (upstream `ProtocolVersion.v21`).
pub const PROTOCOL_VERSION: i32 = 21;

/// The client version string sent in CONNECT.
pub const CLIENT_VERSION: &str = concat!("pulsar-sdk-rust-", env!("CARGO_PKG_VERSION"));
