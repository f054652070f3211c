//! Batching against the mock broker: batches stay within the broker's `max_message_size`, a
//! message too big on its own fails alone with `MessageTooBig`, and key-based batches carry
//! their key in the entry's metadata (what a Key_Shared broker routes by); each built entry is
//! charged the producer name its frame carries against the client memory limit.

use common::client;
use support as common;

use common::within;

use std::time::Duration;

use futures::future::join_all;
use prost::Message as _;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Error, ProducerMessage};

const KIB: usize = 1024;

async fn broker_with_limit(max: usize) -> MockBroker {
    MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(max as u32),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// The size of every SEND the broker got, as it checks it: metadata plus payload.
fn send_sizes(broker: &MockBroker) -> Vec<usize> {
    broker
        .received_of(Type::Send)
        .iter()
        .map(|r| {
            let (meta, data) = r.payload.as_ref().expect("SEND payload");
            meta.encoded_len() + data.len()
        })
        .collect()
}

/// How many messages the broker got in SENDs (a batch counts its messages).
fn sent_messages(broker: &MockBroker) -> usize {
    broker
        .received_of(Type::Send)
        .iter()
        .map(|r| {
            let (meta, _) = r.payload.as_ref().expect("SEND payload");
            meta.num_messages_in_batch.unwrap_or(1) as usize
        })
        .sum()
}

/// 4 × 30 KiB with a 64 KiB broker limit: all four used to share one 120 KiB batch and fail
/// with a raw codec error. Now a batch closes before the message that would overflow it.
#[tokio::test]
async fn batches_are_split_to_stay_within_the_brokers_limit() {
    let broker = broker_with_limit(64 * KIB).await;
    let client = client(&broker.service_url());
    let producer = client.producer("split").create().await.unwrap();
    let mut futures = Vec::new();
    for i in 0..4u8 {
        futures.push(producer.send(vec![i; 30 * KIB]).await.unwrap());
    }
    producer.flush().await.unwrap();
    for (i, r) in within("receipts", join_all(futures))
        .await
        .into_iter()
        .enumerate()
    {
        let id = r.unwrap_or_else(|e| panic!("message {i}: {e:?}"));
        assert!(id.is_batch(), "message {i} was batched: {id:?}");
    }
    assert_eq!(broker.topic_messages("split"), 2, "entries");
    assert_eq!(sent_messages(&broker), 4);
    let sizes = send_sizes(&broker);
    assert_eq!(sizes.len(), 2, "two batches of two: {sizes:?}");
    assert!(sizes.iter().all(|s| *s <= 64 * KIB), "{sizes:?}");
}

/// A message over the limit on its own fails alone, with both sizes in the error; the
/// messages batched before and after it succeed.
#[tokio::test]
async fn a_message_over_the_limit_fails_alone_and_the_others_go_on() {
    let broker = broker_with_limit(64 * KIB).await;
    let client = client(&broker.service_url());
    let producer = client.producer("too-big").create().await.unwrap();
    let before: Vec<_> = [b"a", b"b"].map(|p| p.to_vec()).to_vec();
    let mut small = Vec::new();
    for p in before {
        small.push(producer.send(p).await.unwrap());
    }
    let big = producer.send(vec![7u8; 70 * KIB]).await.unwrap();
    for p in [b"c", b"d"] {
        small.push(producer.send(p.to_vec()).await.unwrap());
    }
    producer.flush().await.unwrap();
    match within("big", big).await {
        Err(e @ Error::MessageTooBig { size, max }) => {
            assert!((70 * KIB..70 * KIB + 128).contains(&size), "{size}");
            assert_eq!(max, 64 * KIB);
            let text = e.to_string();
            assert!(
                text.contains(&size.to_string()) && text.contains(&max.to_string()),
                "{text}"
            );
            assert!(!e.is_retriable());
        }
        other => panic!("expected MessageTooBig, got {other:?}"),
    }
    for r in within("small", join_all(small)).await {
        r.unwrap();
    }
    // [a, b] and [c, d]; the big one never went on the wire.
    assert_eq!(broker.topic_messages("too-big"), 2, "entries");
    assert_eq!(sent_messages(&broker), 4);
    assert!(send_sizes(&broker).iter().all(|s| *s <= 64 * KIB));
}

/// Key-based batching: each SEND carries one key, and its metadata names it (partition key,
/// and ordering key when the messages have one).
#[tokio::test]
async fn key_based_batches_name_their_key_in_the_entry_metadata() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("keyed")
        .batching_options(BatchingOptions {
            key_based: true,
            max_publish_delay: Duration::from_millis(200),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut futures = Vec::new();
    for round in 0..2 {
        for k in 0..4 {
            let mut msg = ProducerMessage::new(format!("k{k}-{round}")).key(format!("k{k}"));
            if k == 3 {
                msg = msg.ordering_key(&b"ord"[..]);
            }
            futures.push(producer.send(msg).await.unwrap());
        }
    }
    producer.flush().await.unwrap();
    for r in within("receipts", join_all(futures)).await {
        r.unwrap();
    }
    let mut keys: Vec<_> = broker
        .received_of(Type::Send)
        .iter()
        .map(|r| {
            let (meta, _) = r.payload.as_ref().expect("SEND payload");
            assert_eq!(meta.num_messages_in_batch, Some(2), "{meta:?}");
            (meta.partition_key.clone(), meta.ordering_key.clone())
        })
        .collect();
    keys.sort();
    let expected: Vec<_> = (0..4)
        .map(|k| {
            (
                Some(format!("k{k}")),
                (k == 3).then(|| bytes::Bytes::from_static(b"ord")),
            )
        })
        .collect();
    assert_eq!(keys, expected);
}

/// Issue #31 §2 (leftover): a batching producer's entry carries the producer name in its own
/// frame (a batch of one: one copy per message) and was charged nothing for it. With a 64 KiB
/// limit and a 1,000-byte name, batches of one were built, sent and held pending without
/// bound (1,000 of them: ~1 MB of names), so another producer of the client still had the
/// whole limit. Now each entry is charged the name as it is built: once 30 entries reached the
/// broker (unanswered), 30 names are held, and a 40 KiB send elsewhere no longer fits.
#[tokio::test]
async fn a_batching_producers_entries_are_charged_the_name_their_frames_carry() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(64 * KIB)
        .build()
        .unwrap();
    let lone = BatchingOptions {
        max_messages: 1,
        ..Default::default()
    };
    let named = client
        .producer("batch-name-charge")
        .name("n".repeat(1000))
        .batching_options(lone)
        .create()
        .await
        .unwrap();
    let other = client
        .producer("batch-name-charge-other")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_secs(3600));
    let mut held = Vec::new();
    for i in 0..1000u32 {
        match named.send(vec![i as u8]).await {
            Ok(receipt) => held.push(receipt),
            Err(Error::ProducerQueueFull { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    common::wait_until("30 entries reached the broker", || {
        broker.received_of(Type::Send).len() >= 30
    })
    .await;
    match other.send(vec![0u8; 40 * KIB]).await {
        Err(Error::ProducerQueueFull { .. }) => {}
        Ok(_) => panic!(
            "40 KiB fit beside {} pending batches of one carrying a 1,000-byte name each",
            broker.received_of(Type::Send).len()
        ),
        Err(e) => panic!("{e}"),
    }
    drop(held);
}

/// The charge never deadlocks a producer whose name is larger than the whole limit: with
/// nothing of its own pending, an entry goes uncharged rather than wait (1 KiB limit, a
/// 2,000-byte name, 50 messages in batches of one, each waited for).
#[tokio::test]
async fn a_name_larger_than_the_limit_does_not_stall_a_batching_producer() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(KIB)
        .build()
        .unwrap();
    let lone = BatchingOptions {
        max_messages: 1,
        ..Default::default()
    };
    let producer = client
        .producer("batch-name-over-limit")
        .name("n".repeat(2000))
        .batching_options(lone)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    let sends: Vec<_> = {
        let mut v = Vec::new();
        for i in 0..50u32 {
            v.push(
                within("send", producer.send(vec![i as u8; 10]))
                    .await
                    .unwrap(),
            );
        }
        v
    };
    for s in within("the receipts", join_all(sends)).await {
        s.unwrap();
    }
    within("flush", producer.flush()).await.unwrap();
}
