//! The real-broker tier: the client against pulsar-lite (PyPI `pulsar-lite`, started by the
//! `support` crate on a free port). Tests share one broker per process
//! (`support::shared_broker()`) with a fresh topic and subscription each, so they run in
//! parallel; tests that stop, restart or reconfigure a broker start their own
//! (`support::PulsarLite`). The broker's quirks are listed in `tests/support/src/broker.rs`.

mod batch_receive;
mod batching;
mod chunking;
mod consumer;
mod dead_letter;
mod examples;
mod failover;
mod growth;
mod multi_topic;
mod non_persistent;
mod partitioned;
mod produce_consume;
mod pulsar_lite_smoke;
mod restart;
mod table_view;
mod tls;
mod transactions;
mod zero_queue;
