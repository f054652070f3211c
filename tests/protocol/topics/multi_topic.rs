//! A consumer of an explicit topic list (`ConsumerBuilder::topics`) against the mock broker:
//! partitioned and non-partitioned topics merged into one stream, each message telling its
//! topic, acks routed to the right topic, fairness between a busy and a quiet topic, nacks,
//! ack timeout, seek by time, unsubscribe, state and close across all topics.

use common::client;
use support as common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{Client, Consumer, Error, InitialPosition, Message, State, SubscriptionType};

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

/// Two plain topics and one with 3 partitions.
async fn setup(broker: &MockBroker, base: &str) -> Vec<String> {
    let names = vec![
        full(&format!("{base}-a")),
        full(&format!("{base}-b")),
        full(&format!("{base}-p")),
    ];
    broker.create_topic(&names[0]);
    broker.create_topic(&names[1]);
    broker.create_partitioned_topic(&names[2], 3);
    names
}

async fn multi(client: &Client, topics: &[String], sub: &str, t: SubscriptionType) -> Consumer {
    client
        .multi_topic_consumer(topics.iter().cloned())
        .subscription(sub)
        .subscription_type(t)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .expect("subscribed to all topics")
}

/// The partitioned topic's name of a message's topic.
fn base(m: &Message) -> String {
    m.topic.partitioned_topic_name().to_string()
}

#[tokio::test]
async fn merges_every_topic_and_routes_acks_to_each() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics = setup(&broker, "merge").await;
    let mut consumer = multi(&client, &topics, "s", SubscriptionType::Shared).await;
    assert_eq!(
        consumer
            .topics()
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>(),
        topics
    );
    for t in &topics {
        let p = unbatched_producer(&client, t).await;
        publish(&p, t, 6).await;
    }
    let mut got: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for _ in 0..18 {
        let m = recv(&mut consumer).await;
        // Each message tells its topic, and its payload (the topic name) agrees.
        assert!(m.payload_str().unwrap().starts_with(&base(&m)), "{m:?}");
        got.entry(base(&m))
            .or_default()
            .insert(m.payload_str().unwrap().to_string());
        consumer.ack(&m).unwrap();
    }
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.values().all(|v| v.len() == 6), "{got:?}");
    // Every ack reached its own topic: no backlog is left anywhere.
    wait_until("every backlog acked", || {
        broker.subscription_backlog(&topics[0], "s") == 0
            && broker.subscription_backlog(&topics[1], "s") == 0
            && (0..3).all(|i| {
                broker.subscription_backlog(&format!("{}-partition-{i}", topics[2]), "s") == 0
            })
    })
    .await;
    assert_eq!(consumer.state(), State::Ready);
    consumer.close().await.unwrap();
    assert_eq!(consumer.state(), State::Closed);
    assert_eq!(broker.consumers(&topics[0], "s"), 0);
    assert_eq!(broker.consumers(&topics[1], "s"), 0);
}

#[tokio::test]
async fn an_id_alone_is_ambiguous_but_topic_and_id_route() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics = setup(&broker, "ids").await;
    let mut consumer = multi(&client, &topics[..2], "s", SubscriptionType::Shared).await;
    let p = unbatched_producer(&client, &topics[1]).await;
    publish(&p, "x", 1).await;
    let m = recv(&mut consumer).await;
    // Two non-partitioned topics: partition -1 could be either.
    let e = consumer.ack_id(m.id).unwrap_err();
    assert!(matches!(e, Error::InvalidOperation(_)), "{e:?}");
    consumer.acker().ack_topic_id(&m.topic, m.id).unwrap();
    wait_until("acked on its topic", || {
        broker.subscription_backlog(&topics[1], "s") == 0
    })
    .await;
    let unknown = pulsar_sdk::TopicName::new(&full("ids-unknown")).unwrap();
    assert!(consumer.acker().ack_topic_id(&unknown, m.id).is_err());
}

#[tokio::test]
async fn a_busy_topic_does_not_starve_a_quiet_one() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let busy = full("fair-busy");
    let quiet = full("fair-quiet");
    broker.create_topic(&busy);
    broker.create_topic(&quiet);
    let p = unbatched_producer(&client, &busy).await;
    publish(&p, "busy", 300).await;
    let mut consumer = client
        .multi_topic_consumer([busy.clone(), quiet.clone()])
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    // The busy topic has 300 messages waiting; the quiet one gets one now.
    let q = unbatched_producer(&client, &quiet).await;
    publish(&q, "quiet", 1).await;
    let mut position = None;
    for i in 0..300 {
        let m = recv(&mut consumer).await;
        consumer.ack(&m).unwrap();
        if base(&m) == quiet {
            position = Some(i);
            break;
        }
    }
    // Bounded by the busy topic's receiver queue (10) plus what was in flight, far from 300.
    let position = position.expect("the quiet topic's message arrived");
    assert!(
        position <= 25,
        "quiet message came after {position} busy ones"
    );
}

#[tokio::test]
async fn nack_and_ack_timeout_redeliver_on_the_right_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics = setup(&broker, "redeliver").await;
    let mut consumer = client
        .multi_topic_consumer(topics.iter().cloned())
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(100))
        .ack_timeout(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let pa = unbatched_producer(&client, &topics[0]).await;
    let pp = unbatched_producer(&client, &topics[2]).await;
    publish(&pa, "a", 1).await;
    publish(&pp, "p", 1).await;
    let mut first = BTreeMap::new();
    for _ in 0..2 {
        let m = recv(&mut consumer).await;
        first.insert(base(&m), m);
    }
    // Nack the plain topic's message; leave the partitioned one unacked (ack timeout).
    consumer.nack(&first[&topics[0]]).unwrap();
    let mut again = BTreeMap::new();
    for _ in 0..2 {
        let m = recv(&mut consumer).await;
        assert!(m.redelivery_count >= 1, "{m:?}");
        again.insert(base(&m), m.payload_str().unwrap().to_string());
        consumer.ack(&m).unwrap();
    }
    assert_eq!(again[&topics[0]], "a-0");
    assert_eq!(again[&topics[2]], "p-0");
}

#[tokio::test]
async fn seek_by_time_unsubscribe_and_failures_cover_every_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics = setup(&broker, "seek").await;
    let mut consumer = multi(&client, &topics, "s", SubscriptionType::Exclusive).await;
    for t in &topics {
        let p = unbatched_producer(&client, t).await;
        publish(&p, t, 2).await;
    }
    for _ in 0..6 {
        let m = recv(&mut consumer).await;
        consumer.ack(&m).unwrap();
    }
    // Back to the start on every topic: all 6 again.
    within("seek", consumer.seek_by_time(0)).await.unwrap();
    let mut again = BTreeSet::new();
    for _ in 0..6 {
        let m = recv(&mut consumer).await;
        again.insert(m.payload_str().unwrap().to_string());
    }
    assert_eq!(again.len(), 6, "{again:?}");
    // An id alone names no topic.
    let e = consumer
        .seek(pulsar_sdk::MessageId::new(1, 0, -1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidOperation(_)), "{e:?}");
    // The broker disconnects consumers on a seek; a partition with nothing to redeliver may
    // still be re-subscribing, and unsubscribe needs every consumer connected (upstream
    // `unsubscribeAsync` fails with "Not connected to broker" too).
    wait_until("every topic re-subscribed after the seek", || {
        consumer.state() == State::Ready
    })
    .await;
    within("unsubscribe", consumer.unsubscribe()).await.unwrap();
    for t in &topics[..2] {
        assert!(broker.subscriptions(t).is_empty(), "{t}");
    }
    assert!(broker
        .subscriptions(&format!("{}-partition-1", topics[2]))
        .is_empty());

    // One topic that cannot be subscribed fails the whole consumer, leaving nothing behind.
    let refused = full("seek-refused");
    broker.push_error(
        MockError::new(
            MockRequest::Subscribe,
            pulsar_sdk::ServerError::AuthorizationError,
            "no",
        )
        .on_topic(&refused),
    );
    let bad = vec![topics[0].clone(), refused];
    let r = client
        .multi_topic_consumer(bad)
        .subscription("s2")
        .subscribe()
        .await;
    assert!(r.is_err());
    wait_until("the other topic's consumer closed", || {
        broker.consumers(&topics[0], "s2") == 0
    })
    .await;
    let none: Vec<String> = Vec::new();
    assert!(client
        .multi_topic_consumer(none)
        .subscription("s3")
        .subscribe()
        .await
        .is_err());
}

#[tokio::test]
async fn each_topic_dead_letters_to_its_own_dlq_and_retries_on_its_own_retry_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics = setup(&broker, "dlq").await;
    let mut consumer = client
        .multi_topic_consumer(topics[..2].iter().cloned())
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(50))
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(1))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    for t in &topics[..2] {
        let p = unbatched_producer(&client, t).await;
        publish(&p, "poison", 1).await;
    }
    // Nacked: delivered twice (counts 0 and 1), then each goes to its own topic's DLQ.
    let mut seen = 0;
    while seen < 4 {
        let m = recv(&mut consumer).await;
        consumer.nack(&m).unwrap();
        seen += 1;
    }
    for t in &topics[..2] {
        let dlq = format!("{t}-s-DLQ");
        wait_until("dead-lettered", || broker.topic_messages(&dlq) == 1).await;
    }
    // reconsume_later goes to the message's own topic's retry topic and comes back from it.
    let p = unbatched_producer(&client, &topics[1]).await;
    publish(&p, "retry-me", 1).await;
    let m = recv(&mut consumer).await;
    assert_eq!(base(&m), topics[1]);
    consumer
        .reconsume_later(&m, Duration::from_millis(10))
        .await
        .unwrap();
    let again = recv(&mut consumer).await;
    assert_eq!(again.payload_str(), Some("retry-me-0"));
    assert_eq!(again.topic.to_string(), format!("{}-s-RETRY", topics[1]));
    consumer.ack(&again).unwrap();
    assert_eq!(broker.topic_messages(&format!("{}-s-RETRY", topics[0])), 0);
}

use support::examples;

/// The consume example with `--topics a,b` receives from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consume_example_takes_a_topic_list() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("ex-a"), full("ex-b"));
    for t in [&a, &b] {
        let p = unbatched_producer(&client, t).await;
        publish(&p, t, 1).await;
    }
    let url = broker.service_url();
    let list = format!("{a},{b}");
    let r = tokio::task::spawn_blocking(move || {
        examples::run(
            "consume",
            &[
                "--url",
                &url,
                "--topics",
                &list,
                "--subscription",
                "ex",
                "--initial-position",
                "earliest",
                "--count",
                "2",
                "--timeout-secs",
                "30",
            ],
            Duration::from_secs(60),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        r.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let topics: BTreeSet<String> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["topic"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(topics, BTreeSet::from([a, b]));
}
