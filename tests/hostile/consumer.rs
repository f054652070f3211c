//! A hostile broker against the consumer's inbound path (issue #11, cases 3 to 6): frames that
//! are well formed but built to exhaust memory or CPU, and floods beyond the flow permits.
//! Each test asserts bounded memory (the counting allocator of `hostile`), a clear outcome and
//! that nothing is lost without the application learning of it.

use crate::hostile;
use common::client;
use support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hostile::{Hostile, MemWatch};
use pulsar_sdk::mock::wire;
use pulsar_sdk::{Client, Consumer, Error, State};

const MB: usize = 1024 * 1024;

async fn consumer(client: &Client, topic: &str, queue: u32) -> Consumer {
    common::within(
        "subscribe",
        client
            .consumer(common::full(topic))
            .subscription("s")
            .receiver_queue_size(queue)
            .subscribe(),
    )
    .await
    .unwrap()
}

/// `frames` MESSAGE frames for `consumer_id` with `payload_len`-byte payloads, encoded once.
fn flood_chunk(consumer_id: u64, frames: u64, payload_len: usize) -> Vec<u8> {
    let body = vec![b'x'; payload_len];
    let mut out = Vec::new();
    for i in 0..frames {
        let cmd = hostile::message(consumer_id, 7, i);
        out.extend(hostile::encode(
            &cmd,
            Some((&hostile::metadata("flood", i), &body)),
        ));
    }
    out
}

/// Receives until an error item; returns it with the number of messages received before.
async fn next_error(consumer: &mut Consumer) -> (Error, usize) {
    let mut messages = 0;
    loop {
        match common::within("an error item", consumer.recv()).await {
            Ok(_) => messages += 1,
            Err(e) => return (e, messages),
        }
    }
}

fn is_flow_violation(e: &Error) -> bool {
    matches!(e, Error::Protocol(m) if m.contains("flow control violated"))
}

/// Case 3: one batch frame whose outer metadata is huge (a 200 KB producer name) and whose
/// records are tiny. The outer metadata used to be copied into every message (19,000 records
/// in a 281 KB frame made 2.8 GB); it is now shared by the messages of the entry.
#[tokio::test]
async fn a_batch_shares_its_outer_metadata_across_its_messages() {
    hostile::serial();
    const RECORDS: usize = 2_000;
    let name = "p".repeat(200 * 1024);
    let payload = hostile::batch((0..RECORDS).map(|_| (Default::default(), vec![])));
    let frame_name = name.clone();
    let broker = Hostile::start(move |mut peer| {
        let (name, payload) = (frame_name.clone(), payload.clone());
        async move {
            peer.handshake(None).await;
            let Some(id) = hostile::until_subscribed(&mut peer).await else {
                return;
            };
            let mut meta = hostile::metadata(&name, 0);
            meta.num_messages_in_batch = Some(RECORDS as i32);
            let _ = peer
                .send_message(hostile::message(id, 1, 1), &meta, &payload)
                .await;
            peer.serve().await;
        }
    })
    .await;
    let client = client(&broker.url());
    let mut consumer = consumer(&client, "shared-meta", 5_000).await;
    let mem = MemWatch::start();
    for i in 0..RECORDS {
        let m = common::within("a batched message", consumer.recv())
            .await
            .unwrap();
        assert_eq!(m.id.batch_index, i as i32);
        assert_eq!(m.producer_name.len(), name.len());
    }
    // Before: 2,000 copies of the name (400 MB). Now one, plus ~300 bytes a message.
    eprintln!("producer name batch: peak {} KiB", mem.peak_growth() / 1024);
    mem.assert_peak_below("a batch with a 200 KB producer name", 8 * MB);
}

/// Case 3: 10,000 outer properties in a batch frame used to be rebuilt for every message of
/// the batch (and then thrown away: a batched message has its own properties, as upstream).
/// The work per frame is now bounded by the frame's size.
#[tokio::test]
async fn outer_properties_are_not_rebuilt_for_every_batched_message() {
    hostile::alongside();
    const RECORDS: usize = 10_000;
    let props: Vec<wire::KeyValue> = (0..10_000)
        .map(|i| wire::KeyValue {
            key: format!("key-{i:05}"),
            value: format!("v{i}"),
        })
        .collect();
    let record = wire::SingleMessageMetadata {
        properties: vec![wire::KeyValue {
            key: "own".into(),
            value: "yes".into(),
        }],
        ..Default::default()
    };
    let payload = hostile::batch((0..RECORDS).map(|_| (record.clone(), b"m".to_vec())));
    let broker = Hostile::start(move |mut peer| {
        let (props, payload) = (props.clone(), payload.clone());
        async move {
            peer.handshake(None).await;
            let Some(id) = hostile::until_subscribed(&mut peer).await else {
                return;
            };
            let mut meta = hostile::metadata("p", 0);
            meta.num_messages_in_batch = Some(RECORDS as i32);
            meta.properties = props;
            let _ = peer
                .send_message(hostile::message(id, 1, 1), &meta, &payload)
                .await;
            peer.serve().await;
        }
    })
    .await;
    let client = client(&broker.url());
    let started = Instant::now();
    let mut consumer = consumer(&client, "outer-props", 5_000).await;
    for _ in 0..RECORDS {
        let m = common::within("a batched message", consumer.recv())
            .await
            .unwrap();
        assert_eq!(
            m.properties.len(),
            1,
            "a batched message has its own properties"
        );
        assert_eq!(m.properties.get("own").map(String::as_str), Some("yes"));
    }
    // A generous rate bound: before, each message rebuilt a 10,000-entry map (14 s of CPU
    // for such a frame); now the whole batch takes milliseconds.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{RECORDS} messages took {took:?}"
    );
}

/// Case 4: a few hundred compressed bytes that decompress to 10 MiB of zeros, declared as 2.6 M
/// four-byte records of which the ack set delivers one. Only the one record is built (before:
/// every record was, 1.1 GB); the decompressed size is bounded by the maximum message size,
/// and a count the bytes cannot hold is refused.
#[tokio::test]
async fn compression_bombs_are_bounded_and_filtered_before_building() {
    hostile::serial();
    const SIZE: usize = 10 * MB;
    let records = (SIZE / 4) as i32;
    // (codec, compressed bytes); built before measuring.
    let zeros = vec![0u8; SIZE];
    let bombs: Arc<Vec<(i32, Vec<u8>)>> = Arc::new(
        [1, 2, 3, 4]
            .into_iter()
            .map(|kind| (kind, pulsar_sdk::fuzzing::compress(kind, &zeros).unwrap()))
            .collect(),
    );
    drop(zeros);
    for (kind, b) in bombs.iter() {
        // zstd and zlib: a few hundred bytes to 10 KB; lz4 and snappy top out near 250:1
        // and 21:1.
        assert!(b.len() < 600 * 1024, "codec {kind}: {} bytes", b.len());
    }
    let frames = bombs.clone();
    let broker = Hostile::start(move |mut peer| {
        let bombs = frames.clone();
        async move {
            peer.handshake(None).await;
            let Some(id) = hostile::until_subscribed(&mut peer).await else {
                return;
            };
            for (i, (kind, bomb)) in bombs.iter().enumerate() {
                let mut meta = hostile::metadata("bomb", i as u64);
                meta.compression = Some(*kind);
                meta.uncompressed_size = Some(SIZE as u32);
                meta.num_messages_in_batch = Some(records);
                let mut cmd = hostile::message(id, 2, i as u64);
                cmd.message.as_mut().unwrap().ack_set = vec![1];
                let _ = peer.send_message(cmd, &meta, bomb).await;
                // The same bomb claiming one record more than its bytes can hold.
                meta.num_messages_in_batch = Some(records + 1);
                let mut cmd = hostile::message(id, 3, i as u64);
                cmd.message.as_mut().unwrap().ack_set = vec![1];
                let _ = peer.send_message(cmd, &meta, bomb).await;
            }
            peer.serve().await;
        }
    })
    .await;
    let client = client(&broker.url());
    let mut consumer = consumer(&client, "bombs", 1_000).await;
    let mem = MemWatch::start();
    for (kind, _) in bombs.iter() {
        let m = common::within("the one record the ack set delivers", consumer.recv())
            .await
            .unwrap_or_else(|e| panic!("codec {kind}: {e}"));
        assert_eq!((m.id.ledger_id, m.id.batch_index), (2, 0), "codec {kind}");
        assert!(m.payload.is_empty());
        let e = common::within("the lying count's error", consumer.recv())
            .await
            .expect_err("a count the bytes cannot hold is refused");
        assert!(matches!(&e, Error::InvalidMessage(_)), "codec {kind}: {e}");
    }
    assert_eq!(consumer.discarded_entries(), 4);
    // The decompressed 10 MiB once at a time, and nothing per record.
    eprintln!("compression bombs: peak {} KiB", mem.peak_growth() / 1024);
    mem.assert_peak_below("compression bombs", 2 * SIZE + 4 * MB);
}

/// Case 5: a broker that floods far beyond the permits on every subscription while the
/// application does not receive. Messages of older connections used to stay in an unbounded
/// queue until read (900 MB after a minute); the queue is now bounded by the receiver queue,
/// the overshoot tolerance and one entry, across reconnects, and each violation closes the
/// connection with an error the application reads.
#[tokio::test]
async fn a_flood_while_not_receiving_stays_bounded_across_reconnects() {
    hostile::serial();
    const QUEUE: u32 = 10;
    const FLOODS: usize = 6;
    // Beyond the tolerance (10 receiver queues + 10,000) on every subscription.
    const PER_SUBSCRIPTION: u64 = 12_000;
    let subscribes = Arc::new(AtomicUsize::new(0));
    let count = subscribes.clone();
    let broker = Hostile::start(move |mut peer| {
        let count = count.clone();
        async move {
            peer.handshake(None).await;
            // Re-subscribes may come on the same connection or on a new one. The first
            // FLOODS subscriptions are flooded; the next one is left alone.
            while let Some(id) = hostile::until_subscribed(&mut peer).await {
                if count.fetch_add(1, Ordering::SeqCst) >= FLOODS {
                    continue;
                }
                let chunk = flood_chunk(id, 1_000, 1024);
                for _ in 0..PER_SUBSCRIPTION / 1_000 {
                    if peer.send_raw(&chunk).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    let client = client(&broker.url());
    let mut consumer = consumer(&client, "paced-flood", QUEUE).await;
    let mem = MemWatch::start();
    let started = Instant::now();
    // The subscription after the last flood: every flood has been dealt with.
    while subscribes.load(Ordering::SeqCst) <= FLOODS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the floods were dealt with"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What each flood left queued for the application: before, every flood's 10,110 messages
    // (~13 MB each, ~80 MB for six); now one queue's worth across all of them.
    let retained = mem.growth();
    eprintln!(
        "{FLOODS} floods: {} KiB retained, peak {} KiB",
        retained / 1024,
        mem.peak_growth() / 1024
    );
    assert!(
        retained < 24 * MB,
        "{} KiB retained after {FLOODS} floods (peak {} KiB)",
        retained / 1024,
        mem.peak_growth() / 1024
    );
    let (e, _) = next_error(&mut consumer).await;
    assert!(is_flow_violation(&e), "{e}");
    assert!(
        broker.accepted() >= 2,
        "the violating connection was closed"
    );
}

/// Case 6: a flood beyond the permits as fast as the broker can write. Messages beyond the
/// permits used to be dropped with a log line each, the application told nothing; now the
/// connection is closed with an error naming the violation, the application reads that error,
/// and the consumer re-subscribes after a backoff (the broker redelivers what was not
/// acknowledged) without looping.
///
/// The application starts receiving once the consumer has reconnected: one that keeps up
/// with the flood grants permits as fast as the flood spends them, and then there is no
/// violation to report (received from the start, this test timed out now and then on a
/// loaded machine: no error came, as there was none).
#[tokio::test]
async fn a_flood_beyond_the_permits_is_reported_and_the_consumer_recovers() {
    hostile::serial();
    let broker = fast_flood(200_000).await;
    let client = client(&broker.url());
    let mut consumer = consumer(&client, "fast-flood", 1_000).await;
    let mem = MemWatch::start();
    common::wait_until("the violating connection is closed", || {
        broker.accepted() >= 2
    })
    .await;
    let (e, received) = next_error(&mut consumer).await;
    assert!(is_flow_violation(&e), "{e}");
    assert!(
        received <= 1_000 + 20_000,
        "{received} messages before the error"
    );
    // Re-subscribed on a new connection, after the backoff, and stays there.
    common::wait_until("the consumer is back", || {
        broker.accepted() >= 2 && consumer.state() == State::Ready
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.accepted(), 2, "one reconnect, no loop");
    assert_eq!(consumer.state(), State::Ready);
    // Nothing of the flood is kept.
    assert!(
        mem.growth() < 4 * MB,
        "{} KiB retained",
        mem.growth() / 1024
    );
}

/// A broker whose first connection floods `frames` small messages as fast as it can write;
/// later connections behave.
async fn fast_flood(frames: u64) -> Hostile {
    Hostile::start(move |mut peer| async move {
        peer.handshake(None).await;
        let Some(id) = hostile::until_subscribed(&mut peer).await else {
            return;
        };
        if peer.index == 0 {
            let chunk = flood_chunk(id, 1_000, 16);
            for _ in 0..frames / 1_000 {
                if peer.send_raw(&chunk).await.is_err() {
                    return;
                }
            }
        }
        peer.serve().await;
    })
    .await
}

/// The peak of a fast flood. Both the consumer task's queue and the channel from the
/// connection to the task are bounded (the channel used to pile up ~6 KB frames while the
/// connection read faster than the task decoded: ~1.2 GB for 200,000 frames); whichever
/// notices first reports the flow-control violation.
#[tokio::test]
async fn a_fast_flood_has_a_bounded_peak() {
    hostile::serial();
    let broker = fast_flood(200_000).await;
    let client = client(&broker.url());
    let mut consumer = consumer(&client, "fast-flood-peak", 1_000).await;
    let mem = MemWatch::start();
    // Not receiving until then, for the reason in the test above.
    common::wait_until("the violating connection is closed", || {
        broker.accepted() >= 2
    })
    .await;
    let (e, _) = next_error(&mut consumer).await;
    assert!(is_flow_violation(&e), "{e}");
    mem.assert_peak_below("a fast flood", 64 * MB);
}

// ---------------------------------------------------------------------------------------------
// Poison Avro messages (issue #31, section 1): any producer on the topic can write them; the
// consumer's decoder must refuse them as a decode error on that message, never abort.

mod poison_avro {
    use super::*;
    use pulsar_sdk::mock::{MockBroker, MockSchemaCompatibility};
    use pulsar_sdk::schema::{
        AutoConsumeSchema, AvroSchema, GenericAvroSchema, Schema, SchemaError, SchemaInfo,
        SchemaType,
    };
    use pulsar_sdk::InitialPosition;

    /// Writes raw bytes as payloads under an Avro definition the SDK itself would refuse to
    /// build a schema from: what a hostile (or buggy) producer of another client can do.
    struct RawAvro(&'static str);

    impl Schema for RawAvro {
        type Type = Vec<u8>;
        fn info(&self) -> Option<SchemaInfo> {
            Some(SchemaInfo::new(SchemaType::Avro, "").with_definition(self.0))
        }
        fn encode(&self, v: &Vec<u8>) -> Result<bytes::Bytes, SchemaError> {
            Ok(bytes::Bytes::copy_from_slice(v))
        }
        fn decode(&self, p: &[u8], _: Option<&SchemaInfo>) -> Result<Vec<u8>, SchemaError> {
            Ok(p.to_vec())
        }
    }

    const RECURSIVE: &str = r#"{"type":"record","name":"A","fields":[{"name":"a","type":"A"}]}"#;
    /// An ordinary reader of another record.
    const READER_A: &str = r#"{"type":"record","name":"A","fields":[{"name":"a","type":
        ["null","string"],"default":null}]}"#;
    /// An ordinary schema: a record with an array of optional strings.
    const TAGS: &str = r#"{"type":"record","name":"Tags","fields":[{"name":"tags","type":
        {"type":"array","items":["null","string"]}}]}"#;

    #[derive(Debug, serde::Deserialize, serde::Serialize)]
    struct Tags {
        tags: Vec<Option<String>>,
    }

    /// A 5-byte payload claiming an array of 100 M items.
    fn hundred_million_items() -> Vec<u8> {
        let mut out = Vec::new();
        let mut v = 100_000_000u64 << 1;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    /// Publishes `payload` under `definition` on a fresh topic of a mock broker.
    async fn publish(
        broker: &MockBroker,
        client: &Client,
        name: &str,
        definition: &'static str,
        payload: Vec<u8>,
    ) -> String {
        let topic = common::full(name);
        // A hostile producer does not care for compatibility; nor, here, does the broker.
        broker.set_schema_compatibility(MockSchemaCompatibility::AlwaysCompatible);
        let p = client
            .producer(&topic)
            .schema(RawAvro(definition))
            .create()
            .await
            .unwrap();
        p.send_and_wait(&payload).await.unwrap();
        topic
    }

    fn assert_decode_error(e: &SchemaError, what: &str) {
        assert!(matches!(e, SchemaError::Decode { .. }), "{what}: {e}");
    }

    #[tokio::test]
    async fn a_writer_schema_that_recurses_without_input_is_a_decode_error_not_a_stack_overflow() {
        hostile::alongside();
        let broker = MockBroker::start().await.unwrap();
        let client = common::test_client(&broker.service_url()).build().unwrap();
        let topic = publish(&broker, &client, "poison-recursive", RECURSIVE, vec![0; 8]).await;
        for (label, msg) in [
            (
                "AUTO_CONSUME",
                client
                    .consumer(&topic)
                    .subscription("auto")
                    .initial_position(InitialPosition::Earliest)
                    .schema(AutoConsumeSchema)
                    .subscribe()
                    .await
                    .unwrap()
                    .recv()
                    .await
                    .unwrap()
                    .into_parts()
                    .0
                    .map(drop),
            ),
            (
                "generic Avro",
                client
                    .consumer(&topic)
                    .subscription("generic")
                    .initial_position(InitialPosition::Earliest)
                    .schema(GenericAvroSchema::new(READER_A).unwrap())
                    .subscribe()
                    .await
                    .unwrap()
                    .recv()
                    .await
                    .unwrap()
                    .into_parts()
                    .0
                    .map(drop),
            ),
        ] {
            assert_decode_error(&msg.unwrap_err(), label);
        }
        // The SDK refuses to build such a schema itself, with a clear error.
        let e = GenericAvroSchema::new(RECURSIVE).unwrap_err();
        assert!(matches!(e, SchemaError::InvalidDefinition(_)), "{e}");
    }

    #[tokio::test]
    async fn a_block_count_larger_than_the_payload_is_a_decode_error_with_a_bounded_peak() {
        hostile::serial();
        let broker = MockBroker::start().await.unwrap();
        let client = common::test_client(&broker.service_url()).build().unwrap();
        let topic = publish(
            &broker,
            &client,
            "poison-count",
            TAGS,
            hundred_million_items(),
        )
        .await;
        let mut auto = client
            .consumer(&topic)
            .subscription("auto")
            .initial_position(InitialPosition::Earliest)
            .schema(AutoConsumeSchema)
            .subscribe()
            .await
            .unwrap();
        let mut typed = client
            .consumer(&topic)
            .subscription("typed")
            .initial_position(InitialPosition::Earliest)
            .schema(AvroSchema::<Tags>::new(TAGS).unwrap())
            .subscribe()
            .await
            .unwrap();
        // Both decodes happen in recv.
        let mem = MemWatch::start();
        let started = Instant::now();
        let a = common::within("auto", auto.recv()).await.unwrap();
        let t = common::within("typed", typed.recv()).await.unwrap();
        let peak = mem.peak_growth();
        eprintln!(
            "100 M items claimed in 5 bytes, two consumers: peak {} KiB, {:?}",
            peak / 1024,
            started.elapsed()
        );
        assert_decode_error(&a.into_parts().0.unwrap_err(), "AUTO_CONSUME");
        assert_decode_error(&t.into_parts().0.unwrap_err(), "the consumer's own schema");
        mem.assert_peak_below("receiving a 5-byte payload claiming 100 M items", 8 * MB);
        // The decode alone.
        let mem = MemWatch::start();
        let again = AvroSchema::<Tags>::new(TAGS)
            .unwrap()
            .decode(&hundred_million_items(), None);
        assert_decode_error(&again.unwrap_err(), "decode");
        mem.assert_peak_below("a 5-byte payload claiming 100 M items", 2 * MB);
    }
}

// ---------------------------------------------------------------------------------------------
// Review of the Avro guard (issue #31, section 1): legit schemas and payloads must still decode;
// hostile ones are a decode error, never a crash.

mod avro_guard_review {
    use apache_avro::types::Value;
    use pulsar_sdk::schema::{GenericAvroSchema, Schema};

    /// A record field whose default is a record with a `name` field: the default's `name` is
    /// data, not an Avro name. Java's `Schema.Parser` (and apache-avro) accept it; the guard's
    /// name check walked into default values and refused "John Doe" as a type name.
    #[test]
    fn a_default_value_with_a_name_key_is_not_a_type_name() {
        crate::hostile::alongside();
        let def = r#"{"type":"record","name":"Outer","fields":[{"name":"person","type":
            {"type":"record","name":"Person","fields":[{"name":"name","type":"string"}]},
            "default":{"name":"John Doe"}}]}"#;
        let s = GenericAvroSchema::new(def).expect("a legit schema parses");
        let v = s.decode(&[4, b'J', b'o'], None).unwrap();
        assert!(matches!(v, Value::Record(_)), "{v:?}");
        // A map default with such a key, and a custom property object, are data too.
        let def = r#"{"type":"record","name":"M","fields":[{"name":"m","type":
            {"type":"map","values":"string"},"default":{"name":"a b"}}],
            "x-meta":{"name":"not a name!"}}"#;
        GenericAvroSchema::new(def).expect("a legit schema parses");
    }

    /// Legit shapes the guard must let through: negative block counts with byte sizes (Java's
    /// `BlockingBinaryEncoder`), namespaced references, fixed decimals, a list that recurses
    /// through an optional field, maps of arrays of maps.
    #[test]
    fn legit_shapes_still_decode() {
        crate::hostile::alongside();
        let arr = GenericAvroSchema::new(r#"{"type":"array","items":"int"}"#).unwrap();
        // Block of -2 items, 2 bytes, items 1 and 2, then the end.
        let v = arr.decode(&[3, 4, 2, 4, 0], None).unwrap();
        assert_eq!(v, Value::Array(vec![Value::Int(1), Value::Int(2)]));

        let ns = GenericAvroSchema::new(
            r#"{"type":"record","name":"R","namespace":"n1","fields":[
                {"name":"x","type":{"type":"record","name":"S","namespace":"n2","fields":[
                    {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}]}},
                {"name":"z","type":"n2.E"},{"name":"w","type":"n2.S"}]}"#,
        )
        .unwrap();
        ns.decode(&[2, 0, 2], None).unwrap();
        // Enum index out of range: an error.
        assert!(ns.decode(&[2, 4, 2], None).is_err());

        let dec = GenericAvroSchema::new(
            r#"{"type":"fixed","name":"D","size":4,"logicalType":"decimal","precision":9,"scale":2}"#,
        )
        .unwrap();
        dec.decode(&[0, 0, 1, 0], None).unwrap();
        assert!(dec.decode(&[0, 0, 1], None).is_err());

        let list = GenericAvroSchema::new(
            r#"{"type":"record","name":"N","fields":[{"name":"v","type":"int"},
                {"name":"next","type":["null","N"],"default":null}]}"#,
        )
        .unwrap();
        // 10 elements: v=0, next=branch 1 ..., last next=null.
        let mut p = Vec::new();
        for _ in 0..9 {
            p.extend([0, 2]);
        }
        p.extend([0, 0]);
        list.decode(&p, None).unwrap();

        let mam = GenericAvroSchema::new(
            r#"{"type":"map","values":{"type":"array","items":{"type":"map","values":"long"}}}"#,
        )
        .unwrap();
        // {"k": [{"a": 1}]}
        mam.decode(&[2, 2, b'k', 2, 2, 2, b'a', 2, 0, 0, 0], None)
            .unwrap();
        // The same with the inner count claiming 2^62 entries: an error.
        let mut bad = vec![2, 2, b'k', 2];
        bad.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(mam.decode(&bad, None).is_err());
        // A block count of i64::MIN (zig-zag 2^64 - 1): an error.
        let min = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert!(arr.decode(&min, None).is_err());
    }
}
