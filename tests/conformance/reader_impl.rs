//! Upstream `ReaderImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;

/// Java `ReaderImpl.readNext` acks every message it returns cumulatively (grouped), so the
/// broker's cursor follows the reader and, on a terminated topic, the broker tells it
/// REACHED_END_OF_TOPIC once it has read everything: `hasReachedEndOfTopic` becomes true.
#[tokio::test]
async fn a_reader_acks_what_it_reads_and_so_learns_the_end_of_its_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end");
    let producer = unbatched_producer(&client, &topic).await;
    let ids = publish(&producer, "m", 3).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        let m = within("read", reader.recv()).await.unwrap();
        assert_eq!(m.payload_str(), Some(format!("m-{i}").as_str()));
    }
    // The last message read was acked cumulatively.
    wait_until("the cumulative ack of the last message", || {
        broker.received_of(Type::Ack).iter().any(|r| {
            let ack = r.command.ack.as_ref().unwrap();
            ack.ack_type == 1 // Cumulative
                && ack
                    .message_id
                    .iter()
                    .any(|id| id.ledger_id == ids[2].ledger_id && id.entry_id == ids[2].entry_id)
        })
    })
    .await;
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    // Java `hasMessageAvailable` at the end: false (not an error).
    let available = within("available", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
    within("close", reader.close()).await.unwrap();
}
