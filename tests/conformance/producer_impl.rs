//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common;
use crate::common::{client, full, publish, test_client, wait_until, within};
use crate::server_cnx::sent_sequence_ids;
use futures::future::join_all;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, MockBroker, MockError, MockRequest};
use pulsar_sdk::producer::{BatchingOptions, ProducerAccessMode};
use pulsar_sdk::{Client, Error, ProducerMessage, ServerError, State};
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

fn client_of(broker: &MockBroker) -> Client {
    test_client(&broker.service_url()).build().unwrap()
}

/// The metadata of every SEND the broker received for `topic`, in order.
fn sent_metadata(broker: &MockBroker, topic: &str) -> Vec<wire::MessageMetadata> {
    let ids: Vec<u64> = broker
        .received_of(Type::Producer)
        .iter()
        .filter(|r| r.command.producer.as_ref().unwrap().topic == topic)
        .map(|r| r.command.producer.as_ref().unwrap().producer_id)
        .collect();
    broker
        .received_of(Type::Send)
        .into_iter()
        .filter(|r| ids.contains(&r.command.send.as_ref().unwrap().producer_id))
        .map(|r| r.payload.unwrap().0)
        .collect()
}

/// A batching producer whose batches only go out when full (4 messages) or flushed.
async fn batching_producer(client: &Client, topic: &str) -> pulsar_sdk::Producer {
    client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 4,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_secs(60),
            key_based: false,
        })
        .create()
        .await
        .unwrap()
}

/// Java `ProducerImpl.connectionOpened` / `ProducerResponse`: without a name of its own the
/// producer takes the one the broker assigned, and every message carries it.
#[tokio::test]
async fn the_broker_assigned_name_is_adopted_and_carried_by_every_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-assigned-name");
    let producer = common::unbatched_producer(&client, &topic).await;
    let create = broker.received_of(Type::Producer);
    let create = create[0].command.producer.as_ref().unwrap();
    assert_eq!(create.producer_name, None, "no name asked for");
    assert_eq!(create.user_provided_producer_name, Some(false));
    assert!(producer.name().starts_with("mock-"), "{}", producer.name());
    producer.send_and_wait("m").await.unwrap();
    let meta = sent_metadata(&broker, &topic);
    assert_eq!(meta[0].producer_name, producer.name());
}

/// Java `ProducerImpl.connectionOpened` (`Commands.newProducer(.., producerName, ..,
/// userProvidedProducerName, ..)`): a name the user gave is sent, flagged as user-provided.
#[tokio::test]
async fn a_user_given_name_is_sent_and_flagged_as_user_provided() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-user-name");
    let producer = client
        .producer(&topic)
        .name("my-producer")
        .create()
        .await
        .unwrap();
    let create = broker.received_of(Type::Producer);
    let create = create[0].command.producer.as_ref().unwrap();
    assert_eq!(create.producer_name.as_deref(), Some("my-producer"));
    assert_eq!(create.user_provided_producer_name, Some(true));
    assert_eq!(producer.name(), "my-producer");
}

/// Java `ProducerImpl.connectionOpened`: a re-create after a lost connection asks for the
/// name the producer already has (so the broker's de-duplication keeps following it), with a
/// higher epoch.
#[tokio::test]
async fn a_re_create_asks_for_the_same_name_with_a_higher_epoch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-recreate-name");
    let producer = common::unbatched_producer(&client, &topic).await;
    producer.send_and_wait("a").await.unwrap();
    broker.drop_all_connections();
    within("a send across the reconnect", producer.send_and_wait("b"))
        .await
        .unwrap();
    let creates = broker.received_of(Type::Producer);
    assert_eq!(creates.len(), 2);
    let (first, second) = (
        creates[0].command.producer.as_ref().unwrap(),
        creates[1].command.producer.as_ref().unwrap(),
    );
    assert_eq!(second.producer_name.as_deref(), Some(producer.name()));
    assert_eq!(second.user_provided_producer_name, Some(false));
    assert_eq!(second.producer_id, first.producer_id, "same producer id");
    assert!(second.epoch.unwrap_or(0) > first.epoch.unwrap_or(0));
}

/// Java `ProducerImpl.connectionOpened` (`metadata` of `newProducer`): the producer's
/// properties go with its create command.
#[tokio::test]
async fn producer_properties_go_with_the_create_command() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let _producer = client
        .producer(full("prod-properties"))
        .property("app", "billing")
        .property("env", "test")
        .create()
        .await
        .unwrap();
    let create = broker.received_of(Type::Producer);
    let meta: Vec<(String, String)> = create[0]
        .command
        .producer
        .as_ref()
        .unwrap()
        .metadata
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    assert_eq!(
        meta,
        vec![
            ("app".into(), "billing".into()),
            ("env".into(), "test".into())
        ]
    );
}

/// Java `ProducerImpl.sendAsync` / `updateMessageMetadataSequenceId`: sequence ids count up
/// from 0 on a new topic, one per message, and a batch carries its first and highest ids.
#[tokio::test]
async fn sequence_ids_count_up_from_zero_and_a_batch_carries_its_range() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-sequence");
    let producer = batching_producer(&client, &topic).await;
    let receipts = join_all((0..4).map(|i| producer.send(format!("m{i}")))).await;
    for r in receipts {
        within("batched send", r.unwrap()).await.unwrap();
    }
    let sends = broker.received_of(Type::Send);
    assert_eq!(sends.len(), 1, "one batch");
    let send = sends[0].command.send.as_ref().unwrap();
    assert_eq!(send.sequence_id, 0);
    assert_eq!(send.highest_sequence_id, Some(3));
    assert_eq!(send.num_messages, Some(4));
    let meta = &sends[0].payload.as_ref().unwrap().0;
    assert_eq!(meta.num_messages_in_batch, Some(4));
    assert_eq!(meta.sequence_id, 0);
}

/// Java `ProducerImpl.sendAsync`: a message with its own sequence id is sent with it.
/// Java's generator then carries on where it was (`msgIdGenerator++` only for messages
/// without one); this producer continues after the highest id given, so a later automatic id
/// never falls at or below one already used (which a de-duplicating broker would drop as a
/// duplicate, silently).
#[tokio::test]
async fn a_given_sequence_id_is_kept_and_later_ids_continue_after_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-given-sequence");
    let producer = common::unbatched_producer(&client, &topic).await;
    producer.send_and_wait("auto-0").await.unwrap();
    producer
        .send_and_wait(ProducerMessage::new("given").sequence_id(10))
        .await
        .unwrap();
    producer.send_and_wait("auto-after").await.unwrap();
    let seqs: Vec<u64> = broker
        .received_of(Type::Send)
        .iter()
        .map(|r| r.command.send.as_ref().unwrap().sequence_id)
        .collect();
    assert_eq!(seqs, vec![0, 10, 11]);
}

/// Java `ProducerImpl.canAddToBatch`: a message with a delivery time is never batched; it
/// goes out on its own, after the batch opened before it (order kept).
#[tokio::test]
async fn a_delayed_message_is_sent_on_its_own_after_the_open_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-delayed");
    let producer = batching_producer(&client, &topic).await;
    let a = producer.send("a").await.unwrap();
    let b = producer.send("b").await.unwrap();
    let delayed = producer
        .send(ProducerMessage::new("later").deliver_after(Duration::from_secs(30)))
        .await
        .unwrap();
    for f in [a, b, delayed] {
        within("send", f).await.unwrap();
    }
    let meta = sent_metadata(&broker, &topic);
    assert_eq!(meta.len(), 2, "the open batch, then the delayed message");
    assert_eq!(meta[0].num_messages_in_batch, Some(2));
    assert_eq!(meta[0].deliver_at_time, None);
    assert_eq!(meta[1].num_messages_in_batch, None, "not a batch");
    assert!(meta[1].deliver_at_time.is_some());
    assert!(meta[1].sequence_id > meta[0].sequence_id);
}

/// Java `ProducerImpl.sendAsync` (`msgMetadata.setPublishTime`): every message carries the
/// time it was sent.
#[tokio::test]
async fn every_message_carries_its_publish_time() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-publish-time");
    let producer = common::unbatched_producer(&client, &topic).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    producer.send_and_wait("m").await.unwrap();
    let meta = sent_metadata(&broker, &topic);
    assert!(
        meta[0].publish_time >= before,
        "{} < {before}",
        meta[0].publish_time
    );
}

/// Java `ProducerImpl.sendAsync` (state check, `AlreadyClosedException`): once closed, a send
/// fails at once and nothing reaches the broker.
#[tokio::test]
async fn a_send_after_close_fails_at_once_and_sends_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let producer = common::unbatched_producer(&client, &full("prod-after-close")).await;
    producer.close().await.unwrap();
    assert!(broker
        .wait_for_command(Type::CloseProducer, Duration::from_secs(5))
        .await
        .is_some());
    match producer.send("late").await {
        Err(Error::Closed) => {}
        Err(other) => panic!("expected Closed, got {other:?}"),
        Ok(_) => panic!("a closed producer queued a send"),
    }
    assert!(broker.received_of(Type::Send).is_empty());
}

/// Java `ProducerImpl.closeAsync`: close sends CloseProducer for this producer id; closing
/// again is a no-op that succeeds.
#[tokio::test]
async fn close_sends_close_producer_once_and_closing_again_succeeds() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("prod-close-twice");
    let producer = common::unbatched_producer(&client, &topic).await;
    producer.close().await.unwrap();
    producer.close().await.unwrap();
    let create = broker.received_of(Type::Producer);
    let id = create[0].command.producer.as_ref().unwrap().producer_id;
    let closes = broker.received_of(Type::CloseProducer);
    assert_eq!(closes.len(), 1);
    assert_eq!(
        closes[0]
            .command
            .close_producer
            .as_ref()
            .unwrap()
            .producer_id,
        id
    );
}

// ---- r-h2 (breaker) ----

/// Java `ProducerImpl`'s send-timeout task runs while the producer reconnects too
/// (`failPendingMessages(cnx() == null)`): the pending messages of a detached producer fail
/// with the timeout, and once it is back they are not re-sent; the next message goes out
/// with the next sequence id.
#[tokio::test(start_paused = true)]
async fn a_timeout_while_reconnecting_fails_the_queue_and_nothing_is_re_sent() {
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
async fn a_timeout_of_chunked_messages_fails_each_once_and_frees_the_slots() {
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
async fn repeated_quota_refusals_fail_what_each_finds_pending() {
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
async fn close_while_quota_refusals_go_on_completes() {
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
async fn a_quota_refusal_frees_the_open_batchs_memory() {
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
async fn a_message_refused_as_too_big_takes_no_sequence_id() {
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
async fn a_timed_out_batch_counts_its_messages_and_lets_a_blocked_sender_in() {
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

/// r-h1: `ProducerImpl.connectionOpened` takes the partitioned case through the same path
/// (`PartitionedProducerImpl` creates one `ProducerImpl` per partition): a WaitForExclusive
/// producer on a partitioned topic also waits past the operation timeout until granted.
#[tokio::test(start_paused = true)]
async fn partitioned_wait_for_exclusive_waits_past_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-for-exclusive-partitioned");
    broker.set_partitions(&topic, 2);
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
    // The holder's two partitions, then the waiting producer's first partition: without a
    // name set, the first partition is created first and the others take its name
    // (`PartitionedProducerImpl`), so partition 1 waits behind partition 0's grant.
    broker
        .wait_for_commands(Type::Producer, 3, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    tokio::time::sleep(TIMEOUT * 10).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    holder.close().await.unwrap();
    let granted = within("granted", waiting).await.unwrap();
    let granted = granted.expect("granted the exclusive slot");
    granted.send_and_wait("mine now").await.unwrap();
}

/// r-h1: the client closing while a WaitForExclusive create waits ends the create (with an
/// error) instead of leaving the application waiting for a slot forever.
#[tokio::test(start_paused = true)]
async fn client_close_ends_a_waiting_wait_for_exclusive_create() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-then-close");
    let _holder = client
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
        .unwrap();
    tokio::time::sleep(TIMEOUT * 3).await;
    let _ = within("client close", client.close()).await;
    let ended = within("the waiting create ends", waiting).await.unwrap();
    // Java `PulsarClientImpl.closeAsync` closes every producer, the ones still being created
    // too: a create still waiting when the client closes does not hand out a producer.
    if let Ok(producer) = ended {
        let sent = within("send", producer.send_and_wait("after close")).await;
        panic!("the create succeeded after client.close(); a send on it: {sent:?}");
    }
}

/// r-h1: upstream deduplication is off by default (`brokerDeduplicationEnabled=false`, per
/// namespace), and then `ProducerSuccess.last_sequence_id` is -1 whatever was published
/// (`MessageDeduplication.getLastPublishedSequenceId` only knows sequence ids when enabled).
/// So a producer re-created with the same name starts again at sequence id 0, as Java's does
/// (`ProducerImpl`: `lastSequenceIdPublished` from the broker's -1).
#[tokio::test]
async fn without_deduplication_a_recreated_producer_restarts_at_sequence_zero() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("dedup-off");
    let first = client.producer(&topic).name("same").create().await.unwrap();
    for i in 0..3 {
        first.send_and_wait(format!("m{i}")).await.unwrap();
    }
    first.close().await.unwrap();
    let again = client.producer(&topic).name("same").create().await.unwrap();
    again.send_and_wait("after").await.unwrap();
    let sends = broker.received_of(Type::Send);
    let last = sends.last().unwrap().command.send.as_ref().unwrap();
    assert_eq!(
        last.sequence_id, 0,
        "deduplication is off by default: the broker answers last_sequence_id -1"
    );
}

/// r-h1: `PartitionedProducerImpl.start`: when one partition's create fails (here it times
/// out: its answer comes after the operation timeout), the partitioned create fails and the
/// partitions already created are closed, so an Exclusive partitioned producer created next
/// is not fenced by a leftover partition producer.
#[tokio::test(start_paused = true)]
async fn a_partitioned_create_with_a_partition_timing_out_leaves_nothing_behind() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    use pulsar_sdk::ServerError;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("partition-times-out");
    broker.set_partitions(&topic, 2);
    broker.push_error(
        MockError::new(MockRequest::Producer, ServerError::ServiceNotReady, "slow")
            .after(TIMEOUT * 3)
            .on_topic(&format!("{topic}-partition-1")),
    );
    let first = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(first.is_err(), "one partition never answered in time");
    assert!(
        broker.pending_errors().is_empty(),
        "the one slow answer was used"
    );
    tokio::time::sleep(TIMEOUT * 5).await;
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(next.is_ok(), "fenced by a leftover: {:?}", next.err());
}
