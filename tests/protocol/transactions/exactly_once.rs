//! The `exactly_once` example's loop (`examples/common/exactly_once.rs`) against the mock
//! broker's coordinator, killed mid-transaction and restarted: every input ends with exactly
//! one delivered output. A process killed before its commit leaves an output stored but never
//! delivered (the coordinator aborts the transaction at its timeout, upstream
//! `TransactionTimeoutTrackerImpl`) and its input is received again (upstream
//! `PendingAckHandleImpl.internalAbortTxn` redelivers it); one killed right after its commit
//! leaves its output delivered once and its input acknowledged for good.

// The example's own modules, under their own names.
#[allow(clippy::module_inception)]
#[path = "../../../examples/common/exactly_once.rs"]
mod exactly_once;
// Also loaded by `mock_kit::pipeline` (the `pipeline` example's test): its module is
// private there, and this one is what `exactly_once.rs` names as `super::pipeline`.
#[allow(clippy::duplicate_mod)]
#[path = "../../../examples/common/pipeline.rs"]
mod pipeline;

use std::collections::BTreeMap;
use std::time::Duration;

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Client, Consumer, InitialPosition, SubscriptionType};

use super::support::{nothing_for_now, setup};

const ORDERS: usize = 12;
const INPUT: &str = "eo-orders";
const OUTPUT: &str = "eo-enriched";
const SUBSCRIPTION: &str = "enricher";

/// Publishes `order-0 .. order-{n-1}` to the input topic, one entry each.
async fn feed(client: &Client, range: std::ops::Range<usize>) {
    feed_to(client, INPUT, range).await
}

async fn feed_to(client: &Client, topic: &str, range: std::ops::Range<usize>) {
    let feeder = support::unbatched_producer(client, topic).await;
    let mut receipts = Vec::new();
    for i in range {
        receipts.push(feeder.send(format!("order-{i}:1:100")).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
}

/// Publishes `order-0 .. order-{n-1}` to the input topic in batches (the producer's
/// default), a few entries holding them all.
async fn feed_batched(client: &Client, n: usize) {
    let feeder = client
        .producer(INPUT)
        .batching_options(pulsar_sdk::producer::BatchingOptions {
            max_messages: 5,
            max_publish_delay: Duration::from_secs(30),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(feeder.send(format!("order-{i}:1:100")).await.unwrap());
    }
    feeder.flush().await.unwrap();
    for r in receipts {
        r.await.unwrap();
    }
}

fn transactional_client(broker: &MockBroker) -> Client {
    support::test_client(&broker.service_url())
        .enable_transaction(true)
        .build()
        .unwrap()
}

async fn input_consumer(client: &Client) -> Consumer {
    client
        .consumer(INPUT)
        .subscription(SUBSCRIPTION)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(100))
        .subscribe()
        .await
        .unwrap()
}

/// A consumer of the output topic: what users of the pipeline see.
async fn output_checker(client: &Client) -> Consumer {
    checker_of(client, OUTPUT).await
}

async fn checker_of(client: &Client, topic: &str) -> Consumer {
    client
        .consumer(topic)
        .subscription("check")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap()
}

/// Where the killed process stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KilledAt {
    /// Its first input's transaction staged (output produced, input acknowledged), not
    /// committed.
    BeforeCommit,
    /// Its first input's transaction committed.
    AfterCommit,
}

/// A pipeline process killed at `at`: it runs on a runtime of its own, dropped at once when
/// it reaches that point (its tasks and sockets gone, nothing closed or aborted), as a
/// process that was killed. Returns the id of the input it was working on.
async fn run_and_kill(broker: &MockBroker, at: KilledAt, txn_timeout: Duration) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (reached, at_point) = tokio::sync::oneshot::channel::<String>();
    let url = broker.service_url();
    rt.spawn(async move {
        let client = support::test_client(&url)
            .enable_transaction(true)
            .build()
            .unwrap();
        let mut consumer = input_consumer(&client).await;
        let producer = client.producer(OUTPUT).create().await.unwrap();
        let msg = consumer.recv().await.unwrap();
        let staged = exactly_once::stage(&client, &consumer, &producer, &msg, txn_timeout)
            .await
            .unwrap();
        if at == KilledAt::AfterCommit {
            staged.txn.commit().await.unwrap();
        }
        let _ = reached.send(msg.id.to_string());
        std::future::pending::<()>().await;
    });
    let input = support::within("the process reaches its kill point", at_point)
        .await
        .unwrap();
    // The output was stored before the kill (the commit waits for it; before the commit,
    // wait for it here so that the kill leaves a stored, uncommitted output behind).
    let output = support::full(OUTPUT);
    support::wait_until("the output is stored", || {
        broker.topic_messages(&output) == 1
    })
    .await;
    rt.shutdown_background();
    input
}

/// Runs the example's loop (the restarted process) until the checker has one output per
/// order, stops it, and returns the outputs per input id and the loop's stats.
async fn restart_and_finish(
    client: &Client,
    checker: &mut Consumer,
) -> (BTreeMap<String, usize>, exactly_once::Stats) {
    let consumer = input_consumer(client).await;
    let producer = client.producer(OUTPUT).create().await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let (client, producer) = (client.clone(), producer.clone());
        tokio::spawn(async move {
            exactly_once::run(
                &client,
                consumer,
                &producer,
                Duration::from_secs(5),
                Duration::ZERO,
                async {
                    let _ = stopped.await;
                },
            )
            .await
        })
    };
    let mut per_input: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..ORDERS {
        let m = support::recv(checker).await;
        checker.ack(&m).unwrap();
        let from = m.properties.get(exactly_once::INPUT_ID).unwrap().clone();
        *per_input.entry(from).or_default() += 1;
    }
    let _ = stop.send(());
    let stats = support::within("the loop stops", running)
        .await
        .unwrap()
        .unwrap();
    // Nothing more: any further output would be a duplicate.
    nothing_for_now(checker).await;
    producer.close().await.unwrap();
    (per_input, stats)
}

/// Killed before its commit: the output it produced is stored but never delivered, and once
/// the coordinator aborted the transaction (its timeout) the input is received again by the
/// restarted process, which produces its only delivered output.
#[tokio::test]
async fn a_process_killed_before_its_commit_leaves_no_output_and_its_input_comes_back() {
    let (broker, client) = setup().await;
    feed(&client, 0..ORDERS).await;
    let mut checker = output_checker(&client).await;
    let killed_input =
        run_and_kill(&broker, KilledAt::BeforeCommit, Duration::from_millis(500)).await;
    nothing_for_now(&mut checker).await;
    let restarted = transactional_client(&broker);
    let (per_input, stats) = restart_and_finish(&restarted, &mut checker).await;
    assert_eq!(per_input.len(), ORDERS, "{per_input:?}");
    assert!(per_input.values().all(|n| *n == 1), "{per_input:?}");
    assert_eq!(per_input.get(&killed_input), Some(&1));
    // The restarted process did every input, the killed one included.
    assert_eq!(stats.committed, ORDERS as u64, "{stats:?}");
    // One output stored per order, plus the aborted one (never delivered).
    assert_eq!(broker.topic_messages(&support::full(OUTPUT)), ORDERS + 1);
    assert_eq!(
        broker.subscription_backlog(&support::full(INPUT), SUBSCRIPTION),
        0
    );
    restarted.close().await.unwrap();
}

/// The loop over batched input (what producers send by default): each message of a batch
/// is acknowledged in its own transaction (an ack set naming it), and every input ends with
/// one delivered output and is acknowledged for good, the batch entries included.
#[tokio::test]
async fn the_loop_over_batched_input_leaves_one_output_per_input() {
    let (broker, client) = setup().await;
    feed_batched(&client, ORDERS).await;
    let input = support::full(INPUT);
    assert!(
        broker.topic_messages(&input) < ORDERS,
        "the input is batched: {} entries",
        broker.topic_messages(&input)
    );
    let mut checker = output_checker(&client).await;
    let (per_input, stats) = restart_and_finish(&client, &mut checker).await;
    assert_eq!(per_input.len(), ORDERS, "{per_input:?}");
    assert!(per_input.values().all(|n| *n == 1), "{per_input:?}");
    assert_eq!(stats.committed, ORDERS as u64, "{stats:?}");
    assert_eq!(broker.subscription_backlog(&input, SUBSCRIPTION), 0);
    client.close().await.unwrap();
}

/// Killed right after its commit: its output is delivered once and its input is not
/// received again; the restarted process does the rest.
#[tokio::test]
async fn a_process_killed_after_its_commit_leaves_exactly_one_output() {
    let (broker, client) = setup().await;
    feed(&client, 0..ORDERS).await;
    let mut checker = output_checker(&client).await;
    let killed_input = run_and_kill(&broker, KilledAt::AfterCommit, Duration::from_secs(5)).await;
    let restarted = transactional_client(&broker);
    let (per_input, stats) = restart_and_finish(&restarted, &mut checker).await;
    assert_eq!(per_input.len(), ORDERS, "{per_input:?}");
    assert!(per_input.values().all(|n| *n == 1), "{per_input:?}");
    assert_eq!(per_input.get(&killed_input), Some(&1));
    assert_eq!(stats.committed, ORDERS as u64 - 1, "{stats:?}");
    assert_eq!(broker.topic_messages(&support::full(OUTPUT)), ORDERS);
    restarted.close().await.unwrap();
}

/// The loop through a broker restart (the coordinator's state survives it, as upstream's
/// transaction log): transactions cut by the restart fail and their inputs come back, and
/// each input still ends with exactly one delivered output. The output producer's resends
/// are deduplicated by the broker (namespace deduplication on), as exactly-once produce
/// needs.
#[tokio::test]
async fn the_loop_leaves_one_output_per_input_through_a_broker_restart() {
    let (broker, client) = setup().await;
    broker.set_deduplication("public/default", true).unwrap();
    feed(&client, 0..ORDERS / 2).await;
    let mut checker = output_checker(&client).await;
    let consumer = input_consumer(&client).await;
    let producer = client
        .producer(OUTPUT)
        .name("eo-output")
        .create()
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let (client, producer) = (client.clone(), producer.clone());
        tokio::spawn(async move {
            exactly_once::run(
                &client,
                consumer,
                &producer,
                Duration::from_secs(2),
                Duration::ZERO,
                async {
                    let _ = stopped.await;
                },
            )
            .await
        })
    };
    let output = support::full(OUTPUT);
    support::wait_until("some outputs are stored", || {
        broker.topic_messages(&output) >= 2
    })
    .await;
    broker.restart().await.unwrap();
    feed(&client, ORDERS / 2..ORDERS).await;
    let mut per_input: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..ORDERS {
        let m = support::recv(&mut checker).await;
        checker.ack(&m).unwrap();
        let from = m.properties.get(exactly_once::INPUT_ID).unwrap().clone();
        *per_input.entry(from).or_default() += 1;
    }
    let _ = stop.send(());
    let stats = support::within("the loop stops", running)
        .await
        .unwrap()
        .unwrap();
    nothing_for_now(&mut checker).await;
    assert_eq!(per_input.len(), ORDERS, "{per_input:?}");
    assert!(per_input.values().all(|n| *n == 1), "{per_input:?}");
    // A commit cut by the restart may have committed without the loop hearing it: then the
    // loop counted a failure and the input did not come back.
    assert!(stats.committed <= ORDERS as u64, "{stats:?}");
    eprintln!("through the restart: {stats:?}");
    support::wait_until("every input acknowledged", || {
        broker.subscription_backlog(&support::full(INPUT), SUBSCRIPTION) == 0
    })
    .await;
    client.close().await.unwrap();
}

/// Receives the next output and counts it under the input it names.
async fn count_next(checker: &mut Consumer, per_input: &mut BTreeMap<String, usize>) {
    let m = support::recv(checker).await;
    checker.ack(&m).unwrap();
    let from = m.properties.get(exactly_once::INPUT_ID).unwrap().clone();
    *per_input.entry(from).or_default() += 1;
}

/// The example itself, as processes: started as the service on the input topic (with slow
/// work inside each transaction), killed (SIGKILL) inside a transaction once a few outputs
/// were delivered, started again. Wherever the kill landed, every input ends with
/// exactly one delivered output, and nothing more arrives past the killed transaction's
/// timeout. (Needs the example built: plain `cargo test` builds it.)
#[tokio::test]
async fn the_example_killed_mid_stream_and_restarted_leaves_one_output_per_input() {
    const N: usize = 20;
    const TXN_TIMEOUT_MS: u64 = 1000;
    let (broker, client) = setup().await;
    let (input, output) = ("eo-process-orders", "eo-process-enriched");
    feed_to(&client, input, 0..N).await;
    let mut checker = checker_of(&client, output).await;
    let url = broker.service_url();
    let timeout = TXN_TIMEOUT_MS.to_string();
    let args = [
        "--url",
        &url,
        "--input",
        input,
        "--output",
        output,
        "--txn-timeout-ms",
        &timeout,
        "--work-ms",
        "20",
    ];
    let start = || {
        std::process::Command::new(support::examples::example("exactly_once"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut per_input: BTreeMap<String, usize> = BTreeMap::new();
    let mut first = start();
    for _ in 0..5 {
        count_next(&mut checker, &mut per_input).await;
    }
    // Kill it inside a transaction: once its next output is stored (its commit comes after
    // the simulated work).
    let stored = support::full(output);
    support::wait_until("an output stored, not committed", || {
        broker.topic_messages(&stored) > 5
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let killed_after = per_input.len();
    let mut second = start();
    while per_input.values().sum::<usize>() < N {
        count_next(&mut checker, &mut per_input).await;
    }
    // Past the killed transaction's timeout: nothing more (no duplicate).
    let late =
        tokio::time::timeout(Duration::from_millis(TXN_TIMEOUT_MS * 2), checker.recv()).await;
    second.kill().unwrap();
    second.wait().unwrap();
    assert!(late.is_err(), "a duplicate output: {late:?}");
    assert_eq!(per_input.len(), N, "{per_input:?}");
    assert!(per_input.values().all(|n| *n == 1), "{per_input:?}");
    eprintln!(
        "killed after {killed_after} outputs; {} stored on the output topic for {N} inputs",
        broker.topic_messages(&support::full(output))
    );
}

#[test]
fn the_transformation_is_the_pipeline_examples() {
    assert!(pipeline::enrich(b"order-1:2:100").is_ok());
    assert!(pipeline::enrich(b"not an order").is_err());
}
