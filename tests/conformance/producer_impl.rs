//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use futures::future::join_all;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, Error, ProducerMessage};

use common::{full, test_client, within};

fn client(broker: &MockBroker) -> Client {
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
    let client = client(&broker);
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
