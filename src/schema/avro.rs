//! [`AvroSchema`] (serde types) and [`GenericAvroSchema`] (`apache_avro::types::Value`): Avro
//! binary datums without a container header, like upstream's `AvroSchema` and the Python
//! client's `fastavro.schemaless_writer`. A payload is decoded with the schema it was written
//! with when the consumer knows that version (Avro schema resolution), else with the reader's.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

use apache_avro::types::Value;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::avro_guard::{Plan, RECURSES};
use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// How many parsed writer schemas a cache keeps.
const WRITER_CACHE: usize = 64;

/// How many bytes of definitions a cache of parsed writer schemas keeps (a parsed schema
/// costs a few times its definition); a definition larger than this is parsed but not kept.
const WRITER_CACHE_BYTES: usize = 64 << 20;

/// A parsed Avro schema with its walk plan (see `avro_guard`): parsed and checked once.
struct Parsed {
    schema: apache_avro::Schema,
    plan: Plan,
}

impl Parsed {
    fn new(definition: &str) -> Result<Parsed, SchemaError> {
        // apache-avro 0.20 panics on some invalid definitions (a record name that is not a
        // valid Avro name unwraps an error); a definition comes from the broker, so that is
        // an invalid definition, not a crash of the consumer.
        // So names are checked first, and a panic that remains is caught.
        let json: serde_json::Value = serde_json::from_str(definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        super::avro_guard::check_names(&json)?;
        let parsed = std::panic::catch_unwind(|| apache_avro::Schema::parse(&json))
            .map_err(|_| SchemaError::InvalidDefinition("the Avro parser panicked".into()))?;
        let schema = parsed.map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        let plan = Plan::new(&schema)?;
        Ok(Parsed { schema, plan })
    }
}

/// Writer schemas parsed once per definition (the outcome, so a definition that does not
/// parse is not parsed again per message), bounded by [`WRITER_CACHE`] entries and
/// [`WRITER_CACHE_BYTES`] of definitions; past either bound it starts over.
#[derive(Default)]
struct WriterCache {
    entries: HashMap<Bytes, Result<Arc<Parsed>, SchemaError>>,
    bytes: usize,
}

impl WriterCache {
    fn get(cache: &Mutex<WriterCache>, definition: &Bytes) -> Result<Arc<Parsed>, SchemaError> {
        if let Some(hit) = lock(cache).entries.get(definition) {
            return hit.clone();
        }
        // Parse outside the lock: a large definition must not stall other consumers.
        let parsed = std::str::from_utf8(definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))
            .and_then(Parsed::new)
            .map(Arc::new);
        let mut c = lock(cache);
        if definition.len() <= WRITER_CACHE_BYTES {
            if c.entries.len() >= WRITER_CACHE || c.bytes + definition.len() > WRITER_CACHE_BYTES {
                c.entries.clear();
                c.bytes = 0;
            }
            if c.entries
                .insert(definition.clone(), parsed.clone())
                .is_none()
            {
                c.bytes += definition.len();
            }
        }
        parsed
    }
}

fn lock(m: &Mutex<WriterCache>) -> std::sync::MutexGuard<'_, WriterCache> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Avro machinery shared by the typed and the generic schema.
struct Core {
    info: SchemaInfo,
    schema: Arc<Parsed>,
    writers: Mutex<WriterCache>,
}

impl Core {
    fn new(definition: &str) -> Result<Core, SchemaError> {
        let schema = Parsed::new(definition)?;
        Ok(Core {
            // Java's `AvroSchema` properties (`SchemaDefinition` defaults).
            info: SchemaInfo::new(SchemaType::Avro, "")
                .with_definition(definition.to_string())
                .with_property("__alwaysAllowNull", "true")
                .with_property("__jsr310ConversionEnabled", "false"),
            schema: Arc::new(schema),
            writers: Mutex::new(WriterCache::default()),
        })
    }

    /// The writer's parsed schema, if `writer` is an Avro (or JSON) definition other than
    /// ours; a definition that does not parse decodes with ours (as before), one that parses
    /// but breaks a limit (recursion without input) is an error.
    fn writer(&self, writer: Option<&SchemaInfo>) -> Result<Option<Arc<Parsed>>, SchemaError> {
        let Some(w) = writer.filter(|w| w.schema_type.is_struct()) else {
            return Ok(None);
        };
        if w.definition == self.info.definition {
            return Ok(None);
        }
        match WriterCache::get(&self.writers, &w.definition) {
            Ok(p) => Ok(Some(p)),
            Err(SchemaError::InvalidDefinition(reason)) if !reason.contains(RECURSES) => Ok(None),
            Err(e) => Err(refused_writer(e)),
        }
    }

    fn encode_value(&self, value: Value) -> Result<Bytes, SchemaError> {
        let err = |e: apache_avro::Error| SchemaError::Encode {
            schema_type: SchemaType::Avro,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        };
        let value = value.resolve(&self.schema.schema).map_err(err)?;
        apache_avro::to_avro_datum(&self.schema.schema, value)
            .map(Bytes::from)
            .map_err(err)
    }

    fn decode_value(
        &self,
        payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<Value, SchemaError> {
        match self.writer(writer)? {
            Some(w) => decode_checked(&w, payload, Some(&self.schema.schema)),
            None => decode_checked(&self.schema, payload, None),
        }
    }
}

/// A message whose writer schema is refused: a decode error on that message.
fn refused_writer(e: SchemaError) -> SchemaError {
    SchemaError::decode(
        SchemaType::Avro,
        format!("the writer schema is refused: {e}"),
    )
}

/// Walks `payload` with the writer's plan (the limits of `avro_guard`), then decodes it.
fn decode_checked(
    writer: &Parsed,
    mut payload: &[u8],
    reader: Option<&apache_avro::Schema>,
) -> Result<Value, SchemaError> {
    let err = |e: apache_avro::Error| SchemaError::Decode {
        schema_type: SchemaType::Avro,
        reason: e.to_string(),
        source: Some(Arc::new(e)),
    };
    writer.plan.check(payload)?;
    let value = apache_avro::from_avro_datum(&writer.schema, &mut payload, reader).map_err(err)?;
    if !payload.is_empty() {
        return Err(SchemaError::decode(
            SchemaType::Avro,
            format!("{} bytes left after the datum", payload.len()),
        ));
    }
    Ok(value)
}

/// Values of a serde type `T` as Avro binary datums, registered as an AVRO schema.
pub struct AvroSchema<T> {
    core: Arc<Core>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for AvroSchema<T> {
    fn clone(&self) -> Self {
        AvroSchema {
            core: self.core.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for AvroSchema<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSchema")
            .field("info", &self.core.info)
            .finish()
    }
}

impl<T> AvroSchema<T> {
    /// An Avro schema with this definition (Avro schema JSON).
    pub fn new(definition: &str) -> Result<Self, SchemaError> {
        Ok(AvroSchema {
            core: Arc::new(Core::new(definition)?),
            _t: PhantomData,
        })
    }

    /// The schema info it registers.
    pub fn schema_info(&self) -> &SchemaInfo {
        &self.core.info
    }
}

impl<T: apache_avro::AvroSchema> AvroSchema<T> {
    /// An Avro schema derived from `T` (`#[derive(apache_avro::AvroSchema)]`); an optional
    /// field (`["null", T]`) gets `"default": null`, as Java's `AvroSchema.of` registers it.
    pub fn derived() -> Result<Self, SchemaError> {
        Self::new(&super::json::derived_definition(&T::get_schema())?)
    }
}

impl<T> Schema for AvroSchema<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    type Type = T;

    fn info(&self) -> Option<SchemaInfo> {
        Some(self.core.info.clone())
    }

    fn encode(&self, value: &T) -> Result<Bytes, SchemaError> {
        let v = apache_avro::to_value(value).map_err(|e| SchemaError::Encode {
            schema_type: SchemaType::Avro,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        })?;
        self.core.encode_value(v)
    }

    fn decode(&self, payload: &[u8], writer: Option<&SchemaInfo>) -> Result<T, SchemaError> {
        let v = self.core.decode_value(payload, writer)?;
        apache_avro::from_value(&v).map_err(|e| SchemaError::Decode {
            schema_type: SchemaType::Avro,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        })
    }

    fn needs_writer_schema(&self) -> bool {
        true
    }
}

/// Generic Avro records (`apache_avro::types::Value`) with a definition given at run time.
#[derive(Clone)]
pub struct GenericAvroSchema {
    core: Arc<Core>,
}

impl std::fmt::Debug for GenericAvroSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenericAvroSchema")
            .field("info", &self.core.info)
            .finish()
    }
}

impl GenericAvroSchema {
    /// A generic Avro schema with this definition (Avro schema JSON).
    pub fn new(definition: &str) -> Result<Self, SchemaError> {
        Ok(GenericAvroSchema {
            core: Arc::new(Core::new(definition)?),
        })
    }

    /// The parsed Avro schema.
    pub fn avro_schema(&self) -> &apache_avro::Schema {
        &self.core.schema.schema
    }
}

impl Schema for GenericAvroSchema {
    type Type = Value;

    fn info(&self) -> Option<SchemaInfo> {
        Some(self.core.info.clone())
    }

    fn encode(&self, value: &Value) -> Result<Bytes, SchemaError> {
        self.core.encode_value(value.clone())
    }

    fn decode(&self, payload: &[u8], writer: Option<&SchemaInfo>) -> Result<Value, SchemaError> {
        self.core.decode_value(payload, writer)
    }

    fn needs_writer_schema(&self) -> bool {
        true
    }
}

/// Decodes an Avro datum with the writer's definition only (AUTO_CONSUME). The writer schema
/// is parsed once per definition, in a process-wide cache bounded like a schema's own
/// (upstream's `AutoConsumeSchema` keeps one decoder per schema version).
pub(crate) fn decode_with_writer(
    payload: &[u8],
    writer: &SchemaInfo,
) -> Result<Value, SchemaError> {
    static CACHE: OnceLock<Mutex<WriterCache>> = OnceLock::new();
    let parsed = WriterCache::get(CACHE.get_or_init(Default::default), &writer.definition)
        .map_err(refused_writer)?;
    decode_checked(&parsed, payload, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEF: &str = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}"#;

    #[test]
    fn a_writer_definition_is_parsed_once_and_the_cache_is_bounded() {
        let cache = Mutex::new(WriterCache::default());
        let def = Bytes::from_static(DEF.as_bytes());
        let a = WriterCache::get(&cache, &def).unwrap();
        let b = WriterCache::get(&cache, &def).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "parsed once");
        // A definition that does not parse is remembered too (not parsed per message).
        let bad = Bytes::from_static(b"{not json");
        assert!(WriterCache::get(&cache, &bad).is_err());
        assert_eq!(lock(&cache).entries.len(), 2);
        // Count bound: past WRITER_CACHE entries it starts over.
        for i in 0..WRITER_CACHE {
            let d = DEF.replace("\"a\"", &format!("\"a{i}\""));
            WriterCache::get(&cache, &Bytes::from(d)).unwrap();
        }
        let c = lock(&cache);
        assert!(c.entries.len() <= WRITER_CACHE, "{}", c.entries.len());
        assert!(c.bytes <= WRITER_CACHE_BYTES);
    }

    /// Review (issue #31 section 4, "parse once per version"): AUTO_CONSUME's cache is one per
    /// process and starts over when full, so 65 writer versions in rotation (65 topics with
    /// one schema each, one consumer per topic) are parsed again on every message, a 16 MiB
    /// definition ~37 ms each. Upstream's `AutoConsumeSchema` keeps a decoder per version
    /// per consumer, unbounded.
    #[test]
    #[ignore = "defect, not fixed: a process-wide cache of 64 entries that clears when full \
                thrashes on a working set of 65 versions; needs per-consumer caches or a \
                bound from the consumer's topics, a design choice"]
    fn a_working_set_just_over_the_cache_is_parsed_once_per_version() {
        let cache = Mutex::new(WriterCache::default());
        let defs: Vec<Bytes> = (0..=WRITER_CACHE)
            .map(|i| Bytes::from(DEF.replace("\"a\"", &format!("\"a{i}\""))))
            .collect();
        let first: Vec<_> = defs
            .iter()
            .map(|d| WriterCache::get(&cache, d).unwrap())
            .collect();
        let reparsed = defs
            .iter()
            .zip(&first)
            .filter(|(d, p)| !Arc::ptr_eq(&WriterCache::get(&cache, d).unwrap(), p))
            .count();
        assert_eq!(
            reparsed,
            0,
            "{reparsed} of {} versions parsed again",
            defs.len()
        );
    }
}
