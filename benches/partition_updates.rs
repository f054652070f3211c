//! Broker-side load of keeping 1,000 partitioned topics' partition counts current: PIP-247
//! watcher (pushed updates) vs polling partitioned metadata (the upstream clients' way).
//!
//! `cargo bench --bench partition_updates` prints one JSON line per mode with the metadata
//! requests and lookups the (mock) broker served per minute while nothing changed, and how
//! long one growth took to reach the producers.

use std::time::{Duration, Instant};

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::Client;

const TOPICS: usize = 1_000;
const WINDOW: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_secs(2);

async fn run(watchers: bool) -> serde_json::Value {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: watchers,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .auto_update_partitions_interval(POLL)
        .build()
        .unwrap();
    let mut producers = Vec::with_capacity(TOPICS);
    for i in 0..TOPICS {
        let topic = format!("persistent://public/default/bench-{i}");
        broker.create_partitioned_topic(&topic, 1);
        producers.push(
            client
                .producer(&topic)
                .batching(false)
                .create()
                .await
                .unwrap(),
        );
    }
    // Let registrations settle, then measure a quiet window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (m0, l0) = (broker.metadata_requests_served(), broker.lookups_served());
    tokio::time::sleep(WINDOW).await;
    let (m1, l1) = (broker.metadata_requests_served(), broker.lookups_served());
    let per_minute = |n: u64| n as f64 * 60.0 / WINDOW.as_secs_f64();
    // One growth, observed by the producer.
    let mut changes = producers[0].partition_updates();
    let started = Instant::now();
    broker
        .update_partitions("persistent://public/default/bench-0", 2)
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|n| *n == 2))
        .await
        .expect("growth observed")
        .unwrap();
    let growth_ms = started.elapsed().as_secs_f64() * 1000.0;
    let metadata_per_min = per_minute(m1 - m0);
    serde_json::json!({
        "mode": if watchers { "watcher" } else { "polling" },
        "topics": TOPICS,
        "poll_interval_s": POLL.as_secs(),
        "window_s": WINDOW.as_secs(),
        "metadata_requests_per_min": metadata_per_min,
        "lookups_per_min": per_minute(l1 - l0),
        // Polling load scales with 1/interval: what the upstream default (60 s) would cost.
        "metadata_requests_per_min_at_60s_interval": metadata_per_min * POLL.as_secs_f64() / 60.0,
        "growth_visible_after_ms": growth_ms,
    })
}

#[tokio::main]
async fn main() {
    for watchers in [true, false] {
        println!("{}", run(watchers).await);
    }
}
