//! [`AvroSchema`] (serde types) and [`GenericAvroSchema`] (`apache_avro::types::Value`): Avro
//! binary datums without a container header, like upstream's `AvroSchema` and the Python
//! client's `fastavro.schemaless_writer`. A payload is decoded with the schema it was written
//! with when the consumer knows that version (Avro schema resolution), else with the reader's.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use apache_avro::types::Value;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// Parsed writer schemas by definition: bounded, so a topic with many versions cannot grow it.
const WRITER_CACHE: usize = 64;

/// The Avro machinery shared by the typed and the generic schema.
struct Core {
    info: SchemaInfo,
    schema: Arc<apache_avro::Schema>,
    writers: Mutex<HashMap<Bytes, Arc<apache_avro::Schema>>>,
}

impl Core {
    fn new(definition: &str) -> Result<Core, SchemaError> {
        let schema = apache_avro::Schema::parse_str(definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        Ok(Core {
            // Java's `AvroSchema` properties (`SchemaDefinition` defaults).
            info: SchemaInfo::new(SchemaType::Avro, "")
                .with_definition(definition.to_string())
                .with_property("__alwaysAllowNull", "true")
                .with_property("__jsr310ConversionEnabled", "false"),
            schema: Arc::new(schema),
            writers: Mutex::new(HashMap::new()),
        })
    }

    /// The writer's parsed schema, if `writer` is an Avro (or JSON) definition that parses.
    fn writer(&self, writer: Option<&SchemaInfo>) -> Option<Arc<apache_avro::Schema>> {
        let w = writer.filter(|w| w.schema_type.is_struct())?;
        if w.definition == self.info.definition {
            return None;
        }
        let mut cache = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = cache.get(&w.definition) {
            return Some(s.clone());
        }
        let parsed = Arc::new(apache_avro::Schema::parse_str(w.definition_str()?).ok()?);
        if cache.len() >= WRITER_CACHE {
            cache.clear();
        }
        cache.insert(w.definition.clone(), parsed.clone());
        Some(parsed)
    }

    fn encode_value(&self, value: Value) -> Result<Bytes, SchemaError> {
        let err = |e: apache_avro::Error| SchemaError::Encode {
            schema_type: SchemaType::Avro,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        };
        let value = value.resolve(&self.schema).map_err(err)?;
        apache_avro::to_avro_datum(&self.schema, value)
            .map(Bytes::from)
            .map_err(err)
    }

    fn decode_value(
        &self,
        mut payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<Value, SchemaError> {
        let err = |e: apache_avro::Error| SchemaError::Decode {
            schema_type: SchemaType::Avro,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        };
        let value = match self.writer(writer) {
            Some(w) => apache_avro::from_avro_datum(&w, &mut payload, Some(&self.schema)),
            None => apache_avro::from_avro_datum(&self.schema, &mut payload, None),
        }
        .map_err(err)?;
        if !payload.is_empty() {
            return Err(SchemaError::decode(
                SchemaType::Avro,
                format!("{} bytes left after the datum", payload.len()),
            ));
        }
        Ok(value)
    }
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
    /// An Avro schema derived from `T` (`#[derive(apache_avro::AvroSchema)]`).
    pub fn derived() -> Result<Self, SchemaError> {
        let def = serde_json::to_string(&T::get_schema())
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        Self::new(&def)
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
        &self.core.schema
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

/// Decodes an Avro datum with the writer's definition only (AUTO_CONSUME).
pub(crate) fn decode_with_writer(
    payload: &[u8],
    writer: &SchemaInfo,
) -> Result<Value, SchemaError> {
    let core = Core::new(writer.definition_str().unwrap_or(""))?;
    core.decode_value(payload, None)
}
