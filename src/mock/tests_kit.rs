//! The fault-injection kit seen from a raw client: pushed errors, round-trip time, cuts
//! mid-frame, brokers down and up, topic moves, the storage cut.

use std::time::Duration;

use bytes::Bytes;

use super::tests::{lookup, partitioned_metadata, ping, tcp_client, RawClient, WAIT};
use super::tests_support::{metadata, Client, TOPIC};
use super::wire::{self, base_command::Type, command_subscribe::SubType};
use super::*;

fn producer_cmd(topic: &str, producer_id: u64, request_id: u64) -> wire::CommandProducer {
    wire::CommandProducer {
        topic: topic.into(),
        producer_id,
        request_id,
        ..Default::default()
    }
}

fn error_of(resp: &wire::BaseCommand) -> (ServerError, String, u64) {
    let e = resp
        .error
        .clone()
        .unwrap_or_else(|| panic!("ERROR, got {resp:?}"));
    (ServerError::from_code(e.error), e.message, e.request_id)
}

#[tokio::test]
async fn pushed_producer_errors_answer_n_requests_then_the_broker_serves() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ServiceNotReady,
            "loading",
        )
        .times(2),
    );
    assert_eq!(broker.pending_errors()[0].times, 2);
    for request_id in [1, 2] {
        let resp = c.producer_with(producer_cmd(TOPIC, 1, request_id)).await;
        assert_eq!(
            error_of(&resp),
            (ServerError::ServiceNotReady, "loading".into(), request_id)
        );
    }
    assert!(
        !broker.topic_exists(TOPIC),
        "the refused requests did nothing"
    );
    c.producer(TOPIC, 1).await;
    assert!(broker.pending_errors().is_empty());
    let consumed = broker.consumed_errors();
    assert_eq!(consumed.len(), 2);
    assert_eq!(consumed[0].request, MockRequest::Producer);
    assert_eq!(consumed[0].topic.as_deref(), Some(TOPIC));
    assert_eq!(consumed[0].connection, broker.connections()[0]);
    assert_eq!(consumed[0].broker, broker.service_url());
}

#[tokio::test]
async fn a_pushed_send_error_answers_send_error_and_stores_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    c.producer(TOPIC, 7).await;
    broker.push_errors(MockRequest::Send, &[ServerError::PersistenceError]);
    c.send(7, metadata("p", 0, None), b"lost").await;
    let err = c.raw.expect(Type::SendError).await.send_error.unwrap();
    assert_eq!((err.producer_id, err.sequence_id), (7, 0));
    assert_eq!(
        ServerError::from_code(err.error),
        ServerError::PersistenceError
    );
    assert_eq!(broker.topic_messages(TOPIC), 0);
    c.publish(7, metadata("p", 1, None), b"kept").await;
    assert_eq!(broker.topic_messages(TOPIC), 1);
    assert_eq!(broker.consumed_errors().len(), 1);
}

#[tokio::test]
async fn lookup_and_metadata_errors_are_failed_responses() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    broker.push_error(MockError::new(
        MockRequest::Lookup,
        ServerError::TooManyRequests,
        "slow down",
    ));
    broker.push_error(MockError::new(
        MockRequest::PartitionedMetadata,
        ServerError::MetadataError,
        "zk",
    ));
    let resp = c
        .request(lookup("t", 3))
        .await
        .lookup_topic_response
        .unwrap();
    assert_eq!(resp.request_id, 3);
    assert_eq!(
        resp.response,
        Some(wire::command_lookup_topic_response::LookupType::Failed as i32)
    );
    assert_eq!(resp.error, Some(ServerError::TooManyRequests.code()));
    assert_eq!(resp.message.as_deref(), Some("slow down"));
    let resp = c
        .request(partitioned_metadata("t", 4))
        .await
        .partition_metadata_response
        .unwrap();
    assert_eq!(resp.request_id, 4);
    assert_eq!(resp.error, Some(ServerError::MetadataError.code()));
    // Consumed: the next ones are served.
    let resp = c
        .request(lookup("t", 5))
        .await
        .lookup_topic_response
        .unwrap();
    assert!(resp.error.is_none());
    let report = broker.wait_for_consumed_errors(2, WAIT).await.unwrap();
    assert_eq!(report[1].request, MockRequest::PartitionedMetadata);
}

#[tokio::test]
async fn an_ack_receipt_error_leaves_the_message_unacknowledged() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    c.producer(TOPIC, 1).await;
    let receipt = c.publish(1, metadata("p", 0, None), b"m").await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 2).await;
    c.flow(2, 10).await;
    c.message().await;
    broker.push_error(MockError::new(
        MockRequest::Ack,
        ServerError::MetadataError,
        "cursor",
    ));
    // An ack without a receipt never matches: the error waits for the one with a request id.
    let ack = |request_id: Option<u64>| wire::BaseCommand {
        r#type: Type::Ack as i32,
        ack: Some(wire::CommandAck {
            consumer_id: 2,
            ack_type: wire::command_ack::AckType::Individual as i32,
            message_id: vec![receipt.message_id.clone().unwrap()],
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    };
    let resp = c.request(ack(Some(9))).await.ack_response.unwrap();
    assert_eq!(resp.request_id, Some(9));
    assert_eq!(resp.error, Some(ServerError::MetadataError.code()));
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 1);
    let resp = c.request(ack(Some(10))).await.ack_response.unwrap();
    assert_eq!(resp.error, None);
    assert_eq!(broker.subscription_backlog(TOPIC, "s"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_flow_error_holds_the_dispatch_for_its_delay() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await.patient();
    c.producer(TOPIC, 1).await;
    c.publish(1, metadata("p", 0, None), b"m").await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 2).await;
    broker.push_error(
        MockError::new(
            MockRequest::Flow,
            ServerError::PersistenceError,
            "read failed",
        )
        .after(Duration::from_secs(10)),
    );
    let start = tokio::time::Instant::now();
    c.flow(2, 10).await;
    let delivered = c.message().await;
    assert!(start.elapsed() >= Duration::from_secs(10));
    assert_eq!(delivered.payload, Bytes::from_static(b"m"));
    assert_eq!(broker.consumed_errors()[0].request, MockRequest::Flow);
}

#[tokio::test(start_paused = true)]
async fn a_pushed_error_waits_its_delay() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await.patient();
    broker.push_error(
        MockError::new(MockRequest::Lookup, ServerError::ServiceNotReady, "x")
            .after(Duration::from_secs(3)),
    );
    let start = tokio::time::Instant::now();
    let resp = c.request(lookup("t", 1)).await;
    assert!(start.elapsed() >= Duration::from_secs(3));
    assert!(resp.lookup_topic_response.unwrap().error.is_some());
}

#[tokio::test]
async fn topic_and_connection_scopes_skip_other_requests() {
    let broker = MockBroker::start().await.unwrap();
    let mut a = Client::connect(&broker).await;
    let mut b = Client::connect(&broker).await;
    let conns = broker.connections();
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::ServiceNotReady,
            "orders",
        )
        .on_topic("orders"),
    );
    broker.push_error(
        MockError::new(MockRequest::Lookup, ServerError::ServiceNotReady, "b only")
            .on_connection(conns[1]),
    );
    a.producer("other", 1).await;
    // A partitioned topic's scope covers its partitions.
    let resp = a
        .producer_with(producer_cmd("orders-partition-1", 2, 50))
        .await;
    assert_eq!(error_of(&resp).1, "orders");
    let resp = a
        .request(lookup("t", 51))
        .await
        .lookup_topic_response
        .unwrap();
    assert!(resp.error.is_none(), "connection a is not in scope");
    let resp = b
        .request(lookup("t", 52))
        .await
        .lookup_topic_response
        .unwrap();
    assert_eq!(resp.message.as_deref(), Some("b only"));
    let consumed = broker.consumed_errors();
    assert_eq!(
        consumed[0].topic.as_deref(),
        Some("persistent://public/default/orders-partition-1")
    );
    assert_eq!(consumed[1].connection, conns[1]);
}

#[tokio::test(start_paused = true)]
async fn the_round_trip_time_delays_responses_pongs_and_messages() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await.patient();
    c.producer(TOPIC, 1).await;
    c.subscribe(TOPIC, "s", SubType::Exclusive, 2).await;
    c.flow(2, 10).await;
    broker.set_round_trip_time(Duration::from_secs(2));
    let start = tokio::time::Instant::now();
    c.raw.send(ping()).await;
    c.raw.expect(Type::Pong).await;
    assert!(start.elapsed() >= Duration::from_secs(2));
    let start = tokio::time::Instant::now();
    c.send(1, metadata("p", 0, None), b"m").await;
    // The receipt and the MESSAGE both leave 2 s late, in the order the broker made them.
    let first = c.raw.recv_frame().await.unwrap();
    let second = c.raw.recv_frame().await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(2));
    let mut types = [first.command.r#type, second.command.r#type];
    types.sort_unstable();
    let mut expected = [Type::SendReceipt as i32, Type::Message as i32];
    expected.sort_unstable();
    assert_eq!(types, expected);
    broker.set_round_trip_time(Duration::ZERO);
    let start = tokio::time::Instant::now();
    c.raw.send(ping()).await;
    c.raw.expect(Type::Pong).await;
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_connection_cut_mid_frame_ends_with_a_truncated_frame() {
    let broker = MockBroker::start().await.unwrap();
    let mut raw = tcp_client(&broker).await;
    raw.handshake().await;
    let mut other = tcp_client(&broker).await;
    other.handshake().await;
    let conns = broker.connections();
    assert!(broker.drop_connection_mid_frame(conns[0]));
    match raw.next_result().await {
        Some(Err(_)) => {} // bytes left on the stream: a frame cut short
        other => panic!("expected a truncated frame, got {other:?}"),
    }
    super::tests_support::eventually(|| broker.connections() == vec![conns[1]]).await;
    assert!(!broker.drop_connection_mid_frame(conns[0]));
    other.send(ping()).await;
    other.expect(Type::Pong).await;
}

#[tokio::test]
async fn a_broker_taken_down_refuses_connections_until_brought_up() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    c.producer(TOPIC, 1).await;
    c.publish(1, metadata("p", 0, None), b"kept").await;
    broker.take_down().await.unwrap();
    assert!(broker.is_down());
    assert!(c.raw.is_closed().await);
    let refused = tokio::net::TcpStream::connect(broker.addr()).await;
    assert!(refused.is_err(), "the port refuses while down");
    broker.take_down().await.unwrap(); // already down: nothing to do
    broker.bring_up().await.unwrap();
    assert!(!broker.is_down());
    let mut raw = tcp_client(&broker).await;
    raw.handshake().await;
    assert_eq!(broker.topic_messages(TOPIC), 1, "the storage stayed");
    broker.bring_up().await.unwrap(); // already up
}

#[tokio::test]
async fn a_broker_cut_from_storage_fails_writes_with_retriable_errors() {
    let broker = MockBroker::start().await.unwrap();
    let mut c = Client::connect(&broker).await;
    c.producer(TOPIC, 1).await;
    c.subscribe(TOPIC, "existing", SubType::Shared, 2).await;
    broker.set_storage_cut(true);
    c.send(1, metadata("p", 0, None), b"m").await;
    let err = c.raw.expect(Type::SendError).await.send_error.unwrap();
    let code = ServerError::from_code(err.error);
    assert_eq!(code, ServerError::PersistenceError);
    assert!(code.is_retriable());
    let resp = c.producer_with(producer_cmd("new-topic", 3, 60)).await;
    assert_eq!(error_of(&resp).0, ServerError::ServiceNotReady);
    let resp = c
        .subscribe_with(super::tests_support::subscribe_cmd(
            TOPIC,
            "new-sub",
            SubType::Shared,
            4,
            61,
        ))
        .await;
    assert_eq!(error_of(&resp).0, ServerError::ServiceNotReady);
    // An existing topic takes a new producer; an existing subscription a new consumer.
    c.producer(TOPIC, 5).await;
    c.subscribe(TOPIC, "existing", SubType::Shared, 6).await;
    assert!(
        broker.consumed_errors().is_empty(),
        "the cut is not a pushed error"
    );
    broker.set_storage_cut(false);
    c.publish(1, metadata("p", 1, None), b"m").await;
    assert_eq!(broker.topic_messages(TOPIC), 1);
}

#[tokio::test]
async fn moving_a_topic_closes_its_clients_with_or_without_the_assigned_url() {
    let cluster = MockCluster::start(2).await.unwrap();
    let b0 = cluster.broker(0).unwrap();
    let b1 = cluster.broker(1).unwrap().service_url();
    let mut c = Client::connect(b0).await;
    for (i, how) in [TopicMove::AssignedUrl, TopicMove::Lookup]
        .into_iter()
        .enumerate()
    {
        let producer_id = i as u64 + 1;
        let resp = c.producer_with(producer_cmd(TOPIC, producer_id, 70 + producer_id));
        assert!(resp.await.producer_success.is_some());
        cluster.move_topic(TOPIC, 1, how).unwrap();
        let close = c
            .raw
            .expect(Type::CloseProducer)
            .await
            .close_producer
            .unwrap();
        assert_eq!(close.producer_id, producer_id);
        let expected = (how == TopicMove::AssignedUrl).then(|| b1.clone());
        assert_eq!(close.assigned_broker_service_url, expected);
        assert_eq!(cluster.topic_owner(TOPIC), Some(1));
        // Broker 0 redirects lookups to the owner and refuses producers.
        let resp = c.request(lookup(TOPIC, 80 + producer_id)).await;
        let resp = resp.lookup_topic_response.unwrap();
        assert_eq!(resp.broker_service_url.as_deref(), Some(b1.as_str()));
        // Move it back for the next round.
        cluster.move_topic(TOPIC, 0, TopicMove::Lookup).unwrap();
    }
    assert!(matches!(
        cluster.move_topic(TOPIC, 5, TopicMove::Lookup),
        Err(MockAdminError::BrokerNotFound {
            index: 5,
            brokers: 2
        })
    ));
}

#[tokio::test]
async fn a_cluster_wide_error_is_consumed_by_the_first_broker_asked() {
    let cluster = MockCluster::start(2).await.unwrap();
    let mut on_1 = Client::connect(cluster.broker(1).unwrap()).await;
    let mut on_0 = Client::connect(cluster.broker(0).unwrap()).await;
    cluster.push_error(MockError::new(
        MockRequest::Lookup,
        ServerError::ServiceNotReady,
        "any",
    ));
    assert_eq!(cluster.broker(0).unwrap().pending_errors().len(), 1);
    let resp = on_1
        .request(lookup("t", 1))
        .await
        .lookup_topic_response
        .unwrap();
    assert!(resp.error.is_some());
    let resp = on_0
        .request(lookup("t", 2))
        .await
        .lookup_topic_response
        .unwrap();
    assert!(resp.error.is_none());
    let consumed = cluster.consumed_errors();
    assert_eq!(consumed.len(), 1);
    assert_eq!(consumed[0].broker, cluster.broker(1).unwrap().service_url());
    assert!(cluster.broker(0).unwrap().consumed_errors().is_empty());
    assert!(cluster.pending_errors().is_empty());
}

#[tokio::test]
async fn the_cluster_url_names_every_broker_and_dropping_it_closes_them() {
    let cluster = MockCluster::start(3).await.unwrap();
    let url = cluster.service_url();
    let addrs: Vec<_> = cluster.brokers().iter().map(|b| b.addr()).collect();
    for addr in &addrs {
        assert!(addr.ip().is_loopback());
        assert!(url.contains(&addr.to_string()));
    }
    assert!(MockCluster::start(0).await.is_err());
    let mut raw = RawClient::new(tokio::net::TcpStream::connect(addrs[2]).await.unwrap());
    raw.handshake().await;
    drop(cluster);
    assert!(raw.is_closed().await, "connections are closed on drop");
    for addr in addrs {
        super::tests_support::eventually(|| std::net::TcpStream::connect(addr).is_err()).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_cluster_broker_reads_but_answers_nothing_until_resumed() {
    let cluster = MockCluster::start(2).await.unwrap();
    let broker = cluster.broker(1).unwrap();
    cluster.set_stalled(1, true).unwrap();
    let mut raw = RawClient::new(broker.connect_duplex()).patient();
    raw.send(super::tests::connect(21, None)).await;
    broker.wait_for_command(Type::Connect, WAIT).await.unwrap();
    raw.expect_silence(Duration::from_secs(60)).await;
    cluster.set_stalled(1, false).unwrap();
    raw.send(ping()).await;
    raw.expect(Type::Pong).await;
    assert!(matches!(
        cluster.set_stalled(2, true),
        Err(MockAdminError::BrokerNotFound { .. })
    ));
}
