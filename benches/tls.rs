//! TLS against plain TCP, measured in one run against the in-process mock broker:
//! `cargo bench --bench tls` prints JSON lines, one per measurement, then the TLS/plain ratios.
//!
//! - `connect`: connections per second (build a client, look up, create a producer, close);
//!   the TLS handshake's cost.
//! - `produce`: 100-byte messages, batching on (1000 messages / 128 KiB / 5 ms), pipelined,
//!   every receipt awaited; `consume`: the same messages read back on a Shared subscription,
//!   each acked. Steady-state throughput.
//!
//! Rounds alternate plain and TLS so that machine noise hits both alike; the medians are
//! compared. Both ends run in this process on the same cores, so TLS pays its crypto twice
//! (client and broker): the ratio is pessimistic for the client.
#![allow(clippy::print_stdout)]

use support::certs;

use std::time::{Duration, Instant};

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTls};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, ClientBuilder, SubscriptionType};

const ROUNDS: usize = 3;
const MESSAGES: usize = 200_000;
const CONNECTS: usize = 200;

struct Setup {
    broker: MockBroker,
    ca: Option<std::path::PathBuf>,
}

impl Setup {
    fn client(&self) -> ClientBuilder {
        let b = Client::builder().service_url(self.broker.service_url());
        match &self.ca {
            Some(ca) => b.tls_trust_certs_file_path(ca),
            None => b,
        }
    }
}

async fn setup(tls: bool) -> Setup {
    if !tls {
        return Setup {
            broker: MockBroker::start().await.expect("mock broker"),
            ca: None,
        };
    }
    let dir = certs::fresh_dir("bench-tls");
    let ca = certs::Ca::new(&dir, "ca");
    let server = ca.local_server("broker");
    let broker = MockBroker::start_with(MockBrokerConfig {
        tls: Some(MockTls::new(server.cert.clone(), server.key.clone())),
        ..Default::default()
    })
    .await
    .expect("mock broker with TLS");
    Setup {
        broker,
        ca: Some(ca.pem.cert_path.clone()),
    }
}

async fn connects(s: &Setup) -> f64 {
    let start = Instant::now();
    for i in 0..CONNECTS {
        let client = s.client().build().unwrap();
        let p = client.producer(format!("c-{i}")).create().await.unwrap();
        p.close().await.unwrap();
        client.close().await.unwrap();
    }
    CONNECTS as f64 / start.elapsed().as_secs_f64()
}

async fn produce_consume(s: &Setup, topic: &str) -> (f64, f64) {
    let client = s.client().build().unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("bench")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_millis(5),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let payload = bytes::Bytes::from(vec![b'x'; 100]);
    let start = Instant::now();
    let mut receipts = Vec::with_capacity(MESSAGES);
    for _ in 0..MESSAGES {
        receipts.push(producer.send(payload.clone()).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
    let produce = MESSAGES as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    for _ in 0..MESSAGES {
        let m = consumer.recv().await.unwrap();
        consumer.ack(&m).unwrap();
    }
    let consume = MESSAGES as f64 / start.elapsed().as_secs_f64();
    client.close().await.unwrap();
    (produce, consume)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut results: [[Vec<f64>; 3]; 2] = Default::default();
    for round in 0..ROUNDS {
        for (i, tls) in [false, true].into_iter().enumerate() {
            let s = setup(tls).await;
            let c = connects(&s).await;
            let (p, r) = produce_consume(&s, &format!("t-{round}")).await;
            let mode = if tls { "tls" } else { "plain" };
            println!(
                r#"{{"round":{round},"mode":"{mode}","connects_per_s":{c:.0},"produce_msg_per_s":{p:.0},"consume_msg_per_s":{r:.0}}}"#
            );
            results[i][0].push(c);
            results[i][1].push(p);
            results[i][2].push(r);
            s.broker.shutdown().await;
        }
    }
    let [plain, tls] = results;
    let names = ["connects_per_s", "produce_msg_per_s", "consume_msg_per_s"];
    for (k, name) in names.iter().enumerate() {
        let (p, t) = (median(plain[k].clone()), median(tls[k].clone()));
        println!(
            r#"{{"summary":"{name}","plain_median":{p:.0},"tls_median":{t:.0},"tls_over_plain":{:.3}}}"#,
            t / p
        );
    }
}
