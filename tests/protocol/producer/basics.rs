//! Producer behaviour against the in-memory mock broker (protocol tier, loopback TCP, real
//! time with generous timeouts).

use common::client;
use support as common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::future::join_all;
use prost::Message as _;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, Received};
use pulsar_sdk::producer::{BatchingOptions, ProducerAccessMode};
use pulsar_sdk::{
    Client, Error, MessageId, ProducerMessage, QueueLimit, ServerError, SubscriptionType,
};
use pulsar_sdk::{InitialPosition, SendFuture};

/// Bound on anything that should happen "soon"; far above what any step needs.
const WAIT: Duration = Duration::from_secs(10);

fn full(topic: &str) -> String {
    format!("persistent://public/default/{topic}")
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing after {WAIT:?}"))
}

/// Every SEND the broker received, in arrival order.
fn sends(broker: &MockBroker) -> Vec<Received> {
    broker.received_of(Type::Send)
}

fn send_cmd(r: &Received) -> &wire::CommandSend {
    r.command.send.as_ref().expect("SEND body")
}

/// Splits a batch payload into (single-message metadata, payload) records.
fn parse_batch(mut data: Bytes, n: usize) -> Vec<(wire::SingleMessageMetadata, Bytes)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let len = data.get_u32() as usize;
        let meta = wire::SingleMessageMetadata::decode(data.split_to(len)).expect("metadata");
        let body = data.split_to(meta.payload_size as usize);
        out.push((meta, body));
    }
    assert!(data.is_empty(), "trailing bytes after {n} batch records");
    out
}

/// Every message payload the broker received in SEND frames, in wire order, unpacking
/// batches.
fn sent_payloads(broker: &MockBroker) -> Vec<Bytes> {
    let mut out = Vec::new();
    for r in sends(broker) {
        let (meta, data) = r.payload.clone().expect("SEND payload");
        match meta.num_messages_in_batch {
            Some(n) => out.extend(parse_batch(data, n as usize).into_iter().map(|(_, b)| b)),
            None => out.push(data),
        }
    }
    out
}

/// Reads every stored message of `topic` from the beginning with a fresh reader.
async fn read_all(client: &Client, topic: &str, expected: usize) -> Vec<pulsar_sdk::Message> {
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut out = Vec::new();
    while out.len() < expected {
        out.push(within("reading back", reader.recv()).await.unwrap());
    }
    // Nothing beyond what was expected.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), reader.recv())
            .await
            .is_err(),
        "more than {expected} messages stored"
    );
    reader.close().await.unwrap();
    out
}

#[tokio::test]
async fn a_thousand_pipelined_sends_resolve_in_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "pipelined";
    let producer = client.producer(topic).create().await.unwrap();
    let mut receipts: Vec<SendFuture> = Vec::new();
    for i in 0..1000 {
        receipts.push(producer.send(format!("m-{i}")).await.unwrap());
    }
    let ids: Vec<MessageId> = within("receipts", join_all(receipts))
        .await
        .into_iter()
        .map(|r| r.expect("every send succeeds"))
        .collect();
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids must increase: {} then {}", w[0], w[1]);
    }
    // The broker stored them in send order.
    let stored = read_all(&client, topic, 1000).await;
    for (i, m) in stored.iter().enumerate() {
        assert_eq!(m.payload_str(), Some(format!("m-{i}").as_str()));
        assert_eq!(m.id, ids[i], "stored id matches the receipt");
    }
    // With default batching, far fewer entries than messages.
    assert!(broker.topic_messages(topic) < 1000);
}

/// A loop of sends that never has to wait for room still lets other tasks of a
/// current-thread runtime run (like a send on a tokio channel, it spends the task's budget).
#[tokio::test]
async fn a_loop_of_sends_with_room_yields_to_other_tasks() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client.producer("yields").create().await.unwrap();
    let other_ran = Arc::new(AtomicBool::new(false));
    let flag = other_ran.clone();
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let mut receipts = Vec::new();
    let mut ran_after = None;
    // Fewer than the queue holds (4,096): none of these sends has to wait.
    for i in 0..3000 {
        receipts.push(producer.send(format!("m-{i}")).await.unwrap());
        if ran_after.is_none() && other_ran.load(Ordering::SeqCst) {
            ran_after = Some(i);
        }
    }
    assert!(
        ran_after.is_some(),
        "the spawned task never ran during 3000 sends"
    );
    for r in within("receipts", join_all(receipts)).await {
        r.expect("every send succeeds");
    }
}

#[tokio::test]
async fn default_batching_packs_many_messages_into_few_sends() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client.producer("batched").create().await.unwrap();
    let mut receipts = Vec::new();
    for i in 0..200 {
        receipts.push(producer.send(format!("b-{i}")).await.unwrap());
    }
    for r in within("receipts", join_all(receipts)).await {
        let id = r.unwrap();
        assert!(id.is_batch(), "{id} should be in a batch");
    }
    let frames = sends(&broker);
    assert!(
        frames.len() < 20,
        "200 quick sends should take few SEND frames, got {}",
        frames.len()
    );
    let total: i32 = frames
        .iter()
        .map(|r| send_cmd(r).num_messages.unwrap_or(1))
        .sum();
    assert_eq!(total, 200);
    for r in &frames {
        let (meta, _) = r.payload.as_ref().unwrap();
        assert_eq!(
            meta.num_messages_in_batch,
            send_cmd(r).num_messages,
            "metadata and command agree on the batch size"
        );
    }
    assert_eq!(
        sent_payloads(&broker),
        (0..200)
            .map(|i| Bytes::from(format!("b-{i}")))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn batching_off_sends_one_frame_per_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("unbatched")
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..50 {
        receipts.push(producer.send(format!("u-{i}")).await.unwrap());
    }
    for r in within("receipts", join_all(receipts)).await {
        assert!(!r.unwrap().is_batch());
    }
    let frames = sends(&broker);
    assert_eq!(frames.len(), 50);
    for (i, r) in frames.iter().enumerate() {
        let cmd = send_cmd(r);
        assert_eq!(cmd.num_messages.unwrap_or(1), 1);
        assert_eq!(cmd.sequence_id, i as u64);
        let (meta, data) = r.payload.as_ref().unwrap();
        assert_eq!(meta.num_messages_in_batch, None);
        assert_eq!(meta.sequence_id, i as u64);
        assert_eq!(data, &Bytes::from(format!("u-{i}")));
    }
    assert_eq!(broker.topic_messages("unbatched"), 50);
}

#[tokio::test]
async fn key_based_batching_never_mixes_keys_in_a_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("key-batches")
        .batching_options(BatchingOptions {
            key_based: true,
            max_publish_delay: Duration::from_millis(50),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let keys = ["a", "b", "c"];
    let mut receipts = Vec::new();
    for i in 0..90 {
        let key = keys[i % 3];
        receipts.push(
            producer
                .send(ProducerMessage::new(format!("{key}-{i}")).key(key))
                .await
                .unwrap(),
        );
    }
    for r in within("receipts", join_all(receipts)).await {
        r.unwrap();
    }
    let mut per_key: HashMap<String, usize> = HashMap::new();
    let frames = sends(&broker);
    assert!(frames.len() < 90, "key-based batching still batches");
    for r in &frames {
        let (meta, data) = r.payload.clone().unwrap();
        let n = meta.num_messages_in_batch.expect("a batch") as usize;
        let records = parse_batch(data, n);
        let batch_keys: BTreeSet<Option<String>> = records
            .iter()
            .map(|(m, _)| m.partition_key.clone())
            .collect();
        assert_eq!(batch_keys.len(), 1, "one key per batch, got {batch_keys:?}");
        for (m, body) in records {
            let key = m.partition_key.unwrap();
            assert!(body.starts_with(key.as_bytes()));
            *per_key.entry(key).or_default() += 1;
        }
    }
    assert_eq!(per_key.len(), 3);
    assert!(per_key.values().all(|&n| n == 30));
}

/// Batches go on the wire in sequence-id order, also with key-based batching: a broker with
/// deduplication drops a SEND whose sequence id is not above the last one it persisted.
#[tokio::test]
async fn key_based_batches_go_out_in_sequence_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("key-batch-order")
        .batching_options(BatchingOptions {
            key_based: true,
            max_messages: 3,
            max_publish_delay: Duration::from_secs(5),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    // seq 0 = b (opens b's batch), seq 1..=3 = a (fills a's batch of 3, sent at once).
    let mut receipts = vec![producer
        .send(ProducerMessage::new("b-0").key("b"))
        .await
        .unwrap()];
    for i in 1..=3 {
        receipts.push(
            producer
                .send(ProducerMessage::new(format!("a-{i}")).key("a"))
                .await
                .unwrap(),
        );
    }
    producer.flush().await.unwrap();
    for r in within("receipts", join_all(receipts)).await {
        r.unwrap();
    }
    let seqs: Vec<u64> = sends(&broker)
        .iter()
        .map(|r| send_cmd(r).sequence_id)
        .collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(seqs, sorted, "SEND sequence ids must not go backwards");
}

#[tokio::test]
async fn sequence_ids_resume_from_the_brokers_last_sequence_id() {
    let broker = MockBroker::start().await.unwrap();
    // The broker answers the last sequence id only with deduplication on (upstream
    // `MessageDeduplication`; -1 without it).
    broker.set_deduplication("public/default", true).unwrap();
    let client = client(&broker.service_url());
    let topic = "resume-seq";
    let producer = client
        .producer(topic)
        .name("seq-producer")
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..5 {
        producer.send_and_wait(format!("first-{i}")).await.unwrap();
    }
    producer.close().await.unwrap();
    assert_eq!(
        sends(&broker)
            .iter()
            .map(|r| send_cmd(r).sequence_id)
            .collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );

    let again = client
        .producer(topic)
        .name("seq-producer")
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        again.send_and_wait(format!("second-{i}")).await.unwrap();
    }
    let all = sends(&broker);
    assert_eq!(all.len(), 8);
    let second: Vec<u64> = all[5..].iter().map(|r| send_cmd(r).sequence_id).collect();
    assert_eq!(second, [5, 6, 7]);
    let meta_seqs: Vec<u64> = all[5..]
        .iter()
        .map(|r| r.payload.as_ref().unwrap().0.sequence_id)
        .collect();
    assert_eq!(meta_seqs, [5, 6, 7]);
    // Both creations went out with the user-given name.
    for p in broker.received_of(Type::Producer) {
        let p = p.command.producer.unwrap();
        assert_eq!(p.producer_name.as_deref(), Some("seq-producer"));
        assert_eq!(p.user_provided_producer_name, Some(true));
    }
}

#[tokio::test]
async fn sends_to_an_unresponsive_broker_time_out_and_later_sends_succeed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "send-timeout";
    let producer = client
        .producer(topic)
        .batching(false)
        .send_timeout(Duration::from_secs(2))
        .create()
        .await
        .unwrap();
    let before = producer.send_and_wait("before").await.unwrap();

    broker.set_unresponsive(true);
    let mut stuck = Vec::new();
    for i in 0..3 {
        stuck.push(producer.send(format!("stuck-{i}")).await.unwrap());
    }
    // The broker keeps recording while silent: wait until it has the three SENDs.
    within(
        "stuck sends reach the broker",
        broker.wait_for_commands(Type::Send, 4, WAIT),
    )
    .await
    .expect("4 SENDs");
    for r in within("send timeouts", join_all(stuck)).await {
        match r {
            Err(Error::Timeout { operation, after }) => {
                assert_eq!(operation, "send");
                assert_eq!(after, Duration::from_secs(2));
            }
            other => panic!("expected a send timeout, got {other:?}"),
        }
    }

    // The connection outlives the timeouts (keep-alive is 30 s): once the broker answers again,
    // new sends go through on it.
    broker.set_unresponsive(false);
    let after = within("send after resume", producer.send_and_wait("after"))
        .await
        .expect("a send after the broker recovers succeeds");
    assert!(after > before);
    assert_eq!(broker.accepted_connections(), 1);
    // The timed-out messages' fate was unknown to the client: this broker did store them.
    assert_eq!(broker.topic_messages(topic), 5);
}

/// Issue #31, section 2: a pending message holds its key and properties too, not only its
/// payload (a 100-byte payload with 800 bytes of properties took 100 bytes of the limit).
#[tokio::test]
async fn memory_limit_counts_a_messages_key_and_properties() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .memory_limit(1024)
        .build()
        .unwrap();
    let producer = client
        .producer("mem-metadata")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(500));
    let mut msg = ProducerMessage::new(vec![1u8; 100]);
    msg.key = Some("k".repeat(100));
    msg.properties.insert("p".into(), "v".repeat(700));
    let first = producer.send(msg).await.unwrap();
    // 100 + 100 + 701 + 8 bytes are held: 200 more do not fit.
    match producer.send(vec![2u8; 200]).await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
        }
        other => panic!("expected ProducerQueueFull, got {other:?}"),
    }
    within("first receipt", first).await.unwrap();
    broker.set_response_delay(Duration::ZERO);
    producer.send_and_wait(vec![3u8; 1000]).await.unwrap();
}

#[tokio::test]
async fn memory_limit_fails_sends_at_once_when_not_blocking() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .memory_limit(1024)
        .build()
        .unwrap();
    let producer = client
        .producer("mem-full")
        .batching(false)
        .create()
        .await
        .unwrap();
    // Keep receipts away long enough for the first message to hold its memory.
    broker.set_response_delay(Duration::from_millis(500));
    let first = producer.send(vec![1u8; 600]).await.unwrap();
    match producer.send(vec![2u8; 600]).await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
        }
        other => panic!("expected ProducerQueueFull, got {other:?}"),
    }
    // A message that fits in what is left is accepted.
    let small = producer.send(vec![3u8; 100]).await.unwrap();
    within("first receipt", first).await.unwrap();
    within("small receipt", small).await.unwrap();
    // The memory is released with the receipts.
    broker.set_response_delay(Duration::ZERO);
    producer.send_and_wait(vec![4u8; 900]).await.unwrap();
    assert_eq!(broker.topic_messages("mem-full"), 3);
}

#[tokio::test]
async fn memory_limit_blocks_until_receipts_free_memory() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .memory_limit(1024)
        .build()
        .unwrap();
    let producer = client
        .producer("mem-block")
        .batching(false)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(500));
    let first = producer.send(vec![1u8; 600]).await.unwrap();
    // This send waits for the first receipt to free memory, then is queued.
    let second = within("blocked send", producer.send(vec![2u8; 600]))
        .await
        .unwrap();
    // By the time it was queued, the first had its receipt.
    let first = tokio::time::timeout(Duration::from_millis(1), first)
        .await
        .expect("the first receipt freed the memory")
        .unwrap();
    let second = within("second receipt", second).await.unwrap();
    assert!(first < second);
    assert_eq!(broker.topic_messages("mem-block"), 2);
}

#[tokio::test]
async fn max_pending_messages_limits_the_queue() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("max-pending")
        .batching(false)
        .max_pending_messages(2)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(500));
    let a = producer.send("a").await.unwrap();
    let b = producer.send("b").await.unwrap();
    match producer.send("c").await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(
                matches!(limit, QueueLimit::MaxPendingMessages { .. }),
                "{limit}"
            )
        }
        other => panic!("expected ProducerQueueFull, got {other:?}"),
    }
    within("a", a).await.unwrap();
    within("b", b).await.unwrap();
    producer.send_and_wait("d").await.unwrap();

    // Blocking instead: the third send waits for a slot.
    let blocking = client
        .producer("max-pending-block")
        .batching(false)
        .max_pending_messages(2)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    let futures = vec![
        blocking.send("a").await.unwrap(),
        blocking.send("b").await.unwrap(),
        within("blocked send", blocking.send("c")).await.unwrap(),
    ];
    for r in within("receipts", join_all(futures)).await {
        r.unwrap();
    }
    assert_eq!(broker.topic_messages("max-pending-block"), 3);
}

#[tokio::test]
async fn a_message_over_the_brokers_limit_fails_and_later_ones_succeed() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("too-big")
        .batching(false)
        .create()
        .await
        .unwrap();
    match producer.send_and_wait(vec![7u8; 2048]).await {
        Err(Error::MessageTooBig { size, max }) => {
            // The payload plus its metadata, as the broker counts it.
            assert!((2048..2048 + 128).contains(&size), "{size}");
            assert_eq!(max, 1024);
        }
        other => panic!("expected MessageTooBig, got {other:?}"),
    }
    let id = producer.send_and_wait(vec![1u8; 100]).await.unwrap();
    assert_eq!(broker.topic_messages("too-big"), 1);
    assert!(!id.is_batch());
    // Never put on the wire.
    assert_eq!(sends(&broker).len(), 1);
}

/// With batching on, an oversized message must fail on its own, like the Java client which
/// checks each message's size before adding it to a batch: the small messages batched around
/// it are fine and must succeed.
#[tokio::test]
async fn an_oversized_message_does_not_fail_the_batch_it_joins() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    let batched = client.producer("too-big-batched").create().await.unwrap();
    let small1 = batched.send(vec![1u8; 10]).await.unwrap();
    let big = batched.send(vec![2u8; 2048]).await.unwrap();
    let small2 = batched.send(vec![3u8; 10]).await.unwrap();
    let big = within("big", big).await;
    assert!(matches!(big, Err(Error::MessageTooBig { .. })), "{big:?}");
    within("small1", small1)
        .await
        .expect("small1 is not too big");
    within("small2", small2)
        .await
        .expect("small2 is not too big");
}

/// A payload just under the limit whose metadata pushes the frame over it: the broker refuses
/// it (SEND_ERROR NotAllowed); the client should report it as `MessageTooBig` like the Java
/// client (which counts headers and payload), and the producer keeps working.
#[tokio::test]
async fn a_message_whose_metadata_pushes_it_over_the_limit_is_too_big() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("too-big-meta")
        .batching(false)
        .create()
        .await
        .unwrap();
    let r = producer.send_and_wait(vec![7u8; 1020]).await;
    producer.send_and_wait(vec![1u8; 10]).await.unwrap();
    assert!(
        matches!(r, Err(Error::MessageTooBig { .. })),
        "expected MessageTooBig, got {r:?}"
    );
}

#[tokio::test]
async fn a_second_exclusive_producer_is_refused_at_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        // Long enough that a retry loop would be obvious.
        .operation_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let first = client
        .producer("exclusive")
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let second = within(
        "second exclusive create",
        client
            .producer("exclusive")
            .access_mode(ProducerAccessMode::Exclusive)
            .create(),
    )
    .await;
    // Upstream AbstractTopic.incrementTopicEpochIfNeeded refuses a second Exclusive producer
    // with ProducerFenced.
    match second {
        Err(Error::ProducerFenced { .. }) => {}
        other => panic!("expected ProducerFenced, got {other:?}"),
    }
    // Not retried: exactly two PRODUCER commands.
    assert_eq!(broker.received_of(Type::Producer).len(), 2);
    let modes: Vec<Option<i32>> = broker
        .received_of(Type::Producer)
        .iter()
        .map(|r| r.command.producer.as_ref().unwrap().producer_access_mode)
        .collect();
    assert_eq!(
        modes,
        vec![Some(wire::ProducerAccessMode::Exclusive as i32); 2]
    );
    // A shared producer is refused as well while the exclusive one is there.
    let shared = within("shared create", client.producer("exclusive").create()).await;
    assert!(matches!(
        shared,
        Err(Error::Broker {
            code: ServerError::ProducerBusy,
            ..
        })
    ));
    // The first producer still works, and after it closes another exclusive one may come.
    first.send_and_wait("still mine").await.unwrap();
    first.close().await.unwrap();
    let next = client
        .producer("exclusive")
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    next.send_and_wait("now mine").await.unwrap();
}

#[tokio::test]
async fn initial_subscription_name_is_sent_only_when_set() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let plain = client.producer("no-initial-sub").create().await.unwrap();
    let with = client
        .producer("initial-sub")
        .initial_subscription_name("retain")
        .create()
        .await
        .unwrap();
    let producers = broker.received_of(Type::Producer);
    let by_topic: BTreeMap<String, Option<String>> = producers
        .iter()
        .map(|r| {
            let p = r.command.producer.as_ref().unwrap();
            (p.topic.clone(), p.initial_subscription_name.clone())
        })
        .collect();
    assert_eq!(by_topic[&full("no-initial-sub")], None);
    assert_eq!(by_topic[&full("initial-sub")].as_deref(), Some("retain"));
    // Field 13 is on the wire only when set.
    for r in &producers {
        let p = r.command.producer.as_ref().unwrap();
        let bytes = p.encode_to_vec();
        let has_field_13 = contains_field(&bytes, 13);
        assert_eq!(has_field_13, p.topic == full("initial-sub"), "{}", p.topic);
    }
    assert_eq!(broker.subscriptions("initial-sub"), ["retain"]);
    assert!(broker.subscriptions("no-initial-sub").is_empty());

    // The subscription retains what is published before any consumer subscribes.
    for i in 0..3 {
        with.send_and_wait(format!("kept-{i}")).await.unwrap();
    }
    plain.send_and_wait("x").await.unwrap();
    assert_eq!(broker.subscription_backlog("initial-sub", "retain"), 3);
    let mut consumer = client
        .consumer("initial-sub")
        .subscription("retain")
        .subscribe()
        .await
        .unwrap();
    for i in 0..3 {
        let m = within("retained message", consumer.recv()).await.unwrap();
        assert_eq!(m.payload_str(), Some(format!("kept-{i}").as_str()));
    }
}

/// Whether the protobuf encoding `bytes` has a top-level field number `field`.
fn contains_field(mut bytes: &[u8], field: u32) -> bool {
    while !bytes.is_empty() {
        let key = prost::encoding::decode_varint(&mut bytes).unwrap();
        let (number, wire_type) = ((key >> 3) as u32, key & 7);
        if number == field {
            return true;
        }
        match wire_type {
            0 => {
                prost::encoding::decode_varint(&mut bytes).unwrap();
            }
            1 => bytes.advance(8),
            2 => {
                let len = prost::encoding::decode_varint(&mut bytes).unwrap() as usize;
                bytes.advance(len);
            }
            5 => bytes.advance(4),
            other => panic!("unexpected wire type {other}"),
        }
    }
    false
}

#[tokio::test]
async fn flush_waits_for_the_receipts_of_earlier_sends() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("flush")
        .batching_options(BatchingOptions {
            // Without flush these would wait a long time in the open batch.
            max_publish_delay: Duration::from_secs(30),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(300));
    let mut receipts = Vec::new();
    for i in 0..5 {
        receipts.push(producer.send(format!("f-{i}")).await.unwrap());
    }
    within("flush", producer.flush()).await.unwrap();
    // Every receipt is in: each future resolves immediately.
    for r in receipts {
        let id = tokio::time::timeout(Duration::from_millis(1), r)
            .await
            .expect("flush returned before a receipt")
            .unwrap();
        assert!(id.is_batch());
    }
    assert_eq!(sends(&broker).len(), 1);
    assert_eq!(broker.topic_messages("flush"), 1);
    // Flushing with nothing pending returns at once.
    within("empty flush", producer.flush()).await.unwrap();
}

#[tokio::test]
async fn close_flushes_open_batches() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "close-flushes";
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_publish_delay: Duration::from_secs(30),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..4 {
        receipts.push(producer.send(format!("c-{i}")).await.unwrap());
    }
    within("close", producer.close()).await.unwrap();
    for r in within("receipts", join_all(receipts)).await {
        r.expect("messages sent before close are stored");
    }
    assert_eq!(broker.topic_messages(topic), 1);
    assert_eq!(broker.received_of(Type::CloseProducer).len(), 1);
    assert_eq!(broker.producers(topic), 0);
    // After close, sends fail.
    assert!(matches!(producer.send("late").await, Err(Error::Closed)));
    let stored = read_all(&client, topic, 4).await;
    let payloads: Vec<&str> = stored.iter().map(|m| m.payload_str().unwrap()).collect();
    assert_eq!(payloads, ["c-0", "c-1", "c-2", "c-3"]);
}

/// The producer docs: "Dropping the last clone lets pending messages finish, then closes the
/// producer on the broker."
#[tokio::test]
async fn dropping_the_last_handle_still_delivers_pending_messages() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "drop-handle";
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_publish_delay: Duration::from_secs(30),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let receipt = producer.send("last words").await.unwrap();
    drop(producer);
    within("receipt after drop", receipt).await.unwrap();
    within(
        "close after drop",
        broker.wait_for_command(Type::CloseProducer, WAIT),
    )
    .await
    .expect("CLOSE_PRODUCER after the last handle is dropped");
    assert_eq!(broker.topic_messages(topic), 1);
    assert_eq!(broker.producers(topic), 0);
}

#[tokio::test]
async fn pipelined_sends_survive_a_dropped_connection() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .operation_timeout(Duration::from_secs(10))
        .backoff(pulsar_sdk::BackoffPolicy {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(100),
            ..Default::default()
        })
        .build()
        .unwrap();
    let topic = "reconnect";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    const N: usize = 1000;
    let sender = {
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut receipts = Vec::new();
            for i in 0..N {
                receipts.push(producer.send(format!("r-{i:04}")).await.unwrap());
                if i % 20 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            receipts
        })
    };
    within(
        "some sends reach the broker",
        broker.wait_for_commands(Type::Send, 100, WAIT),
    )
    .await
    .unwrap();
    broker.drop_all_connections();
    let receipts = within("sender", sender).await.unwrap();
    let results = within("receipts", join_all(receipts)).await;
    let ids: Vec<MessageId> = results
        .into_iter()
        .map(|r| r.expect("every send resolves Ok after the reconnect"))
        .collect();
    for w in ids.windows(2) {
        assert!(
            w[0] < w[1],
            "receipted ids increase: {} then {}",
            w[0],
            w[1]
        );
    }
    assert!(
        broker.accepted_connections() >= 2,
        "the producer reconnected"
    );
    assert!(broker.received_of(Type::Producer).len() >= 2);

    let stored = broker.topic_messages(topic);
    let messages = read_all(&client, topic, stored).await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for m in &messages {
        *counts
            .entry(m.payload_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(counts.len(), N, "every message is stored");
    let duplicates = stored - N;
    eprintln!("reconnect: {stored} entries stored for {N} messages ({duplicates} duplicates)");
    // Duplicates (re-sent after a lost receipt) keep their sequence ids.
    for m in &messages {
        let i: u64 = m.payload_str().unwrap()[2..].parse().unwrap();
        assert_eq!(m.sequence_id, i);
    }
    // The first copy of every message is stored in send order.
    let mut seen = BTreeSet::new();
    let firsts: Vec<&str> = messages
        .iter()
        .map(|m| m.payload_str().unwrap())
        .filter(|p| seen.insert(p.to_string()))
        .collect();
    let mut sorted = firsts.clone();
    sorted.sort_unstable();
    assert_eq!(firsts, sorted);
}

/// Java's default routing for keyed messages: `JavaStringHash` (`String.hashCode() &
/// Integer.MAX_VALUE`) modulo the partition count.
fn java_partition(key: &str, partitions: u32) -> i32 {
    let h = key.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    ((h as u32 & 0x7fff_ffff) % partitions) as i32
}

#[tokio::test]
async fn partitioned_topic_routes_keys_like_java_and_spreads_unkeyed_messages() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "routed";
    broker.create_partitioned_topic(topic, 3);
    let producer = client.producer(topic).create().await.unwrap();
    assert_eq!(producer.partitions(), 3);
    assert_eq!(
        broker.received_of(Type::Producer).len(),
        3,
        "one producer per partition"
    );

    let keys: Vec<String> = (0..12).map(|i| format!("key-{i}")).collect();
    let mut receipts = Vec::new();
    for round in 0..3 {
        for key in &keys {
            let f = producer
                .send(ProducerMessage::new(format!("{key}/{round}")).key(key.clone()))
                .await
                .unwrap();
            receipts.push((key.clone(), f));
        }
    }
    let mut partition_of: HashMap<String, BTreeSet<i32>> = HashMap::new();
    for (key, f) in receipts {
        let id = within("keyed receipt", f).await.unwrap();
        partition_of.entry(key).or_default().insert(id.partition);
    }
    let mut used = BTreeSet::new();
    for (key, parts) in &partition_of {
        assert_eq!(
            parts.len(),
            1,
            "{key} went to several partitions: {parts:?}"
        );
        let p = *parts.iter().next().unwrap();
        assert_eq!(p, java_partition(key, 3), "{key}: not Java's partition");
        used.insert(p);
    }
    assert_eq!(used.len(), 3, "12 keys cover the 3 partitions");
    // Each stored message sits on the partition topic its id names.
    let total: usize = (0..3)
        .map(|i| broker.topic_messages(&format!("{topic}-partition-{i}")))
        .sum();
    assert!(total > 0);

    // Unkeyed, unbatched: round robin over every partition.
    let unkeyed_topic = "spread";
    broker.create_partitioned_topic(unkeyed_topic, 3);
    let spread = client
        .producer(unkeyed_topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut per_partition: BTreeMap<i32, usize> = BTreeMap::new();
    for i in 0..30 {
        let id = spread.send_and_wait(format!("u-{i}")).await.unwrap();
        *per_partition.entry(id.partition).or_default() += 1;
    }
    assert_eq!(per_partition.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    for i in 0..3 {
        assert_eq!(
            broker.topic_messages(&format!("{unkeyed_topic}-partition-{i}")),
            per_partition[&i]
        );
    }
}

#[tokio::test]
async fn keyed_messages_reach_a_key_shared_consumer_with_their_keys() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "key-shared-feed";
    let mut consumer = client
        .consumer(topic)
        .subscription("ks")
        .subscription_type(SubscriptionType::KeyShared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            key_based: true,
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..20 {
        let key = format!("k{}", i % 4);
        receipts.push(
            producer
                .send(ProducerMessage::new(format!("{key}:{i}")).key(key))
                .await
                .unwrap(),
        );
    }
    for r in within("receipts", join_all(receipts)).await {
        r.unwrap();
    }
    for _ in 0..20 {
        let m = within("keyed message", consumer.recv()).await.unwrap();
        let key = m.key.clone().unwrap();
        assert!(m.payload_str().unwrap().starts_with(&format!("{key}:")));
        consumer.ack(&m).unwrap();
    }
}

#[tokio::test]
async fn wait_for_exclusive_waits_until_the_topic_is_free() {
    use pulsar_sdk::producer::ProducerAccessMode;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/wait-excl";
    let first = client
        .producer(topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .producer(topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "queued while the exclusive producer is connected"
    );
    first.close().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("created once the topic is free")
        .unwrap()
        .unwrap();
    second.send_and_wait("mine now").await.unwrap();
}

/// A batch the broker refuses (SEND_ERROR NotAllowed, answered with the batch's highest
/// sequence id like upstream `Producer.checkAndStartPublish`) fails exactly its messages, at
/// once, without a reconnect (upstream `recoverNotAllowedError` matches the op's highest
/// sequence id); the next batch is stored.
#[tokio::test]
async fn a_refused_batch_fails_its_messages_and_the_producer_goes_on() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("refused-batch")
        .batching_options(BatchingOptions {
            max_messages: 3,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_secs(60),
            key_based: false,
        })
        .create()
        .await
        .unwrap();
    broker.push_error(MockError::new(
        MockRequest::Send,
        ServerError::NotAllowed,
        "refused",
    ));
    let first: Vec<SendFuture> = join_all((0..3).map(|i| producer.send(format!("a{i}"))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let second: Vec<SendFuture> = join_all((0..3).map(|i| producer.send(format!("b{i}"))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for f in first {
        match within("refused batch", f).await {
            Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::NotAllowed),
            other => panic!("expected the refusal, got {other:?}"),
        }
    }
    for f in second {
        within("next batch", f)
            .await
            .expect("the next batch is stored");
    }
    assert_eq!(
        broker.topic_messages("refused-batch"),
        1,
        "one stored batch entry"
    );
    assert_eq!(
        broker.received_of(Type::Producer).len(),
        1,
        "no reconnect for a refused batch"
    );
}

/// With `block_if_queue_full`, a send that waits (for a `max_pending_messages` slot, or for
/// client memory) is not overtaken by a later send from another task that could take the
/// synchronous fast path; a later send dropped while it waits behind it is never sent.
#[tokio::test]
async fn a_waiting_send_is_not_overtaken_by_a_later_one() {
    use futures::FutureExt;
    for (topic, limit_slots) in [("overtake-slots", true), ("overtake-memory", false)] {
        let broker = MockBroker::start().await.unwrap();
        let client = Client::builder()
            .service_url(broker.service_url())
            .memory_limit(1000)
            .build()
            .unwrap();
        let producer = client
            .producer(topic)
            .batching(false)
            .block_if_queue_full(true)
            .max_pending_messages(if limit_slots { 1 } else { 0 })
            .create()
            .await
            .unwrap();
        // Receipts held back: "a" keeps its slot and memory until then.
        broker.set_response_delay(Duration::from_millis(300));
        let a = producer.send(vec![b'a'; 600]).await.unwrap();
        // "b" waits (for the slot, or for 600 bytes of memory: only 400 are free).
        let waiting = {
            let producer = producer.clone();
            tokio::spawn(async move { producer.send(vec![b'b'; 600]).await })
        };
        // The current-thread runtime runs the spawned send up to its wait.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished());
        // "c" fits in what is free, but must not overtake "b": it waits too. Dropped there,
        // it is not sent.
        assert!(producer.send(vec![b'c'; 100]).now_or_never().is_none());
        let b = within("the waiting send", waiting).await.unwrap().unwrap();
        let c = producer.send(vec![b'd'; 100]).await.unwrap();
        for r in within("receipts", join_all([a, b, c])).await {
            r.unwrap();
        }
        broker.set_response_delay(Duration::ZERO);
        let order: Vec<u8> = sent_payloads(&broker).iter().map(|p| p[0]).collect();
        assert_eq!(order, b"abd", "{topic}");
    }
}

/// What timed-out messages of a batch held (client memory and `max_pending_messages` slots)
/// is given back exactly once: afterwards the limits refuse exactly where they did at first.
#[tokio::test]
async fn a_timed_out_batch_gives_back_its_memory_and_slots_exactly_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .memory_limit(450)
        .build()
        .unwrap();
    let producer = client
        .producer("timeout-permits")
        .max_pending_messages(4)
        .send_timeout(Duration::from_millis(300))
        .create()
        .await
        .unwrap();
    // No receipt comes back within the test.
    broker.set_response_delay(Duration::from_secs(120));
    let check_limits = |producer: pulsar_sdk::Producer| async move {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(producer.send(vec![7u8; 140]).await.unwrap());
        }
        // 30 bytes of memory and one slot are left: 100 bytes do not fit (the slot it took
        // first, as upstream's `canEnqueueRequest` does, goes back)...
        match producer.send(vec![8u8; 100]).await {
            Err(Error::ProducerQueueFull { limit }) => {
                assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
            }
            other => panic!("expected the memory limit, got {other:?}"),
        }
        // ... 1 byte does, in the last slot...
        held.push(producer.send(vec![9u8; 1]).await.unwrap());
        // ... and then no slot is left, even for 1 byte.
        match producer.send(vec![9u8; 1]).await {
            Err(Error::ProducerQueueFull { limit }) => {
                assert!(
                    matches!(limit, QueueLimit::MaxPendingMessages { .. }),
                    "{limit}"
                )
            }
            other => panic!("expected max_pending_messages, got {other:?}"),
        }
        producer.flush().await.unwrap();
        held
    };
    for r in within("timeouts", join_all(check_limits(producer.clone()).await)).await {
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    }
    // Exactly the same room again: released once, not twice.
    let again = check_limits(producer.clone()).await;
    drop(again);
}

/// Issue #31, section 2 (review): the ProducerSuccess cap is on what the *broker* chooses; a
/// name the user chose and the broker echoes is the user's cost. Upstream's Java client takes
/// any `producerName`; a 2,000-byte name the broker accepted must not fail the create.
#[tokio::test]
async fn a_long_user_chosen_producer_name_is_accepted() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let name = "p".repeat(2000);
    let producer = within(
        "create",
        client
            .producer("long-user-name")
            .name(name.clone())
            .create(),
    )
    .await
    .expect("a name the user chose and the broker accepted");
    assert_eq!(producer.name(), name);
    within("send", producer.send_and_wait(vec![1u8]))
        .await
        .unwrap();
}

/// Issue #31, section 2 (review): "count the encoded bytes of pending messages, not only
/// payloads". An unbatched message's frame carries the producer's name (here 1,000 bytes);
/// with 1-byte payloads a 64 KiB limit let 1,000 messages (1 MB of frames) be pending.
#[tokio::test]
async fn memory_limit_counts_the_producer_name_each_unbatched_message_carries() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .memory_limit(64 * 1024)
        .build()
        .unwrap();
    let producer = client
        .producer("mem-name")
        .name("n".repeat(1000))
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_secs(3600));
    let mut accepted = 0usize;
    for i in 0..1000u32 {
        match producer.send(vec![i as u8]).await {
            Ok(_receipt) => accepted += 1,
            Err(Error::ProducerQueueFull { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    // Each pending message holds at least 1,001 bytes: 65 fit in 64 KiB (slack for more).
    assert!(
        accepted <= 130,
        "{accepted} messages of ~1 KB pending under a 64 KiB limit"
    );
}
