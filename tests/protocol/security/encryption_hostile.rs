//! Encrypted messages a hostile or broken producer (or key store) makes, against the mock
//! broker: an IV of the wrong size or none, a ciphertext shorter than its tag, thousands of
//! recipients in `encryption_keys`, and a key reader that answers garbage instead of a key.
//! Each fails the message with a typed error (the default action, `Fail`), never a panic, and
//! the consumer goes on with the next message.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::future::BoxFuture;
use pulsar_sdk::crypto::{CryptoError, CryptoKeyReader, EncryptionKeyInfo};
use pulsar_sdk::error::SourceError;
use pulsar_sdk::mock::{wire, MockBroker};
use pulsar_sdk::Error;
use support::{client, full, recv, within};

use super::encryption::{consumer, encrypted_topic, pair, payload, sends, MapReader};
use super::encryption_redelivery::{granted, settle};

/// One message the producer encrypted for key "k" (pair 0): its metadata and ciphertext.
async fn sample(
    broker: &MockBroker,
    client: &pulsar_sdk::Client,
) -> (wire::MessageMetadata, Bytes) {
    encrypted_topic(broker, client, &full("enc-hostile-source")).await;
    sends(broker).pop().expect("the encrypted SEND")
}

/// The cause of the error item a consumer receives for a message it cannot decrypt.
async fn undelivered(c: &mut pulsar_sdk::Consumer) -> CryptoError {
    match within("recv", c.recv()).await {
        Err(Error::Crypto(CryptoError::Undelivered { cause, .. })) => *cause,
        other => panic!("expected an undelivered message, got {other:?}"),
    }
}

#[tokio::test]
async fn a_bad_iv_or_a_truncated_ciphertext_fails_the_message_and_the_next_one_decrypts() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (meta, data) = sample(&broker, &client).await;
    let topic = full("enc-hostile-iv");
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(MapReader::default().private("k", 0))
        .subscribe()
        .await
        .unwrap();
    let mut cases: Vec<(&str, wire::MessageMetadata, Bytes)> = Vec::new();
    for (what, iv) in [
        ("no IV", None),
        ("empty IV", Some(Bytes::new())),
        (
            "truncated IV",
            meta.encryption_param.clone().map(|iv| iv.slice(..11)),
        ),
        ("1 MiB IV", Some(Bytes::from(vec![7u8; 1 << 20]))),
    ] {
        let mut m = meta.clone();
        m.encryption_param = iv;
        cases.push((what, m, data.clone()));
    }
    let mut other_iv = meta.clone();
    let mut iv = other_iv.encryption_param.clone().unwrap().to_vec();
    iv[0] ^= 1;
    other_iv.encryption_param = Some(iv.into());
    cases.push(("altered IV", other_iv, data.clone()));
    cases.push(("empty ciphertext", meta.clone(), Bytes::new()));
    cases.push((
        "ciphertext shorter than its tag",
        meta.clone(),
        data.slice(..15),
    ));
    cases.push((
        "ciphertext without its tag",
        meta.clone(),
        data.slice(..data.len() - 16),
    ));
    for (_, m, d) in &cases {
        broker.publish_raw(&topic, m.clone(), d.clone()).unwrap();
    }
    broker.publish_raw(&topic, meta, data).unwrap();
    for (what, _, _) in &cases {
        let cause = undelivered(&mut c).await;
        match *what {
            "altered IV"
            | "empty ciphertext"
            | "ciphertext shorter than its tag"
            | "ciphertext without its tag" => {
                assert!(matches!(cause, CryptoError::Tampered), "{what}: {cause:?}")
            }
            _ => assert!(
                matches!(cause, CryptoError::UnsupportedAlgorithm(_)),
                "{what}: {cause:?}"
            ),
        }
    }
    assert_eq!(recv(&mut c).await.payload, payload(0), "the intact message");
}

/// A producer may list any number of recipients; a consumer tries a bounded number of them
/// (each costs a key-reader call and an RSA decryption), so a message listing thousands of
/// bogus data keys under the consumer's own key name costs no more than that bound, and its
/// error does not carry thousands of names. Before, all 3,000 were tried (3,000 reader calls
/// and RSA decryptions for one message).
#[tokio::test]
async fn thousands_of_recipients_are_tried_up_to_a_bound() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (meta, data) = sample(&broker, &client).await;
    let topic = full("enc-hostile-keys");
    let reader = MapReader::default().private("k", 0);
    let calls = reader.calls.clone();
    let mut c = consumer(&client, &topic)
        .crypto_key_reader(reader)
        .subscribe()
        .await
        .unwrap();
    let genuine = meta.encryption_keys[0].clone();
    let mut hostile = meta.clone();
    hostile.encryption_keys = (0..3000u32)
        .map(|i| {
            let mut k = genuine.clone();
            let mut v = k.value.to_vec();
            v[..4].copy_from_slice(&i.to_be_bytes());
            k.value = v.into();
            k
        })
        .collect();
    // The genuine data key last: past the bound, never reached.
    hostile.encryption_keys.push(genuine);
    broker.publish_raw(&topic, hostile, data.clone()).unwrap();
    broker.publish_raw(&topic, meta, data).unwrap();
    let cause = undelivered(&mut c).await;
    let CryptoError::NoUsableKey { keys } = &cause else {
        panic!("{cause:?}");
    };
    assert!(keys.len() <= 64, "{} names in the error", keys.len());
    assert_eq!(recv(&mut c).await.payload, payload(0), "the next message");
    // The genuine message's own data key is its first: one lookup.
    let tried = calls.load(Ordering::SeqCst) - 1;
    assert!(tried <= 64, "{tried} private-key lookups for one message");
}

/// A key reader answering with whatever it has instead of a usable private key.
#[derive(Debug)]
struct Answers(Vec<u8>);

impl CryptoKeyReader for Answers {
    fn public_key(
        &self,
        _: &str,
        _: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        unreachable!("a consumer asks for private keys only")
    }

    fn private_key(
        &self,
        _: &str,
        _: &BTreeMap<String, String>,
    ) -> BoxFuture<'_, Result<EncryptionKeyInfo, SourceError>> {
        let key = self.0.clone();
        Box::pin(async move { Ok(EncryptionKeyInfo::new(key)) })
    }
}

/// Garbage from the key reader is an `InvalidKey` (or `UnsupportedKey` for EC) error naming
/// the key, never a panic, and its message never quotes the key's text: a PEM whose BEGIN
/// line lacks its closing dashes used to be quoted whole (its base64 body) as the "label".
#[tokio::test]
async fn garbage_from_the_key_reader_is_a_typed_error_without_key_material() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (meta, data) = sample(&broker, &client).await;
    let good = pair(0).1.clone();
    let body: String = good.lines().filter(|l| !l.starts_with("-----")).collect();
    let secret_line = good.lines().nth(3).unwrap().to_string();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("not a key", b"hello".to_vec()),
        ("binary", vec![0xff; 4096]),
        ("half a PEM", good.as_bytes()[..good.len() / 2].to_vec()),
        (
            "bad base64",
            b"-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n".to_vec(),
        ),
        (
            "BEGIN line without its dashes",
            format!("-----BEGIN PRIVATE KEY\n{body}\n-----END PRIVATE KEY-----\n").into_bytes(),
        ),
        ("a public key", pair(0).0.clone().into_bytes()),
        ("another pair's key in DER", {
            use base64::Engine as _;
            let other: String = pair(1)
                .1
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(other)
                .unwrap()
        }),
        (
            "EC",
            b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n".to_vec(),
        ),
    ];
    for (i, (what, key)) in cases.into_iter().enumerate() {
        let topic = full(&format!("enc-hostile-pem-{i}"));
        let mut c = consumer(&client, &topic)
            .crypto_key_reader(Answers(key))
            .subscribe()
            .await
            .unwrap();
        broker
            .publish_raw(&topic, meta.clone(), data.clone())
            .unwrap();
        let cause = undelivered(&mut c).await;
        match what {
            "EC" => assert!(
                matches!(cause, CryptoError::UnsupportedKey { kind: "EC", .. }),
                "{what}: {cause:?}"
            ),
            "another pair's key in DER" => assert!(
                matches!(cause, CryptoError::NoUsableKey { .. }),
                "{what}: {cause:?}"
            ),
            _ => assert!(
                matches!(cause, CryptoError::InvalidKey { .. }),
                "{what}: {cause:?}"
            ),
        }
        let shown = format!("{cause} {cause:?}");
        assert!(
            !shown.contains(&secret_line),
            "{what}: key text in `{shown}`"
        );
        c.close().await.unwrap();
    }
}

/// Under `Consume` a message keeps its encryption context, every recipient's data key and
/// metadata, and a hostile producer can list tens of thousands in a message whose payload is
/// a few bytes. The consumer's byte budget counts what the context holds: with a 2 MiB budget
/// (4 MiB memory limit) and a receiver queue of 1,000, messages each carrying ~20,000 data
/// keys (~600 KB of metadata, several MB in memory) are taken in only as the budget allows.
/// Before, the context was not counted: each message counted as its 28-byte payload and the
/// consumer granted permits for all 40.
#[tokio::test]
async fn consume_counts_the_encryption_context_in_the_byte_budget() {
    const N: usize = 40;
    let broker = MockBroker::start().await.unwrap();
    let client = support::test_client(&broker.service_url())
        .memory_limit(4 * 1024 * 1024)
        .build()
        .unwrap();
    let (meta, data) = sample(&broker, &client).await;
    let topic = full("enc-hostile-consume-context");
    let mut c = consumer(&client, &topic)
        .receiver_queue_size(1_000)
        .crypto_failure_action(pulsar_sdk::crypto::ConsumerCryptoFailureAction::Consume)
        .subscribe()
        .await
        .unwrap();
    let mut hostile = meta.clone();
    let one = meta.encryption_keys[0].clone();
    hostile.encryption_keys = (0..20_000u32)
        .map(|i| wire::EncryptionKeys {
            key: format!("k{i}"),
            value: Bytes::copy_from_slice(&i.to_be_bytes()),
            metadata: one.metadata.clone(),
        })
        .collect();
    for _ in 0..N {
        broker
            .publish_raw(&topic, hostile.clone(), data.clone())
            .unwrap();
    }
    // The first arrives (delivered as is: no key reader), with its whole context.
    let m = recv(&mut c).await;
    assert_eq!(m.encryption_context().unwrap().keys.len(), 20_000);
    // Then the consumer holds what its budget allows; the broker sees every FLOW it causes.
    let subscribe = broker
        .received_of(wire::base_command::Type::Subscribe)
        .into_iter()
        .find(|r| r.command.subscribe.as_ref().unwrap().topic == topic)
        .unwrap();
    let consumer_id = subscribe.command.subscribe.as_ref().unwrap().consumer_id;
    settle(&broker, subscribe.connection, consumer_id, &c).await;
    let last = granted(&broker);
    eprintln!("20,000-recipient contexts, 2 MiB budget: {last} permits granted");
    assert!(
        last < 20,
        "{last} permits granted for messages holding megabytes each"
    );
    drop(m);
    for _ in 1..N {
        assert!(recv(&mut c).await.encryption_context().is_some());
    }
}

/// A reader decrypts with its key reader as a consumer does, and without one it follows its
/// failure action (here `Consume`: the ciphertext with its context).
#[tokio::test]
async fn a_reader_decrypts_and_follows_its_failure_action() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("enc-reader");
    encrypted_topic(&broker, &client, &topic).await;
    let mut reader = client
        .reader(&topic)
        .start_earliest()
        .crypto_key_reader(MapReader::default().private("k", 0))
        .create()
        .await
        .unwrap();
    let m = within("read", reader.recv()).await.unwrap();
    assert_eq!(m.payload, payload(0));
    assert!(m.encryption_context().is_none());
    let mut blind = client
        .reader(&topic)
        .start_earliest()
        .crypto_failure_action(pulsar_sdk::crypto::ConsumerCryptoFailureAction::Consume)
        .create()
        .await
        .unwrap();
    let m = within("read", blind.recv()).await.unwrap();
    assert_ne!(m.payload, payload(0));
    assert_eq!(m.encryption_context().unwrap().keys[0].name, "k");
}
