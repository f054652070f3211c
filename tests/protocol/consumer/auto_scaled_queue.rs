//! PIP-74's auto-scaled receiver queue (`auto_scaled_receiver_queue_size(true)`) as the broker
//! sees it: the first FLOW is 1, the queue grows while the application keeps up (fewer, larger
//! FLOWs), never beyond `receiver_queue_size`, and does not grow while the client memory limit
//! is more than 75 % used.

use common::{publish, unbatched_producer, within};
use support as common;

use std::time::Duration;

use futures::StreamExt;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Consumer, InitialPosition};

const MAX: u32 = 16;

fn permits(broker: &MockBroker) -> Vec<u32> {
    broker
        .received_of(Type::Flow)
        .into_iter()
        .map(|r| r.command.flow.unwrap().message_permits)
        .collect()
}

async fn auto_scaled(client: &pulsar_sdk::Client, topic: &str) -> Consumer {
    client
        .consumer(topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .receiver_queue_size(MAX)
        .auto_scaled_receiver_queue_size(true)
        .subscribe()
        .await
        .unwrap()
}

/// Receives `n` messages `m-<from>..`, checking after each that the broker never dispatched
/// more than the largest queue beyond what was received (nothing is acked).
async fn receive_in_order(
    broker: &MockBroker,
    consumer: &mut Consumer,
    topic: &str,
    from: usize,
    n: usize,
) {
    for i in from..from + n {
        let m = common::recv(consumer).await;
        assert_eq!(m.payload_str().unwrap(), format!("m-{i}"));
        let ahead = broker.subscription_dispatched(topic, "s") - (i + 1);
        assert!(
            ahead <= MAX as usize,
            "{ahead} dispatched ahead of the application"
        );
    }
}

#[tokio::test]
async fn the_queue_starts_at_one_and_grows_while_the_application_keeps_up() {
    const N: usize = 200;
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("auto-scaled-grows");
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", N).await;
    let mut consumer = auto_scaled(&client, &topic).await;
    within("a round trip", consumer.last_message_ids())
        .await
        .unwrap();
    assert_eq!(permits(&broker), vec![1], "the queue starts at 1");
    assert_eq!(broker.subscription_dispatched(&topic, "s"), 1);
    receive_in_order(&broker, &mut consumer, &topic, 0, N).await;
    let flows = permits(&broker);
    // A queue of 1 throughout would take a FLOW of 1 per message.
    assert!(
        flows.len() < N / 2,
        "{} FLOWs for {N} messages: {flows:?}",
        flows.len()
    );
    assert!(
        flows.iter().any(|&p| p >= MAX / 2) && flows.iter().all(|&p| p <= MAX),
        "grew to {MAX}, never beyond: {flows:?}"
    );
}

/// 6.6 MB of an 8 MiB memory limit (79 %: over the 75 % threshold of growth, under the 95 %
/// of shrinking) held by two producers' open batches: the consumer's queue stays at 1 (every
/// FLOW is 1). Once the batches are sent, it grows.
#[tokio::test]
async fn the_queue_does_not_grow_while_the_memory_limit_is_mostly_used() {
    const N: usize = 60;
    let broker = MockBroker::start().await.unwrap();
    let topic = common::full("auto-scaled-memory");
    let publisher = common::client(&broker.service_url());
    let producer = unbatched_producer(&publisher, &topic).await;
    publish(&producer, "m", 2 * N).await;
    let client = common::test_client(&broker.service_url())
        .memory_limit(8 * 1024 * 1024)
        .build()
        .unwrap();
    let mut holders = Vec::new();
    let mut receipts = Vec::new();
    for h in 0..2 {
        // One open batch each (a batch is at most the broker's 5 MiB).
        let holder = client
            .producer(common::full(&format!("auto-scaled-memory-holder-{h}")))
            .batching_options(pulsar_sdk::producer::BatchingOptions {
                max_messages: 1000,
                max_bytes: 4 * 1024 * 1024,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            })
            .create()
            .await
            .unwrap();
        for _ in 0..33 {
            receipts.push(holder.send(vec![0u8; 100_000]).await.unwrap());
        }
        holders.push(holder);
    }
    let mut consumer = auto_scaled(&client, &topic).await;
    receive_in_order(&broker, &mut consumer, &topic, 0, N).await;
    let flows = permits(&broker);
    assert!(
        flows.iter().all(|&p| p == 1),
        "over 75 % used, the queue stays at 1: {flows:?}"
    );
    for holder in &holders {
        holder.flush().await.unwrap();
    }
    for r in receipts {
        within("the held batch sent", r).await.unwrap();
    }
    let before = flows.len();
    receive_in_order(&broker, &mut consumer, &topic, N, N).await;
    let flows = permits(&broker);
    assert!(
        flows[before..].iter().any(|&p| p > 1),
        "memory free again, the queue grows: {flows:?}"
    );
}

/// Grown to 16 with the memory limit free, the queue halves down to 1 once two producers'
/// open batches fill more than 95 % of it (the permits given beyond are taken back from the
/// next grants): every FLOW is 1 again, and nothing is lost or reordered.
#[tokio::test]
async fn the_queue_shrinks_when_the_memory_limit_is_nearly_full() {
    const N: usize = 60;
    let broker = MockBroker::start().await.unwrap();
    let topic = common::full("auto-scaled-shrink");
    let publisher = common::client(&broker.service_url());
    let producer = unbatched_producer(&publisher, &topic).await;
    publish(&producer, "m", 3 * N).await;
    let client = common::test_client(&broker.service_url())
        .memory_limit(8 * 1024 * 1024)
        .build()
        .unwrap();
    let mut consumer = auto_scaled(&client, &topic).await;
    receive_in_order(&broker, &mut consumer, &topic, 0, N).await;
    assert!(
        permits(&broker).contains(&MAX),
        "grew first: {:?}",
        permits(&broker)
    );
    // 7.8 MB of 8 MiB held (with what the consumer reserves, over 95 %).
    let mut holders = Vec::new();
    for h in 0..2 {
        let holder = client
            .producer(common::full(&format!("auto-scaled-shrink-holder-{h}")))
            .batching_options(pulsar_sdk::producer::BatchingOptions {
                max_messages: 1000,
                max_bytes: 4 * 1024 * 1024,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            })
            .create()
            .await
            .unwrap();
        for _ in 0..39 {
            let _receipt = holder.send(vec![0u8; 100_000]).await.unwrap();
        }
        holders.push(holder);
    }
    receive_in_order(&broker, &mut consumer, &topic, N, 2 * N).await;
    let flows = permits(&broker);
    let last = &flows[flows.len() - 10..];
    assert!(last.iter().all(|&p| p == 1), "shrunk back to 1: {flows:?}");
}

/// A stream of an auto-scaled consumer polled again and again while its queue is empty (each
/// wake-up of a `select!` or a combinator polls it) tells the partition tasks once per wait and
/// allocates nothing per poll (each poll collected the partitions into a `Vec` and woke every
/// task). The stream still hands out what arrives afterwards.
#[tokio::test]
async fn a_pending_stream_poll_allocates_nothing() {
    use std::task::{Context, Poll};
    let broker = MockBroker::start().await.unwrap();
    let client = common::client(&broker.service_url());
    let topic = common::full("auto-scaled-stream-polls");
    let mut consumer = auto_scaled(&client, &topic).await;
    within("a round trip", consumer.last_message_ids())
        .await
        .unwrap();
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    // The first poll may set up what later ones reuse.
    assert!(consumer.poll_next_unpin(&mut cx).is_pending());
    let before = crate::hostile::thread_allocations();
    for _ in 0..100 {
        assert!(matches!(consumer.poll_next_unpin(&mut cx), Poll::Pending));
    }
    let allocations = crate::hostile::thread_allocations() - before;
    assert_eq!(
        allocations, 0,
        "100 pending polls allocated {allocations} times"
    );

    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 2).await;
    for i in 0..2 {
        let m = within("a message", consumer.next()).await.unwrap().unwrap();
        assert_eq!(m.payload_str().unwrap(), format!("m-{i}"));
    }
}
