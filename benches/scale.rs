//! What idle producers and consumers cost when a client holds many (issue #39): bytes per idle
//! entity, creation rate, and the CPU an idle client spends on its keep-alive path.
//!
//! `cargo bench --bench scale` prints one JSON line per measurement:
//! `{"entity","n","heap_bytes_per_entity","rss_bytes_per_entity","created_per_sec",
//! "idle_cpu_ms_per_sec"}`.
//!
//! * `producer`: N producers on N topics (default options: batching on), created one after
//!   the other and left idle.
//! * `consumer`: N consumers on N topics (Shared, default receiver queue), capped at
//!   `SCALE_MAX_CONSUMERS`.
//! * `partition_producer`: one producer on an N-partition topic (N partition producers).
//!
//! Heap is the live bytes the client allocated (a counting global allocator), measured after
//! the entities are created minus before, divided by N; RSS is `/proc/self/statm`'s resident
//! set, likewise (RSS only grows: after an earlier measurement freed its entities, the next
//! one reuses those pages, so read RSS from the first measurement of a run; heap is exact
//! either way). The broker is the crate's mock broker in another process (this binary with
//! `SCALE_RUN=broker`), so only the client's memory and CPU are counted. Idle CPU is the
//! process's user + system time over a quiet window of `SCALE_IDLE_SECS` with a 1 s
//! keep-alive interval, per second: it must not grow with N.
//!
//! Environment: `SCALE_N` (default `1000,10000,50000`), `SCALE_MAX_CONSUMERS` (default
//! 10,000), `SCALE_IDLE_SECS` (default 5), `SCALE_ENTITIES` (default
//! `producer,consumer,partition_producer`), `SCALE_URL` (a broker to use instead of the mock,
//! e.g. pulsar-lite; then `partition_producer` needs a broker that creates partitioned topics
//! itself and is skipped).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, SubscriptionType};
use serde_json::json;

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
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
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
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

/// User + system CPU time of this process, from `/proc/self/stat` (clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
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

/// Measures after `create` made `n` entities (kept alive until the end of the measurement).
async fn measure<T>(
    entity: &str,
    n: u64,
    idle: Duration,
    create: impl std::future::Future<Output = Vec<T>>,
) -> serde_json::Value {
    let (heap0, rss0) = (live(), rss_bytes());
    let started = Instant::now();
    let held = create.await;
    let took = started.elapsed();
    let (heap1, rss1) = (live(), rss_bytes());
    let cpu0 = cpu_time();
    tokio::time::sleep(idle).await;
    let cpu1 = cpu_time();
    drop(held);
    let per = |d: isize| d as f64 / n as f64;
    json!({
        "entity": entity,
        "n": n,
        "heap_bytes_per_entity": per(heap1 - heap0).round(),
        "rss_bytes_per_entity": per(rss1 - rss0).round(),
        "created_per_sec": (n as f64 / took.as_secs_f64()).round(),
        "idle_cpu_ms_per_sec": ((cpu1 - cpu0).as_secs_f64() * 1000.0 / idle.as_secs_f64() * 10.0).round() / 10.0,
    })
}

async fn run(url: &str, mut broker: Option<&mut BrokerProcess>) {
    let idle = Duration::from_secs(env_number("SCALE_IDLE_SECS", 5));
    let max_consumers = env_number("SCALE_MAX_CONSUMERS", 10_000);
    let entities = env_list("SCALE_ENTITIES", "producer,consumer,partition_producer");
    for n in env_list("SCALE_N", "1000,10000,50000") {
        let n: u64 = n.parse().expect("SCALE_N: numbers");
        for entity in &entities {
            let client = client(url);
            // One connection up and warm before counting.
            let warm = client
                .producer(format!(
                    "persistent://public/default/scale-warm-{n}-{entity}"
                ))
                .create()
                .await
                .expect("warm-up producer");
            let line = match entity.as_str() {
                "producer" => {
                    measure(entity, n, idle, async {
                        let mut all = Vec::with_capacity(n as usize);
                        for i in 0..n {
                            let topic = format!("persistent://public/default/scale-p{n}-{i}");
                            all.push(client.producer(topic).create().await.expect("producer"));
                        }
                        all
                    })
                    .await
                }
                "consumer" => {
                    let n = n.min(max_consumers);
                    measure(entity, n, idle, async {
                        let mut all = Vec::with_capacity(n as usize);
                        for i in 0..n {
                            let topic = format!("persistent://public/default/scale-c{n}-{i}");
                            all.push(
                                client
                                    .consumer(topic)
                                    .subscription("scale")
                                    .subscription_type(SubscriptionType::Shared)
                                    .subscribe()
                                    .await
                                    .expect("consumer"),
                            );
                        }
                        all
                    })
                    .await
                }
                "partition_producer" => {
                    let Some(broker) = broker.as_deref_mut() else {
                        eprintln!("partition_producer needs the mock broker: skipped");
                        continue;
                    };
                    let topic = format!("persistent://public/default/scale-pt{n}");
                    broker.partitioned(&topic, n);
                    measure(entity, n, idle, async {
                        vec![client.producer(topic).create().await.expect("producer")]
                    })
                    .await
                }
                other => panic!("SCALE_ENTITIES: unknown {other}"),
            };
            println!("{line}");
            drop(warm);
            let _ = client.close_within(Duration::from_secs(60)).await;
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
