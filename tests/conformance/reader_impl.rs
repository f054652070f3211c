//! Upstream `ReaderImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::{self, base_command::Type, command_subscribe::SubType};
use pulsar_sdk::mock::MockBroker;

fn subscribes(broker: &MockBroker) -> Vec<wire::CommandSubscribe> {
    broker
        .received_of(Type::Subscribe)
        .into_iter()
        .map(|r| r.command.subscribe.unwrap())
        .collect()
}

/// `ReaderImpl.<init>`: a reader is an Exclusive, NonDurable subscription named
/// `reader-<random>` (unless a name is given), subscribing from its start id with a receiver
/// queue of 1000 (`ReaderConfigurationData.receiverQueueSize`).
#[tokio::test]
async fn a_reader_is_an_exclusive_non_durable_subscription_with_a_generated_name() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("reader-sub");
    let _r1 = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let _r2 = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let _named = client
        .reader(&topic)
        .subscription_name("my-reader")
        .start_latest()
        .create()
        .await
        .unwrap();
    let sent = subscribes(&broker);
    assert_eq!(sent.len(), 3);
    for s in &sent {
        assert_eq!(s.sub_type, SubType::Exclusive as i32);
        assert_eq!(s.durable, Some(false));
        assert!(s.start_message_id.is_some(), "{s:?}");
    }
    assert!(
        sent[0].subscription.starts_with("reader-"),
        "{}",
        sent[0].subscription
    );
    assert!(sent[1].subscription.starts_with("reader-"));
    assert_ne!(sent[0].subscription, sent[1].subscription);
    assert_eq!(sent[2].subscription, "my-reader");
    let flows = within(
        "three FLOWs",
        broker.wait_for_commands(Type::Flow, 3, std::time::Duration::from_secs(10)),
    )
    .await
    .unwrap();
    assert!(flows
        .iter()
        .all(|f| f.command.flow.as_ref().unwrap().message_permits == 1000));
    // Non-durable: nothing outlives the readers.
    drop((_r1, _r2, _named));
    wait_until("the subscriptions are gone", || {
        broker.subscriptions(&topic).is_empty()
    })
    .await;
}

/// `ConsumerImpl.hasMessageAvailableAsync` (what `ReaderImpl.hasMessageAvailable` calls): with a
/// message already in the receiver queue the answer is true at once, without asking the broker
/// for the last message id.
#[tokio::test]
async fn has_message_available_with_a_queued_message_asks_the_broker_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("hma-queued");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "q", 2).await;
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    wait_until("both queued", || {
        reader.stats().totals.receiver_queue_len == 2
    })
    .await;
    assert!(
        within("has_message_available", reader.has_message_available())
            .await
            .unwrap()
    );
    assert!(broker.received_of(Type::GetLastMessageId).is_empty());
    // The message looked at is the next one read.
    let m = within("recv", reader.recv()).await.unwrap();
    assert_eq!(m.payload_str(), Some("q-0"));
}
