//! End-to-end encryption (PIP-4) with the official client (pulsar-client 3.13, the C++ core's
//! `MessageCrypto`) through pulsar-lite, which stores and dispatches the encryption metadata
//! as given: what it encrypts we decrypt byte-identically, and the other way round —
//! unbatched and batched, compressed and not, chunked; and a consumer without the key does
//! what its failure action says, on both clients.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use pulsar_sdk::crypto::{ConsumerCryptoFailureAction, CryptoError, PemFileKeyReader};
use pulsar_sdk::{
    Client, CompressionType, Error, InitialPosition, ProducerMessage, SubscriptionType,
};
use support::official::{self, OfficialCrypto, OfficialMessage, ProduceOpts};
use support::{shared_broker, unique_name};

/// (public PEM, private PEM, another pair's private PEM), written once per test process.
fn keys() -> &'static (PathBuf, PathBuf, PathBuf) {
    static KEYS: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = std::env::temp_dir().join(unique_name("interop-keys"));
        std::fs::create_dir_all(&dir).unwrap();
        let (public, private) = pulsar_sdk::crypto::testing::rsa_key_pair_pem(2048).unwrap();
        let (_, other) = pulsar_sdk::crypto::testing::rsa_key_pair_pem(2048).unwrap();
        let paths = (
            dir.join("public.pem"),
            dir.join("private.pem"),
            dir.join("other-private.pem"),
        );
        std::fs::write(&paths.0, public).unwrap();
        std::fs::write(&paths.1, private).unwrap();
        std::fs::write(&paths.2, other).unwrap();
        paths
    })
}

fn official_crypto(private: &std::path::Path, failure_action: &str) -> OfficialCrypto {
    OfficialCrypto {
        public_key: keys().0.clone(),
        private_key: private.to_path_buf(),
        key_name: "interop-key".into(),
        failure_action: failure_action.into(),
    }
}

fn client() -> Client {
    Client::builder()
        .service_url(shared_broker().url())
        .build()
        .unwrap()
}

fn message(i: usize) -> Vec<u8> {
    let mut p = format!("encrypted-{i}-").into_bytes();
    p.extend_from_slice(&[0xff, 0x00, (i % 251) as u8]);
    p
}

/// Several chunks even compressed: half noise, half zeros (12 MB; pulsar-lite's limit is 5 MB).
fn big() -> Vec<u8> {
    let mut x: u64 = 88_172_645_463_325_252;
    let mut big: Vec<u8> = (0..6 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    big.resize(12 * 1024 * 1024, 0);
    big
}

const CASES: [(bool, &str, CompressionType); 5] = [
    (false, "none", CompressionType::None),
    (true, "none", CompressionType::None),
    (false, "lz4", CompressionType::Lz4),
    (true, "zlib", CompressionType::Zlib),
    (true, "zstd", CompressionType::Zstd),
];

#[tokio::test]
async fn we_decrypt_what_the_official_client_encrypts() {
    let client = client();
    for (batching, codec, _) in CASES {
        let topic = unique_name("from-official-encrypted");
        let messages: Vec<OfficialMessage> = (0..10)
            .map(|i| {
                let mut m = OfficialMessage::new(message(i));
                m.key = Some(format!("key-{i}"));
                m.properties.insert("i".into(), i.to_string());
                m
            })
            .collect();
        let opts = ProduceOpts {
            messages,
            batching,
            compression: codec.to_string(),
            encryption: Some(official_crypto(&keys().1, "fail")),
            ..Default::default()
        };
        official::produce_async(&shared_broker().url(), &topic, &opts)
            .await
            .unwrap_or_else(|e| panic!("official produce batching={batching} {codec}: {e}"));
        let mut consumer = client
            .consumer(&topic)
            .subscription(unique_name("sub"))
            .subscription_type(SubscriptionType::Shared)
            .initial_position(InitialPosition::Earliest)
            .crypto_key_reader(PemFileKeyReader::private_only(&keys().1))
            .subscribe()
            .await
            .unwrap();
        for i in 0..10 {
            let ctx = format!("batching={batching} {codec} message {i}");
            let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .unwrap_or_else(|_| panic!("{ctx}: timed out"))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(m.payload, message(i), "{ctx}");
            assert_eq!(m.key.as_deref(), Some(format!("key-{i}").as_str()), "{ctx}");
            assert_eq!(m.properties.get("i"), Some(&i.to_string()), "{ctx}");
            assert_eq!(m.id.batch_index >= 0, batching, "{ctx}: {}", m.id);
            consumer.ack(&m).unwrap();
        }
        consumer.close().await.unwrap();
    }
}

#[tokio::test]
async fn the_official_client_decrypts_what_we_encrypt() {
    let client = client();
    for (batching, _, codec) in CASES {
        let topic = unique_name("to-official-encrypted");
        let producer = client
            .producer(&topic)
            .batching(batching)
            .compression(codec)
            .encryption_key("interop-key")
            .crypto_key_reader(PemFileKeyReader::public_only(&keys().0))
            .create()
            .await
            .unwrap();
        let mut sends = Vec::new();
        for i in 0..10 {
            let msg = ProducerMessage::new(message(i))
                .key(format!("key-{i}"))
                .property("i", i.to_string());
            sends.push(producer.send(msg).await.unwrap());
        }
        futures::future::try_join_all(sends).await.unwrap();
        producer.close().await.unwrap();
        let got = official::consume_encrypted_async(
            &shared_broker().url(),
            &topic,
            &unique_name("sub"),
            10,
            Duration::from_secs(30),
            &official_crypto(&keys().1, "fail"),
        )
        .await
        .unwrap_or_else(|e| panic!("batching={batching} {codec}: {e}"));
        assert_eq!(got.len(), 10, "batching={batching} {codec}");
        for (i, m) in got.iter().enumerate() {
            let ctx = format!("batching={batching} {codec} message {i}");
            assert_eq!(m.payload, message(i), "{ctx}");
            assert_eq!(m.key.as_deref(), Some(format!("key-{i}").as_str()), "{ctx}");
            assert_eq!(m.properties.get("i"), Some(&i.to_string()), "{ctx}");
        }
    }
}

/// PIP-37 with encryption, both ways: each chunk is sealed on its own (its own IV) by the
/// sender and opened on its own before reassembly by the receiver (C++ `ProducerImpl`
/// encrypts per chunk, as Java's `serializeAndSendMessage`). Small "nudge" messages keep
/// pulsar-lite dispatching after the large entry (see `official_client.rs`).
#[tokio::test]
async fn chunked_encrypted_messages_cross_both_ways() {
    let client = client();
    let big = big();
    let payloads = [b"before".to_vec(), big.clone(), b"after".to_vec()];

    // Official -> us.
    let topic = unique_name("from-official-encrypted-chunked");
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("sub"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .crypto_key_reader(PemFileKeyReader::private_only(&keys().1))
        .subscribe()
        .await
        .unwrap();
    let opts = ProduceOpts {
        messages: payloads.iter().cloned().map(OfficialMessage::new).collect(),
        chunking: true,
        encryption: Some(official_crypto(&keys().1, "fail")),
        ..Default::default()
    };
    official::produce_async(&shared_broker().url(), &topic, &opts)
        .await
        .unwrap_or_else(|e| panic!("official encrypted chunked produce: {e}"));
    let nudges = support::nudge(&client, &topic).await;
    let mut i = 0;
    while i < payloads.len() {
        let m = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("message {i}: timed out"))
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        consumer.ack(&m).unwrap();
        if m.payload.starts_with(b"nudge-") {
            continue;
        }
        assert_eq!(
            m.payload.len(),
            payloads[i].len(),
            "from official, message {i}"
        );
        assert!(
            m.payload == payloads[i],
            "from official, message {i}: bytes differ"
        );
        i += 1;
    }
    nudges.abort();

    // Us -> official.
    let topic = unique_name("to-official-encrypted-chunked");
    let producer = client
        .producer(&topic)
        .chunking(true)
        .compression(CompressionType::Lz4)
        .encryption_key("interop-key")
        .crypto_key_reader(PemFileKeyReader::public_only(&keys().0))
        .create()
        .await
        .unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let id = producer.send_and_wait(p.clone()).await.unwrap();
        assert_eq!(id.is_chunked(), i == 1, "message {i}: {id}");
    }
    let (url, sub, crypto) = (
        shared_broker().url(),
        unique_name("sub"),
        official_crypto(&keys().1, "fail"),
    );
    let consume =
        official::consume_encrypted_async(&url, &topic, &sub, 3, Duration::from_secs(60), &crypto);
    let nudges = support::nudge(&client, &topic).await;
    let got = consume.await;
    nudges.abort();
    let got = got.unwrap_or_else(|e| panic!("official encrypted chunked consume: {e}"));
    assert_eq!(got.len(), 3);
    for (i, (m, want)) in got.iter().zip(&payloads).enumerate() {
        assert_eq!(
            m.payload.len(),
            want.len(),
            "to official, message {i}: length"
        );
        assert!(m.payload == *want, "to official, message {i}: bytes differ");
    }
}

async fn next(c: &mut pulsar_sdk::Consumer) -> pulsar_sdk::Result<pulsar_sdk::Message> {
    tokio::time::timeout(Duration::from_secs(30), c.recv())
        .await
        .expect("nothing arrived within 30 s")
}

/// A consumer holding the wrong private key, on each client, with each failure action: Fail
/// and Discard deliver only the plain message after the encrypted one (Discard acks the
/// encrypted one, Fail leaves it unacked), Consume delivers the ciphertext too.
#[tokio::test]
async fn without_the_key_each_client_does_what_its_failure_action_says() {
    let client = client();
    // Official producer, our consumer.
    let topic = unique_name("official-encrypted-no-key");
    let opts = ProduceOpts {
        messages: vec![OfficialMessage::new(message(1))],
        encryption: Some(official_crypto(&keys().1, "fail")),
        ..Default::default()
    };
    official::produce_async(&shared_broker().url(), &topic, &opts)
        .await
        .unwrap();
    let plain = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    plain.send_and_wait(b"plain".to_vec()).await.unwrap();
    for action in [
        ConsumerCryptoFailureAction::Fail,
        ConsumerCryptoFailureAction::Discard,
        ConsumerCryptoFailureAction::Consume,
    ] {
        let mut c = client
            .consumer(&topic)
            .subscription(unique_name("sub"))
            .subscription_type(SubscriptionType::Shared)
            .initial_position(InitialPosition::Earliest)
            .crypto_key_reader(PemFileKeyReader::private_only(&keys().2))
            .crypto_failure_action(action)
            .subscribe()
            .await
            .unwrap();
        match action {
            ConsumerCryptoFailureAction::Fail => {
                let err = next(&mut c).await.unwrap_err();
                assert!(
                    matches!(&err, Error::Crypto(CryptoError::Undelivered { cause, .. })
                        if matches!(**cause, CryptoError::NoUsableKey { .. })),
                    "{err:?}"
                );
            }
            ConsumerCryptoFailureAction::Consume => {
                let m = next(&mut c).await.unwrap();
                let ctx = m.encryption_context().expect("delivered encrypted");
                assert_eq!(ctx.keys[0].name, "interop-key");
                assert_eq!(ctx.param.len(), 12);
                assert_eq!(m.payload.len(), message(1).len() + 16, "ciphertext and tag");
                assert_ne!(m.payload, message(1));
            }
            _ => {}
        }
        assert_eq!(
            next(&mut c).await.unwrap().payload,
            b"plain".to_vec(),
            "{action:?}"
        );
        if action == ConsumerCryptoFailureAction::Discard {
            assert_eq!(c.discarded_entries(), 1);
        }
        c.close().await.unwrap();
    }

    // Our producer, the official consumer.
    let topic = unique_name("encrypted-to-official-no-key");
    let producer = client
        .producer(&topic)
        .batching(false)
        .encryption_key("interop-key")
        .crypto_key_reader(PemFileKeyReader::public_only(&keys().0))
        .create()
        .await
        .unwrap();
    producer.send_and_wait(message(2)).await.unwrap();
    plain.close().await.unwrap();
    let plain = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    plain.send_and_wait(b"plain".to_vec()).await.unwrap();
    for action in ["fail", "discard", "consume"] {
        let got = official::consume_encrypted_async(
            &shared_broker().url(),
            &topic,
            &unique_name("sub"),
            2,
            Duration::from_secs(8),
            &official_crypto(&keys().2, action),
        )
        .await
        .unwrap_or_else(|e| panic!("official {action}: {e}"));
        let payloads: Vec<&[u8]> = got.iter().map(|m| &m.payload[..]).collect();
        if action == "consume" {
            assert_eq!(payloads.len(), 2, "{action}: {payloads:?}");
            assert_eq!(
                payloads[0].len(),
                message(2).len() + 16,
                "ciphertext and tag"
            );
            assert_ne!(payloads[0], &message(2)[..]);
            assert_eq!(payloads[1], b"plain");
        } else {
            assert_eq!(payloads, [b"plain".as_slice()], "{action}");
        }
    }
}

/// The dead-letter copy of an encrypted message, on both clients: the official consumer (the
/// C++ core's `ConsumerImpl::processPossibleToDLQ`, which publishes `message.getData()` through
/// a dead-letter producer configured without crypto) and ours, each negatively acking an
/// encrypted message past a dead-letter policy's maximum (1), put it on the dead-letter topic
/// in clear: the other client, without any key, reads the original plaintext there.
#[tokio::test]
async fn both_clients_dead_letter_an_encrypted_message_in_clear() {
    let client = client();
    let url = shared_broker().url();
    let encrypted = |topic: String| {
        let client = client.clone();
        async move {
            let producer = client
                .producer(&topic)
                .encryption_key("interop-key")
                .crypto_key_reader(PemFileKeyReader::public_only(&keys().0))
                .create()
                .await
                .unwrap();
            producer
                .send_and_wait(ProducerMessage::new(message(7)).key("k7"))
                .await
                .unwrap();
            producer.close().await.unwrap();
        }
    };

    // The official consumer dead-letters; ours reads the dead-letter topic without a key.
    let topic = unique_name("enc-dlq-official");
    let dlq = unique_name("enc-dlq-official-dead");
    encrypted(topic.clone()).await;
    // Asks for more deliveries than come, so the consumer stays up (and nacking) until the
    // timeout: deliveries with redelivery counts 0 and 1, then the dead letter.
    let deliveries = official::nack_into_dead_letter_async(
        &url,
        &topic,
        &unique_name("sub"),
        3,
        Duration::from_secs(8),
        &official_crypto(&keys().1, "fail"),
        (1, &dlq),
    )
    .await
    .unwrap();
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    for (count, d) in deliveries.iter().enumerate() {
        assert_eq!(d.payload, message(7), "delivery {count}: decrypted");
        assert_eq!(d.redelivery_count, count as u32);
    }
    let mut reader = client
        .consumer(&dlq)
        .subscription(unique_name("audit"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let letter = tokio::time::timeout(Duration::from_secs(30), reader.recv())
        .await
        .expect("the official client's dead letter")
        .expect("readable without a key: in clear");
    assert_eq!(letter.payload, message(7));
    assert!(letter.encryption_context().is_none());
    assert_eq!(letter.key.as_deref(), Some("k7"));
    reader.close().await.unwrap();

    // Ours dead-letters; the official consumer reads it without a key.
    let topic = unique_name("enc-dlq-ours");
    let dlq = unique_name("enc-dlq-ours-dead");
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("sub"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(100))
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(1).dead_letter_topic(&dlq))
        .crypto_key_reader(PemFileKeyReader::private_only(&keys().1))
        .subscribe()
        .await
        .unwrap();
    encrypted(topic.clone()).await;
    for count in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("a delivery")
            .unwrap();
        assert_eq!(m.payload, message(7), "delivery {count}: decrypted");
        assert_eq!(m.redelivery_count, count);
        consumer.nack(&m).unwrap();
    }
    let got = official::consume_available_async(
        &url,
        &dlq,
        &unique_name("audit"),
        1,
        Duration::from_secs(30),
        "earliest",
        "shared",
    )
    .await
    .unwrap();
    assert_eq!(
        got.len(),
        1,
        "our dead letter, read by the official client without a key"
    );
    assert_eq!(got[0].payload, message(7));
    assert_eq!(got[0].key.as_deref(), Some("k7"));
    consumer.close().await.unwrap();
}
