//! Consume → transform → produce, at least once: an "order enricher". Reads orders
//! `ORDER-ID:QUANTITY:UNIT-PRICE-CENTS` from `--input`, writes one JSON line per order (keyed
//! by its id) to `--output`, and acks each input only after its output's receipt. Malformed
//! inputs are nacked and, after `--max-redeliver` deliveries, moved to the dead-letter topic
//! `<input>-<subscription>-DLQ`. At most `--max-in-flight` inputs are worked on at once (each
//! in its own task, acking through the consumer's `Acker`); sends are pipelined. Ctrl-C stops
//! receiving, lets the in-flight work finish, then closes everything. Prints one JSON line
//! of totals at the end.
//!
//! cargo run --example pipeline -- --url U --input T --output T2 [--subscription S]
//!   [--max-in-flight N] [--max-redeliver N] [--nack-delay-ms MS]
//!
//! Anything that is not an order (e.g. what the `produce` example sends) ends in the
//! dead-letter topic. The loop itself is in `examples/common/pipeline.rs`,
//! which `tests/protocol/mock_kit/pipeline.rs` runs against the mock broker through a broker restart.

mod common;
#[path = "common/pipeline.rs"]
mod pipeline;

use std::time::Duration;

use common::{die, Args};
use pulsar_sdk::{DeadLetterPolicy, InitialPosition, SubscriptionType};

const USAGE: &str = "usage: pipeline --url U --input T --output T2 [--subscription S] \
[--max-in-flight N] [--max-redeliver N] [--nack-delay-ms MS]";

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &[
            "url",
            "input",
            "output",
            "subscription",
            "max-in-flight",
            "max-redeliver",
            "nack-delay-ms",
        ],
        &[],
    );
    let input = args.required(USAGE, "input");
    let output = args.required(USAGE, "output");
    let subscription = args.get("subscription").unwrap_or("enricher").to_string();
    let max_in_flight: usize = args.number(USAGE, "max-in-flight", 64);
    let max_redeliver: u32 = args.number(USAGE, "max-redeliver", 3);
    let nack_delay = Duration::from_millis(args.number(USAGE, "nack-delay-ms", 1000));
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));
    let consumer = client
        .consumer(&input)
        .subscription(&subscription)
        // Shared: run several copies of this service to share the work (dead-lettering needs
        // Shared or Key_Shared).
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        // The default (60 s) is long for a demo: a malformed input is retried after this.
        .negative_ack_delay(nack_delay)
        .dead_letter_policy(DeadLetterPolicy::new(max_redeliver))
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    if let Some(dlq) = consumer.dead_letter_topic() {
        eprintln!("pipeline: malformed inputs go to {dlq}");
    }
    let producer = client
        .producer(&output)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("pipeline: cannot listen for Ctrl-C ({e}); running until killed");
            std::future::pending::<()>().await;
        }
        eprintln!("pipeline: stopping (finishing the work in flight)");
    };
    let stats = pipeline::run(consumer, producer.clone(), max_in_flight, ctrl_c)
        .await
        .unwrap_or_else(|e| die(e));
    if let Err(e) = producer.close().await {
        eprintln!("pipeline: closing the producer: {e}");
    }
    if let Err(e) = client.close().await {
        eprintln!("pipeline: closing the client: {e}");
    }
    println!(
        r#"{{"processed":{},"nacked":{}}}"#,
        stats.processed, stats.nacked
    );
}
