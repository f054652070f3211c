//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, publish, test_client, wait_until, within};
use crate::server_cnx::sent_sequence_ids;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::producer::{BatchingOptions, ProducerAccessMode};
use pulsar_sdk::{Client, Error, ServerError, State};
use std::time::Duration;
use tokio::time::Instant;

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

const TIMEOUT: Duration = Duration::from_secs(2);

/// Two brokers: `lookup` answers every lookup `Connect` to `owner`, which serves the topics.
/// The owner's answers can then be slowed without slowing the lookups.
async fn lookup_and_owner() -> (MockBroker, MockBroker, Client) {
    let lookup = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    lookup.connect_lookups_to(&owner.service_url());
    let client = test_client(&lookup.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    (lookup, owner, client)
}

/// `ProducerImpl.connectionOpened`: when CommandProducer gets no answer within the operation
/// timeout, the client sends CloseProducer for that producer id, so a producer the broker did
/// create is not kept for nobody (an Exclusive one would fence the next).
#[tokio::test(start_paused = true)]
async fn a_create_that_times_out_is_closed_on_the_broker() {
    let (_lookup, owner, client) = lookup_and_owner().await;
    let topic = full("create-timeout");
    owner.set_response_delay(TIMEOUT * 3);
    let first = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    let created = owner.received_of(Type::Producer);
    let id = created[0].command.producer.as_ref().unwrap().producer_id;
    let close = within(
        "CloseProducer",
        owner.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the timed-out create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, id);

    // The broker kept nothing: the next Exclusive producer is not fenced.
    owner.set_response_delay(Duration::ZERO);
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(next.is_ok(), "{:?}", next.err());
}

/// `ClientCnx.handleProducerSuccess` marks a `producer_ready = false` answer as responded: a
/// WaitForExclusive create waits, past the operation timeout, until the broker grants the
/// exclusive slot (here when the Exclusive producer holding it closes).
#[tokio::test(start_paused = true)]
async fn wait_for_exclusive_waits_past_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-for-exclusive");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    // Ten operation timeouts of virtual time: still waiting, not timed out.
    tokio::time::sleep(TIMEOUT * 10).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    holder.close().await.unwrap();
    let granted = within("granted", waiting).await.unwrap();
    let granted = granted.expect("granted the exclusive slot");
    granted.send_and_wait("mine now").await.unwrap();
}

/// A WaitForExclusive create the application stops waiting for is closed on the broker (as a
/// timed-out create is, `ProducerImpl.connectionOpened`): when the slot frees up, it is not
/// granted to a producer nobody holds, and the next Exclusive producer gets it.
#[tokio::test(start_paused = true)]
async fn a_dropped_wait_for_exclusive_create_is_closed_on_the_broker() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("dropped-wait");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    let queued = broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    let queued_id = queued[1].command.producer.as_ref().unwrap().producer_id;
    waiting.abort();
    let _ = waiting.await;
    let close = within(
        "CloseProducer",
        broker.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the abandoned create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, queued_id);

    holder.close().await.unwrap();
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(
        next.is_ok(),
        "not fenced by a granted ghost: {:?}",
        next.err()
    );
}
