//! The mock broker's schema registry: versions per topic (partitions share their topic's, like
//! upstream, which keys schemas by the partitioned topic's name), a compatibility check, and
//! the GetSchema / GetOrCreateSchema handlers.
//!
//! Follows upstream `SchemaRegistryServiceImpl`: a schema identical (type and definition) to a
//! registered version gets that version; the first schema is registered without a check; a
//! new one is checked against the latest under the strategy (the broker's default is FULL),
//! and a type change is refused unless the strategy is ALWAYS_COMPATIBLE. Versions are 8-byte
//! big-endian counters from 0 (`LongSchemaVersion`).
//!
//! The Avro check for JSON/AVRO/PROTOBUF definitions is an approximation of Avro's schema
//! resolution on records: a field added must have a default for the new schema to read old
//! data (BACKWARD), a field removed must have had one for the old schema to read new data
//! (FORWARD), and a field present in both must keep its type exactly (no type promotion).

use std::collections::HashMap;

use bytes::Bytes;

use super::reply::Step;
use super::wire::{self, base_command::Type};
use crate::error::ServerError;

/// How the mock broker checks a new schema against a topic's latest one (upstream
/// `SchemaCompatibilityStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MockSchemaCompatibility {
    /// Readers of either schema read data of the other (upstream's broker default).
    #[default]
    Full,
    /// The new schema reads data written with the latest.
    Backward,
    /// The latest schema reads data written with the new one.
    Forward,
    /// Anything goes, type changes included (upstream `ALWAYS_COMPATIBLE`, the admin CLI's
    /// `NONE`).
    AlwaysCompatible,
    /// No new version is accepted once a topic has a schema.
    AlwaysIncompatible,
}

/// The versions registered per topic.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    topics: HashMap<String, Vec<wire::Schema>>,
    pub(crate) strategy: MockSchemaCompatibility,
    /// GetSchema and GetOrCreateSchema get no answer (like pulsar-lite).
    pub(crate) unanswered: bool,
}

/// The topic a partition's schemas are registered under.
fn base(topic: &str) -> &str {
    match topic.rfind("-partition-") {
        Some(i) if topic[i + 11..].parse::<u32>().is_ok() => &topic[..i],
        _ => topic,
    }
}

pub(crate) fn version_bytes(v: usize) -> Bytes {
    Bytes::copy_from_slice(&(v as i64).to_be_bytes())
}

impl Registry {
    /// The versions of `topic`, oldest first.
    pub(crate) fn versions(&self, topic: &str) -> &[wire::Schema] {
        self.topics.get(base(topic)).map_or(&[], Vec::as_slice)
    }

    /// Registers `schema` on `topic` (or finds it): its version, or the refusal's message.
    pub(crate) fn get_or_create(
        &mut self,
        topic: &str,
        schema: &wire::Schema,
    ) -> Result<usize, String> {
        let versions = self.topics.entry(base(topic).to_owned()).or_default();
        if let Some(i) = versions
            .iter()
            .position(|s| s.r#type == schema.r#type && s.schema_data == schema.schema_data)
        {
            return Ok(i);
        }
        if let Some(latest) = versions.last() {
            check(self.strategy, latest, schema)?;
        }
        versions.push(schema.clone());
        Ok(versions.len() - 1)
    }

    /// Whether a consumer's `schema` may read `topic`; `idle` tells whether the topic (the
    /// partition) has no producer, no consumer other than AUTO_CONSUME ones and no entry.
    ///
    /// Upstream `AbstractTopic.addSchemaIfIdleOrCheckCompatible`: only an idle topic without a
    /// schema gets the consumer's registered; on a busy topic without one it is refused ("Failed
    /// to add schema to an active topic with empty(BYTES) schema"); on a topic with one it is
    /// checked (`SchemaRegistryServiceImpl.checkConsumerCompatibility`: BACKWARD against the
    /// latest under BACKWARD/FORWARD/FULL) and never becomes a version. AUTO_CONSUME reads
    /// anything.
    pub(crate) fn check_consumer(
        &mut self,
        topic: &str,
        schema: &wire::Schema,
        idle: bool,
    ) -> Result<(), String> {
        if schema.r#type == wire::schema::Type::AutoConsume as i32 {
            return Ok(());
        }
        let Some(latest) = self.versions(topic).last() else {
            if idle {
                return self.get_or_create(topic, schema).map(|_| ());
            }
            return Err(format!(
                "Failed to add schema to an active topic with empty(BYTES) schema: new schema \
                 type {}",
                type_name(schema.r#type)
            ));
        };
        use MockSchemaCompatibility as S;
        match self.strategy {
            S::AlwaysCompatible => Ok(()),
            S::AlwaysIncompatible
                if latest.r#type == schema.r#type && latest.schema_data == schema.schema_data =>
            {
                Ok(())
            }
            S::AlwaysIncompatible => check(S::AlwaysIncompatible, latest, schema),
            _ => check(S::Backward, latest, schema),
        }
    }
}

/// Java's name of a type (`SchemaType.toString()`), as upstream's refusals spell it.
fn type_name(t: i32) -> String {
    crate::schema::SchemaType::from_wire(t).map_or_else(|| t.to_string(), |t| t.java_name().into())
}

/// Checks `new` against `latest` under `strategy` (upstream `checkCompatibilityWithLatest`).
fn check(
    strategy: MockSchemaCompatibility,
    latest: &wire::Schema,
    new: &wire::Schema,
) -> Result<(), String> {
    use MockSchemaCompatibility as S;
    match strategy {
        S::AlwaysCompatible => return Ok(()),
        S::AlwaysIncompatible => {
            return Err("Incompatible schema: the strategy is ALWAYS_INCOMPATIBLE".into())
        }
        _ => {}
    }
    if latest.r#type != new.r#type {
        return Err(format!(
            "Incompatible schema: exists schema type {}, new schema type {}",
            type_name(latest.r#type),
            type_name(new.r#type)
        ));
    }
    let is_struct = [
        wire::schema::Type::Json,
        wire::schema::Type::Avro,
        wire::schema::Type::Protobuf,
    ]
    .iter()
    .any(|t| *t as i32 == new.r#type);
    if !is_struct {
        // Upstream's default check for the other types: same type is compatible.
        return Ok(());
    }
    let old: serde_json::Value = serde_json::from_slice(&latest.schema_data)
        .map_err(|e| format!("Incompatible schema: the registered definition is invalid: {e}"))?;
    let new: serde_json::Value = serde_json::from_slice(&new.schema_data)
        .map_err(|e| format!("Incompatible schema: invalid definition: {e}"))?;
    let backward = || reads(&new, &old);
    let forward = || reads(&old, &new);
    let ok = match strategy {
        S::Backward => backward(),
        S::Forward => forward(),
        _ => backward().and_then(|_| forward()),
    };
    ok.map_err(|why| format!("Incompatible schema: {why} (strategy {strategy:?})"))
}

/// The fields of a record definition: name → (type, has default).
fn fields(def: &serde_json::Value) -> Option<HashMap<&str, (&serde_json::Value, bool)>> {
    if def.get("type")?.as_str()? != "record" {
        return None;
    }
    Some(
        def.get("fields")?
            .as_array()?
            .iter()
            .filter_map(|f| {
                Some((
                    f.get("name")?.as_str()?,
                    (f.get("type")?, f.get("default").is_some()),
                ))
            })
            .collect(),
    )
}

/// Whether a reader with definition `reader` can read data written with `writer`.
fn reads(reader: &serde_json::Value, writer: &serde_json::Value) -> Result<(), String> {
    let (Some(r), Some(w)) = (fields(reader), fields(writer)) else {
        return if reader == writer {
            Ok(())
        } else {
            Err("the definitions differ".into())
        };
    };
    for (name, (ty, has_default)) in &r {
        match w.get(name) {
            None if !has_default => {
                return Err(format!("field `{name}` has no default and is missing"))
            }
            Some((wty, _)) if wty != ty => {
                return Err(format!("field `{name}` changed type"));
            }
            _ => {}
        }
    }
    Ok(())
}

fn get_schema_response(request_id: u64) -> wire::CommandGetSchemaResponse {
    wire::CommandGetSchemaResponse {
        request_id,
        ..Default::default()
    }
}

/// GET_SCHEMA: the version asked for, or the latest (upstream answers TopicNotFound when
/// the topic has no schema, and when the version does not exist).
pub(crate) fn get_schema(registry: &Registry, cmd: &wire::CommandGetSchema) -> Step {
    if registry.unanswered {
        return Step::Ignore;
    }
    let versions = registry.versions(&super::namespace::canonical_topic(&cmd.topic));
    let wanted = match cmd.schema_version.as_ref().filter(|v| !v.is_empty()) {
        None => versions.len().checked_sub(1),
        Some(v) => <[u8; 8]>::try_from(&v[..])
            .ok()
            .map(i64::from_be_bytes)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n < versions.len()),
    };
    let mut resp = get_schema_response(cmd.request_id);
    match wanted {
        Some(i) => {
            resp.schema = Some(versions[i].clone());
            resp.schema_version = Some(version_bytes(i));
        }
        None => {
            resp.error_code = Some(ServerError::TopicNotFound.code());
            resp.error_message = Some("Topic not found or no-schema".into());
        }
    }
    Step::Reply(wire::BaseCommand {
        r#type: Type::GetSchemaResponse as i32,
        get_schema_response: Some(resp),
        ..Default::default()
    })
}

/// GET_OR_CREATE_SCHEMA: the version of the schema, registered if new and compatible.
pub(crate) fn get_or_create_schema(
    registry: &mut Registry,
    cmd: &wire::CommandGetOrCreateSchema,
) -> Step {
    if registry.unanswered {
        return Step::Ignore;
    }
    let topic = super::namespace::canonical_topic(&cmd.topic);
    let mut resp = wire::CommandGetOrCreateSchemaResponse {
        request_id: cmd.request_id,
        ..Default::default()
    };
    match registry.get_or_create(&topic, &cmd.schema) {
        Ok(v) => resp.schema_version = Some(version_bytes(v)),
        Err(message) => {
            resp.error_code = Some(ServerError::IncompatibleSchema.code());
            resp.error_message = Some(message);
        }
    }
    Step::Reply(wire::BaseCommand {
        r#type: Type::GetOrCreateSchemaResponse as i32,
        get_or_create_schema_response: Some(resp),
        ..Default::default()
    })
}
