//! Encrypted messages redelivered and dead-lettered (PIP-4 with PIP-124), against the mock
//! broker, as upstream's `ConsumerImpl` does it: a redelivered message (nack, ack timeout) is
//! decrypted again; the dead-letter copy is the message as delivered, i.e. decrypted, in clear
//! (`processPossibleToDLQ` publishes `message.getData()` through a producer without any crypto
//! configuration); a message that cannot be decrypted under `Fail` is tracked by the ack
//! timeout and never dead-lettered; and entries waiting for a slow key reader stay within the
//! consumer's byte budget.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pulsar_sdk::crypto::{ConsumerCryptoFailureAction, CryptoError};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, MockBroker};
use pulsar_sdk::{DeadLetterPolicy, Error, InitialPosition, MessageId};
use support::{client, full, recv, wait_until, within};
use tokio::sync::Notify;

use super::encryption::{consumer, encrypted_topic, payload, MapReader};

/// The SENDs of the producer the broker created on `topic`.
fn sends_to(broker: &MockBroker, topic: &str) -> Vec<(wire::MessageMetadata, bytes::Bytes)> {
    let ids: Vec<u64> = broker
        .received_of(Type::Producer)
        .into_iter()
        .filter_map(|r| r.command.producer)
        .filter(|p| p.topic == topic)
        .map(|p| p.producer_id)
        .collect();
    broker
        .received_of(Type::Send)
        .into_iter()
        .filter(|r| {
            r.command
                .send
                .as_ref()
                .is_some_and(|s| ids.contains(&s.producer_id))
        })
        .filter_map(|r| r.payload)
        .collect()
}

/// Nacked until past `max_redeliver_count` (1): each redelivery is decrypted again (the data
/// key from the cache: one private-key lookup in all), and the dead-letter copy is the
/// plaintext, unencrypted, as upstream's (Java `ConsumerImpl.processPossibleToDLQ` re-publishes
/// `message.getData()` of the decrypted `MessageImpl` kept in
/// `possibleSendToDeadLetterTopicMessages`, through a dead-letter producer created without a
/// crypto key reader or encryption keys). A consumer of the dead-letter topic with the private
/// key reads the original plaintext; so does one without any key.
#[tokio::test]
async fn nacked_past_the_maximum_an_encrypted_message_is_dead_lettered_in_clear_as_upstream() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-dlq");
    let dlq = full("enc-dlq-dead");
    let reader = MapReader::default().public("k", 0).private("k", 0);
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(reader.clone())
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1).dead_letter_topic(&dlq))
        .subscribe()
        .await
        .unwrap();
    let p = client
        .producer(&topic)
        .encryption_key("k")
        .crypto_key_reader(reader.clone())
        .create()
        .await
        .unwrap();
    p.send_and_wait(payload(7)).await.unwrap();
    for count in 0..2 {
        let m = recv(&mut c).await;
        assert_eq!(m.redelivery_count, count);
        assert_eq!(m.payload, payload(7), "delivery {count}: decrypted");
        assert!(m.encryption_context().is_none());
        c.nack(&m).unwrap();
    }
    wait_until("the dead letter is stored and the original acked", || {
        broker.topic_messages(&dlq) == 1 && broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
    assert_eq!(
        reader.calls.load(Ordering::SeqCst),
        2,
        "1 public + 1 private key lookup: the redelivery used the cached data key"
    );
    // On the wire: the plaintext, without encryption metadata.
    let letters = sends_to(&broker, &dlq);
    assert_eq!(letters.len(), 1);
    let (meta, data) = &letters[0];
    assert!(meta.encryption_keys.is_empty(), "{meta:?}");
    assert!(meta.encryption_param.is_none(), "{meta:?}");
    assert_eq!(&data[..], &payload(7)[..]);
    // The dead-letter topic's readers: with the private key, and without any key reader (the
    // default `Fail` would refuse an encrypted message).
    for (sub, key) in [("with-key", true), ("without-key", false)] {
        let mut b = consumer(&client, &dlq)
            .subscription(sub)
            .initial_position(InitialPosition::Earliest);
        if key {
            b = b.crypto_key_reader(MapReader::default().private("k", 0));
        }
        let mut d = b.subscribe().await.unwrap();
        let letter = recv(&mut d).await;
        assert_eq!(letter.payload, payload(7), "{sub}: the original plaintext");
        assert!(letter.encryption_context().is_none(), "{sub}");
        assert_eq!(
            letter.properties.get("REAL_TOPIC").map(String::as_str),
            Some(topic.as_str())
        );
    }
}

/// Under `Consume` the message is delivered still encrypted; upstream dead-letters what it
/// delivered, `message.getData()`: the ciphertext bytes, published as a new unencrypted
/// message, so the copy has neither the recipients' keys nor the IV (nothing on the
/// dead-letter topic can decrypt it; the original stays on its topic until acked).
#[tokio::test]
async fn under_consume_the_dead_letter_copy_is_the_ciphertext_without_its_keys_as_upstream() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-dlq-consume");
    let dlq = full("enc-dlq-consume-dead");
    let mut c = consumer(&client, &topic)
        .crypto_failure_action(ConsumerCryptoFailureAction::Consume)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(DeadLetterPolicy::new(1).dead_letter_topic(&dlq))
        .subscribe()
        .await
        .unwrap();
    encrypted_topic(&broker, &client, &topic).await;
    let mut delivered = None;
    for count in 0..2 {
        let m = recv(&mut c).await;
        assert_eq!(m.redelivery_count, count);
        assert!(m.encryption_context().is_some(), "delivered encrypted");
        assert_ne!(m.payload, payload(0));
        if let Some(first) = &delivered {
            assert_eq!(&m.payload, first, "the same ciphertext each time");
        }
        delivered = Some(m.payload.clone());
        c.nack(&m).unwrap();
    }
    let ciphertext = delivered.unwrap();
    wait_until("the dead letter is stored", || {
        broker.topic_messages(&dlq) == 1
    })
    .await;
    let letters = sends_to(&broker, &dlq);
    let (meta, data) = &letters[0];
    assert!(meta.encryption_keys.is_empty(), "{meta:?}");
    assert!(meta.encryption_param.is_none(), "{meta:?}");
    assert_eq!(&data[..], &ciphertext[..]);
    let mut d = consumer(&client, &dlq)
        .subscription("audit")
        .initial_position(InitialPosition::Earliest)
        .crypto_key_reader(MapReader::default().private("k", 0))
        .subscribe()
        .await
        .unwrap();
    let letter = recv(&mut d).await;
    assert_eq!(letter.payload, ciphertext);
    assert!(letter.encryption_context().is_none(), "no keys travelled");
}

/// An ack timeout redelivers an encrypted message, which is decrypted again.
#[tokio::test]
async fn an_ack_timeout_redelivers_an_encrypted_message_decrypted_again() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-ack-timeout");
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(MapReader::default().private("k", 0))
        .ack_timeout(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    encrypted_topic(&broker, &client, &topic).await;
    let first = recv(&mut c).await;
    assert_eq!(first.payload, payload(0));
    // Not acked: redelivered after the timeout.
    let again = recv(&mut c).await;
    assert_eq!(again.id, first.id);
    assert_eq!(again.redelivery_count, 1);
    assert_eq!(again.payload, payload(0), "decrypted again");
    c.ack(&again).unwrap();
}

/// Upstream `decryptPayloadIfNeeded` (FAIL) puts a message it cannot decrypt in the
/// `UnAckedMessageTracker`: with an ack timeout it is redelivered (and fails again), over and
/// over; it never reaches the dead-letter topic, since it is never delivered
/// (apache/pulsar#5807). Before, it stayed unacked until a reconnect.
#[tokio::test]
async fn fail_leaves_the_message_to_the_ack_timeout_and_never_dead_letters_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-fail-ack-timeout");
    let dlq = full("enc-fail-ack-timeout-dead");
    let mut c = consumer(&client, &topic)
        .ack_timeout(Duration::from_secs(1))
        .dead_letter_policy(DeadLetterPolicy::new(1).dead_letter_topic(&dlq))
        .subscribe()
        .await
        .unwrap();
    encrypted_topic(&broker, &client, &topic).await;
    let mut ids: Vec<MessageId> = Vec::new();
    // Three times: past the dead-letter policy's maximum.
    for round in 0..3 {
        let err = within("an undelivered message", c.recv())
            .await
            .expect_err("no key reader: not delivered");
        let Error::Crypto(CryptoError::Undelivered { id, cause }) = err else {
            panic!("round {round}: {err:?}");
        };
        assert!(matches!(*cause, CryptoError::NoKeyReader), "{cause:?}");
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    let redelivered = broker.received_of(Type::RedeliverUnacknowledgedMessages);
    assert!(redelivered.len() >= 2, "{redelivered:?}");
    assert!(
        redelivered.iter().all(|r| {
            r.command
                .redeliver_unacknowledged_messages
                .as_ref()
                .is_some_and(|x| x.message_ids.iter().any(|m| m.entry_id == ids[0].entry_id))
        }),
        "{redelivered:?}"
    );
    assert_eq!(broker.subscription_backlog(&topic, "s"), 1, "never acked");
    assert!(
        !broker.received_of(Type::Producer).iter().any(|r| r
            .command
            .producer
            .as_ref()
            .is_some_and(|p| p.topic == dlq)),
        "no dead-letter producer: nothing is dead-lettered"
    );
}

/// The sum of the permits the consumer granted.
pub(super) fn granted(broker: &MockBroker) -> u32 {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .sum()
}

/// Waits until the consumer has taken in everything the broker sent it and the broker has
/// seen every FLOW that caused: pushes an ActiveConsumerChange (which the consumer's task
/// handles in order with the messages before it), waits for it, then makes a request round
/// trip on the same connection, until no new permits were granted over one such round.
pub(super) async fn settle(
    broker: &MockBroker,
    conn: pulsar_sdk::mock::ConnectionId,
    consumer_id: u64,
    c: &pulsar_sdk::Consumer,
) {
    let active = c.active_updates();
    for round in 0..50 {
        let before = granted(broker);
        let is_active = round % 2 == 0;
        assert!(broker.push(
            conn,
            wire::BaseCommand {
                r#type: Type::ActiveConsumerChange as i32,
                active_consumer_change: Some(wire::CommandActiveConsumerChange {
                    consumer_id,
                    is_active: Some(is_active),
                }),
                ..Default::default()
            },
        ));
        wait_until("the probe is taken in", || {
            active.current() == Some(is_active)
        })
        .await;
        within("a round trip", c.last_message_ids()).await.unwrap();
        if granted(broker) == before {
            return;
        }
    }
    panic!("the consumer kept granting permits");
}

/// Two plain 400 KiB messages (the consumer learns their size), then 24 encrypted ones behind
/// a key reader that does not answer, into a consumer with a receiver queue of 1,000 and a
/// 2 MiB byte budget (a 4 MiB memory limit): what waits for the key counts in the budget, so
/// the broker is granted no more than the budget holds. Before, waiting entries were not
/// counted and each arrival was followed by another permit: all 24 (9.6 MB) were taken in.
/// Then the key comes and every message arrives, in order.
#[tokio::test]
async fn a_flood_behind_a_slow_key_reader_stays_within_the_budget() {
    const N: usize = 24;
    const SIZE: usize = 400 * 1024;
    let broker = MockBroker::start().await.unwrap();
    let topic = full("enc-key-wait-budget");
    let client = support::test_client(&broker.service_url())
        .memory_limit(4 * 1024 * 1024)
        .build()
        .unwrap();
    let body = |i: usize| {
        let mut body = vec![b'x'; SIZE];
        body[..4].copy_from_slice(&(i as u32).to_be_bytes());
        body
    };
    let plain = support::unbatched_producer(&client, &topic).await;
    for i in 0..2 {
        plain.send_and_wait(body(i)).await.unwrap();
    }
    plain.close().await.unwrap();
    let p = client
        .producer(&topic)
        .batching(false)
        .encryption_key("k")
        .crypto_key_reader(MapReader::default().public("k", 0))
        .create()
        .await
        .unwrap();
    for i in 2..N + 2 {
        p.send_and_wait(body(i)).await.unwrap();
    }
    p.close().await.unwrap();
    let gate = Arc::new(Notify::new());
    let reader = MapReader {
        gate: Some(gate.clone()),
        ..MapReader::default().private("k", 0)
    };
    let mut c = consumer(&client, &topic)
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1_000)
        .crypto_key_reader(reader.clone())
        .subscribe()
        .await
        .unwrap();
    for i in 0..2 {
        let m = recv(&mut c).await;
        assert_eq!(m.payload, body(i));
    }
    wait_until("the key reader is asked", || {
        reader.calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let subscribe = broker
        .received_of(Type::Subscribe)
        .into_iter()
        .next()
        .unwrap();
    let consumer_id = subscribe.command.subscribe.as_ref().unwrap().consumer_id;
    settle(&broker, subscribe.connection, consumer_id, &c).await;
    let waiting = granted(&broker);
    eprintln!("400 KiB messages, 2 MiB budget, key awaited: {waiting} permits granted");
    // The budget's worth waiting (2 MiB / 400 KiB = 5) besides the two plain ones, whatever
    // the receiver queue allows.
    assert!(
        (3..=9).contains(&waiting),
        "{waiting} permits granted while the key is awaited"
    );
    gate.notify_one();
    for i in 2..N + 2 {
        let m = recv(&mut c).await;
        assert_eq!(m.payload[..4], (i as u32).to_be_bytes(), "in order");
        assert_eq!(m.payload.len(), SIZE);
    }
}
