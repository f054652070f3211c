//! Review probes of the schema work (#15): exact bytes against upstream's schemas, the
//! key/value schema info, schema versions on batched and chunked messages, messages without a
//! version, a writer schema of another type, the broker's rules for a consumer's schema, and
//! a typed reader that seeks after a cancelled recv.

use support as common;

use std::time::Duration;

use common::{full, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockSchemaCompatibility};
use pulsar_sdk::schema::{
    AutoConsumeSchema, AvroSchema, BoolSchema, DateSchema, DoubleSchema, FloatSchema, GenericValue,
    InstantSchema, Int16Schema, Int32Schema, Int64Schema, Int8Schema, JsonSchema, KeyValue,
    KeyValueSchema, LocalDateSchema, LocalDateTimeSchema, LocalTimeSchema, Schema, SchemaType,
    StringSchema, TimeSchema, TimestampSchema,
};
use pulsar_sdk::{Client, Error, MessageId, ProducerMessage, ServerError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    name: String,
}

const USER: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}"#;
const USER2: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},
    {"name":"age","type":"int","default":0}]}"#;

fn client(broker: &MockBroker) -> Client {
    common::test_client(&broker.service_url())
        .build()
        .expect("valid config")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes Java's `ByteSchema` .. `LocalDateTimeSchema` write (ByteBuffer, big-endian).
#[test]
fn primitive_payloads_are_upstreams_bytes() {
    assert_eq!(hex(&Int8Schema.encode(&-2).unwrap()), "fe");
    assert_eq!(hex(&Int16Schema.encode(&-2).unwrap()), "fffe");
    assert_eq!(hex(&Int32Schema.encode(&0x0102_0304).unwrap()), "01020304");
    assert_eq!(hex(&Int64Schema.encode(&-1).unwrap()), "ffffffffffffffff");
    // Float.floatToIntBits(1.5f) = 0x3fc00000; Double.doubleToLongBits(-2.0) = 0xc000...
    assert_eq!(hex(&FloatSchema.encode(&1.5).unwrap()), "3fc00000");
    assert_eq!(
        hex(&DoubleSchema.encode(&-2.0).unwrap()),
        "c000000000000000"
    );
    assert_eq!(hex(&BoolSchema.encode(&true).unwrap()), "01");
    assert_eq!(hex(&BoolSchema.encode(&false).unwrap()), "00");
    // Any non-zero byte is true (BooleanSchema.decode: bytes[0] != 0).
    assert!(BoolSchema.decode(&[2], None).unwrap());
    for s in [
        DateSchema.encode(&1_000).unwrap(),
        TimeSchema.encode(&1_000).unwrap(),
        TimestampSchema.encode(&1_000).unwrap(),
        LocalDateSchema.encode(&1_000).unwrap(),
        LocalTimeSchema.encode(&1_000).unwrap(),
    ] {
        assert_eq!(hex(&s), "00000000000003e8");
    }
    // Instant: putLong(epochSecond).putInt(nano).
    assert_eq!(
        hex(&InstantSchema.encode(&(1, 2)).unwrap()),
        "0000000000000001".to_owned() + "00000002"
    );
    // LocalDateTime: putLong(epochDay).putLong(nanoOfDay).
    assert_eq!(
        hex(&LocalDateTimeSchema.encode(&(-1, 3)).unwrap()),
        "ffffffffffffffff".to_owned() + "0000000000000003"
    );
    // A payload of another size is a decode error, never a panic (upstream `validate`).
    for n in [0usize, 3, 20] {
        let p = vec![0u8; n];
        assert!(Int32Schema.decode(&p, None).is_err());
        assert!(InstantSchema.decode(&p, None).is_err());
        assert!(LocalDateTimeSchema.decode(&p, None).is_err());
        assert!(BoolSchema.decode(&p, None).is_err());
        assert!(DoubleSchema.decode(&p, None).is_err());
    }
    assert!(StringSchema.decode(&[0xff, 0xfe], None).is_err());
    assert_eq!(StringSchema.decode(&[], None).unwrap(), "");
}

/// `KeyValue.encode` and `KeyValueSchemaInfo.encodeKeyValueSchemaInfo`.
#[test]
fn key_value_bytes_and_schema_info_follow_upstream() {
    let kv = KeyValueSchema::new(StringSchema, Int32Schema);
    let payload = kv.encode(&KeyValue::new("ab".to_string(), 7)).unwrap();
    assert_eq!(
        hex(&payload),
        "00000002616200000004".to_owned() + "00000007"
    );
    let info = kv.info().unwrap();
    assert_eq!(info.schema_type, SchemaType::KeyValue);
    assert_eq!(info.name, "KeyValue");
    // Both sides have empty definitions: two zero lengths.
    assert_eq!(hex(&info.definition), "0000000000000000");
    let p = |k: &str| info.properties.get(k).map(String::as_str);
    assert_eq!(p("key.schema.name"), Some("String"));
    assert_eq!(p("key.schema.type"), Some("STRING"));
    assert_eq!(p("key.schema.properties"), Some("{}"));
    assert_eq!(p("value.schema.name"), Some("INT32"));
    assert_eq!(p("value.schema.type"), Some("INT32"));
    assert_eq!(p("value.schema.properties"), Some("{}"));
    assert_eq!(p("kv.encoding.type"), Some("INLINE"));
    assert_eq!(info.properties.len(), 7);

    // A side with properties records them as a JSON object (SchemaUtils.serializeSchemaProperties).
    let kv = KeyValueSchema::separated(Int64Schema, JsonSchema::<User>::new(USER).unwrap());
    let info = kv.info().unwrap();
    let props: serde_json::Value =
        serde_json::from_str(&info.properties["value.schema.properties"]).unwrap();
    assert_eq!(props["__alwaysAllowNull"], "true");
    assert_eq!(props["__jsr310ConversionEnabled"], "false");
    assert_eq!(info.properties["value.schema.type"], "JSON");
    assert_eq!(info.properties["kv.encoding.type"], "SEPARATED");
    // Key definition empty, value definition the record: [0][len][USER].
    assert_eq!(&info.definition[..4], &[0, 0, 0, 0]);
    assert_eq!(&info.definition[8..], USER.as_bytes());

    // Truncated or lying lengths are decode errors.
    let kv = KeyValueSchema::new(StringSchema, Int32Schema);
    for bad in [
        &[][..],
        &[0, 0, 0][..],
        &[0, 0, 0, 9, b'a'][..],
        &[0x80, 0, 0, 0][..],
        &[0, 0, 0, 0, 0, 0, 0, 4, 0][..],
    ] {
        assert!(kv.decode(bad, None).is_err(), "{bad:?}");
    }
}

/// Every message of a schema producer carries its schema version: single, batched and chunked.
#[tokio::test]
async fn batched_and_chunked_messages_carry_the_schema_version() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-batch-chunk");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    // Version 0 is a short string schema; then version 1 after ALWAYS_COMPATIBLE lets a
    // second type in, so the version tested is not the all-zero default.
    broker.set_schema_compatibility(MockSchemaCompatibility::AlwaysCompatible);
    let first = client
        .producer(&topic)
        .schema(Int32Schema)
        .create()
        .await
        .unwrap();
    first.send_and_wait(&1).await.unwrap();
    let batched = client
        .producer(&topic)
        .schema(StringSchema)
        .configure(|b| b.batching(true))
        .create()
        .await
        .unwrap();
    let a = batched.send(&"a".to_string()).await.unwrap();
    let b = batched.send(&"b".to_string()).await.unwrap();
    batched.flush().await.unwrap();
    a.await.unwrap();
    b.await.unwrap();
    let chunked = client
        .producer(&topic)
        .schema(StringSchema)
        .configure(|b| b.chunking(true).chunk_max_message_size(1024))
        .create()
        .await
        .unwrap();
    chunked.send_and_wait(&"x".repeat(5000)).await.unwrap();

    let v0 = Some(bytes::Bytes::from_static(&[0; 8]));
    let v1 = Some(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1]));
    let m = within("first", consumer.recv()).await.unwrap();
    assert_eq!(m.schema_version, v0);
    for what in ["batched a", "batched b"] {
        let m = within(what, consumer.recv()).await.unwrap();
        assert_eq!(m.schema_version, v1, "{what}");
    }
    let m = within("chunked", consumer.recv()).await.unwrap();
    assert_eq!(m.payload.len(), 5000);
    assert_eq!(m.schema_version, v1, "chunked message");
    assert_eq!(broker.schemas(&topic).len(), 2);
}

/// A typed consumer given a message without a schema version (a bytes producer) decodes it
/// with its own schema and asks the broker for nothing; AUTO_CONSUME yields the bytes.
#[tokio::test]
async fn messages_without_a_schema_version_decode_locally_without_get_schema() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-no-version");
    let schema = AvroSchema::<User>::new(USER).unwrap();
    let mut avro = client
        .consumer(&topic)
        .subscription("avro")
        .schema(schema.clone())
        .subscribe()
        .await
        .unwrap();
    let mut auto = client
        .consumer(&topic)
        .subscription("auto")
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    let raw = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let payload = schema.encode(&User { name: "raw".into() }).unwrap();
    raw.send_and_wait(ProducerMessage::new(payload.clone()))
        .await
        .unwrap();
    // An empty payload too: an error for that message, not a stalled consumer.
    raw.send_and_wait(ProducerMessage::new(Vec::<u8>::new()))
        .await
        .unwrap();
    let m = within("avro", avro.recv()).await.unwrap();
    assert_eq!(m.schema_version(), None);
    assert_eq!(m.value().unwrap(), &User { name: "raw".into() });
    let m = within("avro empty", avro.recv()).await.unwrap();
    assert!(m.value().is_err());
    let m = within("auto", auto.recv()).await.unwrap();
    assert_eq!(m.value().unwrap(), &GenericValue::Bytes(payload));
    assert!(broker.received_of(Type::GetSchema).is_empty());
}

/// A writer schema of another type (ALWAYS_COMPATIBLE let a JSON producer write to an Avro
/// topic): an Avro consumer gets an error for that message (Python raises on a writer that is
/// not AVRO), never a panic, and goes on with the next.
#[tokio::test]
async fn a_writer_schema_of_another_type_is_an_error_for_that_message() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_compatibility(MockSchemaCompatibility::AlwaysCompatible);
    let client = client(&broker);
    let topic = full("review-schema-other-type");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .subscribe()
        .await
        .unwrap();
    let json = client
        .producer(&topic)
        .schema(JsonSchema::<User>::new(USER).unwrap())
        .create()
        .await
        .unwrap();
    json.send_and_wait(&User { name: "jj".into() })
        .await
        .unwrap();
    let avro = client
        .producer(&topic)
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .create()
        .await
        .unwrap();
    avro.send_and_wait(&User { name: "aa".into() })
        .await
        .unwrap();
    let m = within("json-written", consumer.recv()).await.unwrap();
    assert!(
        m.value().is_err(),
        "JSON text decoded as Avro: {:?}",
        m.value()
    );
    let m = within("avro-written", consumer.recv()).await.unwrap();
    assert_eq!(m.value().unwrap(), &User { name: "aa".into() });
}

/// Upstream `AbstractTopic.addSchemaIfIdleOrCheckCompatible`: a consumer's schema is only
/// registered on an idle topic without one; on a topic with producers or data and no schema,
/// `checkConsumerCompatibility` refuses it ("Topic does not have schema to check").
#[tokio::test]
async fn a_consumer_schema_on_a_busy_topic_without_one_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-busy-no-schema");
    let raw = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    raw.send_and_wait(ProducerMessage::new("bytes"))
        .await
        .unwrap();
    let err = client
        .consumer(&topic)
        .subscription("s")
        .schema(StringSchema)
        .subscribe()
        .await
        .unwrap_err();
    match &err {
        Error::Broker { code, .. } => assert_eq!(*code, ServerError::IncompatibleSchema),
        other => panic!("expected IncompatibleSchema, got {other:?}"),
    }
    assert!(broker.schemas(&topic).is_empty(), "a consumer registered");
    // AUTO_CONSUME still subscribes.
    client
        .consumer(&topic)
        .subscription("auto")
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
}

/// Upstream checks a consumer's schema against the topic's (BACKWARD against the latest under
/// the default FULL strategy) but never registers it as a new version.
#[tokio::test]
async fn a_compatible_consumer_schema_does_not_become_a_version() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-consumer-no-version");
    let producer = client
        .producer(&topic)
        .schema(JsonSchema::<User>::new(USER).unwrap())
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(&User { name: "v0".into() })
        .await
        .unwrap();
    let _consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(JsonSchema::<serde_json::Value>::new(USER2).unwrap())
        .subscribe()
        .await
        .unwrap();
    assert_eq!(
        broker.schemas(&topic).len(),
        1,
        "the consumer's schema was registered"
    );
}

/// A typed reader whose recv was cancelled while fetching a writer schema holds that message;
/// a seek afterwards must not hand it out as the first message after the seek.
#[tokio::test]
async fn a_seek_after_a_cancelled_recv_does_not_return_the_held_message() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_requests_unanswered(true);
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let topic = full("review-schema-seek");
    let producer = client
        .producer(&topic)
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .configure(|b| b.batching(false))
        .create()
        .await
        .unwrap();
    let mut ids: Vec<MessageId> = Vec::new();
    for n in ["a", "b", "c"] {
        ids.push(
            producer
                .send_and_wait(&User { name: n.into() })
                .await
                .unwrap(),
        );
    }
    let mut reader = client
        .reader(&topic)
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .configure(|r| r.start_earliest())
        .create()
        .await
        .unwrap();
    let fetching = common::wait_until("GetSchema sent", || {
        !broker.received_of(Type::GetSchema).is_empty()
    });
    tokio::select! {
        got = reader.recv() => panic!("recv finished before its GetSchema: {got:?}"),
        _ = fetching => {}
    }
    reader.seek(ids[2]).await.unwrap();
    broker.set_schema_requests_unanswered(false);
    let m = within("after seek", reader.recv()).await.unwrap();
    assert_ne!(m.id(), ids[0], "the message held before the seek came back");
}

/// IncompatibleSchema on a producer is a typed, non-retried error with the broker's message.
#[tokio::test]
async fn an_incompatible_producer_gets_the_brokers_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-incompatible");
    let _p = client
        .producer(&topic)
        .schema(StringSchema)
        .create()
        .await
        .unwrap();
    let err = client
        .producer(&topic)
        .schema(Int64Schema)
        .create()
        .await
        .unwrap_err();
    match &err {
        Error::Broker { code, message } => {
            assert_eq!(*code, ServerError::IncompatibleSchema);
            // Upstream names the types as Java's `SchemaType` does.
            assert!(
                message.contains("STRING") && message.contains("INT64"),
                "{message}"
            );
        }
        other => panic!("expected IncompatibleSchema, got {other:?}"),
    }
    assert!(!err.is_retriable());
    assert_eq!(broker.received_of(Type::Producer).len(), 2, "retried");
}

/// Upstream's dead-letter producer is created with `Schema.AUTO_PRODUCE_BYTES(schema)`: the
/// DLQ topic gets the consumer's schema, so a typed consumer of the DLQ topic can subscribe
/// (a broker refuses a schema on a topic with data and none) and decode the letters.
#[tokio::test]
async fn a_typed_consumer_can_read_the_dead_letter_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-dlq");
    let dlq = full("review-schema-dlq-dead");
    let schema = || JsonSchema::<User>::new(USER).unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(1).dead_letter_topic(&dlq))
        .schema(schema())
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .schema(schema())
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(&User {
            name: "unlucky".into(),
        })
        .await
        .unwrap();
    for _ in 0..2 {
        let msg = within("delivery", consumer.recv()).await.unwrap();
        assert_eq!(msg.value().unwrap().name, "unlucky");
        consumer.nack(&msg).unwrap();
    }
    common::wait_until("dead letter stored", || {
        !broker.received_of(Type::Send).is_empty() && broker.schemas(&dlq).len() == 1
    })
    .await;
    let mut dead = client
        .consumer(&dlq)
        .subscription("audit")
        .initial_position(pulsar_sdk::InitialPosition::Earliest)
        .schema(schema())
        .subscribe()
        .await
        .expect("a typed consumer of the DLQ topic");
    let letter = within("dead letter", dead.recv()).await.unwrap();
    assert_eq!(letter.value().unwrap().name, "unlucky");
    assert!(letter.schema_version().is_some());
}

/// What the Python client (`AvroSchema(R)` over fastavro, record `R` with `name = String()`,
/// `age = Integer()`) writes, decoded both without and with its writer schema while our reader
/// names the record differently (Python renames the writer's record to the reader's to let
/// fastavro resolve; Avro resolution must not trip on the name).
#[test]
fn python_avro_bytes_decode_with_a_differently_named_reader() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Person {
        name: Option<String>,
        age: Option<i32>,
    }
    // fastavro.schemaless_writer of R(name='ab', age=3), printed by pulsar-client 3.13.0.
    let payload = [0x02, 0x04, 0x61, 0x62, 0x02, 0x06];
    let python_def = r#"{"type":"record","name":"R","fields":[
        {"name":"name","type":["null","string"]},{"name":"age","type":["null","int"]}]}"#;
    let ours = r#"{"type":"record","name":"Person","namespace":"x.y","fields":[
        {"name":"name","type":["null","string"],"default":null},
        {"name":"age","type":["null","int"],"default":null}]}"#;
    let schema = AvroSchema::<Person>::new(ours).unwrap();
    let want = Person {
        name: Some("ab".into()),
        age: Some(3),
    };
    assert_eq!(schema.decode(&payload, None).unwrap(), want);
    let writer = pulsar_sdk::schema::SchemaInfo::new(SchemaType::Avro, "R")
        .with_definition(python_def.to_string());
    assert_eq!(schema.decode(&payload, Some(&writer)).unwrap(), want);
    assert_eq!(&schema.encode(&want).unwrap()[..], &payload[..]);
}

/// A tombstone (Java `newMessage().key(k).value(null)`: metadata `null_value`, empty payload)
/// is not an empty value: upstream's `getValue()` is null for it without decoding. A typed
/// consumer must let the user tell it from a value (here, from an empty string).
#[tokio::test]
async fn a_tombstone_is_told_apart_from_an_empty_value() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-tombstone");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(StringSchema)
        .subscribe()
        .await
        .unwrap();
    let meta = |null: bool| pulsar_sdk::mock::wire::MessageMetadata {
        producer_name: "java".into(),
        sequence_id: u64::from(null),
        publish_time: 1,
        partition_key: Some("k".into()),
        null_value: null.then_some(true),
        ..Default::default()
    };
    broker
        .publish_raw(&topic, meta(true), bytes::Bytes::new())
        .unwrap();
    broker
        .publish_raw(&topic, meta(false), bytes::Bytes::new())
        .unwrap();
    let tombstone = within("tombstone", consumer.recv()).await.unwrap();
    assert!(tombstone.message().null_value);
    assert!(tombstone.value().is_err(), "{:?}", tombstone.value());
    let empty = within("empty", consumer.recv()).await.unwrap();
    assert!(!empty.message().null_value);
    assert_eq!(empty.value().unwrap(), "");
}

/// Separated key/value messages in one batch: each batched message keeps its own binary key
/// (SingleMessageMetadata `partition_key_b64_encoded`), for the typed and AUTO_CONSUME readers.
#[tokio::test]
async fn separated_key_values_survive_batching() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-kv-batch");
    let schema = || KeyValueSchema::separated(Int64Schema, StringSchema);
    let mut typed = client
        .consumer(&topic)
        .subscription("typed")
        .schema(schema())
        .subscribe()
        .await
        .unwrap();
    let mut auto = client
        .consumer(&topic)
        .subscription("auto")
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .schema(schema())
        .configure(|b| b.batching(true))
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for k in [-1i64, 2, 0x3f3f_3f3f] {
        receipts.push(
            producer
                .send(&KeyValue::new(k, format!("v{k}")))
                .await
                .unwrap(),
        );
    }
    producer.flush().await.unwrap();
    for r in receipts {
        r.await.unwrap();
    }
    for k in [-1i64, 2, 0x3f3f_3f3f] {
        let m = within("typed", typed.recv()).await.unwrap();
        assert!(m.id().batch_index >= 0, "not batched: {:?}", m.id());
        assert_eq!(m.value().unwrap(), &KeyValue::new(k, format!("v{k}")));
        let m = within("auto", auto.recv()).await.unwrap();
        assert_eq!(
            m.value().unwrap(),
            &GenericValue::KeyValue(
                Box::new(GenericValue::Int64(k)),
                Box::new(GenericValue::String(format!("v{k}")))
            )
        );
    }
}

/// The usual reader loop, `while has_message_available { recv }`, after a recv that was
/// cancelled while fetching a writer schema: the held message is still to be read, so the
/// typed reader must say a message is available.
#[tokio::test]
async fn a_held_message_counts_as_available() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_requests_unanswered(true);
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let topic = full("review-schema-available");
    let producer = client
        .producer(&topic)
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(&User {
            name: "last".into(),
        })
        .await
        .unwrap();
    let mut reader = client
        .reader(&topic)
        .schema(AvroSchema::<User>::new(USER).unwrap())
        .configure(|r| r.start_earliest())
        .create()
        .await
        .unwrap();
    let fetching = common::wait_until("GetSchema sent", || {
        !broker.received_of(Type::GetSchema).is_empty()
    });
    tokio::select! {
        got = reader.recv() => panic!("recv finished before its GetSchema: {got:?}"),
        _ = fetching => {}
    }
    broker.set_schema_requests_unanswered(false);
    let mut names = Vec::new();
    while within("available", reader.has_message_available())
        .await
        .unwrap()
    {
        let m = within("recv", reader.recv()).await.unwrap();
        names.push(m.value().unwrap().name.clone());
    }
    assert_eq!(names, ["last"]);
}

/// Java's `JSONSchema.of(Pojo)` / `AvroSchema.of(Pojo)` (alwaysAllowNull) register a nullable
/// field as `["null", T]` with `"default": null`; a derived definition must read the same,
/// or FULL compatibility (the broker's default) refuses adding such a field later.
#[test]
fn derived_definitions_give_optional_fields_a_null_default() {
    #[derive(Debug, Serialize, Deserialize, apache_avro::AvroSchema)]
    #[allow(dead_code)]
    struct Event {
        id: i64,
        note: Option<String>,
    }
    let info = JsonSchema::<Event>::derived().unwrap().info().unwrap();
    let def: serde_json::Value = serde_json::from_slice(&info.definition).unwrap();
    let note = &def["fields"][1];
    assert_eq!(note["name"], "note");
    assert_eq!(note["type"], serde_json::json!(["null", "string"]));
    assert!(
        note.get("default").is_some_and(|d| d.is_null()),
        "no null default: {def}"
    );
    assert_eq!(def["fields"][0]["type"], "long");
}

/// The same for `AvroSchema::derived`, nested records included, and the definition still
/// parses and round-trips.
#[test]
fn derived_avro_definitions_give_nested_optional_fields_a_null_default() {
    #[derive(Debug, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    struct Inner {
        tag: Option<i32>,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    struct Outer {
        inner: Inner,
        note: Option<String>,
    }
    let schema = AvroSchema::<Outer>::derived().unwrap();
    let def: serde_json::Value =
        serde_json::from_slice(&schema.info().unwrap().definition).unwrap();
    assert!(def["fields"][1]["default"].is_null() && def["fields"][1].get("default").is_some());
    let inner = &def["fields"][0]["type"]["fields"][0];
    assert_eq!(inner["name"], "tag");
    assert!(inner.get("default").is_some_and(|d| d.is_null()), "{def}");
    let v = Outer {
        inner: Inner { tag: Some(3) },
        note: None,
    };
    assert_eq!(schema.decode(&schema.encode(&v).unwrap(), None).unwrap(), v);
}

/// End to end: a struct gains an optional field; under the default FULL strategy the new
/// producer is accepted as version 1 and an old-struct consumer still reads its messages.
#[tokio::test]
async fn adding_an_optional_field_to_a_derived_struct_is_compatible() {
    #[derive(Debug, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    #[avro(name = "Event")]
    struct EventV1 {
        id: i64,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    #[avro(name = "Event")]
    struct EventV2 {
        id: i64,
        note: Option<String>,
    }
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("review-schema-evolve");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(AvroSchema::<EventV1>::derived().unwrap())
        .subscribe()
        .await
        .unwrap();
    let v2 = client
        .producer(&topic)
        .schema(AvroSchema::<EventV2>::derived().unwrap())
        .create()
        .await
        .expect("an added optional field is FULL-compatible");
    v2.send_and_wait(&EventV2 {
        id: 9,
        note: Some("n".into()),
    })
    .await
    .unwrap();
    assert_eq!(broker.schemas(&topic).len(), 2);
    let m = within("old reader", consumer.recv()).await.unwrap();
    assert_eq!(m.value().unwrap(), &EventV1 { id: 9 });
}
