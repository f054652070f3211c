//! Operator metrics (cargo feature `metrics`): upstream's PIP-342 metric names and units,
//! recorded through the [`metrics`](https://docs.rs/metrics) facade. The application installs
//! the recorder of its exporter (Prometheus, StatsD, OpenTelemetry ...) before creating the
//! client; without a recorder, or without the feature, nothing is recorded (without the
//! feature the calls compile to nothing and the `metrics` crate is not linked).
//!
//! # Why the `metrics` crate
//!
//! It is a facade like `log`/`tracing`: one small dependency (no SDK, no async runtime, no
//! protobuf) and handles that cost an atomic update in the recorder. Exporters exist for
//! Prometheus, OpenTelemetry, StatsD and others, so an application that uses OpenTelemetry
//! still gets these metrics (through `metrics` → OpenTelemetry bridges), while the lighter
//! facade keeps the OpenTelemetry API out of this crate's dependencies. Names and units follow
//! upstream's OpenTelemetry ones (PIP-342); exporters may rewrite them (the Prometheus
//! exporter turns `.` into `_`, e.g. `pulsar_client_producer_message_send_duration`).
//!
//! # Labels
//!
//! `pulsar.tenant` and `pulsar.namespace` on producer and consumer metrics (plus
//! `pulsar.subscription` on consumer ones). `pulsar.topic` (the partitioned topic's name)
//! and `pulsar.partition` only when the client asks for them with
//! [`ClientBuilder::metrics_topic_labels`](crate::ClientBuilder::metrics_topic_labels): one
//! series per topic and partition adds up fast (the Go client's per-topic labels made
//! hundreds of thousands of series, pulsar-client-go #500). Histograms carry
//! `pulsar.response.status`.
//!
//! ```no_run
//! # fn demo() -> pulsar_sdk::Result<()> {
//! // Install the exporter's recorder first (see examples/prometheus.rs), then:
//! pulsar_sdk::metrics::describe();
//! let client = pulsar_sdk::Client::builder()
//!     .service_url("pulsar://localhost:6650")
//!     .metrics_topic_labels(false) // the default: namespace labels only
//!     .build()?;
//! # Ok(()) }
//! ```

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

/// The metric names (PIP-342).
pub mod names {
    /// Counter (connections): connections opened.
    pub const CONNECTION_OPENED: &str = "pulsar.client.connection.opened";
    /// Counter (connections): connections closed.
    pub const CONNECTION_CLOSED: &str = "pulsar.client.connection.closed";
    /// Counter (connections): failed connection attempts.
    pub const CONNECTION_FAILED: &str = "pulsar.client.connection.failed";
    /// Counter (sessions): producers created (each partition's producer counts).
    pub const PRODUCER_OPENED: &str = "pulsar.client.producer.opened";
    /// Counter (sessions): producers closed.
    pub const PRODUCER_CLOSED: &str = "pulsar.client.producer.closed";
    /// Histogram (seconds): publish latency of confirmed sends, batching delay included (from
    /// the start of the entry, a batch's first message, to the receipt). Unlike upstream, one
    /// sample per entry (a batch counts once), not per message: exporters pay per sample, and
    /// a batch's messages share one receipt. The per-message distribution is in
    /// [`Producer::stats`](crate::Producer::stats).
    pub const PRODUCER_SEND_DURATION: &str = "pulsar.client.producer.message.send.duration";
    /// Counter (messages): messages confirmed by the broker (not in PIP-342; the name of
    /// OpenTelemetry's Java Pulsar instrumentation).
    pub const PRODUCER_SEND_COUNT: &str = "pulsar.client.producer.message.send.count";
    /// Counter (bytes): bytes published (confirmed SEND frames).
    pub const PRODUCER_SEND_SIZE: &str = "pulsar.client.producer.message.send.size";
    /// Gauge (messages): messages sent and not yet confirmed.
    pub const PRODUCER_PENDING_COUNT: &str = "pulsar.client.producer.message.pending.count";
    /// Gauge (bytes): bytes of those messages' frames.
    pub const PRODUCER_PENDING_SIZE: &str = "pulsar.client.producer.message.pending.size";
    /// Counter (sessions): consumers subscribed (each partition's consumer counts).
    pub const CONSUMER_OPENED: &str = "pulsar.client.consumer.opened";
    /// Counter (sessions): consumers closed.
    pub const CONSUMER_CLOSED: &str = "pulsar.client.consumer.closed";
    /// Counter (messages): messages received by the application.
    pub const CONSUMER_RECEIVED_COUNT: &str = "pulsar.client.consumer.message.received.count";
    /// Counter (bytes): payload bytes received by the application.
    pub const CONSUMER_RECEIVED_SIZE: &str = "pulsar.client.consumer.message.received.size";
    /// Gauge (messages): messages in the receiver queue.
    pub const CONSUMER_RECEIVE_QUEUE_COUNT: &str = "pulsar.client.consumer.receive_queue.count";
    /// Counter (messages): acknowledgements by the application (a cumulative ack counts one).
    pub const CONSUMER_ACK: &str = "pulsar.client.consumer.message.ack";
    /// Counter (messages): negative acknowledgements.
    pub const CONSUMER_NACK: &str = "pulsar.client.consumer.message.nack";
    /// Counter (messages): messages sent to the dead-letter topic.
    pub const CONSUMER_DLQ: &str = "pulsar.client.consumer.message.dlq";
    /// Counter (messages): messages not acknowledged within the ack timeout.
    pub const CONSUMER_ACK_TIMEOUT: &str = "pulsar.client.consumer.message.ack.timeout";
    /// Histogram (seconds): lookups, by `pulsar.lookup.type` (`topic`, `metadata`).
    pub const LOOKUP_DURATION: &str = "pulsar.client.lookup.duration";
}

/// Describes every metric (unit and help text) to the installed recorder. Optional; call it
/// after installing the recorder (the facade forwards descriptions only to a recorder that
/// exists).
pub fn describe() {
    use names::*;
    let c = |n: &'static str, u: Unit, d: &'static str| describe_counter!(n, u, d);
    let g = |n: &'static str, u: Unit, d: &'static str| describe_gauge!(n, u, d);
    let h = |n: &'static str, d: &'static str| describe_histogram!(n, Unit::Seconds, d);
    c(
        CONNECTION_OPENED,
        Unit::Count,
        "The number of connections opened",
    );
    c(
        CONNECTION_CLOSED,
        Unit::Count,
        "The number of connections closed",
    );
    c(
        CONNECTION_FAILED,
        Unit::Count,
        "The number of failed connection attempts",
    );
    c(
        PRODUCER_OPENED,
        Unit::Count,
        "The number of producer sessions opened",
    );
    c(
        PRODUCER_CLOSED,
        Unit::Count,
        "The number of producer sessions closed",
    );
    h(
        PRODUCER_SEND_DURATION,
        "Publish latency of an entry (a message or a batch)",
    );
    c(
        PRODUCER_SEND_COUNT,
        Unit::Count,
        "The number of messages published",
    );
    c(
        PRODUCER_SEND_SIZE,
        Unit::Bytes,
        "The number of bytes published",
    );
    g(
        PRODUCER_PENDING_COUNT,
        Unit::Count,
        "Messages in the producer's queue waiting for a receipt",
    );
    g(
        PRODUCER_PENDING_SIZE,
        Unit::Bytes,
        "Bytes in the producer's queue waiting for a receipt",
    );
    c(
        CONSUMER_OPENED,
        Unit::Count,
        "The number of consumer sessions opened",
    );
    c(
        CONSUMER_CLOSED,
        Unit::Count,
        "The number of consumer sessions closed",
    );
    c(
        CONSUMER_RECEIVED_COUNT,
        Unit::Count,
        "Messages received by the consumer application",
    );
    c(
        CONSUMER_RECEIVED_SIZE,
        Unit::Bytes,
        "Bytes received by the consumer application",
    );
    g(
        CONSUMER_RECEIVE_QUEUE_COUNT,
        Unit::Count,
        "Messages in the consumer receive queue",
    );
    c(
        CONSUMER_ACK,
        Unit::Count,
        "The number of acknowledged messages",
    );
    c(
        CONSUMER_NACK,
        Unit::Count,
        "The number of negatively acknowledged messages",
    );
    c(
        CONSUMER_DLQ,
        Unit::Count,
        "The number of messages sent to the DLQ",
    );
    c(
        CONSUMER_ACK_TIMEOUT,
        Unit::Count,
        "Messages not acknowledged within the ack timeout",
    );
    h(LOOKUP_DURATION, "Duration of lookup operations");
}
