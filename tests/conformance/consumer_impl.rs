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
