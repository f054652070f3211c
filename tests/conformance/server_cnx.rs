//! Upstream `ServerCnx`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, InitialPosition, ProducerMessage, State, SubscriptionType};
use std::time::Duration;

/// The sequence ids of the SENDs the broker received so far, in order.
pub(crate) fn sent_sequence_ids(broker: &MockBroker) -> Vec<u64> {
    broker
        .received_of(Type::Send)
        .iter()
        .filter_map(|r| r.command.send.as_ref().map(|s| s.sequence_id))
        .collect()
}

/// Upstream `MessageDeduplication` with deduplication off (the default,
/// `brokerDeduplicationEnabled=false`): `getLastPublishedSequenceId` answers -1 (nothing is
/// tracked), so a producer re-created under a name that already published starts again at 0,
/// and `isDuplicate` is `NotDup`: the repeated sequence id is stored like any message.
#[tokio::test]
async fn deduplication_off_answers_no_last_sequence_id_and_stores_repeats() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("dedup-off");
    let first = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        first.send_and_wait(format!("m{i}")).await.unwrap();
    }
    first.close().await.unwrap();

    let again = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let id = again.send_and_wait("again").await.unwrap();
    // ProducerSuccess said -1: the new producer starts at sequence id 0 again.
    assert_eq!(sent_sequence_ids(&broker), [0, 1, 2, 0]);
    // Stored, with a real position.
    assert_eq!(broker.topic_messages(&topic), 4);
    assert_eq!(id.entry_id, 3);
}

/// Upstream `MessageDeduplication` with deduplication on: `getLastPublishedSequenceId`
/// answers the highest sequence id stored for the producer name, and a message whose sequence
/// id is not above it is a duplicate, which `PersistentTopic.publishMessage` acknowledges at
/// once without storing it (`publishContext.completed(null, -1, -1)`: the receipt carries
/// message id (-1, -1)). The ids are known only while it is on.
#[tokio::test]
async fn deduplication_on_answers_the_last_stored_id_and_drops_duplicates() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    assert!(broker.is_deduplication_enabled("public/default"));
    let client = client(&broker.service_url());
    let topic = full("dedup-on");
    let first = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        first.send_and_wait(format!("m{i}")).await.unwrap();
    }
    first.close().await.unwrap();

    let again = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    // ProducerSuccess said 2: the producer goes on at 3, and that message is stored.
    let id = again.send_and_wait("next").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker), [0, 1, 2, 3]);
    assert_eq!((id.entry_id, broker.topic_messages(&topic)), (3, 4));

    // A repeated sequence id is a duplicate: answered (-1, -1), not stored.
    let dup = again
        .send_and_wait(ProducerMessage::new("repeat").sequence_id(1))
        .await
        .unwrap();
    assert_eq!((dup.ledger_id, dup.entry_id), (u64::MAX, u64::MAX));
    assert_eq!(broker.topic_messages(&topic), 4);

    // Off again: the same repeat is stored.
    broker.set_deduplication("public/default", false).unwrap();
    let stored = again
        .send_and_wait(ProducerMessage::new("repeat").sequence_id(1))
        .await
        .unwrap();
    assert_eq!((stored.entry_id, broker.topic_messages(&topic)), (4, 5));

    // On again: it starts from nothing known (upstream clears its maps when disabling and
    // recovers only from its new cursor), so a producer of that name starts at 0 and is stored.
    again.close().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let third = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let id = third.send_and_wait("from zero").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker).last(), Some(&0));
    assert_eq!((id.entry_id, broker.topic_messages(&topic)), (5, 6));
}

/// Upstream `PersistentTopic.terminate`: once terminated, every producer of the topic is
/// disconnected (`Producer::disconnect`, CLOSE_PRODUCER with reconnect allowed); its
/// re-creation meets `TopicTerminatedError` (`addProducer` on a terminated topic), so the
/// client's producer ends Terminated (Java `ProducerImpl.connectionOpened` on
/// `TopicTerminatedException`) without sending anything.
#[tokio::test]
async fn terminate_disconnects_producers_and_refuses_their_re_creation() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("terminated");
    let producer = client.producer(&topic).create().await.unwrap();
    producer.send_and_wait("before").await.unwrap();
    assert_eq!(broker.producers(&topic), 1);

    broker.terminate_topic(&topic).unwrap();
    assert_eq!(broker.producers(&topic), 0);
    assert_eq!(
        within("the producer ends", producer.closed()).await,
        State::Terminated
    );
    // It tried to come back (a second PRODUCER) and was refused.
    wait_until("the re-create was seen", || {
        broker.received_of(Type::Producer).len() == 2
    })
    .await;
    assert!(matches!(
        producer.send("late").await,
        Err(Error::TopicTerminated { .. })
    ));
    assert_eq!(sent_sequence_ids(&broker), [0]);
}

/// Broker `PersistentSubscription.acknowledgeMessage` (and the dispatchers' read that finds
/// no more entries): on a terminated topic, REACHED_END_OF_TOPIC goes to the subscription's
/// consumers once its backlog is empty — not while a message is unacknowledged. A consumer
/// subscribing to a caught-up subscription of a terminated topic is told at once.
#[tokio::test]
async fn the_mock_signals_the_end_of_a_terminated_topic_once_everything_is_acked() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-cnx-end");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let first = within("recv", consumer.recv()).await.unwrap();
    let second = within("recv", consumer.recv()).await.unwrap();
    consumer.ack(&first).unwrap();
    wait_until("the first ack", || {
        broker.subscription_backlog(&topic, "s") == 1
    })
    .await;
    broker.terminate_topic(&topic).unwrap();
    // A request answered on the same connection after the termination: a notice sent at the
    // termination would have been handled before its answer.
    within("last ids", consumer.last_message_ids())
        .await
        .unwrap();
    assert!(
        !consumer.has_reached_end_of_topic(),
        "told the end with a message unacknowledged"
    );
    assert!(broker.received_of(Type::Ack).len() == 1);
    consumer.ack(&second).unwrap();
    wait_until("the end of the topic", || {
        consumer.has_reached_end_of_topic()
    })
    .await;

    // A new subscription at the end (latest) of the terminated topic: told at once.
    let late = client
        .consumer(&topic)
        .subscription("late")
        .initial_position(InitialPosition::Latest)
        .subscribe()
        .await
        .unwrap();
    wait_until("the late consumer told", || late.has_reached_end_of_topic()).await;
}

// ---- r-h2 (breaker) ----

/// Upstream `MessageDeduplication.isDuplicateNormal` / `recordMessagePersistedNormal`: the
/// chunks of one message share its sequence id, and only the last chunk is checked and
/// recorded ("Only put sequence ID into highestSequencedPushed and highestSequencedPersisted
/// until receive and persistent the last chunk"). So with deduplication on, a chunked message
/// is stored whole (every chunk) and its receipt is a real position, and the consumer gets it.
#[tokio::test]
async fn deduplication_on_stores_every_chunk_of_a_chunked_message() {
    use pulsar_sdk::SubscriptionType;
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let client = client(&broker.service_url());
    let topic = full("r-h2-dedup-chunks");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .chunking(true)
        .chunk_max_message_size(4 * 1024)
        .create()
        .await
        .unwrap();
    let big: Vec<u8> = (0..10 * 1024).map(|i| (i % 251) as u8).collect();
    let id = within("the chunked send", producer.send_and_wait(big.clone()))
        .await
        .unwrap();
    assert_ne!(
        id.entry_id,
        u64::MAX,
        "the last chunk was taken for a duplicate"
    );
    assert_eq!(broker.topic_messages(&topic), 3);
    let msg = within("the chunked message", consumer.recv())
        .await
        .unwrap();
    assert_eq!(&msg.payload[..], &big[..]);
    // The next message is no duplicate either.
    let id = producer.send_and_wait("small").await.unwrap();
    assert_ne!(id.entry_id, u64::MAX);
    assert_eq!(broker.topic_messages(&topic), 4);
}

/// Upstream `PersistentTopic.terminate` disconnects the producer; what the application sends
/// before the re-create is refused is pending, and fails with the termination (Java
/// `connectionOpened` on `TopicTerminatedException`: `failPendingMessages` with it), not as
/// closed; nothing of it is stored.
#[tokio::test]
async fn messages_pending_at_termination_fail_as_terminated() {
    use std::time::Duration;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("r-h2-terminated-pending");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    // The refusal of the re-create comes late: a window for a send while detached.
    broker.set_response_delay(Duration::from_millis(300));
    broker.terminate_topic(&topic).unwrap();
    wait_until("the re-create was sent", || {
        broker.received_of(Type::Producer).len() == 2
    })
    .await;
    let r = match producer.send("pending").await {
        Ok(f) => within("the pending send", f).await,
        Err(e) => Err(e),
    };
    assert!(matches!(r, Err(Error::TopicTerminated { .. })), "{r:?}");
    assert_eq!(
        within("the producer ends", producer.closed()).await,
        State::Terminated
    );
    assert_eq!(broker.topic_messages(&topic), 1);
}

/// Upstream keeps the deduplication state with the topic (its cursor snapshot, replayed on
/// load): across a broker restart a duplicate is still dropped and a producer of that name
/// learns the last id. It is a namespace policy: another namespace stores the repeat.
#[tokio::test]
async fn deduplication_survives_a_restart_and_is_per_namespace() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    broker.create_namespace("public/other").unwrap();
    let client = client(&broker.service_url());
    let topic = full("r-h2-dedup-restart");
    let other_topic = "persistent://public/other/r-h2-dedup-restart";
    let p = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let q = client
        .producer(other_topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        p.send_and_wait(format!("m{i}")).await.unwrap();
        q.send_and_wait(format!("m{i}")).await.unwrap();
    }
    broker.restart().await.unwrap();
    wait_until("back", || {
        p.state() == State::Ready && q.state() == State::Ready
    })
    .await;
    let dup = p
        .send_and_wait(ProducerMessage::new("repeat").sequence_id(2))
        .await
        .unwrap();
    assert_eq!(dup.entry_id, u64::MAX);
    assert_eq!(broker.topic_messages(&topic), 3);
    let stored = q
        .send_and_wait(ProducerMessage::new("repeat").sequence_id(2))
        .await
        .unwrap();
    assert_ne!(stored.entry_id, u64::MAX);
    assert_eq!(broker.topic_messages(other_topic), 4);
    p.close().await.unwrap();
    let again = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    again.send_and_wait("next").await.unwrap();
    assert_eq!(sent_sequence_ids(&broker).last(), Some(&3));
    assert_eq!(broker.topic_messages(&topic), 4);
}

/// With deduplication on, messages the broker stored but whose receipts were lost are re-sent
/// by the client after its reconnect (Java `resendMessages`); the broker recognises them
/// (PRODUCER_SUCCESS told the client the last id, but the client's counter rules) and answers
/// each with (-1, -1) without storing it again, and those sends complete: nothing is stored
/// twice, and the next message is stored.
#[tokio::test]
async fn re_sent_messages_the_broker_stored_are_not_stored_twice() {
    use std::time::Duration;
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let client = client(&broker.service_url());
    let topic = full("r-h2-dedup-resend");
    let producer = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut pending = Vec::new();
    for i in 0..3 {
        pending.push(producer.send(format!("m{i}")).await.unwrap());
    }
    broker
        .wait_for_commands(Type::Send, 3, Duration::from_secs(5))
        .await
        .expect("the sends reached the broker");
    assert_eq!(broker.topic_messages(&topic), 3);
    broker.drop_all_connections();
    broker.set_unresponsive(false);
    for r in within("the re-sent ones", futures::future::join_all(pending)).await {
        let id = r.unwrap();
        assert_eq!((id.ledger_id, id.entry_id), (u64::MAX, u64::MAX));
    }
    assert_eq!(broker.topic_messages(&topic), 3);
    assert_eq!(sent_sequence_ids(&broker), [0, 1, 2, 0, 1, 2]);
    let id = producer.send_and_wait("next").await.unwrap();
    assert_eq!(id.entry_id, 3);
    wait_until("stored", || broker.topic_messages(&topic) == 4).await;
}

/// A batch is recorded by its highest sequence id (upstream `isDuplicateNormal`:
/// `highestSequencedPushed.put(name, max(highestSequenceId, sequenceId))`): a producer of that
/// name created later goes on after the batch's last message.
#[tokio::test]
async fn deduplication_records_a_batch_by_its_highest_sequence_id() {
    use pulsar_sdk::producer::BatchingOptions;
    use std::time::Duration;
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("public/default", true).unwrap();
    let client = client(&broker.service_url());
    let topic = full("r-h2-dedup-batch");
    let producer = client
        .producer(&topic)
        .name("p")
        .batching_options(BatchingOptions {
            max_messages: 5,
            max_publish_delay: Duration::from_secs(10),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..5 {
        receipts.push(producer.send(format!("b{i}")).await.unwrap());
    }
    for r in futures::future::join_all(receipts).await {
        r.unwrap();
    }
    assert_eq!(broker.topic_messages(&topic), 1);
    producer.close().await.unwrap();
    let again = client
        .producer(&topic)
        .name("p")
        .batching(false)
        .create()
        .await
        .unwrap();
    let id = again.send_and_wait("next").await.unwrap();
    assert_ne!(id.entry_id, u64::MAX);
    assert_eq!(sent_sequence_ids(&broker), [0, 5]);
    assert_eq!(broker.topic_messages(&topic), 2);
}
