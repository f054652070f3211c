//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Error, ServerError, State};
use tokio::time::Instant;

use crate::common::{client, full, publish, test_client, wait_until, within};
use crate::server_cnx::sent_sequence_ids;

const SEND_TIMEOUT: Duration = Duration::from_secs(1);

fn is_send_timeout(r: &Result<pulsar_sdk::MessageId, Error>) -> bool {
    matches!(r, Err(Error::Timeout { operation: "send", after }) if *after == SEND_TIMEOUT)
}

/// Java `ProducerImpl`'s send-timeout task (`run(Timeout)`): when the oldest pending message
/// times out, `failPendingMessages` fails every pending message at once, the younger ones too
/// (long before their own timeout), and the producer goes on.
#[tokio::test(start_paused = true)]
async fn a_timed_out_head_fails_every_pending_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = "timeout-fails-all";
    let producer = client
        .producer(topic)
        .batching(false)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();

    broker.set_unresponsive(true);
    let head = producer.send("head").await.unwrap();
    broker
        .wait_for_commands(Type::Send, 2, Duration::from_secs(5))
        .await
        .expect("the head reached the broker");
    // Half the timeout later (paused time: exact), two younger messages.
    tokio::time::sleep(SEND_TIMEOUT / 2).await;
    let younger_at = Instant::now();
    let younger = vec![
        producer.send("younger-1").await.unwrap(),
        producer.send("younger-2").await.unwrap(),
    ];
    broker
        .wait_for_commands(Type::Send, 4, Duration::from_secs(5))
        .await
        .expect("the younger ones reached the broker");

    assert!(is_send_timeout(&within("the head", head).await));
    for r in futures::future::join_all(younger).await {
        assert!(is_send_timeout(&r), "{r:?}");
    }
    // They failed with the head, before their own timeout was due.
    assert!(Instant::now() < younger_at + SEND_TIMEOUT);

    // The producer goes on.
    broker.set_unresponsive(false);
    within("a send after", producer.send_and_wait("after"))
        .await
        .unwrap();
}

/// Java `ProducerImpl.failPendingMessages` also discards the batch being built
/// (`failPendingBatchMessages`): a message waiting in the open batch fails with the timed-out
/// head instead of going out later.
#[tokio::test(start_paused = true)]
async fn a_timed_out_head_fails_the_open_batch_too() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = "timeout-fails-batch";
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 100,
            max_publish_delay: Duration::from_secs(10),
            ..Default::default()
        })
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();

    broker.set_unresponsive(true);
    let head = producer.send("head").await.unwrap();
    // The flush sends the head's batch; it never completes (no receipt comes).
    let flushing = tokio::spawn({
        let producer = producer.clone();
        async move { producer.flush().await }
    });
    broker
        .wait_for_commands(Type::Send, 1, Duration::from_secs(5))
        .await
        .expect("the head's batch reached the broker");
    tokio::time::sleep(SEND_TIMEOUT / 2).await;
    let batched_at = Instant::now();
    // Joins the open batch, due in 10 s.
    let batched = producer.send("in the open batch").await.unwrap();

    assert!(is_send_timeout(&within("the head", head).await));
    let r = within("the batched one", batched).await;
    assert!(is_send_timeout(&r), "{r:?}");
    assert!(Instant::now() < batched_at + SEND_TIMEOUT);
    // Its batch never went out.
    assert_eq!(broker.received_of(Type::Send).len(), 1);
    let _ = within("the flush", flushing).await;
}

/// Java `ProducerImpl.connectionOpened`: while no sequence id was handed out yet
/// (`msgIdGenerator == 0`), every (re)connection adopts the broker's `last_sequence_id + 1`,
/// not only the first. Here a producer re-attaches before its first send, after another
/// producer of the same name stored 0..4 on a topic with deduplication on: it must go on at 5
/// (before the fix it sent 0, which the broker dropped as a duplicate: `0,1,2,3,4,0`).
#[tokio::test]
async fn a_producer_re_attached_before_its_first_send_adopts_the_last_sequence_id() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let topic = full("adopt-last-sequence-id");
    let late_client = client(&broker.service_url());
    let late = late_client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let conn = broker.connections()[0];
    // Its re-creates (on its connection) are refused until the other producer is done.
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ServiceNotReady,
            "loading",
        )
        .times(usize::MAX)
        .on_connection(conn),
    );
    broker.unload_topic(&topic).unwrap();
    assert_eq!(broker.producers(&topic), 0);

    let other_client = client(&broker.service_url());
    let other = other_client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    publish(&other, "m", 5).await;
    other.close().await.unwrap();

    broker.clear_pushed_errors();
    wait_until("the late producer is back", || late.state() == State::Ready).await;
    let id = late.send_and_wait("late").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker), [0, 1, 2, 3, 4, 5]);
    assert_eq!(broker.topic_messages(&topic), 6);
    assert_eq!(id.entry_id, 5);
}

/// Java `ProducerImpl.connectionOpened`: a re-create refused with
/// `ProducerBlockedQuotaExceededException` (backlog quota, `producer_exception` policy) fails
/// the pending messages with the quota error (`failPendingMessages`) and keeps reconnecting;
/// with `ProducerBlockedQuotaExceededError` (`producer_request_hold`) it only retries, and the
/// pending messages go out once the producer is back.
#[tokio::test(start_paused = true)]
async fn a_quota_refusal_on_re_create_fails_the_pending_messages() {
    for (code, fails) in [
        (ServerError::ProducerBlockedQuotaExceededException, true),
        (ServerError::ProducerBlockedQuotaExceededError, false),
    ] {
        let broker = MockBroker::start().await.unwrap();
        let client = test_client(&broker.service_url()).build().unwrap();
        let topic = full("quota-on-re-create");
        let producer = client
            .producer(&topic)
            .batching(false)
            .create()
            .await
            .unwrap();
        broker.push_error(MockError::new(
            MockRequest::Producer,
            code,
            "backlog quota exceeded",
        ));
        broker.unload_topic(&topic).unwrap();
        // Pending while the producer re-creates (a SEND that still reaches the broker for the
        // unloaded producer is ignored, as upstream).
        let mut pending = Vec::new();
        for i in 0..3 {
            pending.push(producer.send(format!("m{i}")).await.unwrap());
        }
        for r in within("the pending sends", futures::future::join_all(pending)).await {
            if fails {
                match r {
                    Err(Error::Broker { code: c, .. }) => assert_eq!(c, code),
                    other => panic!("{code:?}: expected the quota error, got {other:?}"),
                }
            } else {
                assert!(r.is_ok(), "{code:?}: {r:?}");
            }
        }
        // Refused once, then re-created: the producer goes on.
        within("back", async {
            while producer.state() != State::Ready {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        producer.send_and_wait("after").await.unwrap();
        assert_eq!(broker.received_of(Type::Producer).len(), 3, "{code:?}");
        let stored = if fails { 1 } else { 4 };
        assert_eq!(broker.topic_messages(&topic), stored, "{code:?}");
    }
}

/// Refusals for the backlog quota are retried with the growing backoff (Java `reconnectLater`
/// after each `connectionOpened` failure): no hot loop against a broker that keeps refusing.
#[tokio::test(start_paused = true)]
async fn repeated_quota_refusals_meet_a_growing_backoff() {
    let broker = MockBroker::start().await.unwrap();
    let client = pulsar_sdk::Client::builder()
        .service_url(broker.service_url())
        .backoff(pulsar_sdk::BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.0,
        })
        .build()
        .unwrap();
    let topic = full("quota-backoff");
    let producer = client.producer(&topic).create().await.unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ProducerBlockedQuotaExceededException,
            "backlog quota exceeded",
        )
        .times(4),
    );
    let start = Instant::now();
    broker.unload_topic(&topic).unwrap();
    broker
        .wait_for_commands(Type::Producer, 6, Duration::from_secs(60))
        .await
        .expect("four refusals, then the re-create");
    // 100 + 200 + 400 + 800 + 1600 ms between the attempts (a reset after each refusal would
    // take 500 ms).
    assert!(
        start.elapsed() >= Duration::from_millis(3100),
        "{:?}",
        start.elapsed()
    );
    within("back", async {
        while producer.state() != State::Ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

// ---- r-h2 (breaker) ----

/// Java `ProducerImpl`'s send-timeout task runs while the producer reconnects too
/// (`failPendingMessages(cnx() == null)`): the pending messages of a detached producer fail
/// with the timeout, and once it is back they are not re-sent; the next message goes out
/// with the next sequence id.
#[tokio::test(start_paused = true)]
async fn r_h2_a_timeout_while_reconnecting_fails_the_queue_and_nothing_is_re_sent() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("r-h2-timeout-detached");
    let producer = client
        .producer(&topic)
        .batching(false)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ServiceNotReady,
            "loading",
        )
        .times(usize::MAX),
    );
    broker.unload_topic(&topic).unwrap();
    wait_until("detached", || producer.state() != State::Ready).await;
    let mut pending = Vec::new();
    for i in 0..3 {
        pending.push(producer.send(format!("m{i}")).await.unwrap());
    }
    for r in within("the pending sends", futures::future::join_all(pending)).await {
        assert!(is_send_timeout(&r), "{r:?}");
    }
    let stats = producer.stats().totals;
    assert_eq!(stats.send_errors.timeout, 3);
    assert_eq!((stats.pending_messages, stats.pending_bytes), (0, 0));
    broker.clear_pushed_errors();
    within("back", async {
        while producer.state() != State::Ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker), [0, 4]);
}

/// The timeout with chunked messages: every chunked message fails once (one timeout each),
/// and the slots and memory they held come back, so as many can be sent again at once.
#[tokio::test(start_paused = true)]
async fn r_h2_a_timeout_of_chunked_messages_fails_each_once_and_frees_the_slots() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(64 * 1024)
        .build()
        .unwrap();
    let topic = full("r-h2-timeout-chunks");
    let producer = client
        .producer(&topic)
        .batching(false)
        .chunking(true)
        .chunk_max_message_size(4 * 1024)
        .max_pending_messages(2)
        .block_if_queue_full(false)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    let big = vec![7u8; 10 * 1024];
    broker.set_unresponsive(true);
    let mut pending = Vec::new();
    for _ in 0..2 {
        pending.push(producer.send(big.clone()).await.unwrap());
    }
    // Full: a third is refused at once.
    assert!(producer.send(big.clone()).await.is_err());
    for r in within("the chunked sends", futures::future::join_all(pending)).await {
        assert!(is_send_timeout(&r), "{r:?}");
    }
    let stats = producer.stats().totals;
    assert_eq!(stats.send_errors.timeout, 2, "{stats:?}");
    assert_eq!((stats.pending_messages, stats.pending_bytes), (0, 0));
    // The slots are free again: two more are accepted without waiting.
    broker.set_unresponsive(false);
    let mut again = Vec::new();
    for _ in 0..2 {
        again.push(producer.send(big.clone()).await.unwrap());
    }
    for r in within("the sends after", futures::future::join_all(again)).await {
        r.unwrap();
    }
}

/// A blocked sender (queue full, `block_if_queue_full`) gets the slot a quota refusal frees,
/// and its message fails with the next refusal too (Java: `failPendingMessages` releases the
/// semaphore; every refusal fails what is pending then); once the producer is back, sends go
/// out in order.
#[tokio::test(start_paused = true)]
async fn r_h2_repeated_quota_refusals_fail_what_each_finds_pending() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("r-h2-quota-blocking");
    let producer = client
        .producer(&topic)
        .batching(false)
        .max_pending_messages(1)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ProducerBlockedQuotaExceededException,
            "backlog quota exceeded",
        )
        .times(2),
    );
    broker.unload_topic(&topic).unwrap();
    let first = producer.send("m0").await.unwrap();
    let blocked = tokio::spawn({
        let producer = producer.clone();
        async move { producer.send("m1").await.unwrap().await }
    });
    for r in [
        within("m0", first).await,
        within("m1", blocked).await.unwrap(),
    ] {
        match r {
            Err(Error::Broker { code, .. }) => {
                assert_eq!(code, ServerError::ProducerBlockedQuotaExceededException)
            }
            other => panic!("expected the quota error, got {other:?}"),
        }
    }
    within("back", async {
        while producer.state() != State::Ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    assert_eq!(broker.topic_messages(&topic), 1);
    let stats = producer.stats().totals;
    assert_eq!(stats.send_errors.broker, 2, "{stats:?}");
    assert_eq!((stats.pending_messages, stats.pending_bytes), (0, 0));
}

/// A close while the re-create keeps being refused for the quota: the pending message fails
/// and the close completes without waiting for the broker to accept the
/// producer again (Java `closeAsync` with no connection: closed at once).
#[tokio::test(start_paused = true)]
async fn r_h2_close_while_quota_refusals_go_on_completes() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("r-h2-quota-close");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ProducerBlockedQuotaExceededException,
            "backlog quota exceeded",
        )
        .times(usize::MAX),
    );
    broker.unload_topic(&topic).unwrap();
    let pending = producer.send("m0").await.unwrap();
    let start = Instant::now();
    let closing = tokio::spawn({
        let producer = producer.clone();
        async move { producer.close().await }
    });
    // Failed by the refusal, or by the close (Java `closeAndClearPendingMessages`).
    let r = within("m0", pending).await;
    assert!(
        matches!(r, Err(Error::Broker { .. } | Error::Closed)),
        "{r:?}"
    );
    let _ = within("the close", closing).await.unwrap();
    // Well before the close deadline (the operation timeout, 10 s).
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(producer.state(), State::Closed);
}

/// A quota refusal also fails the open batch and gives its memory back to the client (Java
/// `failPendingMessages` → `failPendingBatchMessages` releases the batch's memory): with a
/// memory limit just above one message, the next one is accepted at once after the refusal.
#[tokio::test(start_paused = true)]
async fn r_h2_a_quota_refusal_frees_the_open_batchs_memory() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(10 * 1024)
        .build()
        .unwrap();
    let topic = full("r-h2-quota-batch-memory");
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_publish_delay: Duration::from_secs(60),
            ..Default::default()
        })
        .block_if_queue_full(false)
        .create()
        .await
        .unwrap();
    broker.push_error(MockError::new(
        MockRequest::Producer,
        ServerError::ProducerBlockedQuotaExceededException,
        "backlog quota exceeded",
    ));
    broker.unload_topic(&topic).unwrap();
    let big = vec![1u8; 8 * 1024];
    let first = producer.send(big.clone()).await.unwrap();
    assert!(matches!(
        within("the batched one", first).await,
        Err(Error::Broker {
            code: ServerError::ProducerBlockedQuotaExceededException,
            ..
        })
    ));
    // Its memory is back: another one fits.
    let second = producer.send(big).await.unwrap();
    within("back", async {
        while producer.state() != State::Ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    producer.flush().await.unwrap();
    within("the second", second).await.unwrap();
    assert_eq!(broker.topic_messages(&topic), 1);
}

/// Java `ProducerImpl.sendAsync` refuses a message too big for the broker (no chunking)
/// before it takes a sequence id (`msgIdGenerator++` comes later), so a producer whose only
/// send so far was refused that way still has `msgIdGenerator == 0` and adopts the broker's
/// `last_sequence_id + 1` when it re-attaches (`connectionOpened`). Here another producer of
/// the same name stored 0..4 meanwhile, with deduplication on: the next message must go out
/// as 5, not as 1 (a duplicate, dropped).
#[tokio::test]
async fn r_h2_a_message_refused_as_too_big_takes_no_sequence_id() {
    use pulsar_sdk::mock::MockBrokerConfig;
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(2048),
        ..Default::default()
    })
    .await
    .unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let topic = full("r-h2-too-big-no-sequence-id");
    let late_client = client(&broker.service_url());
    let late = late_client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let refused = match late.send(vec![0u8; 4096]).await {
        Ok(f) => f.await,
        Err(e) => Err(e),
    };
    assert!(
        matches!(refused, Err(Error::MessageTooBig { .. })),
        "{refused:?}"
    );
    let conn = broker.connections()[0];
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ServiceNotReady,
            "loading",
        )
        .times(usize::MAX)
        .on_connection(conn),
    );
    broker.unload_topic(&topic).unwrap();
    let other_client = client(&broker.service_url());
    let other = other_client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    publish(&other, "m", 5).await;
    other.close().await.unwrap();
    broker.clear_pushed_errors();
    wait_until("the late producer is back", || late.state() == State::Ready).await;
    let id = late.send_and_wait("late").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker), [0, 1, 2, 3, 4, 5]);
    assert_eq!(id.entry_id, 5);
}

/// A timed-out batch counts its messages (Java `failPendingMessages` releases
/// `numMessagesInBatch` permits), and a sender blocked on the full queue gets in once the
/// timeout has emptied it; its own message then times out on its own clock, later.
#[tokio::test(start_paused = true)]
async fn r_h2_a_timed_out_batch_counts_its_messages_and_lets_a_blocked_sender_in() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("r-h2-timeout-batch-count");
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 3,
            max_publish_delay: Duration::from_millis(10),
            ..Default::default()
        })
        .max_pending_messages(3)
        .block_if_queue_full(true)
        .send_timeout(SEND_TIMEOUT)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut batch = Vec::new();
    for i in 0..3 {
        batch.push(producer.send(format!("b{i}")).await.unwrap());
    }
    let start = Instant::now();
    let blocked = tokio::spawn({
        let producer = producer.clone();
        async move {
            let f = producer.send("blocked").await.unwrap();
            (Instant::now(), f.await)
        }
    });
    for r in within("the batch", futures::future::join_all(batch)).await {
        assert!(is_send_timeout(&r), "{r:?}");
    }
    let (admitted_at, r) = within("the blocked one", blocked).await.unwrap();
    assert!(admitted_at >= start + SEND_TIMEOUT);
    assert!(is_send_timeout(&r), "{r:?}");
    let stats = producer.stats().totals;
    assert_eq!(stats.send_errors.timeout, 4, "{stats:?}");
    assert_eq!((stats.pending_messages, stats.pending_bytes), (0, 0));
}
