//! Helpers shared by the mock-broker test files (`mod common;`).
#![allow(dead_code)]

use std::time::Duration;

use pulsar_sdk::{BackoffPolicy, ClientBuilder};

pub mod certs;

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
