//! Partition growth against a real broker (pulsar-lite). It has no PIP-247 watcher, so the
//! client falls back to polling silently. Growth is done the only way pulsar-lite allows: stop
//! the broker, raise the topic's `partitions` in `<db>.metadata.json`, start it again.

use std::collections::BTreeSet;
use std::time::Duration;

use pulsar_sdk::{Client, InitialPosition, SubscriptionType};
use support::{unique_name, PulsarLite};

/// Sets `partitions` of `topic` in pulsar-lite's metadata file; returns whether it was found.
fn raise_partitions(meta: &mut serde_json::Value, topic_local: &str, n: u64) -> bool {
    match meta {
        serde_json::Value::Object(map) => {
            let mut found = false;
            for (k, v) in map.iter_mut() {
                if k.contains(topic_local) {
                    if let Some(obj) = v.as_object_mut() {
                        if obj.contains_key("partitions") {
                            obj.insert("partitions".into(), n.into());
                            found = true;
                            continue;
                        }
                    }
                    if v.is_u64() {
                        *v = n.into();
                        found = true;
                        continue;
                    }
                }
                found |= raise_partitions(v, topic_local, n);
            }
            found
        }
        serde_json::Value::Array(items) => {
            let mut found = false;
            for v in items {
                found |= raise_partitions(v, topic_local, n);
            }
            found
        }
        _ => false,
    }
}

#[tokio::test]
async fn a_grown_topic_is_picked_up_by_polling_after_a_restart() {
    let mut broker = PulsarLite::with_config("default_partitions = 2");
    let local = unique_name("grow");
    let topic = format!("persistent://public/default/{local}");
    let client = Client::builder()
        .service_url(broker.url())
        .auto_update_partitions_interval(Duration::from_millis(500))
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("s"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    assert_eq!(producer.partitions(), 2);
    producer.send_and_wait("before").await.unwrap();

    broker.stop();
    let path = broker.metadata_path();
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        raise_partitions(&mut meta, &local, 4),
        "topic not found in {}: {meta}",
        path.display()
    );
    std::fs::write(&path, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    broker.start_again();

    // The client reconnects by itself and its poll finds 4 partitions.
    let mut changes = producer.partition_updates();
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|n| *n == 4))
        .await
        .expect("the producer grew to 4 partitions")
        .unwrap();
    let mut c_changes = consumer.partition_updates();
    tokio::time::timeout(Duration::from_secs(30), c_changes.wait_for(|n| *n == 4))
        .await
        .expect("the consumer grew to 4 partitions")
        .unwrap();

    let mut sent_to = BTreeSet::new();
    for i in 0..12 {
        let id = tokio::time::timeout(
            Duration::from_secs(20),
            producer.send_and_wait(format!("after-{i}")),
        )
        .await
        .expect("send completes")
        .unwrap();
        sent_to.insert(id.partition);
    }
    assert_eq!(
        sent_to,
        BTreeSet::from([0, 1, 2, 3]),
        "round-robin reaches the new partitions"
    );
    let mut got = BTreeSet::new();
    let mut from = BTreeSet::new();
    while got.len() < 13 {
        let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("messages keep arriving")
            .unwrap();
        consumer.ack(&m).unwrap();
        from.insert(m.id.partition);
        got.insert(m.payload_str().unwrap().to_string());
    }
    assert!(got.contains("before"));
    assert_eq!(
        from,
        BTreeSet::from([0, 1, 2, 3]),
        "received from the new partitions too"
    );
}
