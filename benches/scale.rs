//! What idle producers and consumers cost when a client holds many (issue #39): bytes per idle
//! entity, creation rate, the cost of a keep-alive round with N entities idle, and where an
//! idle entity's bytes go.
//!
//! `cargo bench --bench scale [-- N...]` prints one JSON line per measurement:
//! `{"entity","n","heap_bytes_per_entity","allocs_per_entity","rss_bytes_per_entity",
//! "created_per_sec","create_client_cpu_us","create_broker_cpu_us","idle_cpu_us_per_sec",
//! "idle_allocs_per_sec","keepalive_round_cpu_us","keepalive_round_allocs"}`, then (unless
//! `SCALE_PROFILE=0`) one `{"profile",...}` line per entity kind: the live bytes per entity by
//! allocation site.
//!
//! * `producer`: N producers on N topics (default options: batching on), created with up to
//!   `SCALE_IN_FLIGHT` creates under way at once (default 512; 1 creates them one after the
//!   other), and left idle.
//! * `consumer`: N consumers on N topics (Shared, default receiver queue), capped at
//!   `SCALE_MAX_CONSUMERS`.
//! * `partition_producer`: one producer on an N-partition topic (N partition producers).
//!
//! Heap is the live bytes the client allocated (a counting global allocator: the sizes asked
//! for, without the allocator's own rounding and headers), measured after the entities are
//! created minus before, divided by N; RSS is `/proc/self/statm`'s resident set, likewise (RSS
//! only grows: after an earlier measurement freed its entities, the next one reuses those
//! pages, so read RSS from the first measurement of a run; heap is exact either way). The
//! broker is the crate's mock broker in another process (this binary with `SCALE_RUN=broker`),
//! so only the client's memory and CPU are counted. The CPU time of a create is given for the
//! client and for the mock broker apart (`create_broker_cpu_us` is `null` with `SCALE_URL`):
//! both run on the same cores, so the create rate is bound by the two together.
//!
//! The keep-alive round: the client's keep-alive interval is 1 s, so over a quiet window of
//! `SCALE_IDLE_SECS` the connection sends a PING and reads the broker's PONG once a second
//! (and answers the broker's PINGs); the process CPU time (`CLOCK_PROCESS_CPUTIME_ID`) and the
//! allocations over the window, per second, are what one round costs plus whatever idle
//! entities do on their own. Neither may grow with N.
//!
//! The profile (`SCALE_PROFILE` entities of each kind, default 200): every allocation made
//! while the entities are created is recorded with its backtrace; those still live once they
//! are idle are grouped by the first frame in the crate (and the frame it called), and printed
//! as bytes and allocations per entity, largest first. Release builds inline much, so a site
//! names the function the allocation was inlined into.
//!
//! Environment: `SCALE_N` (default `1000,10000`; `50000` for the largest figure; the
//! bench's arguments, when given, take its place), `SCALE_MAX_CONSUMERS` (default 10,000),
//! `SCALE_IDLE_SECS` (default 3), `SCALE_IN_FLIGHT` (default 512), `SCALE_ENTITIES` (default
//! `producer,consumer,partition_producer`), `SCALE_PROFILE` (default 200; 0 skips it),
//! `SCALE_URL` (a broker to use instead of the mock, e.g. pulsar-lite; then
//! `partition_producer` needs a broker that creates partitioned topics itself and is skipped).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, SubscriptionType};
use serde_json::json;

/// Counts the bytes live on the heap and the allocations made; while [`PROFILING`], records
/// each allocation's backtrace too.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Allocations made now are recorded with their backtraces (in [`SITES`]).
static PROFILING: AtomicBool = AtomicBool::new(false);
/// Some recorded allocations may still be live: frees look them up.
static TRACKED: AtomicBool = AtomicBool::new(false);
/// Recorded allocations still live: address -> (size, backtrace).
static SITES: Mutex<Option<HashMap<usize, (usize, Backtrace)>>> = Mutex::new(None);

thread_local! {
    /// Set while this thread records an allocation (the recording allocates too).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` unless this thread is recording already (then the allocation is not recorded).
fn unless_recording(f: impl FnOnce()) {
    let free = RECORDING.try_with(|r| !r.replace(true)).unwrap_or(false);
    if free {
        f();
        let _ = RECORDING.try_with(|r| r.set(false));
    }
}

fn record(p: *mut u8, size: usize) {
    unless_recording(|| {
        let bt = Backtrace::force_capture();
        let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
        sites
            .get_or_insert_with(HashMap::new)
            .insert(p as usize, (size, bt));
    });
}

fn forget(p: *mut u8) {
    unless_recording(|| {
        let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sites) = sites.as_mut() {
            sites.remove(&(p as usize));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            if PROFILING.load(Ordering::Relaxed) {
                record(p, layout.size());
            }
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if TRACKED.load(Ordering::Relaxed) {
            forget(ptr);
        }
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            if TRACKED.load(Ordering::Relaxed) {
                forget(ptr);
            }
            if PROFILING.load(Ordering::Relaxed) {
                record(p, new_size);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

fn rss_bytes() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: isize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// CPU time of this process (all threads), to the nanosecond.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of process `pid` (user + system), from `/proc` (10 ms resolution).
fn process_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The mock broker process: prints its URL, then reads commands on stdin, one a line
/// (`partitioned <topic> <n>`, answered `ok`), until stdin closes.
fn broker() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let broker = rt.block_on(MockBroker::start()).expect("mock broker");
    println!("{}", broker.service_url());
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["partitioned", topic, n] = words.as_slice() {
            broker.create_partitioned_topic(topic, n.parse().expect("a partition count"));
            println!("ok");
            let _ = std::io::stdout().flush();
        }
    }
    rt.block_on(broker.shutdown());
}

struct BrokerProcess {
    child: Child,
    url: String,
    replies: BufReader<std::process::ChildStdout>,
}

impl BrokerProcess {
    fn start() -> Self {
        let exe = std::env::current_exe().expect("own path");
        let mut child = Command::new(exe)
            .env("SCALE_RUN", "broker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("broker process");
        let mut replies = BufReader::new(child.stdout.take().expect("stdout"));
        let mut url = String::new();
        replies.read_line(&mut url).expect("broker url");
        BrokerProcess {
            child,
            url: url.trim().to_string(),
            replies,
        }
    }

    fn partitioned(&mut self, topic: &str, n: u64) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "partitioned {topic} {n}").expect("to the broker");
        stdin.flush().expect("to the broker");
        let mut ok = String::new();
        self.replies.read_line(&mut ok).expect("broker reply");
        assert_eq!(ok.trim(), "ok");
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let mut rest = Vec::new();
        let _ = self.replies.read_to_end(&mut rest);
        let _ = self.child.wait();
    }
}

fn client(url: &str) -> Client {
    Client::builder()
        .service_url(url)
        .keepalive_interval(Duration::from_secs(1))
        .operation_timeout(Duration::from_secs(120))
        .build()
        .expect("client config")
}

/// Runs the creates with at most `SCALE_IN_FLIGHT` (default 512) under way at once, as an
/// application creating thousands of entities would (one after the other, each waits for
/// three round trips: partitioned metadata, lookup, create).
async fn in_flight<T>(
    creates: impl Iterator<Item = impl std::future::Future<Output = T>>,
) -> Vec<T> {
    use futures::StreamExt;
    let limit = env_number("SCALE_IN_FLIGHT", 512).max(1) as usize;
    futures::stream::iter(creates)
        .buffer_unordered(limit)
        .collect()
        .await
}

/// Creates `n` entities of kind `entity` (`measured` between creating and dropping them).
async fn create(
    client: &Client,
    broker: Option<&mut BrokerProcess>,
    entity: &str,
    n: u64,
    tag: &str,
) -> Option<Vec<Box<dyn std::any::Any + Send>>> {
    let mut all: Vec<Box<dyn std::any::Any + Send>> = Vec::with_capacity(n as usize);
    match entity {
        "producer" => {
            let creates = (0..n).map(|i| {
                let topic = format!("persistent://public/default/scale-p{tag}-{i}");
                async move {
                    let p = client.producer(topic).create().await.expect("producer");
                    Box::new(p) as Box<dyn std::any::Any + Send>
                }
            });
            all.extend(in_flight(creates).await);
        }
        "consumer" => {
            let creates = (0..n).map(|i| {
                let topic = format!("persistent://public/default/scale-c{tag}-{i}");
                async move {
                    let c = client
                        .consumer(topic)
                        .subscription("scale")
                        .subscription_type(SubscriptionType::Shared)
                        .subscribe()
                        .await
                        .expect("consumer");
                    Box::new(c) as Box<dyn std::any::Any + Send>
                }
            });
            all.extend(in_flight(creates).await);
        }
        "partition_producer" => {
            let Some(broker) = broker else {
                eprintln!("partition_producer needs the mock broker: skipped");
                return None;
            };
            let topic = format!("persistent://public/default/scale-pt{tag}");
            broker.partitioned(&topic, n);
            all.push(Box::new(
                client.producer(topic).create().await.expect("producer"),
            ));
        }
        other => panic!("SCALE_ENTITIES: unknown {other}"),
    }
    Some(all)
}

/// A client with one connection up and warm (a producer on a topic of its own), so that
/// what is counted next is the entities' cost, not the connection's.
async fn warm_client(url: &str, tag: &str) -> (Client, pulsar_sdk::Producer) {
    let client = client(url);
    let warm = client
        .producer(format!("persistent://public/default/scale-warm-{tag}"))
        .create()
        .await
        .expect("warm-up producer");
    (client, warm)
}

/// Measures `n` entities of kind `entity`: memory and creation rate, then the idle cost.
async fn measure(
    url: &str,
    broker: Option<&mut BrokerProcess>,
    entity: &str,
    n: u64,
    idle: Duration,
) -> Option<serde_json::Value> {
    let (client, warm) = warm_client(url, &format!("{entity}{n}")).await;
    let broker_pid = broker.as_ref().map(|b| b.child.id());
    let broker_cpu = || broker_pid.map(process_cpu_time);
    let (heap0, rss0, allocs0) = (live(), rss_bytes(), allocs());
    let (client_cpu0, broker_cpu0) = (cpu_time(), broker_cpu());
    let started = Instant::now();
    // Topic names of this process's own: a real broker (`SCALE_URL`) keeps the topics of an
    // earlier run, and re-using them would time lookups of topics that exist already.
    let tag = format!("{n}-{}", std::process::id());
    let held = create(&client, broker, entity, n, &tag).await?;
    let took = started.elapsed();
    let (client_cpu1, broker_cpu1) = (cpu_time(), broker_cpu());
    let (heap1, rss1, allocs1) = (live(), rss_bytes(), allocs());
    // Let the creation's after-effects (first flow permits, stats) settle before the quiet
    // window.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu0, a0) = (cpu_time(), allocs());
    tokio::time::sleep(idle).await;
    let (cpu1, a1) = (cpu_time(), allocs());
    drop(held);
    drop(warm);
    let _ = client.close_within(Duration::from_secs(60)).await;
    let per = |d: f64| (d / n as f64).round();
    let secs = idle.as_secs_f64();
    // One keep-alive round a second (the interval is 1 s).
    let cpu_us_per_sec = ((cpu1 - cpu0).as_secs_f64() * 1e6 / secs).round();
    let allocs_per_sec = ((a1 - a0) as f64 / secs).round();
    Some(json!({
        "entity": entity,
        "n": n,
        "heap_bytes_per_entity": per((heap1 - heap0) as f64),
        "allocs_per_entity": per((allocs1 - allocs0) as f64),
        "rss_bytes_per_entity": per((rss1 - rss0) as f64),
        "created_per_sec": (n as f64 / took.as_secs_f64()).round(),
        // CPU time per create, of this client and of the mock broker (another process on the
        // same cores: the create rate is bound by the two together).
        "create_client_cpu_us": per(client_cpu1.saturating_sub(client_cpu0).as_secs_f64() * 1e6),
        "create_broker_cpu_us": broker_cpu0
            .zip(broker_cpu1)
            .map(|(a, b)| per(b.saturating_sub(a).as_secs_f64() * 1e6)),
        "idle_cpu_us_per_sec": cpu_us_per_sec,
        "idle_allocs_per_sec": allocs_per_sec,
        "keepalive_round_cpu_us": cpu_us_per_sec,
        "keepalive_round_allocs": allocs_per_sec,
    }))
}

/// The site of an allocation: the first frame in this crate and the one it called (where
/// the allocation left the crate: a `Vec`, a channel, `tokio::spawn`...).
fn site(bt: &str) -> String {
    let frames: Vec<&str> = bt
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (num, name) = l.split_once(": ")?;
            num.parse::<u32>().ok()?;
            // Without the hash suffix.
            Some(match name.rsplit_once("::h") {
                Some((head, hash)) if hash.len() == 16 => head,
                _ => name,
            })
        })
        .collect();
    let ours = frames
        .iter()
        .position(|f| f.contains("pulsar_sdk::") && !f.contains("scale::"));
    match ours {
        Some(i) => {
            let callee = frames[..i]
                .iter()
                .rev()
                .find(|f| !f.starts_with("core::") && !f.contains("alloc::alloc::"))
                .copied()
                .unwrap_or("");
            let short = |f: &str| f.chars().take(110).collect::<String>();
            if callee.is_empty() {
                short(frames[i])
            } else {
                format!("{} -> {}", short(frames[i]), short(callee))
            }
        }
        // Inlined into a generic poll (a spawned task, a boxed future): name the frames
        // nearest to the allocation instead.
        None => {
            let near: Vec<String> = frames
                .iter()
                .filter(|f| {
                    !f.starts_with("core::")
                        && !f.contains("alloc::alloc::")
                        && !f.contains("scale::")
                        && !f.contains("std::backtrace")
                        && !f.starts_with("__rustc::")
                })
                .take(2)
                .map(|f| f.chars().take(110).collect())
                .collect();
            format!("(outside the crate) {}", near.join(" <- "))
        }
    }
}

/// Where an idle entity's bytes go: the live allocations made while creating `n` of them, by
/// site, per entity.
async fn profile(
    url: &str,
    broker: Option<&mut BrokerProcess>,
    entity: &str,
    n: u64,
) -> Option<serde_json::Value> {
    let (client, warm) = warm_client(url, &format!("profile-{entity}")).await;
    TRACKED.store(true, Ordering::Relaxed);
    PROFILING.store(true, Ordering::Relaxed);
    let held = create(&client, broker, entity, n, &format!("profile{n}")).await;
    PROFILING.store(false, Ordering::Relaxed);
    // Idle for a moment: what creation allocated only for a while is freed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = SITES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    TRACKED.store(false, Ordering::Relaxed);
    let held = held?;
    let mut by_site: HashMap<String, (usize, usize)> = HashMap::new();
    let mut sizes: HashMap<String, HashMap<usize, usize>> = HashMap::new();
    for (size, bt) in taken.into_values() {
        let key = site(&bt.to_string());
        let e = by_site.entry(key.clone()).or_default();
        e.0 += size;
        e.1 += 1;
        *sizes.entry(key).or_default().entry(size).or_default() += 1;
    }
    drop(held);
    drop(warm);
    let _ = client.close_within(Duration::from_secs(60)).await;
    let mut rows: Vec<(String, (usize, usize))> = by_site.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .0));
    let per = |v: usize| (v as f64 / n as f64 * 10.0).round() / 10.0;
    let recorded: usize = rows.iter().map(|(_, (b, _))| b).sum();
    let sites: Vec<serde_json::Value> = rows
        .iter()
        .filter(|(_, (bytes, _))| per(*bytes) >= 8.0)
        .map(|(site, (bytes, count))| {
            let mut common: Vec<(usize, usize)> =
                sizes[site].iter().map(|(s, c)| (*s, *c)).collect();
            common.sort_by_key(|c| std::cmp::Reverse(c.0 * c.1));
            common.truncate(3);
            json!({
                "bytes": per(*bytes),
                "allocs": per(*count),
                "sizes": common.iter().map(|(s, _)| s).collect::<Vec<_>>(),
                "site": site,
            })
        })
        .collect();
    Some(json!({
        "profile": entity,
        "n": n,
        "recorded_bytes_per_entity": per(recorded),
        "sites": sites,
    }))
}

async fn run(url: &str, mut broker: Option<&mut BrokerProcess>) {
    let idle = Duration::from_secs(env_number("SCALE_IDLE_SECS", 3));
    let max_consumers = env_number("SCALE_MAX_CONSUMERS", 10_000);
    let entities = env_list("SCALE_ENTITIES", "producer,consumer,partition_producer");
    // `cargo bench` passes `--bench`: the numbers among the arguments, if any.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.parse::<u64>().is_ok())
        .collect();
    let ns = if args.is_empty() {
        env_list("SCALE_N", "1000,10000")
    } else {
        args
    };
    for n in ns {
        let n: u64 = n.parse().expect("SCALE_N: numbers");
        for entity in &entities {
            let n = if entity == "consumer" {
                n.min(max_consumers)
            } else {
                n
            };
            if let Some(line) = measure(url, broker.as_deref_mut(), entity, n, idle).await {
                println!("{line}");
            }
        }
    }
    let n = env_number("SCALE_PROFILE", 200);
    if n > 0 {
        for entity in entities.iter().filter(|e| *e != "partition_producer") {
            if let Some(line) = profile(url, broker.as_deref_mut(), entity, n).await {
                println!("{line}");
            }
        }
    }
}

fn main() {
    if std::env::var("SCALE_RUN").as_deref() == Ok("broker") {
        return broker();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match std::env::var("SCALE_URL") {
        Ok(url) => rt.block_on(run(&url, None)),
        Err(_) => {
            let mut broker = BrokerProcess::start();
            let url = broker.url.clone();
            rt.block_on(run(&url, Some(&mut broker)));
        }
    }
}
