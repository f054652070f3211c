//! Tests of the batch container (beside it, to keep that file focused).
use super::*;
use crate::codec::PulsarCodec;
use crate::message::ProducerMessage;
use prost::Message as _;
use std::time::Duration;
use tokio_util::codec::Decoder as _;

fn ctx(max_message_size: usize, compression: CompressionType) -> FrameContext {
    FrameContext {
        producer_id: 1,
        producer_name: "test-producer".into(),
        compression,
        max_message_size,
        schema_version: None,
        sealer: Default::default(),
    }
}

/// The completion of the next send of `receipts` (its receipt is dropped).
fn completion(receipts: &mut crate::producer::receipt::Receipts) -> Completion {
    Completion {
        responder: Some(receipts.next().0),
        reserved: Reservation::default(),
    }
}

fn batching(key_based: bool) -> BatchingOptions {
    BatchingOptions {
        max_messages: 1000,
        max_bytes: 64 * 1024 * 1024,
        max_publish_delay: Duration::from_secs(3600),
        key_based,
    }
}

/// Decodes an entry's SEND frame: its metadata and (uncompressed) payload.
fn decode(entry: &InFlight) -> (proto::MessageMetadata, Bytes) {
    let mut buf = bytes::BytesMut::from(&entry.encoded[..]);
    let frame = PulsarCodec::with_max_message_size(usize::MAX / 2)
        .decode(&mut buf)
        .unwrap()
        .expect("a whole frame");
    assert!(buf.is_empty());
    let payload = frame.payload.expect("SEND carries a payload");
    (payload.metadata, payload.data)
}

/// A message to add: key, ordering key, payload size.
type TestMsg<'a> = (Option<&'a str>, Option<&'a [u8]>, usize);

/// Adds messages in order and flushes.
fn run(
    ctx: &FrameContext,
    container: &mut BatchContainer,
    msgs: &[TestMsg<'_>],
) -> (Vec<InFlight>, Vec<(Error, Completion)>) {
    let mut out = Vec::new();
    let mut failed = Vec::new();
    let mut receipts = crate::producer::receipt::Receipts::default();
    for (seq, (key, ok, size)) in msgs.iter().enumerate() {
        let msg = ProducerMessage {
            payload: Bytes::from(vec![seq as u8; *size]),
            key: key.map(str::to_owned),
            ordering_key: ok.map(Bytes::copy_from_slice),
            ..Default::default()
        };
        container.add(
            ctx,
            msg.into(),
            seq as u64,
            completion(&mut receipts),
            &mut out,
            &mut failed,
        );
    }
    container.flush(ctx, &mut out, &mut failed);
    (out, failed)
}

/// Consecutive batches share one builder buffer (reused once a sent batch's bytes are
/// dropped): every batch still carries exactly its own messages.
#[test]
fn consecutive_batches_carry_their_own_messages() {
    let ctx = ctx(5 * 1024 * 1024, CompressionType::None);
    let mut c = BatchContainer::new(BatchingOptions {
        max_messages: 3,
        ..batching(false)
    });
    let sizes = [10, 300, 20, 5000, 1, 70, 900, 2, 4000, 33];
    let msgs: Vec<TestMsg<'_>> = sizes.iter().map(|n| (None, None, *n)).collect();
    let (out, failed) = run(&ctx, &mut c, &msgs);
    assert!(failed.is_empty());
    let mut seq = 0usize;
    for entry in &out {
        let (m, data) = decode(entry);
        let n = m.num_messages_in_batch.unwrap() as usize;
        assert_eq!(entry.messages(), n);
        for (single, payload) in crate::batch::parse_batch(data, n as u32).unwrap() {
            assert_eq!(single.sequence_id, Some(seq as u64));
            assert_eq!(payload, Bytes::from(vec![seq as u8; sizes[seq]]));
            seq += 1;
        }
    }
    assert_eq!(seq, sizes.len());
    assert_eq!(out.len(), 4);
}

/// A batch keeps its messages' receipts as runs of consecutive receipt slots, not one
/// responder each: a batch cut with one message (by the delay, or `flush`) holds one run, and a
/// full batch of 100 consecutive sends a run per receipt group it spans.
#[test]
fn a_batch_keeps_its_receipts_as_runs() {
    let ctx = ctx(5 * 1024 * 1024, CompressionType::None);
    let mut c = BatchContainer::new(batching(false));
    let runs = |e: &InFlight| match &e.senders {
        Senders::Batch(receipts) => receipts.runs(),
        other => panic!("a batch entry, got {other:?}"),
    };
    for _ in 0..3 {
        let (out, failed) = run(&ctx, &mut c, &[(None, None, 10)]);
        assert!(failed.is_empty());
        assert_eq!(out.len(), 1);
        assert_eq!(runs(&out[0]), 1);
    }
    let msgs: Vec<TestMsg<'_>> = (0..100).map(|_| (None, None, 10)).collect();
    let (out, _) = run(&ctx, &mut c, &msgs);
    assert_eq!(out[0].messages(), 100);
    assert!(runs(&out[0]) <= 5, "{} runs", runs(&out[0]));
}

/// The broker's Key_Shared dispatcher routes an entry by its outer metadata: a key-based
/// batch must carry its key (and ordering key) there, like Java's
/// `Commands.initBatchMessageMetadata`.
#[test]
fn key_based_batches_carry_their_key_in_the_batch_metadata() {
    let ctx = ctx(5 * 1024 * 1024, CompressionType::None);
    let mut c = BatchContainer::new(batching(true));
    let (out, failed) = run(
        &ctx,
        &mut c,
        &[
            (Some("a"), None, 10),
            (Some("b"), None, 10),
            (Some("a"), None, 10),
            (Some("b"), None, 10),
            (Some("c"), Some(b"ord"), 10),
            (Some("d"), Some(b"ord"), 10),
            (None, None, 10),
        ],
    );
    assert!(failed.is_empty());
    let got: Vec<_> = out
        .iter()
        .map(|e| {
            let (m, data) = decode(e);
            let singles =
                crate::batch::parse_batch(data, m.num_messages_in_batch.unwrap() as u32).unwrap();
            let seqs: Vec<_> = singles
                .iter()
                .map(|(s, _)| s.sequence_id.unwrap())
                .collect();
            (m.partition_key, m.ordering_key, seqs)
        })
        .collect();
    let ord = Some(Bytes::from_static(b"ord"));
    assert_eq!(
        got,
        vec![
            (Some("a".to_owned()), None, vec![0, 2]),
            (Some("b".to_owned()), None, vec![1, 3]),
            // Grouped by ordering key; the batch carries its first message's keys.
            (Some("c".to_owned()), ord.clone(), vec![4, 5]),
            (None, None, vec![6]),
        ]
    );
}

/// Default batching: like Java, the batch carries its first message's keys.
#[test]
fn a_batch_carries_its_first_messages_keys() {
    let ctx = ctx(5 * 1024 * 1024, CompressionType::None);
    let mut c = BatchContainer::new(batching(false));
    let (out, _) = run(
        &ctx,
        &mut c,
        &[(Some("x"), Some(b"o"), 1), (Some("y"), None, 1)],
    );
    assert_eq!(out.len(), 1);
    let (m, _) = decode(&out[0]);
    assert_eq!(m.partition_key.as_deref(), Some("x"));
    assert_eq!(m.ordering_key.as_deref(), Some(&b"o"[..]));
    assert_eq!(m.num_messages_in_batch, Some(2));
}

/// The size the broker checks: metadata plus (compressed) payload.
fn broker_size(e: &InFlight) -> usize {
    let (m, data) = decode(e);
    m.encoded_len() + data.len()
}

#[test]
fn batches_are_bounded_by_the_brokers_max_message_size() {
    let max = 64 * 1024;
    let ctx = ctx(max, CompressionType::None);
    let mut c = BatchContainer::new(batching(false));
    let (out, failed) = run(&ctx, &mut c, &[(None, None, 30 * 1024); 4]);
    assert!(
        failed.is_empty(),
        "{:?}",
        failed.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    // Two messages per batch: a third would be over the limit.
    let ranges: Vec<_> = out.iter().map(|e| (e.first_seq, e.last_seq)).collect();
    assert_eq!(ranges, vec![(0, 1), (2, 3)]);
    for e in &out {
        assert!(broker_size(e) <= max, "{}", broker_size(e));
    }
}

#[test]
fn a_message_too_big_for_any_batch_fails_alone() {
    let max = 64 * 1024;
    let ctx = ctx(max, CompressionType::None);
    let mut c = BatchContainer::new(batching(true));
    let (out, failed) = run(
        &ctx,
        &mut c,
        &[
            (Some("a"), None, 100),
            (Some("b"), None, 100),
            (Some("a"), None, 70 * 1024),
            (Some("a"), None, 100),
            // Under the limit by its payload, over it with its metadata in a batch: sent
            // alone, where it fits without the batch's per-message record.
            (Some("b"), None, max - 40),
        ],
    );
    assert_eq!(failed.len(), 1);
    match &failed[0].0 {
        Error::MessageTooBig { size, max: m } => {
            assert!((70 * 1024..70 * 1024 + 100).contains(size), "{size}");
            assert_eq!(*m, max);
            let text = failed[0].0.to_string();
            assert!(text.contains(&size.to_string()) && text.contains(&max.to_string()));
            assert!(!failed[0].0.is_retriable());
        }
        other => panic!("expected MessageTooBig, got {other:?}"),
    }
    // The batches opened before it went first, in sequence order; then what followed it.
    let ranges: Vec<_> = out
        .iter()
        .map(|e| (e.first_seq, e.last_seq, e.is_batch()))
        .collect();
    assert_eq!(
        ranges,
        vec![(0, 0, true), (1, 1, true), (3, 3, true), (4, 4, false)]
    );
    for e in &out {
        assert!(broker_size(e) <= max);
    }
}

/// Sizes across the limit, with keys and properties: no entry is ever over it, no message
/// that fits on its own fails, and the metadata bound holds.
#[test]
fn no_entry_exceeds_the_limit() {
    for compression in [CompressionType::None, CompressionType::Lz4] {
        for max in [1024, 4096, 64 * 1024] {
            let ctx = ctx(max, compression);
            let mut c = BatchContainer::new(batching(false));
            let key = "k".repeat(100);
            let sizes: Vec<usize> = (0..200).map(|i| (i * 7919) % (max + 50)).collect();
            let mut out = Vec::new();
            let mut failed = Vec::new();
            let mut receipts = crate::producer::receipt::Receipts::default();
            for (seq, size) in sizes.iter().enumerate() {
                // Incompressible payloads, so compression cannot hide an overflow.
                let payload: Vec<u8> = (0..*size)
                    .map(|i| {
                        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()[0] ^ seq as u8
                    })
                    .collect();
                let mut msg = ProducerMessage::new(payload).key(key.as_str());
                msg.properties.insert("p".into(), "v".repeat(seq % 20));
                let bound = c.open.first().map(|b| b.metadata_bound);
                c.add(
                    &ctx,
                    msg.into(),
                    seq as u64,
                    completion(&mut receipts),
                    &mut out,
                    &mut failed,
                );
                if let Some(bound) = bound {
                    for e in out.iter().filter(|e| e.is_batch()) {
                        assert!(decode(e).0.encoded_len() <= bound);
                    }
                }
            }
            c.flush(&ctx, &mut out, &mut failed);
            for e in &out {
                assert!(
                    broker_size(e) <= max,
                    "{compression:?} {max}: {}",
                    broker_size(e)
                );
            }
            for (e, _) in &failed {
                let Error::MessageTooBig { size, .. } = e else {
                    panic!("{e:?}");
                };
                assert!(*size > max);
            }
            let sent: usize = out.iter().map(|e| e.messages()).sum();
            assert_eq!(sent + failed.len(), sizes.len());
        }
    }
}

/// What a batch's messages hold goes back exactly once whichever way the batch ends: sent
/// (with its entry), failed (through its messages' completions, before the first completes),
/// or dropped open (its task ended without flushing it).
#[test]
fn what_a_batch_holds_goes_back_once_however_it_ends() {
    use crate::producer::limits::Limits;
    use std::sync::Arc;
    let limits = Arc::new(Limits {
        memory: Arc::new(tokio::sync::Semaphore::new(1000)),
        slots: None,
        consumers: None,
    });
    let mut receipts = crate::producer::receipt::Receipts::new(-1, limits.clone());
    let mut add = |container: &mut BatchContainer, seq: u64, ctx: &FrameContext| {
        let held = Reservation::of(limits.memory.try_acquire_many(100).unwrap(), None);
        let (responder, receipt) = receipts.next();
        let completion = Completion {
            reserved: held,
            responder: Some(responder),
        };
        let msg = ProducerMessage::new(vec![1u8; 10]).into();
        let (mut out, mut failed) = (Vec::new(), Vec::new());
        container.add(ctx, msg, seq, completion, &mut out, &mut failed);
        assert!(out.is_empty() && failed.is_empty());
        receipt
    };
    let free = || limits.memory.available_permits();
    let big = ctx(1 << 20, CompressionType::None);
    // Sent: the entry holds it all.
    let mut container = BatchContainer::new(batching(false));
    for seq in 0..3 {
        drop(add(&mut container, seq, &big));
    }
    assert_eq!(free(), 700);
    let (mut out, mut failed) = (Vec::new(), Vec::new());
    container.flush(&big, &mut out, &mut failed);
    assert_eq!(out[0].reserved.memory, 300);
    limits.release(out.remove(0).reserved);
    assert_eq!(free(), 1000);
    // Failed: the broker's limit shrank while it was open.
    let receipts_of_failed: Vec<_> = (0..3).map(|seq| add(&mut container, seq, &big)).collect();
    assert_eq!(free(), 700);
    container.flush(&ctx(64, CompressionType::None), &mut out, &mut failed);
    assert!(out.is_empty());
    assert_eq!(failed.len(), 3);
    for (e, completion) in failed.drain(..) {
        completion.complete(Err(e));
        assert_eq!(free(), 1000, "given back before the first send completes");
    }
    for mut receipt in receipts_of_failed {
        assert!(matches!(receipt.try_result(), Some(Err(_))));
    }
    // Dropped open.
    for seq in 0..2 {
        drop(add(&mut container, seq, &big));
    }
    assert_eq!(free(), 800);
    drop(container);
    assert_eq!(free(), 1000);
}
