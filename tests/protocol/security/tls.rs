//! TLS against the mock broker listening with rustls and certificates generated at run time:
//! a trusted CA works (lookups follow `brokerServiceUrlTls`); an untrusted CA, a wrong host name
//! and an expired certificate are refused with distinct errors; a broker requiring a client
//! certificate refuses a client without one and accepts one with it; insecure mode works and
//! warns.

use support as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::certs::{fresh_dir, Ca, Pem};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTls};
use pulsar_sdk::{Client, ClientBuilder, Error, SubscriptionType, TlsFailure};

async fn tls_broker(tls: MockTls) -> MockBroker {
    MockBroker::start_with(MockBrokerConfig {
        tls: Some(tls),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn serve(pem: &Pem) -> MockTls {
    MockTls::new(pem.cert.clone(), pem.key.clone())
}

fn client(broker: &MockBroker) -> ClientBuilder {
    common::test_client(&broker.service_url()).connect_timeout(Duration::from_secs(5))
}

/// Produces one message and consumes it back over `client`.
async fn round_trip(client: &Client, topic: &str) {
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    producer.send("over tls").await.unwrap().await.unwrap();
    let msg = common::within("receive", consumer.recv()).await.unwrap();
    assert_eq!(msg.payload_str(), Some("over tls"));
    consumer.ack(&msg).unwrap();
}

/// The TLS failure a lookup over `client` ends with.
async fn tls_failure(client: &Client) -> TlsFailure {
    match client.lookup_topic("t").await {
        Err(Error::Tls { kind, source, .. }) => {
            assert!(source.is_some(), "the TLS error is kept as the source");
            kind
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[tokio::test]
async fn trusted_ca_works_and_lookups_follow_the_tls_url() {
    let dir = fresh_dir("tls-trusted");
    let ca = Ca::new(&dir, "ca");
    let broker = tls_broker(serve(&ca.local_server("server"))).await;
    assert!(broker.service_url().starts_with("pulsar+ssl://127.0.0.1:"));
    let client = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    let found = client.lookup_topic("t").await.unwrap();
    assert_eq!(found.logical_url.to_string(), broker.service_url());
    let lookup = broker.received_of(Type::Lookup);
    assert!(!lookup.is_empty());
    round_trip(&client, "persistent://public/default/tls-trusted").await;
    client.close().await.unwrap();
}

#[tokio::test]
async fn lookup_without_a_tls_url_fails_clearly() {
    let dir = fresh_dir("tls-no-url");
    let ca = Ca::new(&dir, "ca");
    let broker = tls_broker(serve(&ca.local_server("server"))).await;
    // The lookup names only a plain broker URL (as pulsar-lite does).
    broker.connect_lookups_to("pulsar://127.0.0.1:6650");
    let client = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    let err = client.lookup_topic("t").await.unwrap_err().to_string();
    assert!(err.contains("brokerServiceUrlTls"), "{err}");
}

#[tokio::test]
async fn untrusted_issuer_is_refused() {
    let dir = fresh_dir("tls-untrusted");
    let ca = Ca::new(&dir, "ca");
    let other = Ca::new(&dir, "other-ca");
    let broker = tls_broker(serve(&ca.local_server("server"))).await;
    let client = client(&broker)
        .tls_trust_certs_file_path(&other.pem.cert_path)
        .build()
        .unwrap();
    assert_eq!(tls_failure(&client).await, TlsFailure::UntrustedIssuer);
    let err = client.lookup_topic("t").await.unwrap_err().to_string();
    assert!(
        err.contains("not signed by a trusted certificate authority"),
        "{err}"
    );
}

#[tokio::test]
async fn wrong_hostname_is_refused_unless_verification_is_off() {
    let dir = fresh_dir("tls-hostname");
    let ca = Ca::new(&dir, "ca");
    let broker = tls_broker(serve(&ca.server("server", &["broker.example.com"]))).await;
    let strict = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    assert_eq!(tls_failure(&strict).await, TlsFailure::HostnameMismatch);

    let lax = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .tls_hostname_verification(false)
        .build()
        .unwrap();
    lax.lookup_topic("t").await.unwrap();

    // Verification off still checks the issuer.
    let other = Ca::new(&dir, "other-ca");
    let lax_untrusted = client(&broker)
        .tls_trust_certs_file_path(&other.pem.cert_path)
        .tls_hostname_verification(false)
        .build()
        .unwrap();
    assert_eq!(
        tls_failure(&lax_untrusted).await,
        TlsFailure::UntrustedIssuer
    );
}

#[tokio::test]
async fn expired_certificate_is_refused() {
    let dir = fresh_dir("tls-expired");
    let ca = Ca::new(&dir, "ca");
    let broker = tls_broker(serve(&ca.expired_server("server"))).await;
    let client = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    assert_eq!(tls_failure(&client).await, TlsFailure::CertificateExpired);
}

#[tokio::test]
async fn mutual_tls_required_refuses_a_client_without_certificate() {
    let dir = fresh_dir("tls-mtls");
    let ca = Ca::new(&dir, "ca");
    let broker =
        tls_broker(serve(&ca.local_server("server")).require_client_cert(ca.pem.cert.clone()))
            .await;

    let anonymous = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .build()
        .unwrap();
    assert_eq!(tls_failure(&anonymous).await, TlsFailure::RefusedByServer);

    let client_cert = ca.client("client");
    let authenticated = client(&broker)
        .tls_trust_certs_file_path(&ca.pem.cert_path)
        .auth_tls(&client_cert.cert_path, &client_cert.key_path)
        .build()
        .unwrap();
    round_trip(&authenticated, "persistent://public/default/tls-mtls").await;
    let connect = broker.received_of(Type::Connect);
    let c = connect.last().unwrap().command.connect.as_ref().unwrap();
    assert_eq!(c.auth_method_name.as_deref(), Some("tls"));
}

/// Collects what tracing writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn insecure_mode_accepts_any_certificate_and_warns() {
    let dir = fresh_dir("tls-insecure");
    let ca = Ca::new(&dir, "ca");
    let broker = tls_broker(serve(&ca.expired_server("server"))).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let client = tracing::subscriber::with_default(subscriber, || {
        client(&broker)
            .tls_allow_insecure_connection(true)
            .build()
            .unwrap()
    });
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("WARN") && logged.contains("NOT verified"),
        "{logged}"
    );
    round_trip(&client, "persistent://public/default/tls-insecure").await;
}
