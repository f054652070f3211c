//! `Producer::stats` / `Consumer::stats` against what the mock broker saw: messages stored,
//! ack ids and redelivery requests received, creates after a broker restart, dead letters.

use common::client;
use support as common;

use std::time::Duration;

use common::{wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{DeadLetterPolicy, InitialPosition, State, SubscriptionType};

#[tokio::test]
async fn producer_counters_match_the_broker_before_and_after_a_restart() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "persistent://public/default/stats-produce";
    broker.set_partitions(topic, 2);
    let client = client(&broker.service_url());
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..20 {
        producer
            .send_and_wait(format!("message-{i}"))
            .await
            .unwrap();
    }
    let stored = |b: &MockBroker| {
        (0..2)
            .map(|p| b.topic_messages(&format!("{topic}-partition-{p}")))
            .collect::<Vec<_>>()
    };
    let s = producer.stats();
    assert_eq!(s.state, State::Ready);
    assert_eq!(s.partitions.len(), 2);
    let per_partition: Vec<usize> = s
        .partitions
        .iter()
        .map(|p| p.counts.messages_sent as usize)
        .collect();
    assert_eq!(per_partition, stored(&broker), "per partition, as stored");
    assert_eq!(s.totals.messages_sent, 20);
    let sent_bytes: usize = broker
        .received_of(Type::Send)
        .iter()
        .map(|r| r.payload.as_ref().map_or(0, |(_, p)| p.len()))
        .sum();
    assert!(
        s.totals.bytes_sent as usize > sent_bytes,
        "the frames hold at least the payloads: {} vs {sent_bytes}",
        s.totals.bytes_sent
    );
    assert_eq!(s.totals.pending_messages, 0);
    assert_eq!(s.totals.send_errors.total(), 0);
    let lat = s.totals.send_latency;
    assert_eq!(lat.count, 20);
    assert!(lat.p50 <= lat.p95 && lat.p95 <= lat.p99 && lat.p99 <= lat.max);
    assert_eq!(s.totals.reconnects.reconnects, 0);

    // A broker restart: every partition producer reconnects once; time spent reconnecting
    // covers at least the downtime.
    let downtime = Duration::from_millis(300);
    broker.restart_after(downtime).await.unwrap();
    wait_until("both partitions reconnected", || {
        producer.stats().totals.reconnects.reconnects == 2 && producer.state() == State::Ready
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    let s = producer.stats();
    let creates = broker.received_of(Type::Producer).len() as u64;
    assert_eq!(
        s.totals.reconnects.reconnects,
        creates - 2,
        "one re-create per reconnect"
    );
    for p in &s.partitions {
        assert_eq!(p.counts.reconnects.reconnects, 1);
        assert!(p.counts.reconnects.time_reconnecting >= downtime);
    }
    assert_eq!(s.totals.messages_sent, 21);
    assert_eq!(stored(&broker).iter().sum::<usize>(), 21);

    producer.close().await.unwrap();
    assert_eq!(producer.stats().state, State::Closed);
}

#[tokio::test]
async fn timed_out_sends_are_counted_as_timeouts() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("stats-timeout")
        .batching(false)
        .send_timeout(Duration::from_millis(200))
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    for _ in 0..3 {
        let r = within("send", producer.send_and_wait("lost")).await;
        assert!(matches!(r, Err(pulsar_sdk::Error::Timeout { .. })), "{r:?}");
    }
    let s = producer.stats();
    assert_eq!(s.totals.send_errors.timeout, 3);
    assert_eq!(s.totals.send_errors.total(), 3);
    assert_eq!(s.totals.messages_sent, 0);
    assert_eq!(s.totals.send_latency.count, 0);
}

#[tokio::test]
async fn consumer_counters_match_the_acks_and_redeliveries_the_broker_received() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/stats-consume";
    let producer = common::unbatched_producer(&client, topic).await;
    common::publish(&producer, "m", 10).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .negative_ack_delay(Duration::from_millis(50))
        .subscribe()
        .await
        .unwrap();
    let mut bytes = 0;
    for i in 0..10 {
        let m = within("recv", consumer.recv()).await.unwrap();
        bytes += m.payload.len();
        if i < 2 {
            consumer.nack(&m).unwrap();
        } else {
            consumer.ack(&m).unwrap();
        }
    }
    // The two nacked messages come back; ack them.
    for _ in 0..2 {
        let m = within("redelivery", consumer.recv()).await.unwrap();
        bytes += m.payload.len();
        consumer.ack(&m).unwrap();
    }
    let acked_ids = |b: &MockBroker| -> usize {
        b.received_of(Type::Ack)
            .iter()
            .map(|r| r.command.ack.as_ref().map_or(0, |a| a.message_id.len()))
            .sum()
    };
    wait_until("the broker saw 10 acked ids", || acked_ids(&broker) == 10).await;
    let s = consumer.stats();
    assert_eq!(s.totals.messages_received, 12);
    assert_eq!(s.totals.bytes_received as usize, bytes);
    assert_eq!(s.totals.acks_sent as usize, acked_ids(&broker));
    assert_eq!(s.totals.acks, 10);
    assert_eq!(s.totals.nacks, 2);
    assert_eq!(
        s.totals.redelivery_requests as usize,
        broker
            .received_of(Type::RedeliverUnacknowledgedMessages)
            .len()
    );
    assert!(s.totals.redelivery_requests >= 1);
    assert_eq!(s.totals.receiver_queue_len, 0);
    assert_eq!(s.totals.receiver_queue_size, 1000);
    assert_eq!(s.partitions.len(), 1);
    assert_eq!(s.partitions[0].topic, topic);

    // A restart: the consumer re-subscribes once.
    broker.restart().await.unwrap();
    wait_until("re-subscribed", || {
        consumer.stats().totals.reconnects.reconnects == 1 && consumer.state() == State::Ready
    })
    .await;
    assert_eq!(broker.received_of(Type::Subscribe).len(), 2);
}

#[tokio::test]
async fn dead_letters_are_counted_as_the_broker_stored_them() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/stats-poison";
    let producer = common::unbatched_producer(&client, topic).await;
    common::publish(&producer, "p", 3).await;
    let mut consumer = client
        .consumer(topic)
        .subscription("work")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    within("all dead-lettered", async {
        while consumer.stats().totals.dlq_sends < 3 {
            if let Ok(m) = tokio::time::timeout(Duration::from_millis(50), consumer.recv()).await {
                consumer.nack(&m.unwrap()).unwrap();
            }
        }
    })
    .await;
    let s = consumer.stats();
    assert_eq!(s.totals.dlq_sends, 3);
    assert_eq!(broker.topic_messages(&dlq), 3);
    assert_eq!(s.totals.nacks, 6, "each delivered twice (max 1 redelivery)");
}

#[tokio::test]
async fn a_reader_counts_what_it_read() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/stats-reader";
    let producer = common::unbatched_producer(&client, topic).await;
    common::publish(&producer, "r", 3).await;
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .receiver_queue_size(10)
        .create()
        .await
        .unwrap();
    for _ in 0..3 {
        within("read", reader.recv()).await.unwrap();
    }
    let s = reader.stats();
    assert_eq!(s.totals.messages_received, 3);
    assert_eq!(s.totals.receiver_queue_size, 10);
    assert_eq!(s.state, State::Ready);
}
