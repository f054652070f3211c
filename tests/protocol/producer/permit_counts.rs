//! Review of #18's third step (a send's permits kept as counts, the `max_pending_messages`
//! slot taken before memory, a send that finds anything full giving back what it took), from
//! the outside: the public producer API against the mock broker.

use common::{full, test_client, within};
use support as common;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, QueueLimit, SendFuture};

/// The task's queue bound (`producer::inbox::CAPACITY`).
const INBOX: usize = 4096;

/// The name of the unbatched producers below. Each of their pending messages holds its
/// payload plus this name (which its frame carries) of the client memory limit (#31 §2).
const NAME: &str = "p";

/// What a pending unbatched message of `payload` bytes holds of the client memory limit.
const fn held(payload: usize) -> usize {
    payload + NAME.len()
}

/// The payload of an unbatched message that holds `bytes` of the client memory limit.
const fn payload_holding(bytes: usize) -> usize {
    bytes - NAME.len()
}

/// Spends the calling task's coop budget for this poll (the next tokio operation that
/// checks it, e.g. a semaphore's `acquire`, is then pending until the task is polled again).
fn spend_budget(cx: &mut std::task::Context<'_>) {
    loop {
        let mut spend = std::pin::pin!(tokio::task::consume_budget());
        if spend.as_mut().poll(cx).is_pending() {
            return;
        }
    }
}

/// With `block_if_queue_full(false)` a send never waits for a limit: it fails with
/// `ProducerQueueFull` or is queued. A send that found its limits free but the task's queue
/// full (a fast producer: the task is behind) only waits for room in that queue, holding
/// what it took, as before the change. The change gives the memory back and takes it again
/// once waiting, after its slot: when the waiting future yields in between (here: its task's
/// coop budget is spent as it takes the slot, as on a busy runtime; or simply another thread's
/// send takes the memory in between), another send takes the memory, and the first one then
/// waits for it, for as long as the broker keeps it, although it must not block.
#[tokio::test]
async fn a_send_without_block_if_queue_full_never_waits_for_memory_it_had_taken() {
    let broker = MockBroker::start().await.unwrap();
    // The queue's worth of 1-byte messages, plus 100 bytes.
    let client = test_client(&broker.service_url())
        .memory_limit(INBOX * held(1) + held(100))
        .build()
        .unwrap();
    // With a `max_pending_messages` above the queue's bound: the slot is taken first.
    let make = |topic: &str| {
        client
            .producer(full(topic))
            .name(NAME)
            .batching(false)
            .block_if_queue_full(false)
            .max_pending_messages(2 * INBOX)
            .send_timeout(Duration::ZERO)
            .create()
    };
    let (a_producer, b_producer) = (
        make("review-permits-noblock-a").await.unwrap(),
        make("review-permits-noblock-b").await.unwrap(),
    );
    // Nothing is receipted: what the sends hold stays held.
    broker.set_response_delay(Duration::from_secs(3600));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // Fill the task's queue without letting the task run (one thread, no yield).
    let held: Vec<SendFuture> = tokio::task::unconstrained(async {
        let mut held = Vec::new();
        for i in 0..INBOX {
            match a_producer.send(vec![1u8; 1]).await {
                Ok(f) => held.push(f),
                Err(e) => panic!("send {i}: {e:?}"),
            }
        }
        held
    })
    .await;
    // A: its 100 bytes are free, the queue is full; it is polled once with no budget left
    // (on a fresh test thread it is the 4097th send: the send's own budget check, every 8th
    // send, is not its first step).
    let mut a = Box::pin(a_producer.send(vec![2u8; 100]));
    let a_done = std::future::poll_fn(|cx| {
        spend_budget(cx);
        Poll::Ready(a.as_mut().poll(cx).is_ready())
    })
    .await;
    assert!(!a_done, "A waits for room in its task's queue");
    // B, on another producer of the client, wants 100 bytes too (it may or may not get them;
    // it must not wait either).
    let b = tokio::task::unconstrained(b_producer.send(vec![3u8; 100])).await;
    assert!(
        matches!(b, Ok(_) | Err(Error::ProducerQueueFull { .. })),
        "B: {b:?}"
    );
    // The task now takes its queue: A gets room. It must be queued or fail, not wait for the
    // memory that B may hold for as long as the broker does not answer.
    match within("A, a send without block_if_queue_full", a).await {
        Ok(_) | Err(Error::ProducerQueueFull { .. }) => {}
        Err(e) => panic!("A: {e:?}"),
    }
    drop((held, b));
}

/// The same window with `block_if_queue_full(true)`, on one producer: A asks first and has
/// its memory, B asks later; the memory must stay A's (B waits behind it), not go to B, which
/// would then be queued (and sent) before A while A waits for B's receipt. The module's claim:
/// "trying first never overtakes a waiting send".
#[tokio::test]
async fn a_later_blocking_send_does_not_overtake_one_waiting_for_room() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(INBOX * held(1) + held(100))
        .build()
        .unwrap();
    let producer = client
        .producer(full("review-permits-block-order"))
        .name(NAME)
        .batching(false)
        .block_if_queue_full(true)
        .max_pending_messages(2 * INBOX)
        .send_timeout(Duration::ZERO)
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_secs(3600));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let held: Vec<SendFuture> = tokio::task::unconstrained(async {
        let mut held = Vec::new();
        for i in 0..INBOX {
            match producer.send(vec![1u8; 1]).await {
                Ok(f) => held.push(f),
                Err(e) => panic!("send {i}: {e:?}"),
            }
        }
        held
    })
    .await;
    // A (the 4097th send of this fresh thread) first, polled once with no budget left...
    let mut a = Box::pin(producer.send(vec![2u8; 100]));
    let a_done = std::future::poll_fn(|cx| {
        spend_budget(cx);
        Poll::Ready(a.as_mut().poll(cx).is_ready())
    })
    .await;
    assert!(!a_done, "A waits for room in its task's queue");
    // ... then B, wanting the same 100 bytes.
    let mut b = Box::pin(producer.send(vec![3u8; 100]));
    let b_first = futures::FutureExt::now_or_never(tokio::task::unconstrained(b.as_mut()));
    assert!(b_first.is_none(), "B cannot be queued at once: {b_first:?}");
    // The task takes its queue: A, first in line, is queued; B waits (for A's memory).
    match within("A, the earlier send", a).await {
        Ok(_) => {}
        Err(e) => panic!("A: {e:?}"),
    }
    assert!(
        futures::FutureExt::now_or_never(b.as_mut()).is_none(),
        "B was queued although A asked first and holds the memory it needs"
    );
    drop((held, b));
}

/// With `block_if_queue_full(true)`, A finds its slot free and the memory full; B, later,
/// too. A must wait for the memory before B. The change has the fast path give A's slot back
/// and `send_waiting` take it again before it waits for memory: when A yields as it takes
/// the slot (its coop budget is spent, as on a busy runtime), B, which found the same, gets
/// in line for the memory first, and the memory that comes back goes to B. Upstream's
/// `canEnqueueRequest` keeps the slot it took while it waits for memory.
#[tokio::test(start_paused = true)]
async fn a_later_blocking_send_does_not_get_memory_before_an_earlier_one() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(100)
        .build()
        .unwrap();
    let producer = client
        .producer(full("review-permits-block-memory-order"))
        .batching(false)
        .block_if_queue_full(true)
        .max_pending_messages(10)
        .send_timeout(Duration::from_secs(1))
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_secs(3600));
    // X holds all the memory until it times out (after 1 s).
    let x = producer.send(vec![1u8; 100]).await.unwrap();
    // A (the 2nd send of this fresh thread) first, polled once with no budget left...
    let mut a = Box::pin(producer.send(vec![2u8; 100]));
    let a_done = std::future::poll_fn(|cx| {
        spend_budget(cx);
        Poll::Ready(a.as_mut().poll(cx).is_ready())
    })
    .await;
    assert!(!a_done, "A waits for memory");
    // ... then B, wanting the same 100 bytes.
    let mut b = Box::pin(producer.send(vec![3u8; 100]));
    let b_first = futures::FutureExt::now_or_never(tokio::task::unconstrained(b.as_mut()));
    assert!(b_first.is_none(), "B cannot be queued at once: {b_first:?}");
    // A is polled again (it is in line now, whatever happened before).
    assert!(futures::FutureExt::now_or_never(a.as_mut()).is_none());
    // X times out: its 100 bytes go to the first in line.
    assert!(matches!(within("X", x).await, Err(Error::Timeout { .. })));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let a_now = futures::FutureExt::now_or_never(a.as_mut());
    let b_now = futures::FutureExt::now_or_never(b.as_mut());
    assert!(
        matches!(a_now, Some(Ok(_))) && b_now.is_none(),
        "the memory went to B, which asked after A (A: {a_now:?}, B: {b_now:?})"
    );
}

/// The client memory limit is exactly free: a producer of `client` holds exactly `LIMIT`
/// bytes (in one open batch, so no broker answer is involved) and then refuses 1 more byte.
async fn memory_is_back(client: &pulsar_sdk::Client, tag: &str) {
    use pulsar_sdk::producer::BatchingOptions;
    let p = client
        .producer(full(&format!("review-permits-fill-{tag}")))
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_publish_delay: Duration::from_secs(3600),
            ..Default::default()
        })
        .block_if_queue_full(false)
        .create()
        .await
        .unwrap();
    let mut futs = Vec::new();
    for i in 0..LIMIT / 100 {
        match p.send(vec![0u8; 100]).await {
            Ok(f) => futs.push(f),
            Err(e) => panic!("{tag}: send {i}: memory leaked: {e:?}"),
        }
    }
    match p.send(vec![0u8; 1]).await {
        Err(Error::ProducerQueueFull {
            limit: QueueLimit::MemoryLimit { .. },
        }) => {}
        other => panic!("{tag}: the memory limit was exceeded (given back twice): {other:?}"),
    }
    within("fill close", p.close()).await.unwrap();
    for r in within("fill receipts", futures::future::join_all(futs)).await {
        r.unwrap_or_else(|e| panic!("{tag}: {e:?}"));
    }
}

/// The memory limit of the sweep's client.
const LIMIT: usize = 1000;

/// Every way a send ends that the change touched gives back its client memory exactly once:
/// after each, round after round, a producer fills the limit exactly (no leak, which would
/// make a long-running producer block for good; no double release, which would let the
/// limit be exceeded). Where the producer survives, its `max_pending_messages` is checked
/// the same way.
#[tokio::test]
async fn memory_goes_back_exactly_once_however_a_send_ends() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    use pulsar_sdk::producer::BatchingOptions;
    use pulsar_sdk::{ProducerMessage, ServerError};
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(LIMIT)
        .build()
        .unwrap();
    let long_batches = |key_based| BatchingOptions {
        max_messages: 100,
        max_publish_delay: Duration::from_secs(3600),
        key_based,
        ..Default::default()
    };
    memory_is_back(&client, "start").await;
    for round in 0..3 {
        let topic = |what: &str| full(&format!("review-permits-sweep-{what}-{round}"));
        // Chunked (4 chunks; only the last holds the memory): receipted, refused on its first
        // chunk (NotAllowed), timed out.
        let chunked = client
            .producer(topic("chunked"))
            .batching(false)
            .chunking(true)
            .chunk_max_message_size(200)
            .max_pending_messages(2)
            .block_if_queue_full(false)
            .send_timeout(Duration::from_millis(300))
            .create()
            .await
            .unwrap();
        within("chunked", chunked.send_and_wait(vec![1u8; 600]))
            .await
            .unwrap();
        broker.push_error(MockError::new(
            MockRequest::Send,
            ServerError::NotAllowed,
            "no",
        ));
        let r = within("chunked refused", chunked.send_and_wait(vec![2u8; 600])).await;
        assert!(matches!(r, Err(Error::Broker { .. })), "{r:?}");
        broker.push_error(
            MockError::new(MockRequest::Send, ServerError::PersistenceError, "late")
                .after(Duration::from_secs(3600)),
        );
        let r = within("chunked timeout", chunked.send_and_wait(vec![3u8; 600])).await;
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        // Its 2 slots are back.
        broker.set_response_delay(Duration::from_secs(3600));
        let a = chunked.send(vec![4u8; 10]).await.unwrap();
        let b = chunked.send(vec![4u8; 10]).await.unwrap();
        match chunked.send(vec![4u8; 10]).await {
            Err(Error::ProducerQueueFull {
                limit: QueueLimit::MaxPendingMessages { .. },
            }) => {}
            other => panic!("round {round}: chunked slots: {other:?}"),
        }
        broker.set_response_delay(Duration::ZERO);
        // Dropped: its unanswered sends resolve once its task ended (having given back).
        drop(chunked);
        let _ = within("chunked dropped", futures::future::join_all([a, b])).await;
        memory_is_back(&client, &format!("chunked-{round}")).await;

        // Too big for the broker (6 MB: it holds the whole limit), batched producer or not;
        // and a deliver_at message on a batching producer (sent on its own).
        for batched in [false, true] {
            let p = client
                .producer(topic(&format!("big-{batched}")))
                .batching(batched)
                .create()
                .await
                .unwrap();
            let r = within("too big", p.send_and_wait(vec![5u8; 6 << 20])).await;
            assert!(matches!(r, Err(Error::MessageTooBig { .. })), "{r:?}");
            let later = ProducerMessage::new(vec![6u8; 100]).deliver_after(Duration::from_secs(60));
            within("deliver_at", p.send_and_wait(later)).await.unwrap();
            within("close", p.close()).await.unwrap();
        }
        memory_is_back(&client, &format!("big-{round}")).await;

        // Key-based batching, three open batches: closed (flushed and receipted); and three
        // more ended by the broker (topic terminated: the task ends for good).
        let p = client
            .producer(topic("keys"))
            .batching_options(long_batches(true))
            .create()
            .await
            .unwrap();
        let mut futs = Vec::new();
        for i in 0..9u8 {
            let m = ProducerMessage::new(vec![i; 50]).key(format!("k{}", i % 3));
            futs.push(p.send(m).await.unwrap());
        }
        within("close keyed", p.close()).await.unwrap();
        for r in within("keyed receipts", futures::future::join_all(futs)).await {
            r.unwrap();
        }
        let p = client
            .producer(topic("keys-terminated"))
            .batching_options(long_batches(true))
            .create()
            .await
            .unwrap();
        let mut futs = Vec::new();
        for i in 0..9u8 {
            let m = ProducerMessage::new(vec![i; 50]).key(format!("k{}", i % 3));
            futs.push(p.send(m).await.unwrap());
        }
        broker.terminate_topic(&topic("keys-terminated")).unwrap();
        let _ = within("flush terminated", p.flush()).await;
        for r in within("terminated receipts", futures::future::join_all(futs)).await {
            assert!(r.is_err(), "{r:?}");
        }
        drop(p);
        memory_is_back(&client, &format!("keys-{round}")).await;

        // A SEND_ERROR that reconnects (re-sent), and a reconnect with everything re-sent.
        let p = client
            .producer(topic("resend"))
            .batching(false)
            .max_pending_messages(3)
            .block_if_queue_full(false)
            .create()
            .await
            .unwrap();
        broker.push_error(MockError::new(
            MockRequest::Send,
            ServerError::PersistenceError,
            "again",
        ));
        let mut futs = Vec::new();
        for i in 0..3u8 {
            futs.push(p.send(vec![i; 100]).await.unwrap());
        }
        broker.drop_all_connections();
        for r in within("re-sent", futures::future::join_all(futs)).await {
            r.unwrap();
        }
        // Its 3 slots are back.
        broker.set_response_delay(Duration::from_secs(3600));
        let mut futs = Vec::new();
        for _ in 0..3 {
            futs.push(p.send(vec![7u8; 1]).await.unwrap());
        }
        match p.send(vec![7u8; 1]).await {
            Err(Error::ProducerQueueFull {
                limit: QueueLimit::MaxPendingMessages { .. },
            }) => {}
            other => panic!("round {round}: resend slots: {other:?}"),
        }
        broker.set_response_delay(Duration::ZERO);
        drop(p);
        let _ = within("resend dropped", futures::future::join_all(futs)).await;
        memory_is_back(&client, &format!("resend-{round}")).await;

        // Sends queued in the task's queue behind a close (taken after it: refused).
        let p = client
            .producer(topic("behind-close"))
            .batching_options(long_batches(false))
            .create()
            .await
            .unwrap();
        let (before, close, after) = tokio::task::unconstrained(async {
            let mut before = Vec::new();
            for i in 0..3u8 {
                before.push(p.send(vec![i; 100]).await.unwrap());
            }
            let mut close = Box::pin(p.close());
            assert!(futures::FutureExt::now_or_never(close.as_mut()).is_none());
            let mut after = Vec::new();
            for i in 0..3u8 {
                after.push(p.send(vec![i; 100]).await.unwrap());
            }
            (before, close, after)
        })
        .await;
        within("close with queued sends", close).await.unwrap();
        for r in within("before close", futures::future::join_all(before)).await {
            r.unwrap();
        }
        for r in within("after close", futures::future::join_all(after)).await {
            assert!(matches!(r, Err(Error::Closed)), "{r:?}");
        }
        memory_is_back(&client, &format!("behind-close-{round}")).await;
    }
}

/// A blocking send dropped while it waits (for memory, holding its slot; for a slot, holding
/// nothing) gives back what it held, exactly: round after round, the producer still has
/// exactly its `max_pending_messages` slots, and the client exactly its memory.
#[tokio::test(start_paused = true)]
async fn a_send_dropped_while_it_waits_gives_back_exactly_what_it_held() {
    use futures::FutureExt;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(100)
        .build()
        .unwrap();
    let producer = client
        .producer(full("review-permits-cancel"))
        .name(NAME)
        .batching(false)
        .block_if_queue_full(true)
        .max_pending_messages(2)
        .send_timeout(Duration::from_secs(1))
        .create()
        .await
        .unwrap();
    broker.set_response_delay(Duration::from_secs(3600));
    for round in 0..3 {
        // X holds all the memory until it times out; one slot is left.
        let x = producer.send(vec![1u8; 100]).await.unwrap();
        for _ in 0..3 {
            // Waits for memory, holding the last slot; dropped.
            let mut a = Box::pin(producer.send(vec![2u8; 1]));
            assert!(a.as_mut().now_or_never().is_none());
            let mut b = Box::pin(producer.send(vec![3u8; 1]));
            // Waits for a slot (A holds the last one); dropped first, then A.
            assert!(b.as_mut().now_or_never().is_none());
            drop(b);
            drop(a);
        }
        assert!(matches!(within("X", x).await, Err(Error::Timeout { .. })));
        // Exactly 2 slots and 100 bytes: two sends of 50 are queued at once, a third waits.
        let mut held = Vec::new();
        for i in 0..2 {
            match producer.send(vec![4u8; payload_holding(50)]).now_or_never() {
                Some(Ok(f)) => held.push(f),
                other => panic!("round {round}: send {i}: {other:?}"),
            }
        }
        let mut third = Box::pin(producer.send(vec![5u8; 1]));
        assert!(
            third.as_mut().now_or_never().is_none(),
            "round {round}: a third slot"
        );
        drop(third);
        for r in within("held", futures::future::join_all(held)).await {
            assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        }
    }
    // And the memory: another producer of the client (no slot limit) takes exactly 100.
    broker.set_response_delay(Duration::ZERO);
    let other = client
        .producer(full("review-permits-cancel-other"))
        .name(NAME)
        .batching(false)
        .block_if_queue_full(false)
        .create()
        .await
        .unwrap();
    let f = other.send(vec![6u8; payload_holding(100)]).await.unwrap();
    match other.send(vec![6u8; 1]).await {
        Err(Error::ProducerQueueFull {
            limit: QueueLimit::MemoryLimit { .. },
        }) => {}
        other => panic!("memory: {other:?}"),
    }
    drop(f);
}
