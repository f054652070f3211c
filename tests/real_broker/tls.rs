//! TLS through a real TLS server that no one here wrote: stunnel (Debian's `stunnel4`) in front
//! of pulsar-lite, with certificates generated at run time.
//!
//! The chain, and why: pulsar-lite speaks plain TCP only and its lookup answers carry just
//! `brokerServiceUrl` (the plain socket address), so a client on TLS cannot use them. In a real
//! deployment a Pulsar proxy or the brokers' own `brokerServiceUrlTls` fill that part; here the
//! mock broker plays the lookup service (over TLS too): it answers every lookup `Connect` to the
//! stunnel endpoint in `brokerServiceUrlTls` (`MockBroker::connect_lookups_to`). The client then
//! opens its TLS connection to stunnel, which forwards the bytes to pulsar-lite, and producers
//! and consumers run there (pulsar-lite serves any topic it is asked for). So every message
//! crosses stunnel's TLS, and the TLS handshake the client completes is OpenSSL's, not ours.
//!
//! Needs `stunnel4` (installed by `.ci/run`); without it the tests fail with that advice.

use std::time::Duration;

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTls};
use pulsar_sdk::{Client, ClientBuilder, Error, SubscriptionType, TlsFailure};
use support::certs::{fresh_dir, Ca};
use support::stunnel::Stunnel;

struct Chain {
    _broker: support::PulsarLite,
    stunnel: Stunnel,
    lookup: MockBroker,
    ca: Ca,
}

async fn chain(require_client_cert: bool) -> Chain {
    let dir = fresh_dir("real-tls");
    let ca = Ca::new(&dir, "ca");
    let server = ca.local_server("server");
    let broker = support::PulsarLite::start();
    let stunnel = Stunnel::start(
        &dir,
        &server.cert_path,
        &server.key_path,
        broker.port(),
        require_client_cert.then_some(ca.pem.cert_path.as_path()),
    );
    let lookup = MockBroker::start_with(MockBrokerConfig {
        tls: Some(MockTls::new(server.cert.clone(), server.key.clone())),
        ..Default::default()
    })
    .await
    .unwrap();
    lookup.connect_lookups_to(&stunnel.url());
    Chain {
        _broker: broker,
        stunnel,
        lookup,
        ca,
    }
}

fn client(chain: &Chain) -> ClientBuilder {
    Client::builder()
        .service_url(chain.lookup.service_url())
        .operation_timeout(Duration::from_secs(10))
        .tls_trust_certs_file_path(&chain.ca.pem.cert_path)
}

async fn produce_and_consume(client: &Client, n: usize) {
    let topic = format!(
        "persistent://public/default/{}",
        support::unique_name("real-tls")
    );
    let found = client.lookup_topic(&topic).await.unwrap();
    assert!(found.logical_url.is_tls());
    let mut consumer = client
        .consumer(&topic)
        .subscription(support::unique_name("s"))
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(&topic).create().await.unwrap();
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(producer.send(format!("secret-{i}")).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..n {
        let msg = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
            .await
            .expect("a message within 10 s")
            .unwrap();
        consumer.ack(&msg).unwrap();
        got.push(msg.payload_str().unwrap().to_owned());
    }
    got.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("secret-{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    client.close().await.unwrap();
}

#[tokio::test]
async fn produce_and_consume_through_stunnel() {
    let chain = chain(false).await;
    let client = client(&chain).build().unwrap();
    produce_and_consume(&client, 50).await;
    assert!(
        chain.stunnel.log().contains("connected remote server"),
        "the traffic went through stunnel: {}",
        chain.stunnel.log()
    );
}

#[tokio::test]
async fn client_certificate_through_stunnel() {
    let chain = chain(true).await;
    // Without a certificate: stunnel refuses the handshake.
    let anonymous = client(&chain).build().unwrap();
    let topic = format!(
        "persistent://public/default/{}",
        support::unique_name("mtls")
    );
    let err = anonymous.producer(&topic).create().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                kind: TlsFailure::RefusedByServer | TlsFailure::Handshake,
                ..
            }
        ),
        "{err:?}"
    );
    // With one: it works.
    let cert = chain.ca.client("client");
    let client = client(&chain)
        .tls_cert_file_path(&cert.cert_path)
        .tls_key_file_path(&cert.key_path)
        .build()
        .unwrap();
    produce_and_consume(&client, 20).await;
}

/// The `produce` and `consume` examples, run as a user would with `--url pulsar+ssl://…
/// --tls-trust-certs ca.pem`, through the chain above: every message crosses stunnel's TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_produce_and_consume_through_stunnel() {
    let chain = chain(false).await;
    let url = chain.lookup.service_url();
    assert!(url.starts_with("pulsar+ssl://"), "{url}");
    let ca = chain.ca.pem.cert_path.display().to_string();
    let topic = support::unique_name("real-tls-examples");
    let sub = support::unique_name("s");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["--url", url.as_str(), "--topic", topic.as_str()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(["--tls-trust-certs".to_string(), ca.clone()]);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    // The examples block; the lookup service (the mock) runs on this runtime meanwhile.
    let run = |name: &'static str, args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            support::examples::run(name, &args, Duration::from_secs(60))
        })
    };
    let consume = run(
        "consume",
        args(&[
            "--subscription",
            &sub,
            "--type",
            "shared",
            "--initial-position",
            "earliest",
            "--count",
            "20",
        ]),
    );
    let produced = run("produce", args(&["--count", "20"])).await.unwrap();
    assert_eq!(
        produced.code,
        Some(0),
        "produce failed:\nstdout: {}\nstderr: {}",
        produced.stdout,
        produced.stderr
    );
    let consumed = consume.await.unwrap();
    assert_eq!(
        consumed.code,
        Some(0),
        "consume failed:\nstdout: {}\nstderr: {}",
        consumed.stdout,
        consumed.stderr
    );
    assert!(
        chain.stunnel.log().contains("connected remote server"),
        "the traffic went through stunnel: {}",
        chain.stunnel.log()
    );
}
