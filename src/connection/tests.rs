//! Connection tests against a scripted peer over an in-memory pipe (time paused where timing
//! matters), so every step of the exchange is explicit.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::DuplexStream;
use tokio_util::codec::Framed;

use super::*;
use crate::codec::PulsarCodec;
use crate::proto::{self, base_command::Type};

pub(super) type Peer = Framed<DuplexStream, PulsarCodec>;

pub(super) fn cmd(ty: Type) -> BaseCommand {
    BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

pub(super) fn connected(max_message_size: Option<i32>, watchers: bool) -> BaseCommand {
    let mut c = cmd(Type::Connected);
    c.connected = Some(proto::CommandConnected {
        server_version: "scripted-broker".into(),
        protocol_version: Some(21),
        max_message_size,
        feature_flags: Some(proto::FeatureFlags {
            supports_partition_update_watchers: Some(watchers),
            supports_topic_watchers: Some(true),
            ..Default::default()
        }),
    });
    c
}

pub(super) fn config() -> ConnectionConfig {
    ConnectionConfig {
        keepalive_interval: Duration::from_secs(30),
        operation_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Connects a client over a pipe; the scripted broker answers CONNECT with `answer`.
async fn connect_with(
    answer: BaseCommand,
    config: ConnectionConfig,
) -> (Connection, Peer, BaseCommand) {
    connect_over(tokio::io::duplex(1 << 20), answer, config).await
}

pub(super) async fn connect_over(
    (client_io, broker_io): (DuplexStream, DuplexStream),
    answer: BaseCommand,
    config: ConnectionConfig,
) -> (Connection, Peer, BaseCommand) {
    let mut peer = Framed::new(broker_io, PulsarCodec::new());
    let client = tokio::spawn(async move {
        Connection::connect_with_stream(client_io, "pulsar://scripted:6650", None, &config).await
    });
    let connect = peer
        .next()
        .await
        .expect("CONNECT")
        .expect("decodes")
        .command;
    peer.send(Frame::simple(answer)).await.unwrap();
    let conn = client.await.unwrap().expect("handshake succeeds");
    (conn, peer, connect)
}

pub(super) async fn connect() -> (Connection, Peer) {
    let (conn, peer, _) = connect_with(connected(Some(1 << 20), true), config()).await;
    (conn, peer)
}

pub(super) async fn next_command(peer: &mut Peer) -> BaseCommand {
    tokio::time::timeout(Duration::from_secs(60), peer.next())
        .await
        .expect("a command within 60 s")
        .expect("stream open")
        .expect("decodes")
        .command
}

pub(super) fn lookup_request(conn: &Connection, topic: &str) -> (u64, BaseCommand) {
    let id = conn.new_request_id();
    let mut c = cmd(Type::Lookup);
    c.lookup_topic = Some(proto::CommandLookupTopic {
        topic: topic.into(),
        request_id: id,
        ..Default::default()
    });
    (id, c)
}

pub(super) fn success(request_id: u64) -> BaseCommand {
    let mut c = cmd(Type::Success);
    c.success = Some(proto::CommandSuccess {
        request_id,
        schema: None,
    });
    c
}

fn receipt(producer_id: u64, sequence_id: u64) -> BaseCommand {
    let mut c = cmd(Type::SendReceipt);
    c.send_receipt = Some(proto::CommandSendReceipt {
        producer_id,
        sequence_id,
        ..Default::default()
    });
    c
}

#[tokio::test]
async fn handshake_sends_our_flags_and_reads_the_brokers() {
    let (conn, _peer, connect) = connect_with(connected(Some(1 << 20), true), config()).await;
    let c = connect.connect.expect("CONNECT body");
    assert_eq!(c.protocol_version, Some(crate::PROTOCOL_VERSION));
    assert!(c.client_version.starts_with("pulsar-sdk-rust-"));
    let flags = c.feature_flags.expect("client feature flags");
    assert_eq!(flags.supports_partition_update_watchers, Some(true));
    assert!(c.auth_method_name.is_none());

    let info = conn.info();
    assert_eq!(info.server_version, "scripted-broker");
    assert_eq!(info.protocol_version, 21);
    assert_eq!(info.max_message_size, 1 << 20);
    assert!(info.features.supports_partition_update_watchers);
    assert!(info.features.supports_topic_watchers);
    assert!(!info.features.supports_auth_refresh);
}

#[tokio::test]
async fn handshake_without_flags_or_max_size_uses_defaults() {
    // pulsar-lite answers CONNECTED with neither max_message_size nor feature flags.
    let mut answer = cmd(Type::Connected);
    answer.connected = Some(proto::CommandConnected {
        server_version: "Pulsar-Lite-0.1.0".into(),
        protocol_version: Some(21),
        ..Default::default()
    });
    let (conn, _peer, _) = connect_with(answer, config()).await;
    assert_eq!(
        conn.info().max_message_size,
        crate::codec::DEFAULT_MAX_MESSAGE_SIZE
    );
    assert_eq!(conn.info().features, BrokerFeatures::default());
}

#[tokio::test]
async fn handshake_sends_auth_and_hides_it_from_debug() {
    let mut cfg = config();
    cfg.auth = Some(std::sync::Arc::new(crate::auth::Authentication::token(
        "s3cret-token",
    )));
    assert!(!format!("{cfg:?}").contains("s3cret"));
    let (_conn, _peer, connect) = connect_with(connected(None, false), cfg).await;
    let c = connect.connect.unwrap();
    assert_eq!(c.auth_method_name.as_deref(), Some("token"));
    assert_eq!(c.auth_data.as_deref(), Some(&b"s3cret-token"[..]));
}

#[tokio::test]
async fn handshake_error_is_a_broker_error() {
    let mut answer = cmd(Type::Error);
    answer.error = Some(proto::CommandError {
        request_id: 0,
        error: proto::ServerError::AuthenticationError as i32,
        message: "bad token".into(),
    });
    let (client_io, broker_io) = tokio::io::duplex(1 << 16);
    let mut peer = Framed::new(broker_io, PulsarCodec::new());
    let client = tokio::spawn(async move {
        Connection::connect_with_stream(client_io, "pulsar://x:1", None, &config()).await
    });
    let _ = peer.next().await;
    peer.send(Frame::simple(answer)).await.unwrap();
    match client.await.unwrap() {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, crate::ServerError::AuthenticationError);
            assert_eq!(message, "bad token");
        }
        other => panic!("expected a broker error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn handshake_times_out_when_the_broker_is_silent() {
    let (client_io, _broker_io) = tokio::io::duplex(1 << 16);
    let result = Connection::connect_with_stream(client_io, "pulsar://x:1", None, &config()).await;
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
}

#[tokio::test]
async fn requests_correlate_by_id_in_any_order() {
    let (conn, mut peer) = connect().await;
    let (id_a, a) = lookup_request(&conn, "a");
    let (id_b, b) = lookup_request(&conn, "b");
    let ca = conn.clone();
    let cb = conn.clone();
    let ta = tokio::spawn(async move { ca.request(id_a, a, "lookup").await });
    let tb = tokio::spawn(async move { cb.request(id_b, b, "lookup").await });
    let first = next_command(&mut peer).await;
    let second = next_command(&mut peer).await;
    let ids: Vec<u64> = [first, second]
        .iter()
        .map(|c| c.lookup_topic.as_ref().unwrap().request_id)
        .collect();
    assert!(ids.contains(&id_a) && ids.contains(&id_b));
    // Answer in reverse order of sending.
    peer.send(Frame::simple(success(id_b))).await.unwrap();
    peer.send(Frame::simple(success(id_a))).await.unwrap();
    let ra = ta.await.unwrap().unwrap();
    let rb = tb.await.unwrap().unwrap();
    assert_eq!(ra.success.unwrap().request_id, id_a);
    assert_eq!(rb.success.unwrap().request_id, id_b);
    assert_eq!(conn.stats().pending_requests, 0);
}

#[tokio::test]
async fn a_broker_error_response_fails_only_that_request() {
    let (conn, mut peer) = connect().await;
    let (id, c) = lookup_request(&conn, "t");
    let c2 = conn.clone();
    let t = tokio::spawn(async move { c2.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    let mut e = cmd(Type::Error);
    e.error = Some(proto::CommandError {
        request_id: id,
        error: proto::ServerError::ServiceNotReady as i32,
        message: "loading".into(),
    });
    peer.send(Frame::simple(e)).await.unwrap();
    match t.await.unwrap() {
        Err(Error::Broker { code, .. }) => assert_eq!(code, crate::ServerError::ServiceNotReady),
        other => panic!("expected broker error, got {other:?}"),
    }
    assert!(!conn.is_closed());
}

#[tokio::test(start_paused = true)]
async fn request_timeout_fails_only_that_request_and_removes_it() {
    let (conn, mut peer) = connect().await;
    let (slow_id, slow) = lookup_request(&conn, "slow");
    let c1 = conn.clone();
    let slow_task = tokio::spawn(async move {
        c1.request_with_timeout(
            slow_id,
            Box::new(Frame::simple(slow)),
            "lookup",
            Duration::from_secs(1),
        )
        .await
    });
    let (fast_id, fast) = lookup_request(&conn, "fast");
    let c2 = conn.clone();
    let fast_task = tokio::spawn(async move {
        c2.request_with_timeout(
            fast_id,
            Box::new(Frame::simple(fast)),
            "lookup",
            Duration::from_secs(10),
        )
        .await
    });
    next_command(&mut peer).await;
    next_command(&mut peer).await;
    // Never answer "slow"; answer "fast" after the slow one's deadline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow_result = slow_task.await.unwrap();
    assert!(
        matches!(
            slow_result,
            Err(Error::Timeout {
                operation: "lookup",
                ..
            })
        ),
        "{slow_result:?}"
    );
    assert_eq!(
        conn.stats().pending_requests,
        1,
        "only the timed-out entry is removed"
    );
    peer.send(Frame::simple(success(fast_id))).await.unwrap();
    assert!(fast_task.await.unwrap().is_ok());
    // A late answer to the timed-out request is dropped without harm.
    peer.send(Frame::simple(success(slow_id))).await.unwrap();
    let (id, c) = lookup_request(&conn, "after");
    let c3 = conn.clone();
    let t = tokio::spawn(async move { c3.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    peer.send(Frame::simple(success(id))).await.unwrap();
    assert!(t.await.unwrap().is_ok());
    assert!(!conn.is_closed());
    assert_eq!(conn.stats().pending_requests, 0);
}

#[tokio::test]
async fn entity_commands_reach_the_right_entity() {
    let (conn, mut peer) = connect().await;
    let (tx1, mut rx1) = super::entity_channel(8);
    let (tx2, mut rx2) = super::entity_channel(8);
    conn.register(EntityKind::Producer, 1, tx1).unwrap();
    conn.register(EntityKind::Producer, 2, tx2).unwrap();
    peer.send(Frame::simple(receipt(2, 20))).await.unwrap();
    peer.send(Frame::simple(receipt(1, 10))).await.unwrap();
    // Unknown producer: dropped, nothing breaks.
    peer.send(Frame::simple(receipt(99, 0))).await.unwrap();
    peer.send(Frame::simple(receipt(1, 11))).await.unwrap();
    let seq = |e: EntityEvent| match e {
        EntityEvent::Receipt(r) => r.sequence_id,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(seq(rx1.recv().await.unwrap()), 10);
    assert_eq!(seq(rx1.recv().await.unwrap()), 11);
    assert_eq!(seq(rx2.recv().await.unwrap()), 20);
    assert!(rx2.try_recv().is_err());
    assert_eq!(conn.stats().registered_entities, 2);
    conn.unregister(EntityKind::Producer, 1);
    peer.send(Frame::simple(receipt(1, 12))).await.unwrap();
    peer.send(Frame::simple(receipt(2, 21))).await.unwrap();
    assert_eq!(seq(rx2.recv().await.unwrap()), 21);
    assert!(rx1.try_recv().is_err(), "unregistered entity gets nothing");
    assert_eq!(conn.stats().registered_entities, 1);
}

#[tokio::test]
async fn connection_loss_tells_every_entity_once_and_fails_pending_requests() {
    let (conn, mut peer) = connect().await;
    let mut receivers = Vec::new();
    for (kind, id) in [
        (EntityKind::Producer, 1),
        (EntityKind::Consumer, 1),
        (EntityKind::PartitionWatcher, 7),
    ] {
        let (tx, rx) = super::entity_channel(8);
        conn.register(kind, id, tx).unwrap();
        receivers.push(rx);
    }
    let (id, c) = lookup_request(&conn, "t");
    let c2 = conn.clone();
    let pending = tokio::spawn(async move { c2.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    drop(peer); // the broker goes away
    let reason = conn.closed().await;
    assert!(matches!(reason, Error::ConnectionLost(_)), "{reason:?}");
    for mut rx in receivers {
        match rx.recv().await {
            Some(EntityEvent::ConnectionClosed(Error::ConnectionLost(_))) => {}
            other => panic!("expected one ConnectionClosed, got {other:?}"),
        }
        assert!(
            rx.recv().await.is_none(),
            "told exactly once, then the channel ends"
        );
    }
    assert!(matches!(
        pending.await.unwrap(),
        Err(Error::ConnectionLost(_))
    ));
    assert!(conn.is_closed());
    assert_eq!(conn.stats(), ConnectionStats::default());
    // Later use fails cleanly.
    let (id, c) = lookup_request(&conn, "t");
    assert!(conn.request(id, c, "lookup").await.is_err());
    let (tx, _rx) = super::entity_channel(1);
    assert!(conn.register(EntityKind::Producer, 3, tx).is_err());
}

#[tokio::test(start_paused = true)]
async fn keepalive_pings_when_idle_and_stays_up_while_answered() {
    let (conn, mut peer) = connect().await;
    for _ in 0..3 {
        let c = next_command(&mut peer).await;
        assert_eq!(c.r#type, Type::Ping as i32);
        peer.send(Frame::simple(cmd(Type::Pong))).await.unwrap();
    }
    assert!(!conn.is_closed());
}

#[tokio::test(start_paused = true)]
async fn keepalive_closes_when_the_broker_stops_answering() {
    let (conn, mut peer) = connect().await;
    let started = tokio::time::Instant::now();
    let c = next_command(&mut peer).await;
    assert_eq!(c.r#type, Type::Ping as i32);
    // No PONG: the connection must close one interval after the PING.
    let reason = conn.closed().await;
    assert!(
        matches!(reason, Error::ConnectionLost(ref m) if m.contains("keep-alive")),
        "{reason:?}"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(91),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn broker_ping_is_answered_with_pong() {
    let (_conn, mut peer) = connect().await;
    peer.send(Frame::simple(cmd(Type::Ping))).await.unwrap();
    assert_eq!(next_command(&mut peer).await.r#type, Type::Pong as i32);
}

#[tokio::test]
async fn unknown_and_unhandled_commands_are_ignored() {
    let (conn, mut peer) = connect().await;
    // A type number no version of the protocol defines, then one the client doesn't handle.
    peer.send(Frame::simple(BaseCommand {
        r#type: 777,
        ..Default::default()
    }))
    .await
    .unwrap();
    peer.send(Frame::simple(cmd(Type::WatchTcAssignmentsUpdate)))
        .await
        .unwrap();
    peer.send(Frame::simple(cmd(Type::Ping))).await.unwrap();
    assert_eq!(next_command(&mut peer).await.r#type, Type::Pong as i32);
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn garbage_from_the_broker_closes_the_connection_with_an_error() {
    use tokio::io::AsyncWriteExt;
    let (conn, peer) = connect().await;
    let mut io = peer.into_inner();
    // A frame announcing 4 GiB: rejected before allocating.
    io.write_all(&[0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 1])
        .await
        .unwrap();
    let reason = conn.closed().await;
    assert!(matches!(reason, Error::Codec(_)), "{reason:?}");
}

#[tokio::test]
async fn close_fails_later_requests() {
    let (conn, _peer) = connect().await;
    conn.close();
    let reason = conn.closed().await;
    assert!(matches!(reason, Error::Closed));
    let (id, c) = lookup_request(&conn, "t");
    assert!(conn.request(id, c, "lookup").await.is_err());
}

/// A broker that stops reading fills the connection's queue; control commands (ack, flow,
/// redeliver) are still accepted at once, without waiting, and none is dropped: all arrive
/// once the broker reads again.
#[tokio::test]
async fn control_commands_are_never_blocked_or_dropped_by_a_full_queue() {
    let small = ConnectionConfig {
        command_queue: 4,
        ..config()
    };
    let (conn, mut peer, _) = connect_over(
        tokio::io::duplex(4096),
        connected(Some(1 << 20), false),
        small,
    )
    .await;
    // Fill every buffer between the handles and the stalled socket with data frames until
    // the bounded queue refuses one.
    let frame = |i: u64| {
        let mut c = cmd(Type::Flow);
        c.flow = Some(proto::CommandFlow {
            consumer_id: 1_000_000 + i,
            message_permits: 0,
        });
        let mut b = bytes::BytesMut::new();
        crate::codec::encode_frame(&Frame::simple(c), &mut b, 1 << 20).unwrap();
        b.freeze()
    };
    let mut queued = 0u64;
    loop {
        match conn.try_send_raw(frame(queued)) {
            Ok(()) => queued += 1,
            Err(Some(_)) => break,
            Err(None) => panic!("connection closed"),
        }
        assert!(queued < 100_000, "the queue never filled");
        if queued % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Full: control commands still go through without waiting.
    const CONTROL: u64 = 500;
    for i in 0..CONTROL {
        conn.send_control(crate::commands::flow(i, 1))
            .expect("accepted without waiting");
    }
    // The broker reads again: every data frame and every control command arrives.
    let mut data = 0;
    let mut control = std::collections::BTreeSet::new();
    while data < queued || (control.len() as u64) < CONTROL {
        let c = next_command(&mut peer).await;
        let f = c.flow.expect("a FLOW");
        if f.consumer_id >= 1_000_000 {
            data += 1;
        } else {
            control.insert(f.consumer_id);
        }
    }
    assert_eq!(control.len() as u64, CONTROL);
    assert_eq!(data, queued);
}

// ---------------------------------------------------------------------------------------------
// A hostile broker (issue #11: cases 1, 9 and 10 at the connection level).

/// Fills every buffer between the handles and a broker that does not read, until the
/// bounded queue refuses a data frame.
pub(super) async fn fill_until_full(conn: &Connection) {
    let mut queued = 0u64;
    loop {
        let mut b = bytes::BytesMut::new();
        crate::codec::encode_frame(
            &crate::commands::flow(1_000_000 + queued, 0),
            &mut b,
            1 << 20,
        )
        .unwrap();
        match conn.try_send_raw(b.freeze()) {
            Ok(()) => queued += 1,
            Err(Some(_)) => return,
            Err(None) => panic!("connection closed"),
        }
        assert!(queued < 100_000, "the queue never filled");
        if queued % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// Case 9: the connection is dead two keep-alive intervals after the broker's last frame
/// (upstream closes within two), not three.
#[tokio::test(start_paused = true)]
async fn keepalive_declares_the_connection_dead_two_intervals_after_the_last_frame() {
    let (conn, mut peer) = connect().await;
    // A frame a third of the way into the first interval, then silence (the PING that
    // follows is never answered).
    tokio::time::sleep(Duration::from_secs(10)).await;
    peer.send(Frame::simple(cmd(Type::Pong))).await.unwrap();
    let last_frame = tokio::time::Instant::now();
    let reason = conn.closed().await;
    let silent = last_frame.elapsed();
    assert!(
        matches!(reason, Error::ConnectionLost(ref m) if m.contains("keep-alive")),
        "{reason:?}"
    );
    assert!(
        silent >= Duration::from_secs(60) && silent <= Duration::from_millis(60_050),
        "closed after {silent:?} of silence; the interval is 30 s"
    );
    // The PING went out one interval after the last frame.
    assert_eq!(next_command(&mut peer).await.r#type, Type::Ping as i32);
}

/// Case 1: a broker that floods PINGs and never reads what we write gets one PONG at a time,
/// and the connection is declared dead once the writer has been blocked for two keep-alive
/// intervals (the PINGs keep the read side busy, so only the writer can tell).
#[tokio::test(start_paused = true)]
async fn a_broker_flooding_pings_without_reading_is_dead_after_two_intervals() {
    // A pipe of 64 bytes: a handful of PONGs fill it.
    let (conn, mut peer, _) = connect_over(
        tokio::io::duplex(64),
        connected(Some(1 << 20), false),
        config(),
    )
    .await;
    let started = tokio::time::Instant::now();
    let flood = tokio::spawn(async move {
        let mut sent = 0u64;
        // 100 PINGs every 100 ms, never reading; stops when the client goes away.
        while started.elapsed() < Duration::from_secs(300) {
            for _ in 0..100 {
                if peer.send(Frame::simple(cmd(Type::Ping))).await.is_err() {
                    return sent;
                }
                sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    });
    let reason = tokio::time::timeout(Duration::from_secs(200), conn.closed())
        .await
        .expect("the connection must be declared dead");
    let took = started.elapsed();
    assert!(
        matches!(reason, Error::ConnectionLost(ref m) if m.contains("not read")),
        "{reason:?}"
    );
    // The writer filled the pipe within a second, then stalled for 2 x 30 s.
    assert!(
        took >= Duration::from_secs(60) && took < Duration::from_secs(65),
        "declared dead after {took:?}"
    );
    let sent = flood.await.unwrap();
    assert!(sent < 70_000, "{sent} PINGs");
}

/// The outbox backlog is bounded: control commands beyond it close a connection whose broker
/// does not read, with an error saying so, instead of queueing without bound.
#[tokio::test]
async fn control_commands_beyond_the_backlog_bound_close_the_connection() {
    let small = ConnectionConfig {
        command_queue: 4,
        ..config()
    };
    let (conn, _peer, _) = connect_over(
        tokio::io::duplex(4096),
        connected(Some(1 << 20), false),
        small,
    )
    .await;
    fill_until_full(&conn).await;
    for i in 0..5_000u64 {
        if conn.send_control(crate::commands::flow(i, 1)).is_err() {
            break;
        }
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("closed once the backlog is full");
    assert!(
        matches!(reason, Error::ConnectionLost(ref m) if m.contains("not reading")),
        "{reason:?}"
    );
}

/// Case 10: a request's timeout covers its wait for room in a queue the broker does not
/// drain: it fails with a timeout after the operation timeout, not when the connection dies.
#[tokio::test(start_paused = true)]
async fn a_request_times_out_while_queued_behind_a_broker_that_does_not_read() {
    let small = ConnectionConfig {
        command_queue: 4,
        ..config()
    };
    let (conn, _peer, _) = connect_over(
        tokio::io::duplex(4096),
        connected(Some(1 << 20), false),
        small,
    )
    .await;
    fill_until_full(&conn).await;
    let started = tokio::time::Instant::now();
    let (id, c) = lookup_request(&conn, "t");
    let r = conn.request(id, c, "lookup").await;
    assert!(
        matches!(
            r,
            Err(Error::Timeout {
                operation: "lookup",
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

/// Case 9: an advertised maximum message size above the client's limit is capped.
#[tokio::test]
async fn an_advertised_max_message_size_above_the_limit_is_capped() {
    let (conn, _peer, _) = connect_with(connected(Some(i32::MAX), false), config()).await;
    assert_eq!(
        conn.info().max_message_size,
        crate::codec::MAX_MESSAGE_SIZE_LIMIT
    );
}

/// Case 9: a frame header claiming 100 MB reserves nothing near it: the read buffer grows
/// with the bytes that arrive.
#[test]
fn a_frame_header_reserves_only_what_arrives() {
    use bytes::BufMut;
    use tokio_util::codec::Decoder;
    let mut codec = PulsarCodec::with_max_message_size(crate::codec::MAX_MESSAGE_SIZE_LIMIT);
    let mut buf = bytes::BytesMut::new();
    buf.put_u32(100 << 20);
    buf.put_u32(10);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    assert!(buf.capacity() <= 128 * 1024, "{}", buf.capacity());
    let chunk = [0u8; 16 * 1024];
    for _ in 0..64 {
        buf.extend_from_slice(&chunk);
        assert!(codec.decode(&mut buf).unwrap().is_none());
    }
    // 1 MiB arrived: the buffer holds at most about twice that.
    assert!(
        buf.capacity() <= 2 * buf.len() + 128 * 1024,
        "{} bytes reserved for {} received",
        buf.capacity(),
        buf.len()
    );
}

#[tokio::test]
async fn an_entity_sent_more_than_its_bound_closes_the_connection_with_a_protocol_error() {
    let (conn, mut peer) = connect().await;
    let (tx, mut rx) = super::entity_channel(2);
    conn.register(EntityKind::Producer, 1, tx).unwrap();
    // Two fit; the entity does not take them; the third breaks the bound.
    for seq in 0..3 {
        peer.send(Frame::simple(receipt(1, seq))).await.unwrap();
    }
    let reason = conn.closed().await;
    match &reason {
        Error::Protocol(m) => assert!(m.contains("flow control violated"), "{m}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    // What was delivered stays delivered, then the entity learns why.
    for seq in 0..2 {
        match rx.recv().await {
            Some(EntityEvent::Receipt(r)) => {
                assert_eq!(r.sequence_id, seq)
            }
            other => panic!("expected receipt {seq}, got {other:?}"),
        }
    }
    assert!(matches!(
        rx.recv().await,
        Some(EntityEvent::ConnectionClosed(Error::Protocol(_)))
    ));
}

#[tokio::test]
async fn an_entity_that_takes_its_commands_never_hits_its_bound() {
    let (conn, mut peer) = connect().await;
    let (tx, mut rx) = super::entity_channel(2);
    conn.register(EntityKind::Producer, 1, tx).unwrap();
    for seq in 0..50 {
        peer.send(Frame::simple(receipt(1, seq))).await.unwrap();
        match rx.recv().await {
            Some(EntityEvent::Receipt(_)) => {}
            other => panic!("receipt {seq}: {other:?}"),
        }
    }
    assert!(!conn.is_closed());
}

/// A broker that keeps the socket readable does not starve the handles' queued ops: they are
/// taken between inbound frames, not only once the reader has nothing left.
#[tokio::test]
async fn a_stream_of_inbound_frames_does_not_hold_back_queued_sends() {
    let (client_io, broker_io) = tokio::io::duplex(16 << 20);
    let mut peer = Framed::new(broker_io, PulsarCodec::new());
    let config = config();
    let client = tokio::spawn(async move {
        Connection::connect_with_stream(client_io, "pulsar://scripted:6650", None, &config).await
    });
    peer.next().await.expect("CONNECT").expect("decodes");
    // CONNECTED, then a long stream of frames the connection handles itself (more than it
    // reads in one scheduling budget), then a PING.
    SinkExt::<Frame>::feed(&mut peer, Frame::simple(connected(Some(1 << 20), false)))
        .await
        .unwrap();
    for _ in 0..400_000 {
        SinkExt::<Frame>::feed(&mut peer, Frame::simple(cmd(Type::Pong)))
            .await
            .unwrap();
    }
    SinkExt::<Frame>::feed(&mut peer, Frame::simple(crate::commands::ping()))
        .await
        .unwrap();
    SinkExt::<Frame>::flush(&mut peer).await.unwrap();
    let conn = client.await.unwrap().expect("handshake succeeds");
    let mut b = bytes::BytesMut::new();
    crate::codec::encode_frame(&crate::commands::flow(42, 1), &mut b, 1 << 20).unwrap();
    conn.try_send_raw(b.freeze()).expect("queued");
    // The queued FLOW reaches the broker before the PONG that answers the last frame.
    let first = next_command(&mut peer).await;
    assert_eq!(
        first.flow.map(|f| f.consumer_id),
        Some(42),
        "first command from the client: {first:?}"
    );
    let second = next_command(&mut peer).await;
    assert_eq!(second.r#type, Type::Pong as i32);
}
