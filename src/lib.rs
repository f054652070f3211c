//! # pulsar-sdk
//!
//! A Rust client SDK for the Apache Pulsar binary protocol, built on tokio.
//!
//! Start with [`Client`]: it creates [`Producer`]s, [`Consumer`]s and [`Reader`]s. The crate
//! is layered:
//! - [`codec`]: the frame codec (simple and payload frames, CRC32C, size limits);
//! - [`connection`]: one multiplexed connection per broker (a ClientCnx in upstream terms), over
//!   TCP or TLS (cargo feature `tls`, on by default: rustls, no OpenSSL);
//! - [`auth`]: authentication providers (token, basic, TLS, OAuth2 with the `oauth2` feature);
//! - the connection pool and [`lookup`] (topic lookup with redirects, partitioned metadata);
//! - [`producer`] and [`consumer`]: one task per partition, each with its [`lifecycle`];
//! - [`topic`] and [`service_url`]: topic-name normalisation and service URL parsing;
//! - `mock` (cargo feature `mock-broker`): a scriptable in-memory broker for tests.
#![warn(missing_docs)]
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
pub mod lifecycle;
pub mod lookup;
pub mod message;
pub mod message_id;
pub(crate) mod partitions;
pub(crate) mod pool;
pub mod producer;
pub(crate) mod proto;
pub(crate) mod routing_hash;
pub mod service_url;
pub mod topic;
pub(crate) mod util;

#[cfg(feature = "mock-broker")]
pub mod mock;

pub use auth::{AuthenticationProvider, BasicAuth, TlsAuth, TokenAuth};
pub use backoff_policy::BackoffPolicy;
pub use client::{Client, ClientBuilder};
pub use compression::CompressionType;
pub use connection::{Authentication, BrokerFeatures, ConnectionInfo, ConnectionStats};
pub use consumer::{
    Acker, Consumer, ConsumerBuilder, ConsumerOptions, DeadLetterPolicy, InitialPosition, Reader,
    ReaderBuilder, RedeliveryBackoff, SubscriptionMode, SubscriptionType,
};
pub use error::{Error, Result, ServerError, TlsFailure};
pub use lifecycle::State;
pub use lookup::BrokerLookup;
pub use message::{Message, ProducerMessage};
pub use message_id::MessageId;
pub use producer::{Producer, ProducerBuilder, SendFuture};
pub use service_url::ServiceUrl;
pub use topic::TopicName;

/// The Pulsar protocol version this client speaks (upstream `ProtocolVersion.v21`).
pub const PROTOCOL_VERSION: i32 = 21;

/// The client version string sent in CONNECT.
pub const CLIENT_VERSION: &str = concat!("pulsar-sdk-rust-", env!("CARGO_PKG_VERSION"));
