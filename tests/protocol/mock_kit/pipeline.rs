//! The `pipeline` example's loop (`examples/common/pipeline.rs`) against the mock broker,
//! through a broker restart: every valid input produces its output (at least once; duplicates
//! counted), a malformed one goes to the dead-letter topic, and shutdown is graceful.

use common::client;
use support as common;
// The example's own loop, under its own name (so inside this module of the same name).
#[allow(clippy::module_inception)]
#[path = "../../../examples/common/pipeline.rs"]
mod pipeline;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{full, wait_until, within};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, DeadLetterPolicy, InitialPosition, Reader, SubscriptionType};

const ORDERS: usize = 60;

/// Reads everything stored on `topic`.
async fn read_all(client: &Client, topic: &str) -> Vec<(Option<String>, String)> {
    let mut reader: Reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut out = Vec::new();
    while within("has_message_available", reader.has_message_available())
        .await
        .unwrap()
    {
        let m = within("read", reader.recv()).await.unwrap();
        out.push((m.key.clone(), m.payload_str().unwrap().to_string()));
    }
    out
}

#[test]
fn enrich_parses_orders_and_refuses_the_rest() {
    let (key, json) = pipeline::enrich(b"A-1:3:250").unwrap();
    assert_eq!(key, "A-1");
    assert_eq!(
        json,
        r#"{"order":"A-1","quantity":3,"price":250,"total":750}"#
    );
    for bad in [
        &b"nope"[..],
        b"A:1",
        b"A:x:1",
        b"A:1:2:3",
        b"\xff",
        b":1:2",
        b"A\":1:2",
    ] {
        assert!(pipeline::enrich(bad).is_err(), "{bad:?}");
    }
}

#[tokio::test]
async fn the_pipeline_survives_a_broker_restart_and_dead_letters_a_malformed_input() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let input = full("orders");
    let output = full("orders-enriched");
    // Inputs: valid orders, and one malformed among them. The first half is there from the
    // start; the second half comes after the broker restarted.
    let feeder = client.producer(&input).create().await.unwrap();
    let feed = |range: std::ops::Range<usize>| {
        let feeder = feeder.clone();
        async move {
            let mut receipts = Vec::new();
            for i in range {
                let order = format!("order-{i}:{}:100", i + 1);
                receipts.push(feeder.send(order).await.unwrap());
                if i == ORDERS / 4 {
                    receipts.push(feeder.send("this is not an order").await.unwrap());
                }
            }
            for r in receipts {
                r.await.unwrap();
            }
        }
    };
    feed(0..ORDERS / 2).await;
    let consumer = client
        .consumer(&input)
        .subscription("enricher")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(50))
        .dead_letter_policy(DeadLetterPolicy::new(2))
        .receiver_queue_size(8)
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    assert_eq!(dlq, format!("{input}-enricher-DLQ"));
    let producer = client.producer(&output).create().await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(pipeline::run(consumer, producer.clone(), 4, async {
        let _ = stopped.await;
    }));
    // Restart the broker in the middle of the work, then feed the rest.
    wait_until("some outputs are stored", || {
        broker.topic_messages(&output) >= 5
    })
    .await;
    broker.restart().await.unwrap();
    within("feeding after the restart", feed(ORDERS / 2..ORDERS)).await;
    // Every input is done once the input subscription has nothing left to acknowledge and the
    // malformed input reached the dead-letter topic.
    wait_until(
        "every input is acked and the malformed one dead-lettered",
        || broker.subscription_backlog(&input, "enricher") == 0 && broker.topic_messages(&dlq) == 1,
    )
    .await;
    let _ = stop.send(());
    let stats = within("graceful shutdown", running).await.unwrap().unwrap();
    assert!(stats.processed >= ORDERS as u64, "{stats:?}");
    assert!(
        stats.nacked >= 1,
        "the malformed input was nacked: {stats:?}"
    );

    // Every order produced its output, keyed by its id; duplicates (at-least-once, from the
    // restart) are counted, never missing.
    let outputs = read_all(&client, &output).await;
    let mut per_order: BTreeMap<String, usize> = BTreeMap::new();
    for (key, json) in &outputs {
        let key = key.clone().expect("keyed by order id");
        assert!(json.contains(&format!(r#""order":"{key}""#)), "{json}");
        *per_order.entry(key).or_default() += 1;
    }
    assert_eq!(per_order.len(), ORDERS, "one output per order at least");
    for i in 0..ORDERS {
        assert!(
            per_order.contains_key(&format!("order-{i}")),
            "order-{i} missing"
        );
    }
    let duplicates: usize = per_order.values().map(|n| n - 1).sum();
    eprintln!(
        "{} outputs, {duplicates} duplicates after the restart",
        outputs.len()
    );
    assert_eq!(outputs.len(), ORDERS + duplicates);
    let dead = read_all(&client, &dlq).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, "this is not an order");
    // Graceful: the pipeline closed its consumer; nothing is left on the input subscription.
    assert_eq!(broker.consumers(&input, "enricher"), 0);
    assert_eq!(broker.subscription_backlog(&input, "enricher"), 0);
    producer.close().await.unwrap();
    client.close().await.unwrap();
}
