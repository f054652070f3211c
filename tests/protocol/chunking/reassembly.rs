//! Review probes of chunk reassembly (PIP-37) with hand-made chunk entries (as another
//! producer, or a hostile one, writes them), against the mock broker.

use support as common;

use common::chunks::*;
use common::{full, wait_until, within};

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, SubscriptionType};

/// dropped), and the next good message arrives.
#[tokio::test]
async fn hostile_chunk_headers_do_not_stall_the_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-hostile");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .expire_time_of_incomplete_chunked_message(Duration::from_millis(300))
        .max_chunked_message_bytes(1 << 20)
        .subscribe()
        .await
        .unwrap();
    // chunk_id >= num_chunks.
    raw_chunk(&broker, &topic, "h-1", 2, 2, 10, b"xxxxx");
    // Negative fields.
    raw_chunk(&broker, &topic, "h-2", 2, -1, 10, b"xxxxx");
    raw_chunk(&broker, &topic, "h-3", 2, 0, -5, b"xxxxx");
    // A size claim above the cap.
    raw_chunk(&broker, &topic, "h-4", 2, 0, i32::MAX, b"xxxxx");
    // Chunks larger than claimed.
    raw_chunk(&broker, &topic, "h-5", 2, 0, 4, b"xxxxx");
    // Chunks smaller than claimed.
    raw_chunk(&broker, &topic, "h-6", 2, 0, 100, b"xxxxx");
    raw_chunk(&broker, &topic, "h-6", 2, 1, 100, b"xxxxx");
    // A huge chunk count: incomplete forever, expires.
    raw_chunk(&broker, &topic, "h-7", i32::MAX, 0, 10, b"xxxxx");
    // An empty uuid.
    raw_chunk(&broker, &topic, "", 2, 0, 10, b"xxxxx");
    raw_small(&broker, &topic, "good");
    let mut errors = 0;
    loop {
        match within("recv", c.recv()).await {
            Ok(m) => {
                assert_eq!(m.payload_str(), Some("good"), "only the good one arrives");
                c.ack(&m).unwrap();
                break;
            }
            Err(Error::InvalidMessage(_)) => errors += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(errors >= 6, "{errors} error items");
    // Every hostile entry is acked eventually (the incomplete one after its expiry): no
    // backlog is left behind.
    raw_small(&broker, &topic, "tick");
    let m = recv(&mut c).await;
    c.ack(&m).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    raw_small(&broker, &topic, "tick2");
    let m = recv(&mut c).await;
    c.ack(&m).unwrap();
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// message whose chunks carry no bytes is refused.
#[tokio::test]
async fn empty_chunks_of_a_huge_count_are_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-empty-chunks");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    for i in 0..50 {
        raw_chunk(&broker, &topic, "e-1", 1_000_000, i, 10, b"");
    }
    raw_small(&broker, &topic, "good");
    let mut refused = false;
    loop {
        match within("recv", c.recv()).await {
            Ok(m) => {
                assert_eq!(m.payload_str(), Some("good"));
                break;
            }
            Err(Error::InvalidMessage(_)) => refused = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused,
        "chunks with no bytes (a producer never sends one) are refused"
    );
}

/// older one is evicted (redelivered), and both still arrive whole in the end.
#[tokio::test]
async fn the_byte_cap_evicts_and_both_messages_still_arrive() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-byte-cap");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .max_chunked_message_bytes(1000)
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let a = noise(600, 1);
    let b = noise(600, 2);
    raw_chunk(&broker, &topic, "a-1", 2, 0, 600, &a[..300]);
    raw_chunk(&broker, &topic, "b-1", 2, 0, 600, &b[..300]);
    raw_chunk(&broker, &topic, "a-1", 2, 1, 600, &a[300..]);
    raw_chunk(&broker, &topic, "b-1", 2, 1, 600, &b[300..]);
    let mut got = Vec::new();
    while got.len() < 2 {
        let m = recv(&mut c).await;
        c.ack(&m).unwrap();
        got.push(m.payload.to_vec());
    }
    assert!(got.contains(&a) && got.contains(&b));
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// started again, its sequence ids from 0: the uuid is `producerName-sequenceId`).
#[tokio::test]
async fn a_refused_uuid_does_not_swallow_a_later_message_with_the_same_uuid() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-refused-uuid");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .max_chunked_message_bytes(1000)
        .subscribe()
        .await
        .unwrap();
    // Refused: it claims 5000 bytes.
    raw_chunk(&broker, &topic, "p-5", 2, 0, 5000, &[1u8; 2500]);
    raw_chunk(&broker, &topic, "p-5", 2, 1, 5000, &[1u8; 2500]);
    match within("recv", c.recv()).await {
        Err(Error::InvalidMessage(e)) => assert!(e.contains("p-5"), "{e}"),
        other => panic!("expected the refusal, got {other:?}"),
    }
    // Later, the same uuid for a valid message.
    let body = noise(600, 40);
    raw_chunk(&broker, &topic, "p-5", 2, 0, 600, &body[..300]);
    raw_chunk(&broker, &topic, "p-5", 2, 1, 600, &body[300..]);
    raw_small(&broker, &topic, "good");
    let m = recv(&mut c).await;
    assert!(
        m.payload == body,
        "the valid message with a reused uuid arrives"
    );
    assert_eq!(recv(&mut c).await.payload_str(), Some("good"));
}

/// (its first chunk is before the last message the reader received).
#[tokio::test]
async fn a_reader_reconnecting_between_interleaved_chunked_messages_loses_neither() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-reader-interleaved");
    let x = noise(600, 60);
    let y = noise(600, 61);
    raw_small(&broker, &topic, "a");
    let mut r = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    assert_eq!(
        within("a", r.recv()).await.unwrap().payload_str(),
        Some("a")
    );
    raw_chunk(&broker, &topic, "x-1", 2, 0, 600, &x[..300]);
    raw_chunk(&broker, &topic, "y-1", 2, 0, 600, &y[..300]);
    raw_chunk(&broker, &topic, "x-1", 2, 1, 600, &x[300..]);
    let m = within("x", r.recv()).await.unwrap();
    assert!(m.payload == x);
    broker.drop_all_connections();
    raw_chunk(&broker, &topic, "y-1", 2, 1, 600, &y[300..]);
    raw_small(&broker, &topic, "b");
    let m = within("y", r.recv()).await.unwrap();
    assert!(
        m.payload == y,
        "got {:?} instead of y",
        m.payload_str().unwrap_or("(binary)")
    );
    assert_eq!(
        within("b", r.recv()).await.unwrap().payload_str(),
        Some("b")
    );
}

/// other is acked.
#[tokio::test]
async fn exclusive_eviction_of_interleaved_messages_still_delivers_both() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-exclusive-evict");
    let mut c = consumer(&client, &topic, SubscriptionType::Exclusive)
        .max_pending_chunked_messages(1)
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let a = noise(600, 80);
    let b = noise(600, 81);
    raw_chunk(&broker, &topic, "a-1", 2, 0, 600, &a[..300]);
    raw_chunk(&broker, &topic, "b-1", 2, 0, 600, &b[..300]);
    raw_chunk(&broker, &topic, "a-1", 2, 1, 600, &a[300..]);
    raw_chunk(&broker, &topic, "b-1", 2, 1, 600, &b[300..]);
    assert_ne!(a, b);
    let mut got: Vec<Vec<u8>> = Vec::new();
    while !(got.contains(&a) && got.contains(&b)) {
        let m = recv(&mut c).await;
        c.ack(&m).unwrap();
        got.push(m.payload.to_vec());
        assert!(got.len() < 10, "livelock: {} deliveries", got.len());
    }
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// subscription every `negative_ack_delay` (each rewind redelivers every unacked message).
#[tokio::test]
async fn an_orphan_chunk_on_exclusive_does_not_rewind_the_subscription_repeatedly() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-orphan-exclusive");
    let mut c = consumer(&client, &topic, SubscriptionType::Exclusive)
        .negative_ack_delay(Duration::from_millis(50))
        .expire_time_of_incomplete_chunked_message(Duration::from_millis(400))
        .subscribe()
        .await
        .unwrap();
    let x = noise(600, 90);
    raw_chunk(&broker, &topic, "x-1", 2, 1, 600, &x[300..]);
    raw_small(&broker, &topic, "m1");
    let m1 = recv(&mut c).await;
    assert_eq!(m1.payload_str(), Some("m1"));
    // The application holds m1 (not acked yet) while it works on it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rewinds = broker
        .received_of(Type::RedeliverUnacknowledgedMessages)
        .len();
    let mut again = 0;
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(50), c.recv()).await {
        assert_eq!(m.payload_str(), Some("m1"));
        again += 1;
    }
    assert!(
        rewinds <= 2,
        "{rewinds} rewinds in 1 s (m1 delivered {again} more times)"
    );
    // No ack hole: once expired, the orphan chunk is acked.
    c.ack(&m1).unwrap();
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// reconnects before its last chunk arrives.
#[tokio::test]
async fn a_cumulative_ack_does_not_lose_an_interleaved_incomplete_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-chunk-cumulative-interleaved");
    let mut c = consumer(&client, &topic, SubscriptionType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    let x = noise(600, 100);
    let y = noise(600, 101);
    raw_chunk(&broker, &topic, "x-1", 2, 0, 600, &x[..300]);
    raw_chunk(&broker, &topic, "y-1", 2, 0, 600, &y[..300]);
    raw_chunk(&broker, &topic, "x-1", 2, 1, 600, &x[300..]);
    let m = recv(&mut c).await;
    assert!(m.payload == x);
    c.ack_cumulative(&m).unwrap();
    wait_until("the cumulative ack reached the broker", || {
        !broker.received_of(Type::Ack).is_empty()
    })
    .await;
    broker.drop_all_connections();
    raw_chunk(&broker, &topic, "y-1", 2, 1, 600, &y[300..]);
    let m = recv(&mut c).await;
    assert!(m.payload == y, "y arrives after the reconnect");
    c.ack_cumulative(&m).unwrap();
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}
