//! Hostile-broker tests of the client-wide parts: reconnect pacing, partition counts, and the
//! inputs the builders accept (issue: a hostile broker cannot crash, exhaust or spin the client).

mod common;
mod hostile;

use common::{test_client, within};
use hostile::Hostile;

/// The harness itself: a broker that answers the ordinary requests lets a producer be created
/// and closed.
#[tokio::test]
async fn a_well_behaved_script_serves_a_producer() {
    let broker = Hostile::start(|mut peer| async move {
        peer.handshake(None).await;
        peer.serve().await;
    })
    .await;
    let client = test_client(&broker.url()).build().unwrap();
    let producer = within("create", client.producer("t").create())
        .await
        .unwrap();
    within("close", producer.close()).await.unwrap();
    within("client close", client.close()).await.unwrap();
}

/// Case 11: a host with a percent-encoded `,` or `;` was accepted by `build()` and panicked at
/// the first lookup. Every service URL that builds must be usable: a lookup against it fails
/// with an error, never a panic.
#[tokio::test]
async fn percent_encoded_separators_in_a_host_are_refused_or_harmless() {
    for url in [
        "pulsar://a%2Cb:6650",
        "pulsar://a%3Bb:6650",
        "pulsar://a%2cb",
        "pulsar://x%2C:1",
        "pulsar://%5B::1%5D:6650",
        "pulsar://a%3A1:6650",
        "pulsar://a%2Fb:6650",
    ] {
        let built = pulsar_sdk::Client::builder()
            .service_url(url)
            .operation_timeout(std::time::Duration::from_secs(1))
            .build();
        let Ok(client) = built else { continue };
        let r = tokio::spawn(async move { client.producer("t").create().await.map(|_| ()) }).await;
        let r = r.unwrap_or_else(|e| panic!("{url}: the client panicked: {e}"));
        assert!(r.is_err(), "{url}: created a producer on a nonsense host");
    }
}

/// Counts panics anywhere in the process (entity tasks included), next to the default report.
fn count_panics() -> &'static std::sync::atomic::AtomicUsize {
    use std::sync::atomic::AtomicUsize;
    use std::sync::OnceLock;
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            default(info);
        }));
    });
    &PANICS
}

/// Builds a client from `client`, subscribes with `consumer`, produces with `producer`, sends,
/// receives, acks, closes. `Err(InvalidConfig)` from build/create/subscribe is an answer; any
/// other failure is not.
async fn exercise(
    what: &str,
    client: pulsar_sdk::ClientBuilder,
    producer: pulsar_sdk::producer::ProducerOptions,
    consumer: pulsar_sdk::ConsumerOptions,
) {
    use pulsar_sdk::Error;
    let refused = |r: &Error| matches!(r, Error::InvalidConfig(_));
    let client = match client.build() {
        Ok(c) => c,
        Err(e) if refused(&e) => return,
        Err(e) => panic!("{what}: build: {e}"),
    };
    let topic = format!(
        "extreme-{}",
        what.replace(|c: char| !c.is_alphanumeric(), "-")
    );
    let mut cons = match within(what, client.consumer(&topic).options(consumer).subscribe()).await {
        Ok(c) => c,
        Err(e) if refused(&e) => return,
        Err(e) => panic!("{what}: subscribe: {e}"),
    };
    let prod = match within(what, client.producer(&topic).options(producer).create()).await {
        Ok(p) => p,
        Err(e) if refused(&e) => return,
        Err(e) => panic!("{what}: create: {e}"),
    };
    let receipt = within(what, prod.send("x")).await.unwrap();
    // A batch may wait for more messages (e.g. max_publish_delay = MAX): flush it.
    within(what, prod.flush()).await.unwrap();
    within(what, receipt).await.unwrap();
    let msg = within(what, cons.recv()).await.unwrap();
    cons.ack(&msg).unwrap();
    within(what, prod.close()).await.unwrap();
    within(what, cons.close()).await.unwrap();
    within(what, client.close()).await.unwrap();
}

/// Case 12: extreme values the builders accepted and that then panicked a task. Each is now
/// refused at build/create with `InvalidConfig`, or works.
#[tokio::test]
async fn extreme_option_values_are_refused_or_work() {
    use pulsar_sdk::producer::{BatchingOptions, ProducerOptions};
    use pulsar_sdk::{BackoffPolicy, ConsumerOptions, RedeliveryBackoff};
    use std::time::Duration;
    let panics = count_panics();
    let before = panics.load(std::sync::atomic::Ordering::SeqCst);
    let broker = pulsar_sdk::mock::MockBroker::start().await.unwrap();
    let url = broker.service_url();
    let c = || test_client(&url);
    let p = ProducerOptions::default;
    let s = || {
        let mut o = ConsumerOptions::default();
        o.subscription = "s".into();
        o
    };
    const MAX: Duration = Duration::MAX;
    let mut cases: Vec<(&str, _, _, _)> = vec![
        ("operation_timeout", c().operation_timeout(MAX), p(), s()),
        ("connection_timeout", c().connection_timeout(MAX), p(), s()),
        ("keepalive_interval", c().keepalive_interval(MAX), p(), s()),
        (
            "partitions_interval",
            c().auto_update_partitions_interval(MAX),
            p(),
            s(),
        ),
        (
            "lookup_redirects",
            c().max_lookup_redirects(u32::MAX),
            p(),
            s(),
        ),
        ("memory_limit", c().memory_limit(usize::MAX), p(), s()),
    ];
    for (name, policy) in [
        (
            "backoff_max",
            BackoffPolicy {
                max: MAX,
                ..Default::default()
            },
        ),
        (
            "backoff_both",
            BackoffPolicy {
                initial: MAX,
                max: MAX,
                ..Default::default()
            },
        ),
        (
            "backoff_nan",
            BackoffPolicy {
                multiplier: f64::NAN,
                ..Default::default()
            },
        ),
        (
            "backoff_inf",
            BackoffPolicy {
                multiplier: f64::INFINITY,
                ..Default::default()
            },
        ),
        (
            "jitter_neg",
            BackoffPolicy {
                jitter: -5.0,
                ..Default::default()
            },
        ),
    ] {
        cases.push((name, c().backoff(policy), p(), s()));
    }
    let mut prod = |name, f: fn(&mut ProducerOptions)| {
        let mut o = p();
        f(&mut o);
        cases.push((name, c(), o, s()));
    };
    prod("max_pending", |o| o.max_pending_messages = usize::MAX);
    prod("send_timeout", |o| o.send_timeout = MAX);
    for f in [
        (|b: &mut BatchingOptions| b.max_publish_delay = MAX) as fn(&mut BatchingOptions),
        |b| b.max_messages = usize::MAX,
        |b| b.max_bytes = usize::MAX,
    ] {
        let mut o = p();
        let mut b = BatchingOptions::default();
        f(&mut b);
        o.batching = Some(b);
        cases.push(("batching", c(), o, s()));
    }
    let mut cons = |name, f: fn(&mut ConsumerOptions)| {
        let mut o = s();
        f(&mut o);
        cases.push((name, c(), p(), o));
    };
    cons("receiver_queue", |o| o.receiver_queue_size = u32::MAX);
    cons("ack_group_time", |o| o.ack_group_time = MAX);
    cons("ack_group_max", |o| o.ack_group_max = usize::MAX);
    cons("nack_delay", |o| o.negative_ack_delay = MAX);
    cons("ack_timeout", |o| o.ack_timeout = MAX);
    cons("ack_timeout_tick", |o| {
        o.ack_timeout = Duration::from_secs(1);
        o.ack_timeout_tick = MAX
    });
    cons("nack_backoff", |o| {
        o.negative_ack_backoff = Some(RedeliveryBackoff::exponential(MAX, MAX))
    });
    cons("nack_backoff_nan", |o| {
        let mut b = RedeliveryBackoff::exponential(Duration::from_secs(1), MAX);
        b.multiplier = f64::NAN;
        o.negative_ack_backoff = Some(b)
    });
    for (name, client, producer, consumer) in cases {
        eprintln!("case {name}");
        exercise(name, client, producer, consumer).await;
    }
    assert_eq!(
        panics.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "a task panicked (see above)"
    );
}
