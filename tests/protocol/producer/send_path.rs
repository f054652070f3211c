//! Review of the producer send path after issue #18 (packed pending entries, receipts in
//! groups, permits counted per entry, enqueue time in nanoseconds), from the outside: the
//! public producer API against the mock broker.

use common::{full, test_client, within};
use support as common;

use std::time::Duration;

use futures::future::join_all;
use futures::FutureExt;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::BatchingOptions;
use pulsar_sdk::{Error, QueueLimit, SendFuture};

/// Whether `f` has completed (polled once, without waiting).
fn done(f: &mut SendFuture) -> Option<pulsar_sdk::Result<pulsar_sdk::MessageId>> {
    f.now_or_never()
}

/// A 100 ms send timeout fires after 100 ms (within one check tick of 10 ms), never before,
/// for a message on its own and for a batch; paused time, so the instants are exact.
#[tokio::test(start_paused = true)]
async fn a_100ms_send_timeout_fires_at_100ms_not_before_nor_much_later() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    for batched in [false, true] {
        let topic = full(&format!("review-send-timeout-exact-{batched}"));
        let mut builder = client.producer(&topic).batching(false);
        if batched {
            builder = builder.batching_options(BatchingOptions {
                max_messages: 3,
                max_publish_delay: Duration::from_secs(3600),
                ..Default::default()
            });
        }
        let producer = builder
            .send_timeout(Duration::from_millis(100))
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let n = if batched { 3 } else { 1 };
        let mut futs = Vec::new();
        for i in 0..n {
            futs.push(producer.send(format!("m{i}")).await.unwrap());
        }
        // Let the task take the messages (and build the entry) at this instant.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let start = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(99)).await;
        for f in &mut futs {
            assert!(
                done(f).is_none(),
                "batched {batched}: resolved before its 100 ms timeout ({:?})",
                start.elapsed()
            );
        }
        tokio::time::sleep_until(start + Duration::from_millis(112)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        for f in &mut futs {
            match done(f) {
                Some(Err(Error::Timeout { .. })) => {}
                other => panic!("batched {batched}: at 112 ms expected a timeout, got {other:?}"),
            }
        }
        broker.set_unresponsive(false);
        drop(producer);
    }
}

/// A batched message's send timeout counts from when its batch goes out, as upstream's (the
/// batch's `OpSendMsg` is created, with its `createdAt`, as the batch is flushed): sent at 0
/// into a batch flushed by its 200 ms delay, with a 300 ms timeout, it times out at 500 ms
/// (within one check tick), not at 300 ms.
#[tokio::test(start_paused = true)]
async fn a_batched_message_times_out_from_its_batch_going_out() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(full("review-batch-timeout-from-flush"))
        .batching_options(BatchingOptions {
            max_messages: 100,
            max_publish_delay: Duration::from_millis(200),
            ..Default::default()
        })
        .send_timeout(Duration::from_millis(300))
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut f = producer.send("m").await.unwrap();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let start = tokio::time::Instant::now();
    tokio::time::sleep_until(start + Duration::from_millis(250)).await;
    assert_eq!(
        broker.received_of(Type::Send).len(),
        1,
        "flushed by its delay"
    );
    tokio::time::sleep_until(start + Duration::from_millis(490)).await;
    assert!(done(&mut f).is_none(), "timed out before 500 ms");
    tokio::time::sleep_until(start + Duration::from_millis(612)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    match done(&mut f) {
        Some(Err(Error::Timeout { .. })) => {}
        other => panic!("at 612 ms expected a timeout, got {other:?}"),
    }
    broker.set_unresponsive(false);
}

/// A producer dropped (with no close) while its sends are unanswered: every send resolves
/// (never hangs), and the client memory they held comes back, exactly: another producer of
/// the same client then fills the limit exactly once more.
#[tokio::test]
async fn a_dropped_producer_resolves_its_sends_and_gives_back_client_memory() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(300)
        .build()
        .unwrap();
    // A pending unbatched message holds its payload plus the producer name its frame carries
    // (#31 §2); a batched one shares its batch's. Each message below holds 100 bytes.
    const NAME: &str = "p";
    let payload = |batched: bool| if batched { 100 } else { 100 - NAME.len() };
    for round in 0..3 {
        let topic = full(&format!("review-dropped-producer-memory-{round}"));
        let batched = round % 2 == 1;
        let producer = client
            .producer(&topic)
            .name(NAME)
            .batching(batched)
            .send_timeout(Duration::ZERO)
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let mut futs = Vec::new();
        for _ in 0..3 {
            futs.push(producer.send(vec![1u8; payload(batched)]).await.unwrap());
        }
        match producer.send(vec![2u8; 1]).await {
            Err(Error::ProducerQueueFull { limit }) => {
                assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
            }
            other => panic!("round {round}: expected the memory limit, got {other:?}"),
        }
        drop(producer);
        // The dropped producer's close goes unanswered; it ends at the operation timeout at
        // the latest. Its sends resolve (to an error) rather than hang.
        broker.set_unresponsive(false);
        for r in within("sends of a dropped producer", join_all(futs)).await {
            assert!(r.is_err() || r.is_ok(), "{r:?}");
        }
    }
    // Every round gave its 300 bytes back: a last producer fills exactly 300 bytes.
    let producer = client
        .producer(full("review-dropped-producer-memory-last"))
        .name(NAME)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut held = Vec::new();
    for i in 0..3 {
        match producer.send(vec![3u8; payload(false)]).await {
            Ok(f) => held.push(f),
            Err(e) => panic!("send {i}: memory not given back: {e:?}"),
        }
    }
    match producer.send(vec![4u8; 1]).await {
        Err(Error::ProducerQueueFull { limit }) => {
            assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
    broker.set_unresponsive(false);
    drop(held);
}

/// The message `i` of the round-trip matrix: plain messages (payload only) mixed in the same
/// batches with messages that set each other field, alone or together.
fn matrix_message(i: u64) -> pulsar_sdk::ProducerMessage {
    let mut m = pulsar_sdk::ProducerMessage::new(if i % 11 == 3 {
        Vec::new()
    } else {
        format!("payload-{i}-{}", "x".repeat((i % 7) as usize * 40)).into_bytes()
    });
    let bits = i % 8;
    if bits & 1 != 0 {
        m = m.key(format!("k{}", i % 3));
    }
    if bits & 2 != 0 {
        m = m.property("i", i.to_string()).property("", "");
    }
    if bits & 4 != 0 {
        m = m.event_time(1_700_000_000_000 + i);
    }
    if i % 9 == 4 {
        m = m.ordering_key(vec![i as u8, 0, 255]);
    }
    if i % 13 == 6 {
        m.key = Some("a2V5".into());
        m.key_b64_encoded = true;
    }
    m
}

/// Every field of every message round-trips through a producer (batched with plain and
/// non-plain records mixed in a batch, key-based or not, compressed or not, on a partitioned
/// topic or not) to a consumer, and each send's id is the id the consumer sees.
#[tokio::test]
async fn every_field_round_trips_with_plain_and_general_records_mixed_in_batches() {
    use pulsar_sdk::{CompressionType, InitialPosition, SubscriptionType};
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let cases = [
        (false, CompressionType::None, 0u32),
        (false, CompressionType::Lz4, 0),
        (true, CompressionType::Zstd, 0),
        (false, CompressionType::None, 3),
        (true, CompressionType::Lz4, 2),
    ];
    for (case, (key_based, compression, partitions)) in cases.into_iter().enumerate() {
        let topic = full(&format!("review-roundtrip-matrix-{case}"));
        if partitions > 0 {
            broker.set_partitions(&topic, partitions);
        }
        let mut consumer = client
            .consumer(&topic)
            .subscription("s")
            .subscription_type(SubscriptionType::Shared)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        let producer = client
            .producer(&topic)
            .batching_options(BatchingOptions {
                max_messages: 7,
                max_publish_delay: Duration::from_millis(5),
                key_based,
                ..Default::default()
            })
            .compression(compression)
            .create()
            .await
            .unwrap();
        const N: u64 = 120;
        let mut futs = Vec::new();
        for i in 0..N {
            futs.push(producer.send(matrix_message(i)).await.unwrap());
        }
        let ids: Vec<_> = within("receipts", join_all(futs))
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let mut got = std::collections::HashMap::new();
        for _ in 0..N {
            let m = within("receive", consumer.recv()).await.unwrap();
            let i: u64 = {
                let p = m.payload_str().unwrap().to_string();
                if p.is_empty() {
                    // Identified by its other fields below: the empty payloads are i % 11 == 3.
                    u64::MAX - got.len() as u64
                } else {
                    p.split('-').nth(1).unwrap().parse().unwrap()
                }
            };
            got.insert(i, m);
        }
        // Empty payloads: match them by their id instead.
        let by_id: std::collections::HashMap<_, _> = got
            .values()
            .map(|m| {
                (
                    (
                        m.id.ledger_id,
                        m.id.entry_id,
                        m.id.partition,
                        m.id.batch_index,
                    ),
                    m,
                )
            })
            .collect();
        for (i, id) in (0..N).zip(&ids) {
            let want = matrix_message(i);
            let m = by_id
                .get(&(id.ledger_id, id.entry_id, id.partition, id.batch_index))
                .unwrap_or_else(|| panic!("case {case}: message {i} ({id:?}) not received"));
            let ctx = format!("case {case} message {i} id {id:?}");
            assert_eq!(m.payload, want.payload, "{ctx}");
            assert_eq!(m.key, want.key, "{ctx}");
            assert_eq!(m.key_b64_encoded, want.key_b64_encoded, "{ctx}");
            assert_eq!(m.ordering_key, want.ordering_key, "{ctx}");
            assert_eq!(m.properties, want.properties, "{ctx}");
            assert_eq!(m.event_time, want.event_time, "{ctx}");
            assert_eq!(m.id, *id, "{ctx}");
            assert_eq!(m.id.batch_size, id.batch_size, "{ctx}: batch size");
            assert!(id.batch_size >= 1 && id.batch_index >= 0, "{ctx}: batched");
            if partitions == 0 {
                assert_eq!(id.partition, -1, "{ctx}");
            } else {
                assert!((0..partitions as i32).contains(&id.partition), "{ctx}");
            }
            if partitions == 0 {
                assert_eq!(m.producer_name.as_ref(), producer.name(), "{ctx}");
            }
        }
        // Sequence ids: unique per partition producer, and the consumer's are the sender's.
        let mut seqs = std::collections::HashSet::new();
        for m in got.values() {
            assert!(
                seqs.insert((m.id.partition, m.sequence_id)),
                "duplicate sequence id"
            );
        }
        drop(producer);
        drop(consumer);
    }
}

/// Concurrent senders on a multi-threaded runtime (receipts handed out under the inbox's
/// lock, in groups of 32), with the connection dropped several times mid-stream (every
/// pending entry re-sent): every send completes exactly once with an id, and each sender's
/// ids increase in its send order, whether its futures are awaited in order, in reverse, or
/// from another task; dropped futures harm no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_keep_their_order_across_reconnects() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    for batched in [true, false] {
        // A client per round: the previous round's last connection drop must not meet this
        // round's create.
        let client = test_client(&broker.service_url()).build().unwrap();
        let topic = full(&format!("review-concurrent-senders-{batched}"));
        let producer = client
            .producer(&topic)
            .batching(batched)
            .max_pending_messages(500)
            .block_if_queue_full(true)
            .create()
            .await
            .unwrap_or_else(|e| panic!("batched {batched}: create: {e:?}"));
        const SENDERS: usize = 4;
        const PER: usize = 1500;
        let mut tasks = Vec::new();
        for s in 0..SENDERS {
            let producer = producer.clone();
            tasks.push(tokio::spawn(async move {
                let mut futs = Vec::new();
                for i in 0..PER {
                    futs.push(producer.send(format!("{s}-{i}")).await.unwrap());
                }
                // Sender 0 awaits in reverse order, 1 from spawned tasks, 2 drops every
                // third future, 3 in order.
                let mut ids: Vec<Option<pulsar_sdk::MessageId>> = vec![None; PER];
                match s {
                    0 => {
                        for (i, f) in futs.into_iter().enumerate().rev() {
                            ids[i] = Some(f.await.unwrap());
                        }
                    }
                    1 => {
                        let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
                        for (i, h) in handles.into_iter().enumerate() {
                            ids[i] = Some(h.await.unwrap().unwrap());
                        }
                    }
                    2 => {
                        for (i, f) in futs.into_iter().enumerate() {
                            if i % 3 == 0 {
                                drop(f);
                            } else {
                                ids[i] = Some(f.await.unwrap());
                            }
                        }
                    }
                    _ => {
                        for (i, f) in futs.into_iter().enumerate() {
                            ids[i] = Some(f.await.unwrap());
                        }
                    }
                }
                ids
            }));
        }
        // Drop the connection three times while the sends are under way.
        for k in 1..=3 {
            let want = k * SENDERS * PER / 5;
            let mut waited = 0;
            while broker.received_of(Type::Send).len() < want / if batched { 50 } else { 1 }
                && waited < 500
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
                waited += 1;
            }
            broker.drop_all_connections();
        }
        for (s, t) in tasks.into_iter().enumerate() {
            let ids = within("senders", t).await.unwrap();
            let ids: Vec<_> = ids.into_iter().flatten().collect();
            for w in ids.windows(2) {
                let key = |id: &pulsar_sdk::MessageId| (id.ledger_id, id.entry_id, id.batch_index);
                assert!(
                    key(&w[0]) < key(&w[1]),
                    "batched {batched} sender {s}: ids out of send order: {:?} then {:?}",
                    w[0],
                    w[1]
                );
            }
        }
        within("flush", producer.flush()).await.unwrap();
    }
}

fn receipt(
    producer_id: u64,
    sequence_id: u64,
    entry_id: u64,
) -> pulsar_sdk::mock::wire::BaseCommand {
    use pulsar_sdk::mock::wire;
    wire::BaseCommand {
        r#type: wire::base_command::Type::SendReceipt as i32,
        send_receipt: Some(wire::CommandSendReceipt {
            producer_id,
            sequence_id,
            message_id: Some(wire::MessageIdData {
                ledger_id: 77,
                entry_id,
                ..Default::default()
            }),
            highest_sequence_id: Some(sequence_id),
        }),
        ..Default::default()
    }
}

/// A hostile broker's receipts: a duplicate of a receipt already applied and a stale one
/// change nothing (the first receipt's id stands, the next sends complete from their own);
/// a receipt ahead of the head makes the producer reconnect and re-send, and every send
/// still completes, once, in order.
#[tokio::test]
async fn duplicate_stale_and_ahead_receipts_from_a_hostile_broker() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("review-hostile-receipts");
    let producer = client
        .producer(&topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let mut futs = Vec::new();
    for i in 0..3 {
        futs.push(producer.send(format!("m{i}")).await.unwrap());
    }
    let sends = within(
        "3 sends",
        broker.wait_for_commands(Type::Send, 3, Duration::from_secs(10)),
    )
    .await
    .expect("3 SENDs");
    let conn = sends[0].connection;
    let first = sends[0].command.send.as_ref().unwrap();
    let (pid, s) = (first.producer_id, first.sequence_id);
    assert!(broker.push(conn, receipt(pid, s, 10)));
    assert!(broker.push(conn, receipt(pid, s, 99))); // duplicate
    if s > 0 {
        assert!(broker.push(conn, receipt(pid, s - 1, 98))); // stale
    }
    assert!(broker.push(conn, receipt(pid, s, 97))); // duplicate again, before the next
    assert!(broker.push(conn, receipt(pid, s + 1, 11)));
    assert!(broker.push(conn, receipt(pid, s + 2, 12)));
    let ids: Vec<u64> = within("receipts", join_all(futs))
        .await
        .into_iter()
        .map(|r| r.unwrap().entry_id)
        .collect();
    assert_eq!(ids, vec![10, 11, 12]);
    assert_eq!(
        broker.accepted_connections(),
        1,
        "no reconnect for stale receipts"
    );
    // Ahead of the head: m3 and m4 pending, a receipt for m4 arrives first.
    let mut futs = Vec::new();
    for i in 3..5 {
        futs.push(producer.send(format!("m{i}")).await.unwrap());
    }
    within(
        "2 more sends",
        broker.wait_for_commands(Type::Send, 5, Duration::from_secs(10)),
    )
    .await
    .expect("5 SENDs");
    broker.set_unresponsive(false);
    assert!(broker.push(conn, receipt(pid, s + 4, 50)));
    let ids: Vec<_> = within("re-sent sends", join_all(futs))
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(ids[0].entry_id < ids[1].entry_id, "{ids:?}");
    assert_ne!(
        ids[1].entry_id, 50,
        "the out-of-order receipt completed nothing"
    );
    assert!(broker.accepted_connections() >= 2, "reconnected");
    // The producer goes on: a later send completes.
    let id = within("a later send", producer.send_and_wait("after"))
        .await
        .unwrap();
    assert!(id.entry_id > ids[1].entry_id || id.ledger_id != ids[1].ledger_id);
}

/// A send re-sent after a reconnect keeps its enqueue time: with a 1 s send timeout, sent at
/// 0 and re-sent after a reconnect at 500 ms that never gets an answer, it times out at 1 s
/// (within one 100 ms check tick), not 1 s after the re-send.
#[tokio::test(start_paused = true)]
async fn a_re_sent_message_times_out_from_its_first_enqueue() {
    use pulsar_sdk::mock::wire::base_command::Type;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let producer = client
        .producer(full("review-timeout-after-reconnect"))
        .batching(false)
        .send_timeout(Duration::from_secs(1))
        .create()
        .await
        .unwrap();
    // SENDs (the first and its re-send) are answered only after the test.
    broker.push_error(
        pulsar_sdk::mock::MockError::new(
            pulsar_sdk::mock::MockRequest::Send,
            pulsar_sdk::ServerError::PersistenceError,
            "late",
        )
        .times(2)
        .after(Duration::from_secs(3600)),
    );
    let mut f = producer.send("m").await.unwrap();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    broker.drop_all_connections();
    tokio::time::sleep_until(start + Duration::from_millis(990)).await;
    assert!(done(&mut f).is_none(), "timed out before 1 s");
    tokio::time::sleep_until(start + Duration::from_millis(1110)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    match done(&mut f) {
        Some(Err(Error::Timeout { .. })) => {}
        other => panic!("at 1.11 s expected a timeout, got {other:?}"),
    }
    assert_eq!(
        broker.received_of(Type::Send).len(),
        2,
        "sent, then re-sent"
    );
}

/// Every way a batched entry leaves the pending queue (receipt, SEND_ERROR NotAllowed for a
/// message inside the batch, send timeout) gives back its `max_pending_messages` slots and
/// client memory exactly once: after each, the producer fills to the same limits and no
/// further, round after round (no drift).
#[tokio::test]
async fn batched_entries_give_back_slots_and_memory_exactly_once_however_they_leave() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(4 * 50 + 30)
        .build()
        .unwrap();
    let producer = client
        .producer(full("review-batched-permits-drift"))
        .batching_options(BatchingOptions {
            max_messages: 4,
            max_publish_delay: Duration::from_secs(3600),
            ..Default::default()
        })
        .max_pending_messages(4)
        .send_timeout(Duration::from_millis(400))
        .create()
        .await
        .unwrap();
    // Fills the limits with one batch of 4 and checks both refuse one more.
    let fill = || async {
        let mut futs = Vec::new();
        for i in 0..3 {
            match producer.send(vec![i as u8; 60]).await {
                Ok(f) => futs.push(f),
                Err(e) => panic!("send {i} of 4: {e:?}"),
            }
        }
        // 50 bytes and one slot are left: 80 bytes do not fit (the slot the send took first,
        // as upstream's `canEnqueueRequest` does, goes back)...
        match producer.send(vec![9u8; 80]).await {
            Err(Error::ProducerQueueFull { limit }) => {
                assert!(matches!(limit, QueueLimit::MemoryLimit { .. }), "{limit}")
            }
            other => panic!("expected the memory limit, got {other:?}"),
        }
        // ... 50 do, in the last slot (and the batch of 4 goes out)...
        match producer.send(vec![3u8; 50]).await {
            Ok(f) => futs.push(f),
            Err(e) => panic!("send 4 of 4: {e:?}"),
        }
        // ... and then no slot is left.
        match producer.send(vec![9u8; 1]).await {
            Err(Error::ProducerQueueFull { limit }) => {
                assert_eq!(limit, QueueLimit::MaxPendingMessages { max: 4 }, "{limit}")
            }
            other => panic!("expected max_pending_messages, got {other:?}"),
        }
        futs
    };
    for round in 0..3 {
        // Receipted.
        for r in within("receipts", join_all(fill().await)).await {
            r.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        }
        // Refused by the broker (NotAllowed for the batch).
        broker.push_error(MockError::new(
            MockRequest::Send,
            pulsar_sdk::ServerError::NotAllowed,
            "no",
        ));
        for r in within("refusals", join_all(fill().await)).await {
            assert!(
                matches!(r, Err(Error::Broker { .. })),
                "round {round}: {r:?}"
            );
        }
        // Timed out.
        broker.push_error(
            MockError::new(
                MockRequest::Send,
                pulsar_sdk::ServerError::PersistenceError,
                "late",
            )
            .after(Duration::from_secs(3600)),
        );
        for r in within("timeouts", join_all(fill().await)).await {
            assert!(
                matches!(r, Err(Error::Timeout { .. })),
                "round {round}: {r:?}"
            );
        }
    }
}

/// A producer and its client dropped (no close) with thousands of sends queued, batched and
/// not, while the broker answers nothing: every send, awaited from other tasks, resolves to
/// `Error::Closed`; none hangs, none succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_queued_when_producer_and_client_are_dropped_resolve_to_closed() {
    let broker = MockBroker::start().await.unwrap();
    for batched in [true, false] {
        let client = test_client(&broker.service_url())
            .operation_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let producer = client
            .producer(full(&format!("review-dropped-with-queued-{batched}")))
            .batching(batched)
            .send_timeout(Duration::ZERO)
            .create()
            .await
            .unwrap();
        broker.set_unresponsive(true);
        let mut waiters = Vec::new();
        for i in 0..3000 {
            let f = producer.send(format!("m{i}")).await.unwrap();
            waiters.push(tokio::spawn(f));
        }
        drop(producer);
        drop(client);
        for (i, w) in within("dropped sends", join_all(waiters))
            .await
            .into_iter()
            .enumerate()
        {
            match w.unwrap() {
                Err(Error::Closed) => {}
                other => panic!("batched {batched} send {i}: {other:?}"),
            }
        }
        broker.set_unresponsive(false);
    }
}

/// A send that fails before it is queued (too big for the broker) gives back the client
/// memory it held before its future resolves, like one that leaves the pending queue: the
/// caller, on another thread, finds the memory back as soon as it sees the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_gives_its_memory_back_before_its_future_resolves() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .memory_limit(100)
        .build()
        .unwrap();
    let producer = client
        .producer(full("review-failed-send-memory-order"))
        .batching(false)
        .create()
        .await
        .unwrap();
    let too_big = bytes::Bytes::from(vec![1u8; 6 << 20]);
    for round in 0..2000 {
        match producer.send(too_big.clone()).await.unwrap().await {
            Err(Error::MessageTooBig { .. }) => {}
            other => panic!("round {round}: expected MessageTooBig, got {other:?}"),
        }
        // Its 100 bytes (the whole limit) are back: this one fits at once.
        let f = producer
            .send(vec![2u8; 100])
            .await
            .unwrap_or_else(|e| panic!("round {round}: memory not back yet: {e:?}"));
        f.await.unwrap();
    }
}
