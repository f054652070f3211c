//! Issue #19: seek, readers, request retries and close, against the mock broker (which answers
//! GET_LAST_MESSAGE_ID with the last id's batch index and the mark-delete position, and keeps a
//! non-durable subscription across the disconnect a seek causes, like Apache Pulsar). Each test
//! asserts what the Java client guarantees.

use common::client;
use support as common;

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{
    Consumer, DeadLetterPolicy, Error, InitialPosition, Message, MessageId, Reader,
    SubscriptionType,
};

use common::{full, publish, publish_batch, unbatched_producer, within};

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

async fn read(reader: &mut Reader) -> Message {
    within("reader recv", reader.recv())
        .await
        .expect("a message")
}

fn seeks(broker: &MockBroker) -> Vec<String> {
    broker
        .received_of(Type::Seek)
        .into_iter()
        .map(|r| r.command.seek.unwrap())
        .map(|s| {
            s.message_id
                .map(|id| format!("{}:{}", id.ledger_id as i64, id.entry_id as i64))
                .unwrap_or_default()
        })
        .collect()
}

/// Waits until the broker saw `n` SUBSCRIBE commands in all.
async fn subscribes(broker: &MockBroker, n: usize) {
    broker
        .wait_for_commands(Type::Subscribe, n, Duration::from_secs(10))
        .await
        .expect("subscribes");
}

// Defect 1 ---------------------------------------------------------------------------------

#[tokio::test]
async fn seek_by_id_on_a_partitioned_consumer_moves_only_the_partition_owning_the_id() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek-partitioned";
    broker.create_partitioned_topic(topic, 2);
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let p0 = unbatched_producer(&client, &format!("{topic}-partition-0")).await;
    let p1 = unbatched_producer(&client, &format!("{topic}-partition-1")).await;
    publish(&p0, "p0", 3).await;
    publish(&p1, "p1", 3).await;
    // The ids as the consumer names them (with their partition).
    let mut ids1 = Vec::new();
    for _ in 0..6 {
        let m = recv(&mut consumer).await;
        if m.id.partition == 1 {
            ids1.push(m.id);
        }
    }
    assert_eq!(ids1.len(), 3);
    within("seek", consumer.seek(ids1[1])).await.unwrap();
    assert_eq!(seeks(&broker).len(), 1, "one SEEK, to partition 1 only");
    // Partition 0 was not moved: its three messages are still unacknowledged.
    assert_eq!(
        broker.subscription_backlog(&format!("{topic}-partition-0"), "s"),
        3
    );
    for id in &ids1[1..] {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
    }
    // An id naming no partition of this consumer is refused, and nothing is sent.
    let stray = MessageId::new(ids1[0].ledger_id, 0, 7);
    assert!(matches!(
        consumer.seek(stray).await,
        Err(Error::InvalidOperation(_))
    ));
    let unpartitioned = MessageId::new(ids1[0].ledger_id, 0, -1);
    assert!(matches!(
        consumer.seek(unpartitioned).await,
        Err(Error::InvalidOperation(_))
    ));
    assert_eq!(seeks(&broker).len(), 1);
    // Earliest goes to every partition.
    within("seek earliest", consumer.seek(MessageId::EARLIEST))
        .await
        .unwrap();
    assert_eq!(seeks(&broker).len(), 3);
}

#[tokio::test]
async fn seek_by_id_with_retry_enabled_does_not_seek_the_retry_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek-retry";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 3).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    for _ in 0..3 {
        recv(&mut consumer).await;
    }
    within("seek", consumer.seek(ids[1])).await.unwrap();
    let sent: Vec<String> = broker
        .received_of(Type::Seek)
        .into_iter()
        .map(|r| r.command.seek.unwrap().consumer_id.to_string())
        .collect();
    assert_eq!(
        sent.len(),
        1,
        "only the main topic's consumer seeks: {sent:?}"
    );
    assert_eq!(recv(&mut consumer).await.id, ids[1]);
}

// Defect 3 ---------------------------------------------------------------------------------

#[tokio::test]
async fn acks_still_grouped_at_a_seek_do_not_hide_the_rewound_messages() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek-grouped-acks";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 5).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        if i < 3 {
            consumer.ack(&m).unwrap();
        }
    }
    within("seek", consumer.seek(ids[0])).await.unwrap();
    for id in &ids {
        assert_eq!(
            recv(&mut consumer).await.id,
            *id,
            "everything again after the seek"
        );
    }
}

#[tokio::test]
async fn acked_messages_of_a_batch_come_back_after_a_seek_to_earliest() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek-batch-acks";
    let ids = publish_batch(&client, topic, 3).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    for id in &ids {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        if m.id.batch_index < 2 {
            consumer.ack(&m).unwrap();
        }
    }
    within("seek", consumer.seek(MessageId::EARLIEST))
        .await
        .unwrap();
    for id in &ids {
        assert_eq!(recv(&mut consumer).await.id, *id, "the whole batch again");
    }
}

// Defect 4 ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_reader_reconnecting_after_a_seek_resumes_from_the_seek_position() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-seek-reconnect";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 5).await;
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for id in &ids {
        assert_eq!(read(&mut reader).await.id, *id);
    }
    within("seek", reader.seek(ids[3])).await.unwrap();
    // The seek's own disconnect: the reader subscribed again.
    subscribes(&broker, 2).await;
    // Then the connection is lost before the next recv().
    broker.drop_all_connections();
    subscribes(&broker, 3).await;
    assert_eq!(read(&mut reader).await.id, ids[3]);
    assert_eq!(read(&mut reader).await.id, ids[4]);
    assert!(
        !within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
}

// Defect 5 ---------------------------------------------------------------------------------

#[tokio::test]
async fn seek_and_last_message_id_wait_for_the_reconnect_a_seek_causes() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek-twice";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 5).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    within("seek 1", consumer.seek(ids[0])).await.unwrap();
    within("seek 2", consumer.seek(ids[2])).await.unwrap();
    let last = within("last ids", consumer.last_message_ids())
        .await
        .unwrap();
    assert_eq!(last[0].entry_id, ids[4].entry_id);
    assert_eq!(recv(&mut consumer).await.id, ids[2]);

    // The Java idiom on a reader: seek, then read while messages are available.
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    within("reader seek", reader.seek(ids[3])).await.unwrap();
    let mut got = Vec::new();
    while within("has_message_available", reader.has_message_available())
        .await
        .unwrap()
    {
        got.push(read(&mut reader).await.id);
    }
    assert_eq!(got, ids[3..].to_vec());
}

// Defect 6 ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_reader_from_latest_inclusive_reads_the_last_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-latest-inclusive";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 3).await;
    let mut reader = client
        .reader(topic)
        .start_latest()
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert_eq!(read(&mut reader).await.id, ids[2]);
    assert!(
        !within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn has_message_available_compares_the_batch_index_of_the_start() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-batch-available";
    let ids = publish_batch(&client, topic, 3).await;
    let mut reader = client
        .reader(topic)
        .start_message_id(ids[0])
        .create()
        .await
        .unwrap();
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert_eq!(read(&mut reader).await.id, ids[1]);
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert_eq!(read(&mut reader).await.id, ids[2]);
    assert!(
        !within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn has_message_available_after_seek_by_time_follows_the_cursor() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-time-available";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 3).await;
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let future = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    within("seek by time", reader.seek_by_time(future))
        .await
        .unwrap();
    assert!(
        !within("has_message_available", reader.has_message_available())
            .await
            .unwrap(),
        "nothing is published after the seek time"
    );
    within("seek by time", reader.seek_by_time(0))
        .await
        .unwrap();
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert_eq!(read(&mut reader).await.id, ids[0]);
}

// Defect 2 ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_reader_with_a_specific_start_id_on_a_partitioned_topic_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-partitioned";
    broker.create_partitioned_topic(topic, 2);
    let r = client
        .reader(topic)
        .start_message_id(MessageId::new(1, 0, 0))
        .create()
        .await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    assert!(broker.received_of(Type::Subscribe).is_empty());
    // Earliest and latest are fine.
    let earliest = client.reader(topic).start_earliest().create().await;
    assert!(earliest.is_ok());
    let latest = client.reader(topic).start_latest().create().await;
    assert!(latest.is_ok());
}

// Defect 7 ---------------------------------------------------------------------------------

#[tokio::test]
async fn partitioned_metadata_lookups_are_retried_while_the_broker_is_down() {
    let broker = MockBroker::start().await.unwrap();
    let addr = broker.addr();
    let restarting = {
        let broker = broker.clone();
        tokio::spawn(async move { broker.restart_after(Duration::from_millis(300)).await })
    };
    // Observed, not slept: the port refuses connections.
    within("broker down", async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let client = client(&broker.service_url());
    let producer = within("create", client.producer("after-restart").create()).await;
    assert!(producer.is_ok(), "{producer:?}");
    restarting.await.unwrap().unwrap();
}

// Defect 8 ---------------------------------------------------------------------------------

#[tokio::test]
async fn the_dead_letter_copy_after_the_last_retry_carries_the_new_retry_properties() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("retry-props");
    client
        .producer(&topic)
        .create()
        .await
        .unwrap()
        .send_and_wait("r")
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(2))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    for delay in [100, 150, 170] {
        let m = recv(&mut consumer).await;
        within(
            "reconsume",
            consumer.reconsume_later(&m, Duration::from_millis(delay)),
        )
        .await
        .unwrap();
    }
    let mut dlq = client
        .reader(format!("{topic}-s-DLQ"))
        .start_earliest()
        .create()
        .await
        .unwrap();
    let letter = read(&mut dlq).await;
    assert_eq!(
        letter.properties.get("RECONSUMETIMES").map(String::as_str),
        Some("3")
    );
    assert_eq!(
        letter.properties.get("DELAY_TIME").map(String::as_str),
        Some("170")
    );
}

// Decision: reconsume_later on Exclusive / Failover --------------------------------------

#[tokio::test]
async fn reconsume_later_works_on_an_exclusive_subscription() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("retry-exclusive");
    unbatched_producer(&client, &topic)
        .await
        .send_and_wait("r")
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    within(
        "reconsume",
        consumer.reconsume_later(&m, Duration::from_millis(50)),
    )
    .await
    .unwrap();
    let again = recv(&mut consumer).await;
    assert_eq!(again.payload_str(), Some("r"));
    assert_eq!(
        again.properties.get("RECONSUMETIMES").map(String::as_str),
        Some("1")
    );
}

// Defect 9 ---------------------------------------------------------------------------------

#[tokio::test]
async fn producer_close_sends_close_producer_at_once_and_is_bounded() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let producer = client
        .producer("close-bounded")
        .batching(false)
        .send_timeout(Duration::ZERO)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let receipt = producer.send("stuck").await.unwrap();
    broker
        .wait_for_commands(Type::Send, 1, Duration::from_secs(10))
        .await
        .expect("the send reached the broker");
    let started = tokio::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(5), producer.close())
        .await
        .expect("close() is bounded by the operation timeout");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(closed.is_err(), "the broker never confirmed: {closed:?}");
    assert_eq!(
        broker.received_of(Type::CloseProducer).len(),
        1,
        "CloseProducer sent at once"
    );
    let failed = within("receipt", receipt).await;
    assert!(matches!(failed, Err(Error::Closed)), "{failed:?}");
}

// Defect 10 --------------------------------------------------------------------------------

#[tokio::test]
async fn the_receiver_queue_is_bounded_across_partitions() {
    // A byte budget that holds every partition's queue of maximum-size messages (32 KiB here),
    // so that the first FLOWs show the count bound alone.
    let broker = MockBroker::start_with(pulsar_sdk::mock::MockBrokerConfig {
        max_message_size: Some(32 * 1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(u32::MAX as usize)
        .build()
        .unwrap();
    let topic = "many-partitions";
    broker.create_partitioned_topic(topic, 100);
    let consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let flows: Vec<u32> = broker
        .wait_for_commands(Type::Flow, 100, Duration::from_secs(10))
        .await
        .expect("a FLOW per partition")
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect();
    assert!(
        flows.iter().all(|&p| p == 500),
        "50,000 / 100 each: {flows:?}"
    );
    consumer.close().await.unwrap();

    let topic = "few-partitions";
    broker.create_partitioned_topic(topic, 4);
    let before = broker.received_of(Type::Flow).len();
    let _consumer = client
        .consumer(topic)
        .subscription("s")
        .max_total_receiver_queue_size_across_partitions(1_000)
        .subscribe()
        .await
        .unwrap();
    let flows: Vec<u32> = broker
        .wait_for_commands(Type::Flow, before + 4, Duration::from_secs(10))
        .await
        .expect("a FLOW per partition")[before..]
        .iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect();
    assert_eq!(flows, vec![250; 4]);
}

/// Java `ConsumerImpl.seekAsync` writes the SEEK on the connection in the caller's thread, so
/// an ack made after `seek` began (from another task, through an `Acker`) reaches the broker
/// after the seek, and the broker's reset of the cursor does not undo it. Here the task writes
/// acks on the connection's control lane, drained before the ops lane carrying the SEEK: an
/// ack applied behind the Seek op overtook it (ack group time zero) and the seek cleared it.
/// It must also go on the subscription made again after the seek (the broker disconnects the
/// consumer and ignores acks for it, `ServerCnx.handleAck`), so it takes effect.
#[tokio::test]
async fn an_ack_made_after_a_seek_began_reaches_the_broker_after_the_seek() {
    ack_made_after_a_seek_began(Duration::ZERO, "seek-then-ack-order").await;
}

/// The same with acks grouped: the group's timer does not send it early either.
#[tokio::test]
async fn a_grouped_ack_made_after_a_seek_began_reaches_the_broker_after_the_seek() {
    ack_made_after_a_seek_began(Duration::from_millis(5), "seek-then-grouped-ack-order").await;
}

async fn ack_made_after_a_seek_began(group: Duration, name: &str) {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full(name);
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(group)
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut c).await;
    let acker = c.acker();
    {
        let mut seek = std::pin::pin!(c.seek(MessageId::EARLIEST));
        assert!(futures::poll!(seek.as_mut()).is_pending());
        acker.ack(&m).unwrap();
        within("seek", seek).await.unwrap();
    }
    within(
        "the ack",
        broker.wait_for_command(Type::Ack, Duration::from_secs(10)),
    )
    .await
    .expect("an ack");
    let log = broker.received();
    let seek_at = log.iter().position(|r| r.is(Type::Seek)).expect("a seek");
    let ack_at = log.iter().position(|r| r.is(Type::Ack)).expect("an ack");
    assert!(
        seek_at < ack_at,
        "the ack made after seek() began reached the broker before the seek"
    );
    let resubscribed_at = log
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is(Type::Subscribe))
        .nth(1)
        .map(|(i, _)| i)
        .expect("subscribed again after the seek");
    assert!(
        resubscribed_at < ack_at,
        "the ack went to the consumer the broker dropped for the seek, not the new one"
    );
    // It took effect: of the two messages, only the unacked one is left.
    within("the ack applied", async {
        while broker.subscription_backlog(&topic, "s") != 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}
