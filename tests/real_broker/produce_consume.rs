//! Producer, consumer and reader against a real broker (pulsar-lite, started by the harness).
//!
//! pulsar-lite bugs worked around here (see the design notes): Exclusive/Failover subscriptions
//! duplicate deliveries under pipelined publishing, so exact-count tests use Shared or publish the
//! backlog before subscribing; every test uses a fresh topic and subscription.

use std::collections::BTreeSet;
use std::time::Duration;

use pulsar_sdk::{CompressionType, InitialPosition, MessageId, ProducerMessage, SubscriptionType};
use support::unique_name;

use support::shared_client as client;

async fn recv_n(consumer: &mut pulsar_sdk::Consumer, n: usize) -> Vec<pulsar_sdk::Message> {
    let mut out = Vec::new();
    while out.len() < n {
        let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} messages arrived", out.len()))
            .unwrap();
        consumer.ack(&m).unwrap();
        out.push(m);
    }
    out
}

#[tokio::test]
async fn produce_then_consume_round_trip() {
    let client = client();
    let topic = unique_name("rt");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        let msg = ProducerMessage::new(format!("msg-{i}"))
            .key(format!("k{i}"))
            .property("i", i.to_string())
            .event_time(1_000 + i as u64);
        ids.push(producer.send_and_wait(msg).await.unwrap());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");

    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("sub"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let got = recv_n(&mut consumer, 10).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.payload_str(), Some(format!("msg-{i}").as_str()));
        assert_eq!(m.key.as_deref(), Some(format!("k{i}").as_str()));
        assert_eq!(
            m.properties.get("i").map(String::as_str),
            Some(i.to_string().as_str())
        );
        assert_eq!(m.event_time, Some(1_000 + i as u64));
        assert_eq!(m.id, ids[i]);
        assert_eq!(m.redelivery_count, 0);
    }
    consumer.close().await.unwrap();
    producer.close().await.unwrap();
}

#[tokio::test]
async fn pipelined_batched_compressed_sends_all_arrive() {
    for compression in [
        CompressionType::None,
        CompressionType::Lz4,
        CompressionType::Zlib,
        CompressionType::Zstd,
        CompressionType::Snappy,
    ] {
        let client = client();
        let topic = unique_name("batch");
        let mut consumer = client
            .consumer(&topic)
            .subscription(unique_name("sub"))
            .subscription_type(SubscriptionType::Shared)
            .subscribe()
            .await
            .unwrap();
        let producer = client
            .producer(&topic)
            .compression(compression)
            .create()
            .await
            .unwrap();
        let mut futures = Vec::new();
        for i in 0..500 {
            futures.push(producer.send(format!("m{i}")).await.unwrap());
        }
        let ids: Vec<MessageId> = futures::future::try_join_all(futures).await.unwrap();
        assert!(
            ids.iter().any(|id| id.is_batch()),
            "{compression}: batching produced batches"
        );
        let got = recv_n(&mut consumer, 500).await;
        let payloads: Vec<String> = got
            .iter()
            .map(|m| m.payload_str().unwrap().to_string())
            .collect();
        let expected: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();
        assert_eq!(payloads, expected, "{compression}: all messages, in order");
        let distinct: BTreeSet<MessageId> = got.iter().map(|m| m.id).collect();
        assert_eq!(distinct.len(), 500);
    }
}

#[tokio::test]
async fn reader_from_earliest_and_from_an_id() {
    let client = client();
    let topic = unique_name("reader");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(producer.send_and_wait(format!("r{i}")).await.unwrap());
    }
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for i in 0..5 {
        let m = tokio::time::timeout(Duration::from_secs(10), reader.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload_str(), Some(format!("r{i}").as_str()));
    }
    assert!(!reader.has_message_available().await.unwrap());

    let mut from = client
        .reader(&topic)
        .start_message_id(ids[2])
        .create()
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), from.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.payload_str(),
        Some("r3"),
        "exclusive start skips the start message"
    );

    let mut incl = client
        .reader(&topic)
        .start_message_id(ids[2])
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), incl.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload_str(), Some("r2"), "inclusive start includes it");
    assert!(incl.has_message_available().await.unwrap());
}
