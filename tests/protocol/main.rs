//! The protocol tier: the client against the scriptable mock broker (`pulsar_sdk::mock`), one
//! module per concern. Everything here runs in-process, over loopback TCP or in-memory pipes;
//! nothing starts pulsar-lite (that is `tests/real_broker/`).
//!
//! Shared helpers live in the `support` crate (`tests/support/`; `common` is its old name and
//! still works: `use support as common;`).

// The misbehaving broker some consumer and multi-topic tests script (`tests/hostile/broker.rs`);
// it brings its counting allocator along, which the tests here do not read. Tests that measure
// the heap live in `tests/hostile/`, whose process they have to themselves.
#[path = "../hostile/broker.rs"]
mod hostile;

/// Producing: sends, batching, receipts, flow control, limits.
mod producer {
    mod basics;
    mod batch_limits;
    mod permit_counts;
    mod receipts_and_limits;
    mod send_path;
}

/// Chunked messages (PIP-37), both sides.
mod chunking {
    mod consumer;
    mod ids_and_limits;
    mod producer;
    mod reassembly;
}

/// Consuming: receive, ack, seek, readers, table views, the hot path, cancel safety.
mod consumer {
    mod acker;
    mod auto_scaled_queue;
    mod basics;
    mod batch_receive;
    mod budget;
    mod cancel_safety;
    mod hot_path;
    mod records;
    mod seek_readers;
    mod table_view;
    mod zero_queue;
}

/// Several topics: multi-topic and pattern consumers, partition updates.
mod topics {
    mod multi_topic;
    mod multi_topic_probes;
    mod partition_updates;
    mod pattern;
}

/// The lifecycle of producers, consumers and the client: reconnects, broker-initiated close
/// (PIP-139), the entity core, close semantics, lookup and the connection pool.
mod lifecycle {
    mod broker_close;
    mod client_lookup;
    mod close_semantics;
    mod cluster_failover;
    mod cluster_failover_probes;
    mod entity_core;
    mod entity_core_probes;
    mod stack_depth;
    mod update_streams;
}

/// Typed messages and the schema registry.
mod schema {
    mod registry;
    mod upstream_rules;
}

/// TLS, authentication providers, OAuth2.
mod security {
    mod auth;
    mod encryption;
    mod encryption_hostile;
    mod encryption_redelivery;
    mod oauth2;
    mod tls;
    mod tls_auth_probes;
}

/// Stats and tracing output (metrics need the global recorder: `tests/metrics/`).
mod observability {
    mod interceptors;
    mod otel;
    mod stats;
    mod tracing_events;
}

/// Transactions (PIP-31): the coordinator, transactional sends and acknowledgements, and the
/// mock's transaction buffer and pending acks.
mod transactions {
    mod acks;
    mod batched;
    mod coordinator;
    mod exactly_once;
    mod failover;
    mod produce;
    mod support;
}

/// The mock kit itself: fault injection, the guide's example, a whole service under faults.
mod mock_kit {
    mod faults;
    mod guide;
    mod pipeline;
}
