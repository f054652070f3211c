//! Unit tests of [`crate::batch`].

use super::*;
use proptest::prelude::*;

fn kv(k: &str, v: &str) -> proto::KeyValue {
    proto::KeyValue {
        key: k.into(),
        value: v.into(),
    }
}

/// The prost message equivalent to `f` + `payload_size`.
fn as_proto(f: &SingleMessageFields<'_>, payload_size: i32) -> proto::SingleMessageMetadata {
    proto::SingleMessageMetadata {
        properties: f.properties.to_vec(),
        partition_key: f.partition_key.map(str::to_owned),
        payload_size,
        compacted_out: f.compacted_out.then_some(true),
        event_time: f.event_time,
        partition_key_b64_encoded: f.partition_key_b64_encoded.then_some(true),
        ordering_key: f.ordering_key.map(Bytes::copy_from_slice),
        sequence_id: f.sequence_id,
        null_value: f.null_value.then_some(true),
        null_partition_key: f.null_partition_key.then_some(true),
    }
}

/// A plain message's record is the general encoder's for the same two fields.
#[test]
fn a_plain_record_is_the_general_record() {
    let values = [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX];
    for len in [0usize, 1, 100, 127, 128, 16_384] {
        let payload = vec![7u8; len];
        for seq in values {
            let f = SingleMessageFields {
                sequence_id: Some(seq),
                ..Default::default()
            };
            let (mut general, mut plain) = (BatchBuilder::new(), BatchBuilder::new());
            general.push(&f, &payload);
            plain.push_plain(&payload, seq);
            assert_eq!(plain.len(), 1);
            assert_eq!(plain.take(), general.take(), "{len} {seq}");
            assert_eq!(
                BatchBuilder::plain_metadata_len(len, seq),
                BatchBuilder::metadata_len(&f, len)
            );
        }
    }
    // Clamped like the general size for a payload the protocol cannot carry.
    let f = SingleMessageFields {
        sequence_id: Some(9),
        ..Default::default()
    };
    assert_eq!(
        BatchBuilder::plain_metadata_len(usize::MAX, 9),
        BatchBuilder::metadata_len(&f, usize::MAX)
    );
}

#[test]
fn varint_len_matches_prost() {
    for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
        assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v), "{v}");
    }
}

#[test]
fn layout_matches_the_upstream_format() {
    let mut b = BatchBuilder::new();
    let props = [kv("a", "1")];
    let f = SingleMessageFields {
        properties: &props,
        partition_key: Some("k"),
        sequence_id: Some(7),
        ..Default::default()
    };
    b.push(&f, b"hello");
    b.push(&SingleMessageFields::default(), b"");
    assert_eq!(b.len(), 2);
    let bytes = b.take();
    let m1 = as_proto(&f, 5).encode_to_vec();
    let m2 = as_proto(&SingleMessageFields::default(), 0).encode_to_vec();
    let mut expected = Vec::new();
    expected.extend_from_slice(&(m1.len() as u32).to_be_bytes());
    expected.extend_from_slice(&m1);
    expected.extend_from_slice(b"hello");
    expected.extend_from_slice(&(m2.len() as u32).to_be_bytes());
    expected.extend_from_slice(&m2);
    assert_eq!(&bytes[..], &expected[..]);
    // The second record's metadata is just `payload_size = 0`.
    assert_eq!(m2, [0x18, 0x00]);
    assert!(b.is_empty());
    assert_eq!(b.size_bytes(), 0);
}

#[test]
fn builder_reuse_and_sizes() {
    let mut b = BatchBuilder::new();
    let meta = proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id: 42,
        publish_time: 1,
        partition_key: Some("key".into()),
        ordering_key: Some(Bytes::from_static(b"ok")),
        event_time: Some(99),
        properties: vec![kv("x", "y")],
        null_value: Some(true),
        ..Default::default()
    };
    let f = SingleMessageFields {
        properties: &meta.properties,
        partition_key: meta.partition_key.as_deref(),
        event_time: meta.event_time,
        ordering_key: meta.ordering_key.as_deref(),
        sequence_id: Some(meta.sequence_id),
        null_value: true,
        ..Default::default()
    };
    b.push(&f, b"abc");
    let meta_len = single_metadata_len(&f, 3);
    assert_eq!(b.size_bytes(), 4 + meta_len + 3);
    let first = b.take();
    b.push(&f, b"abc");
    let second = b.take();
    assert_eq!(first, second);
    let parsed = parse_batch(first, 1).unwrap();
    let (m, p) = &parsed[0];
    assert_eq!(&p[..], b"abc");
    assert_eq!(m.sequence_id, Some(42));
    assert_eq!(m.partition_key.as_deref(), Some("key"));
    assert_eq!(m.ordering_key.as_deref(), Some(&b"ok"[..]));
    assert_eq!(m.event_time, Some(99));
    assert_eq!(m.null_value, Some(true));
    assert_eq!(m.properties, vec![kv("x", "y")]);
}

#[test]
fn parses_a_batch_built_by_prost_like_java() {
    // Build the payload the way Java does: writeInt(size), metadata.writeTo, payload.
    let mut raw = Vec::new();
    for (i, body) in [&b"one"[..], b"", b"three"].iter().enumerate() {
        let m = proto::SingleMessageMetadata {
            payload_size: body.len() as i32,
            sequence_id: Some(i as u64),
            ..Default::default()
        };
        let enc = m.encode_to_vec();
        raw.extend_from_slice(&(enc.len() as u32).to_be_bytes());
        raw.extend_from_slice(&enc);
        raw.extend_from_slice(body);
    }
    let raw = Bytes::from(raw);
    let parsed = parse_batch(raw.clone(), 3).unwrap();
    let bodies: Vec<&[u8]> = parsed.iter().map(|(_, b)| &b[..]).collect();
    assert_eq!(bodies, [&b"one"[..], b"", b"three"]);
    // Zero-copy: the payload slices point into the original buffer.
    let base = raw.as_ptr() as usize;
    let p = parsed[2].1.as_ptr() as usize;
    assert!(p >= base && p < base + raw.len());
    // Fewer messages than the payload holds: the rest is ignored.
    assert_eq!(parse_batch(raw.clone(), 2).unwrap().len(), 2);
    // More than it holds: error.
    assert!(matches!(
        parse_batch(raw.clone(), 4),
        Err(Error::Protocol(_))
    ));
    assert!(parse_batch(raw, 0).unwrap().is_empty());
}

#[test]
fn lying_sizes_are_errors() {
    let mut b = BatchBuilder::new();
    b.push(&SingleMessageFields::default(), b"payload");
    let good = b.take();
    // Truncated anywhere: error.
    for cut in 0..good.len() {
        assert!(parse_batch(good.slice(..cut), 1).is_err(), "cut at {cut}");
    }
    // Metadata size pointing past the end.
    let mut bad = good.to_vec();
    bad[..4].copy_from_slice(&1000u32.to_be_bytes());
    assert!(parse_batch(Bytes::from(bad), 1).is_err());
    // Payload size larger than what is left.
    let m = proto::SingleMessageMetadata {
        payload_size: 100,
        ..Default::default()
    }
    .encode_to_vec();
    let mut bad = (m.len() as u32).to_be_bytes().to_vec();
    bad.extend_from_slice(&m);
    bad.extend_from_slice(b"short");
    assert!(parse_batch(Bytes::from(bad), 1).is_err());
    // Negative payload size.
    let m = proto::SingleMessageMetadata {
        payload_size: -1,
        ..Default::default()
    }
    .encode_to_vec();
    let mut bad = (m.len() as u32).to_be_bytes().to_vec();
    bad.extend_from_slice(&m);
    assert!(parse_batch(Bytes::from(bad), 1).is_err());
    // A huge count on a tiny payload fails without allocating for it.
    assert!(parse_batch(Bytes::from_static(&[0, 0, 0, 0]), u32::MAX).is_err());
}

#[test]
fn a_record_takes_at_least_four_bytes() {
    // prost does not enforce the required `payload_size`: an empty metadata is a record.
    let zeros = Bytes::from(vec![0u8; 40]);
    let parsed = parse_batch(zeros.clone(), 10).unwrap();
    assert_eq!(parsed.len(), 10);
    assert!(parsed
        .iter()
        .all(|(m, b)| m.payload_size == 0 && b.is_empty()));
    // One more than the bytes can hold is refused before reading any record.
    assert!(matches!(
        BatchRecords::new(zeros.clone(), 11),
        Err(Error::Protocol(_))
    ));
    // Records are read one at a time: taking two reads two.
    let mut records = BatchRecords::new(zeros, 10).unwrap();
    assert_eq!(records.by_ref().take(2).count(), 2);
    assert_eq!(records.size_hint(), (0, Some(8)));
}

/// properties, partition key, ordering key, event time, sequence id, flags, payload.
type ArbFields = (
    Vec<(String, String)>,
    Option<String>,
    Option<Vec<u8>>,
    Option<u64>,
    Option<u64>,
    [bool; 4],
    Vec<u8>,
);

fn arb_fields() -> impl Strategy<Value = ArbFields> {
    (
        proptest::collection::vec((".{0,8}", ".{0,200}"), 0..4),
        proptest::option::of(".{0,40}"),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        any::<[bool; 4]>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #[test]
    fn round_trip_and_prost_equivalence(
        msgs in proptest::collection::vec(arb_fields(), 0..8)
    ) {
        let mut b = BatchBuilder::new();
        let mut expected = Vec::new();
        for (props, key, ok, et, seq, flags, body) in &msgs {
            let props: Vec<proto::KeyValue> =
                props.iter().map(|(k, v)| kv(k, v)).collect();
            let f = SingleMessageFields {
                properties: &props,
                partition_key: key.as_deref(),
                compacted_out: flags[0],
                event_time: *et,
                partition_key_b64_encoded: flags[1],
                ordering_key: ok.as_deref(),
                sequence_id: *seq,
                null_value: flags[2],
                null_partition_key: flags[3],
            };
            let before = b.size_bytes();
            b.push(&f, body);
            prop_assert_eq!(b.size_bytes() - before, 4 + single_metadata_len(&f, body.len() as i32) + body.len());
            prop_assert_eq!(b.size_bytes() - before, BatchBuilder::record_len(&f, body.len()));
            let m = as_proto(&f, body.len() as i32);
            // Borrowing the prost message's fields encodes the same record.
            let mut b2 = BatchBuilder::new();
            b2.push(&SingleMessageFields::from(&m), body);
            prop_assert_eq!(&b2.take()[..], &b.buf[before..]);
            // Byte-identical to prost's encoding of the same message.
            let enc = m.encode_to_vec();
            let rec = &b.buf[before + 4..before + 4 + enc.len()];
            prop_assert_eq!(rec, &enc[..]);
            expected.push((m, body.clone()));
        }
        prop_assert_eq!(b.len() as usize, msgs.len());
        let parsed = parse_batch(b.take(), msgs.len() as u32).unwrap();
        prop_assert_eq!(parsed.len(), expected.len());
        for ((m, p), (em, eb)) in parsed.iter().zip(&expected) {
            prop_assert_eq!(m, em);
            prop_assert_eq!(&p[..], &eb[..]);
        }
    }

    #[test]
    fn single_metadata_decodes_like_prost(
        fields in proptest::collection::vec(
            (1u32..12, any::<bool>(), any::<u64>(), 0u32..8,
             proptest::collection::vec(any::<u8>(), 0..12)),
            0..8,
        ),
        garbage in proptest::collection::vec(any::<u8>(), 0..24),
        cut in any::<proptest::sample::Index>(),
    ) {
        // Well-formed fields of every tag (varint or length-delimited, short and long
        // varints, strings that may not be UTF-8), then the same cut short, then garbage.
        let mut buf = Vec::new();
        for (tag, delimited, v, shift, bytes) in &fields {
            if *delimited {
                prost::encoding::encode_key(*tag, prost::encoding::WireType::LengthDelimited, &mut buf);
                prost::encoding::encode_varint(bytes.len() as u64, &mut buf);
                buf.extend_from_slice(bytes);
            } else {
                prost::encoding::encode_key(*tag, prost::encoding::WireType::Varint, &mut buf);
                prost::encoding::encode_varint(v >> (shift * 8), &mut buf);
            }
        }
        let cut = cut.index(buf.len() + 1);
        for data in [buf.clone(), buf[..cut].to_vec(), garbage] {
            let bytes = Bytes::from(data);
            let mut meta = proto::SingleMessageMetadata::default();
            let ours = decode_single_meta(&bytes, bytes.len(), &mut meta).map(|()| meta);
            let theirs = proto::SingleMessageMetadata::decode(bytes.clone());
            match (ours, theirs) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(_), Err(_)) => {}
                (a, b) => prop_assert!(false, "ours {:?}, prost {:?}", a, b),
            }
        }
    }

    #[test]
    fn garbage_never_panics(
        data in proptest::collection::vec(any::<u8>(), 0..512),
        count in any::<u32>(),
    ) {
        let _ = parse_batch(Bytes::from(data), count);
    }
}
