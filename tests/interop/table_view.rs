//! Table views against the official client's (`Client.create_table_view`, pulsar-client 3.13 on
//! the C++ client 4.2, driven by tests/interop/table_view_official.py): after the same produce
//! sequence (updates, tombstones, keyless messages, batches from the official producer, several
//! partitions), both views hold the same keys and values.
//!
//! Non-empty topics only: on an empty topic the C++ view's `hasMessageAvailable` raises against
//! pulsar-lite, whose GET_LAST_MESSAGE_ID answers an error there (shared/design/pulsar-lite.md).
//! Messages are stored before either view subscribes (pulsar-lite's Exclusive dispatch of live
//! pipelined sends duplicates messages; a view's reader is Exclusive).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use pulsar_sdk::{Client, Producer, ProducerMessage, TableView};
use serde_json::{json, Value};
use support::official::{self, OfficialMessage, ProduceOpts};
use support::{shared_broker, unique_name, PulsarLite};

type Entries = BTreeMap<String, Vec<u8>>;

/// Runs `table_view_official.py view` on `topic`: the official view's entries.
async fn official_view(url: &str, topic: &str) -> Entries {
    use tokio::io::AsyncWriteExt;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/table_view_official.py"
    );
    let mut child = tokio::process::Command::new(support::venv_python())
        .arg(script)
        .arg("view")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run table_view_official.py");
    let req = json!({"url": url, "topic": topic, "subscription": unique_name("py-view")});
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(req.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("table_view_official.py: no answer in 60 s")
        .unwrap();
    assert!(
        out.status.success(),
        "table_view_official.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON answer");
    let entries: Entries = answer["entries"]
        .as_object()
        .expect("entries")
        .iter()
        .map(|(k, v)| (k.clone(), B64.decode(v.as_str().unwrap()).unwrap()))
        .collect();
    assert_eq!(answer["len"].as_u64(), Some(entries.len() as u64), "len()");
    entries
}

fn ours(view: &TableView) -> Entries {
    let mut out = Entries::new();
    view.for_each(|k, v| {
        out.insert(k.to_string(), v.to_vec());
    });
    out
}

fn client(url: &str) -> Client {
    Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Sends `value` under `key` (`None`: a tombstone, an empty payload) and tracks it in `model`.
async fn put(p: &Producer, model: &mut Entries, key: &str, value: Option<&str>) {
    let payload = value.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    p.send_and_wait(ProducerMessage::new(payload).key(key))
        .await
        .unwrap();
    match value {
        Some(v) => model.insert(key.to_string(), v.as_bytes().to_vec()),
        None => model.remove(key),
    };
}

/// The produce sequence both views read: ours one at a time (updates, tombstones, a keyless
/// message), then a batch of the official producer's (updates and a tombstone), then ours
/// again. The official producer routes keys with another hash (BoostHash) than ours (Java's),
/// so on a partitioned topic a key both wrote would have messages on two partitions, in no
/// order between them: each key is written by one client only.
async fn produce_sequence(client: &Client, url: &str, topic: &str, model: &mut Entries) {
    let p = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..12 {
        put(
            &p,
            model,
            &format!("k{}", i % 6),
            Some(&format!("ours-{i}")),
        )
        .await;
    }
    put(&p, model, "k1", None).await;
    p.send_and_wait("no key").await.unwrap();
    let mut batch = ProduceOpts {
        batching: true,
        ..Default::default()
    };
    for i in 0..10 {
        let key = format!("o{}", i % 4);
        let value = if i == 9 {
            String::new()
        } else {
            format!("official-{i}")
        };
        batch.messages.push(OfficialMessage {
            key: Some(key.clone()),
            ..OfficialMessage::new(value.clone())
        });
        if value.is_empty() {
            model.remove(&key);
        } else {
            model.insert(key, value.into_bytes());
        }
    }
    official::produce_async(url, topic, &batch).await.unwrap();
    put(&p, model, "k0", Some("last")).await;
    put(&p, model, "k1", Some("back")).await;
    p.close().await.unwrap();
    end_every_partition(client, topic).await;
}

/// Stores a keyless message (which no view takes) last on every partition. pulsar-lite's
/// GET_LAST_MESSAGE_ID names the last entry without a batch index, and the official view
/// (C++ `hasMessageAvailable`, which compares ids as Java's `compareTo` does) then stops at the
/// first message of a batch stored last on its partition, leaving the rest of the batch to
/// its background read: its first entries would race with that read. Ours reads the whole
/// batch (real_broker::table_view::a_batch_stored_last_is_read_whole_before_create_returns).
async fn end_every_partition(client: &Client, topic: &str) {
    let p = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let partitions = p.partitions().max(1);
    let mut ended = std::collections::BTreeSet::new();
    // Keyless messages go round-robin over the partitions.
    for _ in 0..10 * partitions {
        ended.insert(p.send_and_wait("end").await.unwrap().partition);
        if ended.len() == partitions {
            break;
        }
    }
    assert_eq!(
        ended.len(),
        partitions,
        "a keyless message on every partition"
    );
    p.close().await.unwrap();
}

async fn both_views_agree(url: &str, topic: &str) {
    let client = client(url);
    let mut model = Entries::new();
    produce_sequence(&client, url, topic, &mut model).await;

    let view = client.table_view(topic).create().await.unwrap();
    assert_eq!(ours(&view), model, "our view");
    assert_eq!(official_view(url, topic).await, model, "the official view");

    // Our view follows the topic; a fresh official view reads the same.
    let p = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    put(&p, &mut model, "k0", None).await;
    put(&p, &mut model, "k9", Some("new")).await;
    view.refresh().await.unwrap();
    assert_eq!(ours(&view), model, "our view after refresh");
    assert_eq!(
        official_view(url, topic).await,
        model,
        "a new official view"
    );
    view.close().await.unwrap();
}

#[tokio::test]
async fn both_views_hold_the_same_keys_and_values() {
    let url = shared_broker().url();
    both_views_agree(&url, &unique_name("tv-interop")).await;
}

#[tokio::test]
async fn both_views_of_a_partitioned_topic_hold_the_same_keys_and_values() {
    static BROKER: OnceLock<PulsarLite> = OnceLock::new();
    let broker = BROKER.get_or_init(|| PulsarLite::with_config("default_partitions = 3"));
    let url = broker.url();
    let topic = unique_name("tv-interop-partitioned");
    both_views_agree(&url, &topic).await;
    assert_eq!(
        client(&url)
            .partitioned_topic_metadata(&topic)
            .await
            .unwrap(),
        3
    );
}
