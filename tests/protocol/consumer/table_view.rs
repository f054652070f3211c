//! Issue #37: table views against the mock broker (upstream `AbstractTableViewImpl`): what is
//! read before `create` returns, updates and tombstones, keys, listeners and the change
//! stream, `refresh`, partitions and growth, close and drop.

use support as common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::schema::{Int32Schema, StringSchema};
use pulsar_sdk::{Client, Error, Producer, ProducerMessage, ServerError, TableView};

use common::{client, within};

async fn producer(client: &Client, topic: &str, batching: bool) -> Producer {
    client
        .producer(topic)
        .batching(batching)
        .create()
        .await
        .unwrap()
}

/// Sends `value` under `key` and waits for its receipt.
async fn put(p: &Producer, key: &str, value: &str) {
    p.send_and_wait(ProducerMessage::new(value.to_string()).key(key))
        .await
        .unwrap();
}

/// The view's entries as text, sorted.
fn entries(view: &TableView) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    view.for_each(|k, v| {
        out.insert(k.to_string(), String::from_utf8_lossy(v).into_owned());
    });
    out
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn create_returns_once_every_stored_message_is_in_the_view() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-existing";
    // Batched (so that a batch's messages all count) and one entry each.
    let batched = producer(&client, topic, true).await;
    let mut pending = Vec::new();
    for i in 0..300 {
        let msg = ProducerMessage::new(format!("v{i}")).key(format!("k{}", i % 50));
        pending.push(batched.send(msg).await.unwrap());
    }
    for p in pending {
        p.await.unwrap();
    }
    let single = producer(&client, topic, false).await;
    put(&single, "k0", "last").await;
    // A tombstone removes its key (Java's null value and an empty value alike), and a message
    // without a key changes nothing.
    single
        .send_and_wait(ProducerMessage::new(Bytes::new()).key("k1"))
        .await
        .unwrap();
    single.send_and_wait("no key").await.unwrap();

    let view = within("create", client.table_view(topic).create())
        .await
        .unwrap();
    assert_eq!(view.len(), 49);
    assert_eq!(view.get("k0"), Some(Bytes::from("last")));
    assert_eq!(view.get("k1"), None);
    assert!(!view.contains_key("k1"));
    assert_eq!(view.get("k49"), Some(Bytes::from("v299")));
    assert_eq!(view.get("k2"), Some(Bytes::from("v252")));
    let mut keys = view.keys();
    keys.sort();
    assert_eq!(keys.len(), 49);
    assert_eq!(keys[0], "k0");
    view.close().await.unwrap();
}

#[tokio::test]
async fn an_empty_topic_is_an_empty_view_that_then_follows_the_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-empty";
    let view = within("create", client.table_view(topic).create())
        .await
        .unwrap();
    assert!(view.is_empty());
    within("refresh", view.refresh()).await.unwrap();
    assert!(view.is_empty());

    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    put(&p, "b", "2").await;
    put(&p, "a", "3").await;
    within("refresh", view.refresh()).await.unwrap();
    assert_eq!(entries(&view), map(&[("a", "3"), ("b", "2")]));
    p.send_and_wait(ProducerMessage::new(Bytes::new()).key("a"))
        .await
        .unwrap();
    within("refresh", view.refresh()).await.unwrap();
    assert_eq!(entries(&view), map(&[("b", "2")]));
}

/// The reader is what upstream's constructor builds: earliest, non-durable, compacted.
#[tokio::test]
async fn the_view_reads_the_compacted_topic_from_the_earliest_position() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let _view = client
        .table_view("tv-subscribe")
        .subscription("my-view")
        .create()
        .await
        .unwrap();
    let subscribe = broker.received_of(Type::Subscribe)[0]
        .command
        .subscribe
        .clone()
        .unwrap();
    assert_eq!(subscribe.subscription, "my-view");
    assert_eq!(subscribe.read_compacted, Some(true));
    assert_eq!(subscribe.durable, Some(false));
    let start = subscribe.start_message_id.expect("a start id");
    assert_eq!(
        (start.ledger_id, start.entry_id),
        (u64::MAX, u64::MAX),
        "earliest"
    );
}

/// `refresh` waits for the view to apply what is stored: here the view's task is held inside
/// a listener, so it cannot have read the second message until the listener returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_waits_until_the_view_has_read_the_last_stored_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-refresh";
    let view = Arc::new(client.table_view(topic).create().await.unwrap());
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(Some(gate_rx));
    view.listen(move |_, _| {
        if let Some(rx) = gate.lock().unwrap().take() {
            let _ = entered_tx.send(());
            let _ = rx.recv();
        }
    });
    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    put(&p, "b", "2").await;
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
        .await
        .unwrap();
    let refresh = tokio::spawn({
        let view = view.clone();
        async move { view.refresh().await }
    });
    broker
        .wait_for_command(Type::GetLastMessageId, Duration::from_secs(10))
        .await
        .expect("refresh asks for the last message id");
    // Cannot finish while the task is held (a short look, not what decides the outcome).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!refresh.is_finished());
    assert_eq!(view.get("b"), None);
    gate_tx.send(()).unwrap();
    within("refresh", refresh).await.unwrap().unwrap();
    assert_eq!(view.get("b"), Some(Bytes::from("2")));
}

#[tokio::test]
async fn for_each_and_listen_and_the_change_stream_see_each_change_once_in_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-listen";
    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    put(&p, "b", "2").await;
    let view = client.table_view(topic).create().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    view.for_each_and_listen(move |k, v| {
        let v = v.map(|v| String::from_utf8_lossy(v).into_owned());
        out.lock().unwrap().push((k.to_string(), v));
    });
    let mut updates = view.updates();
    put(&p, "a", "3").await;
    p.send_and_wait(ProducerMessage::new(Bytes::new()).key("b"))
        .await
        .unwrap();
    p.send_and_wait("no key").await.unwrap();
    put(&p, "c", "4").await;

    let mut changes = Vec::new();
    for _ in 0..3 {
        let u = within("change", updates.next()).await.unwrap();
        assert_eq!(u.missed, 0);
        changes.push((
            u.key,
            u.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
        ));
    }
    let some = |k: &str, v: &str| (k.to_string(), Some(v.to_string()));
    assert_eq!(
        changes,
        vec![some("a", "3"), ("b".to_string(), None), some("c", "4")]
    );
    // The listener saw the two entries, then the same three changes.
    let mut first: Vec<_> = seen.lock().unwrap()[..2].to_vec();
    first.sort();
    assert_eq!(first, vec![some("a", "1"), some("b", "2")]);
    assert_eq!(seen.lock().unwrap()[2..].to_vec(), changes);

    // Closing ends the stream.
    view.close().await.unwrap();
    assert!(within("end", updates.next()).await.is_none());
    assert!(view.updates().next().await.is_none(), "a stream made after");
}

#[tokio::test]
async fn a_partitioned_topic_is_read_whole_and_partitions_it_gains_are_followed() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .auto_update_partitions_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let topic = "persistent://public/default/tv-partitioned";
    broker.create_partitioned_topic(topic, 2);
    let p = producer(&client, topic, false).await;
    for i in 0..20 {
        put(&p, &format!("k{i}"), &format!("v{i}")).await;
    }
    let view = client.table_view(topic).create().await.unwrap();
    assert_eq!(view.len(), 20);

    let mut updates = view.updates();
    broker.update_partitions(topic, 3).unwrap();
    // Straight to the new partition, as a producer that already knows it would.
    let p2 = producer(&client, &format!("{topic}-partition-2"), false).await;
    put(&p2, "new", "on-2").await;
    let u = within("the new partition's message", updates.next())
        .await
        .unwrap();
    assert_eq!(
        (u.key.as_str(), u.value),
        ("new", Some(Bytes::from("on-2")))
    );
    // A refresh now waits for all three.
    put(&p2, "new", "again").await;
    within("refresh", view.refresh()).await.unwrap();
    assert_eq!(view.get("new"), Some(Bytes::from("again")));
    assert_eq!(view.len(), 21);
}

#[tokio::test]
async fn a_typed_view_decodes_and_skips_a_value_it_cannot_decode_and_checks_its_schema() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-typed";
    let p = client
        .producer(topic)
        .schema(Int32Schema)
        .configure(|b| b.batching(false))
        .create()
        .await
        .unwrap();
    p.send_with(&7, ProducerMessage::new(Bytes::new()).key("n"))
        .await
        .unwrap()
        .await
        .unwrap();
    let view = client
        .table_view(topic)
        .schema(Int32Schema)
        .create()
        .await
        .unwrap();
    assert_eq!(view.get("n"), Some(7));
    // Three bytes are no INT32: skipped, the key keeps its value.
    p.inner()
        .send_and_wait(ProducerMessage::new(vec![1u8, 2, 3]).key("n"))
        .await
        .unwrap();
    p.inner()
        .send_and_wait(ProducerMessage::new(9i32.to_be_bytes().to_vec()).key("m"))
        .await
        .unwrap();
    view.refresh().await.unwrap();
    assert_eq!(view.get("n"), Some(7));
    assert_eq!(view.get("m"), Some(9));

    // A schema the topic's is incompatible with is refused, as for a reader.
    let refused = client.table_view(topic).schema(StringSchema).create().await;
    assert!(
        matches!(
            refused,
            Err(Error::Broker {
                code: ServerError::IncompatibleSchema,
                ..
            })
        ),
        "{refused:?}"
    );
    // Bytes take any payload.
    let bytes = client.table_view(topic).create().await.unwrap();
    assert_eq!(bytes.get("n"), Some(Bytes::from(vec![1u8, 2, 3])));
}

#[tokio::test]
async fn close_ends_the_reader_and_later_calls_say_so_and_drop_closes_too() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "tv-close";
    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    let view = client.table_view(topic).create().await.unwrap();
    view.close().await.unwrap();
    view.close().await.unwrap();
    assert_eq!(broker.received_of(Type::CloseConsumer).len(), 1);
    assert!(matches!(view.refresh().await, Err(Error::Closed)));
    // The map keeps what it had.
    assert_eq!(view.get("a"), Some(Bytes::from("1")));

    let dropped = client.table_view(topic).create().await.unwrap();
    drop(dropped);
    broker
        .wait_for_commands(Type::CloseConsumer, 2, Duration::from_secs(10))
        .await
        .expect("dropping the view closes its reader");
}

#[tokio::test]
async fn a_non_persistent_topic_gives_a_view_at_once_that_follows_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "non-persistent://public/default/tv-np";
    let view = within("create", client.table_view(topic).create())
        .await
        .unwrap();
    within("refresh", view.refresh()).await.unwrap();
    let mut updates = view.updates();
    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    let u = within("change", updates.next()).await.unwrap();
    assert_eq!(u.key, "a");
    assert!(broker.received_of(Type::GetLastMessageId).is_empty());
    let subscribe = broker.received_of(Type::Subscribe)[0]
        .command
        .subscribe
        .clone()
        .unwrap();
    assert_ne!(subscribe.read_compacted, Some(true));
}

/// A topic unload (a reconnect) is ridden through; a close for good (PIP-139: the namespace
/// deleted) ends the view with that error, which `refresh` and `close` report, and its
/// streams end.
#[tokio::test]
async fn an_unload_is_ridden_through_and_a_close_for_good_ends_the_view_with_its_error() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let topic = "persistent://acme/doomed/tv";
    let p = producer(&client, topic, false).await;
    put(&p, "a", "1").await;
    let view = client.table_view(topic).create().await.unwrap();
    let mut updates = view.updates();

    broker.unload_topic(topic).unwrap();
    put(&p, "a", "2").await;
    within("refresh after the unload", view.refresh())
        .await
        .unwrap();
    assert_eq!(view.get("a"), Some(Bytes::from("2")));
    let u = within("change", updates.next()).await.unwrap();
    assert_eq!(u.value, Some(Bytes::from("2")));

    broker.terminate_namespace("acme/doomed").unwrap();
    broker.delete_namespace("acme/doomed", true).await.unwrap();
    assert!(within("the stream ends", updates.next()).await.is_none());
    assert!(matches!(
        view.refresh().await,
        Err(Error::ClosedByBroker { .. })
    ));
    assert!(matches!(
        view.close().await,
        Err(Error::ClosedByBroker { .. })
    ));
    // The map keeps what it had.
    assert_eq!(view.get("a"), Some(Bytes::from("2")));
}
