//! PIP-139 and the producer/consumer lifecycle against the mock broker: reconnect, or close for
//! good.

use support as common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockCluster, MockError, MockRequest, TopicMove};
use pulsar_sdk::{
    BackoffPolicy, Client, Error, InitialPosition, ProducerMessage, ServerError, State,
    SubscriptionType,
};

fn client_for(url: &str) -> Client {
    common::test_client(url)
        .operation_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

use common::wait_until;

#[tokio::test]
async fn namespace_deletion_closes_everything_for_good_and_nothing_comes_back() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    let ns = "acme/doomed";
    let topics: Vec<String> = (0..3).map(|i| format!("persistent://{ns}/t{i}")).collect();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for t in &topics {
        producers.push(client.producer(t).batching(false).create().await.unwrap());
        consumers.push(
            client
                .consumer(t)
                .subscription("s")
                .subscription_type(SubscriptionType::Shared)
                .subscribe()
                .await
                .unwrap(),
        );
    }
    // Some pending sends when the close arrives.
    broker.set_unresponsive(true);
    let mut pending = Vec::new();
    for p in &producers {
        pending.push(p.send("in flight").await.unwrap());
    }
    // Their receipts are dropped while the broker does not answer.
    broker
        .wait_for_commands(Type::Send, 3, Duration::from_secs(10))
        .await
        .expect("the sends reached the broker");
    broker.set_unresponsive(false);

    // A concurrent loop keeps trying to create producers/consumers in the namespace.
    let stop = Arc::new(AtomicBool::new(false));
    let creator = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut outcomes = BTreeMap::<String, usize>::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let topic = format!("persistent://acme/doomed/new-{i}");
                i += 1;
                let r = client.producer(&topic).create().await;
                let key = match r {
                    Ok(_) => "created".to_string(),
                    Err(Error::Broker { code, .. }) => format!("{code:?}"),
                    Err(e) => format!("other: {e}"),
                };
                *outcomes.entry(key).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            outcomes
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    broker.terminate_namespace(ns).unwrap();
    broker.delete_namespace(ns, true).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes = creator.await.unwrap();
    assert!(
        outcomes.keys().all(|k| k == "created" || k == "NotAllowed"),
        "creates either succeeded before the deletion or were refused with NotAllowed: {outcomes:?}"
    );
    assert!(
        outcomes.get("NotAllowed").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );

    // Every application call gets the distinct error.
    for f in pending {
        let r = f.await;
        assert!(matches!(r, Err(Error::ClosedByBroker { .. })), "{r:?}");
    }
    for p in &producers {
        assert_eq!(p.state(), State::ClosedByBroker);
        assert!(matches!(
            p.send("later").await,
            Err(Error::ClosedByBroker { .. })
        ));
    }
    for c in &mut consumers {
        assert!(matches!(c.recv().await, Err(Error::ClosedByBroker { .. })));
        assert_eq!(c.state(), State::ClosedByBroker);
        // Then the stream ends.
        assert!(futures::StreamExt::next(c).await.is_none());
    }

    // Nobody reconnects or re-creates a topic afterwards.
    let before = broker.received().len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after: Vec<_> = broker.received().into_iter().skip(before).collect();
    assert!(
        after
            .iter()
            .all(|r| !r.is(Type::Producer) && !r.is(Type::Subscribe) && !r.is(Type::Lookup)),
        "no re-create attempts: {:?}",
        after.iter().map(|r| r.command_type()).collect::<Vec<_>>()
    );
    assert!(broker.topics_in_namespace(ns).is_empty());
    // Creating a topic in the terminated namespace stays refused.
    match client.producer(&topics[0]).create().await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::NotAllowed),
        other => panic!("expected NotAllowed, got {other:?}"),
    }
    // No ids or requests left on the client's connections (unregistering is asynchronous).
    wait_until("no entity is left registered", || {
        client
            .connection_stats()
            .iter()
            .all(|s| s.registered_entities == 0 && s.pending_requests == 0)
    })
    .await;
    assert_eq!(broker.stats().producers, 0);
    assert_eq!(broker.stats().consumers, 0);
}

#[tokio::test]
async fn unloads_and_a_restart_lose_nothing_and_keep_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    let topic = "persistent://public/default/unloads";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    const N: usize = 10_000;
    let faults = {
        let broker = broker.clone();
        let producer = producer.clone();
        tokio::spawn(async move {
            for i in 0..4 {
                tokio::time::sleep(Duration::from_millis(60)).await;
                // Each fault hits an attached producer: the one before it has been answered
                // by a re-create (faults 60 ms apart could otherwise land while the producer
                // is still reconnecting, and two faults would make one re-create).
                wait_until(
                    "the producer is attached again before the next fault",
                    || {
                        broker.received_of(Type::Producer).len() > i
                            && producer.state() == State::Ready
                    },
                )
                .await;
                if i == 2 {
                    broker.restart().await.unwrap();
                } else {
                    broker.unload_topic(topic).unwrap();
                }
            }
        })
    };
    let receiver = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut distinct = BTreeSet::new();
        while distinct.len() < N {
            let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
                .await
                .expect("messages keep arriving")
                .unwrap();
            consumer.ack(&m).unwrap();
            let i: usize = m.payload_str().unwrap().parse().unwrap();
            if distinct.insert(i) {
                seen.push(i);
            }
        }
        seen
    });
    let mut sends = Vec::new();
    for i in 0..N {
        sends.push(
            producer
                .send(ProducerMessage::new(i.to_string()))
                .await
                .unwrap(),
        );
        if i % 500 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Every send resolves Ok exactly once (a future resolves once by construction).
    let ids = futures::future::try_join_all(sends).await.unwrap();
    assert_eq!(ids.len(), N);
    faults.await.unwrap();
    let seen = receiver.await.unwrap();
    assert_eq!(seen.len(), N, "every message arrived");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "first deliveries are in send order"
    );
    // The producer went through reconnects and becomes ready again (the last
    // unload can land after the final receipt, so wait for it to re-attach).
    wait_until(
        "the producer is re-created after the last fault and ready",
        || broker.received_of(Type::Producer).len() >= 5 && producer.state() == State::Ready,
    )
    .await;
    assert!(
        broker.received_of(Type::Producer).len() >= 5,
        "created once, then re-created after each of the 4 faults"
    );
}

#[tokio::test]
async fn pip_307_reconnects_straight_to_the_assigned_broker() {
    let cluster = MockCluster::start(2).await.unwrap();
    let (a, b) = (&cluster.brokers()[0], &cluster.brokers()[1]);
    let client = client_for(&a.service_url());
    let topic = "persistent://public/default/moving";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    let lookups_before = a.received_of(Type::Lookup).len() + b.received_of(Type::Lookup).len();
    cluster
        .move_topic(topic, 1, TopicMove::AssignedUrl)
        .unwrap();
    wait_until("the producer is re-created on b", || {
        !b.received_of(Type::Producer).is_empty()
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    let lookups_after = a.received_of(Type::Lookup).len() + b.received_of(Type::Lookup).len();
    assert_eq!(
        lookups_after, lookups_before,
        "no lookup: straight to the assigned broker"
    );
    assert_eq!(
        b.received_of(Type::Send).len(),
        1,
        "the next message went to b"
    );
    assert_eq!(producer.state(), State::Ready);
}

#[tokio::test]
async fn non_retriable_create_errors_fail_fast() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .operation_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // NotAllowed: a terminated namespace refuses new topics.
    broker.create_namespace("acme/closed").unwrap();
    broker.terminate_namespace("acme/closed").unwrap();
    let started = std::time::Instant::now();
    match client.producer("persistent://acme/closed/t").create().await {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, ServerError::NotAllowed);
            assert!(!message.is_empty());
        }
        other => panic!("expected NotAllowed, got {other:?}"),
    }
    match client
        .consumer("persistent://acme/closed/t")
        .subscription("s")
        .subscribe()
        .await
    {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::NotAllowed),
        other => panic!("expected NotAllowed, got {other:?}"),
    }
    // TopicTerminated.
    let t = "persistent://public/default/terminated";
    broker.create_topic(t);
    broker.terminate_topic(t).unwrap();
    // A create refused because the topic is terminated says so with the same error a live
    // producer gets when its topic is terminated.
    assert!(matches!(
        client.producer(t).create().await,
        Err(Error::TopicTerminated { .. })
    ));
    // ProducerFenced (a second Exclusive producer: upstream
    // AbstractTopic.incrementTopicEpochIfNeeded) and ConsumerBusy.
    let x = "persistent://public/default/exclusive";
    let _first = client
        .producer(x)
        .access_mode(pulsar_sdk::producer::ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    assert!(matches!(
        client
            .producer(x)
            .access_mode(pulsar_sdk::producer::ProducerAccessMode::Exclusive)
            .create()
            .await,
        Err(Error::ProducerFenced { .. })
    ));
    let _c = client
        .consumer(x)
        .subscription("only")
        .subscribe()
        .await
        .unwrap();
    assert!(matches!(
        client.consumer(x).subscription("only").subscribe().await,
        Err(Error::Broker {
            code: ServerError::ConsumerBusy,
            ..
        })
    ));
    // Each was tried once, not retried until the 30 s operation timeout.
    assert_eq!(
        broker
            .received_of(Type::Producer)
            .iter()
            .filter(|r| {
                r.command
                    .producer
                    .as_ref()
                    .unwrap()
                    .topic
                    .ends_with("acme/closed/t")
            })
            .count(),
        1
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn retriable_create_errors_are_retried_until_they_clear() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    broker.push_error(
        MockError::new(
            MockRequest::Lookup,
            ServerError::ServiceNotReady,
            "bundle loading",
        )
        .times(3),
    );
    let producer = client
        .producer("retry-me")
        .create()
        .await
        .expect("create succeeds once the errors are used up");
    assert_eq!(producer.state(), State::Ready);
    assert_eq!(broker.consumed_errors().len(), 3, "the lookup was retried");
}

#[tokio::test]
async fn retriable_errors_give_up_at_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .operation_timeout(Duration::from_millis(600))
        .backoff(BackoffPolicy {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(100),
            ..Default::default()
        })
        .build()
        .unwrap();
    broker.set_lookup_error(None, ServerError::ServiceNotReady, "still loading");
    match client.producer("never").create().await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::ServiceNotReady),
        other => panic!("expected the last ServiceNotReady, got {other:?}"),
    }
    assert!(
        broker.received_of(Type::Lookup).len() >= 2,
        "it was retried"
    );
}

#[tokio::test]
async fn a_partitioned_producer_closes_as_a_whole() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    let topic = "persistent://acme/parts/t";
    broker.create_partitioned_topic(topic, 3);
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    assert_eq!(producer.partitions(), 3);
    // Close only partition 0 for good (as a namespace deletion would, one topic at a time).
    let conns = broker.connections();
    let p0 = format!("{topic}-partition-0");
    let producer_id = broker
        .received_of(Type::Producer)
        .into_iter()
        .find(|r| r.command.producer.as_ref().unwrap().topic == p0)
        .unwrap()
        .command
        .producer
        .unwrap()
        .producer_id;
    let close = pulsar_sdk::mock::wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(pulsar_sdk::mock::wire::CommandCloseProducer {
            producer_id,
            request_id: 999,
            allow_reconnect: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(broker.push(conns[0], close));
    let mut changes = producer.states();
    tokio::time::timeout(
        Duration::from_secs(5),
        changes.wait_for(|s| *s == State::ClosedByBroker),
    )
    .await
    .unwrap()
    .unwrap();
    // Every partition refuses sends with the same error: the producer closed as a whole.
    for i in 0..6 {
        let r = producer
            .send(ProducerMessage::new("x").key(format!("k{i}")))
            .await;
        assert!(matches!(r, Err(Error::ClosedByBroker { .. })), "{r:?}");
    }
    // The consumer was not affected.
    assert_eq!(consumer.state(), State::Ready);
    let _ = &mut consumer;
}

#[tokio::test]
async fn topic_termination_ends_producers_and_caught_up_consumers_for_good() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    let topic = "persistent://public/default/ending";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    for i in 0..3 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    for _ in 0..3 {
        let m = tokio::time::timeout(Duration::from_secs(5), consumer.recv())
            .await
            .unwrap()
            .unwrap();
        consumer.ack(&m).unwrap();
    }
    broker.terminate_topic(topic).unwrap();
    // The producer's next send fails with the distinct error and the producer is done.
    let r = producer.send_and_wait("too late").await;
    assert!(matches!(r, Err(Error::TopicTerminated { .. })), "{r:?}");
    assert_eq!(producer.state(), State::Terminated);
    assert!(matches!(
        producer.send("later").await,
        Err(Error::TopicTerminated { .. })
    ));
    // The consumer, having received and acked everything, reaches the end of the topic.
    let r = tokio::time::timeout(Duration::from_secs(5), consumer.recv())
        .await
        .unwrap();
    assert!(matches!(r, Err(Error::TopicTerminated { .. })), "{r:?}");
    // A consumer at the end stays a consumer, attached until closed (Java
    // ConsumerImpl.setTerminated only sets a flag); it is not a terminal state.
    assert!(consumer.has_reached_end_of_topic());
    assert_eq!(consumer.state(), State::Ready);
}

#[tokio::test]
async fn topic_migration_moves_the_producer_to_the_new_cluster() {
    let cluster = MockBroker::start_cluster(2).await.unwrap();
    let (a, b) = (&cluster[0], &cluster[1]);
    let client = client_for(&a.service_url());
    let topic = "persistent://public/default/migrating";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    let create = a.received_of(Type::Producer).pop().unwrap();
    let producer_id = create.command.producer.unwrap().producer_id;
    let migrated = pulsar_sdk::mock::wire::BaseCommand {
        r#type: Type::TopicMigrated as i32,
        topic_migrated: Some(pulsar_sdk::mock::wire::CommandTopicMigrated {
            resource_id: producer_id,
            resource_type: pulsar_sdk::mock::wire::command_topic_migrated::ResourceType::Producer
                as i32,
            broker_service_url: Some(b.service_url()),
            broker_service_url_tls: None,
        }),
        ..Default::default()
    };
    // The old cluster stops serving the topic (as after a migration).
    a.redirect_topic_lookups_to(topic, &b.service_url(), true);
    assert!(a.push(create.connection, migrated));
    wait_until("the producer is re-created on the new cluster", || {
        !b.received_of(Type::Producer).is_empty()
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    assert_eq!(b.received_of(Type::Send).len(), 1);
    assert_eq!(producer.state(), State::Ready);
}

#[tokio::test]
async fn closing_the_client_ends_its_producers_and_consumers_without_reconnecting() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_for(&broker.service_url());
    let producer = client.producer("closing").create().await.unwrap();
    let mut consumer = client
        .consumer("closing")
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    client.close().await.unwrap();
    // What was already delivered may still be read; then the consumer ends with an error.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Err(e) = consumer.recv().await {
                break e;
            }
        }
    })
    .await
    .expect("the consumer ends");
    assert!(!ended.is_retriable(), "{ended:?}");
    let mut states = producer.states();
    tokio::time::timeout(Duration::from_secs(5), states.wait_for(|s| s.is_terminal()))
        .await
        .expect("the producer ends")
        .unwrap();
    assert!(producer.send_and_wait("after").await.is_err());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(broker.accepted_connections(), 1, "nothing reconnected");
}
