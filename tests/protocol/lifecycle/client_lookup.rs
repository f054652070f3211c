//! Client-level lookup and connection-pool behaviour against the mock broker (loopback TCP).

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::{Client, Error, ServerError};

fn client(url: &str) -> Client {
    Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(5))
        .build()
        .expect("valid config")
}

#[tokio::test]
async fn lookup_connect_answers_the_broker_itself() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let found = client.lookup_topic("my-topic").await.unwrap();
    assert_eq!(found.logical_url.to_string(), broker.service_url());
    assert!(!found.proxied);
    // The topic name went out normalised.
    let sent = broker.received_of(Type::Lookup);
    assert_eq!(
        sent[0].command.lookup_topic.as_ref().unwrap().topic,
        "persistent://public/default/my-topic"
    );
}

#[tokio::test]
async fn lookup_follows_a_redirect_chain_between_brokers() {
    let owner = MockBroker::start().await.unwrap();
    let middle = MockBroker::start().await.unwrap();
    let entry = MockBroker::start().await.unwrap();
    entry.redirect_lookups_to(&middle.service_url(), false);
    middle.redirect_lookups_to(&owner.service_url(), true);
    let client = client(&entry.service_url());

    let found = client.lookup_topic("persistent://t/ns/x").await.unwrap();
    assert_eq!(found.logical_url.to_string(), owner.service_url());
    assert_eq!(entry.received_of(Type::Lookup).len(), 1);
    assert_eq!(middle.received_of(Type::Lookup).len(), 1);
    let last = owner.received_of(Type::Lookup);
    assert_eq!(last.len(), 1);
    // The authoritative flag of the redirect is carried into the next lookup.
    assert_eq!(
        last[0].command.lookup_topic.as_ref().unwrap().authoritative,
        Some(true)
    );
    assert_eq!(
        middle.received_of(Type::Lookup)[0]
            .command
            .lookup_topic
            .as_ref()
            .unwrap()
            .authoritative,
        Some(false)
    );
}

#[tokio::test]
async fn a_redirect_loop_is_bounded_with_a_clear_error() {
    let a = MockBroker::start().await.unwrap();
    let b = MockBroker::start().await.unwrap();
    a.redirect_lookups_to(&b.service_url(), false);
    b.redirect_lookups_to(&a.service_url(), false);
    let client = Client::builder()
        .service_url(a.service_url())
        .max_lookup_redirects(5)
        .build()
        .unwrap();
    match client.lookup_topic("loop").await {
        Err(Error::Lookup { topic, reason }) => {
            assert_eq!(topic, "persistent://public/default/loop");
            assert!(reason.contains("too many redirects"), "{reason}");
        }
        other => panic!("expected a lookup error, got {other:?}"),
    }
    // 1 initial lookup + 5 redirects followed, then the 6th redirect answer stops it.
    let total = a.received_of(Type::Lookup).len() + b.received_of(Type::Lookup).len();
    assert_eq!(total, 6);
    // One connection per broker, however many lookups went over it.
    assert_eq!(a.accepted_connections(), 1);
    assert_eq!(b.accepted_connections(), 1);
}

#[tokio::test]
async fn a_failed_lookup_carries_the_brokers_code_and_message() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_lookup_error(
        None,
        ServerError::ServiceNotReady,
        "namespace bundle unloading",
    );
    let client = client(&broker.service_url());
    match client.lookup_topic("t").await {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, ServerError::ServiceNotReady);
            assert_eq!(message, "namespace bundle unloading");
        }
        other => panic!("expected a broker error, got {other:?}"),
    }
}

#[tokio::test]
async fn partitioned_metadata_comes_from_the_broker() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partitions("persistent://public/default/orders", 3);
    let client = client(&broker.service_url());
    assert_eq!(
        client.partitioned_topic_metadata("orders").await.unwrap(),
        3
    );
    assert_eq!(client.partitioned_topic_metadata("other").await.unwrap(), 0);
    let partitions = client.partitions_for_topic("orders").await.unwrap();
    let names: Vec<String> = partitions.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        names,
        [
            "persistent://public/default/orders-partition-0",
            "persistent://public/default/orders-partition-1",
            "persistent://public/default/orders-partition-2",
        ]
    );
}

#[tokio::test]
async fn one_tcp_connection_per_broker_under_concurrency() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let mut tasks = Vec::new();
    for i in 0..32 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                c.lookup_topic(&format!("t-{i}")).await.map(|_| ())
            } else {
                c.partitioned_topic_metadata(&format!("t-{i}"))
                    .await
                    .map(|_| ())
            }
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(client.connections_opened(), 1);
    assert_eq!(broker.received_of(Type::Connect).len(), 1);
}

#[tokio::test]
async fn the_handshake_carries_feature_flags_both_ways() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        max_message_size: Some(1024 * 1024),
        supports_partition_update_watchers: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client(&broker.service_url());
    client.lookup_topic("t").await.unwrap();
    let connect = broker.received_of(Type::Connect);
    let c = connect[0].command.connect.as_ref().unwrap();
    assert_eq!(c.protocol_version, Some(pulsar_sdk::PROTOCOL_VERSION));
    let flags = c.feature_flags.as_ref().unwrap();
    assert_eq!(flags.supports_partition_update_watchers, Some(true));
    assert_eq!(flags.supports_auth_refresh, Some(true));
}

#[tokio::test]
async fn a_dropped_connection_is_replaced_on_the_next_request() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    client.lookup_topic("t").await.unwrap();
    broker.drop_all_connections();
    // The pool notices the closed connection and opens a new one.
    let mut result = client.lookup_topic("t").await;
    for _ in 0..50 {
        if result.is_ok() {
            break;
        }
        // A request racing the close may fail with ConnectionLost; a retry opens a new one.
        assert!(result.as_ref().unwrap_err().is_retriable());
        tokio::time::sleep(Duration::from_millis(20)).await;
        result = client.lookup_topic("t").await;
    }
    result.unwrap();
    assert_eq!(broker.accepted_connections(), 2);
}

#[tokio::test]
async fn invalid_topic_names_fail_before_anything_is_sent() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    for bad in ["", "a/b", "foo://t/n/x", "persistent://t/n/"] {
        assert!(
            matches!(
                client.lookup_topic(bad).await,
                Err(Error::InvalidTopicName { .. })
            ),
            "{bad:?} must be rejected"
        );
    }
    assert_eq!(broker.accepted_connections(), 0);
}

#[test]
fn bad_client_configuration_is_rejected() {
    assert!(matches!(
        Client::builder().build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Client::builder()
            .service_url("http://localhost:8080")
            .build(),
        Err(Error::InvalidServiceUrl { .. })
    ));
    assert!(matches!(
        Client::builder()
            .service_url("pulsar://localhost:6650")
            .operation_timeout(Duration::ZERO)
            .build(),
        Err(Error::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn connecting_to_a_closed_port_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = client(&format!("pulsar://127.0.0.1:{port}"));
    let err = client.lookup_topic("t").await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_retriable());
}

#[tokio::test]
async fn proxy_through_service_url_keeps_connecting_to_the_proxy() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let client = client(&proxy.service_url());
    let found = client.lookup_topic("behind-proxy").await.unwrap();
    assert!(found.proxied);
    assert_eq!(found.logical_url.to_string(), owner.service_url());
    assert_eq!(
        found.physical_address.to_string(),
        proxy.addr().to_string(),
        "the TCP connection goes to the proxy"
    );
    // A producer on that topic talks to the owner through the proxy: a second connection to
    // the proxy whose CONNECT names the owner, relayed by the proxy to the owner.
    let producer = client.producer("behind-proxy").create().await.unwrap();
    producer.send_and_wait("via proxy").await.unwrap();
    let connects = proxy.received_of(Type::Connect);
    assert_eq!(connects.len(), 2, "lookup connection + proxied connection");
    let proxied: Vec<_> = connects
        .iter()
        .filter_map(|c| c.command.connect.as_ref()?.proxy_to_broker_url.clone())
        .collect();
    // `host:port`, as Java `ClientCnx.setTargetBroker` writes it and the proxy requires (this
    // test asserted the URL `pulsar://host:port` before, which a real proxy refuses).
    assert_eq!(proxied, vec![owner.addr().to_string()]);
    // The owner is reached only through the proxy's relay: one connection, whose CONNECT
    // names no further broker, carrying the producer.
    assert_eq!(owner.accepted_connections(), 1);
    let at_owner = owner.received_of(Type::Connect);
    assert_eq!(
        at_owner[0]
            .command
            .connect
            .as_ref()
            .unwrap()
            .proxy_to_broker_url,
        None
    );
    assert_eq!(owner.received_of(Type::Producer).len(), 1);
}
