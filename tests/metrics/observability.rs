//! Review probes of the stats and metrics (#16): what an operator would check after a chunked
//! send, failed sends and a consumer that went idle. Metrics tests need the `metrics` feature;
//! the facade has one recorder per process, so every test here uses its own namespace.
#![cfg(feature = "metrics")]

use support as common;

use std::time::Duration;

use common::{test_client, wait_until, within};
use pulsar_sdk::metrics::names;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{InitialPosition, ServerError, SubscriptionType};

use crate::pip342::recorder;

/// Bytes that do not compress well (the chunking tests' xorshift, seeded as before).
fn noise(n: usize) -> Vec<u8> {
    support::chunks::noise(n, 0x4f1b_bcdc_bfa5_3e0a)
}

/// One chunked message is one message: upstream completes a chunked send once, on the last
/// chunk's receipt, and records one `message.send.duration` sample for it.
#[tokio::test]
async fn a_chunked_send_is_one_message_and_one_duration_sample() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-chunked";
    let topic = format!("persistent://public/{ns}/t");
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(&topic)
        .chunking(true)
        .batching(false)
        .chunk_max_message_size(10_000)
        .create()
        .await
        .unwrap();
    within("send", producer.send_and_wait(noise(55_000)))
        .await
        .unwrap();
    let s = producer.stats();
    assert_eq!(s.totals.messages_sent, 1);
    assert_eq!(s.totals.send_latency.count, 1, "one latency sample");
    assert_eq!(s.totals.pending_messages, 0);
    assert_eq!(s.totals.pending_bytes, 0);
    assert!(s.totals.bytes_sent > 55_000, "every chunk's bytes count");
    assert_eq!(rec.value(names::PRODUCER_SEND_COUNT, ns), 1);
    assert_eq!(
        rec.value(names::PRODUCER_SEND_DURATION, ns),
        1,
        "one duration sample for one chunked message, not one per chunk"
    );
    client.close().await.unwrap();
}

/// The pending gauges an operator scrapes follow the queue when sends fail, not only when
/// they succeed: after the last sends are refused nothing is pending, while the producer
/// lives (upstream decrements `message.pending.*` in every send's callback, failed or not).
#[tokio::test]
async fn the_pending_gauges_return_to_zero_when_the_last_sends_fail() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-pending-fail";
    let topic = format!("persistent://public/{ns}/t");
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    // The first SEND is stored, the next two refused; the round trip keeps all three in the
    // pending queue when the first receipt comes back.
    broker.push_error(
        MockError::new(MockRequest::Send, ServerError::NotAllowed, "refused")
            .skip(1)
            .times(2),
    );
    broker.set_response_delay(Duration::from_millis(200));
    let mut receipts = Vec::new();
    for i in 0..3 {
        receipts.push(producer.send(format!("m{i}")).await.unwrap());
    }
    let results: Vec<bool> = within("receipts", async {
        let mut v = Vec::new();
        for r in receipts {
            v.push(r.await.is_ok());
        }
        v
    })
    .await;
    assert_eq!(results, [true, false, false]);
    wait_until("stats: nothing pending", || {
        producer.stats().totals.pending_messages == 0
    })
    .await;
    assert_eq!(producer.stats().totals.send_errors.broker, 2);
    assert_eq!(
        rec.gauge(names::PRODUCER_PENDING_COUNT, ns),
        0.0,
        "metrics gauge: nothing pending"
    );
    assert_eq!(rec.gauge(names::PRODUCER_PENDING_SIZE, ns), 0.0);
    producer.close().await.unwrap();
    client.close().await.unwrap();
}

/// Send timeouts empty the queue: stats and the metric gauges say so while the producer lives.
#[tokio::test]
async fn the_pending_gauges_return_to_zero_after_send_timeouts() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-pending-timeout";
    let topic = format!("persistent://public/{ns}/t");
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .send_timeout(Duration::from_millis(500))
        .create()
        .await
        .unwrap();
    producer.send_and_wait("ok").await.unwrap();
    broker.set_response_delay(Duration::from_millis(300));
    let first = producer.send("a").await.unwrap();
    let second = producer.send("b").await.unwrap();
    assert!(within("a", first).await.is_ok());
    assert!(within("b", second).await.is_ok());
    // Now the broker stalls: these never get a receipt.
    broker.set_unresponsive(true);
    let lost: Vec<_> = send_n(&producer, 4).await;
    for r in lost {
        assert!(within("timeout", r).await.is_err());
    }
    let s = producer.stats();
    assert_eq!(s.totals.send_errors.timeout, 4);
    assert_eq!((s.totals.pending_messages, s.totals.pending_bytes), (0, 0));
    assert_eq!(rec.gauge(names::PRODUCER_PENDING_COUNT, ns), 0.0);
    assert_eq!(rec.gauge(names::PRODUCER_PENDING_SIZE, ns), 0.0);
}

async fn send_n(producer: &pulsar_sdk::Producer, n: usize) -> Vec<pulsar_sdk::SendFuture> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(producer.send(format!("lost-{i}")).await.unwrap());
    }
    v
}

/// A consumer that received its messages and then went quiet: the scraped received count
/// and receive queue reach what the application saw without further traffic.
#[tokio::test]
async fn consumer_metrics_catch_up_when_the_consumer_goes_idle() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-idle-consumer";
    let topic = format!("persistent://public/{ns}/t");
    let client = test_client(&broker.service_url()).build().unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = common::unbatched_producer(&client, &topic).await;
    common::publish(&producer, "m", 5).await;
    for _ in 0..5 {
        within("recv", consumer.recv()).await.unwrap();
    }
    assert_eq!(consumer.stats().totals.messages_received, 5);
    assert_eq!(consumer.stats().totals.receiver_queue_len, 0);
    wait_until("the received count is scraped", || {
        rec.value(names::CONSUMER_RECEIVED_COUNT, ns) == 5
            && rec.gauge(names::CONSUMER_RECEIVE_QUEUE_COUNT, ns) == 0.0
    })
    .await;
    client.close().await.unwrap();
}

/// A pattern consumer whose topics come and go: the stats list the current members, a removed
/// topic's consumer is closed (its queue gauge back to zero, counted as closed), and a scrape's
/// counters never go down.
#[tokio::test]
async fn pattern_consumer_stats_follow_topics_coming_and_going() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-pattern";
    let t = |n: &str| format!("persistent://public/{ns}/{n}");
    broker.create_topic(&t("p-1"));
    broker.create_topic(&t("p-2"));
    let client = test_client(&broker.service_url()).build().unwrap();
    let mut consumer = client
        .pattern_consumer(format!("persistent://public/{ns}/p-.*"))
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(Duration::from_millis(200))
        .subscribe()
        .await
        .unwrap();
    let mut changes = consumer.topic_updates();
    for topic in ["p-1", "p-2"] {
        let p = common::unbatched_producer(&client, &t(topic)).await;
        common::publish(&p, topic, 3).await;
        p.close().await.unwrap();
    }
    for _ in 0..6 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
    }
    let s = consumer.stats();
    let members: Vec<&str> = s.partitions.iter().map(|p| p.topic.as_str()).collect();
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(s.totals.messages_received, 6);
    // Acks are counted by the member's task when it takes the ack (not in `ack` itself).
    wait_until("acks counted", || consumer.stats().totals.acks == 6).await;
    wait_until("received and acks scraped", || {
        rec.value(names::CONSUMER_RECEIVED_COUNT, ns) == 6
            && rec.value(names::CONSUMER_ACK, ns) == 6
    })
    .await;

    broker.delete_topic(&t("p-2"), true).unwrap();
    within("topic removed", changes.next_change())
        .await
        .unwrap();
    wait_until("the removed member is gone from the stats", || {
        consumer.stats().partitions.len() == 1
    })
    .await;
    let s = consumer.stats();
    assert_eq!(s.partitions[0].topic, t("p-1"));
    wait_until("the removed member's consumer counted closed", || {
        rec.value(names::CONSUMER_CLOSED, ns) == 1
    })
    .await;
    assert_eq!(rec.gauge(names::CONSUMER_RECEIVE_QUEUE_COUNT, ns), 0.0);
    assert_eq!(
        rec.value(names::CONSUMER_RECEIVED_COUNT, ns),
        6,
        "a scraped counter keeps what the removed member received"
    );

    broker.create_topic(&t("p-3"));
    within("topic added", changes.next_change()).await.unwrap();
    let p = common::unbatched_producer(&client, &t("p-3")).await;
    common::publish(&p, "p-3", 2).await;
    for _ in 0..2 {
        within("recv", consumer.recv()).await.unwrap();
    }
    let s = consumer.stats();
    assert_eq!(s.partitions.len(), 2);
    let p3 = s.partitions.iter().find(|m| m.topic == t("p-3")).unwrap();
    assert_eq!(p3.counts.messages_received, 2);
    assert_eq!(rec.value(names::CONSUMER_OPENED, ns), 3);
    consumer.close().await.unwrap();
    wait_until("every consumer closed, queue gauge at zero", || {
        rec.value(names::CONSUMER_CLOSED, ns) == 3
            && rec.gauge(names::CONSUMER_RECEIVE_QUEUE_COUNT, ns) == 0.0
    })
    .await;
    client.close().await.unwrap();
}

/// A partitioned producer whose topic grows: the new partitions appear in the stats, each
/// counting what the broker stored on it; pending returns to zero.
#[tokio::test]
async fn partitioned_producer_stats_grow_with_the_partitions() {
    let rec = recorder();
    let broker = MockBroker::start().await.unwrap();
    let ns = "review-growing";
    let topic = format!("persistent://public/{ns}/g");
    broker.create_partitioned_topic(&topic, 2);
    let client = test_client(&broker.service_url())
        .auto_update_partitions_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    assert_eq!(producer.stats().partitions.len(), 2);
    broker.set_partitions(&topic, 4);
    wait_until("four partitions in the stats", || {
        producer.stats().partitions.len() == 4
    })
    .await;
    for i in 0..20 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    let s = producer.stats();
    let idx: Vec<i32> = s.partitions.iter().map(|p| p.partition).collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    for p in &s.partitions {
        assert_eq!(
            p.counts.messages_sent as usize,
            broker.topic_messages(&format!("{topic}-partition-{}", p.partition)),
            "partition {}",
            p.partition
        );
    }
    assert_eq!(s.totals.messages_sent, 20);
    assert_eq!(s.totals.send_latency.count, 20);
    assert_eq!((s.totals.pending_messages, s.totals.pending_bytes), (0, 0));
    assert_eq!(rec.value(names::PRODUCER_OPENED, ns), 4);
    assert_eq!(rec.value(names::PRODUCER_SEND_COUNT, ns), 20);
    producer.close().await.unwrap();
    assert_eq!(rec.value(names::PRODUCER_CLOSED, ns), 4);
    assert_eq!(rec.gauge(names::PRODUCER_PENDING_COUNT, ns), 0.0);
    client.close().await.unwrap();
}

/// What a user checks on a multi-threaded runtime: once `send_and_wait` returned, the stats
/// count that message (upstream's `ProducerImpl` records a send's stats in its callback before
/// completing the application's future).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_send_is_in_the_stats_when_send_and_wait_returns() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "persistent://public/review-stats-order/t";
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let sender = producer.clone();
    // A snapshot taken concurrently never shows more latency samples than messages, and its
    // percentiles stay ordered.
    let watcher = tokio::spawn(async move {
        for _ in 0..2000 {
            let s = sender.stats().totals;
            assert!(s.send_latency.count <= s.messages_sent, "{s:?}");
            let l = s.send_latency;
            assert!(l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max, "{l:?}");
            tokio::task::yield_now().await;
        }
    });
    for i in 1..=500u64 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
        let s = producer.stats().totals;
        assert!(
            s.messages_sent >= i && s.send_latency.count >= i,
            "after {i} confirmed sends the stats say {} sent, {} timed",
            s.messages_sent,
            s.send_latency.count
        );
    }
    watcher.await.unwrap();
    client.close().await.unwrap();
}

/// The same for a refused send: once `send_and_wait` failed, the stats count the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_send_is_in_the_stats_when_send_and_wait_returns() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "persistent://public/review-stats-order/refused";
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 1..=100u64 {
        broker.push_error(MockError::new(
            MockRequest::Send,
            ServerError::NotAllowed,
            "refused",
        ));
        assert!(producer.send_and_wait("x").await.is_err());
        let s = producer.stats().totals;
        assert!(
            s.send_errors.broker >= i,
            "after {i} refused sends the stats say {}",
            s.send_errors.broker
        );
    }
    client.close().await.unwrap();
}
