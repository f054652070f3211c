//! Consume → transform → produce, exactly once (transactions, PIP-31): the `pipeline`
//! example's order enricher, with each input's output produced and the input acknowledged in
//! one transaction that then commits. A crash before the commit leaves neither (the input
//! comes back, its output is never delivered); a commit leaves both, once.
//!
//! Without `--input`, self-contained like `quickstart`: it publishes `--orders` orders (and
//! one malformed input) to a fresh input topic, runs the loop until every input is done, then
//! reads the output topic and checks that each order has exactly one output. With `--input`
//! and `--output`, it is the service: the loop on those topics until Ctrl-C (or until it is
//! killed: the point of exactly once). Uses the broker at `PULSAR_URL` (or `--url`; its
//! transaction coordinator must be enabled, and deduplication on the output's namespace: a
//! send stored whose receipt a lost connection took is sent again, and without
//! deduplication stored twice in its transaction); otherwise starts the crate's embedded
//! mock broker, with its coordinator and deduplication, in-process. The security options and
//! variables of `quickstart` apply.
//!
//! cargo run --example exactly_once -- [--url U] [--orders N] [--txn-timeout-ms MS]
//!   [--work-ms MS] [--input T --output T2 [--subscription S]]
//!
//! The loop itself is in `examples/common/exactly_once.rs`, which
//! `tests/protocol/transactions/exactly_once.rs` kills and restarts mid-transaction.

mod common;
#[path = "common/exactly_once.rs"]
mod exactly_once;
#[path = "common/pipeline.rs"]
mod pipeline;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{die, Args};
use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTransactions};
use pulsar_sdk::{InitialPosition, SubscriptionType};

const USAGE: &str = "usage: exactly_once [--url U] [--orders N] [--txn-timeout-ms MS] \
[--work-ms MS] [--input T --output T2 [--subscription S]]";

#[tokio::main]
async fn main() {
    let args = Args::parse(
        USAGE,
        &[
            "url",
            "orders",
            "txn-timeout-ms",
            "work-ms",
            "input",
            "output",
            "subscription",
        ],
        &[],
    );
    let orders: usize = args.number(USAGE, "orders", 20);
    let txn_timeout = Duration::from_millis(args.number(USAGE, "txn-timeout-ms", 10_000));
    // Simulated processing time per input, spent inside its transaction.
    let work = Duration::from_millis(args.number(USAGE, "work-ms", 0));
    let url = args
        .get("url")
        .map(str::to_owned)
        .or_else(|| std::env::var("PULSAR_URL").ok());
    // Keep the embedded broker alive for the whole run.
    let _embedded;
    let url = match url {
        Some(url) => url,
        None => {
            let broker = MockBroker::start_with(MockBrokerConfig {
                transactions: MockTransactions::Enabled,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| die(e));
            // The output producer's resends after a reconnect are stored once.
            broker
                .set_deduplication("public/default", true)
                .unwrap_or_else(|e| die(e));
            eprintln!(
                "PULSAR_URL not set: started the embedded mock broker (with a transaction \
                 coordinator and deduplication) at {}",
                broker.service_url()
            );
            let url = broker.service_url();
            _embedded = broker;
            url
        }
    };
    let client = common::secure(
        pulsar_sdk::Client::builder()
            .service_url(&url)
            .enable_transaction(true),
        common::Security::from_env(),
    )
    .build()
    .unwrap_or_else(|e| die(e));
    // Fail fast on a broker without a coordinator (pulsar-lite has none): the first
    // transaction says so after at most one operation timeout.
    let probe = client
        .transaction()
        .begin()
        .await
        .unwrap_or_else(|e| die(e));
    probe.abort().await.unwrap_or_else(|e| die(e));
    if let Some(input) = args.get("input") {
        let output = args.required(USAGE, "output");
        let subscription = args.get("subscription").unwrap_or("exactly-once-enricher");
        serve(&client, input, &output, subscription, txn_timeout, work).await;
        client.close().await.unwrap_or_else(|e| die(e));
        return;
    }
    let run_id = std::process::id();
    let input = format!("exactly-once-orders-{run_id}");
    let output = format!("exactly-once-enriched-{run_id}");

    // The inputs: orders, and one malformed input among them, batched (the producer's
    // default): each message of a batch is acknowledged in its own transaction.
    let feeder = client
        .producer(&input)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    let mut receipts = Vec::new();
    for i in 0..orders {
        let order = format!("order-{i}:{}:100", i + 1);
        receipts.push(feeder.send(order).await.unwrap_or_else(|e| die(e)));
        if i == orders / 2 {
            receipts.push(feeder.send("not an order").await.unwrap_or_else(|e| die(e)));
        }
    }
    for r in receipts {
        r.await.unwrap_or_else(|e| die(e));
    }

    // Subscribe to the output first, to read what the loop produces.
    let mut check = client
        .consumer(&output)
        .subscription("exactly-once-check")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e));
    let consumer = input_consumer(&client, &input, "exactly-once-enricher").await;
    // Transactional messages are one entry each: no batching to configure.
    let producer = client
        .producer(&output)
        .create()
        .await
        .unwrap_or_else(|e| die(e));

    // Run the loop until every order's output arrived.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let looping = {
        let (client, producer) = (client.clone(), producer.clone());
        tokio::spawn(async move {
            exactly_once::run(&client, consumer, &producer, txn_timeout, work, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let mut per_input: BTreeMap<String, usize> = BTreeMap::new();
    let mut outputs = 0usize;
    while per_input.len() < orders {
        let msg = tokio::time::timeout(txn_timeout * 3, check.recv())
            .await
            .unwrap_or_else(|_| die("no output for a while: is the coordinator enabled?"))
            .unwrap_or_else(|e| die(e));
        check.ack(&msg).unwrap_or_else(|e| die(e));
        let from = msg.properties.get(exactly_once::INPUT_ID).cloned();
        *per_input.entry(from.unwrap_or_default()).or_default() += 1;
        outputs += 1;
        println!("{}", msg.payload_str().unwrap_or("<binary>"));
    }
    let _ = stop.send(());
    let stats = looping
        .await
        .unwrap_or_else(|e| die(e))
        .unwrap_or_else(|e| die(e));
    // Anything more would be a duplicate.
    if let Ok(Ok(extra)) = tokio::time::timeout(Duration::from_secs(1), check.recv()).await {
        die(format!("unexpected extra output {:?}", extra.payload_str()));
    }
    let duplicates = outputs - per_input.len();
    for c in [
        check.close().await,
        producer.close().await,
        feeder.close().await,
    ] {
        c.unwrap_or_else(|e| die(e));
    }
    client.close().await.unwrap_or_else(|e| die(e));
    println!(
        r#"{{"orders":{orders},"outputs":{outputs},"duplicates":{duplicates},"committed":{},"rejected":{},"failed":{}}}"#,
        stats.committed, stats.rejected, stats.failed
    );
    if duplicates > 0 {
        std::process::exit(1);
    }
}

/// The consumer of the inputs.
async fn input_consumer(
    client: &pulsar_sdk::Client,
    input: &str,
    subscription: &str,
) -> pulsar_sdk::Consumer {
    client
        .consumer(input)
        .subscription(subscription)
        // Shared: run several copies of this service to share the work.
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        // A failed attempt's input comes back after this.
        .negative_ack_delay(Duration::from_millis(500))
        .subscribe()
        .await
        .unwrap_or_else(|e| die(e))
}

/// The service: the loop on `input` → `output` until Ctrl-C; prints its totals as JSON.
async fn serve(
    client: &pulsar_sdk::Client,
    input: &str,
    output: &str,
    subscription: &str,
    txn_timeout: Duration,
    work: Duration,
) {
    let consumer = input_consumer(client, input, subscription).await;
    let producer = client
        .producer(output)
        .create()
        .await
        .unwrap_or_else(|e| die(e));
    eprintln!("exactly_once: serving {input} -> {output}");
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("exactly_once: cannot listen for Ctrl-C ({e}); running until killed");
            std::future::pending::<()>().await;
        }
    };
    let stats = exactly_once::run(client, consumer, &producer, txn_timeout, work, ctrl_c)
        .await
        .unwrap_or_else(|e| die(e));
    producer.close().await.unwrap_or_else(|e| die(e));
    println!(
        r#"{{"committed":{},"rejected":{},"failed":{}}}"#,
        stats.committed, stats.rejected, stats.failed
    );
}
