//! One deadline per request, kept by the router from the moment the request is issued
//! (Java `ClientCnx.sendRequestAndHandleTimeout` / `checkRequestTimeout`), against a scripted
//! peer over an in-memory pipe with time paused.

use std::time::Duration;

use futures::SinkExt;

use super::tests::{
    cmd, config, connect, connect_over, connected, fill_until_full, lookup_request, next_command,
    success,
};
use super::*;
use crate::proto::{self, base_command::Type};

/// Whether the connection's pending-request count reaches `n` within one second of virtual
/// time (well before any deadline in these tests).
async fn pending_settles_at(conn: &Connection, n: usize) -> bool {
    tokio::time::timeout(Duration::from_secs(1), async {
        while conn.stats().pending_requests != n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .is_ok()
}

fn producer_request(conn: &Connection) -> (u64, BaseCommand) {
    let id = conn.new_request_id();
    let mut c = cmd(Type::Producer);
    c.producer = Some(proto::CommandProducer {
        topic: "t".into(),
        producer_id: 1,
        request_id: id,
        ..Default::default()
    });
    (id, c)
}

fn producer_success(request_id: u64, ready: bool) -> BaseCommand {
    let mut c = cmd(Type::ProducerSuccess);
    c.producer_success = Some(proto::CommandProducerSuccess {
        request_id,
        producer_name: "p".into(),
        producer_ready: Some(ready),
        ..Default::default()
    });
    c
}

/// Fills every buffer between the handles and a broker that does not read until the queue
/// stays full even after the connection task had its turns: it takes no more ops, its
/// writer's frames wait in its backlog.
async fn stall(conn: &Connection) {
    'filling: loop {
        fill_until_full(conn).await;
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let mut b = bytes::BytesMut::new();
        crate::codec::encode_frame(&crate::commands::flow(2_000_000, 0), &mut b, 1 << 20).unwrap();
        match conn.try_send_raw(b.freeze()) {
            Ok(()) => continue 'filling,
            Err(Some(_)) => return,
            Err(None) => panic!("connection closed"),
        }
    }
}

/// A request queued behind a broker that does not read is the router's from the moment it
/// is issued: counted as pending while its frame waits for room, failed once at its deadline
/// by the router (not by a clock of the caller's), and never written afterwards.
#[tokio::test(start_paused = true)]
async fn a_request_queued_behind_a_stalled_writer_is_timed_out_by_the_router_once() {
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
    stall(&conn).await;
    let started = tokio::time::Instant::now();
    let (late_id, c) = lookup_request(&conn, "late");
    let c2 = conn.clone();
    let caller = tokio::spawn(async move { c2.request(late_id, c, "lookup").await });
    assert!(
        pending_settles_at(&conn, 1).await,
        "the router holds the queued request: {:?}",
        conn.stats()
    );
    let r = caller.await.unwrap();
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
    assert_eq!(started.elapsed(), Duration::from_secs(5), "at its deadline");
    assert_eq!(conn.stats().pending_requests, 0);
    // The broker reads again: everything queued arrives, then a later request; the timed-out
    // one is never sent.
    let (next_id, c) = lookup_request(&conn, "next");
    let c3 = conn.clone();
    let next = tokio::spawn(async move { c3.request(next_id, c, "lookup").await });
    loop {
        let c = next_command(&mut peer).await;
        if let Some(l) = c.lookup_topic {
            assert_ne!(l.request_id, late_id, "a timed-out request was sent");
            assert_eq!(l.request_id, next_id);
            break;
        }
    }
    peer.send(Frame::simple(success(next_id))).await.unwrap();
    assert!(next.await.unwrap().is_ok());
    assert!(!conn.is_closed());
}

/// A caller that stops waiting removes its pending entry at once, not at the deadline; a late
/// answer to it is dropped without harm.
#[tokio::test(start_paused = true)]
async fn a_request_whose_caller_left_is_forgotten_at_once() {
    let (conn, mut peer) = connect().await;
    let (id, c) = lookup_request(&conn, "t");
    let c2 = conn.clone();
    let caller = tokio::spawn(async move { c2.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    assert_eq!(conn.stats().pending_requests, 1);
    caller.abort();
    assert!(
        pending_settles_at(&conn, 0).await,
        "still pending a second after its caller left (deadline 5 s): {:?}",
        conn.stats()
    );
    peer.send(Frame::simple(success(id))).await.unwrap();
    let (id, c) = lookup_request(&conn, "after");
    let c3 = conn.clone();
    let after = tokio::spawn(async move { c3.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    peer.send(Frame::simple(success(id))).await.unwrap();
    assert!(after.await.unwrap().is_ok());
    assert!(!conn.is_closed());
}

/// Java `ClientCnx.handleProducerSuccess`: a create the broker answered "wait"
/// (`producer_ready = false`, WaitForExclusive) outlives the operation timeout, with no second
/// clock of the caller's; and when its caller gives up, its entry goes at once (it has no
/// deadline to end it otherwise).
#[tokio::test(start_paused = true)]
async fn a_create_answered_wait_outlives_its_deadline_and_goes_when_its_caller_leaves() {
    let (conn, mut peer) = connect().await;
    let (id, c) = producer_request(&conn);
    let c2 = conn.clone();
    let caller = tokio::spawn(async move { c2.request(id, c, "create").await });
    next_command(&mut peer).await;
    peer.send(Frame::simple(producer_success(id, false)))
        .await
        .unwrap();
    // Four operation timeouts later (within the keep-alive interval): still waiting.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(!caller.is_finished(), "timed out: {:?}", caller.await);
    assert_eq!(conn.stats().pending_requests, 1);
    caller.abort();
    assert!(
        pending_settles_at(&conn, 0).await,
        "a given-up wait stays pending: {:?}",
        conn.stats()
    );
    // The grant that follows finds nobody and is dropped.
    peer.send(Frame::simple(producer_success(id, true)))
        .await
        .unwrap();
    let (id, c) = lookup_request(&conn, "after");
    let c3 = conn.clone();
    let after = tokio::spawn(async move { c3.request(id, c, "lookup").await });
    next_command(&mut peer).await;
    peer.send(Frame::simple(success(id))).await.unwrap();
    assert!(after.await.unwrap().is_ok());
}

/// A request that waits for its answer past the broker's "wait" gets the final answer.
#[tokio::test(start_paused = true)]
async fn a_create_answered_wait_completes_with_its_grant() {
    let (conn, mut peer) = connect().await;
    let (id, c) = producer_request(&conn);
    let c2 = conn.clone();
    let caller = tokio::spawn(async move { c2.request(id, c, "create").await });
    next_command(&mut peer).await;
    peer.send(Frame::simple(producer_success(id, false)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    peer.send(Frame::simple(producer_success(id, true)))
        .await
        .unwrap();
    let granted = caller.await.unwrap().expect("granted");
    assert_eq!(granted.producer_success.unwrap().producer_ready, Some(true));
    assert_eq!(conn.stats().pending_requests, 0);
}
