//! Helpers of the chunking tests (`tests/mock_chunk*.rs`, `tests/review_chunking*.rs`): raw
//! chunk entries published into the mock broker, incompressible payloads, acks observed.

use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::{Client, ConsumerBuilder, Producer, SubscriptionType};

use super::wait_until;

// The chunking probes glob-import this module.
pub use super::{client, recv};

pub fn consumer(client: &Client, topic: &str, t: SubscriptionType) -> ConsumerBuilder {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(t)
        .ack_group_time(Duration::ZERO)
}

pub async fn broker_with_max(max: u32) -> MockBroker {
    MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(max),
        ..Default::default()
    })
    .await
    .unwrap()
}

pub async fn chunking_producer(client: &Client, topic: &str) -> Producer {
    client
        .producer(topic)
        .chunking(true)
        .create()
        .await
        .expect("producer")
}

/// Bytes that do not compress well (xorshift); different seeds give different bytes.
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every SEND the broker got, in order: (sequence id, uuid, chunk id).
pub fn sends(broker: &MockBroker) -> Vec<(u64, Option<String>, Option<i32>)> {
    broker
        .received_of(Type::Send)
        .into_iter()
        .filter_map(|r| {
            let seq = r.command.send.as_ref()?.sequence_id;
            let (m, _) = r.payload?;
            Some((seq, m.uuid, m.chunk_id))
        })
        .collect()
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Publishes a raw chunk entry with the given header fields; returns its entry id.
#[allow(clippy::too_many_arguments)]
pub fn raw_chunk(
    broker: &MockBroker,
    topic: &str,
    uuid: &str,
    num_chunks: i32,
    chunk_id: i32,
    total: i32,
    data: &[u8],
) -> u64 {
    broker
        .publish_raw(
            topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                sequence_id: 1,
                publish_time: now_ms(),
                uuid: Some(uuid.into()),
                num_chunks_from_msg: Some(num_chunks),
                total_chunk_msg_size: Some(total),
                chunk_id: Some(chunk_id),
                ..Default::default()
            },
            bytes::Bytes::copy_from_slice(data),
        )
        .unwrap()
}

pub fn raw_small(broker: &MockBroker, topic: &str, body: &str) -> u64 {
    broker
        .publish_raw(
            topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                sequence_id: 9,
                publish_time: now_ms(),
                ..Default::default()
            },
            bytes::Bytes::copy_from_slice(body.as_bytes()),
        )
        .unwrap()
}

/// The entry ids the broker got ACKs for (sorted, once each).
pub fn acked_entries(broker: &MockBroker) -> Vec<u64> {
    let mut v: Vec<u64> = broker
        .received_of(Type::Ack)
        .into_iter()
        .filter_map(|r| r.command.ack)
        .flat_map(|a| a.message_id)
        .map(|id| id.entry_id)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Waits until the broker got ACKs for every one of `entries`.
pub async fn wait_acked(broker: &MockBroker, entries: &[u64]) {
    wait_until("acks of these entries", || {
        let acked = acked_entries(broker);
        entries.iter().all(|e| acked.contains(e))
    })
    .await;
}
