use super::*;
use crate::producer::receipt::{Receipts, SendFuture};

fn entry(first: u64, last: u64, at: Instant) -> (InFlight, Vec<SendFuture>) {
    let mut responders = Vec::new();
    let mut rxs = Vec::new();
    for _ in first..=last {
        let (tx, rx) = Receipts::default().next();
        responders.push(tx);
        rxs.push(rx);
    }
    let senders = if last > first {
        let mut batch = BatchReceipts::default();
        responders.into_iter().for_each(|r| batch.push(r));
        Senders::Batch(Box::new(batch))
    } else {
        Senders::One(responders.pop().unwrap())
    };
    (
        InFlight {
            first_seq: first,
            last_seq: last,
            encoded: EncodedFrame::from(&b"frame"[..]),
            senders,
            chunk: None,
            enqueued_at: at,
            reserved: Reservation::default(),
        },
        rxs,
    )
}

fn id(batch: Option<i32>) -> MessageId {
    MessageId {
        ledger_id: 1,
        entry_id: 2,
        partition: -1,
        batch_index: batch.unwrap_or(-1),
        batch_size: 0,
        first_chunk: None,
    }
}

#[tokio::test]
async fn receipts_complete_in_order_with_batch_indexes() {
    let now = Instant::now();
    let mut q = PendingQueue::new(Limits::unlimited());
    let (a, mut ra) = entry(0, 2, now);
    let (b, mut rb) = entry(3, 3, now);
    q.push(a);
    q.push(b);
    assert_eq!(q.messages(), 4);
    assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Completed(3));
    for (i, rx) in ra.iter_mut().enumerate() {
        let got = rx.try_result().unwrap().unwrap();
        assert_eq!(got.batch_index, i as i32);
        assert_eq!(got.batch_size, 3);
    }
    // A duplicate receipt for the completed batch is stale, not an error.
    assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Stale);
    assert!(rb[0].try_result().is_none(), "still pending");
    assert_eq!(q.on_receipt(3, id), ReceiptOutcome::Completed(1));
    assert_eq!(rb[0].try_result().unwrap().unwrap().batch_index, -1);
    assert!(q.is_empty());
    assert_eq!(q.messages(), 0);
    assert_eq!(q.bytes(), 0);
}

#[tokio::test]
async fn a_receipt_ahead_of_the_head_is_reported() {
    let now = Instant::now();
    let mut q = PendingQueue::new(Limits::unlimited());
    let (a, _ra) = entry(5, 5, now);
    q.push(a);
    assert_eq!(
        q.on_receipt(6, id),
        ReceiptOutcome::AheadOfHead {
            expected: 5,
            got: 6
        }
    );
    assert_eq!(q.messages(), 1);
}

/// Only the head's age counts: once it has timed out, the whole queue is due (upstream's
/// send-timeout task fails every pending message then, not only the expired ones).
#[tokio::test]
async fn the_head_decides_the_timeout() {
    let start = Instant::now();
    let mut q = PendingQueue::new(Limits::unlimited());
    assert!(!q.head_timed_out(start + Duration::from_secs(99), Duration::from_secs(30)));
    let (a, mut ra) = entry(0, 0, start);
    let (b, mut rb) = entry(1, 1, start + Duration::from_secs(5));
    q.push(a);
    q.push(b);
    let timeout = Duration::from_secs(30);
    assert!(!q.head_timed_out(start + Duration::from_secs(29), timeout));
    assert!(q.head_timed_out(start + Duration::from_secs(31), timeout));
    let error = Error::Timeout {
        operation: "send",
        after: timeout,
    };
    assert_eq!(q.fail_all(&error, |_| {}), 2);
    for r in [&mut ra[0], &mut rb[0]] {
        assert!(matches!(
            r.try_result().unwrap(),
            Err(Error::Timeout { .. })
        ));
    }
    // Their late receipts are stale.
    assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Stale);
    assert_eq!(q.on_receipt(1, id), ReceiptOutcome::Stale);
}

#[tokio::test]
async fn fail_all_fails_everything_once() {
    let now = Instant::now();
    let mut q = PendingQueue::new(Limits::unlimited());
    let (a, mut ra) = entry(0, 1, now);
    q.push(a);
    assert_eq!(q.fail_all(&Error::Closed, |_| {}), 2);
    for rx in ra.iter_mut() {
        assert!(matches!(rx.try_result().unwrap(), Err(Error::Closed)));
    }
    assert_eq!(q.fail_all(&Error::Closed, |_| {}), 0);
}

fn chunks(seq: u64, of: u32) -> (Vec<InFlight>, SendFuture) {
    let (tx, rx) = Receipts::default().next();
    let mut out: Vec<InFlight> = (0..of)
        .map(|id| InFlight {
            first_seq: seq,
            last_seq: seq,
            encoded: EncodedFrame::from(&b"chunk"[..]),
            senders: Senders::None,
            chunk: Some(ChunkPos { id, of }),
            enqueued_at: Instant::now(),
            reserved: Reservation::default(),
        })
        .collect();
    out.last_mut().unwrap().senders = Senders::One(tx);
    (out, rx)
}

#[tokio::test]
async fn only_the_last_chunk_receipt_completes_with_a_chunk_message_id() {
    let mut q = PendingQueue::new(Limits::unlimited());
    let (entries, mut rx) = chunks(4, 3);
    for e in entries {
        q.push(e);
    }
    assert_eq!(q.messages(), 1, "a chunked message counts once");
    let at = |entry| move |_: Option<i32>| MessageId::new(7, entry, -1);
    assert_eq!(q.on_receipt(4, at(10)), ReceiptOutcome::Completed(0));
    assert!(rx.try_result().is_none());
    assert_eq!(q.on_receipt(4, at(11)), ReceiptOutcome::Completed(0));
    assert!(rx.try_result().is_none());
    assert_eq!(q.on_receipt(4, at(12)), ReceiptOutcome::Completed(1));
    let id = rx.try_result().unwrap().unwrap();
    assert_eq!((id.ledger_id, id.entry_id), (7, 12));
    assert_eq!(id.first_chunk_id(), Some(MessageId::new(7, 10, -1)));
    assert!(q.is_empty());
}

#[tokio::test]
async fn failing_a_chunk_fails_its_whole_message_and_nothing_else() {
    let mut q = PendingQueue::new(Limits::unlimited());
    let (entries, mut rx) = chunks(1, 3);
    for e in entries {
        q.push(e);
    }
    let (next, mut rnext) = entry(2, 2, Instant::now());
    q.push(next);
    assert_eq!(
        q.on_receipt(1, |_| MessageId::new(1, 1, -1)),
        ReceiptOutcome::Completed(0)
    );
    assert_eq!(q.fail_head(Error::Closed), 1);
    assert!(matches!(rx.try_result().unwrap(), Err(Error::Closed)));
    assert!(
        rnext[0].try_result().is_none(),
        "the next message is untouched"
    );
    assert_eq!(q.messages(), 1);
    assert_eq!(q.iter().next().unwrap().first_seq, 2);
}

/// What a pending message costs is mostly its entry: keep it packed.
#[test]
fn a_queued_entry_stays_packed() {
    assert!(
        std::mem::size_of::<Queued>() <= 80,
        "{}",
        std::mem::size_of::<Queued>()
    );
}

/// An entry's permits go back once, when it leaves the queue (receipt, failure, or the
/// queue dropped with it), and before its sends complete.
#[tokio::test]
async fn permits_go_back_once_when_the_entry_leaves() {
    let limits = Arc::new(Limits {
        memory: Arc::new(tokio::sync::Semaphore::new(1000)),
        slots: Some(Arc::new(tokio::sync::Semaphore::new(10))),
        consumers: None,
    });
    let (memory, slots) = (&limits.memory, limits.slots.as_ref().unwrap());
    let take = |m: u32| {
        let memory = memory.try_acquire_many(m).unwrap();
        Reservation::of(memory, Some(slots.try_acquire().unwrap()))
    };
    let mut q = PendingQueue::new(limits.clone());
    let (mut a, _ra) = entry(0, 1, Instant::now());
    a.reserved = take(100);
    a.reserved.merge(take(50));
    let (mut b, _rb) = entry(2, 2, Instant::now());
    b.reserved = take(7);
    let (mut c, _rc) = entry(3, 3, Instant::now());
    c.reserved = take(9);
    q.push(a);
    q.push(b);
    q.push(c);
    assert_eq!(
        (memory.available_permits(), slots.available_permits()),
        (834, 6)
    );
    assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Completed(2));
    assert_eq!(
        (memory.available_permits(), slots.available_permits()),
        (984, 8)
    );
    assert_eq!(q.on_receipt(0, id), ReceiptOutcome::Stale);
    assert_eq!(q.fail_head(Error::Closed), 1);
    assert_eq!(
        (memory.available_permits(), slots.available_permits()),
        (991, 9)
    );
    drop(q);
    assert_eq!(
        (memory.available_permits(), slots.available_permits()),
        (1000, 10)
    );
}

/// Enqueue times are kept exactly: one enqueued now is not old at all, and one exactly
/// `timeout` old expires (not a nanosecond before).
#[tokio::test(start_paused = true)]
async fn ages_are_exact() {
    let mut q = PendingQueue::new(Limits::unlimited());
    tokio::time::advance(Duration::from_micros(1500)).await;
    let at = Instant::now();
    let (a, mut ra) = entry(0, 0, at);
    q.push(a);
    let head = q.head().unwrap();
    assert_eq!(q.age(head, at), Duration::ZERO);
    assert_eq!(
        q.age(head, at + Duration::from_nanos(250_123)),
        Duration::from_nanos(250_123)
    );
    let timeout = Duration::from_millis(30);
    assert!(!q.head_timed_out(at + timeout - Duration::from_nanos(1), timeout));
    assert!(ra[0].try_result().is_none());
    assert!(q.head_timed_out(at + timeout, timeout));
}
