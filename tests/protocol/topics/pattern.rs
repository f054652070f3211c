//! Pattern consumers (`ConsumerBuilder::topics_pattern`) against the mock broker: discovery
//! through the PIP-145 topic-list watcher and through polling GetTopicsOfNamespace, topics
//! appearing and disappearing, a reconnect in between, a failed poll and a failed subscribe
//! (retried, never dropped for good), 100 matching topics, and deleted topics never re-created.

use common::client;
use support as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockError, MockRequest};
use pulsar_sdk::{
    Client, Consumer, InitialPosition, Message, RegexSubscriptionMode, ServerError,
    SubscriptionType, TopicsChanged,
};

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

async fn pattern_consumer(client: &Client, pattern: &str, period: Duration) -> Consumer {
    client
        .pattern_consumer(pattern)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(period)
        .subscribe()
        .await
        .expect("pattern consumer")
}

async fn next_change(changes: &mut pulsar_sdk::TopicUpdates) -> TopicsChanged {
    within("a topics change", changes.next_change())
        .await
        .expect("a change")
}

fn names(c: &TopicsChanged) -> (Vec<String>, Vec<String>) {
    (
        c.added.iter().map(|t| t.to_string()).collect(),
        c.removed.iter().map(|t| t.to_string()).collect(),
    )
}

fn topics_of(consumer: &Consumer) -> BTreeSet<String> {
    consumer.topics().iter().map(|t| t.to_string()).collect()
}

/// Creates `topic`, publishes `text` to it, and receives it on `consumer`.
async fn round_trip(client: &Client, consumer: &mut Consumer, topic: &str, text: &str) {
    let p = unbatched_producer(client, topic).await;
    p.send_and_wait(text.to_string()).await.unwrap();
    let m = recv(consumer).await;
    assert_eq!(m.payload_str(), Some(text));
    assert_eq!(m.topic.to_string(), topic);
    consumer.ack(&m).unwrap();
    p.close().await.unwrap();
}

#[tokio::test]
async fn watcher_adds_new_topics_and_closes_deleted_ones() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("w-orders-1"));
    broker.create_topic(&full("w-orders-2"));
    broker.create_topic(&full("w-other"));
    // A long period: only the watcher can find the new topic in time.
    let mut consumer = pattern_consumer(
        &client,
        "persistent://public/default/w-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    let mut changes = consumer.topic_updates();
    assert_eq!(
        topics_of(&consumer),
        BTreeSet::from([full("w-orders-1"), full("w-orders-2")])
    );
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    let w = &broker.topic_list_watchers()[0];
    assert_eq!(w.2, "public/default");
    assert_eq!(w.3, "persistent://public/default/w-orders-.*");

    broker.create_topic(&full("w-orders-3"));
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("w-orders-3")], vec![]));
    round_trip(&client, &mut consumer, &full("w-orders-3"), "hello").await;
    // A partitioned topic joins with its partitions (the broker lists them one by one).
    broker.create_partitioned_topic(&full("w-orders-p"), 2);
    let c = next_change(&mut changes).await;
    let (added, _) = names(&c);
    assert_eq!(
        added.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            full("w-orders-p-partition-0"),
            full("w-orders-p-partition-1")
        ])
    );

    broker.delete_topic(&full("w-orders-3"), true).unwrap();
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![], vec![full("w-orders-3")]));
    // Closed, not re-created by the consumer's reconnect.
    assert!(!broker.topic_exists(&full("w-orders-3")));
    assert!(!topics_of(&consumer).contains(&full("w-orders-3")));
    // The deleted topic's end is no error for the application: the next item is a message.
    round_trip(&client, &mut consumer, &full("w-orders-1"), "still here").await;
    assert!(!broker.topic_exists(&full("w-orders-3")));
    // No polling happened: the watcher did it all.
    assert_eq!(broker.received_of(Type::GetTopicsOfNamespace).len(), 1);

    consumer.close().await.unwrap();
    wait_until("the watcher is closed", || {
        broker.topic_list_watchers().is_empty()
    })
    .await;
    assert_eq!(broker.received_of(Type::WatchTopicListClose).len(), 1);
}

#[tokio::test]
async fn polling_finds_topics_when_the_broker_has_no_watcher() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("p-a"));
    let mut consumer =
        pattern_consumer(&client, "public/default/p-.*", Duration::from_millis(200)).await;
    let mut changes = consumer.topic_updates();
    assert_eq!(topics_of(&consumer), BTreeSet::from([full("p-a")]));
    broker.create_topic(&full("p-b"));
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("p-b")], vec![]));
    round_trip(&client, &mut consumer, &full("p-b"), "polled").await;
    broker.delete_topic(&full("p-a"), true).unwrap();
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![], vec![full("p-a")]));
    assert!(!broker.topic_exists(&full("p-a")));
    assert!(broker.received_of(Type::WatchTopicList).is_empty());
    // Polls carry the pattern and, after the first, the hash of what the consumer holds; an
    // unchanged namespace is answered `changed = false`.
    let polls = broker.received_of(Type::GetTopicsOfNamespace);
    let last = polls
        .last()
        .unwrap()
        .command
        .get_topics_of_namespace
        .clone()
        .unwrap();
    assert_eq!(last.topics_pattern.as_deref(), Some("public/default/p-.*"));
    assert!(last.topics_hash.is_some());
}

#[tokio::test]
async fn a_reconnect_rewatches_with_the_hash_and_catches_up() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("r-1"));
    let mut consumer =
        pattern_consumer(&client, "public/default/r-.*", Duration::from_secs(3600)).await;
    let mut changes = consumer.topic_updates();
    wait_until("watching", || broker.topic_list_watchers().len() == 1).await;
    broker.set_unresponsive(true);
    broker.drop_all_connections();
    // Made while the client is away: only the re-watch can tell it.
    broker.create_topic(&full("r-2"));
    broker.set_unresponsive(false);
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("r-2")], vec![]));
    let watches = broker.received_of(Type::WatchTopicList);
    assert!(watches.len() >= 2, "{watches:?}");
    let rewatch = watches
        .last()
        .unwrap()
        .command
        .watch_topic_list
        .clone()
        .unwrap();
    assert!(rewatch.topics_hash.is_some(), "the re-watch sends its hash");
    round_trip(&client, &mut consumer, &full("r-2"), "after").await;
    round_trip(&client, &mut consumer, &full("r-1"), "old").await;
}

#[tokio::test]
async fn a_failed_poll_and_a_failed_subscribe_are_retried() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    let mut consumer =
        pattern_consumer(&client, "public/default/f-.*", Duration::from_millis(200)).await;
    assert!(consumer.topics().is_empty());
    let mut changes = consumer.topic_updates();
    broker.push_error(
        MockError::new(
            MockRequest::GetTopicsOfNamespace,
            ServerError::ServiceNotReady,
            "busy",
        )
        .times(2),
    );
    broker.push_error(
        MockError::new(
            MockRequest::Subscribe,
            ServerError::AuthorizationError,
            "not yet",
        )
        .on_topic(&full("f-1")),
    );
    broker.create_topic(&full("f-1"));
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("f-1")], vec![]));
    let consumed = broker.consumed_errors();
    assert_eq!(
        consumed
            .iter()
            .filter(|e| e.request == MockRequest::GetTopicsOfNamespace)
            .count(),
        2
    );
    assert_eq!(
        consumed
            .iter()
            .filter(|e| e.request == MockRequest::Subscribe)
            .count(),
        1
    );
    round_trip(&client, &mut consumer, &full("f-1"), "made it").await;
}

#[tokio::test]
async fn a_hundred_matching_topics() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    for i in 0..60 {
        broker.create_topic(&full(&format!("h-{i}")));
    }
    broker.create_topic(&full("not-h"));
    let mut consumer =
        pattern_consumer(&client, "public/default/h-.*", Duration::from_secs(3600)).await;
    let mut changes = consumer.topic_updates();
    assert_eq!(consumer.topics().len(), 60);
    for i in 60..100 {
        broker.create_topic(&full(&format!("h-{i}")));
    }
    let mut added = 0;
    while added < 40 {
        added += next_change(&mut changes).await.added.len();
    }
    assert_eq!(consumer.topics().len(), 100);
    for i in 0..100 {
        let p = unbatched_producer(&client, &full(&format!("h-{i}"))).await;
        publish(&p, &format!("h{i}"), 1).await;
    }
    let mut got = BTreeSet::new();
    while got.len() < 100 {
        let m = recv(&mut consumer).await;
        consumer.ack(&m).unwrap();
        got.insert(m.topic.to_string());
    }
    assert!(!got.contains(&full("not-h")));
    within("close", consumer.close()).await.unwrap();
}

#[tokio::test]
async fn modes_and_bad_patterns() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("m-p"));
    broker.create_topic("non-persistent://public/default/m-np");
    let np = client
        .pattern_consumer("public/default/m-.*")
        .subscription_topics_mode(RegexSubscriptionMode::NonPersistentOnly)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    assert_eq!(
        topics_of(&np),
        BTreeSet::from(["non-persistent://public/default/m-np".to_string()])
    );
    let all = client
        .pattern_consumer("public/default/m-.*")
        .subscription_topics_mode(RegexSubscriptionMode::AllTopics)
        .subscription("s2")
        .subscribe()
        .await
        .unwrap();
    assert_eq!(all.topics().len(), 2);
    for bad in ["public/default/(", "m-.*", "public/.*/m"] {
        let r = client
            .pattern_consumer(bad)
            .subscription("s3")
            .subscribe()
            .await;
        assert!(
            matches!(r, Err(pulsar_sdk::Error::InvalidConfig(_))),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_topic_deleted_and_created_again_between_polls_is_subscribed_again() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("d-1"));
    let mut consumer =
        pattern_consumer(&client, "public/default/d-.*", Duration::from_millis(300)).await;
    let mut changes = consumer.topic_updates();
    broker.delete_topic(&full("d-1"), true).unwrap();
    // The consumer's reconnect finds no topic and ends (without creating it, and without an
    // error for the application); the next poll (or the ended consumer, noticed then) drops it.
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![], vec![full("d-1")]));
    assert!(!broker.topic_exists(&full("d-1")));
    broker.create_topic(&full("d-1"));
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("d-1")], vec![]));
    round_trip(&client, &mut consumer, &full("d-1"), "again").await;
    assert!(!consumer.state().is_terminal());
}

use support::examples;

/// The consume example with `--pattern` prints a `topics_changed` line when a topic joins,
/// and receives from it (against the mock broker on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consume_example_follows_a_pattern() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("e-1"));
    let p = unbatched_producer(&client, &full("e-1")).await;
    p.send_and_wait("first").await.unwrap();
    let url = broker.service_url();
    let run = tokio::task::spawn_blocking(move || {
        examples::run(
            "consume",
            &[
                "--url",
                &url,
                "--pattern",
                "persistent://public/default/e-.*",
                "--subscription",
                "ex",
                "--type",
                "shared",
                "--initial-position",
                "earliest",
                "--count",
                "2",
                "--timeout-secs",
                "30",
            ],
            Duration::from_secs(60),
        )
    });
    wait_until("the example subscribed", || {
        broker.consumers(&full("e-1"), "ex") == 1
    })
    .await;
    broker.create_topic(&full("e-2"));
    wait_until("the example subscribed the new topic", || {
        broker.consumers(&full("e-2"), "ex") == 1
    })
    .await;
    let p2 = unbatched_producer(&client, &full("e-2")).await;
    p2.send_and_wait("second").await.unwrap();
    let r = run.await.unwrap();
    assert_eq!(
        r.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let change = lines
        .iter()
        .find(|l| l["event"] == "topics_changed")
        .unwrap_or_else(|| panic!("no topics_changed line: {}", r.stdout));
    assert_eq!(change["added"], serde_json::json!([full("e-2")]));
    assert_eq!(change["removed"], serde_json::json!([]));
    let payloads: BTreeSet<&str> = lines.iter().filter_map(|l| l["payload"].as_str()).collect();
    assert_eq!(payloads, BTreeSet::from(["first", "second"]));
}

#[tokio::test]
async fn closing_the_client_ends_a_pattern_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("c-1"));
    let mut consumer =
        pattern_consumer(&client, "public/default/c-.*", Duration::from_secs(3600)).await;
    wait_until("watching", || broker.topic_list_watchers().len() == 1).await;
    within("client close", client.close()).await.unwrap();
    let r = within("recv after the client closed", consumer.recv()).await;
    assert!(matches!(r, Err(pulsar_sdk::Error::Closed)), "{r:?}");
}

#[tokio::test]
async fn a_listed_topic_missing_at_subscribe_is_left_out_then_picked_up() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("g-1"));
    broker.create_topic(&full("g-2"));
    // As if g-2 were deleted between the listing and its subscribe.
    broker.push_error(
        MockError::new(MockRequest::Subscribe, ServerError::TopicNotFound, "gone")
            .on_topic(&full("g-2")),
    );
    let mut consumer =
        pattern_consumer(&client, "public/default/g-.*", Duration::from_millis(200)).await;
    assert_eq!(topics_of(&consumer), BTreeSet::from([full("g-1")]));
    // Still listed by the broker: the next poll subscribes it.
    wait_until("g-2 subscribed", || {
        topics_of(&consumer) == BTreeSet::from([full("g-1"), full("g-2")])
    })
    .await;
    round_trip(&client, &mut consumer, &full("g-2"), "found").await;
}

#[tokio::test]
async fn a_lost_update_is_caught_by_the_next_hash() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("l-0"));
    let consumer =
        pattern_consumer(&client, "public/default/l-.*", Duration::from_secs(3600)).await;
    wait_until("watching", || broker.topic_list_watchers().len() == 1).await;
    broker.drop_next_topic_list_updates(1);
    broker.create_topic(&full("l-1")); // its update is lost
    broker.create_topic(&full("l-2")); // this one's hash covers l-1 too
    wait_until("both new topics subscribed", || {
        topics_of(&consumer) == BTreeSet::from([full("l-0"), full("l-1"), full("l-2")])
    })
    .await;
    // The mismatch made the client list the topics (no periodic poll is due for an hour).
    assert!(broker.received_of(Type::GetTopicsOfNamespace).len() >= 2);
}

#[tokio::test]
async fn a_deleted_topic_leaves_at_once_even_between_polls() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("q-1"));
    broker.create_topic(&full("q-2"));
    // No poll is due for an hour and there is no watcher.
    let mut consumer =
        pattern_consumer(&client, "public/default/q-.*", Duration::from_secs(3600)).await;
    let mut changes = consumer.topic_updates();
    broker.delete_topic(&full("q-1"), true).unwrap();
    // The consumer of q-1 finds its topic gone when it reconnects: the topic leaves.
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![], vec![full("q-1")]));
    assert_eq!(consumer.state(), pulsar_sdk::State::Ready);
    assert!(!broker.topic_exists(&full("q-1")));
    round_trip(&client, &mut consumer, &full("q-2"), "other").await;
}

/// A broker that does not evaluate patterns (`enableBrokerSideSubscriptionPatternEvaluation =
/// false`) lists the whole namespace, and its hash covers all of it. Like upstream
/// `PatternMultiTopicsConsumerImpl`, the consumer filters on its side and sends the broker's
/// hash back, so an unchanged namespace is answered `changed = false` instead of the whole
/// list on every poll.
#[tokio::test]
async fn polls_send_back_the_brokers_hash_when_the_broker_does_not_filter() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: false,
        broker_side_pattern_evaluation: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("h-a"));
    broker.create_topic(&full("other"));
    let mut consumer =
        pattern_consumer(&client, "public/default/h-.*", Duration::from_millis(100)).await;
    assert_eq!(topics_of(&consumer), BTreeSet::from([full("h-a")]));
    wait_until("three polls", || {
        broker.received_of(Type::GetTopicsOfNamespace).len() >= 4
    })
    .await;
    let hashes: Vec<Option<String>> = broker
        .received_of(Type::GetTopicsOfNamespace)
        .into_iter()
        .map(|r| r.command.get_topics_of_namespace.unwrap().topics_hash)
        .collect();
    // The first listing carries no hash; the first poll our own; from then on the broker's,
    // the same each time while nothing changes.
    let brokers = &hashes[2..];
    assert!(brokers[0].is_some(), "{hashes:?}");
    assert!(brokers.iter().all(|h| h == &brokers[0]), "{hashes:?}");
    assert_ne!(
        hashes[1], brokers[0],
        "our hash covers only the matching topics"
    );
    // Still filtered on our side, and a new matching topic still joins.
    let mut changes = consumer.topic_updates();
    broker.create_topic(&full("h-b"));
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("h-b")], vec![]));
    round_trip(&client, &mut consumer, &full("h-b"), "unfiltered").await;
    assert_eq!(
        topics_of(&consumer),
        BTreeSet::from([full("h-a"), full("h-b")])
    );
}

/// An extreme discovery period does not overflow a deadline (the discovery task would die
/// silently): the consumer works.
#[tokio::test]
async fn a_huge_discovery_period_does_not_break_discovery() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("big-a"));
    let mut consumer = pattern_consumer(&client, "public/default/big-.*", Duration::MAX).await;
    let mut changes = consumer.topic_updates();
    broker.create_topic(&full("big-b"));
    // The watcher still reports new topics.
    let c = next_change(&mut changes).await;
    assert_eq!(names(&c), (vec![full("big-b")], vec![]));
    round_trip(&client, &mut consumer, &full("big-b"), "still discovering").await;
}

/// Issue #32 item 2: the discovery loop awaited its reconcile, so `close()` (which stops
/// discovery first) waited for a new topic's SUBSCRIBE at an unresponsive broker: here two
/// minutes. The loop now only polls the reconcile in flight: the close is prompt, and what the
/// late SUBSCRIBE makes is closed once it is answered (upstream `ConsumerImpl` closed while
/// subscribing), so nothing stays attached.
#[tokio::test]
async fn close_is_prompt_while_a_new_topics_subscribe_is_stuck() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let (a, stuck) = (full("pr-stuck-a"), full("pr-stuck-b"));
    broker.create_topic(&a);
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/pr-stuck-.*",
        Duration::from_secs(3600),
    )
    .await;
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    // The new topic's SUBSCRIBE is answered (with an error) only after two minutes.
    broker.push_error(
        MockError::new(
            MockRequest::Subscribe,
            ServerError::ServiceNotReady,
            "stuck",
        )
        .on_topic(&stuck)
        .after(Duration::from_secs(120)),
    );
    broker.create_topic(&stuck);
    let subscribing = || {
        broker
            .received_of(Type::Subscribe)
            .iter()
            .any(|r| r.command.subscribe.as_ref().unwrap().topic == stuck)
    };
    wait_until(
        "the stuck topic's SUBSCRIBE reached the broker",
        subscribing,
    )
    .await;
    within("close", consumer.close()).await.unwrap();
    assert_eq!(broker.consumers(&a, "s"), 0);
}

/// `pattern_max_topics`: a pattern matching more topics than the bound subscribes only that
/// many and says how many it skipped (`Consumer::pattern_topics_skipped`, and
/// `TopicsChanged::skipped` on each change); a topic leaving makes room for a skipped one.
#[tokio::test]
async fn max_topics_bounds_the_subscribed_topics_and_reports_the_skipped() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topics: Vec<String> = (0..5).map(|i| full(&format!("pr-max-{i}"))).collect();
    for t in &topics {
        broker.create_topic(t);
    }
    let consumer = client
        .pattern_consumer("persistent://public/default/pr-max-.*")
        .subscription("s")
        .pattern_max_topics(3)
        .subscribe()
        .await
        .unwrap();
    let mut changes = consumer.topic_updates();
    // The first three in name order.
    assert_eq!(
        topics_of(&consumer),
        topics[..3].iter().cloned().collect::<BTreeSet<_>>()
    );
    within(
        "the skipped count",
        wait_until("two skipped", || consumer.pattern_topics_skipped() == 2),
    )
    .await;
    let subscribed = |t: &str| broker.consumers(t, "s");
    assert_eq!(subscribed(&topics[3]) + subscribed(&topics[4]), 0);
    // A new matching topic is skipped too (the count goes up), a deleted one makes room.
    let extra = full("pr-max-9");
    broker.create_topic(&extra);
    loop {
        let c = next_change(&mut changes).await;
        if c.skipped == 3 {
            assert!(c.added.is_empty(), "{c:?}");
            break;
        }
    }
    broker.delete_topic(&topics[0], true).unwrap();
    let c = loop {
        let c = next_change(&mut changes).await;
        if !c.added.is_empty() {
            break c;
        }
    };
    assert_eq!(c.added.len(), 1, "{c:?}");
    assert_eq!(c.skipped, 2, "{c:?}");
    assert_eq!(consumer.topics().len(), 3);
    assert_eq!(consumer.pattern_topics_skipped(), 2);
    consumer.close().await.unwrap();
}

/// A zero bound is refused.
#[tokio::test]
async fn max_topics_of_zero_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let err = client
        .pattern_consumer("persistent://public/default/pr-zero-.*")
        .subscription("s")
        .pattern_max_topics(0)
        .subscribe()
        .await
        .unwrap_err();
    assert!(matches!(err, pulsar_sdk::Error::InvalidConfig(_)), "{err}");
}
