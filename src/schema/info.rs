//! [`SchemaInfo`], [`SchemaType`] and [`SchemaVersion`]: what the broker registers and how it
//! names versions.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

use crate::proto;

/// The schema types of the protocol (`Schema.Type` in PulsarApi.proto), with upstream's numbers.
/// [`SchemaType::Bytes`] is the wire's `None` (Java's `BYTES` and `NONE` both travel as it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaType {
    /// Raw bytes, no schema (wire `None`, 0).
    Bytes,
    /// UTF-8 text (1).
    String,
    /// JSON with an Avro-record definition (2).
    Json,
    /// Protobuf with an Avro-form definition (3).
    Protobuf,
    /// Avro binary (4).
    Avro,
    /// One byte, 0 or 1 (5).
    Bool,
    /// 8-bit integer (6).
    Int8,
    /// 16-bit big-endian integer (7).
    Int16,
    /// 32-bit big-endian integer (8).
    Int32,
    /// 64-bit big-endian integer (9).
    Int64,
    /// IEEE 754 single, big-endian (10).
    Float,
    /// IEEE 754 double, big-endian (11).
    Double,
    /// Milliseconds since the epoch, i64 big-endian (12).
    Date,
    /// Milliseconds, i64 big-endian (13).
    Time,
    /// Milliseconds since the epoch, i64 big-endian (14).
    Timestamp,
    /// A key and a value, each with its schema (15).
    KeyValue,
    /// Seconds (i64) and nanoseconds (i32) since the epoch, big-endian (16).
    Instant,
    /// Days since the epoch, i64 big-endian (17).
    LocalDate,
    /// Nanoseconds of the day, i64 big-endian (18).
    LocalTime,
    /// Days since the epoch and nanoseconds of the day, two i64 big-endian (19).
    LocalDateTime,
    /// Protobuf with a file-descriptor definition (20).
    ProtobufNative,
    /// Whatever the topic has (21; sent by `AUTO_CONSUME` consumers).
    AutoConsume,
    /// A schema held outside Pulsar (22).
    External,
}

const TYPES: [(SchemaType, i32, &str); 23] = [
    (SchemaType::Bytes, 0, "BYTES"),
    (SchemaType::String, 1, "STRING"),
    (SchemaType::Json, 2, "JSON"),
    (SchemaType::Protobuf, 3, "PROTOBUF"),
    (SchemaType::Avro, 4, "AVRO"),
    (SchemaType::Bool, 5, "BOOLEAN"),
    (SchemaType::Int8, 6, "INT8"),
    (SchemaType::Int16, 7, "INT16"),
    (SchemaType::Int32, 8, "INT32"),
    (SchemaType::Int64, 9, "INT64"),
    (SchemaType::Float, 10, "FLOAT"),
    (SchemaType::Double, 11, "DOUBLE"),
    (SchemaType::Date, 12, "DATE"),
    (SchemaType::Time, 13, "TIME"),
    (SchemaType::Timestamp, 14, "TIMESTAMP"),
    (SchemaType::KeyValue, 15, "KEY_VALUE"),
    (SchemaType::Instant, 16, "INSTANT"),
    (SchemaType::LocalDate, 17, "LOCAL_DATE"),
    (SchemaType::LocalTime, 18, "LOCAL_TIME"),
    (SchemaType::LocalDateTime, 19, "LOCAL_DATE_TIME"),
    (SchemaType::ProtobufNative, 20, "PROTOBUF_NATIVE"),
    (SchemaType::AutoConsume, 21, "AUTO_CONSUME"),
    (SchemaType::External, 22, "EXTERNAL"),
];

impl SchemaType {
    /// The protocol's number.
    pub fn to_wire(self) -> i32 {
        TYPES.iter().find(|t| t.0 == self).map_or(0, |t| t.1)
    }

    /// The type of a protocol number (`None` for an unknown one).
    pub fn from_wire(n: i32) -> Option<SchemaType> {
        TYPES.iter().find(|t| t.1 == n).map(|t| t.0)
    }

    /// Java's name (`SchemaType.name()`), as key/value schemas record it.
    pub fn java_name(self) -> &'static str {
        TYPES.iter().find(|t| t.0 == self).map_or("BYTES", |t| t.2)
    }

    /// The type of a Java name (`NONE` is [`SchemaType::Bytes`]).
    pub fn from_java_name(name: &str) -> Option<SchemaType> {
        if name == "NONE" {
            return Some(SchemaType::Bytes);
        }
        TYPES.iter().find(|t| t.2 == name).map(|t| t.0)
    }

    /// Whether the definition is an Avro record schema (JSON, Avro and Protobuf).
    pub fn is_struct(self) -> bool {
        matches!(
            self,
            SchemaType::Json | SchemaType::Avro | SchemaType::Protobuf
        )
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.java_name())
    }
}

/// A schema as the broker registers it: type, name, definition (`schema_data`) and properties.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaInfo {
    /// The schema's name (informational; upstream uses e.g. `"String"` or `""`).
    pub name: String,
    /// Its type.
    pub schema_type: SchemaType,
    /// Its definition: an Avro-schema JSON for JSON/Avro, key and value definitions for
    /// key/value, empty for primitives.
    pub definition: Bytes,
    /// Its properties.
    pub properties: BTreeMap<String, String>,
}

impl SchemaInfo {
    /// A schema of this type and name with an empty definition and no properties.
    pub fn new(schema_type: SchemaType, name: impl Into<String>) -> Self {
        SchemaInfo {
            name: name.into(),
            schema_type,
            definition: Bytes::new(),
            properties: BTreeMap::new(),
        }
    }

    /// Sets the definition.
    pub fn with_definition(mut self, definition: impl Into<Bytes>) -> Self {
        self.definition = definition.into();
        self
    }

    /// Adds a property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The definition as text, if it is UTF-8.
    pub fn definition_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.definition).ok()
    }

    pub(crate) fn to_proto(&self) -> proto::Schema {
        proto::Schema {
            name: self.name.clone(),
            schema_data: self.definition.clone(),
            r#type: self.schema_type.to_wire(),
            properties: self
                .properties
                .iter()
                .map(|(k, v)| proto::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
        }
    }

    /// `None` for a type number this client does not know.
    pub(crate) fn from_proto(s: &proto::Schema) -> Option<SchemaInfo> {
        Some(SchemaInfo {
            name: s.name.clone(),
            schema_type: SchemaType::from_wire(s.r#type)?,
            definition: s.schema_data.clone(),
            properties: s
                .properties
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
        })
    }

    /// The properties as a JSON object, like upstream's `SchemaUtils.serializeSchemaProperties`
    /// (key/value schemas record each side's properties so).
    pub(crate) fn properties_json(&self) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.properties.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_string(&mut out, k);
            out.push(':');
            json_string(&mut out, v);
        }
        out.push('}');
        out
    }
}

/// Appends `s` as a JSON string literal.
pub(crate) fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A schema version as the broker names it: opaque bytes (upstream brokers use an 8-byte
/// big-endian counter, `LongSchemaVersion`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaVersion(pub Bytes);

impl SchemaVersion {
    /// The counter of an upstream (8-byte big-endian) version, if it is one.
    pub fn as_long(&self) -> Option<i64> {
        <[u8; 8]>::try_from(&self.0[..])
            .ok()
            .map(i64::from_be_bytes)
    }

    /// The version `n` in upstream's encoding.
    pub fn from_long(n: i64) -> Self {
        SchemaVersion(Bytes::copy_from_slice(&n.to_be_bytes()))
    }
}
