//! End-to-end encryption (PIP-4) cost: CPU per message produced and consumed, with and
//! without encryption, for 100-byte and 10 KB payloads, batched and not, against the
//! in-process mock broker (its CPU is counted too, the same in both runs, so the ratios
//! understate the client's own share).
//!
//! `cargo bench --bench encryption` prints one JSON line per case and the ratios (encrypted /
//! plain). Environment: `ENC_BENCH_COUNT` (default 20,000 messages per case).
#![allow(clippy::print_stdout)]

use std::time::Duration;

use pulsar_sdk::crypto::{testing::rsa_key_pair_pem, PemFileKeyReader};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, SubscriptionType};
use serde_json::json;

/// User plus system CPU time of this process.
fn cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Keys {
    public: std::path::PathBuf,
    private: std::path::PathBuf,
}

async fn case(
    broker: &MockBroker,
    keys: Option<&Keys>,
    size: usize,
    batching: bool,
    count: usize,
) -> (f64, f64) {
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let topic = format!(
        "persistent://public/default/enc-bench-{size}-{batching}-{}",
        keys.is_some()
    );
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared);
    if let Some(k) = keys {
        consumer = consumer.crypto_key_reader(PemFileKeyReader::private_only(&k.private));
    }
    let mut consumer = consumer.subscribe().await.unwrap();
    // Blocks for room rather than failing: 20,000 10 KB sends in flight pass the client's
    // 64 MiB memory limit.
    let mut producer = client
        .producer(&topic)
        .batching(batching)
        .block_if_queue_full(true);
    if let Some(k) = keys {
        producer = producer
            .encryption_key("bench")
            .crypto_key_reader(PemFileKeyReader::public_only(&k.public));
    }
    let producer = producer.create().await.unwrap();
    let payload = vec![0x5au8; size];
    let start = cpu();
    let mut receipts = Vec::with_capacity(count);
    for _ in 0..count {
        receipts.push(producer.send(payload.clone()).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
    let produced = cpu() - start;
    let start = cpu();
    for _ in 0..count {
        let m = consumer.recv().await.unwrap();
        assert_eq!(m.payload.len(), size);
        consumer.ack(&m).unwrap();
    }
    let consumed = cpu() - start;
    client.close().await.unwrap();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / count as f64;
    (per(produced), per(consumed))
}

fn main() {
    let count: usize = std::env::var("ENC_BENCH_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("enc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (public, private) = rsa_key_pair_pem(2048).expect("an RSA-2048 key pair");
    let keys = Keys {
        public: dir.join("public.pem"),
        private: dir.join("private.pem"),
    };
    std::fs::write(&keys.public, public).unwrap();
    std::fs::write(&keys.private, private).unwrap();
    rt.block_on(async {
        let broker = MockBroker::start().await.unwrap();
        let mut summary = Vec::new();
        for size in [100usize, 10 * 1024] {
            for batching in [false, true] {
                let (pp, pc) = case(&broker, None, size, batching, count).await;
                let (ep, ec) = case(&broker, Some(&keys), size, batching, count).await;
                let line = json!({
                    "size": size, "batching": batching, "messages": count,
                    "plain_produce_us": pp, "plain_consume_us": pc,
                    "encrypted_produce_us": ep, "encrypted_consume_us": ec,
                    "produce_ratio": ep / pp, "consume_ratio": ec / pc,
                });
                println!("{line}");
                summary.push(format!(
                    "{size:>6} B batching={batching:<5} produce {pp:7.2} -> {ep:7.2} us/msg (x{:.2}), consume {pc:7.2} -> {ec:7.2} us/msg (x{:.2})",
                    ep / pp,
                    ec / pc
                ));
            }
        }
        println!("CPU per message (process, mock broker included), plain -> encrypted:");
        for s in summary {
            println!("  {s}");
        }
    });
    let _ = std::fs::remove_dir_all(dir);
}
