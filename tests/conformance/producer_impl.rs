//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::Error;
use tokio::time::Instant;

use crate::common::{test_client, within};

const SEND_TIMEOUT: Duration = Duration::from_secs(1);

fn is_send_timeout(r: &Result<pulsar_sdk::MessageId, Error>) -> bool {
    matches!(r, Err(Error::Timeout { operation: "send", after }) if *after == SEND_TIMEOUT)
}

/// Java `ProducerImpl`'s send-timeout task (`run(Timeout)`): when the oldest pending message
/// times out, `failPendingMessages` fails every pending message at once, the younger ones too
/// (long before their own timeout), and the producer goes on.
#[tokio::test(start_paused = true)]
async fn a_timed_out_head_fails_every_pending_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = "timeout-fails-all";
    let producer = client
        .producer(topic)
        .batching(false)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();

    broker.set_unresponsive(true);
    let head = producer.send("head").await.unwrap();
    broker
        .wait_for_commands(Type::Send, 2, Duration::from_secs(5))
        .await
        .expect("the head reached the broker");
    // Half the timeout later (paused time: exact), two younger messages.
    tokio::time::sleep(SEND_TIMEOUT / 2).await;
    let younger_at = Instant::now();
    let younger = vec![
        producer.send("younger-1").await.unwrap(),
        producer.send("younger-2").await.unwrap(),
    ];
    broker
        .wait_for_commands(Type::Send, 4, Duration::from_secs(5))
        .await
        .expect("the younger ones reached the broker");

    assert!(is_send_timeout(&within("the head", head).await));
    for r in futures::future::join_all(younger).await {
        assert!(is_send_timeout(&r), "{r:?}");
    }
    // They failed with the head, before their own timeout was due.
    assert!(Instant::now() < younger_at + SEND_TIMEOUT);

    // The producer goes on.
    broker.set_unresponsive(false);
    within("a send after", producer.send_and_wait("after"))
        .await
        .unwrap();
}

/// Java `ProducerImpl.failPendingMessages` also discards the batch being built
/// (`failPendingBatchMessages`): a message waiting in the open batch fails with the timed-out
/// head instead of going out later.
#[tokio::test(start_paused = true)]
async fn a_timed_out_head_fails_the_open_batch_too() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = "timeout-fails-batch";
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 100,
            max_publish_delay: Duration::from_secs(10),
            ..Default::default()
        })
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();

    broker.set_unresponsive(true);
    let head = producer.send("head").await.unwrap();
    // The flush sends the head's batch; it never completes (no receipt comes).
    let flushing = tokio::spawn({
        let producer = producer.clone();
        async move { producer.flush().await }
    });
    broker
        .wait_for_commands(Type::Send, 1, Duration::from_secs(5))
        .await
        .expect("the head's batch reached the broker");
    tokio::time::sleep(SEND_TIMEOUT / 2).await;
    let batched_at = Instant::now();
    // Joins the open batch, due in 10 s.
    let batched = producer.send("in the open batch").await.unwrap();

    assert!(is_send_timeout(&within("the head", head).await));
    let r = within("the batched one", batched).await;
    assert!(is_send_timeout(&r), "{r:?}");
    assert!(Instant::now() < batched_at + SEND_TIMEOUT);
    // Its batch never went out.
    assert_eq!(broker.received_of(Type::Send).len(), 1);
    let _ = within("the flush", flushing).await;
}
