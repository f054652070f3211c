//! Typed messages with the official Python client (`pulsar.schema`, pulsar-client 3.13) through
//! pulsar-lite, both directions: JsonSchema and AvroSchema records and StringSchema values; for the encodings
//! the Python client has no schema class for (primitives, inline key/value), Python's `struct`
//! packs and unpacks upstream's big-endian layouts (tests/interop/schema_official.py).
//!
//! pulsar-lite keeps no schemas and never answers GetSchema: typed handles must work with their
//! local schema there and never hang.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use pulsar_sdk::schema::{
    AutoConsumeSchema, AvroSchema, BoolSchema, DoubleSchema, FloatSchema, GenericValue,
    Int16Schema, Int32Schema, Int64Schema, Int8Schema, JsonSchema, KeyValue, KeyValueSchema,
    Schema, StringSchema, TypedConsumer,
};
use pulsar_sdk::{Client, Error, InitialPosition, SubscriptionType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use support::{shared_broker, unique_name};

/// The Python test's `User(Record)`: every field optional (Python's default `required=False`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    name: Option<String>,
    age: Option<i32>,
    tags: Option<Vec<String>>,
}

fn user_schema() -> JsonSchema<User> {
    JsonSchema::record(
        "User",
        &[
            ("name", r#"["null","string"]"#),
            ("age", r#"["null","int"]"#),
            ("tags", r#"["null",{"type":"array","items":"string"}]"#),
        ],
    )
    .unwrap()
}

fn users() -> Vec<User> {
    (0..4)
        .map(|i| User {
            name: Some(format!("user-{i} é")),
            age: Some(20 + i),
            tags: Some((0..i).map(|t| format!("t{t}")).collect()),
        })
        .collect()
}

/// The Python test's `Measurement(Record)` for AvroSchema: same record name and namespace, same
/// fields in the same order; `id` is `Long(required=True)`, the others are optional
/// (`["null", T]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
#[avro(namespace = "org.example.interop")]
struct Measurement {
    id: i64,
    sensor: Option<String>,
    level: Option<i32>,
    ratio: Option<f32>,
    value: Option<f64>,
    ok: Option<bool>,
    tags: Option<Vec<String>>,
    counts: Option<HashMap<String, i32>>,
}

/// Every field set (non-ASCII text, negative numbers, several map entries), the optional
/// fields null, and empty containers. Not a null `ok`: Python's `Boolean()` field turns `None`
/// into `False` (its default), on encode and on decode alike. Floats are exact in binary so JSON carries them unchanged.
fn measurements() -> Vec<Measurement> {
    vec![
        Measurement {
            id: i64::MIN,
            sensor: Some("thermo é ✓".into()),
            level: Some(-7),
            ratio: Some(0.5),
            value: Some(-1234.125),
            ok: Some(true),
            tags: Some(vec!["a".into(), "b c".into()]),
            counts: Some(HashMap::from([("x".into(), 1), ("ü".into(), i32::MIN)])),
        },
        Measurement {
            id: 0,
            sensor: None,
            level: None,
            ratio: None,
            value: None,
            ok: Some(false),
            tags: None,
            counts: None,
        },
        Measurement {
            id: i64::MAX,
            sensor: Some(String::new()),
            level: Some(i32::MAX),
            ratio: Some(-2.25),
            value: Some(1e300),
            ok: Some(false),
            tags: Some(vec![]),
            counts: Some(HashMap::new()),
        },
    ]
}

fn measurement_schema() -> AvroSchema<Measurement> {
    AvroSchema::derived().unwrap()
}

fn client() -> Client {
    Client::builder()
        .service_url(shared_broker().url())
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Runs `schema_official.py <verb>` with `req` on stdin; its JSON answer.
async fn python(verb: &str, req: Value) -> Value {
    use tokio::io::AsyncWriteExt;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/schema_official.py"
    );
    let mut child = tokio::process::Command::new(support::venv_python())
        .arg(script)
        .arg(verb)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run schema_official.py");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(req.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("schema_official.py {verb}: no answer in 60 s"))
        .unwrap();
    assert!(
        out.status.success(),
        "schema_official.py {verb} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON answer")
}

async fn python_produce(topic: &str, schema: &str, values: Value) {
    let url = shared_broker().url();
    python(
        "produce",
        json!({"url": url, "topic": topic, "schema": schema, "values": values}),
    )
    .await;
}

async fn python_consume(topic: &str, schema: &str, count: usize) -> Vec<Value> {
    let req = json!({"url": shared_broker().url(), "topic": topic, "schema": schema,
        "subscription": unique_name("py"), "count": count, "timeout_secs": 20});
    let got = python("consume", req).await;
    let values = got["values"].as_array().unwrap().clone();
    assert_eq!(
        values.len(),
        count,
        "python consumer on {topic}: {values:?}"
    );
    values
}

/// Subscribes from the start with `schema` (Shared: pulsar-lite may dispatch duplicates on
/// Exclusive), and decodes `count` messages.
///
/// Runs in a task of its own: a debug build's poll frames are large, and this test's body
/// (seven schemas in one async block) plus a subscribe nested under it outgrow a test thread's
/// 2 MiB stack (a subscribe's poll chain takes about 1.6 MB of it in a debug build).
async fn consume<S>(topic: &str, schema: S, count: usize) -> Vec<S::Type>
where
    S: Schema + Send + Sync + 'static,
    S::Type: Send,
{
    let topic = topic.to_string();
    tokio::spawn(async move {
        let client = client();
        let consumer = subscribe(&client, &topic, schema).await;
        receive(consumer, count).await
    })
    .await
    .expect("the consume task")
}

async fn subscribe<S: Schema>(client: &Client, topic: &str, schema: S) -> TypedConsumer<S> {
    client
        .consumer(topic)
        .subscription(unique_name("rs"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .schema(schema)
        .subscribe()
        .await
        .unwrap()
}

/// Decodes and acks `count` messages, then closes the consumer.
async fn receive<S: Schema>(mut consumer: TypedConsumer<S>, count: usize) -> Vec<S::Type> {
    let mut out = Vec::new();
    for _ in 0..count {
        let msg = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("a message within 20 s")
            .unwrap();
        consumer.ack(&msg).unwrap();
        let (value, _) = msg.into_parts();
        out.push(value.unwrap());
    }
    consumer.close().await.unwrap();
    out
}

async fn produce<S>(topic: &str, schema: S, values: &[S::Type])
where
    S: Schema + Send + Sync + 'static,
    S::Type: Clone + Send + Sync,
{
    // In a task of its own, as `consume` (stack use of debug builds).
    let (topic, values) = (topic.to_string(), values.to_vec());
    tokio::spawn(async move { produce_here(&topic, schema, &values).await })
        .await
        .expect("the produce task")
}

async fn produce_here<S: Schema>(topic: &str, schema: S, values: &[S::Type]) {
    let client = client();
    let producer = client
        .producer(topic)
        .schema(schema)
        .create()
        .await
        .unwrap();
    for v in values {
        producer.send_and_wait(v).await.unwrap();
    }
    producer.close().await.unwrap();
}

#[tokio::test]
async fn our_json_definition_is_the_avro_record_python_registers() {
    let answer = python("info", json!({})).await;
    let theirs = answer["json_definition"].as_str().unwrap();
    let ours = user_schema().info().unwrap();
    let parse = |s: &str| apache_avro::Schema::parse_str(s).unwrap().canonical_form();
    assert_eq!(parse(ours.definition_str().unwrap()), parse(theirs));
}

#[tokio::test]
async fn we_decode_what_python_produces_with_schemas() {
    let topic = unique_name("schema-from-py-json");
    let values = serde_json::to_value(users()).unwrap();
    python_produce(&topic, "json", values).await;
    assert_eq!(consume(&topic, user_schema(), 4).await, users());

    let topic = unique_name("schema-from-py-string");
    python_produce(&topic, "string", json!(["a", "é ü", ""])).await;
    assert_eq!(
        consume(&topic, StringSchema, 3).await,
        ["a", "é ü", ""].map(String::from)
    );

    let topic = unique_name("schema-from-py-int32");
    python_produce(&topic, "int32", json!([0, -1, i32::MAX])).await;
    assert_eq!(consume(&topic, Int32Schema, 3).await, [0, -1, i32::MAX]);

    let topic = unique_name("schema-from-py-int64");
    python_produce(&topic, "int64", json!([i64::MIN, 42])).await;
    assert_eq!(consume(&topic, Int64Schema, 2).await, [i64::MIN, 42]);

    let topic = unique_name("schema-from-py-double");
    python_produce(&topic, "double", json!([1.5, -0.25])).await;
    assert_eq!(consume(&topic, DoubleSchema, 2).await, [1.5, -0.25]);

    let topic = unique_name("schema-from-py-bool");
    python_produce(&topic, "bool", json!([true, false])).await;
    assert_eq!(consume(&topic, BoolSchema, 2).await, [true, false]);

    let topic = unique_name("schema-from-py-kv");
    python_produce(&topic, "kv", json!([["k1", 1], ["", -7]])).await;
    assert_eq!(
        consume(&topic, KeyValueSchema::new(StringSchema, Int32Schema), 2).await,
        [
            KeyValue::new("k1".to_string(), 1),
            KeyValue::new(String::new(), -7)
        ]
    );
}

#[tokio::test]
async fn python_decodes_what_we_produce_with_schemas() {
    let topic = unique_name("schema-to-py-json");
    produce(&topic, user_schema(), &users()).await;
    let got = python_consume(&topic, "json", 4).await;
    assert_eq!(
        got,
        serde_json::to_value(users())
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    );

    let topic = unique_name("schema-to-py-string");
    produce(&topic, StringSchema, &["x".to_string(), "ß".to_string()]).await;
    assert_eq!(
        python_consume(&topic, "string", 2).await,
        [json!("x"), json!("ß")]
    );

    macro_rules! packed {
        ($kind:expr, $schema:expr, $values:expr) => {{
            let topic = unique_name(concat!("schema-to-py-", $kind));
            let values = $values;
            produce(&topic, $schema, &values).await;
            let got = python_consume(&topic, $kind, values.len()).await;
            assert_eq!(
                got,
                values.iter().map(|v| json!(v)).collect::<Vec<_>>(),
                $kind
            );
        }};
    }
    packed!("int8", Int8Schema, [i8::MIN, 3]);
    packed!("int16", Int16Schema, [i16::MAX, -2]);
    packed!("int32", Int32Schema, [7, i32::MIN]);
    packed!("int64", Int64Schema, [i64::MAX, -9]);
    packed!("float", FloatSchema, [0.5f32, -8.0]);
    packed!("double", DoubleSchema, [1e300, -0.125]);
    packed!("bool", BoolSchema, [false, true]);

    let topic = unique_name("schema-to-py-kv");
    let kvs = [
        KeyValue::new("key".to_string(), 5),
        KeyValue::new("ü".to_string(), -1),
    ];
    produce(&topic, KeyValueSchema::new(StringSchema, Int32Schema), &kvs).await;
    assert_eq!(
        python_consume(&topic, "kv", 2).await,
        [json!(["key", 5]), json!(["ü", -1])]
    );
}

#[tokio::test]
async fn avro_records_both_ways_with_python() {
    // Same definition as Python's AvroSchema(Measurement) registers (canonical form: names,
    // namespace, field order and types; Python sets no null defaults, ours does like Java's).
    let answer = python("info", json!({})).await;
    let theirs = answer["avro_definition"].as_str().unwrap();
    let ours = measurement_schema().info().unwrap();
    let parse = |s: &str| apache_avro::Schema::parse_str(s).unwrap().canonical_form();
    assert_eq!(parse(ours.definition_str().unwrap()), parse(theirs));

    // Python (fastavro schemaless_writer) -> our AvroSchema consumer, subscribed before the
    // records are produced (live, Shared).
    let topic = unique_name("schema-from-py-avro");
    let client = client();
    let consumer = subscribe(&client, &topic, measurement_schema()).await;
    python_produce(
        &topic,
        "avro",
        serde_json::to_value(measurements()).unwrap(),
    )
    .await;
    assert_eq!(receive(consumer, 3).await, measurements());

    // Our AvroSchema producer -> Python's AvroSchema consumer (Shared, from the earliest
    // message). pulsar-lite sends no schema version and never answers GetSchema: Python's
    // AvroSchema asks for the writer schema of each message and, after the operation timeout,
    // decodes with its own; a short operation timeout keeps that wait small.
    let topic = unique_name("schema-to-py-avro");
    produce(&topic, measurement_schema(), &measurements()).await;
    let req = json!({"url": shared_broker().url(), "topic": topic, "schema": "avro",
        "subscription": unique_name("py"), "count": 3, "timeout_secs": 20,
        "operation_timeout_secs": 2});
    let got = python("consume", req).await;
    let got: Vec<Measurement> = serde_json::from_value(got["values"].clone()).unwrap();
    assert_eq!(got, measurements());
}

/// pulsar-lite names no schema version and never answers GetSchema: an Avro consumer decodes
/// with its own schema, AUTO_CONSUME yields bytes, and a GetSchema fails at the operation
/// timeout instead of hanging.
#[tokio::test]
async fn without_a_registry_typed_handles_use_their_local_schema() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    struct Reading {
        sensor: String,
        value: f64,
    }
    let topic = unique_name("schema-lite-avro");
    let readings = vec![
        Reading {
            sensor: "a".into(),
            value: 1.5,
        },
        Reading {
            sensor: "b".into(),
            value: -2.0,
        },
    ];
    produce(&topic, AvroSchema::<Reading>::derived().unwrap(), &readings).await;
    assert_eq!(
        consume(&topic, AvroSchema::<Reading>::derived().unwrap(), 2).await,
        readings
    );
    let auto = consume(&topic, AutoConsumeSchema, 2).await;
    assert!(
        auto.iter().all(|v| matches!(v, GenericValue::Bytes(_))),
        "{auto:?}"
    );

    let err = client().get_schema(&topic, None).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}
