//! A consumer of an explicit topic list against pulsar-lite: 5 topics, 2 of them partitioned,
//! every message received exactly once with a Shared subscription, each telling its topic.
//!
//! pulsar-lite makes every new topic partitioned or none (`default_partitions`), so the two
//! partitioned topics are made first with `default_partitions = 2` (the count is persisted once
//! a producer touched a partition, see shared/design/pulsar-lite.md), then the broker restarts
//! with `default_partitions = 0` for the three plain ones.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pulsar_sdk::{Client, InitialPosition, SubscriptionType};
use support::{unique_name, PulsarLite};

const STEP: Duration = Duration::from_secs(20);

fn client(url: &str) -> Client {
    Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn five_topics_two_partitioned_each_message_exactly_once() {
    let mut broker = PulsarLite::with_config("default_partitions = 2");
    let names: Vec<String> = (0..5)
        .map(|i| {
            format!(
                "persistent://public/default/{}",
                unique_name(&format!("mt{i}"))
            )
        })
        .collect();
    {
        let c = client(&broker.url());
        for t in &names[..2] {
            let p = c.producer(t).batching(false).create().await.unwrap();
            assert_eq!(p.partitions(), 2, "{t}");
            p.close().await.unwrap();
        }
        c.close().await.unwrap();
    }
    broker.stop();
    let config = std::fs::read_to_string(broker.config_path()).unwrap();
    assert!(config.contains("default_partitions = 2"), "{config}");
    std::fs::write(
        broker.config_path(),
        config.replace("default_partitions = 2", "default_partitions = 0"),
    )
    .unwrap();
    broker.start_again();

    let client = client(&broker.url());
    let mut consumer = client
        .multi_topic_consumer(names.iter().cloned())
        .subscription(unique_name("s"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.topics().len(), 5);

    const EACH: usize = 20;
    let mut sent = BTreeSet::new();
    for t in &names {
        // Unbatched: round-robin spreads the messages over both partitions.
        let p = client.producer(t).batching(false).create().await.unwrap();
        for i in 0..EACH {
            let text = format!("{t}|{i}");
            p.send_and_wait(text.clone()).await.unwrap();
            sent.insert(text);
        }
        p.close().await.unwrap();
    }

    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    while got.len() < sent.len() {
        let m = tokio::time::timeout(STEP, consumer.recv())
            .await
            .expect("messages keep arriving")
            .unwrap();
        let text = m.payload_str().unwrap().to_string();
        // The message tells its topic: the payload names the topic it was sent to.
        let topic = m.topic.partitioned_topic_name().to_string();
        assert!(
            text.starts_with(&format!("{topic}|")),
            "{text} from {topic}"
        );
        partitions.entry(topic).or_default().insert(m.id.partition);
        *got.entry(text).or_default() += 1;
        consumer.ack(&m).unwrap();
    }
    // Nothing more: no duplicates after a quiet period.
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(1500), consumer.recv()).await {
        panic!("unexpected extra message {m:?}");
    }
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), sent);
    assert!(got.values().all(|n| *n == 1), "{got:?}");
    for t in &names[..2] {
        assert_eq!(partitions[t], BTreeSet::from([0, 1]), "{t} is partitioned");
    }
    for t in &names[2..] {
        assert_eq!(
            partitions[t],
            BTreeSet::from([-1]),
            "{t} is not partitioned"
        );
    }
    consumer.close().await.unwrap();
}

/// pulsar-lite answers neither GetTopicsOfNamespace nor WatchTopicList: a pattern consumer
/// fails with a timeout naming the request once the operation timeout passed, never hangs.
#[tokio::test]
async fn a_pattern_consumer_fails_clearly_on_pulsar_lite() {
    let broker = support::shared_broker();
    let client = Client::builder()
        .service_url(broker.url())
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        client
            .pattern_consumer("persistent://public/default/lite-pattern-.*")
            .subscription(unique_name("s"))
            .subscribe(),
    )
    .await
    .expect("the subscribe ends instead of hanging");
    let e = r.unwrap_err();
    match &e {
        pulsar_sdk::Error::Timeout { operation, after } => {
            assert!(operation.contains("GetTopicsOfNamespace"), "{e}");
            assert!(*after <= Duration::from_secs(2), "{e}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for the broker"
    );
}
