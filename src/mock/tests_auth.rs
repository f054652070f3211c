//! Permissions, PIP-124 initial subscriptions and delayed delivery against a raw client.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::tests_support::{metadata, subscribe_cmd, Client, TOPIC};
use super::wire::{self, command_subscribe::SubType};
use super::*;

/// PRODUCER with an initial subscription; returns the response.
async fn dlq_producer(
    client: &mut Client,
    topic: &str,
    producer_id: u64,
    initial: &str,
) -> wire::BaseCommand {
    let request_id = client.request_id();
    client
        .producer_with(wire::CommandProducer {
            topic: topic.into(),
            producer_id,
            request_id,
            initial_subscription_name: Some(initial.into()),
            ..Default::default()
        })
        .await
}

fn authorization_error(resp: &wire::BaseCommand) -> bool {
    resp.error
        .as_ref()
        .is_some_and(|e| e.error == ServerError::AuthorizationError.code())
}

#[tokio::test]
async fn initial_subscription_needs_auto_subscription_creation() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    let resp = dlq_producer(&mut client, "dlq-1", 1, "init").await;
    assert!(resp.producer_success.is_some());
    assert_eq!(broker.subscriptions("dlq-1"), ["init"]);

    // Off: the topic is created without it, and the producer succeeds.
    broker.set_allow_auto_subscription_creation(false);
    let resp = dlq_producer(&mut client, "dlq-2", 2, "init").await;
    assert!(resp.producer_success.is_some());
    assert!(broker.topic_exists("dlq-2"));
    assert!(broker.subscriptions("dlq-2").is_empty());

    // Also from the configuration.
    let broker = MockBroker::start_with(MockBrokerConfig {
        allow_auto_subscription_creation: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = Client::connect(&broker).await;
    assert!(dlq_producer(&mut client, "dlq", 1, "init")
        .await
        .producer_success
        .is_some());
    assert!(broker.subscriptions("dlq").is_empty());
    broker.set_allow_auto_subscription_creation(true);
    assert!(dlq_producer(&mut client, "dlq-3", 2, "init")
        .await
        .producer_success
        .is_some());
    assert_eq!(broker.subscriptions("dlq-3"), ["init"]);
}

#[tokio::test]
async fn permissions_restrict_producers_consumers_and_initial_subscriptions() {
    let broker = MockBroker::start().await.unwrap();
    // Open until the first grant: the anonymous role may do everything.
    let mut anonymous = Client::connect(&broker).await;
    anonymous.producer(TOPIC, 1).await;
    assert_eq!(
        broker.connection_role(broker.connections()[0]).as_deref(),
        Some("anonymous")
    );
    assert_eq!(broker.permissions("public/default"), None);

    use MockAction::{Consume, Produce};
    broker
        .grant_permission("public/default", "alice", &[Produce, Consume])
        .unwrap();
    broker
        .grant_permission("public/default", "bob", &[Produce])
        .unwrap();
    assert_eq!(
        broker.permissions("public/default").unwrap(),
        [
            ("alice".to_owned(), vec![Produce, Consume]),
            ("bob".to_owned(), vec![Produce])
        ]
    );
    assert!(broker.grant_permission("nope", "x", &[Produce]).is_err());

    // bob may produce but not consume: the topic is created without the initial subscription.
    let mut bob = Client::connect_as(&broker, "bob").await;
    let resp = dlq_producer(&mut bob, "dlq-bob", 1, "init").await;
    assert!(resp.producer_success.is_some(), "{resp:?}");
    assert!(broker.topic_exists("dlq-bob"));
    assert!(broker.subscriptions("dlq-bob").is_empty());
    let rid = bob.request_id();
    let resp = bob
        .subscribe_with(subscribe_cmd(TOPIC, "s", SubType::Shared, 1, rid))
        .await;
    assert!(authorization_error(&resp), "{resp:?}");
    assert_eq!(resp.error.unwrap().request_id, rid);

    // alice may consume: the initial subscription is created; she may subscribe.
    let mut alice = Client::connect_as(&broker, "alice").await;
    let resp = dlq_producer(&mut alice, "dlq-alice", 1, "init").await;
    assert!(resp.producer_success.is_some());
    assert_eq!(broker.subscriptions("dlq-alice"), ["init"]);
    alice.subscribe(TOPIC, "s", SubType::Shared, 1).await;

    // Roles without a grant (and the anonymous one) may do nothing there.
    let mut carol = Client::connect_as(&broker, "carol").await;
    let rid = carol.request_id();
    let resp = carol
        .producer_with(wire::CommandProducer {
            topic: TOPIC.into(),
            producer_id: 1,
            request_id: rid,
            ..Default::default()
        })
        .await;
    assert!(authorization_error(&resp), "{resp:?}");
    assert_eq!(resp.error.unwrap().request_id, rid);
    let resp = dlq_producer(&mut anonymous, "dlq-anon", 2, "init").await;
    assert!(authorization_error(&resp), "{resp:?}");
    assert!(!broker.topic_exists("dlq-anon"));
    // Other namespaces stay open.
    carol.producer("other/ns/t", 2).await;

    // Revoked: alice may no longer produce; the namespace stays restricted.
    broker
        .revoke_permissions("public/default", "alice")
        .unwrap();
    let resp = dlq_producer(&mut alice, "dlq-alice-2", 2, "init").await;
    assert!(authorization_error(&resp), "{resp:?}");
    broker.revoke_permissions("public/default", "bob").unwrap();
    assert_eq!(broker.permissions("public/default"), Some(vec![]));
    let resp = dlq_producer(&mut bob, "dlq-bob-2", 2, "init").await;
    assert!(authorization_error(&resp), "{resp:?}");
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn delayed(sequence_id: u64, key: Option<&str>, delay: Duration) -> wire::MessageMetadata {
    wire::MessageMetadata {
        deliver_at_time: Some(wall_clock_ms() + delay.as_millis() as i64),
        ..metadata("p", sequence_id, key)
    }
}

#[tokio::test(start_paused = true)]
async fn deliver_at_time_holds_messages_back_on_shared_subscriptions() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(TOPIC, 1).await;
    let mut shared = Client::connect(&broker).await.patient();
    shared.subscribe(TOPIC, "shared", SubType::Shared, 1).await;
    shared.flow(1, 100).await;
    let mut keyed = Client::connect(&broker).await.patient();
    keyed.subscribe(TOPIC, "keyed", SubType::KeyShared, 1).await;
    keyed.flow(1, 100).await;
    let mut exclusive = Client::connect(&broker).await.patient();
    exclusive
        .subscribe(TOPIC, "exclusive", SubType::Exclusive, 1)
        .await;
    exclusive.flow(1, 100).await;

    let start = tokio::time::Instant::now();
    producer
        .publish(1, delayed(0, Some("k"), Duration::from_secs(10)), b"later")
        .await;
    producer
        .publish(1, metadata("p", 1, Some("k")), b"now")
        .await;

    // Exclusive ignores the delay.
    let got = exclusive.messages(2).await;
    assert_eq!(got.iter().map(|d| d.entry()).collect::<Vec<_>>(), [0, 1]);
    // Shared / Key_Shared: the undelayed message at once, the delayed one when due.
    for client in [&mut shared, &mut keyed] {
        assert_eq!(client.message().await.entry(), 1);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
    shared.raw.expect_silence(Duration::from_secs(5)).await;
    for client in [&mut shared, &mut keyed] {
        let d = client.message().await;
        assert_eq!((d.entry(), &d.payload[..]), (0, &b"later"[..]));
        // Due 10 s after the metadata was built, minus the real time spent until SEND.
        assert!(start.elapsed() >= Duration::from_secs(9));
        assert!(start.elapsed() < Duration::from_secs(11));
    }

    // Due while the consumer has no permits: dispatched on the next FLOW.
    let mut starved = Client::connect(&broker).await.patient();
    starved
        .subscribe(TOPIC, "starved", SubType::Shared, 1)
        .await;
    starved.flow(1, 2).await;
    starved.messages(2).await;
    producer
        .publish(1, delayed(2, None, Duration::from_secs(3)), b"x")
        .await;
    starved.raw.expect_silence(Duration::from_secs(5)).await;
    starved.flow(1, 1).await;
    assert_eq!(starved.message().await.entry(), 2);
    // A deliver_at_time in the past is no delay.
    producer
        .publish(1, delayed(3, None, Duration::ZERO), b"y")
        .await;
    starved.flow(1, 1).await;
    assert_eq!(starved.message().await.entry(), 3);
}

/// Entries carrying one `deliver_at_time` (the chunks of a message) fall due together and are
/// dispatched in order, even when the wall clock moved on between their SENDs (it read a
/// later millisecond at each one, which used to make a later entry due first).
#[tokio::test(start_paused = true)]
async fn entries_with_one_deliver_at_time_fall_due_together_in_order() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(TOPIC, 1).await;
    let mut shared = Client::connect(&broker).await.patient();
    shared.subscribe(TOPIC, "shared", SubType::Shared, 1).await;
    shared.flow(1, 100).await;
    let start = tokio::time::Instant::now();
    let at = wall_clock_ms() + 1_000;
    for seq in 0..3 {
        let meta = wire::MessageMetadata {
            deliver_at_time: Some(at),
            ..metadata("p", seq, None)
        };
        producer.publish(1, meta, b"chunk").await;
        // Paused tokio time stands still while the wall clock runs: the next SEND reads it
        // at least a millisecond later.
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = shared.messages(3).await;
    assert_eq!(got.iter().map(|d| d.entry()).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(start.elapsed() >= Duration::from_millis(990));
    // The time is forgotten once it has passed (the map stays bounded).
    producer
        .publish(1, delayed(3, None, Duration::from_secs(1)), b"later")
        .await;
    assert_eq!(shared.message().await.entry(), 3);
    let state = lock(&broker.shared().state);
    let due_times = &state.topics.get(TOPIC).expect("the topic").due_times;
    assert_eq!(
        due_times.len(),
        1,
        "the passed time is dropped: {due_times:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn redelivery_counts_are_recorded_per_subscription() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(TOPIC, 1).await;
    producer.publish(1, metadata("p", 0, None), b"m").await;
    let mut consumer = Client::connect(&broker).await;
    consumer.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    consumer.flow(1, 10).await;
    for count in 0..3 {
        let d = consumer.message().await;
        // Upstream `Commands.newMessageCommand` leaves a count of 0 out.
        assert_eq!(d.message.redelivery_count, (count > 0).then_some(count));
        assert_eq!(broker.redelivery_count(TOPIC, "s", 0), count);
        consumer.redeliver(1, vec![d.message.message_id]).await;
    }
    assert_eq!(consumer.message().await.message.redelivery_count, Some(3));
    assert_eq!(broker.redelivery_count(TOPIC, "s", 0), 3);
    assert_eq!(broker.redelivery_count(TOPIC, "nope", 0), 0);
}
