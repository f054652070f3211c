//! A zero-size receiver queue (`receiver_queue_size(0)`, Java `ZeroQueueConsumerImpl`) as the
//! broker sees it: no FLOW until a receive waits, one permit per receive, nothing dispatched
//! ahead of the application, a cancelled receive's message kept for the next one, the permit
//! asked again after a reconnect, a batch handed out whole before the next permit, and the
//! consumer shapes upstream refuses refused with a clear error.

use common::{publish, publish_batch, unbatched_producer, wait_until, within};
use support as common;

use futures::{FutureExt, StreamExt};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Consumer, Error, InitialPosition, SubscriptionType};

/// The permits of every FLOW the broker received, in order.
fn permits(broker: &MockBroker) -> Vec<u32> {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect()
}

async fn zero_queue_consumer(client: &pulsar_sdk::Client, topic: &str) -> Consumer {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(0)
        .subscribe()
        .await
        .unwrap()
}

/// A round trip through the consumer's task and the broker: whatever the task sent before
/// (a FLOW) has reached the broker once this returns.
async fn settle(consumer: &Consumer) {
    within("a round trip", consumer.last_message_ids())
        .await
        .unwrap();
}

#[tokio::test]
async fn one_flow_of_one_per_receive_and_nothing_dispatched_ahead() {
    const N: usize = 5;
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("zero-queue-one-per-recv");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", N).await;
    let mut consumer = zero_queue_consumer(&client, &topic).await;
    settle(&consumer).await;
    // A backlog of N, and nothing asked nor dispatched before the first receive.
    assert_eq!(
        permits(&broker),
        Vec::<u32>::new(),
        "no FLOW before a receive"
    );
    assert_eq!(broker.subscription_dispatched(&topic, "s"), 0);
    for i in 0..N {
        let m = common::recv(&mut consumer).await;
        assert_eq!(m.payload_str().unwrap(), format!("m-{i}"));
        settle(&consumer).await;
        assert_eq!(
            permits(&broker),
            vec![1; i + 1],
            "one FLOW of 1 per receive"
        );
        // Received, not acked: exactly what was handed out was dispatched.
        assert_eq!(broker.subscription_dispatched(&topic, "s"), i + 1);
    }
    // A receive on an empty topic asks once and gets the message published while it waits.
    let mut next = Box::pin(consumer.recv());
    assert!((&mut next).now_or_never().is_none());
    wait_until("the waiting receive's FLOW", || {
        permits(&broker).len() == N + 1
    })
    .await;
    producer.send_and_wait("late").await.unwrap();
    let m = within("the late message", next).await.unwrap();
    assert_eq!(m.payload_str().unwrap(), "late");
    settle(&consumer).await;
    assert_eq!(permits(&broker), vec![1; N + 1]);
}

#[tokio::test]
async fn a_cancelled_receive_leaves_its_message_for_the_next_receive() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("zero-queue-cancelled");
    let mut consumer = zero_queue_consumer(&client, &topic).await;
    {
        // A receive that waits long enough to ask, then loses a `select!`: its permit is out.
        let mut first = Box::pin(consumer.recv());
        tokio::select! {
            _ = &mut first => panic!("nothing was published"),
            _ = wait_until("the receive's FLOW", || permits(&broker) == vec![1]) => {}
        }
    }
    // A stream polled while that permit is out (it stays waiting): nothing more is asked.
    assert!(consumer.next().now_or_never().is_none());
    settle(&consumer).await;
    assert_eq!(permits(&broker), vec![1], "a permit out is not doubled");
    // The message that permit brings arrives with no receive waiting: it is kept.
    let producer = unbatched_producer(&client, &topic).await;
    producer.send_and_wait("kept").await.unwrap();
    wait_until("the message dispatched", || {
        broker.subscription_dispatched(&topic, "s") == 1
    })
    .await;
    let m = common::recv(&mut consumer).await;
    assert_eq!(m.payload_str().unwrap(), "kept");
    settle(&consumer).await;
    assert_eq!(
        permits(&broker),
        vec![1],
        "the next receive took it without a FLOW"
    );
    // And the next one after it asks again.
    producer.send_and_wait("after").await.unwrap();
    let m = common::recv(&mut consumer).await;
    assert_eq!(m.payload_str().unwrap(), "after");
    settle(&consumer).await;
    assert_eq!(permits(&broker), vec![1, 1]);
}

#[tokio::test]
async fn a_reconnect_with_a_waiting_receive_asks_for_one_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("zero-queue-reconnect");
    let mut consumer = zero_queue_consumer(&client, &topic).await;
    let subscribes = || broker.received_of(Type::Subscribe).len();
    {
        let mut waiting = Box::pin(consumer.recv());
        assert!((&mut waiting).now_or_never().is_none());
        wait_until("the waiting receive's FLOW", || permits(&broker) == vec![1]).await;
        broker.drop_all_connections();
        wait_until("re-subscribed and asked again", || {
            subscribes() == 2 && permits(&broker).len() == 2
        })
        .await;
        assert_eq!(
            permits(&broker),
            vec![1, 1],
            "one permit on the new subscription"
        );
        let producer = unbatched_producer(&client, &topic).await;
        producer.send_and_wait("after-reconnect").await.unwrap();
        let m = within("the message", waiting).await.unwrap();
        assert_eq!(m.payload_str().unwrap(), "after-reconnect");
    }
    // No receive waits: a reconnect asks for nothing.
    broker.drop_all_connections();
    wait_until("re-subscribed", || subscribes() == 3).await;
    wait_until("attached", || consumer.state() == pulsar_sdk::State::Ready).await;
    settle(&consumer).await;
    assert_eq!(
        permits(&broker),
        vec![1, 1],
        "no FLOW without a waiting receive"
    );
    // The unacked message went back to the subscription and stays there: nothing dispatched.
    assert_eq!(broker.subscription_dispatched(&topic, "s"), 0);
}

/// A batch of 5 then one single message: the batch's messages come with one permit, before
/// any other is asked; the next FLOW repays the 4 the broker counted beyond the permit, so
/// one permit is out again and exactly one more entry is dispatched.
#[tokio::test]
async fn a_batch_is_handed_out_whole_before_the_next_permit() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("zero-queue-batch");
    publish_batch(&client, &topic, 5).await;
    let producer = unbatched_producer(&client, &topic).await;
    producer.send_and_wait("single").await.unwrap();
    let mut consumer = zero_queue_consumer(&client, &topic).await;
    for i in 0..5 {
        let m = common::recv(&mut consumer).await;
        assert_eq!(m.payload_str().unwrap(), format!("b-{i}"));
        assert!(m.id.batch_index >= 0);
    }
    settle(&consumer).await;
    assert_eq!(
        permits(&broker),
        vec![1],
        "the whole batch came with one permit"
    );
    assert_eq!(broker.subscription_dispatched(&topic, "s"), 1);
    let m = common::recv(&mut consumer).await;
    assert_eq!(m.payload_str().unwrap(), "single");
    settle(&consumer).await;
    assert_eq!(permits(&broker), vec![1, 5]);
    assert_eq!(broker.subscription_dispatched(&topic, "s"), 2);
    // The broker holds exactly one permit again: one more message, one more entry.
    producer.send_and_wait("last").await.unwrap();
    let m = common::recv(&mut consumer).await;
    assert_eq!(m.payload_str().unwrap(), "last");
    settle(&consumer).await;
    assert_eq!(permits(&broker), vec![1, 5, 1]);
}

/// A message the consumer filters out (a reader's exclusive start) spends the permit while
/// the receive still waits: the task asks for the next one by itself.
#[tokio::test]
async fn a_filtered_message_asks_for_the_next_one() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("zero-queue-reader");
    let producer = unbatched_producer(&client, &topic).await;
    let ids = publish(&producer, "m", 4).await;
    let mut reader = client
        .reader(&topic)
        .start_message_id(ids[1])
        .receiver_queue_size(0)
        .create()
        .await
        .unwrap();
    let m = within("the message after the start", reader.recv())
        .await
        .unwrap();
    assert_eq!(m.payload_str().unwrap(), "m-2");
    let flows = permits(&broker);
    assert!(
        flows.iter().all(|&p| p == 1),
        "one permit at a time: {flows:?}"
    );
}

#[tokio::test]
async fn consumers_of_several_topics_or_partitions_are_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let refused = |r: pulsar_sdk::Result<Consumer>| match r {
        Err(Error::InvalidConfig(why)) => {
            assert!(why.contains("zero-size receiver queue"), "{why}");
            why
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    let partitioned = common::full("zero-queue-partitioned");
    assert!(broker.create_partitioned_topic(&partitioned, 3));
    let why = refused(
        client
            .consumer(&partitioned)
            .subscription("s")
            .receiver_queue_size(0)
            .subscribe()
            .await,
    );
    assert!(why.contains("3 partitions"), "{why}");
    refused(
        client
            .consumer(common::full("zero-queue-a"))
            .topics([common::full("zero-queue-a"), common::full("zero-queue-b")])
            .subscription("s")
            .receiver_queue_size(0)
            .subscribe()
            .await,
    );
    refused(
        client
            .pattern_consumer("persistent://public/default/zero-queue-.*")
            .subscription("s")
            .receiver_queue_size(0)
            .subscribe()
            .await,
    );
    refused(
        client
            .consumer(common::full("zero-queue-retry"))
            .subscription("s")
            .subscription_type(SubscriptionType::Shared)
            .retry_enable(true)
            .receiver_queue_size(0)
            .subscribe()
            .await,
    );
    // Nothing stays subscribed of a refused consumer.
    assert_eq!(
        broker.consumers(&format!("{partitioned}-partition-0"), "s"),
        0
    );
}

/// Java `ZeroQueueConsumerImpl.initReceiverQueueSize` refuses auto-scaling (a queue of 0
/// never grows): refused here before anything is subscribed.
#[tokio::test]
async fn auto_scaling_a_zero_queue_is_refused() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let r = client
        .consumer(common::full("zero-queue-auto"))
        .subscription("s")
        .receiver_queue_size(0)
        .auto_scaled_receiver_queue_size(true)
        .subscribe()
        .await;
    assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    assert!(broker.received_of(Type::Subscribe).is_empty());
}
