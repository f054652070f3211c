//! Consumer and reader behaviour against the in-memory mock broker (protocol tier, loopback
//! TCP, real time with generous timeouts).

use common::client;
use support as common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{publish, publish_batch, unbatched_producer};
use futures::StreamExt;
use pulsar_sdk::mock::wire::{self, base_command::Type, command_ack::AckType};
use pulsar_sdk::mock::{MockBroker, Received};
use pulsar_sdk::{Consumer, InitialPosition, Message, ProducerMessage, SubscriptionType};

/// Bound on anything that should happen "soon"; far above what any step needs.
const WAIT: Duration = Duration::from_secs(10);
/// Longer than the default ack group time (100 ms) with a wide margin.
const ACK_SETTLE: Duration = Duration::from_millis(500);

fn full(topic: &str) -> String {
    format!("persistent://public/default/{topic}")
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing after {WAIT:?}"))
}

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

/// Asserts nothing more arrives for a while.
async fn assert_quiet(consumer: &mut Consumer) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(400), consumer.recv()).await {
        panic!("unexpected message {m:?}");
    }
}

fn payload(m: &Message) -> &str {
    m.payload_str().unwrap()
}

fn acks(broker: &MockBroker) -> Vec<wire::CommandAck> {
    broker
        .received_of(Type::Ack)
        .into_iter()
        .map(|r| r.command.ack.unwrap())
        .collect()
}

fn subscribe_cmds(broker: &MockBroker) -> Vec<wire::CommandSubscribe> {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .map(|r| r.command.subscribe.unwrap())
        .collect()
}

fn flows(broker: &MockBroker) -> Vec<wire::CommandFlow> {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r: Received| r.command.flow.unwrap())
        .collect()
}

/// Waits (polling the admin view) until `check` holds.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    within(what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn subscribe_sends_type_position_durability_and_properties() {
    use wire::command_subscribe::{InitialPosition as WirePos, SubType};
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "sub-fields";
    let cases = [
        (SubscriptionType::Exclusive, SubType::Exclusive, "ex"),
        (SubscriptionType::Shared, SubType::Shared, "sh"),
        (SubscriptionType::Failover, SubType::Failover, "fo"),
        (SubscriptionType::KeyShared, SubType::KeyShared, "ks"),
    ];
    let mut consumers = Vec::new();
    for (i, (ty, _, name)) in cases.iter().enumerate() {
        let position = if i % 2 == 0 {
            InitialPosition::Earliest
        } else {
            InitialPosition::Latest
        };
        consumers.push(
            client
                .consumer(topic)
                .subscription(*name)
                .subscription_type(*ty)
                .initial_position(position)
                .name(format!("consumer-{name}"))
                .subscription_property("team", *name)
                .subscription_property("env", "test")
                .subscribe()
                .await
                .unwrap(),
        );
    }
    let sent = subscribe_cmds(&broker);
    assert_eq!(sent.len(), 4);
    for (i, (cmd, (_, wire_type, name))) in sent.iter().zip(cases.iter()).enumerate() {
        assert_eq!(cmd.topic, full(topic));
        assert_eq!(cmd.subscription, *name);
        assert_eq!(cmd.sub_type, *wire_type as i32, "{name}");
        assert_eq!(
            cmd.durable,
            Some(true),
            "{name}: durable on a persistent topic"
        );
        let expected = if i % 2 == 0 {
            WirePos::Earliest
        } else {
            WirePos::Latest
        };
        assert_eq!(cmd.initial_position, Some(expected as i32), "{name}");
        assert_eq!(
            cmd.consumer_name.as_deref(),
            Some(&*format!("consumer-{name}"))
        );
        assert_eq!(cmd.start_message_id, None, "{name}");
        assert_eq!(
            cmd.key_shared_meta.is_some(),
            *wire_type == SubType::KeyShared,
            "{name}: KeySharedMeta only on Key_Shared"
        );
        let props: BTreeMap<&str, &str> = cmd
            .subscription_properties
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect();
        assert_eq!(props, BTreeMap::from([("env", "test"), ("team", *name)]));
        let stored: BTreeMap<String, String> = broker
            .subscription_properties(topic, name)
            .expect("subscription exists")
            .into_iter()
            .collect();
        assert_eq!(stored.get("team").map(String::as_str), Some(*name));
    }
    assert_eq!(broker.subscriptions(topic), ["ex", "fo", "ks", "sh"]);
    for c in consumers {
        c.close().await.unwrap();
    }
    // Durable subscriptions outlive their consumers.
    assert_eq!(broker.subscriptions(topic).len(), 4);
}

#[tokio::test]
async fn subscriptions_on_non_persistent_topics_are_not_durable() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "non-persistent://public/default/np";
    let consumer = client
        .consumer(topic)
        .subscription("np-sub")
        .subscribe()
        .await
        .unwrap();
    let cmd = &subscribe_cmds(&broker)[0];
    assert_eq!(cmd.durable, Some(false));
    consumer.close().await.unwrap();
    assert!(broker.subscriptions(topic).is_empty());
}

#[tokio::test]
async fn flow_permits_start_at_the_queue_size_and_refill_at_half() {
    let broker = MockBroker::start().await.unwrap();
    // A byte budget (half the memory limit) that holds a receiver queue of maximum-size
    // (5 MiB) messages: the first FLOW is the whole queue (with less, it starts smaller and
    // grows with the sizes seen: `budget` tests in the hostile tier).
    let client = common::test_client(&broker.service_url())
        .memory_limit(128 * 1024 * 1024)
        .build()
        .unwrap();
    let topic = "flow";
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "f", 30).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("flow-sub")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    let first = within("initial FLOW", broker.wait_for_command(Type::Flow, WAIT))
        .await
        .unwrap();
    assert_eq!(first.command.flow.unwrap().message_permits, 10);
    for i in 0..4 {
        assert_eq!(payload(&recv(&mut consumer).await), format!("f-{i}"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(flows(&broker).len(), 1, "no refill before half is consumed");
    assert_eq!(payload(&recv(&mut consumer).await), "f-4");
    let two = within("refill FLOW", broker.wait_for_commands(Type::Flow, 2, WAIT))
        .await
        .unwrap();
    assert_eq!(two[1].command.flow.as_ref().unwrap().message_permits, 5);
    // The broker never has more than the queue size outstanding: reading everything works and
    // takes further refills.
    for i in 5..30 {
        assert_eq!(payload(&recv(&mut consumer).await), format!("f-{i}"));
    }
    let total: u32 = flows(&broker).iter().map(|f| f.message_permits).sum();
    assert!(total >= 30, "permits granted: {total}");
    assert!(flows(&broker).iter().all(|f| f.message_permits <= 10));
}

#[tokio::test]
async fn messages_arrive_through_recv_and_through_the_stream() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "recv-and-stream";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "m", 6).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(recv(&mut consumer).await);
    }
    for _ in 0..3 {
        let m = within("stream next", consumer.next())
            .await
            .expect("the stream is open")
            .unwrap();
        got.push(m);
    }
    for (i, m) in got.iter().enumerate() {
        assert_eq!(payload(m), format!("m-{i}"));
        assert_eq!(m.id, ids[i]);
        assert_eq!(m.topic.to_string(), full(topic));
        assert_eq!(&*m.producer_name, producer.name());
        assert_eq!(m.sequence_id, i as u64);
        assert_eq!(m.redelivery_count, 0);
        consumer.ack(m).unwrap();
    }
    eventually("all acked", || broker.subscription_backlog(topic, "s") == 0).await;
}

#[tokio::test]
async fn message_fields_survive_the_round_trip() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "fields";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    producer
        .send_and_wait(
            ProducerMessage::new("hello")
                .key("k1")
                .property("a", "1")
                .event_time(1_700_000_000_000),
        )
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    assert_eq!(payload(&m), "hello");
    assert_eq!(m.key.as_deref(), Some("k1"));
    assert_eq!(m.properties.get("a").map(String::as_str), Some("1"));
    assert_eq!(m.event_time, Some(1_700_000_000_000));
    assert!(m.publish_time > 0);
}

#[tokio::test]
async fn a_batch_is_acked_on_the_broker_only_when_all_its_messages_are() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "batch-acks";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let ids = publish_batch(&client, topic, 5).await;
    assert_eq!(broker.topic_messages(topic), 1, "one entry");
    let mut got = Vec::new();
    for i in 0..5 {
        let m = recv(&mut consumer).await;
        assert_eq!(payload(&m), format!("b-{i}"));
        assert_eq!(m.id.batch_index, i);
        assert_eq!(m.id.batch_size, 5);
        assert_eq!(m.id.entry(), ids[0].entry());
        assert_eq!(m.id, ids[i as usize], "receipt and delivery agree");
        got.push(m);
    }
    for m in &got[..4] {
        consumer.ack(m).unwrap();
    }
    tokio::time::sleep(ACK_SETTLE).await;
    assert!(
        acks(&broker).is_empty(),
        "4 of 5 acked: nothing on the wire yet"
    );
    assert_eq!(broker.subscription_backlog(topic, "s"), 1);
    consumer.ack(&got[4]).unwrap();
    within("batch ACK", broker.wait_for_command(Type::Ack, WAIT))
        .await
        .unwrap();
    tokio::time::sleep(ACK_SETTLE).await;
    let sent = acks(&broker);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].ack_type, AckType::Individual as i32);
    assert_eq!(sent[0].message_id.len(), 1);
    assert_eq!(sent[0].message_id[0].entry_id, ids[0].entry_id);
    assert_eq!(broker.subscription_backlog(topic, "s"), 0);
}

#[tokio::test]
async fn individual_acks_are_grouped_into_few_frames() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "ack-group";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "a", 50).await;
    for id in &ids {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        consumer.ack(&m).unwrap();
    }
    eventually("all acked", || broker.subscription_backlog(topic, "s") == 0).await;
    tokio::time::sleep(ACK_SETTLE).await;
    let sent = acks(&broker);
    assert!(
        sent.len() <= 5,
        "50 acks within the group time took {} ACK frames",
        sent.len()
    );
    let acked: BTreeSet<u64> = sent
        .iter()
        .flat_map(|a| {
            assert_eq!(a.ack_type, AckType::Individual as i32);
            a.message_id.iter().map(|id| id.entry_id)
        })
        .collect();
    assert_eq!(acked, ids.iter().map(|id| id.entry_id).collect());
}

#[tokio::test]
async fn cumulative_ack_acks_everything_up_to_the_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "ack-cumulative";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "c", 10).await;
    let mut last = None;
    for _ in 0..7 {
        last = Some(recv(&mut consumer).await);
    }
    let seventh = last.unwrap();
    assert_eq!(seventh.id, ids[6]);
    consumer.ack_cumulative(&seventh).unwrap();
    within("cumulative ACK", broker.wait_for_command(Type::Ack, WAIT))
        .await
        .unwrap();
    tokio::time::sleep(ACK_SETTLE).await;
    let sent = acks(&broker);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].ack_type, AckType::Cumulative as i32);
    assert_eq!(sent[0].message_id.len(), 1);
    assert_eq!(sent[0].message_id[0].entry_id, ids[6].entry_id);
    assert_eq!(broker.subscription_backlog(topic, "s"), 3);
}

#[tokio::test]
async fn a_nacked_message_comes_back_after_the_delay_with_its_redelivery_count() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "nack";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "n", 2).await;
    let first = recv(&mut consumer).await;
    assert_eq!(first.id, ids[0]);
    assert_eq!(first.redelivery_count, 0);
    consumer.nack(&first).unwrap();
    let second = recv(&mut consumer).await;
    assert_eq!(second.id, ids[1]);
    consumer.ack(&second).unwrap();
    // Not redelivered before the delay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(broker
        .received_of(Type::RedeliverUnacknowledgedMessages)
        .is_empty());
    let again = recv(&mut consumer).await;
    assert_eq!(again.id, ids[0]);
    assert_eq!(payload(&again), "n-0");
    assert_eq!(again.redelivery_count, 1);
    let redeliver = broker.received_of(Type::RedeliverUnacknowledgedMessages);
    assert_eq!(redeliver.len(), 1);
    let asked: Vec<u64> = redeliver[0]
        .command
        .redeliver_unacknowledged_messages
        .as_ref()
        .unwrap()
        .message_ids
        .iter()
        .map(|id| id.entry_id)
        .collect();
    assert_eq!(asked, [ids[0].entry_id]);
    consumer.ack(&again).unwrap();
    eventually("all acked", || broker.subscription_backlog(topic, "s") == 0).await;
}

#[tokio::test]
async fn after_a_reconnect_unacked_messages_come_back_once_and_acked_ones_never() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "consumer-reconnect";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "r", 10).await;
    // The application receives 5 (the other 5 sit in the client's queue) and acks 3.
    for i in 0..5 {
        let m = recv(&mut consumer).await;
        assert_eq!(payload(&m), format!("r-{i}"));
        if i < 3 {
            consumer.ack(&m).unwrap();
        }
    }
    eventually("3 acks reached the broker", || {
        broker.subscription_backlog(topic, "s") == 7
    })
    .await;

    broker.drop_all_connections();
    eventually("re-subscribed", || {
        broker.received_of(Type::Subscribe).len() == 2 && broker.consumers(topic, "s") == 1
    })
    .await;
    // Unacked messages come back: those the application had (r-3, r-4) and those still
    // queued in the client (r-5 .. r-9), each exactly once; acked ones never.
    for i in 3..10 {
        let m = recv(&mut consumer).await;
        assert_eq!(payload(&m), format!("r-{i}"));
        consumer.ack(&m).unwrap();
    }
    assert_quiet(&mut consumer).await;
    // And the consumer goes on with new messages.
    publish(&producer, "after", 2).await;
    assert_eq!(payload(&recv(&mut consumer).await), "after-0");
    assert_eq!(payload(&recv(&mut consumer).await), "after-1");
}

/// An ack the application made just before the connection dropped (still in the ack group
/// window) is sent after the reconnect; meanwhile the broker redelivers the message. The Java
/// client filters such redeliveries (`AcknowledgmentsGroupingTracker.isDuplicate`), so the
/// application never sees a message again after acking it.
#[tokio::test]
async fn a_message_acked_just_before_a_disconnect_is_not_delivered_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "ack-then-drop";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .ack_group_time(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "d", 4).await;
    for i in 0..2 {
        let m = recv(&mut consumer).await;
        assert_eq!(payload(&m), format!("d-{i}"));
        consumer.ack(&m).unwrap();
    }
    broker.drop_all_connections();
    eventually("re-subscribed", || broker.consumers(topic, "s") == 1).await;
    let next = recv(&mut consumer).await;
    assert_eq!(payload(&next), "d-2", "d-0 and d-1 were acked");
}

#[tokio::test]
async fn unsubscribe_deletes_the_subscription() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "unsubscribe";
    let consumer = client
        .consumer(topic)
        .subscription("gone")
        .subscribe()
        .await
        .unwrap();
    let keep = client
        .consumer(topic)
        .subscription("kept")
        .subscribe()
        .await
        .unwrap();
    assert_eq!(broker.subscriptions(topic), ["gone", "kept"]);
    within("unsubscribe", consumer.unsubscribe()).await.unwrap();
    assert_eq!(broker.subscriptions(topic), ["kept"]);
    assert_eq!(broker.received_of(Type::Unsubscribe).len(), 1);
    keep.close().await.unwrap();
    assert_eq!(broker.subscriptions(topic), ["kept"]);
}

#[tokio::test]
async fn seek_to_the_first_id_replays_from_there() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "seek";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "s", 5).await;
    for (i, id) in ids.iter().enumerate() {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        if i < 2 {
            consumer.ack(&m).unwrap();
        }
    }
    eventually("acks", || broker.subscription_backlog(topic, "s") == 3).await;
    within("seek", consumer.seek(ids[0])).await.unwrap();
    assert_eq!(broker.received_of(Type::Seek).len(), 1);
    // Everything from the first message again, in order, once.
    for (i, id) in ids.iter().enumerate() {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id, "message {i} after the seek");
        consumer.ack(&m).unwrap();
    }
    assert_quiet(&mut consumer).await;
    // The mock disconnected the consumer on seek, as Pulsar does: it subscribed again.
    assert!(broker.received_of(Type::Subscribe).len() >= 2);
    eventually("all acked", || broker.subscription_backlog(topic, "s") == 0).await;
}

#[tokio::test]
async fn reader_from_earliest_and_latest() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-positions";
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "old", 3).await;

    let mut earliest = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut latest = client.reader(topic).create().await.unwrap();
    assert!(earliest.has_message_available().await.unwrap());
    assert!(!latest.has_message_available().await.unwrap());
    for i in 0..3 {
        let m = within("earliest", earliest.recv()).await.unwrap();
        assert_eq!(payload(&m), format!("old-{i}"));
    }
    assert!(!earliest.has_message_available().await.unwrap());

    publish(&producer, "new", 2).await;
    assert!(latest.has_message_available().await.unwrap());
    for i in 0..2 {
        let m = within("latest", latest.recv()).await.unwrap();
        assert_eq!(payload(&m), format!("new-{i}"), "latest skips the old ones");
        let m = within("earliest", earliest.recv()).await.unwrap();
        assert_eq!(payload(&m), format!("new-{i}"));
    }
    assert!(!latest.has_message_available().await.unwrap());
    assert!(!earliest.has_message_available().await.unwrap());
    // Readers use non-durable subscriptions that go away with them.
    let cmds = subscribe_cmds(&broker);
    assert!(cmds.iter().all(|c| c.durable == Some(false)));
    earliest.close().await.unwrap();
    latest.close().await.unwrap();
    eventually("reader subscriptions removed", || {
        broker.subscriptions(topic).is_empty()
    })
    .await;
}

#[tokio::test]
async fn reader_from_a_message_id_exclusive_and_inclusive() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-from-id";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "x", 5).await;

    let mut exclusive = client
        .reader(topic)
        .start_message_id(ids[1])
        .create()
        .await
        .unwrap();
    assert!(exclusive.has_message_available().await.unwrap());
    for id in &ids[2..5] {
        let m = within("exclusive", exclusive.recv()).await.unwrap();
        assert_eq!(m.id, *id);
    }
    assert!(!exclusive.has_message_available().await.unwrap());

    let mut inclusive = client
        .reader(topic)
        .start_message_id(ids[1])
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    for id in &ids[1..5] {
        let m = within("inclusive", inclusive.recv()).await.unwrap();
        assert_eq!(m.id, *id);
    }
    assert!(!inclusive.has_message_available().await.unwrap());

    // From the last message, exclusive: nothing available until something new arrives.
    let mut at_end = client
        .reader(topic)
        .start_message_id(ids[4])
        .create()
        .await
        .unwrap();
    assert!(!at_end.has_message_available().await.unwrap());
    let new = producer.send_and_wait("x-new").await.unwrap();
    assert!(at_end.has_message_available().await.unwrap());
    assert_eq!(within("at end", at_end.recv()).await.unwrap().id, new);
}

/// A reader started at a message inside a batch gets the rest of that batch (exclusive) or
/// that message and the rest (inclusive), as the Java reader does: it sends the start id with
/// its batch index, so the broker delivers the entry and the client skips what precedes it.
#[tokio::test]
async fn reader_from_a_message_inside_a_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-batch";
    let ids = publish_batch(&client, topic, 5).await;
    assert!(ids[2].is_batch());

    let mut exclusive = client
        .reader(topic)
        .start_message_id(ids[2])
        .create()
        .await
        .unwrap();
    for id in &ids[3..5] {
        let m = within("exclusive", exclusive.recv()).await.unwrap();
        assert_eq!(m.id, *id);
    }
    let mut inclusive = client
        .reader(topic)
        .start_message_id(ids[2])
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    for id in &ids[2..5] {
        let m = within("inclusive", inclusive.recv()).await.unwrap();
        assert_eq!(m.id, *id);
    }
}

#[tokio::test]
async fn has_message_available_on_an_empty_topic_is_false() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "reader-empty";
    for earliest in [true, false] {
        let builder = client.reader(topic);
        let builder = if earliest {
            builder.start_earliest()
        } else {
            builder
        };
        let mut reader = builder.create().await.unwrap();
        assert!(
            !within("has_message_available", reader.has_message_available())
                .await
                .unwrap(),
            "earliest = {earliest}"
        );
        reader.close().await.unwrap();
    }
}

#[tokio::test]
async fn failover_has_one_active_consumer_and_hands_over_on_close() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "failover";
    let subscribe = |name: &'static str| {
        client
            .consumer(topic)
            .subscription("fo")
            .subscription_type(SubscriptionType::Failover)
            .name(name)
            .subscribe()
    };
    // The mock (like a broker on a non-partitioned topic) makes the first by name active.
    let a = subscribe("consumer-a").await.unwrap();
    let mut b = subscribe("consumer-b").await.unwrap();
    let mut a_state = a.active_updates();
    let mut b_state = b.active_updates();
    within("a active", a_state.wait_for(|s| *s == Some(true)))
        .await
        .unwrap();
    within("b inactive", b_state.wait_for(|s| *s == Some(false)))
        .await
        .unwrap();

    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "fo", 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Unacked messages go to whoever is active next.
    a.close().await.unwrap();
    within("b becomes active", b_state.wait_for(|s| *s == Some(true)))
        .await
        .unwrap();
    for i in 0..2 {
        assert_eq!(payload(&recv(&mut b).await), format!("fo-{i}"));
    }
}

#[tokio::test]
async fn a_partitioned_consumer_merges_partitions_and_routes_acks() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "partitioned-consume";
    broker.create_partitioned_topic(topic, 3);
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.partitions(), 3);
    let subs = subscribe_cmds(&broker);
    let topics: BTreeSet<String> = subs.iter().map(|s| s.topic.clone()).collect();
    assert_eq!(
        topics,
        (0..3)
            .map(|i| format!("{}-partition-{i}", full(topic)))
            .collect()
    );

    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut sent = BTreeMap::new();
    for i in 0..30 {
        let id = producer
            .send_and_wait(ProducerMessage::new(format!("p-{i}")).key(format!("key-{i}")))
            .await
            .unwrap();
        sent.insert(format!("p-{i}"), id);
    }
    let mut per_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for _ in 0..30 {
        let m = recv(&mut consumer).await;
        let p = payload(&m).to_owned();
        assert_eq!(m.id, sent[&p], "{p}: same id as the receipt");
        assert_eq!(
            m.topic.to_string(),
            format!("{}-partition-{}", full(topic), m.id.partition)
        );
        consumer.ack(&m).unwrap();
        per_partition.entry(m.id.partition).or_default().push(p);
    }
    assert_eq!(per_partition.len(), 3, "messages from every partition");
    // Per partition, in publish order.
    for msgs in per_partition.values() {
        let idx: Vec<usize> = msgs.iter().map(|p| p[2..].parse().unwrap()).collect();
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        assert_eq!(idx, sorted);
    }
    assert_quiet(&mut consumer).await;
    // Each ack reached its own partition.
    for i in 0..3i32 {
        let partition_topic = format!("{topic}-partition-{i}");
        eventually("partition acked", || {
            broker.subscription_backlog(&partition_topic, "s") == 0
        })
        .await;
        assert_eq!(
            broker.topic_messages(&partition_topic),
            per_partition[&i].len()
        );
    }
}

#[tokio::test]
async fn a_broker_ignoring_flow_permits_cannot_make_the_consumer_buffer_without_bound() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("flood");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    let consumer_id = subscribe_cmds(&broker)[0].consumer_id;
    let conn = broker.connections()[0];
    // A broken broker pushes 15,000 messages although it was given 10 permits.
    for i in 0..15_000u64 {
        let cmd = wire::BaseCommand {
            r#type: Type::Message as i32,
            message: Some(wire::CommandMessage {
                consumer_id,
                message_id: wire::MessageIdData {
                    ledger_id: 1,
                    entry_id: i,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        let meta = wire::MessageMetadata {
            producer_name: "flood".into(),
            sequence_id: i,
            publish_time: 1,
            ..Default::default()
        };
        assert!(broker.push_with_payload(conn, cmd, meta, bytes::Bytes::from_static(b"x")));
    }
    // The application reads nothing until the client has caught the violation: it closes the
    // flooded connection and subscribes again (an observable event; a client that buffered
    // the flood never does). Reading while the flood arrives would grant permits as fast as it
    // spends them, and no violation would be seen. Then read what the client kept: at most the
    // permits plus the bounded overshoot.
    eventually("the consumer re-subscribes", || {
        subscribe_cmds(&broker).len() >= 2
    })
    .await;
    let mut accepted = 0;
    while tokio::time::timeout(Duration::from_millis(500), consumer.recv())
        .await
        .is_ok()
    {
        accepted += 1;
    }
    assert!(
        accepted <= 10 + 10 * 10 + 10_000 + 10,
        "excess is dropped, not buffered: {accepted}"
    );
}

#[tokio::test]
async fn batch_index_ack_acks_exactly_the_acked_messages_of_a_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-index-ack");
    let ids = publish_batch(&client, &topic, 5).await;
    assert!(ids.iter().all(|id| id.is_batch()));
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .batch_index_ack(true)
        .subscribe()
        .await
        .unwrap();
    for i in 0..5 {
        let m = recv(&mut consumer).await;
        if i == 1 || i == 3 {
            consumer.ack(&m).unwrap();
        }
    }
    eventually("the partial ack reaches the broker", || {
        acks(&broker)
            .iter()
            .any(|a| a.message_id.iter().any(|m| !m.ack_set.is_empty()))
    })
    .await;
    consumer.close().await.unwrap();
    let mut again = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let mut back = BTreeSet::new();
    for _ in 0..3 {
        back.insert(recv(&mut again).await.id.batch_index);
    }
    assert_eq!(
        back,
        BTreeSet::from([0, 2, 4]),
        "only the unacked messages come back"
    );
    assert_quiet(&mut again).await;
}
