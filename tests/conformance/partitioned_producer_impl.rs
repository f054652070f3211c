//! Upstream `PartitionedProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, wait_until};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
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
