//! Chunked messages (PIP-37) from our producer, against the mock broker (which stores every
//! chunk as its own entry, as upstream's broker does): our consumer reassembles them, the
//! receipt is one id spanning the chunks, and reconnects on either side lose nothing and
//! duplicate nothing.

use common::{client, recv};
use support as common;

use common::chunks::{noise, wait_acked};
use common::{full, wait_until, within};

use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockError, MockRequest};
use pulsar_sdk::{
    Client, CompressionType, ConsumerBuilder, Error, MessageId, Producer, QueueLimit, ServerError,
    SubscriptionType,
};

fn consumer(client: &Client, topic: &str) -> ConsumerBuilder {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_group_time(Duration::ZERO)
}

async fn chunking_producer(client: &Client, topic: &str, chunk: usize) -> Producer {
    client
        .producer(topic)
        .chunking(true)
        .chunk_max_message_size(chunk)
        .create()
        .await
        .expect("producer")
}

/// The chunk SENDs the broker received, in order: (is_chunk, metadata).
fn chunk_sends(broker: &MockBroker) -> Vec<(Option<bool>, wire::MessageMetadata)> {
    broker
        .received_of(Type::Send)
        .into_iter()
        .filter_map(|r| {
            let is_chunk = r.command.send.as_ref().and_then(|s| s.is_chunk);
            r.payload.map(|(m, _)| (is_chunk, m))
        })
        .filter(|(_, m)| m.num_chunks_from_msg.is_some())
        .collect()
}

/// The entries of a chunked message's id: first chunk through last (one producer, so they
/// are consecutive in the mock).
fn chunk_entries(id: &MessageId) -> Vec<u64> {
    let first = id.first_chunk_id().expect("a chunked id").entry_id;
    (first..=id.entry_id).collect()
}

#[tokio::test]
async fn a_large_message_round_trips_byte_identical_with_one_spanning_receipt() {
    // The broker announces 100 KB: the producer splits by what CONNECTED said.
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(100_000),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-roundtrip");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let p = chunking_producer(&client, &topic, 0).await;
    let big = noise(1_000_000, 1);
    let before = p.send_and_wait("before").await.unwrap();
    let id = p.send_and_wait(big.clone()).await.unwrap();
    let after = p.send_and_wait("after").await.unwrap();

    let sends = chunk_sends(&broker);
    assert!(sends.len() >= 10, "1 MB in 100 KB chunks: {}", sends.len());
    let n = sends.len() as i32;
    for (i, (is_chunk, m)) in sends.iter().enumerate() {
        assert_eq!(*is_chunk, Some(true), "CommandSend.is_chunk");
        assert_eq!(m.chunk_id, Some(i as i32));
        assert_eq!(m.num_chunks_from_msg, Some(n));
        assert_eq!(m.total_chunk_msg_size, Some(1_000_000));
        assert_eq!(m.uuid, Some(format!("{}-{}", p.name(), m.sequence_id)));
        assert_eq!(m.sequence_id, sends[0].1.sequence_id, "one sequence id");
    }
    assert!(id.is_chunked());
    assert_eq!(chunk_entries(&id).len(), sends.len());
    assert!(before < id && id < after);

    assert_eq!(recv(&mut c).await.payload_str(), Some("before"));
    let m = recv(&mut c).await;
    assert!(m.payload == big, "byte-identical");
    assert_eq!(m.id, id, "the message's id is the receipt");
    assert_eq!(m.id.first_chunk, id.first_chunk);
    assert_eq!(m.id.to_string(), id.to_string());
    assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
}

#[tokio::test]
async fn compression_comes_before_chunking() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-compressed");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let p = client
        .producer(&topic)
        .chunking(true)
        .chunk_max_message_size(8 * 1024)
        .compression(CompressionType::Lz4)
        .create()
        .await
        .unwrap();
    // Half noise, half zeros: compressed to about half, still several chunks.
    let mut big = noise(60_000, 2);
    big.extend(std::iter::repeat_n(0u8, 60_000));
    let id = p.send_and_wait(big.clone()).await.unwrap();
    let sends = chunk_sends(&broker);
    assert!(sends.len() >= 4, "{} chunks", sends.len());
    let total = sends[0].1.total_chunk_msg_size.unwrap() as usize;
    assert!(total < 100_000, "the total is the compressed size: {total}");
    for (_, m) in &sends {
        assert_eq!(m.uncompressed_size, Some(120_000));
        assert!(m.compression.is_some());
    }
    let m = recv(&mut c).await;
    assert!(m.payload == big);
    assert_eq!(m.id, id);
    // A compressible payload that fits once compressed is one plain entry.
    let zeros = vec![0u8; 120_000];
    let plain = p.send_and_wait(zeros.clone()).await.unwrap();
    assert!(!plain.is_chunked());
    assert!(recv(&mut c).await.payload == zeros);
}

#[tokio::test]
async fn acking_the_receipt_id_acks_every_chunk() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-ack");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let p = chunking_producer(&client, &topic, 4096).await;
    let id = p.send_and_wait(noise(20_000, 3)).await.unwrap();
    let m = recv(&mut c).await;
    assert_eq!(m.id, id);
    c.ack_id(id).unwrap();
    let entries = chunk_entries(&id);
    assert!(entries.len() >= 5);
    wait_acked(&broker, &entries).await;
    assert_eq!(broker.subscription_backlog(&topic, "s"), 0);
}

#[tokio::test]
async fn a_producer_reconnect_in_the_middle_resends_the_rest_in_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-reconnect");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let p = chunking_producer(&client, &topic, 4096).await;
    let big = noise(10_000, 4); // 3 chunks
                                // Chunk 0 is stored; chunks 1 and 2 fail like a storage failure (nothing stored): the
                                // producer reconnects and re-sends what is not receipted, in order.
    broker.push_error(
        MockError::new(
            MockRequest::Send,
            ServerError::PersistenceError,
            "bookie down",
        )
        .skip(1)
        .times(2),
    );
    let id = within("send", p.send_and_wait(big.clone())).await.unwrap();
    assert_eq!(broker.consumed_errors().len(), 2);
    assert!(
        broker.received_of(Type::Producer).len() >= 2,
        "the producer was re-created"
    );
    let chunk_ids: Vec<i32> = chunk_sends(&broker)
        .iter()
        .map(|(_, m)| m.chunk_id.unwrap())
        .collect();
    assert_eq!(
        chunk_ids,
        [0, 1, 2, 1, 2],
        "the unreceipted chunks again, in order"
    );
    assert_eq!(chunk_entries(&id).len(), 3, "3 chunks stored");
    p.send_and_wait("after").await.unwrap();
    let m = recv(&mut c).await;
    assert!(m.payload == big);
    assert_eq!(m.id, id);
    assert_eq!(
        recv(&mut c).await.payload_str(),
        Some("after"),
        "no duplicate"
    );
}

#[tokio::test]
async fn a_consumer_reconnect_in_the_middle_still_gives_one_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    // Our producer's chunks, captured on a staging topic, then stored one by one.
    let staging = full("chunk-produce-staging");
    let p = chunking_producer(&client, &staging, 4096).await;
    let big = noise(10_000, 5);
    p.send_and_wait(big.clone()).await.unwrap();
    p.close().await.unwrap();
    let chunks: Vec<_> = broker
        .received_of(Type::Send)
        .into_iter()
        .filter_map(|r| r.payload)
        .collect();
    assert_eq!(chunks.len(), 3);

    let topic = full("chunk-consumer-reconnect");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let (m0, d0) = chunks[0].clone();
    broker.publish_raw(&topic, m0, d0).unwrap();
    // The connection drops with chunk 0 delivered (or in flight): either way it is unacked,
    // so the broker delivers it again after the re-subscribe.
    let subscribes = broker.received_of(Type::Subscribe).len();
    broker.drop_all_connections();
    wait_until("re-subscribed", || {
        broker.received_of(Type::Subscribe).len() > subscribes && broker.consumers(&topic, "s") == 1
    })
    .await;
    for (m, d) in chunks[1..].iter().cloned() {
        broker.publish_raw(&topic, m, d).unwrap();
    }
    let after = wire::MessageMetadata {
        producer_name: "raw".into(),
        sequence_id: 100,
        publish_time: 1,
        ..Default::default()
    };
    broker
        .publish_raw(&topic, after, bytes::Bytes::from_static(b"after"))
        .unwrap();
    let m = recv(&mut c).await;
    assert!(m.payload == big);
    c.ack(&m).unwrap();
    assert_eq!(
        recv(&mut c).await.payload_str(),
        Some("after"),
        "no duplicate"
    );
    wait_acked(&broker, &chunk_entries(&m.id)).await;
}

#[tokio::test]
async fn chunking_with_batching_or_on_a_non_persistent_topic_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-refused");
    let r = client
        .producer(&topic)
        .chunking(true)
        .batching(true)
        .create()
        .await;
    match r {
        Err(Error::InvalidConfig(e)) => assert!(e.contains("batching and chunking"), "{e}"),
        other => panic!("batching + chunking accepted: {other:?}"),
    }
    let r = client
        .producer("non-persistent://public/default/chunk-np")
        .chunking(true)
        .create()
        .await;
    match r {
        Err(Error::InvalidConfig(e)) => assert!(e.contains("persistent"), "{e}"),
        other => panic!("chunking on a non-persistent topic accepted: {other:?}"),
    }
    // Without chunking a message over the limit keeps failing as before.
    let p = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let r = p.send_and_wait(vec![0u8; 6 * 1024 * 1024]).await;
    assert!(matches!(r, Err(Error::MessageTooBig { .. })), "{r:?}");
}

#[tokio::test]
async fn a_shared_subscription_whose_first_chunks_are_acked_does_not_stall() {
    // apache/pulsar#26395: chunks 0 and 1 acked, the consumer restarts, chunk 2 comes alone.
    // The leftover chunk must neither stall the consumer nor stay unacked for ever.
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-26395");
    let first = consumer(&client, &topic).subscribe().await.unwrap();
    let p = chunking_producer(&client, &topic, 4096).await;
    let id = p.send_and_wait(noise(10_000, 6)).await.unwrap();
    p.send_and_wait("after").await.unwrap();
    let entries = chunk_entries(&id);
    for e in &entries[..2] {
        first.ack_id(MessageId::new(id.ledger_id, *e, -1)).unwrap();
    }
    wait_acked(&broker, &entries[..2]).await;
    first.close().await.unwrap();
    let mut c = consumer(&client, &topic)
        .expire_time_of_incomplete_chunked_message(Duration::from_millis(300))
        // A leftover chunk still within the expiry is given back through the negative-ack
        // delay (redelivered later), then acked once its message is past the expiry.
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut c).await;
    assert_eq!(
        m.payload_str(),
        Some("after"),
        "the leftover chunk is no message"
    );
    c.ack(&m).unwrap();
    // Once its message is past the expiry, the leftover chunk is acked.
    wait_acked(&broker, &entries).await;
    wait_until("an empty backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

#[tokio::test]
async fn seeking_to_a_chunked_message_id_reads_the_whole_message_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-seek");
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic, 4096).await;
    let big = noise(10_000, 7);
    p.send_and_wait("a").await.unwrap();
    let id = p.send_and_wait(big.clone()).await.unwrap();
    p.send_and_wait("b").await.unwrap();
    for _ in 0..3 {
        let m = recv(&mut c).await;
        c.ack(&m).unwrap();
    }
    within("seek", c.seek(id)).await.unwrap();
    let m = recv(&mut c).await;
    assert!(m.payload == big, "the whole message, from its first chunk");
    assert_eq!(m.id, id);
    assert_eq!(recv(&mut c).await.payload_str(), Some("b"));
    // By its string form too.
    let parsed: MessageId = id.to_string().parse().unwrap();
    within("seek", c.seek(parsed)).await.unwrap();
    assert!(recv(&mut c).await.payload == big);
}

#[tokio::test]
async fn the_memory_limit_and_pending_count_see_one_chunked_message_once() {
    let broker = MockBroker::start().await.unwrap();
    let size = 200_000;
    let client = common::test_client(&broker.service_url())
        .memory_limit(size + size / 2)
        .build()
        .unwrap();
    let topic = full("chunk-produce-memory");
    let p = client
        .producer(&topic)
        .chunking(true)
        .chunk_max_message_size(16 * 1024)
        .max_pending_messages(2)
        .create()
        .await
        .unwrap();
    // Receipts stop: everything sent stays pending.
    broker.set_unresponsive(true);
    let big = p.send(noise(size, 8)).await.expect("one payload fits");
    // 13 chunks held, yet one message of `size` bytes: a quarter more still fits...
    let small = p
        .send(vec![1u8; size / 4])
        .await
        .expect("room for a quarter");
    // ...and the count limit (2) is now reached.
    match p.send(vec![1u8; 10]).await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(
                matches!(limit, QueueLimit::MaxPendingMessages { .. }),
                "{limit}"
            )
        }
        other => panic!("a third pending message accepted: {:?}", other.map(|_| ())),
    }
    drop(small);
    broker.set_unresponsive(false);
    broker.drop_all_connections();
    let id = within("receipt after the reconnect", big).await.unwrap();
    assert!(id.is_chunked());
    // All given back: a payload of nearly the whole limit fits now.
    p.flush().await.unwrap();
    p.send_and_wait(noise(size + size / 3, 9)).await.unwrap();
    // The memory limit alone: more than what is left is refused.
    let p2 = client
        .producer(&topic)
        .chunking(true)
        .chunk_max_message_size(16 * 1024)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let _held = p2.send(noise(size, 10)).await.unwrap();
    match p2.send(vec![1u8; size / 2 + 1]).await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
        }
        other => panic!("over the memory limit accepted: {:?}", other.map(|_| ())),
    }
    broker.set_unresponsive(false);
}

#[tokio::test]
async fn a_refused_chunk_fails_its_message_only() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-refused-chunk");
    let p = chunking_producer(&client, &topic, 4096).await;
    // Chunks 1 and 2 of the 3 are refused (SEND_ERROR NotAllowed): the message fails, and the
    // second refusal (same sequence id) must not fail the next message, pipelined behind it.
    broker.push_error(
        MockError::new(MockRequest::Send, ServerError::NotAllowed, "no")
            .skip(1)
            .times(2),
    );
    let big = p.send(noise(10_000, 11)).await.unwrap();
    let next = p.send("next").await.unwrap();
    match within("refused", big).await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::NotAllowed),
        other => panic!("expected the refusal, got {other:?}"),
    }
    let id = within("next", next)
        .await
        .expect("the next message is stored");
    assert!(!id.is_chunked());
    assert_eq!(broker.consumed_errors().len(), 2);
}

#[tokio::test]
async fn a_message_over_the_limit_is_dead_lettered_in_chunks() {
    // Upstream's dead-letter producer chunks: a reassembled chunked message larger than the
    // broker's limit can still be dead-lettered (apache/pulsar#21048).
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-dlq");
    let mut c = consumer(&client, &topic)
        .negative_ack_delay(Duration::from_millis(100))
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = c.dead_letter_topic().unwrap().to_string();
    let p = chunking_producer(&client, &topic, 0).await;
    let big = noise(6_000_000, 12); // over the mock's 5 MiB
    let id = p.send_and_wait(big.clone()).await.unwrap();
    assert!(id.is_chunked());
    for redelivery in 0..2 {
        let m = recv(&mut c).await;
        assert_eq!(m.redelivery_count, redelivery);
        c.nack(&m).unwrap();
    }
    wait_until("dead-lettered", || broker.topic_messages(&dlq) == 2).await;
    let mut reader = client.reader(&dlq).start_earliest().create().await.unwrap();
    let letter = within("the letter", reader.recv()).await.unwrap();
    assert!(letter.payload == big, "the whole payload, reassembled");
    assert!(letter.id.is_chunked());
    wait_acked(&broker, &chunk_entries(&id)).await;
}

#[tokio::test]
async fn a_reader_starts_at_or_after_a_chunked_message_id() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-reader");
    let p = chunking_producer(&client, &topic, 4096).await;
    let big = noise(10_000, 13);
    p.send_and_wait("a").await.unwrap();
    let id = p.send_and_wait(big.clone()).await.unwrap();
    p.send_and_wait("b").await.unwrap();
    // Inclusive: the whole message, read from its first chunk.
    let mut inclusive = client
        .reader(&topic)
        .start_message_id(id)
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    let m = within("inclusive", inclusive.recv()).await.unwrap();
    assert!(m.payload == big);
    assert_eq!(m.id, id);
    let m = within("inclusive next", inclusive.recv()).await.unwrap();
    assert_eq!(m.payload_str(), Some("b"));
    // Exclusive (the default): the message after it.
    let mut after = client
        .reader(&topic)
        .start_message_id(id)
        .create()
        .await
        .unwrap();
    let m = within("after", after.recv()).await.unwrap();
    assert_eq!(m.payload_str(), Some("b"));
}

#[tokio::test]
async fn chunked_messages_on_a_partitioned_topic_keep_their_partition() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_partitioned_topic("chunk-produce-partitioned", 3);
    let client = client(&broker.service_url());
    let topic = full("chunk-produce-partitioned");
    let mut c = consumer(&client, &topic).subscribe().await.unwrap();
    let p = chunking_producer(&client, &topic, 4096).await;
    let mut sent = Vec::new();
    for i in 0..6u64 {
        let payload = noise(9_000, 20 + i);
        let msg = pulsar_sdk::ProducerMessage::new(payload.clone()).key(format!("k{i}"));
        let id = p.send_and_wait(msg).await.unwrap();
        assert!(id.is_chunked());
        assert!(id.partition >= 0);
        assert_eq!(id.first_chunk_id().unwrap().partition, id.partition);
        sent.push((id, payload));
    }
    for _ in 0..sent.len() {
        let m = recv(&mut c).await;
        let (id, payload) = sent.iter().find(|(id, _)| *id == m.id).expect("a sent id");
        assert!(m.payload == *payload);
        assert_eq!(m.id.first_chunk, id.first_chunk);
        c.ack(&m).unwrap();
    }
}
