//! Instructions per message of the client's hot paths (issue #18), counted by valgrind's
//! callgrind, which counts instructions repeatably on a noisy machine.
//!
//! `cargo bench --bench hot_paths` (release build) prints one JSON line per loop:
//! `{"loop","n1","n2","instructions_n1","instructions_n2","instructions_per_msg","size"}`.
//!
//! * `produce`: 100-byte messages, batching on (1000 messages / 128 KiB; the publish delay is
//!   1 s so that batches are cut by count, not by how slow valgrind makes the loop),
//!   pipelined sends (receipts kept and awaited at the end; `examples/perf` takes the resolved
//!   ones every 256 sends instead, polling each receipt once more).
//! * `consume`: a Shared subscription from earliest over a backlog of batched 100-byte
//!   messages, receiver queue 1000, an ack per message (default ack grouping), as
//!   `examples/perf --mode consume --type shared` does.
//! * `produce_unbatched` and `consume_unbatched`: the same with batching off (one entry, one
//!   frame and one receipt per message), where per-frame costs are paid per message.
//! * `consume_batch`: the `consume` loop with `batch_recv` (batches of up to
//!   [`BATCH`] messages) and one `ack_all` per batch instead of `recv` and `ack`. Run it with
//!   `consume` (`HOT_PATHS_LOOPS=consume,consume_batch`): a last line gives the ratio of its
//!   instructions per message to `consume`'s.
//! * `read` and `table_view` (issue #37): a backlog of batched 100-byte messages with 1000
//!   distinct keys, read by a reader from earliest (`recv` in a loop), and by a table view
//!   (`create` returns once it has read them all into its map; values as bytes). The
//!   difference is the view's cost per message over the reader's `recv` under it.
//!
//! Each loop runs twice, with `N1` and `N2` messages, each time in a fresh process under
//! `valgrind --tool=callgrind` (this binary re-executed with `HOT_PATHS_RUN=produce|consume`);
//! instructions per message are `(I(N2) - I(N1)) / (N2 - N1)`, so the setup (runtime, connect,
//! lookup, producer or subscription creation, close) cancels. The broker is the crate's mock
//! broker in another process (this binary with `HOT_PATHS_RUN=broker`, not under valgrind), so
//! only the client's instructions are counted. The client runs on a current-thread runtime, so
//! the counts do not depend on how threads interleave.
//!
//! Environment: `HOT_PATHS_N1` (default 10,000), `HOT_PATHS_N2` (default 50,000),
//! `HOT_PATHS_LOOPS` (default `produce,consume`; the unbatched, `read` and `table_view` loops
//! run when named), `HOT_PATHS_VALGRIND` (default `valgrind`),
//! `HOT_PATHS_INTERCEPT` (`none`, the default; `noop`: one interceptor with empty hooks on the
//! producer and the consumer; `tracing`: OpenTelemetry tracing on, with an SDK tracer provider
//! that records spans and exports none), `HOT_PATHS_OUT` (a directory: keep the callgrind output files there, named
//! `callgrind.<loop>.<n>`, for `callgrind_annotate`; default: a temporary directory removed at
//! the end).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, InitialPosition, ProducerMessage, SubscriptionType};
use serde_json::json;

const SIZE: usize = 100;
/// The `consume_batch` loop's `max_num_messages`.
const BATCH: u32 = 100;
const TOPIC: &str = "persistent://public/default/hot-paths";
/// Distinct keys of the `read` and `table_view` loops' backlog.
const KEYS: u64 = 1000;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn batching() -> BatchingOptions {
    BatchingOptions {
        max_messages: 1000,
        max_bytes: 128 * 1024,
        max_publish_delay: Duration::from_secs(1),
        key_based: false,
    }
}

fn client(url: &str) -> Client {
    let builder = Client::builder().service_url(url);
    let builder = if intercept() == "tracing" {
        use opentelemetry::trace::TracerProvider as _;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        builder.tracer(provider.tracer("hot-paths"))
    } else {
        builder
    };
    builder.build().expect("client config")
}

/// `HOT_PATHS_INTERCEPT` (see the module docs).
fn intercept() -> String {
    std::env::var("HOT_PATHS_INTERCEPT").unwrap_or_else(|_| "none".into())
}

/// An interceptor whose hooks are all the empty defaults.
struct Noop;
impl pulsar_sdk::interceptor::ProducerInterceptor for Noop {}
impl pulsar_sdk::interceptor::ConsumerInterceptor for Noop {}

/// Sends `n` messages with pipelined sends and waits for every receipt; `batched` picks
/// batching on (the options above) or off (one entry, one receipt per message); `keys` > 0
/// gives message `i` the key `k{i % keys}`.
async fn produce(url: &str, n: u64, batched: bool, keys: u64) {
    let client = client(url);
    let producer = client.producer(TOPIC);
    let producer = if batched {
        producer.batching_options(batching())
    } else {
        producer.batching(false)
    };
    let producer = if intercept() == "noop" {
        producer.interceptor(Noop)
    } else {
        producer
    };
    let producer = producer
        .block_if_queue_full(true)
        .create()
        .await
        .expect("producer");
    let payload = Bytes::from(vec![b'x'; SIZE]);
    let mut pending = std::collections::VecDeque::with_capacity(n as usize);
    for i in 0..n {
        // Without keys, the payload alone (as `examples/perf` sends, and as this loop did when
        // issue #32's baseline was taken): wrapping it in a `ProducerMessage` first measured
        // the bench's own moves of the message (~100 instructions per message) with the send.
        let receipt = if keys > 0 {
            let msg = ProducerMessage::new(payload.clone()).key(format!("k{}", i % keys));
            producer.send(msg).await
        } else {
            producer.send(payload.clone()).await
        };
        pending.push_back(receipt.expect("send"));
    }
    producer.flush().await.expect("flush");
    for f in pending {
        f.await.expect("receipt");
    }
    producer.close().await.expect("close producer");
    client.close().await.expect("close client");
}

/// Receives and acks `n` messages on a Shared subscription from earliest.
async fn consume(url: &str, n: u64) {
    let client = client(url);
    let consumer = client
        .consumer(TOPIC)
        .subscription("hot-paths")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1000);
    let consumer = if intercept() == "noop" {
        consumer.interceptor(Noop)
    } else {
        consumer
    };
    let mut consumer = consumer.subscribe().await.expect("consumer");
    // No timeout around each `recv` (its timer would be counted as the client's): the child's
    // watchdog (see `main`) ends a run that hangs.
    for _ in 0..n {
        let m = consumer.recv().await.expect("a message");
        consumer.ack(&m).expect("ack");
    }
    consumer.close().await.expect("close consumer");
    client.close().await.expect("close client");
}

/// Receives and acks `n` messages as [`consume`] does, in batches of up to [`BATCH`].
async fn consume_batch(url: &str, n: u64) {
    let client = client(url);
    let consumer = client
        .consumer(TOPIC)
        .subscription("hot-paths")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1000)
        .batch_receive_policy(pulsar_sdk::BatchReceivePolicy::default().max_num_messages(BATCH));
    let consumer = if intercept() == "noop" {
        consumer.interceptor(Noop)
    } else {
        consumer
    };
    let mut consumer = consumer.subscribe().await.expect("consumer");
    let mut received = 0u64;
    while received < n {
        let batch = consumer.batch_recv().await.expect("a batch");
        consumer.ack_all(&batch).expect("ack");
        received += batch.len() as u64;
    }
    consumer.close().await.expect("close consumer");
    client.close().await.expect("close client");
}

/// Reads `n` messages with a reader from earliest.
async fn read(url: &str, n: u64) {
    let client = client(url);
    let mut reader = client
        .reader(TOPIC)
        .start_earliest()
        .create()
        .await
        .expect("reader");
    for _ in 0..n {
        reader.recv().await.expect("a message");
    }
    reader.close().await.expect("close reader");
    client.close().await.expect("close client");
}

/// Builds a table view of the `n` messages (`create` returns once all are in its map).
async fn table_view(url: &str, n: u64) {
    let client = client(url);
    let view = client.table_view(TOPIC).create().await.expect("table view");
    assert_eq!(view.len() as u64, n.min(KEYS));
    view.close().await.expect("close view");
    client.close().await.expect("close client");
}

/// The mock broker process: preloads `HOT_PATHS_PRELOAD` messages, prints its URL, and
/// serves until its stdin closes.
fn broker() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let broker = rt.block_on(MockBroker::start()).expect("mock broker");
    let url = broker.service_url();
    let preload = env_number("HOT_PATHS_PRELOAD", 0);
    if preload > 0 {
        let batched = std::env::var("HOT_PATHS_PRELOAD_BATCHED").map_or(true, |v| v != "0");
        let keys = env_number("HOT_PATHS_PRELOAD_KEYS", 0);
        rt.block_on(produce(&url, preload, batched, keys));
    }
    println!("{url}");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    rt.block_on(broker.shutdown());
}

/// The total instruction count (`Ir`) of a callgrind output file.
fn total_instructions(file: &Path) -> u64 {
    let text = std::fs::read_to_string(file).expect("callgrind output");
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a totals line in the callgrind output")
}

/// Runs one loop of `n` messages under callgrind against a fresh mock broker process.
fn measure(which: &str, n: u64, out_dir: &Path) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let mut broker = Command::new(&exe)
        .env("HOT_PATHS_RUN", "broker")
        .env(
            "HOT_PATHS_PRELOAD",
            if which.starts_with("produce") { 0 } else { n }.to_string(),
        )
        .env(
            "HOT_PATHS_PRELOAD_KEYS",
            if ["read", "table_view"].contains(&which) {
                KEYS
            } else {
                0
            }
            .to_string(),
        )
        .env(
            "HOT_PATHS_PRELOAD_BATCHED",
            if which.ends_with("_unbatched") {
                "0"
            } else {
                "1"
            },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("broker process");
    let mut url = String::new();
    BufReader::new(broker.stdout.take().expect("stdout"))
        .read_line(&mut url)
        .expect("broker url");
    let out_file = out_dir.join(format!("callgrind.{which}.{n}"));
    let valgrind = std::env::var("HOT_PATHS_VALGRIND").unwrap_or_else(|_| "valgrind".into());
    let status = Command::new(valgrind)
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&exe)
        .env("HOT_PATHS_RUN", which)
        .env("HOT_PATHS_URL", url.trim())
        .env("HOT_PATHS_COUNT", n.to_string())
        .stderr(Stdio::null())
        .status()
        .expect("valgrind (install it: apt-get install valgrind)");
    assert!(status.success(), "{which} with {n} messages: {status}");
    drop(broker.stdin.take());
    let _ = broker.wait();
    total_instructions(&out_file)
}

fn main() {
    if let Ok(run) = std::env::var("HOT_PATHS_RUN") {
        if run == "broker" {
            return broker();
        }
        let url = std::env::var("HOT_PATHS_URL").expect("HOT_PATHS_URL");
        let n = env_number("HOT_PATHS_COUNT", 1000);
        // A run that hangs (a lost message, a broker that stopped answering) fails after ten
        // minutes instead of blocking the bench forever.
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(600));
            eprintln!("hot_paths: the run did not finish within 10 minutes");
            std::process::exit(2);
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        match run.as_str() {
            "produce" => rt.block_on(produce(&url, n, true, 0)),
            "produce_unbatched" => rt.block_on(produce(&url, n, false, 0)),
            "read" => rt.block_on(read(&url, n)),
            "table_view" => rt.block_on(table_view(&url, n)),
            // The same loop; only the backlog differs (one entry per message).
            "consume" | "consume_unbatched" => rt.block_on(consume(&url, n)),
            "consume_batch" => rt.block_on(consume_batch(&url, n)),
            other => panic!("unknown HOT_PATHS_RUN {other}"),
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        // `cargo test --benches` and `cargo bench -- --list` probe the harness; nothing to list.
        return;
    }
    let n1 = env_number("HOT_PATHS_N1", 10_000);
    let n2 = env_number("HOT_PATHS_N2", 50_000);
    assert!(n2 > n1, "HOT_PATHS_N2 must be larger than HOT_PATHS_N1");
    let loops = std::env::var("HOT_PATHS_LOOPS").unwrap_or_else(|_| "produce,consume".into());
    let keep = std::env::var("HOT_PATHS_OUT").ok().map(PathBuf::from);
    let out_dir = keep
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("hot-paths-{}", std::process::id())));
    std::fs::create_dir_all(&out_dir).expect("output directory");
    let mut per_loop = std::collections::BTreeMap::new();
    for which in loops.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        assert!(
            [
                "produce",
                "consume",
                "produce_unbatched",
                "consume_unbatched",
                "consume_batch",
                "read",
                "table_view"
            ]
            .contains(&which),
            "unknown loop {which}"
        );
        let i1 = measure(which, n1, &out_dir);
        let i2 = measure(which, n2, &out_dir);
        let per_msg = (i2 as f64 - i1 as f64) / (n2 - n1) as f64;
        let line = json!({
            "loop": which,
            "size": SIZE,
            "n1": n1,
            "n2": n2,
            "instructions_n1": i1,
            "instructions_n2": i2,
            "instructions_per_msg": (per_msg * 10.0).round() / 10.0,
        });
        println!("{line}");
        per_loop.insert(which.to_string(), per_msg);
    }
    if let (Some(recv), Some(batch)) = (per_loop.get("consume"), per_loop.get("consume_batch")) {
        let line = json!({
            "compare": "consume_batch / consume",
            "batch": BATCH,
            "ratio": (batch / recv * 1000.0).round() / 1000.0,
        });
        println!("{line}");
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&out_dir);
    }
}
