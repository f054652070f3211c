//! A zero-size receiver queue (`receiver_queue_size(0)`) against pulsar-lite, as a user of a
//! Shared subscription checks it: two workers that take turns get the messages in turns (none
//! holds messages it did not ask for, even while it sits on one unacked), and a batched
//! message is handed out whole without making the worker hold the messages after it. Last, an
//! auto-scaled receiver queue (PIP-74) reading a backlog.
//!
//! Both workers are consumers of one `Client`: pulsar-lite mixes up consumer ids of two
//! clients on one Shared subscription (see shared/design/pulsar-lite.md).

use std::time::Duration;

use pulsar_sdk::{Client, Consumer, InitialPosition, Message, SubscriptionType};
use support::{shared_client as client, unbatched_producer, unique_name};

/// How long one message may take to arrive.
const STEP: Duration = Duration::from_secs(15);

async fn worker(client: &Client, topic: &str, subscription: &str) -> Consumer {
    client
        .consumer(topic)
        .subscription(subscription)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(0)
        .subscribe()
        .await
        .unwrap()
}

async fn recv(consumer: &mut Consumer, what: &str) -> Message {
    support::recv_within(consumer, STEP, what).await
}

fn text(m: &Message) -> &str {
    m.payload_str().unwrap()
}

/// A backlog of 10 and two workers that alternate `recv` without acking in between: each gets
/// the next message in turn (with any prefetch the first worker would have taken the whole
/// backlog and the second would wait for nothing). Then both ack and nothing is redelivered.
#[tokio::test]
async fn two_zero_queue_workers_on_shared_take_strict_turns() {
    const N: usize = 10;
    let client = client();
    let topic = unique_name("zero-queue-turns");
    let producer = unbatched_producer(&client, &topic).await;
    for i in 0..N {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    let mut a = worker(&client, &topic, "workers").await;
    let mut b = worker(&client, &topic, "workers").await;
    let mut held = Vec::new();
    for i in 0..N {
        let (who, w) = if i % 2 == 0 {
            ("a", &mut a)
        } else {
            ("b", &mut b)
        };
        let m = recv(w, &format!("worker {who}, turn {i}")).await;
        assert_eq!(text(&m), format!("m{i}"), "worker {who}'s turn {i}");
        held.push((i % 2, m));
    }
    for (w, m) in &held {
        let c = if *w == 0 { &a } else { &b };
        c.ack(m).unwrap();
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A batch of 5 then 3 single messages, read by worker `a` up to the first single, then worker
/// `b` asks: it gets the second single at once. `a` was given one permit for the batch, and the
/// FLOW after it only repaid what the broker counted for the batch: `a` holds nothing ahead.
#[tokio::test]
async fn a_batch_is_handed_out_whole_and_nothing_after_it_is_held() {
    let client = client();
    let topic = unique_name("zero-queue-batch");
    let batching = client.producer(&topic).create().await.unwrap(); // batching on (default)
    let mut sends = Vec::new();
    for i in 0..5 {
        sends.push(batching.send(format!("b{i}")).await.unwrap());
    }
    let ids = futures::future::try_join_all(sends).await.unwrap();
    assert!(ids
        .iter()
        .all(|id| id.is_batch() && id.entry() == ids[0].entry()));
    batching.close().await.unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    for i in 0..3 {
        producer.send_and_wait(format!("s{i}")).await.unwrap();
    }
    let mut a = worker(&client, &topic, "workers").await;
    let mut b = worker(&client, &topic, "workers").await;
    for i in 0..5 {
        let m = recv(&mut a, &format!("batch message {i}")).await;
        assert_eq!(text(&m), format!("b{i}"));
    }
    assert_eq!(text(&recv(&mut a, "the first single").await), "s0");
    assert_eq!(text(&recv(&mut b, "the second single").await), "s1");
    assert_eq!(text(&recv(&mut a, "the third single").await), "s2");
}

/// PIP-74's auto-scaled receiver queue against pulsar-lite: starting at 1 and growing as the
/// application keeps up, it delivers a backlog of 100 in order, without stalling between
/// windows (every refill and growth is a FLOW the broker must act on).
#[tokio::test]
async fn an_auto_scaled_queue_reads_a_backlog_in_order() {
    const N: usize = 100;
    let client = client();
    let topic = unique_name("auto-scaled-backlog");
    let producer = unbatched_producer(&client, &topic).await;
    for i in 0..N {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(32)
        .auto_scaled_receiver_queue_size(true)
        .subscribe()
        .await
        .unwrap();
    for i in 0..N {
        let m = recv(&mut consumer, &format!("message {i}")).await;
        assert_eq!(text(&m), format!("m{i}"));
        consumer.ack(&m).unwrap();
    }
    consumer.close().await.unwrap();
}
