//! Typed producers and consumers against the mock broker's schema registry: registration,
//! versions, compatibility refusals, GetSchema of an older version, KeyValue separated,
//! AUTO_CONSUME across two versions, decode failures, and a broker that never answers
//! GetSchema.

use support as common;

use std::time::Duration;

use common::{full, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockSchemaCompatibility};
use pulsar_sdk::schema::{
    AutoConsumeSchema, AvroSchema, GenericValue, Int32Schema, JsonSchema, KeyValue, KeyValueSchema,
    SchemaType, SchemaVersion, StringSchema,
};
use pulsar_sdk::{Client, InitialPosition, ProducerMessage, ServerError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV1 {
    name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UserV2 {
    name: String,
    #[serde(default)]
    age: i32,
}

const V1: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},
    {"name":"age","type":"int","default":0}]}"#;
/// Adds a field without a default: not FULL-compatible with V1.
const V3_BAD: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},
    {"name":"zip","type":"string"}]}"#;

fn client(broker: &MockBroker) -> Client {
    common::test_client(&broker.service_url())
        .build()
        .expect("valid config")
}

fn v1_json() -> JsonSchema<UserV1> {
    JsonSchema::new(V1).unwrap()
}

fn v2_json() -> JsonSchema<UserV2> {
    JsonSchema::new(V2).unwrap()
}

#[tokio::test]
async fn producers_register_versions_and_messages_carry_them() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-versions");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(v2_json())
        .subscribe()
        .await
        .unwrap();
    // The consumer registered V2 on the empty topic; a V1 producer is FULL-compatible (age
    // has a default) and becomes version 1; a second V2 producer finds version 0.
    let p1 = client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    let p2 = client
        .producer(&topic)
        .schema(v2_json())
        .create()
        .await
        .unwrap();
    p1.send_and_wait(&UserV1 { name: "old".into() })
        .await
        .unwrap();
    p2.send_and_wait(&UserV2 {
        name: "new".into(),
        age: 7,
    })
    .await
    .unwrap();

    let versions = broker.schemas(&topic);
    assert_eq!(versions.len(), 2, "{versions:?}");
    assert_eq!(versions[0].schema_type, SchemaType::Json);
    assert_eq!(versions[0].definition_str(), Some(V2));
    assert_eq!(versions[1].definition_str(), Some(V1));

    // Every SEND carries its producer's version.
    let sent: Vec<_> = broker
        .received_of(Type::Send)
        .into_iter()
        .map(|r| r.payload.unwrap().0.schema_version.unwrap())
        .collect();
    assert_eq!(
        sent,
        [SchemaVersion::from_long(1).0, SchemaVersion::from_long(0).0]
    );
    // The PRODUCER commands carried the schema.
    let registered = broker.received_of(Type::Producer);
    let schema = registered[0]
        .command
        .producer
        .as_ref()
        .unwrap()
        .schema
        .as_ref()
        .unwrap();
    assert_eq!(&schema.schema_data[..], V1.as_bytes());
    assert_eq!(schema.r#type, 2);

    let a = within("first", consumer.recv()).await.unwrap();
    let b = within("second", consumer.recv()).await.unwrap();
    assert_eq!(a.schema_version().unwrap().as_long(), Some(1));
    assert_eq!(
        a.value().unwrap(),
        &UserV2 {
            name: "old".into(),
            age: 0
        }
    );
    assert_eq!(b.schema_version().unwrap().as_long(), Some(0));
    assert_eq!(
        b.value().unwrap(),
        &UserV2 {
            name: "new".into(),
            age: 7
        }
    );
    consumer.ack(&a).unwrap();
    consumer.ack(&b).unwrap();
}

#[tokio::test]
async fn incompatible_schemas_are_refused_without_retrying() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-refused");
    let _p = client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    let before = broker.received_of(Type::Producer).len();

    let bad = JsonSchema::<UserV1>::new(V3_BAD).unwrap();
    let err = client
        .producer(&topic)
        .schema(bad.clone())
        .create()
        .await
        .unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
    assert!(!err.is_retriable());
    assert!(
        err.to_string().contains("zip"),
        "the broker's message is kept: {err}"
    );
    // One attempt only: a non-retriable refusal fails fast.
    assert_eq!(broker.received_of(Type::Producer).len(), before + 1);

    // A type change is refused too, for producers and consumers.
    let err = client
        .producer(&topic)
        .schema(StringSchema)
        .create()
        .await
        .unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
    let err = client
        .consumer(&topic)
        .subscription("s")
        .schema(bad)
        .subscribe()
        .await
        .unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
    assert_eq!(broker.schemas(&topic).len(), 1);

    // A producer without a schema is accepted (schema validation is not enforced).
    client.producer(&topic).create().await.unwrap();
}

#[tokio::test]
async fn the_strategy_decides_between_always_compatible_and_always_incompatible() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-strategies");
    client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();

    broker.set_schema_compatibility(MockSchemaCompatibility::AlwaysIncompatible);
    // Even a compatible evolution is refused; the registered schema itself is not.
    let err = client
        .producer(&topic)
        .schema(v2_json())
        .create()
        .await
        .unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
    client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();

    broker.set_schema_compatibility(MockSchemaCompatibility::AlwaysCompatible);
    let bad = JsonSchema::<UserV1>::new(V3_BAD).unwrap();
    client.producer(&topic).schema(bad).create().await.unwrap();
    client
        .producer(&topic)
        .schema(StringSchema)
        .create()
        .await
        .unwrap();
    let types: Vec<_> = broker
        .schemas(&topic)
        .iter()
        .map(|s| s.schema_type)
        .collect();
    assert_eq!(
        types,
        [SchemaType::Json, SchemaType::Json, SchemaType::String]
    );
}

#[tokio::test]
async fn get_schema_returns_an_older_version_and_get_or_create_registers() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-get");
    let err = client.get_schema(&topic, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            pulsar_sdk::Error::Broker {
                code: ServerError::TopicNotFound,
                ..
            }
        ),
        "{err}"
    );
    client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    let v2 = pulsar_sdk::schema::Schema::info(&v2_json()).unwrap();
    let version = client.get_or_create_schema(&topic, &v2).await.unwrap();
    assert_eq!(version.as_long(), Some(1));
    // Asking again finds it.
    assert_eq!(
        client.get_or_create_schema(&topic, &v2).await.unwrap(),
        version
    );

    let (latest, v) = client.get_schema(&topic, None).await.unwrap();
    assert_eq!((latest.definition_str(), v.as_long()), (Some(V2), Some(1)));
    let (old, v) = client
        .get_schema(&topic, Some(&SchemaVersion::from_long(0)))
        .await
        .unwrap();
    assert_eq!((old.definition_str(), v.as_long()), (Some(V1), Some(0)));
    assert_eq!(old.properties["__alwaysAllowNull"], "true");
    let missing = client
        .get_schema(&topic, Some(&SchemaVersion::from_long(9)))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, pulsar_sdk::Error::Broker { .. }),
        "{missing}"
    );

    let bad =
        pulsar_sdk::schema::Schema::info(&JsonSchema::<UserV1>::new(V3_BAD).unwrap()).unwrap();
    let err = client.get_or_create_schema(&topic, &bad).await.unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
}

#[tokio::test]
async fn key_value_separated_round_trips_with_the_key_in_the_message_key() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-kv");
    let schema = || KeyValueSchema::separated(Int32Schema, v1_json());
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::KeyShared)
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
    let pairs: Vec<_> = (0..3)
        .map(|i| {
            KeyValue::new(
                i,
                UserV1 {
                    name: format!("u{i}"),
                },
            )
        })
        .collect();
    let mut receipts = Vec::new();
    for kv in &pairs {
        let msg = ProducerMessage::default().property("p", "1");
        receipts.push(producer.send_with(kv, msg).await.unwrap());
    }
    for r in receipts {
        within("receipt", r).await.unwrap();
    }
    for kv in &pairs {
        let msg = within("kv", consumer.recv()).await.unwrap();
        assert_eq!(msg.value().unwrap(), kv);
        // The key travels base64 in the message key; the payload is the value only.
        let raw = msg.message();
        assert!(raw.key_b64_encoded);
        assert_eq!(
            raw.key.as_deref(),
            Some(["AAAAAA==", "AAAAAQ==", "AAAAAg=="][kv.key as usize])
        );
        assert_eq!(
            &raw.payload[..],
            format!(r#"{{"name":"u{}"}}"#, kv.key).as_bytes()
        );
        assert_eq!(raw.properties["p"], "1");
    }
    let info = &broker.schemas(&topic)[0];
    assert_eq!(info.schema_type, SchemaType::KeyValue);
    assert_eq!(info.properties["kv.encoding.type"], "SEPARATED");
    assert_eq!(info.properties["value.schema.type"], "JSON");
}

#[tokio::test]
async fn auto_consume_decodes_two_versions_fetching_each_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-auto");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    let p1 = client
        .producer(&topic)
        .schema(AvroSchema::<UserV1>::new(V1).unwrap())
        .create()
        .await
        .unwrap();
    let p2 = client
        .producer(&topic)
        .schema(AvroSchema::<UserV2>::new(V2).unwrap())
        .create()
        .await
        .unwrap();
    for i in 0..2 {
        p1.send_and_wait(&UserV1 {
            name: format!("a{i}"),
        })
        .await
        .unwrap();
        p2.send_and_wait(&UserV2 {
            name: format!("b{i}"),
            age: i,
        })
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..4 {
        let msg = within("auto", consumer.recv()).await.unwrap();
        let Ok(GenericValue::Avro(apache_avro::types::Value::Record(fields))) = msg.value() else {
            panic!("not an Avro record: {:?}", msg.value());
        };
        seen.push((
            msg.schema_version().unwrap().as_long().unwrap(),
            fields.len(),
        ));
        consumer.ack(&msg).unwrap();
    }
    // Each message decoded with its writer's schema: V1 records have one field, V2 two.
    assert_eq!(seen, [(0, 1), (1, 2), (0, 1), (1, 2)]);
    // One GetSchema per version: later messages use the cache.
    assert_eq!(broker.received_of(Type::GetSchema).len(), 2);
    // The consumer subscribed with AUTO_CONSUME, which registers nothing.
    let sub = &broker.received_of(Type::Subscribe)[0];
    let s = sub
        .command
        .subscribe
        .as_ref()
        .unwrap()
        .schema
        .as_ref()
        .unwrap();
    assert_eq!(s.r#type, 21);
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_an_error_for_that_message_only() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-bad-payload");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_millis(50))
        .schema(v1_json())
        .subscribe()
        .await
        .unwrap();
    // A producer without a schema writes something that is not the JSON of a UserV1.
    let raw = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    raw.send_and_wait("not json").await.unwrap();
    let typed = client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    typed
        .send_and_wait(&UserV1 { name: "ok".into() })
        .await
        .unwrap();

    let bad = within("bad", consumer.recv()).await.unwrap();
    let err = bad.value().unwrap_err();
    assert!(
        matches!(err, pulsar_sdk::SchemaError::Decode { .. }),
        "{err}"
    );
    assert_eq!(bad.payload(), b"not json");
    consumer.nack(&bad).unwrap();
    // The consumer goes on: the next message decodes, and the nacked one comes back.
    let good = within("good", consumer.recv()).await.unwrap();
    assert_eq!(good.value().unwrap(), &UserV1 { name: "ok".into() });
    consumer.ack(&good).unwrap();
    let again = within("redelivered", consumer.recv()).await.unwrap();
    assert_eq!(again.id(), bad.id());
    assert!(again.value().is_err());
    assert_eq!(again.message().redelivery_count, 1);
    consumer.ack(&again).unwrap();
}

#[tokio::test]
async fn a_broker_that_never_answers_get_schema_costs_one_timeout_per_version() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_requests_unanswered(true);
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let topic = full("schema-silent");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(AvroSchema::<UserV2>::new(V2).unwrap())
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .schema(AvroSchema::<UserV1>::new(V1).unwrap())
        .create()
        .await
        .unwrap();
    // The version-1 writer schema cannot be fetched: the message decodes with the reader's
    // schema (here it cannot: the writer had no `age`), as an error for that message.
    producer
        .send_and_wait(&UserV1 { name: "x".into() })
        .await
        .unwrap();
    producer
        .send_and_wait(&UserV1 { name: "y".into() })
        .await
        .unwrap();
    let a = within("first", consumer.recv()).await.unwrap();
    let b = within("second", consumer.recv()).await.unwrap();
    assert!(a.value().is_err() && b.value().is_err());
    assert_eq!(
        broker.received_of(Type::GetSchema).len(),
        1,
        "unknown version cached"
    );

    let err = client.get_schema(&topic, None).await.unwrap_err();
    assert!(matches!(err, pulsar_sdk::Error::Timeout { .. }), "{err}");
}

#[tokio::test]
async fn recv_cancelled_while_fetching_a_writer_schema_loses_nothing() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_requests_unanswered(true);
    let client = common::test_client(&broker.service_url())
        // Far longer than the wait for the GetSchema to be recorded: the first recv is still
        // fetching when it is dropped.
        .operation_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let topic = full("schema-cancel");
    let schema = || AvroSchema::<UserV1>::new(V1).unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
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
    let sent = producer
        .send_and_wait(&UserV1 {
            name: "kept".into(),
        })
        .await
        .unwrap();
    // Cancel the first recv once its GetSchema reached the broker (it is never answered).
    let fetching = common::wait_until("GetSchema sent", || {
        !broker.received_of(Type::GetSchema).is_empty()
    });
    tokio::select! {
        got = consumer.recv() => panic!("recv finished before its GetSchema: {got:?}"),
        _ = fetching => {}
    }
    let msg = within("after cancel", consumer.recv()).await.unwrap();
    assert_eq!(msg.id(), sent);
    // Its writer schema could not be had (GetSchema timed out): an error item, to nack or
    // dead-letter (it decoded with the local schema before issue #31 §4's error item).
    assert!(
        matches!(
            msg.value(),
            Err(pulsar_sdk::schema::SchemaError::WriterSchemaUnavailable { .. })
        ),
        "{:?}",
        msg.value()
    );
}

#[tokio::test]
async fn protobuf_native_messages_round_trip_and_register_their_descriptor() {
    use prost::Message as _;
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};

    #[derive(Clone, PartialEq, prost::Message)]
    struct Point {
        #[prost(int64, tag = "1")]
        x: i64,
    }
    let set = prost_types::FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("point.proto".into()),
            package: Some("geo".into()),
            message_type: vec![DescriptorProto {
                name: Some("Point".into()),
                field: vec![FieldDescriptorProto {
                    name: Some("x".into()),
                    number: Some(1),
                    r#type: Some(prost_types::field_descriptor_proto::Type::Int64 as i32),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    let schema =
        || pulsar_sdk::schema::ProtobufNativeSchema::<Point>::new(&set, "geo.Point").unwrap();

    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-protobuf");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
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
    producer.send_and_wait(&Point { x: -5 }).await.unwrap();
    let msg = within("protobuf", consumer.recv()).await.unwrap();
    assert_eq!(msg.value().unwrap(), &Point { x: -5 });
    let registered = broker.schemas(&topic);
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].schema_type, SchemaType::ProtobufNative);
    let def: serde_json::Value = serde_json::from_slice(&registered[0].definition).unwrap();
    assert_eq!(def["rootMessageTypeName"], "geo.Point");
    assert_eq!(def["rootFileDescriptorName"], "point.proto");
    // The mock checks PROTOBUF_NATIVE by type only (upstream also compares descriptors).
    let err = client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap_err();
    assert!(err.is_incompatible_schema(), "{err}");
}

#[tokio::test]
async fn typed_readers_decode_from_a_start_position() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-reader");
    let producer = client
        .producer(&topic)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    for name in ["a", "b"] {
        producer
            .send_and_wait(&UserV1 { name: name.into() })
            .await
            .unwrap();
    }
    let mut reader = client
        .reader(&topic)
        .schema(v2_json())
        .configure(|r| r.start_earliest())
        .create()
        .await
        .unwrap();
    for name in ["a", "b"] {
        let msg = within("reader", reader.recv()).await.unwrap();
        assert_eq!(
            msg.value().unwrap(),
            &UserV2 {
                name: name.into(),
                age: 0
            }
        );
    }
    // The reader's schema was checked (BACKWARD against the latest) but, the topic having a
    // schema, not registered (upstream `addSchemaIfIdleOrCheckCompatible`).
    assert_eq!(broker.schemas(&topic).len(), 1);
}

#[tokio::test]
async fn partitions_share_their_topics_schemas_and_fetches() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-partitioned");
    broker.set_partitions(&topic, 3);
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .schema(AvroSchema::<UserV1>::new(V1).unwrap())
        .configure(|b| b.batching(false))
        .create()
        .await
        .unwrap();
    for i in 0..6 {
        producer
            .send_with(
                &UserV1 {
                    name: format!("u{i}"),
                },
                ProducerMessage::default().key(format!("k{i}")),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut partitions = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let msg = within("partitioned", consumer.recv()).await.unwrap();
        assert!(
            matches!(msg.value(), Ok(GenericValue::Avro(_))),
            "{:?}",
            msg.value()
        );
        partitions.insert(msg.id().partition);
    }
    assert!(
        partitions.len() > 1,
        "spread over partitions: {partitions:?}"
    );
    // One registration (on the topic) and one GetSchema for all partitions.
    assert_eq!(broker.schemas(&topic).len(), 1);
    assert_eq!(broker.received_of(Type::GetSchema).len(), 1);
}

#[tokio::test]
async fn undecodable_messages_are_dead_lettered_with_their_binary_key() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-dlq");
    let dlq = full("schema-dlq-dead");
    let schema = || KeyValueSchema::separated(Int32Schema, v1_json());
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(
            pulsar_sdk::DeadLetterPolicy::new(1)
                .dead_letter_topic(&dlq)
                .initial_subscription_name("audit"),
        )
        .schema(schema())
        .subscribe()
        .await
        .unwrap();
    // A bytes producer writes a valid binary key but a value that is not a UserV1.
    let raw = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut poison = ProducerMessage::new("{\"nom\": 1}");
    poison.key = Some("AAAABw==".into()); // INT32 7
    poison.key_b64_encoded = true;
    raw.send_and_wait(poison).await.unwrap();

    for delivery in 0..2 {
        let msg = within("poison", consumer.recv()).await.unwrap();
        assert!(
            msg.value().is_err(),
            "delivery {delivery}: {:?}",
            msg.value()
        );
        consumer.nack(&msg).unwrap();
    }
    // Past the policy's count it goes to the dead-letter topic, key flag and all.
    let mut dead = client
        .consumer(&dlq)
        .subscription("audit")
        .subscribe()
        .await
        .unwrap();
    let letter = within("dead letter", dead.recv()).await.unwrap();
    assert_eq!(&letter.payload[..], b"{\"nom\": 1}");
    assert_eq!(letter.key.as_deref(), Some("AAAABw=="));
    assert!(letter.key_b64_encoded);
}

/// Issue #31, section 4: a broker that never answers GetSchema cost one operation timeout per
/// distinct version, each blocking `recv`. After two timeouts in a row on a topic the consumer
/// stops asking (for a minute): a third version is decoded at once without its writer schema.
#[tokio::test]
async fn a_broker_that_never_answers_get_schema_is_given_up_on_after_two_timeouts() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let topic = full("schema-silent-versions");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    // Three versions, registered while the registry still answers.
    const V4: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},
        {"name":"age","type":"int","default":0},{"name":"zip","type":"string","default":""}]}"#;
    for def in [V1, V2, V4] {
        let p = client
            .producer(&topic)
            .schema(AvroSchema::<UserV1>::new(def).unwrap())
            .create()
            .await
            .unwrap();
        // UserV1 is not every version's shape: send its payload raw under the version.
        let payload = apache_avro::to_avro_datum(
            &apache_avro::Schema::parse_str(def).unwrap(),
            apache_avro::types::Value::Record(
                apache_avro::Schema::parse_str(def)
                    .map(|s| match s {
                        apache_avro::Schema::Record(r) => r
                            .fields
                            .iter()
                            .map(|f| {
                                let v = match f.name.as_str() {
                                    "age" => apache_avro::types::Value::Int(1),
                                    _ => apache_avro::types::Value::String("x".into()),
                                };
                                (f.name.clone(), v)
                            })
                            .collect(),
                        _ => unreachable!(),
                    })
                    .unwrap(),
            ),
        )
        .unwrap();
        p.inner().send_and_wait(payload).await.unwrap();
        p.close().await.unwrap();
    }
    broker.set_schema_requests_unanswered(true);
    for i in 0..3 {
        let msg = within("recv", consumer.recv()).await.unwrap();
        assert_eq!(msg.schema_version().unwrap().as_long(), Some(i));
        consumer.ack(&msg).unwrap();
    }
    assert_eq!(
        broker.received_of(Type::GetSchema).len(),
        2,
        "the third version is not asked for"
    );
}

/// Issue #31, section 4 (leftover): a GetSchema that times out (or was given up on) left the
/// application with nothing to tell: AUTO_CONSUME handed the payload out as bytes, a typed
/// consumer decoded it with its own schema. The message is now an error item
/// (`WriterSchemaUnavailable`), which can be nacked and comes back (an error again at once:
/// the failed lookup is remembered, not repeated per message), and each GetSchema costs one
/// lookup of the topic's broker.
#[tokio::test]
async fn a_get_schema_given_up_makes_the_message_an_error_item() {
    use pulsar_sdk::schema::SchemaError;
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let topic = full("schema-given-up-error-item");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_millis(50))
        .initial_position(InitialPosition::Earliest)
        .schema(AutoConsumeSchema)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .schema(AvroSchema::<UserV1>::new(V1).unwrap())
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(&UserV1 { name: "x".into() })
        .await
        .unwrap();
    broker.set_schema_requests_unanswered(true);
    let lookups_before = broker.received_of(Type::Lookup).len();
    let msg = within("recv", consumer.recv()).await.unwrap();
    assert!(
        matches!(
            msg.value(),
            Err(SchemaError::WriterSchemaUnavailable { .. })
        ),
        "an error item, not {:?}",
        msg.value()
    );
    consumer.nack(&msg).unwrap();
    let again = within("redelivered", consumer.recv()).await.unwrap();
    assert_eq!(again.id(), msg.id());
    assert!(
        matches!(
            again.value(),
            Err(SchemaError::WriterSchemaUnavailable { .. })
        ),
        "{:?}",
        again.value()
    );
    assert_eq!(broker.received_of(Type::GetSchema).len(), 1);
    assert!(
        broker.received_of(Type::Lookup).len() - lookups_before <= 1,
        "one lookup per GetSchema"
    );
}

/// A typed consumer receives a batch of decoded messages (Java `Consumer<T>.batchReceive`):
/// in order, each with its value or, for a payload that does not decode, its error; the batch
/// is acknowledged whole.
#[tokio::test]
async fn typed_batch_recv_decodes_each_message_and_acks_them_all() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker);
    let topic = full("schema-batch-recv");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .schema(v1_json())
        .configure(|b| {
            b.batch_receive_policy(
                pulsar_sdk::BatchReceivePolicy::default()
                    .max_num_messages(4)
                    .timeout(Duration::from_secs(3600)),
            )
        })
        .subscribe()
        .await
        .unwrap();
    let typed = client
        .producer(&topic)
        .batching(false)
        .schema(v1_json())
        .create()
        .await
        .unwrap();
    let raw = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for name in ["a", "b"] {
        typed
            .send_and_wait(&UserV1 { name: name.into() })
            .await
            .unwrap();
    }
    raw.send_and_wait("not json").await.unwrap();
    typed
        .send_and_wait(&UserV1 { name: "c".into() })
        .await
        .unwrap();

    let batch = within("a batch", consumer.batch_recv()).await.unwrap();
    assert_eq!(batch.len(), 4);
    let names: Vec<_> = batch
        .iter()
        .map(|m| m.value().ok().map(|u| u.name.as_str()))
        .collect();
    assert_eq!(names, [Some("a"), Some("b"), None, Some("c")]);
    assert!(matches!(
        batch[2].value(),
        Err(pulsar_sdk::SchemaError::Decode { .. })
    ));
    assert_eq!(batch[2].payload(), b"not json");
    consumer.ack_all(&batch).unwrap();
    let unacked = || broker.subscription_backlog(&topic, "s");
    common::wait_until("the batch acked", || unacked() == 0).await;
    let values: Vec<UserV1> = batch
        .into_iter()
        .filter_map(|m| m.into_parts().0.ok())
        .collect();
    assert_eq!(values.len(), 3);
}

/// A `batch_recv` dropped while a writer schema is fetched loses nothing: the next call
/// returns the same messages.
#[tokio::test]
async fn typed_batch_recv_cancelled_while_fetching_a_writer_schema_loses_nothing() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_schema_requests_unanswered(true);
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let topic = full("schema-batch-cancel");
    let schema = || AvroSchema::<UserV1>::new(V1).unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .schema(schema())
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .schema(schema())
        .create()
        .await
        .unwrap();
    let mut sent = Vec::new();
    for name in ["x", "y"] {
        sent.push(
            producer
                .send_and_wait(&UserV1 { name: name.into() })
                .await
                .unwrap(),
        );
    }
    let fetching = common::wait_until("GetSchema sent", || {
        !broker.received_of(Type::GetSchema).is_empty()
    });
    tokio::select! {
        got = consumer.batch_recv() => panic!("batch_recv finished before its GetSchema: {got:?}"),
        _ = fetching => {}
    }
    let mut ids = Vec::new();
    while ids.len() < 2 {
        let batch = within("after cancel", consumer.batch_recv()).await.unwrap();
        ids.extend(batch.iter().map(|m| m.id()));
    }
    assert_eq!(ids, sent);
}
