//! Cluster-level failover (PIP-121), this client and the official Python client side by side,
//! in the same run, on the same scenario: two pulsar-lite brokers (primary, standby; they do
//! not replicate), a producer and a consumer (two clients, each with an `AutoClusterFailover`:
//! check interval 1 s, thresholds 1 and 1) under a steady load; the primary is killed (SIGKILL),
//! restarted a few seconds later, and the load goes on.
//!
//! Figures per client:
//! - **to first receipt**: from the kill to the first send receipt after it (necessarily from
//!   the standby); the kill falls at a random phase of the check interval, so this varies
//!   between runs from about the reconnect time to one interval more;
//! - **switch back**: from the primary's restart until no connection to the standby remains
//!   (read from `/proc/net/tcp`: the clients left it);
//! - **lost**: messages whose send was acknowledged and that nobody received, counting what the
//!   standby still held after the switch back (read here on the same subscription);
//! - **duplicates**: deliveries beyond one per message.
//!
//! cargo bench --bench cluster_failover

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pulsar_sdk::{
    AutoClusterFailover, BackoffPolicy, Client, InitialPosition, ServiceInfo, SubscriptionType,
};
use support::{unique_name, venv_python, PulsarLite};

const RATE: u64 = 200;
const SECONDS: u64 = 16;
const COUNT: usize = (RATE * SECONDS) as usize;
const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Load before the kill, and downtime of the primary.
const BEFORE_KILL: Duration = Duration::from_secs(3);
const DOWN: Duration = Duration::from_secs(5);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What one run saw: receipts and deliveries (payload index, wall-clock seconds).
#[derive(Default)]
struct Seen {
    acked: Vec<(usize, f64)>,
    failed: usize,
    received: Vec<(usize, f64)>,
}

fn client(primary: &str, standby: &str) -> Client {
    let failover = AutoClusterFailover::builder()
        .primary(ServiceInfo::new(primary).unwrap())
        .secondary(ServiceInfo::new(standby).unwrap())
        .check_interval(CHECK_INTERVAL)
        .build()
        .unwrap();
    Client::builder()
        .service_info_provider(failover)
        .backoff(BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            ..Default::default()
        })
        .build()
        .unwrap()
}

/// This client's load, run in this process.
async fn rust_load(primary: String, standby: String, topic: String) -> Seen {
    let (pc, cc) = (client(&primary, &standby), client(&primary, &standby));
    let mut consumer = cc
        .consumer(&topic)
        .subscription("live")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = pc
        .producer(&topic)
        .send_timeout(Duration::from_secs(120))
        .create()
        .await
        .unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let r = received.clone();
    let reading = tokio::spawn(async move {
        while let Ok(m) = consumer.recv().await {
            let i: usize = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
            r.lock().unwrap().push((i, now()));
            let _ = consumer.ack(&m);
        }
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, pulsar_sdk::SendFuture)>();
    let receipts = tokio::spawn(async move {
        let (mut acked, mut failed) = (Vec::new(), 0);
        while let Some((i, f)) = rx.recv().await {
            match f.await {
                Ok(_) => acked.push((i, now())),
                Err(_) => failed += 1,
            }
        }
        (acked, failed)
    });
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    for i in 0..COUNT {
        tick.tick().await;
        tx.send((i, producer.send(i.to_string()).await.unwrap()))
            .unwrap();
    }
    drop(tx);
    let (acked, failed) = receipts.await.unwrap();
    // As the Python side: until everything acknowledged arrived, or 5 s of quiet.
    let deadline = now() + 60.0;
    while now() < deadline {
        let done = {
            let got = received.lock().unwrap();
            let ids: BTreeSet<usize> = got.iter().map(|(i, _)| *i).collect();
            acked.iter().all(|(i, _)| ids.contains(i))
                || got.last().is_none_or(|l| now() - l.1 > 5.0)
        };
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reading.abort();
    let _ = pc.close().await;
    let _ = cc.close().await;
    let received = std::mem::take(&mut *received.lock().unwrap());
    Seen {
        acked,
        failed,
        received,
    }
}

/// The official client's load (`benches/cluster_failover_official.py`), in its own process.
async fn python_load(primary: String, standby: String, topic: String) -> Seen {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/benches/cluster_failover_official.py"
            ))
            .args([&primary, &standby, &topic])
            .args([
                COUNT.to_string(),
                RATE.to_string(),
                CHECK_INTERVAL.as_millis().to_string(),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "the official client printed nothing: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let pairs = |k: &str| -> Vec<(usize, f64)> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap()))
            .collect()
    };
    Seen {
        acked: pairs("acked"),
        failed: v["failed"].as_u64().unwrap() as usize,
        received: pairs("received"),
    }
}

/// Established TCP connections to `port` on this machine (IPv4 and IPv6).
fn connections_to(port: u16) -> usize {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "01"
        })
        .count()
}

struct Figures {
    to_first_receipt: Option<f64>,
    switch_back: Option<f64>,
    acked: usize,
    failed: usize,
    lost: usize,
    duplicates: usize,
}

async fn scenario(python: bool) -> Figures {
    let mut primary = PulsarLite::start();
    let standby = PulsarLite::start();
    let topic = unique_name(if python { "failover-py" } else { "failover-rs" });
    let (p, s, t) = (primary.url(), standby.url(), topic.clone());
    let load = if python {
        tokio::spawn(python_load(p, s, t))
    } else {
        tokio::spawn(rust_load(p, s, t))
    };
    // A kill at a random phase of the clients' check interval (their probes tick from when
    // each client was built): the time to the first receipt is then up to one interval plus
    // the reconnect, not a figure locked to the schedule.
    let phase = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        % CHECK_INTERVAL.as_nanos() as u64;
    tokio::time::sleep(BEFORE_KILL + Duration::from_nanos(phase)).await;
    primary.stop();
    let killed = now();
    tokio::time::sleep(DOWN).await;
    primary.start_again();
    let restarted = now();
    let mut switch_back = None;
    while now() - restarted < 60.0 {
        if connections_to(standby.port()) == 0 {
            switch_back = Some(now() - restarted);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = load.await.unwrap();
    // What the standby kept after the clients left it.
    let drain = Client::builder()
        .service_url(standby.url())
        .build()
        .unwrap();
    let mut leftover = drain
        .consumer(&topic)
        .subscription("live")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(3), leftover.recv()).await {
        let i: usize = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
        seen.received.push((i, now()));
        let _ = leftover.ack(&m);
    }
    let _ = drain.close().await;
    let mut deliveries: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, _) in &seen.received {
        *deliveries.entry(*i).or_default() += 1;
    }
    let acked: BTreeSet<usize> = seen.acked.iter().map(|(i, _)| *i).collect();
    Figures {
        to_first_receipt: seen
            .acked
            .iter()
            .map(|(_, t)| *t)
            .filter(|t| *t > killed)
            .reduce(f64::min)
            .map(|t| t - killed),
        switch_back,
        acked: acked.len(),
        failed: seen.failed,
        lost: acked.iter().filter(|i| !deliveries.contains_key(i)).count(),
        duplicates: deliveries.values().map(|n| n - 1).sum(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ms = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{:.0} ms", s * 1000.0));
    println!(
        "cluster failover: {COUNT} messages at {RATE}/s, kill -9 of the primary after {BEFORE_KILL:?}, \
         down {DOWN:?}; check interval {CHECK_INTERVAL:?}, thresholds 1/1"
    );
    println!(
        "{:<16} {:>18} {:>14} {:>7} {:>7} {:>5} {:>11}",
        "client", "to first receipt", "switch back", "acked", "failed", "lost", "duplicates"
    );
    for (name, python) in [("pulsar-sdk", false), ("official Python", true)] {
        let f = rt.block_on(scenario(python));
        println!(
            "{name:<16} {:>18} {:>14} {:>7} {:>7} {:>5} {:>11}",
            ms(f.to_first_receipt),
            ms(f.switch_back),
            f.acked,
            f.failed,
            f.lost,
            f.duplicates
        );
    }
}
