//! [`KeyValueSchema`]: a key and a value, each with its own schema, encoded inline in the
//! payload or with the key in the message key (separated), like upstream's
//! `KeyValueSchemaImpl`, `KeyValue.encode` and `KeyValueSchemaInfo`.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Schema, SchemaError, SchemaInfo, SchemaType};
use crate::message::{Message, ProducerMessage};

/// Where the key of a [`KeyValueSchema`] goes (upstream's `KeyValueEncodingType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyValueEncoding {
    /// Key and value in the payload: `[i32 key length][key][i32 value length][value]`,
    /// big-endian lengths (the default).
    #[default]
    Inline,
    /// The value in the payload, the key (base64, `partition_key_b64_encoded`) in the message
    /// key: key-based routing, compaction and Key_Shared see it.
    Separated,
}

impl KeyValueEncoding {
    fn java_name(self) -> &'static str {
        match self {
            KeyValueEncoding::Inline => "INLINE",
            KeyValueEncoding::Separated => "SEPARATED",
        }
    }
}

/// A key and a value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
}

impl<K, V> KeyValue<K, V> {
    /// A pair.
    pub fn new(key: K, value: V) -> Self {
        KeyValue { key, value }
    }
}

/// A key schema and a value schema (upstream's `Schema.KeyValue(key, value, encoding)`).
#[derive(Debug, Clone)]
pub struct KeyValueSchema<K, V> {
    key: K,
    value: V,
    encoding: KeyValueEncoding,
}

impl<K: Schema, V: Schema> KeyValueSchema<K, V> {
    /// Key and value schemas with the inline encoding.
    pub fn new(key: K, value: V) -> Self {
        Self::with_encoding(key, value, KeyValueEncoding::Inline)
    }

    /// Key and value schemas with the separated encoding (the key in the message key).
    pub fn separated(key: K, value: V) -> Self {
        Self::with_encoding(key, value, KeyValueEncoding::Separated)
    }

    /// Key and value schemas with this encoding.
    pub fn with_encoding(key: K, value: V, encoding: KeyValueEncoding) -> Self {
        KeyValueSchema {
            key,
            value,
            encoding,
        }
    }

    /// The encoding.
    pub fn encoding(&self) -> KeyValueEncoding {
        self.encoding
    }
}

/// A side's info, `BYTES` when its schema registers nothing (upstream's `BytesSchema` info).
fn side(info: Option<SchemaInfo>) -> SchemaInfo {
    info.unwrap_or_else(|| SchemaInfo::new(SchemaType::Bytes, "Bytes"))
}

/// Upstream's `KeyValue.encode`: `[i32 len][key][i32 len][value]`, big-endian lengths.
pub(crate) fn encode_pair(key: &[u8], value: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + key.len() + value.len());
    out.put_i32(key.len() as i32);
    out.put_slice(key);
    out.put_i32(value.len() as i32);
    out.put_slice(value);
    out.freeze()
}

/// Upstream's `KeyValue.decode`; a length of -1 (Java's null) reads as empty.
pub(crate) fn decode_pair(data: &[u8]) -> Result<(&[u8], &[u8]), SchemaError> {
    let err = |what: &str| SchemaError::decode(SchemaType::KeyValue, what.to_string());
    let take = |data: &[u8], at: usize| -> Result<(usize, usize), SchemaError> {
        let len = data
            .get(at..at + 4)
            .ok_or_else(|| err("truncated length"))?;
        let len = i32::from_be_bytes(len.try_into().map_err(|_| err("truncated length"))?);
        let start = at + 4;
        if len == -1 {
            return Ok((start, start));
        }
        let len = usize::try_from(len).map_err(|_| err("negative length"))?;
        let end = start
            .checked_add(len)
            .filter(|e| *e <= data.len())
            .ok_or_else(|| err("length past the end of the payload"))?;
        Ok((start, end))
    };
    let (ks, ke) = take(data, 0)?;
    let (vs, ve) = take(data, ke)?;
    Ok((&data[ks..ke], &data[vs..ve]))
}

/// Splits a KEY_VALUE schema info into its key and value infos and encoding
/// (`KeyValueSchemaInfo.decodeKeyValueSchemaInfo`; the sides' properties are not restored).
pub(crate) fn split_info(
    info: &SchemaInfo,
) -> Result<(SchemaInfo, SchemaInfo, KeyValueEncoding), SchemaError> {
    let (k, v) = decode_pair(&info.definition)?;
    let sub = |name: &str, ty: &str, data: &[u8]| SchemaInfo {
        name: info.properties.get(name).cloned().unwrap_or_default(),
        schema_type: info
            .properties
            .get(ty)
            .and_then(|t| SchemaType::from_java_name(t))
            .unwrap_or(SchemaType::Bytes),
        definition: Bytes::copy_from_slice(data),
        properties: Default::default(),
    };
    let encoding = match info.properties.get("kv.encoding.type").map(String::as_str) {
        Some("SEPARATED") => KeyValueEncoding::Separated,
        _ => KeyValueEncoding::Inline,
    };
    Ok((
        sub("key.schema.name", "key.schema.type", k),
        sub("value.schema.name", "value.schema.type", v),
        encoding,
    ))
}

/// The schema info of a key/value pair (`KeyValueSchemaInfo.encodeKeyValueSchemaInfo`).
pub(crate) fn pair_info(key: SchemaInfo, value: SchemaInfo, enc: KeyValueEncoding) -> SchemaInfo {
    let mut info = SchemaInfo::new(SchemaType::KeyValue, "KeyValue")
        .with_definition(encode_pair(&key.definition, &value.definition));
    for (prefix, s) in [("key", &key), ("value", &value)] {
        info.properties
            .insert(format!("{prefix}.schema.name"), s.name.clone());
        info.properties.insert(
            format!("{prefix}.schema.type"),
            s.schema_type.java_name().to_string(),
        );
        info.properties
            .insert(format!("{prefix}.schema.properties"), s.properties_json());
    }
    info.properties
        .insert("kv.encoding.type".into(), enc.java_name().into());
    info
}

/// The writer's key and value infos, when the writer's KEY_VALUE info is known.
type Sides = (Option<SchemaInfo>, Option<SchemaInfo>);

fn writer_sides(writer: Option<&SchemaInfo>) -> Sides {
    match writer
        .filter(|w| w.schema_type == SchemaType::KeyValue)
        .map(split_info)
    {
        Some(Ok((k, v, _))) => (Some(k), Some(v)),
        _ => (None, None),
    }
}

impl<K: Schema, V: Schema> Schema for KeyValueSchema<K, V> {
    type Type = KeyValue<K::Type, V::Type>;

    fn info(&self) -> Option<SchemaInfo> {
        Some(pair_info(
            side(self.key.info()),
            side(self.value.info()),
            self.encoding,
        ))
    }

    fn encode(&self, value: &Self::Type) -> Result<Bytes, SchemaError> {
        let k = self.key.encode(&value.key)?;
        let v = self.value.encode(&value.value)?;
        Ok(encode_pair(&k, &v))
    }

    fn decode(
        &self,
        payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError> {
        let (wk, wv) = writer_sides(writer);
        let (k, v) = decode_pair(payload)?;
        Ok(KeyValue {
            key: self.key.decode(k, wk.as_ref())?,
            value: self.value.decode(v, wv.as_ref())?,
        })
    }

    fn needs_writer_schema(&self) -> bool {
        self.key.needs_writer_schema() || self.value.needs_writer_schema()
    }

    fn encode_message(
        &self,
        value: &Self::Type,
        msg: &mut ProducerMessage,
    ) -> Result<(), SchemaError> {
        match self.encoding {
            KeyValueEncoding::Inline => msg.payload = self.encode(value)?,
            KeyValueEncoding::Separated => {
                // Upstream `TypedMessageBuilderImpl.value` for SEPARATED: the key bytes go
                // base64-encoded into the partition key, flagged `partition_key_b64_encoded`.
                let k = self.key.encode(&value.key)?;
                msg.key = Some(base64_encode(&k));
                msg.key_b64_encoded = true;
                msg.payload = self.value.encode(&value.value)?;
            }
        }
        Ok(())
    }

    fn decode_message(
        &self,
        msg: &Message,
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError> {
        match self.encoding {
            KeyValueEncoding::Inline => self.decode(&msg.payload, writer),
            KeyValueEncoding::Separated => {
                let (wk, wv) = writer_sides(writer);
                let key = message_key_bytes(msg)?;
                Ok(KeyValue {
                    key: self.key.decode(&key, wk.as_ref())?,
                    value: self.value.decode(&msg.payload, wv.as_ref())?,
                })
            }
        }
    }
}

/// A message's key as bytes: base64-decoded when flagged so (upstream `getKeyBytes`).
pub(crate) fn message_key_bytes(msg: &Message) -> Result<Vec<u8>, SchemaError> {
    let key = msg.key.as_deref().unwrap_or("");
    if msg.key_b64_encoded {
        base64_decode(key).ok_or_else(|| {
            SchemaError::decode(SchemaType::KeyValue, "message key is not valid base64")
        })
    } else {
        Ok(key.as_bytes().to_vec())
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (Java's `Base64.getEncoder()`).
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); `None` if it is not base64.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64.iter().position(|b| *b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Leftover bits must be zero padding (a lone trailing character is not base64).
    (bits < 6 && acc == 0).then_some(out)
}
