//! The recording side: written by the task that owns a partition producer or consumer (relaxed
//! atomics, one writer), read by snapshots from any thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::histogram::{HistogramCounts, LatencyHistogram};
use super::sink::{ConsumerSink, LabelPolicy, ProducerSink};
use super::{ConsumerCounts, ProducerCounts, ReconnectStats, SendErrors};
use crate::topic::TopicName;

/// Reconnects of one entity (kept by the shared entity driver).
#[derive(Debug, Default)]
pub(crate) struct LinkCounters {
    reconnects: AtomicU64,
    /// Reconnect time of the finished reconnects (ns).
    down_nanos: AtomicU64,
    /// Since when the entity is without a connection (set and cleared only on a detach and a
    /// re-attach: rare, so a lock is fine).
    down_since: Mutex<Option<Instant>>,
}

impl LinkCounters {
    fn down(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.down_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lost its connection (or was closed by the broker with reconnect allowed).
    pub(crate) fn detached(&self) {
        self.down().get_or_insert_with(Instant::now);
    }

    /// Created again on a connection.
    pub(crate) fn reattached(&self) {
        self.reconnects.fetch_add(1, Relaxed);
        self.stop_clock();
    }

    /// Ended for good: a reconnect under way stops counting.
    pub(crate) fn ended(&self) {
        self.stop_clock();
    }

    fn stop_clock(&self) {
        if let Some(since) = self.down().take() {
            let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.down_nanos.fetch_add(ns, Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> ReconnectStats {
        let ongoing = self.down().map_or(Duration::ZERO, |s| s.elapsed());
        ReconnectStats {
            reconnects: self.reconnects.load(Relaxed),
            time_reconnecting: Duration::from_nanos(self.down_nanos.load(Relaxed)) + ongoing,
        }
    }
}

/// Why sends failed (see [`SendErrors`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum SendFailure {
    Timeout,
    Broker,
    Rejected,
    Closed,
}

/// A partition producer's counters.
pub(crate) struct ProducerCounters {
    pub link: std::sync::Arc<LinkCounters>,
    messages: AtomicU64,
    bytes: AtomicU64,
    errors: [AtomicU64; 4],
    pending_messages: AtomicU64,
    pending_bytes: AtomicU64,
    /// The pending values last handed to the metrics gauges.
    published_pending: [AtomicU64; 2],
    /// Sends failed since the gauges were last handed the pending values (metrics only).
    republish: std::sync::atomic::AtomicBool,
    latency: LatencyHistogram,
    sink: ProducerSink,
}

impl std::fmt::Debug for ProducerCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerCounters")
            .field("messages", &self.messages)
            .finish_non_exhaustive()
    }
}

impl ProducerCounters {
    pub(crate) fn new(
        link: std::sync::Arc<LinkCounters>,
        labels: LabelPolicy,
        topic: &TopicName,
    ) -> Self {
        ProducerCounters {
            link,
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: Default::default(),
            pending_messages: AtomicU64::new(0),
            pending_bytes: AtomicU64::new(0),
            published_pending: Default::default(),
            republish: Default::default(),
            latency: LatencyHistogram::default(),
            sink: ProducerSink::new(labels, topic),
        }
    }

    /// A receipt confirmed `messages` messages in one entry of `bytes` on the wire.
    #[inline]
    pub(crate) fn sent(&self, messages: u64, bytes: u64, latency: Duration) {
        self.messages.fetch_add(messages, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        self.latency.record_n(latency, messages);
        self.sink.sent(messages, bytes, latency);
        self.publish_pending();
    }

    pub(crate) fn failed(&self, why: SendFailure, messages: usize) {
        if messages > 0 {
            self.errors[why as usize].fetch_add(messages as u64, Relaxed);
            // Upstream decrements `message.pending.*` in every send's callback, failed or
            // not: the gauges are handed the queue at the task's next `pending` call, else
            // they would keep the failed messages until the next receipt (forever, if the
            // last sends failed).
            if super::sink::ENABLED {
                self.republish.store(true, Relaxed);
            }
        }
    }

    /// The pending queue now (called once per wake-up of the task: two plain stores, and with
    /// the `metrics` feature a load, handing the gauges the queue after failed sends).
    #[inline]
    pub(crate) fn pending(&self, messages: usize, bytes: usize) {
        self.pending_messages.store(messages as u64, Relaxed);
        self.pending_bytes.store(bytes as u64, Relaxed);
        // A plain load per wake-up (one writer: no read-modify-write needed).
        if super::sink::ENABLED && self.republish.load(Relaxed) {
            self.republish.store(false, Relaxed);
            self.publish_pending();
        }
    }

    /// Hands the metrics gauges the pending values last stored, once per receipt (a gauge
    /// update per wake-up would cost the exporter an atomic update every few messages).
    fn publish_pending(&self) {
        if !super::sink::ENABLED {
            return;
        }
        let m = self.pending_messages.load(Relaxed);
        let b = self.pending_bytes.load(Relaxed);
        let old_m = self.published_pending[0].swap(m, Relaxed);
        let old_b = self.published_pending[1].swap(b, Relaxed);
        self.sink
            .pending_delta(m as i64 - old_m as i64, b as i64 - old_b as i64);
    }

    /// The producer ended (its pending gauges go back to zero).
    pub(crate) fn closed(&self) {
        self.pending(0, 0);
        self.publish_pending();
        self.link.ended();
        self.sink.closed();
    }

    pub(crate) fn snapshot(&self) -> (ProducerCounts, HistogramCounts) {
        let hist = self.latency.snapshot();
        let e = |k: SendFailure| self.errors[k as usize].load(Relaxed);
        let counts = ProducerCounts {
            messages_sent: self.messages.load(Relaxed),
            bytes_sent: self.bytes.load(Relaxed),
            send_errors: SendErrors {
                timeout: e(SendFailure::Timeout),
                broker: e(SendFailure::Broker),
                rejected: e(SendFailure::Rejected),
                closed: e(SendFailure::Closed),
            },
            pending_messages: self.pending_messages.load(Relaxed),
            pending_bytes: self.pending_bytes.load(Relaxed),
            send_latency: hist.summary(),
            reconnects: self.link.snapshot(),
        };
        (counts, hist)
    }
}

/// What the application's side (the consumer handle) counts, on its own cache line: the
/// task writes the other counters from another thread.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Received {
    messages: AtomicU64,
    bytes: AtomicU64,
}

/// The values last handed to the metrics facade (written by the task only).
#[derive(Debug, Default)]
struct Published {
    messages: AtomicU64,
    bytes: AtomicU64,
    acks: AtomicU64,
    queue: AtomicU64,
}

/// A partition consumer's counters. The handle counts what the application takes; the task
/// counts what it sends to the broker, and hands the metrics facade what changed once per
/// wake-up (not per message: a facade call costs the exporter an atomic update or more).
pub(crate) struct ConsumerCounters {
    pub link: std::sync::Arc<LinkCounters>,
    topic: String,
    queue_size: u32,
    received: Received,
    acks: AtomicU64,
    acks_sent: AtomicU64,
    nacks: AtomicU64,
    redelivery_requests: AtomicU64,
    ack_timeouts: AtomicU64,
    dlq_sends: AtomicU64,
    published: Published,
    sink: ConsumerSink,
}

impl std::fmt::Debug for ConsumerCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerCounters")
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

/// Hands `now - last` to `f` (a counter that only grows) and remembers `now`.
fn delta(last: &AtomicU64, now: u64, f: impl FnOnce(u64)) {
    let before = last.swap(now, Relaxed);
    if now > before {
        f(now - before);
    }
}

/// Adds `n` to a counter that one owner writes and anyone may read: a plain load and store
/// instead of a locked read-modify-write, which costs more than the rest of counting a
/// message (issue #18). Correct only while every write comes from the same owner (one task
/// or one `&mut` handle, whose successive writes are ordered even when it moves between
/// threads); readers see every value in order, each at most a little late.
#[inline]
fn add_single_writer(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

impl ConsumerCounters {
    pub(crate) fn new(
        link: std::sync::Arc<LinkCounters>,
        labels: LabelPolicy,
        topic: &TopicName,
        subscription: &str,
        queue_size: u32,
    ) -> Self {
        ConsumerCounters {
            link,
            topic: topic.to_string(),
            queue_size,
            received: Received::default(),
            acks: AtomicU64::new(0),
            acks_sent: AtomicU64::new(0),
            nacks: AtomicU64::new(0),
            redelivery_requests: AtomicU64::new(0),
            ack_timeouts: AtomicU64::new(0),
            dlq_sends: AtomicU64::new(0),
            published: Published::default(),
            sink: ConsumerSink::new(labels, topic, subscription),
        }
    }

    /// The application received a message of `bytes` payload bytes. Called only by the
    /// consumer handle (`&mut` while it hands a message out): see [`add_single_writer`].
    #[inline]
    pub(crate) fn received(&self, bytes: usize) {
        add_single_writer(&self.received.messages, 1);
        add_single_writer(&self.received.bytes, bytes as u64);
    }

    /// The application acknowledged a message (or cumulatively up to one). Called only by
    /// the partition's task: see [`add_single_writer`].
    #[inline]
    pub(crate) fn acked(&self) {
        add_single_writer(&self.acks, 1);
    }

    /// `n` message ids acknowledged to the broker.
    #[inline]
    pub(crate) fn acks_sent(&self, n: usize) {
        self.acks_sent.fetch_add(n as u64, Relaxed);
    }

    pub(crate) fn nacked(&self) {
        self.nacks.fetch_add(1, Relaxed);
        self.sink.nack();
    }

    pub(crate) fn redelivery_requested(&self) {
        self.redelivery_requests.fetch_add(1, Relaxed);
    }

    pub(crate) fn ack_timed_out(&self, n: usize) {
        if n > 0 {
            self.ack_timeouts.fetch_add(n as u64, Relaxed);
            self.sink.ack_timeouts(n as u64);
        }
    }

    pub(crate) fn dead_lettered(&self) {
        self.dlq_sends.fetch_add(1, Relaxed);
        self.sink.dead_lettered();
    }

    /// Hands the metrics facade what changed since the last call: messages received, acks and
    /// the receiver queue's length (`queue_len`, which takes the queue's lock, is only called
    /// with the `metrics` feature). Called by the task once per wake-up and when it ends.
    /// Returns whether it was quiet: nothing had changed and the queue is empty (always true
    /// without the feature).
    #[inline]
    pub(crate) fn publish(&self, queue_len: impl FnOnce() -> u64) -> bool {
        if !super::sink::ENABLED {
            return true;
        }
        let p = &self.published;
        let mut changed = false;
        delta(&p.messages, self.received.messages.load(Relaxed), |n| {
            changed = true;
            self.sink.received(n, 0)
        });
        delta(&p.bytes, self.received.bytes.load(Relaxed), |n| {
            self.sink.received(0, n)
        });
        delta(&p.acks, self.acks.load(Relaxed), |n| {
            changed = true;
            self.sink.acks(n)
        });
        let len = queue_len();
        let old = p.queue.swap(len, Relaxed);
        if old != len {
            self.sink.queue_delta(len as i64 - old as i64);
        }
        !changed && old == len && len == 0
    }

    /// The consumer ended: what is left is published, its queue gauge goes back to zero.
    pub(crate) fn closed(&self) {
        self.publish(|| 0);
        self.link.ended();
        self.sink.closed();
    }

    /// The member's topic (a partition's name).
    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    /// Counts; the caller adds the queue's length, the discarded entries and the state.
    pub(crate) fn snapshot(&self) -> ConsumerCounts {
        ConsumerCounts {
            receiver_queue_size: self.queue_size.into(),
            messages_received: self.received.messages.load(Relaxed),
            bytes_received: self.received.bytes.load(Relaxed),
            acks: self.acks.load(Relaxed),
            acks_sent: self.acks_sent.load(Relaxed),
            nacks: self.nacks.load(Relaxed),
            redelivery_requests: self.redelivery_requests.load(Relaxed),
            ack_timeouts: self.ack_timeouts.load(Relaxed),
            dlq_sends: self.dlq_sends.load(Relaxed),
            reconnects: self.link.snapshot(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reconnect_time_counts_the_time_without_a_connection() {
        let link = LinkCounters::default();
        link.detached();
        tokio::time::advance(Duration::from_secs(2)).await;
        // A reconnect under way counts up to now.
        assert_eq!(link.snapshot().time_reconnecting, Duration::from_secs(2));
        assert_eq!(link.snapshot().reconnects, 0);
        link.reattached();
        tokio::time::advance(Duration::from_secs(5)).await;
        let s = link.snapshot();
        assert_eq!(s.reconnects, 1);
        assert_eq!(
            s.time_reconnecting,
            Duration::from_secs(2),
            "attached time not counted"
        );
        // A second loss that ends the entity for good stops the clock.
        link.detached();
        link.detached(); // the same outage, seen twice
        tokio::time::advance(Duration::from_secs(1)).await;
        link.ended();
        tokio::time::advance(Duration::from_secs(10)).await;
        let s = link.snapshot();
        assert_eq!(s.reconnects, 1);
        assert_eq!(s.time_reconnecting, Duration::from_secs(3));
    }

    #[test]
    fn pending_gauges_follow_the_queue_and_reset_on_close() {
        let topic = TopicName::new("t").unwrap();
        let c = ProducerCounters::new(Default::default(), LabelPolicy::default(), &topic);
        c.pending(3, 300);
        c.sent(2, 200, Duration::from_millis(4));
        c.pending(1, 100);
        c.failed(SendFailure::Timeout, 1);
        c.failed(SendFailure::Closed, 0);
        let (counts, _) = c.snapshot();
        assert_eq!((counts.pending_messages, counts.pending_bytes), (1, 100));
        assert_eq!(counts.messages_sent, 2);
        assert_eq!(counts.send_errors.timeout, 1);
        assert_eq!(counts.send_errors.total(), 1);
        assert_eq!(counts.send_latency.count, 2);
        c.closed();
        let (counts, _) = c.snapshot();
        assert_eq!((counts.pending_messages, counts.pending_bytes), (0, 0));
    }
}
