//! Review of issue #18's send path against the official client (PyPI `pulsar-client`)
//! through a real broker: batches whose records are written by the plain fast path (payload
//! only) mixed with records that carry keys, ordering keys, properties and event times, read
//! back by the official consumer field by field, with the ids our receipts gave.

use std::time::Duration;

use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Client, CompressionType, ProducerMessage};
use support::official;
use support::{shared_broker, unique_name};

fn message(i: usize) -> ProducerMessage {
    let payload = if i % 9 == 4 {
        Vec::new()
    } else {
        let mut p = format!("p{i}-").into_bytes();
        p.extend_from_slice(&[0xff, 0, (i % 251) as u8]);
        p
    };
    let mut m = ProducerMessage::new(payload);
    match i % 4 {
        0 | 2 => {} // plain: payload only
        1 => {
            m = m
                .key(format!("k{i}"))
                .property("i", i.to_string())
                .event_time(1_600_000_000_000 + i as u64)
        }
        _ => m = m.ordering_key(format!("o{i}").into_bytes()),
    }
    m
}

#[tokio::test]
async fn the_official_client_reads_plain_and_general_records_mixed_in_batches() {
    let client = Client::builder()
        .service_url(shared_broker().url())
        .build()
        .unwrap();
    for codec in [CompressionType::None, CompressionType::Lz4] {
        let topic = unique_name("plain-records-to-official");
        let producer = client
            .producer(&topic)
            .batching_options(BatchingOptions {
                max_messages: 6,
                max_publish_delay: Duration::from_millis(50),
                ..Default::default()
            })
            .compression(codec)
            .create()
            .await
            .unwrap();
        const N: usize = 30;
        let mut sends = Vec::new();
        for i in 0..N {
            sends.push(producer.send(message(i)).await.unwrap());
        }
        let ids = futures::future::try_join_all(sends).await.unwrap();
        producer.close().await.unwrap();
        let got = official::consume_async(
            &shared_broker().url(),
            &topic,
            &unique_name("sub"),
            N,
            Duration::from_secs(30),
            "earliest",
            "shared",
        )
        .await
        .unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(got.len(), N, "{codec}");
        for (i, (m, id)) in got.iter().zip(&ids).enumerate() {
            let want = message(i);
            let ctx = format!("{codec} message {i}");
            assert_eq!(m.payload, want.payload.to_vec(), "{ctx}");
            assert_eq!(m.key, want.key, "{ctx}");
            assert_eq!(
                m.ordering_key.as_deref().map(str::as_bytes),
                want.ordering_key.as_deref(),
                "{ctx}"
            );
            assert_eq!(m.properties, want.properties, "{ctx}");
            assert_eq!(m.event_time, want.event_time, "{ctx}");
            let (ledger, entry, _, batch_index) =
                support::official::parse_message_id(&m.message_id).expect("an id");
            assert_eq!(
                (ledger, entry, batch_index),
                (id.ledger_id, id.entry_id, id.batch_index),
                "{ctx}: the id our receipt gave"
            );
        }
    }
}
