//! Review of the consumer hot path's second step (issue #18): compact queue records, the
//! handle's bookkeeping under one lock, single-owner counters, the lock-free state. No
//! behaviour may change; each test here pins one behaviour the change could have broken.

use common::{client, full, recv, within};
use support as common;

use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, SubscriptionType};

/// An undecodable entry the application takes (as an error item) is no message: it must not
/// count as one for the ack timeout. The task numbers only the messages it queues, and the
/// handle's count of taken messages must follow the same numbering; counted one ahead, the
/// clock of the next message starts while it still waits in the queue, and the ack timeout
/// redelivers a message the application never saw (then it is delivered twice).
#[tokio::test(start_paused = true)]
async fn an_undecodable_entry_taken_does_not_start_the_next_messages_ack_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("review-records-discarded-ack-timeout");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_timeout(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    // A corrupt zstd payload (discarded, one error item), then a good message.
    broker
        .publish_raw(
            &topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                publish_time: 1,
                compression: Some(wire::CompressionType::Zstd as i32),
                uncompressed_size: Some(100),
                ..Default::default()
            },
            bytes::Bytes::from_static(b"not zstd at all"),
        )
        .unwrap();
    common::unbatched_producer(&client, &topic)
        .await
        .send_and_wait("good")
        .await
        .unwrap();
    match within("the error item", consumer.recv()).await {
        Err(Error::InvalidMessage(_)) | Err(Error::Codec(_)) => {}
        other => panic!("expected an undecodable-entry error, got {other:?}"),
    }
    // The application takes nothing for ten ack timeouts (paused time: every tick of the
    // task runs): "good" waits in the queue all along, its clock not started.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        consumer.stats().totals.ack_timeouts,
        0,
        "a message still in the queue timed out"
    );
    assert!(
        broker
            .received_of(Type::RedeliverUnacknowledgedMessages)
            .is_empty(),
        "a message the application never took was redelivered"
    );
    let m = recv(&mut consumer).await;
    assert_eq!(m.payload_str(), Some("good"));
    assert_eq!(m.redelivery_count, 0);
}

use crate::hostile;

/// Every public field of a delivered message, `id` with all of its fields (its `PartialEq`
/// leaves `batch_size` out).
fn fields(m: &pulsar_sdk::Message) -> String {
    format!(
        "id={:?} topic={} payload={:?} key={:?} b64={} schema={:?} ordering={:?} props={:?} \
         event={:?} publish={} producer={} seq={} redelivery={} null={}",
        m.id,
        m.topic,
        m.payload,
        m.key,
        m.key_b64_encoded,
        m.schema_version,
        m.ordering_key,
        m.properties,
        m.event_time,
        m.publish_time,
        m.producer_name,
        m.sequence_id,
        m.redelivery_count,
        m.null_value,
    )
}

fn kv(k: &str, v: &str) -> wire::KeyValue {
    wire::KeyValue {
        key: k.into(),
        value: v.into(),
    }
}

fn with_redelivery(mut cmd: wire::BaseCommand, count: u32, ack_set: Vec<i64>) -> wire::BaseCommand {
    let m = cmd.message.as_mut().unwrap();
    m.redelivery_count = Some(count);
    m.ack_set = ack_set;
    cmd
}

/// Every field of every message, as the broker's entries give them: a plain entry with every
/// optional field set, one with none (event time 0, a null value), a batch whose records
/// have their own keys, properties, event times and (explicit or implied) sequence ids, one
/// compacted out, and a partly acked batch. Pinned before and after the queue kept compact
/// records (issue #18): the `Message` built when handed out must be the one built at decode.
#[tokio::test]
async fn every_field_of_every_delivered_message_is_kept() {
    let broker = hostile::Hostile::start(|mut peer| async move {
        peer.handshake(None).await;
        let Some(id) = hostile::until_subscribed(&mut peer).await else {
            return;
        };
        // 1. A plain entry with every optional field.
        let full = wire::MessageMetadata {
            producer_name: "prod-a".into(),
            sequence_id: 10,
            publish_time: 123,
            properties: vec![kv("b", "2"), kv("a", "1")],
            partition_key: Some("a2V5".into()),
            partition_key_b64_encoded: Some(true),
            ordering_key: Some(bytes::Bytes::from_static(b"ok")),
            event_time: Some(77),
            schema_version: Some(bytes::Bytes::from_static(b"v1")),
            ..Default::default()
        };
        let cmd = with_redelivery(hostile::message(id, 5, 1), 2, vec![]);
        let _ = peer.send_message(cmd, &full, b"one").await;
        // 2. A plain entry with none of them: event time 0 is no event time; a null value.
        let bare = wire::MessageMetadata {
            producer_name: "prod-b".into(),
            sequence_id: 11,
            publish_time: 124,
            event_time: Some(0),
            null_value: Some(true),
            ..Default::default()
        };
        let _ = peer
            .send_message(hostile::message(id, 5, 2), &bare, b"")
            .await;
        // 3. A batch of 4: the outer key, properties and event time are not inherited.
        let records = vec![
            (
                wire::SingleMessageMetadata {
                    partition_key: Some("k0".into()),
                    properties: vec![kv("r", "0")],
                    event_time: Some(5),
                    sequence_id: Some(100),
                    ..Default::default()
                },
                b"b0".to_vec(),
            ),
            (wire::SingleMessageMetadata::default(), b"b1".to_vec()),
            (
                wire::SingleMessageMetadata {
                    compacted_out: Some(true),
                    ..Default::default()
                },
                b"b2".to_vec(),
            ),
            (
                wire::SingleMessageMetadata {
                    partition_key: Some("AAE=".into()),
                    partition_key_b64_encoded: Some(true),
                    ordering_key: Some(bytes::Bytes::from_static(b"o3")),
                    event_time: Some(0),
                    null_value: Some(true),
                    ..Default::default()
                },
                Vec::new(),
            ),
        ];
        let batch = wire::MessageMetadata {
            producer_name: "prod-c".into(),
            sequence_id: 50,
            publish_time: 125,
            num_messages_in_batch: Some(4),
            properties: vec![kv("outer", "x")],
            partition_key: Some("outer-key".into()),
            event_time: Some(999),
            schema_version: Some(bytes::Bytes::from_static(b"v2")),
            ..Default::default()
        };
        let cmd = with_redelivery(hostile::message(id, 5, 3), 1, vec![]);
        let _ = peer
            .send_message(cmd, &batch, &hostile::batch(records))
            .await;
        // 4. A batch of 3 with message 1 acked already (ack set 0b101).
        let records = (0..3).map(|i| {
            (
                wire::SingleMessageMetadata {
                    properties: vec![kv("i", &i.to_string())],
                    ..Default::default()
                },
                format!("p{i}").into_bytes(),
            )
        });
        let partly = wire::MessageMetadata {
            producer_name: "prod-d".into(),
            sequence_id: 70,
            publish_time: 126,
            num_messages_in_batch: Some(3),
            ..Default::default()
        };
        let cmd = with_redelivery(hostile::message(id, 5, 4), 0, vec![0b101]);
        let _ = peer
            .send_message(cmd, &partly, &hostile::batch(records))
            .await;
        peer.serve().await;
    })
    .await;
    let client = client(&broker.url());
    let topic = full("review-records-fields");
    let mut consumer = within(
        "subscribe",
        client.consumer(&topic).subscription("s").subscribe(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..7 {
        got.push(fields(&recv(&mut consumer).await));
    }
    let id = |entry: u64, index: i32, size: i32| {
        let mut id = pulsar_sdk::MessageId::new(5, entry, -1);
        id.batch_index = index;
        id.batch_size = size;
        id
    };
    let b = |s: &'static [u8]| bytes::Bytes::from_static(s);
    let props = |kvs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        kvs.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let expect = |id: pulsar_sdk::MessageId,
                  payload: &'static [u8],
                  key: Option<&str>,
                  b64: bool,
                  schema: Option<&'static [u8]>,
                  ordering: Option<&'static [u8]>,
                  properties: &[(&str, &str)],
                  event: Option<u64>,
                  publish: u64,
                  producer: &str,
                  seq: u64,
                  redelivery: u32,
                  null: bool| {
        format!(
            "id={:?} topic={} payload={:?} key={:?} b64={} schema={:?} ordering={:?} \
             props={:?} event={:?} publish={} producer={} seq={} redelivery={} null={}",
            id,
            topic,
            b(payload),
            key.map(str::to_string),
            b64,
            schema.map(b),
            ordering.map(b),
            props(properties),
            event,
            publish,
            producer,
            seq,
            redelivery,
            null,
        )
    };
    let want = vec![
        expect(
            id(1, -1, 0),
            b"one",
            Some("a2V5"),
            true,
            Some(b"v1"),
            Some(b"ok"),
            &[("a", "1"), ("b", "2")],
            Some(77),
            123,
            "prod-a",
            10,
            2,
            false,
        ),
        expect(
            id(2, -1, 0),
            b"",
            None,
            false,
            None,
            None,
            &[],
            None,
            124,
            "prod-b",
            11,
            0,
            true,
        ),
        expect(
            id(3, 0, 4),
            b"b0",
            Some("k0"),
            false,
            Some(b"v2"),
            None,
            &[("r", "0")],
            Some(5),
            125,
            "prod-c",
            100,
            1,
            false,
        ),
        expect(
            id(3, 1, 4),
            b"b1",
            None,
            false,
            Some(b"v2"),
            None,
            &[],
            None,
            125,
            "prod-c",
            51,
            1,
            false,
        ),
        expect(
            id(3, 3, 4),
            b"",
            Some("AAE="),
            true,
            Some(b"v2"),
            Some(b"o3"),
            &[],
            None,
            125,
            "prod-c",
            53,
            1,
            true,
        ),
        expect(
            id(4, 0, 3),
            b"p0",
            None,
            false,
            None,
            None,
            &[("i", "0")],
            None,
            126,
            "prod-d",
            70,
            0,
            false,
        ),
        expect(
            id(4, 2, 3),
            b"p2",
            None,
            false,
            None,
            None,
            &[("i", "2")],
            None,
            126,
            "prod-d",
            72,
            0,
            false,
        ),
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "message {i}");
    }
}

/// Messages over the redelivery limit on arrival go straight to the dead-letter topic, built
/// from the queue's compact records (issue #18): each letter must carry its own record's
/// payload, key (binary or not), ordering key, properties and event time, not another
/// record's nor the batch's outer ones, and the origin id of its own batch index.
#[tokio::test]
async fn letters_dead_lettered_on_arrival_carry_their_own_records_fields() {
    let (letters_tx, mut letters) = tokio::sync::mpsc::unbounded_channel();
    let broker = hostile::Hostile::start(move |mut peer| {
        let letters = letters_tx.clone();
        async move {
            peer.handshake(None).await;
            while let Some(frame) = peer.recv().await {
                match frame.ty() {
                    Type::Subscribe => {
                        let sub = frame.cmd.subscribe.as_ref().unwrap();
                        let _ = peer.send(hostile::success(sub.request_id)).await;
                        let records = vec![
                            (
                                wire::SingleMessageMetadata {
                                    partition_key: Some("k0".into()),
                                    properties: vec![kv("r", "0")],
                                    event_time: Some(5),
                                    ..Default::default()
                                },
                                b"d0".to_vec(),
                            ),
                            (
                                wire::SingleMessageMetadata {
                                    partition_key: Some("AAE=".into()),
                                    partition_key_b64_encoded: Some(true),
                                    ordering_key: Some(bytes::Bytes::from_static(b"o1")),
                                    ..Default::default()
                                },
                                b"d1".to_vec(),
                            ),
                        ];
                        let meta = wire::MessageMetadata {
                            producer_name: "p".into(),
                            sequence_id: 1,
                            publish_time: 1,
                            num_messages_in_batch: Some(2),
                            properties: vec![kv("outer", "x")],
                            partition_key: Some("outer-key".into()),
                            event_time: Some(999),
                            ..Default::default()
                        };
                        let cmd =
                            with_redelivery(hostile::message(sub.consumer_id, 9, 1), 5, vec![]);
                        let _ = peer
                            .send_message(cmd, &meta, &hostile::batch(records))
                            .await;
                    }
                    Type::Send => {
                        let send = frame.cmd.send.clone().unwrap();
                        let _ = letters.send(frame.payload.clone().unwrap());
                        let receipt = wire::BaseCommand {
                            r#type: Type::SendReceipt as i32,
                            send_receipt: Some(wire::CommandSendReceipt {
                                producer_id: send.producer_id,
                                sequence_id: send.sequence_id,
                                message_id: Some(wire::MessageIdData {
                                    ledger_id: 100,
                                    entry_id: send.sequence_id,
                                    ..Default::default()
                                }),
                                highest_sequence_id: None,
                            }),
                            ..Default::default()
                        };
                        let _ = peer.send(receipt).await;
                    }
                    _ => {
                        if let Some(answer) = peer.reply(&frame.cmd) {
                            let _ = peer.send(answer).await;
                        }
                    }
                }
            }
        }
    })
    .await;
    let client = client(&broker.url());
    let topic = full("review-records-dlq");
    let _consumer = within(
        "subscribe",
        client
            .consumer(&topic)
            .subscription("s")
            .subscription_type(SubscriptionType::Shared)
            .dead_letter_policy(pulsar_sdk::consumer::DeadLetterPolicy::new(1))
            .subscribe(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let (meta, payload) = within("a letter", letters.recv()).await.unwrap();
        let mut props: Vec<(String, String)> = meta
            .properties
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        props.sort();
        got.push(format!(
            "payload={:?} key={:?} b64={:?} ordering={:?} event={:?} props={:?}",
            payload,
            meta.partition_key,
            meta.partition_key_b64_encoded.unwrap_or(false),
            meta.ordering_key,
            meta.event_time.filter(|t| *t > 0),
            props,
        ));
    }
    got.sort();
    let origin = |i: i32| {
        let mut id = pulsar_sdk::MessageId::new(9, 1, -1);
        id.batch_index = i;
        id.batch_size = 2;
        id.to_string()
    };
    let props = |own: &[(&str, &str)], i: i32| {
        let mut v: Vec<(String, String)> = own
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.push(("ORIGIN_MESSAGE_ID".into(), origin(i)));
        v.push(("REAL_SUBSCRIPTION".into(), "s".into()));
        v.push(("REAL_TOPIC".into(), topic.clone()));
        v.sort();
        v
    };
    let want = vec![
        format!(
            "payload={:?} key={:?} b64={:?} ordering={:?} event={:?} props={:?}",
            bytes::Bytes::from_static(b"d0"),
            Some("k0".to_string()),
            false,
            None::<bytes::Bytes>,
            Some(5u64),
            props(&[("r", "0")], 0),
        ),
        format!(
            "payload={:?} key={:?} b64={:?} ordering={:?} event={:?} props={:?}",
            bytes::Bytes::from_static(b"d1"),
            Some("AAE=".to_string()),
            true,
            Some(bytes::Bytes::from_static(b"o1")),
            None::<u64>,
            props(&[], 1),
        ),
    ];
    assert_eq!(got, want);
}
