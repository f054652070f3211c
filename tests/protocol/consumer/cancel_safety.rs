//! Cancel safety: `Consumer::recv`, `Reader::recv` and `Producer::send` futures dropped before
//! they complete (as a losing `select!` branch does) lose nothing.

use common::client;
use support as common;

use std::time::Duration;

use common::{full, within};
use futures::FutureExt;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{InitialPosition, Message, Producer};

const N: usize = 200;

fn index(m: &Message) -> usize {
    m.payload_str().unwrap().parse().unwrap()
}

/// Sends `0 .. N` from a background task, a few at a time (so receives race arrivals).
fn publish_in_background(producer: Producer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for i in 0..N {
            let _receipt = producer.send(i.to_string()).await.unwrap();
            if i % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        producer.flush().await.unwrap();
    })
}

#[tokio::test]
async fn consumer_recv_futures_dropped_in_a_select_loop_lose_no_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("cancel-consumer");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .receiver_queue_size(10)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    // Nothing is published yet: this receive is certainly pending when it is dropped.
    assert!(consumer.recv().now_or_never().is_none());
    let producer = client.producer(&topic).create().await.unwrap();
    let publisher = publish_in_background(producer);
    let mut seen = Vec::new();
    let mut dropped = 1usize;
    while seen.len() < N {
        // Every other round a receive is polled once and dropped if not ready; the others race
        // a timer that often wins. Which branch wins does not matter to what is asserted.
        if seen.len() % 2 == 0 {
            match consumer.recv().now_or_never() {
                Some(m) => seen.push(index(&m.unwrap())),
                None => dropped += 1,
            }
        }
        tokio::select! {
            m = consumer.recv() => {
                let m = m.unwrap();
                consumer.ack(&m).unwrap();
                seen.push(index(&m));
            }
            _ = tokio::time::sleep(Duration::from_micros(200)) => dropped += 1,
        }
    }
    within("the publisher", publisher).await.unwrap();
    assert_eq!(
        seen,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    assert!(dropped > 0);
    // And nothing more.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), consumer.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn reader_recv_futures_dropped_in_a_select_loop_lose_no_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("cancel-reader");
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .receiver_queue_size(10)
        .create()
        .await
        .unwrap();
    assert!(reader.recv().now_or_never().is_none());
    let producer = client.producer(&topic).create().await.unwrap();
    let publisher = publish_in_background(producer);
    let mut seen = Vec::new();
    let mut dropped = 1usize;
    while seen.len() < N {
        if seen.len() % 2 == 1 {
            match reader.recv().now_or_never() {
                Some(m) => seen.push(index(&m.unwrap())),
                None => dropped += 1,
            }
        }
        tokio::select! {
            m = reader.recv() => seen.push(index(&m.unwrap())),
            _ = tokio::time::sleep(Duration::from_micros(200)) => dropped += 1,
        }
    }
    within("the publisher", publisher).await.unwrap();
    assert_eq!(seen, (0..N).collect::<Vec<_>>());
    assert!(dropped > 0);
}

#[tokio::test]
async fn a_dropped_send_future_sends_nothing_and_a_dropped_receipt_still_sends() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("cancel-producer");
    let producer = client
        .producer(&topic)
        .batching(false)
        .max_pending_messages(1)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    // Hold the only pending slot with a receipt not yet awaited, with the broker slow to answer,
    // so the next send waits for room.
    broker.set_response_delay(Duration::from_millis(300));
    let held = producer.send("kept-1").await.unwrap();
    // A send waiting for room, dropped: that message is not queued, so never sent.
    assert!(producer.send("dropped").now_or_never().is_none());
    broker.set_response_delay(Duration::ZERO);
    // Dropping a receipt gives up the id only: the message is sent.
    drop(held);
    let last = producer.send("kept-2").await.unwrap();
    within("the last receipt", last).await.unwrap();
    let a = within("recv", consumer.recv()).await.unwrap();
    let b = within("recv", consumer.recv()).await.unwrap();
    assert_eq!(a.payload_str(), Some("kept-1"));
    assert_eq!(b.payload_str(), Some("kept-2"));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), consumer.recv())
            .await
            .is_err(),
        "the dropped send was never sent"
    );
}

/// A `close()` future dropped while its Close op still waits for room in the partition task's
/// inbox (full of control ops) closed nothing: the consumer lives on, so acks made afterwards
/// are accepted and sent, and `recv` goes on. (Before, `close` refused acks from its first
/// poll on, and a dropped future left them refused for the consumer's lifetime.)
#[tokio::test]
async fn a_close_future_dropped_before_its_close_was_queued_leaves_the_consumer_usable() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("cancel-close");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..2 {
        producer.send_and_wait(i.to_string()).await.unwrap();
    }
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let m = within("a message", consumer.recv()).await.unwrap();
    // The test runs on one thread: the consumer's task does not run while the futures below
    // are only polled, so their control ops fill its inbox (more than it has room for; with
    // more room the Close would be queued, the consumer closed, and this test would fail).
    let mut asks: Vec<_> = (0..5_000)
        .map(|_| Box::pin(consumer.last_message_ids()))
        .collect();
    for ask in &mut asks {
        assert!(futures::poll!(ask.as_mut()).is_pending());
    }
    {
        let mut close = std::pin::pin!(consumer.close());
        assert!(futures::poll!(close.as_mut()).is_pending());
    }
    for r in within("the queued requests", futures::future::join_all(asks)).await {
        r.unwrap();
    }
    consumer
        .acker()
        .ack(&m)
        .expect("acks are taken: nothing was closed");
    within(
        "the ack",
        broker.wait_for_command(
            pulsar_sdk::mock::wire::base_command::Type::Ack,
            Duration::from_secs(10),
        ),
    )
    .await
    .expect("the ack reached the broker");
    let next = within("the next message", consumer.recv()).await.unwrap();
    assert_eq!(index(&next), 1);
    consumer.close().await.unwrap();
}
