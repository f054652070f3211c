//! Independent review of the entity core (issue #10), from the outside: the public API against
//! the mock broker. Tests marked `#[ignore = "review: ..."]` fail on the code they were written
//! against and document a defect; the others are probes that held up and stay as regression
//! tests.

use common::client;
use support as common;

use common::{full, within};

use std::sync::{Mutex, Once};
use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig};
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{
    BackoffPolicy, Consumer, ConsumerOptions, Error, InitialPosition, Message, MessageId,
    ProducerMessage, State, SubscriptionType,
};

const WAIT: Duration = Duration::from_secs(10);

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

fn text(m: &Message) -> String {
    m.payload_str().unwrap_or_default().to_string()
}

// Panics in background tasks are invisible to a test except through the panic hook. Every
// #[tokio::test] runs on a current-thread runtime, so tasks it spawns panic on the test's own
// thread: record panic messages by thread name.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((thread, msg));
            default(info);
        }));
    });
}

fn panics_here() -> Vec<String> {
    let me = std::thread::current().name().unwrap_or("").to_string();
    PANICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(t, _)| *t == me)
        .map(|(_, m)| m.clone())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Findings (fail on the reviewed code).
// ---------------------------------------------------------------------------------------------

// Issue item 11 says a `Duration::MAX` must not panic on `Instant + d`. The batch deadline
// (`BatchContainer::deadline`, `opened_at + max_publish_delay`) still adds unchecked: the
// producer task panics on its first batched send, the send fails with `Closed`, the producer is
// dead. (Upstream Java takes any `batchingMaxPublishDelay` and schedules with it.)
#[tokio::test]
async fn huge_batch_publish_delay_does_not_panic_the_producer() {
    record_panics();
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer(full("huge-batch-delay"))
        .batching_options(BatchingOptions {
            max_publish_delay: Duration::MAX,
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let sent = producer.send("x").await;
    // Let the producer task take the message and go round its loop (where it computes the
    // batch deadline) before the flush arrives; no timing involved on a current-thread runtime.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let flushed = within("flush", producer.flush()).await;
    let receipt = match sent {
        Ok(f) => within("receipt", f).await,
        Err(e) => Err(e),
    };
    assert_eq!(panics_here(), Vec::<String>::new(), "no task panicked");
    assert!(flushed.is_ok(), "flush: {flushed:?}");
    assert!(receipt.is_ok(), "the message is stored: {receipt:?}");
}

// Probe (held up): `ack_timeout_tick` (a public option) at `Duration::MAX` feeds
// `tokio::time::interval`; the consumer keeps working and no task panics. (The tick is at
// most the ack timeout, as Java's: see the next test.)
#[tokio::test]
async fn huge_ack_timeout_tick_does_not_panic_the_consumer() {
    record_panics();
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("huge-ack-tick");
    let mut options = ConsumerOptions::default();
    options.subscription = "s".into();
    options.subscription_type = SubscriptionType::Shared;
    options.ack_timeout = Duration::from_secs(1);
    options.ack_timeout_tick = Duration::MAX;
    let subscribed = client.consumer(&topic).options(options).subscribe().await;
    let mut c = match subscribed {
        // Refusing the value with a typed error is also a fine answer.
        Err(Error::InvalidConfig(_)) => return,
        r => r.unwrap(),
    };
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("x").await.unwrap();
    let got = within("recv", c.recv()).await;
    assert_eq!(got.as_ref().map(text).ok().as_deref(), Some("x"));
    // The ack goes out after the ack group time (100 ms): by then the tick timer has fired.
    c.ack(got.as_ref().unwrap()).unwrap();
    let acked = broker
        .wait_for_command(Type::Ack, Duration::from_secs(3))
        .await;
    assert_eq!(panics_here(), Vec::<String>::new(), "no task panicked");
    assert!(
        acked.is_some(),
        "the consumer still works (its ack reached the broker)"
    );
}

/// Java `UnAckedMessageTracker`: the tick is at most the ack timeout (`tickDurationInMs =
/// min(tickDuration, ackTimeout)`). With a tick of an hour and an ack timeout of 1 s, an
/// unacked message comes back within seconds; it waited for the hour-long tick before (found
/// by review).
#[tokio::test]
async fn the_ack_timeout_tick_is_at_most_the_ack_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("long-ack-tick");
    let mut options = ConsumerOptions::default();
    options.subscription = "s".into();
    options.subscription_type = SubscriptionType::Shared;
    options.ack_timeout = Duration::from_secs(1);
    options.ack_timeout_tick = Duration::from_secs(3600);
    let mut c = client
        .consumer(&topic)
        .options(options)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("x").await.unwrap();
    let first = within("recv", c.recv()).await.unwrap();
    assert_eq!(text(&first), "x");
    // Not acked: redelivered once the ack timeout has passed (the next tick after it).
    let again = within("the redelivery", c.recv()).await.unwrap();
    assert_eq!(again.id, first.id);
}

// Same rule, partition updates: `auto_update_partitions_interval(Duration::MAX)` is accepted by
// the builder, and the polling fallback (`partitions::poll`) computes `Instant::now() +
// interval`: the client's partition-update task panics as soon as a partitioned producer
// registers against a broker without PIP-247 watchers, and leaves `running` set, so the
// service never starts again for this client.
#[tokio::test]
async fn huge_partition_poll_interval_does_not_panic() {
    record_panics();
    let broker = MockBroker::start_with(MockBrokerConfig {
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let topic = full("huge-poll");
    broker.create_partitioned_topic(&topic, 2);
    let built = common::test_client(&broker.service_url())
        .auto_update_partitions_interval(Duration::MAX)
        .build();
    let client = match built {
        Err(Error::InvalidConfig(_)) => return, // refusing it is fine
        r => r.unwrap(),
    };
    let producer = client.producer(&topic).create().await.unwrap();
    // The polling task starts with the registration and reaches its interval right away; a
    // full round trip to the broker lets it run.
    producer.send_and_wait("x").await.unwrap();
    producer.send_and_wait("y").await.unwrap();
    assert_eq!(panics_here(), Vec::<String>::new(), "no task panicked");
}

// Upstream `ConsumerImpl.connectionOpened` (exceptionally): once a consumer has been subscribed,
// a failed re-subscribe is retried ("consumer was subscribed and connected but we got some
// error, keep trying"); only TopicDoesNotExist ends it. Here `Entity::next` ends the consumer
// for good on any error `is_retriable()` rejects, so an Exclusive consumer whose subscription
// another consumer took while it was reconnecting (ConsumerBusy; the same happens when the
// broker has not yet noticed the old connection died) fails forever instead of taking the
// subscription back when it is free.
#[tokio::test]
async fn a_consumer_busy_on_resubscribe_is_retried_like_upstream() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("busy-on-reconnect");
    // A reconnects only after 2 s, so B surely takes the subscription first.
    let slow = common::test_client(&broker.service_url())
        .backoff(BackoffPolicy {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(2),
            jitter: 0.0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let other = client(&broker.service_url());
    let mut a = slow
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    let a_conn = broker
        .received_of(Type::Subscribe)
        .pop()
        .unwrap()
        .connection;
    assert!(broker.drop_connection(a_conn));
    common::wait_until("A gone from the broker", || {
        broker.consumers(&topic, "s") == 0
    })
    .await;
    let b = other
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    // A tries again and is refused while B holds the subscription.
    within(
        "A's re-subscribe",
        broker.wait_for_commands(Type::Subscribe, 3, WAIT),
    )
    .await
    .expect("A re-subscribes");
    b.close().await.unwrap();
    let producer = other
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    // A keeps trying and gets the subscription back once B is gone.
    common::wait_until("A back on the broker", || {
        broker.consumers(&topic, "s") == 1 || a.state() != State::Reconnecting
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    let got = within("A's recv", a.recv()).await;
    assert_eq!(
        got.as_ref().map(text).ok().as_deref(),
        Some("after"),
        "A still consumes after a refused re-subscribe: {got:?} (state {})",
        a.state()
    );
}

// Upstream tracks a message for the ack timeout when the application takes it from the queue
// (`ConsumerImpl.messageProcessed` → `trackMessage`), and a redelivery by id also drops queued
// copies (`ConsumerImpl.redeliverUnacknowledgedMessages(Set)` → `removeExpiredMessagesFromQueue`).
// Here `ConsumerTask::on_message` starts the clock when the message reaches the receiver queue:
// messages the application has not even received yet "time out", are redelivered, and the
// application then gets each of them twice (the queued copy and the redelivered one).
#[tokio::test]
async fn ack_timeout_does_not_redeliver_messages_the_application_never_received() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("ack-timeout-queued");
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .ack_timeout(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        producer.send_and_wait(format!("m{i}")).await.unwrap();
    }
    // The application is busy for a while (longer than the ack timeout) before it receives.
    // Upstream sends no redelivery for messages the application has not taken.
    let redelivered = broker
        .wait_for_command(
            Type::RedeliverUnacknowledgedMessages,
            Duration::from_secs(4),
        )
        .await;
    assert!(
        redelivered.is_none(),
        "messages still in the receiver queue were redelivered for the ack timeout: {:?}",
        redelivered.map(|r| r.command.redeliver_unacknowledged_messages)
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = recv(&mut c).await;
        c.ack(&m).unwrap();
        got.push(text(&m));
    }
    assert_eq!(got, ["m0", "m1", "m2"]);
}

// ---------------------------------------------------------------------------------------------
// Probes that held up.
// ---------------------------------------------------------------------------------------------

// Item 2 with batches: a nack inside a batch on Failover rewinds to the batch, the already
// acked message of that batch is not delivered again, the rest come once, in order.
#[tokio::test]
async fn nack_inside_a_batch_on_failover_rewinds_in_order() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("failover-batch-nack");
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 5,
            max_publish_delay: Duration::from_secs(5),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut futs = Vec::new();
    for i in 0..5 {
        futs.push(producer.send(format!("m{i}")).await.unwrap());
    }
    for f in futs {
        f.await.unwrap();
    }
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Failover)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(10))
        .subscribe()
        .await
        .unwrap();
    let m0 = recv(&mut c).await;
    assert!(m0.id.is_batch());
    c.ack(&m0).unwrap();
    let m1 = recv(&mut c).await;
    c.nack(&m1).unwrap();
    within(
        "redeliver-all",
        broker.wait_for_command(Type::RedeliverUnacknowledgedMessages, WAIT),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        let m = recv(&mut c).await;
        got.push(text(&m));
        c.ack(&m).unwrap();
    }
    assert_eq!(got, ["m1", "m2", "m3", "m4"]);
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(300), c.recv()).await {
        panic!("no duplicate beyond the rewind, got {m:?}");
    }
}

// Item 10: ids handed out for batch messages of a partition survive Display/FromStr, compare
// and hash equal, and acking by the parsed id acks the message.
#[tokio::test]
async fn batch_ids_of_partitions_round_trip_and_ack_by_parsed_id() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("id-roundtrip");
    broker.create_partitioned_topic(&topic, 2);
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 3,
            max_publish_delay: Duration::from_secs(5),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut futs = Vec::new();
    for i in 0..3 {
        futs.push(
            producer
                .send(ProducerMessage::new(format!("m{i}")).key("same-key"))
                .await
                .unwrap(),
        );
    }
    for f in futs {
        f.await.unwrap();
    }
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let mut map = std::collections::HashMap::new();
    for _ in 0..3 {
        let m = recv(&mut c).await;
        assert!(m.id.is_batch() && m.id.partition >= 0, "{:?}", m.id);
        let parsed: MessageId = m.id.to_string().parse().unwrap();
        assert_eq!(parsed, m.id);
        assert_eq!(parsed.cmp(&m.id), std::cmp::Ordering::Equal);
        map.insert(m.id, text(&m));
        assert!(map.contains_key(&parsed));
        c.ack_id(parsed).unwrap();
    }
    within("the batch ack", async {
        common::wait_until("the entry acked", || {
            !broker.received_of(Type::Ack).is_empty()
        })
        .await
    })
    .await;
    assert_eq!(
        broker.subscription_backlog(&format!("{topic}-partition-0"), "s")
            + broker.subscription_backlog(&format!("{topic}-partition-1"), "s"),
        0
    );
}

// Item 9: dropping a reader of a partitioned topic closes every partition's consumer.
#[tokio::test]
async fn dropping_a_partitioned_reader_closes_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("drop-parted-reader");
    broker.create_partitioned_topic(&topic, 3);
    let r = client
        .reader(&topic)
        .subscription("rd")
        .start_earliest()
        .create()
        .await
        .unwrap();
    for p in 0..3 {
        assert_eq!(broker.consumers(&format!("{topic}-partition-{p}"), "rd"), 1);
    }
    drop(r);
    common::wait_until("every partition's consumer closed", || {
        (0..3).all(|p| broker.consumers(&format!("{topic}-partition-{p}"), "rd") == 0)
    })
    .await;
    assert_eq!(broker.received_of(Type::CloseConsumer).len(), 3);
}

// Item 1 on a partitioned Key_Shared consumer: refused, nothing sent.
#[tokio::test]
async fn cumulative_ack_refused_on_partitioned_key_shared() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("cumulative-parted");
    broker.create_partitioned_topic(&topic, 2);
    let mut c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::KeyShared)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer
        .send_and_wait(ProducerMessage::new("x").key("k"))
        .await
        .unwrap();
    let m = recv(&mut c).await;
    assert!(matches!(
        c.ack_cumulative(&m),
        Err(Error::InvalidOperation(_))
    ));
    c.close().await.unwrap();
    assert!(broker.received_of(Type::Ack).is_empty());
}

// Item 12: concurrent closes of one consumer both report Ok, and the state ends Closed.
#[tokio::test]
async fn concurrent_closes_both_succeed() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("close-twice-concurrently");
    let c = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let (a, b) = tokio::join!(c.close(), c.close());
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert_eq!(c.state(), State::Closed);
    let p = client.producer(&topic).create().await.unwrap();
    let (a, b) = tokio::join!(p.close(), p.close());
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert!(matches!(p.send("late").await, Err(Error::Closed)));
}

// Item 5: an Exclusive producer that lost its connection while another Exclusive producer took
// the topic is fenced when it comes back (it sends its topic epoch), and says so.
#[tokio::test]
async fn a_producer_that_lost_the_topic_meanwhile_is_fenced() {
    let broker = MockBroker::start().await.unwrap();
    let topic = full("fenced-after-reconnect");
    let slow = common::test_client(&broker.service_url())
        .backoff(BackoffPolicy {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(2),
            jitter: 0.0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let other = client(&broker.service_url());
    let a = slow
        .producer(&topic)
        .access_mode(pulsar_sdk::producer::ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let conn = broker.received_of(Type::Producer).pop().unwrap().connection;
    assert!(broker.drop_connection(conn));
    common::wait_until("A gone", || broker.producers(&topic) == 0).await;
    let b = other
        .producer(&topic)
        .access_mode(pulsar_sdk::producer::ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    b.close().await.unwrap();
    common::wait_until("A fenced", || a.state() == State::Fenced).await;
    assert!(matches!(
        a.send("late").await,
        Err(Error::ProducerFenced { .. })
    ));
}
