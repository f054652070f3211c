//! Upstream `BinaryProtoLookupService`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common;
use crate::common::test_client;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{Client, Error, ServerError};

fn client(url: &str) -> Client {
    test_client(url).build().unwrap()
}

/// Java `BinaryProtoLookupService.getBroker` over `PulsarServiceNameResolver.resolveHost`: a
/// service URL naming several hosts spreads lookups over them in turn.
#[tokio::test]
async fn lookups_go_to_the_service_urls_hosts_in_turn() {
    let a = MockBroker::start().await.unwrap();
    let b = MockBroker::start().await.unwrap();
    let url = format!("pulsar://{},{}", a.addr(), b.addr());
    let client = client(&url);
    for i in 0..4 {
        client
            .lookup_topic(&format!("lookup-rr-{i}"))
            .await
            .unwrap();
    }
    assert_eq!(a.received_of(Type::Lookup).len(), 2);
    assert_eq!(b.received_of(Type::Lookup).len(), 2);
}

/// Java `BinaryProtoLookupService.getPartitionedTopicMetadata`: a failed metadata answer fails
/// with the broker's code and message.
#[tokio::test]
async fn a_failed_metadata_answer_carries_the_brokers_code_and_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.push_error(MockError::new(
        MockRequest::PartitionedMetadata,
        ServerError::AuthorizationError,
        "not on this namespace",
    ));
    match client
        .partitioned_topic_metadata("lookup-meta-refused")
        .await
    {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, ServerError::AuthorizationError);
            assert!(message.contains("not on this namespace"), "{message}");
        }
        other => panic!("expected the broker's refusal, got {other:?}"),
    }
}

/// Java `BinaryProtoLookupService.getPartitionedTopicMetadata`: the metadata request goes to
/// the service URL's broker with the topic's full name, and its count comes back as is.
#[tokio::test]
async fn metadata_is_asked_by_full_name_and_its_count_returned() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_partitioned_topic("persistent://public/default/lookup-meta", 5);
    assert_eq!(
        client
            .partitioned_topic_metadata("lookup-meta")
            .await
            .unwrap(),
        5
    );
    let asked = broker.received_of(Type::PartitionedMetadata);
    assert_eq!(
        asked[0].command.partition_metadata.as_ref().unwrap().topic,
        "persistent://public/default/lookup-meta"
    );
    let names = client.partitions_for_topic("lookup-meta").await.unwrap();
    assert_eq!(names.len(), 5);
    assert_eq!(
        names[4].as_str(),
        "persistent://public/default/lookup-meta-partition-4"
    );
}

/// Java `BinaryProtoLookupService.findBroker` (first request `authoritative = false`): the
/// first lookup of a topic is not authoritative.
#[tokio::test]
async fn the_first_lookup_is_not_authoritative() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    client.lookup_topic("lookup-first").await.unwrap();
    let sent = broker.received_of(Type::Lookup);
    assert_eq!(
        sent[0].command.lookup_topic.as_ref().unwrap().authoritative,
        Some(false)
    );
}

/// Java `BinaryProtoLookupService.getBroker` (`lookupInProgress`): concurrent lookups of one
/// topic share one LOOKUP request and all get its answer.
#[tokio::test]
async fn concurrent_lookups_of_one_topic_share_one_request() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    client.lookup_topic("lookup-warm").await.unwrap();
    broker.set_response_delay(std::time::Duration::from_millis(200));
    let found =
        futures::future::join_all((0..8).map(|_| client.lookup_topic("lookup-shared"))).await;
    for f in found {
        assert_eq!(f.unwrap().logical_url.to_string(), broker.service_url());
    }
    let shared = broker
        .received_of(Type::Lookup)
        .iter()
        .filter(|r| {
            r.command
                .lookup_topic
                .as_ref()
                .unwrap()
                .topic
                .ends_with("/lookup-shared")
        })
        .count();
    assert_eq!(shared, 1, "one LOOKUP for eight concurrent callers");
    // Once answered, a later lookup asks again (nothing is cached).
    client.lookup_topic("lookup-shared").await.unwrap();
    assert_eq!(broker.received_of(Type::Lookup).len(), 3);
}

/// Java `BinaryProtoLookupService.getPartitionedTopicMetadata`
/// (`partitionedMetadataInProgress`): concurrent metadata requests for one topic share one
/// request.
#[tokio::test]
async fn concurrent_metadata_requests_of_one_topic_share_one_request() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_partitioned_topic("persistent://public/default/lookup-meta-shared", 3);
    client.lookup_topic("lookup-warm").await.unwrap();
    broker.set_response_delay(std::time::Duration::from_millis(200));
    let counts = futures::future::join_all(
        (0..8).map(|_| client.partitioned_topic_metadata("lookup-meta-shared")),
    )
    .await;
    for c in counts {
        assert_eq!(c.unwrap(), 3);
    }
    assert_eq!(broker.received_of(Type::PartitionedMetadata).len(), 1);
}

/// The shared lookup when its first caller gives up: a caller waiting for a lookup whose
/// first caller was cancelled is not left waiting; it asks again itself.
#[tokio::test]
async fn a_cancelled_lookup_does_not_strand_the_callers_waiting_for_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    client.lookup_topic("lookup-warm").await.unwrap();
    broker.set_response_delay(std::time::Duration::from_millis(300));
    let c = client.clone();
    let first = tokio::spawn(async move { c.lookup_topic("lookup-cancelled").await });
    common::wait_until("the first lookup is on the wire", || {
        broker.received_of(Type::Lookup).len() == 2
    })
    .await;
    let c = client.clone();
    let waiting = tokio::spawn(async move { c.lookup_topic("lookup-cancelled").await });
    tokio::task::yield_now().await;
    first.abort();
    let found = common::within("the waiting lookup", waiting).await.unwrap();
    assert_eq!(found.unwrap().logical_url.to_string(), broker.service_url());
}
