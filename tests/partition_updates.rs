//! PIP-247: partition growth pushed by the broker (watcher), with polling as the fallback.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::{Client, Consumer, InitialPosition, Producer, ServerError, SubscriptionType};

const TOPIC: &str = "persistent://public/default/growing";

fn client(url: &str, poll: Duration) -> Client {
    common::test_client(url)
        .operation_timeout(Duration::from_secs(5))
        .auto_update_partitions_interval(poll)
        .build()
        .unwrap()
}

async fn setup(broker: &MockBroker, poll: Duration) -> (Client, Producer, Consumer) {
    broker.create_partitioned_topic(TOPIC, 2);
    let client = client(&broker.service_url(), poll);
    let consumer = client
        .consumer(TOPIC)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    (client, producer, consumer)
}

async fn wait_partitions(rx: &mut tokio::sync::watch::Receiver<usize>, n: usize) {
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| *v == n))
        .await
        .unwrap_or_else(|_| panic!("did not reach {n} partitions"))
        .unwrap();
}

/// Sends `n` unkeyed messages (round-robin) and returns the partitions they went to.
async fn produce(producer: &Producer, prefix: &str, n: usize) -> BTreeSet<i32> {
    let mut parts = BTreeSet::new();
    for i in 0..n {
        let id = producer
            .send_and_wait(format!("{prefix}-{i}"))
            .await
            .unwrap();
        parts.insert(id.partition);
    }
    parts
}

async fn consume(consumer: &mut Consumer, n: usize) -> BTreeMap<String, i32> {
    let mut got = BTreeMap::new();
    while got.len() < n {
        let m = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
            .await
            .expect("messages keep arriving")
            .unwrap();
        consumer.ack(&m).unwrap();
        got.insert(m.payload_str().unwrap().to_string(), m.id.partition);
    }
    got
}

#[tokio::test]
async fn growth_is_pushed_and_applied_within_one_notification() {
    let broker = MockBroker::start().await.unwrap();
    // A poll interval far longer than the test: only a push can explain growth.
    let (_client, producer, mut consumer) = setup(&broker, Duration::from_secs(3600)).await;
    assert_eq!(
        produce(&producer, "before", 10).await,
        BTreeSet::from([0, 1])
    );
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .expect("the client watches the partitioned topic");

    let mut p_changes = producer.partition_changes();
    let mut c_changes = consumer.partition_changes();
    broker.update_partitions(TOPIC, 5).unwrap();
    wait_partitions(&mut p_changes, 5).await;
    wait_partitions(&mut c_changes, 5).await;

    assert_eq!(
        produce(&producer, "after", 20).await,
        BTreeSet::from([0, 1, 2, 3, 4])
    );
    let got = consume(&mut consumer, 30).await;
    let partitions: BTreeSet<i32> = got.values().copied().collect();
    assert_eq!(
        partitions,
        BTreeSet::from([0, 1, 2, 3, 4]),
        "received from all 5"
    );
    assert_eq!(got.len(), 30, "no message lost");

    // The client acknowledged the update with success, once per version.
    let results: Vec<wire::CommandPartitionUpdateResult> = broker
        .received_of(Type::PartitionUpdateResult)
        .into_iter()
        .filter_map(|r| r.command.partition_update_result)
        .collect();
    assert!(!results.is_empty());
    assert!(results.iter().all(|r| r.success), "{results:?}");
    // No metadata polling happened.
    assert_eq!(
        broker.received_of(Type::PartitionedMetadata).len(),
        2,
        "only the creates"
    );
}

#[tokio::test]
async fn after_a_broker_restart_the_client_watches_again_and_sees_the_current_count() {
    let broker = MockBroker::start().await.unwrap();
    let (_client, producer, _consumer) = setup(&broker, Duration::from_secs(3600)).await;
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    let watches_before = broker.received_of(Type::WatchPartitionUpdate).len();
    broker.restart().await.unwrap();
    // Grown while the client reconnects: the re-watch's answer carries the count.
    broker.update_partitions(TOPIC, 3).unwrap();
    let mut changes = producer.partition_changes();
    wait_partitions(&mut changes, 3).await;
    assert!(broker.received_of(Type::WatchPartitionUpdate).len() > watches_before);
    assert_eq!(produce(&producer, "x", 9).await.len(), 3);
}

#[tokio::test]
async fn a_lost_ack_is_resent_by_the_broker_and_applied_idempotently() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partition_update_resend_timeout(Duration::from_millis(500));
    broker.create_partitioned_topic(TOPIC, 2);
    // One registration, so exactly one WATCH (a re-watch would replace the update in flight).
    let client = client(&broker.service_url(), Duration::from_secs(3600));
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    broker.drop_next_partition_update_results(1);
    let mut changes = producer.partition_changes();
    broker.update_partitions(TOPIC, 4).unwrap();
    wait_partitions(&mut changes, 4).await;
    // The broker resends (new version, same state); the client acks it without growing twice.
    let results = broker
        .wait_for_commands(Type::PartitionUpdateResult, 2, Duration::from_secs(10))
        .await
        .expect("the resent update is acked too");
    let versions: Vec<u64> = results
        .iter()
        .filter_map(|r| r.command.partition_update_result.as_ref())
        .map(|r| r.version)
        .collect();
    assert!(versions[1] > versions[0], "{versions:?}");
    assert_eq!(producer.partitions(), 4);
    assert_eq!(produce(&producer, "y", 8).await.len(), 4);
}

#[tokio::test]
async fn a_failed_growth_is_reported_and_the_resend_succeeds() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .operation_timeout(Duration::from_millis(600))
        .auto_update_partitions_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    broker.create_partitioned_topic(TOPIC, 2);
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    // The new partition cannot be looked up for now: creating its producer fails.
    let p2 = format!("{TOPIC}-partition-2");
    broker.set_lookup_error(Some(&p2), ServerError::ServiceNotReady, "not yet");
    broker.update_partitions(TOPIC, 3).unwrap();
    let failure = broker
        .wait_for_command(Type::PartitionUpdateResult, Duration::from_secs(10))
        .await
        .unwrap();
    let r = failure.command.partition_update_result.unwrap();
    assert!(!r.success);
    assert!(r.error_message.is_some());
    assert_eq!(producer.partitions(), 2);
    // Once the lookup works, the broker's resend (after a failure: at once, new version)
    // succeeds.
    broker.clear_topic_lookup(&p2);
    broker.clear_lookup_errors();
    let mut changes = producer.partition_changes();
    wait_partitions(&mut changes, 3).await;
    // ... and is acknowledged with success (sent right after the partitions are live).
    let mut ok = false;
    for _ in 0..100 {
        ok = broker
            .received_of(Type::PartitionUpdateResult)
            .into_iter()
            .filter_map(|r| r.command.partition_update_result)
            .any(|r| r.success && r.version > 0);
        if ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok);
}

#[tokio::test]
async fn a_stale_update_is_ignored_by_the_client() {
    let broker = MockBroker::start().await.unwrap();
    let (_client, producer, _consumer) = setup(&broker, Duration::from_secs(3600)).await;
    let watch = broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    let watcher_id = watch.command.watch_partition_update.unwrap().watcher_id;
    let mut changes = producer.partition_changes();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
    broker
        .wait_for_command(Type::PartitionUpdateResult, Duration::from_secs(5))
        .await
        .unwrap();
    let results_before = broker.received_of(Type::PartitionUpdateResult).len();
    // A delayed, older update (version 0 < the one applied) claiming 6 partitions.
    let stale = wire::BaseCommand {
        r#type: Type::PartitionUpdate as i32,
        partition_update: Some(wire::CommandPartitionUpdate {
            watcher_id,
            topics: vec![TOPIC.to_string()],
            partitions: vec![6],
            version: 0,
        }),
        ..Default::default()
    };
    assert!(broker.push(watch.connection, stale));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(producer.partitions(), 3, "the stale update was not applied");
    assert_eq!(
        broker.received_of(Type::PartitionUpdateResult).len(),
        results_before
    );
}

#[tokio::test]
async fn without_the_feature_growth_is_polled_and_nothing_is_watched() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let (_client, producer, mut consumer) = setup(&broker, Duration::from_millis(300)).await;
    let mut changes = producer.partition_changes();
    broker.update_partitions(TOPIC, 4).unwrap();
    wait_partitions(&mut changes, 4).await;
    assert_eq!(produce(&producer, "p", 8).await.len(), 4);
    let got = consume(&mut consumer, 8).await;
    assert_eq!(got.values().copied().collect::<BTreeSet<_>>().len(), 4);
    assert!(
        broker.received_of(Type::WatchPartitionUpdate).is_empty(),
        "never watched"
    );
    assert!(
        broker.received_of(Type::PartitionedMetadata).len() > 2,
        "it polled"
    );
}

#[tokio::test]
async fn auto_update_can_be_turned_off_and_a_shrink_is_ignored() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_partitioned_topic(TOPIC, 2);
    let client = client(&broker.service_url(), Duration::from_millis(200));
    let fixed = client
        .producer(TOPIC)
        .auto_update_partitions(false)
        .create()
        .await
        .unwrap();
    let growing = client.producer(TOPIC).create().await.unwrap();
    let mut changes = growing.partition_changes();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
    assert_eq!(fixed.partitions(), 2);
    // The broker refuses shrinking; a client told of fewer partitions keeps its count.
    assert!(broker.update_partitions(TOPIC, 1).is_err());
    assert_eq!(growing.partitions(), 3);
}
