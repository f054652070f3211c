//! # Testing an application with the mock broker
//!
//! The crate ships an in-process Pulsar broker for tests, [`MockBroker`] (cargo feature
//! `mock-broker`; enable it for tests only). It speaks the binary protocol on a loopback port,
//! stores messages, keeps durable subscriptions and redelivers, so an application's own tests
//! run against it with nothing else installed; only the service URL changes:
//!
//! ```toml
//! [dev-dependencies]
//! pulsar-sdk = { version = "0.1", features = ["mock-broker"] }
//! ```
//!
//! Beyond behaving like a broker, it can be told to misbehave (errors pushed per request
//! type, round-trip time, stalls, dropped connections, restarts, topics moved between brokers
//! of a [`MockCluster`], a storage cut), and it shows what it holds (stored messages, backlogs,
//! producers and consumers, every command received). **[`mock::guide`]** is the full guide,
//! with a complete application test; this chapter is a taste.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
//! use pulsar_sdk::{Client, InitialPosition, ServerError};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("orders").create().await?;
//! let mut consumer = client
//!     .consumer("orders")
//!     .subscription("billing")
//!     .initial_position(InitialPosition::Earliest)
//!     .subscribe()
//!     .await?;
//!
//! producer.send_and_wait("order 1").await?;
//! broker.restart().await?; // every connection drops; the data stays
//! producer.send_and_wait("order 2").await?; // the producer reconnected by itself
//!
//! // The next SEND is refused with a retriable error: the producer reconnects and re-sends.
//! broker.push_error(MockError::new(MockRequest::Send, ServerError::PersistenceError, "disk"));
//! producer.send_and_wait("order 3").await?;
//!
//! for expected in ["order 1", "order 2", "order 3"] {
//!     let msg = consumer.recv().await?;
//!     assert_eq!(msg.payload_str(), Some(expected));
//!     consumer.ack(&msg)?;
//! }
//! consumer.close().await?; // flushes the acks
//! assert_eq!(broker.topic_messages("persistent://public/default/orders"), 3);
//! assert_eq!(broker.subscription_backlog("persistent://public/default/orders", "billing"), 0);
//! # Ok(()) }
//! ```
//!
//! Tips:
//!
//! - Wait for what the broker observes ([`MockBroker::wait_for_command`], the admin view)
//!   rather than sleeping.
//! - Set [`negative_ack_delay`](crate::ConsumerBuilder::negative_ack_delay) to a few
//!   milliseconds in tests: with the default 60 s a poison message takes minutes to reach the
//!   dead-letter topic.
//! - `subscription_backlog` counts unacknowledged *entries* (a batch is one) and
//!   `topic_messages` stored entries; use `batching(false)` when a test counts messages.
//!
#![cfg_attr(
    feature = "mock-broker",
    doc = "[`MockBroker`]: crate::mock::MockBroker
[`MockBroker::wait_for_command`]: crate::mock::MockBroker::wait_for_command
[`MockCluster`]: crate::mock::MockCluster
[`mock::guide`]: crate::mock::guide"
)]
#![cfg_attr(
    not(feature = "mock-broker"),
    doc = "[`MockBroker`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/mock/struct.MockBroker.html
[`MockBroker::wait_for_command`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/mock/struct.MockBroker.html#method.wait_for_command
[`MockCluster`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/mock/struct.MockCluster.html
[`mock::guide`]: https://docs.rs/pulsar-sdk/latest/pulsar_sdk/mock/guide/index.html"
)]
