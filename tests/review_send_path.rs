//! Review of the producer send path after issue #18 (packed pending entries, receipts in
//! groups, permits counted per entry, enqueue time in nanoseconds), from the outside: the
//! public producer API against the mock broker.

mod common;
use common::{full, test_client, within};

use std::time::Duration;

use futures::future::join_all;
use futures::FutureExt;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Error, SendFuture};

/// Whether `f` has completed (polled once, without waiting).
fn done(f: &mut SendFuture) -> Option<pulsar_sdk::Result<pulsar_sdk::MessageId>> {
    f.now_or_never()
}

/// A 100 ms send timeout fires after 100 ms (within one check tick of 10 ms), never before,
/// for a message on its own and for a batch; paused time, so the instants are exact.
#[tokio::test(start_paused = true)]
async fn a_100ms_send_timeout_fires_at_100ms_not_before_nor_much_later() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    for batched in [false, true] {
        let topic = full(&format!("review-send-timeout-exact-{batched}"));
        let mut builder = client.producer(&topic).batching(false);
        if batched {
            builder = builder.batching_options(BatchingOptions {
                max_messages: 3,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            });
        }
        let producer = builder
            .send_timeout(Duration::from_millis(100))
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let n = if batched { 3 } else { 1 };
        let mut futs = Vec::new();
        for i in 0..n {
            futs.push(producer.send(format!("m{i}")).await.unwrap());
        }
        // Let the task take the messages (and build the entry) at this instant.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let start = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(99)).await;
        for f in &mut futs {
            assert!(
                done(f).is_none(),
                "batched {batched}: resolved before its 100 ms timeout ({:?})",
                start.elapsed()
            );
        }
        tokio::time::sleep_until(start + Duration::from_millis(112)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        for f in &mut futs {
            match done(f) {
                Some(Err(Error::Timeout { .. })) => {}
                other => panic!("batched {batched}: at 112 ms expected a timeout, got {other:?}"),
            }
        }
        broker.set_unresponsive(false);
        drop(producer);
    }
}

/// A producer dropped (with no close) while its sends are unanswered: every send resolves
/// (never hangs), and the client memory they held comes back, exactly: another producer of
/// the same client then fills the limit exactly once more.
#[tokio::test]
async fn a_dropped_producer_resolves_its_sends_and_gives_back_client_memory() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(300)
        .build()
        .unwrap();
    for round in 0..3 {
        let topic = full(&format!("review-dropped-producer-memory-{round}"));
        let producer = client
            .producer(&topic)
            .batching(round % 2 == 1)
            .send_timeout(Duration::ZERO)
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let mut futs = Vec::new();
        for _ in 0..3 {
            futs.push(producer.send(vec![1u8; 100]).await.unwrap());
        }
        match producer.send(vec![2u8; 1]).await {
            Err(Error::ProducerQueueFull(why)) => assert!(why.contains("memory"), "{why}"),
            other => panic!("round {round}: expected the memory limit, got {other:?}"),
        }
        drop(producer);
        // The dropped producer's close goes unanswered; it ends at the operation timeout at
        // the latest. Its sends resolve (to an error) rather than hang.
        broker.set_unresponsive(false);
        for r in within("sends of a dropped producer", join_all(futs)).await {
            assert!(r.is_err() || r.is_ok(), "{r:?}");
        }
    }
    // Every round gave its 300 bytes back: a last producer fills exactly 300 bytes.
    let producer = client
        .producer(full("review-dropped-producer-memory-last"))
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut held = Vec::new();
    for i in 0..3 {
        match producer.send(vec![3u8; 100]).await {
            Ok(f) => held.push(f),
            Err(e) => panic!("send {i}: memory not given back: {e:?}"),
        }
    }
    match producer.send(vec![4u8; 1]).await {
        Err(Error::ProducerQueueFull(why)) => assert!(why.contains("memory"), "{why}"),
        other => panic!("expected the memory limit, got {other:?}"),
    }
    broker.set_unresponsive(false);
    drop(held);
}
