//! The broker semantics the entity core must get right (each a defect found by review), against
//! the mock broker, which behaves like Apache Pulsar's broker for each of them.

use common::client;
use support as common;

use common::{full, within};

use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type, command_ack::AckType};
use pulsar_sdk::mock::{MockBroker, Received};
use pulsar_sdk::{Client, Consumer, Error, Message, Producer, State, SubscriptionType};

const WAIT: Duration = Duration::from_secs(10);

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

async fn unbatched(client: &Client, topic: &str) -> Producer {
    client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap()
}

async fn consumer(client: &Client, topic: &str, sub: &str, ty: SubscriptionType) -> Consumer {
    client
        .consumer(topic)
        .subscription(sub)
        .subscription_type(ty)
        .initial_position(pulsar_sdk::InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(10))
        .subscribe()
        .await
        .unwrap()
}

fn base(ty: Type) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

fn acks(broker: &MockBroker) -> Vec<wire::CommandAck> {
    broker
        .received_of(Type::Ack)
        .into_iter()
        .filter_map(|r| r.command.ack)
        .collect()
}

// 1. Cumulative acks are refused on Shared / Key_Shared (upstream: "Cannot use cumulative
// acks on a non-exclusive subscription"), and nothing is sent.
#[tokio::test]
async fn cumulative_ack_is_refused_on_shared_and_key_shared() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    for (i, ty) in [SubscriptionType::Shared, SubscriptionType::KeyShared]
        .into_iter()
        .enumerate()
    {
        let topic = full(&format!("cumulative-{i}"));
        let producer = unbatched(&client, &topic).await;
        let mut c = consumer(&client, &topic, "s", ty).await;
        producer.send_and_wait("m0").await.unwrap();
        let m = recv(&mut c).await;
        match c.ack_cumulative(&m) {
            Err(Error::InvalidOperation(why)) => assert!(why.contains("cumulative"), "{why}"),
            other => panic!("expected InvalidOperation on {ty:?}, got {other:?}"),
        }
        // The refused ack left the message tracked: a plain ack still goes out.
        let before = acks(&broker).len();
        c.ack(&m).unwrap();
        common::wait_until("the individual ack", || acks(&broker).len() > before).await;
        assert!(
            acks(&broker)
                .iter()
                .all(|a| a.ack_type == AckType::Individual as i32),
            "no cumulative ack reached the broker"
        );
        c.close().await.unwrap();
    }
}

// 2. A nack (or ack timeout) on Exclusive / Failover rewinds: redeliver-all with a new
// consumer epoch, the queue cleared, then everything unacked in order.
async fn redeliver_all_in_order(ty: SubscriptionType, by_ack_timeout: bool) {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full(&format!("rewind-{ty:?}-{by_ack_timeout}"));
    let producer = unbatched(&client, &topic).await;
    for i in 0..5 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    let mut builder = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(ty)
        .initial_position(pulsar_sdk::InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(10));
    if by_ack_timeout {
        builder = builder.ack_timeout(Duration::from_secs(1));
    }
    let mut c = builder.subscribe().await.unwrap();
    let m0 = recv(&mut c).await;
    assert_eq!(m0.payload_str(), Some("m0"));
    if !by_ack_timeout {
        c.nack(&m0).unwrap();
    }
    let redeliver = within(
        "redeliver",
        broker.wait_for_command(Type::RedeliverUnacknowledgedMessages, WAIT),
    )
    .await
    .expect("a RedeliverUnacknowledgedMessages");
    let r = redeliver.command.redeliver_unacknowledged_messages.unwrap();
    assert!(r.message_ids.is_empty(), "redeliver-all names no ids");
    assert_eq!(r.consumer_epoch, Some(1));
    // In order, each once: m0 .. m4 after the rewind.
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(recv(&mut c).await.payload_str().unwrap().to_string());
    }
    assert_eq!(got, ["m0", "m1", "m2", "m3", "m4"]);
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(300), c.recv()).await {
        panic!("no duplicate beyond the rewind, got {m:?}");
    }
}

#[tokio::test]
async fn nack_on_exclusive_rewinds_in_order() {
    redeliver_all_in_order(SubscriptionType::Exclusive, false).await;
}

#[tokio::test]
async fn nack_on_failover_rewinds_in_order() {
    redeliver_all_in_order(SubscriptionType::Failover, false).await;
}

#[tokio::test]
async fn ack_timeout_on_exclusive_rewinds_in_order() {
    redeliver_all_in_order(SubscriptionType::Exclusive, true).await;
}

// 3. Entries the client cannot decode are discarded like upstream (acked with their
// validation error, permits given back): the consumer reports each and never stalls.
#[tokio::test]
async fn undecodable_entries_are_discarded_and_never_stall_the_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("undecodable");
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .receiver_queue_size(2)
        .subscribe()
        .await
        .unwrap();
    // A chunk of a chunked message whose chunk exceeds the size it claims (refused, acked)
    // and a corrupt zstd payload.
    let meta = |m: wire::MessageMetadata| wire::MessageMetadata {
        producer_name: "raw".into(),
        publish_time: 1,
        ..m
    };
    broker
        .publish_raw(
            &topic,
            meta(wire::MessageMetadata {
                num_chunks_from_msg: Some(2),
                total_chunk_msg_size: Some(3),
                chunk_id: Some(0),
                uuid: Some("raw-0".into()),
                ..Default::default()
            }),
            bytes::Bytes::from_static(b"chunk"),
        )
        .unwrap();
    broker
        .publish_raw(
            &topic,
            meta(wire::MessageMetadata {
                sequence_id: 1,
                compression: Some(wire::CompressionType::Zstd as i32),
                uncompressed_size: Some(100),
                ..Default::default()
            }),
            bytes::Bytes::from_static(b"not zstd at all"),
        )
        .unwrap();
    let producer = unbatched(&client, &topic).await;
    for i in 0..3 {
        producer.send_and_wait(format!("good-{i}")).await.unwrap();
    }
    for _ in 0..2 {
        match within("error item", c.recv()).await {
            Err(Error::InvalidMessage(_)) | Err(Error::Codec(_)) => {}
            other => panic!("expected an undecodable-entry error, got {other:?}"),
        }
    }
    for i in 0..3 {
        let m = recv(&mut c).await;
        assert_eq!(m.payload_str(), Some(format!("good-{i}").as_str()));
        c.ack(&m).unwrap();
    }
    assert_eq!(c.discarded_entries(), 2);
    let discarded: Vec<i32> = acks(&broker)
        .iter()
        .filter_map(|a| a.validation_error)
        .collect();
    assert_eq!(
        discarded,
        [wire::command_ack::ValidationError::DecompressionError as i32]
    );
    // The refused chunk is acked (grouped, so within the ack group time).
    within("the refused chunk's ack", async {
        while !acks(&broker)
            .iter()
            .flat_map(|a| a.message_id.clone())
            .any(|id| id.entry_id == 0)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn close_for_good(ty: Type, id: u64) -> wire::BaseCommand {
    let mut c = base(ty);
    match ty {
        Type::CloseProducer => {
            c.close_producer = Some(wire::CommandCloseProducer {
                producer_id: id,
                request_id: 0,
                allow_reconnect: Some(false),
                ..Default::default()
            })
        }
        _ => {
            c.close_consumer = Some(wire::CommandCloseConsumer {
                consumer_id: id,
                request_id: 0,
                allow_reconnect: Some(false),
                ..Default::default()
            })
        }
    }
    c
}

fn last_of(broker: &MockBroker, ty: Type) -> Received {
    broker.received_of(ty).pop().expect("command received")
}

// 8. PIP-139: a close for good that arrives while close() runs ends terminal, and close()
// says so.
#[tokio::test]
async fn a_close_for_good_during_close_is_reported() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("closing-for-good");
    let producer = unbatched(&client, &topic).await;
    let created = last_of(&broker, Type::Producer);
    let mut c = consumer(&client, &topic, "s", SubscriptionType::Shared).await;
    let subscribed = last_of(&broker, Type::Subscribe);
    // The broker stops answering: the pending send keeps the producer's close waiting, and the
    // consumer's CloseConsumer goes unanswered.
    broker.set_unresponsive(true);
    let pending = producer.send("never receipted").await.unwrap();
    let p = producer.clone();
    let p_close = tokio::spawn(async move { p.close().await });
    let c_close = {
        let c2 = &mut c;
        let fut = c2.close();
        tokio::pin!(fut);
        // The close is under way once the broker has the CloseConsumer.
        tokio::select! {
            r = &mut fut => panic!("close finished early: {r:?}"),
            _ = broker.wait_for_command(Type::CloseConsumer, WAIT) => {}
        }
        common::wait_until("producer closing", || producer.state() == State::Closing).await;
        assert!(broker.push(
            created.connection,
            close_for_good(
                Type::CloseProducer,
                created.command.producer.unwrap().producer_id
            )
        ));
        assert!(broker.push(
            subscribed.connection,
            close_for_good(
                Type::CloseConsumer,
                subscribed.command.subscribe.unwrap().consumer_id
            )
        ));
        within("consumer close", fut).await
    };
    assert!(
        matches!(c_close, Err(Error::ClosedByBroker { .. })),
        "{c_close:?}"
    );
    assert_eq!(c.state(), State::ClosedByBroker);
    let p_close = within("producer close", p_close).await.unwrap();
    assert!(
        matches!(p_close, Err(Error::ClosedByBroker { .. })),
        "{p_close:?}"
    );
    assert_eq!(producer.state(), State::ClosedByBroker);
    assert!(matches!(
        within("pending", pending).await,
        Err(Error::ClosedByBroker { .. })
    ));
}

// 12. close() has one shape and honest results: Ok for a close of ours (twice is fine), the
// error that ended the entity otherwise.
#[tokio::test]
async fn close_reports_how_the_entity_ended() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("close-results");
    let producer = unbatched(&client, &topic).await;
    let created = last_of(&broker, Type::Producer);
    let c = consumer(&client, &topic, "s", SubscriptionType::Shared).await;
    let subscribed = last_of(&broker, Type::Subscribe);
    broker.push(
        created.connection,
        close_for_good(
            Type::CloseProducer,
            created.command.producer.unwrap().producer_id,
        ),
    );
    broker.push(
        subscribed.connection,
        close_for_good(
            Type::CloseConsumer,
            subscribed.command.subscribe.unwrap().consumer_id,
        ),
    );
    common::wait_until("both closed by the broker", || {
        producer.state() == State::ClosedByBroker && c.state() == State::ClosedByBroker
    })
    .await;
    assert!(matches!(
        producer.close().await,
        Err(Error::ClosedByBroker { .. })
    ));
    assert!(matches!(c.close().await, Err(Error::ClosedByBroker { .. })));
    // A close of ours: Ok, and Ok again.
    let other = unbatched(&client, &topic).await;
    other.close().await.unwrap();
    other.close().await.unwrap();
    assert_eq!(other.state(), State::Closed);
    let c2 = consumer(&client, &topic, "s2", SubscriptionType::Shared).await;
    c2.close().await.unwrap();
    c2.close().await.unwrap();
    assert_eq!(c2.state(), State::Closed);
    client.close().await.unwrap();
}

// 9. Dropping a consumer or reader (partitioned ones too) closes it on the broker.
#[tokio::test]
async fn dropping_a_consumer_or_reader_closes_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let plain = full("drop-plain");
    let parted = full("drop-parted");
    broker.create_partitioned_topic(&parted, 2);
    let c = consumer(&client, &plain, "s", SubscriptionType::Shared).await;
    let p = consumer(&client, &parted, "s", SubscriptionType::Shared).await;
    let r = client
        .reader(&plain)
        .subscription("reader-sub")
        .start_earliest()
        .create()
        .await
        .unwrap();
    assert_eq!(broker.consumers(&plain, "s"), 1);
    assert_eq!(broker.consumers(&plain, "reader-sub"), 1);
    drop(c);
    drop(p);
    drop(r);
    common::wait_until("every consumer closed on the broker", || {
        broker.consumers(&plain, "s") == 0
            && broker.consumers(&plain, "reader-sub") == 0
            && broker.consumers(&format!("{parted}-partition-0"), "s") == 0
            && broker.consumers(&format!("{parted}-partition-1"), "s") == 0
    })
    .await;
    // Each was closed by a CloseConsumer of ours, not by a lost connection.
    assert_eq!(broker.received_of(Type::CloseConsumer).len(), 4);
    common::wait_until("nothing left registered", || {
        client
            .connection_stats()
            .iter()
            .all(|s| s.registered_entities == 0)
    })
    .await;
}

// 5. An Exclusive producer re-creates itself with the topic epoch of its last
// ProducerSuccess, so a broker can fence it if another took the topic meanwhile.
#[tokio::test]
async fn exclusive_producers_send_their_topic_epoch_when_re_created() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("epoch");
    let producer = client
        .producer(&topic)
        .access_mode(pulsar_sdk::producer::ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let first = last_of(&broker, Type::Producer).command.producer.unwrap();
    assert_eq!(first.topic_epoch, None, "a first create has no epoch yet");
    broker.drop_all_connections();
    let again = within(
        "re-create",
        broker.wait_for_commands(Type::Producer, 2, WAIT),
    )
    .await
    .expect("a second CommandProducer");
    let again = again[1].command.producer.clone().unwrap();
    assert!(
        again.topic_epoch.is_some(),
        "re-create carries the topic epoch"
    );
    assert!(again.epoch > first.epoch);
    producer.send_and_wait("after").await.unwrap();
}

// 11. Values from configuration or the broker that used to overflow or panic.
#[tokio::test]
async fn huge_timeouts_and_delays_do_not_panic() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::MAX)
        .keepalive_interval(Duration::MAX)
        .build()
        .unwrap();
    let topic = full("huge");
    let producer = client
        .producer(&topic)
        .send_timeout(Duration::MAX)
        .create()
        .await
        .unwrap();
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_group_time(Duration::MAX)
        .negative_ack_delay(Duration::MAX)
        .subscribe()
        .await
        .unwrap();
    producer.send_and_wait("x").await.unwrap();
    let m = recv(&mut c).await;
    c.nack(&m).unwrap();
    c.ack(&m).unwrap();
    c.close().await.unwrap();
    producer.close().await.unwrap();
}

/// Applications spawn tasks that create producers, consumers and readers: the futures of
/// `create()` and `subscribe()` must be `Send` (a compile-time check, run for good measure).
#[tokio::test]
async fn creating_entities_can_be_spawned() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url()).build().unwrap();
    let (c1, c2, c3) = (client.clone(), client.clone(), client.clone());
    let p = tokio::spawn(async move { c1.producer("spawned").create().await.map(|_| ()) });
    let c = tokio::spawn(async move {
        c2.consumer("spawned")
            .subscription("s")
            .subscribe()
            .await
            .map(|_| ())
    });
    let r = tokio::spawn(async move {
        c3.reader("spawned")
            .start_message_id(pulsar_sdk::MessageId::EARLIEST)
            .create()
            .await
            .map(|_| ())
    });
    for h in [p, c, r] {
        within("spawned create", h).await.unwrap().unwrap();
    }
}
