//! [`JsonSchema`]: serde values as JSON text, registered with the Avro-record definition the
//! Java (`JSONSchema`, from Avro reflection) and Python (`JsonSchema(Record)`) clients register.
//!
//! The definition is what the broker checks compatibility on (upstream's
//! `JsonSchemaCompatibilityCheck` reads it as an Avro schema), so it must be an Avro record.
//! Without the `avro` feature it is given as text ([`JsonSchema::new`], or built from field
//! names and Avro types with [`JsonSchema::record`]); with it, it can be derived from an
//! `apache_avro::AvroSchema` type ([`JsonSchema::derived`]).

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::info::json_string;
use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// Values of `T` as JSON (serde), registered as a JSON schema with an Avro-record definition.
pub struct JsonSchema<T> {
    info: SchemaInfo,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for JsonSchema<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchema")
            .field("info", &self.info)
            .finish()
    }
}

impl<T> Clone for JsonSchema<T> {
    fn clone(&self) -> Self {
        JsonSchema {
            info: self.info.clone(),
            _t: PhantomData,
        }
    }
}

/// The properties Java's `JSONSchema` registers (`SchemaDefinition` defaults).
fn java_properties(info: SchemaInfo) -> SchemaInfo {
    info.with_property("__alwaysAllowNull", "true")
        .with_property("__jsr310ConversionEnabled", "false")
}

impl<T> JsonSchema<T> {
    /// A JSON schema with this Avro-record definition (JSON text, checked to be a JSON object
    /// with `"type": "record"`).
    pub fn new(avro_record_definition: &str) -> Result<Self, SchemaError> {
        let parsed: serde_json::Value = serde_json::from_str(avro_record_definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        if parsed.get("type").and_then(|t| t.as_str()) != Some("record") {
            return Err(SchemaError::InvalidDefinition(
                "a JSON schema's definition must be an Avro record".into(),
            ));
        }
        Ok(JsonSchema {
            info: java_properties(
                SchemaInfo::new(SchemaType::Json, "")
                    .with_definition(avro_record_definition.to_string()),
            ),
            _t: PhantomData,
        })
    }

    /// A JSON schema whose definition is the Avro record `name` with these fields, each a
    /// field name and its Avro type as JSON (for example `("name", r#"["null","string"]"#)`
    /// for an optional string, `("age", r#""int""#)`): the form upstream clients register for
    /// a class of these fields.
    pub fn record(name: &str, fields: &[(&str, &str)]) -> Result<Self, SchemaError> {
        let mut def = String::from(r#"{"type":"record","name":"#);
        json_string(&mut def, name);
        def.push_str(r#","fields":["#);
        for (i, (field, ty)) in fields.iter().enumerate() {
            if i > 0 {
                def.push(',');
            }
            def.push_str(r#"{"name":"#);
            json_string(&mut def, field);
            def.push_str(r#","type":"#);
            def.push_str(ty);
            if ty.trim_start().starts_with(r#"["null""#) {
                def.push_str(r#","default":null"#);
            }
            def.push('}');
        }
        def.push_str("]}");
        Self::new(&def)
    }

    /// The schema info it registers.
    pub fn schema_info(&self) -> &SchemaInfo {
        &self.info
    }
}

#[cfg(feature = "avro")]
impl<T: apache_avro::AvroSchema> JsonSchema<T> {
    /// A JSON schema whose definition is derived from `T`'s Avro schema
    /// (`#[derive(apache_avro::AvroSchema)]`), like Java's reflection-based `JSONSchema.of`.
    pub fn derived() -> Result<Self, SchemaError> {
        let def = serde_json::to_string(&T::get_schema())
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))?;
        Self::new(&def)
    }
}

impl<T> Schema for JsonSchema<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    type Type = T;

    fn info(&self) -> Option<SchemaInfo> {
        Some(self.info.clone())
    }

    fn encode(&self, value: &T) -> Result<Bytes, SchemaError> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| SchemaError::encode_from(SchemaType::Json, e))
    }

    fn decode(&self, payload: &[u8], _: Option<&SchemaInfo>) -> Result<T, SchemaError> {
        serde_json::from_slice(payload).map_err(|e| SchemaError::decode_from(SchemaType::Json, e))
    }
}
