//! Upstream `PartitionedProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, test_client, wait_until, within};
use futures::future::join_all;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, Error, ProducerMessage, ServerError};
use std::collections::BTreeSet;
use std::time::Duration;

/// The (producer name, user-provided flag) of every PRODUCER the broker received, in order.
fn producer_commands(broker: &MockBroker) -> Vec<(Option<String>, Option<bool>)> {
    broker
        .received_of(Type::Producer)
        .iter()
        .filter_map(|r| r.command.producer.as_ref())
        .map(|p| (p.producer_name.clone(), p.user_provided_producer_name))
        .collect()
}

/// Java `PartitionedProducerImpl.start`: the first partition's producer is created first;
/// when the application set no name, the other partitions are created with the name the
/// broker gave it (`overrideProducerName`, not marked user-provided), so deduplication and
/// stats see one producer. Partitions added later take it too.
#[tokio::test]
async fn the_partitions_share_the_first_partitions_name() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("shared-name");
    assert!(broker.create_partitioned_topic(&topic, 3));
    let client = client(&broker.service_url());
    let producer = client.producer(&topic).create().await.unwrap();

    let commands = producer_commands(&broker);
    assert_eq!(commands.len(), 3);
    assert_eq!(commands[0], (None, Some(false)));
    let name = producer.name().to_string();
    assert!(!name.is_empty());
    for c in &commands[1..] {
        assert_eq!(c, &(Some(name.clone()), Some(false)));
    }

    // Every partition's messages carry that name.
    for i in 0..6 {
        producer
            .send_and_wait(pulsar_sdk::ProducerMessage::new(format!("m{i}")).key(format!("k{i}")))
            .await
            .unwrap();
    }
    let names: std::collections::BTreeSet<String> = broker
        .received_of(Type::Send)
        .iter()
        .filter_map(|r| r.payload.as_ref().map(|(m, _)| m.producer_name.clone()))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names.contains(&name), "{names:?}");

    // A partition added later takes it too (Java `onTopicsExtended` → `createProducer` with
    // `overrideProducerName`).
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .expect("the producer watches its partitions");
    broker.update_partitions(&topic, 4).unwrap();
    wait_until("the producer grows", || producer.partitions() == 4).await;
    let commands = producer_commands(&broker);
    assert_eq!(commands.len(), 4);
    assert_eq!(commands[3], (Some(name), Some(false)));
}

/// With a name set by the application, every partition uses it (user-provided).
#[tokio::test]
async fn a_given_name_is_used_on_every_partition() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("given-name");
    assert!(broker.create_partitioned_topic(&topic, 2));
    let client = client(&broker.service_url());
    let producer = client.producer(&topic).name("mine").create().await.unwrap();
    assert_eq!(producer.name(), "mine");
    assert_eq!(
        producer_commands(&broker),
        [
            (Some("mine".into()), Some(true)),
            (Some("mine".into()), Some(true))
        ]
    );
}

fn client_of(broker: &MockBroker) -> Client {
    test_client(&broker.service_url()).build().unwrap()
}

/// Java `PartitionedProducerImpl.start`: one producer per partition, each on its partition's
/// topic (`<topic>-partition-<i>`).
#[tokio::test]
async fn one_producer_is_created_per_partition_on_its_partition_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-start";
    broker.create_partitioned_topic(topic, 4);
    let producer = client.producer(topic).create().await.unwrap();
    assert_eq!(producer.partitions(), 4);
    let created: BTreeSet<String> = broker
        .received_of(Type::Producer)
        .iter()
        .map(|r| r.command.producer.as_ref().unwrap().topic.clone())
        .collect();
    let expected: BTreeSet<String> = (0..4).map(|i| format!("{topic}-partition-{i}")).collect();
    assert_eq!(created, expected);
}

/// Java `PartitionedProducerImpl.start`: when one partition's producer cannot be created the
/// whole create fails with that error, and the producers already created are closed.
#[tokio::test]
async fn one_refused_partition_fails_the_create_and_closes_the_others() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-refused";
    broker.create_partitioned_topic(topic, 3);
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::AuthorizationError,
            "not you",
        )
        .on_topic(&format!("{topic}-partition-1")),
    );
    match client.producer(topic).create().await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::AuthorizationError),
        Err(other) => panic!("expected the refusal, got {other:?}"),
        Ok(_) => panic!("created with a refused partition"),
    }
    let created: Vec<u64> = broker
        .received_of(Type::Producer)
        .iter()
        .filter(|r| {
            !r.command
                .producer
                .as_ref()
                .unwrap()
                .topic
                .ends_with("-partition-1")
        })
        .map(|r| r.command.producer.as_ref().unwrap().producer_id)
        .collect();
    assert_eq!(created.len(), 2);
    let closed = broker
        .wait_for_commands(Type::CloseProducer, 2, Duration::from_secs(5))
        .await
        .expect("the created partitions are closed");
    let closed: BTreeSet<u64> = closed
        .iter()
        .map(|r| r.command.close_producer.as_ref().unwrap().producer_id)
        .collect();
    assert_eq!(closed, created.into_iter().collect::<BTreeSet<_>>());
}

/// Java `PulsarClientImpl.createProducerAsync`: a partition's own name has no partitions of
/// its own (metadata 0), so it gets one plain producer on exactly that topic. Like Java's
/// (created with partition index -1), its receipts name no partition.
#[tokio::test]
async fn a_partitions_own_name_gets_one_plain_producer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-own";
    broker.create_partitioned_topic(topic, 3);
    let one = format!("{topic}-partition-2");
    let producer = client.producer(&one).create().await.unwrap();
    assert_eq!(producer.partitions(), 0, "not partitioned");
    let id = producer.send_and_wait("m").await.unwrap();
    assert_eq!(
        id.partition, -1,
        "a plain producer's receipt names no partition"
    );
    let creates = broker.received_of(Type::Producer);
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].command.producer.as_ref().unwrap().topic, one);
}

/// Java `RoundRobinPartitionMessageRouterImpl.choosePartition` with batching: messages
/// without a key stay on one partition for the batching delay (`partitionSwitchMs`), so
/// batches fill.
#[tokio::test]
async fn unkeyed_batched_messages_stay_on_one_partition_within_the_batching_delay() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-sticky";
    broker.create_partitioned_topic(topic, 3);
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 3,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_secs(3600),
            key_based: false,
        })
        .create()
        .await
        .unwrap();
    let receipts = join_all((0..6).map(|i| producer.send(format!("m{i}")))).await;
    let mut partitions = BTreeSet::new();
    for r in receipts {
        partitions.insert(within("batched send", r.unwrap()).await.unwrap().partition);
    }
    assert_eq!(partitions.len(), 1, "spread over {partitions:?}");
    assert_eq!(broker.received_of(Type::Send).len(), 2, "two full batches");
}

/// Java `PartitionedProducerImpl.flushAsync`: flush covers every partition: messages held in
/// open batches of several partitions are all sent and receipted when it returns.
#[tokio::test]
async fn flush_covers_the_open_batches_of_every_partition() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-flush";
    broker.create_partitioned_topic(topic, 3);
    let producer = client
        .producer(topic)
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_bytes: 128 * 1024,
            max_publish_delay: Duration::from_secs(3600),
            key_based: false,
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..12 {
        let msg = ProducerMessage::new(format!("m{i}")).key(format!("key-{i}"));
        receipts.push(producer.send(msg).await.unwrap());
    }
    assert!(broker.received_of(Type::Send).is_empty(), "held in batches");
    within("flush", producer.flush()).await.unwrap();
    let mut partitions = BTreeSet::new();
    for r in receipts {
        // Already settled: flush returned after every receipt.
        let id = tokio::time::timeout(Duration::from_millis(1), r)
            .await
            .expect("receipted before flush returned")
            .unwrap();
        partitions.insert(id.partition);
    }
    assert!(partitions.len() > 1, "the keys used several partitions");
}

/// Java `PartitionedProducerImpl.closeAsync`: close closes every partition's producer.
#[tokio::test]
async fn close_closes_every_partitions_producer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = "persistent://public/default/pp-close";
    broker.create_partitioned_topic(topic, 3);
    let producer = client.producer(topic).create().await.unwrap();
    producer.close().await.unwrap();
    let created: BTreeSet<u64> = broker
        .received_of(Type::Producer)
        .iter()
        .map(|r| r.command.producer.as_ref().unwrap().producer_id)
        .collect();
    let closed: BTreeSet<u64> = broker
        .received_of(Type::CloseProducer)
        .iter()
        .map(|r| r.command.close_producer.as_ref().unwrap().producer_id)
        .collect();
    assert_eq!(closed, created);
    assert!(matches!(producer.send("late").await, Err(Error::Closed)));
}

// ---- r-h2 (breaker) ----

/// A quota refusal on one partition's re-create fails that partition's pending messages only
/// (each partition is its own Java `ProducerImpl`); the other partitions go on, and the
/// refused one comes back.
#[tokio::test(start_paused = true)]
async fn a_quota_refusal_on_one_partition_fails_only_its_messages() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    use pulsar_sdk::{Error, ProducerMessage, ServerError, State};
    let broker = MockBroker::start().await.unwrap();
    let topic = full("r-h2-quota-partition");
    assert!(broker.create_partitioned_topic(&topic, 2));
    let client = crate::common::test_client(&broker.service_url())
        .build()
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    // Which keys go where.
    let mut keys: [Option<String>; 2] = [None, None];
    for i in 0..64 {
        let key = format!("k{i}");
        let id = producer
            .send_and_wait(ProducerMessage::new("probe").key(key.clone()))
            .await
            .unwrap();
        keys[id.partition as usize].get_or_insert(key);
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(k0), Some(k1)] = keys else {
        panic!("no key for each partition")
    };
    broker.push_error(MockError::new(
        MockRequest::Producer,
        ServerError::ProducerBlockedQuotaExceededException,
        "backlog quota exceeded",
    ));
    broker
        .unload_topic(&format!("{topic}-partition-0"))
        .unwrap();
    let refused = producer
        .send(ProducerMessage::new("to p0").key(k0.clone()))
        .await
        .unwrap();
    assert!(matches!(
        crate::common::within("p0's message", refused).await,
        Err(Error::Broker {
            code: ServerError::ProducerBlockedQuotaExceededException,
            ..
        })
    ));
    let id = producer
        .send_and_wait(ProducerMessage::new("to p1").key(k1))
        .await
        .unwrap();
    assert_eq!(id.partition, 1);
    crate::common::within("back", async {
        while producer.state() != State::Ready {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let id = producer
        .send_and_wait(ProducerMessage::new("to p0 again").key(k0))
        .await
        .unwrap();
    assert_eq!(id.partition, 0);
}

/// Upstream `PersistentTopic.terminate` works on one partition: that partition's producer
/// ends Terminated; the partitioned producer's other partitions go on (Java
/// `PartitionedProducerImpl` routes to each `ProducerImpl`, and only the terminated one
/// fails its sends with `TopicTerminatedException`).
#[tokio::test]
async fn terminating_one_partition_leaves_the_others_working() {
    use pulsar_sdk::{Error, ProducerMessage};
    let broker = MockBroker::start().await.unwrap();
    let topic = full("r-h2-terminate-partition");
    assert!(broker.create_partitioned_topic(&topic, 2));
    let client = client(&broker.service_url());
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut keys: [Option<String>; 2] = [None, None];
    for i in 0..64 {
        let key = format!("k{i}");
        let id = producer
            .send_and_wait(ProducerMessage::new("probe").key(key.clone()))
            .await
            .unwrap();
        keys[id.partition as usize].get_or_insert(key);
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(k0), Some(k1)] = keys else {
        panic!("no key for each partition")
    };
    broker
        .terminate_topic(&format!("{topic}-partition-0"))
        .unwrap();
    wait_until("partition 0 re-create refused", || {
        broker.received_of(Type::Producer).len() >= 3
    })
    .await;
    let r = match producer.send(ProducerMessage::new("to p0").key(k0)).await {
        Ok(f) => crate::common::within("p0", f).await,
        Err(e) => Err(e),
    };
    assert!(matches!(r, Err(Error::TopicTerminated { .. })), "{r:?}");
    let id = producer
        .send_and_wait(ProducerMessage::new("to p1").key(k1))
        .await
        .unwrap();
    assert_eq!(id.partition, 1);
}

/// A name the broker refuses on one partition (another producer of that name is attached
/// there: upstream `AbstractTopic.tryOverwriteOldProducer` → NamingException, ProducerBusy)
/// fails the partitioned producer's creation, and the partitions already created are closed
/// (Java `PartitionedProducerImpl.start`: `closeAsync` on a failed partition).
#[tokio::test]
async fn a_name_refused_on_one_partition_fails_the_create_and_closes_the_others() {
    use pulsar_sdk::{Error, ServerError};
    let broker = MockBroker::start().await.unwrap();
    let topic = full("r-h2-name-refused");
    assert!(broker.create_partitioned_topic(&topic, 2));
    let client = client(&broker.service_url());
    let p1 = format!("{topic}-partition-1");
    let _squatter = client.producer(&p1).name("mine").create().await.unwrap();
    let r = client.producer(&topic).name("mine").create().await;
    assert!(
        matches!(
            r,
            Err(Error::Broker {
                code: ServerError::ProducerBusy,
                ..
            })
        ),
        "{:?}",
        r.err()
    );
    wait_until("partition 0's producer is closed", || {
        broker.producers(&format!("{topic}-partition-0")) == 0
    })
    .await;
    assert_eq!(broker.producers(&p1), 1);
}
