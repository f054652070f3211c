//! The consumer's byte budget (issue #31, section 3) as the broker sees it: flow permits.
//! A consumer whose queued bytes fill its budget (half the client memory limit) grants no
//! permits until the application takes messages out, then grants again; it never drops or
//! fails a message for it.

use common::{unbatched_producer, wait_until, within};
use support as common;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::InitialPosition;

const KB: usize = 1024;

fn permits(broker: &MockBroker) -> Vec<u32> {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect()
}

/// 400 KiB messages into a consumer with a receiver queue of 1,000 and a 2 MiB budget (a
/// 4 MiB memory limit): the broker is granted about the budget's worth (before: the whole
/// receiver queue, 400 MB of it), no FLOW while the queue holds it, a FLOW again once the
/// application takes messages; every message arrives, in order.
#[tokio::test]
async fn no_flow_while_over_the_budget_and_flow_again_once_taken() {
    const N: usize = 30;
    const SIZE: usize = 400 * KB;
    let broker = MockBroker::start().await.unwrap();
    let topic = common::full("budget-permits");
    let publisher = common::client(&broker.service_url());
    let producer = unbatched_producer(&publisher, &topic).await;
    for i in 0..N {
        let mut body = vec![b'x'; SIZE];
        body[..4].copy_from_slice(&(i as u32).to_be_bytes());
        producer.send_and_wait(body).await.unwrap();
    }
    let client = common::test_client(&broker.service_url())
        .memory_limit(4 * 1024 * KB)
        .build()
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(1_000)
        .subscribe()
        .await
        .unwrap();
    // Quiet once everything granted has arrived and nothing more is granted for it.
    let queued = || consumer.stats().totals.receiver_queue_len;
    wait_until("what was granted has arrived", || {
        let granted: u32 = permits(&broker).iter().sum();
        granted > 0 && queued() == u64::from(granted).min(N as u64)
    })
    .await;
    let granted: u32 = permits(&broker).iter().sum();
    let flows = permits(&broker).len();
    // The budget (2 MiB) over 400 KiB, and one forced while the queue was empty.
    assert!(
        (1..=7).contains(&granted),
        "granted {granted} permits in {flows} FLOWs: {:?}",
        permits(&broker)
    );
    // Still over budget: nothing more is granted (the queue still holds all of it).
    assert_eq!(queued(), u64::from(granted));
    assert_eq!(
        permits(&broker).len(),
        flows,
        "no FLOW while over the budget"
    );
    // Taking messages out frees room: permits follow.
    let mut next = 0u32;
    let m = within("a message", consumer.recv()).await.unwrap();
    assert_eq!(m.payload[..4], next.to_be_bytes());
    next += 1;
    wait_until("a FLOW once a message was taken", || {
        permits(&broker).len() > flows
    })
    .await;
    // Everything arrives, in order, nothing dropped or failed.
    while (next as usize) < N {
        let m = within("a message", consumer.recv()).await.unwrap();
        assert_eq!(m.payload[..4], next.to_be_bytes(), "in order");
        assert_eq!(m.payload.len(), SIZE);
        next += 1;
    }
    let all: u32 = permits(&broker).iter().sum();
    assert!(all >= N as u32, "{all}");
}

/// A message larger than the whole budget is still delivered (upstream force-reserves): with
/// nothing queued one permit is always out. A 3 MiB message into a 1 MiB budget.
#[tokio::test]
async fn a_message_larger_than_the_budget_is_delivered() {
    let broker = MockBroker::start().await.unwrap();
    let topic = common::full("budget-huge");
    let publisher = common::client(&broker.service_url());
    let producer = unbatched_producer(&publisher, &topic).await;
    for len in [3 * 1024 * KB, 10, 3 * 1024 * KB] {
        producer.send_and_wait(vec![7u8; len]).await.unwrap();
    }
    let client = common::test_client(&broker.service_url())
        .memory_limit(2 * 1024 * KB)
        .build()
        .unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    for len in [3 * 1024 * KB, 10, 3 * 1024 * KB] {
        let m = within("a message larger than the budget", consumer.recv())
            .await
            .unwrap();
        assert_eq!(m.payload.len(), len);
    }
}

/// A new consumer of a non-persistent topic grants its whole receiver queue at once even while
/// the client's other consumers hold the whole consumers' share of the memory limit, as
/// upstream does (its first FLOW is the receiver queue; what arrives is force-reserved): its
/// broker drops what it cannot dispatch for want of permits, so a first FLOW of 1 would lose
/// every message but one. Here a first consumer holds a 3 MiB message it has not taken (over
/// its 1 MiB budget: the share is gone); the second, on a non-persistent topic, gets a FLOW of
/// its receiver queue and receives all ten messages published right after it subscribed.
#[tokio::test]
async fn a_non_persistent_consumer_grants_its_whole_queue_while_others_hold_the_budget() {
    const N: usize = 10;
    let broker = MockBroker::start().await.unwrap();
    let publisher = common::client(&broker.service_url());
    let held = common::full("budget-held");
    let producer = unbatched_producer(&publisher, &held).await;
    producer
        .send_and_wait(vec![1u8; 3 * 1024 * KB])
        .await
        .unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(2 * 1024 * KB)
        .build()
        .unwrap();
    let first = client
        .consumer(&held)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    wait_until("the first consumer holds its message", || {
        first.stats().totals.receiver_queue_len == 1
    })
    .await;
    let flows_before = permits(&broker).len();
    let topic = "non-persistent://public/default/budget-np";
    let mut second = client
        .consumer(topic)
        .subscription("np")
        .receiver_queue_size(N as u32)
        .subscribe()
        .await
        .unwrap();
    wait_until("the second consumer's first FLOW", || {
        permits(&broker).len() > flows_before
    })
    .await;
    assert_eq!(
        permits(&broker)[flows_before],
        N as u32,
        "the whole receiver queue: {:?}",
        &permits(&broker)[flows_before..]
    );
    let np = unbatched_producer(&publisher, topic).await;
    for i in 0..N as u32 {
        np.send_and_wait(i.to_be_bytes().to_vec()).await.unwrap();
    }
    for i in 0..N as u32 {
        let m = within("every message of the non-persistent topic", second.recv())
            .await
            .unwrap();
        assert_eq!(m.payload[..], i.to_be_bytes());
    }
}

/// The first FLOW of the consumer subscribed on `topic` (by its SUBSCRIBE's consumer id).
async fn first_flow_of(broker: &MockBroker, topic: &str) -> u32 {
    let id = || {
        broker
            .received_of(Type::Subscribe)
            .into_iter()
            .filter_map(|r| r.command.subscribe)
            .find(|s| s.topic == topic)
            .map(|s| s.consumer_id)
    };
    let flow = || {
        let id = id()?;
        broker
            .received_of(Type::Flow)
            .into_iter()
            .filter_map(|r| r.command.flow)
            .find(|f| f.consumer_id == id)
            .map(|f| f.message_permits)
    };
    wait_until("its first FLOW", || flow().is_some()).await;
    flow().unwrap()
}

/// A closed consumer gives its part of the consumers' share back: the next consumer of the
/// same client starts with the whole budget. A 24 MiB limit (a 12 MiB budget) holds a
/// receiver queue of 2 maximum-size (5 MiB) messages, so a consumer's first FLOW is 2 — but
/// only 1 while another consumer holds a 3 MiB message (this shows the probe can fail), and 2
/// again once that consumer is closed — before its handle is dropped: `close(&self)` drops the
/// never-handed-out messages of the handle's queue, and their bytes leave the limit with them,
/// as upstream's `ConsumerImpl.closeConsumerTasks` clears its incoming queue (before, they
/// stayed until the handle went, and the next first FLOW was 1).
#[tokio::test]
async fn a_closed_consumer_gives_its_budget_back() {
    let broker = MockBroker::start().await.unwrap();
    let publisher = common::client(&broker.service_url());
    let held = common::full("budget-given-back");
    let producer = unbatched_producer(&publisher, &held).await;
    producer
        .send_and_wait(vec![1u8; 3 * 1024 * KB])
        .await
        .unwrap();
    let client = common::test_client(&broker.service_url())
        .memory_limit(24 * 1024 * KB)
        .build()
        .unwrap();
    let subscribe = |topic: String, queue: u32| {
        client
            .consumer(topic)
            .subscription("s")
            .initial_position(InitialPosition::Earliest)
            .receiver_queue_size(queue)
            .subscribe()
    };
    let first = subscribe(held.clone(), 1_000).await.unwrap();
    wait_until("the first consumer holds its message", || {
        first.stats().totals.receiver_queue_len == 1
    })
    .await;
    let beside = common::full("budget-beside");
    let while_held = subscribe(beside.clone(), 2).await.unwrap();
    assert_eq!(
        first_flow_of(&broker, &beside).await,
        1,
        "3 MiB of the 12 MiB budget held: room for one 5 MiB message"
    );
    first.close().await.unwrap();
    while_held.close().await.unwrap();
    let after = common::full("budget-after");
    let _next = subscribe(after.clone(), 2).await.unwrap();
    assert_eq!(
        first_flow_of(&broker, &after).await,
        2,
        "the closed consumers gave their budget back, their handles still alive"
    );
    drop((first, while_held));
}

/// The FLOWs of the consumer subscribed on `topic`, in order.
fn flows_of(broker: &MockBroker, topic: &str) -> Vec<u32> {
    let Some(id) = broker
        .received_of(Type::Subscribe)
        .into_iter()
        .filter_map(|r| r.command.subscribe)
        .find(|s| s.topic == topic)
        .map(|s| s.consumer_id)
    else {
        return Vec::new();
    };
    broker
        .received_of(Type::Flow)
        .into_iter()
        .filter_map(|r| r.command.flow)
        .filter(|f| f.consumer_id == id)
        .map(|f| f.message_permits)
        .collect()
}

/// Issue #31 (leftover): a consumer withholding permits for want of room was woken only by
/// its own releases. Two consumers of one client (a 4 MiB limit: a 2 MiB consumers' share),
/// 400 KiB messages, applications not reading: the first fills the share; the second gets
/// its forced permit (its queue was empty), then withholds the rest. The first application
/// takes its messages out: the second consumer, whose application still takes nothing, is
/// granted again (before: never, until its own application took a message).
#[tokio::test]
async fn a_consumer_over_the_budget_grants_again_when_another_consumer_frees_room() {
    const SIZE: usize = 400 * KB;
    let broker = MockBroker::start().await.unwrap();
    let publisher = common::client(&broker.service_url());
    let held = common::full("budget-held-elsewhere");
    let starved = common::full("budget-starved");
    for topic in [&held, &starved] {
        let producer = unbatched_producer(&publisher, topic).await;
        for _ in 0..6 {
            producer.send_and_wait(vec![b'x'; SIZE]).await.unwrap();
        }
    }
    let client = common::test_client(&broker.service_url())
        .memory_limit(4 * 1024 * KB)
        .build()
        .unwrap();
    let subscribe = |topic: String| {
        client
            .consumer(topic)
            .subscription("s")
            .initial_position(InitialPosition::Earliest)
            .receiver_queue_size(1_000)
            .subscribe()
    };
    let mut first = subscribe(held.clone()).await.unwrap();
    // Quiet once what was granted has arrived: the share is full.
    wait_until("the first consumer fills the share", || {
        let granted: u32 = flows_of(&broker, &held).iter().sum();
        let queued = first.stats().totals.receiver_queue_len;
        queued >= 4 && queued == u64::from(granted).min(6)
    })
    .await;
    let second = subscribe(starved.clone()).await.unwrap();
    wait_until("the second consumer's forced message", || {
        second.stats().totals.receiver_queue_len >= 1
    })
    .await;
    let before = flows_of(&broker, &starved);
    let granted: u32 = before.iter().sum();
    assert!(granted < 6, "withholding for want of room: {before:?}");
    assert_eq!(
        second.stats().totals.receiver_queue_len,
        u64::from(granted),
        "what was granted arrived"
    );
    for _ in 0..6 {
        within("a message", first.recv()).await.unwrap();
    }
    wait_until("the second consumer grants again", || {
        flows_of(&broker, &starved).len() > before.len()
    })
    .await;
    // As far as the share holds them (six of 400 KiB are more than 2 MiB).
    wait_until("more of the second consumer's messages arrive", || {
        second.stats().totals.receiver_queue_len >= u64::from(granted) + 2
    })
    .await;
}
