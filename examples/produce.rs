//! Sends `count` messages `P0, P1, ...` and prints `{"sent":N,"last_message_id":"..."}`.
//!
//! cargo run --example produce -- --url pulsar://127.0.0.1:6650 --topic T --count 10 [--key K]
//!   [--property k=v]... [--batch] [--compression none|lz4|zlib|zstd|snappy] [--prefix P]
//!   [--interval-ms MS] [--no-auto-update]
//!
//! When the topic gains partitions it prints `{"event":"partitions_changed","topic":...,
//! "partitions":n}`.

mod common;

use std::time::Duration;

use common::{die, fail, Args};
use pulsar_sdk::{CompressionType, ProducerMessage};

const USAGE: &str = "usage: produce --url U --topic T --count N [--key K] [--property k=v]... \
[--batch] [--compression none|lz4|zlib|zstd|snappy] [--prefix P] [--interval-ms MS] \
[--no-auto-update]";

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &[
            "url",
            "topic",
            "count",
            "key",
            "property",
            "compression",
            "prefix",
            "interval-ms",
        ],
        &["batch", "no-auto-update"],
    );
    let topic = args.required(USAGE, "topic");
    let count: u64 = args.number(USAGE, "count", 0);
    if args.get("count").is_none() {
        fail(USAGE, "--count is required");
    }
    let prefix = args.get("prefix").unwrap_or("msg-").to_string();
    let interval = Duration::from_millis(args.number(USAGE, "interval-ms", 0));
    let compression: CompressionType = args
        .get("compression")
        .unwrap_or("none")
        .parse()
        .unwrap_or_else(|e| fail(USAGE, &format!("{e}")));
    let mut properties = Vec::new();
    for p in args.all("property") {
        let Some((k, v)) = p.split_once('=') else {
            fail(USAGE, &format!("--property `{p}` is not k=v"));
        };
        properties.push((k.to_string(), v.to_string()));
    }
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));
    let producer = client
        .producer(&topic)
        .batching(args.flag("batch"))
        .compression(compression)
        .auto_update_partitions(!args.flag("no-auto-update"))
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    common::print_partition_changes(producer.topic().to_string(), producer.partition_changes());
    let mut pending = Vec::new();
    for i in 0..count {
        let mut msg = ProducerMessage::new(format!("{prefix}{i}"));
        if let Some(k) = args.get("key") {
            msg = msg.key(k);
        }
        for (k, v) in &properties {
            msg = msg.property(k, v);
        }
        pending.push(producer.send(msg).await.unwrap_or_else(|e| die(e)));
        if !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
    }
    let mut last = None;
    for f in pending {
        last = Some(f.await.unwrap_or_else(|e| die(e)));
    }
    producer.close().await.unwrap_or_else(|e| die(e));
    println!(
        "{}",
        serde_json::json!({
            "sent": count,
            "last_message_id": last.map(|id| id.to_string()),
        })
    );
}
