//! Producer and consumer interceptors (`pulsar_sdk::interceptor`): the order they run in,
//! the changes they make, where each hook fires (receipt, take, ack, nack and ack-timeout
//! redelivery, partition growth), and that a panicking one breaks nothing.

use support as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client, full, recv, wait_until, within};
use pulsar_sdk::interceptor::{ConsumerInterceptor, ProducerInterceptor};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{
    Error, InitialPosition, Message, MessageId, ProducerMessage, SubscriptionType, TopicName,
};

type Log = Arc<Mutex<Vec<String>>>;

fn log_of(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// Records every producer hook in a shared log, tagged with its name; `before_send` adds
/// the property `order` (its value: the names of the interceptors that ran, in order).
struct ProducerRec {
    name: &'static str,
    log: Log,
}

impl ProducerInterceptor for ProducerRec {
    fn before_send(&self, _topic: &TopicName, message: &mut ProducerMessage) {
        let seen = message.properties.get("order").cloned().unwrap_or_default();
        message
            .properties
            .insert("order".into(), format!("{seen}{}", self.name));
        self.log.lock().unwrap().push(format!(
            "{} before_send {}",
            self.name,
            String::from_utf8_lossy(&message.payload)
        ));
    }

    fn on_send_acknowledgement(
        &self,
        topic: &TopicName,
        message: &ProducerMessage,
        result: Result<&MessageId, &Error>,
    ) {
        self.log.lock().unwrap().push(format!(
            "{} ack {} {} order={} {}",
            self.name,
            topic,
            String::from_utf8_lossy(&message.payload),
            message.properties["order"],
            match result {
                Ok(id) => id.to_string(),
                Err(e) => format!("error {e}"),
            }
        ));
    }

    fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} partitions {topic} {partitions}", self.name));
    }
}

/// Two interceptors run in order, each seeing what the one before changed; the message goes
/// out as they left it; each learns the receipt's id as it completes, also for a send
/// whose `SendFuture` was dropped unawaited (Java calls `onSendAcknowledgement` from the
/// send's callback).
#[tokio::test]
async fn producer_interceptors_run_in_order_change_the_message_and_hear_each_receipt() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("interceptors-produce");
    let log: Log = Default::default();
    let producer = client
        .producer(&topic)
        .batching(false)
        .interceptor(ProducerRec {
            name: "a",
            log: log.clone(),
        })
        .interceptor(ProducerRec {
            name: "b",
            log: log.clone(),
        })
        .create()
        .await
        .unwrap();
    let id = producer.send_and_wait("one").await.unwrap();
    // The receipt dropped at once: the hooks still hear of it.
    drop(producer.send("two").await.unwrap());
    wait_until(
        "the dropped send's receipt reached the interceptors",
        || log_of(&log).len() == 8,
    )
    .await;
    let log = log_of(&log);
    assert_eq!(
        log[..4],
        [
            "a before_send one".to_string(),
            "b before_send one".into(),
            format!("a ack {topic} one order=ab {id}"),
            format!("b ack {topic} one order=ab {id}"),
        ]
    );
    assert!(
        log[6].starts_with(&format!("a ack {topic} two order=ab ")) && !log[6].contains("error"),
        "{log:?}"
    );
    // As sent: with both interceptors' changes.
    let stored = broker.received_of(Type::Send);
    assert_eq!(stored.len(), 2);
    let meta = stored[0].payload.as_ref().unwrap().0.clone();
    let order: Vec<_> = meta
        .properties
        .iter()
        .filter(|kv| kv.key == "order")
        .map(|kv| kv.value.clone())
        .collect();
    assert_eq!(order, ["ab"]);
}

/// A send that fails (the producer closed) reaches the interceptors with its error.
#[tokio::test]
async fn a_failed_send_reaches_the_interceptors_with_its_error() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let log: Log = Default::default();
    let producer = client
        .producer(full("interceptors-failed-send"))
        .interceptor(ProducerRec {
            name: "a",
            log: log.clone(),
        })
        .create()
        .await
        .unwrap();
    producer.close().await.unwrap();
    assert!(matches!(producer.send("late").await, Err(Error::Closed)));
    let log = log_of(&log);
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[1].contains(" error "), "{log:?}");
}

struct Panics;

impl ProducerInterceptor for Panics {
    fn before_send(&self, _: &TopicName, message: &mut ProducerMessage) {
        message.properties.insert("half".into(), "done".into());
        panic!("a producer interceptor panics (expected by the test)");
    }
}

impl ConsumerInterceptor for Panics {
    fn before_consume(&self, _: &mut Message) {
        panic!("a consumer interceptor panics (expected by the test)");
    }
}

/// Marks what it saw, after a panicking interceptor: the ones after it still run.
struct Mark(&'static str);

impl ProducerInterceptor for Mark {
    fn before_send(&self, _: &TopicName, message: &mut ProducerMessage) {
        message.properties.insert(self.0.into(), "yes".into());
    }
}

impl ConsumerInterceptor for Mark {
    fn before_consume(&self, message: &mut Message) {
        message.properties.insert(self.0.into(), "yes".into());
    }
}

/// An interceptor that panics breaks neither the send nor the receive: both succeed, the
/// interceptors after it still run, and the panic is counted once in each side's stats.
#[tokio::test]
async fn a_panicking_interceptor_breaks_neither_send_nor_receive() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("interceptors-panic");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .interceptor(Panics)
        .interceptor(Mark("consumed-mark"))
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .interceptor(Panics)
        .interceptor(Mark("sent-mark"))
        .create()
        .await
        .unwrap();
    within("the send", producer.send_and_wait("survives"))
        .await
        .unwrap();
    let m = recv(&mut consumer).await;
    assert_eq!(m.payload_str(), Some("survives"));
    assert_eq!(
        m.properties.get("sent-mark").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        m.properties.get("consumed-mark").map(String::as_str),
        Some("yes")
    );
    assert_eq!(producer.stats().interceptor_panics, 1);
    assert_eq!(consumer.stats().interceptor_panics, 1);
    consumer.ack(&m).unwrap();
}

/// Records every consumer hook; `before_consume` changes the payload the application sees.
struct ConsumerRec(Log);

impl ConsumerInterceptor for ConsumerRec {
    fn before_consume(&self, message: &mut Message) {
        let seen = format!("seen:{}", message.payload_str().unwrap_or_default());
        self.0
            .lock()
            .unwrap()
            .push(format!("consume {} {}", message.topic, message.id));
        message.payload = seen.into();
    }

    fn on_acknowledge(&self, topic: &TopicName, id: &MessageId, result: Result<(), &Error>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("ack {topic} {id} {}", result.is_ok()));
    }

    fn on_acknowledge_cumulative(
        &self,
        topic: &TopicName,
        id: &MessageId,
        result: Result<(), &Error>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(format!("ack-cumulative {topic} {id} {}", result.is_ok()));
    }

    fn on_negative_acks_send(&self, topic: &TopicName, ids: &[MessageId]) {
        for id in ids {
            self.0.lock().unwrap().push(format!("nack {topic} {id}"));
        }
    }

    fn on_ack_timeout_send(&self, topic: &TopicName, ids: &[MessageId]) {
        for id in ids {
            self.0.lock().unwrap().push(format!("timeout {topic} {id}"));
        }
    }

    fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {
        self.0
            .lock()
            .unwrap()
            .push(format!("partitions {topic} {partitions}"));
    }
}

/// `before_consume` runs as the application takes each message (and may change it);
/// `on_acknowledge` as it acks (the consumer or an `Acker`, by message or by id);
/// `on_negative_acks_send` once the negative-ack delay passed and the redelivery is asked,
/// not at the `nack` call; `on_ack_timeout_send` when the ack timeout redelivers.
#[tokio::test(start_paused = true)]
async fn consumer_hooks_fire_on_take_ack_nack_and_ack_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("interceptors-consume");
    let log: Log = Default::default();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_timeout(Duration::from_secs(5))
        .negative_ack_delay(Duration::from_secs(1))
        .interceptor(ConsumerRec(log.clone()))
        .subscribe()
        .await
        .unwrap();
    let producer = common::unbatched_producer(&client, &topic).await;
    for p in ["acked", "acked-by-id", "nacked", "timed-out"] {
        producer.send_and_wait(p).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(recv(&mut consumer).await);
    }
    let payloads: Vec<_> = got.iter().map(|m| m.payload_str().unwrap()).collect();
    assert_eq!(
        payloads,
        [
            "seen:acked",
            "seen:acked-by-id",
            "seen:nacked",
            "seen:timed-out"
        ],
        "the application sees the message as the interceptor left it"
    );
    let ids: Vec<_> = got.iter().map(|m| m.id).collect();
    consumer.ack(&got[0]).unwrap();
    consumer.acker().ack_id(ids[1]).unwrap();
    consumer.nack(&got[2]).unwrap();
    let expected_so_far: Vec<String> = ids
        .iter()
        .map(|id| format!("consume {topic} {id}"))
        .chain([
            format!("ack {topic} {} true", ids[0]),
            format!("ack {topic} {} true", ids[1]),
        ])
        .collect();
    assert_eq!(
        log_of(&log),
        expected_so_far,
        "no nack hook at the nack call"
    );
    // The negative-ack delay passes: the redelivery is asked, the hook hears of it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        log_of(&log)[6..],
        [format!("nack {topic} {}", ids[2])],
        "the nack hook, as its redelivery is asked"
    );
    // The redelivered message is taken (and the hook runs again), then acked.
    let again = recv(&mut consumer).await;
    assert_eq!(again.payload_str(), Some("seen:nacked"));
    consumer.ack(&again).unwrap();
    // The ack timeout passes for "timed-out".
    tokio::time::sleep(Duration::from_secs(12)).await;
    let log = log_of(&log);
    assert!(
        log.contains(&format!("timeout {topic} {}", ids[3])),
        "the ack-timeout hook: {log:?}"
    );
    // An ack refused (a closed consumer) reaches the hook with its error.
    consumer.close().await.unwrap();
    assert!(consumer.ack(&got[3]).is_err());
}

/// On a partitioned topic each hook names the message's partition; a cumulative ack reaches
/// `on_acknowledge_cumulative`; a producer and a consumer hear of the topic's growth once
/// they use the new partitions.
#[tokio::test]
async fn partitioned_topics_name_the_partition_and_report_growth() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("interceptors-partitioned");
    broker.set_partitions(&topic, 2);
    let clog: Log = Default::default();
    let plog: Log = Default::default();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .interceptor(ConsumerRec(clog.clone()))
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .interceptor(ProducerRec {
            name: "p",
            log: plog.clone(),
        })
        .create()
        .await
        .unwrap();
    let id = producer
        .send_and_wait(ProducerMessage::new("k").key("key"))
        .await
        .unwrap();
    let partition = TopicName::new(&topic)
        .unwrap()
        .partition(id.partition as u32);
    let m = recv(&mut consumer).await;
    assert_eq!(m.id, id);
    consumer.ack_cumulative(&m).unwrap();
    assert_eq!(
        log_of(&clog),
        [
            format!("consume {partition} {id}"),
            format!("ack-cumulative {partition} {id} true"),
        ]
    );
    broker
        .wait_for_command(Type::WatchPartitionUpdate, Duration::from_secs(5))
        .await
        .expect("the client watches the partitioned topic");
    let mut p_changes = producer.partition_updates();
    let mut c_changes = consumer.partition_updates();
    broker.update_partitions(&topic, 3).unwrap();
    within("the producer grew", p_changes.wait_for(|n| *n == 3))
        .await
        .unwrap();
    within("the consumer grew", c_changes.wait_for(|n| *n == 3))
        .await
        .unwrap();
    let full_topic = TopicName::new(&topic).unwrap();
    wait_until("both heard of the growth", || {
        log_of(&plog).contains(&format!("p partitions {full_topic} 3"))
            && log_of(&clog).contains(&format!("partitions {full_topic} 3"))
    })
    .await;
}
