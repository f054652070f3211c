//! Batch receive (`Consumer::batch_recv`, Java's `batchReceive`): a batch ends at the first
//! bound reached (messages, payload bytes, the timeout from the call), holds what was queued
//! then, loses nothing when its future is dropped, takes messages as `recv` does (flow
//! permits, the ack-timeout clock, interceptors), and works on every consumer shape. Bounds
//! that involve time run on paused time: a timeout is seen to fire at its exact instant.

use common::{client, full, publish, publish_batch, unbatched_producer, within};
use support as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type, command_ack::AckType};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{
    BatchReceivePolicy, Consumer, Error, InitialPosition, Message, Messages, SubscriptionType,
};
use tokio::time::Instant;

/// Long enough that only the other bounds end a batch (paused time skips it when idle).
const HOUR: Duration = Duration::from_secs(3600);

fn payloads(batch: &[Message]) -> Vec<&str> {
    batch.iter().map(|m| m.payload_str().unwrap()).collect()
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

async fn consumer_with(
    client: &pulsar_sdk::Client,
    topic: &str,
    p: BatchReceivePolicy,
) -> Consumer {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .batch_receive_policy(p)
        .subscribe()
        .await
        .unwrap()
}

async fn batch(c: &mut Consumer) -> Messages {
    c.batch_recv().await.expect("a batch")
}

fn flows(broker: &MockBroker) -> Vec<u32> {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_batch_ends_at_max_num_messages_and_the_rest_at_the_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-count");
    let policy = BatchReceivePolicy::default()
        .max_num_messages(5)
        .timeout(HOUR);
    let mut consumer = consumer_with(&client, &topic, policy).await;
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 12).await;
    let start = Instant::now();
    let first = batch(&mut consumer).await;
    let second = batch(&mut consumer).await;
    assert!(
        start.elapsed() < HOUR,
        "complete by count, not by the timeout"
    );
    assert_eq!(payloads(&first), names("m", 0..5));
    assert_eq!(payloads(&second), names("m", 5..10));
    // Two left, fewer than the bound: the timeout (counted from the call) ends the batch.
    let start = Instant::now();
    let third = batch(&mut consumer).await;
    assert_eq!(start.elapsed(), HOUR);
    assert_eq!(payloads(&third), names("m", 10..12));
    // Nothing queued: the timeout gives an empty batch, as Java's.
    let start = Instant::now();
    let empty = batch(&mut consumer).await;
    assert_eq!(start.elapsed(), HOUR);
    assert!(empty.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_batch_waiting_for_its_count_completes_when_the_last_message_arrives() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-count-live");
    let policy = BatchReceivePolicy::default()
        .max_num_messages(3)
        .timeout(HOUR);
    let mut consumer = consumer_with(&client, &topic, policy).await;
    let producer = unbatched_producer(&client, &topic).await;
    let publisher = tokio::spawn(async move {
        for i in 0..3 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            producer.send_and_wait(format!("m-{i}")).await.unwrap();
        }
    });
    let start = Instant::now();
    let got = batch(&mut consumer).await;
    assert_eq!(payloads(&got), names("m", 0..3));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "completes as the third message arrives: {waited:?}"
    );
    publisher.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_batch_ends_at_max_num_bytes_and_its_first_message_always_fits() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-bytes");
    // 10-byte payloads: 25 bytes are reached with three queued, and two fit.
    let policy = BatchReceivePolicy::default()
        .max_num_bytes(25)
        .timeout(HOUR);
    let mut consumer = consumer_with(&client, &topic, policy).await;
    let producer = unbatched_producer(&client, &topic).await;
    for i in 0..5 {
        producer
            .send_and_wait(format!("payload-{i:02}"))
            .await
            .unwrap();
    }
    producer.send_and_wait(vec![b'x'; 100]).await.unwrap();
    let start = Instant::now();
    let a = batch(&mut consumer).await;
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&a), ["payload-00", "payload-01"]);
    assert_eq!(payloads(&b), ["payload-02", "payload-03"]);
    // 10 + 100 bytes queued: over the bound, and the 100-byte message does not fit after
    // the first; alone, it is a batch of its own, larger than the bound.
    let c = batch(&mut consumer).await;
    assert_eq!(payloads(&c), ["payload-04"]);
    let d = batch(&mut consumer).await;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].payload.len(), 100);
    assert!(
        start.elapsed() < HOUR,
        "every batch by bytes, none by the timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_entry_is_split_across_batches_and_acked_whole_once_all_are_acked() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-split-entry");
    let policy = BatchReceivePolicy::default()
        .max_num_messages(4)
        .timeout(HOUR);
    let mut consumer = consumer_with(&client, &topic, policy).await;
    publish_batch(&client, &topic, 10).await;
    let a = batch(&mut consumer).await;
    let b = batch(&mut consumer).await;
    let c = batch(&mut consumer).await;
    assert_eq!(payloads(&a), names("b", 0..4));
    assert_eq!(payloads(&b), names("b", 4..8));
    assert_eq!(payloads(&c), names("b", 8..10));
    consumer.ack_all(&a).unwrap();
    consumer.ack_all(&b).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        broker.received_of(Type::Ack).is_empty(),
        "the entry is acked only once all of its messages are"
    );
    consumer.ack_all(&c).unwrap();
    within(
        "the entry's ACK",
        broker.wait_for_command(Type::Ack, Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(broker.subscription_backlog(&topic, "s"), 0);
}

#[tokio::test(start_paused = true)]
async fn flow_permits_and_stats_count_messages_as_a_batch_takes_them() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(128 * 1024 * 1024)
        .build()
        .unwrap();
    let topic = full("batch-flow");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "f", 30).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(10)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(4)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    // The broker fills the receiver queue (10): more than a batch is queued.
    common::wait_until("a full receiver queue", || {
        consumer.stats().totals.receiver_queue_len == 10
    })
    .await;
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&b), names("f", 0..4));
    assert_eq!(consumer.stats().totals.messages_received, 4);
    assert_eq!(consumer.stats().totals.receiver_queue_len, 6);
    assert_eq!(
        flows(&broker),
        [10],
        "4 taken: no refill before half the queue"
    );
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&b), names("f", 4..8));
    // Like `recv`: the refill of half the queue went out as the fifth message was taken.
    within(
        "the refill",
        broker.wait_for_commands(Type::Flow, 2, Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(flows(&broker), [10, 5]);
    assert_eq!(consumer.stats().totals.messages_received, 8);
    let mut seen = 8;
    while seen < 30 {
        let b = batch(&mut consumer).await;
        assert_eq!(payloads(&b), names("f", seen..seen + b.len()));
        seen += b.len();
    }
    assert!(flows(&broker).iter().all(|&n| n <= 10));
}

/// A batch future dropped while it waits (a losing `select!` branch) loses nothing: the
/// messages it counted are handed out by the next call, in order, once each; and they did
/// not start their ack-timeout clock while they waited.
#[tokio::test(start_paused = true)]
async fn a_dropped_batch_future_loses_nothing_and_starts_no_ack_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-cancel");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_timeout(Duration::from_secs(1))
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(10)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "c", 6).await;
    // Six of ten queued: the batch waits, and loses the race.
    tokio::select! {
        _ = consumer.batch_recv() => panic!("a batch of 10 with 6 published"),
        () = tokio::time::sleep(Duration::from_secs(30)) => {}
    }
    assert_eq!(
        consumer.stats().totals.messages_received,
        0,
        "nothing was taken"
    );
    assert_eq!(consumer.stats().totals.ack_timeouts, 0, "no clock started");
    assert!(broker
        .received_of(Type::RedeliverUnacknowledgedMessages)
        .is_empty());
    // `recv` takes the first; the next batch the other five and five more.
    let first = common::recv(&mut consumer).await;
    assert_eq!(first.payload_str(), Some("c-0"));
    consumer.ack(&first).unwrap();
    tokio::select! {
        _ = consumer.batch_recv() => panic!("a batch of 10 with 5 queued"),
        () = tokio::time::sleep(Duration::from_secs(30)) => {}
    }
    publish(&producer, "d", 5).await;
    let b = batch(&mut consumer).await;
    let mut expected = names("c", 1..6);
    expected.extend(names("d", 0..5));
    assert_eq!(payloads(&b), expected);
    // Taken and not acked: now the ack timeout redelivers them, as after `recv`.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(consumer.stats().totals.ack_timeouts > 0);
}

/// Real time: batch futures race a publisher and a short timer in a `select!` loop, dropped
/// at any point; every message arrives once, in order.
#[tokio::test]
async fn batch_futures_dropped_in_a_select_loop_lose_no_message() {
    const N: usize = 300;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-cancel-loop");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .receiver_queue_size(20)
        .initial_position(InitialPosition::Earliest)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(7)
                .timeout(Duration::from_millis(3)),
        )
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(&topic).create().await.unwrap();
    let publisher = tokio::spawn(async move {
        for i in 0..N {
            let _receipt = producer.send(i.to_string()).await.unwrap();
            if i % 5 == 0 {
                tokio::task::yield_now().await;
            }
        }
        producer.flush().await.unwrap();
    });
    let mut seen: Vec<usize> = Vec::new();
    let mut dropped = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < N {
        assert!(
            Instant::now() < deadline,
            "stalled after {} messages",
            seen.len()
        );
        tokio::select! {
            b = consumer.batch_recv() => {
                let b = b.unwrap();
                assert!(b.len() <= 7);
                consumer.ack_all(&b).unwrap();
                seen.extend(b.iter().map(|m| m.payload_str().unwrap().parse::<usize>().unwrap()));
            }
            () = tokio::time::sleep(Duration::from_micros(500)) => dropped += 1,
        }
    }
    within("the publisher", publisher).await.unwrap();
    assert_eq!(
        seen,
        (0..N).collect::<Vec<_>>(),
        "every message, in order, once"
    );
    assert!(dropped > 0, "some futures were dropped");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), consumer.recv())
            .await
            .is_err(),
        "nothing more"
    );
}

/// Records what `before_consume` saw, and marks the message.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl pulsar_sdk::interceptor::ConsumerInterceptor for Seen {
    fn before_consume(&self, m: &mut Message) {
        let p = m.payload_str().unwrap().to_string();
        self.0.lock().unwrap().push(p.clone());
        m.payload = format!("seen:{p}").into();
    }
}

#[tokio::test(start_paused = true)]
async fn interceptors_see_each_message_of_a_batch_as_it_is_handed_out() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-interceptors");
    let seen = Seen::default();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .interceptor(seen.clone())
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(3)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "i", 2).await;
    tokio::select! {
        _ = consumer.batch_recv() => panic!("a batch of 3 with 2 published"),
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
    assert!(seen.0.lock().unwrap().is_empty(), "nothing handed out yet");
    publish(&producer, "j", 1).await;
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&b), ["seen:i-0", "seen:i-1", "seen:j-0"]);
    assert_eq!(*seen.0.lock().unwrap(), ["i-0", "i-1", "j-0"]);
}

#[tokio::test(start_paused = true)]
async fn an_error_ends_a_batch_and_is_returned_by_the_next_call() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-error");
    let policy = BatchReceivePolicy::default()
        .max_num_messages(10)
        .timeout(HOUR);
    let mut consumer = consumer_with(&client, &topic, policy).await;
    let producer = unbatched_producer(&client, &topic).await;
    producer.send_and_wait("before").await.unwrap();
    // A corrupt zstd payload: discarded, an error item in its place.
    broker
        .publish_raw(
            &topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                publish_time: 1,
                compression: Some(wire::CompressionType::Zstd as i32),
                uncompressed_size: Some(100),
                ..Default::default()
            },
            bytes::Bytes::from_static(b"not zstd at all"),
        )
        .unwrap();
    producer.send_and_wait("after").await.unwrap();
    let start = Instant::now();
    assert_eq!(payloads(&batch(&mut consumer).await), ["before"]);
    match consumer.batch_recv().await {
        Err(Error::InvalidMessage(_)) | Err(Error::Codec(_)) => {}
        other => panic!("expected the undecodable entry's error, got {other:?}"),
    }
    assert!(start.elapsed() < HOUR, "the error ends the batch at once");
    assert_eq!(payloads(&batch(&mut consumer).await), ["after"]);
    consumer.close().await.unwrap();
    assert!(matches!(consumer.batch_recv().await, Err(Error::Closed)));
}

#[tokio::test(start_paused = true)]
async fn a_multi_topic_batch_mixes_topics_unless_the_policy_says_otherwise() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("batch-multi-a"), full("batch-multi-b"));
    let subscribe = |multi: bool, sub: &'static str| {
        client
            .multi_topic_consumer([a.clone(), b.clone()])
            .subscription(sub)
            .initial_position(InitialPosition::Earliest)
            .batch_receive_policy(
                BatchReceivePolicy::default()
                    .max_num_messages(6)
                    .timeout(HOUR)
                    .messages_from_multi_topics(multi),
            )
            .subscribe()
    };
    let mut mixed = subscribe(true, "mixed").await.unwrap();
    let mut single = subscribe(false, "single").await.unwrap();
    let (pa, pb) = (
        unbatched_producer(&client, &a).await,
        unbatched_producer(&client, &b).await,
    );
    publish(&pa, "a", 3).await;
    publish(&pb, "b", 3).await;
    let start = Instant::now();
    let all = batch(&mut mixed).await;
    assert!(
        start.elapsed() < HOUR,
        "six queued across both topics fill the batch"
    );
    let mut got = payloads(&all);
    got.sort();
    assert_eq!(got, ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]);
    mixed.ack_all(&all).unwrap();
    // One topic per batch: each ends before the other topic's first message.
    let mut batches = Vec::new();
    let mut n = 0;
    while n < 6 {
        let one = batch(&mut single).await;
        n += one.len();
        batches.push(one);
    }
    assert!(batches.len() >= 2);
    for one in &batches {
        assert!(
            one.iter().all(|m| m.topic == one[0].topic),
            "one topic per batch"
        );
    }
    let mut got: Vec<&str> = batches.iter().flat_map(|b| payloads(b)).collect();
    got.sort();
    assert_eq!(got, ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]);
    common::wait_until("both topics acked on `mixed`", || {
        broker.subscription_backlog(&a, "mixed") == 0
            && broker.subscription_backlog(&b, "mixed") == 0
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_pattern_consumer_batches_messages_of_its_topics() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("batch-pattern-a"), full("batch-pattern-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .pattern_consumer("persistent://public/default/batch-pattern-.*")
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(4)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    publish(&unbatched_producer(&client, &a).await, "a", 2).await;
    publish(&unbatched_producer(&client, &b).await, "b", 2).await;
    let got = batch(&mut consumer).await;
    let mut got = payloads(&got);
    got.sort();
    assert_eq!(got, ["a-0", "a-1", "b-0", "b-1"]);
}

/// A batch of a partitioned topic is acked cumulatively per partition: one cumulative ack of
/// each partition's last message (a single one would only move one partition).
#[tokio::test(start_paused = true)]
async fn ack_cumulative_all_acks_the_last_message_of_each_partition() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-cumulative");
    broker.create_partitioned_topic(&topic, 3);
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Failover)
        .initial_position(InitialPosition::Earliest)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(12)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..12 {
        producer
            .send_and_wait(pulsar_sdk::ProducerMessage::new(format!("p-{i}")).key(format!("k{i}")))
            .await
            .unwrap();
    }
    let b = batch(&mut consumer).await;
    assert_eq!(b.len(), 12);
    let partitions: std::collections::BTreeSet<i32> = b.iter().map(|m| m.id.partition).collect();
    assert!(
        partitions.len() > 1,
        "keys spread over several partitions: {partitions:?}"
    );
    consumer.ack_cumulative_all(&b).unwrap();
    let acks = within(
        "one cumulative ack per partition",
        broker.wait_for_commands(Type::Ack, partitions.len(), Duration::from_secs(5)),
    )
    .await
    .unwrap();
    for p in &partitions {
        let last = b.iter().rfind(|m| m.id.partition == *p).unwrap();
        let acked: Vec<_> = acks
            .iter()
            .map(|r| r.command.ack.clone().unwrap())
            .filter(|a| {
                a.message_id
                    .first()
                    .is_some_and(|id| id.partition == Some(*p))
            })
            .collect();
        assert_eq!(acked.len(), 1, "partition {p}: one ack");
        assert_eq!(acked[0].ack_type, AckType::Cumulative as i32);
        assert_eq!(acked[0].message_id[0].entry_id, last.id.entry_id);
    }
    for p in 0..3 {
        assert_eq!(
            broker.subscription_backlog(&format!("{topic}-partition-{p}"), "s"),
            0
        );
    }
}

#[tokio::test(start_paused = true)]
async fn cumulative_batch_acks_are_refused_on_shared_and_nack_all_redelivers_the_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-cumulative-shared");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_secs(1))
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(2)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    publish(&unbatched_producer(&client, &topic).await, "s", 2).await;
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&b), ["s-0", "s-1"]);
    assert!(matches!(
        consumer.ack_cumulative_all(&b),
        Err(Error::InvalidOperation(_))
    ));
    // Ten ack-group times: a grouped ack would have gone out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(broker.received_of(Type::Ack).is_empty(), "nothing was sent");
    // Negatively acked together, both come back after the delay.
    consumer.nack_all(&b).unwrap();
    let b = batch(&mut consumer).await;
    assert_eq!(payloads(&b), ["s-0", "s-1"]);
    assert!(b.iter().all(|m| m.redelivery_count == 1));
    // Individually, from an `Acker`, any collection of messages.
    consumer.acker().ack_all(b.iter()).unwrap();
    common::wait_until("the batch acked", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
    assert!(broker
        .received_of(Type::Ack)
        .iter()
        .all(|r| r.command.ack.as_ref().unwrap().ack_type == AckType::Individual as i32));
}

#[tokio::test]
async fn a_policy_without_any_bound_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let refused = client
        .consumer(full("batch-refused"))
        .subscription("s")
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(0)
                .max_num_bytes(0)
                .timeout(Duration::ZERO),
        )
        .subscribe()
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidConfig(_))),
        "{refused:?}"
    );
}

/// An auto-scaled queue with a batch bound starts large enough to hold a whole batch, as
/// upstream's `ConsumerImpl.minReceiverQueueSize` (`2 * maxNumMessages - 2`: up to half a
/// window of permits may wait to be sent back). Starting at 1, a batch of 5 held its first
/// message (no permit back while held) and waited for the timeout, every call.
#[tokio::test(start_paused = true)]
async fn an_auto_scaled_queue_starts_at_a_whole_batch() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("batch-auto-scaled");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(100)
        .auto_scaled_receiver_queue_size(true)
        .batch_receive_policy(
            BatchReceivePolicy::default()
                .max_num_messages(5)
                .timeout(HOUR),
        )
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 10).await;
    let start = Instant::now();
    let first = batch(&mut consumer).await;
    let second = batch(&mut consumer).await;
    assert!(
        start.elapsed() < HOUR,
        "complete by count, not by the timeout"
    );
    assert_eq!(payloads(&first), names("m", 0..5));
    assert_eq!(payloads(&second), names("m", 5..10));
    // 2 * 5 - 2 = 8 owed at first (the byte budget's cap may send it in two FLOWs).
    let first = flows(&broker)[0];
    assert!(first >= 5, "the first FLOW holds a whole batch: {first}");
}
