//! [`AutoConsumeSchema`]: decodes each message with the schema it was written with (fetched by
//! version), into a [`GenericValue`], like upstream's `AUTO_CONSUME`.

use bytes::Bytes;

use super::keyvalue::{decode_pair, message_key_bytes, split_info, KeyValueEncoding};
use super::primitive::*;
use super::{Schema, SchemaError, SchemaInfo, SchemaType};
use crate::message::Message;

/// A value decoded without a compile-time type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum GenericValue {
    /// Bytes: the topic has no schema (or one this client cannot decode generically, such as
    /// Protobuf, or Avro without the `avro` feature).
    Bytes(Bytes),
    /// Text (a STRING schema; a JSON one without the `json` feature).
    String(String),
    /// BOOLEAN.
    Bool(bool),
    /// INT8.
    Int8(i8),
    /// INT16.
    Int16(i16),
    /// INT32.
    Int32(i32),
    /// INT64.
    Int64(i64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// DATE, TIME or TIMESTAMP: milliseconds.
    Millis(SchemaType, i64),
    /// INSTANT: seconds and nanoseconds since the epoch.
    Instant(i64, i32),
    /// LOCAL_DATE (epoch day) or LOCAL_TIME (nanosecond of day).
    Local(SchemaType, i64),
    /// LOCAL_DATE_TIME: epoch day and nanosecond of day.
    LocalDateTime(i64, i64),
    /// JSON, parsed.
    #[cfg(feature = "json")]
    Json(serde_json::Value),
    /// An Avro datum, decoded with the writer's schema.
    #[cfg(feature = "avro")]
    Avro(apache_avro::types::Value),
    /// A key and a value.
    KeyValue(Box<GenericValue>, Box<GenericValue>),
}

/// Decodes whatever the topic has (upstream's `Schema.AUTO_CONSUME()`). The consumer registers
/// no schema (it subscribes with type AUTO_CONSUME, which the broker accepts on any topic) and
/// decodes each message with the writer's schema, fetched by version and cached; a message
/// whose writer schema is unknown (a broker without a registry) decodes as
/// [`GenericValue::Bytes`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoConsumeSchema;

fn decode_as(payload: &[u8], writer: &SchemaInfo) -> Result<GenericValue, SchemaError> {
    use GenericValue as G;
    let w = Some(writer);
    Ok(match writer.schema_type {
        SchemaType::String => G::String(StringSchema.decode(payload, w)?),
        SchemaType::Bool => G::Bool(BoolSchema.decode(payload, w)?),
        SchemaType::Int8 => G::Int8(Int8Schema.decode(payload, w)?),
        SchemaType::Int16 => G::Int16(Int16Schema.decode(payload, w)?),
        SchemaType::Int32 => G::Int32(Int32Schema.decode(payload, w)?),
        SchemaType::Int64 => G::Int64(Int64Schema.decode(payload, w)?),
        SchemaType::Float => G::Float(FloatSchema.decode(payload, w)?),
        SchemaType::Double => G::Double(DoubleSchema.decode(payload, w)?),
        t @ (SchemaType::Date | SchemaType::Time | SchemaType::Timestamp) => {
            G::Millis(t, Int64Schema.decode(payload, w)?)
        }
        t @ (SchemaType::LocalDate | SchemaType::LocalTime) => {
            G::Local(t, Int64Schema.decode(payload, w)?)
        }
        SchemaType::Instant => {
            let (s, n) = InstantSchema.decode(payload, w)?;
            G::Instant(s, n)
        }
        SchemaType::LocalDateTime => {
            let (d, n) = LocalDateTimeSchema.decode(payload, w)?;
            G::LocalDateTime(d, n)
        }
        #[cfg(feature = "json")]
        SchemaType::Json => G::Json(
            serde_json::from_slice(payload)
                .map_err(|e| SchemaError::decode_from(SchemaType::Json, e))?,
        ),
        #[cfg(not(feature = "json"))]
        SchemaType::Json => G::String(StringSchema.decode(payload, w)?),
        #[cfg(feature = "avro")]
        SchemaType::Avro => G::Avro(super::avro::decode_with_writer(payload, writer)?),
        SchemaType::KeyValue => {
            let (ki, vi, _) = split_info(writer)?;
            let (k, v) = decode_pair(payload)?;
            G::KeyValue(Box::new(decode_as(k, &ki)?), Box::new(decode_as(v, &vi)?))
        }
        _ => G::Bytes(Bytes::copy_from_slice(payload)),
    })
}

impl Schema for AutoConsumeSchema {
    type Type = GenericValue;

    fn info(&self) -> Option<SchemaInfo> {
        Some(SchemaInfo::new(SchemaType::AutoConsume, "AutoConsume"))
    }

    fn encode(&self, _: &GenericValue) -> Result<Bytes, SchemaError> {
        Err(SchemaError::encode(
            SchemaType::AutoConsume,
            "AUTO_CONSUME only decodes",
        ))
    }

    fn decode(
        &self,
        payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<GenericValue, SchemaError> {
        match writer {
            Some(w) => decode_as(payload, w),
            None => Ok(GenericValue::Bytes(Bytes::copy_from_slice(payload))),
        }
    }

    fn needs_writer_schema(&self) -> bool {
        true
    }

    fn decode_message(
        &self,
        msg: &Message,
        writer: Option<&SchemaInfo>,
    ) -> Result<GenericValue, SchemaError> {
        if let Some(w) = writer.filter(|w| w.schema_type == SchemaType::KeyValue) {
            let (ki, vi, enc) = split_info(w)?;
            if enc == KeyValueEncoding::Separated {
                let key = message_key_bytes(msg)?;
                return Ok(GenericValue::KeyValue(
                    Box::new(decode_as(&key, &ki)?),
                    Box::new(decode_as(&msg.payload, &vi)?),
                ));
            }
        }
        self.decode(&msg.payload, writer)
    }
}
