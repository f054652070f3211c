//! Guide: testing an application against the mock broker, with faults.
//!
//! The mock broker is an in-process Pulsar broker (cargo feature `mock-broker`) that an
//! application's own tests can run against and script, at the level of librdkafka's
//! MockCluster: errors pushed per request type, a round-trip time, stalls and cut connections,
//! brokers taken down and brought back, topics moved between brokers, a broker cut from its
//! storage. It listens on `127.0.0.1` only, and stops (closing its port and connections) when
//! its last handle is dropped.
//!
//! # Drop-in
//!
//! Start the kit with one call and hand its service URL to the application, as its
//! configuration would name a real cluster:
//!
//! - [`MockBroker::start`](super::MockBroker::start): one broker,
//!   [`service_url`](super::MockBroker::service_url) is `pulsar://127.0.0.1:PORT`;
//! - [`MockCluster::start`](super::MockCluster::start): N brokers sharing one storage,
//!   [`service_url`](super::MockCluster::service_url) names them all, so clients reach the
//!   cluster while any broker is up.
//!
//! Add the feature for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! pulsar-sdk = { version = "0.1", features = ["mock-broker"] }
//! ```
//!
//! # Faults
//!
//! | Fault | Call |
//! |---|---|
//! | answer the next N requests of a type (PRODUCER, SUBSCRIBE, SEND, LOOKUP, PARTITIONED_METADATA, ACK with receipt, FLOW, SEEK, ...) with an error, optionally late, for one topic or connection | [`MockBroker::push_error`](super::MockBroker::push_error) with a [`MockError`](super::MockError); [`MockBroker::push_errors`](super::MockBroker::push_errors); cluster-wide [`MockCluster::push_error`](super::MockCluster::push_error) |
//! | which pushed errors were hit | [`MockBroker::consumed_errors`](super::MockBroker::consumed_errors), [`MockBroker::wait_for_consumed_errors`](super::MockBroker::wait_for_consumed_errors), [`MockBroker::pending_errors`](super::MockBroker::pending_errors) |
//! | a round-trip time on everything a broker sends | [`MockBroker::set_round_trip_time`](super::MockBroker::set_round_trip_time) |
//! | slow responses only (PONG on time) | [`MockBroker::set_response_delay`](super::MockBroker::set_response_delay) |
//! | a stalled broker: accepts and reads, answers nothing | [`MockBroker::set_unresponsive`](super::MockBroker::set_unresponsive), [`MockCluster::set_stalled`](super::MockCluster::set_stalled) |
//! | a connection closed, or cut in the middle of a frame | [`MockBroker::drop_connection`](super::MockBroker::drop_connection), [`MockBroker::drop_connection_mid_frame`](super::MockBroker::drop_connection_mid_frame) |
//! | a broker down (port refuses) and up again | [`MockCluster::broker_down`](super::MockCluster::broker_down) / [`broker_up`](super::MockCluster::broker_up), [`MockBroker::take_down`](super::MockBroker::take_down) / [`bring_up`](super::MockBroker::bring_up), [`MockBroker::restart`](super::MockBroker::restart) |
//! | a topic moved to broker K, with or without PIP-307's assigned URL | [`MockCluster::move_topic`](super::MockCluster::move_topic) with [`TopicMove`](super::TopicMove) |
//! | a broker cut from its storage: every write fails with a retriable error | [`MockCluster::set_storage_cut`](super::MockCluster::set_storage_cut), [`MockBroker::set_storage_cut`](super::MockBroker::set_storage_cut) |
//! | lookups that fail or redirect for good | [`MockBroker::set_lookup_error`](super::MockBroker::set_lookup_error), [`MockBroker::redirect_lookups_to`](super::MockBroker::redirect_lookups_to) |
//!
//! To wait for something to happen, wait for what the broker observes
//! ([`MockBroker::wait_for_command`](super::MockBroker::wait_for_command),
//! [`wait_for_consumed_errors`](super::MockBroker::wait_for_consumed_errors), the admin view
//! such as [`producers`](super::MockBroker::producers)) rather than sleeping. Tests over
//! [`MockBroker::connect_duplex`](super::MockBroker::connect_duplex) also run with tokio's
//! time paused.
//!
//! # A complete example
//!
//! A billing service consumes orders, writes one invoice per order and acknowledges the order
//! once its invoice is stored. Its test runs it against the kit through a broker restart and a
//! pushed storage error, and checks that every order is billed. This is
//! `src/mock/guide_example.rs`, which `tests/protocol/mock_kit/guide.rs` runs with `cargo test`:
//!
//! ```ignore
#![doc = include_str!("guide_example.rs")]
//! ```
