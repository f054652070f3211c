//! `Updates` and `TopicUpdates` streams of entities that close: "The stream ends once the
//! value can no longer change (its producer or consumer is gone)"; a pattern consumer's topic
//! stream "ends when the consumer stops discovering topics (closed, unsubscribed)".

use common::client;
use support as common;

use std::time::Duration;

use common::{full, wait_until, within};
use futures::StreamExt;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{InitialPosition, SubscriptionType};

#[tokio::test]
async fn a_closed_producers_partition_stream_ends() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("updates-producer");
    broker.create_partitioned_topic(&topic, 2);
    let client = client(&broker.service_url());
    let producer = client.producer(&topic).create().await.unwrap();
    let mut stream = producer.partition_updates();
    let mut changed = producer.partition_updates();
    assert_eq!(stream.next().await, Some(2));
    producer.close().await.unwrap();
    assert_eq!(within("stream end", stream.next()).await, None);
    assert_eq!(within("changed end", changed.changed()).await, None);
}

#[tokio::test]
async fn a_closed_consumers_partition_and_active_streams_end() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("updates-consumer");
    broker.create_partitioned_topic(&topic, 2);
    let client = client(&broker.service_url());
    let consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Failover)
        .subscribe()
        .await
        .unwrap();
    let mut partitions = consumer.partition_updates();
    let mut active = consumer.active_updates();
    assert_eq!(partitions.next().await, Some(2));
    active.next().await;
    consumer.close().await.unwrap();
    assert_eq!(
        within("partition stream end", partitions.next()).await,
        None
    );
    // Values set while closing may still come; then the end.
    within("active stream end", async {
        while active.next().await.is_some() {}
    })
    .await;
}

#[tokio::test]
async fn a_closed_pattern_consumers_topic_stream_ends() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_topic(&full("u-1"));
    let client = client(&broker.service_url());
    let consumer = client
        .pattern_consumer("public/default/u-.*")
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    wait_until("watching", || broker.topic_list_watchers().len() == 1).await;
    let mut changes = consumer.topic_updates();
    consumer.close().await.unwrap();
    assert!(within("topic stream end", changes.next_change())
        .await
        .is_none());
}

#[tokio::test]
async fn an_unsubscribed_pattern_consumers_topic_stream_ends() {
    let broker = MockBroker::start().await.unwrap();
    broker.create_topic(&full("v-1"));
    let client = client(&broker.service_url());
    let consumer = client
        .pattern_consumer("public/default/v-.*")
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    wait_until("watching", || broker.topic_list_watchers().len() == 1).await;
    let mut changes = consumer.topic_updates();
    consumer.unsubscribe().await.unwrap();
    assert!(within("topic stream end", changes.next_change())
        .await
        .is_none());
}
