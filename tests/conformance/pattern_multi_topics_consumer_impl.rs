//! Upstream `PatternMultiTopicsConsumerImpl` and `TopicListWatcher`: the behaviours the ledger
//! (`docs/conformance.md`) records for them.

use std::time::Duration;

use crate::common::{client, full, wait_until, within};
use pulsar_sdk::mock::wire::{base_command::Type, command_get_topics_of_namespace::Mode};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, Consumer, RegexSubscriptionMode, SubscriptionType};

async fn pattern(
    client: &Client,
    pattern: &str,
    mode: RegexSubscriptionMode,
    sub: &str,
) -> Consumer {
    client
        .new_consumer()
        .topics_pattern(pattern)
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
