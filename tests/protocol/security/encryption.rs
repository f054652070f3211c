//! End-to-end encryption (PIP-4) against the mock broker: what goes on the wire (the broker
//! sees only ciphertext, one IV per SEND), several recipients, the consumer's failure actions,
//! a key reader that fails or is slow, tampered payloads, and encryption with batching,
//! compression and chunking.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use pulsar_sdk::crypto::{
    ConsumerCryptoFailureAction, CryptoError, CryptoKeyReader, EncryptionKeyInfo, PemFileKeyReader,
    ProducerCryptoFailureAction,
};
use pulsar_sdk::error::SourceError;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, MockBroker};
use pulsar_sdk::{
    Client, CompressionType, ConsumerBuilder, Error, ProducerMessage, SubscriptionType,
};
use support::{client, full, recv, within};
use tokio::sync::Notify;

/// Key pairs generated once per test binary (RSA generation is slow in debug builds).
pub(super) fn pair(i: usize) -> &'static (String, String) {
    static PAIRS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    &PAIRS.get_or_init(|| {
        (0..3)
            .map(|_| pulsar_sdk::crypto::testing::rsa_key_pair_pem(2048).unwrap())
            .collect()
    })[i]
}

/// A reader over in-memory keys by name, counting its calls; `gate`, when set, holds every
/// private-key answer until notified; `fail` makes it fail.
#[derive(Debug, Default, Clone)]
pub(super) struct MapReader {
    pub(super) public: BTreeMap<String, (String, BTreeMap<String, String>)>,
    pub(super) private: BTreeMap<String, String>,
    pub(super) calls: Arc<AtomicUsize>,
    pub(super) gate: Option<Arc<Notify>>,
    pub(super) fail: bool,
}

impl MapReader {
    pub(super) fn public(mut self, name: &str, pair: usize) -> Self {
        let mut meta = BTreeMap::new();
        meta.insert("version".to_string(), format!("v{pair}"));
        self.public
            .insert(name.into(), (self::pair(pair).0.clone(), meta));
        self
    }
    pub(super) fn private(mut self, name: &str, pair: usize) -> Self {
        self.private.insert(name.into(), self::pair(pair).1.clone());
        self
    }
}

fn missing(name: &str) -> SourceError {
    Arc::new(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("no key {name}"),
    ))
}

impl CryptoKeyReader for MapReader {
    fn public_key(
        &self,
        name: &str,
        _metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let found = self.public.get(name).cloned().filter(|_| !self.fail);
        let name = name.to_string();
        Box::pin(async move {
            let (pem, meta) = found.ok_or_else(|| missing(&name))?;
            let mut info = EncryptionKeyInfo::new(pem.into_bytes());
            info.metadata = meta;
            Ok(info)
        })
    }

    fn private_key(
        &self,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let found = self.private.get(name).cloned().filter(|_| !self.fail);
        let name = name.to_string();
        let gate = self.gate.clone();
        let meta = metadata.clone();
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.notified().await;
            }
            // The producer's key metadata comes with the message.
            assert!(meta.contains_key("version"), "{meta:?}");
            Ok(EncryptionKeyInfo::new(
                found.ok_or_else(|| missing(&name))?.into_bytes(),
            ))
        })
    }
}

pub(super) fn consumer(client: &Client, topic: &str) -> ConsumerBuilder {
    client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_group_time(Duration::ZERO)
}

pub(super) fn sends(broker: &MockBroker) -> Vec<(wire::MessageMetadata, bytes::Bytes)> {
    broker
        .received_of(Type::Send)
        .into_iter()
        .filter_map(|r| r.payload)
        .collect()
}

pub(super) fn payload(i: usize) -> Vec<u8> {
    let mut p = format!("secret-{i}-").into_bytes();
    p.extend_from_slice(&[0, 0xff, i as u8]);
    p
}

#[tokio::test]
async fn the_broker_sees_ciphertext_and_the_recipient_reads_the_messages() {
    for (batching, codec) in [
        (false, CompressionType::None),
        (true, CompressionType::None),
        (false, CompressionType::Lz4),
        (true, CompressionType::Lz4),
    ] {
        let broker = MockBroker::start().await.unwrap();
        let client = client(&broker.service_url());
        let topic = full("enc-round-trip");
        let reader = MapReader::default().public("k", 0).private("k", 0);
        let mut c = consumer(&client, &topic)
            .crypto_key_reader(reader.clone())
            .subscribe()
            .await
            .unwrap();
        let p = client
            .producer(&topic)
            .batching(batching)
            .compression(codec)
            .encryption_key("k")
            .crypto_key_reader(reader.clone())
            .create()
            .await
            .unwrap();
        let mut receipts = Vec::new();
        for i in 0..10 {
            let msg = ProducerMessage::new(payload(i))
                .key(format!("key-{i}"))
                .property("i", i.to_string());
            receipts.push(p.send(msg).await.unwrap());
        }
        futures::future::try_join_all(receipts).await.unwrap();
        let ctx = format!("batching={batching} {codec:?}");
        let wire = sends(&broker);
        assert!(!wire.is_empty(), "{ctx}");
        let mut ivs = std::collections::HashSet::new();
        for (meta, data) in &wire {
            assert_eq!(meta.encryption_keys.len(), 1, "{ctx}");
            assert_eq!(meta.encryption_keys[0].key, "k", "{ctx}");
            assert_eq!(
                meta.encryption_keys[0].value.len(),
                256,
                "{ctx}: RSA-2048 wrapped key"
            );
            assert_eq!(meta.encryption_keys[0].metadata[0].key, "version", "{ctx}");
            let iv = meta.encryption_param.clone().expect("an IV");
            assert_eq!(iv.len(), 12, "{ctx}");
            assert!(ivs.insert(iv), "{ctx}: every SEND has its own IV");
            for i in 0..10 {
                let needle = format!("secret-{i}-");
                assert!(
                    !data.windows(needle.len()).any(|w| w == needle.as_bytes()),
                    "{ctx}: plaintext on the wire"
                );
            }
        }
        for i in 0..10 {
            let m = recv(&mut c).await;
            assert_eq!(m.payload, payload(i), "{ctx} message {i}");
            assert_eq!(m.key.as_deref(), Some(format!("key-{i}").as_str()), "{ctx}");
            assert_eq!(m.properties.get("i"), Some(&i.to_string()), "{ctx}");
            assert!(m.encryption_context().is_none(), "{ctx}: decrypted");
        }
        // One private-key lookup for the producer's one data key, whatever the message count.
        assert_eq!(
            reader.calls.load(Ordering::SeqCst),
            2,
            "{ctx}: 1 public + 1 private"
        );
    }
}

#[tokio::test]
async fn every_recipient_decrypts_with_its_own_key() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-recipients");
    let producer_reader = MapReader::default().public("a", 0).public("b", 1);
    let mut ca = consumer(&client, &topic)
        .subscription("a")
        .crypto_key_reader(MapReader::default().private("a", 0))
        .subscribe()
        .await
        .unwrap();
    let mut cb = consumer(&client, &topic)
        .subscription("b")
        .crypto_key_reader(MapReader::default().private("b", 1))
        .subscribe()
        .await
        .unwrap();
    let p = client
        .producer(&topic)
        .encryption_key("a")
        .encryption_key("b")
        .crypto_key_reader(producer_reader)
        .create()
        .await
        .unwrap();
    p.send_and_wait(payload(1)).await.unwrap();
    let (meta, _) = sends(&broker).remove(0);
    let names: Vec<&str> = meta
        .encryption_keys
        .iter()
        .map(|k| k.key.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(recv(&mut ca).await.payload, payload(1));
    assert_eq!(recv(&mut cb).await.payload, payload(1));
}

pub(super) async fn encrypted_topic(broker: &MockBroker, client: &Client, topic: &str) {
    let p = client
        .producer(topic)
        .batching(false)
        .encryption_key("k")
        .crypto_key_reader(MapReader::default().public("k", 0))
        .create()
        .await
        .unwrap();
    p.send_and_wait(payload(0)).await.unwrap();
    let _ = broker;
}

#[tokio::test]
async fn fail_delivers_an_error_in_place_of_the_message_and_keeps_it_unacked() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    // No key reader; a reader without the key; a reader that fails.
    for (case, reader) in [
        ("no reader", None),
        ("wrong key", Some(MapReader::default().private("k", 1))),
        (
            "no such key",
            Some(MapReader::default().private("other", 0)),
        ),
        (
            "reader fails",
            Some(MapReader {
                fail: true,
                ..Default::default()
            }),
        ),
    ] {
        let topic = full(&format!("enc-fail-{}", case.replace(' ', "-")));
        let mut b = consumer(&client, &topic);
        if let Some(r) = reader {
            b = b.crypto_key_reader(r);
        }
        let mut c = b.subscribe().await.unwrap();
        encrypted_topic(&broker, &client, &topic).await;
        let err = within("recv", c.recv()).await.unwrap_err();
        let Error::Crypto(CryptoError::Undelivered { cause, .. }) = &err else {
            panic!("{case}: {err:?}");
        };
        match case {
            "no reader" => assert!(matches!(**cause, CryptoError::NoKeyReader), "{cause:?}"),
            "wrong key" => assert!(
                matches!(**cause, CryptoError::NoUsableKey { .. }),
                "{cause:?}"
            ),
            _ => assert!(
                matches!(**cause, CryptoError::KeyReader { .. }),
                "{case}: {cause:?}"
            ),
        }
        assert_eq!(
            broker.subscription_backlog(&topic, "s"),
            1,
            "{case}: not acked"
        );
    }
}

#[tokio::test]
async fn discard_acks_with_decryption_error_and_consume_delivers_ciphertext_with_its_context() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-discard");
    let mut c = consumer(&client, &topic)
        .crypto_failure_action(ConsumerCryptoFailureAction::Discard)
        .subscribe()
        .await
        .unwrap();
    encrypted_topic(&broker, &client, &topic).await;
    let plain = client.producer(&topic).create().await.unwrap();
    plain.send_and_wait(b"plain".to_vec()).await.unwrap();
    // The encrypted one is dropped; the plain one after it arrives.
    assert_eq!(recv(&mut c).await.payload, b"plain".to_vec());
    let acks = broker.received_of(Type::Ack);
    assert!(
        acks.iter()
            .any(|a| a.command.ack.as_ref().and_then(|a| a.validation_error)
                == Some(wire::command_ack::ValidationError::DecryptionError as i32)),
        "acked with DecryptionError: {acks:?}"
    );
    assert_eq!(c.discarded_entries(), 1);

    for batching in [false, true] {
        let topic = full(&format!("enc-consume-{batching}"));
        let mut c = consumer(&client, &topic)
            .crypto_failure_action(ConsumerCryptoFailureAction::Consume)
            .subscribe()
            .await
            .unwrap();
        let p = client
            .producer(&topic)
            .batching(batching)
            .compression(CompressionType::Lz4)
            .encryption_key("k")
            .crypto_key_reader(MapReader::default().public("k", 0))
            .create()
            .await
            .unwrap();
        let r1 = p.send(payload(1)).await.unwrap();
        let r2 = p.send(payload(2)).await.unwrap();
        futures::future::try_join_all([r1, r2]).await.unwrap();
        let m = recv(&mut c).await;
        let ctx = m
            .encryption_context()
            .expect("delivered encrypted, with its context");
        assert_eq!(ctx.keys.len(), 1);
        assert_eq!(ctx.keys[0].name, "k");
        assert_eq!(ctx.param.len(), 12);
        assert_eq!(ctx.compression, CompressionType::Lz4);
        assert_ne!(m.payload, payload(1));
        if batching {
            assert_eq!(ctx.batch_size, Some(2), "a batch is delivered whole");
        } else {
            assert_eq!(ctx.batch_size, None);
            assert!(recv(&mut c).await.encryption_context().is_some());
        }
    }
}

#[tokio::test]
async fn a_tampered_payload_fails_authentication() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let source = full("enc-tamper-source");
    encrypted_topic(&broker, &client, &source).await;
    let (meta, data) = sends(&broker).remove(0);
    let topic = full("enc-tampered");
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(MapReader::default().private("k", 0))
        .subscribe()
        .await
        .unwrap();
    let mut bad = data.to_vec();
    bad[3] ^= 0x40;
    broker
        .publish_raw(&topic, meta.clone(), bad.into())
        .unwrap();
    // The same message untouched decrypts (the key is now cached).
    broker.publish_raw(&topic, meta, data).unwrap();
    let err = within("recv", c.recv()).await.unwrap_err();
    assert!(
        matches!(&err, Error::Crypto(CryptoError::Undelivered { cause, .. }) if matches!(**cause, CryptoError::Tampered)),
        "{err:?}"
    );
    assert_eq!(recv(&mut c).await.payload, payload(0));
}

#[tokio::test]
async fn a_slow_key_reader_holds_later_messages_in_order_without_blocking_the_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-slow-reader");
    let gate = Arc::new(Notify::new());
    let reader = MapReader {
        gate: Some(gate.clone()),
        ..MapReader::default().private("k", 0)
    };
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(reader)
        .subscribe()
        .await
        .unwrap();
    let plain = client.producer(&topic).create().await.unwrap();
    plain.send_and_wait(b"before".to_vec()).await.unwrap();
    let before = recv(&mut c).await;
    encrypted_topic(&broker, &client, &topic).await;
    plain.send_and_wait(b"after".to_vec()).await.unwrap();
    // Nothing is delivered while the key is awaited: not even the plain message behind it.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c.recv())
            .await
            .is_err(),
        "delivered before the key came"
    );
    // The consumer's task still serves the application meanwhile: an ack goes out.
    c.ack(&before).unwrap();
    assert!(
        broker
            .wait_for_command(Type::Ack, Duration::from_secs(10))
            .await
            .is_some(),
        "the consumer task is blocked"
    );
    gate.notify_one();
    assert_eq!(recv(&mut c).await.payload, payload(0));
    assert_eq!(recv(&mut c).await.payload, b"after".to_vec());
}

#[tokio::test]
async fn producer_key_failures_fail_creation_unless_the_action_is_send() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-producer-fail");
    let err = client
        .producer(&topic)
        .encryption_key("nope")
        .crypto_key_reader(MapReader::default())
        .create()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Crypto(CryptoError::KeyReader { .. })),
        "{err:?}"
    );
    let err = client
        .producer(&topic)
        .encryption_key("k")
        .create()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    // EC keys are refused with their own error.
    let ec = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n";
    let dir = std::env::temp_dir().join(support::unique_name("ec-key"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ec.pem"), ec).unwrap();
    let err = client
        .producer(&topic)
        .encryption_key("k")
        .crypto_key_reader(PemFileKeyReader::public_only(dir.join("ec.pem")))
        .create()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Crypto(CryptoError::UnsupportedKey { kind: "EC", .. })
        ),
        "{err:?}"
    );
    // `Send`: created, and messages go unencrypted.
    let p = client
        .producer(&topic)
        .batching(false)
        .encryption_key("nope")
        .crypto_key_reader(MapReader::default())
        .crypto_failure_action(ProducerCryptoFailureAction::Send)
        .create()
        .await
        .unwrap();
    p.send_and_wait(b"clear".to_vec()).await.unwrap();
    let (meta, data) = sends(&broker).pop().unwrap();
    assert!(meta.encryption_keys.is_empty());
    assert_eq!(&data[..], b"clear");
}

#[tokio::test]
async fn each_chunk_is_encrypted_on_its_own_and_the_message_reassembles() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-chunks");
    let dir = std::env::temp_dir().join(support::unique_name("pem"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pub.pem"), &pair(2).0).unwrap();
    std::fs::write(dir.join("priv.pem"), &pair(2).1).unwrap();
    let reader = PemFileKeyReader::new(dir.join("pub.pem"), dir.join("priv.pem"));
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(reader.clone())
        .subscribe()
        .await
        .unwrap();
    let p = client
        .producer(&topic)
        .chunking(true)
        .chunk_max_message_size(2000)
        .compression(CompressionType::Zlib)
        .encryption_key("k")
        .crypto_key_reader(reader)
        .create()
        .await
        .unwrap();
    // Incompressible enough to need several chunks after zlib.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let big: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    p.send_and_wait(big.clone()).await.unwrap();
    let chunks = sends(&broker);
    assert!(chunks.len() > 2, "chunked: {}", chunks.len());
    let ivs: std::collections::HashSet<_> = chunks
        .iter()
        .map(|(m, _)| m.encryption_param.clone())
        .collect();
    assert_eq!(ivs.len(), chunks.len(), "one IV per chunk");
    for (meta, data) in &chunks {
        assert!(meta.chunk_id.is_some());
        assert_eq!(meta.encryption_keys.len(), 1);
        assert!(data.len() < 2000);
    }
    assert_eq!(recv(&mut c).await.payload, big);
}
