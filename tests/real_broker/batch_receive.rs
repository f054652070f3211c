//! Batch receive against a real broker (pulsar-lite): batches within their bounds, every
//! message once and in order, acked whole and never redelivered to the next consumer.
//!
//! pulsar-lite bugs worked around here (see shared/design/pulsar-lite.md): Shared
//! subscriptions (Exclusive/Failover duplicate dispatch under pipelined publishing), fresh
//! topic and subscription names per test.

use std::time::{Duration, Instant};

use pulsar_sdk::{BatchReceivePolicy, Client, Consumer, InitialPosition, SubscriptionType};
use support::unique_name;

/// How long all the messages of a test may take to arrive.
const PATIENCE: Duration = Duration::from_secs(30);

use support::shared_client as client;

async fn subscribe(client: &Client, topics: &[String], sub: &str, max: u32) -> Consumer {
    client
        .multi_topic_consumer(topics.to_vec())
        .subscription(sub)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(max)
                .timeout(Duration::from_millis(200)),
        )
        .subscribe()
        .await
        .unwrap()
}

/// Receives batches until `n` messages arrived, acking each batch whole; returns the
/// payloads in arrival order and the size of each batch.
async fn receive_all(consumer: &mut Consumer, n: usize) -> (Vec<String>, Vec<usize>) {
    let deadline = Instant::now() + PATIENCE;
    let mut payloads = Vec::new();
    let mut sizes = Vec::new();
    while payloads.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} messages arrived",
            payloads.len()
        );
        let batch = consumer.batch_recv().await.unwrap();
        if batch.is_empty() {
            continue;
        }
        consumer.ack_all(&batch).unwrap();
        sizes.push(batch.len());
        payloads.extend(batch.iter().map(|m| m.payload_str().unwrap().to_string()));
    }
    (payloads, sizes)
}

/// Nothing arrives in a few batch timeouts.
async fn expect_nothing(consumer: &mut Consumer) {
    for _ in 0..5 {
        let batch = consumer.batch_recv().await.unwrap();
        assert!(
            batch.is_empty(),
            "expected nothing, got {:?}",
            batch.iter().map(|m| m.payload_str()).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn batches_are_bounded_acked_whole_and_not_redelivered() {
    let client = client();
    let topic = unique_name("batch-recv");
    let sub = unique_name("sub");
    // Batched entries of up to 5 messages: batches cut entries in the middle too.
    let producer = client
        .producer(&topic)
        .batching_options(pulsar_sdk::producer::BatchingOptions {
            max_messages: 5,
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..40 {
        receipts.push(producer.send(format!("m{i:02}")).await.unwrap());
    }
    producer.flush().await.unwrap();
    for r in receipts {
        r.await.unwrap();
    }
    let topics = [topic.clone()];
    let mut consumer = subscribe(&client, &topics, &sub, 8).await;
    let (payloads, sizes) = receive_all(&mut consumer, 40).await;
    let expected: Vec<String> = (0..40).map(|i| format!("m{i:02}")).collect();
    assert_eq!(payloads, expected, "every message once, in order");
    assert!(sizes.iter().all(|&s| s <= 8), "batch sizes {sizes:?}");
    assert!(
        sizes.iter().filter(|&&s| s == 8).count() >= 3,
        "a backlog fills batches to the bound: {sizes:?}"
    );
    // close() flushes the grouped acks.
    consumer.close().await.unwrap();
    let mut again = subscribe(&client, &topics, &sub, 8).await;
    expect_nothing(&mut again).await;
    again.close().await.unwrap();
}

#[tokio::test]
async fn a_multi_topic_batch_is_acked_whole_and_not_redelivered() {
    let client = client();
    let topics = [unique_name("batch-multi-a"), unique_name("batch-multi-b")];
    let sub = unique_name("sub");
    for t in &topics {
        let producer = support::unbatched_producer(&client, t).await;
        for i in 0..6 {
            producer.send_and_wait(format!("{t}/{i}")).await.unwrap();
        }
    }
    let mut consumer = subscribe(&client, &topics, &sub, 12).await;
    let (mut payloads, _) = receive_all(&mut consumer, 12).await;
    // Per topic in order; across topics in any order.
    for t in &topics {
        let of_t: Vec<&String> = payloads
            .iter()
            .filter(|p| p.starts_with(t.as_str()))
            .collect();
        let expected: Vec<String> = (0..6).map(|i| format!("{t}/{i}")).collect();
        assert_eq!(of_t, expected.iter().collect::<Vec<_>>());
    }
    payloads.sort();
    payloads.dedup();
    assert_eq!(payloads.len(), 12, "no duplicates");
    consumer.close().await.unwrap();
    let mut again = subscribe(&client, &topics, &sub, 12).await;
    expect_nothing(&mut again).await;
    again.close().await.unwrap();
}
