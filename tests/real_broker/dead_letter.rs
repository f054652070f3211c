//! PIP-124: dead-letter and retry topics, with the initial subscription — against the mock
//! broker, pulsar-lite, and read back by the official client.

use common::client;
use support as common;

use std::collections::BTreeMap;
use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{
    Client, Consumer, DeadLetterPolicy, InitialPosition, Message, ProducerMessage, SubscriptionType,
};
use support::{official, shared_broker, unique_name};

const WAIT: Duration = Duration::from_secs(20);

async fn poison_consumer(
    client: &Client,
    topic: &str,
    sub: &str,
    policy: DeadLetterPolicy,
) -> Consumer {
    client
        .consumer(topic)
        .subscription(sub)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(100))
        .dead_letter_policy(policy)
        .subscribe()
        .await
        .unwrap()
}

/// Receives and negatively acks until nothing arrives for `quiet`; returns the redelivery
/// counts seen per payload.
async fn nack_everything(consumer: &mut Consumer, quiet: Duration) -> BTreeMap<String, Vec<u32>> {
    let mut seen: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    while let Ok(m) = tokio::time::timeout(quiet, consumer.recv()).await {
        let m = m.unwrap();
        seen.entry(m.payload_str().unwrap().to_string())
            .or_default()
            .push(m.redelivery_count);
        consumer.nack(&m).unwrap();
    }
    seen
}

async fn read_all(client: &Client, topic: &str, n: usize) -> Vec<Message> {
    let mut reader = client
        .reader(topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            tokio::time::timeout(WAIT, reader.recv())
                .await
                .expect("dead-lettered message readable")
                .unwrap(),
        );
    }
    out
}

fn check_letter(m: &Message, original_topic: &str, sub: &str, payload: &str) {
    assert_eq!(m.payload_str(), Some(payload));
    assert_eq!(m.key.as_deref(), Some("poison-key"));
    assert_eq!(m.event_time, Some(1_234));
    assert_eq!(m.properties.get("app").map(String::as_str), Some("value"));
    assert_eq!(
        m.properties.get("REAL_TOPIC").map(String::as_str),
        Some(original_topic)
    );
    assert_eq!(
        m.properties.get("REAL_SUBSCRIPTION").map(String::as_str),
        Some(sub)
    );
    let origin = m.properties.get("ORIGIN_MESSAGE_ID").expect("origin id");
    assert!(origin.parse::<pulsar_sdk::MessageId>().is_ok(), "{origin}");
}

fn poison(payload: &str) -> ProducerMessage {
    ProducerMessage::new(payload.to_string())
        .key("poison-key")
        .property("app", "value")
        .event_time(1_234)
}

#[tokio::test]
async fn a_poison_message_is_dead_lettered_once_after_max_plus_one_deliveries() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/poison";
    let sub = "work";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait(poison("p-0")).await.unwrap();
    let policy = DeadLetterPolicy::new(3).initial_subscription_name("dlq-audit");
    let mut consumer = poison_consumer(&client, topic, sub, policy).await;
    let dlq_topic = consumer.dead_letter_topic().unwrap().to_string();
    assert_eq!(dlq_topic, "persistent://public/default/poison-work-DLQ");

    let seen = nack_everything(&mut consumer, Duration::from_secs(2)).await;
    assert_eq!(
        seen["p-0"],
        vec![0, 1, 2, 3],
        "delivered max+1 times, counts 0..=max"
    );

    // Exactly once in the DLQ, with the right properties, retained for the initial
    // subscription although nobody ever subscribed to it.
    assert_eq!(broker.topic_messages(&dlq_topic), 1);
    assert_eq!(
        broker.subscriptions(&dlq_topic),
        vec!["dlq-audit".to_string()]
    );
    assert_eq!(broker.subscription_backlog(&dlq_topic, "dlq-audit"), 1);
    let letters = read_all(&client, &dlq_topic, 1).await;
    check_letter(&letters[0], topic, sub, "p-0");
    // The dead-letter producer asked for the initial subscription (field 13), no batching.
    let creates: Vec<_> = broker
        .received_of(Type::Producer)
        .into_iter()
        .filter_map(|r| r.command.producer)
        .filter(|p| p.topic == dlq_topic)
        .collect();
    assert_eq!(creates.len(), 1);
    assert_eq!(
        creates[0].initial_subscription_name.as_deref(),
        Some("dlq-audit")
    );
    // Only then was the original acked: nothing left on the original subscription.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(broker.subscription_backlog(topic, sub), 0);
    consumer.close().await.unwrap();
}

#[tokio::test]
async fn without_an_initial_subscription_none_is_requested() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/poison-plain";
    client
        .producer(topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("x"))
        .await
        .unwrap();
    let mut consumer = poison_consumer(&client, topic, "s", DeadLetterPolicy::new(1)).await;
    let seen = nack_everything(&mut consumer, Duration::from_secs(2)).await;
    assert_eq!(seen["x"], vec![0, 1]);
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    assert_eq!(broker.topic_messages(&dlq), 1);
    assert!(broker.subscriptions(&dlq).is_empty());
    let create = broker
        .received_of(Type::Producer)
        .into_iter()
        .filter_map(|r| r.command.producer)
        .find(|p| p.topic == dlq)
        .unwrap();
    assert_eq!(
        create.initial_subscription_name, None,
        "field 13 only when set"
    );
}

#[tokio::test]
async fn a_failed_dead_letter_publish_loses_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/poison-stuck";
    client
        .producer(topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("keep-me"))
        .await
        .unwrap();
    // The dead-letter topic lives in a namespace that refuses new topics.
    broker.create_namespace("acme/closed").unwrap();
    broker.terminate_namespace("acme/closed").unwrap();
    let policy = DeadLetterPolicy::new(1).dead_letter_topic("persistent://acme/closed/dlq");
    let mut consumer = poison_consumer(&client, topic, "s", policy).await;
    let seen = nack_everything(&mut consumer, Duration::from_secs(2)).await;
    assert!(seen["keep-me"].len() >= 2, "{seen:?}");
    // Not acked: still on the subscription, and delivered again to a new consumer.
    assert_eq!(broker.subscription_backlog(topic, "s"), 1);
    consumer.close().await.unwrap();
    let mut again = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, again.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload_str(), Some("keep-me"));
}

#[tokio::test]
async fn reconsume_later_goes_through_the_retry_topic_then_the_dlq() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/retry-me";
    client
        .producer(topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("r"))
        .await
        .unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(2))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let mut reconsume_times = Vec::new();
    for _ in 0..3 {
        let m = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload_str(), Some("r"));
        reconsume_times.push(m.properties.get("RECONSUMETIMES").cloned());
        consumer
            .reconsume_later(&m, Duration::from_millis(200))
            .await
            .unwrap();
    }
    assert_eq!(
        reconsume_times,
        vec![None, Some("1".to_string()), Some("2".to_string())]
    );
    // The third reconsume is past the maximum (2): it went to the DLQ instead.
    let dlq = "persistent://public/default/retry-me-s-DLQ";
    let retry = "persistent://public/default/retry-me-s-RETRY";
    assert_eq!(broker.topic_messages(retry), 2);
    assert_eq!(broker.topic_messages(dlq), 1);
    let letter = &read_all(&client, dlq, 1).await[0];
    assert_eq!(letter.payload_str(), Some("r"));
    assert_eq!(
        letter.properties.get("REAL_TOPIC").map(String::as_str),
        Some(topic)
    );
    // Retries carried DELAY_TIME and a deliver-at time.
    let sends: Vec<_> = broker
        .received_of(Type::Send)
        .into_iter()
        .filter_map(|r| r.payload.map(|(meta, _)| meta))
        .filter(|m| m.deliver_at_time.is_some())
        .collect();
    // The two retries are delayed and carry DELAY_TIME (the dead letter copies the message's
    // properties but is delivered at once).
    assert_eq!(sends.len(), 2);
    assert!(sends.iter().all(|m| m
        .properties
        .iter()
        .any(|kv| kv.key == "DELAY_TIME" && kv.value == "200")));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), consumer.recv())
            .await
            .is_err()
    );
    assert_eq!(
        broker.subscription_backlog(topic, "s"),
        0,
        "the original was acked"
    );
}

#[tokio::test]
async fn dead_lettering_does_not_apply_to_exclusive_subscriptions() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let consumer = client
        .consumer("persistent://public/default/excl")
        .subscription("s")
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.dead_letter_topic(), None);
}

#[tokio::test]
async fn invalid_policies_are_rejected() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let r = client
        .consumer("t")
        .subscription("s")
        .dead_letter_policy(DeadLetterPolicy::new(0))
        .subscribe()
        .await;
    assert!(matches!(r, Err(pulsar_sdk::Error::InvalidConfig(_))));
    let r = client
        .consumer("t")
        .subscription("s")
        .ack_timeout(Duration::from_millis(10))
        .subscribe()
        .await;
    assert!(matches!(r, Err(pulsar_sdk::Error::InvalidConfig(_))));
}

#[tokio::test]
async fn ack_timeout_redelivers_and_feeds_the_dead_letter_path() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/ack-timeout";
    client
        .producer(topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("slow"))
        .await
        .unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_timeout(Duration::from_secs(1))
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    // Never ack: delivered with count 0, redelivered after the timeout with count 1, then
    // dead-lettered after the next timeout.
    let mut counts = Vec::new();
    while let Ok(m) = tokio::time::timeout(Duration::from_secs(4), consumer.recv()).await {
        counts.push(m.unwrap().redelivery_count);
    }
    assert_eq!(counts, vec![0, 1]);
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    assert_eq!(broker.topic_messages(&dlq), 1);
}

// ---- real broker ---------------------------------------------------------------------------

#[tokio::test]
async fn poison_messages_are_dead_lettered_on_pulsar_lite_and_read_by_the_official_client() {
    // pulsar-lite ignores initial_subscription_name (see the design notes) but retains messages
    // without any subscription, so an Earliest reader (and the official client) finds them.
    let url = shared_broker().url();
    let client = client(&url);
    let topic = format!("persistent://public/default/{}", unique_name("poison"));
    let sub = unique_name("work");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        producer
            .send_and_wait(poison(&format!("p-{i}")))
            .await
            .unwrap();
    }
    let policy = DeadLetterPolicy::new(2).initial_subscription_name(unique_name("audit"));
    let mut consumer = poison_consumer(&client, &topic, &sub, policy).await;
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    let seen = nack_everything(&mut consumer, Duration::from_secs(3)).await;
    for i in 0..3 {
        assert_eq!(seen[&format!("p-{i}")], vec![0, 1, 2], "p-{i}");
    }
    let mut letters = read_all(&client, &dlq, 3).await;
    letters.sort_by(|a, b| a.payload.cmp(&b.payload));
    for (i, l) in letters.iter().enumerate() {
        check_letter(l, &topic, &sub, &format!("p-{i}"));
    }
    // The official client reads the same messages identically.
    let got = official::consume_async(
        &url,
        &dlq,
        &unique_name("py"),
        3,
        WAIT,
        "earliest",
        "shared",
    )
    .await
    .unwrap();
    for m in got {
        assert_eq!(m.key.as_deref(), Some("poison-key"));
        assert_eq!(m.properties.get("app").map(String::as_str), Some("value"));
        assert_eq!(m.properties.get("REAL_TOPIC"), Some(&topic));
        assert!(String::from_utf8(m.payload).unwrap().starts_with("p-"));
    }
    consumer.close().await.unwrap();
}

#[tokio::test]
async fn retry_topic_flow_on_pulsar_lite() {
    // pulsar-lite ignores deliver-after (delivers at once); the retry flow still works.
    let url = shared_broker().url();
    let client = client(&url);
    let topic = format!("persistent://public/default/{}", unique_name("retry"));
    client
        .producer(&topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("again"))
        .await
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("s"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .dead_letter_policy(DeadLetterPolicy::new(1))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    consumer
        .reconsume_later(&m, Duration::from_millis(100))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload_str(), Some("again"));
    assert_eq!(
        m.properties.get("RECONSUMETIMES").map(String::as_str),
        Some("1")
    );
    consumer
        .reconsume_later(&m, Duration::from_millis(100))
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    let letters = read_all(&client, &dlq, 1).await;
    assert_eq!(letters[0].payload_str(), Some("again"));
}

/// Publishes one poison message and dead-letters it through a consumer with `policy`.
async fn dead_letter_one(broker: &MockBroker, topic: &str, policy: DeadLetterPolicy) -> String {
    let client = client(&broker.service_url());
    client
        .producer(topic)
        .create()
        .await
        .unwrap()
        .send_and_wait(poison("p"))
        .await
        .unwrap();
    let mut consumer = poison_consumer(&client, topic, "s", policy).await;
    let seen = nack_everything(&mut consumer, Duration::from_secs(2)).await;
    assert_eq!(seen["p"], vec![0, 1]);
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    consumer.close().await.unwrap();
    dlq
}

#[tokio::test]
async fn without_auto_subscription_creation_the_dlq_has_no_subscription_and_nothing_fails() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_allow_auto_subscription_creation(false);
    let policy = DeadLetterPolicy::new(1).initial_subscription_name("audit");
    let dlq = dead_letter_one(&broker, "persistent://public/default/no-auto-sub", policy).await;
    assert_eq!(
        broker.topic_messages(&dlq),
        1,
        "the message was dead-lettered"
    );
    assert!(
        broker.subscriptions(&dlq).is_empty(),
        "but no subscription was created"
    );
    assert_eq!(
        broker.subscription_backlog("persistent://public/default/no-auto-sub", "s"),
        0
    );
}

#[tokio::test]
async fn without_consume_permission_the_dlq_has_no_subscription_and_nothing_fails() {
    use pulsar_sdk::mock::MockAction;
    let broker = MockBroker::start().await.unwrap();
    broker.create_namespace("acme/dlq").unwrap();
    // The (anonymous) client may produce to the DLQ namespace but not consume from it.
    broker
        .grant_permission("acme/dlq", "anonymous", &[MockAction::Produce])
        .unwrap();
    let policy = DeadLetterPolicy::new(1)
        .dead_letter_topic("persistent://acme/dlq/poison-DLQ")
        .initial_subscription_name("audit");
    let dlq = dead_letter_one(&broker, "persistent://public/default/no-perm", policy).await;
    assert_eq!(dlq, "persistent://acme/dlq/poison-DLQ");
    assert_eq!(broker.topic_messages(&dlq), 1);
    assert!(broker.subscriptions(&dlq).is_empty());
}
