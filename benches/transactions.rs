//! Transactional produce (PIP-31) against plain produce, on the crate's mock broker (loopback
//! TCP, one process): throughput of `COUNT` messages sent in transactions of 1, 10 and 100
//! messages each (begin, the sends pipelined, commit: the commit waits for their receipts),
//! and of the same messages sent plainly, pipelined (unbatched, as transactional messages
//! are never batched; and batched, the default).
//!
//! `cargo bench --bench transactions` prints one line per case. Environment:
//! `TXN_BENCH_COUNT` (default 20,000 messages), `TXN_BENCH_SIZE` (payload bytes, default 100).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTransactions};
use pulsar_sdk::{Client, ProducerMessage};
use tokio::time::Instant;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn plain(
    client: &Client,
    topic: &str,
    batching: bool,
    count: usize,
    payload: &[u8],
) -> Duration {
    let p = client
        .producer(topic)
        .batching(batching)
        .create()
        .await
        .unwrap();
    let started = Instant::now();
    let mut receipts = Vec::with_capacity(count);
    for _ in 0..count {
        receipts.push(p.send(payload.to_vec()).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
    let took = started.elapsed();
    p.close().await.unwrap();
    took
}

async fn transactional(
    client: &Client,
    topic: &str,
    per_txn: usize,
    count: usize,
    payload: &[u8],
) -> Duration {
    let p = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..count / per_txn {
        let txn = client.transaction().begin().await.unwrap();
        for _ in 0..per_txn {
            // The receipts are not awaited here: the commit waits for them.
            let _receipt = p
                .send(ProducerMessage::new(payload.to_vec()).transaction(&txn))
                .await
                .unwrap();
        }
        txn.commit().await.unwrap();
    }
    let took = started.elapsed();
    p.close().await.unwrap();
    took
}

fn report(case: &str, count: usize, took: Duration, plain: Option<Duration>) {
    let rate = count as f64 / took.as_secs_f64();
    let vs = plain.map_or(String::new(), |p| {
        format!(
            ", {:.2}x the time of plain unbatched",
            took.as_secs_f64() / p.as_secs_f64()
        )
    });
    println!("{case:<32} {count} messages in {took:>10.3?}: {rate:>9.0} msg/s{vs}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env_number("TXN_BENCH_COUNT", 20_000);
    let size = env_number("TXN_BENCH_SIZE", 100);
    let payload = vec![b'x'; size];
    let broker = MockBroker::start_with(MockBrokerConfig {
        transactions: MockTransactions::Enabled,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .enable_transaction(true)
        .build()
        .unwrap();
    // Warm-up: the connection, the coordinator discovery, a first transaction.
    transactional(&client, "warm-up", 10, 100, &payload).await;
    let unbatched = plain(&client, "plain-unbatched", false, count, &payload).await;
    report("plain, unbatched", count, unbatched, None);
    let batched = plain(&client, "plain-batched", true, count, &payload).await;
    report("plain, batched", count, batched, Some(unbatched));
    for per_txn in [1, 10, 100] {
        let topic = format!("txn-{per_txn}");
        let took = transactional(&client, &topic, per_txn, count, &payload).await;
        report(
            &format!("{per_txn} per transaction"),
            count,
            took,
            Some(unbatched),
        );
    }
    client.close().await.unwrap();
}
