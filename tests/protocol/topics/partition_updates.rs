//! PIP-247: partition growth pushed by the broker (watcher), with polling as the fallback.

use support as common;

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

async fn wait_partitions(rx: &mut pulsar_sdk::Updates<usize>, n: usize) {
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

    let mut p_changes = producer.partition_updates();
    let mut c_changes = consumer.partition_updates();
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
    let mut changes = producer.partition_updates();
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
    let mut changes = producer.partition_updates();
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
    // The new partition cannot be looked up for now: creating its producer fails. (Not with
    // ServiceNotReady: on that answer the client closes the connection, as Java's
    // `ClientCnx.checkServerError` does, and the watcher's connection with it, so the failure
    // could not be reported on it.)
    let p2 = format!("{TOPIC}-partition-2");
    broker.set_lookup_error(Some(&p2), ServerError::MetadataError, "not yet");
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
    let mut changes = producer.partition_updates();
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
    let mut changes = producer.partition_updates();
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
    let mut changes = producer.partition_updates();
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
    let mut changes = growing.partition_updates();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
    assert_eq!(fixed.partitions(), 2);
    // The broker refuses shrinking; a client told of fewer partitions keeps its count.
    assert!(broker.update_partitions(TOPIC, 1).is_err());
    assert_eq!(growing.partitions(), 3);
}

// ---- Fixed-rate polling, re-watch backoff, close/re-watch race, partition count bound ----

const OTHER: &str = "persistent://public/default/churn";

fn policy(initial: Duration, max: Duration) -> pulsar_sdk::BackoffPolicy {
    pulsar_sdk::BackoffPolicy {
        initial,
        max,
        ..Default::default()
    }
}

/// Without watchers the client polls every interval, even when producers are created and
/// dropped more often than that (a registration change must not restart the poll timer).
#[tokio::test(start_paused = true)]
async fn polling_keeps_its_rate_while_registrations_keep_changing() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let interval = Duration::from_secs(60);
    broker.create_partitioned_topic(TOPIC, 2);
    broker.create_partitioned_topic(OTHER, 1);
    let client = client(&broker.service_url(), interval);
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    broker.update_partitions(TOPIC, 3).unwrap();
    let mut changes = producer.partition_updates();
    // An application creating and dropping a partitioned producer every 10 s (6 times per
    // poll interval).
    let churn = async {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let p = client.producer(OTHER).create().await.unwrap();
            drop(p);
        }
    };
    tokio::select! {
        () = churn => unreachable!(),
        grown = tokio::time::timeout(interval + Duration::from_secs(5), changes.wait_for(|n| *n == 3)) => {
            grown.expect("the growth is seen within one poll interval despite the churn").unwrap();
        }
    }
    let waited = started.elapsed();
    assert!(waited <= interval + Duration::from_secs(1), "{waited:?}");
    assert!(
        broker.received_of(Type::Producer).len() > 3 + 3,
        "the churn really ran (producers on OTHER were created meanwhile)"
    );
}

/// Several connection losses in a row, each followed by a successful re-watch: every re-watch
/// still comes after the initial backoff (100 ms here), not after a delay grown towards the
/// maximum (60 s) because the backoff was never reset.
#[tokio::test(start_paused = true)]
async fn the_rewatch_backoff_is_reset_after_a_successful_watch() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_partitioned_topic(TOPIC, 2);
    let client = common::test_client(&broker.service_url())
        .backoff(policy(Duration::from_millis(100), Duration::from_secs(60)))
        .auto_update_partitions_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .expect("the client watches");
    for loss in 1..=10 {
        let watches = broker.received_of(Type::WatchPartitionUpdate).len();
        broker.drop_all_connections();
        let lost_at = tokio::time::Instant::now();
        // Initial backoff 100 ms (+10 % jitter); a never-reset backoff is 1.6 s by the 5th.
        broker
            .wait_for_commands(
                Type::WatchPartitionUpdate,
                watches + 1,
                Duration::from_secs(1),
            )
            .await
            .unwrap_or_else(|| {
                panic!(
                    "no re-watch within 1 s after connection loss {loss} (waited {:?})",
                    lost_at.elapsed()
                )
            });
    }
    // The last watcher works.
    let mut changes = producer.partition_updates();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
}

/// The last topic goes (the watcher is being closed) while a new producer registers: the new
/// watch must not inherit the closed watcher's last version, or the new watcher's first updates
/// (versions from 1 again) are dropped as stale.
#[tokio::test(start_paused = true)]
async fn a_watch_started_while_the_watcher_closes_starts_from_fresh_versions() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partition_update_resend_timeout(Duration::from_secs(3600));
    broker.create_partitioned_topic(TOPIC, 2);
    let client = client(&broker.service_url(), Duration::from_secs(3600));
    let first = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    // Version 1 of the first watcher is applied and acknowledged.
    let mut changes = first.partition_updates();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
    broker
        .wait_for_command(Type::PartitionUpdateResult, Duration::from_secs(5))
        .await
        .unwrap();

    // Every answer now takes 1 s (paused time): the second producer's create (metadata, then
    // lookups, then PRODUCER) finishes 1 s after its PRODUCER commands arrive.
    broker.set_response_delay(Duration::from_secs(1));
    let producers_before = broker.received_of(Type::Producer).len();
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.producer(TOPIC).batching(false).create().await }
    });
    broker
        .wait_for_commands(
            Type::Producer,
            producers_before + 3,
            Duration::from_secs(10),
        )
        .await
        .expect("the second producer is being created");
    // Half-way through that second, the first producer (the only registration) goes: the
    // watcher is closed; the close is answered 1 s later, after the second producer registered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(first);
    broker
        .wait_for_command(Type::WatchPartitionUpdateClose, Duration::from_secs(5))
        .await
        .expect("the watcher is closed once no topic is left");
    let second = second.await.unwrap().unwrap();
    // The second producer's topic is watched again after the close.
    let watches = broker
        .wait_for_commands(Type::WatchPartitionUpdate, 2, Duration::from_secs(10))
        .await
        .expect("watched again");
    let log = broker.received();
    let close_at = log
        .iter()
        .position(|r| r.is(Type::WatchPartitionUpdateClose))
        .unwrap();
    let rewatch_at = log
        .iter()
        .rposition(|r| r.is(Type::WatchPartitionUpdate))
        .unwrap();
    assert!(
        rewatch_at > close_at,
        "the second watch came after the close"
    );
    let rewatch = watches[1]
        .command
        .watch_partition_update
        .as_ref()
        .unwrap()
        .watcher_id;
    broker.set_response_delay(Duration::ZERO);
    let results_before = broker.received_of(Type::PartitionUpdateResult).len();
    let mut changes = second.partition_updates();
    broker.update_partitions(TOPIC, 4).unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|n| *n == 4))
        .await
        .expect("the new watcher's first update (version 1) is applied, not taken as stale")
        .unwrap();
    let results = broker
        .wait_for_commands(
            Type::PartitionUpdateResult,
            results_before + 1,
            Duration::from_secs(10),
        )
        .await
        .expect("the new watcher's update is answered");
    let r = results[results_before]
        .command
        .partition_update_result
        .as_ref()
        .unwrap();
    assert_eq!(r.watcher_id, rewatch, "{r:?}");
    assert!(r.success, "{r:?}");
}

const MAX_PARTITIONS: u32 = 65_536;

/// A watcher update claiming more partitions than the client's bound is answered with a
/// failure naming the count and the bound, and nothing is created.
#[tokio::test]
async fn a_pushed_partition_count_above_the_bound_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partition_update_resend_timeout(Duration::from_secs(3600));
    broker.create_partitioned_topic(TOPIC, 2);
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
    let producers = broker.received_of(Type::Producer).len();
    // The metadata says 100,000 partitions: the watcher gets an update with that count.
    broker.set_partitions(TOPIC, 100_000);
    let result = broker
        .wait_for_command(Type::PartitionUpdateResult, Duration::from_secs(10))
        .await
        .expect("the update is answered")
        .command
        .partition_update_result
        .unwrap();
    assert!(!result.success, "{result:?}");
    let why = result.error_message.unwrap_or_default();
    assert!(
        why.contains("100000") && why.contains(&MAX_PARTITIONS.to_string()),
        "{why}"
    );
    assert_eq!(producer.partitions(), 2);
    assert_eq!(
        broker.received_of(Type::Producer).len(),
        producers,
        "no partition producer was created"
    );
    // A later, sensible count is applied.
    let mut changes = producer.partition_updates();
    broker.set_partitions(TOPIC, 3);
    wait_partitions(&mut changes, 3).await;
}

/// Partitioned metadata above the bound is an error naming the count and the bound: a create
/// fails instead of starting that many partition producers, and polling never grows to it.
#[tokio::test]
async fn a_metadata_partition_count_above_the_bound_is_an_error() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let huge = "persistent://public/default/huge";
    broker.create_partitioned_topic(huge, 2);
    broker.set_partitions(huge, u32::MAX);
    let client = client(&broker.service_url(), Duration::from_millis(100));
    let err = client.partitioned_topic_metadata(huge).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&u32::MAX.to_string()) && text.contains(&MAX_PARTITIONS.to_string()),
        "{text}"
    );
    let err = client
        .producer(huge)
        .create()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&u32::MAX.to_string()), "{err}");
    assert!(broker.received_of(Type::Producer).is_empty());
    // The bound itself is accepted.
    broker.set_partitions(huge, MAX_PARTITIONS);
    assert_eq!(
        client.partitioned_topic_metadata(huge).await.unwrap(),
        MAX_PARTITIONS
    );

    // Polling: a topic that later reports too many partitions keeps its count.
    broker.create_partitioned_topic(TOPIC, 2);
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_partitions(TOPIC, 100_000);
    let served = broker.metadata_requests_served();
    common::wait_until("two more polls", || {
        broker.metadata_requests_served() >= served + 2
    })
    .await;
    assert_eq!(producer.partitions(), 2);
    assert_eq!(
        broker.received_of(Type::Producer).len(),
        2,
        "only the first create"
    );
}

/// PIP-247 contract (protocol-extensions.md): "success=true once the new partitions are live".
/// A growth slower than the broker's resend timeout makes the broker send the same state again
/// with a newer version; that update needs no *new* growth (the count was taken by the first),
/// but the partitions are still not live, so it must not be answered with success. Answering
/// it at once tells the broker it is done; the first growth then fails and nobody retries it.
#[tokio::test]
async fn a_resent_update_during_a_pending_growth_is_not_acked_before_the_partitions_are_live() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partition_update_resend_timeout(Duration::from_millis(200));
    broker.create_partitioned_topic(TOPIC, 2);
    let client = Client::builder()
        .service_url(broker.service_url())
        .operation_timeout(Duration::from_secs(2))
        .auto_update_partitions_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let producer = client
        .producer(TOPIC)
        .batching(false)
        .create()
        .await
        .unwrap();
    let watch = broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    let watcher_id = watch.command.watch_partition_update.unwrap().watcher_id;
    // The new partition cannot be looked up (retriable): its producer cannot be created yet.
    let p2 = format!("{TOPIC}-partition-2");
    broker.set_lookup_error(Some(&p2), ServerError::MetadataError, "not yet");
    broker.update_partitions(TOPIC, 3).unwrap();
    // The broker resends the update (new version) while the growth is pending.
    tokio::time::timeout(Duration::from_secs(10), async {
        while broker
            .partition_update_versions_sent(watch.connection, watcher_id)
            .len()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the broker resends the update");
    let first = broker
        .wait_for_command(Type::PartitionUpdateResult, Duration::from_secs(10))
        .await
        .unwrap();
    let r = first.command.partition_update_result.unwrap();
    assert!(
        !r.success,
        "version {} acked as a success while partition 2 cannot be created (producer has {})",
        r.version,
        producer.partitions()
    );
    // Once the lookup works, the broker's resend after the failure grows the producer.
    broker.clear_topic_lookup(&p2);
    broker.clear_lookup_errors();
    let mut changes = producer.partition_updates();
    wait_partitions(&mut changes, 3).await;
}

/// A broker that advertises PIP-247 but refuses the watch for good (NotAllowed, not retriable):
/// the link reports `Refused` and the service only re-watches, forever, so growth is never
/// seen. The pattern consumer's topic-list watcher falls back to polling on a refusal (as
/// upstream clients poll anyway); partition updates should too (the design's "otherwise it
/// polls partitioned metadata every `auto_update_partitions_interval`").
#[tokio::test]
async fn a_watch_refused_for_good_falls_back_to_polling() {
    let broker = MockBroker::start().await.unwrap();
    broker.push_error(
        pulsar_sdk::mock::MockError::new(
            pulsar_sdk::mock::MockRequest::WatchPartitionUpdate,
            ServerError::NotAllowed,
            "watchers disabled here",
        )
        .times(usize::MAX),
    );
    let (_client, producer, _consumer) = setup(&broker, Duration::from_millis(200)).await;
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .unwrap();
    let mut changes = producer.partition_updates();
    broker.update_partitions(TOPIC, 3).unwrap();
    wait_partitions(&mut changes, 3).await;
}
