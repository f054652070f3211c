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

/// #13, #31: the bytes of incomplete chunked messages count in the consumer's byte budget
/// (drawn from the client memory limit) while they are held: what arrived, not what the first
/// chunk claims, plus a cost per chunk; they come back when the message completes, is evicted,
/// or the assembler is cleared (a re-subscribe).
#[test]
fn incomplete_messages_hold_the_consumer_budget_until_they_leave() {
    let memory = Arc::new(tokio::sync::Semaphore::new(1 << 20));
    let share = Arc::new(crate::core::ConsumerShare::new(memory, 1 << 20));
    let budget = ConsumerBudget::new(share);
    let mut a = ChunkAssembler::new(limits()).with_budget(budget.clone(), 0);
    let now = Instant::now();
    let out = a.add(
        &header("a", 0, 2, 600),
        id(1),
        Bytes::from(vec![1; 300]),
        now,
    );
    assert!(out.complete.is_none());
    // Before: the 600 claimed bytes were allocated and taken from the limit up front.
    assert_eq!(budget.used(), 300 + CHUNK_COST, "what arrived is held");
    let out = a.add(
        &header("a", 1, 2, 600),
        id(2),
        Bytes::from(vec![2; 300]),
        now,
    );
    assert!(out.complete.is_some());
    assert_eq!(budget.used(), 0, "given back on completion");

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
    assert_eq!(budget.used(), 2 * (200 + CHUNK_COST));
    let out = a.add(
        &header("d", 0, 2, 100),
        id(5),
        Bytes::from(vec![1; 50]),
        now,
    );
    assert_eq!(out.redeliver, vec![id(3)], "the oldest is evicted");
    assert_eq!(budget.used(), 250 + 2 * CHUNK_COST, "b's back, d's held");
    a.clear();
    assert_eq!(budget.used(), 0, "clear gives c's and d's back");
}

/// #31: with the consumer's budget full, only the task holding its oldest incomplete chunked
/// message may be forced a permit (and only with nothing queued): incomplete messages complete
/// one after the other instead of all growing; a message alone larger than the budget is still
/// assembled.
#[test]
fn a_full_budget_lets_the_oldest_incomplete_message_go_on() {
    let memory = Arc::new(tokio::sync::Semaphore::new(2000));
    // The consumers' share is half the limit: 1000 bytes.
    let share = Arc::new(crate::core::ConsumerShare::new(memory, 2000));
    let budget = ConsumerBudget::new(share);
    let big = ChunkLimits {
        max_pending: 100,
        max_bytes: 1 << 20,
        ..limits()
    };
    let mut first = ChunkAssembler::new(big).with_budget(budget.clone(), 0);
    let mut second = ChunkAssembler::new(big).with_budget(budget.clone(), 1);
    let now = Instant::now();
    assert!(budget.may_force(0) && budget.may_force(1), "no chunks held");
    second.add(
        &header("a", 0, 2, 1200),
        id(1),
        Bytes::from(vec![1; 600]),
        now,
    );
    first.add(
        &header("b", 0, 2, 1200),
        id(2),
        Bytes::from(vec![1; 600]),
        now,
    );
    assert!(budget.used() >= budget.limit());
    assert!(
        budget.may_force(1) && !budget.may_force(0),
        "the oldest message's task"
    );
    let queued = budget.charge(10, true);
    assert!(
        !budget.may_force(1),
        "not while the application has messages to take"
    );
    drop(queued);
    let out = second.add(
        &header("a", 1, 2, 1200),
        id(3),
        Bytes::from(vec![1; 600]),
        now,
    );
    assert_eq!(out.complete.map(|(b, _, _)| b.len()), Some(1200));
    assert!(budget.may_force(0), "then the next oldest's");
    // One message larger than the whole budget, alone: assembled.
    first.clear();
    first.add(
        &header("e", 0, 3, 1500),
        id(10),
        Bytes::from(vec![1; 500]),
        now,
    );
    first.add(
        &header("e", 1, 3, 1500),
        id(11),
        Bytes::from(vec![1; 500]),
        now,
    );
    let out = first.add(
        &header("e", 2, 3, 1500),
        id(12),
        Bytes::from(vec![1; 500]),
        now,
    );
    assert_eq!(out.complete.map(|(b, _, _)| b.len()), Some(1500));
    assert_eq!(budget.used(), 0);
}

/// #31: a message claiming more chunks than [`MAX_CHUNKS_PER_MESSAGE`] is refused with its
/// first chunk (1-byte chunks cost ~57 B each: a 128 MiB message in them, 7 GB).
#[test]
fn too_many_chunks_are_refused() {
    let mut a = ChunkAssembler::new(ChunkLimits {
        max_bytes: 1 << 30,
        ..limits()
    });
    let n = MAX_CHUNKS_PER_MESSAGE as i32 + 1;
    let out = a.add(
        &header("u", 0, n, n),
        id(1),
        Bytes::from_static(b"x"),
        Instant::now(),
    );
    assert!(out.error.is_some());
    assert_eq!(a.pending(), 0);
    let n = MAX_CHUNKS_PER_MESSAGE as i32;
    let out = a.add(
        &header("v", 0, n, n),
        id(2),
        Bytes::from_static(b"x"),
        Instant::now(),
    );
    assert!(out.error.is_none());
}

/// #31: a duplicate chunk is recognised in constant time: 200,000 duplicates of an early chunk
/// of a 20,000-chunk message each looked at one slot (a scan of the chunks held took ~4e9 steps).
#[test]
fn duplicate_chunks_are_found_in_constant_time() {
    const CHUNKS: i32 = 20_000;
    let mut a = ChunkAssembler::new(ChunkLimits {
        max_bytes: 1 << 30,
        ..limits()
    });
    let now = Instant::now();
    for c in 0..CHUNKS - 1 {
        a.add(
            &header("u", c, CHUNKS, CHUNKS),
            id(c as u64),
            Bytes::from_static(b"x"),
            now,
        );
    }
    let started = std::time::Instant::now();
    for k in 0..200_000u64 {
        // The same entry again (a redelivery) and another entry (a producer's duplicate).
        let entry = if k % 2 == 0 { 1 } else { 1_000_000 + k };
        let out = a.add(
            &header("u", 1, CHUNKS, CHUNKS),
            id(entry),
            Bytes::from_static(b"x"),
            now,
        );
        assert!(out.complete.is_none());
    }
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    let out = a.add(
        &header("u", CHUNKS - 1, CHUNKS, CHUNKS),
        id(CHUNKS as u64),
        Bytes::from_static(b"x"),
        now,
    );
    assert_eq!(out.complete.map(|(b, _, _)| b.len()), Some(CHUNKS as usize));
}
