//! Operator metrics (feature `metrics`): PIP-342 names reach the application's recorder, with
//! namespace labels always and topic labels only for a client that asks for them.

use support as common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{test_client, wait_until, within};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use pulsar_sdk::metrics::names;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{InitialPosition, SubscriptionType};

/// One series: a value (a counter's total, a gauge's value as f64 bits, a histogram's
/// sample count).
#[derive(Default)]
struct Series(AtomicU64);

impl CounterFn for Series {
    fn increment(&self, v: u64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }
    fn absolute(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
}

impl GaugeFn for Series {
    fn increment(&self, v: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
    }
    fn decrement(&self, v: f64) {
        GaugeFn::increment(self, -v);
    }
    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Series {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A recorder that keeps every series by name and labels.
#[derive(Default)]
pub(crate) struct TestRecorder {
    series: Mutex<BTreeMap<String, Arc<Series>>>,
}

fn render(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl TestRecorder {
    fn get(&self, key: &Key) -> Arc<Series> {
        self.series
            .lock()
            .unwrap()
            .entry(render(key))
            .or_default()
            .clone()
    }

    /// Every series whose rendered key contains all of `parts`, with its raw value. A part
    /// that is a metric name matches that name exactly.
    fn find(&self, parts: &[&str]) -> Vec<(String, u64)> {
        let parts: Vec<String> = parts
            .iter()
            .map(|p| match p.starts_with("pulsar.client.") {
                true => format!("{p}{{"),
                false => p.to_string(),
            })
            .collect();
        self.series
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| parts.iter().all(|p| k.contains(p.as_str())))
            .map(|(k, v)| (k.clone(), v.0.load(Ordering::Relaxed)))
            .collect()
    }
}

impl TestRecorder {
    /// The raw value of the one series of `name` in namespace `public/<ns>` (0 if never
    /// registered).
    pub(crate) fn value(&self, name: &str, ns: &str) -> u64 {
        let label = format!("pulsar.namespace=public/{ns}");
        let found: Vec<u64> = self
            .find(&[name, &label])
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert!(found.len() <= 1, "{name} in {ns}: {found:?}");
        found.first().copied().unwrap_or(0)
    }

    /// The value of the gauge `name` in namespace `public/<ns>`.
    pub(crate) fn gauge(&self, name: &str, ns: &str) -> f64 {
        f64::from_bits(self.value(name, ns))
    }
}

impl Recorder for &'static TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.get(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.get(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.get(key))
    }
}

/// The process-wide recorder (the facade has one global recorder per process), shared by every
/// test of this binary: each keeps to its own namespace or topic labels, and the one test in
/// `public/default` is the only one that asks for topic labels.
pub(crate) fn recorder() -> &'static TestRecorder {
    static R: OnceLock<&'static TestRecorder> = OnceLock::new();
    R.get_or_init(|| {
        let r: &'static TestRecorder = Box::leak(Box::default());
        metrics::set_global_recorder(r).expect("the only recorder");
        pulsar_sdk::metrics::describe();
        r
    })
}

/// Produces 5 messages to `topic` and consumes them, on a client with or without topic labels.
async fn produce_and_consume(url: &str, topic: &str, topic_labels: bool) {
    let client = test_client(url)
        .metrics_topic_labels(topic_labels)
        .build()
        .unwrap();
    let producer = common::unbatched_producer(&client, topic).await;
    common::publish(&producer, "m", 5).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    for _ in 0..5 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
    }
    producer.close().await.unwrap();
    consumer.close().await.unwrap();
    client.close().await.unwrap();
}

#[tokio::test]
async fn metrics_carry_topic_labels_only_when_the_client_asks() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let url = broker.service_url();
    let quiet = "persistent://public/default/metrics-no-topic-labels";
    let labelled = "persistent://public/default/metrics-topic-labels";

    produce_and_consume(&url, quiet, false).await;
    let ns = "pulsar.namespace=public/default";
    let sent = rec.find(&[names::PRODUCER_SEND_DURATION, ns]);
    assert_eq!(sent.len(), 1, "one namespace series: {sent:?}");
    assert_eq!(sent[0].1, 5, "5 confirmed sends, one entry each");
    assert_eq!(rec.find(&[names::PRODUCER_SEND_COUNT, ns])[0].1, 5);
    assert!(sent[0].0.contains("pulsar.response.status=success"));
    assert!(sent[0].0.contains("pulsar.tenant=public"));
    let received = rec.find(&[names::CONSUMER_RECEIVED_COUNT, ns, "pulsar.subscription=s"]);
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].1, 5);
    assert!(
        rec.find(&["pulsar.topic"]).is_empty(),
        "no topic label without the option: {:?}",
        rec.find(&["pulsar.topic"])
    );
    assert_eq!(rec.find(&[names::CONSUMER_ACK, ns])[0].1, 5);
    assert_eq!(rec.find(&[names::PRODUCER_OPENED, ns])[0].1, 1);
    assert_eq!(rec.find(&[names::PRODUCER_CLOSED, ns])[0].1, 1);
    assert!(!rec.find(&[names::CONNECTION_OPENED]).is_empty());
    let lookups = rec.find(&[names::LOOKUP_DURATION, "pulsar.lookup.type=topic"]);
    assert!(lookups.iter().any(|(_, n)| *n > 0), "{lookups:?}");
    let pending = rec.find(&[names::PRODUCER_PENDING_COUNT, ns]);
    assert_eq!(
        f64::from_bits(pending[0].1),
        0.0,
        "nothing pending after close"
    );

    produce_and_consume(&url, labelled, true).await;
    let with_topic = format!("pulsar.topic={labelled}");
    let sent = rec.find(&[names::PRODUCER_SEND_DURATION, &with_topic]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, 5);
    assert!(sent[0].0.contains(ns), "the namespace labels stay");
    wait_until("received counted with the topic", || {
        rec.find(&[names::CONSUMER_RECEIVED_COUNT, &with_topic])
            .first()
            .is_some_and(|(_, n)| *n == 5)
    })
    .await;
    assert!(
        rec.find(&[&format!("pulsar.topic={quiet}")]).is_empty(),
        "the first client's series never got a topic label"
    );
    // The namespace series of the first client did not move.
    let ns_only: Vec<_> = rec
        .find(&[names::PRODUCER_SEND_DURATION, ns])
        .into_iter()
        .filter(|(k, _)| !k.contains("pulsar.topic"))
        .collect();
    assert_eq!(ns_only.len(), 1);
    assert_eq!(ns_only[0].1, 5);

    // A batch: one send-duration sample for the entry, its messages counted one by one.
    let batched = "persistent://public/default/metrics-batched";
    let client = test_client(&url)
        .metrics_topic_labels(true)
        .build()
        .unwrap();
    common::publish_batch(&client, batched, 10).await;
    let topic_label = format!("pulsar.topic={batched}");
    assert_eq!(
        rec.find(&[names::PRODUCER_SEND_DURATION, &topic_label])[0].1,
        1,
        "one sample per entry"
    );
    assert_eq!(
        rec.find(&[names::PRODUCER_SEND_COUNT, &topic_label])[0].1,
        10
    );
    client.close().await.unwrap();
}
