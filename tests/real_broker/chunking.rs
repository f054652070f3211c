//! Chunked messages (PIP-37) through a real broker (pulsar-lite at its default 5 MiB
//! `max_message_size`): a 12 MB and a 50 MB message from our chunking producer come back
//! whole and byte-identical to our consumer, between small messages on the same topic.
//!
//! Live consumption on a Shared subscription, as `shared/design/pulsar-lite.md` advises
//! (Exclusive/Failover live dispatch duplicates entries there). pulsar-lite can stall dispatch
//! after a large entry until the next publish or FLOW (same document; seen with the official
//! client's chunks, see `interop.rs`): while the consumer waits, a second producer publishes a
//! small "nudge" message every 500 ms, after the messages under test; nudges are skipped.

use std::time::Duration;

use pulsar_sdk::{Client, CompressionType, Consumer, InitialPosition, Message, SubscriptionType};
use support::{shared_broker, unique_name};

/// How long one message may take to arrive (a 50 MB message in a debug build included).
const STEP: Duration = Duration::from_secs(60);
const MB: usize = 1_000_000;

fn client() -> Client {
    Client::builder()
        .service_url(shared_broker().url())
        .operation_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn recv(consumer: &mut Consumer, what: &str) -> Message {
    support::recv_within(consumer, STEP, what).await
}

/// `n` bytes: the first half does not compress (xorshift), the second half is zeros, so a
/// compressed message is still several chunks.
fn big(n: usize, seed: u32) -> Vec<u8> {
    let mut x = u64::from(seed) * 2 + 88_172_645_463_325_253;
    let mut v: Vec<u8> = (0..n / 2)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    v.resize(n, 0);
    v
}

async fn round_trip(sizes: &[usize], compression: CompressionType) {
    let client = client();
    let topic = unique_name("real-chunking");
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("sub"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .chunking(true)
        .compression(compression)
        .create()
        .await
        .unwrap();
    // small, big, small, big, ..., small
    let mut sent: Vec<Vec<u8>> = vec![b"small-0".to_vec()];
    for (i, &n) in sizes.iter().enumerate() {
        sent.push(big(n, i as u32));
        sent.push(format!("small-{}", i + 1).into_bytes());
    }
    let mut ids = Vec::new();
    for payload in &sent {
        ids.push(producer.send_and_wait(payload.clone()).await.unwrap());
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.is_chunked(), i % 2 == 1, "receipt {i}: {id}");
    }
    let nudges = support::nudge(&client, &topic).await;
    for (i, want) in sent.iter().enumerate() {
        let what = format!("message {i} ({} bytes)", want.len());
        let mut m = recv(&mut consumer, &what).await;
        while m.payload.starts_with(b"nudge-") {
            consumer.ack(&m).unwrap();
            m = recv(&mut consumer, &what).await;
        }
        assert_eq!(m.payload.len(), want.len(), "{what}: length");
        assert!(m.payload[..] == want[..], "{what}: bytes differ");
        assert_eq!(m.id, ids[i], "{what}: the receipt's id");
        assert_eq!(m.id.first_chunk, ids[i].first_chunk, "{what}");
        consumer.ack(&m).unwrap();
    }
    nudges.abort();
    client.close().await.unwrap();
}

#[tokio::test]
async fn a_12_mb_and_a_50_mb_message_round_trip_between_small_ones() {
    round_trip(&[12 * MB, 50 * MB], CompressionType::None).await;
}

#[tokio::test]
async fn a_compressed_chunked_message_round_trips() {
    // 24 MB that compress to about 12 MB: still chunked after compression.
    round_trip(&[24 * MB], CompressionType::Zstd).await;
}
