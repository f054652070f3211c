//! Breaker review of #18 (producer flow control as counts, receipt runs, consumer records in a
//! SmallVec, batched send timeout from the batch's flush), from the outside: the public API
//! against the mock broker.

use common::{full, test_client, within};
use support as common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Error, InitialPosition, MessageId, ProducerMessage, QueueLimit, SendFuture};

fn done(f: &mut SendFuture) -> Option<pulsar_sdk::Result<MessageId>> {
    f.now_or_never()
}

/// Key-based batching interleaves the receipt slots of several batches (runs with gaps), and
/// messages sent alone (deliver_at, too big for a batch) cut every batch: each receipt must
/// still carry the id the consumer sees for that very payload (ledger, entry, batch index and
/// batch size), across more than one receipt group (32 sends).
#[tokio::test]
async fn receipts_of_interleaved_key_batches_match_what_the_consumer_sees() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("breaker40-key-runs");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 7,
            max_bytes: 4096,
            max_publish_delay: Duration::from_secs(3600),
            key_based: true,
        })
        .create()
        .await
        .unwrap();
    let n = 150;
    let mut futs = Vec::new();
    for i in 0..n {
        let payload = format!("m{i}");
        let msg = match i % 23 {
            11 => ProducerMessage::new(payload).deliver_at(SystemTime::now()),
            17 => {
                // Too big for a batch: sent alone.
                let mut p = payload.into_bytes();
                p.resize(5000, b'x');
                ProducerMessage::new(p)
            }
            _ => {
                let m = ProducerMessage::new(payload).key(format!("k{}", i % 3));
                if i % 5 == 0 {
                    m.ordering_key(vec![b'o', (i % 2) as u8])
                } else {
                    m
                }
            }
        };
        futs.push(producer.send(msg).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut receipts = Vec::new();
    // Awaited in reverse order, half of them from other tasks.
    let mut handles = Vec::new();
    for (i, f) in futs.into_iter().enumerate().rev() {
        if i % 2 == 0 {
            handles.push((i, tokio::spawn(f).map(|r| r.unwrap()).boxed()));
        } else {
            handles.push((i, f.boxed()));
        }
    }
    for (i, h) in handles {
        receipts.push((i, within("receipt", h).await.unwrap()));
    }
    let mut seen: HashMap<String, MessageId> = HashMap::new();
    for _ in 0..n {
        let m = within("recv", consumer.recv()).await.unwrap();
        let p = m.payload.clone();
        let name = String::from_utf8_lossy(&p[..p.len().min(5)])
            .trim_end_matches('x')
            .to_string();
        seen.insert(name, m.id);
    }
    for (i, id) in receipts {
        let got = seen
            .get(&format!("m{i}"))
            .unwrap_or_else(|| panic!("m{i} consumed"));
        assert_eq!(*got, id, "m{i}: receipt {id:?} vs consumed {got:?}");
        assert_eq!(
            got.batch_size, id.batch_size,
            "m{i}: batch size of receipt {id:?} vs consumed {got:?}"
        );
    }
}

/// A producer dropped (no close) with messages in an open batch and entries unanswered, and
/// another with sends waiting for memory: every future resolves (never hangs) and the client
/// memory is back in full (a new producer takes the whole limit).
#[tokio::test(start_paused = true)]
async fn a_dropped_producer_resolves_every_send_and_gives_back_all_memory() {
    const LIMIT: usize = 1000;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(LIMIT)
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let topic = full("breaker40-dropped");
    for round in 0..3 {
        let producer = client
            .producer(&topic)
            .batching_options(BatchingOptions {
                max_messages: 3,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            })
            .max_pending_messages(20)
            .create()
            .await
            .unwrap();
        let other = client
            .producer(full(&format!("breaker40-dropped-other-{round}")))
            .batching(false)
            .block_if_queue_full(true)
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let mut futs = Vec::new();
        // 3 batches of 3 (unanswered) and one open batch of 1: 10 x 100 bytes = the limit.
        for i in 0..10 {
            futs.push(producer.send(vec![i as u8; 100]).await.unwrap());
        }
        // Another producer's send must wait for the memory (it blocks).
        let waiting = tokio::spawn(async move {
            let f = other.send(vec![1u8; 10]).await;
            (other, f)
        });
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        if waiting.is_finished() {
            let (_, f) = waiting.await.unwrap();
            panic!("round {round}: memory is full, yet the send returned {f:?}");
        }
        drop(producer);
        for (i, f) in futs.into_iter().enumerate() {
            match within("dropped producer's send", f).await {
                Err(Error::Closed) | Err(Error::Timeout { .. }) => {}
                other => panic!("round {round}: send {i}: {other:?}"),
            }
        }
        let (other, f) = within("waiting send", waiting).await.unwrap();
        let f = f.unwrap();
        broker.set_unresponsive(false);
        drop(other);
        let _ = within("waiting send's receipt", f).await;
        // The whole limit is free again.
        let p = client
            .producer(&topic)
            .batching_options(BatchingOptions {
                max_messages: 100,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            })
            .block_if_queue_full(false)
            .create()
            .await
            .unwrap();
        let mut held = Vec::new();
        for _ in 0..10 {
            held.push(p.send(vec![0u8; 100]).await.unwrap());
        }
        match p.send(vec![0u8; 1]).await {
            Err(Error::ProducerQueueFull { .. }) => {}
            other => panic!("round {round}: the limit holds no more: {other:?}"),
        }
        p.close().await.unwrap();
        for f in held {
            let _ = f.await;
        }
    }
}

/// Every `ProducerMessage` field reaches the consumer as sent, in every shape of entry
/// (alone, batched, key-based batches, compressed, chunked), and each receipt is the id the
/// consumer sees.
#[tokio::test]
async fn every_message_field_round_trips_in_every_entry_shape() {
    use pulsar_sdk::CompressionType;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let shapes: Vec<(&str, bool, bool, CompressionType, bool)> = vec![
        ("alone", false, false, CompressionType::None, false),
        ("batched", true, false, CompressionType::None, false),
        ("keybatched", true, true, CompressionType::None, false),
        ("lz4", true, false, CompressionType::Lz4, false),
        ("zstd-alone", false, false, CompressionType::Zstd, false),
        ("chunked", false, false, CompressionType::None, true),
    ];
    for (name, batched, key_based, compression, chunked) in shapes {
        let topic = full(&format!("breaker40-fields-{name}"));
        let mut consumer = client
            .consumer(&topic)
            .subscription("s")
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let mut b = client
            .producer(&topic)
            .name(format!("p-{name}"))
            .compression(compression);
        b = if batched {
            b.batching_options(BatchingOptions {
                max_messages: 4,
                max_publish_delay: Duration::from_secs(3600),
                key_based,
                ..Default::default()
            })
        } else {
            b.batching(false)
        };
        if chunked {
            b = b.chunking(true).chunk_max_message_size(1000);
        }
        let producer = b.create().await.unwrap();
        let n = 8u64;
        let mut futs = Vec::new();
        for i in 0..n {
            let size = if chunked { 2500 } else { 10 + i as usize };
            let mut payload = format!("{name}-{i}-").into_bytes();
            payload.resize(size, b'0' + i as u8);
            let mut m = ProducerMessage::new(payload)
                .property("i", i.to_string())
                .property("shape", name)
                .event_time(1_000 + i)
                .sequence_id(100 + 2 * i);
            if i % 2 == 0 {
                m = m.key(format!("key-{}", i % 4));
            }
            if i % 3 == 0 {
                m = m.ordering_key(vec![i as u8, 0xff]);
            }
            futs.push((i, producer.send(m).await.unwrap()));
        }
        producer.flush().await.unwrap();
        let mut ids = HashMap::new();
        for (i, f) in futs {
            ids.insert(i, within("receipt", f).await.unwrap());
        }
        for _ in 0..n {
            let m = within("recv", consumer.recv()).await.unwrap();
            let i: u64 = m.properties["i"].parse().unwrap();
            let what = format!("{name} message {i}");
            let mut expect = format!("{name}-{i}-").into_bytes();
            let size = if chunked { 2500 } else { 10 + i as usize };
            expect.resize(size, b'0' + i as u8);
            assert_eq!(m.payload.as_ref(), &expect[..], "{what}: payload");
            assert_eq!(m.properties.len(), 2, "{what}: properties");
            assert_eq!(m.properties["shape"], name, "{what}");
            assert_eq!(m.event_time, Some(1_000 + i), "{what}: event time");
            assert_eq!(m.sequence_id, 100 + 2 * i, "{what}: sequence id");
            let key = (i % 2 == 0).then(|| format!("key-{}", i % 4));
            assert_eq!(m.key, key, "{what}: key");
            let ok = (i % 3 == 0).then(|| bytes::Bytes::from(vec![i as u8, 0xff]));
            assert_eq!(m.ordering_key, ok, "{what}: ordering key");
            assert_eq!(&*m.producer_name, &format!("p-{name}"), "{what}: producer");
            assert!(m.publish_time > 0, "{what}: publish time");
            assert_eq!(m.redelivery_count, 0, "{what}");
            assert_eq!(m.id, ids[&i], "{what}: id vs receipt");
            consumer.ack(&m).unwrap();
        }
    }
}

/// The consumer's counters are exact after N receives (batched and unbatched entries), acks
/// and nacks; after close, acks and nacks are errors (never silent).
#[tokio::test]
async fn consumer_counters_are_exact_and_acks_after_close_fail() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("breaker40-consumer-counters");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    let batched = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 5,
            max_publish_delay: Duration::from_secs(3600),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let single = common::unbatched_producer(&client, &topic).await;
    let mut bytes = 0u64;
    let mut futs = Vec::new();
    for i in 0..15 {
        let p = format!("b{i:02}");
        bytes += p.len() as u64;
        futs.push(batched.send(p).await.unwrap());
    }
    for i in 0..5 {
        let p = format!("single-{i}");
        bytes += p.len() as u64;
        futs.push(single.send(p).await.unwrap());
    }
    for f in futs {
        within("receipt", f).await.unwrap();
    }
    let mut msgs = Vec::new();
    for _ in 0..20 {
        msgs.push(within("recv", consumer.recv()).await.unwrap());
    }
    for m in msgs.iter().take(7) {
        consumer.ack(m).unwrap();
    }
    consumer.nack(&msgs[7]).unwrap();
    consumer.nack(&msgs[8]).unwrap();
    // Counted by the consumer's task (a single writer): wait for them, then check exactly.
    common::wait_until("acks and nacks counted", || {
        let s = consumer.stats().totals;
        s.acks >= 7 && s.nacks >= 2
    })
    .await;
    let s = consumer.stats().totals;
    assert_eq!(
        (s.messages_received, s.bytes_received, s.acks, s.nacks),
        (20, bytes, 7, 2),
        "{s:?}"
    );
    consumer.close().await.unwrap();
    assert!(consumer.ack(&msgs[9]).is_err(), "ack after close");
    assert!(consumer.nack(&msgs[10]).is_err(), "nack after close");
    assert!(
        consumer.ack_cumulative(&msgs[11]).is_err(),
        "cumulative ack after close"
    );
    assert!(
        consumer.acker().ack(&msgs[12]).is_err(),
        "acker after close"
    );
}

/// Many tasks on a multi-thread runtime send through tight limits (a few slots, little
/// memory, blocking), with key-based batches, while the connection drops now and then: every
/// send completes once with its own id, and afterwards the limits are exactly free (the
/// client's memory fills exactly once more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_through_tight_limits_and_drops_lose_nothing() {
    use pulsar_sdk::mock::wire::base_command::Type;
    const LIMIT: usize = 2000;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(LIMIT)
        .build()
        .unwrap();
    let topic = full("breaker40-concurrent");
    let producer = std::sync::Arc::new(
        client
            .producer(&topic)
            .batching_options(BatchingOptions {
                max_messages: 5,
                max_publish_delay: Duration::from_millis(2),
                key_based: true,
                ..Default::default()
            })
            .max_pending_messages(16)
            .block_if_queue_full(true)
            .create()
            .await
            .unwrap(),
    );
    const SENDERS: usize = 6;
    const PER: usize = 300;
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let p = producer.clone();
        tasks.push(tokio::spawn(async move {
            let mut futs = std::collections::VecDeque::new();
            let mut ids = Vec::new();
            for i in 0..PER {
                let size = 20 + (i * 37 + s * 11) % 300;
                let m = ProducerMessage::new(vec![s as u8; size]).key(format!("k{}", i % 4));
                futs.push_back(p.send(m).await.unwrap());
                if i % 7 == 0 {
                    // The newest awaited from another task, the rest later.
                    let f = futs.pop_back().unwrap();
                    ids.push(tokio::spawn(f).await.unwrap());
                }
            }
            for f in futs {
                ids.push(f.await);
            }
            ids
        }));
    }
    for _ in 0..3 {
        let seen = broker.received_of(Type::Send).len();
        let _ = broker
            .wait_for_commands(Type::Send, seen + 30, Duration::from_secs(10))
            .await;
        broker.drop_all_connections();
    }
    let mut all = std::collections::HashSet::new();
    for (s, t) in tasks.into_iter().enumerate() {
        let ids = within("senders", t).await.unwrap();
        assert_eq!(ids.len(), PER);
        for (i, id) in ids.into_iter().enumerate() {
            let id = id.unwrap_or_else(|e| panic!("sender {s} send {i}: {e:?}"));
            assert!(all.insert(id), "sender {s}: id {id:?} twice");
        }
    }
    within("flush", producer.flush()).await.unwrap();
    let s = producer.stats().totals;
    assert_eq!(s.pending_messages, 0, "{s:?}");
    // The memory is all back: a non-blocking producer of the client fills it exactly.
    let p = client
        .producer(full("breaker40-concurrent-check"))
        .batching_options(BatchingOptions {
            max_messages: 1000,
            max_publish_delay: Duration::from_secs(3600),
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..LIMIT / 100 {
        held.push(p.send(vec![0u8; 100]).await.unwrap());
    }
    assert!(
        matches!(
            p.send(vec![0u8; 1]).await,
            Err(Error::ProducerQueueFull { .. })
        ),
        "the limit holds no more"
    );
    drop(held);
}

/// A send whose entry is re-sent again and again (every SEND answered with a retriable
/// SEND_ERROR, so the producer reconnects and re-sends) still times out at its send timeout,
/// counted from when it was queued (alone) or its batch went out, not before and not much
/// later; and its memory comes back.
#[tokio::test(start_paused = true)]
async fn a_send_re_sent_across_reconnects_times_out_on_time() {
    use tokio::time::Instant;
    const LIMIT: usize = 1000;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(LIMIT)
        .build()
        .unwrap();
    // A pending unbatched message holds its payload plus the producer name its frame carries
    // (#31 §2), a batched one its payload: each fill message below holds 100 bytes.
    const NAME: &str = "p";
    for batched in [false, true] {
        let topic = full(&format!("breaker40-timeout-reconnects-{batched}"));
        let fill = if batched { 100 } else { 100 - NAME.len() };
        let mut b = client
            .producer(&topic)
            .name(NAME)
            .send_timeout(Duration::from_millis(500))
            .block_if_queue_full(false);
        b = if batched {
            b.batching_options(BatchingOptions {
                max_messages: 100,
                max_publish_delay: Duration::from_millis(100),
                ..Default::default()
            })
        } else {
            b.batching(false)
        };
        let producer = b.create().await.unwrap();
        broker.set_storage_cut(true);
        let start = Instant::now();
        let mut f = producer.send(vec![1u8; 400]).await.unwrap();
        let mut g = producer.send(vec![2u8; 400]).await.unwrap();
        // Out at 0 (alone) or at 100 ms (the batch's delay): due at 500 or 600 ms.
        let due = start + Duration::from_millis(if batched { 600 } else { 500 });
        tokio::time::sleep_until(due - Duration::from_millis(1)).await;
        assert!(
            done(&mut f).is_none() && done(&mut g).is_none(),
            "batched {batched}: timed out before {:?}",
            due - start
        );
        tokio::time::sleep_until(due + Duration::from_millis(60)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        for (name, h) in [("f", &mut f), ("g", &mut g)] {
            match done(h) {
                Some(Err(Error::Timeout { .. })) => {}
                other => panic!("batched {batched}: {name} at {:?}: {other:?}", due - start),
            }
        }
        broker.set_storage_cut(false);
        // All the memory is back: 1000 bytes fit once more, and not a byte beyond.
        let mut held = Vec::new();
        for _ in 0..10 {
            held.push(producer.send(vec![0u8; fill]).await.unwrap());
        }
        assert!(
            matches!(
                producer.send(vec![0u8; 1]).await,
                Err(Error::ProducerQueueFull { .. })
            ),
            "batched {batched}: the limit holds no more"
        );
        for h in held {
            within("receipt", h).await.unwrap();
        }
        producer.close().await.unwrap();
    }
}

/// On a partitioned topic each partition producer has its own receipt groups: every receipt
/// (batched, key-based, alone) names the partition and the id the consumer sees.
#[tokio::test]
async fn receipts_of_a_partitioned_producer_name_what_the_consumer_sees() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("breaker40-partitioned-runs");
    broker.create_partitioned_topic(&topic, 3);
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(&topic)
        .batching_options(BatchingOptions {
            max_messages: 6,
            max_publish_delay: Duration::from_secs(3600),
            key_based: true,
            ..Default::default()
        })
        .create()
        .await
        .unwrap();
    let n = 200;
    let mut futs = Vec::new();
    for i in 0..n {
        let mut m = ProducerMessage::new(format!("m{i}"));
        if i % 4 != 0 {
            m = m.key(format!("k{}", i % 7));
        }
        if i % 19 == 0 {
            m = m.deliver_at(SystemTime::now());
        }
        futs.push(producer.send(m).await.unwrap());
    }
    producer.flush().await.unwrap();
    let mut receipts = Vec::new();
    for (i, f) in futs.into_iter().enumerate() {
        receipts.push((i, within("receipt", f).await.unwrap()));
    }
    let mut seen = HashMap::new();
    for _ in 0..n {
        let m = within("recv", consumer.recv()).await.unwrap();
        seen.insert(m.payload_str().unwrap().to_string(), m.id);
    }
    for (i, id) in receipts {
        let got = seen[&format!("m{i}")];
        assert_eq!(got, id, "m{i}");
        assert_eq!(got.partition, id.partition, "m{i}");
        assert_eq!(got.batch_size, id.batch_size, "m{i}: {got:?} vs {id:?}");
    }
}

/// A connection whose every handle is dropped ends (its task says so itself: "every handle is
/// gone"), closing its socket. Its task polled the control channel first in a biased select,
/// and a closed control channel answers `None` at once, every time, which it took as "nothing
/// to do": the task spun at 100% CPU forever, the socket stayed open, and (with paused time)
/// the runtime never went idle again. Observed from the broker: the connection must go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_handles_are_all_dropped_ends() {
    use pulsar_sdk::mock::{Connection, ConnectionConfig};
    let broker = MockBroker::start().await.unwrap();
    let stream = tokio::net::TcpStream::connect(broker.addr()).await.unwrap();
    let conn = within(
        "handshake",
        Connection::connect_with_stream(
            stream,
            &broker.service_url(),
            None,
            &ConnectionConfig::default(),
        ),
    )
    .await
    .unwrap();
    common::wait_until("the broker sees the connection", || {
        broker.connections().len() == 1
    })
    .await;
    drop(conn);
    common::wait_until("the dropped connection closes its socket", || {
        broker.connections().is_empty()
    })
    .await;
}

/// The same through the public client: a client dropped without `close()` (after its
/// producer closed) must not leave its connection task running (spinning) with the socket
/// open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_closes_its_connections() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = common::unbatched_producer(&client, &full("breaker40-dropped-client")).await;
    producer.send_and_wait("m").await.unwrap();
    producer.close().await.unwrap();
    drop(producer);
    assert!(!broker.connections().is_empty());
    drop(client);
    common::wait_until("the dropped client's connection closes", || {
        broker.connections().is_empty()
    })
    .await;
    // Dropped with its producer still open (no close at all), on a second client.
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = common::unbatched_producer(&client, &full("breaker40-dropped-client")).await;
    producer.send_and_wait("m").await.unwrap();
    assert!(!broker.connections().is_empty());
    drop(producer);
    drop(client);
    common::wait_until(
        "the connection of a client dropped with its producer open closes",
        || broker.connections().is_empty(),
    )
    .await;
}
/// The connection and producer id of the producer the mock broker created for `topic`.
fn producer_of(broker: &MockBroker, topic: &str) -> (pulsar_sdk::mock::ConnectionId, u64) {
    use pulsar_sdk::mock::wire::base_command::Type;
    let create = broker
        .received_of(Type::Producer)
        .into_iter()
        .find(|r| r.command.producer.as_ref().unwrap().topic == topic)
        .unwrap();
    let id = create.command.producer.as_ref().unwrap().producer_id;
    (create.connection, id)
}

/// Answers a send of `producer_id` on `conn` with a SEND_ERROR, on which the client drops the
/// shared connection (as upstream closes the channel).
fn push_send_error(broker: &MockBroker, conn: pulsar_sdk::mock::ConnectionId, producer_id: u64) {
    use pulsar_sdk::mock::wire::{self, base_command::Type};
    let send_error = wire::BaseCommand {
        r#type: Type::SendError as i32,
        send_error: Some(wire::CommandSendError {
            producer_id,
            sequence_id: 1,
            error: wire::ServerError::PersistenceError as i32,
            message: "injected".into(),
        }),
        ..Default::default()
    };
    assert!(broker.push(conn, send_error));
}

/// Two producers share a connection. B is re-creating itself (its topic was unloaded) when
/// A gets a SEND_ERROR the client answers by closing the connection (upstream closes the
/// channel too). B's lookup/create in flight on that connection fails with the connection's
/// close reason: a lost connection for B, to be retried, not the end of B. The reason used to
/// be `Closed`, and B ended for good, in state Closed as if the application had closed it,
/// and every later send failed with `Closed`.
#[tokio::test(start_paused = true)]
async fn a_reconnect_cut_by_a_sibling_closing_the_connection_is_retried() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let (ta, tb) = (full("breaker40-sibling-a"), full("breaker40-sibling-b"));
    let a = common::unbatched_producer(&client, &ta).await;
    let b = common::unbatched_producer(&client, &tb).await;
    a.send_and_wait("a0").await.unwrap();
    b.send_and_wait("b0").await.unwrap();
    let created = broker.received_of(Type::Producer);
    let (conn, a_id) = producer_of(&broker, &ta);
    // B's next lookup / create waits for its answer...
    broker.set_response_delay(Duration::from_secs(1));
    let lookups = broker.received_of(Type::Lookup).len();
    let creates = created.len();
    broker.unload_topic(&tb).unwrap();
    common::wait_until("B asks again", || {
        broker.received_of(Type::Lookup).len() > lookups
            || broker.received_of(Type::Producer).len() > creates
    })
    .await;
    // ... when A gets a SEND_ERROR that makes the client close the shared connection.
    push_send_error(&broker, conn, a_id);
    broker.set_response_delay(Duration::ZERO);
    // B comes back (Ready) and sends; so does A.
    within("B sends after the reconnect", b.send_and_wait("b1"))
        .await
        .unwrap_or_else(|e| panic!("B ended: {e:?}, state {:?}", b.state()));
    within("A sends after the reconnect", a.send_and_wait("a1"))
        .await
        .unwrap();
}
/// A seeded soak: random sends (sizes, keys, deliver_at, too big for a batch, chunked) on
/// three producers of one client (batched key-based, batched, chunked), random faults
/// (connection drops, storage cut: SEND_ERROR and re-sends, a silent broker: timeouts),
/// random receipts dropped unread. Afterwards every kept receipt has resolved, and the
/// client's memory and each producer's slots are exactly free.
#[tokio::test(start_paused = true)]
async fn a_seeded_soak_of_sends_and_faults_leaves_the_limits_exact() {
    const LIMIT: usize = 6000;
    const SLOTS: usize = 40;
    for seed in 1..=12u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let broker = MockBroker::start().await.unwrap();
        let client = test_client(&broker.service_url())
            .memory_limit(LIMIT)
            .build()
            .unwrap();
        let mk = |kind: u8| {
            let topic = full(&format!("breaker40-soak-{seed}-{kind}"));
            let b = client
                .producer(&topic)
                .send_timeout(Duration::from_millis(700))
                .max_pending_messages(SLOTS)
                .block_if_queue_full(false);
            match kind {
                0 => b.batching_options(BatchingOptions {
                    max_messages: 4,
                    max_bytes: 600,
                    max_publish_delay: Duration::from_millis(30),
                    key_based: true,
                }),
                1 => b.batching_options(BatchingOptions {
                    max_messages: 5,
                    max_bytes: 800,
                    max_publish_delay: Duration::from_millis(50),
                    key_based: false,
                }),
                _ => b.batching(false).chunking(true).chunk_max_message_size(120),
            }
        };
        let producers = vec![
            mk(0).create().await.unwrap(),
            mk(1).create().await.unwrap(),
            mk(2).create().await.unwrap(),
        ];
        let mut kept = Vec::new();
        let (mut cut, mut silent) = (false, false);
        for _step in 0..400 {
            match next(20) {
                0 => broker.drop_all_connections(),
                1 => {
                    cut = !cut;
                    broker.set_storage_cut(cut);
                }
                2 => {
                    silent = !silent;
                    broker.set_unresponsive(silent);
                }
                3..=5 => tokio::time::sleep(Duration::from_millis(next(120))).await,
                _ => {
                    let p = &producers[next(3) as usize];
                    let big = next(10) == 0;
                    let size = 1 + next(if big { 900 } else { 250 }) as usize;
                    let mut m = ProducerMessage::new(vec![next(256) as u8; size]);
                    match next(6) {
                        0 => m = m.key("a"),
                        1 => m = m.key("b").ordering_key(vec![1u8]),
                        2 => m = m.deliver_at(SystemTime::now()),
                        _ => {}
                    }
                    match p.send(m).await {
                        Ok(f) => {
                            if next(4) != 0 {
                                kept.push(f);
                            }
                        }
                        Err(Error::ProducerQueueFull { .. }) => {}
                        Err(e) => panic!("seed {seed}: send: {e:?}"),
                    }
                }
            }
            tokio::task::yield_now().await;
        }
        broker.set_storage_cut(false);
        broker.set_unresponsive(false);
        for (i, f) in kept.into_iter().enumerate() {
            match within("a kept receipt", f).await {
                Ok(_) | Err(Error::Timeout { .. }) | Err(Error::Broker { .. }) => {}
                Err(e) => panic!("seed {seed}: receipt {i}: {e:?}"),
            }
        }
        // Every producer is drained (its last sends receipted or timed out).
        for p in &producers {
            within("flush", p.flush()).await.unwrap();
        }
        for (k, p) in producers.iter().enumerate() {
            let s = p.stats().totals;
            assert_eq!(s.pending_messages, 0, "seed {seed}: producer {k}: {s:?}");
            // Slots: exactly SLOTS one-byte sends fit (queued in the open batch or pending
            // behind a silent broker), then max_pending_messages is reached.
            broker.set_unresponsive(true);
            let mut held = Vec::new();
            for j in 0..SLOTS {
                match p.send(vec![7u8; 1]).await {
                    Ok(f) => held.push(f),
                    Err(e) => panic!("seed {seed}: producer {k}: slot {j} of {SLOTS}: {e:?}"),
                }
            }
            match p.send(vec![7u8; 1]).await {
                Err(Error::ProducerQueueFull { limit }) => {
                    assert!(
                        matches!(limit, QueueLimit::MaxPendingMessages { .. }),
                        "seed {seed}: producer {k}: {limit}"
                    )
                }
                other => panic!("seed {seed}: producer {k}: slot {SLOTS} + 1: {other:?}"),
            }
            broker.set_unresponsive(false);
            for f in held {
                let _ = within("slot check receipt", f).await;
            }
            within("flush", p.flush()).await.unwrap();
        }
        for p in &producers {
            let _ = p.close().await;
        }
        // Memory: a fresh producer holds exactly LIMIT bytes in one open batch, no more.
        let p = client
            .producer(full(&format!("breaker40-soak-{seed}-check")))
            .batching_options(BatchingOptions {
                max_messages: 1000,
                max_bytes: 1 << 20,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            })
            .create()
            .await
            .unwrap();
        let mut held = Vec::new();
        for j in 0..LIMIT / 100 {
            match p.send(vec![0u8; 100]).await {
                Ok(f) => held.push(f),
                Err(e) => panic!("seed {seed}: memory {j}00 of {LIMIT}: {e:?}"),
            }
        }
        assert!(
            matches!(
                p.send(vec![0u8; 1]).await,
                Err(Error::ProducerQueueFull { .. })
            ),
            "seed {seed}: the limit holds no more"
        );
        p.close().await.unwrap();
        drop(held);
    }
}

/// A consumer's request in flight (the last message id) on a connection the client closes
/// because a producer on it got a SEND_ERROR: for the consumer that is a lost connection
/// (upstream retries `getLastMessageId` on connection errors), never `Error::Closed`, which
/// says the consumer itself was closed.
#[tokio::test(start_paused = true)]
async fn a_request_cut_by_a_sibling_closing_the_connection_is_not_closed() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let (ta, tb) = (full("breaker40-req-a"), full("breaker40-req-b"));
    let a = common::unbatched_producer(&client, &ta).await;
    a.send_and_wait("a0").await.unwrap();
    let pb = common::unbatched_producer(&client, &tb).await;
    pb.send_and_wait("b0").await.unwrap();
    let consumer = client
        .consumer(&tb)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let (conn, a_id) = producer_of(&broker, &ta);
    broker.set_response_delay(Duration::from_secs(1));
    let asked = broker.received_of(Type::GetLastMessageId).len();
    let last = tokio::spawn(async move {
        let r = consumer.last_message_ids().await;
        (consumer, r)
    });
    common::wait_until("the consumer asks", || {
        broker.received_of(Type::GetLastMessageId).len() > asked
    })
    .await;
    push_send_error(&broker, conn, a_id);
    broker.set_response_delay(Duration::ZERO);
    let (consumer, r) = within("last message ids", last).await.unwrap();
    match r {
        Ok(_) | Err(Error::ConnectionLost(_)) | Err(Error::Timeout { .. }) => {}
        Err(e) => panic!(
            "a request cut by the client's own close of a shared connection: {e:?} (consumer {:?})",
            consumer.state()
        ),
    }
}
