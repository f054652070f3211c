//! Limits on Avro decoding, enforced before `apache-avro` sees a payload.
//!
//! `apache-avro` trusts the input: a writer schema that recurses without consuming input
//! (`record A { a: A }`) overflows the stack, a block count of 100 M items in a 5-byte payload
//! reserves gigabytes up front, a string length is allocated before it is read. Its own
//! allocation bound is process-global and set once, so it cannot be ours. Instead a writer
//! schema is compiled once per version into a [`Plan`] (refused if it can recurse without
//! consuming input), and each payload is walked with the plan before it is decoded. The walk
//! enforces, per payload:
//!
//! - nesting depth at most [`MAX_DEPTH`] (records, unions, arrays and maps);
//! - a length (string, bytes) or a block count never larger than the bytes left (an item whose
//!   type can take zero bytes, such as `null` or an empty record, is bounded by the allocation
//!   budget instead);
//! - an allocation budget of [`ALLOC_BASE`] + [`ALLOC_PER_BYTE`] × the payload's length: the
//!   walk charges what `apache-avro` will allocate for each value it decodes (a `Value`, a
//!   boxed union branch, each record field's cloned name, an enum's cloned symbol, string and
//!   bytes contents).
//!
//! A payload that breaks a limit is a [`SchemaError::Decode`] on that message, never a crash.

use std::collections::HashMap;

use apache_avro::schema::{Name, Namespace, ResolvedSchema};
use apache_avro::Schema;

use super::{SchemaError, SchemaType};

/// How deeply records, unions, arrays and maps may nest in one payload. `apache-avro` decodes,
/// resolves and drops recursively, about three stack frames per level of a recursive record;
/// in a debug build each frame is large: a linked list (`record N { next: [null, N] }`, two
/// levels per element) overflowed a 2 MiB thread stack at 32 elements (64 levels) and passed
/// at 20, measured. 32 levels keep a decode within a quarter of such a stack.
pub(crate) const MAX_DEPTH: usize = 32;

/// The allocation budget every payload gets, whatever its size.
pub(crate) const ALLOC_BASE: usize = 1 << 20;

/// The allocation budget per payload byte (an array of booleans costs one `Value`, ~48 B,
/// per byte; a record of optional fields about three times that).
pub(crate) const ALLOC_PER_BYTE: usize = 256;

/// What a payload may cost when decoded: [`ALLOC_BASE`] + [`ALLOC_PER_BYTE`] × its length.
pub(crate) fn alloc_budget(payload_len: usize) -> usize {
    ALLOC_BASE.saturating_add(ALLOC_PER_BYTE.saturating_mul(payload_len))
}

const VALUE: usize = std::mem::size_of::<apache_avro::types::Value>();
/// A record field as `apache-avro` stores it: `(String, Value)`, plus the name's bytes.
const FIELD: usize = std::mem::size_of::<(String, apache_avro::types::Value)>();
/// A map entry: its key `String` and `Value`, plus a hash table's control byte and slack.
const ENTRY: usize = FIELD + 8;

/// One schema node, with named types resolved to indices.
#[derive(Debug)]
enum Node {
    /// `null`: no bytes.
    Null,
    /// `boolean`: one byte.
    Bool,
    /// `int`, `long` and their logical types: a zig-zag varint.
    Varint,
    /// `float`, `double`, `fixed`, `duration`: this many bytes.
    Fixed(usize),
    /// `string`, `bytes`, `uuid`, decimals on bytes: a length, then that many bytes.
    Len,
    /// `enum`: a varint index; the decoded value clones the symbol (its longest is kept).
    Enum {
        symbols: usize,
        longest: usize,
    },
    Union(Vec<usize>),
    Array(usize),
    Map(usize),
    /// A record: each field's name length and node.
    Record(Vec<(usize, usize)>),
    /// A named type being compiled (replaced before compile returns).
    Pending,
}

/// A writer schema compiled for walking payloads; see the module docs.
#[derive(Debug)]
pub(crate) struct Plan {
    nodes: Vec<Node>,
    /// The fewest bytes a value of each node can take (0: `null`, empty records ...).
    min_size: Vec<usize>,
    root: usize,
}

/// How a refused recursive schema's error says so.
pub(crate) const RECURSES: &str = "recurses without consuming input";

fn invalid(reason: impl Into<String>) -> SchemaError {
    SchemaError::InvalidDefinition(reason.into())
}

fn refuse(reason: impl Into<String>) -> SchemaError {
    SchemaError::decode(SchemaType::Avro, reason)
}

/// Whether `name` is an Avro (full) name: `[A-Za-z_][A-Za-z0-9_]*`, dot-separated.
fn is_avro_name(name: &str) -> bool {
    name.split('.').all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Refuses a definition with a `name` that is not an Avro name, before `apache-avro` parses
/// it (0.20 unwraps that error, a panic). Only schema positions are walked (a named type's or
/// a field's `name`, then `type`, `items`, `values`, `fields` and union branches): a default
/// value or a custom property is data, and `{"name": "John Doe"}` there is legit (Java's
/// `Schema.Parser` validates names only where a schema names a type or a field).
/// Iterative: the JSON is as deep as serde_json allows.
pub(crate) fn check_names(json: &serde_json::Value) -> Result<(), SchemaError> {
    let mut stack = vec![json];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(n)) = m.get("name") {
                    if !is_avro_name(n) {
                        return Err(invalid(format!("{n:?} is not a valid Avro name")));
                    }
                }
                for key in ["type", "items", "values"] {
                    stack.extend(m.get(key));
                }
                if let Some(serde_json::Value::Array(fields)) = m.get("fields") {
                    stack.extend(fields);
                }
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    Ok(())
}

struct Compiler<'s> {
    names: &'s HashMap<Name, &'s Schema>,
    named: HashMap<Name, usize>,
    nodes: Vec<Node>,
}

impl<'s> Compiler<'s> {
    fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// A named type: compiled once, registered before its children so recursion resolves.
    fn named(
        &mut self,
        fqn: Name,
        compile: impl FnOnce(&mut Self, &Namespace) -> Result<Node, SchemaError>,
    ) -> Result<usize, SchemaError> {
        if let Some(&i) = self.named.get(&fqn) {
            return Ok(i);
        }
        let i = self.push(Node::Pending);
        self.named.insert(fqn.clone(), i);
        self.nodes[i] = compile(self, &fqn.namespace)?;
        Ok(i)
    }

    fn compile(&mut self, s: &'s Schema, ns: &Namespace) -> Result<usize, SchemaError> {
        use Schema as S;
        let node = match s {
            S::Null => Node::Null,
            S::Boolean => Node::Bool,
            S::Int
            | S::Long
            | S::Date
            | S::TimeMillis
            | S::TimeMicros
            | S::TimestampMillis
            | S::TimestampMicros
            | S::TimestampNanos
            | S::LocalTimestampMillis
            | S::LocalTimestampMicros
            | S::LocalTimestampNanos => Node::Varint,
            S::Float => Node::Fixed(4),
            S::Double => Node::Fixed(8),
            S::Duration => Node::Fixed(12),
            S::Bytes | S::String | S::Uuid | S::BigDecimal => Node::Len,
            S::Decimal(d) => return self.compile(&d.inner, ns),
            S::Fixed(f) => {
                let size = f.size;
                return self.named(f.name.fully_qualified_name(ns), |_, _| {
                    Ok(Node::Fixed(size))
                });
            }
            S::Enum(e) => {
                let (symbols, longest) = (
                    e.symbols.len(),
                    e.symbols.iter().map(String::len).max().unwrap_or(0),
                );
                return self.named(e.name.fully_qualified_name(ns), |_, _| {
                    Ok(Node::Enum { symbols, longest })
                });
            }
            S::Record(r) => {
                return self.named(r.name.fully_qualified_name(ns), |c, inner_ns| {
                    let mut fields = Vec::with_capacity(r.fields.len());
                    for f in &r.fields {
                        fields.push((f.name.len(), c.compile(&f.schema, inner_ns)?));
                    }
                    Ok(Node::Record(fields))
                });
            }
            S::Ref { name } => {
                let fqn = name.fully_qualified_name(ns);
                if let Some(&i) = self.named.get(&fqn) {
                    return Ok(i);
                }
                let def = *self
                    .names
                    .get(&fqn)
                    .ok_or_else(|| invalid(format!("unknown type {fqn}")))?;
                return self.compile(def, ns);
            }
            S::Array(a) => {
                let items = self.compile(&a.items, ns)?;
                Node::Array(items)
            }
            S::Map(m) => {
                let values = self.compile(&m.types, ns)?;
                Node::Map(values)
            }
            S::Union(u) => {
                let mut branches = Vec::with_capacity(u.variants().len());
                for v in u.variants() {
                    branches.push(self.compile(v, ns)?);
                }
                Node::Union(branches)
            }
        };
        Ok(self.push(node))
    }
}

impl Plan {
    /// Compiles a parsed writer schema; refuses one that can recurse without consuming input
    /// (a record that contains itself through record fields only: no value of it is finite,
    /// and decoding one overflows the stack).
    pub(crate) fn new(schema: &Schema) -> Result<Plan, SchemaError> {
        let resolved = ResolvedSchema::try_from(schema).map_err(|e| invalid(e.to_string()))?;
        let mut c = Compiler {
            names: resolved.get_names(),
            named: HashMap::new(),
            nodes: Vec::new(),
        };
        let root = c.compile(schema, &None)?;
        let nodes = c.nodes;
        let min_size = min_sizes(&nodes)?;
        Ok(Plan {
            nodes,
            min_size,
            root,
        })
    }

    /// Walks `payload` as a datum of this schema, enforcing the limits in the module docs.
    pub(crate) fn check(&self, payload: &[u8]) -> Result<(), SchemaError> {
        let mut w = Walk {
            plan: self,
            buf: payload,
            pos: 0,
            left: alloc_budget(payload.len()),
        };
        w.node(self.root, 0)
    }
}

/// The fewest bytes each node can take; an error if a record can contain itself through
/// record fields only (a cycle that consumes no input). Iterative, so a deep schema cannot
/// overflow the stack here either.
fn min_sizes(nodes: &[Node]) -> Result<Vec<usize>, SchemaError> {
    const UNSEEN: u8 = 0;
    const OPEN: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![UNSEEN; nodes.len()];
    let mut min = vec![0usize; nodes.len()];
    // Only record fields consume nothing on the way down, so only they can close such a
    // cycle; every other composite reads a byte (a union index, a block count) first.
    for start in 0..nodes.len() {
        if state[start] != UNSEEN {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = OPEN;
        while let Some(top) = stack.last_mut() {
            let (n, next) = *top;
            let child = match &nodes[n] {
                Node::Record(fields) => fields.get(next).map(|f| f.1),
                _ => None,
            };
            if let Some(ch) = child {
                top.1 += 1;
                match state[ch] {
                    UNSEEN => {
                        state[ch] = OPEN;
                        stack.push((ch, 0));
                    }
                    OPEN => {
                        return Err(invalid(format!(
                            "the Avro schema {RECURSES} \
                             (a record contains itself through required fields)"
                        )))
                    }
                    _ => {}
                }
                continue;
            }
            min[n] = match &nodes[n] {
                Node::Null => 0,
                Node::Fixed(k) => *k,
                Node::Record(fields) => fields
                    .iter()
                    .fold(0usize, |acc, f| acc.saturating_add(min[f.1])),
                _ => 1,
            };
            state[n] = DONE;
            stack.pop();
        }
    }
    Ok(min)
}

struct Walk<'a> {
    plan: &'a Plan,
    buf: &'a [u8],
    pos: usize,
    /// Allocation budget left, in bytes.
    left: usize,
}

impl Walk<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn charge(&mut self, bytes: usize) -> Result<(), SchemaError> {
        match self.left.checked_sub(bytes) {
            Some(l) => {
                self.left = l;
                Ok(())
            }
            None => Err(refuse(format!(
                "decoding the payload would allocate more than its budget of {} bytes \
                 ({} + {} per payload byte)",
                alloc_budget(self.buf.len()),
                ALLOC_BASE,
                ALLOC_PER_BYTE
            ))),
        }
    }

    fn skip(&mut self, n: usize) -> Result<(), SchemaError> {
        if n > self.remaining() {
            return Err(refuse(format!(
                "a value claims {n} bytes, {} are left",
                self.remaining()
            )));
        }
        self.pos += n;
        Ok(())
    }

    /// A zig-zag varint (at most 10 bytes), or `None` at the end of the payload.
    fn varint(&mut self) -> Result<Option<i64>, SchemaError> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(refuse("the payload ends inside a varint"));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(Some(((v >> 1) as i64) ^ -((v & 1) as i64)));
            }
        }
        Err(refuse("a varint longer than 10 bytes"))
    }

    fn required_varint(&mut self) -> Result<i64, SchemaError> {
        self.varint()?
            .ok_or_else(|| refuse("the payload ends before a value"))
    }

    /// A length (strings, bytes): never more than the bytes left.
    fn len(&mut self) -> Result<usize, SchemaError> {
        let n = self.required_varint()?;
        let n = usize::try_from(n).map_err(|_| refuse(format!("a negative length {n}")))?;
        self.skip(n)?;
        self.charge(n)?;
        Ok(n)
    }

    /// A block count (arrays, maps); 0 ends the sequence. Never more items than the bytes
    /// left can hold when an item takes at least `min_item` bytes.
    fn block(&mut self, min_item: usize) -> Result<usize, SchemaError> {
        let raw = self.required_varint()?;
        let count = if raw < 0 {
            let _size = self.required_varint()?;
            raw.checked_neg()
                .ok_or_else(|| refuse("a block count that overflows"))?
        } else {
            raw
        };
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if min_item > 0 && count > self.remaining() / min_item {
            return Err(refuse(format!(
                "a block of {count} items in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(count)
    }

    fn node(&mut self, n: usize, depth: usize) -> Result<(), SchemaError> {
        self.charge(VALUE)?;
        let plan = self.plan;
        match &plan.nodes[n] {
            Node::Null | Node::Pending => Ok(()),
            Node::Bool => self.skip(1),
            Node::Varint => self.required_varint().map(drop),
            Node::Fixed(k) => {
                self.skip(*k)?;
                self.charge(*k)
            }
            Node::Len => self.len().map(drop),
            Node::Enum { symbols, longest } => {
                let i = self.required_varint()?;
                if i < 0 || i as u64 >= *symbols as u64 {
                    return Err(refuse(format!("enum index {i} of {symbols} symbols")));
                }
                self.charge(*longest)
            }
            composite => {
                let depth = depth + 1;
                if depth > MAX_DEPTH {
                    return Err(refuse(format!(
                        "values nest deeper than {MAX_DEPTH} levels"
                    )));
                }
                match composite {
                    Node::Union(branches) => {
                        // apache-avro reads a union at the very end of the payload as its
                        // first branch holding null; walk it the same way.
                        let Some(i) = self.varint()? else {
                            return self.charge(VALUE);
                        };
                        let b = usize::try_from(i)
                            .ok()
                            .and_then(|i| branches.get(i))
                            .ok_or_else(|| {
                                refuse(format!("union index {i} of {} branches", branches.len()))
                            })?;
                        self.charge(VALUE)?;
                        self.node(*b, depth)
                    }
                    Node::Array(items) => loop {
                        let count = self.block(plan.min_size[*items])?;
                        if count == 0 {
                            return Ok(());
                        }
                        for _ in 0..count {
                            self.node(*items, depth)?;
                        }
                    },
                    Node::Map(values) => loop {
                        // Each entry takes at least its key's length byte.
                        let count = self.block(1 + plan.min_size[*values])?;
                        if count == 0 {
                            return Ok(());
                        }
                        for _ in 0..count {
                            self.charge(ENTRY)?;
                            self.len()?;
                            self.node(*values, depth)?;
                        }
                    },
                    Node::Record(fields) => {
                        for &(name_len, f) in fields {
                            self.charge(FIELD + name_len)?;
                            self.node(f, depth)?;
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(def: &str) -> Result<Plan, SchemaError> {
        Plan::new(&Schema::parse_str(def).unwrap())
    }

    #[test]
    fn a_record_that_contains_itself_is_refused() {
        let e =
            plan(r#"{"type":"record","name":"A","fields":[{"name":"a","type":"A"}]}"#).unwrap_err();
        assert!(matches!(e, SchemaError::InvalidDefinition(_)), "{e}");
        // Through another record too.
        let e = plan(
            r#"{"type":"record","name":"A","fields":[{"name":"b","type":
                {"type":"record","name":"B","fields":[{"name":"a","type":"A"}]}}]}"#,
        )
        .unwrap_err();
        assert!(matches!(e, SchemaError::InvalidDefinition(_)), "{e}");
    }

    #[test]
    fn recursion_through_a_union_or_an_array_is_fine() {
        let list = r#"{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}"#;
        let p = plan(list).unwrap();
        p.check(&[2, 2, 0]).unwrap();
        let tree = r#"{"type":"record","name":"T","fields":[{"name":"kids","type":{"type":"array","items":"T"}}]}"#;
        plan(tree).unwrap().check(&[2, 0, 0]).unwrap();
    }

    #[test]
    fn nesting_is_capped() {
        let list = r#"{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}"#;
        let p = plan(list).unwrap();
        let mut deep = vec![2u8; 10_000];
        deep.push(0);
        let e = p.check(&deep).unwrap_err();
        assert!(e.to_string().contains("nest deeper"), "{e}");
    }

    #[test]
    fn a_block_count_larger_than_the_payload_is_refused() {
        let p = plan(r#"{"type":"array","items":"string"}"#).unwrap();
        // 100 M items claimed in 5 bytes.
        let mut payload = Vec::new();
        let mut v = (100_000_000u64) << 1;
        while v >= 0x80 {
            payload.push((v as u8) | 0x80);
            v >>= 7;
        }
        payload.push(v as u8);
        let e = p.check(&payload).unwrap_err();
        assert!(e.to_string().contains("block of 100000000 items"), "{e}");
    }

    #[test]
    fn zero_sized_items_are_bounded_by_the_budget() {
        let p = plan(r#"{"type":"array","items":"null"}"#).unwrap();
        let e = p.check(&[0x80, 0xc2, 0xd7, 0x2f, 0]).unwrap_err();
        assert!(e.to_string().contains("budget"), "{e}");
        // A few are fine.
        p.check(&[6, 0]).unwrap();
    }

    #[test]
    fn a_length_past_the_end_is_refused() {
        let p = plan(r#""string""#).unwrap();
        assert!(p.check(&[0xfe, 0xff, 0xff, 0xff, 0x0f]).is_err());
        p.check(&[4, b'h', b'i']).unwrap();
    }
}

#[cfg(test)]
mod deep_definitions {
    use apache_avro::types::Value;

    use crate::schema::{GenericAvroSchema, Schema};

    /// `levels` nested arrays of int, and a payload of one item at each level.
    fn nested(levels: usize) -> (String, Vec<u8>) {
        let mut def = String::new();
        for _ in 0..levels {
            def.push_str(r#"{"type":"array","items":"#);
        }
        def.push_str(r#""int""#);
        def.push_str(&"}".repeat(levels));
        let mut payload = vec![2u8; levels];
        payload.push(0);
        payload.extend(std::iter::repeat_n(0u8, levels));
        (def, payload)
    }

    #[test]
    fn a_deep_definition_parses_on_a_small_stack_and_deep_values_are_refused() {
        let r = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let (def, payload) = nested(100);
                let schema = GenericAvroSchema::new(&def).expect("a 100-deep definition parses");
                let e = schema.decode(&payload, None).unwrap_err();
                assert!(e.to_string().contains("nest deeper"), "{e}");
                let (def, payload) = nested(super::MAX_DEPTH);
                let v = GenericAvroSchema::new(&def).unwrap().decode(&payload, None);
                assert!(matches!(v, Ok(Value::Array(_))), "{v:?}");
            })
            .unwrap()
            .join();
        assert!(r.is_ok());
    }
}
