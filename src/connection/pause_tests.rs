//! A connection that stops reading for a consumer's channel past its byte allowance
//! (`entity_channel::Backpressure`), against a scripted peer over an in-memory pipe with time
//! paused.

use futures::SinkExt;

use super::entity_channel::consumer_channel;
use super::tests::{cmd, connect, next_command};
use super::*;
use crate::proto::{self, base_command::Type};

/// A MESSAGE for consumer `consumer_id` with a payload of `size` bytes.
fn message(consumer_id: u64, entry_id: u64, size: usize) -> Frame {
    let mut command = cmd(Type::Message);
    command.message = Some(proto::CommandMessage {
        consumer_id,
        message_id: proto::MessageIdData {
            ledger_id: 1,
            entry_id,
            ..Default::default()
        },
        ..Default::default()
    });
    let metadata = proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id: entry_id,
        publish_time: 1,
        ..Default::default()
    };
    Frame::with_payload(command, metadata, Bytes::from(vec![7u8; size]))
}

/// Found by review (issue #31): while paused the connection took every keep-alive tick for
/// a frame heard, so it sent no PING at all (upstream's `PulsarHandler` skips only its
/// verdict while auto-read is off, and pings anyway). It pings every interval, is not
/// declared dead while its PONGs wait unread, and reads again once the consumer task drains.
#[tokio::test(start_paused = true)]
async fn a_paused_connection_keeps_pinging_and_reads_again_once_drained() {
    let (conn, mut peer) = connect().await;
    let (tx, mut rx) = consumer_channel(1000, 4096);
    conn.register(EntityKind::Consumer, 1, tx).unwrap();
    // The first message leaves the channel past its allowance: the second waits in the socket.
    peer.send(message(1, 1, 8192)).await.unwrap();
    peer.send(message(1, 2, 8192)).await.unwrap();
    // Three keep-alive intervals (30 s each): a PING in each, no verdict.
    for _ in 0..3 {
        assert_eq!(next_command(&mut peer).await.r#type, Type::Ping as i32);
        peer.send(Frame::simple(cmd(Type::Pong))).await.unwrap();
    }
    assert!(!conn.is_closed());
    // Taken: the channel is drained, the connection reads the second message.
    assert!(matches!(rx.try_recv(), Ok(EntityEvent::Message(_))));
    match rx.recv().await {
        Some(EntityEvent::Message(m)) => assert_eq!(m.command.message_id.entry_id, 2),
        other => panic!("expected the second message, got {other:?}"),
    }
    assert!(!conn.is_closed());
}
