//! Where the counters go for operators: upstream's PIP-342 metrics through the `metrics`
//! facade with the cargo feature `metrics`, nowhere without it (every type here is then
//! zero-sized and every call an empty inline function: zero cost).
//!
//! Handles are registered once per producer / consumer / lookup kind, with their labels, so
//! recording is an atomic update in the application's recorder, no lookup by name per message.
//! Labels: `pulsar.tenant` and `pulsar.namespace` always; `pulsar.topic` (the partitioned
//! topic's name) and `pulsar.partition` only when the client opted in
//! ([`ClientBuilder::metrics_topic_labels`](crate::ClientBuilder::metrics_topic_labels)):
//! per-topic series multiply quickly (pulsar-client-go #500).

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

/// What labels a client's metrics carry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LabelPolicy {
    pub topic: bool,
}

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, Label};

    use super::LabelPolicy;
    use crate::metrics::names as n;

    /// Metrics are recorded.
    pub(crate) const ENABLED: bool = true;
    use crate::topic::TopicName;

    fn labels(
        policy: LabelPolicy,
        topic: &TopicName,
        extra: &[(&'static str, &str)],
    ) -> Vec<Label> {
        let mut l = vec![
            Label::new("pulsar.tenant", topic.tenant().to_string()),
            Label::new("pulsar.namespace", topic.namespace()),
        ];
        if policy.topic {
            l.push(Label::new(
                "pulsar.topic",
                topic.partitioned_topic_name().to_string(),
            ));
            if let Some(p) = topic.partition_index() {
                l.push(Label::new("pulsar.partition", p.to_string()));
            }
        }
        for (k, v) in extra {
            l.push(Label::new(*k, v.to_string()));
        }
        l
    }

    fn with_status(mut l: Vec<Label>, ok: bool) -> Vec<Label> {
        l.push(Label::new(
            "pulsar.response.status",
            if ok { "success" } else { "failed" },
        ));
        l
    }

    /// A producer's metric handles. Only confirmed sends are in the send duration
    /// (`pulsar.response.status="success"`): a failed send's latency is not known (a close,
    /// a timeout); failed sends are counted by kind in [`crate::stats::SendErrors`].
    pub(crate) struct ProducerSink {
        send_ok: Histogram,
        send_count: Counter,
        send_size: Counter,
        pending_count: Gauge,
        pending_size: Gauge,
        closed: Counter,
    }

    impl ProducerSink {
        pub(crate) fn new(policy: LabelPolicy, topic: &TopicName) -> Self {
            let l = labels(policy, topic, &[]);
            counter!(n::PRODUCER_OPENED, l.clone()).increment(1);
            ProducerSink {
                send_ok: histogram!(n::PRODUCER_SEND_DURATION, with_status(l.clone(), true)),
                send_count: counter!(n::PRODUCER_SEND_COUNT, l.clone()),
                send_size: counter!(n::PRODUCER_SEND_SIZE, l.clone()),
                pending_count: gauge!(n::PRODUCER_PENDING_COUNT, l.clone()),
                pending_size: gauge!(n::PRODUCER_PENDING_SIZE, l.clone()),
                closed: counter!(n::PRODUCER_CLOSED, l),
            }
        }

        /// One confirmed entry (a message or a batch). The duration gets one sample per
        /// entry, not per message: exporters pay per sample (the Prometheus exporter's cost
        /// per sample made per-message samples cost ~10% of a batched producer's CPU), and a
        /// batch's messages share its receipt. Messages are counted by `send_count`.
        #[inline]
        pub(crate) fn sent(&self, messages: u64, bytes: u64, latency: Duration) {
            // A chunk before the last completes no message (`messages == 0`): like upstream,
            // whose send callback runs once per chunked message, on the last chunk's
            // receipt, a chunked message is one duration sample; every chunk's bytes count.
            if messages > 0 {
                self.send_ok.record(latency.as_secs_f64());
                self.send_count.increment(messages);
            }
            self.send_size.increment(bytes);
        }

        #[inline]
        pub(crate) fn pending_delta(&self, messages: i64, bytes: i64) {
            if messages != 0 {
                self.pending_count.increment(messages as f64);
            }
            if bytes != 0 {
                self.pending_size.increment(bytes as f64);
            }
        }

        pub(crate) fn closed(&self) {
            self.closed.increment(1);
        }
    }

    /// A consumer's metric handles.
    pub(crate) struct ConsumerSink {
        received_count: Counter,
        received_size: Counter,
        queue_count: Gauge,
        ack: Counter,
        nack: Counter,
        dlq: Counter,
        ack_timeout: Counter,
        closed: Counter,
    }

    impl ConsumerSink {
        pub(crate) fn new(policy: LabelPolicy, topic: &TopicName, subscription: &str) -> Self {
            let l = labels(policy, topic, &[("pulsar.subscription", subscription)]);
            counter!(n::CONSUMER_OPENED, l.clone()).increment(1);
            ConsumerSink {
                received_count: counter!(n::CONSUMER_RECEIVED_COUNT, l.clone()),
                received_size: counter!(n::CONSUMER_RECEIVED_SIZE, l.clone()),
                queue_count: gauge!(n::CONSUMER_RECEIVE_QUEUE_COUNT, l.clone()),
                ack: counter!(n::CONSUMER_ACK, l.clone()),
                nack: counter!(n::CONSUMER_NACK, l.clone()),
                dlq: counter!(n::CONSUMER_DLQ, l.clone()),
                ack_timeout: counter!(n::CONSUMER_ACK_TIMEOUT, l.clone()),
                closed: counter!(n::CONSUMER_CLOSED, l),
            }
        }

        #[inline]
        pub(crate) fn received(&self, messages: u64, bytes: u64) {
            if messages > 0 {
                self.received_count.increment(messages);
            }
            if bytes > 0 {
                self.received_size.increment(bytes);
            }
        }

        #[inline]
        pub(crate) fn queue_delta(&self, messages: i64) {
            if messages != 0 {
                self.queue_count.increment(messages as f64);
            }
        }

        #[inline]
        pub(crate) fn acks(&self, n: u64) {
            self.ack.increment(n);
        }

        pub(crate) fn nack(&self) {
            self.nack.increment(1);
        }

        pub(crate) fn dead_lettered(&self) {
            self.dlq.increment(1);
        }

        pub(crate) fn ack_timeouts(&self, n: u64) {
            self.ack_timeout.increment(n);
        }

        pub(crate) fn closed(&self) {
            self.closed.increment(1);
        }
    }

    /// A connection opened (`ok`) or failed to open.
    pub(crate) fn connection_attempt(ok: bool) {
        let name = if ok {
            n::CONNECTION_OPENED
        } else {
            n::CONNECTION_FAILED
        };
        counter!(name).increment(1);
    }

    /// An open connection closed.
    pub(crate) fn connection_closed() {
        counter!(n::CONNECTION_CLOSED).increment(1);
    }

    /// A lookup of `kind` (`topic`, `metadata`) took `took`; binary protocol.
    pub(crate) fn lookup(kind: &'static str, took: Duration, ok: bool) {
        histogram!(n::LOOKUP_DURATION,
            "pulsar.lookup.type" => kind,
            "pulsar.lookup.transport-type" => "binary",
            "pulsar.response.status" => if ok { "success" } else { "failed" })
        .record(took.as_secs_f64());
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Duration;

    use super::LabelPolicy;
    use crate::topic::TopicName;

    /// Metrics are not recorded.
    pub(crate) const ENABLED: bool = false;

    pub(crate) struct ProducerSink;

    impl ProducerSink {
        #[inline(always)]
        pub(crate) fn new(_: LabelPolicy, _: &TopicName) -> Self {
            ProducerSink
        }
        #[inline(always)]
        pub(crate) fn sent(&self, _: u64, _: u64, _: Duration) {}
        #[inline(always)]
        pub(crate) fn pending_delta(&self, _: i64, _: i64) {}
        #[inline(always)]
        pub(crate) fn closed(&self) {}
    }

    pub(crate) struct ConsumerSink;

    impl ConsumerSink {
        #[inline(always)]
        pub(crate) fn new(_: LabelPolicy, _: &TopicName, _: &str) -> Self {
            ConsumerSink
        }
        #[inline(always)]
        pub(crate) fn received(&self, _: u64, _: u64) {}
        #[inline(always)]
        pub(crate) fn queue_delta(&self, _: i64) {}
        #[inline(always)]
        pub(crate) fn acks(&self, _: u64) {}
        #[inline(always)]
        pub(crate) fn nack(&self) {}
        #[inline(always)]
        pub(crate) fn dead_lettered(&self) {}
        #[inline(always)]
        pub(crate) fn ack_timeouts(&self, _: u64) {}
        #[inline(always)]
        pub(crate) fn closed(&self) {}
    }

    #[inline(always)]
    pub(crate) fn connection_attempt(_: bool) {}
    #[inline(always)]
    pub(crate) fn connection_closed() {}
    #[inline(always)]
    pub(crate) fn lookup(_: &'static str, _: Duration, _: bool) {}
}
