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
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;

/// Extra room allowed on top of the maximum message size for a whole frame (command, metadata
/// and headers), as upstream's `Commands.MESSAGE_SIZE_FRAME_PADDING`.
pub const FRAME_HEADROOM: usize = 10 * 1024;

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
    pub fn simple(command: proto::BaseCommand) -> Self {
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
    pub fn with_payload(
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
    pub fn new() -> Self {
        Self::with_max_message_size(DEFAULT_MAX_MESSAGE_SIZE)
    }

    /// A codec allowing messages of up to `max_message_size` bytes (frames of up to
    /// `max_message_size + FRAME_HEADROOM`).
    pub fn with_max_message_size(max_message_size: usize) -> Self {
        PulsarCodec {
            max_frame_size: max_message_size.saturating_add(FRAME_HEADROOM),
        }
    }

    /// Changes the maximum message size (e.g. to the broker's, from CONNECTED).
    pub fn set_max_message_size(&mut self, max_message_size: usize) {
        self.max_frame_size = max_message_size.saturating_add(FRAME_HEADROOM);
    }
}

impl Decoder for PulsarCodec {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
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
            src.reserve(frame_len - src.len());
            return Ok(None);
        }
        let frame = src.split_to(frame_len).freeze();
        decode_body(frame.slice(LENGTH_FIELD_SIZE..)).map(Some)
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
    if cmd_end == body.len() {
        return Ok(Frame::simple(command));
    }

    let mut pos = cmd_end;
    let mut broker_entry_metadata = None;
    if peek_u16(&body, pos) == Some(MAGIC_BROKER_ENTRY_METADATA) {
        // peek_u16 succeeded, so pos + 2 <= body.len(): no overflow.
        let (start, end) = sized_section(&body, pos + 2, "broker entry metadata")?;
        broker_entry_metadata = Some(body.slice(start..end));
        pos = end;
    }

    if peek_u16(&body, pos) == Some(MAGIC_CRC32C) {
        let expected = peek_u32(&body, pos + 2).ok_or_else(|| {
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

    let (meta_start, meta_end) = sized_section(&body, pos, "metadata")?;
    let metadata = proto::MessageMetadata::decode(body.slice(meta_start..meta_end))?;
    Ok(Frame {
        command,
        payload: Some(Payload {
            broker_entry_metadata,
            metadata,
            data: body.slice(meta_end..),
        }),
    })
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
    let too_large = || CodecError::FrameTooLarge {
        size: usize::MAX,
        max: max_frame_size,
    };
    let cmd_len = frame.command.encoded_len();
    // command_size + command
    let mut total_size = cmd_len.checked_add(4).ok_or_else(too_large)?;
    let mut payload_sizes = None;
    if let Some(payload) = &frame.payload {
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
    let total_size_u32 = wire_u32(total_size, "frame")?;
    let cmd_len_u32 = wire_u32(cmd_len, "command")?;
    let meta_and_bem = match payload_sizes {
        Some((meta_len, bem_len)) => Some((
            wire_u32(meta_len, "metadata")?,
            bem_len
                .map(|l| wire_u32(l, "broker entry metadata"))
                .transpose()?,
        )),
        None => None,
    };

    let start_len = dst.len();
    dst.reserve(frame_len);
    let result = write_frame(frame, dst, total_size_u32, cmd_len_u32, meta_and_bem);
    if result.is_err() {
        dst.truncate(start_len);
    }
    debug_assert!(result.is_err() || dst.len() - start_len == frame_len);
    result
}

/// Writes a frame whose sizes have been computed and checked by [`encode_frame`].
fn write_frame(
    frame: &Frame,
    dst: &mut BytesMut,
    total_size: u32,
    cmd_len: u32,
    meta_and_bem: Option<(u32, Option<u32>)>,
) -> Result<(), CodecError> {
    let encode_err = |e: prost::EncodeError| CodecError::Protobuf(e.to_string());
    dst.put_u32(total_size);
    dst.put_u32(cmd_len);
    frame.command.encode(dst).map_err(encode_err)?;
    let (Some(payload), Some((meta_len, bem_len))) = (&frame.payload, meta_and_bem) else {
        return Ok(());
    };
    if let (Some(bem), Some(bem_len)) = (&payload.broker_entry_metadata, bem_len) {
        dst.put_u16(MAGIC_BROKER_ENTRY_METADATA);
        dst.put_u32(bem_len);
        dst.put_slice(bem);
    }
    dst.put_u16(MAGIC_CRC32C);
    let crc_pos = dst.len();
    dst.put_u32(0); // placeholder, filled in below
    let checked_from = dst.len();
    dst.put_u32(meta_len);
    payload.metadata.encode(dst).map_err(encode_err)?;
    dst.put_slice(&payload.data);
    let crc = crc32c::crc32c(&dst[checked_from..]);
    dst[crc_pos..checked_from].copy_from_slice(&crc.to_be_bytes());
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

#[cfg(test)]
// `..Default::default()` keeps the tests independent of which fields the generated types have.
#[allow(clippy::needless_update)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proto::base_command::Type;

    fn ping() -> proto::BaseCommand {
        proto::BaseCommand {
            r#type: Type::Ping as i32,
            ping: Some(proto::CommandPing::default()),
            ..Default::default()
        }
    }

    fn send_command(producer_id: u64, sequence_id: u64) -> proto::BaseCommand {
        proto::BaseCommand {
            r#type: Type::Send as i32,
            send: Some(proto::CommandSend {
                producer_id,
                sequence_id,
                num_messages: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn metadata(producer_name: &str, sequence_id: u64) -> proto::MessageMetadata {
        proto::MessageMetadata {
            producer_name: producer_name.to_owned(),
            sequence_id,
            publish_time: 1_700_000_000_000,
            properties: vec![proto::KeyValue {
                key: "k".into(),
                value: "v".into(),
            }],
            ..Default::default()
        }
    }

    fn payload_frame() -> Frame {
        Frame::with_payload(
            send_command(7, 42),
            metadata("producer-1", 42),
            Bytes::from_static(b"hello pulsar"),
        )
    }

    fn encode(frame: &Frame) -> BytesMut {
        let mut buf = BytesMut::new();
        PulsarCodec::new().encode(frame, &mut buf).unwrap();
        buf
    }

    /// Builds a payload frame by hand, independently of the encoder.
    fn raw_payload_frame(
        command: &proto::BaseCommand,
        broker_entry_metadata: Option<&[u8]>,
        with_crc: bool,
        metadata: &proto::MessageMetadata,
        data: &[u8],
    ) -> Vec<u8> {
        let cmd = command.encode_to_vec();
        let meta = metadata.encode_to_vec();
        let mut checked = Vec::new();
        checked.extend_from_slice(&(meta.len() as u32).to_be_bytes());
        checked.extend_from_slice(&meta);
        checked.extend_from_slice(data);
        let mut body = Vec::new();
        body.extend_from_slice(&(cmd.len() as u32).to_be_bytes());
        body.extend_from_slice(&cmd);
        if let Some(bem) = broker_entry_metadata {
            body.extend_from_slice(&[0x0e, 0x02]);
            body.extend_from_slice(&(bem.len() as u32).to_be_bytes());
            body.extend_from_slice(bem);
        }
        if with_crc {
            body.extend_from_slice(&[0x0e, 0x01]);
            body.extend_from_slice(&crc32c::crc32c(&checked).to_be_bytes());
        }
        body.extend_from_slice(&checked);
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, CodecError> {
        let mut codec = PulsarCodec::new();
        let mut buf = BytesMut::from(bytes);
        let mut frames = Vec::new();
        while let Some(frame) = codec.decode(&mut buf)? {
            frames.push(frame);
        }
        Ok(frames)
    }

    fn decode_one(bytes: &[u8]) -> Result<Option<Frame>, CodecError> {
        PulsarCodec::new().decode(&mut BytesMut::from(bytes))
    }

    #[test]
    fn simple_frame_round_trip_and_layout() {
        let frame = Frame::simple(ping());
        let buf = encode(&frame);
        let cmd = ping().encode_to_vec();
        let mut expected = ((cmd.len() + 4) as u32).to_be_bytes().to_vec();
        expected.extend_from_slice(&(cmd.len() as u32).to_be_bytes());
        expected.extend_from_slice(&cmd);
        assert_eq!(&buf[..], &expected[..]);
        assert_eq!(decode_all(&buf).unwrap(), vec![frame]);
    }

    #[test]
    fn payload_frame_round_trip_and_layout() {
        let frame = payload_frame();
        let buf = encode(&frame);
        let payload = frame.payload.as_ref().unwrap();
        let expected =
            raw_payload_frame(&frame.command, None, true, &payload.metadata, &payload.data);
        assert_eq!(&buf[..], &expected[..]);
        assert_eq!(decode_all(&buf).unwrap(), vec![frame]);
    }

    #[test]
    fn encoder_appends_to_existing_content() {
        let mut buf = BytesMut::from(&b"xyz"[..]);
        encode_frame(&payload_frame(), &mut buf, usize::MAX).unwrap();
        assert_eq!(&buf[..3], b"xyz");
        assert_eq!(&buf[3..], &encode(&payload_frame())[..]);
    }

    #[test]
    fn payload_data_is_zero_copy() {
        let mut src = encode(&payload_frame());
        let src_range = src.as_ptr_range();
        let frame = PulsarCodec::new().decode(&mut src).unwrap().unwrap();
        let data = frame.payload.unwrap().data;
        // The payload points into the read buffer's memory: no copy was made.
        assert!(src_range.contains(&data.as_ptr()));
        assert_eq!(&data[..], b"hello pulsar");
    }

    #[test]
    fn decodes_payload_frame_without_checksum() {
        let frame = payload_frame();
        let p = frame.payload.as_ref().unwrap();
        let raw = raw_payload_frame(&frame.command, None, false, &p.metadata, &p.data);
        assert_eq!(decode_all(&raw).unwrap(), vec![frame]);
    }

    #[test]
    fn decodes_broker_entry_metadata_section() {
        let frame = payload_frame();
        let p = frame.payload.as_ref().unwrap();
        let bem = proto::BrokerEntryMetadata {
            broker_timestamp: Some(123),
            index: Some(456),
        }
        .encode_to_vec();
        for with_crc in [true, false] {
            let raw = raw_payload_frame(&frame.command, Some(&bem), with_crc, &p.metadata, &p.data);
            let decoded = decode_all(&raw).unwrap();
            assert_eq!(decoded.len(), 1);
            let dp = decoded[0].payload.as_ref().unwrap();
            assert_eq!(dp.broker_entry_metadata.as_deref(), Some(&bem[..]));
            assert_eq!(dp.metadata, p.metadata);
            assert_eq!(dp.data, p.data);
            let parsed =
                proto::BrokerEntryMetadata::decode(dp.broker_entry_metadata.clone().unwrap())
                    .unwrap();
            assert_eq!(parsed.index, Some(456));
            // Re-encoding keeps the section, with a checksum.
            let reencoded = encode(&decoded[0]);
            let expected =
                raw_payload_frame(&frame.command, Some(&bem), true, &p.metadata, &p.data);
            assert_eq!(&reencoded[..], &expected[..]);
        }
    }

    #[test]
    fn checksum_mismatch_is_detected() {
        let mut buf = encode(&payload_frame());
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        match decode_one(&buf) {
            Err(CodecError::Checksum { expected, computed }) => assert_ne!(expected, computed),
            other => panic!("expected a checksum error, got {other:?}"),
        }
        // A corrupted checksum field is detected too.
        let mut buf = encode(&payload_frame());
        let crc_pos = 8 + send_command(7, 42).encoded_len() + 2;
        buf[crc_pos] ^= 0x80;
        assert!(matches!(decode_one(&buf), Err(CodecError::Checksum { .. })));
    }

    #[test]
    fn oversized_length_rejected_before_allocating() {
        let mut codec = PulsarCodec::new();
        let mut buf = BytesMut::with_capacity(4);
        buf.put_u32(1 << 30);
        let err = codec.decode(&mut buf).unwrap_err();
        assert_eq!(
            err,
            CodecError::FrameTooLarge {
                size: (1 << 30) + 4,
                max: DEFAULT_MAX_MESSAGE_SIZE + FRAME_HEADROOM,
            }
        );
        assert!(buf.capacity() < 1024, "capacity grew to {}", buf.capacity());
    }

    #[test]
    fn max_message_size_is_adjustable() {
        let frame = Frame::with_payload(
            send_command(1, 1),
            metadata("p", 1),
            Bytes::from(vec![0u8; 2000]),
        );
        let buf = encode(&frame);
        let mut small = PulsarCodec::with_max_message_size(1000);
        assert_eq!(small.max_frame_size, 1000 + FRAME_HEADROOM);
        assert!(small.decode(&mut buf.clone()).unwrap().is_some());
        small.set_max_message_size(0);
        assert_eq!(small.max_frame_size, FRAME_HEADROOM);
        let big = Frame::with_payload(
            send_command(1, 1),
            metadata("p", 1),
            Bytes::from(vec![0u8; FRAME_HEADROOM]),
        );
        let big_buf = encode(&big);
        assert!(matches!(
            small.decode(&mut big_buf.clone()),
            Err(CodecError::FrameTooLarge { max, .. }) if max == FRAME_HEADROOM
        ));
        // The encoder enforces the same limit and writes nothing on error.
        let mut dst = BytesMut::from(&b"ab"[..]);
        assert!(matches!(
            small.encode(&big, &mut dst),
            Err(CodecError::FrameTooLarge { size, max })
                if size == big_buf.len() && max == FRAME_HEADROOM
        ));
        assert_eq!(&dst[..], b"ab");
        // Exactly at the limit is fine.
        let exact = PulsarCodec::with_max_message_size(big_buf.len() - FRAME_HEADROOM);
        assert!(exact
            .clone()
            .decode(&mut big_buf.clone())
            .unwrap()
            .is_some());
        let mut dst = BytesMut::new();
        exact.clone().encode(&big, &mut dst).unwrap();
        let exact_minus = PulsarCodec::with_max_message_size(big_buf.len() - FRAME_HEADROOM - 1);
        assert!(exact_minus.clone().decode(&mut big_buf.clone()).is_err());
    }

    #[test]
    fn every_truncation_returns_none() {
        for frame in [Frame::simple(ping()), payload_frame()] {
            let full = encode(&frame);
            for cut in 0..full.len() {
                let mut buf = BytesMut::from(&full[..cut]);
                let result = PulsarCodec::new().decode(&mut buf);
                assert_eq!(result, Ok(None), "prefix of {cut} bytes");
                assert_eq!(buf.len(), cut, "prefix of {cut} bytes was consumed");
            }
            assert_eq!(decode_one(&full), Ok(Some(frame)));
        }
    }

    #[test]
    fn back_to_back_frames() {
        let mut buf = encode(&payload_frame());
        buf.extend_from_slice(&encode(&Frame::simple(ping())));
        buf.extend_from_slice(&encode(&payload_frame()));
        assert_eq!(
            decode_all(&buf).unwrap(),
            vec![payload_frame(), Frame::simple(ping()), payload_frame()]
        );
    }

    #[test]
    fn frame_split_across_reads() {
        let mut wire = encode(&payload_frame());
        wire.extend_from_slice(&encode(&Frame::simple(ping())));
        for chunk in [1, 3, 7, 16] {
            let mut codec = PulsarCodec::new();
            let mut buf = BytesMut::new();
            let mut frames = Vec::new();
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(frame) = codec.decode(&mut buf).unwrap() {
                    frames.push(frame);
                }
            }
            assert!(buf.is_empty());
            assert_eq!(frames, vec![payload_frame(), Frame::simple(ping())]);
        }
    }

    #[test]
    fn lying_lengths_are_errors() {
        // total_size < 4
        for total in 0u32..4 {
            let mut raw = total.to_be_bytes().to_vec();
            raw.extend_from_slice(&[0; 4]);
            assert!(
                matches!(decode_one(&raw), Err(CodecError::Malformed(_))),
                "{total}"
            );
        }
        // command_size larger than the frame
        let raw = [0, 0, 0, 10, 0, 0, 0, 99, 1, 2, 3, 4, 5, 6];
        assert_eq!(
            decode_one(&raw),
            Err(CodecError::Malformed(
                "command size 99 at offset 4 exceeds frame size 10".into()
            ))
        );
        // command_size = u32::MAX
        let raw = [0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(decode_one(&raw), Err(CodecError::Malformed(_))));
        // metadata_size running past the end (no checksum section)
        let frame = payload_frame();
        let p = frame.payload.as_ref().unwrap();
        let mut raw = raw_payload_frame(&frame.command, None, false, &p.metadata, b"");
        let meta_pos = 8 + frame.command.encoded_len();
        raw[meta_pos..meta_pos + 4].copy_from_slice(&1000u32.to_be_bytes());
        assert!(matches!(decode_one(&raw), Err(CodecError::Malformed(_))));
        // broker entry metadata size running past the end
        let mut raw = raw_payload_frame(&frame.command, Some(b"abc"), true, &p.metadata, b"");
        raw[meta_pos + 2..meta_pos + 6].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode_one(&raw), Err(CodecError::Malformed(_))));
        // Checksum section cut short, then nothing (1..=5 trailing bytes after the command)
        let cmd = ping().encode_to_vec();
        for tail in [
            &[0x0e][..],
            &[0x0e, 0x01],
            &[0x0e, 0x01, 0, 0, 0],
            &[0, 0, 0],
        ] {
            let mut body = (cmd.len() as u32).to_be_bytes().to_vec();
            body.extend_from_slice(&cmd);
            body.extend_from_slice(tail);
            let mut raw = (body.len() as u32).to_be_bytes().to_vec();
            raw.extend_from_slice(&body);
            assert!(
                matches!(decode_one(&raw), Err(CodecError::Malformed(_))),
                "{tail:?}: {:?}",
                decode_one(&raw)
            );
        }
    }

    #[test]
    fn undecodable_protobuf_is_an_error() {
        // A field header with wire type 7 (invalid).
        let raw = [0, 0, 0, 5, 0, 0, 0, 1, 0x0f];
        assert!(matches!(decode_one(&raw), Err(CodecError::Protobuf(_))));
        // A truncated varint.
        let raw = [0, 0, 0, 6, 0, 0, 0, 2, 0x08, 0x80];
        assert!(matches!(decode_one(&raw), Err(CodecError::Protobuf(_))));
    }

    #[test]
    fn unknown_fields_and_missing_type_are_accepted() {
        let mut cmd = ping().encode_to_vec();
        // field 999, varint 5
        cmd.extend_from_slice(&[0xb8, 0x3e, 0x05]);
        let mut raw = ((cmd.len() + 4) as u32).to_be_bytes().to_vec();
        raw.extend_from_slice(&(cmd.len() as u32).to_be_bytes());
        raw.extend_from_slice(&cmd);
        assert_eq!(decode_one(&raw), Ok(Some(Frame::simple(ping()))));
        // An empty BaseCommand decodes to the defaults.
        let raw = [0, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(
            decode_one(&raw),
            Ok(Some(Frame::simple(proto::BaseCommand::default())))
        );
    }

    #[test]
    fn io_errors_convert() {
        let e = CodecError::from(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "bytes remaining on stream",
        ));
        assert_eq!(
            e,
            CodecError::Io {
                kind: std::io::ErrorKind::UnexpectedEof,
                message: "bytes remaining on stream".into()
            }
        );
        // decode_eof with a partial frame reports an I/O error rather than panicking.
        let full = encode(&payload_frame());
        let mut buf = BytesMut::from(&full[..full.len() - 1]);
        assert!(matches!(
            PulsarCodec::new().decode_eof(&mut buf),
            Err(CodecError::Io { .. })
        ));
    }

    // ---- property tests ----

    fn arb_command() -> impl Strategy<Value = proto::BaseCommand> {
        prop_oneof![
            Just(ping()),
            Just(proto::BaseCommand {
                r#type: Type::Pong as i32,
                pong: Some(proto::CommandPong::default()),
                ..Default::default()
            }),
            (
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<i32>())
            )
                .prop_map(|(producer_id, sequence_id, num_messages)| {
                    proto::BaseCommand {
                        r#type: Type::Send as i32,
                        send: Some(proto::CommandSend {
                            producer_id,
                            sequence_id,
                            num_messages,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<i32>()),
                proptest::option::of(any::<u32>())
            )
                .prop_map(
                    |(consumer_id, ledger_id, entry_id, partition, redelivery_count)| {
                        proto::BaseCommand {
                            r#type: Type::Message as i32,
                            message: Some(proto::CommandMessage {
                                consumer_id,
                                message_id: proto::MessageIdData {
                                    ledger_id,
                                    entry_id,
                                    partition,
                                    ..Default::default()
                                },
                                redelivery_count,
                                ..Default::default()
                            }),
                            ..Default::default()
                        }
                    }
                ),
            (any::<u64>(), any::<u32>()).prop_map(|(consumer_id, message_permits)| {
                proto::BaseCommand {
                    r#type: Type::Flow as i32,
                    flow: Some(proto::CommandFlow {
                        consumer_id,
                        message_permits,
                    }),
                    ..Default::default()
                }
            }),
            (
                ".{0,40}",
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(".{0,20}")
            )
                .prop_map(|(topic, producer_id, request_id, producer_name)| {
                    proto::BaseCommand {
                        r#type: Type::Producer as i32,
                        producer: Some(proto::CommandProducer {
                            topic,
                            producer_id,
                            request_id,
                            producer_name,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                }),
            (".{0,40}", proptest::option::of(any::<i32>())).prop_map(
                |(client_version, protocol_version)| proto::BaseCommand {
                    r#type: Type::Connect as i32,
                    connect: Some(proto::CommandConnect {
                        client_version,
                        protocol_version,
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            ),
        ]
    }

    fn arb_payload() -> impl Strategy<Value = Payload> {
        (
            ".{0,20}",
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec((".{0,10}", ".{0,10}"), 0..4),
            proptest::collection::vec(any::<u8>(), 0..512),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32)),
        )
            .prop_map(
                |(producer_name, sequence_id, publish_time, properties, data, bem)| Payload {
                    broker_entry_metadata: bem.map(Bytes::from),
                    metadata: proto::MessageMetadata {
                        producer_name,
                        sequence_id,
                        publish_time,
                        properties: properties
                            .into_iter()
                            .map(|(key, value)| proto::KeyValue { key, value })
                            .collect(),
                        ..Default::default()
                    },
                    data: Bytes::from(data),
                },
            )
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        (arb_command(), proptest::option::of(arb_payload()))
            .prop_map(|(command, payload)| Frame { command, payload })
    }

    /// Feeds `bytes` to a decoder until it needs more input or fails; must never panic.
    fn drain(bytes: &[u8]) {
        let mut codec = PulsarCodec::with_max_message_size(64 * 1024);
        let mut buf = BytesMut::from(bytes);
        loop {
            let before = buf.len();
            match codec.decode(&mut buf) {
                Ok(Some(_)) => assert!(buf.len() < before, "a decoded frame consumed nothing"),
                Ok(None) | Err(_) => break,
            }
        }
    }

    proptest! {
        #[test]
        fn prop_round_trip(frames in proptest::collection::vec(arb_frame(), 1..4)) {
            let mut codec = PulsarCodec::new();
            let mut buf = BytesMut::new();
            for frame in &frames {
                codec.encode(frame, &mut buf).unwrap();
            }
            let mut decoded = Vec::new();
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                decoded.push(frame);
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(decoded, frames);
        }

        #[test]
        fn prop_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            drain(&bytes);
        }

        #[test]
        fn prop_small_garbage_frames_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..128),
            command_size in 0u32..160,
        ) {
            // Plausible headers over garbage, so the body parser is exercised too.
            let mut raw = ((body.len() + 4) as u32).to_be_bytes().to_vec();
            raw.extend_from_slice(&command_size.to_be_bytes());
            raw.extend_from_slice(&body);
            drain(&raw);
        }

        #[test]
        fn prop_mutated_frames_never_panic(
            frame in arb_frame(),
            total_size in proptest::option::of(any::<u32>()),
            command_size in proptest::option::of(any::<u32>()),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..), 0..4),
        ) {
            let mut raw = BytesMut::new();
            PulsarCodec::new().encode(&frame, &mut raw).unwrap();
            if let Some(t) = total_size {
                raw[..4].copy_from_slice(&t.to_be_bytes());
            }
            if let Some(c) = command_size {
                raw[4..8].copy_from_slice(&c.to_be_bytes());
            }
            for (index, mask) in flips {
                let i = index.index(raw.len());
                raw[i] ^= mask;
            }
            drain(&raw);
        }
    }
}
