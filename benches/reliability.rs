//! Reliability under broker faults, measured against pulsar-lite (started by the test harness):
//! the figures of `shared/design/reliability-targets.md`.
//!
//! `cargo bench --bench reliability [-- FILTER...]` prints JSON lines: one per run, then one
//! summary per figure (median and worst over the runs). FILTER picks scenarios by name
//! substring: `kill_restart`, `stall_10s`, `stall_40s`.
//!
//! Every run executes in its own child process (this binary, re-executed with
//! `RELIABILITY_RUN=<scenario>`), with its own broker: memory figures are not skewed by earlier
//! runs, and a crash is contained.
//!
//! Common setup, as in the targets table: one producer, 100-byte messages at 2,000 msg/s,
//! pipelined (`send()` then the receipt awaited elsewhere), batching off, send timeout 30 s,
//! otherwise default client settings (backoff 100 ms → 60 s, keep-alive 30 s).
//!
//! Definitions:
//! * acknowledged but lost: receipted messages whose payload is not stored at the receipted id
//!   (read back afterwards with a fresh client and a fresh Shared subscription from Earliest).
//! * fault → next receipt: from the SIGKILL (sent by this program straight to the broker's pid)
//!   to the first receipt completed after the broker process was started again (no receipt can
//!   come from a dead broker, so receipts completing between the kill and the restart were
//!   already in the client's socket buffer and do not count).
//! * longest `send` block: the longest a single `producer.send(msg).await` (the enqueue, not the
//!   receipt) took.
//! * memory per pending message: growth of this process's VmRSS while the broker is stopped,
//!   divided by the growth of the number of sent-but-not-completed messages. The bench's own
//!   bookkeeping is preallocated and pre-touched, so it is not in the delta; the payload is
//!   (100 bytes of it per message).
//! * RSS growth over the stall (`rss_growth_over_stall_bytes`), and the jump after the resume
//!   (`rss_jump_after_resume_bytes`): the highest VmRSS sampled every 10 ms from the resume
//!   until the traffic ends, minus VmRSS at the end of the stall (the burst of receipts).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulsar_sdk::{
    Client, Error, InitialPosition, MessageId, Producer, ProducerMessage, SendFuture, State,
    SubscriptionType,
};
use serde_json::{json, Value};
use support::{unique_name, PulsarLite};
use tokio::sync::Notify;
use tokio::time::Instant;

const RATE: u64 = 2_000;
const PAYLOAD_LEN: usize = 100;
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
const RUNS: usize = 3;

const SCENARIOS: [(&str, usize); 3] = [
    ("kill_restart", RUNS),
    ("stall_10s", RUNS),
    ("stall_40s", 1),
];

fn main() {
    if let Ok(scenario) = std::env::var("RELIABILITY_RUN") {
        if std::env::var("RUST_LOG").is_ok() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_writer(std::io::stderr)
                .try_init();
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let result = rt.block_on(async {
            match scenario.as_str() {
                "kill_restart" => kill_restart().await,
                "stall_10s" => stall_10s().await,
                "stall_40s" => stall_40s().await,
                other => panic!("unknown scenario {other}"),
            }
        });
        println!("{result}");
        return;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let started = std::time::Instant::now();
    for (scenario, runs) in SCENARIOS {
        if !filters.is_empty() && !filters.iter().any(|f| scenario.contains(f.as_str())) {
            continue;
        }
        let mut results = Vec::new();
        for run in 1..=runs {
            let mut r = run_child(scenario);
            r["scenario"] = json!(scenario);
            r["run"] = json!(run);
            println!("{r}");
            results.push(r);
        }
        summarize(scenario, &results);
    }
    eprintln!("[reliability] total {:.1?}", started.elapsed());
}

fn run_child(scenario: &str) -> Value {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("RELIABILITY_RUN", scenario)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    match serde_json::from_str(last) {
        Ok(v) if out.status.success() => v,
        _ => json!({"error": format!("run failed ({}): {stdout}", out.status)}),
    }
}

/// Which figures to summarize, and whether larger is worse.
const FIGURES: [(&str, bool); 14] = [
    ("acked_but_lost", true),
    ("send_errors", true),
    ("fault_to_next_receipt_ms", true),
    ("restart_to_next_receipt_ms", true),
    ("longest_send_block_ms", true),
    ("stored_duplicates", true),
    ("errors", true),
    ("rss_per_pending_bytes", true),
    ("rss_per_pending_minus_payload_bytes", true),
    ("rss_growth_over_stall_bytes", true),
    ("rss_jump_after_resume_bytes", true),
    ("stall_end_to_next_receipt_ms", true),
    ("failed", true),
    ("timed_out_but_stored", true),
];

fn summarize(scenario: &str, results: &[Value]) {
    for (figure, larger_is_worse) in FIGURES {
        // Per-fault figures are arrays: every fault of every run counts as one sample.
        let mut samples: Vec<f64> = Vec::new();
        for r in results {
            match &r[figure] {
                Value::Array(a) => samples.extend(a.iter().filter_map(Value::as_f64)),
                v => samples.extend(v.as_f64()),
            }
        }
        if samples.is_empty() {
            continue;
        }
        samples.sort_by(f64::total_cmp);
        let median = samples[samples.len() / 2];
        let worst = if larger_is_worse {
            samples[samples.len() - 1]
        } else {
            samples[0]
        };
        println!(
            "{}",
            json!({
                "summary": scenario, "figure": figure, "samples": samples.len(),
                "median": median, "worst": worst,
            })
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Traffic: a steady-rate pipelined producer with preallocated bookkeeping

fn payload(i: usize) -> Vec<u8> {
    let mut p = format!("{i:010}").into_bytes();
    p.resize(PAYLOAD_LEN, b'x');
    p
}

fn index_of(payload: &[u8]) -> usize {
    std::str::from_utf8(&payload[..10.min(payload.len())])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX)
}

#[derive(Clone)]
struct Completion {
    at: Instant,
    result: Option<Result<MessageId, Error>>,
}

struct Traffic {
    start: Instant,
    sent: Arc<AtomicUsize>,
    completed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    sender: tokio::task::JoinHandle<SenderOut>,
    collector: tokio::task::JoinHandle<Vec<Completion>>,
}

struct SenderOut {
    /// When each `send()` was called.
    send_at: Vec<Instant>,
    /// How long each `send()` call took, µs.
    block_us: Vec<u32>,
    /// `send()` calls that failed (index, error).
    enqueue_errors: Vec<(usize, String)>,
    count: usize,
}

struct TrafficResult {
    start: Instant,
    send_at: Vec<Instant>,
    block_us: Vec<u32>,
    enqueue_errors: Vec<(usize, String)>,
    completions: Vec<Completion>,
}

impl Traffic {
    /// Starts sending at [`RATE`] for at most `max` messages (or until [`Traffic::finish`]).
    fn start(producer: Producer, max: usize) -> Traffic {
        let now = Instant::now();
        // Preallocated and touched now, so that RSS growth later is the client's.
        let slots: Arc<Mutex<Vec<Option<SendFuture>>>> =
            Arc::new(Mutex::new((0..max).map(|_| None).collect()));
        let mut completions = vec![
            Completion {
                at: now,
                result: None
            };
            max
        ];
        let mut send_at = vec![now; max];
        let mut block_us = vec![0u32; max];
        let notify = Arc::new(Notify::new());
        let sent = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sender_done = Arc::new(AtomicBool::new(false));
        let start = Instant::now() + Duration::from_millis(5);

        let sender = {
            let (slots, notify, sent, stop, sender_done) = (
                slots.clone(),
                notify.clone(),
                sent.clone(),
                stop.clone(),
                sender_done.clone(),
            );
            tokio::spawn(async move {
                let mut enqueue_errors = Vec::new();
                let mut i = 0;
                while i < max && !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep_until(
                        start + Duration::from_micros(i as u64 * 1_000_000 / RATE),
                    )
                    .await;
                    let t = Instant::now();
                    let r = producer.send(ProducerMessage::new(payload(i))).await;
                    block_us[i] = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
                    send_at[i] = t;
                    match r {
                        Ok(fut) => slots.lock().unwrap()[i] = Some(fut),
                        Err(e) => enqueue_errors.push((i, e.to_string())),
                    }
                    i += 1;
                    sent.store(i, Ordering::Release);
                    notify.notify_one();
                }
                sender_done.store(true, Ordering::Release);
                notify.notify_one();
                SenderOut {
                    send_at,
                    block_us,
                    enqueue_errors,
                    count: i,
                }
            })
        };

        let collector = {
            let (sent, completed) = (sent.clone(), completed.clone());
            tokio::spawn(async move {
                let mut k = 0;
                loop {
                    let fut = if k < sent.load(Ordering::Acquire) {
                        Some(slots.lock().unwrap()[k].take())
                    } else {
                        None
                    };
                    match fut {
                        Some(Some(fut)) => {
                            let r = fut.await;
                            completions[k] = Completion {
                                at: Instant::now(),
                                result: Some(r),
                            };
                            k += 1;
                            completed.store(k, Ordering::Release);
                        }
                        // send() itself failed: nothing to await.
                        Some(None) => {
                            k += 1;
                            completed.store(k, Ordering::Release);
                        }
                        None if sender_done.load(Ordering::Acquire)
                            && k >= sent.load(Ordering::Acquire) =>
                        {
                            break
                        }
                        None => notify.notified().await,
                    }
                }
                completions.truncate(k);
                completions
            })
        };
        Traffic {
            start,
            sent,
            completed,
            stop,
            sender,
            collector,
        }
    }

    fn pending(&self) -> usize {
        self.sent.load(Ordering::Acquire) - self.completed.load(Ordering::Acquire)
    }

    /// Stops sending and waits for every outcome.
    async fn finish(self) -> TrafficResult {
        self.stop.store(true, Ordering::Relaxed);
        let s = self.sender.await.unwrap();
        let completions = self.collector.await.unwrap();
        TrafficResult {
            start: self.start,
            send_at: s.send_at[..s.count].to_vec(),
            block_us: s.block_us[..s.count].to_vec(),
            enqueue_errors: s.enqueue_errors,
            completions,
        }
    }
}

impl TrafficResult {
    fn receipts(&self) -> impl Iterator<Item = (usize, MessageId)> + '_ {
        self.completions
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match &c.result {
                Some(Ok(id)) => Some((i, *id)),
                _ => None,
            })
    }

    fn failures(&self) -> Vec<(usize, &Completion, &Error)> {
        self.completions
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match &c.result {
                Some(Err(e)) => Some((i, c, e)),
                _ => None,
            })
            .collect()
    }

    /// The first successful receipt completed after `t`.
    fn first_receipt_after(&self, t: Instant) -> Option<Instant> {
        self.completions
            .iter()
            .filter(|c| matches!(c.result, Some(Ok(_))) && c.at >= t)
            .map(|c| c.at)
            .min()
    }

    fn longest_block_ms(&self, from: Option<Instant>, to: Option<Instant>) -> f64 {
        self.send_at
            .iter()
            .zip(&self.block_us)
            .filter(|(t, _)| from.is_none_or(|f| **t >= f) && to.is_none_or(|e| **t <= e))
            .map(|(_, b)| *b)
            .max()
            .unwrap_or(0) as f64
            / 1000.0
    }

    /// Failed sends by error kind (the error's text up to its first digit or colon).
    fn error_kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        let texts = self
            .failures()
            .into_iter()
            .map(|(_, _, e)| e.to_string())
            .chain(
                self.enqueue_errors
                    .iter()
                    .map(|(_, e)| format!("send(): {e}")),
            );
        for t in texts {
            let kind: String = t
                .chars()
                .take_while(|c| !c.is_ascii_digit())
                .collect::<String>()
                .trim()
                .to_string();
            *kinds.entry(kind).or_insert(0) += 1;
        }
        kinds
    }

    fn send_errors(&self) -> usize {
        self.enqueue_errors.len() + self.failures().len()
    }
}

// ---------------------------------------------------------------------------------------------
// The broker process

/// The pid of the pulsar-lite process serving `broker` (not its `sh` watchdog).
fn broker_pid(broker: &PulsarLite) -> i32 {
    let db = broker.db_path();
    let db = db.to_string_lossy();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("pulsar-lite")) && args.iter().any(|a| *a == db)
        {
            return pid;
        }
    }
    panic!("no pulsar-lite process with --db-path {db}");
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: sending a signal to a process we started.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in /proc/self/status")
        * 1024
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn setup() -> (PulsarLite, Client, Producer, String) {
    let broker = blocking(PulsarLite::start).await;
    let client = Client::builder().service_url(broker.url()).build().unwrap();
    let topic = unique_name("reliability");
    let producer = client
        .producer(&topic)
        .batching(false)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    (broker, client, producer, topic)
}

/// Reads the topic back with a fresh client and Shared subscription from Earliest: stored slot
/// (ledger, entry, batch index) → payload index.
async fn read_back(url: &str, topic: &str) -> BTreeMap<(u64, u64, i32), usize> {
    let client = Client::builder().service_url(url).build().unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription(unique_name("readback"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(5_000)
        .subscribe()
        .await
        .unwrap();
    let last = consumer.last_message_ids().await.unwrap()[0];
    let mut stored = BTreeMap::new();
    let mut reached_last = false;
    loop {
        let wait = if reached_last {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(30)
        };
        match tokio::time::timeout(wait, consumer.recv()).await {
            Ok(Ok(m)) => {
                consumer.ack(&m).unwrap();
                if (m.id.ledger_id, m.id.entry_id) >= (last.ledger_id, last.entry_id) {
                    reached_last = true;
                }
                stored.insert(
                    (m.id.ledger_id, m.id.entry_id, m.id.batch_index),
                    index_of(&m.payload),
                );
            }
            Ok(Err(e)) => panic!("read back: {e}"),
            Err(_) if reached_last => break,
            Err(_) => panic!("read back stuck after {} messages", stored.len()),
        }
    }
    let _ = consumer.close().await;
    let _ = client.close().await;
    stored
}

/// Payload indices stored more than once, as `[first, last]` ranges of consecutive indices.
fn duplicate_ranges(stored: &BTreeMap<(u64, u64, i32), usize>) -> Vec<[usize; 2]> {
    let mut copies: BTreeMap<usize, usize> = BTreeMap::new();
    for &i in stored.values() {
        *copies.entry(i).or_default() += 1;
    }
    let mut ranges: Vec<[usize; 2]> = Vec::new();
    for (&i, _) in copies.iter().filter(|(_, c)| **c > 1) {
        match ranges.last_mut() {
            Some(r) if r[1] + 1 == i => r[1] = i,
            _ => ranges.push([i, i]),
        }
    }
    ranges
}

/// (acknowledged but lost, stored duplicates)
fn compare(result: &TrafficResult, stored: &BTreeMap<(u64, u64, i32), usize>) -> (usize, usize) {
    let lost = result
        .receipts()
        .filter(|(i, id)| stored.get(&(id.ledger_id, id.entry_id, id.batch_index)) != Some(i))
        .count();
    let mut copies: BTreeMap<usize, usize> = BTreeMap::new();
    for &i in stored.values() {
        *copies.entry(i).or_default() += 1;
    }
    let duplicates = copies.values().map(|c| c - 1).sum();
    (lost, duplicates)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

async fn wait_ready(producer: &Producer, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while producer.state() != State::Ready {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

// ---------------------------------------------------------------------------------------------
// (a) kill -9, restart after 0.5 s, twice

async fn kill_restart() -> Value {
    const KILL_AT: [Duration; 2] = [Duration::from_millis(1_000), Duration::from_millis(2_500)];
    const DOWN: Duration = Duration::from_millis(500);
    const SEND_FOR: Duration = Duration::from_millis(4_000);
    let (mut broker, client, producer, topic) = setup().await;
    let max = (SEND_FOR.as_millis() as u64 * RATE / 1000) as usize;
    let traffic = Traffic::start(producer.clone(), max);
    let mut faults = Vec::new();
    for at in KILL_AT {
        tokio::time::sleep_until(traffic.start + at).await;
        let pid = broker_pid(&broker);
        let killed = Instant::now();
        signal(pid, libc::SIGKILL);
        broker = blocking(move || {
            broker.stop();
            broker
        })
        .await;
        tokio::time::sleep_until(killed + DOWN).await;
        let restarted = Instant::now();
        broker = blocking(move || {
            broker.start_again();
            broker
        })
        .await;
        let ready = wait_ready(&producer, Duration::from_secs(30)).await;
        faults.push((killed, restarted, ready));
    }
    // Let the traffic run to its end.
    while traffic.sent.load(Ordering::Acquire) < max {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let result = traffic.finish().await;
    let final_state = producer.state();
    let pending_requests: usize = client
        .connection_stats()
        .iter()
        .map(|s| s.pending_requests)
        .sum();
    let _ = producer.close().await;
    let stored = read_back(&broker.url(), &topic).await;
    let (lost, duplicates) = compare(&result, &stored);

    let mut fault_to_receipt = Vec::new();
    let mut restart_to_receipt = Vec::new();
    let mut outage_block = Vec::new();
    for (killed, restarted, _) in &faults {
        let next = result.first_receipt_after(*restarted);
        fault_to_receipt.push(next.map(|n| ms(n - *killed)));
        restart_to_receipt.push(next.map(|n| ms(n - *restarted)));
        outage_block.push(result.longest_block_ms(Some(*killed), next));
    }
    let _ = client.close().await;
    json!({
        "sent": result.send_at.len(),
        "receipted": result.receipts().count(),
        "acked_but_lost": lost,
        "send_errors": result.send_errors(),
        "error_kinds": result.error_kinds(),
        "stored": stored.len(),
        "stored_duplicates": duplicates,
        "duplicate_ranges": duplicate_ranges(&stored),
        "kills_at_index": faults.iter().map(|f| result.send_at.partition_point(|t| *t < f.0)).collect::<Vec<_>>(),
        "restarts_at_index": faults.iter().map(|f| result.send_at.partition_point(|t| *t < f.1)).collect::<Vec<_>>(),
        "fault_to_next_receipt_ms": fault_to_receipt,
        "restart_to_next_receipt_ms": restart_to_receipt,
        "longest_send_block_ms": result.longest_block_ms(None, None),
        "longest_send_block_during_outage_ms": outage_block,
        "ready_again_after_each_restart": faults.iter().map(|f| f.2).collect::<Vec<_>>(),
        "final_state": final_state.to_string(),
        "pending_requests_after": pending_requests,
        "rate": RATE,
        "elapsed_s": result.start.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------------------------
// (b) broker stalled (SIGSTOP) 10 s

async fn stall_10s() -> Value {
    const STOP_AT: Duration = Duration::from_millis(1_000);
    const STALL: Duration = Duration::from_secs(10);
    const AFTER: Duration = Duration::from_secs(2);
    let (broker, client, producer, topic) = setup().await;
    let max = ((STOP_AT + STALL + AFTER).as_millis() as u64 * RATE / 1000) as usize;
    let traffic = Traffic::start(producer.clone(), max);
    let pid = broker_pid(&broker);
    tokio::time::sleep_until(traffic.start + STOP_AT).await;
    let rss_before = rss_bytes();
    let pending_before = traffic.pending();
    let stopped = Instant::now();
    signal(pid, libc::SIGSTOP);
    tokio::time::sleep_until(stopped + STALL).await;
    let rss_after = rss_bytes();
    let pending_after = traffic.pending();
    let resumed = Instant::now();
    signal(pid, libc::SIGCONT);
    // The burst of receipts after the resume: the highest RSS seen until the traffic ends.
    let mut rss_peak_after = rss_after;
    while traffic.sent.load(Ordering::Acquire) < max {
        tokio::time::sleep(Duration::from_millis(10)).await;
        rss_peak_after = rss_peak_after.max(rss_bytes());
    }
    let result = traffic.finish().await;
    rss_peak_after = rss_peak_after.max(rss_bytes());
    let _ = producer.close().await;
    let stored = read_back(&broker.url(), &topic).await;
    let (lost, duplicates) = compare(&result, &stored);
    let grown = pending_after.saturating_sub(pending_before).max(1) as f64;
    let per_pending = (rss_after as f64 - rss_before as f64) / grown;
    let _ = client.close().await;
    json!({
        "sent": result.send_at.len(),
        "receipted": result.receipts().count(),
        "errors": result.send_errors(),
        "error_kinds": result.error_kinds(),
        "acked_but_lost": lost,
        "stored_duplicates": duplicates,
        "pending_before": pending_before,
        "pending_after": pending_after,
        "rss_before_bytes": rss_before,
        "rss_after_bytes": rss_after,
        "rss_per_pending_bytes": per_pending.round(),
        "rss_per_pending_minus_payload_bytes": (per_pending - PAYLOAD_LEN as f64).round(),
        "rss_growth_over_stall_bytes": rss_after.saturating_sub(rss_before),
        "rss_peak_after_resume_bytes": rss_peak_after,
        "rss_jump_after_resume_bytes": rss_peak_after.saturating_sub(rss_after),
        "stall_end_to_next_receipt_ms": result.first_receipt_after(resumed).map(|n| ms(n - resumed)),
        "longest_send_block_ms": result.longest_block_ms(None, None),
        "longest_send_block_during_stall_ms": result.longest_block_ms(Some(stopped), Some(resumed)),
    })
}

// ---------------------------------------------------------------------------------------------
// (c) broker stalled 40 s (> the 30 s send timeout)

async fn stall_40s() -> Value {
    const STOP_AT: Duration = Duration::from_millis(1_000);
    const STALL: Duration = Duration::from_secs(40);
    const AFTER: Duration = Duration::from_secs(3);
    let (broker, client, producer, topic) = setup().await;
    let max = ((STOP_AT + STALL + AFTER).as_millis() as u64 * RATE / 1000) as usize;
    let traffic = Traffic::start(producer.clone(), max);
    let pid = broker_pid(&broker);
    tokio::time::sleep_until(traffic.start + STOP_AT).await;
    let stopped = Instant::now();
    signal(pid, libc::SIGSTOP);
    let mut states = BTreeMap::new();
    while stopped.elapsed() < STALL {
        tokio::time::sleep(Duration::from_millis(100)).await;
        *states.entry(producer.state().to_string()).or_insert(0u32) += 1;
    }
    let resumed = Instant::now();
    signal(pid, libc::SIGCONT);
    while traffic.sent.load(Ordering::Acquire) < max {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let result = traffic.finish().await;
    let final_state = producer.state();
    let _ = producer.close().await;
    let stored = read_back(&broker.url(), &topic).await;
    let (lost, duplicates) = compare(&result, &stored);

    // Which failed, and were they exactly the expired ones, in order, with a timeout?
    let failures = result.failures();
    let all_timeouts = failures
        .iter()
        .all(|(_, _, e)| matches!(e, Error::Timeout { .. }));
    let indices: Vec<usize> = failures.iter().map(|f| f.0).collect();
    let contiguous = indices.windows(2).all(|w| w[1] == w[0] + 1);
    let completed_in_order = failures.windows(2).all(|w| w[0].1.at <= w[1].1.at);
    // Expired = sent at least 30 s before the broker resumed, and not receipted before the stall.
    // A message whose deadline falls within 1.1 s of the resume is ambiguous (the client checks
    // deadlines once a second, and the resumed broker takes a moment to answer).
    let deadline_margin = Duration::from_millis(1_100);
    let mut expired_not_failed = 0;
    let mut failed_not_expired = 0;
    let mut ambiguous = 0;
    for (i, c) in result.completions.iter().enumerate() {
        let deadline = result.send_at[i] + SEND_TIMEOUT;
        let failed = matches!(c.result, Some(Err(_)));
        let receipted_before_stall = matches!(c.result, Some(Ok(_))) && c.at < stopped;
        if receipted_before_stall {
            continue;
        }
        if deadline + deadline_margin < resumed {
            expired_not_failed += usize::from(!failed);
        } else if deadline > resumed + deadline_margin {
            failed_not_expired += usize::from(failed);
        } else {
            ambiguous += 1;
        }
    }
    // How late each failure came relative to its deadline (ms).
    let lateness: Vec<f64> = failures
        .iter()
        .map(|(i, c, _)| {
            let deadline = result.send_at[*i] + SEND_TIMEOUT;
            if c.at >= deadline {
                ms(c.at - deadline)
            } else {
                -ms(deadline - c.at)
            }
        })
        .collect();
    let timed_out_but_stored = {
        let stored_indices: std::collections::BTreeSet<usize> = stored.values().copied().collect();
        indices
            .iter()
            .filter(|i| stored_indices.contains(i))
            .count()
    };
    let first_failure_after_stop = failures.first().map(|(_, c, _)| ms(c.at - stopped));
    let last_failure_after_stop = failures.last().map(|(_, c, _)| ms(c.at - stopped));
    let _ = client.close().await;
    json!({
        "sent": result.send_at.len(),
        "receipted": result.receipts().count(),
        "failed": failures.len(),
        "error_kinds": result.error_kinds(),
        "failed_first_index": indices.first(),
        "failed_last_index": indices.last(),
        "all_failures_are_timeouts": all_timeouts,
        "failures_contiguous": contiguous,
        "failures_completed_in_order": completed_in_order,
        "expired_but_not_failed": expired_not_failed,
        "failed_but_not_expired": failed_not_expired,
        "deadline_within_1_1s_of_resume": ambiguous,
        "failure_lateness_ms_min": lateness.iter().copied().reduce(f64::min),
        "failure_lateness_ms_max": lateness.iter().copied().reduce(f64::max),
        "first_failure_after_stop_ms": first_failure_after_stop,
        "last_failure_after_stop_ms": last_failure_after_stop,
        "enqueue_errors": result.enqueue_errors.len(),
        "longest_send_block_ms": result.longest_block_ms(None, None),
        "longest_send_block_during_stall_ms": result.longest_block_ms(Some(stopped), Some(resumed)),
        "stall_end_to_next_receipt_ms": result.first_receipt_after(resumed).map(|n| ms(n - resumed)),
        "producer_states_during_stall_100ms_samples": states,
        "final_state": final_state.to_string(),
        "acked_but_lost": lost,
        "stored_duplicates": duplicates,
        "timed_out_but_stored": timed_out_but_stored,
    })
}
