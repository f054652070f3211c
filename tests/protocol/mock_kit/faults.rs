//! The mock broker's fault-injection kit seen from the client: each fault does what it says,
//! and the client handles it as it handles a real broker's.

use common::client;
use support as common;

use std::time::{Duration, Instant};

use common::{wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockCluster, MockError, MockRequest, TopicMove};
use pulsar_sdk::{Error, MessageId, ServerError};

#[tokio::test]
async fn a_pushed_send_error_makes_the_producer_reconnect_and_send_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("kit-send")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::Send,
            ServerError::PersistenceError,
            "bookie down",
        )
        .times(2),
    );
    let id = within("send", producer.send_and_wait("m")).await.unwrap();
    assert_eq!(id.entry_id, 0, "stored once, after the errors");
    let consumed = broker.consumed_errors();
    assert_eq!(consumed.len(), 2);
    assert!(consumed.iter().all(|c| c.request == MockRequest::Send));
    assert_eq!(broker.topic_messages("kit-send"), 1);
    assert!(broker.accepted_connections() >= 2, "it reconnected");
}

#[tokio::test]
async fn pushed_producer_and_metadata_errors_are_retried_by_create() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.push_error(
        MockError::new(
            MockRequest::PartitionedMetadata,
            ServerError::ServiceNotReady,
            "m",
        )
        .times(2),
    );
    broker.push_error(
        MockError::new(MockRequest::Producer, ServerError::ServiceNotReady, "p").times(3),
    );
    let producer = within("create", client.producer("kit-create").create())
        .await
        .expect("retriable errors are retried");
    producer.send_and_wait("m").await.unwrap();
    assert_eq!(broker.consumed_errors().len(), 5);
    assert!(broker.pending_errors().is_empty());
}

#[tokio::test]
async fn a_non_retriable_subscribe_error_fails_subscribe_at_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.push_error(
        MockError::new(
            MockRequest::Subscribe,
            ServerError::AuthorizationError,
            "no",
        )
        .on_topic("kit-sub"),
    );
    match client
        .consumer("kit-sub")
        .subscription("s")
        .subscribe()
        .await
    {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, ServerError::AuthorizationError);
            assert_eq!(message, "no");
        }
        other => panic!("expected AuthorizationError, got {other:?}"),
    }
    // Consumed: the next subscribe is served.
    client
        .consumer("kit-sub")
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
}

#[tokio::test]
async fn seek_and_unsubscribe_errors_reach_the_caller() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let mut consumer = client
        .consumer("kit-admin")
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    broker.push_errors(MockRequest::Seek, &[ServerError::MetadataError]);
    match within("seek", consumer.seek(MessageId::EARLIEST)).await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::MetadataError),
        other => panic!("expected MetadataError, got {other:?}"),
    }
    broker.push_errors(MockRequest::Unsubscribe, &[ServerError::NotAllowed]);
    match within("unsubscribe", consumer.unsubscribe()).await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::NotAllowed),
        other => panic!("expected NotAllowed, got {other:?}"),
    }
    assert_eq!(broker.subscriptions("kit-admin"), vec!["s".to_owned()]);
    // Still a consumer (upstream leaves it Ready): the next unsubscribe goes through.
    within("unsubscribe again", consumer.unsubscribe())
        .await
        .unwrap();
    assert!(broker.subscriptions("kit-admin").is_empty());
}

#[tokio::test]
async fn the_round_trip_time_slows_every_exchange() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("kit-rtt")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_round_trip_time(Duration::from_millis(150));
    let start = Instant::now();
    producer.send_and_wait("m").await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn a_producer_survives_a_connection_cut_mid_frame() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("kit-cut")
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    let conn = broker.connections()[0];
    assert!(broker.drop_connection_mid_frame(conn));
    within("send after the cut", producer.send_and_wait("after"))
        .await
        .expect("the producer reconnects");
    assert_eq!(broker.accepted_connections(), 2);
    assert_eq!(broker.topic_messages("kit-cut"), 2);
}

#[tokio::test]
async fn a_producer_rides_out_a_storage_cut() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer("kit-storage")
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_storage_cut(true);
    let send = tokio::spawn({
        let producer = producer.clone();
        async move { producer.send_and_wait("m").await }
    });
    // Refused at least twice (the client re-sends after reconnecting), then the storage is back.
    within(
        "re-sends",
        broker.wait_for_commands(Type::Send, 2, Duration::from_secs(10)),
    )
    .await
    .expect("the SEND is retried");
    assert_eq!(broker.topic_messages("kit-storage"), 0);
    broker.set_storage_cut(false);
    within("send", send)
        .await
        .unwrap()
        .expect("the send completes");
    assert_eq!(broker.topic_messages("kit-storage"), 1);
}

#[tokio::test]
async fn a_client_on_the_cluster_url_fails_over_when_its_broker_goes_down() {
    let cluster = MockCluster::start(2).await.unwrap();
    let client = client(&cluster.service_url());
    let producer = client
        .producer("kit-down")
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("one").await.unwrap();
    let serving = (0..2)
        .find(|&k| !cluster.broker(k).unwrap().connections().is_empty())
        .expect("a broker serves the producer");
    cluster.broker_down(serving).await.unwrap();
    within("send with a broker down", producer.send_and_wait("two"))
        .await
        .expect("the client reaches the other broker");
    let other = cluster.broker(1 - serving).unwrap();
    assert_eq!(other.producers("kit-down"), 1);
    cluster.broker_up(serving).await.unwrap();
    assert_eq!(other.topic_messages("kit-down"), 2, "one storage");
}

#[tokio::test]
async fn moving_a_topic_takes_its_producer_and_consumer_along() {
    let cluster = MockCluster::start(2).await.unwrap();
    let client = client(&cluster.broker(0).unwrap().service_url());
    let producer = client
        .producer("kit-move")
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer("kit-move")
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    for (round, (to, how)) in [(1, TopicMove::AssignedUrl), (0, TopicMove::Lookup)]
        .into_iter()
        .enumerate()
    {
        cluster.move_topic("kit-move", to, how).unwrap();
        assert_eq!(cluster.topic_owner("kit-move"), Some(to));
        let target = cluster.broker(to).unwrap();
        wait_until("both reattach on the owner", || {
            target.producers("kit-move") == 1 && target.consumers("kit-move", "s") == 1
        })
        .await;
        producer.send_and_wait(format!("m{round}")).await.unwrap();
        let m = within("receive", consumer.recv()).await.unwrap();
        assert_eq!(m.payload_str().unwrap(), format!("m{round}"));
        consumer.ack(&m).unwrap();
    }
}
