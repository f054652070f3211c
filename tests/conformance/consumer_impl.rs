//! Upstream `ConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{DeadLetterPolicy, InitialPosition, SubscriptionType};

use crate::common::{client, full, publish, publish_batch, unbatched_producer, within};

/// Java `ConsumerImpl.processPossibleToDLQ` sets ORIGIN_MESSAGE_ID to the message id's
/// `toString()`: `MessageIdImpl` prints `ledger:entry:partition` (no batch part),
/// `BatchMessageIdImpl` `ledger:entry:partition:batchIndex`. Go prints the same.
#[tokio::test]
async fn dead_letter_origin_message_id_is_printed_as_java_prints_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-dlq-origin");
    let producer = unbatched_producer(&client, &topic).await;
    let single = publish(&producer, "single", 1).await[0];
    let batched = publish_batch(&client, &topic, 2).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    // Each message: delivered, nacked, redelivered at the maximum, nacked: dead-lettered.
    let mut nacked = 0;
    while nacked < 6 {
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.nack(&m).unwrap();
        nacked += 1;
    }
    let mut reader = client.reader(&dlq).start_earliest().create().await.unwrap();
    let mut origins = Vec::new();
    for _ in 0..3 {
        let letter = within("a dead letter", reader.recv()).await.unwrap();
        let origin = letter.properties.get("ORIGIN_MESSAGE_ID").cloned();
        origins.push((letter.payload_str().unwrap().to_string(), origin));
    }
    origins.sort();
    let want = |s: &str| Some(s.to_string());
    assert_eq!(
        origins,
        vec![
            (
                "b-0".to_string(),
                want(&format!("{}:{}:-1:0", batched[0].ledger_id, batched[0].entry_id)),
            ),
            (
                "b-1".to_string(),
                want(&format!("{}:{}:-1:1", batched[1].ledger_id, batched[1].entry_id)),
            ),
            (
                "single-0".to_string(),
                want(&format!("{}:{}:-1", single.ledger_id, single.entry_id)),
            ),
        ]
    );
}
