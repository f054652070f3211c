//! Upstream `ConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, SubscriptionType};

use crate::common::{full, test_client, within};

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

/// r-h1: a subscribe the application stops waiting for (its own timeout, shorter than the
/// operation timeout) is closed on the broker as a timed-out one is
/// (`ConsumerImpl.connectionOpened`), so the Exclusive subscription is free for the next one.
#[tokio::test(start_paused = true)]
async fn r_h1_a_subscribe_dropped_by_the_application_is_closed_on_the_broker() {
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
