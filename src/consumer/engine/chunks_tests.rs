use super::*;

fn limits() -> ChunkLimits {
    ChunkLimits {
        max_pending: 2,
        auto_ack_oldest: false,
        expire: Duration::from_secs(60),
        max_bytes: 1000,
    }
}

fn header(uuid: &str, chunk_id: i32, num_chunks: i32, total: i32) -> ChunkHeader {
    ChunkHeader {
        uuid: uuid.into(),
        chunk_id,
        num_chunks,
        total_size: total,
        publish_time: now_millis(),
    }
}

fn id(entry: u64) -> MessageId {
    MessageId::new(1, entry, -1)
}

#[test]
fn assembles_in_order_and_spans_first_to_last() {
    let mut a = ChunkAssembler::new(limits());
    let now = Instant::now();
    assert!(a
        .add(&header("u", 0, 3, 6), id(1), Bytes::from_static(b"ab"), now)
        .complete
        .is_none());
    assert!(a
        .add(&header("u", 1, 3, 6), id(2), Bytes::from_static(b"cd"), now)
        .complete
        .is_none());
    let out = a.add(&header("u", 2, 3, 6), id(3), Bytes::from_static(b"ef"), now);
    let (data, whole, _) = out.complete.unwrap();
    assert_eq!(&data[..], b"abcdef");
    assert_eq!(whole, id(3));
    assert_eq!(whole.first_chunk_id(), Some(id(1)));
    assert_eq!(a.pending(), 0);
    assert_eq!(a.claimed(), 0);
}

#[test]
fn eviction_and_expiry_leave_no_index_behind() {
    let mut a = ChunkAssembler::new(limits());
    let now = Instant::now();
    a.add(&header("a", 0, 2, 4), id(1), Bytes::from_static(b"ab"), now);
    a.add(&header("b", 0, 2, 4), id(2), Bytes::from_static(b"ab"), now);
    let out = a.add(&header("c", 0, 2, 4), id(3), Bytes::from_static(b"ab"), now);
    assert_eq!(out.redeliver, vec![id(1)], "oldest evicted, given back");
    assert_eq!(a.pending(), 2);
    assert_eq!(a.order.len(), 2);
    assert_eq!(a.claimed(), 8);
    // The evicted one's next chunk is an orphan: given back, no context created.
    let out = a.add(&header("a", 1, 2, 4), id(4), Bytes::from_static(b"cd"), now);
    assert_eq!(out.unassembled, vec![id(4)]);
    assert_eq!(a.pending(), 2);
    let out = a.expire(now + Duration::from_secs(61));
    assert_eq!(out.ack, vec![id(2), id(3)]);
    assert_eq!(a.pending(), 0);
    assert!(a.order.is_empty());
    assert_eq!(a.claimed(), 0);
    assert!(a.next_expiry().is_none());
}

#[test]
fn completion_at_the_expiry_instant_wins_once() {
    // apache/pulsar#26084: the task either completes or expires a context, never both.
    let mut a = ChunkAssembler::new(limits());
    let t0 = Instant::now();
    a.add(&header("u", 0, 2, 4), id(1), Bytes::from_static(b"ab"), t0);
    let at = a.next_expiry().unwrap();
    let out = a.add(&header("u", 1, 2, 4), id(2), Bytes::from_static(b"cd"), at);
    assert!(out.complete.is_some());
    assert!(a.expire(at).ack.is_empty());
}

#[test]
fn huge_claims_are_refused_without_allocating() {
    let mut a = ChunkAssembler::new(limits());
    let now = Instant::now();
    let out = a.add(
        &header("u", 0, 3, i32::MAX),
        id(1),
        Bytes::from_static(b"ab"),
        now,
    );
    assert!(matches!(out.error, Some(Error::InvalidMessage(_))));
    assert_eq!(out.ack, vec![id(1)]);
    assert_eq!(a.pending(), 0);
    // Its later chunks are dropped (acked) too, with no new error.
    let out = a.add(
        &header("u", 1, 3, i32::MAX),
        id(2),
        Bytes::from_static(b"ab"),
        now,
    );
    assert_eq!(out.ack, vec![id(2)]);
    assert!(out.error.is_none());
    // Chunks longer than claimed.
    let out = a.add(
        &header("v", 0, 2, 3),
        id(3),
        Bytes::from_static(b"abcd"),
        now,
    );
    assert!(out.error.is_some());
    assert_eq!(a.pending(), 0);
    assert_eq!(a.claimed(), 0);
}

#[test]
fn duplicates_are_filtered_and_acked_when_other_entries() {
    let mut a = ChunkAssembler::new(limits());
    let now = Instant::now();
    a.add(&header("u", 0, 3, 6), id(1), Bytes::from_static(b"ab"), now);
    a.add(&header("u", 1, 3, 6), id(2), Bytes::from_static(b"cd"), now);
    // The same entry redelivered: ignored, not acked.
    assert!(a
        .add(&header("u", 1, 3, 6), id(2), Bytes::from_static(b"cd"), now)
        .ack
        .is_empty());
    // A producer's duplicate (another entry): acked (#21101).
    assert_eq!(
        a.add(&header("u", 1, 3, 6), id(9), Bytes::from_static(b"cd"), now)
            .ack,
        vec![id(9)]
    );
    let (data, _, _) = a
        .add(&header("u", 2, 3, 6), id(3), Bytes::from_static(b"ef"), now)
        .complete
        .unwrap();
    assert_eq!(&data[..], b"abcdef");
}

#[test]
fn a_resent_first_chunk_starts_over_and_acks_the_old_one() {
    // apache/pulsar#21070 + #21101.
    let mut a = ChunkAssembler::new(limits());
    let now = Instant::now();
    a.add(&header("u", 0, 2, 4), id(1), Bytes::from_static(b"ab"), now);
    let out = a.add(&header("u", 0, 2, 4), id(2), Bytes::from_static(b"ab"), now);
    assert_eq!(out.ack, vec![id(1)]);
    let (data, whole, _) = a
        .add(&header("u", 1, 2, 4), id(3), Bytes::from_static(b"cd"), now)
        .complete
        .unwrap();
    assert_eq!(&data[..], b"abcd");
    assert_eq!(whole.first_chunk_id(), Some(id(2)));
}

/// #13: the bytes of incomplete chunked messages count in the client's memory limit (shared
/// with the producers) while they are held, and come back when the message completes, is
/// evicted, or the assembler is cleared (a re-subscribe).
#[test]
fn incomplete_messages_hold_client_memory_until_they_leave() {
    let memory = Arc::new(Semaphore::new(1500));
    let mut a = ChunkAssembler::new(limits()).with_memory_limit(memory.clone());
    let now = Instant::now();
    let out = a.add(
        &header("a", 0, 2, 600),
        id(1),
        Bytes::from(vec![1; 300]),
        now,
    );
    assert!(out.complete.is_none());
    assert_eq!(memory.available_permits(), 900, "600 claimed bytes held");
    let out = a.add(
        &header("a", 1, 2, 600),
        id(2),
        Bytes::from(vec![2; 300]),
        now,
    );
    assert!(out.complete.is_some());
    assert_eq!(memory.available_permits(), 1500, "given back on completion");

    // Two incomplete messages (the cap is 2 contexts): a third evicts the oldest.
    a.add(
        &header("b", 0, 2, 400),
        id(3),
        Bytes::from(vec![1; 200]),
        now,
    );
    a.add(
        &header("c", 0, 2, 400),
        id(4),
        Bytes::from(vec![1; 200]),
        now,
    );
    assert_eq!(memory.available_permits(), 700);
    let out = a.add(
        &header("d", 0, 2, 100),
        id(5),
        Bytes::from(vec![1; 50]),
        now,
    );
    assert_eq!(out.redeliver, vec![id(3)], "the oldest is evicted");
    assert_eq!(
        memory.available_permits(),
        1000,
        "b's 400 back, d's 100 held"
    );

    // Never blocks: with the limit exhausted by others, a message is still assembled.
    let others = memory.clone().try_acquire_many_owned(1000).unwrap();
    a.clear();
    assert_eq!(
        memory.available_permits(),
        500,
        "clear gives c's and d's back"
    );
    let out = a.add(
        &header("e", 0, 2, 800),
        id(6),
        Bytes::from(vec![1; 400]),
        now,
    );
    assert!(out.error.is_none());
    assert_eq!(memory.available_permits(), 0, "it takes what is free");
    let out = a.add(
        &header("e", 1, 2, 800),
        id(7),
        Bytes::from(vec![1; 400]),
        now,
    );
    assert_eq!(out.complete.map(|(b, _, _)| b.len()), Some(800));
    drop(others);
    assert_eq!(memory.available_permits(), 1500);
}
