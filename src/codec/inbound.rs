//! The client's inbound decoder: frames in the shape the connection routes them.
//!
//! A `BaseCommand` holds every command type as an inline field (about 6 KB); decoding each
//! inbound frame into one, then moving it through the reader, the connection task and an
//! entity channel, cost far more than the message it carried. MESSAGE and SEND_RECEIPT, the
//! two commands that come once per message, are decoded straight into their own (small)
//! types here, without the envelope; every other command is decoded whole and boxed.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use prost::encoding::{decode_key, decode_varint, WireType};
use prost::Message;
use tokio_util::codec::Decoder;

use super::{decode_body, decode_payload, sized_section, CodecError, Frame, Payload, PulsarCodec};
use crate::proto::{self, base_command::Type};

/// A MESSAGE command and its payload, as delivered to a consumer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageFrame {
    pub command: proto::CommandMessage,
    pub payload: Option<Payload>,
}

/// One decoded inbound frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inbound {
    /// A MESSAGE (boxed: the payload's metadata is several hundred bytes, and a consumer may
    /// hold thousands of them in its channel).
    Message(Box<MessageFrame>),
    /// A SEND_RECEIPT.
    Receipt(proto::CommandSendReceipt),
    /// Any other frame, whole.
    Other(Box<Frame>),
}

/// Decodes [`Inbound`] frames; the size limits are [`PulsarCodec`]'s.
#[derive(Debug, Clone)]
pub(crate) struct InboundCodec(pub PulsarCodec);

impl Decoder for InboundCodec {
    type Item = Inbound;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, CodecError> {
        match self.0.next_body(src)? {
            Some(body) => decode_inbound(body).map(Some),
            None => Ok(None),
        }
    }
}

/// Decodes a frame's body (everything after its `total_size` field).
pub(crate) fn decode_inbound(body: Bytes) -> Result<Inbound, CodecError> {
    let (cmd_start, cmd_end) = sized_section(&body, 0, "command")?;
    let command = &body[cmd_start..cmd_end];
    match envelope(command) {
        Some((ty, range)) if ty == Type::Message as i32 => {
            let sub = body.slice(cmd_start + range.start..cmd_start + range.end);
            Ok(Inbound::Message(Box::new(MessageFrame {
                command: proto::CommandMessage::decode(sub)?,
                payload: decode_payload(&body, cmd_end)?,
            })))
        }
        Some((ty, range)) if ty == Type::SendReceipt as i32 && cmd_end == body.len() => {
            let sub = body.slice(cmd_start + range.start..cmd_start + range.end);
            Ok(Inbound::Receipt(proto::CommandSendReceipt::decode(sub)?))
        }
        _ => decode_body(body).map(|frame| Inbound::Other(Box::new(frame))),
    }
}

/// Reads a `BaseCommand` made of exactly its `type` and the one field of that type (what
/// every broker sends for MESSAGE and SEND_RECEIPT): returns the type and where the field's
/// bytes are. `None` for anything else (another field, a repeated one, a malformed one): that
/// frame takes the full decode, which then decides exactly as before.
fn envelope(command: &[u8]) -> Option<(i32, Range<usize>)> {
    const MESSAGE: u32 = Type::Message as u32;
    const SEND_RECEIPT: u32 = Type::SendReceipt as u32;
    let mut buf = command;
    let mut ty = None;
    let mut field: Option<(u32, Range<usize>)> = None;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        match (tag, wire_type) {
            (1, WireType::Varint) if ty.is_none() => {
                // An int32 enum on the wire: prost keeps its low 32 bits, and so do we.
                ty = Some(decode_varint(&mut buf).ok()? as i32);
            }
            (MESSAGE | SEND_RECEIPT, WireType::LengthDelimited) if field.is_none() => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                if len > buf.len() {
                    return None;
                }
                let start = command.len() - buf.len();
                field = Some((tag, start..start + len));
                buf = &buf[len..];
            }
            _ => return None,
        }
    }
    let ty = ty?;
    let (tag, range) = field?;
    (u32::try_from(ty).ok() == Some(tag)).then_some((ty, range))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_frame;

    fn body_of(frame: &Frame) -> Bytes {
        let mut buf = BytesMut::new();
        encode_frame(frame, &mut buf, 1 << 20).unwrap();
        buf.freeze().slice(4..)
    }

    fn message_frame() -> Frame {
        let mut command = proto::BaseCommand {
            r#type: Type::Message as i32,
            ..Default::default()
        };
        command.message = Some(proto::CommandMessage {
            consumer_id: 7,
            message_id: proto::MessageIdData {
                ledger_id: 3,
                entry_id: 4,
                ..Default::default()
            },
            redelivery_count: Some(2),
            ack_set: vec![1, 2],
            ..Default::default()
        });
        let metadata = proto::MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 9,
            publish_time: 10,
            ..Default::default()
        };
        Frame::with_payload(command, metadata, Bytes::from_static(b"hello"))
    }

    fn receipt_frame() -> Frame {
        let mut command = proto::BaseCommand {
            r#type: Type::SendReceipt as i32,
            ..Default::default()
        };
        command.send_receipt = Some(proto::CommandSendReceipt {
            producer_id: 1,
            sequence_id: 5,
            message_id: Some(proto::MessageIdData {
                ledger_id: 3,
                entry_id: 4,
                ..Default::default()
            }),
            highest_sequence_id: Some(6),
        });
        Frame::simple(command)
    }

    #[test]
    fn a_message_is_decoded_without_its_envelope_and_equals_the_full_decode() {
        let frame = message_frame();
        let Inbound::Message(m) = decode_inbound(body_of(&frame)).unwrap() else {
            panic!("not the message path");
        };
        assert_eq!(Some(m.command), frame.command.message);
        assert_eq!(m.payload, frame.payload);
    }

    #[test]
    fn a_receipt_is_decoded_without_its_envelope_and_equals_the_full_decode() {
        let frame = receipt_frame();
        let Inbound::Receipt(r) = decode_inbound(body_of(&frame)).unwrap() else {
            panic!("not the receipt path");
        };
        assert_eq!(Some(r), frame.command.send_receipt);
    }

    #[test]
    fn anything_else_is_decoded_whole() {
        // Another command; a MESSAGE with a second field; a type that names another field
        // than the one present; a receipt followed by a payload.
        let ping = Frame::simple(crate::commands::ping());
        let mut extra = message_frame();
        extra.command.flow = Some(proto::CommandFlow {
            consumer_id: 7,
            message_permits: 1,
        });
        let mut mislabelled = receipt_frame();
        mislabelled.command.r#type = Type::Message as i32;
        let mut with_payload = receipt_frame();
        with_payload.payload = message_frame().payload;
        for frame in [ping, extra, mislabelled, with_payload] {
            assert_eq!(
                decode_inbound(body_of(&frame)).unwrap(),
                Inbound::Other(Box::new(frame.clone())),
                "{frame:?}"
            );
        }
    }

    #[test]
    fn a_corrupt_message_payload_is_still_refused() {
        let mut body = body_of(&message_frame()).to_vec();
        let last = body.len() - 1;
        body[last] ^= 1;
        assert!(matches!(
            decode_inbound(Bytes::from(body)),
            Err(CodecError::Checksum { .. })
        ));
    }

    #[test]
    fn the_codec_applies_the_frame_size_limit_and_waits_for_whole_frames() {
        let mut codec = InboundCodec(PulsarCodec::new());
        let mut buf = BytesMut::new();
        encode_frame(&receipt_frame(), &mut buf, 1 << 20).unwrap();
        let whole = buf.split().freeze();
        buf.extend_from_slice(&whole[..whole.len() - 1]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(&whole[whole.len() - 1..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Ok(Some(Inbound::Receipt(_)))
        ));
        buf.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            codec.decode(&mut buf),
            Err(CodecError::FrameTooLarge { .. })
        ));
    }
}
