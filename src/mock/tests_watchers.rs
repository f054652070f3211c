//! PIP-247 partition update watchers against a raw client.

use std::time::Duration;

use super::tests_support::Client;
use super::wire::{self, base_command::Type};
use super::*;

const A: &str = "persistent://public/default/a";
const B: &str = "persistent://public/default/b";
const TIMEOUT: Duration = Duration::from_secs(30);

fn watch_cmd(request_id: u64, watcher_id: u64, topics: &[&str]) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::WatchPartitionUpdate as i32,
        watch_partition_update: Some(wire::CommandWatchPartitionUpdate {
            request_id,
            watcher_id,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        }),
        ..Default::default()
    }
}

fn result_cmd(watcher_id: u64, version: u64, success: bool) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::PartitionUpdateResult as i32,
        partition_update_result: Some(wire::CommandPartitionUpdateResult {
            watcher_id,
            version,
            success,
            error_message: (!success).then(|| "could not create producers".to_owned()),
        }),
        ..Default::default()
    }
}

fn close_cmd(request_id: u64, watcher_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::WatchPartitionUpdateClose as i32,
        watch_partition_update_close: Some(wire::CommandWatchPartitionUpdateClose {
            request_id,
            watcher_id,
        }),
        ..Default::default()
    }
}

/// Registers watcher `watcher_id` on `topics`, expecting success; returns the counts.
async fn watch(client: &mut Client, watcher_id: u64, topics: &[&str]) -> Vec<u32> {
    let request_id = client.request_id();
    let resp = client
        .request(watch_cmd(request_id, watcher_id, topics))
        .await;
    let ok = resp
        .watch_partition_update_success
        .clone()
        .unwrap_or_else(|| panic!("expected WATCH_PARTITION_UPDATE_SUCCESS, got {resp:?}"));
    assert_eq!((ok.request_id, ok.watcher_id), (request_id, watcher_id));
    assert_eq!(ok.topics, topics);
    ok.partitions
}

async fn update(client: &mut Client) -> wire::CommandPartitionUpdate {
    client
        .raw
        .expect(Type::PartitionUpdate)
        .await
        .partition_update
        .unwrap()
}

async fn ack(client: &mut Client, watcher_id: u64, version: u64, success: bool) {
    client
        .raw
        .send(result_cmd(watcher_id, version, success))
        .await;
}

/// Waits until the broker has handled `n` results.
async fn results_handled(broker: &MockBroker, n: usize) {
    broker
        .wait_for_commands(Type::PartitionUpdateResult, n, Duration::from_secs(5))
        .await
        .expect("results received");
}

async fn setup() -> (MockBroker, Client, ConnectionId) {
    let broker = MockBroker::start().await.unwrap();
    assert!(broker.create_partitioned_topic(A, 2));
    assert!(broker.create_partitioned_topic(B, 3));
    let client = Client::connect(&broker).await.patient();
    let conn = broker.connections()[0];
    (broker, client, conn)
}

#[tokio::test]
async fn watch_answers_the_current_counts_and_can_be_replaced() {
    let (broker, mut client, conn) = setup().await;
    let counts = watch(
        &mut client,
        7,
        &[A, "b", "persistent://public/default/unknown"],
    )
    .await;
    assert_eq!(counts, [2, 3, 0]);
    assert_eq!(
        broker.partition_watchers(),
        [(
            conn,
            7,
            vec![
                A.to_owned(),
                "b".into(),
                "persistent://public/default/unknown".into()
            ]
        )]
    );
    // The same watcher id replaces its topic list.
    assert_eq!(watch(&mut client, 7, &[B]).await, [3]);
    assert_eq!(broker.partition_watchers(), [(conn, 7, vec![B.to_owned()])]);
    broker.update_partitions(A, 4).unwrap(); // no longer watched
    client.quiet().await;
    assert!(broker.partition_update_versions_sent(conn, 7).is_empty());
}

#[tokio::test(start_paused = true)]
async fn growth_sends_all_topics_with_increasing_versions() {
    let (broker, mut client, conn) = setup().await;
    watch(&mut client, 1, &[A, B]).await;

    broker.update_partitions(A, 4).unwrap();
    let u = update(&mut client).await;
    assert_eq!((u.watcher_id, u.version), (1, 1));
    assert_eq!(
        (u.topics.as_slice(), u.partitions.as_slice()),
        (&[A.to_owned(), B.to_owned()][..], &[4, 3][..])
    );
    assert!(broker.topic_exists(&format!("{A}-partition-3")));
    assert_eq!(broker.partition_update_in_flight(conn, 1), Some(1));
    ack(&mut client, 1, 1, true).await;
    results_handled(&broker, 1).await;
    assert_eq!(broker.partition_update_in_flight(conn, 1), None);

    broker.update_partitions("b", 5).unwrap();
    let u = update(&mut client).await;
    assert_eq!((u.version, u.partitions.as_slice()), (2, &[4, 5][..]));
    ack(&mut client, 1, 2, true).await;
    results_handled(&broker, 2).await;
    assert_eq!(broker.partition_update_versions_sent(conn, 1), [1, 2]);
    // Acknowledged: nothing is sent again, even after the resend timeout.
    client.raw.expect_silence(TIMEOUT * 2).await;

    // Counts only grow; unknown / non-partitioned topics cannot be updated.
    assert_eq!(
        broker.update_partitions(A, 4),
        Err(MockAdminError::PartitionCountNotIncreased {
            topic: A.into(),
            current: 4,
            requested: 4
        })
    );
    assert!(matches!(
        broker.update_partitions("nope", 3),
        Err(MockAdminError::TopicNotFound(_))
    ));
    assert_eq!(broker.partition_update_results_ignored(), 0);
}

#[tokio::test(start_paused = true)]
async fn stale_results_are_ignored_and_a_change_before_the_ack_replaces_the_update() {
    let (broker, mut client, conn) = setup().await;
    watch(&mut client, 1, &[A]).await;
    broker.update_partitions(A, 3).unwrap();
    assert_eq!(update(&mut client).await.version, 1);
    // A change before the ack: a newer version with the newest counts replaces it.
    broker.update_partitions(A, 5).unwrap();
    let u = update(&mut client).await;
    assert_eq!((u.version, u.partitions.as_slice()), (2, &[5][..]));
    assert_eq!(broker.partition_update_in_flight(conn, 1), Some(2));
    // Results for version 1 (success or failure) are ignored.
    ack(&mut client, 1, 1, true).await;
    ack(&mut client, 1, 1, false).await;
    results_handled(&broker, 2).await;
    assert_eq!(broker.partition_update_results_ignored(), 2);
    assert_eq!(broker.partition_update_in_flight(conn, 1), Some(2));
    ack(&mut client, 1, 2, true).await;
    results_handled(&broker, 3).await;
    assert_eq!(broker.partition_update_in_flight(conn, 1), None);
    client.raw.expect_silence(TIMEOUT * 2).await;
    assert_eq!(broker.partition_update_versions_sent(conn, 1), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_update_is_sent_again_with_a_new_version() {
    let (broker, mut client, conn) = setup().await;
    watch(&mut client, 3, &[A, B]).await;
    broker.update_partitions(A, 3).unwrap();
    assert_eq!(update(&mut client).await.version, 1);
    let start = tokio::time::Instant::now();
    ack(&mut client, 3, 1, false).await;
    let u = update(&mut client).await;
    assert!(start.elapsed() < Duration::from_secs(1), "sent at once");
    assert_eq!((u.version, u.partitions.as_slice()), (2, &[3, 3][..]));
    ack(&mut client, 3, 2, true).await;
    results_handled(&broker, 2).await;
    assert_eq!(broker.partition_update_in_flight(conn, 3), None);
    assert_eq!(broker.partition_update_versions_sent(conn, 3), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn an_unacknowledged_update_is_sent_again_after_the_timeout() {
    let (broker, mut client, conn) = setup().await;
    broker.set_partition_update_resend_timeout(Duration::from_secs(10));
    watch(&mut client, 1, &[A]).await;
    let start = tokio::time::Instant::now();
    broker.update_partitions(A, 3).unwrap();
    assert_eq!(update(&mut client).await.version, 1);
    let u = update(&mut client).await;
    assert!(start.elapsed() >= Duration::from_secs(10));
    assert_eq!((u.version, u.partitions.as_slice()), (2, &[3][..]));

    // A lost ack (fault injection) counts as none: sent again after the timeout.
    broker.drop_next_partition_update_results(1);
    let acked = tokio::time::Instant::now();
    ack(&mut client, 1, 2, true).await;
    let u = update(&mut client).await;
    assert!(acked.elapsed() >= Duration::from_secs(9));
    assert_eq!(u.version, 3);
    ack(&mut client, 1, 3, true).await;
    results_handled(&broker, 2).await;
    assert_eq!(broker.partition_update_in_flight(conn, 1), None);
    assert_eq!(broker.partition_update_results_ignored(), 1);
    client.raw.expect_silence(Duration::from_secs(60)).await;
    assert_eq!(broker.partition_update_versions_sent(conn, 1), [1, 2, 3]);
}

#[tokio::test]
async fn close_and_connection_loss_remove_watchers() {
    let (broker, mut client, conn) = setup().await;
    watch(&mut client, 1, &[A]).await;
    watch(&mut client, 2, &[B]).await;
    let resp = client.request(close_cmd(55, 1)).await;
    assert_eq!(resp.success.unwrap().request_id, 55);
    assert_eq!(broker.partition_watchers(), [(conn, 2, vec![B.to_owned()])]);
    broker.update_partitions(A, 3).unwrap();
    client.quiet().await;
    // Closing an unknown watcher succeeds too.
    let resp = client.request(close_cmd(56, 99)).await;
    assert_eq!(resp.success.unwrap().request_id, 56);

    assert!(broker.drop_connection(conn));
    assert!(broker.partition_watchers().is_empty());
}

#[tokio::test]
async fn without_the_feature_a_watch_is_refused() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = Client::connect(&broker).await;
    let resp = client.request(watch_cmd(9, 1, &[A])).await;
    let err = resp.error.expect("ERROR");
    assert_eq!(err.request_id, 9);
    assert_eq!(err.error, ServerError::NotAllowed.code());
    assert!(broker.partition_watchers().is_empty());
    let resp = client.request(close_cmd(10, 1)).await;
    assert_eq!(resp.error.expect("ERROR").request_id, 10);
}

#[tokio::test]
async fn restart_drops_watchers_and_clients_watch_again() {
    let (broker, mut client, _) = setup().await;
    watch(&mut client, 1, &[A]).await;
    assert_eq!(broker.partition_watchers().len(), 1);
    broker.restart().await.unwrap();
    assert!(client.raw.is_closed().await);
    assert!(broker.partition_watchers().is_empty());
    let mut client = Client::connect(&broker).await;
    assert_eq!(watch(&mut client, 1, &[A]).await, [2]);
    let conn = *broker.connections().last().unwrap();
    assert_eq!(broker.partition_watchers(), [(conn, 1, vec![A.to_owned()])]);
}

#[tokio::test]
async fn lookups_and_metadata_requests_are_counted() {
    let (broker, mut client, _) = setup().await;
    let lookup = wire::BaseCommand {
        r#type: Type::Lookup as i32,
        lookup_topic: Some(wire::CommandLookupTopic {
            topic: A.into(),
            request_id: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    let metadata = wire::BaseCommand {
        r#type: Type::PartitionedMetadata as i32,
        partition_metadata: Some(wire::CommandPartitionedTopicMetadata {
            topic: A.into(),
            request_id: 2,
            ..Default::default()
        }),
        ..Default::default()
    };
    client.request(lookup).await;
    for _ in 0..3 {
        client.request(metadata.clone()).await;
    }
    assert_eq!(
        (broker.lookups_served(), broker.metadata_requests_served()),
        (1, 3)
    );
}

#[tokio::test]
async fn set_partitions_notifies_watchers_of_a_change() {
    let (broker, mut client, _) = setup().await;
    watch(&mut client, 1, &[A]).await;
    broker.set_partitions(A, 2); // unchanged: nothing sent
    client.quiet().await;
    broker.set_partitions(A, 6);
    let u = update(&mut client).await;
    assert_eq!((u.version, u.partitions.as_slice()), (1, &[6][..]));
}
