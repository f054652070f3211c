//! Upstream `ConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common;
use crate::common::{
    client, full, publish, publish_batch, recv, test_client, unbatched_producer, within,
};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, MockBroker};
use pulsar_sdk::{ConsumerOptions, DeadLetterPolicy, Error, InitialPosition, SubscriptionType};
use std::time::Duration;

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

const WAIT: Duration = Duration::from_secs(10);

fn subscribes(broker: &MockBroker) -> Vec<wire::CommandSubscribe> {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .map(|r| r.command.subscribe.unwrap())
        .collect()
}

fn redelivered_ids(broker: &MockBroker) -> Vec<Vec<u64>> {
    broker
        .received_of(Type::RedeliverUnacknowledgedMessages)
        .into_iter()
        .map(|r| {
            r.command
                .redeliver_unacknowledged_messages
                .unwrap()
                .message_ids
                .iter()
                .map(|id| id.entry_id)
                .collect()
        })
        .collect()
}

/// `ConsumerConfigurationData`'s defaults: receiverQueueSize 1000,
/// maxTotalReceiverQueueSizeAcrossPartitions 50000, acknowledgementsGroupTime 100 ms,
/// maxAcknowledgmentGroupSize 1000, negativeAckRedeliveryDelay 1 min, ackTimeout 0 (off),
/// tickDuration 1 s, Exclusive, Latest, maxPendingChunkedMessage 10,
/// expireTimeOfIncompleteChunkedMessage 1 min, autoUpdatePartitions on.
#[test]
fn consumer_defaults_are_upstreams() {
    let o = ConsumerOptions::default();
    assert_eq!(o.receiver_queue_size, 1000);
    assert_eq!(o.max_total_receiver_queue_size_across_partitions, 50_000);
    assert_eq!(o.ack_group_time, Duration::from_millis(100));
    assert_eq!(o.ack_group_max, 1000);
    assert_eq!(o.negative_ack_delay, Duration::from_secs(60));
    assert_eq!(o.ack_timeout, Duration::ZERO);
    assert_eq!(o.ack_timeout_tick, Duration::from_secs(1));
    assert_eq!(o.subscription_type, SubscriptionType::Exclusive);
    assert_eq!(o.initial_position, InitialPosition::Latest);
    assert_eq!(o.max_pending_chunked_messages, 10);
    assert!(!o.auto_ack_oldest_chunked_message_on_queue_full);
    assert_eq!(
        o.expire_time_of_incomplete_chunked_message,
        Duration::from_secs(60)
    );
    assert!(o.auto_update_partitions);
    assert!(!o.retry_enable);
    assert!(o.dead_letter_policy.is_none());
}

/// `ConsumerBuilderImpl.ackTimeout`: an ack timeout other than 0 must be at least 1 s
/// ("Ack timeout should be greater than 1000 ms"); the subscribe fails before anything is sent.
#[tokio::test]
async fn an_ack_timeout_under_a_second_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let refused = client
        .consumer("ack-timeout-min")
        .subscription("s")
        .ack_timeout(Duration::from_millis(999))
        .subscribe()
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidConfig(_))),
        "{refused:?}"
    );
    assert!(subscribes(&broker).is_empty(), "nothing reached the broker");
    client
        .consumer("ack-timeout-min")
        .subscription("s")
        .ack_timeout(Duration::from_secs(1))
        .subscribe()
        .await
        .expect("1 s is the smallest accepted");
}

/// `ConsumerImpl` constructor: without a consumer name, a random one is generated
/// (`ConsumerName.generateRandomName`), so two consumers on one subscription differ.
#[tokio::test]
async fn a_consumer_without_a_name_gets_a_random_one() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let mut consumers = Vec::new();
    for _ in 0..2 {
        consumers.push(
            client
                .consumer("names")
                .subscription("s")
                .subscription_type(SubscriptionType::Shared)
                .subscribe()
                .await
                .unwrap(),
        );
    }
    let names: Vec<String> = subscribes(&broker)
        .into_iter()
        .map(|s| s.consumer_name.unwrap_or_default())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
    assert_ne!(names[0], names[1]);
}

/// `ConsumerImpl.connectionOpened` / `Commands.newSubscribe`: Key_Shared subscribes with a
/// `KeySharedMeta` in AUTO_SPLIT mode (the default `KeySharedPolicy.autoSplitHashRange()`), and
/// the priority level and `readCompacted` of the configuration are sent.
#[tokio::test]
async fn subscribe_sends_key_shared_auto_split_priority_and_read_compacted() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let mut options = ConsumerOptions::default();
    options.subscription = "ks".into();
    options.subscription_type = SubscriptionType::KeyShared;
    options.priority_level = Some(3);
    options.read_compacted = true;
    let _consumer = client
        .consumer("ks-fields")
        .options(options)
        .subscribe()
        .await
        .unwrap();
    let sent = &subscribes(&broker)[0];
    let meta = sent.key_shared_meta.as_ref().expect("KeySharedMeta");
    assert_eq!(meta.key_shared_mode, wire::KeySharedMode::AutoSplit as i32);
    assert_eq!(sent.priority_level, Some(3));
    assert_eq!(sent.read_compacted, Some(true));
}

/// `ConsumerBase.receive` → `verifyConsumerState`: once the consumer is closed, receiving fails
/// with `AlreadyClosedException`, even with messages still in the receiver queue (they were
/// never handed out and cannot be acked: the broker gives them to another consumer).
#[tokio::test]
async fn receive_after_close_fails_with_closed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "recv-after-close";
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "m", 3).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let first = recv(&mut consumer).await;
    assert_eq!(first.payload_str().unwrap(), "m-0");
    // The other two reach the receiver queue before the close.
    common::wait_until("all three dispatched", || {
        consumer.stats().totals.receiver_queue_len >= 2
    })
    .await;
    consumer.close().await.unwrap();
    let after = within("recv after close", consumer.recv()).await;
    assert!(matches!(after, Err(Error::Closed)), "{after:?}");
    // The stream ends too.
    assert!(futures::StreamExt::next(&mut consumer).await.is_none());
}

/// `PersistentAcknowledgmentsGroupingTracker.addAcknowledgment`: with an ack group time of 0
/// every ack is flushed at once, one ACK frame each, instead of being grouped.
#[tokio::test]
async fn ack_group_time_zero_sends_each_ack_in_its_own_frame() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "ack-at-once";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "a", 3).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(recv(&mut consumer).await);
    }
    for m in &taken {
        consumer.ack(m).unwrap();
    }
    let acks = within(
        "three ACK frames",
        broker.wait_for_commands(Type::Ack, 3, WAIT),
    )
    .await
    .unwrap();
    let per_frame: Vec<Vec<u64>> = acks
        .iter()
        .map(|r| {
            r.command
                .ack
                .as_ref()
                .unwrap()
                .message_id
                .iter()
                .map(|m| m.entry_id)
                .collect()
        })
        .collect();
    let expected: Vec<Vec<u64>> = ids.iter().map(|id| vec![id.entry_id]).collect();
    assert_eq!(per_frame, expected);
}

/// `ConsumerImpl.negativeAcknowledge`: a nacked message leaves the ack-timeout tracker
/// (`unAckedMessageTracker.remove`), so it is redelivered once, by the nack, not also by the
/// ack timeout.
#[tokio::test]
async fn a_nacked_message_is_not_also_redelivered_by_the_ack_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "nack-not-timeout";
    let producer = unbatched_producer(&client, topic).await;
    let ids = publish(&producer, "n", 1).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_timeout(Duration::from_secs(1))
        .negative_ack_delay(Duration::from_secs(4))
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    consumer.nack(&m).unwrap();
    // The ack timeout (1 s, checked every second) would have fired long before the nack's
    // 4 s: the first redelivery asked for is the nack's.
    let again = recv(&mut consumer).await;
    assert_eq!(again.id, ids[0]);
    assert_eq!(again.redelivery_count, 1);
    assert_eq!(redelivered_ids(&broker), [vec![ids[0].entry_id]]);
    consumer.ack(&again).unwrap();
}

/// `ConsumerImpl.redeliverUnacknowledgedMessages(Set)`: the ids go to the broker in commands
/// of at most `MAX_REDELIVER_UNACKNOWLEDGED` (1000) ids each, so a large redelivery never
/// makes one oversized frame.
#[tokio::test]
async fn redelivery_by_id_sends_at_most_a_thousand_ids_per_command() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "redeliver-1000";
    let n = 2500;
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(producer.send(format!("r-{i}")).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut ids = Vec::new();
    for r in receipts {
        ids.push(r.await.unwrap());
    }
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(n as u32)
        .negative_ack_delay(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let mut taken = Vec::new();
    for _ in 0..n {
        taken.push(recv(&mut consumer).await);
    }
    // All nacked at once: due together.
    for m in &taken {
        consumer.nack(m).unwrap();
    }
    let mut entries: Vec<u64> = ids.iter().map(|id| id.entry_id).collect();
    entries.sort();
    entries.dedup();
    common::wait_until("every entry asked again", || {
        let mut asked: Vec<u64> = redelivered_ids(&broker).concat();
        asked.sort();
        asked.dedup();
        asked == entries
    })
    .await;
    let sizes: Vec<usize> = redelivered_ids(&broker).iter().map(Vec::len).collect();
    assert!(
        sizes.iter().all(|&s| s <= 1000),
        "ids per command: {sizes:?}"
    );
}

/// `ConsumerBuilderImpl.subscribeAsync`: a subscription name must be set ("Subscription name
/// must be set on the consumer builder"); nothing reaches the broker.
#[tokio::test]
async fn an_empty_subscription_name_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    for name in ["", "  "] {
        let r = client
            .consumer("no-sub")
            .subscription(name)
            .subscribe()
            .await;
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{name:?}: {r:?}");
    }
    assert!(subscribes(&broker).is_empty());
}

/// `ConsumerBuilderImpl.receiverQueueSize(0)` makes a `ZeroQueueConsumerImpl`: no FLOW when
/// it subscribes, a FLOW of 1 when a receive finds nothing queued
/// (`fetchSingleMessageFromBroker`). `MultiTopicsConsumerImpl` refuses 0 ("Receiver queue size
/// needs to be greater than 0 for Topics Consumer"): so is a partitioned topic here, before
/// anything is subscribed.
#[tokio::test]
async fn a_zero_receiver_queue_asks_one_permit_per_receive() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-zero-queue");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(0)
        .subscribe()
        .await
        .unwrap();
    within("a round trip", consumer.last_message_ids())
        .await
        .unwrap();
    assert!(
        broker.received_of(Type::Flow).is_empty(),
        "no FLOW at subscribe"
    );
    assert_eq!(recv(&mut consumer).await.payload_str(), Some("m-0"));
    let flows: Vec<u32> = broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect();
    assert_eq!(flows, vec![1]);

    let partitioned = full("conf-zero-queue-partitioned");
    assert!(broker.create_partitioned_topic(&partitioned, 2));
    let before = subscribes(&broker).len();
    let r = client
        .consumer(&partitioned)
        .subscription("s")
        .receiver_queue_size(0)
        .subscribe()
        .await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    assert_eq!(subscribes(&broker).len(), before);
}

/// `ConsumerImpl.connectionOpened`: a BYTES schema (and no schema) subscribes without a
/// `schema` field, so the broker does not check it against the topic's.
#[tokio::test]
async fn a_bytes_consumer_subscribes_without_a_schema() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let _typed = client
        .consumer("bytes-schema")
        .subscription("typed")
        .schema(pulsar_sdk::schema::BytesSchema)
        .subscribe()
        .await
        .unwrap();
    let _plain = client
        .consumer("bytes-schema")
        .subscription("plain")
        .subscribe()
        .await
        .unwrap();
    let sent = subscribes(&broker);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|s| s.schema.is_none()), "{sent:?}");
    // A real schema is sent (so the check above could fail).
    let _string = client
        .consumer("string-schema")
        .subscription("string")
        .schema(pulsar_sdk::schema::StringSchema)
        .subscribe()
        .await
        .unwrap();
    assert!(subscribes(&broker)[2].schema.is_some());
}

/// `MultiplierRedeliveryBackoff.next`: the delay of a message redelivered `n` times is
/// `min · multiplier^n`, capped at `max`.
#[test]
fn negative_ack_backoff_grows_with_the_redelivery_count() {
    let b =
        pulsar_sdk::RedeliveryBackoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
    assert_eq!(b.delay(0), Duration::from_secs(1));
    assert_eq!(b.delay(1), Duration::from_secs(2));
    assert_eq!(b.delay(3), Duration::from_secs(8));
    assert_eq!(b.delay(6), Duration::from_secs(60));
    assert_eq!(b.delay(u32::MAX), Duration::from_secs(60));
}

/// `ConsumerBase.reconsumeLaterAsync`: without `enableRetry` reconsumeLater is refused
/// ("reconsumeLater method not support!"), and the message is not acked.
#[tokio::test]
async fn reconsume_later_without_retry_enable_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "no-retry";
    let producer = unbatched_producer(&client, topic).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    let r = consumer.reconsume_later(&m, Duration::from_secs(1)).await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    consumer.close().await.unwrap();
    assert!(broker.received_of(Type::Ack).is_empty(), "not acked");
    assert_eq!(broker.subscription_backlog(topic, "s"), 1);
}

/// The broker refuses a seek on a non-persistent topic (it stores nothing); the client fails
/// it before sending anything.
#[tokio::test]
async fn seek_on_a_non_persistent_topic_fails_before_sending() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let mut consumer = client
        .consumer("non-persistent://public/default/np-seek")
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let r = consumer.seek(pulsar_sdk::MessageId::EARLIEST).await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    let r = consumer.seek_by_time(0).await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    assert!(broker.received_of(Type::Seek).is_empty());
}

/// `ConsumerImpl.seekAsync(MessageId)`: for a chunked message's id the SEEK names its first
/// chunk, so the whole message is read again.
#[tokio::test]
async fn seek_to_a_chunked_message_goes_to_its_first_chunk() {
    let broker = common::chunks::broker_with_max(10_000).await;
    let client = client(&broker.service_url());
    let topic = "seek-chunked";
    let producer = common::chunks::chunking_producer(&client, topic).await;
    let body = common::chunks::noise(25_000, 7);
    producer.send_and_wait(body.clone()).await.unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    assert_eq!(m.payload.as_ref(), &body[..]);
    let first = m.id.first_chunk_id().expect("a chunked message");
    assert_ne!(first.entry_id, m.id.entry_id);
    within("seek", consumer.seek(m.id)).await.unwrap();
    let seek = broker.received_of(Type::Seek)[0]
        .command
        .seek
        .clone()
        .unwrap();
    assert_eq!(seek.message_id.unwrap().entry_id, first.entry_id);
    let again = recv(&mut consumer).await;
    assert_eq!(again.payload.as_ref(), &body[..]);
}

/// `ConsumerImpl.initDeadLetterProducerIfNeeded`: the dead-letter producer is named
/// `<topic>-<subscription>-<consumer name>-<5 random alphanumerics>-DLQ` (not left to the
/// broker), so two consumers dead-lettering to one topic never share a producer name.
#[tokio::test]
async fn the_dead_letter_producer_is_named_after_topic_subscription_and_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-dlq-name");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "poison", 1).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .name("worker-1")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    // Delivered, nacked, redelivered at the maximum, nacked: dead-lettered.
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.nack(&m).unwrap();
    }
    common::wait_until("the dead letter stored", || broker.topic_messages(&dlq) > 0).await;
    let names: Vec<String> = broker
        .received_of(wire::base_command::Type::Producer)
        .iter()
        .filter_map(|r| r.command.producer.as_ref())
        .filter(|p| p.topic == dlq)
        .filter_map(|p| p.producer_name.clone())
        .collect();
    assert_eq!(names.len(), 1, "one dead-letter producer: {names:?}");
    let prefix = format!("{topic}-s-worker-1-");
    let name = &names[0];
    let suffix = name
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix("-DLQ"))
        .unwrap_or_else(|| panic!("{name} is not {prefix}<5>-DLQ"));
    assert_eq!(suffix.len(), 5, "{name}");
    assert!(suffix.chars().all(|c| c.is_ascii_alphanumeric()), "{name}");
}

const TIMEOUT: Duration = Duration::from_secs(2);

/// `ConsumerImpl.connectionOpened`: when CommandSubscribe gets no answer within the operation
/// timeout, the client sends CloseConsumer for that consumer id ("we need to ensure the broker
/// closes the consumer in case it was indeed created"), so an Exclusive subscription is free
/// for the next subscribe instead of answering ConsumerBusy.
#[tokio::test(start_paused = true)]
async fn a_subscribe_that_times_out_is_closed_on_the_broker() {
    let lookup = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    lookup.connect_lookups_to(&owner.service_url());
    let client = test_client(&lookup.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("subscribe-timeout");
    owner.set_response_delay(TIMEOUT * 3);
    let first = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await;
    assert!(
        matches!(first, Err(Error::Timeout { .. })),
        "{:?}",
        first.err()
    );
    let subscribed = owner.received_of(Type::Subscribe);
    let id = subscribed[0]
        .command
        .subscribe
        .as_ref()
        .unwrap()
        .consumer_id;
    let close = within(
        "CloseConsumer",
        owner.wait_for_command(Type::CloseConsumer, Duration::from_secs(10)),
    )
    .await
    .expect("the timed-out subscribe is closed on the broker");
    assert_eq!(close.command.close_consumer.unwrap().consumer_id, id);

    owner.set_response_delay(Duration::ZERO);
    let next = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await;
    assert!(next.is_ok(), "not ConsumerBusy: {:?}", next.err());
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

/// r-h1: a subscribe the application stops waiting for (its own timeout, shorter than the
/// operation timeout) is closed on the broker as a timed-out one is
/// (`ConsumerImpl.connectionOpened`), so the Exclusive subscription is free for the next one.
#[tokio::test(start_paused = true)]
async fn a_subscribe_dropped_by_the_application_is_closed_on_the_broker() {
    let lookup = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    lookup.connect_lookups_to(&owner.service_url());
    let client = test_client(&lookup.service_url())
        .operation_timeout(TIMEOUT * 10)
        .build()
        .unwrap();
    let topic = full("subscribe-dropped");
    owner.set_response_delay(TIMEOUT);
    let subscribe = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .consumer(&topic)
                .subscription("s")
                .subscription_type(SubscriptionType::Exclusive)
                .subscribe()
                .await
        })
    };
    within(
        "Subscribe",
        owner.wait_for_command(Type::Subscribe, Duration::from_secs(30)),
    )
    .await
    .expect("the subscribe reached the broker");
    // The application gives up before the (slow) answer.
    subscribe.abort();
    let _ = subscribe.await;
    let close = within(
        "CloseConsumer",
        owner.wait_for_command(Type::CloseConsumer, Duration::from_secs(30)),
    )
    .await
    .expect("the dropped subscribe is closed on the broker");
    let id = owner.received_of(Type::Subscribe)[0]
        .command
        .subscribe
        .as_ref()
        .unwrap()
        .consumer_id;
    assert_eq!(close.command.close_consumer.unwrap().consumer_id, id);
    owner.set_response_delay(Duration::ZERO);
    tokio::time::sleep(TIMEOUT * 2).await;
    let next = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await;
    assert!(next.is_ok(), "not ConsumerBusy: {:?}", next.err());
}

/// `ConsumerImpl.reconsumeLaterAsync` is an async call the application may make from any
/// thread; here through the [`Acker`](pulsar_sdk::consumer::Acker), so the receive loop goes
/// on while the retry copy is stored. Past the maximum the message is dead-lettered, and that
/// counts in the consumer's stats like any dead-lettering (Java counts DLQ sends on every path).
#[tokio::test]
async fn reconsume_later_from_an_acker_retries_then_dead_letters_and_counts_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reconsume-acker");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    let acker = consumer.acker();
    // The first delivery and the one retry: each handed to another task.
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        let acker = acker.clone();
        tokio::spawn(async move {
            acker
                .reconsume_later(&m, Duration::from_millis(10))
                .await
                .unwrap();
        });
    }
    common::wait_until("the dead letter stored", || {
        broker.topic_messages(&dlq) == 1
    })
    .await;
    common::wait_until("the dead letter counted", || {
        consumer.stats().totals.dlq_sends == 1
    })
    .await;
}

/// A typed consumer passes every consumer operation through: its acker and `reconsume_later`
/// work on typed messages without reaching for the byte consumer.
#[tokio::test]
async fn a_typed_consumer_reconsumes_later_and_hands_out_its_acker() {
    use pulsar_sdk::schema::StringSchema;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-typed-reconsume");
    let producer = client
        .producer(&topic)
        .schema(StringSchema)
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(&"once more".to_string())
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .schema(StringSchema)
        .subscribe()
        .await
        .unwrap();
    let m = within("recv", consumer.recv()).await.unwrap();
    assert_eq!(m.value().unwrap(), "once more");
    consumer
        .reconsume_later(&m, Duration::from_millis(10))
        .await
        .unwrap();
    let again = within("the retried message", consumer.recv())
        .await
        .unwrap();
    assert_eq!(again.value().unwrap(), "once more");
    assert_eq!(
        again
            .message()
            .properties
            .get("RECONSUMETIMES")
            .map(String::as_str),
        Some("1")
    );
    consumer.acker().ack(again.message()).unwrap();
    assert_eq!(consumer.stats().totals.dlq_sends, 0);
}

/// Review r-38: `Acker::reconsume_later` documents `Error::Closed` once the consumer is
/// closed (Java `ConsumerBase.reconsumeLaterAsync` on a closed consumer fails with
/// `AlreadyClosedException`); nothing is published to the retry topic.
#[tokio::test]
async fn reconsume_later_from_an_acker_after_close_is_closed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-r38-acker-closed");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let retry = format!("{topic}-s-RETRY");
    let acker = consumer.acker();
    let m = within("recv", consumer.recv()).await.unwrap();
    within("close", consumer.close()).await.unwrap();
    let r = within(
        "reconsume",
        acker.reconsume_later(&m, Duration::from_millis(10)),
    )
    .await;
    assert!(matches!(r, Err(Error::Closed)), "{r:?}");
    assert_eq!(broker.topic_messages(&retry), 0);
}

/// Review r-38: the same once the consumer was dropped (dropping closes it).
#[tokio::test]
async fn reconsume_later_from_an_acker_after_drop_is_closed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-r38-acker-dropped");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let acker = consumer.acker();
    let m = within("recv", consumer.recv()).await.unwrap();
    drop(consumer);
    let r = within(
        "reconsume",
        acker.reconsume_later(&m, Duration::from_millis(10)),
    )
    .await;
    assert!(matches!(r, Err(Error::Closed)), "{r:?}");
}

/// Review r-38: on a partitioned topic, the acker's reconsume_later retries then
/// dead-letters past the maximum, and counts it (Java: a `MultiTopicsConsumerImpl`
/// delegates reconsumeLater to the partition's consumer, which counts the DLQ send).
#[tokio::test]
async fn reconsume_later_on_a_partitioned_topic_dead_letters_and_counts_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-r38-reconsume-part");
    assert!(broker.create_partitioned_topic(&topic, 2));
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "r", 1).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    let acker = consumer.acker();
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        within(
            "reconsume",
            acker.reconsume_later(&m, Duration::from_millis(10)),
        )
        .await
        .unwrap();
    }
    common::wait_until("the dead letter stored", || {
        broker.topic_messages(&dlq) == 1
    })
    .await;
    assert_eq!(consumer.stats().totals.dlq_sends, 1);
}

/// Review r-38: a typed consumer's reconsume_later past the maximum dead-letters and
/// counts it in the typed consumer's stats.
#[tokio::test]
async fn a_typed_consumer_reconsumes_past_the_maximum_into_the_dlq() {
    use pulsar_sdk::schema::StringSchema;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-r38-typed-dlq");
    let producer = client
        .producer(&topic)
        .schema(StringSchema)
        .create()
        .await
        .unwrap();
    producer.send_and_wait(&"x".to_string()).await.unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .retry_enable(true)
        .schema(StringSchema)
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    for _ in 0..2 {
        let m = within("recv", consumer.recv()).await.unwrap();
        assert_eq!(m.value().unwrap(), "x");
        within(
            "reconsume",
            consumer.reconsume_later(&m, Duration::from_millis(10)),
        )
        .await
        .unwrap();
    }
    common::wait_until("the dead letter stored", || {
        broker.topic_messages(&dlq) == 1
    })
    .await;
    assert_eq!(consumer.stats().totals.dlq_sends, 1);
}
