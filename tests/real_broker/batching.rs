//! Batching against a real broker (pulsar-lite, started by the harness): key-based batches are
//! spread over Key_Shared consumers by their key, and batches stay within the broker's
//! `max_message_size` (5 MiB by default), while a message over it on its own fails alone with
//! `MessageTooBig`.
//!
//! As in `real_consumer.rs`, the two Key_Shared consumers share one client (pulsar-lite
//! rejects a second client's consumer whose id is already used on the subscription).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, Consumer, Error, InitialPosition, Message, SubscriptionType};
use support::unique_name;

/// How long one message may take to arrive.
const STEP: Duration = Duration::from_secs(15);
/// How long we watch for messages that must not come.
const QUIET: Duration = Duration::from_millis(1000);
const MIB: usize = 1024 * 1024;

use support::shared_client as client;

async fn subscribe(
    client: &Client,
    topic: &str,
    subscription: &str,
    sub_type: SubscriptionType,
) -> Consumer {
    client
        .consumer(topic)
        .subscription(subscription)
        .subscription_type(sub_type)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap()
}

async fn recv(consumer: &mut Consumer, what: &str) -> Message {
    support::recv_within(consumer, STEP, what).await
}

/// 16 keys × 2 messages through a key-based batching producer: each batch holds one key's two
/// messages. The broker routes a Key_Shared entry by the key in its metadata. To tell routing by
/// key from any other spreading (pulsar-lite spreads keyless entries over both consumers too),
/// every key first gets one unbatched message: its batch must follow it to the same consumer.
#[tokio::test]
async fn key_based_batches_are_shared_among_key_shared_consumers_by_key() {
    const KEYS: usize = 16;
    const PER_KEY: usize = 2;
    let client = client();
    let topic = unique_name("key-batches");
    let sub = unique_name("sub");
    let mut a = subscribe(&client, &topic, &sub, SubscriptionType::KeyShared).await;
    let mut b = subscribe(&client, &topic, &sub, SubscriptionType::KeyShared).await;
    let unbatched = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut sends = Vec::new();
    for k in 0..KEYS {
        let msg = pulsar_sdk::ProducerMessage::new(format!("k{k}-single")).key(format!("k{k}"));
        sends.push(unbatched.send(msg).await.unwrap());
    }
    for r in join_all(sends).await {
        r.unwrap();
    }
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            key_based: true,
            // Long enough that both messages of a key share their batch.
            max_publish_delay: Duration::from_millis(500),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut sends = Vec::new();
    for round in 0..PER_KEY {
        for k in 0..KEYS {
            let msg =
                pulsar_sdk::ProducerMessage::new(format!("k{k}-{round}")).key(format!("k{k}"));
            sends.push(producer.send(msg).await.unwrap());
        }
    }
    producer.flush().await.unwrap();
    for r in join_all(sends).await {
        let id = r.unwrap();
        assert!(id.is_batch(), "sent in a batch: {id:?}");
        assert_eq!(id.batch_size, PER_KEY as i32, "one key per batch: {id:?}");
    }

    // consumer (0 = a, 1 = b) -> key -> payloads in arrival order
    let mut seen: [BTreeMap<String, Vec<String>>; 2] = Default::default();
    let total = KEYS * (PER_KEY + 1);
    for n in 0..total {
        let (which, m) = tokio::time::timeout(STEP, async {
            tokio::select! {
                m = a.recv() => (0, m.unwrap()),
                m = b.recv() => (1, m.unwrap()),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("only {n} of {total} messages arrived"));
        if which == 0 { a.ack(&m) } else { b.ack(&m) }.unwrap();
        seen[which]
            .entry(m.key.clone().expect("every message has its key"))
            .or_default()
            .push(m.payload_str().unwrap().to_string());
    }
    for (name, c) in [("a", &mut a), ("b", &mut b)] {
        if let Ok(r) = tokio::time::timeout(QUIET, c.recv()).await {
            panic!(
                "consumer {name}: unexpected extra message {:?}",
                r.map(|m| m.id)
            );
        }
    }
    for k in 0..KEYS {
        let key = format!("k{k}");
        let (in_a, in_b) = (seen[0].get(&key), seen[1].get(&key));
        assert!(
            in_a.is_none() || in_b.is_none(),
            "{key} went to both consumers: {in_a:?} / {in_b:?}"
        );
        let got = in_a
            .or(in_b)
            .unwrap_or_else(|| panic!("{key} never arrived"));
        let mut expected = vec![format!("{key}-single")];
        expected.extend((0..PER_KEY).map(|r| format!("{key}-{r}")));
        assert_eq!(
            got, &expected,
            "{key}: all its messages, in order, to one consumer"
        );
    }
    assert!(
        !seen[0].is_empty() && !seen[1].is_empty(),
        "both consumers got keys ({} / {} of {KEYS})",
        seen[0].len(),
        seen[1].len()
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A producer whose batches could hold 64 MiB sends 8 × 1 MiB: the broker's 5 MiB limit closes
/// each batch before it would overflow, and every message arrives.
#[tokio::test]
async fn batches_stay_within_the_brokers_default_limit() {
    const N: usize = 8;
    let client = client();
    let topic = unique_name("big-batches");
    let sub = unique_name("sub");
    let mut consumer = subscribe(&client, &topic, &sub, SubscriptionType::Shared).await;
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_bytes: 64 * MIB,
            max_publish_delay: Duration::from_secs(1),
            key_based: false,
        })
        .create()
        .await
        .unwrap();
    let mut sends = Vec::new();
    for i in 0..N {
        sends.push(producer.send(vec![i as u8; MIB]).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut entries = BTreeMap::<(u64, u64), usize>::new();
    for (i, r) in join_all(sends).await.into_iter().enumerate() {
        let id = r.unwrap_or_else(|e| panic!("message {i}: {e:?}"));
        assert!(id.is_batch(), "message {i} sent in a batch: {id:?}");
        *entries.entry((id.ledger_id, id.entry_id)).or_default() += 1;
    }
    assert!(
        entries.len() >= 2 && entries.values().all(|n| *n <= 4),
        "at most 4 MiB-messages fit under 5 MiB: {entries:?}"
    );
    let mut got = Vec::new();
    for i in 0..N {
        let m = recv(&mut consumer, &format!("message {i}")).await;
        consumer.ack(&m).unwrap();
        assert_eq!(m.payload.len(), MIB);
        got.push(m.payload[0]);
    }
    got.sort();
    assert_eq!(got, (0..N as u8).collect::<Vec<_>>());
    consumer.close().await.unwrap();
}

/// A 6 MiB message is over the broker's 5 MiB limit on its own: it fails alone with
/// `MessageTooBig`, and the batched messages around it succeed.
#[tokio::test]
async fn a_message_over_the_brokers_default_limit_fails_alone() {
    let client = client();
    let topic = unique_name("too-big");
    let sub = unique_name("sub");
    let mut consumer = subscribe(&client, &topic, &sub, SubscriptionType::Shared).await;
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_bytes: 64 * MIB,
            max_publish_delay: Duration::from_millis(200),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let before = producer.send("before").await.unwrap();
    let big = producer.send(vec![1u8; 6 * MIB]).await.unwrap();
    let after = producer.send("after").await.unwrap();
    producer.flush().await.unwrap();
    match big.await {
        Err(e @ Error::MessageTooBig { size, max }) => {
            assert!((6 * MIB..6 * MIB + 256).contains(&size), "{size}");
            assert_eq!(max, 5 * MIB);
            assert!(!e.is_retriable());
        }
        other => panic!("expected MessageTooBig, got {other:?}"),
    }
    before.await.unwrap();
    after.await.unwrap();
    let mut got = Vec::new();
    for i in 0..2 {
        let m = recv(&mut consumer, &format!("message {i}")).await;
        consumer.ack(&m).unwrap();
        got.push(m.payload_str().unwrap().to_string());
    }
    assert_eq!(got, ["before", "after"]);
    consumer.close().await.unwrap();
}
