//! Upstream `ConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{DeadLetterPolicy, InitialPosition, SubscriptionType};

use crate::common::{client, full, publish, publish_batch, unbatched_producer, within};

/// Java `ConsumerImpl.processPossibleToDLQ` sets ORIGIN_MESSAGE_ID to the message id's
/// `toString()`: `MessageIdImpl` prints `ledger:entry:partition` (no batch part),
/// `BatchMessageIdImpl` `ledger:entry:partition:batchIndex`. Go prints the same.
#[tokio::test]
async fn dead_letter_origin_message_id_is_printed_as_java_prints_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-dlq-origin");
    let producer = unbatched_producer(&client, &topic).await;
    let single = publish(&producer, "single", 1).await[0];
    let batched = publish_batch(&client, &topic, 2).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    // Each message: delivered, nacked, redelivered at the maximum, nacked: dead-lettered.
    let mut nacked = 0;
    while nacked < 6 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.nack(&m).unwrap();
        nacked += 1;
    }
    let mut reader = client.reader(&dlq).start_earliest().create().await.unwrap();
    let mut origins = Vec::new();
    for _ in 0..3 {
        let letter = within("a dead letter", reader.recv()).await.unwrap();
        let origin = letter.properties.get("ORIGIN_MESSAGE_ID").cloned();
        origins.push((letter.payload_str().unwrap().to_string(), origin));
    }
    origins.sort();
    let want = |s: &str| Some(s.to_string());
    assert_eq!(
        origins,
        vec![
            (
                "b-0".to_string(),
                want(&format!(
                    "{}:{}:-1:0",
                    batched[0].ledger_id, batched[0].entry_id
                )),
            ),
            (
                "b-1".to_string(),
                want(&format!(
                    "{}:{}:-1:1",
                    batched[1].ledger_id, batched[1].entry_id
                )),
            ),
            (
                "single-0".to_string(),
                want(&format!("{}:{}:-1", single.ledger_id, single.entry_id)),
            ),
        ]
    );
}

/// Java `ConsumerImpl.setTerminated` only sets `hasReachedEndOfTopic` (and tells the
/// listener): the consumer stays attached, and its `closeAsync` still sends CloseConsumer, so
/// the subscription is free for the next consumer. Every operation keeps working.
#[tokio::test]
async fn a_consumer_at_the_end_of_its_topic_stays_attached_until_closed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-end-attached");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    let subscribe = || {
        client
            .consumer(&topic)
            .subscription("s")
            .subscription_type(SubscriptionType::Exclusive)
            .initial_position(InitialPosition::Earliest)
            .ack_group_time(Duration::ZERO)
            .subscribe()
    };
    let mut consumer = subscribe().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
        got.push(m);
    }
    broker.terminate_topic(&topic).unwrap();
    // The end is reported once, after the messages; the consumer stays a consumer.
    let end = within("the end", consumer.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
    assert!(consumer.has_reached_end_of_topic());
    assert_eq!(consumer.state(), pulsar_sdk::State::Ready);
    assert_eq!(broker.consumers(&topic, "s"), 1, "still attached");
    // Acks, nacks and a cumulative ack are accepted (Java sends them as for any consumer).
    consumer.ack(&got[0]).unwrap();
    consumer.nack(&got[1]).unwrap();
    consumer.ack_cumulative(&got[1]).unwrap();
    // Seek works: the messages come again (the flag stays set, as Java's).
    consumer
        .seek(pulsar_sdk::MessageId::EARLIEST)
        .await
        .unwrap();
    let again = within("recv after seek", consumer.recv()).await.unwrap();
    assert_eq!(again.payload_str(), Some("m-0"));
    assert!(consumer.has_reached_end_of_topic());
    // close() detaches it on the broker: CloseConsumer sent, subscription free again.
    within("close", consumer.close()).await.unwrap();
    assert_eq!(
        broker
            .received_of(pulsar_sdk::mock::wire::base_command::Type::CloseConsumer)
            .len(),
        1
    );
    assert_eq!(broker.consumers(&topic, "s"), 0);
    let next = within("subscribe again", subscribe()).await;
    assert!(next.is_ok(), "the subscription is still taken: {next:?}");
}

/// Java `ConsumerImpl.unsubscribeAsync` on a consumer at the end: sent as for any consumer
/// (the subscription is deleted on the broker).
#[tokio::test]
async fn a_consumer_at_the_end_of_its_topic_can_unsubscribe() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-end-unsubscribe");
    broker.create_topic(&topic);
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    broker.terminate_topic(&topic).unwrap();
    let end = within("the end", consumer.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
    within("unsubscribe", consumer.unsubscribe()).await.unwrap();
    assert!(broker.subscriptions(&topic).is_empty());
}

/// Java `ConsumerImpl.seekAsync` clears the incoming queue, and `receive` never reports the
/// end: after a seek back, the messages come again. A consumer whose end-of-topic notice was
/// still queued when the application seeked back must hand out the messages from the new
/// position, not the stale end first (a `while let Ok(m) = consumer.recv()` loop would stop
/// there, with the whole topic to read again).
#[tokio::test]
async fn a_seek_back_before_taking_the_end_reads_again_without_a_stale_end() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-end-stale");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    broker.terminate_topic(&topic).unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
    }
    crate::common::wait_until("the end", || consumer.has_reached_end_of_topic()).await;
    consumer
        .seek(pulsar_sdk::MessageId::EARLIEST)
        .await
        .unwrap();
    let again = within("recv after seek", consumer.recv()).await;
    assert_eq!(
        again.as_ref().ok().and_then(|m| m.payload_str()),
        Some("m-0"),
        "{again:?}"
    );
    // At the end again (read and acked): the broker says so again, and `recv` reports it.
    consumer.ack(&again.unwrap()).unwrap();
    let m = within("recv", consumer.recv()).await.unwrap();
    assert_eq!(m.payload_str(), Some("m-1"));
    consumer.ack(&m).unwrap();
    let end = within("the end again", consumer.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
}

/// A consumer at the end is dropped without `close()` (or the client closes): Java's
/// `ConsumerImpl` at the end is closed like any other (CloseConsumer), so the subscription is
/// free for the next Exclusive consumer.
#[tokio::test]
async fn a_consumer_at_the_end_dropped_or_closed_with_the_client_detaches() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (t1, t2) = (full("conf-end-drop-1"), full("conf-end-drop-2"));
    let mut consumers = Vec::new();
    for t in [&t1, &t2] {
        broker.create_topic(t);
        let mut c = client
            .consumer(t)
            .subscription("s")
            .subscription_type(SubscriptionType::Exclusive)
            .subscribe()
            .await
            .unwrap();
        broker.terminate_topic(t).unwrap();
        let end = within("the end", c.recv()).await;
        assert!(
            matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
            "{end:?}"
        );
        consumers.push(c);
    }
    let kept = consumers.pop().unwrap();
    drop(consumers);
    crate::common::wait_until("the dropped consumer detached", || {
        broker.consumers(&t1, "s") == 0
    })
    .await;
    within("client close", client.close()).await.unwrap();
    assert_eq!(broker.consumers(&t2, "s"), 0);
    drop(kept);
}
