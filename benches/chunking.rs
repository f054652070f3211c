//! Large messages (PIP-37 chunking): 20 MB messages produced and consumed through pulsar-lite
//! (default 5 MiB `max_message_size`, so each message is 4 or 5 chunks), this crate against
//! the official client (PyPI `pulsar-client`, the C++ client) in the same run.
//!
//! `cargo bench --bench chunking` prints one JSON line per side and phase, then a summary
//! with the ratios (ours / official). Environment: `CHUNK_BENCH_COUNT` (default 10 messages),
//! `CHUNK_BENCH_SIZE` (default 20,000,000 bytes), `CHUNK_BENCH_RECEIVER_QUEUE` (the
//! consumers' receiver queue size, both sides; default 1000, both clients' default).
//!
//! Every phase runs in its own child process (this binary re-executed with
//! `CHUNK_BENCH_RUN=produce|consume`, or the official client's script
//! `benches/chunking_official.py`), so its peak RSS (VmHWM / ru_maxrss) is its own:
//! * produce: `COUNT` messages of `SIZE` bytes (two payloads generated before the clock
//!   starts), pipelined, waiting for room when the client memory limit (64 MiB by default in
//!   both clients) is reached; timed from the first send to the last receipt.
//! * consume: a fresh Shared subscription from earliest reads the backlog until `COUNT`
//!   messages of `SIZE` bytes arrived, acking each; timed from subscribe. Default receiver
//!   queues on both sides.
//!
//! pulsar-lite can stall a backlog read after a large entry until the next publish or FLOW
//! (`shared/design/pulsar-lite.md`); while a consume phase runs, this process publishes a small
//! message every 500 ms to the topic (after the large ones, and skipped by both consumers), for
//! both sides alike.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::{Command, Stdio};
use std::time::Duration;

use pulsar_sdk::{Client, InitialPosition, SubscriptionType};
use serde_json::{json, Value};
use support::{unique_name, venv_python, PulsarLite};
use tokio::time::Instant;

const MB: f64 = 1_000_000.0;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(run) = std::env::var("CHUNK_BENCH_RUN") {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let out = rt.block_on(child(&run));
        println!("{out}");
        return;
    }
    let count = env_number("CHUNK_BENCH_COUNT", 10);
    let size = env_number("CHUNK_BENCH_SIZE", 20_000_000);
    let queue = env_number("CHUNK_BENCH_RECEIVER_QUEUE", 1000);
    let broker = PulsarLite::start();
    let url = broker.url();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut results = Vec::new();
    for side in ["ours", "official"] {
        let topic = unique_name(&format!("bench-chunking-{side}"));
        for phase in ["produce", "consume"] {
            let mut cmd = if side == "ours" {
                let mut c = Command::new(std::env::current_exe().expect("own path"));
                c.env("CHUNK_BENCH_RUN", phase);
                c
            } else {
                let mut c = Command::new(venv_python());
                c.arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/benches/chunking_official.py"
                ))
                .arg(phase);
                c
            };
            cmd.env("CHUNK_BENCH_URL", &url)
                .env("CHUNK_BENCH_TOPIC", &topic)
                .env("CHUNK_BENCH_COUNT", count.to_string())
                .env("CHUNK_BENCH_SIZE", size.to_string())
                .env("CHUNK_BENCH_RECEIVER_QUEUE", queue.to_string());
            if side == "official" {
                cmd.args([
                    &url,
                    &topic,
                    &count.to_string(),
                    &size.to_string(),
                    &queue.to_string(),
                ]);
            }
            let value = rt.block_on(run_phase(cmd, &url, &topic, phase == "consume"));
            let secs = value["secs"].as_f64().unwrap_or(f64::NAN);
            let bytes = value["bytes"].as_f64().unwrap_or(f64::NAN);
            let peak_mib = value["peak_rss_kib"].as_f64().unwrap_or(f64::NAN) / 1024.0;
            let line = json!({
                "side": side,
                "phase": phase,
                "messages": count,
                "size": size,
                "receiver_queue": queue,
                "mb_per_s": bytes / MB / secs,
                "secs": secs,
                "peak_rss_mib": peak_mib,
            });
            println!("{line}");
            results.push(line);
        }
    }
    let get = |side: &str, phase: &str, field: &str| {
        results
            .iter()
            .find(|r| r["side"] == side && r["phase"] == phase)
            .and_then(|r| r[field].as_f64())
            .unwrap_or(f64::NAN)
    };
    for phase in ["produce", "consume"] {
        let summary = json!({
            "summary": phase,
            "ours_mb_per_s": get("ours", phase, "mb_per_s"),
            "official_mb_per_s": get("official", phase, "mb_per_s"),
            "throughput_ratio": get("ours", phase, "mb_per_s") / get("official", phase, "mb_per_s"),
            "ours_peak_rss_mib": get("ours", phase, "peak_rss_mib"),
            "official_peak_rss_mib": get("official", phase, "peak_rss_mib"),
            "rss_ratio": get("ours", phase, "peak_rss_mib") / get("official", phase, "peak_rss_mib"),
        });
        println!("{summary}");
    }
    println!(
        "{}",
        json!({
            "note": "consume bound to check: peak RSS < 3 x largest message + receiver queue",
            "three_times_largest_mib": 3.0 * size as f64 / (1024.0 * 1024.0),
            "receiver_queue": queue,
        })
    );
}

/// Runs one phase's child; while a consume runs, nudges pulsar-lite with small messages.
async fn run_phase(mut cmd: Command, url: &str, topic: &str, nudge: bool) -> Value {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let child = tokio::task::spawn_blocking(move || cmd.output().expect("child runs"));
    let nudger = async {
        if !nudge {
            return std::future::pending::<()>().await;
        }
        let client = Client::builder().service_url(url).build().expect("client");
        let producer = client
            .producer(topic)
            .batching(false)
            .create()
            .await
            .expect("nudge producer");
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = producer.send("nudge").await;
        }
    };
    let out = tokio::select! {
        out = child => out.expect("child joined"),
        _ = nudger => unreachable!("nudging never ends"),
    };
    assert!(
        out.status.success(),
        "phase failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Peak resident set size of this process, from /proc (KiB).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn payload(size: usize, seed: u64) -> bytes::Bytes {
    let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// One phase of our side, in this (child) process.
async fn child(phase: &str) -> Value {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let url = var("CHUNK_BENCH_URL");
    let topic = var("CHUNK_BENCH_TOPIC");
    let count: usize = var("CHUNK_BENCH_COUNT").parse().expect("count");
    let size: usize = var("CHUNK_BENCH_SIZE").parse().expect("size");
    let queue: u32 = var("CHUNK_BENCH_RECEIVER_QUEUE").parse().expect("queue");
    let client = Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let mut total = 0usize;
    let start;
    if phase == "produce" {
        let producer = client
            .producer(&topic)
            .chunking(true)
            .block_if_queue_full(true)
            .send_timeout(Duration::from_secs(120))
            .create()
            .await
            .expect("producer");
        let payloads = [payload(size, 1), payload(size, 2)];
        start = Instant::now();
        let mut receipts = Vec::with_capacity(count);
        for i in 0..count {
            receipts.push(producer.send(payloads[i % 2].clone()).await.expect("send"));
            total += size;
        }
        for r in receipts {
            r.await.expect("receipt");
        }
    } else {
        start = Instant::now();
        let mut consumer = client
            .consumer(&topic)
            .subscription("bench-ours")
            .subscription_type(SubscriptionType::Shared)
            .initial_position(InitialPosition::Earliest)
            .receiver_queue_size(queue)
            .subscribe()
            .await
            .expect("consumer");
        let mut got = 0;
        while got < count {
            let m = tokio::time::timeout(Duration::from_secs(180), consumer.recv())
                .await
                .expect("a message within 180 s")
                .expect("a message");
            consumer.ack(&m).expect("ack");
            if m.payload.len() >= size {
                got += 1;
                total += m.payload.len();
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_kib();
    client.close().await.ok();
    json!({"bytes": total, "secs": secs, "peak_rss_kib": peak})
}
