//! PIP-245: subscriptions on non-persistent topics are always non-durable; and non-persistent
//! topics work for producers, consumers and readers — against the mock broker and pulsar-lite.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, Error, InitialPosition, Message, SubscriptionMode, SubscriptionType};
use support::{shared_broker, unique_name};

/// Captures this thread's log output (tests run on a current-thread runtime, so every task of
/// the test logs here).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

const WARNING: &str = "a durable subscription was requested on a non-persistent topic";

async fn subscribe_with(
    client: &Client,
    topic: &str,
    sub: &str,
    mode: Option<SubscriptionMode>,
) -> pulsar_sdk::Consumer {
    let mut b = client
        .consumer(topic)
        .subscription(sub)
        .subscription_type(SubscriptionType::Shared);
    if let Some(mode) = mode {
        b = b.subscription_mode(mode);
    }
    b.subscribe().await.unwrap()
}

#[tokio::test]
async fn subscribe_on_non_persistent_always_sends_durable_false() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let topic = "non-persistent://public/default/np-modes";
    for (i, mode) in [
        None,
        Some(SubscriptionMode::NonDurable),
        Some(SubscriptionMode::Durable),
    ]
    .into_iter()
    .enumerate()
    {
        let (logs, _guard) = capture_logs();
        let sub = format!("sub-{i}");
        let consumer = subscribe_with(&client, topic, &sub, mode).await;
        let subscribes = broker.received_of(Type::Subscribe);
        let last = subscribes
            .last()
            .unwrap()
            .command
            .subscribe
            .clone()
            .unwrap();
        assert_eq!(last.subscription, sub);
        assert_eq!(
            last.durable,
            Some(false),
            "mode {mode:?}: durable=false on the wire"
        );
        let warnings = logs.text().matches(WARNING).count();
        match mode {
            Some(SubscriptionMode::Durable) => {
                assert_eq!(warnings, 1, "exactly one warning: {}", logs.text());
                let text = logs.text();
                assert!(
                    text.contains(topic) && text.contains(&sub),
                    "names topic and subscription: {text}"
                );
            }
            _ => assert_eq!(warnings, 0, "mode {mode:?}: no warning: {}", logs.text()),
        }
        consumer.close().await.unwrap();
    }
}

#[tokio::test]
async fn persistent_topics_stay_durable_by_default() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let (logs, _guard) = capture_logs();
    let c = subscribe_with(&client, "persistent://public/default/p", "s", None).await;
    let nd = subscribe_with(
        &client,
        "persistent://public/default/p2",
        "s",
        Some(SubscriptionMode::NonDurable),
    )
    .await;
    let subs = broker.received_of(Type::Subscribe);
    assert_eq!(
        subs[0].command.subscribe.as_ref().unwrap().durable,
        Some(true)
    );
    assert_eq!(
        subs[1].command.subscribe.as_ref().unwrap().durable,
        Some(false)
    );
    assert!(!logs.text().contains(WARNING));
    c.close().await.unwrap();
    nd.close().await.unwrap();
}

#[tokio::test]
async fn a_non_persistent_subscription_disappears_with_its_last_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let topic = "non-persistent://public/default/np-gone";
    let a = subscribe_with(&client, topic, "s", None).await;
    let b = subscribe_with(&client, topic, "s", None).await;
    assert_eq!(broker.subscriptions(topic), vec!["s".to_string()]);
    a.close().await.unwrap();
    assert_eq!(
        broker.subscriptions(topic),
        vec!["s".to_string()],
        "one consumer left"
    );
    b.close().await.unwrap();
    assert!(
        broker.subscriptions(topic).is_empty(),
        "gone with the last consumer"
    );
}

async fn recv(c: &mut pulsar_sdk::Consumer) -> Message {
    let m = tokio::time::timeout(Duration::from_secs(10), c.recv())
        .await
        .expect("a message within 10 s")
        .unwrap();
    c.ack(&m).unwrap();
    m
}

/// The same flow against any broker: messages sent while nobody is subscribed are dropped
/// (without errors or hangs), messages sent while subscribed arrive; seek is refused.
async fn produce_consume_flow(url: &str, topic: &str) {
    let client = Client::builder().service_url(url).build().unwrap();
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    // Nobody subscribed: the broker drops these; the sends still complete.
    for i in 0..3 {
        tokio::time::timeout(
            Duration::from_secs(10),
            producer.send_and_wait(format!("lost-{i}")),
        )
        .await
        .expect("no hang")
        .expect("no error");
    }
    let mut consumer = client
        .consumer(topic)
        .subscription(unique_name("np"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut sends = Vec::new();
    for i in 0..10 {
        sends.push(producer.send(format!("kept-{i}")).await.unwrap());
    }
    futures::future::try_join_all(sends).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(recv(&mut consumer).await.payload_str().unwrap().to_string());
    }
    got.sort();
    let mut expected: Vec<String> = (0..10).map(|i| format!("kept-{i}")).collect();
    expected.sort();
    assert_eq!(got, expected, "only messages sent while subscribed arrive");
    // Every message sent while subscribed is delivered, even when each is acked as it comes:
    // brokers give all of a non-persistent topic's messages the same id, so the client keeps
    // no ack state for them (upstream's no-op ack tracker) and filters none as a redelivery.
    let single = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..50 {
        single.send_and_wait(format!("each-{i}")).await.unwrap();
        let m = recv(&mut consumer).await;
        assert_eq!(m.payload_str(), Some(format!("each-{i}").as_str()));
        consumer.ack(&m).unwrap();
    }
    assert!(matches!(
        consumer.seek(pulsar_sdk::MessageId::new(0, 0, -1)).await,
        Err(Error::InvalidConfig(_))
    ));
    consumer.close().await.unwrap();
    single.close().await.unwrap();
    producer.close().await.unwrap();
}

#[tokio::test]
async fn non_persistent_produce_consume_on_the_mock() {
    let broker = MockBroker::start().await.unwrap();
    produce_consume_flow(
        &broker.service_url(),
        "non-persistent://public/default/np-flow",
    )
    .await;
    assert!(
        broker.received_of(Type::Ack).is_empty(),
        "no acks are sent for a non-persistent topic"
    );
    for s in broker.received_of(Type::Subscribe) {
        assert_eq!(s.command.subscribe.unwrap().durable, Some(false));
    }
}

#[tokio::test]
async fn non_persistent_produce_consume_on_pulsar_lite() {
    // pulsar-lite ignores durable=false (it keeps the subscription); the client still sends it
    // and everything works.
    let topic = format!("non-persistent://public/default/{}", unique_name("np"));
    produce_consume_flow(&shared_broker().url(), &topic).await;
}

#[tokio::test]
async fn partitioned_non_persistent_topics_work() {
    let broker = MockBroker::start().await.unwrap();
    let topic = "non-persistent://public/default/np-parts";
    broker.create_partitioned_topic(topic, 3);
    let client = Client::builder()
        .service_url(broker.service_url())
        .build()
        .unwrap();
    let mut consumer = subscribe_with(&client, topic, "s", None).await;
    assert_eq!(consumer.partitions(), 3);
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    assert_eq!(producer.partitions(), 3);
    let mut partitions = std::collections::BTreeSet::new();
    for i in 0..9 {
        producer.send_and_wait(format!("p{i}")).await.unwrap();
    }
    for _ in 0..9 {
        let m = recv(&mut consumer).await;
        partitions.insert(m.topic.to_string());
    }
    assert_eq!(
        partitions.len(),
        3,
        "messages came from every partition: {partitions:?}"
    );
    assert!(
        broker.received_of(Type::Ack).is_empty(),
        "no acks are sent for a non-persistent topic"
    );
    for s in broker.received_of(Type::Subscribe) {
        assert_eq!(s.command.subscribe.unwrap().durable, Some(false));
    }
}
