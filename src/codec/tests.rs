//! Codec tests: round trips, optional sections, hostile input (unit and property tests).
// `..Default::default()` keeps the tests independent of which fields the generated types have.
#![allow(clippy::needless_update)]
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
    let expected = raw_payload_frame(&frame.command, None, true, &payload.metadata, &payload.data);
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
            proto::BrokerEntryMetadata::decode(dp.broker_entry_metadata.clone().unwrap()).unwrap();
        assert_eq!(parsed.index, Some(456));
        // Re-encoding keeps the section, with a checksum.
        let reencoded = encode(&decoded[0]);
        let expected = raw_payload_frame(&frame.command, Some(&bem), true, &p.metadata, &p.data);
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

/// Issue #31: a large frame's payload is a slice of the read buffer it arrived in, so the
/// buffer lives as long as the message is queued. Grown by doubling as the frame arrived, the
/// buffer of a 1 MiB message (a few bytes over a power of two) was 2 MiB: a consumer holding
/// its budget and the bytes beyond its permits in such messages held twice what it counted (a
/// hostile test's heap peaked at 50-72 MiB for a 16 MiB limit). Read the way `FramedRead`
/// reads (into the spare room, one more byte reserved when full), the buffer holding the
/// whole frame is now its size, give or take the last chunk's doubling (at most two read
/// chunks over); and a header alone still reserves no more than a chunk.
#[test]
fn a_large_frame_arrives_in_a_buffer_of_its_own_size() {
    for size in [1 << 20, (1 << 20) + (1 << 16), 3 << 20] {
        let frame = Frame::with_payload(
            send_command(1, 1),
            metadata("p", 1),
            Bytes::from(vec![7u8; size]),
        );
        let wire = encode(&frame);
        let mut codec = PulsarCodec::new();
        let mut buf = BytesMut::new();
        let mut sent = 0;
        let (decoded, held) = loop {
            let held = buf.capacity();
            if let Some(f) = codec.decode(&mut buf).unwrap() {
                break (f, held);
            }
            if sent == 4 {
                assert!(buf.capacity() <= 4 + READ_CHUNK, "{}", buf.capacity());
            }
            if buf.len() == buf.capacity() {
                buf.reserve(1);
            }
            // What one read brings: at most the spare room, and at most 4 bytes at first
            // (the header alone), then 16 KiB.
            let n = (buf.capacity() - buf.len())
                .min(if sent == 0 { 4 } else { 16 * 1024 })
                .min(wire.len() - sent);
            buf.extend_from_slice(&wire[sent..sent + n]);
            sent += n;
        };
        assert_eq!(decoded, frame);
        assert!(
            held <= wire.len() + 2 * READ_CHUNK,
            "the frame's buffer held {held} bytes for a frame of {}",
            wire.len()
        );
    }
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

proptest! {
    /// The hand-written SEND envelope gives the very bytes of the whole `BaseCommand`'s
    /// encoding, whatever the SEND's fields.
    #[test]
    fn encode_send_equals_encoding_the_whole_base_command(
        producer_id in any::<u64>(),
        sequence_id in any::<u64>(),
        highest in proptest::option::of(any::<u64>()),
        num_messages in proptest::option::of(any::<i32>()),
        is_chunk in proptest::option::of(any::<bool>()),
        // Across the size where a frame's buffer changes (see `codec::send`).
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        txnid in proptest::option::of((any::<u64>(), any::<u64>())),
        marker in proptest::option::of(any::<bool>()),
        message_id in proptest::option::of((any::<u64>(), any::<u64>(), any::<i32>())),
    ) {
        let send = proto::CommandSend {
            producer_id,
            sequence_id,
            num_messages,
            highest_sequence_id: highest,
            is_chunk,
            txnid_least_bits: txnid.map(|t| t.0),
            txnid_most_bits: txnid.map(|t| t.1),
            marker,
            message_id: message_id.map(|(ledger_id, entry_id, batch)| proto::MessageIdData {
                ledger_id,
                entry_id,
                batch_index: Some(batch),
                ..Default::default()
            }),
        };
        let whole = Frame::with_payload(
            proto::BaseCommand {
                r#type: Type::Send as i32,
                send: Some(send.clone()),
                ..Default::default()
            },
            metadata("p", sequence_id),
            Bytes::from(data),
        );
        let fast = encode_send(&send, whole.payload.as_ref().unwrap(), 1 << 20).unwrap();
        prop_assert_eq!(&fast[..], &encode(&whole)[..]);
        prop_assert_eq!(&fast.to_bytes()[..], &encode(&whole)[..]);
    }
}

#[test]
fn encode_send_refuses_a_frame_over_the_limit() {
    let payload = Payload {
        broker_entry_metadata: None,
        metadata: metadata("p", 1),
        data: Bytes::from(vec![0u8; 2048]),
    };
    let send = proto::CommandSend::default();
    assert!(matches!(
        encode_send(&send, &payload, 1024),
        Err(CodecError::FrameTooLarge { .. })
    ));
}
