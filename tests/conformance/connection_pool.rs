//! Upstream `ConnectionPool`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common;
use crate::common::{full, test_client, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, SubscriptionType};

fn client(url: &str) -> Client {
    test_client(url).build().unwrap()
}

/// Java `ConnectionPool.getConnection` (`connectionsPerBroker = 1`): lookups, producers and
/// consumers of topics on one broker all share one connection.
#[tokio::test]
async fn lookups_producers_and_consumers_of_one_broker_share_one_connection() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = common::unbatched_producer(&client, &full("pool-shared-a")).await;
    let other = common::unbatched_producer(&client, &full("pool-shared-b")).await;
    let mut consumer = client
        .consumer(full("pool-shared-a"))
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    producer.send_and_wait("m").await.unwrap();
    other.send_and_wait("m").await.unwrap();
    within("receive", common::recv(&mut consumer)).await;
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(broker.received_of(Type::Connect).len(), 1);
    assert_eq!(client.connections_opened(), 1);
}

/// Java `ConnectionPool.getConnection(logicalAddress, physicalAddress)`: a topic on another
/// broker (found by a redirect) gets a connection of its own to that broker, shared by every
/// entity on it; the service URL's broker keeps its own.
#[tokio::test]
async fn each_broker_gets_one_connection_of_its_own() {
    let entry = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    entry.redirect_lookups_to(&owner.service_url(), true);
    let client = client(&entry.service_url());
    let a = common::unbatched_producer(&client, &full("pool-owner-a")).await;
    let b = common::unbatched_producer(&client, &full("pool-owner-b")).await;
    a.send_and_wait("m").await.unwrap();
    b.send_and_wait("m").await.unwrap();
    assert_eq!(entry.accepted_connections(), 1, "lookups only");
    assert!(entry.received_of(Type::Producer).is_empty());
    assert_eq!(
        owner.accepted_connections(),
        1,
        "both producers on one connection"
    );
    assert_eq!(owner.received_of(Type::Producer).len(), 2);
    assert_eq!(client.connections_opened(), 2);
}

/// Java `PulsarClientImpl.closeAsync` → `ConnectionPool.close`: closing the client closes
/// every pooled connection, and nothing reconnects afterwards.
#[tokio::test]
async fn closing_the_client_closes_every_pooled_connection() {
    let a = MockBroker::start().await.unwrap();
    let b = MockBroker::start().await.unwrap();
    a.redirect_topic_lookups_to("pool-close-b", &b.service_url(), true);
    let client = client(&a.service_url());
    let pa = common::unbatched_producer(&client, &full("pool-close-a")).await;
    let pb = common::unbatched_producer(&client, &full("pool-close-b")).await;
    pa.send_and_wait("m").await.unwrap();
    pb.send_and_wait("m").await.unwrap();
    assert_eq!(a.connections().len() + b.connections().len(), 2);
    client.close().await.unwrap();
    common::wait_until("every connection is closed", || {
        a.connections().is_empty() && b.connections().is_empty()
    })
    .await;
    assert_eq!(a.accepted_connections() + b.accepted_connections(), 2);
    assert!(client.lookup_topic("pool-close-a").await.is_err());
    assert_eq!(
        a.accepted_connections(),
        1,
        "no new connection after the close"
    );
}
