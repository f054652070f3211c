//! Operator metrics scraped by Prometheus: installs the `metrics-exporter-prometheus`
//! recorder with its own HTTP listener (its `http-listener` feature), which serves the text
//! format on `http://LISTEN/metrics`, and produces and consumes one message every
//! `interval-ms` so the series move. Needs the cargo feature `metrics`.
//!
//! cargo run --features metrics --example prometheus -- --url pulsar://127.0.0.1:6650
//!   --topic T [--listen 127.0.0.1:9464] [--interval-ms 500] [--topic-labels]
//!
//! then `curl http://127.0.0.1:9464/metrics` (names with `_` for `.`:
//! `pulsar_client_producer_message_send_duration`, `pulsar_client_consumer_message_ack` ...).
//! `--topic-labels` adds the `pulsar_topic` label (off by default: one series per namespace).

mod common;

use std::time::Duration;

use common::{die, Args};
use metrics_exporter_prometheus::PrometheusBuilder;

const USAGE: &str = "usage: prometheus --url U --topic T [--listen ADDR] [--interval-ms MS] \
[--topic-labels]";

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &["url", "topic", "listen", "interval-ms"],
        &["topic-labels"],
    );
    let topic = args.required(USAGE, "topic");
    let listen = args.get("listen").unwrap_or("127.0.0.1:9464").to_string();
    let interval = Duration::from_millis(args.number(USAGE, "interval-ms", 500));

    // The recorder first: the client registers its series when producers and consumers are
    // created. The exporter serves `/metrics` on its own listener and runs its own upkeep.
    let addr: std::net::SocketAddr = listen.parse().unwrap_or_else(|e| die(e));
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .unwrap_or_else(|e| die(e));
    pulsar_sdk::metrics::describe();
    eprintln!("serving metrics on http://{listen}/metrics");

    let client = args
        .client_builder()
        .metrics_topic_labels(args.flag("topic-labels"))
        .build()
        .unwrap_or_else(|e| die(e));
    let producer = client
        .producer(&topic)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    let mut consumer = client
        .consumer(&topic)
        .subscription("prometheus-example")
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(interval) => {
                n += 1;
                producer.send_and_wait(format!("m-{n}")).await.unwrap_or_else(|e| die(e));
                let m = consumer.recv().await.unwrap_or_else(|e| die(e));
                consumer.ack(&m).unwrap_or_else(|e| die(e));
            }
        }
    }
    client.close().await.unwrap_or_else(|e| die(e));
}
