//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::ProducerAccessMode;
use pulsar_sdk::{Client, Error};

use crate::common::{full, test_client, within};

const TIMEOUT: Duration = Duration::from_secs(2);

/// Two brokers: `lookup` answers every lookup `Connect` to `owner`, which serves the topics.
/// The owner's answers can then be slowed without slowing the lookups.
async fn lookup_and_owner() -> (MockBroker, MockBroker, Client) {
    let lookup = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    lookup.connect_lookups_to(&owner.service_url());
    let client = test_client(&lookup.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    (lookup, owner, client)
}

/// `ProducerImpl.connectionOpened`: when CommandProducer gets no answer within the operation
/// timeout, the client sends CloseProducer for that producer id, so a producer the broker did
/// create is not kept for nobody (an Exclusive one would fence the next).
#[tokio::test(start_paused = true)]
async fn a_create_that_times_out_is_closed_on_the_broker() {
    let (_lookup, owner, client) = lookup_and_owner().await;
    let topic = full("create-timeout");
    owner.set_response_delay(TIMEOUT * 3);
    let first = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    let created = owner.received_of(Type::Producer);
    let id = created[0].command.producer.as_ref().unwrap().producer_id;
    let close = within(
        "CloseProducer",
        owner.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the timed-out create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, id);

    // The broker kept nothing: the next Exclusive producer is not fenced.
    owner.set_response_delay(Duration::ZERO);
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(next.is_ok(), "{:?}", next.err());
}

/// `ClientCnx.handleProducerSuccess` marks a `producer_ready = false` answer as responded: a
/// WaitForExclusive create waits, past the operation timeout, until the broker grants the
/// exclusive slot (here when the Exclusive producer holding it closes).
#[tokio::test(start_paused = true)]
async fn wait_for_exclusive_waits_past_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-for-exclusive");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    // Ten operation timeouts of virtual time: still waiting, not timed out.
    tokio::time::sleep(TIMEOUT * 10).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    holder.close().await.unwrap();
    let granted = within("granted", waiting).await.unwrap();
    let granted = granted.expect("granted the exclusive slot");
    granted.send_and_wait("mine now").await.unwrap();
}

/// A WaitForExclusive create the application stops waiting for is closed on the broker (as a
/// timed-out create is, `ProducerImpl.connectionOpened`): when the slot frees up, it is not
/// granted to a producer nobody holds, and the next Exclusive producer gets it.
#[tokio::test(start_paused = true)]
async fn a_dropped_wait_for_exclusive_create_is_closed_on_the_broker() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("dropped-wait");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    let queued = broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    let queued_id = queued[1].command.producer.as_ref().unwrap().producer_id;
    waiting.abort();
    let _ = waiting.await;
    let close = within(
        "CloseProducer",
        broker.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the abandoned create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, queued_id);

    holder.close().await.unwrap();
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(
        next.is_ok(),
        "not fenced by a granted ghost: {:?}",
        next.err()
    );
}
