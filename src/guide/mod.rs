//! # User guide
//!
//! A walk through the client, one chapter per task. Each chapter's snippets are compiled as
//! doc tests; the ones that need a real broker are marked `no_run`, the others run against
//! the crate's in-process mock broker (cargo feature `mock-broker`).
//!
//! | Chapter | What it covers |
//! |---|---|
//! | [`connecting`] | the [`Client`](crate::Client), service URLs, TLS and mutual TLS, authentication (token, basic, TLS, OAuth2, your own provider) |
//! | [`producing`] | sending, what a receipt means, batching, keys, compression, send timeouts, queue limits, cancel safety, flush and close |
//! | [`consuming`] | subscription types, acks, the cloneable [`Acker`](crate::Acker), nacks, ack timeout, dead-letter and retry topics, seek, readers |
//! | [`table_views`] | a topic as a key → latest value map that follows it: tombstones, refresh, listeners and change streams, partitions |
//! | [`encryption`] | end-to-end encryption (PIP-4) with the official clients' format: key readers, PEM files, failure actions (cargo feature `encryption`) |
//! | [`partitions`] | partitioned topics, key routing, and growing with the topic (PIP-247 watchers or polling) |
//! | [`observing`] | interceptors, OpenTelemetry tracing (a trace from producer to consumer), statistics |
//! | [`errors`] | lifecycle states, which errors are retried and which are terminal, and how to match them |
//! | [`testing`] | testing an application against the mock broker |
//! | `transactions` | transactions (PIP-31): transactional sends and acks, commit, abort, errors, what pulsar-lite lacks (cargo feature `transactions`) |
//! | [`features`] | the Java client's features, each with where it is here or what to do instead (checked against the code) |
//! | [`java_differences`] | what behaves differently from the Java client (and why) |
//!
//! The [crate root](crate) gathers what `close` does on every entity and how the crate logs.
//!
//! ## In one page
//!
//! ```no_run
//! use pulsar_sdk::{Client, ProducerMessage, SubscriptionType};
//!
//! # async fn demo() -> pulsar_sdk::Result<()> {
//! // One client per application; cheap to clone. No connection is opened by `build`.
//! let client = Client::builder().service_url("pulsar://localhost:6650").build()?;
//!
//! // `send` queues the message and hands back its receipt (a future of the message id).
//! let producer = client.producer("orders").create().await?;
//! let receipt = producer.send(ProducerMessage::new("order-1").key("customer-7")).await?;
//! let id = receipt.await?; // stored by the broker
//!
//! let mut consumer = client
//!     .consumer("orders")
//!     .subscription("billing")
//!     .subscription_type(SubscriptionType::Shared)
//!     .subscribe()
//!     .await?;
//! let msg = consumer.recv().await?;
//! consumer.ack(&msg)?; // grouped and sent in the background
//!
//! client.close().await?; // graceful: flushes producers and acks
//! # let _ = id; Ok(()) }
//! ```

pub mod connecting;
pub mod consuming;
#[cfg(feature = "encryption")]
#[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
pub mod encryption;
pub mod errors;
pub mod features;
pub mod java_differences;
pub mod observing;
pub mod partitions;
pub mod producing;
pub mod table_views;
pub mod testing;
#[cfg(feature = "transactions")]
#[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
pub mod transactions;
