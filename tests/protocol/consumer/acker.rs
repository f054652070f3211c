//! `Consumer::acker`: acks and nacks from other tasks, across reconnects, refused once closed.

use common::client;
use support as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{full, wait_until, within};
use pulsar_sdk::consumer::Acker;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, Consumer, Error, InitialPosition, SubscriptionType};

async fn consumer(client: &Client, topic: &str, t: SubscriptionType) -> Consumer {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(t)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(50))
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap()
}

async fn publish(client: &Client, topic: &str, prefix: &str, n: usize) {
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..n {
        producer
            .send_and_wait(format!("{prefix}-{i}"))
            .await
            .unwrap();
    }
    producer.close().await.unwrap();
}

#[test]
fn an_acker_is_send_sync_clone_and_static() {
    fn assert<T: Send + Sync + Clone + 'static>() {}
    assert::<Acker>();
}

#[tokio::test]
async fn spawned_tasks_ack_and_nack_through_an_acker_across_a_broker_restart() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("acker-spawned");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared).await;
    publish(&client, &topic, "a", 10).await;
    let acker = c.acker();
    // Every odd message is nacked once by id (from another task), then acked on redelivery.
    let mut nacked = BTreeSet::new();
    let mut acked = BTreeSet::new();
    let mut restarted = false;
    while acked.len() < 10 {
        let m = within("recv", c.recv()).await.unwrap();
        let text = m.payload_str().unwrap().to_string();
        let i: usize = text.trim_start_matches("a-").parse().unwrap();
        let acker = acker.clone();
        let nack = i % 2 == 1 && nacked.insert(i);
        tokio::spawn(async move {
            if nack {
                acker.nack_id(m.id)
            } else {
                acker.ack(&m)
            }
        })
        .await
        .unwrap()
        .unwrap();
        if !nack {
            acked.insert(i);
        }
        if acked.len() >= 5 && !restarted {
            restarted = true;
            // Acks keep working across a reconnect.
            broker.restart().await.unwrap();
        }
    }
    wait_until("every message is acked on the broker", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
    // After the restart, a new message is acked from a spawned task by id too.
    publish(&client, &topic, "b", 1).await;
    let m = within("recv", c.recv()).await.unwrap();
    let id = m.id;
    tokio::spawn(async move { acker.ack_id(id) })
        .await
        .unwrap()
        .unwrap();
    wait_until("the new message is acked", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

#[tokio::test]
async fn consumer_nack_id_redelivers_the_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("acker-nack-id");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared).await;
    publish(&client, &topic, "n", 1).await;
    let first = within("recv", c.recv()).await.unwrap();
    c.nack_id(first.id).unwrap();
    let again = within("redelivery", c.recv()).await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.payload, first.payload);
    c.ack(&again).unwrap();
}

#[tokio::test]
async fn cumulative_acks_through_an_acker_follow_the_subscription_type() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let shared = full("acker-cumulative-shared");
    let mut s = consumer(&client, &shared, SubscriptionType::Shared).await;
    publish(&client, &shared, "c", 1).await;
    let m = within("recv", s.recv()).await.unwrap();
    let acker = s.acker();
    assert!(matches!(
        acker.ack_cumulative(&m),
        Err(Error::InvalidOperation(_))
    ));
    assert!(matches!(
        acker.ack_cumulative_id(m.id),
        Err(Error::InvalidOperation(_))
    ));

    let exclusive = full("acker-cumulative-exclusive");
    let mut e = consumer(&client, &exclusive, SubscriptionType::Exclusive).await;
    publish(&client, &exclusive, "c", 3).await;
    let mut last = None;
    for _ in 0..3 {
        last = Some(within("recv", e.recv()).await.unwrap());
    }
    let acker = e.acker();
    let last = last.unwrap();
    tokio::spawn(async move { acker.ack_cumulative_id(last.id) })
        .await
        .unwrap()
        .unwrap();
    wait_until("the cumulative ack reached the broker", || {
        broker.subscription_backlog(&exclusive, "s") == 0
    })
    .await;
}

#[tokio::test]
async fn an_acker_fails_with_closed_once_its_consumer_is_closed_dropped_or_its_client_closed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("acker-closed");
    publish(&client, &topic, "x", 1).await;

    // Closed by the application.
    let mut c = consumer(&client, &topic, SubscriptionType::Shared).await;
    let m = within("recv", c.recv()).await.unwrap();
    let acker = c.acker();
    c.close().await.unwrap();
    assert!(matches!(acker.ack(&m), Err(Error::Closed)));
    assert!(matches!(acker.nack(&m), Err(Error::Closed)));
    assert!(matches!(acker.ack_id(m.id), Err(Error::Closed)));
    assert!(matches!(acker.nack_id(m.id), Err(Error::Closed)));
    assert!(matches!(c.ack(&m), Err(Error::Closed)));
    assert!(matches!(c.nack_id(m.id), Err(Error::Closed)));

    // Dropped: the acker does not keep the consumer alive.
    let mut c = consumer(&client, &topic, SubscriptionType::Shared).await;
    let m = within("recv", c.recv()).await.unwrap();
    let acker = c.acker();
    drop(c);
    wait_until("the dropped consumer is closed on the broker", || {
        broker.consumers(&topic, "s") == 0
    })
    .await;
    assert!(matches!(acker.ack(&m), Err(Error::Closed)));

    // The client closed.
    let mut c = consumer(&client, &topic, SubscriptionType::Shared).await;
    let m = within("recv", c.recv()).await.unwrap();
    let acker = c.acker();
    client.close().await.unwrap();
    assert!(matches!(acker.ack(&m), Err(Error::Closed)));
    assert!(matches!(acker.ack_id(m.id), Err(Error::Closed)));
}

/// An id carries no topic: with `retry_enable` a retry-topic message's id has the same
/// partition number as the main topic's, so acking it by id is refused (it used to return `Ok`
/// and ack nothing); acking the `Message` acks it on the retry topic.
#[tokio::test]
async fn ids_that_may_name_a_retry_topic_message_are_refused_and_the_message_acks() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url()).build().unwrap();
    let topic = common::full("acker-retry-ids");
    let producer = client.producer(&topic).create().await.unwrap();
    producer.send("m").await.unwrap().await.unwrap();
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .retry_enable(true)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let m = common::within("recv", c.recv()).await.unwrap();
    common::within("reconsume", c.reconsume_later(&m, Duration::ZERO))
        .await
        .unwrap();
    let retried = common::within("recv retry", c.recv()).await.unwrap();
    let retry_topic = retried.topic.to_string();
    assert!(matches!(
        c.ack_id(retried.id),
        Err(Error::InvalidOperation(_))
    ));
    assert!(matches!(
        c.acker().ack_id(retried.id),
        Err(Error::InvalidOperation(_))
    ));
    c.acker().ack(&retried).unwrap();
    common::wait_until("the retry message acked", || {
        broker.subscription_backlog(&retry_topic, "s") == 0
    })
    .await;
}

/// Java `ConsumerImpl.closeAsync` moves the consumer to Closing before anything else, so an
/// ack made once `close()` has begun fails (`AlreadyClosedException`), and the acks made
/// before it are flushed (`acknowledgmentsGroupingTracker.flushAndClean`). Here `close()`
/// queued its Close op on its first poll, but the state only changes when the task takes it:
/// an ack made in between returned `Ok`, was folded in behind the Close, grouped for the ack
/// group time after the CloseConsumer went out, and dropped with the task. An ack that
/// returns `Ok` must reach the broker; one made after `close()` began should be refused.
#[tokio::test]
async fn an_ack_made_once_close_began_is_refused_or_sent() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("acker-ack-during-close");
    publish(&client, &topic, "x", 1).await;
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap();
    let m = within("recv", c.recv()).await.unwrap();
    let acker = c.acker();
    let mut close = std::pin::pin!(c.close());
    assert!(futures::poll!(close.as_mut()).is_pending());
    let acked = acker.ack(&m);
    within("close", close).await.unwrap();
    let sent = broker
        .received_of(pulsar_sdk::mock::wire::base_command::Type::Ack)
        .len();
    match acked {
        Ok(()) => assert!(
            sent > 0,
            "ack() returned Ok once close() began, and was never sent"
        ),
        Err(e) => assert!(matches!(e, Error::Closed), "{e:?}"),
    }
}
