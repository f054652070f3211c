//! Upstream `ReaderImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};

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

/// Java `ReaderImpl.seek` → `ConsumerImpl.seekAsync`: after a seek the reader reads from the
/// new position (`hasMessageAvailable` asks the broker again, `readNext` returns the
/// message there). Having met the end of the terminated topic before the seek must not make
/// the reader answer "nothing available" and the end again, with messages before it.
#[tokio::test]
async fn a_reader_that_met_the_end_reads_again_after_seeking_back() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-seek");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..2 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let available = within("available at the end", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    within("seek", reader.seek(pulsar_sdk::MessageId::EARLIEST))
        .await
        .unwrap();
    let available = within("available after the seek", reader.has_message_available()).await;
    assert!(matches!(available, Ok(true)), "{available:?}");
    let m = within("read after the seek", reader.recv()).await;
    assert_eq!(
        m.as_ref().ok().and_then(|m| m.payload_str()),
        Some("m-0"),
        "{m:?}"
    );
    within("close", reader.close()).await.unwrap();
}

/// Java `ReaderImpl.readNext` acks cumulatively the message it returns; for the last message
/// of a batch that acks the whole entry (`BatchMessageIdImpl`, the tracker acks the entry once
/// its last index is acked cumulatively), so a reader whose topic ends with a batch learns the
/// end too.
#[tokio::test]
async fn a_reader_whose_topic_ends_with_a_batch_learns_the_end() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-batch");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 1).await;
    crate::common::publish_batch(&client, &topic, 3).await;
    broker.terminate_topic(&topic).unwrap();
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..4 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
}

/// Java `MultiTopicsConsumerImpl.hasReachedEndOfTopic` for a reader of a partitioned topic
/// (`MultiTopicsReader`): true once every partition's consumer reached its end; the reader acks
/// each partition's messages cumulatively, so each partition learns it.
#[tokio::test]
async fn a_reader_of_a_partitioned_topic_learns_the_end_of_every_partition() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-reader-end-parts");
    broker.create_partitioned_topic(&topic, 2);
    for p in 0..2 {
        let part = format!("{topic}-partition-{p}");
        let producer = unbatched_producer(&client, &part).await;
        publish(&producer, &format!("p{p}"), 2).await;
        producer.close().await.unwrap();
        broker.terminate_topic(&part).unwrap();
    }
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    for _ in 0..4 {
        within("read", reader.recv()).await.unwrap();
    }
    wait_until("the reader reached the end", || {
        reader.has_reached_end_of_topic()
    })
    .await;
    let available = within("available at the end", reader.has_message_available()).await;
    assert!(matches!(available, Ok(false)), "{available:?}");
    let end = within("the end", reader.recv()).await;
    assert!(
        matches!(end, Err(pulsar_sdk::Error::TopicTerminated { .. })),
        "{end:?}"
    );
}
