//! The batch payload format: several messages in one broker entry.
//!
//! A batched entry's (uncompressed) payload is `MessageMetadata.num_messages_in_batch` records
//! back to back, each
//!
//! ```text
//! [u32 big-endian: size of SingleMessageMetadata][SingleMessageMetadata][payload_size bytes]
//! ```
//!
//! as written by the Java client's `Commands.serializeSingleMessageInBatchWithPayload` and the
//! C++ client's `Commands::serializeSingleMessagesToBatchPayload`, and read by their
//! `deSerializeSingleMessageInBatch`.
// Wired into the producer and consumer by other modules; until then parts are only used by tests.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message as _;

use crate::error::{Error, Result};
use crate::proto;

/// The per-message fields of one batched message (its `SingleMessageMetadata`, less
/// `payload_size`, which [`BatchBuilder::push`] fills in). Borrowed, so pushing a message
/// copies nothing but bytes into the batch buffer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SingleMessageFields<'a> {
    /// `properties` (tag 1).
    pub properties: &'a [proto::KeyValue],
    /// `partition_key` (tag 2): the message key.
    pub partition_key: Option<&'a str>,
    /// `compacted_out` (tag 4); written only when true.
    pub compacted_out: bool,
    /// `event_time` (tag 5).
    pub event_time: Option<u64>,
    /// `partition_key_b64_encoded` (tag 6); written only when true.
    pub partition_key_b64_encoded: bool,
    /// `ordering_key` (tag 7).
    pub ordering_key: Option<&'a [u8]>,
    /// `sequence_id` (tag 8).
    pub sequence_id: Option<u64>,
    /// `null_value` (tag 9); written only when true.
    pub null_value: bool,
    /// `null_partition_key` (tag 10); written only when true.
    pub null_partition_key: bool,
}

/// Borrows the fields of an existing `SingleMessageMetadata` (its `payload_size` is ignored:
/// [`BatchBuilder::push`] writes the real payload length).
impl<'a> From<&'a proto::SingleMessageMetadata> for SingleMessageFields<'a> {
    fn from(m: &'a proto::SingleMessageMetadata) -> Self {
        SingleMessageFields {
            properties: &m.properties,
            partition_key: m.partition_key.as_deref(),
            compacted_out: m.compacted_out.unwrap_or(false),
            event_time: m.event_time,
            partition_key_b64_encoded: m.partition_key_b64_encoded.unwrap_or(false),
            ordering_key: m.ordering_key.as_deref(),
            sequence_id: m.sequence_id,
            null_value: m.null_value.unwrap_or(false),
            null_partition_key: m.null_partition_key.unwrap_or(false),
        }
    }
}

// Protobuf wire types.
const VARINT: u32 = 0;
const LEN: u32 = 2;

fn varint_len(v: u64) -> usize {
    // 1 byte per started 7 bits; 0 takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Where [`put_single_metadata`] writes: the batch buffer, or a [`RecordHead`] on the stack.
trait Sink {
    fn put_u8(&mut self, b: u8);
    fn put_slice(&mut self, bytes: &[u8]);
}

impl Sink for BytesMut {
    fn put_u8(&mut self, b: u8) {
        BufMut::put_u8(self, b);
    }
    fn put_slice(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Room for a record head on the stack: the 4-byte size and a metadata of up to 60 bytes
/// (a sequence id, payload size, event time and a key of a few dozen bytes).
const HEAD_ROOM: usize = 64;

/// A record's head, its metadata size and `SingleMessageMetadata`, encoded on the stack:
/// encoding it measures it (no separate size computation per message), and it is appended to
/// the batch with one copy (writing byte by byte into the `BytesMut` costs a capacity check
/// and a length update per byte). A metadata too big for the room is still measured exactly;
/// it is then written into the batch directly.
#[derive(Debug)]
pub(crate) struct RecordHead {
    bytes: [u8; HEAD_ROOM],
    /// Metadata bytes written (also those past the room).
    meta_len: usize,
}

impl Sink for RecordHead {
    fn put_u8(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(4 + self.meta_len) {
            *slot = b;
        }
        self.meta_len += 1;
    }
    fn put_slice(&mut self, bytes: &[u8]) {
        let start = 4 + self.meta_len;
        if let Some(dst) = self.bytes.get_mut(start..start + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        self.meta_len += bytes.len();
    }
}

impl RecordHead {
    /// The encoded size of the `SingleMessageMetadata`.
    pub(crate) fn metadata_len(&self) -> usize {
        self.meta_len
    }

    /// The whole head, if it fit in the room.
    fn encoded(&self) -> Option<&[u8]> {
        self.bytes.get(..4 + self.meta_len)
    }
}

fn put_varint(buf: &mut impl Sink, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_key(buf: &mut impl Sink, tag: u32, wire_type: u32) {
    put_varint(buf, u64::from((tag << 3) | wire_type));
}

fn put_len_delimited(buf: &mut impl Sink, tag: u32, bytes: &[u8]) {
    put_key(buf, tag, LEN);
    put_varint(buf, bytes.len() as u64);
    buf.put_slice(bytes);
}

/// Encoded length of a length-delimited field with a one-byte key (every tag here is < 16).
fn len_delimited_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn key_value_len(kv: &proto::KeyValue) -> usize {
    len_delimited_len(kv.key.len()) + len_delimited_len(kv.value.len())
}

/// Encoded size of the `SingleMessageMetadata` for `f` with `payload_size`.
fn single_metadata_len(f: &SingleMessageFields<'_>, payload_size: i32) -> usize {
    let mut n = 0;
    for kv in f.properties {
        n += len_delimited_len(key_value_len(kv));
    }
    if let Some(k) = f.partition_key {
        n += len_delimited_len(k.len());
    }
    // int32 is encoded as a sign-extended varint (payload sizes are never negative here).
    n += 1 + varint_len(payload_size as i64 as u64);
    if f.compacted_out {
        n += 2;
    }
    if let Some(t) = f.event_time {
        n += 1 + varint_len(t);
    }
    if f.partition_key_b64_encoded {
        n += 2;
    }
    if let Some(k) = f.ordering_key {
        n += len_delimited_len(k.len());
    }
    if let Some(s) = f.sequence_id {
        n += 1 + varint_len(s);
    }
    if f.null_value {
        n += 2;
    }
    if f.null_partition_key {
        n += 2;
    }
    n
}

/// Writes the `SingleMessageMetadata` in field-number order (as protobuf encoders do).
fn put_single_metadata<B: Sink>(buf: &mut B, f: &SingleMessageFields<'_>, payload_size: i32) {
    for kv in f.properties {
        put_key(buf, 1, LEN);
        put_varint(buf, key_value_len(kv) as u64);
        put_len_delimited(buf, 1, kv.key.as_bytes());
        put_len_delimited(buf, 2, kv.value.as_bytes());
    }
    if let Some(k) = f.partition_key {
        put_len_delimited(buf, 2, k.as_bytes());
    }
    put_key(buf, 3, VARINT);
    put_varint(buf, payload_size as i64 as u64);
    let put_true = |buf: &mut B, tag| {
        put_key(buf, tag, VARINT);
        buf.put_u8(1);
    };
    if f.compacted_out {
        put_true(buf, 4);
    }
    if let Some(t) = f.event_time {
        put_key(buf, 5, VARINT);
        put_varint(buf, t);
    }
    if f.partition_key_b64_encoded {
        put_true(buf, 6);
    }
    if let Some(k) = f.ordering_key {
        put_len_delimited(buf, 7, k);
    }
    if let Some(s) = f.sequence_id {
        put_key(buf, 8, VARINT);
        put_varint(buf, s);
    }
    if f.null_value {
        put_true(buf, 9);
    }
    if f.null_partition_key {
        put_true(buf, 10);
    }
}

/// Accumulates messages into one batch payload, encoding each record straight into a single
/// reusable buffer.
#[derive(Debug, Default)]
pub(crate) struct BatchBuilder {
    buf: BytesMut,
    count: u32,
}

impl BatchBuilder {
    /// An empty builder.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends one message: its metadata `fields` and `payload`.
    ///
    /// # Panics
    /// If `payload` is 2 GiB or more (the protocol's `payload_size` is an `int32`); callers
    /// enforce the broker's far smaller message size limit first.
    #[cfg(test)]
    pub(crate) fn push(&mut self, fields: &SingleMessageFields<'_>, payload: &[u8]) {
        let head = Self::head(fields, payload.len());
        self.push_head(&head, fields, payload);
    }

    /// Encodes the head of the record of a message with `fields` and a payload of
    /// `payload_len` bytes (its size is what the caller checks before pushing it).
    #[inline]
    pub(crate) fn head(fields: &SingleMessageFields<'_>, payload_len: usize) -> RecordHead {
        // Only the varint length of `payload_size` depends on it; clamping keeps this total
        // (a payload that large is refused before it could be pushed).
        let payload_size = i32::try_from(payload_len).unwrap_or(i32::MAX);
        let mut head = RecordHead {
            bytes: [0; HEAD_ROOM],
            meta_len: 0,
        };
        put_single_metadata(&mut head, fields, payload_size);
        head.bytes[..4].copy_from_slice(&(head.meta_len as u32).to_be_bytes());
        head
    }

    /// The size of the `SingleMessageMetadata` of a message that has only its payload size
    /// and sequence id (no key, properties, event time, ordering key or flags), as
    /// [`push_plain`](Self::push_plain) writes it.
    #[inline]
    pub(crate) fn plain_metadata_len(payload_len: usize, sequence_id: u64) -> usize {
        // Clamped as in `head` (`push_plain` refuses such a payload).
        let payload_size = i32::try_from(payload_len).unwrap_or(i32::MAX) as u64;
        2 + varint_len(payload_size) + varint_len(sequence_id)
    }

    /// Appends a message whose metadata is only its payload size and sequence id: the bytes
    /// [`push`](Self::push) writes for such fields, encoded directly rather than by testing
    /// each optional field through the byte-at-a-time [`Sink`] (the common batched send:
    /// about 100 instructions a message less).
    ///
    /// # Panics
    /// If `payload` is 2 GiB or more, as [`push_head`](Self::push_head).
    #[inline]
    pub(crate) fn push_plain(&mut self, payload: &[u8], sequence_id: u64) {
        let payload_size =
            i32::try_from(payload.len()).expect("a batched payload must be below 2 GiB") as u64;
        // The size, then fields 3 (payload_size) and 8 (sequence_id), varints in field
        // order: at most 4 + 1 + 5 + 1 + 10 bytes. Written by this local loop rather than
        // `put_varint` into a `RecordHead`: that `Sink` checks its room on every byte, which
        // measured 26 instructions a message more (`benches/hot_paths.rs`, produce).
        let mut head = [0u8; 21];
        let mut at = 4;
        let mut put = |head: &mut [u8; 21], mut v: u64| {
            while v >= 0x80 {
                head[at] = (v as u8) | 0x80;
                at += 1;
                v >>= 7;
            }
            head[at] = v as u8;
            at += 1;
        };
        put(&mut head, u64::from((3 << 3) | VARINT));
        put(&mut head, payload_size);
        put(&mut head, u64::from((8 << 3) | VARINT));
        put(&mut head, sequence_id);
        head[..4].copy_from_slice(&((at - 4) as u32).to_be_bytes());
        self.buf.reserve(at + payload.len());
        self.buf.extend_from_slice(&head[..at]);
        self.buf.extend_from_slice(payload);
        self.count += 1;
    }

    /// Appends one message: its `head` (from [`head`](Self::head) with these `fields` and
    /// this payload's length), then `payload`.
    ///
    /// # Panics
    /// If `payload` is 2 GiB or more (the protocol's `payload_size` is an `int32`); callers
    /// enforce the broker's far smaller message size limit first.
    pub(crate) fn push_head(
        &mut self,
        head: &RecordHead,
        fields: &SingleMessageFields<'_>,
        payload: &[u8],
    ) {
        let payload_size =
            i32::try_from(payload.len()).expect("a batched payload must be below 2 GiB");
        let meta_len = head.meta_len;
        debug_assert_eq!(meta_len, single_metadata_len(fields, payload_size));
        self.buf.reserve(4 + meta_len + payload.len());
        match head.encoded() {
            Some(bytes) => self.buf.extend_from_slice(bytes),
            None => {
                self.buf.put_u32(meta_len as u32);
                let start = self.buf.len();
                put_single_metadata(&mut self.buf, fields, payload_size);
                debug_assert_eq!(self.buf.len() - start, meta_len);
            }
        }
        self.buf.extend_from_slice(payload);
        self.count += 1;
    }

    /// How many bytes [`push`](Self::push) would add for a message with `fields` and a payload
    /// of `payload_len` bytes: the size prefix, the `SingleMessageMetadata` and the payload.
    #[cfg(test)]
    pub(crate) fn record_len(fields: &SingleMessageFields<'_>, payload_len: usize) -> usize {
        4 + Self::metadata_len(fields, payload_len) + payload_len
    }

    /// The encoded size of the `SingleMessageMetadata` [`push`](Self::push) writes for a
    /// message with `fields` and a payload of `payload_len` bytes.
    #[cfg(test)]
    pub(crate) fn metadata_len(fields: &SingleMessageFields<'_>, payload_len: usize) -> usize {
        // Only the varint length of `payload_size` depends on it; clamping keeps this total
        // (a payload that large is refused before it could be pushed).
        let payload_size = i32::try_from(payload_len).unwrap_or(i32::MAX);
        single_metadata_len(fields, payload_size)
    }

    /// The number of messages in the batch (its `num_messages_in_batch`).
    #[cfg(test)]
    pub(crate) fn len(&self) -> u32 {
        self.count
    }

    /// Whether no message has been pushed since the last [`take`](Self::take).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The size of the batch payload so far, in bytes (its `uncompressed_size`).
    pub(crate) fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Takes the batch payload, leaving the builder empty for the next batch (the buffer's
    /// allocation is reused once the taken bytes are dropped).
    pub(crate) fn take(&mut self) -> Bytes {
        self.count = 0;
        self.buf.split().freeze()
    }
}

/// The smallest record a batch can hold: its 4-byte metadata size and an empty
/// `SingleMessageMetadata`. prost does not enforce the proto2 `required payload_size`, so an
/// empty metadata (payload size 0) is a valid record: 4 bytes, not 6.
pub(crate) const MIN_RECORD_LEN: usize = 4;

/// The records of a batch payload (already decompressed), read one at a time: each item is
/// a record's metadata and its payload, a zero-copy slice of the batch. Nothing is allocated
/// for records not yet read, so a caller that keeps only some of them (ack set, compaction)
/// pays for those only.
///
/// Sizes that point past the end of the payload, undecodable metadata and negative payload
/// sizes are [`Error::Protocol`] (after which the iterator ends); bytes after the last record
/// are ignored, as the official clients do.
#[derive(Debug)]
pub(crate) struct BatchRecords {
    rest: Bytes,
    count: u32,
    next: u32,
}

impl BatchRecords {
    /// Reads `count` records from `payload`. A `count` the payload cannot hold (fewer than
    /// [`MIN_RECORD_LEN`] bytes per record) is refused at once, before any record is read.
    pub(crate) fn new(payload: Bytes, count: u32) -> Result<Self> {
        let room = payload.len() / MIN_RECORD_LEN;
        if count as usize > room {
            return Err(Error::Protocol(format!(
                "corrupt batch payload: {count} messages declared, but its {} bytes hold at \
                 most {room}",
                payload.len()
            )));
        }
        Ok(BatchRecords {
            rest: payload,
            count,
            next: 0,
        })
    }

    /// Reads the next record: its metadata into `meta` (overwritten), its payload returned;
    /// `None` after the last one. The consumer's decode loop reuses one `meta`, so a record's
    /// metadata (~150 bytes) is not built and moved out through `Option` and `Result` layers
    /// for each message.
    #[inline]
    pub(crate) fn next_into(
        &mut self,
        meta: &mut proto::SingleMessageMetadata,
    ) -> Option<Result<Bytes>> {
        if self.next >= self.count {
            return None;
        }
        let r = self.read_into(meta);
        // After an error, the rest cannot be located: stop.
        self.next = if r.is_ok() { self.next + 1 } else { self.count };
        Some(r)
    }

    #[inline]
    fn read_into(&mut self, meta: &mut proto::SingleMessageMetadata) -> Result<Bytes> {
        let (next, count) = (self.next, self.count);
        let rest = &mut self.rest;
        if rest.len() < 4 {
            return Err(corrupt(
                next,
                count,
                format_args!("{} bytes left, no room for a metadata size", rest.len()),
            ));
        }
        let meta_len = rest.get_u32() as usize;
        if meta_len > rest.len() {
            return Err(corrupt(
                next,
                count,
                format_args!(
                    "metadata size {meta_len} exceeds the {} bytes left",
                    rest.len()
                ),
            ));
        }
        if let Err(e) = decode_single_meta(rest, meta_len, meta) {
            return Err(corrupt(
                next,
                count,
                format_args!("undecodable metadata: {e}"),
            ));
        }
        rest.advance(meta_len);
        let Ok(size) = usize::try_from(meta.payload_size) else {
            return Err(corrupt(
                next,
                count,
                format_args!("negative payload size {}", meta.payload_size),
            ));
        };
        if size > rest.len() {
            return Err(corrupt(
                next,
                count,
                format_args!("payload size {size} exceeds the {} bytes left", rest.len()),
            ));
        }
        Ok(rest.split_to(size))
    }
}

/// The error for record `next` of `count` (kept out of line: the reading loop is hot).
#[cold]
#[inline(never)]
fn corrupt(next: u32, count: u32, what: std::fmt::Arguments<'_>) -> Error {
    Error::Protocol(format!(
        "corrupt batch payload (message {next} of {count}): {what}"
    ))
}

impl Iterator for BatchRecords {
    type Item = Result<(proto::SingleMessageMetadata, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut meta = proto::SingleMessageMetadata::default();
        let body = self.next_into(&mut meta)?;
        Some(body.map(|body| (meta, body)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some((self.count - self.next) as usize))
    }
}

/// Decodes the `SingleMessageMetadata` in the first `len` bytes of `src` (at most its
/// length), exactly as prost does. The fields producers write (payload size, sequence id, key,
/// ordering key, event time, flags) are read here directly, without a prost decode per
/// batched message (issue #18's profile: most of the cost of reading a record); anything else
/// (properties, an unknown field, an unexpected wire type, a long or malformed varint,
/// a key that is not UTF-8) falls back to prost over the same bytes, so the result, or the
/// error, is always prost's.
fn decode_single_meta(
    src: &Bytes,
    len: usize,
    meta: &mut proto::SingleMessageMetadata,
) -> std::result::Result<(), prost::DecodeError> {
    if !fast_single_meta(src, len, meta) {
        *meta = proto::SingleMessageMetadata::decode(src.slice(..len))?;
    }
    Ok(())
}

/// The fast path of [`decode_single_meta`], into `meta`; `false` = let prost decide.
fn fast_single_meta(src: &Bytes, len: usize, meta: &mut proto::SingleMessageMetadata) -> bool {
    // Reset field by field to the defaults (destructured: a field added to the message fails
    // to compile here): the same as `*meta = Default::default()` without dropping the whole
    // struct through a call for every record.
    let proto::SingleMessageMetadata {
        properties,
        partition_key,
        payload_size,
        compacted_out,
        event_time,
        partition_key_b64_encoded,
        ordering_key,
        sequence_id,
        null_value,
        null_partition_key,
    } = meta;
    properties.clear();
    *partition_key = None;
    *payload_size = 0;
    *compacted_out = None;
    *event_time = None;
    *partition_key_b64_encoded = None;
    *ordering_key = None;
    *sequence_id = None;
    *null_value = None;
    *null_partition_key = None;
    fast_fields(src, len, meta).is_some()
}

fn fast_fields(src: &Bytes, len: usize, meta: &mut proto::SingleMessageMetadata) -> Option<()> {
    let b = src.get(..len)?;
    let mut i = 0;
    while i < b.len() {
        let key = short_varint(b, &mut i)?;
        match (key >> 3, key & 7) {
            // Varint fields, converted like prost (`as i32`, `!= 0`); a repeated field's last
            // value wins, as in prost.
            (3, 0) => meta.payload_size = short_varint(b, &mut i)? as i32,
            (4, 0) => meta.compacted_out = Some(short_varint(b, &mut i)? != 0),
            (5, 0) => meta.event_time = Some(short_varint(b, &mut i)?),
            (6, 0) => meta.partition_key_b64_encoded = Some(short_varint(b, &mut i)? != 0),
            (8, 0) => meta.sequence_id = Some(short_varint(b, &mut i)?),
            (9, 0) => meta.null_value = Some(short_varint(b, &mut i)? != 0),
            (10, 0) => meta.null_partition_key = Some(short_varint(b, &mut i)? != 0),
            // Length-delimited: the key (UTF-8, else prost reports it) and the ordering key (a
            // zero-copy slice, as prost's `Bytes` decoding gives).
            (2 | 7, 2) => {
                let n = usize::try_from(short_varint(b, &mut i)?).ok()?;
                let end = i.checked_add(n).filter(|e| *e <= b.len())?;
                if key >> 3 == 2 {
                    meta.partition_key = Some(std::str::from_utf8(&b[i..end]).ok()?.to_owned());
                } else {
                    meta.ordering_key = Some(src.slice(i..end));
                }
                i = end;
            }
            _ => return None,
        }
    }
    Some(())
}

/// A varint of at most 9 bytes (63 bits; longer ones, rare and with prost's overflow rules,
/// go to prost) at `b[*i..]`, advancing `i`.
#[inline]
fn short_varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..63).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Splits a batch payload (already decompressed) into its `count` messages, with each
/// message's payload a zero-copy slice of `payload` (see [`BatchRecords`], which reads them
/// one at a time).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn parse_batch(
    payload: Bytes,
    count: u32,
) -> Result<Vec<(proto::SingleMessageMetadata, Bytes)>> {
    BatchRecords::new(payload, count)?.collect()
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
