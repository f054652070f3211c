//! Typed messages: produces and consumes JSON-schema structs and Avro records, printing one JSON
//! line per message received: `{"schema":"json"|"avro","value":{...},"schema_version":N|null}`.
//!
//! cargo run --example typed -- --url pulsar://127.0.0.1:6650 [--topic T] [--count N]
//!
//! Uses the topics `T-json` and `T-avro` (default `T` = `typed-<pid>`). The JSON schema's
//! definition is derived from the struct's `apache_avro::AvroSchema` (the Avro-record form the
//! Java and Python clients register); the Avro records are Avro binary datums. Needs the crate
//! features `json` and `avro`.

mod common;

use std::time::Duration;

use common::{die, Args};
use pulsar_sdk::schema::{AvroSchema, JsonSchema, Schema, TypedConsumer};
use pulsar_sdk::InitialPosition;
use serde::{Deserialize, Serialize};

const USAGE: &str = "usage: typed --url U [--topic T] [--count N]";

/// Sent with a JSON schema.
#[derive(Debug, Serialize, Deserialize, apache_avro::AvroSchema)]
struct Order {
    id: u32,
    item: String,
    quantity: i32,
    note: Option<String>,
}

/// Sent with an Avro schema.
#[derive(Debug, Serialize, Deserialize, apache_avro::AvroSchema)]
struct Reading {
    sensor: String,
    celsius: f64,
}

async fn print_all<S: Schema>(consumer: &mut TypedConsumer<S>, label: &str, count: u32)
where
    S::Type: Serialize,
{
    for _ in 0..count {
        let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .unwrap_or_else(|_| die("no message within 30 s"))
            .unwrap_or_else(|e| die(e));
        match msg.value() {
            Ok(v) => println!(
                "{}",
                serde_json::json!({
                    "schema": label,
                    "value": v,
                    "schema_version": msg.schema_version().and_then(|v| v.as_long()),
                })
            ),
            // A payload the schema cannot decode is an error for that message only.
            Err(e) => eprintln!("message {} does not decode: {e}", msg.id()),
        }
        consumer.ack(&msg).unwrap_or_else(|e| die(e));
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse(USAGE, &["url", "topic", "count"], &[]);
    let base = args
        .get("topic")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("typed-{}", std::process::id()));
    let count: u32 = args.number(USAGE, "count", 3);
    let client = args.client_builder().build().unwrap_or_else(|e| die(e));

    let json_topic = format!("{base}-json");
    let orders = JsonSchema::<Order>::derived().unwrap_or_else(|e| die(e));
    let mut json_consumer = client
        .consumer(&json_topic)
        .subscription("typed-example")
        .initial_position(InitialPosition::Earliest)
        .schema(orders.clone())
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let producer = client
        .producer(&json_topic)
        .schema(orders)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    for i in 0..count {
        let order = Order {
            id: i,
            item: format!("item-{i}"),
            quantity: i as i32 + 1,
            note: (i % 2 == 0).then(|| "gift".to_string()),
        };
        producer
            .send_and_wait(&order)
            .await
            .unwrap_or_else(|e| die(e));
    }
    producer.close().await.unwrap_or_else(|e| die(e));
    print_all(&mut json_consumer, "json", count).await;

    let avro_topic = format!("{base}-avro");
    let readings = AvroSchema::<Reading>::derived().unwrap_or_else(|e| die(e));
    let mut avro_consumer = client
        .consumer(&avro_topic)
        .subscription("typed-example")
        .initial_position(InitialPosition::Earliest)
        .schema(readings.clone())
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let producer = client
        .producer(&avro_topic)
        .schema(readings)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    for i in 0..count {
        let reading = Reading {
            sensor: format!("s{i}"),
            celsius: 20.0 + f64::from(i) / 2.0,
        };
        producer
            .send_and_wait(&reading)
            .await
            .unwrap_or_else(|e| die(e));
    }
    producer.close().await.unwrap_or_else(|e| die(e));
    print_all(&mut avro_consumer, "avro", count).await;
    client.close().await.unwrap_or_else(|e| die(e));
}
