//! Hostile-broker tests of the connection layer (issue #11, cases 1, 9 and 10): a PING flood
//! while never reading, an advertised maximum message size of 2 GB, a frame trickled in, and
//! closing producers and consumers on a broker that stopped reading.

use crate::hostile;
use support as common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{test_client, within};
use hostile::{encode, Hostile, MemWatch};
use pulsar_sdk::error::CodecError;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{Connection, ConnectionConfig};
use pulsar_sdk::{Error, State};
use tokio::net::TcpStream;

const MIB: usize = 1024 * 1024;

fn ping() -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Ping as i32,
        ping: Some(wire::CommandPing {}),
        ..Default::default()
    }
}

/// Opens a bare connection to the hostile broker.
async fn connect(broker: &Hostile, keepalive: Duration) -> Connection {
    let stream = TcpStream::connect(broker.addr()).await.expect("connect");
    let config = ConnectionConfig {
        keepalive_interval: keepalive,
        ..Default::default()
    };
    within(
        "handshake",
        Connection::connect_with_stream(stream, &broker.url(), None, &config),
    )
    .await
    .expect("handshake")
}

/// Case 1: the broker floods PINGs and never reads a byte of ours (the producer's messages
/// fill the socket). The client keeps at most one PONG waiting (its heap stays flat), and
/// once its writer has been blocked for two keep-alive intervals the connection is dead: the
/// producer reconnects, at a bounded pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_flood_without_reading_stays_bounded_and_kills_the_connection() {
    hostile::serial();
    let watch = Arc::new(MemWatch::start());
    // The heap grew past anything a fix allows: the flood stops to spare the machine.
    let exceeded = Arc::new(AtomicBool::new(false));
    let pings = Arc::new(AtomicU64::new(0));
    let (w, x, p) = (watch.clone(), exceeded.clone(), pings.clone());
    let broker = Hostile::start(move |mut peer| {
        let (watch, exceeded, pings) = (w.clone(), x.clone(), p.clone());
        async move {
            peer.handshake(None).await;
            if peer.index > 0 {
                peer.serve().await;
                return;
            }
            if peer.serve_until(|f| f.ty() == Type::Send).await.is_none() {
                return;
            }
            // From here on nothing is read.
            let burst: Vec<u8> = (0..1000).flat_map(|_| encode(&ping(), None)).collect();
            loop {
                if watch.growth() > 256 * MIB {
                    exceeded.store(true, Ordering::SeqCst);
                    break;
                }
                if peer.send_raw(&burst).await.is_err() {
                    return; // the client closed the connection
                }
                pings.fetch_add(1000, Ordering::Relaxed);
            }
            // Hold the connection (and its unread bytes) until the test ends.
            std::future::pending::<()>().await;
        }
    })
    .await;
    let client = test_client(&broker.url())
        .keepalive_interval(Duration::from_secs(1))
        .memory_limit(256 * MIB)
        .build()
        .unwrap();
    let producer = within("create", client.producer("t").batching(false).create())
        .await
        .unwrap();
    // 12 MiB of messages: more than the socket buffers between us and the broker hold.
    let _sends = send_many(&producer, 48).await;
    let started = Instant::now();
    loop {
        assert!(
            !exceeded.load(Ordering::SeqCst),
            "the heap grew by more than 256 MiB during the PING flood"
        );
        if broker.accepted() >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the connection was never declared dead ({} PINGs sent)",
            pings.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 12 MiB of messages (and their encoded frames) plus a flat rest.
    watch.assert_peak_below("PING flood while never reading", 64 * MIB);
    common::wait_until("producer ready again", || producer.state() == State::Ready).await;
    assert!(broker.accepted() <= 3, "{} connections", broker.accepted());
}

/// Case 9: a broker advertising a maximum message size of 2^31-1, then sending a frame header
/// of 2 GB: the size is capped on the client's side, the frame is refused before anything is
/// reserved, and the connection closes with the size violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2gb_frame_after_advertising_2gb_is_refused_without_reserving_it() {
    hostile::serial();
    let broker = Hostile::start(|mut peer| async move {
        peer.handshake(Some(i32::MAX)).await;
        let mut header = (0x7fff_fff0u32).to_be_bytes().to_vec();
        header.extend_from_slice(&10u32.to_be_bytes());
        if peer.send_raw(&header).await.is_err() {
            return;
        }
        for _ in 0..256 {
            if peer.send_raw(&[0u8; 4096]).await.is_err() {
                return;
            }
        }
        std::future::pending::<()>().await;
    })
    .await;
    let watch = MemWatch::start();
    let conn = connect(&broker, Duration::from_secs(30)).await;
    assert!(
        conn.info().max_message_size <= 256 * MIB,
        "advertised 2 GB accepted as is: {}",
        conn.info().max_message_size
    );
    let closed = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
    watch.assert_peak_below("a 2 GB frame header", 8 * MIB);
    let reason = closed.expect("the connection closes on the oversized frame");
    assert!(
        matches!(
            reason,
            Error::Codec(CodecError::FrameTooLarge { size, .. }) if size > 2_000_000_000
        ),
        "{reason:?}"
    );
}

/// Case 9: a frame below the limit (100 MB) trickled in, then silence: the read buffer grows
/// with the bytes that arrived (2 MiB), not with the size the header claims, and the
/// keep-alive declares the connection dead two intervals after the last whole frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_frame_grows_the_buffer_with_what_arrives_and_the_keepalive_ends_it() {
    hostile::serial();
    let trickled = Arc::new(AtomicBool::new(false));
    let done = trickled.clone();
    let broker = Hostile::start(move |mut peer| {
        let done = done.clone();
        async move {
            peer.handshake(Some(i32::MAX)).await;
            let mut header = (100u32 << 20).to_be_bytes().to_vec();
            header.extend_from_slice(&10u32.to_be_bytes());
            if peer.send_raw(&header).await.is_err() {
                return;
            }
            for _ in 0..128 {
                if peer.send_raw(&[0u8; 16 * 1024]).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            done.store(true, Ordering::SeqCst);
            // Silence, and nothing read (the client's PING stays unanswered).
            std::future::pending::<()>().await;
        }
    })
    .await;
    let watch = MemWatch::start();
    let keepalive = Duration::from_secs(1);
    let conn = connect(&broker, keepalive).await;
    let connected = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(20), conn.closed()).await;
    assert!(trickled.load(Ordering::SeqCst), "the broker sent its 2 MiB");
    watch.assert_peak_below("2 MiB of a 100 MB frame", 12 * MIB);
    let reason = closed.expect("the keep-alive ends a connection without whole frames");
    assert!(
        matches!(reason, Error::ConnectionLost(ref m) if m.contains("keep-alive")),
        "{reason:?}"
    );
    // Two intervals after CONNECTED (the last whole frame); a generous bound, the exact one
    // is a paused-time unit test.
    let took = connected.elapsed();
    assert!(took < Duration::from_secs(6), "closed after {took:?}");
}

/// A broker that answers the create requests, then stops reading once the first SEND arrives.
async fn stops_reading_at_first_send() -> Hostile {
    Hostile::start(|mut peer| async move {
        peer.handshake(None).await;
        if peer.serve_until(|f| f.ty() == Type::Send).await.is_none() {
            return;
        }
        std::future::pending::<()>().await;
    })
    .await
}

/// Sends `n` messages of 256 KiB without waiting for receipts.
async fn send_many(producer: &pulsar_sdk::Producer, n: usize) -> Vec<pulsar_sdk::SendFuture> {
    let mut sends = Vec::new();
    for _ in 0..n {
        let f = within("send", producer.send(vec![7u8; 256 * 1024]))
            .await
            .expect("queued");
        sends.push(f);
    }
    sends
}

/// Case 10: closing a producer on a broker that stopped reading finishes within the operation
/// timeout, says the close was not confirmed, and leaves the producer Closed; its pending
/// messages fail instead of vanishing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_close_on_a_broker_that_stopped_reading_times_out_and_ends_closed() {
    // Serial: its 32 MiB of messages would count in the other tests' heap bounds.
    hostile::serial();
    let broker = stops_reading_at_first_send().await;
    let client = test_client(&broker.url())
        .operation_timeout(Duration::from_secs(2))
        .memory_limit(256 * MIB)
        .build()
        .unwrap();
    let producer = within("create", client.producer("t").batching(false).create())
        .await
        .unwrap();
    let sends = send_many(&producer, 128).await;
    let started = Instant::now();
    let r = within("close", producer.close()).await;
    assert!(
        matches!(r, Err(Error::Timeout { .. })),
        "close of an unconfirmed CloseProducer: {r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(producer.state(), State::Closed);
    for s in sends {
        assert!(within("pending send", s).await.is_err());
    }
}

/// Case 10, consumer side: its CloseConsumer waits behind a connection the broker does not
/// drain; the close times out within the operation timeout and the consumer ends Closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_close_on_a_broker_that_stopped_reading_times_out_and_ends_closed() {
    // Serial: its 32 MiB of messages would count in the other tests' heap bounds.
    hostile::serial();
    let broker = stops_reading_at_first_send().await;
    let client = test_client(&broker.url())
        .operation_timeout(Duration::from_secs(2))
        .memory_limit(256 * MIB)
        .build()
        .unwrap();
    let consumer = within(
        "subscribe",
        client.consumer("t").subscription("s").subscribe(),
    )
    .await
    .unwrap();
    let producer = within("create", client.producer("t").batching(false).create())
        .await
        .unwrap();
    let _sends = send_many(&producer, 128).await;
    let started = Instant::now();
    let r = within("close", consumer.close()).await;
    assert!(
        matches!(r, Err(Error::Timeout { .. })),
        "close of an unconfirmed CloseConsumer: {r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(consumer.state(), State::Closed);
}
