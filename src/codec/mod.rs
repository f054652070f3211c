//! The Pulsar binary-protocol frame codec.
//!
//! Every frame on the wire starts with two big-endian `u32`s, `total_size` (everything after
//! itself) and `command_size`, followed by a protobuf `BaseCommand`:
//!
//! ```text
//! simple:  [total_size][command_size][BaseCommand]
//! payload: [total_size][command_size][BaseCommand]
//!          [0x0e02][broker_entry_metadata_size][BrokerEntryMetadata]   (optional)
//!          [0x0e01][crc32c]                                           (optional on receipt)
//!          [metadata_size][MessageMetadata][payload]
//! ```
//!
//! The CRC32C (Castagnoli) checksum covers everything from `metadata_size` to the end of the
//! frame. Incoming frames may omit the checksum section (it is verified when present);
//! outgoing payload frames always carry it.
//!
//! The frame types and the codec itself are crate-private (they hold generated protobuf
//! types); the public surface is [`CodecError`] and the size constants.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use tokio_util::codec::{Decoder, Encoder};

use crate::proto;

/// The default maximum message size (upstream's `maxMessageSize` default: 5 MiB), used until
/// the broker announces its own in CONNECTED.
pub(crate) const DEFAULT_MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;

/// The largest maximum message size this client accepts from a broker's CONNECTED, in bytes
/// (128 MiB). A broker may advertise any `max_message_size` up to 2^31-1; above this limit the
/// client uses the limit instead (for what it accepts and what it sends), so a hostile or
/// misconfigured broker cannot make one frame claim gigabytes. Upstream's Java client trusts the
/// advertised value; this cap is deliberately stricter.
pub(crate) const MAX_MESSAGE_SIZE_LIMIT: usize = 128 * 1024 * 1024;

/// How much read-buffer room is reserved ahead of the bytes received while a large frame is
/// arriving: the buffer grows with what actually arrives, never by the size a frame header
/// claims.
const READ_CHUNK: usize = 64 * 1024;

/// Extra room allowed on top of the maximum message size for a whole frame (command, metadata
/// and headers), as upstream's `Commands.MESSAGE_SIZE_FRAME_PADDING`.
pub(crate) const FRAME_HEADROOM: usize = 10 * 1024;

/// Magic number introducing the CRC32C checksum section of a payload frame.
const MAGIC_CRC32C: u16 = 0x0e01;

/// Magic number introducing the broker-entry-metadata section of a payload frame.
const MAGIC_BROKER_ENTRY_METADATA: u16 = 0x0e02;

/// Size of the `total_size` length prefix.
const LENGTH_FIELD_SIZE: usize = 4;

/// An error encoding or decoding a frame.
///
/// Any decoding error leaves the byte stream in an unknown state: the connection should be
/// closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A frame is larger than the allowed maximum (detected from the length prefix, before
    /// anything is buffered, or before an outgoing frame is written).
    #[error("frame of {size} bytes exceeds the maximum frame size of {max} bytes")]
    FrameTooLarge {
        /// The frame's size in bytes, including its 4-byte length prefix.
        size: usize,
        /// The maximum allowed frame size in bytes.
        max: usize,
    },

    /// A frame's structure is invalid (inconsistent sizes, truncated sections, ...).
    #[error("malformed frame: {0}")]
    Malformed(String),

    /// A payload frame's CRC32C checksum does not match its content.
    #[error("checksum mismatch: frame says {expected:#010x}, content has {computed:#010x}")]
    Checksum {
        /// The checksum carried in the frame.
        expected: u32,
        /// The checksum computed over the received bytes.
        computed: u32,
    },

    /// A protobuf message could not be decoded (or encoded).
    #[error("protobuf error: {0}")]
    Protobuf(String),

    /// An I/O error on the underlying transport.
    #[error("I/O error ({kind:?}): {message}")]
    Io {
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
}

impl From<std::io::Error> for CodecError {
    fn from(e: std::io::Error) -> Self {
        CodecError::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl From<prost::DecodeError> for CodecError {
    fn from(e: prost::DecodeError) -> Self {
        CodecError::Protobuf(e.to_string())
    }
}

/// One protocol frame: a command, and for SEND/MESSAGE frames a payload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    /// The command.
    pub command: proto::BaseCommand,
    /// The message payload, for payload frames.
    pub payload: Option<Payload>,
}

/// The payload part of a payload frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Payload {
    /// The raw `BrokerEntryMetadata` section (without its magic and size), when present.
    /// Written back out as-is when encoding.
    pub broker_entry_metadata: Option<Bytes>,
    /// The message metadata.
    pub metadata: proto::MessageMetadata,
    /// The message bytes (for batches, the whole serialized batch).
    pub data: Bytes,
}

impl Frame {
    /// A frame carrying only a command.
    pub(crate) fn simple(command: proto::BaseCommand) -> Self {
        Frame {
            command,
            payload: None,
        }
    }

    /// A payload frame (no broker entry metadata).
    #[allow(
        dead_code,
        reason = "payload frames are built by the mock broker, tests and future producers"
    )]
    pub(crate) fn with_payload(
        command: proto::BaseCommand,
        metadata: proto::MessageMetadata,
        data: Bytes,
    ) -> Self {
        Frame {
            command,
            payload: Some(Payload {
                broker_entry_metadata: None,
                metadata,
                data,
            }),
        }
    }
}

/// The frame codec: decodes [`Frame`]s from a byte stream and encodes them into one.
#[derive(Debug, Clone)]
pub(crate) struct PulsarCodec {
    /// Maximum size of a whole frame, length prefix included.
    max_frame_size: usize,
}

impl Default for PulsarCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl PulsarCodec {
    /// A codec allowing messages of up to [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub(crate) fn new() -> Self {
        Self::with_max_message_size(DEFAULT_MAX_MESSAGE_SIZE)
    }

    /// A codec allowing messages of up to `max_message_size` bytes (frames of up to
    /// `max_message_size + FRAME_HEADROOM`).
    pub(crate) fn with_max_message_size(max_message_size: usize) -> Self {
        PulsarCodec {
            max_frame_size: max_message_size.saturating_add(FRAME_HEADROOM),
        }
    }

    /// The largest frame this codec accepts or writes, length prefix included.
    pub(crate) fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Changes the maximum message size (e.g. to the broker's, from CONNECTED).
    pub(crate) fn set_max_message_size(&mut self, max_message_size: usize) {
        self.max_frame_size = max_message_size.saturating_add(FRAME_HEADROOM);
    }
}

impl Decoder for PulsarCodec {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        match self.next_body(src)? {
            Some(body) => decode_body(body).map(Some),
            None => Ok(None),
        }
    }
}

impl PulsarCodec {
    /// Takes the next whole frame's body (everything after its `total_size` field) from `src`,
    /// checking its size first; `None` until all of it has arrived.
    fn next_body(&self, src: &mut BytesMut) -> Result<Option<Bytes>, CodecError> {
        let Some(len_bytes) = src.get(..LENGTH_FIELD_SIZE) else {
            return Ok(None);
        };
        let total_size =
            u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        // Size checks first: nothing is reserved for a frame that will be rejected.
        let frame_len = usize::try_from(total_size)
            .ok()
            .and_then(|t| t.checked_add(LENGTH_FIELD_SIZE))
            .ok_or(CodecError::FrameTooLarge {
                size: usize::MAX,
                max: self.max_frame_size,
            })?;
        if frame_len > self.max_frame_size {
            return Err(CodecError::FrameTooLarge {
                size: frame_len,
                max: self.max_frame_size,
            });
        }
        if total_size < 4 {
            return Err(CodecError::Malformed(format!(
                "frame size {total_size} is too small to hold a command size"
            )));
        }
        if src.len() < frame_len {
            let missing = frame_len - src.len();
            if frame_len > READ_CHUNK && missing <= src.len() && src.capacity() < frame_len {
                // A large frame at least half arrived: a buffer of exactly its size, the
                // bytes so far moved in (as the buffer's growth would have; if a chunk's
                // doubling already made room for it, at most two chunks over). The frame keeps
                // its buffer alive as long as any part of it is held (a queued message's
                // payload is a slice of it); grown by doubling, that buffer was up to twice
                // the frame (a 1 MiB message, a few bytes over a power of two: 2 MiB), so a
                // consumer counting the bytes it holds held up to twice as much (issue #31).
                // One copy of at most the frame per large frame, in place of a doubling.
                let mut exact = BytesMut::with_capacity(frame_len);
                exact.extend_from_slice(src);
                *src = exact;
            } else {
                // Room for the next chunk only: a header may claim far more than will ever
                // arrive (the buffer then grows geometrically with the bytes received, at
                // most about twice what has arrived).
                src.reserve(missing.min(READ_CHUNK));
            }
            return Ok(None);
        }
        let frame = src.split_to(frame_len).freeze();
        Ok(Some(frame.slice(LENGTH_FIELD_SIZE..)))
    }
}

/// Reads a big-endian `u16` at `pos`, if there is room.
fn peek_u16(buf: &[u8], pos: usize) -> Option<u16> {
    let end = pos.checked_add(2)?;
    let b = buf.get(pos..end)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Reads a big-endian `u32` at `pos`, if there is room.
fn peek_u32(buf: &[u8], pos: usize) -> Option<u32> {
    let end = pos.checked_add(4)?;
    let b = buf.get(pos..end)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a `u32` section size at `pos` and returns the section's `(start, end)`, checking that
/// it fits in `body`.
fn sized_section(body: &[u8], pos: usize, what: &str) -> Result<(usize, usize), CodecError> {
    let size = peek_u32(body, pos).ok_or_else(|| {
        CodecError::Malformed(format!(
            "frame truncated: no room for the {what} size at offset {pos} of {}",
            body.len()
        ))
    })?;
    let start = pos + 4; // peek_u32 succeeded, so pos + 4 <= body.len()
    let end = usize::try_from(size)
        .ok()
        .and_then(|s| start.checked_add(s))
        .filter(|&end| end <= body.len())
        .ok_or_else(|| {
            CodecError::Malformed(format!(
                "{what} size {size} at offset {start} exceeds frame size {}",
                body.len()
            ))
        })?;
    Ok((start, end))
}

/// Decodes a frame's body: everything after the `total_size` field.
fn decode_body(body: Bytes) -> Result<Frame, CodecError> {
    let (cmd_start, cmd_end) = sized_section(&body, 0, "command")?;
    let command = proto::BaseCommand::decode(body.slice(cmd_start..cmd_end))?;
    let payload = decode_payload(&body, cmd_end)?;
    Ok(Frame { command, payload })
}

/// [`decode_body`] into the heap: a `BaseCommand` is ~6 KB, and decoding it on the stack
/// copied it twice more on its way into a box (creating 50,000 producers spent ~6 % of the
/// client's time in those copies: three answers per create).
pub(crate) fn decode_body_boxed(body: Bytes) -> Result<Box<Frame>, CodecError> {
    let (cmd_start, cmd_end) = sized_section(&body, 0, "command")?;
    let mut frame = Box::new(Frame {
        command: proto::BaseCommand::default(),
        payload: None,
    });
    frame.command.merge(body.slice(cmd_start..cmd_end))?;
    frame.payload = decode_payload(&body, cmd_end)?;
    Ok(frame)
}

/// Decodes the payload part of a frame's body that starts at `pos` (after the command), if
/// there is one.
fn decode_payload(body: &Bytes, mut pos: usize) -> Result<Option<Payload>, CodecError> {
    if pos == body.len() {
        return Ok(None);
    }
    let mut broker_entry_metadata = None;
    if peek_u16(body, pos) == Some(MAGIC_BROKER_ENTRY_METADATA) {
        // peek_u16 succeeded, so pos + 2 <= body.len(): no overflow.
        let (start, end) = sized_section(body, pos + 2, "broker entry metadata")?;
        broker_entry_metadata = Some(body.slice(start..end));
        pos = end;
    }

    if peek_u16(body, pos) == Some(MAGIC_CRC32C) {
        let expected = peek_u32(body, pos + 2).ok_or_else(|| {
            CodecError::Malformed(format!(
                "frame truncated: no room for the checksum at offset {} of {}",
                pos + 2,
                body.len()
            ))
        })?;
        pos += 6; // peek_u32 at pos + 2 succeeded, so pos + 6 <= body.len()
        let computed = crc32c::crc32c(&body[pos..]);
        if computed != expected {
            return Err(CodecError::Checksum { expected, computed });
        }
    }

    let (meta_start, meta_end) = sized_section(body, pos, "metadata")?;
    let metadata = proto::MessageMetadata::decode(body.slice(meta_start..meta_end))?;
    Ok(Some(Payload {
        broker_entry_metadata,
        metadata,
        data: body.slice(meta_end..),
    }))
}

/// Converts a section length to its `u32` wire representation.
fn wire_u32(len: usize, what: &str) -> Result<u32, CodecError> {
    u32::try_from(len)
        .map_err(|_| CodecError::Malformed(format!("{what} of {len} bytes does not fit in a u32")))
}

/// Encodes `frame` at the end of `dst`. Payload frames always get a CRC32C section.
///
/// Fails with [`CodecError::FrameTooLarge`] if the whole frame (length prefix included) would
/// exceed `max_frame_size`; on error nothing is written to `dst`.
pub(crate) fn encode_frame(
    frame: &Frame,
    dst: &mut BytesMut,
    max_frame_size: usize,
) -> Result<(), CodecError> {
    encode_parts(
        Command::Base(&frame.command),
        frame.payload.as_ref(),
        dst,
        max_frame_size,
    )
}

/// The command section of a frame to encode.
#[derive(Clone, Copy)]
enum Command<'a> {
    Base(&'a proto::BaseCommand),
    /// A SEND: encoded as a `BaseCommand` holding only `type = SEND` and this.
    Send(&'a proto::CommandSend),
}

/// The `BaseCommand` field number of `send` (and the value of `Type::Send`).
const SEND_FIELD: u32 = 6;

impl Command<'_> {
    fn encoded_len(self) -> usize {
        match self {
            Command::Base(c) => c.encoded_len(),
            Command::Send(send) => {
                let ty = proto::base_command::Type::Send as i32;
                prost::encoding::int32::encoded_len(1, &ty)
                    + prost::encoding::message::encoded_len(SEND_FIELD, send)
            }
        }
    }

    fn encode<B: BufMut>(self, dst: &mut B) -> Result<(), prost::EncodeError> {
        match self {
            Command::Base(c) => c.encode(dst),
            Command::Send(send) => {
                // Field order as prost writes a BaseCommand: `type` (1), then `send` (6).
                let ty = proto::base_command::Type::Send as i32;
                prost::encoding::int32::encode(1, &ty, dst);
                prost::encoding::message::encode(SEND_FIELD, send, dst);
                Ok(())
            }
        }
    }
}

/// The sizes of a frame to encode, computed and checked once by [`plan`].
#[derive(Clone, Copy)]
struct Layout {
    /// The whole frame, length prefix included.
    frame_len: usize,
    total_size: u32,
    cmd_len: u32,
    /// For a payload frame: the metadata size and the broker entry metadata size.
    meta_and_bem: Option<(u32, Option<u32>)>,
    /// For a payload frame: where its CRC32C goes, from the frame's start (the checksum covers
    /// the rest of the frame after it).
    crc_at: Option<usize>,
}

/// Measures a command and its payload and checks the frame against `max_frame_size`.
fn plan(
    command: Command<'_>,
    payload: Option<&Payload>,
    max_frame_size: usize,
) -> Result<Layout, CodecError> {
    let too_large = || CodecError::FrameTooLarge {
        size: usize::MAX,
        max: max_frame_size,
    };
    let cmd_len = command.encoded_len();
    // command_size + command
    let mut total_size = cmd_len.checked_add(4).ok_or_else(too_large)?;
    let mut payload_sizes = None;
    if let Some(payload) = payload {
        let meta_len = payload.metadata.encoded_len();
        let bem_len = payload.broker_entry_metadata.as_ref().map(Bytes::len);
        // magic + crc + metadata_size + metadata + data
        let mut payload_len = [6, 4, meta_len, payload.data.len()]
            .into_iter()
            .try_fold(0usize, usize::checked_add)
            .ok_or_else(too_large)?;
        if let Some(bem_len) = bem_len {
            // magic + size + broker entry metadata
            payload_len = payload_len
                .checked_add(6)
                .and_then(|l| l.checked_add(bem_len))
                .ok_or_else(too_large)?;
        }
        total_size = total_size.checked_add(payload_len).ok_or_else(too_large)?;
        payload_sizes = Some((meta_len, bem_len));
    }
    let frame_len = total_size
        .checked_add(LENGTH_FIELD_SIZE)
        .ok_or_else(too_large)?;
    if frame_len > max_frame_size {
        return Err(CodecError::FrameTooLarge {
            size: frame_len,
            max: max_frame_size,
        });
    }
    let meta_and_bem = match payload_sizes {
        Some((meta_len, bem_len)) => Some((
            wire_u32(meta_len, "metadata")?,
            bem_len
                .map(|l| wire_u32(l, "broker entry metadata"))
                .transpose()?,
        )),
        None => None,
    };
    // Sizes, command, [broker entry metadata section], magic: all within `frame_len`.
    let crc_at = payload_sizes.map(|(_, bem_len)| 8 + cmd_len + bem_len.map_or(0, |l| 6 + l) + 2);
    Ok(Layout {
        frame_len,
        total_size: wire_u32(total_size, "frame")?,
        cmd_len: wire_u32(cmd_len, "command")?,
        meta_and_bem,
        crc_at,
    })
}

/// Fills in the CRC32C of a payload frame written (with a zero placeholder) into `frame`.
fn seal(frame: &mut [u8], layout: &Layout) {
    if let Some(at) = layout.crc_at {
        let crc = crc32c::crc32c(&frame[at + 4..]);
        frame[at..at + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Encodes a command and its payload at the end of `dst`; see [`encode_frame`].
fn encode_parts(
    command: Command<'_>,
    payload: Option<&Payload>,
    dst: &mut BytesMut,
    max_frame_size: usize,
) -> Result<(), CodecError> {
    let layout = plan(command, payload, max_frame_size)?;
    let start_len = dst.len();
    dst.reserve(layout.frame_len);
    let result = write_frame(command, payload, dst, &layout);
    if result.is_err() {
        dst.truncate(start_len);
        return result;
    }
    debug_assert_eq!(dst.len() - start_len, layout.frame_len);
    seal(&mut dst[start_len..], &layout);
    Ok(())
}

/// Writes a frame whose sizes have been computed and checked by [`plan`], with a zero
/// placeholder for its checksum ([`seal`] fills it in).
fn write_frame<B: BufMut>(
    command: Command<'_>,
    payload: Option<&Payload>,
    dst: &mut B,
    layout: &Layout,
) -> Result<(), CodecError> {
    let encode_err = |e: prost::EncodeError| CodecError::Protobuf(e.to_string());
    dst.put_u32(layout.total_size);
    dst.put_u32(layout.cmd_len);
    command.encode(dst).map_err(encode_err)?;
    let (Some(payload), Some((meta_len, bem_len))) = (payload, layout.meta_and_bem) else {
        return Ok(());
    };
    if let (Some(bem), Some(bem_len)) = (&payload.broker_entry_metadata, bem_len) {
        dst.put_u16(MAGIC_BROKER_ENTRY_METADATA);
        dst.put_u32(bem_len);
        dst.put_slice(bem);
    }
    dst.put_u16(MAGIC_CRC32C);
    dst.put_u32(0); // placeholder, filled in by `seal`
    dst.put_u32(meta_len);
    payload.metadata.encode(dst).map_err(encode_err)?;
    dst.put_slice(&payload.data);
    Ok(())
}

impl Encoder<&Frame> for PulsarCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), CodecError> {
        encode_frame(frame, dst, self.max_frame_size)
    }
}

impl Encoder<Frame> for PulsarCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), CodecError> {
        encode_frame(&frame, dst, self.max_frame_size)
    }
}

/// [`PulsarCodec`] with frames decoded into the heap ([`decode_body_boxed`]) and written
/// from a reference: the mock broker's sessions, which move every frame through a channel or
/// two, would otherwise copy a ~6 KB `BaseCommand` at each step.
#[cfg(feature = "mock-broker")]
#[derive(Debug, Clone)]
pub(crate) struct BoxedFrameCodec(pub PulsarCodec);

#[cfg(feature = "mock-broker")]
impl Decoder for BoxedFrameCodec {
    type Item = Box<Frame>;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Box<Frame>>, CodecError> {
        match self.0.next_body(src)? {
            Some(body) => decode_body_boxed(body).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(feature = "mock-broker")]
impl Encoder<&Frame> for BoxedFrameCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), CodecError> {
        encode_frame(frame, dst, self.0.max_frame_size)
    }
}

mod inbound;
mod send;
pub(crate) use inbound::{Inbound, InboundCodec, MessageFrame};
pub(crate) use send::{encode_send, EncodedFrame};

#[cfg(test)]
mod tests;
