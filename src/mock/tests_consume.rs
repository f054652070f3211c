//! The in-memory broker, consumer side: subscriptions, dispatch, acks, redelivery, seek.

use super::tests_support::{eventually, metadata, subscribe_cmd, Client, TOPIC};
use super::wire::{self, base_command::Type, command_subscribe::SubType};
use super::*;

/// A broker with `n` messages on TOPIC (sequence ids 0.., partition keys "k0", "k1", ...
/// alternating with `keys` distinct keys).
async fn broker_with(n: u64, keys: u64) -> (MockBroker, Client) {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(TOPIC, 1).await;
    for seq in 0..n {
        let key = format!("k{}", seq % keys.max(1));
        producer
            .publish(1, metadata("p", seq, Some(&key)), b"m")
            .await;
    }
    (broker, producer)
}

fn id(entry: u64) -> wire::MessageIdData {
    wire::MessageIdData {
        ledger_id: 1,
        entry_id: entry,
        ..Default::default()
    }
}

#[tokio::test]
async fn dispatch_respects_permits_and_initial_position() {
    let (broker, mut producer) = broker_with(3, 1).await;
    let mut c = Client::connect(&broker).await;
    c.subscribe(TOPIC, "early", SubType::Exclusive, 1).await;
    c.flow(1, 2).await;
    let got = c.messages(2).await;
    assert_eq!(got.iter().map(|d| d.entry()).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(got[0].message.consumer_id, 1);
    // Upstream `Commands.newMessageCommand` leaves a redelivery count of 0 out.
    assert_eq!(got[0].message.redelivery_count, None);
    assert_eq!(got[0].message.message_id.ledger_id, 1);
    assert_eq!(got[0].message.message_id.partition, Some(-1));
    assert_eq!(got[1].metadata.sequence_id, 1);
    assert_eq!(got[1].payload, &b"m"[..]);
    c.quiet().await;
    c.flow(1, 5).await;
    assert_eq!(c.message().await.entry(), 2);

    // Latest: only what is published afterwards; new messages reach waiting consumers.
    let mut sub = subscribe_cmd(TOPIC, "late", SubType::Exclusive, 2, 50);
    sub.initial_position = Some(wire::command_subscribe::InitialPosition::Latest as i32);
    sub.subscription_properties = vec![wire::KeyValue {
        key: "a".into(),
        value: "b".into(),
    }];
    assert_eq!(c.subscribe_with(sub).await.r#type, Type::Success as i32);
    c.flow(2, 10).await;
    c.quiet().await;
    producer.publish(1, metadata("p", 3, None), b"new").await;
    let mut got = [c.message().await, c.message().await];
    got.sort_by_key(|d| d.message.consumer_id);
    assert_eq!((got[0].entry(), got[1].entry()), (3, 3));
    assert_eq!(got[1].payload, &b"new"[..]);
    assert_eq!(broker.subscriptions(TOPIC), ["early", "late"]);
    assert_eq!(
        broker.subscription_properties(TOPIC, "late"),
        Some(vec![("a".to_owned(), "b".to_owned())])
    );
    assert_eq!(broker.consumers(TOPIC, "early"), 1);
}

#[tokio::test]
async fn shared_splits_and_exclusive_refuses() {
    let (broker, _producer) = broker_with(4, 1).await;
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    b.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    a.flow(1, 10).await;
    // `a` has all the permits so far.
    assert_eq!(a.messages(4).await.len(), 4);
    b.flow(1, 10).await;
    b.last_message_id(1).await; // FLOW handled
    a.redeliver(1, vec![]).await;
    // Redelivered round robin between both consumers with permits.
    let (mut from_a, mut from_b) = (0, 0);
    for _ in 0..4 {
        tokio::select! {
            d = a.message() => { from_a += 1; assert_eq!(d.message.redelivery_count, Some(1)); }
            d = b.message() => { from_b += 1; assert_eq!(d.message.redelivery_count, Some(1)); }
        }
    }
    assert_eq!(from_a + from_b, 4);
    assert!(from_a > 0 && from_b > 0, "{from_a} / {from_b}");

    // Exclusive: a second consumer is refused, as is another type on a busy subscription.
    a.subscribe(TOPIC, "x", SubType::Exclusive, 2).await;
    let resp = b
        .subscribe_with(subscribe_cmd(TOPIC, "x", SubType::Exclusive, 2, 7))
        .await;
    let err = resp.error.unwrap();
    assert_eq!(
        (err.request_id, ServerError::from_code(err.error)),
        (7, ServerError::ConsumerBusy)
    );
    let resp = b
        .subscribe_with(subscribe_cmd(TOPIC, "s", SubType::Failover, 3, 8))
        .await;
    assert_eq!(
        ServerError::from_code(resp.error.unwrap().error),
        ServerError::ConsumerBusy
    );
    assert_eq!(broker.consumers(TOPIC, "x"), 1);
}

#[tokio::test]
async fn failover_switches_active_consumer() {
    let (broker, _producer) = broker_with(3, 1).await;
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.subscribe(TOPIC, "f", SubType::Failover, 1).await; // consumer-1: sorts first
    let change = a.raw.expect(Type::ActiveConsumerChange).await;
    assert_eq!(change.active_consumer_change.unwrap().is_active, Some(true));
    b.subscribe(TOPIC, "f", SubType::Failover, 2).await;
    let change = b.raw.expect(Type::ActiveConsumerChange).await;
    let change = change.active_consumer_change.unwrap();
    assert_eq!((change.consumer_id, change.is_active), (2, Some(false)));

    a.flow(1, 10).await;
    b.flow(2, 10).await;
    let got = a.messages(3).await;
    a.ack(1, vec![got[0].message.message_id.clone()], false)
        .await;
    b.quiet().await;

    // The active consumer leaves: `b` becomes active and gets the unacknowledged ones.
    a.close_consumer(1).await.success.unwrap();
    let change = b.raw.expect(Type::ActiveConsumerChange).await;
    assert_eq!(change.active_consumer_change.unwrap().is_active, Some(true));
    let again = b.messages(2).await;
    assert_eq!(again.iter().map(|d| d.entry()).collect::<Vec<_>>(), [1, 2]);
    // Exclusive/Failover do not count redeliveries (upstream disables the tracker).
    assert_eq!(again[0].message.redelivery_count, None);
}

#[tokio::test]
async fn key_shared_keeps_keys_on_one_consumer() {
    let (broker, _producer) = broker_with(12, 4).await;
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.subscribe(TOPIC, "k", SubType::KeyShared, 1).await;
    b.subscribe(TOPIC, "k", SubType::KeyShared, 1).await;
    a.flow(1, 100).await;
    b.flow(1, 100).await;
    let mut owner: std::collections::HashMap<String, u8> = Default::default();
    let mut seen = 0;
    while seen < 12 {
        let (who, d) = tokio::select! {
            d = a.message() => (0, d),
            d = b.message() => (1, d),
        };
        let key = d.metadata.partition_key.clone().unwrap();
        assert_eq!(*owner.entry(key).or_insert(who), who, "key moved");
        seen += 1;
    }
    assert_eq!(owner.len(), 4);
}

#[tokio::test]
async fn acks_individual_cumulative_and_responses() {
    let (broker, _producer) = broker_with(5, 1).await;
    let mut c = Client::connect(&broker).await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 1).await;
    c.flow(1, 10).await;
    c.messages(5).await;
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 5);
    c.ack(1, vec![id(3)], false).await;
    c.ack(1, vec![id(1)], true).await;
    // With a request id the ack is answered.
    let resp = c
        .request(wire::BaseCommand {
            r#type: Type::Ack as i32,
            ack: Some(wire::CommandAck {
                consumer_id: 1,
                message_id: vec![id(4)],
                request_id: Some(77),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    let resp = resp.ack_response.unwrap();
    assert_eq!(
        (resp.consumer_id, resp.request_id, resp.error),
        (1, Some(77), None)
    );
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 1);
    // Only entry 2 comes back.
    c.redeliver(1, vec![]).await;
    assert_eq!(c.message().await.entry(), 2);
    c.quiet().await;
}

#[tokio::test]
async fn redelivery_counts_and_disconnects() {
    let (broker, _producer) = broker_with(3, 1).await;
    let mut a = Client::connect(&broker).await;
    a.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    a.flow(1, 10).await;
    a.messages(3).await;
    // Redeliver one by id, twice.
    for count in 1..=2 {
        a.redeliver(1, vec![id(1)]).await;
        let d = a.message().await;
        assert_eq!((d.entry(), d.message.redelivery_count), (1, Some(count)));
    }
    // A disconnect hands the unacknowledged to another consumer, counts unchanged.
    let mut b = Client::connect(&broker).await;
    b.subscribe(TOPIC, "s", SubType::Shared, 5).await;
    b.flow(5, 10).await;
    b.quiet().await;
    drop(a);
    let mut got: Vec<(u64, u32)> = b
        .messages(3)
        .await
        .iter()
        .map(|d| (d.entry(), d.message.redelivery_count.unwrap_or(0)))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(0, 0), (1, 2), (2, 0)]);
    assert_eq!(broker.consumers(TOPIC, "s"), 1);
}

#[tokio::test]
async fn unsubscribe_needs_to_be_alone() {
    let (broker, _producer) = broker_with(1, 1).await;
    let mut a = Client::connect(&broker).await;
    a.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    a.subscribe(TOPIC, "s", SubType::Shared, 2).await;
    let resp = a.unsubscribe(1).await;
    assert_eq!(
        ServerError::from_code(resp.error.unwrap().error),
        ServerError::ConsumerBusy
    );
    a.close_consumer(2).await.success.unwrap();
    a.unsubscribe(1).await.success.unwrap();
    assert!(broker.subscriptions(TOPIC).is_empty());
    // The consumer is gone too.
    let resp = a.unsubscribe(1).await;
    assert_eq!(
        ServerError::from_code(resp.error.unwrap().error),
        ServerError::ConsumerNotFound
    );
}

#[tokio::test]
async fn batches_cost_their_messages_and_ack_by_index() {
    let broker = MockBroker::start().await.unwrap();
    let mut p = Client::connect(&broker).await;
    p.producer(TOPIC, 1).await;
    let mut batch = metadata("p", 0, None);
    batch.num_messages_in_batch = Some(3);
    p.publish(1, batch, b"bbb").await;
    for seq in 3..5 {
        p.publish(1, metadata("p", seq, None), b"m").await;
    }
    let mut c = Client::connect(&broker).await;
    let last = {
        c.subscribe(TOPIC, "s", SubType::Shared, 1).await;
        c.last_message_id(1).await.last_message_id
    };
    assert_eq!((last.entry_id, last.batch_index), (2, None));
    c.flow(1, 4).await; // the batch (3), then one message
    let got = c.messages(2).await;
    assert_eq!(got[0].metadata.num_messages_in_batch, Some(3));
    assert_eq!(got[1].entry(), 1);
    c.quiet().await;
    // Ack messages 0 and 2 of the batch: redelivered with the remaining one marked.
    let mut partial = id(0);
    partial.ack_set = vec![0b010];
    c.ack(1, vec![partial], false).await;
    c.redeliver(1, vec![id(0)]).await;
    c.flow(1, 1).await;
    let d = c.message().await;
    assert_eq!((d.entry(), d.message.ack_set.clone()), (0, vec![0b010]));
    let mut rest = id(0);
    rest.ack_set = vec![0b101];
    c.ack(1, vec![rest, id(1)], false).await;
    eventually(|| broker.subscription_backlog(TOPIC, "s") == 1).await;
}

#[tokio::test]
async fn last_message_id_of_empty_and_batch_topics() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 1).await;
    let resp = c.last_message_id(1).await;
    assert_eq!(resp.last_message_id.entry_id as i64, -1);
    assert_eq!(resp.last_message_id.ledger_id, 1);
    let mut batch = metadata("p", 0, None);
    batch.num_messages_in_batch = Some(5);
    c.producer(TOPIC, 1).await;
    c.publish(1, batch, b"b").await;
    let resp = c.last_message_id(1).await;
    assert_eq!(
        (
            resp.last_message_id.entry_id,
            resp.last_message_id.batch_index
        ),
        (0, Some(4))
    );
    assert_eq!(
        resp.consumer_mark_delete_position.unwrap().entry_id as i64,
        -1
    );
}

#[tokio::test]
async fn seek_resets_the_cursor_and_disconnects_consumers() {
    let (broker, _producer) = broker_with(4, 1).await;
    let mut c = Client::connect(&broker).await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 1).await;
    c.flow(1, 10).await;
    let got = c.messages(4).await;
    c.ack(1, vec![got[3].message.message_id.clone()], true)
        .await;
    let resp = c
        .seek(wire::CommandSeek {
            consumer_id: 1,
            request_id: 5,
            message_id: Some(id(1)),
            ..Default::default()
        })
        .await;
    assert_eq!(resp.success.unwrap().request_id, 5);
    let closed = c
        .raw
        .expect(Type::CloseConsumer)
        .await
        .close_consumer
        .unwrap();
    assert_eq!(closed.consumer_id, 1);
    assert_eq!(broker.consumers(TOPIC, "s"), 0);
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 3);
    c.subscribe(TOPIC, "s", SubType::Exclusive, 1).await;
    c.flow(1, 10).await;
    let again = c.messages(3).await;
    assert_eq!(
        again.iter().map(|d| d.entry()).collect::<Vec<_>>(),
        [1, 2, 3]
    );

    // By publish time (message n was published at 1000 + n).
    let resp = c
        .seek(wire::CommandSeek {
            consumer_id: 1,
            request_id: 6,
            message_publish_time: Some(1_003),
            ..Default::default()
        })
        .await;
    resp.success.unwrap();
    c.raw.expect(Type::CloseConsumer).await;
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 1);
}

#[tokio::test]
async fn non_durable_readers_start_after_the_given_id() {
    let (broker, _producer) = broker_with(4, 1).await;
    let mut c = Client::connect(&broker).await;
    let mut reader = subscribe_cmd(TOPIC, "reader", SubType::Exclusive, 1, 9);
    reader.durable = Some(false);
    reader.start_message_id = Some(id(1));
    c.subscribe_with(reader).await.success.unwrap();
    c.flow(1, 10).await;
    let got = c.messages(2).await;
    assert_eq!((got[0].entry(), got[1].entry()), (2, 3));
    c.close_consumer(1).await;
    assert!(broker.subscriptions(TOPIC).is_empty());
}

#[tokio::test]
async fn a_dropped_connection_frees_the_exclusive_subscription_at_once() {
    let (broker, _producer) = broker_with(2, 1).await;
    let mut a = Client::connect(&broker).await;
    a.subscribe(TOPIC, "x", SubType::Exclusive, 1).await;
    a.flow(1, 1).await;
    assert_eq!(a.message().await.entry(), 0);
    let conn = *broker.connections().last().unwrap();
    assert!(broker.drop_connection(conn));
    assert_eq!(broker.consumers(TOPIC, "x"), 0);
    let mut b = Client::connect(&broker).await;
    b.subscribe(TOPIC, "x", SubType::Exclusive, 1).await;
    b.flow(1, 5).await;
    let got = b.messages(2).await;
    assert_eq!((got[0].entry(), got[1].entry()), (0, 1));
    assert!(a.raw.is_closed().await);
}

fn redeliver_cmd(
    consumer_id: u64,
    ids: Vec<wire::MessageIdData>,
    consumer_epoch: Option<u64>,
) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::RedeliverUnacknowledgedMessages as i32,
        redeliver_unacknowledged_messages: Some(wire::CommandRedeliverUnacknowledgedMessages {
            consumer_id,
            message_ids: ids,
            consumer_epoch,
        }),
        ..Default::default()
    }
}

fn entries_and_epochs(got: &[super::tests_support::Delivery]) -> Vec<(u64, Option<u64>)> {
    got.iter()
        .map(|d| (d.entry(), d.message.consumer_epoch))
        .collect()
}

/// Upstream `PersistentDispatcherSingleActiveConsumer.internalRedeliverUnacknowledgedMessages`:
/// raise the epoch, rewind the cursor, dispatch everything not acknowledged again in order,
/// within the permits left (they are not given back: the client sends FLOW).
#[tokio::test]
async fn exclusive_redeliver_all_rewinds_with_the_new_epoch() {
    let (_broker, _producer) = broker_with(4, 1).await;
    let mut c = Client::connect(&_broker).await;
    let mut sub = subscribe_cmd(TOPIC, "x", SubType::Exclusive, 1, 50);
    sub.consumer_epoch = Some(0);
    assert_eq!(c.subscribe_with(sub).await.r#type, Type::Success as i32);
    c.flow(1, 3).await;
    let got = c.messages(3).await;
    assert_eq!(
        entries_and_epochs(&got),
        [(0, Some(0)), (1, Some(0)), (2, Some(0))]
    );
    assert!(got.iter().all(|d| d.message.redelivery_count.is_none()));
    c.ack(1, vec![id(1)], false).await;

    // Redeliver all with epoch 1: no permits are left, so nothing comes...
    c.raw.send(redeliver_cmd(1, vec![], Some(1))).await;
    c.quiet().await;
    // ... until FLOW: then every unacknowledged entry, in order, under epoch 1.
    c.flow(1, 10).await;
    let got = c.messages(3).await;
    assert_eq!(
        entries_and_epochs(&got),
        [(0, Some(1)), (2, Some(1)), (3, Some(1))]
    );
    assert!(got.iter().all(|d| d.message.redelivery_count.is_none()));
    c.quiet().await;

    // With ids (and an older epoch) it is the same rewind: ids are not used on Exclusive
    // (ServerCnx takes the per-id path only in individual-ack mode), the epoch stays 1.
    c.raw.send(redeliver_cmd(1, vec![id(3)], Some(0))).await;
    let got = c.messages(3).await;
    assert_eq!(
        entries_and_epochs(&got),
        [(0, Some(1)), (2, Some(1)), (3, Some(1))]
    );
    c.quiet().await;

    // Without an epoch (DEFAULT_CONSUMER_EPOCH): rewound, epoch unchanged; permits ran out
    // (10 - 6 = 4 left: 3 more entries, then 1 left).
    c.raw.send(redeliver_cmd(1, vec![], None)).await;
    let got = c.messages(3).await;
    assert_eq!(
        entries_and_epochs(&got),
        [(0, Some(1)), (2, Some(1)), (3, Some(1))]
    );
    c.ack(1, vec![id(3)], true).await;
    c.raw.send(redeliver_cmd(1, vec![], Some(5))).await;
    c.quiet().await;
}

/// The epoch of a Failover consumer that is not active is raised by its REDELIVER, which
/// otherwise does nothing ("Only the active consumer can call resend"); once active, its
/// messages carry that epoch. A consumer subscribed without an epoch gets none in MESSAGE.
#[tokio::test]
async fn failover_epochs_follow_each_consumer() {
    let (broker, _producer) = broker_with(2, 1).await;
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.subscribe(TOPIC, "f", SubType::Failover, 1).await; // active, no epoch
    a.raw.expect(Type::ActiveConsumerChange).await;
    let mut sub = subscribe_cmd(TOPIC, "f", SubType::Failover, 2, 51);
    sub.consumer_epoch = Some(3);
    assert_eq!(b.subscribe_with(sub).await.r#type, Type::Success as i32);
    b.raw.expect(Type::ActiveConsumerChange).await;
    a.flow(1, 10).await;
    b.flow(2, 10).await;
    assert_eq!(
        entries_and_epochs(&a.messages(2).await),
        [(0, None), (1, None)]
    );
    b.raw.send(redeliver_cmd(2, vec![], Some(7))).await;
    b.quiet().await;
    a.close_consumer(1).await.success.unwrap();
    b.raw.expect(Type::ActiveConsumerChange).await;
    assert_eq!(
        entries_and_epochs(&b.messages(2).await),
        [(0, Some(7)), (1, Some(7))]
    );
}

/// Shared and Key_Shared dispatchers send without an epoch (upstream passes
/// DEFAULT_CONSUMER_EPOCH), and keep per-id redelivery.
#[tokio::test]
async fn shared_messages_carry_no_epoch() {
    let (broker, _producer) = broker_with(2, 1).await;
    let mut c = Client::connect(&broker).await;
    for (consumer_id, sub_type) in [(1, SubType::Shared), (2, SubType::KeyShared)] {
        let mut sub = subscribe_cmd(TOPIC, &format!("s{consumer_id}"), sub_type, consumer_id, 60);
        sub.consumer_epoch = Some(4);
        assert_eq!(c.subscribe_with(sub).await.r#type, Type::Success as i32);
        c.flow(consumer_id, 10).await;
        let got = c.messages(2).await;
        assert_eq!(entries_and_epochs(&got), [(0, None), (1, None)]);
        c.raw
            .send(redeliver_cmd(consumer_id, vec![id(1)], Some(5)))
            .await;
        let again = c.message().await;
        assert_eq!(
            (again.entry(), again.message.redelivery_count),
            (1, Some(1))
        );
        assert_eq!(again.message.consumer_epoch, None);
    }
}

/// An entry the client could not decode is acknowledged with `validation_error` (upstream
/// `ConsumerImpl.discardCorruptedMessage`); the broker takes it as an ordinary ack.
#[tokio::test]
async fn acks_with_a_validation_error_acknowledge() {
    let (broker, _producer) = broker_with(3, 1).await;
    let mut c = Client::connect(&broker).await;
    c.subscribe(TOPIC, "s", SubType::Shared, 1).await;
    c.flow(1, 10).await;
    c.messages(3).await;
    let resp = c
        .request(wire::BaseCommand {
            r#type: Type::Ack as i32,
            ack: Some(wire::CommandAck {
                consumer_id: 1,
                ack_type: wire::command_ack::AckType::Individual as i32,
                message_id: vec![id(1)],
                validation_error: Some(wire::command_ack::ValidationError::ChecksumMismatch as i32),
                request_id: Some(9),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    let resp = resp.ack_response.unwrap();
    assert_eq!((resp.request_id, resp.error), (Some(9), None));
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 2);
    c.redeliver(1, vec![]).await;
    let mut again: Vec<u64> = c.messages(2).await.iter().map(|d| d.entry()).collect();
    again.sort_unstable();
    assert_eq!(again, [0, 2]);
    c.quiet().await;
}

/// Key_Shared routes by the entry's outer metadata: ordering key first, else the partition key
/// (base64-decoded when flagged); a batch goes whole to the key's owner, and keys spread over
/// the consumers (Murmur3 slots on a consistent-hash ring, as upstream).
#[tokio::test]
async fn key_shared_routes_batches_by_their_metadata_key() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(TOPIC, 1).await;
    let mut seq = 0;
    let mut publish = |meta: wire::MessageMetadata| {
        let mut meta = meta;
        meta.sequence_id = seq;
        meta.num_messages_in_batch = Some(2);
        seq += 1;
        meta
    };
    let mut expected_key: Vec<Vec<u8>> = Vec::new();
    for k in 0..32 {
        let key = format!("key-{k}");
        let mut meta = publish(metadata("p", 0, Some("ignored-partition-key")));
        meta.ordering_key = Some(key.clone().into_bytes().into());
        producer.publish(1, meta, b"batch").await;
        expected_key.push(key.into_bytes());
    }
    // The same key three ways: ordering key, plain partition key, base64 partition key.
    let mut by_ordering = publish(metadata("p", 0, None));
    by_ordering.ordering_key = Some(vec![0u8, 1, 2].into());
    let mut by_b64 = publish(metadata("p", 0, Some("AAEC")));
    by_b64.partition_key_b64_encoded = Some(true);
    let by_plain = publish(metadata("p", 0, Some("AAEC")));
    for meta in [by_ordering, by_b64, by_plain] {
        producer.publish(1, meta, b"batch").await;
    }

    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    a.subscribe(TOPIC, "k", SubType::KeyShared, 1).await;
    b.subscribe(TOPIC, "k", SubType::KeyShared, 2).await;
    a.flow(1, 1000).await;
    b.flow(2, 1000).await;
    let mut owner: std::collections::HashMap<u64, u8> = Default::default();
    while owner.len() < 35 {
        let (who, d) = tokio::select! {
            d = a.message() => (0, d),
            d = b.message() => (1, d),
        };
        owner.insert(d.entry(), who);
    }
    let to_a = (0..32).filter(|e| owner[e] == 0).count();
    assert!(
        to_a > 0 && to_a < 32,
        "keys did not spread: {to_a} of 32 to a"
    );
    // Entries 32 (ordering key [0,1,2]) and 33 (the same bytes in base64) share an owner.
    assert_eq!(owner[&32], owner[&33]);

    // The owner is the one upstream's selector picks for the key.
    fn ring(name: &'static str) -> impl Iterator<Item = u32> {
        (0..super::hashing::RING_POINTS).map(move |i| super::hashing::ring_point(name, 0, i))
    }
    let mut points: Vec<(u32, u8)> = ring("consumer-1")
        .map(|p| (p, 0))
        .chain(ring("consumer-2").map(|p| (p, 1)))
        .collect();
    points.sort_by_key(|(p, _)| *p);
    points.dedup_by_key(|(p, _)| *p);
    let pick = |key: &[u8]| {
        let slot = super::hashing::sticky_key_hash(key);
        points
            .iter()
            .find(|(p, _)| *p >= slot)
            .unwrap_or(&points[0])
            .1
    };
    for (e, key) in expected_key.iter().enumerate() {
        assert_eq!(owner[&(e as u64)], pick(key), "entry {e}");
    }
    assert_eq!(owner[&32], pick(&[0, 1, 2]));
    assert_eq!(owner[&34], pick(b"AAEC"));
}

/// Non-persistent topics (upstream `NonPersistentTopic.publishMessage`: `EntryImpl.create(0L,
/// 0L, ...)`): every message has id (0, 0), no epoch, no redelivery count; acks and
/// redelivery requests are ignored (`NonPersistentSubscription`: no-ops).
#[tokio::test]
async fn non_persistent_messages_are_all_zero_zero() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "non-persistent://public/default/np2";
    let mut c = Client::connect(&broker).await;
    let mut sub = subscribe_cmd(topic, "s", SubType::Failover, 1, 50);
    sub.consumer_epoch = Some(2);
    assert_eq!(c.subscribe_with(sub).await.r#type, Type::Success as i32);
    c.raw.expect(Type::ActiveConsumerChange).await;
    c.flow(1, 10).await;
    let mut producer = Client::connect(&broker).await;
    producer.producer(topic, 1).await;
    for seq in 0..3 {
        let receipt = producer.publish(1, metadata("p", seq, None), b"m").await;
        let id = receipt.message_id.unwrap();
        assert_eq!((id.ledger_id, id.entry_id), (0, 0));
    }
    let got = c.messages(3).await;
    for (seq, d) in got.iter().enumerate() {
        let id = &d.message.message_id;
        assert_eq!((id.ledger_id, id.entry_id, id.partition), (0, 0, Some(-1)));
        assert_eq!(d.message.consumer_epoch, None);
        assert_eq!(d.message.redelivery_count, None);
        assert_eq!(d.metadata.sequence_id, seq as u64);
    }
    c.ack(1, vec![got[0].message.message_id.clone()], false)
        .await;
    c.raw.send(redeliver_cmd(1, vec![], Some(3))).await;
    c.redeliver(1, vec![got[1].message.message_id.clone()])
        .await;
    c.quiet().await;
    assert_eq!(broker.topic_messages(topic), 0);
}
