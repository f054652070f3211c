//! The in-memory broker, producer side: PRODUCER, SEND, CLOSE_PRODUCER, access modes, sizes.

use super::tests_support::{metadata, Client, TOPIC};
use super::wire::{self, base_command::Type, command_subscribe::SubType, ProducerAccessMode};
use super::*;

#[tokio::test]
async fn receipts_carry_increasing_ids_and_the_topic_is_created() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let mut client = Client::connect(&broker).await;
    let ok = client.producer(TOPIC, 1).await;
    assert_eq!(ok.producer_name, "mock-1");
    assert_eq!(ok.last_sequence_id, Some(-1));
    assert_eq!(ok.producer_ready, Some(true));
    assert_eq!(ok.schema_version.as_deref(), Some(&[][..]));
    assert_eq!(broker.producers(TOPIC), 1);
    assert!(broker.topic_exists("t"));

    let mut ids = Vec::new();
    for seq in 0..3 {
        let receipt = client
            .publish(1, metadata("mock-1", seq, None), b"hello")
            .await;
        assert_eq!(receipt.highest_sequence_id, Some(seq));
        ids.push(receipt.message_id.unwrap());
    }
    assert!(ids.windows(2).all(|w| w[0].ledger_id == w[1].ledger_id));
    assert_eq!(
        ids.iter().map(|id| id.entry_id).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(broker.topic_messages(TOPIC), 3);

    // The stored entry is what was sent.
    let sent = broker.received_of(Type::Send);
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0].payload.as_ref().unwrap().1, &b"hello"[..]);

    // Reconnecting under the same name learns the last sequence id (with deduplication on,
    // set above; upstream answers -1 without it).
    let close = client.request(close_producer(1, 9)).await;
    assert_eq!(close.success.unwrap().request_id, 9);
    assert_eq!(broker.producers(TOPIC), 0);
    let again = client
        .producer_with(wire::CommandProducer {
            topic: TOPIC.into(),
            producer_id: 2,
            request_id: 10,
            producer_name: Some("mock-1".into()),
            ..Default::default()
        })
        .await
        .producer_success
        .unwrap();
    assert_eq!(again.last_sequence_id, Some(2));

    // Another topic gets another ledger.
    client.producer("other", 3).await;
    let receipt = client
        .publish(3, metadata("mock-2", 0, None), b"x")
        .await
        .message_id
        .unwrap();
    assert_ne!(receipt.ledger_id, ids[0].ledger_id);
    assert_eq!(receipt.entry_id, 0);
}

fn close_producer(producer_id: u64, request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id,
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn producer_cmd(
    producer_id: u64,
    request_id: u64,
    name: Option<&str>,
    mode: ProducerAccessMode,
) -> wire::CommandProducer {
    wire::CommandProducer {
        topic: TOPIC.into(),
        producer_id,
        request_id,
        producer_name: name.map(Into::into),
        producer_access_mode: Some(mode as i32),
        ..Default::default()
    }
}

fn error_of(resp: &wire::BaseCommand) -> (u64, ServerError) {
    let err = resp.error.as_ref().unwrap_or_else(|| panic!("{resp:?}"));
    (err.request_id, ServerError::from_code(err.error))
}

#[tokio::test]
async fn duplicate_ids_and_names() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    let first = client
        .producer_with(producer_cmd(1, 1, Some("p"), ProducerAccessMode::Shared))
        .await;
    assert_eq!(first.producer_success.unwrap().producer_name, "p");
    // Same id, same topic: a retry, answered again.
    let retry = client
        .producer_with(producer_cmd(1, 2, Some("p"), ProducerAccessMode::Shared))
        .await;
    assert_eq!(retry.producer_success.unwrap().request_id, 2);
    // Same id, another topic: refused.
    let mut other = producer_cmd(1, 3, None, ProducerAccessMode::Shared);
    other.topic = "persistent://public/default/u".into();
    let resp = client.producer_with(other).await;
    assert_eq!(error_of(&resp), (3, ServerError::ServiceNotReady));
    // Same name on the topic: ProducerBusy.
    let resp = client
        .producer_with(producer_cmd(2, 4, Some("p"), ProducerAccessMode::Shared))
        .await;
    assert_eq!(error_of(&resp), (4, ServerError::ProducerBusy));
    assert_eq!(broker.producers(TOPIC), 1);
}

#[tokio::test]
async fn exclusive_access_modes() {
    let broker = MockBroker::start().await.unwrap();
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    let ok = a
        .producer_with(producer_cmd(1, 1, None, ProducerAccessMode::Exclusive))
        .await
        .producer_success
        .unwrap();
    // Upstream `incrementTopicEpoch`: `orElse(-1) + 1`, so the first epoch is 0.
    assert_eq!(ok.topic_epoch, Some(0));
    // Shared: ProducerBusy; Exclusive: ProducerFenced (upstream `incrementTopicEpochIfNeeded`).
    let resp = b
        .producer_with(producer_cmd(1, 2, None, ProducerAccessMode::Shared))
        .await;
    assert_eq!(error_of(&resp), (2, ServerError::ProducerBusy));
    let resp = b
        .producer_with(producer_cmd(1, 2, None, ProducerAccessMode::Exclusive))
        .await;
    assert_eq!(error_of(&resp), (2, ServerError::ProducerFenced));

    // WaitForExclusive: queued (not ready, no epoch), granted when the holder leaves.
    let queued = b
        .producer_with(producer_cmd(
            5,
            3,
            None,
            ProducerAccessMode::WaitForExclusive,
        ))
        .await
        .producer_success
        .unwrap();
    assert_eq!(
        (queued.producer_ready, queued.topic_epoch),
        (Some(false), None)
    );
    assert_eq!(broker.producers(TOPIC), 1);
    // While one waits, a Shared producer is refused too.
    let resp = a
        .producer_with(producer_cmd(2, 9, None, ProducerAccessMode::Shared))
        .await;
    assert_eq!(error_of(&resp), (9, ServerError::ProducerBusy));
    a.request(close_producer(1, 4)).await;
    let granted = b
        .raw
        .expect(Type::ProducerSuccess)
        .await
        .producer_success
        .unwrap();
    assert_eq!(granted.request_id, 3);
    assert_eq!(granted.producer_ready, Some(true));
    assert_eq!(granted.topic_epoch, Some(1));
    b.publish(5, metadata(&granted.producer_name, 0, None), b"x")
        .await;

    // ExclusiveWithFencing takes over; the holder is removed without being told.
    let fencer = a
        .producer_with(producer_cmd(
            7,
            5,
            None,
            ProducerAccessMode::ExclusiveWithFencing,
        ))
        .await
        .producer_success
        .unwrap();
    assert_eq!(fencer.topic_epoch, Some(2));
    assert_eq!(broker.producers(TOPIC), 1);
    b.quiet().await;
    // Its next SEND finds no producer: the connection is closed (upstream `handleSend`).
    b.send(5, metadata("x", 1, None), b"late").await;
    assert!(b.raw.is_closed().await);
    assert_eq!(broker.topic_messages(TOPIC), 1);
    // Shared producers learn the topic's epoch once it has one... after the exclusive one left.
    a.request(close_producer(7, 6)).await;
    let shared = a
        .producer_with(producer_cmd(8, 7, None, ProducerAccessMode::Shared))
        .await
        .producer_success
        .unwrap();
    assert_eq!(shared.topic_epoch, Some(2));
}

#[tokio::test]
async fn exclusive_with_fencing_fails_waiting_producers() {
    let broker = MockBroker::start().await.unwrap();
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.producer_with(producer_cmd(1, 1, None, ProducerAccessMode::Exclusive))
        .await
        .producer_success
        .unwrap();
    let queued = b
        .producer_with(producer_cmd(
            2,
            2,
            None,
            ProducerAccessMode::WaitForExclusive,
        ))
        .await;
    assert_eq!(queued.producer_success.unwrap().producer_ready, Some(false));
    let fencer = a
        .producer_with(producer_cmd(
            3,
            3,
            None,
            ProducerAccessMode::ExclusiveWithFencing,
        ))
        .await;
    assert_eq!(fencer.producer_success.unwrap().topic_epoch, Some(1));
    // The waiting producer's request fails: ProducerFenced "Fenced out".
    let err = b.raw.expect(Type::Error).await;
    assert_eq!(error_of(&err), (2, ServerError::ProducerFenced));
    assert_eq!(broker.producers(TOPIC), 1);
}

/// Upstream `AbstractTopic.incrementTopicEpochIfNeeded`: a producer coming back with the
/// `topic_epoch` it was given, after another exclusive producer took the topic, is fenced.
#[tokio::test]
async fn a_reconnecting_exclusive_producer_with_an_old_topic_epoch_is_fenced() {
    let broker = MockBroker::start().await.unwrap();
    let mut a = Client::connect(&broker).await;
    let first = a
        .producer_with(producer_cmd(1, 1, Some("a"), ProducerAccessMode::Exclusive))
        .await
        .producer_success
        .unwrap();
    let a_epoch = first.topic_epoch.unwrap();
    assert_eq!(a_epoch, 0);
    // A's connection drops.
    drop(a);
    // B takes the topic (ExclusiveWithFencing; a plain Exclusive one bumps the epoch alike).
    let mut b = Client::connect(&broker).await;
    let taken = b
        .producer_with(producer_cmd(
            1,
            2,
            Some("b"),
            ProducerAccessMode::ExclusiveWithFencing,
        ))
        .await
        .producer_success
        .unwrap();
    assert_eq!(taken.topic_epoch, Some(1));
    // A re-creates with its old topic epoch while B holds the topic...
    let mut a = Client::connect(&broker).await;
    let mut again = producer_cmd(1, 3, Some("a"), ProducerAccessMode::Exclusive);
    again.topic_epoch = Some(a_epoch);
    let resp = a.producer_with(again.clone()).await;
    assert_eq!(error_of(&resp), (3, ServerError::ProducerFenced));
    // ... and after B has gone: the epoch has moved on.
    b.request(close_producer(1, 4)).await.success.unwrap();
    again.request_id = 5;
    let resp = a.producer_with(again.clone()).await;
    assert_eq!(error_of(&resp), (5, ServerError::ProducerFenced));
    assert!(
        resp.error
            .unwrap()
            .message
            .contains("Topic epoch has already moved"),
        "wrong message"
    );
    for mode in [
        ProducerAccessMode::WaitForExclusive,
        ProducerAccessMode::ExclusiveWithFencing,
    ] {
        again.request_id += 1;
        again.producer_access_mode = Some(mode as i32);
        let resp = a.producer_with(again.clone()).await;
        assert_eq!(
            error_of(&resp),
            (again.request_id, ServerError::ProducerFenced)
        );
    }
    assert_eq!(broker.producers(TOPIC), 0);
    // With the current epoch (or none) it is granted, and the topic keeps that epoch.
    again.request_id = 20;
    again.producer_access_mode = Some(ProducerAccessMode::Exclusive as i32);
    again.topic_epoch = Some(1);
    let ok = a.producer_with(again).await.producer_success.unwrap();
    assert_eq!(ok.topic_epoch, Some(1));
    a.request(close_producer(1, 21)).await.success.unwrap();
    let ok = a
        .producer_with(producer_cmd(2, 22, None, ProducerAccessMode::Exclusive))
        .await
        .producer_success
        .unwrap();
    assert_eq!(ok.topic_epoch, Some(2));
}

#[tokio::test]
async fn oversized_messages_get_send_error() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = Client::connect(&broker).await;
    client.producer(TOPIC, 1).await;
    static BIG: [u8; 2000] = [7; 2000];
    client.send(1, metadata("p", 0, None), &BIG).await;
    let err = client.raw.expect(Type::SendError).await.send_error.unwrap();
    assert_eq!((err.producer_id, err.sequence_id), (1, 0));
    assert_eq!(ServerError::from_code(err.error), ServerError::NotAllowed);
    assert_eq!(err.message, "Exceed maximum message size");
    assert_eq!(broker.topic_messages(TOPIC), 0);
    // The connection and the producer are still usable.
    client.publish(1, metadata("p", 1, None), b"small").await;
}

#[tokio::test]
async fn send_for_an_unknown_producer_closes_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    client.send(9, metadata("p", 0, None), b"x").await;
    assert!(client.raw.is_closed().await);
}

#[tokio::test]
async fn non_persistent_topics_store_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "non-persistent://public/default/np";
    let mut consumer = Client::connect(&broker).await;
    consumer.subscribe(topic, "s", SubType::Exclusive, 1).await;
    let mut producer = Client::connect(&broker).await;
    producer.producer(topic, 1).await;
    // No permits yet: dropped.
    let receipt = producer.publish(1, metadata("p", 0, None), b"lost").await;
    let id = receipt.message_id.unwrap();
    assert_eq!((id.ledger_id, id.entry_id), (0, 0));
    consumer.flow(1, 10).await;
    consumer.quiet().await;
    producer.publish(1, metadata("p", 1, None), b"seen").await;
    let got = consumer.message().await;
    assert_eq!(got.payload, &b"seen"[..]);
    assert_eq!(broker.topic_messages(topic), 0);
    // The subscription is non-durable: it goes with its last consumer.
    assert_eq!(broker.subscriptions(topic), ["s"]);
    consumer.close_consumer(1).await;
    assert!(broker.subscriptions(topic).is_empty());
}

#[tokio::test]
async fn partitioned_topics_and_initial_subscriptions() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_partitioned_topic("orders", 2);
    assert!(broker.topic_exists("persistent://public/default/orders-partition-1"));
    assert!(!broker.topic_exists("persistent://public/default/orders-partition-2"));

    // PIP-124: the producer that creates a topic creates its initial subscription.
    let mut client = Client::connect(&broker).await;
    let dlq = "persistent://public/default/t-DLQ";
    let resp = client
        .producer_with(wire::CommandProducer {
            topic: dlq.into(),
            producer_id: 1,
            request_id: 1,
            initial_subscription_name: Some("init".into()),
            ..Default::default()
        })
        .await;
    assert!(resp.producer_success.is_some());
    client.publish(1, metadata("p", 0, None), b"dead").await;
    assert_eq!(broker.subscriptions(dlq), ["init"]);
    assert_eq!(broker.subscription_backlog(dlq, "init"), 1);
}
