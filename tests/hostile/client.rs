//! Hostile-broker tests of the client-wide parts: reconnect pacing, partition counts, and the
//! inputs the builders accept (issue: a hostile broker cannot crash, exhaust or spin the client).

use crate::hostile;
use support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{test_client, within};
use hostile::{Hostile, MemWatch};
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::Error;

/// The harness itself: a broker that answers the ordinary requests lets a producer be created
/// and closed.
#[tokio::test]
async fn a_well_behaved_script_serves_a_producer() {
    hostile::alongside();
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
    hostile::alongside();
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
            .operation_timeout(Duration::from_secs(1))
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
    hostile::alongside();
    use pulsar_sdk::producer::{BatchingOptions, ProducerOptions};
    use pulsar_sdk::{BackoffPolicy, ConsumerOptions, RedeliveryBackoff};
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
        ("connect_timeout", c().connect_timeout(MAX), p(), s()),
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

/// A CLOSE_PRODUCER for `producer_id`, allowing a reconnect, naming `assigned` as the broker
/// to reconnect to (PIP-307).
fn close_producer(producer_id: u64, assigned: Option<String>) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id,
            request_id: 0,
            assigned_broker_service_url: assigned,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Waits until `counter` reaches `n` and returns how long that took from `start`.
async fn until_count(counter: &AtomicUsize, n: usize, start: Instant) -> Duration {
    tokio::time::timeout(Duration::from_secs(60), async {
        while counter.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never reached {n}"));
    start.elapsed()
}

/// The default backoff starts at 100 ms and doubles: the 6th attempt after five failures comes
/// at the earliest after 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s (less 10 % jitter), about 2.8 s. Without
/// backoff the same six take milliseconds; one second apart is a generous line between them.
const SIX_ATTEMPTS_TAKE_AT_LEAST: Duration = Duration::from_secs(1);

fn default_backoff_client(url: &str) -> pulsar_sdk::Client {
    test_client(url)
        .backoff(pulsar_sdk::BackoffPolicy::default())
        .build()
        .unwrap()
}

/// Case 7: a broker that answers every ProducerSuccess with a CloseProducer naming itself as the
/// assigned broker (PIP-307) made the client re-create at once, forever (19.5 k creates/s).
/// A re-create to an assigned broker is immediate only for an entity that had been healthy.
#[tokio::test]
async fn a_close_to_itself_after_every_create_meets_a_growing_backoff() {
    hostile::alongside();
    let creates = Arc::new(AtomicUsize::new(0));
    let seen = creates.clone();
    let broker = Hostile::start(move |mut peer| {
        let seen = seen.clone();
        async move {
            peer.handshake(None).await;
            while let Some(frame) = peer.serve_until(|f| f.ty() == Type::Producer).await {
                seen.fetch_add(1, Ordering::SeqCst);
                let id = frame.cmd.producer.as_ref().unwrap().producer_id;
                let Some(ok) = peer.reply(&frame.cmd) else {
                    return;
                };
                let me = peer.url();
                if peer.send(ok).await.is_err()
                    || peer.send(close_producer(id, Some(me))).await.is_err()
                {
                    return;
                }
            }
        }
    })
    .await;
    let client = default_backoff_client(&broker.url());
    let start = Instant::now();
    let _producer = within("create", client.producer("t").create())
        .await
        .unwrap();
    let took = until_count(&creates, 6, start).await;
    assert!(
        took >= SIX_ATTEMPTS_TAKE_AT_LEAST,
        "6 creates in {took:?}: the re-creates are not backed off"
    );
}

/// Case 8: a broker that accepts the create and then drops the connection (or sends a receipt
/// for a message never sent) made every loss start a fresh backoff: a reconnect every ~100 ms
/// for ever. The backoff starts over only after the entity stayed healthy.
#[tokio::test]
async fn a_broker_that_drops_every_connection_after_the_create_meets_a_growing_backoff() {
    hostile::alongside();
    for lie in [false, true] {
        let creates = Arc::new(AtomicUsize::new(0));
        let seen = creates.clone();
        let broker = Hostile::start(move |mut peer| {
            let seen = seen.clone();
            async move {
                peer.handshake(None).await;
                let Some(frame) = peer.serve_until(|f| f.ty() == Type::Producer).await else {
                    return;
                };
                seen.fetch_add(1, Ordering::SeqCst);
                let Some(ok) = peer.reply(&frame.cmd) else {
                    return;
                };
                let _ = peer.send(ok).await;
                if lie {
                    // Each SEND gets a receipt for a sequence id 41 ahead of it, never sent.
                    while let Some(f) = peer.serve_until(|f| f.ty() == Type::Send).await {
                        let send = f.cmd.send.as_ref().unwrap();
                        let receipt = wire::BaseCommand {
                            r#type: Type::SendReceipt as i32,
                            send_receipt: Some(wire::CommandSendReceipt {
                                producer_id: send.producer_id,
                                sequence_id: send.sequence_id + 41,
                                message_id: Some(wire::MessageIdData::default()),
                                ..Default::default()
                            }),
                            ..Default::default()
                        };
                        let _ = peer.send(receipt).await;
                    }
                }
                // Otherwise: drop the connection.
            }
        })
        .await;
        let client = default_backoff_client(&broker.url());
        let start = Instant::now();
        let producer = within("create", client.producer("t").create())
            .await
            .unwrap();
        // Pending until receipted: it is re-sent after every reconnect.
        let _pending = producer.send("x").await.unwrap();
        let took = until_count(&creates, 6, start).await;
        assert!(
            took >= SIX_ATTEMPTS_TAKE_AT_LEAST,
            "lie = {lie}: 6 creates in {took:?}: the reconnects are not backed off"
        );
    }
}

/// Case 2: a partition count from the broker drives that many creates. Counts above the
/// client's maximum are refused with a clear error and no growth; allowed counts are created
/// at most 32 at a time.
#[tokio::test]
async fn huge_partition_counts_are_refused_and_creates_are_bounded() {
    hostile::serial();
    for count in [u32::MAX, 100_000] {
        let broker = Hostile::start(move |mut peer| async move {
            peer.handshake(None).await;
            while let Some(f) = peer
                .serve_until(|f| f.ty() == Type::PartitionedMetadata)
                .await
            {
                let id = f.cmd.partition_metadata.as_ref().unwrap().request_id;
                if peer
                    .send(hostile::partitions_response(id, count))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        })
        .await;
        let client = test_client(&broker.url()).build().unwrap();
        let mem = MemWatch::start();
        let err = within("create", client.producer("t").create())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("partitions"), "{count}: {err}");
        mem.assert_peak_below("a refused partition count", 4 << 20);
    }

    // 200 partitions: the broker holds every create until the client has been quiet for
    // 100 ms, then answers them all; the most it ever holds is what the client has in flight.
    let most_held = Arc::new(AtomicUsize::new(0));
    let most = most_held.clone();
    let broker = Hostile::start(move |mut peer| {
        let most = most.clone();
        async move {
            peer.handshake(None).await;
            let mut held = Vec::new();
            loop {
                let next = tokio::time::timeout(Duration::from_millis(100), peer.recv()).await;
                match next {
                    Ok(None) => return,
                    Ok(Some(f)) if f.ty() == Type::PartitionedMetadata => {
                        let id = f.cmd.partition_metadata.as_ref().unwrap().request_id;
                        let _ = peer.send(hostile::partitions_response(id, 200)).await;
                    }
                    Ok(Some(f)) if f.ty() == Type::Producer => {
                        held.push(f.cmd);
                        most.fetch_max(held.len(), Ordering::SeqCst);
                    }
                    Ok(Some(f)) => {
                        if let Some(r) = peer.reply(&f.cmd) {
                            let _ = peer.send(r).await;
                        }
                    }
                    Err(_quiet) => {
                        for cmd in std::mem::take(&mut held) {
                            let r = peer.reply(&cmd).unwrap();
                            let _ = peer.send(r).await;
                        }
                    }
                }
            }
        }
    })
    .await;
    let client = test_client(&broker.url())
        .operation_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let producer = tokio::time::timeout(Duration::from_secs(60), client.producer("t").create())
        .await
        .expect("200 partitions created within 60 s")
        .unwrap();
    assert_eq!(producer.partitions(), 200);
    let most = most_held.load(Ordering::SeqCst);
    assert!(
        (1..=32).contains(&most),
        "{most} creates were in flight at once"
    );
}

/// A broker close that allows a reconnect, arriving while the producer's CloseProducer is in
/// flight, ends the close: the broker forgot the producer, and re-creating it only to drop it
/// again would leave it on the broker.
#[tokio::test]
async fn a_broker_close_during_close_does_not_re_create_the_producer() {
    hostile::alongside();
    let creates = Arc::new(AtomicUsize::new(0));
    let seen = creates.clone();
    let broker = Hostile::start(move |mut peer| {
        let seen = seen.clone();
        async move {
            peer.handshake(None).await;
            while let Some(f) = peer
                .serve_until(|f| matches!(f.ty(), Type::Producer | Type::CloseProducer))
                .await
            {
                if f.ty() == Type::Producer {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let ok = peer.reply(&f.cmd).unwrap();
                    let _ = peer.send(ok).await;
                } else {
                    // Instead of answering: close it from the broker's side, reconnect allowed.
                    let id = f.cmd.close_producer.as_ref().unwrap().producer_id;
                    let _ = peer.send(close_producer(id, None)).await;
                }
            }
        }
    })
    .await;
    let client = test_client(&broker.url()).build().unwrap();
    let producer = within("create", client.producer("t").create())
        .await
        .unwrap();
    within("close", producer.close()).await.unwrap();
    assert_eq!(producer.state(), pulsar_sdk::State::Closed);
    assert_eq!(
        creates.load(Ordering::SeqCst),
        1,
        "re-created while closing"
    );
}

/// Upstream `closeAsync`: a CloseProducer the broker answers with an error (the connection
/// staying up) fails `close()`; the producer still ends Closed.
#[tokio::test]
async fn a_close_refused_by_the_broker_is_reported_by_close() {
    hostile::alongside();
    let broker = Hostile::start(|mut peer| async move {
        peer.handshake(None).await;
        while let Some(f) = peer.serve_until(|f| f.ty() == Type::CloseProducer).await {
            let request_id = f.cmd.close_producer.as_ref().unwrap().request_id;
            let refusal = wire::BaseCommand {
                r#type: Type::Error as i32,
                error: Some(wire::CommandError {
                    request_id,
                    error: pulsar_sdk::ServerError::ServiceNotReady.code(),
                    message: "not now".to_owned(),
                }),
                ..Default::default()
            };
            if peer.send(refusal).await.is_err() {
                return;
            }
        }
    })
    .await;
    let client = test_client(&broker.url()).build().unwrap();
    let producer = within("create", client.producer("t").create())
        .await
        .unwrap();
    let r = within("close", producer.close()).await;
    assert!(
        matches!(r, Err(pulsar_sdk::Error::Broker { .. })),
        "close() returned {r:?}"
    );
    assert_eq!(producer.state(), pulsar_sdk::State::Closed);
}

/// Issue #31, section 2: a ProducerSuccess naming the producer (or its schema version) with
/// 4 MiB made every pending message carry it (1.1 GB in under a second for 2,000 sends of
/// 100 B). The create now fails with a clear error naming the bound, and does not retry.
#[tokio::test]
async fn a_producer_success_with_a_huge_name_or_schema_version_fails_the_create() {
    hostile::alongside();
    for (what, name, version) in [
        ("producer", "n".repeat(4 << 20), None),
        ("schema version", "ok".to_string(), Some(vec![7u8; 4 << 20])),
    ] {
        let creates = Arc::new(AtomicUsize::new(0));
        let seen = creates.clone();
        let broker = Hostile::start(move |mut peer| {
            let (name, version, seen) = (name.clone(), version.clone(), seen.clone());
            async move {
                peer.handshake(None).await;
                while let Some(frame) = peer.serve_until(|f| f.ty() == Type::Producer).await {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let mut ok = peer.reply(&frame.cmd).unwrap();
                    let s = ok.producer_success.as_mut().unwrap();
                    s.producer_name = name.clone();
                    s.schema_version = version.clone().map(Into::into);
                    if peer.send(ok).await.is_err() {
                        return;
                    }
                }
            }
        })
        .await;
        let client = test_client(&broker.url()).build().unwrap();
        let err = within("create", client.producer("t").create())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Protocol(m) if m.contains(what) && m.contains("more than")),
            "{what}: {err:?}"
        );
        assert_eq!(creates.load(Ordering::SeqCst), 1, "{what}: not retried");
        within("client close", client.close()).await.unwrap();
    }
}

/// Issue #31, section 5: the partition cap is the client's `max_partitions` (default 65,536):
/// a count above it is refused before anything is created; a count within it is served.
#[tokio::test]
async fn max_partitions_bounds_what_a_broker_may_report() {
    hostile::alongside();
    for (count, refused) in [(9u32, true), (8, false)] {
        let broker = Hostile::start(move |mut peer| async move {
            peer.handshake(None).await;
            while let Some(f) = peer
                .serve_until(|f| f.ty() == Type::PartitionedMetadata)
                .await
            {
                let id = f.cmd.partition_metadata.as_ref().unwrap().request_id;
                if peer
                    .send(hostile::partitions_response(id, count))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        })
        .await;
        let client = test_client(&broker.url())
            .max_partitions(8)
            .build()
            .unwrap();
        let created = within("create", client.producer("t").create()).await;
        if refused {
            let err = created.unwrap_err();
            assert!(
                matches!(&err, Error::Protocol(m) if m.contains("9 partitions") && m.contains("max_partitions")),
                "{err:?}"
            );
            assert_eq!(broker.accepted(), 1);
        } else {
            let p = created.unwrap();
            within("close", p.close()).await.unwrap();
        }
        within("client close", client.close()).await.unwrap();
    }
    let e = test_client("pulsar://h:6650")
        .max_partitions(0)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e:?}");
}
