//! A poison-message demo of dead-letter topics (PIP-124): a Shared consumer negatively acks
//! every message it receives until `count` messages have been dead-lettered, printing one JSON
//! line per dead-lettered message `{"message_id","payload","redelivery_count","dlq_topic"}`.
//!
//! cargo run --example dead_letter -- --url U --topic T --subscription S --max-redeliver N
//!   [--dlq-topic D] [--initial-subscription I] [--nack-delay-ms MS] --count M
//!   [--timeout-secs S]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{die, fail, Args};
use pulsar_sdk::{DeadLetterPolicy, InitialPosition, SubscriptionType};

const USAGE: &str = "usage: dead_letter --url U --topic T --subscription S --max-redeliver N \
[--dlq-topic D] [--initial-subscription I] [--nack-delay-ms MS] --count M [--timeout-secs S]";

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &[
            "url",
            "topic",
            "subscription",
            "max-redeliver",
            "dlq-topic",
            "initial-subscription",
            "nack-delay-ms",
            "count",
            "timeout-secs",
        ],
        &[],
    );
    let topic = args.required(USAGE, "topic");
    let subscription = args.required(USAGE, "subscription");
    let max: u32 = args.number(USAGE, "max-redeliver", 0);
    if max == 0 {
        fail(USAGE, "--max-redeliver must be at least 1");
    }
    let count: usize = args.number(USAGE, "count", 0);
    if count == 0 {
        fail(USAGE, "--count must be at least 1");
    }
    let nack_delay = Duration::from_millis(args.number(USAGE, "nack-delay-ms", 100));
    let timeout = Duration::from_secs(args.number(USAGE, "timeout-secs", 60));
    let mut policy = DeadLetterPolicy::new(max);
    if let Some(d) = args.get("dlq-topic") {
        policy = policy.dead_letter_topic(d);
    }
    if let Some(i) = args.get("initial-subscription") {
        policy = policy.initial_subscription_name(i);
    }
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));
    let mut consumer = client
        .consumer(&topic)
        .subscription(&subscription)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(nack_delay)
        .dead_letter_policy(policy.clone())
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let dlq_topic = consumer
        .dead_letter_topic()
        .unwrap_or_else(|| die("the policy does not apply to this subscription"))
        .to_string();
    // Read the dead-letter topic to report what lands there.
    let mut dlq_reader = client
        .reader(&dlq_topic)
        .start_earliest()
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut reported = HashSet::new();
    // The last redelivery count the consumer saw for each message.
    let mut seen_counts = HashMap::new();
    while reported.len() < count {
        tokio::select! {
            m = consumer.recv() => {
                let m = m.unwrap_or_else(|e| die(e));
                seen_counts.insert(m.id.to_string(), m.redelivery_count);
                consumer.nack(&m).unwrap_or_else(|e| die(e));
            }
            d = dlq_reader.recv() => {
                let d = d.unwrap_or_else(|e| die(e));
                let origin = d.properties.get("ORIGIN_MESSAGE_ID").cloned().unwrap_or_default();
                if reported.insert(origin.clone()) {
                    println!(
                        "{}",
                        serde_json::json!({
                            "message_id": origin,
                            "payload": String::from_utf8_lossy(&d.payload),
                            "redelivery_count": seen_counts.get(&origin).copied().unwrap_or(max),
                            "dlq_topic": dlq_topic,
                        })
                    );
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!("error: only {} of {count} messages dead-lettered within {timeout:?}", reported.len());
                std::process::exit(1);
            }
        }
    }
    consumer.close().await.unwrap_or_else(|e| die(e));
}
