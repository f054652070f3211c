//! Statistics of producers and consumers: [`Producer::stats`](crate::Producer::stats),
//! [`Consumer::stats`](crate::Consumer::stats) and [`Reader::stats`](crate::Reader::stats)
//! return a snapshot, per partition and summed over them.
//!
//! Counting is cheap: each partition's task counts with relaxed atomics it alone writes (no
//! lock per message); a snapshot reads them. Counters only grow for the life of the producer
//! or consumer; gauges (pending messages, the receiver queue) are the value when the task
//! last woke. Send latency is kept in a fixed-memory histogram (about 2.4 KB per partition,
//! percentiles within 12.5%), allocated at the partition's first receipt: a producer that has
//! sent nothing holds none of it.
//!
//! For operators, the cargo feature `metrics` also records upstream's PIP-342 metrics through
//! the [`metrics`](https://docs.rs/metrics) facade (see the `metrics` module when the feature
//! is on).
//!
//! ```no_run
//! # async fn demo(producer: pulsar_sdk::Producer) {
//! let stats = producer.stats();
//! println!(
//!     "sent {} messages, p99 {:?}, {} pending",
//!     stats.totals.messages_sent, stats.totals.send_latency.p99, stats.totals.pending_messages
//! );
//! # }
//! ```

pub(crate) mod counters;
mod histogram;
pub(crate) mod sink;

use std::time::Duration;

use crate::lifecycle::State;

pub(crate) use counters::{ConsumerCounters, LinkCounters, ProducerCounters};

/// A snapshot of the client's own statistics ([`Client::stats`](crate::Client::stats)): the
/// cluster it uses and how often it moved (cluster-level failover, PIP-121).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The service URL of the cluster the client uses now.
    pub service_url: crate::ServiceUrl,
    /// Cluster switches since the client was built (by
    /// [`Client::update_service_info`](crate::Client::update_service_info) or a
    /// [`ServiceInfoProvider`](crate::failover::ServiceInfoProvider)); read together with
    /// `service_url`, so the two always match.
    pub cluster_switches: u64,
    /// Broker connections opened so far, on every cluster.
    pub connections_opened: u64,
}

/// Send latency, per message: from the start of its entry (a single message: when the
/// producer's task took it; a batch: when its first message was added, so batching delay is
/// included, as in upstream's `message.send.duration`) to the broker's receipt. Percentiles
/// are within 12.5% (the histogram's bucket width), rounded up and never above `max`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencySummary {
    /// Messages measured (those that got a receipt).
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// The slowest.
    pub max: Duration,
}

/// Sends that failed, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendErrors {
    /// Failed with [`Error::Timeout`](crate::Error::Timeout) (the send timeout passed).
    pub timeout: u64,
    /// Refused by the broker for that message (a SendError such as `NotAllowed`).
    pub broker: u64,
    /// Refused by the client before sending (e.g. too large for the broker's limit).
    pub rejected: u64,
    /// Failed because the producer ended (closed by the application or the broker, topic
    /// terminated, fenced) before their receipt.
    pub closed: u64,
}

impl SendErrors {
    /// All failed sends.
    pub fn total(&self) -> u64 {
        self.timeout + self.broker + self.rejected + self.closed
    }

    fn add(&mut self, o: &SendErrors) {
        self.timeout += o.timeout;
        self.broker += o.broker;
        self.rejected += o.rejected;
        self.closed += o.closed;
    }
}

/// Connection trouble of one producer or consumer (or the sum over partitions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconnectStats {
    /// Times it was re-created on a (new) connection after losing one or being closed by the
    /// broker with reconnect allowed.
    pub reconnects: u64,
    /// Time spent without a connection since creation (including a reconnect under way).
    pub time_reconnecting: Duration,
}

impl ReconnectStats {
    fn add(&mut self, o: &ReconnectStats) {
        self.reconnects += o.reconnects;
        self.time_reconnecting += o.time_reconnecting;
    }
}

/// The counters of one partition producer, or their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerCounts {
    /// Messages the broker confirmed (receipted).
    pub messages_sent: u64,
    /// Bytes of the confirmed SEND frames on the wire (payloads, metadata and framing).
    pub bytes_sent: u64,
    /// Failed sends, by kind.
    pub send_errors: SendErrors,
    /// Messages sent or queued and not yet confirmed.
    pub pending_messages: u64,
    /// Bytes of the pending SEND frames (messages still in an open batch not included).
    pub pending_bytes: u64,
    /// Send latency (merged over partitions in the totals).
    pub send_latency: LatencySummary,
    /// Reconnects and the time they took.
    pub reconnects: ReconnectStats,
}

/// One partition's producer (or the only one of a non-partitioned topic).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionProducerStats {
    /// The partition index (-1 for a non-partitioned topic).
    pub partition: i32,
    /// Its lifecycle state.
    pub state: State,
    /// Its counters.
    pub counts: ProducerCounts,
}

/// A snapshot of a producer's statistics (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerStats {
    /// The producer's state (aggregated like [`Producer::state`](crate::Producer::state)).
    pub state: State,
    /// Summed over partitions; latency percentiles over all partitions' samples.
    pub totals: ProducerCounts,
    /// Per partition, in index order (one entry for a non-partitioned topic).
    pub partitions: Vec<PartitionProducerStats>,
    /// Panics of the producer's interceptors caught so far (see [`crate::interceptor`]).
    pub interceptor_panics: u64,
}

/// The counters of one partition consumer, or their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerCounts {
    /// Messages the application received (`recv` / the stream), not counting those
    /// discarded after a reconnect or seek.
    pub messages_received: u64,
    /// Payload bytes of those messages.
    pub bytes_received: u64,
    /// Acknowledgements by the application (individual and cumulative ack calls, the
    /// acknowledgements of dead-lettered messages included).
    pub acks: u64,
    /// Message ids acknowledged to the broker (individual ids, batch-index acks and
    /// cumulative acks each count one; a batch acked message by message counts once, when it
    /// is complete, unless batch-index acks are on).
    pub acks_sent: u64,
    /// Negative acknowledgements by the application.
    pub nacks: u64,
    /// Redelivery requests sent to the broker (after nacks, ack timeouts or failed
    /// dead-letter publishes; on Exclusive / Failover one request rewinds everything unacked).
    pub redelivery_requests: u64,
    /// Messages not acknowledged within the ack timeout.
    pub ack_timeouts: u64,
    /// Entries discarded because they could not be decoded (each reported as an error item).
    pub discarded_undecodable: u64,
    /// Messages published to the dead-letter topic (then acked on their own topic).
    pub dlq_sends: u64,
    /// Messages in the receiver queue, not yet taken by the application.
    pub receiver_queue_len: u64,
    /// The receiver queue's size (its share of it for a partition).
    pub receiver_queue_size: u64,
    /// Reconnects and the time they took.
    pub reconnects: ReconnectStats,
}

/// One partition's consumer (or the only one of a non-partitioned topic).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionConsumerStats {
    /// The topic of this member (a partition, or the retry letter topic's).
    pub topic: String,
    /// The partition index (-1 for a non-partitioned topic).
    pub partition: i32,
    /// Its lifecycle state.
    pub state: State,
    /// Its counters.
    pub counts: ConsumerCounts,
}

/// A snapshot of a consumer's (or reader's) statistics (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// The consumer's state (aggregated like [`Consumer::state`](crate::Consumer::state)).
    pub state: State,
    /// Summed over partitions.
    pub totals: ConsumerCounts,
    /// Per member, in index order (one entry for a non-partitioned topic).
    pub partitions: Vec<PartitionConsumerStats>,
    /// Panics of the consumer's interceptors caught so far (see [`crate::interceptor`]).
    pub interceptor_panics: u64,
}

impl ProducerStats {
    pub(crate) fn aggregate(state: State, parts: Vec<(i32, State, &ProducerCounters)>) -> Self {
        let mut totals = ProducerCounts::default();
        let mut latency = histogram::HistogramCounts::default();
        let mut partitions = Vec::with_capacity(parts.len());
        for (partition, state, c) in parts {
            let (counts, hist) = c.snapshot();
            totals.messages_sent += counts.messages_sent;
            totals.bytes_sent += counts.bytes_sent;
            totals.send_errors.add(&counts.send_errors);
            totals.pending_messages += counts.pending_messages;
            totals.pending_bytes += counts.pending_bytes;
            totals.reconnects.add(&counts.reconnects);
            latency.merge(&hist);
            partitions.push(PartitionProducerStats {
                partition,
                state,
                counts,
            });
        }
        totals.send_latency = latency.summary();
        ProducerStats {
            state,
            totals,
            partitions,
            interceptor_panics: 0,
        }
    }
}

impl ConsumerStats {
    pub(crate) fn aggregate(state: State, partitions: Vec<PartitionConsumerStats>) -> Self {
        let mut t = ConsumerCounts::default();
        for p in &partitions {
            let c = &p.counts;
            t.messages_received += c.messages_received;
            t.bytes_received += c.bytes_received;
            t.acks += c.acks;
            t.acks_sent += c.acks_sent;
            t.nacks += c.nacks;
            t.redelivery_requests += c.redelivery_requests;
            t.ack_timeouts += c.ack_timeouts;
            t.discarded_undecodable += c.discarded_undecodable;
            t.dlq_sends += c.dlq_sends;
            t.receiver_queue_len += c.receiver_queue_len;
            t.receiver_queue_size += c.receiver_queue_size;
            t.reconnects.add(&c.reconnects);
        }
        ConsumerStats {
            state,
            totals: t,
            partitions,
            interceptor_panics: 0,
        }
    }
}
