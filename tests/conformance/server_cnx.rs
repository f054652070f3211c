//! Upstream `ServerCnx`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{InitialPosition, SubscriptionType};

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};

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
