//! [`AvroSchema`] (serde types) and [`GenericAvroSchema`] (`apache_avro::types::Value`): Avro
//! binary datums without a container header, like upstream's `AvroSchema` and the Python
//! client's `fastavro.schemaless_writer`. A payload is decoded with the schema it was written
//! with when the consumer knows that version (Avro schema resolution), else with the reader's.

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use apache_avro::types::Value;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::avro_guard::{Plan, RECURSES};
use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// How many bytes the cache of parsed writer schemas of one [`AvroSchema`] or
/// [`GenericAvroSchema`] decoding outside a consumer keeps, counted as each definition's length
/// plus [`ENTRY_OVERHEAD`] (a parsed schema costs a few times its definition); a definition
/// larger than this is parsed but not kept. The bound is in bytes, not in entries, so a
/// working set of many small versions stays parsed while a flood of versions stays bounded.
/// Within a consumer or reader, writer schemas are parsed through its client's cache instead
/// ([`ClientWriterCache`]), bounded by a share of the client's memory limit.
const WRITER_CACHE_BYTES: usize = 64 << 20;

/// The client's cache of parsed writer schemas holds at most `memory_limit / this`.
pub(crate) const CLIENT_WRITER_CACHE_DIVISOR: usize = 8;

/// What each cached entry is charged on top of its definition: the map slot, the parsed
/// schema's fixed part and its walk plan, so a flood of tiny definitions is bounded too
/// (at most `WRITER_CACHE_BYTES / ENTRY_OVERHEAD` = 65,536 entries).
const ENTRY_OVERHEAD: usize = 1 << 10;

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
/// parse is not parsed again per message), bounded by `budget` bytes (see
/// [`WRITER_CACHE_BYTES`]); past the bound the oldest entries go first, one by one, so a
/// working set that fits is never parsed again (upstream's `AutoConsumeSchema` keeps one
/// decoder per version, unbounded; this keeps the same once-per-version work within a bound).
struct WriterCache {
    entries: HashMap<Bytes, Result<Arc<Parsed>, SchemaError>>,
    /// Keys in insertion order, oldest first: the eviction order.
    order: VecDeque<Bytes>,
    /// What the entries are charged: definitions plus `ENTRY_OVERHEAD` each.
    bytes: usize,
    budget: usize,
}

impl Default for WriterCache {
    fn default() -> Self {
        WriterCache::with_budget(WRITER_CACHE_BYTES)
    }
}

impl WriterCache {
    fn with_budget(budget: usize) -> WriterCache {
        WriterCache {
            entries: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            budget,
        }
    }

    fn charge(definition: &Bytes) -> usize {
        definition.len().saturating_add(ENTRY_OVERHEAD)
    }

    fn get(cache: &Mutex<WriterCache>, definition: &Bytes) -> Result<Arc<Parsed>, SchemaError> {
        if let Some(hit) = lock(cache).entries.get(definition) {
            return hit.clone();
        }
        // Parse outside the lock: a large definition must not stall other consumers.
        let parsed = std::str::from_utf8(definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))
            .and_then(Parsed::new)
            .map(Arc::new);
        lock(cache).insert(definition, &parsed);
        parsed
    }

    fn insert(&mut self, definition: &Bytes, parsed: &Result<Arc<Parsed>, SchemaError>) {
        let charge = WriterCache::charge(definition);
        // Another consumer may have parsed the same definition meanwhile; keep one entry.
        if charge > self.budget || self.entries.contains_key(definition) {
            return;
        }
        while self.bytes + charge > self.budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if self.entries.remove(&oldest).is_some() {
                self.bytes -= WriterCache::charge(&oldest);
            }
        }
        self.entries.insert(definition.clone(), parsed.clone());
        self.order.push_back(definition.clone());
        self.bytes += charge;
    }
}

fn lock(m: &Mutex<WriterCache>) -> std::sync::MutexGuard<'_, WriterCache> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parsed writer schemas of one client: every typed consumer and reader of the client
/// (AUTO_CONSUME, Avro and generic Avro) parses a message's writer schema once through it,
/// within `memory_limit / CLIENT_WRITER_CACHE_DIVISOR` bytes (see [`WriterCache`]), instead
/// of a cache per process (64 MiB, whatever the client's limit) or per schema object.
pub(crate) struct ClientWriterCache(Arc<Mutex<WriterCache>>);

impl std::fmt::Debug for ClientWriterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = lock(&self.0);
        f.debug_struct("ClientWriterCache")
            .field("entries", &c.entries.len())
            .field("bytes", &c.bytes)
            .field("budget", &c.budget)
            .finish()
    }
}

thread_local! {
    /// The cache of the client whose consumer decodes on this thread (see
    /// [`ClientWriterCache::scope`]).
    static SCOPED: std::cell::RefCell<Option<Arc<Mutex<WriterCache>>>> =
        const { std::cell::RefCell::new(None) };
}

impl ClientWriterCache {
    /// The cache of `core`'s client, made on first use.
    pub(crate) fn of(core: &crate::core::ClientCore) -> Arc<ClientWriterCache> {
        let make = || {
            let budget = (core.memory_limit / CLIENT_WRITER_CACHE_DIVISOR).max(1);
            Arc::new(ClientWriterCache(Arc::new(Mutex::new(
                WriterCache::with_budget(budget),
            ))))
        };
        let any = core.schema_cache.get_or_init(|| make()).clone();
        // Only this type is ever stored there.
        any.downcast::<ClientWriterCache>()
            .unwrap_or_else(|_| make())
    }

    /// Runs `f` (a schema's decode) with this cache as the one writer schemas are parsed
    /// through on this thread.
    pub(crate) fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Mutex<WriterCache>>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                SCOPED.with(|s| *s.borrow_mut() = previous);
            }
        }
        let previous = SCOPED.with(|s| s.replace(Some(self.0.clone())));
        let _restore = Restore(previous);
        f()
    }
}

/// Parses `definition` through the client's cache while one of its consumers decodes, else
/// through `own` (a schema object's), else without caching.
fn parse_writer(
    own: Option<&Mutex<WriterCache>>,
    definition: &Bytes,
) -> Result<Arc<Parsed>, SchemaError> {
    if let Some(cache) = SCOPED.with(|s| s.borrow().clone()) {
        return WriterCache::get(&cache, definition);
    }
    match own {
        Some(cache) => WriterCache::get(cache, definition),
        None => std::str::from_utf8(definition)
            .map_err(|e| SchemaError::InvalidDefinition(e.to_string()))
            .and_then(Parsed::new)
            .map(Arc::new),
    }
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
        match parse_writer(Some(&self.writers), &w.definition) {
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

/// Decodes an Avro datum with the writer's definition only (AUTO_CONSUME). Within a consumer
/// the writer schema is parsed once per definition, in its client's cache
/// ([`ClientWriterCache`]; upstream's `AutoConsumeSchema` keeps one decoder per schema
/// version); a decode called directly parses it each time.
pub(crate) fn decode_with_writer(
    payload: &[u8],
    writer: &SchemaInfo,
) -> Result<Value, SchemaError> {
    let parsed = parse_writer(None, &writer.definition).map_err(refused_writer)?;
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
        // Byte bound: the entries stay within the cache's bytes (definitions plus a per-entry
        // allowance), whatever their count.
        for i in 0..OLD_ENTRY_BOUND {
            let d = DEF.replace("\"a\"", &format!("\"a{i}\""));
            WriterCache::get(&cache, &Bytes::from(d)).unwrap();
        }
        let c = lock(&cache);
        assert!(
            c.entries.len() <= OLD_ENTRY_BOUND + 2,
            "{}",
            c.entries.len()
        );
        assert!(c.bytes <= WRITER_CACHE_BYTES);
    }

    /// The entry bound the cache had before it was bounded in bytes (issue #31).
    const OLD_ENTRY_BOUND: usize = 64;

    /// A hostile flood of writer versions (a producer may register as many as it likes) stays
    /// within the cache's byte budget at every step, evicts the oldest first, and keeps what
    /// it was charged equal to what it holds.
    #[test]
    fn a_flood_of_writer_versions_stays_within_the_byte_bound() {
        let budget = 16 * (ENTRY_OVERHEAD + 1024);
        let cache = Mutex::new(WriterCache::with_budget(budget));
        let pad = "x".repeat(900);
        let version =
            |i: usize| Bytes::from(DEF.replace("\"a\"", &format!("\"a{i}\",\"doc\":\"{pad}\"")));
        for i in 0..1_000 {
            WriterCache::get(&cache, &version(i)).unwrap();
            let c = lock(&cache);
            assert!(
                c.bytes <= budget,
                "{} bytes held past a budget of {budget}",
                c.bytes
            );
            let held: usize = c.entries.keys().map(WriterCache::charge).sum();
            assert_eq!(held, c.bytes, "charged bytes match the entries held");
            assert_eq!(c.order.len(), c.entries.len());
        }
        let c = lock(&cache);
        assert!(
            c.entries.len() >= 8,
            "the budget is used: {}",
            c.entries.len()
        );
        assert!(c.entries.contains_key(&version(999)), "the newest is kept");
        assert!(
            !c.entries.contains_key(&version(0)),
            "the oldest went first"
        );
        drop(c);
        // A definition larger than the whole budget is parsed but not kept.
        let huge = Bytes::from(DEF.replace(
            "\"a\"",
            &format!("\"a\",\"doc\":\"{}\"", "y".repeat(budget)),
        ));
        let a = WriterCache::get(&cache, &huge).unwrap();
        let b = WriterCache::get(&cache, &huge).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "not cached");
        assert!(lock(&cache).bytes <= budget);
    }

    /// Issue #31 §3: AUTO_CONSUME's writer schemas are parsed through the decoding client's
    /// cache, bounded by a share of that client's memory limit (before: one 64 MiB cache per
    /// process, whatever the limits); a decode outside a consumer keeps nothing.
    #[test]
    fn auto_consume_parses_through_the_clients_cache_bounded_by_its_limit() {
        let client = crate::Client::builder()
            .service_url("pulsar://127.0.0.1:1")
            .memory_limit(8 * 1024 * 1024)
            .build()
            .unwrap();
        let cache = ClientWriterCache::of(client.consumer("t").core());
        assert_eq!(
            lock(&cache.0).budget,
            8 * 1024 * 1024 / CLIENT_WRITER_CACHE_DIVISOR
        );
        assert!(Arc::ptr_eq(
            &cache,
            &ClientWriterCache::of(client.consumer("t").core())
        ));
        let writer = SchemaInfo::new(SchemaType::Avro, "").with_definition(DEF);
        let payload = apache_avro::to_avro_datum(
            &apache_avro::Schema::parse_str(DEF).unwrap(),
            Value::Record(vec![("a".into(), Value::Int(7))]),
        )
        .unwrap();
        // Outside a consumer: decoded, nothing kept.
        decode_with_writer(&payload, &writer).unwrap();
        assert!(lock(&cache.0).entries.is_empty());
        // Within: kept once, in this client's cache.
        for _ in 0..3 {
            cache
                .scope(|| decode_with_writer(&payload, &writer))
                .unwrap();
        }
        assert_eq!(lock(&cache.0).entries.len(), 1);
        // A flood of versions stays within the client's share.
        for i in 0..2_000 {
            let d = DEF.replace("\"a\"", &format!("\"a\",\"doc\":\"{i:0>2000}\""));
            let w = SchemaInfo::new(SchemaType::Avro, "").with_definition(d);
            let _ = cache.scope(|| decode_with_writer(&payload, &w));
        }
        let c = lock(&cache.0);
        assert!(c.bytes <= c.budget, "{} past {}", c.bytes, c.budget);
    }

    /// Review (issue #31 section 4, "parse once per version"): AUTO_CONSUME's cache is one per
    /// process and starts over when full, so 65 writer versions in rotation (65 topics with
    /// one schema each, one consumer per topic) are parsed again on every message, a 16 MiB
    /// definition ~37 ms each. Upstream's `AutoConsumeSchema` keeps a decoder per version
    /// per consumer, unbounded.
    #[test]
    fn a_working_set_just_over_the_cache_is_parsed_once_per_version() {
        let cache = Mutex::new(WriterCache::default());
        let defs: Vec<Bytes> = (0..=OLD_ENTRY_BOUND)
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
