//! Byte-exact encodings (upstream's) and encode/decode round trips of every built-in schema.

use bytes::Bytes;
use proptest::prelude::*;

use super::keyvalue::{base64_decode, base64_encode, split_info};
use super::*;
use crate::message::ProducerMessage;

fn enc<S: Schema>(s: &S, v: &S::Type) -> Vec<u8> {
    s.encode(v).unwrap().to_vec()
}

#[test]
fn primitives_use_upstream_big_endian_encodings() {
    assert_eq!(enc(&Int8Schema, &-1), [0xff]);
    assert_eq!(enc(&Int16Schema, &-2), [0xff, 0xfe]);
    assert_eq!(enc(&Int32Schema, &1), [0, 0, 0, 1]);
    assert_eq!(enc(&Int64Schema, &258), [0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(enc(&FloatSchema, &1.0), [0x3f, 0x80, 0, 0]);
    assert_eq!(enc(&DoubleSchema, &1.0), [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(enc(&BoolSchema, &true), [1]);
    assert_eq!(enc(&BoolSchema, &false), [0]);
    assert_eq!(enc(&TimestampSchema, &1), [0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(
        enc(&InstantSchema, &(1, 2)),
        [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    );
    assert_eq!(enc(&StringSchema, &"é".to_string()), "é".as_bytes());
    // Any non-zero byte is true (upstream BooleanSchema.decode: `bytes[0] != 0`).
    assert!(BoolSchema.decode(&[7], None).unwrap());
}

#[test]
fn wrong_sizes_and_bad_utf8_are_decode_errors() {
    for bad in [&[][..], &[0, 0, 1][..], &[0, 0, 0, 0, 1][..]] {
        let e = Int32Schema.decode(bad, None).unwrap_err();
        assert!(
            matches!(
                e,
                SchemaError::Decode {
                    schema_type: SchemaType::Int32,
                    ..
                }
            ),
            "{e}"
        );
    }
    assert!(StringSchema.decode(&[0xff, 0xfe], None).is_err());
    assert!(BoolSchema.decode(&[], None).is_err());
}

#[test]
fn schema_infos_match_upstream() {
    assert_eq!(BytesSchema.info(), None);
    let s = StringSchema.info().unwrap();
    assert_eq!(
        (s.schema_type, s.name.as_str()),
        (SchemaType::String, "String")
    );
    assert!(s.definition.is_empty());
    assert_eq!(Int32Schema.info().unwrap().schema_type.to_wire(), 8);
    assert_eq!(
        LocalDateTimeSchema.info().unwrap().schema_type.to_wire(),
        19
    );
    assert_eq!(AutoConsumeSchema.info().unwrap().schema_type.to_wire(), 21);
    for n in 0..=22 {
        let t = SchemaType::from_wire(n).unwrap();
        assert_eq!(t.to_wire(), n);
        assert_eq!(SchemaType::from_java_name(t.java_name()), Some(t));
    }
    assert_eq!(SchemaType::from_wire(99), None);
}

#[test]
fn inline_key_value_is_length_prefixed_big_endian() {
    let kv = KeyValueSchema::new(StringSchema, Int32Schema);
    let bytes = enc(&kv, &KeyValue::new("k".to_string(), 7));
    assert_eq!(bytes, [0, 0, 0, 1, b'k', 0, 0, 0, 4, 0, 0, 0, 7]);
    // A -1 length is Java's null: an empty side.
    let kv_bytes = KeyValueSchema::new(BytesSchema, BytesSchema);
    let v = kv_bytes
        .decode(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 9], None)
        .unwrap();
    assert_eq!((v.key.len(), &v.value[..]), (0, &[9][..]));
    // Lengths past the end are errors, not panics.
    for bad in [&[0, 0, 0, 9, 1][..], &[0, 0][..], &[0x80, 0, 0, 0][..]] {
        assert!(kv.decode(bad, None).is_err());
    }
}

#[test]
fn key_value_info_records_both_sides_like_upstream() {
    let kv = KeyValueSchema::separated(StringSchema, Int64Schema);
    let info = kv.info().unwrap();
    assert_eq!(info.schema_type, SchemaType::KeyValue);
    assert_eq!(info.name, "KeyValue");
    assert_eq!(&info.definition[..], [0, 0, 0, 0, 0, 0, 0, 0]);
    let p = &info.properties;
    assert_eq!(p["key.schema.type"], "STRING");
    assert_eq!(p["key.schema.name"], "String");
    assert_eq!(p["value.schema.type"], "INT64");
    assert_eq!(p["key.schema.properties"], "{}");
    assert_eq!(p["kv.encoding.type"], "SEPARATED");
    let (k, v, e) = split_info(&info).unwrap();
    assert_eq!(k.schema_type, SchemaType::String);
    assert_eq!(v.schema_type, SchemaType::Int64);
    assert_eq!(e, KeyValueEncoding::Separated);
}

#[test]
fn separated_key_value_puts_the_key_in_the_message_key() {
    let kv = KeyValueSchema::separated(Int32Schema, StringSchema);
    let mut msg = ProducerMessage::default();
    kv.encode_message(&KeyValue::new(1, "v".to_string()), &mut msg)
        .unwrap();
    assert_eq!(msg.key.as_deref(), Some("AAAAAQ=="));
    assert!(msg.key_b64_encoded);
    assert_eq!(&msg.payload[..], b"v");
}

#[test]
fn base64_matches_the_standard_alphabet() {
    assert_eq!(base64_encode(b""), "");
    assert_eq!(base64_encode(b"f"), "Zg==");
    assert_eq!(base64_encode(b"fo"), "Zm8=");
    assert_eq!(base64_encode(b"foo"), "Zm9v");
    assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
    assert_eq!(base64_decode("+/8=").unwrap(), [0xfb, 0xff]);
    assert_eq!(base64_decode("Zg").unwrap(), b"f");
    assert!(base64_decode("Z").is_none());
    assert!(base64_decode("a*b=").is_none());
}

#[test]
fn auto_consume_decodes_with_the_writer_schema() {
    let w = Int32Schema.info().unwrap();
    assert_eq!(
        AutoConsumeSchema.decode(&[0, 0, 0, 5], Some(&w)).unwrap(),
        GenericValue::Int32(5)
    );
    assert_eq!(
        AutoConsumeSchema.decode(b"x", None).unwrap(),
        GenericValue::Bytes(Bytes::from_static(b"x"))
    );
    let kv = KeyValueSchema::new(StringSchema, BoolSchema);
    let payload = kv.encode(&KeyValue::new("a".into(), true)).unwrap();
    assert_eq!(
        AutoConsumeSchema
            .decode(&payload, kv.info().as_ref())
            .unwrap(),
        GenericValue::KeyValue(
            Box::new(GenericValue::String("a".into())),
            Box::new(GenericValue::Bool(true))
        )
    );
    assert!(AutoConsumeSchema.encode(&GenericValue::Int8(1)).is_err());
}

#[derive(
    Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, apache_avro::AvroSchema,
)]
struct User {
    name: String,
    age: i32,
    email: Option<String>,
}

fn user_json() -> JsonSchema<User> {
    JsonSchema::record(
        "User",
        &[
            ("name", r#""string""#),
            ("age", r#""int""#),
            ("email", r#"["null","string"]"#),
        ],
    )
    .unwrap()
}

#[test]
fn json_schema_registers_an_avro_record_definition() {
    let s = user_json();
    let info = s.info().unwrap();
    assert_eq!(info.schema_type, SchemaType::Json);
    let def: serde_json::Value = serde_json::from_slice(&info.definition).unwrap();
    assert_eq!(def["type"], "record");
    assert_eq!(def["name"], "User");
    assert_eq!(def["fields"][2]["default"], serde_json::Value::Null);
    assert_eq!(info.properties["__alwaysAllowNull"], "true");
    // The same record derived from the type parses as the same Avro schema.
    let derived = JsonSchema::<User>::derived().unwrap().info().unwrap();
    let a = apache_avro::Schema::parse_str(info.definition_str().unwrap()).unwrap();
    let b = apache_avro::Schema::parse_str(derived.definition_str().unwrap()).unwrap();
    assert_eq!(a.canonical_form(), b.canonical_form());
    assert!(JsonSchema::<User>::new(r#"{"type":"string"}"#).is_err());
    assert!(JsonSchema::<User>::new("not json").is_err());
    assert!(s.decode(b"{\"name\":1}", None).is_err());
}

#[test]
fn avro_schema_resolves_an_older_writer_version() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct V1 {
        name: String,
    }
    let v1 = AvroSchema::<V1>::new(
        r#"{"type":"record","name":"U","fields":[{"name":"name","type":"string"}]}"#,
    )
    .unwrap();
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct V2 {
        name: String,
        age: i32,
    }
    let v2 = AvroSchema::<V2>::new(
        r#"{"type":"record","name":"U","fields":[{"name":"name","type":"string"},
            {"name":"age","type":"int","default":18}]}"#,
    )
    .unwrap();
    let old = v1.encode(&V1 { name: "a".into() }).unwrap();
    // Avro binary: a string is a zig-zag length then the bytes.
    assert_eq!(&old[..], [2, b'a']);
    let got = v2.decode(&old, v1.info().as_ref()).unwrap();
    assert_eq!(
        got,
        V2 {
            name: "a".into(),
            age: 18
        }
    );
    // Without the writer schema the bytes do not fit the reader's: an error, not a panic.
    assert!(v2.decode(&old, None).is_err());
    assert!(v2.decode(&[0xff; 3], None).is_err());
}

fn round_trip<S: Schema>(s: &S, v: S::Type) -> Result<(), TestCaseError>
where
    S::Type: PartialEq + std::fmt::Debug,
{
    let bytes = s
        .encode(&v)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = s
        .decode(&bytes, s.info().as_ref())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(back, v);
    Ok(())
}

proptest! {
    #[test]
    fn primitives_round_trip(
        a: i8, b: i16, c: i32, d: i64, f in any::<f32>().prop_filter("not NaN", |f| !f.is_nan()),
        g in any::<f64>().prop_filter("not NaN", |f| !f.is_nan()), h: bool, s: String,
        bytes: Vec<u8>, secs: i64, nanos: i32, day: i64, nod: i64,
    ) {
        round_trip(&Int8Schema, a)?;
        round_trip(&Int16Schema, b)?;
        round_trip(&Int32Schema, c)?;
        round_trip(&Int64Schema, d)?;
        round_trip(&FloatSchema, f)?;
        round_trip(&DoubleSchema, g)?;
        round_trip(&BoolSchema, h)?;
        round_trip(&StringSchema, s)?;
        round_trip(&BytesSchema, Bytes::from(bytes))?;
        round_trip(&DateSchema, d)?;
        round_trip(&TimeSchema, d)?;
        round_trip(&TimestampSchema, d)?;
        round_trip(&InstantSchema, (secs, nanos))?;
        round_trip(&LocalDateSchema, day)?;
        round_trip(&LocalTimeSchema, nod)?;
        round_trip(&LocalDateTimeSchema, (day, nod))?;
    }

    #[test]
    fn key_values_round_trip(k: String, v: Vec<u8>, n: i64) {
        round_trip(&KeyValueSchema::new(StringSchema, BytesSchema), KeyValue::new(k.clone(), Bytes::from(v.clone())))?;
        round_trip(&KeyValueSchema::new(Int64Schema, StringSchema), KeyValue::new(n, k.clone()))?;
        // Separated: through a message (the key travels base64 in the message key).
        let kv = KeyValueSchema::separated(BytesSchema, StringSchema);
        let mut pm = ProducerMessage::default();
        kv.encode_message(&KeyValue::new(Bytes::from(v.clone()), k.clone()), &mut pm).unwrap();
        let msg = crate::message::Message::for_tests(pm);
        let back = kv.decode_message(&msg, None).unwrap();
        prop_assert_eq!(&back.key[..], &v[..]);
        prop_assert_eq!(back.value, k);
    }

    #[test]
    fn base64_round_trips(v: Vec<u8>) {
        prop_assert_eq!(base64_decode(&base64_encode(&v)).unwrap(), v);
    }

    #[test]
    fn json_and_avro_round_trip(name: String, age: i32, email: Option<String>) {
        let u = User { name, age, email };
        round_trip(&user_json(), u.clone())?;
        round_trip(&AvroSchema::<User>::derived().unwrap(), u)?;
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(data: Vec<u8>) {
        let _ = Int64Schema.decode(&data, None);
        let _ = KeyValueSchema::new(StringSchema, StringSchema).decode(&data, None);
        let _ = user_json().decode(&data, None);
        let _ = AvroSchema::<User>::derived().unwrap().decode(&data, None);
        let info = user_json().info();
        let _ = AutoConsumeSchema.decode(&data, info.as_ref());
        let _ = base64_decode(&String::from_utf8_lossy(&data));
    }
}
