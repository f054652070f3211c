//! Table views against a real broker (pulsar-lite): updates and tombstones, an empty topic,
//! `refresh`, batches, and a 3-partitioned topic (a private broker with
//! `default_partitions = 3`, which makes every topic it sees 3-partitioned).
//!
//! pulsar-lite quirks met here (shared/design/pulsar-lite.md): GET_LAST_MESSAGE_ID on an
//! empty topic is an error ("Topic has no messages"), which the view reads as an empty
//! partition; its last message id names the whole entry (no batch index), so a view waits for
//! the last message of a batch. A view's reader is an Exclusive subscription, whose live
//! dispatch duplicates messages of pipelined sends, so messages here are sent one at a time
//! (`send_and_wait`) and batches are stored before the view subscribes. It does not compact
//! topics: `read_compacted` reads everything.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pulsar_sdk::schema::StringSchema;
use pulsar_sdk::{Client, Producer, ProducerMessage, TableView};
use support::{shared_client, unique_name, PulsarLite};

const STEP: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {STEP:?}"))
}

async fn put(p: &Producer, key: &str, value: &str) {
    p.send_and_wait(ProducerMessage::new(value.to_string()).key(key))
        .await
        .unwrap();
}

async fn remove(p: &Producer, key: &str) {
    p.send_and_wait(ProducerMessage::new(Bytes::new()).key(key))
        .await
        .unwrap();
}

fn entries(view: &TableView<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    view.for_each(|k, v| {
        out.insert(k.to_string(), v.clone());
    });
    out
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn view(client: &Client, topic: &str) -> TableView<String> {
    within(
        "create",
        client.table_view(topic).schema(StringSchema).create(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn updates_and_tombstones_fold_into_the_latest_value_of_each_key() {
    let client = shared_client();
    let topic = unique_name("tv-updates");
    let p = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    put(&p, "a", "1").await;
    put(&p, "b", "2").await;
    put(&p, "a", "3").await;
    remove(&p, "b").await;
    p.send_and_wait("no key").await.unwrap();
    put(&p, "c", "4").await;

    let view = view(&client, &topic).await;
    assert_eq!(entries(&view), map(&[("a", "3"), ("c", "4")]));

    let mut updates = view.updates();
    put(&p, "b", "5").await;
    remove(&p, "c").await;
    within("refresh", view.refresh()).await.unwrap();
    assert_eq!(entries(&view), map(&[("a", "3"), ("b", "5")]));
    let first = within("change", updates.next()).await.unwrap();
    let second = within("change", updates.next()).await.unwrap();
    assert_eq!(
        (first.key.as_str(), first.value.as_deref()),
        ("b", Some("5"))
    );
    assert_eq!((second.key.as_str(), second.value), ("c", None));
    view.close().await.unwrap();
}

#[tokio::test]
async fn an_empty_topic_is_an_empty_view_and_refresh_returns() {
    let client = shared_client();
    let topic = unique_name("tv-empty");
    let view = view(&client, &topic).await;
    assert!(view.is_empty());
    within("refresh on the empty topic", view.refresh())
        .await
        .unwrap();
    assert!(view.is_empty());
    let p = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    put(&p, "k", "v").await;
    within("refresh", view.refresh()).await.unwrap();
    assert_eq!(entries(&view), map(&[("k", "v")]));
}

/// pulsar-lite names the last entry without a batch index: the view must read the whole
/// batch before `create` returns, not only its first message. (A large batch on a
/// multi-threaded runtime, so that `create` can run while the view is inside the batch.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stored_last_is_read_whole_before_create_returns() {
    let client = shared_client();
    let topic = unique_name("tv-batch");
    let p = client
        .producer(&topic)
        .batching_options(pulsar_sdk::producer::BatchingOptions {
            max_messages: 1000,
            max_publish_delay: Duration::from_secs(10),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..1000 {
        let msg = ProducerMessage::new(format!("v{i}")).key(format!("k{i}"));
        receipts.push(p.send(msg).await.unwrap());
    }
    p.flush().await.unwrap();
    let mut entries_seen = std::collections::BTreeSet::new();
    for r in receipts {
        entries_seen.insert(r.await.unwrap().entry().entry_id);
    }
    assert_eq!(entries_seen.len(), 1, "one batch");
    let view = view(&client, &topic).await;
    assert_eq!(view.len(), 1000);
    assert_eq!(view.get("k999").as_deref(), Some("v999"));
}

fn partitioned_broker() -> &'static PulsarLite {
    static BROKER: OnceLock<PulsarLite> = OnceLock::new();
    BROKER.get_or_init(|| PulsarLite::with_config("default_partitions = 3"))
}

#[tokio::test]
async fn a_three_partitioned_topic_is_one_view() {
    let client = Client::builder()
        .service_url(partitioned_broker().url())
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let topic = unique_name("tv-partitioned");
    let p = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    assert_eq!(p.partitions(), 3);
    let mut partitions = std::collections::BTreeSet::new();
    for i in 0..30 {
        let id = p
            .send_and_wait(ProducerMessage::new(format!("v{i}")).key(format!("k{}", i % 12)))
            .await
            .unwrap();
        partitions.insert(id.partition);
    }
    assert_eq!(partitions.len(), 3, "keys on every partition");
    remove(&p, "k0").await;

    let view = view(&client, &topic).await;
    let mut expected: BTreeMap<String, String> = (18..30)
        .map(|i| (format!("k{}", i % 12), format!("v{i}")))
        .collect();
    expected.remove("k0");
    assert_eq!(entries(&view), expected);

    put(&p, "k0", "back").await;
    put(&p, "k5", "new").await;
    within("refresh", view.refresh()).await.unwrap();
    expected.insert("k0".into(), "back".into());
    expected.insert("k5".into(), "new".into());
    assert_eq!(entries(&view), expected);
}
