//! Bytes, string and the primitive schemas, with the encodings of upstream's
//! `org.apache.pulsar.client.impl.schema` (`ByteSchema`, `ShortSchema`, `IntSchema`,
//! `LongSchema`, `FloatSchema`, `DoubleSchema`, `BooleanSchema`, `DateSchema`, `TimeSchema`,
//! `TimestampSchema`, `InstantSchema`, `LocalDateSchema`, `LocalTimeSchema`,
//! `LocalDateTimeSchema`): fixed sizes, big-endian, and a payload of another size is a decode
//! error (upstream's `validate`).

use bytes::Bytes;

use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// Raw bytes: nothing is registered (upstream's `Schema.BYTES`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesSchema;

impl Schema for BytesSchema {
    type Type = Bytes;
    fn info(&self) -> Option<SchemaInfo> {
        None
    }
    fn encode(&self, value: &Bytes) -> Result<Bytes, SchemaError> {
        Ok(value.clone())
    }
    fn decode(&self, payload: &[u8], _: Option<&SchemaInfo>) -> Result<Bytes, SchemaError> {
        Ok(Bytes::copy_from_slice(payload))
    }
}

/// UTF-8 text (upstream's `Schema.STRING`, registered as type STRING named `String`). A payload
/// that is not UTF-8 is a decode error.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringSchema;

impl Schema for StringSchema {
    type Type = String;
    fn info(&self) -> Option<SchemaInfo> {
        Some(SchemaInfo::new(SchemaType::String, "String"))
    }
    fn encode(&self, value: &String) -> Result<Bytes, SchemaError> {
        Ok(Bytes::copy_from_slice(value.as_bytes()))
    }
    fn decode(&self, payload: &[u8], _: Option<&SchemaInfo>) -> Result<String, SchemaError> {
        std::str::from_utf8(payload)
            .map(str::to_owned)
            .map_err(|e| SchemaError::decode(SchemaType::String, e.to_string()))
    }
}

/// Checks a fixed-size payload (upstream throws "Size of data received by XSchema is not N").
fn fixed<const N: usize>(t: SchemaType, payload: &[u8]) -> Result<[u8; N], SchemaError> {
    <[u8; N]>::try_from(payload)
        .map_err(|_| SchemaError::decode(t, format!("expected {N} bytes, got {}", payload.len())))
}

macro_rules! be_schema {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $st:expr, $label:expr, $n:expr,
     |$v:ident| $enc:expr, |$b:ident| $dec:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;

        impl Schema for $name {
            type Type = $ty;
            fn info(&self) -> Option<SchemaInfo> {
                Some(SchemaInfo::new($st, $label))
            }
            fn encode(&self, value: &$ty) -> Result<Bytes, SchemaError> {
                let $v = *value;
                let out: [u8; $n] = $enc;
                Ok(Bytes::copy_from_slice(&out))
            }
            fn decode(&self, payload: &[u8], _: Option<&SchemaInfo>) -> Result<$ty, SchemaError> {
                let $b: [u8; $n] = fixed::<$n>($st, payload)?;
                Ok($dec)
            }
        }
    };
}

be_schema!(
    /// One signed byte (INT8).
    Int8Schema, i8, SchemaType::Int8, "INT8", 1, |v| v.to_be_bytes(), |b| i8::from_be_bytes(b)
);
be_schema!(
    /// A 16-bit big-endian integer (INT16).
    Int16Schema, i16, SchemaType::Int16, "INT16", 2, |v| v.to_be_bytes(), |b| i16::from_be_bytes(b)
);
be_schema!(
    /// A 32-bit big-endian integer (INT32).
    Int32Schema, i32, SchemaType::Int32, "INT32", 4, |v| v.to_be_bytes(), |b| i32::from_be_bytes(b)
);
be_schema!(
    /// A 64-bit big-endian integer (INT64).
    Int64Schema, i64, SchemaType::Int64, "INT64", 8, |v| v.to_be_bytes(), |b| i64::from_be_bytes(b)
);
be_schema!(
    /// An IEEE 754 single, its bits big-endian (FLOAT, like Java's `floatToIntBits`).
    FloatSchema, f32, SchemaType::Float, "Float", 4, |v| v.to_bits().to_be_bytes(),
    |b| f32::from_bits(u32::from_be_bytes(b))
);
be_schema!(
    /// An IEEE 754 double, its bits big-endian (DOUBLE).
    DoubleSchema, f64, SchemaType::Double, "Double", 8, |v| v.to_bits().to_be_bytes(),
    |b| f64::from_bits(u64::from_be_bytes(b))
);
be_schema!(
    /// A boolean as one byte: 1 for true, 0 for false; any non-zero byte decodes as true
    /// (upstream's `BooleanSchema`).
    BoolSchema, bool, SchemaType::Bool, "Boolean", 1, |v| [u8::from(v)], |b| b[0] != 0
);
be_schema!(
    /// A `java.util.Date`: milliseconds since the epoch, i64 big-endian (DATE).
    DateSchema, i64, SchemaType::Date, "Date", 8, |v| v.to_be_bytes(), |b| i64::from_be_bytes(b)
);
be_schema!(
    /// A `java.sql.Time`: milliseconds, i64 big-endian (TIME).
    TimeSchema, i64, SchemaType::Time, "Time", 8, |v| v.to_be_bytes(), |b| i64::from_be_bytes(b)
);
be_schema!(
    /// A `java.sql.Timestamp`: milliseconds since the epoch, i64 big-endian (TIMESTAMP).
    TimestampSchema, i64, SchemaType::Timestamp, "Timestamp", 8, |v| v.to_be_bytes(),
    |b| i64::from_be_bytes(b)
);
be_schema!(
    /// A `java.time.LocalDate`: days since the epoch, i64 big-endian (LOCAL_DATE).
    LocalDateSchema, i64, SchemaType::LocalDate, "LocalDate", 8, |v| v.to_be_bytes(),
    |b| i64::from_be_bytes(b)
);
be_schema!(
    /// A `java.time.LocalTime`: nanoseconds of the day, i64 big-endian (LOCAL_TIME).
    LocalTimeSchema, i64, SchemaType::LocalTime, "LocalTime", 8, |v| v.to_be_bytes(),
    |b| i64::from_be_bytes(b)
);
be_schema!(
    /// A `java.time.Instant` as `(seconds, nanoseconds)` since the epoch: i64 then i32,
    /// big-endian, 12 bytes (INSTANT).
    InstantSchema, (i64, i32), SchemaType::Instant, "Instant", 12, |v| {
        let mut out = [0u8; 12];
        out[..8].copy_from_slice(&v.0.to_be_bytes());
        out[8..].copy_from_slice(&v.1.to_be_bytes());
        out
    }, |b| {
        let (s, n) = b.split_at(8);
        (
            i64::from_be_bytes(s.try_into().unwrap_or_default()),
            i32::from_be_bytes(n.try_into().unwrap_or_default()),
        )
    }
);
be_schema!(
    /// A `java.time.LocalDateTime` as `(epoch day, nanosecond of day)`: two i64 big-endian,
    /// 16 bytes (LOCAL_DATE_TIME).
    LocalDateTimeSchema, (i64, i64), SchemaType::LocalDateTime, "LocalDateTime", 16, |v| {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&v.0.to_be_bytes());
        out[8..].copy_from_slice(&v.1.to_be_bytes());
        out
    }, |b| {
        let (d, n) = b.split_at(8);
        (
            i64::from_be_bytes(d.try_into().unwrap_or_default()),
            i64::from_be_bytes(n.try_into().unwrap_or_default()),
        )
    }
);
