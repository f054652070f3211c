//! Throughput and latency numbers, one JSON line:
//! `{"peer","mode","n","size","seconds","msg_per_s","p50_us","p99_us","cpu_s","max_rss_kb",
//! "max_pending"}`.
//!
//! cargo run --release --example perf -- --url U --topic T --mode produce|consume|latency
//!   --n N --size BYTES
//!
//! - produce: batching on (1000 messages / 128 KiB / 5 ms), pipelined sends, checks every
//!   receipt: those already resolved are taken every 256 sends (as an application handles
//!   receipts while it keeps sending; the rest are awaited at the end), so the run holds
//!   receipts only of sends still pending. `max_pending` is the most messages pending at
//!   once (sampled every millisecond): the client keeps each payload until its receipt, so
//!   `max_rss_kb` grows with it (by about the payload plus 50 bytes a message: its record in
//!   the batch, its receipt slot, the run's `SendFuture`) when the broker falls behind.
//!   `--max-outstanding N` bounds it (the producer's
//!   `max_pending_messages`, blocking when full, like upstream `pulsar-perf produce -o N`);
//!   the default is no bound, only the client's memory limit;
//! - consume: Exclusive subscription `bench-sub` from Earliest, receiver queue 1000, acks each
//!   (`--type shared` for a Shared one). Against pulsar-lite use `--type shared`: its
//!   Exclusive dispatch of a large batched backlog repeats entries far past the flow permits
//!   (a known pulsar-lite bug), which the client reports as a flow-control violation;
//! - latency: batching off, N sequential awaited sends; p50/p99 in microseconds.
//!
//! `cpu_s` is the process's user + system time (getrusage).
//!
//! `--stats` prints the producer's or consumer's [`stats`](pulsar_sdk::stats) snapshot (Debug)
//! on stderr at the end. `--metrics` (cargo feature `metrics`) installs a Prometheus recorder
//! (no HTTP listener) so the client's metrics are recorded during the run; with `--stats` the
//! rendered text goes to stderr too. Running with and without them compares the cost.
//! `--schema json|avro` (produce and consume): messages are `Record { id, name, value }`
//! structs (`name` padded to about `--size` bytes) sent by a typed producer with a JSON or
//! Avro schema and received by a typed consumer, which decodes each one. The consumer then
//! times, for every message received, decoding its payload again with the schema and
//! "decoding" it as bytes (`BytesSchema`, a copy) back to back, and adds to the line
//! `"schema"`, `"decode_ns_per_msg"` (schema) and `"bytes_ns_per_msg"` (bytes): the decode
//! cost against bytes, measured in the same run on the same payloads.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{die, fail, Args};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::schema::{AvroSchema, BytesSchema, JsonSchema, Schema};
use pulsar_sdk::{Client, InitialPosition, SubscriptionType};
use serde::{Deserialize, Serialize};

const USAGE: &str = "usage: perf --url U --topic T --mode produce|consume|latency --n N \
--size BYTES [--type exclusive|shared] [--schema json|avro] [--max-outstanding N] [--stats] \
[--metrics]";

/// The typed message of `--schema`.
#[derive(Debug, Serialize, Deserialize, apache_avro::AvroSchema)]
struct Record {
    id: i64,
    name: String,
    value: f64,
}

fn batching() -> BatchingOptions {
    BatchingOptions {
        max_messages: 1000,
        max_bytes: 128 * 1024,
        max_publish_delay: Duration::from_millis(5),
        key_based: false,
    }
}

/// The receipts of pipelined sends, checked as they resolve: every [`CHECK_EVERY`] sends the
/// resolved ones at the front are taken (receipts resolve in send order), so only those of
/// pending sends are held; [`Receipts::finish`] awaits the rest.
struct Receipts<F> {
    pending: std::collections::VecDeque<F>,
    sent: usize,
}

/// How many sends go between two checks of the resolved receipts.
const CHECK_EVERY: usize = 256;

impl<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>> + Unpin> Receipts<F> {
    fn new() -> Self {
        Receipts {
            pending: std::collections::VecDeque::new(),
            sent: 0,
        }
    }

    fn push(&mut self, receipt: F) {
        self.pending.push_back(receipt);
        self.sent += 1;
        if self.sent % CHECK_EVERY == 0 {
            while let Some(front) = self.pending.front_mut() {
                match futures::FutureExt::now_or_never(front) {
                    Some(r) => {
                        r.unwrap_or_else(|e| die(e));
                        self.pending.pop_front();
                    }
                    None => break,
                }
            }
        }
    }

    async fn finish(self) {
        for f in self.pending {
            f.await.unwrap_or_else(|e| die(e));
        }
    }
}

/// Produces `n` records with a typed producer.
async fn produce_typed<S: Schema<Type = Record>>(
    client: &Client,
    topic: &str,
    schema: S,
    n: usize,
    size: usize,
) {
    let producer = client
        .producer(topic)
        .batching_options(batching())
        .block_if_queue_full(true)
        .schema(schema)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    let name = "x".repeat(size.saturating_sub(16));
    let mut receipts = Receipts::new();
    for i in 0..n {
        let r = Record {
            id: i as i64,
            name: name.clone(),
            value: i as f64 * 0.5,
        };
        receipts.push(producer.send(&r).await.unwrap_or_else(|e| die(e)));
    }
    receipts.finish().await;
    producer.close().await.unwrap_or_else(|e| die(e));
}

/// Consumes `n` records with a typed consumer; the decode cost per message of the schema and
/// of bytes, in nanoseconds, timed on the received payloads.
async fn consume_typed<S: Schema<Type = Record>>(
    client: &Client,
    topic: &str,
    sub_type: SubscriptionType,
    schema: S,
    n: usize,
) -> (f64, f64) {
    let mut consumer = client
        .consumer(topic)
        .subscription("bench-sub")
        .subscription_type(sub_type)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1000)
        .schema(schema)
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let (mut schema_ns, mut bytes_ns) = (0u128, 0u128);
    let watchdog = Watchdog::start();
    for i in 0..n {
        let m = consumer.recv().await.unwrap_or_else(|e| die(e));
        watchdog.received(i);
        if let Err(e) = m.value() {
            die(e);
        }
        let t = Instant::now();
        let v = consumer.schema().decode(m.payload(), None);
        schema_ns += t.elapsed().as_nanos();
        std::hint::black_box(v.map(|r| r.id).unwrap_or_else(|e| die(e)));
        let t = Instant::now();
        let b = BytesSchema.decode(m.payload(), None);
        bytes_ns += t.elapsed().as_nanos();
        std::hint::black_box(b.map(|b| b.len()).unwrap_or_default());
        consumer.ack(&m).unwrap_or_else(|e| die(e));
    }
    watchdog.stop();
    consumer.close().await.unwrap_or_else(|e| die(e));
    let per = |ns: u128| ns as f64 / n.max(1) as f64;
    (per(schema_ns), per(bytes_ns))
}

/// Ends a consume run that received nothing for 30 s. It checks once a second, off the
/// measured loop: a `timeout` around each `recv` read the clock and the runtime handle for
/// every message, about 5% of a consume run's CPU charged to the client.
struct Watchdog {
    received: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Watchdog {
    fn start() -> Self {
        let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = received.clone();
        let task = tokio::spawn(async move {
            let (mut last, mut idle) = (0, 0);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let now = seen.load(std::sync::atomic::Ordering::Relaxed);
                idle = if now == last { idle + 1 } else { 0 };
                last = now;
                if idle >= 30 {
                    die("timed out waiting for messages");
                }
            }
        });
        Watchdog { received, task }
    }

    /// Message `i` (from 0) arrived: a plain store, no clock.
    fn received(&self, i: usize) {
        self.received
            .store(i + 1, std::sync::atomic::Ordering::Relaxed);
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// The most messages the produce run had pending at once (sent, not yet receipted), sampled
/// every millisecond from the producer's stats: the run's peak RSS holds their payloads (the
/// client keeps each until its receipt), so it says how far the broker fell behind.
struct PeakPending {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakPending {
    fn start(producer: pulsar_sdk::Producer) -> Self {
        use std::sync::atomic::Ordering;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = peak.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                seen.fetch_max(producer.stats().totals.pending_messages, Ordering::Relaxed);
            }
        });
        PeakPending { peak, task }
    }

    fn stop(self) -> u64 {
        self.task.abort();
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

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
        &[
            "url",
            "topic",
            "mode",
            "n",
            "size",
            "type",
            "schema",
            "max-outstanding",
        ],
        &["stats", "metrics"],
    );
    let schema = args.get("schema").map(str::to_owned);
    if let Some(s) = schema.as_deref() {
        if s != "json" && s != "avro" {
            fail(USAGE, &format!("unknown --schema `{s}`"));
        }
    }
    let mut decode = None;
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
    let mut max_pending = None;
    let (cpu0, _) = rusage();
    let started;
    match (mode.as_str(), schema.as_deref()) {
        ("produce", Some(s)) => {
            started = Instant::now();
            if s == "json" {
                let schema = JsonSchema::<Record>::derived().unwrap_or_else(|e| die(e));
                produce_typed(&client, &topic, schema, n, size).await;
            } else {
                let schema = AvroSchema::<Record>::derived().unwrap_or_else(|e| die(e));
                produce_typed(&client, &topic, schema, n, size).await;
            }
        }
        ("consume", Some(s)) => {
            started = Instant::now();
            decode = Some(if s == "json" {
                let schema = JsonSchema::<Record>::derived().unwrap_or_else(|e| die(e));
                consume_typed(&client, &topic, sub_type, schema, n).await
            } else {
                let schema = AvroSchema::<Record>::derived().unwrap_or_else(|e| die(e));
                consume_typed(&client, &topic, sub_type, schema, n).await
            });
        }
        (_, Some(_)) => fail(USAGE, "--schema goes with --mode produce or consume"),
        ("produce", None) => {
            let producer = client
                .producer(&topic)
                .batching_options(batching())
                .block_if_queue_full(true)
                .max_pending_messages(args.number(USAGE, "max-outstanding", 0))
                .create()
                .await
                .unwrap_or_else(|e| die(e));
            started = Instant::now();
            let sampler = PeakPending::start(producer.clone());
            let mut receipts = Receipts::new();
            for _ in 0..n {
                receipts.push(
                    producer
                        .send(payload.clone())
                        .await
                        .unwrap_or_else(|e| die(e)),
                );
            }
            receipts.finish().await;
            max_pending = Some(sampler.stop());
            producer.close().await.unwrap_or_else(|e| die(e));
            if print_stats {
                eprintln!("{:#?}", producer.stats());
            }
        }
        ("consume", None) => {
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
            let watchdog = Watchdog::start();
            for i in 0..n {
                let m = consumer.recv().await.unwrap_or_else(|e| die(e));
                watchdog.received(i);
                consumer.ack(&m).unwrap_or_else(|e| die(e));
            }
            watchdog.stop();
            consumer.close().await.unwrap_or_else(|e| die(e));
            if print_stats {
                eprintln!("{:#?}", consumer.stats());
            }
        }
        ("latency", None) => {
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
        (other, None) => fail(USAGE, &format!("unknown --mode `{other}`")),
    }
    let seconds = started.elapsed().as_secs_f64();
    let (cpu1, max_rss_kb) = rusage();
    if let (true, Some(Some(handle))) = (print_stats, &prometheus) {
        eprintln!("{}", render_metrics(handle));
    }
    latencies.sort();
    let mut line = serde_json::json!({
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
            "max_pending": max_pending,
    });
    if let Some(s) = &schema {
        line["schema"] = serde_json::json!(s);
    }
    if let Some((schema_ns, bytes_ns)) = decode {
        line["decode_ns_per_msg"] = serde_json::json!(schema_ns);
        line["bytes_ns_per_msg"] = serde_json::json!(bytes_ns);
    }
    println!("{line}");
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
