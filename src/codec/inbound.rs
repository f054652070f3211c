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

use super::{
    decode_body_boxed, decode_payload, sized_section, CodecError, Frame, Payload, PulsarCodec,
};
use crate::proto::{self, base_command::Type};

/// A MESSAGE command and its payload, as delivered to a consumer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageFrame {
    pub command: proto::CommandMessage,
    pub payload: Option<Payload>,
    /// The frame's size on the wire (its body): what a consumer's channel counts it by
    /// (`connection::entity_channel::message_cost`), known here for free.
    pub wire_len: usize,
}

impl MessageFrame {
    /// A MESSAGE's command and payload, boxed as the connection hands them over (its wire
    /// size unknown: 0).
    pub(crate) fn boxed(command: proto::CommandMessage, payload: Payload) -> Box<Self> {
        Box::new(MessageFrame {
            command,
            payload: Some(payload),
            wire_len: 0,
        })
    }
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
                wire_len: body.len(),
            })))
        }
        Some((ty, range)) if ty == Type::SendReceipt as i32 && cmd_end == body.len() => {
            let sub = body.slice(cmd_start + range.start..cmd_start + range.end);
            Ok(Inbound::Receipt(proto::CommandSendReceipt::decode(sub)?))
        }
        _ => decode_body_boxed(body).map(Inbound::Other),
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
    use crate::codec::{decode_body, encode_frame};

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

    /// One field of a `BaseCommand` as raw wire bytes, for the differential test: the
    /// envelope reader must agree with the full decode on every arrangement of these.
    fn field(i: usize, consumer_id: u64) -> Vec<u8> {
        use prost::encoding::{encode_key, encode_varint, message};
        let mut b = Vec::new();
        let ty = |v: u64, b: &mut Vec<u8>| {
            encode_key(1, WireType::Varint, b);
            encode_varint(v, b);
        };
        match i {
            0 => ty(Type::Message as u64, &mut b),
            1 => ty(Type::SendReceipt as u64, &mut b),
            2 => ty(Type::Ping as u64, &mut b),
            // -1 as an int32 on the wire (10 bytes), and MESSAGE in the low 32 bits of a
            // larger value.
            3 => ty(u64::MAX, &mut b),
            4 => ty((1 << 32) + Type::Message as u64, &mut b),
            5 => ty((1 << 32) + Type::SendReceipt as u64, &mut b),
            6 => {
                let m = proto::CommandMessage {
                    consumer_id,
                    message_id: proto::MessageIdData {
                        ledger_id: 1,
                        entry_id: consumer_id,
                        ..Default::default()
                    },
                    ack_set: vec![consumer_id as i64],
                    ..Default::default()
                };
                message::encode(Type::Message as u32, &m, &mut b);
            }
            7 => {
                let r = proto::CommandSendReceipt {
                    producer_id: consumer_id,
                    sequence_id: 3,
                    ..Default::default()
                };
                message::encode(Type::SendReceipt as u32, &r, &mut b);
            }
            8 => {
                let f = proto::CommandFlow {
                    consumer_id,
                    message_permits: 1,
                };
                message::encode(Type::Flow as u32, &f, &mut b);
            }
            // An unknown field; `type` with the wrong wire type; an empty MESSAGE field; a
            // MESSAGE field longer than what follows; a MESSAGE field holding garbage; a
            // field number 0.
            9 => {
                encode_key(500, WireType::Varint, &mut b);
                encode_varint(1, &mut b);
            }
            10 => {
                encode_key(1, WireType::LengthDelimited, &mut b);
                encode_varint(0, &mut b);
            }
            11 => {
                encode_key(Type::Message as u32, WireType::LengthDelimited, &mut b);
                encode_varint(0, &mut b);
            }
            12 => {
                encode_key(Type::Message as u32, WireType::LengthDelimited, &mut b);
                encode_varint(100, &mut b);
                b.extend_from_slice(&[8, 1, 16]);
            }
            13 => {
                encode_key(Type::SendReceipt as u32, WireType::LengthDelimited, &mut b);
                encode_varint(2, &mut b);
                b.extend_from_slice(&[0xff, 0xff]);
            }
            _ => b.extend_from_slice(&[0, 0]),
        }
        b
    }

    /// A payload section to put after the command: none, valid, corrupt, truncated.
    fn payload_tail(kind: usize) -> Vec<u8> {
        let body = body_of(&message_frame());
        let cmd_len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
        let mut tail = body[4 + cmd_len..].to_vec();
        match kind {
            0 => tail.clear(),
            1 => {}
            2 => *tail.last_mut().unwrap() ^= 1,
            _ => tail.truncate(5),
        }
        tail
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// Whatever the command's fields and their order, the fast path takes a frame only
        /// when the full decode gives that very MESSAGE / SEND_RECEIPT (so routing and
        /// delivery see the same); otherwise the result is the full decode's, errors
        /// included.
        #[test]
        fn the_envelope_reader_agrees_with_the_full_decode(
            fields in proptest::collection::vec((0usize..15, 0u64..4), 0..5),
            tail in 0usize..4,
        ) {
            let mut command = Vec::new();
            for (i, id) in &fields {
                command.extend(field(*i, *id));
            }
            let mut body = (command.len() as u32).to_be_bytes().to_vec();
            body.extend(command);
            body.extend(payload_tail(tail));
            let body = Bytes::from(body);
            let full = decode_body(body.clone());
            match (decode_inbound(body), full) {
                (Err(_), Err(_)) => {}
                (Ok(Inbound::Other(frame)), Ok(full)) => proptest::prop_assert_eq!(*frame, full),
                (Ok(Inbound::Message(m)), Ok(full)) => {
                    proptest::prop_assert_eq!(full.command.r#type, Type::Message as i32);
                    proptest::prop_assert_eq!(full.command.message, Some(m.command));
                    proptest::prop_assert_eq!(full.payload, m.payload);
                    proptest::prop_assert!(full.command.send_receipt.is_none());
                }
                (Ok(Inbound::Receipt(r)), Ok(full)) => {
                    proptest::prop_assert_eq!(full.command.r#type, Type::SendReceipt as i32);
                    proptest::prop_assert_eq!(full.command.send_receipt, Some(r));
                    proptest::prop_assert!(full.command.message.is_none());
                    proptest::prop_assert!(full.payload.is_none());
                }
                (fast, full) => proptest::prop_assert!(false, "fast {fast:?}, full {full:?}"),
            }
        }
    }
}
