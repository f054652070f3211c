//! The client side of the broker's schema registry: GetSchema and GetOrCreateSchema requests
//! (each within the operation timeout: a broker that never answers them, like pulsar-lite,
//! costs one timeout, never a hang), and [`WriterSchemas`], a consumer's bounded cache of the
//! writer schemas it fetched by version.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;

use super::{SchemaInfo, SchemaVersion};
use crate::core::CoreRef;
use crate::error::{Error, Result, ServerError};
use crate::topic::TopicName;

/// Turns a response's `error_code` / `error_message` into an error.
fn refused(code: Option<i32>, message: Option<String>) -> Result<()> {
    match code {
        Some(c) => Err(Error::Broker {
            code: ServerError::from_code(c),
            message: message.unwrap_or_default(),
        }),
        None => Ok(()),
    }
}

/// GetSchema: the schema of `topic` at `version` (its latest when `None`), with the version
/// the broker names. Upstream brokers answer TopicNotFound when there is none.
pub(crate) async fn get_schema(
    core: &CoreRef,
    topic: &TopicName,
    version: Option<&SchemaVersion>,
) -> Result<(SchemaInfo, SchemaVersion)> {
    let (conn, _) = core.connection_for(topic).await?;
    let rid = conn.new_request_id();
    let cmd = crate::commands::get_schema(topic.as_str(), version.map(|v| &v.0[..]), rid);
    let resp = conn.request(rid, cmd, "get schema").await?;
    let r = resp
        .get_schema_response
        .ok_or_else(|| Error::Protocol("GetSchema answered without GetSchemaResponse".into()))?;
    refused(r.error_code, r.error_message)?;
    let schema = r
        .schema
        .ok_or_else(|| Error::Protocol("GetSchemaResponse without a schema".into()))?;
    let info = SchemaInfo::from_proto(&schema).ok_or_else(|| {
        Error::Protocol(format!(
            "GetSchemaResponse with unknown schema type {}",
            schema.r#type
        ))
    })?;
    let version = r
        .schema_version
        .or_else(|| version.map(|v| v.0.clone()))
        .unwrap_or_default();
    Ok((info, SchemaVersion(version)))
}

/// GetOrCreateSchema: registers `info` on `topic` (or finds it registered), checked for
/// compatibility like a producer's schema; answers its version.
pub(crate) async fn get_or_create_schema(
    core: &CoreRef,
    topic: &TopicName,
    info: &SchemaInfo,
) -> Result<SchemaVersion> {
    let (conn, _) = core.connection_for(topic).await?;
    let rid = conn.new_request_id();
    let cmd = crate::commands::get_or_create_schema(topic.as_str(), info.to_proto(), rid);
    let resp = conn.request(rid, cmd, "get or create schema").await?;
    let r = resp
        .get_or_create_schema_response
        .ok_or_else(|| Error::Protocol("GetOrCreateSchema answered without its response".into()))?;
    refused(r.error_code, r.error_message)?;
    Ok(SchemaVersion(r.schema_version.unwrap_or_default()))
}

/// How many (topic, version) entries a consumer keeps; past it the cache starts over.
pub(crate) const WRITER_SCHEMA_CACHE: usize = 256;

/// The writer-schema definitions a typed consumer keeps take at most `memory_limit / this`
/// bytes (each counted with [`WRITER_ENTRY_OVERHEAD`]); past it the cache starts over. So 256
/// versions of 5 MiB definitions (1.3 GB) cannot pile up in one consumer.
pub(crate) const WRITER_SCHEMA_BYTES_DIVISOR: usize = 8;

/// What a cached entry is counted besides its definition (the key, the map slot).
const WRITER_ENTRY_OVERHEAD: usize = 256;

/// How long a version the broker could not give stays unknown before it is asked for again.
pub(crate) const UNKNOWN_VERSION_RETRY: Duration = Duration::from_secs(60);

/// After this many GetSchema timeouts in a row on a topic, the consumer stops asking for that
/// topic's unknown versions for [`UNKNOWN_VERSION_RETRY`]: a broker that never answers
/// GetSchema then costs two operation timeouts a minute, not one per version.
pub(crate) const TIMEOUTS_BEFORE_GIVING_UP: u32 = 2;

/// A writer schema, or when fetching it failed (and how).
#[derive(Debug, Clone)]
enum Entry {
    Known(Arc<SchemaInfo>),
    /// The broker said it has no such schema (upstream answers TopicNotFound).
    Missing(Instant),
    /// The lookup failed otherwise (a timeout, a lost connection, another refusal).
    Failed(Instant, Error),
}

/// What a consumer knows of a message's writer schema ([`WriterSchemas::get`]).
#[derive(Debug, Clone)]
pub(crate) enum Writer {
    /// Fetched (or cached).
    Known(Arc<SchemaInfo>),
    /// The broker has no schema of that version: the message decodes with the consumer's own
    /// schema (upstream `MultiVersionGenericAvroReader.loadReader` falls back to the reader's
    /// schema when the provider finds none).
    Missing,
    /// The lookup failed or was given up: the message is an error item
    /// ([`SchemaError::WriterSchemaUnavailable`](super::SchemaError)), like upstream's
    /// `AutoConsumeSchema.fetchSchemaIfNeeded` and `AbstractMultiVersionReader.read`, which
    /// throw when the schema lookup fails.
    Unavailable(Error),
}

/// A consumer's writer schemas by topic and version. A version the broker could not give
/// (an error or a timeout) is remembered for [`UNKNOWN_VERSION_RETRY`], so a broker without a
/// registry costs one operation timeout per version and minute, not one per message, and a
/// transient failure is retried later; after [`TIMEOUTS_BEFORE_GIVING_UP`] timeouts in a row
/// on a topic, no version of it is asked for during that time (each message naming one is an
/// error item at once). Each fetch is one GetSchema (after one lookup of the topic's broker).
#[derive(Debug, Default)]
pub(crate) struct WriterSchemas {
    known: HashMap<(TopicName, Bytes), Entry>,
    /// Per topic: GetSchema timeouts in a row, and since when it has given up asking (with
    /// the last timeout, which the messages skipped meanwhile report).
    silent: HashMap<TopicName, (u32, Option<(Instant, Error)>)>,
    /// What `known` is counted: definitions and keys plus [`WRITER_ENTRY_OVERHEAD`] each.
    bytes: usize,
}

impl WriterSchemas {
    /// The writer schema of `version` on `topic`: cached, else fetched with GetSchema.
    pub(crate) async fn get(
        &mut self,
        core: &CoreRef,
        topic: &TopicName,
        version: &Bytes,
    ) -> Writer {
        let key = (topic.clone(), version.clone());
        match self.known.get(&key) {
            Some(Entry::Known(info)) => return Writer::Known(info.clone()),
            Some(Entry::Missing(at)) if at.elapsed() < UNKNOWN_VERSION_RETRY => {
                return Writer::Missing
            }
            Some(Entry::Failed(at, e)) if at.elapsed() < UNKNOWN_VERSION_RETRY => {
                return Writer::Unavailable(e.clone())
            }
            _ => {}
        }
        if let Some((_, Some((since, e)))) = self.silent.get(topic) {
            if since.elapsed() < UNKNOWN_VERSION_RETRY {
                return Writer::Unavailable(e.clone());
            }
            self.silent.remove(topic);
        }
        let fetched = get_schema(core, topic, Some(&SchemaVersion(version.clone()))).await;
        if self.silent.len() >= WRITER_SCHEMA_CACHE {
            self.silent.clear();
        }
        match &fetched {
            Err(e @ Error::Timeout { .. }) => {
                let (n, since) = self.silent.entry(topic.clone()).or_default();
                *n += 1;
                if *n >= TIMEOUTS_BEFORE_GIVING_UP {
                    tracing::warn!(%topic, timeouts = *n,
                        "the broker does not answer GetSchema; not asking again for a while");
                    *since = Some((Instant::now(), e.clone()));
                }
            }
            _ => {
                self.silent.remove(topic);
            }
        }
        let (entry, found) = match fetched {
            Ok((info, _)) => {
                let info = Arc::new(info);
                (Entry::Known(info.clone()), Writer::Known(info))
            }
            Err(Error::Broker {
                code: ServerError::TopicNotFound,
                ..
            }) => {
                tracing::debug!(%topic, "the broker has no writer schema of this version; decoding with the local one");
                (Entry::Missing(Instant::now()), Writer::Missing)
            }
            Err(e) => {
                tracing::warn!(%topic, error = %e,
                    "could not fetch a message's writer schema; the message is an error item");
                (
                    Entry::Failed(Instant::now(), e.clone()),
                    Writer::Unavailable(e),
                )
            }
        };
        self.insert(key, entry, core.memory_limit / WRITER_SCHEMA_BYTES_DIVISOR);
        found
    }

    /// Keeps `entry`, within [`WRITER_SCHEMA_CACHE`] entries and `bound` bytes (past either
    /// the cache starts over; an entry larger than `bound` alone is still kept).
    fn insert(&mut self, key: (TopicName, Bytes), entry: Entry, bound: usize) {
        let size = entry_size(&key, &entry);
        if let Some(old) = self.known.remove(&key) {
            // Replaced (a version asked again after its retry time): not counted twice.
            self.bytes = self.bytes.saturating_sub(entry_size(&key, &old));
        }
        if self.known.len() >= WRITER_SCHEMA_CACHE || self.bytes.saturating_add(size) > bound {
            self.known.clear();
            self.bytes = 0;
        }
        self.known.insert(key, entry);
        self.bytes = self.bytes.saturating_add(size);
    }
}

fn entry_size(key: &(TopicName, Bytes), entry: &Entry) -> usize {
    WRITER_ENTRY_OVERHEAD
        + key.1.len()
        + match entry {
            Entry::Known(info) => info.definition.len(),
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SchemaType;

    /// Issue #31 §3: a consumer's writer schemas are bounded in bytes (a share of the client
    /// memory limit), not only in versions: 256 versions of 5 MiB definitions made 1.3 GB.
    #[test]
    fn writer_schemas_are_bounded_in_bytes() {
        let mut w = WriterSchemas::default();
        let topic = TopicName::new("t").unwrap();
        let bound = 64 * 1024 * 1024 / WRITER_SCHEMA_BYTES_DIVISOR;
        let def = Bytes::from(vec![b'x'; 1024 * 1024]);
        for v in 0..100u32 {
            let info = SchemaInfo::new(SchemaType::Avro, "").with_definition(def.clone());
            let key = (topic.clone(), Bytes::from(v.to_be_bytes().to_vec()));
            w.insert(key, Entry::Known(Arc::new(info)), bound);
            let held: usize = w
                .known
                .values()
                .map(|e| match e {
                    Entry::Known(i) => i.definition.len(),
                    _ => 0,
                })
                .sum();
            assert!(held <= bound, "{held} bytes of definitions past {bound}");
            assert!(w.bytes <= bound + WRITER_ENTRY_OVERHEAD + 4 + def.len());
        }
        assert!(!w.known.is_empty());
        // One definition larger than the bound alone is kept (parsed once, not per message).
        let huge = SchemaInfo::new(SchemaType::Avro, "").with_definition(vec![b'y'; bound + 1]);
        w.insert(
            (topic, Bytes::from_static(b"h")),
            Entry::Known(Arc::new(huge)),
            bound,
        );
        assert_eq!(w.known.len(), 1);
    }
}
