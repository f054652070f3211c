//! Throughput and latency numbers, one JSON line:
//! `{"peer","mode","n","size","seconds","msg_per_s","p50_us","p99_us","cpu_s","max_rss_kb"}`.
//!
//! cargo run --release --example perf -- --url U --topic T --mode produce|consume|latency
//!   --n N --size BYTES
//!
//! - produce: batching on (1000 messages / 128 KiB / 5 ms), pipelined sends, waits for every
//!   receipt;
//! - consume: Exclusive subscription `bench-sub` from Earliest, receiver queue 1000, acks each
//!   (`--type shared` for a Shared one);
//! - latency: batching off, N sequential awaited sends; p50/p99 in microseconds.
//!
//! `cpu_s` is the process's user + system time (getrusage).
//!
//! `--stats` prints the producer's or consumer's [`stats`](pulsar_sdk::stats) snapshot (Debug)
//! on stderr at the end. `--metrics` (cargo feature `metrics`) installs a Prometheus recorder
//! (no HTTP listener) so the client's metrics are recorded during the run; with `--stats` the
//! rendered text goes to stderr too. Running with and without them compares the cost.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{die, fail, Args};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{InitialPosition, SubscriptionType};

const USAGE: &str = "usage: perf --url U --topic T --mode produce|consume|latency --n N \
--size BYTES [--type exclusive|shared] [--stats] [--metrics]";

fn rusage() -> (f64, i64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime) + secs(ru.ru_stime), ru.ru_maxrss)
}

fn percentile(sorted: &[Duration], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Some(sorted[i].as_secs_f64() * 1e6)
}

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &["url", "topic", "mode", "n", "size", "type"],
        &["stats", "metrics"],
    );
    let print_stats = args.flag("stats");
    let prometheus = args.flag("metrics").then(install_metrics);
    // Consume mode's subscription type: Exclusive by default; Shared avoids pulsar-lite's
    // duplicate dispatch on Exclusive subscriptions.
    let sub_type = match args.get("type").unwrap_or("exclusive") {
        "exclusive" => SubscriptionType::Exclusive,
        "shared" => SubscriptionType::Shared,
        other => fail(USAGE, &format!("unknown --type `{other}`")),
    };
    let topic = args.required(USAGE, "topic");
    let mode = args.required(USAGE, "mode");
    let n: usize = args.number(USAGE, "n", 100_000);
    let size: usize = args.number(USAGE, "size", 100);
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));
    let payload = Bytes::from(vec![b'x'; size]);
    let mut latencies = Vec::new();
    let (cpu0, _) = rusage();
    let started;
    match mode.as_str() {
        "produce" => {
            let producer = client
                .producer(&topic)
                .batching_options(BatchingOptions {
                    max_messages: 1000,
                    max_bytes: 128 * 1024,
                    max_publish_delay: Duration::from_millis(5),
                    key_based: false,
                })
                .block_if_queue_full(true)
                .create()
                .await
                .unwrap_or_else(|e| die(e));
            started = Instant::now();
            let mut pending = std::collections::VecDeque::with_capacity(n);
            for _ in 0..n {
                pending.push_back(
                    producer
                        .send(payload.clone())
                        .await
                        .unwrap_or_else(|e| die(e)),
                );
            }
            for f in pending {
                f.await.unwrap_or_else(|e| die(e));
            }
            producer.close().await.unwrap_or_else(|e| die(e));
            if print_stats {
                eprintln!("{:#?}", producer.stats());
            }
        }
        "consume" => {
            let mut consumer = client
                .consumer(&topic)
                .subscription("bench-sub")
                .subscription_type(sub_type)
                .initial_position(InitialPosition::Earliest)
                .receiver_queue_size(1000)
                .subscribe()
                .await
                .unwrap_or_else(|e| die(e));
            started = Instant::now();
            for _ in 0..n {
                let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                    .await
                    .unwrap_or_else(|_| die("timed out waiting for messages"))
                    .unwrap_or_else(|e| die(e));
                consumer.ack(&m).unwrap_or_else(|e| die(e));
            }
            consumer.close().await.unwrap_or_else(|e| die(e));
            if print_stats {
                eprintln!("{:#?}", consumer.stats());
            }
        }
        "latency" => {
            let producer = client
                .producer(&topic)
                .batching(false)
                .create()
                .await
                .unwrap_or_else(|e| die(e));
            started = Instant::now();
            latencies.reserve(n);
            for _ in 0..n {
                let t = Instant::now();
                producer
                    .send_and_wait(payload.clone())
                    .await
                    .unwrap_or_else(|e| die(e));
                latencies.push(t.elapsed());
            }
            producer.close().await.unwrap_or_else(|e| die(e));
            if print_stats {
                eprintln!("{:#?}", producer.stats());
            }
        }
        other => fail(USAGE, &format!("unknown --mode `{other}`")),
    }
    let seconds = started.elapsed().as_secs_f64();
    let (cpu1, max_rss_kb) = rusage();
    if let (true, Some(Some(handle))) = (print_stats, &prometheus) {
        eprintln!("{}", render_metrics(handle));
    }
    latencies.sort();
    println!(
        "{}",
        serde_json::json!({
            "peer": "pulsar-sdk",
            "mode": mode,
            "n": n,
            "size": size,
            "seconds": seconds,
            "msg_per_s": n as f64 / seconds,
            "p50_us": percentile(&latencies, 0.50),
            "p99_us": percentile(&latencies, 0.99),
            "cpu_s": cpu1 - cpu0,
            "max_rss_kb": max_rss_kb,
        })
    );
}

#[cfg(feature = "metrics")]
type Prometheus = metrics_exporter_prometheus::PrometheusHandle;
#[cfg(not(feature = "metrics"))]
type Prometheus = ();

/// Installs a Prometheus recorder (rendered on demand, no listener).
#[cfg(feature = "metrics")]
fn install_metrics() -> Option<Prometheus> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .unwrap_or_else(|e| die(e));
    pulsar_sdk::metrics::describe();
    // Upkeep drains histogram samples, as an application's exporter does.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Some(handle)
}

#[cfg(not(feature = "metrics"))]
fn install_metrics() -> Option<Prometheus> {
    fail(USAGE, "--metrics needs the `metrics` cargo feature")
}

#[cfg(feature = "metrics")]
fn render_metrics(handle: &Prometheus) -> String {
    handle.render()
}

#[cfg(not(feature = "metrics"))]
fn render_metrics(_: &Prometheus) -> String {
    String::new()
}
