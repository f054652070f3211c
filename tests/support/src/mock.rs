//! Helpers for tests against the mock broker (re-exported at the crate root; files of the
//! mock tier import them as `use support as common;`).

use std::time::Duration;

use pulsar_sdk::{BackoffPolicy, Client, ClientBuilder, Consumer, Message};

/// A client builder for tests: `RUST_LOG` turns on logging, and reconnects retry quickly
/// (20 ms → 500 ms) so faults are recovered from within a test's patience.
pub fn test_client(url: &str) -> ClientBuilder {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    pulsar_sdk::Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(10))
        .backoff(BackoffPolicy {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(500),
            ..Default::default()
        })
}

/// Waits (up to 10 s) until `cond` holds, checking every 20 ms.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}

/// `persistent://public/default/<topic>`.
pub fn full(topic: &str) -> String {
    format!("persistent://public/default/{topic}")
}

/// Awaits `fut`, failing the test if it takes longer than 10 s.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing after 10 s"))
}

/// A producer that sends every message as its own entry.
pub async fn unbatched_producer(client: &pulsar_sdk::Client, topic: &str) -> pulsar_sdk::Producer {
    client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap()
}

/// Publishes `prefix-0 .. prefix-{n-1}` one entry each and returns their ids.
pub async fn publish(
    producer: &pulsar_sdk::Producer,
    prefix: &str,
    n: usize,
) -> Vec<pulsar_sdk::MessageId> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            producer
                .send_and_wait(format!("{prefix}-{i}"))
                .await
                .unwrap(),
        );
    }
    ids
}

/// Publishes `b-0 .. b-{n-1}` as one batch entry and returns their ids.
pub async fn publish_batch(
    client: &pulsar_sdk::Client,
    topic: &str,
    n: usize,
) -> Vec<pulsar_sdk::MessageId> {
    let producer = client
        .producer(topic)
        .batching_options(pulsar_sdk::producer::BatchingOptions {
            max_publish_delay: Duration::from_secs(30),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(producer.send(format!("b-{i}")).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut ids = Vec::new();
    for r in receipts {
        ids.push(r.await.unwrap());
    }
    producer.close().await.unwrap();
    ids
}

/// A client for tests (see [`test_client`]).
pub fn client(url: &str) -> Client {
    test_client(url).build().expect("valid config")
}

/// The consumer's next message, within the test's patience.
pub async fn recv(c: &mut Consumer) -> Message {
    within("recv", c.recv()).await.expect("a message")
}
