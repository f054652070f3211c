//! Upstream `PatternMultiTopicsConsumerImpl` (and its `TopicListWatcher`): the behaviours the
//! ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::wire::command_get_topics_of_namespace::Mode;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{
    Client, Consumer, InitialPosition, RegexSubscriptionMode, ServerError, SubscriptionType,
};
use std::time::Duration;

/// How many SUBSCRIBEs the broker got for `topic`.
fn subscribes(broker: &MockBroker, topic: &str) -> usize {
    broker
        .received_of(Type::Subscribe)
        .iter()
        .filter(|r| {
            r.command
                .subscribe
                .as_ref()
                .is_some_and(|s| s.topic == topic)
        })
        .count()
}

/// Java `PatternMultiTopicsConsumerImpl`: `unsubscribeAsync` puts the consumer in Closing
/// first, and topic changes are not applied from then on. Discovery must not subscribe again
/// a topic whose subscription was just deleted (here: topic a is unsubscribed while topic b's
/// unsubscribe is still waiting for the broker, and discovery polls every 20 ms).
#[tokio::test]
async fn unsubscribe_stops_discovery_first_so_no_subscription_is_created_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("conf-unsub-a"), full("conf-unsub-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let consumer = client
        .pattern_consumer("persistent://public/default/conf-unsub-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.topics().len(), 2);
    broker.push_error(
        MockError::new(
            MockRequest::Unsubscribe,
            ServerError::ServiceNotReady,
            "slow",
        )
        .after(Duration::from_millis(500))
        .on_topic(&b),
    );
    let r = within("unsubscribe", consumer.unsubscribe()).await;
    assert!(r.is_err(), "b's unsubscribe was refused: {r:?}");
    assert!(
        broker.subscriptions(&a).is_empty(),
        "a's subscription re-created"
    );
    assert_eq!(subscribes(&broker, &a), 1, "a was subscribed again");
}

/// Java creates a consumer's retry topic when it needs it (a consumer with `enableRetry`
/// subscribes it, creating it): a pattern consumer with `retry_enable` subscribes each
/// matched topic with its retry topic, created if it does not exist yet — not a consumer of
/// zero topics. Its own `-RETRY` / `-DLQ` topics, which its `prefix-.*` pattern also matches,
/// do not join as topics of their own (see `OwnLetters`: upstream filters only system topics).
#[tokio::test]
async fn a_pattern_consumer_with_retry_subscribes_its_topics_and_not_its_own_letters() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = full("conf-retry-p-a");
    let retry = format!("{a}-s-RETRY");
    broker.create_topic(&a);
    let mut consumer = client
        .pattern_consumer("persistent://public/default/conf-retry-p-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    let names = |c: &pulsar_sdk::Consumer| -> Vec<String> {
        c.topics().iter().map(|t| t.to_string()).collect()
    };
    assert_eq!(names(&consumer), vec![a.clone()], "the topic was dropped");
    assert_eq!(broker.subscriptions(&retry), vec!["s".to_string()]);
    // A retry comes back through the retry topic.
    let producer = crate::common::unbatched_producer(&client, &a).await;
    crate::common::publish(&producer, "m", 1).await;
    let m = within("recv", consumer.recv()).await.unwrap();
    within(
        "retry",
        consumer.reconsume_later(&m, Duration::from_millis(10)),
    )
    .await
    .unwrap();
    let again = within("recv the retry", consumer.recv()).await.unwrap();
    assert_eq!(again.payload_str(), Some("m-0"));
    assert_eq!(again.topic.to_string(), retry);
    // Two more polls (each answered and applied before the next is sent) saw the retry
    // topic listed: it did not join as a topic of its own.
    let polls = broker.received_of(Type::GetTopicsOfNamespace).len();
    crate::common::wait_until("two more polls", || {
        broker.received_of(Type::GetTopicsOfNamespace).len() >= polls + 2
    })
    .await;
    assert_eq!(names(&consumer), vec![a.clone()]);
    assert_eq!(
        subscribes(&broker, &retry),
        1,
        "the retry topic subscribed twice"
    );
    within("close", consumer.close()).await.unwrap();
}

async fn pattern(
    client: &Client,
    pattern: &str,
    mode: RegexSubscriptionMode,
    sub: &str,
) -> Consumer {
    client
        .pattern_consumer(pattern)
        .subscription_topics_mode(mode)
        .subscription(sub)
        .subscription_type(SubscriptionType::Shared)
        .pattern_auto_discovery_period(Duration::from_secs(3600))
        .subscribe()
        .await
        .expect("pattern consumer")
}

/// `PulsarClientImpl.patternTopicSubscribeAsync` / `BinaryProtoLookupService
/// .getTopicsUnderNamespace`: the first listing names the pattern's namespace, the mode, and
/// the pattern (for the broker to filter), with no hash yet.
#[tokio::test]
async fn the_first_listing_names_the_namespace_mode_and_pattern() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("ls-a"));
    let cases = [
        (RegexSubscriptionMode::PersistentOnly, Mode::Persistent),
        (
            RegexSubscriptionMode::NonPersistentOnly,
            Mode::NonPersistent,
        ),
        (RegexSubscriptionMode::AllTopics, Mode::All),
    ];
    for (i, (mode, _)) in cases.iter().enumerate() {
        let _c = pattern(&client, "public/default/ls-.*", *mode, &format!("s{i}")).await;
    }
    let listings: Vec<_> = broker
        .received_of(Type::GetTopicsOfNamespace)
        .into_iter()
        .map(|r| r.command.get_topics_of_namespace.unwrap())
        .collect();
    assert_eq!(listings.len(), 3);
    for (l, (_, wire_mode)) in listings.iter().zip(cases) {
        assert_eq!(l.namespace, "public/default");
        assert_eq!(l.mode, Some(wire_mode as i32));
        assert_eq!(l.topics_pattern.as_deref(), Some("public/default/ls-.*"));
        assert_eq!(l.topics_hash, None);
    }
}

/// `PatternMultiTopicsConsumerImpl.<init>`: a topic-list watcher is created only for
/// `RegexSubscriptionMode.PersistentOnly` (the broker's watcher lists persistent topics only);
/// the other modes rely on polling.
#[tokio::test]
async fn only_a_persistent_only_pattern_consumer_creates_a_watcher() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("wm-a"));
    let _np = pattern(
        &client,
        "public/default/wm-.*",
        RegexSubscriptionMode::NonPersistentOnly,
        "np",
    )
    .await;
    let _all = pattern(
        &client,
        "public/default/wm-.*",
        RegexSubscriptionMode::AllTopics,
        "all",
    )
    .await;
    assert_eq!(broker.received_of(Type::GetTopicsOfNamespace).len(), 2);
    let persistent = pattern(
        &client,
        "public/default/wm-.*",
        RegexSubscriptionMode::PersistentOnly,
        "p",
    )
    .await;
    within(
        "the persistent-only consumer's watcher",
        wait_until("one watcher", || broker.topic_list_watchers().len() == 1),
    )
    .await;
    assert_eq!(broker.received_of(Type::WatchTopicList).len(), 1);
    persistent.close().await.unwrap();
}

/// A pattern consumer subscribing a new topic when the application closes it. Java
/// `PatternMultiTopicsConsumerImpl`/`MultiTopicsConsumerImpl.closeAsync`: Closing first, then
/// every consumer it has closes; a subscribe still in flight completes into a consumer that is
/// closed with the rest (`subscribeAsync` fails on a closing consumer and closes what it made).
/// Nothing may stay attached on the broker after `close()` returns (here: the broker answers
/// slowly, and `close()` is called while topic c's SUBSCRIBE waits for its answer).
#[tokio::test]
async fn close_while_discovery_subscribes_a_new_topic_leaves_nothing_attached() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, c) = (full("conf-close-race-a"), full("conf-close-race-c"));
    broker.create_topic(&a);
    let consumer = client
        .pattern_consumer("persistent://public/default/conf-close-race-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(1500));
    broker.create_topic(&c);
    crate::common::wait_until("c's SUBSCRIBE reached the broker", || {
        subscribes(&broker, &c) == 1
    })
    .await;
    within("close", consumer.close()).await.unwrap();
    broker.set_response_delay(Duration::ZERO);
    crate::common::wait_until("nothing attached on c", || broker.consumers(&c, "s") == 0).await;
    assert_eq!(broker.consumers(&a, "s"), 0);
}

/// The same on `unsubscribe()`: a topic whose SUBSCRIBE is in flight when the application
/// unsubscribes must not keep the subscription (Java: Closing first; what the in-flight
/// subscribe made is closed, and the subscription deleted with the others).
#[tokio::test]
async fn unsubscribe_while_discovery_subscribes_a_new_topic_leaves_no_subscription() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, c) = (full("conf-unsub-race-a"), full("conf-unsub-race-c"));
    broker.create_topic(&a);
    let consumer = client
        .pattern_consumer("persistent://public/default/conf-unsub-race-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_millis(1500));
    broker.create_topic(&c);
    crate::common::wait_until("c's SUBSCRIBE reached the broker", || {
        subscribes(&broker, &c) == 1
    })
    .await;
    let r = within("unsubscribe", consumer.unsubscribe()).await;
    broker.set_response_delay(Duration::ZERO);
    assert!(r.is_ok(), "{r:?}");
    assert!(broker.subscriptions(&a).is_empty());
    crate::common::wait_until("nothing attached on c", || broker.consumers(&c, "s") == 0).await;
}

/// What a pattern consumer leaves out as "its own letters" must be its own: upstream's
/// pattern consumer leaves out nothing but system topics, so anything this one leaves out more
/// is a difference that only its own retry / dead-letter topics justify. A consumer with a
/// dead-letter policy that names its dead-letter topic, and no `retry_enable`, has no retry
/// topic and no `<topic>-<sub>-DLQ` topic: `jobs-a-s-RETRY` and `jobs-a-s-DLQ` (made by another
/// application, e.g. one with `retry_enable` on the same subscription name) are ordinary
/// matching topics to it, consumed as Java's consumes them.
#[tokio::test]
async fn a_pattern_consumer_leaves_out_only_letters_that_are_its_own() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = full("conf-own-jobs-a");
    let retry_like = format!("{a}-s-RETRY");
    let dlq_like = format!("{a}-s-DLQ");
    for t in [&a, &retry_like, &dlq_like] {
        broker.create_topic(t);
    }
    let consumer = client
        .pattern_consumer("persistent://public/default/conf-own-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .dead_letter_policy(
            pulsar_sdk::DeadLetterPolicy::new(3)
                .dead_letter_topic("persistent://public/default/elsewhere-dlq"),
        )
        .subscribe()
        .await
        .unwrap();
    let mut names: Vec<String> = consumer.topics().iter().map(|t| t.to_string()).collect();
    names.sort();
    let mut want = vec![a.clone(), dlq_like.clone(), retry_like.clone()];
    want.sort();
    assert_eq!(names, want);
    within("close", consumer.close()).await.unwrap();
}

/// A policy that names its own retry and dead-letter topics inside the pattern: those are the
/// consumer's letters (the retry topic subscribed with each topic), never topics of their own.
#[tokio::test]
async fn a_pattern_consumer_leaves_out_the_letter_topics_its_policy_names() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = full("conf-named-a");
    let retry = full("conf-named-retry");
    let dlq = full("conf-named-dlq");
    for t in [&a, &retry, &dlq] {
        broker.create_topic(t);
    }
    let consumer = client
        .pattern_consumer("persistent://public/default/conf-named-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .retry_enable(true)
        .dead_letter_policy(
            pulsar_sdk::DeadLetterPolicy::new(3)
                .retry_letter_topic("conf-named-retry")
                .dead_letter_topic("public/default/conf-named-dlq"),
        )
        .subscribe()
        .await
        .unwrap();
    let names: Vec<String> = consumer.topics().iter().map(|t| t.to_string()).collect();
    assert_eq!(names, vec![a.clone()]);
    assert_eq!(
        subscribes(&broker, &retry),
        1,
        "the retry topic subscribed twice"
    );
    assert_eq!(
        subscribes(&broker, &dlq),
        0,
        "the dead-letter topic consumed"
    );
    within("close", consumer.close()).await.unwrap();
}

/// `recv` reports the end "once every partition of every topic reached it" (see
/// `Consumer::recv`; Java's `hasReachedEndOfTopic`: all of its current consumers). A pattern
/// consumer whose topic a has ended, and whose other topic b is then deleted (leaving the
/// consumer), has reached the end: `has_reached_end_of_topic()` says so, and a `recv` waiting
/// then must report it, not wait for ever.
#[tokio::test]
#[ignore = "fails (recv waits for ever): the handle took a's end-of-topic notice while b was current, so it reported nothing; b leaving (deleted, dropped by discovery) queues nothing, and nothing checks the end again. Needs discovery to tell the handle when a removal completes the end (not a small fix)"]
async fn the_end_is_reported_when_the_last_topic_not_at_its_end_leaves() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("conf-end-leave-a"), full("conf-end-leave-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .pattern_consumer("persistent://public/default/conf-end-leave-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.topics().len(), 2);
    // A second consumer of a's subscription: the broker tells both in one go.
    let witness = client
        .consumer(&a)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    broker.terminate_topic(&a).unwrap();
    let delete_b = async {
        crate::common::wait_until("a's end reached the witness", || {
            witness.has_reached_end_of_topic()
        })
        .await;
        broker.delete_topic(&b, true).unwrap();
    };
    let (end, ()) = tokio::join!(within("the end", consumer.recv()), delete_b);
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
    assert!(consumer.has_reached_end_of_topic());
}

/// Review r-38: a topic a pattern consumer with `retry_enable` discovers at run time gets
/// its retry topic too (Java `PatternMultiTopicsConsumerImpl` subscribes each new topic
/// with the same configuration): an acker's reconsume_later of its message comes back
/// through `{topic}-{sub}-RETRY`.
#[tokio::test]
async fn a_topic_discovered_at_run_time_reconsumes_through_its_retry_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = full("conf-r38-late-a");
    let b = full("conf-r38-late-b");
    broker.create_topic(&a);
    let mut consumer = client
        .pattern_consumer("persistent://public/default/conf-r38-late-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .pattern_auto_discovery_period(Duration::from_millis(20))
        .subscribe()
        .await
        .unwrap();
    broker.create_topic(&b);
    crate::common::wait_until("b discovered", || {
        consumer.topics().iter().any(|t| t.to_string() == b)
    })
    .await;
    let producer = crate::common::unbatched_producer(&client, &b).await;
    crate::common::publish(&producer, "late", 1).await;
    let m = within("recv", consumer.recv()).await.unwrap();
    let acker = consumer.acker();
    within(
        "retry",
        acker.reconsume_later(&m, Duration::from_millis(10)),
    )
    .await
    .unwrap();
    let again = within("recv the retry", consumer.recv()).await.unwrap();
    assert_eq!(again.payload_str(), Some("late-0"));
    assert_eq!(again.topic.to_string(), format!("{b}-s-RETRY"));
    within("close", consumer.close()).await.unwrap();
}

/// Java `PatternMultiTopicsConsumerImpl.closeAsync` closes its `TopicListWatcher` without
/// waiting for a WatchTopicList still in flight. Here the broker answers the watch only after
/// 30 s (within the client's 60 s operation timeout): the consumer's close must not wait for
/// it, and the watcher that may exist on the broker is closed.
#[tokio::test]
async fn close_does_not_wait_for_a_topic_list_watch_in_flight() {
    let broker = MockBroker::start().await.unwrap();
    let client = crate::common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    broker.create_topic(&full("conf-slow-watch-a"));
    broker.push_error(
        MockError::new(
            MockRequest::WatchTopicList,
            ServerError::ServiceNotReady,
            "slow",
        )
        .after(Duration::from_secs(30)),
    );
    let consumer = pattern(
        &client,
        "persistent://public/default/conf-slow-watch-.*",
        RegexSubscriptionMode::PersistentOnly,
        "s",
    )
    .await;
    wait_until("the watch was sent", || {
        !broker.received_of(Type::WatchTopicList).is_empty()
    })
    .await;
    within(
        "close while the watch waits for its answer",
        consumer.close(),
    )
    .await
    .unwrap();
    wait_until("the watcher is closed on the broker", || {
        !broker.received_of(Type::WatchTopicListClose).is_empty()
    })
    .await;
}
