//! Upstream `ReaderImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::wire::command_subscribe::SubType;
use pulsar_sdk::mock::{wire, MockBroker};

fn wire_config() -> pulsar_sdk::mock::MockBrokerConfig {
    pulsar_sdk::mock::MockBrokerConfig {
        max_message_size: Some(8 * 1024),
        ..Default::default()
    }
}

/// Java `ReaderImpl.readNext` acks every message it returns cumulatively (grouped), so the
/// broker's cursor follows the reader and, on a terminated topic, the broker tells it
/// REACHED_END_OF_TOPIC once it has read everything: `hasReachedEndOfTopic` becomes true.
#[tokio::test]
async fn a_reader_acks_what_it_reads_and_so_learns_the_end_of_its_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end");
    let producer = unbatched_producer(&client, &topic).await;
    let ids = publish(&producer, "m", 3).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        let m = within("read", reader.recv()).await.unwrap();
        assert_eq!(m.payload_str(), Some(format!("m-{i}").as_str()));
    }
    // The last message read was acked cumulatively.
    wait_until("the cumulative ack of the last message", || {
        broker.received_of(Type::Ack).iter().any(|r| {
            let ack = r.command.ack.as_ref().unwrap();
            ack.ack_type == 1 // Cumulative
                && ack
                    .message_id
                    .iter()
                    .any(|id| id.ledger_id == ids[2].ledger_id && id.entry_id == ids[2].entry_id)
        })
    })
    .await;
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    // Java `hasMessageAvailable` at the end: false (not an error).
    let available = within("available", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
    within("close", reader.close()).await.unwrap();
}

fn subscribes(broker: &MockBroker) -> Vec<wire::CommandSubscribe> {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .map(|r| r.command.subscribe.unwrap())
        .collect()
}

/// `ReaderImpl.<init>`: a reader is an Exclusive, NonDurable subscription named
/// `reader-<random>` (unless a name is given), subscribing from its start id with a receiver
/// queue of 1000 (`ReaderConfigurationData.receiverQueueSize`).
#[tokio::test]
async fn a_reader_is_an_exclusive_non_durable_subscription_with_a_generated_name() {
    // Maximum-size messages of 8 KiB: the three readers' queues of them fit the consumers'
    // byte budget, so each first FLOW is the whole receiver queue (with a budget that cannot
    // hold it, the first FLOW is smaller: a slow start, see `ConsumerBuilder::receiver_queue_size`).
    let broker = MockBroker::start_with(wire_config()).await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("reader-sub");
    let _r1 = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let _r2 = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let _named = client
        .reader(&topic)
        .subscription("my-reader")
        .start_latest()
        .create()
        .await
        .unwrap();
    let sent = subscribes(&broker);
    assert_eq!(sent.len(), 3);
    for s in &sent {
        assert_eq!(s.sub_type, SubType::Exclusive as i32);
        assert_eq!(s.durable, Some(false));
        assert!(s.start_message_id.is_some(), "{s:?}");
    }
    assert!(
        sent[0].subscription.starts_with("reader-"),
        "{}",
        sent[0].subscription
    );
    assert!(sent[1].subscription.starts_with("reader-"));
    assert_ne!(sent[0].subscription, sent[1].subscription);
    assert_eq!(sent[2].subscription, "my-reader");
    let flows = within(
        "three FLOWs",
        broker.wait_for_commands(Type::Flow, 3, std::time::Duration::from_secs(10)),
    )
    .await
    .unwrap();
    assert!(flows
        .iter()
        .all(|f| f.command.flow.as_ref().unwrap().message_permits == 1000));
    // Non-durable: nothing outlives the readers.
    drop((_r1, _r2, _named));
    wait_until("the subscriptions are gone", || {
        broker.subscriptions(&topic).is_empty()
    })
    .await;
}

/// `ConsumerImpl.hasMessageAvailableAsync` (what `ReaderImpl.hasMessageAvailable` calls): with a
/// message already in the receiver queue the answer is true at once, without asking the broker
/// for the last message id.
#[tokio::test]
async fn has_message_available_with_a_queued_message_asks_the_broker_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("hma-queued");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "q", 2).await;
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    wait_until("both queued", || {
        reader.stats().totals.receiver_queue_len == 2
    })
    .await;
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert!(broker.received_of(Type::GetLastMessageId).is_empty());
    // The message looked at is the next one read.
    let m = within("recv", reader.recv()).await.unwrap();
    assert_eq!(m.payload_str(), Some("q-0"));
}

/// `ReaderBuilderImpl.readCompacted`: the reader's SUBSCRIBE asks for the compacted view.
#[tokio::test]
async fn read_compacted_is_sent_on_the_readers_subscribe() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-compacted");
    let _reader = client
        .reader(&topic)
        .read_compacted(true)
        .create()
        .await
        .unwrap();
    let subs = broker.received_of(Type::Subscribe);
    let sub = subs[0].command.subscribe.as_ref().unwrap();
    assert_eq!(sub.read_compacted, Some(true));
}

/// `ReaderBuilderImpl.startMessageFromRollbackDuration`: the reader starts at latest and sends
/// `start_message_rollback_duration_sec`; the broker (`PersistentTopic.internalSubscribe`)
/// moves it to the first message published at or after now minus that duration, so it reads
/// the recent messages and not the older ones.
#[tokio::test]
async fn a_reader_from_a_rollback_duration_reads_only_what_was_published_within_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-rollback");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Two messages from two hours ago, then two recent ones.
    for (i, age_ms) in [(0, 7_200_000), (1, 7_100_000)] {
        let metadata = wire::MessageMetadata {
            producer_name: "old".into(),
            sequence_id: i,
            publish_time: now_ms - age_ms,
            ..Default::default()
        };
        broker
            .publish_raw(&topic, metadata, bytes::Bytes::from(format!("old-{i}")))
            .unwrap();
    }
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "new", 2).await;

    let mut reader = client
        .reader(&topic)
        .start_message_from_rollback_duration(std::time::Duration::from_secs(3600))
        .create()
        .await
        .unwrap();
    let subs = broker.received_of(Type::Subscribe);
    let sub = subs.last().unwrap().command.subscribe.as_ref().unwrap();
    assert_eq!(sub.start_message_rollback_duration_sec, Some(3600));
    let first = within("recv", reader.recv()).await.unwrap();
    let second = within("recv", reader.recv()).await.unwrap();
    assert_eq!(
        [first.payload_str().unwrap(), second.payload_str().unwrap()],
        ["new-0", "new-1"]
    );
    assert!(
        !within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
}

/// Java `ReaderImpl.seek` → `ConsumerImpl.seekAsync`: after a seek the reader reads from the
/// new position (`hasMessageAvailable` asks the broker again, `readNext` returns the
/// message there). Having met the end of the terminated topic before the seek must not make
/// the reader answer "nothing available" and the end again, with messages before it.
#[tokio::test]
async fn a_reader_that_met_the_end_reads_again_after_seeking_back() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-seek");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..2 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let available = within("available at the end", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    within("seek", reader.seek(pulsar_sdk::MessageId::EARLIEST))
        .await
        .unwrap();
    let available = within("available after the seek", reader.has_message_available()).await;
    assert!(matches!(available, Ok(true)), "{available:?}");
    let m = within("read after the seek", reader.recv()).await;
    assert_eq!(
        m.as_ref().ok().and_then(|m| m.payload_str()),
        Some("m-0"),
        "{m:?}"
    );
    within("close", reader.close()).await.unwrap();
}

/// Java `ReaderImpl.readNext` acks cumulatively the message it returns; for the last message
/// of a batch that acks the whole entry (`BatchMessageIdImpl`, the tracker acks the entry once
/// its last index is acked cumulatively), so a reader whose topic ends with a batch learns the
/// end too.
#[tokio::test]
async fn a_reader_whose_topic_ends_with_a_batch_learns_the_end() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-batch");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 1).await;
    crate::common::publish_batch(&client, &topic, 3).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..4 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
}

/// Java `MultiTopicsConsumerImpl.hasReachedEndOfTopic` for a reader of a partitioned topic
/// (`MultiTopicsReader`): true once every partition's consumer reached its end; the reader acks
/// each partition's messages cumulatively, so each partition learns it.
#[tokio::test]
async fn a_reader_of_a_partitioned_topic_learns_the_end_of_every_partition() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-parts");
    broker.create_partitioned_topic(&topic, 2);
    for p in 0..2 {
        let part = format!("{topic}-partition-{p}");
        let producer = unbatched_producer(&client, &part).await;
        publish(&producer, &format!("p{p}"), 2).await;
        producer.close().await.unwrap();
        broker.terminate_topic(&part).unwrap();
    }
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..4 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let available = within("available at the end", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
}
