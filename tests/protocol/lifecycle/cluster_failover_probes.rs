//! Cluster failover (PIP-121) probes: what a reviewer tried to break. A switch to the cluster
//! in use under load, and a client dropped (or closed) while its provider runs.

use support as common;

use std::sync::Arc;
use std::time::Duration;

use pulsar_sdk::mock::MockBroker;

use super::cluster_failover::{read_all, WITHIN};
use pulsar_sdk::{
    AutoClusterFailover, Client, InitialPosition, ServiceInfo, ServiceInfoProvider,
    SubscriptionType,
};

/// Upstream's `PulsarClientImpl.updateServiceUrl` does not short-circuit a switch to the URL
/// in use: every connection closes and everything reconnects. Under a steady stream of sends
/// with a consumer attached, such a switch loses nothing: every receipt resolves, the topic
/// holds every message in the order sent (a re-send may repeat one, never reorder), and the
/// consumer, re-subscribed, gets every message.
#[tokio::test]
async fn a_switch_to_the_cluster_in_use_under_load_loses_nothing() {
    let a = MockBroker::start().await.unwrap();
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/same-cluster-switch";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    const N: usize = 200;
    let mut receipts = Vec::new();
    for i in 0..N {
        receipts.push(producer.send(format!("m{i:03}")).await.unwrap());
        if i == N / 2 {
            client
                .update_service_info(ServiceInfo::new(&a.service_url()).unwrap())
                .unwrap();
        }
    }
    for r in receipts {
        tokio::time::timeout(WITHIN, r).await.unwrap().unwrap();
    }
    assert_eq!(client.stats().cluster_switches, 1);
    assert_eq!(client.service_url().to_string(), a.service_url());

    let mut seen = std::collections::BTreeSet::new();
    let mut order = Vec::new();
    while seen.len() < N {
        let m = tokio::time::timeout(WITHIN, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {N} received", seen.len()))
            .unwrap();
        let p = String::from_utf8(m.payload.to_vec()).unwrap();
        consumer.ack(&m).unwrap();
        if seen.insert(p.clone()) {
            order.push(p);
        }
    }
    // The consumer attached across the switch got every message (a redelivered one may come
    // twice, and redelivery may reorder what it repeats).
    let expected: Vec<String> = (0..N).map(|i| format!("m{i:03}")).collect();
    order.sort();
    assert_eq!(order, expected);
    // The topic itself holds them in the order sent: a fresh exclusive subscription reads the
    // first occurrences in order.
    let mut check = client
        .consumer(topic)
        .subscription("check")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut firsts = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    while firsts.len() < N {
        let m = tokio::time::timeout(WITHIN, check.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {N} in the topic", firsts.len()))
            .unwrap();
        let p = String::from_utf8(m.payload.to_vec()).unwrap();
        if seen.insert(p.clone()) {
            firsts.push(p);
        }
    }
    assert_eq!(firsts, expected);
}

/// Whether the client's tasks let go of `provider` (the test holds the only reference left)
/// within a generous bound.
async fn released(provider: &Arc<dyn ServiceInfoProvider>) -> bool {
    for _ in 0..1500 {
        if Arc::strong_count(provider) == 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn auto(a: &MockBroker, b: &MockBroker) -> Arc<dyn ServiceInfoProvider> {
    Arc::new(
        AutoClusterFailover::builder()
            .primary(ServiceInfo::new(&a.service_url()).unwrap())
            .secondary(ServiceInfo::new(&b.service_url()).unwrap())
            .check_interval(Duration::from_millis(10))
            .build()
            .unwrap(),
    )
}

/// A client dropped without `close` (and with nothing else of it alive) ends its provider's
/// task: the provider is released, nothing keeps probing for a client that is gone.
#[tokio::test]
async fn dropping_the_client_ends_its_providers_task() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let provider = auto(&a, &b);
    let client = Client::builder()
        .service_info_provider_shared(provider.clone())
        .build()
        .unwrap();
    let producer = client
        .producer("persistent://public/default/dropped-client")
        .create()
        .await
        .unwrap();
    producer.send("x").await.unwrap().await.unwrap();
    assert!(Arc::strong_count(&provider) > 1, "the provider runs");
    drop(producer);
    drop(client);
    assert!(
        released(&provider).await,
        "the provider's task still runs after the client was dropped ({} holders)",
        Arc::strong_count(&provider)
    );
}

/// The same with `close`, while the producer is still held by the application.
#[tokio::test]
async fn closing_the_client_ends_its_providers_task() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let provider = auto(&a, &b);
    let client = Client::builder()
        .service_info_provider_shared(provider.clone())
        .build()
        .unwrap();
    let producer = client
        .producer("persistent://public/default/closed-client")
        .create()
        .await
        .unwrap();
    client.close().await.unwrap();
    assert!(
        released(&provider).await,
        "the provider's task still runs after close ({} holders)",
        Arc::strong_count(&provider)
    );
    drop(producer);
}

/// The controlled provider too, with a service that never answers (a request in flight when
/// the client goes).
#[cfg(feature = "controlled-failover")]
#[tokio::test]
async fn dropping_the_client_ends_a_controlled_providers_task_mid_request() {
    use pulsar_sdk::failover::ControlledClusterFailover;
    let a = MockBroker::start().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/cluster", listener.local_addr().unwrap());
    let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock); // never answered
            let _ = asked_tx.send(());
        }
    });
    let provider: Arc<dyn ServiceInfoProvider> = Arc::new(
        ControlledClusterFailover::builder(ServiceInfo::new(&a.service_url()).unwrap(), url)
            .check_interval(Duration::from_millis(10))
            .read_timeout(Duration::from_secs(3600))
            .build()
            .unwrap(),
    );
    let client = Client::builder()
        .service_info_provider_shared(provider.clone())
        .build()
        .unwrap();
    tokio::time::timeout(WITHIN, asked.recv()).await.unwrap();
    assert!(Arc::strong_count(&provider) > 1, "the provider runs");
    drop(client);
    assert!(
        released(&provider).await,
        "the provider's task still runs after the client was dropped ({} holders)",
        Arc::strong_count(&provider)
    );
}

/// The payloads stored on `broker`'s topic, in order (read with a client of its own).
async fn stored(broker: &MockBroker, topic: &str, n: usize) -> Vec<String> {
    let client = common::test_client(&broker.service_url()).build().unwrap();
    read_all(&client, topic, n).await
}

/// Switches back and forth (a, b, a, b) while a producer sends without waiting for receipts:
/// every receipt resolves; every message is stored on one cluster at least; on each cluster
/// the messages (first occurrences) come in the order sent.
#[tokio::test]
async fn switches_racing_with_sends_lose_nothing_and_keep_each_clusters_order() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/racing-switches";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    const N: usize = 400;
    let mut receipts = Vec::new();
    // The cluster in use, and how many messages it held when the client moved to it.
    let (mut on, mut held) = (&a, 0);
    for i in 0..N {
        receipts.push(producer.send(format!("m{i:03}")).await.unwrap());
        if i % 100 == 50 {
            // Each cluster stores some before the next switch; the rest are in flight.
            common::wait_until("the cluster in use stores messages", || {
                on.topic_messages(topic) > held
            })
            .await;
            on = if std::ptr::eq(on, &a) { &b } else { &a };
            held = on.topic_messages(topic);
            client
                .update_service_info(ServiceInfo::new(&on.service_url()).unwrap())
                .unwrap();
        }
    }
    for (i, r) in receipts.into_iter().enumerate() {
        tokio::time::timeout(WITHIN, r)
            .await
            .unwrap_or_else(|_| panic!("receipt of m{i:03} never came"))
            .unwrap_or_else(|e| panic!("m{i:03}: {e}"));
    }
    assert_eq!(client.stats().cluster_switches, 4);
    let (on_a, on_b) = (a.topic_messages(topic), b.topic_messages(topic));
    assert!(
        on_a > 0 && on_b > 0,
        "both clusters took messages: {on_a}, {on_b}"
    );
    let mut all = std::collections::BTreeSet::new();
    for (name, got) in [
        ("a", stored(&a, topic, on_a).await),
        ("b", stored(&b, topic, on_b).await),
    ] {
        let mut here = std::collections::BTreeSet::new();
        let firsts: Vec<String> = got.into_iter().filter(|p| here.insert(p.clone())).collect();
        all.extend(firsts.iter().cloned());
        let mut sorted = firsts.clone();
        sorted.sort();
        assert_eq!(firsts, sorted, "cluster {name} holds messages out of order");
    }
    let expected: std::collections::BTreeSet<String> = (0..N).map(|i| format!("m{i:03}")).collect();
    assert_eq!(all, expected, "messages lost");
}

/// A consumer moves with the new cluster's credentials: the second cluster refuses the first
/// one's token, and the consumer re-subscribes there and receives.
#[tokio::test]
async fn a_consumer_resubscribes_with_the_new_clusters_credentials() {
    use pulsar_sdk::mock::{MockAuth, MockBrokerConfig};
    let secured = |token: &'static str| MockBrokerConfig {
        auth: Some(MockAuth::token(move |t| t == token)),
        ..Default::default()
    };
    let a = MockBroker::start_with(secured("a-token")).await.unwrap();
    let b = MockBroker::start_with(secured("b-token")).await.unwrap();
    let client = common::test_client(&a.service_url())
        .auth_token("a-token")
        .build()
        .unwrap();
    let topic = "persistent://public/default/consumer-credentials";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    client
        .update_service_info(
            ServiceInfo::builder(b.service_url())
                .auth_token("b-token")
                .build()
                .unwrap(),
        )
        .unwrap();
    b.wait_for_commands(
        pulsar_sdk::mock::wire::base_command::Type::Subscribe,
        1,
        WITHIN,
    )
    .await
    .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    producer.send("on b").await.unwrap().await.unwrap();
    let m = tokio::time::timeout(WITHIN, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"on b");
    assert_eq!(a.topic_messages(topic), 0);
}

/// A reader resumes after the last message it handed out, by id, on the new cluster too, as
/// upstream's (Java `ConsumerImpl.connectionOpened` takes `clearReceiverQueue()`, the last
/// dequeued id, as the start of a non-durable subscription). Ids are per cluster: here the
/// reader read a0..a2 (entries 0..2) on `a`, and on `b` it goes on after entry 2, so b0..b2
/// are never read. The guide says so.
#[tokio::test]
async fn a_reader_resumes_after_its_last_id_on_the_new_cluster_as_upstream() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let topic = "persistent://public/default/reader-position";
    let on_b = common::test_client(&b.service_url()).build().unwrap();
    let pb = on_b.producer(topic).batching(false).create().await.unwrap();
    for i in 0..6 {
        pb.send(format!("b{i}")).await.unwrap().await.unwrap();
    }
    let client = common::test_client(&a.service_url()).build().unwrap();
    let pa = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        pa.send(format!("a{i}")).await.unwrap().await.unwrap();
    }
    let mut reader = client
        .reader(topic)
        .start_message_id(pulsar_sdk::MessageId::EARLIEST)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        let m = tokio::time::timeout(WITHIN, reader.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload, format!("a{i}").as_bytes());
    }
    client
        .update_service_info(ServiceInfo::new(&b.service_url()).unwrap())
        .unwrap();
    let m = tokio::time::timeout(WITHIN, reader.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"b3");
}

/// A one-shot HTTP server: answers every request with `reply` (head and body) and keeps the
/// request heads it got.
#[cfg(feature = "controlled-failover")]
async fn http_server(
    reply: impl Fn(u16) -> String + Send + Sync + 'static,
) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (kept, reply) = (heads.clone(), Arc::new(reply));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (kept, reply) = (kept.clone(), reply.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).into_owned());
                let _ = sock.write_all(reply(port).as_bytes()).await;
            });
        }
    });
    (port, heads)
}

/// The failover service redirects to another origin: the redirect is followed (at most 5,
/// never from https to http), the configured headers (a bearer token for the service) are not
/// sent there, and the answer found there is applied.
#[cfg(feature = "controlled-failover")]
#[tokio::test]
async fn a_controlled_providers_headers_never_follow_a_redirect_to_another_origin() {
    use pulsar_sdk::failover::ControlledClusterFailover;
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let answer = format!(r#"{{"serviceUrl":"{}"}}"#, b.service_url());
    let (other, other_heads) = http_server(move |_| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        )
    })
    .await;
    // "localhost" and "127.0.0.1" are different origins.
    let (first, first_heads) = http_server(move |_| {
        format!("HTTP/1.1 302 Found\r\nLocation: http://localhost:{other}/elsewhere\r\nContent-Length: 0\r\n\r\n")
    })
    .await;
    let provider = ControlledClusterFailover::builder(
        ServiceInfo::new(&a.service_url()).unwrap(),
        format!("http://127.0.0.1:{first}/cluster"),
    )
    .header("Authorization", "Bearer service-secret")
    .check_interval(Duration::from_millis(20))
    .build()
    .unwrap();
    let client = Client::builder()
        .service_info_provider(provider)
        .build()
        .unwrap();
    let mut updates = client.service_info_updates();
    let now = tokio::time::timeout(WITHIN, updates.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.service_url().to_string(), b.service_url());
    assert!(first_heads.lock().unwrap()[0].contains("Bearer service-secret"));
    let heads = other_heads.lock().unwrap().clone();
    assert!(!heads.is_empty());
    for head in heads {
        assert!(!head.contains("service-secret"), "{head}");
    }
}
