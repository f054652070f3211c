//! Receives `count` messages, acks each, and prints one JSON line per message, with the
//! payload's length (`len`) and CRC32C (`crc32c`); the payload itself (`payload`, or
//! `payload_b64` when it is not UTF-8) only up to 64 KiB.
//!
//! cargo run --example consume -- --url pulsar://127.0.0.1:6650
//!   (--topic T | --topics A,B,C | --pattern REGEX) --subscription S
//!   [--type exclusive|shared|failover|key_shared] [--initial-position earliest|latest]
//!   --count N [--timeout-secs S] [--no-auto-update] [--discovery-secs S] [--private-key PEM]
//!
//! `--private-key PEM` decrypts end-to-end encrypted messages (PIP-4) with the RSA private
//! key in the PEM file; one it cannot decrypt is reported as an error and not acked.
//!
//! When the topic gains partitions it prints `{"event":"partitions_changed","topic":...,
//! "partitions":n}`. With `--pattern` (e.g. `persistent://public/default/orders-.*`), each
//! time topics join or leave it prints `{"event":"topics_changed","added":[...],
//! "removed":[...]}`.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{die, fail, Args};
use pulsar_sdk::{InitialPosition, SubscriptionType};

const USAGE: &str = "usage: consume --url U (--topic T | --topics A,B,C | --pattern REGEX) \
--subscription S [--type exclusive|shared|failover|key_shared] \
[--initial-position earliest|latest] --count N [--timeout-secs S] [--no-auto-update] \
[--discovery-secs S] [--private-key PEM]";

/// Larger payloads are described by their length and checksum only.
const MAX_PRINTED: usize = 64 * 1024;

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &[
            "url",
            "topic",
            "topics",
            "pattern",
            "discovery-secs",
            "subscription",
            "type",
            "initial-position",
            "count",
            "timeout-secs",
            "private-key",
        ],
        &["no-auto-update"],
    );
    let topic = args.get("topic").map(str::to_string);
    let topics = args.get("topics").map(|t| {
        t.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    });
    let pattern = args.get("pattern").map(str::to_string);
    if [topic.is_some(), topics.is_some(), pattern.is_some()]
        .iter()
        .filter(|x| **x)
        .count()
        != 1
    {
        fail(USAGE, "give exactly one of --topic, --topics, --pattern");
    }
    let subscription = args.required(USAGE, "subscription");
    let count: usize = args.number(USAGE, "count", 0);
    if args.get("count").is_none() {
        fail(USAGE, "--count is required");
    }
    let timeout = Duration::from_secs(args.number(USAGE, "timeout-secs", 30));
    let sub_type = match args.get("type").unwrap_or("exclusive") {
        "exclusive" => SubscriptionType::Exclusive,
        "shared" => SubscriptionType::Shared,
        "failover" => SubscriptionType::Failover,
        "key_shared" => SubscriptionType::KeyShared,
        other => fail(USAGE, &format!("unknown --type `{other}`")),
    };
    let position = match args.get("initial-position").unwrap_or("latest") {
        "earliest" => InitialPosition::Earliest,
        "latest" => InitialPosition::Latest,
        other => fail(USAGE, &format!("unknown --initial-position `{other}`")),
    };
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));
    let builder = match (topic, topics, pattern) {
        (Some(t), _, _) => client.consumer(t),
        (_, Some(list), _) => client.multi_topic_consumer(list),
        (_, _, Some(p)) => {
            client
                .pattern_consumer(p)
                .pattern_auto_discovery_period(Duration::from_secs(args.number(
                    USAGE,
                    "discovery-secs",
                    60,
                )))
        }
        _ => unreachable!("checked above"),
    };
    let builder = match args.get("private-key") {
        Some(pem) => {
            builder.crypto_key_reader(pulsar_sdk::crypto::PemFileKeyReader::private_only(pem))
        }
        None => builder,
    };
    let mut consumer = builder
        .subscription(subscription)
        .subscription_type(sub_type)
        .initial_position(position)
        .auto_update_partitions(!args.flag("no-auto-update"))
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    common::print_partition_changes(consumer.topic().to_string(), consumer.partition_updates());
    let mut changes = consumer.topic_updates();
    tokio::spawn(async move {
        while let Some(c) = changes.next_change().await {
            if c.missed > 0 {
                eprintln!("warning: {} topic changes not shown", c.missed);
            }
            let names = |v: &[pulsar_sdk::TopicName]| -> Vec<String> {
                v.iter().map(|t| t.to_string()).collect()
            };
            println!(
                "{}",
                serde_json::json!({
                    "event": "topics_changed",
                    "added": names(&c.added),
                    "removed": names(&c.removed),
                })
            );
        }
    });
    let deadline = tokio::time::Instant::now() + timeout;
    let mut received = 0;
    while received < count {
        let msg = match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => die(e),
            Err(_) => {
                eprintln!("error: only {received} of {count} messages arrived within {timeout:?}");
                std::process::exit(1);
            }
        };
        let mut line = serde_json::json!({
            "topic": msg.topic.to_string(),
            "message_id": msg.id.to_string(),
            "key": msg.key,
            "properties": msg.properties,
            "event_time": msg.event_time,
            "publish_time": msg.publish_time,
            "redelivery_count": msg.redelivery_count,
        });
        line["len"] = msg.payload.len().into();
        line["crc32c"] = crc32c::crc32c(&msg.payload).into();
        match msg.payload_str() {
            _ if msg.payload.len() > MAX_PRINTED => {}
            Some(s) => line["payload"] = s.into(),
            None => {
                line["payload_b64"] = base64::engine::general_purpose::STANDARD
                    .encode(&msg.payload)
                    .into()
            }
        }
        println!("{line}");
        consumer.ack(&msg).unwrap_or_else(|e| die(e));
        received += 1;
    }
    consumer.close().await.unwrap_or_else(|e| die(e));
}
