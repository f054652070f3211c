//! A pattern consumer over 1,000 matching topics on the mock broker: broker requests per
//! minute while nothing changes, and the time from a topic's creation to its first message
//! consumed, with the PIP-145 topic-list watcher and with polling only.
//!
//! `cargo bench --bench pattern_discovery` prints one JSON line per mode. Polling runs in both
//! modes (the watcher's safety net), every `POLL` here to keep the run short; the line also
//! gives what the upstream default period (60 s) costs.

use std::time::{Duration, Instant};

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::{Client, InitialPosition, SubscriptionType};

const TOPICS: usize = 1_000;
const WINDOW: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_secs(2);
const NEW_TOPICS: usize = 5;

async fn run(watcher: bool) -> serde_json::Value {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_topic_watchers: watcher,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..TOPICS {
        broker.create_topic(&format!("persistent://public/default/bench-{i}"));
    }
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let started = Instant::now();
    let mut consumer = client
        .pattern_consumer("persistent://public/default/bench-.*")
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(POLL)
        .subscribe()
        .await
        .unwrap();
    let subscribe_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(consumer.topics().len(), TOPICS);
    // Let the watcher register, then measure a quiet window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = |ty: Type| broker.received_of(ty).len();
    let (all0, list0) = (broker.received().len(), count(Type::GetTopicsOfNamespace));
    tokio::time::sleep(WINDOW).await;
    let (all1, list1) = (broker.received().len(), count(Type::GetTopicsOfNamespace));
    let per_minute = |n: usize| n as f64 * 60.0 / WINDOW.as_secs_f64();
    // New topics: created by a producer's first send, consumed once discovered.
    let mut latencies = Vec::new();
    for i in 0..NEW_TOPICS {
        let topic = format!("persistent://public/default/bench-new-{i}");
        let t0 = Instant::now();
        let producer = client
            .producer(&topic)
            .batching(false)
            .create()
            .await
            .unwrap();
        producer.send_and_wait(format!("new-{i}")).await.unwrap();
        let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("the new topic's message arrives")
            .unwrap();
        assert_eq!(msg.topic.to_string(), topic);
        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
        consumer.ack(&msg).unwrap();
        producer.close().await.unwrap();
    }
    latencies.sort_by(f64::total_cmp);
    let list_per_min = per_minute(list1 - list0);
    consumer.close().await.unwrap();
    serde_json::json!({
        "mode": if watcher { "watcher" } else { "polling" },
        "matching_topics": TOPICS,
        "poll_period_s": POLL.as_secs(),
        "window_s": WINDOW.as_secs(),
        "subscribe_all_ms": subscribe_ms,
        "broker_requests_per_min_idle": per_minute(all1 - all0),
        "topic_list_requests_per_min_idle": list_per_min,
        "topic_list_requests_per_min_at_60s_period": list_per_min * POLL.as_secs_f64() / 60.0,
        "watch_updates_sent": broker.topic_list_updates_sent(),
        "creation_to_first_message_ms": {
            "min": latencies[0],
            "median": latencies[latencies.len() / 2],
            "max": latencies[latencies.len() - 1],
        },
    })
}

#[tokio::main]
async fn main() {
    for watcher in [true, false] {
        println!("{}", run(watcher).await);
    }
}
