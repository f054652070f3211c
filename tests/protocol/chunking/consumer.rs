//! Chunked messages (PIP-37) on the consumer side against the mock broker: chunk entries are
//! published raw (`MockBroker::publish_raw` stores them as given), as an official producer
//! writes them.

use common::{client, recv};
use support as common;

use common::chunks::{now_ms, raw_small as small, wait_acked};
use common::{full, within};

use std::time::Duration;

use pulsar_sdk::mock::wire;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, ConsumerBuilder, Error, SubscriptionType};

/// Publishes chunk `chunk_id` of message `uuid` (whole payload `whole`, split in `n` chunks
/// of `size` bytes); returns its entry id.
fn chunk(
    broker: &MockBroker,
    topic: &str,
    uuid: &str,
    whole: &[u8],
    n: usize,
    chunk_id: usize,
    publish_time: u64,
) -> u64 {
    let size = whole.len().div_ceil(n);
    let part = &whole[(chunk_id * size).min(whole.len())..((chunk_id + 1) * size).min(whole.len())];
    broker
        .publish_raw(
            topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                sequence_id: 7,
                publish_time,
                uuid: Some(uuid.into()),
                num_chunks_from_msg: Some(n as i32),
                total_chunk_msg_size: Some(whole.len() as i32),
                chunk_id: Some(chunk_id as i32),
                ..Default::default()
            },
            bytes::Bytes::copy_from_slice(part),
        )
        .unwrap()
}

fn builder(client: &Client, topic: &str) -> ConsumerBuilder {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_group_time(Duration::ZERO)
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test]
async fn interleaved_chunks_reassemble_and_acks_cover_every_chunk() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-interleaved");
    let mut c = builder(&client, &topic).subscribe().await.unwrap();
    let (a, b) = (body(1000, 1), body(700, 2));
    let now = now_ms();
    // Two producers' chunks interleaved: chunk entry ids are not contiguous.
    let mut a_ids = Vec::new();
    let mut b_ids = Vec::new();
    for i in 0..3 {
        a_ids.push(chunk(&broker, &topic, "p-a-1", &a, 3, i, now));
        b_ids.push(chunk(&broker, &topic, "p-b-1", &b, 3, i, now));
    }
    let m1 = recv(&mut c).await;
    let m2 = recv(&mut c).await;
    assert_eq!(m1.payload, a);
    assert_eq!(m2.payload, b);
    assert_eq!(m1.id.entry_id, a_ids[2], "identified by the last chunk");
    assert_eq!(m1.id.first_chunk_id().unwrap().entry_id, a_ids[0]);
    assert_eq!(m2.id.first_chunk_id().unwrap().entry_id, b_ids[0]);
    let back: pulsar_sdk::MessageId = m1.id.to_string().parse().unwrap();
    assert_eq!(back.first_chunk, m1.id.first_chunk);
    c.ack(&m1).unwrap();
    c.ack(&m2).unwrap();
    let all: Vec<u64> = a_ids.iter().chain(&b_ids).copied().collect();
    wait_acked(&broker, &all).await;
    small(&broker, &topic, "after");
    assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
}

#[tokio::test]
async fn a_missing_middle_chunk_drops_the_message_and_the_consumer_goes_on() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-missing");
    let mut c = builder(&client, &topic).subscribe().await.unwrap();
    let a = body(900, 3);
    // Old publish time: past the expiry, so the chunks that can never complete are acked
    // (upstream acks an out-of-order chunk of an expired message; here its context's too).
    let e0 = chunk(&broker, &topic, "p-a-2", &a, 3, 0, 1);
    let e2 = chunk(&broker, &topic, "p-a-2", &a, 3, 2, 1);
    // Out of order chunk ids: 1 after 2 is an orphan now.
    let e1 = chunk(&broker, &topic, "p-a-2", &a, 3, 1, 1);
    small(&broker, &topic, "next");
    let m = recv(&mut c).await;
    assert_eq!(
        m.payload_str(),
        Some("next"),
        "no broken chunked message delivered"
    );
    wait_acked(&broker, &[e0, e1, e2]).await;
}

#[tokio::test]
async fn a_resent_first_chunk_keeps_the_message() {
    // apache/pulsar#21070: M1 chunk 0, M2 chunk 0 again, M3 chunk 1 -> assembled from M2+M3;
    // M1 acked so it leaves no ack hole (#21101).
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-resent");
    let mut c = builder(&client, &topic).subscribe().await.unwrap();
    let a = body(600, 4);
    let now = now_ms();
    let m1 = chunk(&broker, &topic, "p-a-3", &a, 2, 0, now);
    let m2 = chunk(&broker, &topic, "p-a-3", &a, 2, 0, now);
    let m3 = chunk(&broker, &topic, "p-a-3", &a, 2, 1, now);
    let m = recv(&mut c).await;
    assert_eq!(m.payload, a);
    assert_eq!(m.id.first_chunk_id().unwrap().entry_id, m2);
    assert_eq!(m.id.entry_id, m3);
    wait_acked(&broker, &[m1]).await;
    c.ack(&m).unwrap();
    wait_acked(&broker, &[m1, m2, m3]).await;
}

#[tokio::test]
async fn the_oldest_pending_message_is_evicted_and_acked_when_configured() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-evict");
    let mut c = builder(&client, &topic)
        .max_pending_chunked_messages(2)
        .auto_ack_oldest_chunked_message_on_queue_full(true)
        .receiver_queue_size(2)
        .subscribe()
        .await
        .unwrap();
    let now = now_ms();
    let x = body(300, 5);
    let first = chunk(&broker, &topic, "p-x-0", &x, 2, 0, now);
    for i in 1..6 {
        // More incomplete messages than permits: their permits come back (#26675, #26661).
        chunk(&broker, &topic, &format!("p-x-{i}"), &x, 2, 0, now);
    }
    wait_acked(&broker, &[first]).await;
    for i in 0..4 {
        small(&broker, &topic, &format!("s{i}"));
    }
    for i in 0..4 {
        let m = recv(&mut c).await;
        assert_eq!(m.payload_str(), Some(format!("s{i}").as_str()));
        c.ack(&m).unwrap();
    }
    // The newest context is still there: its last chunk completes it.
    chunk(&broker, &topic, "p-x-5", &x, 2, 1, now);
    assert_eq!(recv(&mut c).await.payload, x);
}

#[tokio::test]
async fn an_incomplete_message_expires_and_is_acked() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-expire");
    let mut c = builder(&client, &topic)
        .expire_time_of_incomplete_chunked_message(Duration::from_millis(300))
        .subscribe()
        .await
        .unwrap();
    let x = body(300, 6);
    let e0 = chunk(&broker, &topic, "p-e-0", &x, 2, 0, now_ms());
    wait_acked(&broker, &[e0]).await;
    // Its last chunk now is an orphan: no message.
    chunk(&broker, &topic, "p-e-0", &x, 2, 1, 1);
    small(&broker, &topic, "after");
    assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
}

#[tokio::test]
async fn a_huge_size_claim_is_refused_with_an_error_not_allocated() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-huge");
    let mut c = builder(&client, &topic)
        .max_chunked_message_bytes(1 << 20)
        .subscribe()
        .await
        .unwrap();
    let e0 = broker
        .publish_raw(
            &topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                publish_time: now_ms(),
                uuid: Some("p-h-0".into()),
                num_chunks_from_msg: Some(3),
                total_chunk_msg_size: Some(i32::MAX),
                chunk_id: Some(0),
                ..Default::default()
            },
            bytes::Bytes::from_static(b"tiny"),
        )
        .unwrap();
    match within("error", c.recv()).await {
        Err(Error::InvalidMessage(e)) => assert!(e.contains("max_chunked_message_bytes"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    wait_acked(&broker, &[e0]).await;
    small(&broker, &topic, "after");
    assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
}

#[tokio::test]
async fn a_nacked_chunked_message_is_redelivered_whole() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-nack");
    let mut c = builder(&client, &topic)
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let x = body(500, 7);
    let now = now_ms();
    for i in 0..2 {
        chunk(&broker, &topic, "p-n-0", &x, 2, i, now);
    }
    let m = recv(&mut c).await;
    c.nack(&m).unwrap();
    let again = recv(&mut c).await;
    assert_eq!(again.payload, x);
    assert_eq!(again.id, m.id);
    assert!(again.redelivery_count >= 1);
    c.ack(&again).unwrap();
}
