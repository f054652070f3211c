//! The in-memory broker's lifecycle operations: namespace deletion and termination (PIP-139),
//! unload (also to another broker), topic termination and deletion, restart.

use tokio::net::TcpStream;

use super::tests::RawClient;
use super::tests_support::{eventually, metadata, subscribe_cmd, Client};
use super::wire::{self, base_command::Type, command_subscribe::SubType};
use super::*;

const NS: &str = "tn/ns";
const T1: &str = "persistent://tn/ns/t1";
const T2: &str = "persistent://tn/ns/t2";

fn error_of(resp: &wire::BaseCommand) -> (ServerError, String) {
    let err = resp.error.as_ref().unwrap_or_else(|| panic!("{resp:?}"));
    (ServerError::from_code(err.error), err.message.clone())
}

/// Sends PRODUCER `producer_id` on `topic` and returns the response.
async fn try_producer(client: &mut Client, topic: &str, producer_id: u64) -> wire::BaseCommand {
    let request_id = client.request_id();
    client
        .producer_with(wire::CommandProducer {
            topic: topic.into(),
            producer_id,
            request_id,
            ..Default::default()
        })
        .await
}

/// Sends SUBSCRIBE (Shared, earliest) and returns the response.
async fn try_subscribe(client: &mut Client, topic: &str, consumer_id: u64) -> wire::BaseCommand {
    let request_id = client.request_id();
    client
        .subscribe_with(subscribe_cmd(
            topic,
            "sub",
            SubType::Shared,
            consumer_id,
            request_id,
        ))
        .await
}

/// Creates producer `producer_id` named "p" (as a client re-creating it after a reconnect)
/// and returns its PRODUCER_SUCCESS.
async fn producer_p(
    client: &mut Client,
    topic: &str,
    producer_id: u64,
) -> wire::CommandProducerSuccess {
    let request_id = client.request_id();
    let resp = client
        .producer_with(wire::CommandProducer {
            topic: topic.into(),
            producer_id,
            request_id,
            producer_name: Some("p".into()),
            ..Default::default()
        })
        .await;
    let error = resp.error.clone();
    resp.producer_success
        .unwrap_or_else(|| panic!("no PRODUCER_SUCCESS: {error:?}"))
}

async fn lookup(client: &mut Client, topic: &str) -> wire::CommandLookupTopicResponse {
    let request_id = client.request_id();
    let resp = client
        .request(wire::BaseCommand {
            r#type: Type::Lookup as i32,
            lookup_topic: Some(wire::CommandLookupTopic {
                topic: topic.into(),
                request_id,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    resp.lookup_topic_response.expect("LOOKUP_RESPONSE")
}

async fn expect_close_producer(client: &mut Client) -> wire::CommandCloseProducer {
    let cmd = client.raw.expect(Type::CloseProducer).await;
    cmd.close_producer.unwrap()
}

async fn expect_close_consumer(client: &mut Client) -> wire::CommandCloseConsumer {
    let cmd = client.raw.expect(Type::CloseConsumer).await;
    cmd.close_consumer.unwrap()
}

#[tokio::test]
async fn forced_namespace_deletion_closes_for_good_and_refuses_creates() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer.producer(T1, 1).await;
    producer.publish(1, metadata("p", 0, None), b"m").await;
    let mut consumer = Client::connect(&broker).await;
    consumer.subscribe(T2, "sub", SubType::Shared, 7).await;
    let mut late = Client::connect(&broker).await;
    assert_eq!(broker.namespaces(), vec![NS.to_owned()]);
    assert_eq!(broker.tenants(), vec!["tn".to_owned()]);
    assert_eq!(broker.topics_in_namespace(NS), vec![T1, T2]);

    broker.set_deletion_delay(Duration::from_secs(1));
    let deleting = tokio::spawn({
        let broker = broker.clone();
        async move { broker.delete_namespace(NS, true).await }
    });
    let close = expect_close_producer(&mut producer).await;
    assert_eq!((close.producer_id, close.allow_reconnect), (1, Some(false)));
    assert_eq!(close.assigned_broker_service_url, None);
    let close = expect_close_consumer(&mut consumer).await;
    assert_eq!((close.consumer_id, close.allow_reconnect), (7, Some(false)));
    assert!(broker.is_namespace_being_deleted(NS));
    assert_eq!((broker.producers(T1), broker.consumers(T2, "sub")), (0, 0));

    // Racing creates during the deletion: refused, on new and existing topics alike.
    for topic in ["persistent://tn/ns/new", T1] {
        let resp = try_producer(&mut late, topic, 3).await;
        let (code, message) = error_of(&resp);
        assert_eq!(code, ServerError::NotAllowed);
        assert_eq!(message, "Namespace is being deleted");
    }
    let resp = try_subscribe(&mut late, "persistent://tn/ns/other", 4).await;
    assert_eq!(error_of(&resp).0, ServerError::NotAllowed);
    let found = lookup(&mut late, T1).await;
    assert_eq!(found.error, Some(ServerError::NotAllowed.code()));
    // A late SEND from the closed producer is ignored.
    producer.send(1, metadata("p", 1, None), b"late").await;
    producer.quiet().await;

    deleting.await.unwrap().unwrap();
    assert!(!broker.is_namespace_being_deleted(NS));
    assert!(broker.namespaces().is_empty());
    assert!(broker.topics_in_namespace(NS).is_empty());
    assert!(!broker.topic_exists(T1) && !broker.topic_exists("persistent://tn/ns/new"));
    let stats = broker.stats();
    assert_eq!((stats.producers, stats.consumers, stats.topics), (0, 0, 0));
    assert_eq!(stats.connections, 3);

    // Not terminated: a new topic re-creates the namespace, empty.
    let ok = try_producer(&mut late, T1, 5).await;
    assert_eq!(ok.producer_success.unwrap().last_sequence_id, Some(-1));
    assert_eq!(broker.namespaces(), vec![NS.to_owned()]);
    assert_eq!(broker.topic_messages(T1), 0);
}

#[tokio::test]
async fn namespace_deletion_without_force_needs_it_unused() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    client.producer(T1, 1).await;
    client.subscribe(T1, "sub", SubType::Shared, 2).await;
    assert_eq!(
        broker.delete_namespace(NS, false).await,
        Err(MockAdminError::InUse {
            name: NS.into(),
            producers: 1,
            consumers: 1
        })
    );
    assert!(broker.topic_exists(T1) && !broker.is_namespace_being_deleted(NS));
    client.close_consumer(2).await;
    let request_id = client.request_id();
    client
        .request(wire::BaseCommand {
            r#type: Type::CloseProducer as i32,
            close_producer: Some(wire::CommandCloseProducer {
                producer_id: 1,
                request_id,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    broker.delete_namespace(NS, false).await.unwrap();
    assert!(!broker.topic_exists(T1));
    assert_eq!(
        broker.delete_namespace(NS, false).await,
        Err(MockAdminError::NamespaceNotFound(NS.into()))
    );
    assert_eq!(
        broker.delete_namespace("nope", true).await,
        Err(MockAdminError::InvalidName("nope".into()))
    );
    broker.create_namespace("a/b").unwrap();
    assert_eq!(
        broker.create_namespace("a/b"),
        Err(MockAdminError::NamespaceExists("a/b".into()))
    );
    assert_eq!(broker.namespaces(), vec!["a/b".to_owned()]);
}

#[tokio::test]
async fn terminated_namespace_refuses_new_topics_only() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    client.producer(T1, 1).await;
    assert_eq!(
        broker.terminate_namespace("tn/none"),
        Err(MockAdminError::NamespaceNotFound("tn/none".into()))
    );
    broker.terminate_namespace(NS).unwrap();
    assert!(broker.is_namespace_terminated(NS));

    let resp = try_producer(&mut client, T2, 2).await;
    let (code, message) = error_of(&resp);
    assert_eq!(code, ServerError::NotAllowed);
    assert!(message.contains("terminated"), "{message}");
    let resp = try_subscribe(&mut client, T2, 3).await;
    assert_eq!(error_of(&resp).0, ServerError::NotAllowed);
    assert!(!broker.create_topic(T2));
    assert!(!broker.topic_exists(T2));

    // The existing topic keeps working, for producers and consumers.
    client.publish(1, metadata("p", 0, None), b"m").await;
    client.subscribe(T1, "sub", SubType::Shared, 4).await;
    client.flow(4, 10).await;
    assert_eq!(client.message().await.entry(), 0);
    assert!(broker.create_topic(T1));

    // It can be deleted; the termination stays, so nothing re-creates it.
    broker.delete_namespace(NS, true).await.unwrap();
    assert_eq!(expect_close_producer(&mut client).await.producer_id, 1);
    assert_eq!(expect_close_consumer(&mut client).await.consumer_id, 4);
    assert!(!broker.topic_exists(T1));
    let resp = try_producer(&mut client, T1, 5).await;
    assert_eq!(error_of(&resp).0, ServerError::NotAllowed);
    assert!(broker.is_namespace_terminated(NS) && broker.namespaces().is_empty());
    // Until it is created again explicitly.
    broker.create_namespace(NS).unwrap();
    assert!(!broker.is_namespace_terminated(NS));
    try_producer(&mut client, T1, 6)
        .await
        .producer_success
        .expect("created");
}

#[tokio::test]
async fn unload_closes_with_reconnect_and_keeps_the_data() {
    let broker = MockBroker::start().await.unwrap();
    // The last sequence id is answered only with deduplication on (upstream).
    broker.set_deduplication("tn/ns", true).unwrap();
    let mut producer = Client::connect(&broker).await;
    producer_p(&mut producer, T1, 1).await;
    for seq in 0..2 {
        producer.publish(1, metadata("p", seq, None), b"m").await;
    }
    let mut consumer = Client::connect(&broker).await;
    consumer.subscribe(T1, "sub", SubType::Shared, 2).await;
    consumer.flow(2, 10).await;
    let first = consumer.messages(2).await;
    consumer
        .ack(2, vec![first[0].message.message_id.clone()], false)
        .await;
    eventually(|| broker.subscription_backlog(T1, "sub") == 1).await;

    broker.unload_topic(T1).unwrap();
    let close = expect_close_producer(&mut producer).await;
    assert_eq!(close.producer_id, 1);
    assert_eq!(close.allow_reconnect, None);
    assert_eq!(close.assigned_broker_service_url, None);
    let close = expect_close_consumer(&mut consumer).await;
    assert_eq!((close.consumer_id, close.allow_reconnect), (2, None));
    let stats = broker.stats();
    assert_eq!((stats.producers, stats.consumers), (0, 0));

    // They re-create: the producer finds its last sequence id, the consumer gets the
    // unacknowledged message again.
    let ok = producer_p(&mut producer, T1, 1).await;
    assert_eq!(ok.last_sequence_id, Some(1));
    consumer.subscribe(T1, "sub", SubType::Shared, 2).await;
    consumer.flow(2, 10).await;
    assert_eq!(consumer.message().await.entry(), 1);
    consumer.quiet().await;
    assert_eq!(broker.topic_messages(T1), 2);
    assert_eq!(
        broker.unload_topic("persistent://tn/ns/none"),
        Err(MockAdminError::TopicNotFound(
            "persistent://tn/ns/none".into()
        ))
    );
}

#[tokio::test]
async fn unload_to_another_broker_of_the_cluster_moves_the_topic() {
    let brokers = MockBroker::start_cluster(2).await.unwrap();
    let (a, b) = (&brokers[0], &brokers[1]);
    a.set_deduplication("tn/ns", true).unwrap();
    assert!(a.shares_state_with(b));
    let mut producer = Client::connect(a).await;
    producer_p(&mut producer, T1, 1).await;
    for seq in 0..2 {
        producer.publish(1, metadata("p", seq, None), b"m").await;
    }
    let mut consumer = Client::connect(a).await;
    consumer.subscribe(T1, "sub", SubType::Shared, 2).await;
    consumer.flow(2, 1).await;
    assert_eq!(consumer.message().await.entry(), 0);

    a.unload_topic_to(T1, &b.service_url()).unwrap();
    let close = expect_close_producer(&mut producer).await;
    assert_eq!(close.assigned_broker_service_url, Some(b.service_url()));
    assert_eq!(close.allow_reconnect, None);
    let close = expect_close_consumer(&mut consumer).await;
    assert_eq!(close.assigned_broker_service_url, Some(b.service_url()));
    assert_eq!(a.topic_owner(T1), Some(b.service_url()));

    // Lookups: a redirects (authoritative), b serves it.
    use wire::command_lookup_topic_response::LookupType;
    let found = lookup(&mut producer, T1).await;
    assert_eq!(found.response, Some(LookupType::Redirect as i32));
    assert_eq!(found.broker_service_url, Some(b.service_url()));
    assert_eq!(found.authoritative, Some(true));
    let resp = try_producer(&mut producer, T1, 3).await;
    assert_eq!(error_of(&resp).0, ServerError::ServiceNotReady);
    let mut on_b = Client::connect(b).await;
    let found = lookup(&mut on_b, T1).await;
    assert_eq!(found.response, Some(LookupType::Connect as i32));
    assert_eq!(found.broker_service_url, Some(b.service_url()));

    // On b the topic has its messages, sequence ids and subscription cursor.
    let ok = producer_p(&mut on_b, T1, 1).await;
    assert_eq!(ok.last_sequence_id, Some(1));
    let receipt = on_b.publish(1, metadata("p", 2, None), b"m").await;
    assert_eq!(receipt.message_id.unwrap().entry_id, 2);
    on_b.subscribe(T1, "sub", SubType::Shared, 2).await;
    on_b.flow(2, 10).await;
    let entries: Vec<u64> = on_b.messages(3).await.iter().map(|d| d.entry()).collect();
    assert_eq!(entries, [0, 1, 2]);
    assert_eq!((a.stats().producers, b.stats().producers), (0, 1));

    // A plain unload clears the assignment: a serves it again.
    b.unload_topic(T1).unwrap();
    assert_eq!(a.topic_owner(T1), None);
    let found = lookup(&mut producer, T1).await;
    assert_eq!(found.response, Some(LookupType::Connect as i32));
}

#[tokio::test]
async fn unload_to_an_independent_broker_redirects_but_moves_no_data() {
    let a = MockBroker::start().await.unwrap();
    let b = MockBroker::start().await.unwrap();
    assert!(!a.shares_state_with(&b));
    let mut client = Client::connect(&a).await;
    client.producer(T1, 1).await;
    client.publish(1, metadata("p", 0, None), b"m").await;
    a.unload_topic_to(T1, &b.service_url()).unwrap();
    let close = expect_close_producer(&mut client).await;
    assert_eq!(close.assigned_broker_service_url, Some(b.service_url()));
    let found = lookup(&mut client, T1).await;
    assert_eq!(found.broker_service_url, Some(b.service_url()));
    let mut on_b = Client::connect(&b).await;
    assert_eq!(on_b.producer(T1, 1).await.last_sequence_id, Some(-1));
    assert_eq!((a.topic_messages(T1), b.topic_messages(T1)), (1, 0));
}

#[tokio::test]
async fn terminated_topic_refuses_sends_and_signals_the_end() {
    let broker = MockBroker::start().await.unwrap();
    let mut producer = Client::connect(&broker).await;
    producer_p(&mut producer, T1, 1).await;
    for seq in 0..2 {
        producer.publish(1, metadata("p", seq, None), b"m").await;
    }
    let mut consumer = Client::connect(&broker).await;
    consumer.subscribe(T1, "sub", SubType::Exclusive, 2).await;
    consumer.flow(2, 10).await;
    let got = consumer.messages(2).await;
    consumer
        .ack(2, vec![got[0].message.message_id.clone()], false)
        .await;
    eventually(|| broker.subscription_backlog(T1, "sub") == 1).await;

    let last = broker.terminate_topic(T1).unwrap();
    assert_eq!(
        (last.entry_id, last.ledger_id),
        (1, got[1].message.message_id.ledger_id)
    );
    assert!(broker.is_topic_terminated(T1));
    consumer.quiet().await; // one message still unacknowledged

    // Upstream `PersistentTopic.terminate` disconnects the producers (reconnect allowed);
    // their re-creation, like any new producer, is refused.
    let close = expect_close_producer(&mut producer).await;
    assert_eq!((close.producer_id, close.allow_reconnect), (1, None));
    assert_eq!(broker.producers(T1), 0);
    // A SEND still in flight from the disconnected producer is ignored (upstream
    // `ServerCnx.closeProducer` keeps it in `recentlyClosedProducers`): no SEND_ERROR, and
    // the connection stays up (the PRODUCER below is answered on it).
    producer.send(1, metadata("p", 2, None), b"m").await;
    producer.quiet().await;
    let resp = try_producer(&mut producer, T1, 3).await;
    assert_eq!(error_of(&resp).0, ServerError::TopicTerminatedError);
    assert_eq!(broker.topic_messages(T1), 2);

    consumer
        .ack(2, vec![got[1].message.message_id.clone()], false)
        .await;
    let end = consumer.raw.expect(Type::ReachedEndOfTopic).await;
    assert_eq!(end.reached_end_of_topic.unwrap().consumer_id, 2);
    consumer.quiet().await; // once

    // A consumer arriving on a caught-up subscription learns it at once.
    let mut late = Client::connect(&broker).await;
    let mut cmd = subscribe_cmd(T1, "new", SubType::Shared, 9, 50);
    cmd.initial_position = Some(wire::command_subscribe::InitialPosition::Latest as i32);
    let resp = late.subscribe_with(cmd).await;
    assert_eq!(resp.r#type, Type::Success as i32);
    let end = late.raw.expect(Type::ReachedEndOfTopic).await;
    assert_eq!(end.reached_end_of_topic.unwrap().consumer_id, 9);

    assert!(matches!(
        broker.terminate_topic("non-persistent://tn/ns/np"),
        Err(MockAdminError::TopicNotFound(_))
    ));
    broker.create_topic("non-persistent://tn/ns/np");
    assert!(matches!(
        broker.terminate_topic("non-persistent://tn/ns/np"),
        Err(MockAdminError::NotSupported(_))
    ));
}

#[tokio::test]
async fn topic_deletion_forced_or_not() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = Client::connect(&broker).await;
    client.producer(T1, 1).await;
    client.publish(1, metadata("p", 0, None), b"m").await;
    client.subscribe(T1, "sub", SubType::Shared, 2).await;
    assert!(matches!(
        broker.delete_topic(T1, false),
        Err(MockAdminError::InUse {
            producers: 1,
            consumers: 1,
            ..
        })
    ));
    broker.delete_topic(T1, true).unwrap();
    let close = expect_close_producer(&mut client).await;
    assert_eq!(close.allow_reconnect, None); // as upstream: they may reconnect
    let close = expect_close_consumer(&mut client).await;
    assert_eq!(close.allow_reconnect, None);
    assert!(!broker.topic_exists(T1));
    // ... and re-create it at once: the race PIP-139's discussion is about.
    let ok = client.producer(T1, 1).await;
    assert_eq!(ok.last_sequence_id, Some(-1));
    assert!(broker.topic_exists(T1) && broker.subscriptions(T1).is_empty());

    broker.create_partitioned_topic("tn/ns/p", 2);
    broker.delete_topic("tn/ns/p", false).unwrap();
    assert!(!broker.topic_exists("tn/ns/p-partition-0"));
    assert_eq!(
        broker.delete_topic("tn/ns/p", false),
        Err(MockAdminError::TopicNotFound("persistent://tn/ns/p".into()))
    );
}

#[tokio::test]
async fn restart_keeps_the_data_and_the_port() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_deduplication("tn/ns", true).unwrap();
    let addr = broker.addr();
    let mut client = RawClient::new(TcpStream::connect(addr).await.unwrap());
    client.handshake().await;
    let mut setup = Client::connect(&broker).await;
    producer_p(&mut setup, T1, 1).await;
    for seq in 0..2 {
        setup.publish(1, metadata("p", seq, None), b"m").await;
    }
    setup.subscribe(T1, "sub", SubType::Shared, 2).await;
    setup.flow(2, 10).await;
    let got = setup.messages(2).await;
    setup
        .ack(2, vec![got[0].message.message_id.clone()], false)
        .await;
    eventually(|| broker.subscription_backlog(T1, "sub") == 1).await;

    let restarting = tokio::spawn({
        let broker = broker.clone();
        async move { broker.restart_after(Duration::from_millis(500)).await }
    });
    assert!(client.is_closed().await);
    assert!(setup.raw.is_closed().await);
    // Down: connections are refused.
    assert!(TcpStream::connect(addr).await.is_err());
    assert!(RawClient::new(broker.connect_duplex()).is_closed().await);
    restarting.await.unwrap().unwrap();

    assert_eq!(broker.addr(), addr);
    let stats = broker.stats();
    assert_eq!(
        (stats.connections, stats.producers, stats.consumers),
        (0, 0, 0)
    );
    let mut again = RawClient::new(TcpStream::connect(addr).await.unwrap());
    again.handshake().await;
    let mut client = Client::connect(&broker).await;
    assert_eq!(
        producer_p(&mut client, T1, 1).await.last_sequence_id,
        Some(1)
    );
    client.subscribe(T1, "sub", SubType::Shared, 2).await;
    client.flow(2, 10).await;
    assert_eq!(client.message().await.entry(), 1); // the unacknowledged one
    client.quiet().await;
    assert_eq!(broker.topic_messages(T1), 2);
    assert_eq!(broker.stats().connections, 2);
}
