//! Upstream `MultiTopicsConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records
//! for it.

use crate::common::{client, full, publish, recv, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, Consumer, Error, InitialPosition, SubscriptionType};
use std::collections::BTreeSet;
use std::time::Duration;

/// Java `MultiTopicsConsumerImpl`: one topic reaching its end is no error (its consumer only
/// sets its flag); `hasReachedEndOfTopic` is true once every topic's consumer has reached it.
#[tokio::test]
async fn one_topic_ending_is_no_error_and_the_end_is_reached_once_all_have() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("conf-multi-end-a"), full("conf-multi-end-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    // A second consumer of a's subscription, on the same connection: the broker tells both in
    // one go, the multi-topic consumer's first, so once the witness knows, a's notice for the
    // multi-topic consumer has arrived too (and its task handles frames before its ops).
    let witness = client
        .consumer(&a)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    broker.terminate_topic(&a).unwrap();
    wait_until("a's end reached the witness", || {
        witness.has_reached_end_of_topic()
    })
    .await;
    assert!(!consumer.has_reached_end_of_topic(), "b has not ended");
    let pb = unbatched_producer(&client, &b).await;
    publish(&pb, "b", 1).await;
    let m = within("recv", consumer.recv()).await.unwrap();
    assert_eq!(m.topic.to_string(), b);
    consumer.ack(&m).unwrap();
    assert!(!consumer.state().is_terminal());
    // b ends too: now the consumer has reached the end, reported once by recv.
    drop(pb);
    broker.terminate_topic(&b).unwrap();
    let end = within("the end", consumer.recv()).await;
    assert!(matches!(end, Err(Error::TopicTerminated { .. })), "{end:?}");
    assert!(consumer.has_reached_end_of_topic());
    within("close", consumer.close()).await.unwrap();
    // Nothing else was reported: no error for a's end alone.
    let after = within("after the close", consumer.recv()).await;
    assert!(
        matches!(after, Err(Error::Closed)),
        "after the close: {after:?}"
    );
}

async fn two_topics(client: &Client, a: &str, b: &str, t: SubscriptionType) -> Consumer {
    client
        .multi_topic_consumer([a.to_string(), b.to_string()])
        .subscription("s")
        .subscription_type(t)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .expect("subscribed to both topics")
}

/// The consumer id the broker gave `topic`'s SUBSCRIBE (its first one).
fn consumer_id_of(broker: &MockBroker, topic: &str) -> u64 {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .map(|r| r.command.subscribe.unwrap())
        .find(|s| s.topic == topic)
        .map(|s| s.consumer_id)
        .expect("subscribed")
}

fn subscribes_of(broker: &MockBroker, topic: &str) -> usize {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .filter(|r| r.command.subscribe.as_ref().unwrap().topic == topic)
        .count()
}

/// `ConsumerBuilderImpl.subscribeAsync`: a consumer with neither a topic nor a pattern is
/// refused ("Topic name must be set on the consumer builder"); nothing is sent.
#[tokio::test]
async fn a_consumer_without_a_topic_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let r = client
        .multi_topic_consumer(Vec::<String>::new())
        .subscription("s")
        .subscribe()
        .await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    assert!(broker.received_of(Type::Subscribe).is_empty());
}

/// `MultiTopicsConsumerImpl.closeAsync`: every topic's consumer is closed (CLOSE_CONSUMER
/// each), and closing again succeeds at once.
#[tokio::test]
async fn closing_closes_every_topic_and_a_second_close_succeeds() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("mc-close-a"), full("mc-close-b"));
    let consumer = two_topics(&client, &a, &b, SubscriptionType::Shared).await;
    let ids = BTreeSet::from([consumer_id_of(&broker, &a), consumer_id_of(&broker, &b)]);
    within("close", consumer.close()).await.unwrap();
    let closed: BTreeSet<u64> = broker
        .received_of(Type::CloseConsumer)
        .into_iter()
        .map(|r| r.command.close_consumer.unwrap().consumer_id)
        .collect();
    assert_eq!(closed, ids);
    within("second close", consumer.close()).await.unwrap();
}

/// Upstream's `MultiTopicsConsumerImpl.redeliverUnacknowledgedMessages(Set)` on Exclusive /
/// Failover rewinds every topic (redeliver-all on each consumer); here only the topic of the
/// nacked message rewinds, so the other topics deliver nothing twice.
#[tokio::test]
async fn a_nack_on_exclusive_rewinds_only_the_messages_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("mc-nack-a"), full("mc-nack-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let pa = unbatched_producer(&client, &a).await;
    let pb = unbatched_producer(&client, &b).await;
    publish(&pa, "a", 1).await;
    publish(&pb, "b", 1).await;
    let mut from_a = None;
    for _ in 0..2 {
        let m = recv(&mut consumer).await;
        if m.topic.to_string() == a {
            from_a = Some(m);
        } else {
            consumer.ack(&m).unwrap();
        }
    }
    let m = from_a.expect("a's message");
    consumer.nack(&m).unwrap();
    let again = recv(&mut consumer).await;
    assert_eq!(again.payload_str(), Some("a-0"));
    consumer.ack(&again).unwrap();
    let asked: Vec<u64> = broker
        .received_of(Type::RedeliverUnacknowledgedMessages)
        .into_iter()
        .map(|r| {
            r.command
                .redeliver_unacknowledged_messages
                .unwrap()
                .consumer_id
        })
        .collect();
    assert_eq!(
        asked,
        [consumer_id_of(&broker, &a)],
        "only a's consumer rewinds"
    );
}

/// Upstream's `MultiTopicsConsumerImpl.seekAsync` clears the whole shared queue before a seek
/// (`beforeSeek`), even when only one topic seeks; here the other topics keep their queued
/// messages and are not re-subscribed.
#[tokio::test]
async fn seeking_one_topic_keeps_the_other_topics_queued_messages() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("mc-seek-a"), full("mc-seek-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let pa = unbatched_producer(&client, &a).await;
    let pb = unbatched_producer(&client, &b).await;
    publish(&pa, "a", 1).await;
    publish(&pb, "b", 3).await;
    let mut consumer = two_topics(&client, &a, &b, SubscriptionType::Exclusive).await;
    // Take a's message; b's three reach the queue.
    let mut got: Vec<String> = Vec::new();
    let a0 = loop {
        let m = recv(&mut consumer).await;
        got.push(m.payload_str().unwrap().to_string());
        if m.topic.to_string() == a {
            break m;
        }
    };
    wait_until("b's messages queued", || {
        consumer.stats().totals.receiver_queue_len + got.len() as u64 >= 4
    })
    .await;
    within("seek a", consumer.seek_topic_id(&a0.topic, a0.id))
        .await
        .unwrap();
    // a-0 comes again (the seek); b's messages come once each, from the queue.
    while got.len() < 5 {
        got.push(recv(&mut consumer).await.payload_str().unwrap().to_string());
    }
    got.sort();
    assert_eq!(got, ["a-0", "a-0", "b-0", "b-1", "b-2"]);
    assert_eq!(subscribes_of(&broker, &b), 1, "b was not re-subscribed");
}

/// Review r-38: a multi-topic consumer's acker retries then dead-letters a message of its
/// second topic into that topic's own `{topic}-{sub}-DLQ` (Java builds each inner
/// `ConsumerImpl`'s default letter names from its own topic), counted once.
#[tokio::test]
async fn a_multi_topic_acker_dead_letters_into_the_topics_own_dlq() {
    use pulsar_sdk::DeadLetterPolicy;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = full("conf-r38-multi-a");
    let b = full("conf-r38-multi-b");
    broker.create_topic(&a);
    let producer = unbatched_producer(&client, &b).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let acker = consumer.acker();
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        within(
            "reconsume",
            acker.reconsume_later(&m, Duration::from_millis(10)),
        )
        .await
        .unwrap();
    }
    let dlq = format!("{b}-s-DLQ");
    wait_until("the dead letter stored", || {
        broker.topic_messages(&dlq) == 1
    })
    .await;
    assert_eq!(consumer.stats().totals.dlq_sends, 1);
}
