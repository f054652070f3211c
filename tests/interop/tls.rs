//! Interop over TLS: the official Python client (C++ core, OpenSSL) connects with TLS to the
//! mock broker, validating its certificate and host name against a CA generated at run time,
//! and exchanges messages with this client. This proves the mock's TLS is standard TLS.
//!
//! The CA reaches `tests/interop/official.py` through `PULSAR_OFFICIAL_TLS_TRUST_CERTS` in the
//! children's environment (`official::trust_tls_ca`); `official.py` reads it only for a
//! `pulsar+ssl://` URL, so the other interop tests of this binary are not affected.

use std::time::Duration;

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTls};
use pulsar_sdk::{Client, InitialPosition, SubscriptionType};
use support::certs::{fresh_dir, Ca};
use support::official::{self, OfficialMessage, ProduceOpts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_speaks_tls_to_the_mock_broker() {
    let dir = fresh_dir("interop-tls");
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", &["localhost"]);
    let broker = MockBroker::start_with(MockBrokerConfig {
        tls: Some(
            MockTls::new(server.cert.clone(), server.key.clone()).advertised_host("localhost"),
        ),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = broker.service_url();
    assert!(url.starts_with("pulsar+ssl://localhost:"));
    official::trust_tls_ca(&ca.pem.cert_path);
    let topic = format!(
        "persistent://public/default/{}",
        support::unique_name("interop-tls")
    );

    // The official client produces over TLS ...
    let opts = ProduceOpts {
        messages: (0..5)
            .map(|i| OfficialMessage::new(format!("py-{i}")))
            .collect(),
        ..Default::default()
    };
    let (u, t) = (url.clone(), topic.clone());
    let ids = tokio::task::spawn_blocking(move || official::produce(&u, &t, &opts))
        .await
        .unwrap()
        .expect("the official client produced over TLS");
    assert_eq!(ids.len(), 5);

    // ... and this client reads it back over TLS.
    let client = Client::builder()
        .service_url(&url)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("rust")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    for i in 0..5 {
        let msg = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
            .await
            .expect("a message")
            .unwrap();
        assert_eq!(msg.payload_str(), Some(format!("py-{i}").as_str()));
        consumer.ack(&msg).unwrap();
    }

    // This client produces; the official client consumes over TLS.
    let producer = client.producer(&topic).create().await.unwrap();
    producer.send("from-rust").await.unwrap().await.unwrap();
    let (u, t) = (url.clone(), topic.clone());
    let got = tokio::task::spawn_blocking(move || {
        official::consume(
            &u,
            &t,
            "py",
            6,
            Duration::from_secs(20),
            "earliest",
            "shared",
        )
    })
    .await
    .unwrap()
    .expect("the official client consumed over TLS");
    assert_eq!(got.len(), 6);
    client.close().await.unwrap();
}
