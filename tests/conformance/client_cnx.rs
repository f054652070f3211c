//! Upstream `ClientCnx`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prost::Message as _;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::MockBroker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{full, test_client, within};

/// A TCP relay in front of `broker` that resets (RST, `SO_LINGER` 0) the client's socket
/// instead of passing on the first command of type `reset_on` it sees. Returns its address and
/// how many resets it did.
async fn resetting_relay(broker: SocketAddr, reset_on: Type) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resets = Arc::new(AtomicUsize::new(0));
    let counter = resets.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = TcpStream::connect(broker).await.unwrap();
            tokio::spawn(relay(client, upstream, reset_on, counter.clone()));
        }
    });
    (addr, resets)
}

async fn relay(client: TcpStream, upstream: TcpStream, reset_on: Type, resets: Arc<AtomicUsize>) {
    // Any close of the client's socket is then a reset (RST), not a FIN.
    #[allow(deprecated)]
    client.set_linger(Some(std::time::Duration::ZERO)).unwrap();
    // `tokio::io::split`, not `into_split`: a dropped `OwnedWriteHalf` sends a FIN first.
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_broker, mut to_broker) = upstream.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_broker, &mut to_client).await;
    });
    // Client → broker, frame by frame: [total size][command size][command][payload...].
    loop {
        let mut size = [0u8; 4];
        if from_client.read_exact(&mut size).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(size) as usize];
        if from_client.read_exact(&mut frame).await.is_err() {
            return;
        }
        let cmd_size = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        let cmd = wire::BaseCommand::decode(&frame[4..4 + cmd_size]).unwrap();
        if cmd.r#type == reset_on as i32
            && resets
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // Both halves dropped: the socket closes with a reset, and the client's read
            // fails with ConnectionReset.
            back.abort();
            return;
        }
        if to_broker.write_all(&size).await.is_err() || to_broker.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// `ClientCnx.exceptionCaught` / `channelInactive`: a connection reset by the peer is a lost
/// connection; the subscribe (and the producer create) pending on it fail as disconnected,
/// which is retriable, and the client subscribes again on a new connection.
#[tokio::test]
async fn a_connection_reset_during_subscribe_or_create_is_retried() {
    for reset_on in [Type::Subscribe, Type::Producer] {
        let broker = MockBroker::start().await.unwrap();
        let (relay, resets) = resetting_relay(broker.addr(), reset_on).await;
        // Lookups go to the broker, which names the relay as the topic's broker.
        broker.connect_lookups_to(&format!("pulsar://{relay}"));
        let client = test_client(&broker.service_url()).build().unwrap();
        let topic = full("reset-during-create");
        match reset_on {
            Type::Subscribe => {
                let consumer = within(
                    "subscribe",
                    client.consumer(&topic).subscription("s").subscribe(),
                )
                .await;
                assert!(consumer.is_ok(), "subscribe: {:?}", consumer.err());
            }
            _ => {
                let producer = within("create", client.producer(&topic).create()).await;
                assert!(producer.is_ok(), "create: {:?}", producer.err());
            }
        }
        assert_eq!(resets.load(Ordering::SeqCst), 1, "{reset_on:?}: one reset");
        client.close().await.unwrap();
    }
}

/// r-h1: a reset at the other stages before a create — the handshake (CONNECT), the partition
/// metadata request and the lookup — is a lost connection too (`ClientCnx.channelInactive`
/// fails the connect future and the pending requests as disconnected, retriable): the create
/// succeeds on a new connection.
#[tokio::test]
async fn r_h1_a_reset_during_connect_or_lookup_is_retried() {
    for reset_on in [Type::Connect, Type::PartitionedMetadata, Type::Lookup] {
        let broker = MockBroker::start().await.unwrap();
        let (relay, resets) = resetting_relay(broker.addr(), reset_on).await;
        // Everything goes through the relay: service URL and topic owner.
        broker.connect_lookups_to(&format!("pulsar://{relay}"));
        let client = test_client(&format!("pulsar://{relay}")).build().unwrap();
        let topic = full("reset-before-create");
        let producer = within("create", client.producer(&topic).create()).await;
        assert!(producer.is_ok(), "{reset_on:?}: {:?}", producer.err());
        assert_eq!(resets.load(Ordering::SeqCst), 1, "{reset_on:?}: one reset");
        client.close().await.unwrap();
    }
}

/// r-h1: a bad frame as the answer to CONNECT ends that connection like any other loss
/// (`ClientCnx.exceptionCaught` closes the channel; the connect future fails with a
/// retriable `PulsarClientException`), so the create is retried on a new connection instead
/// of failing for good with `Error::Codec`.
#[tokio::test]
async fn r_h1_a_bad_frame_answering_connect_is_retried() {
    let broker = MockBroker::start().await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap();
    let target = broker.addr();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut client, _)) = listener.accept().await {
            if std::mem::take(&mut first) {
                let mut buf = [0u8; 512];
                let _ = client.read(&mut buf).await;
                // total 8, command 4, then 4 bytes that are not a BaseCommand.
                let _ = client
                    .write_all(&[0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
                    .await;
                tokio::spawn(async move {
                    let _ = client.read(&mut buf).await;
                });
                continue;
            }
            let mut upstream = TcpStream::connect(target).await.unwrap();
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    broker.connect_lookups_to(&format!("pulsar://{front}"));
    let client = test_client(&format!("pulsar://{front}")).build().unwrap();
    let producer = within("create", client.producer(full("bad-connected")).create()).await;
    assert!(producer.is_ok(), "{:?}", producer.err());
    client.close().await.unwrap();
}

/// r-h1: a bad frame on a live connection closes it (`ClientCnx.exceptionCaught`); the
/// producer on it reconnects like after any loss (`ConnectionHandler.connectionClosed`), and
/// a send issued after the bad frame is delivered.
#[tokio::test]
async fn r_h1_a_bad_frame_on_a_live_connection_is_followed_by_a_reconnect() {
    let broker = MockBroker::start().await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap();
    let target = broker.addr();
    let poison = Arc::new(tokio::sync::Notify::new());
    let trigger = poison.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((client, _)) = listener.accept().await {
            let upstream = TcpStream::connect(target).await.unwrap();
            let poisoned = std::mem::take(&mut first).then(|| trigger.clone());
            tokio::spawn(async move {
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_broker, mut to_broker) = upstream.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut to_broker).await;
                });
                match poisoned {
                    Some(poison) => {
                        tokio::select! {
                            _ = tokio::io::copy(&mut from_broker, &mut to_client) => {}
                            _ = poison.notified() => {
                                let _ = to_client
                                    .write_all(&[0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
                                    .await;
                                // Keep the socket open: the client must end it on its own.
                                std::future::pending::<()>().await;
                            }
                        }
                    }
                    None => {
                        let _ = tokio::io::copy(&mut from_broker, &mut to_client).await;
                    }
                }
                up.abort();
            });
        }
    });
    broker.connect_lookups_to(&format!("pulsar://{front}"));
    let client = test_client(&format!("pulsar://{front}")).build().unwrap();
    let producer = within("create", client.producer(full("bad-frame-live")).create())
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    poison.notify_one();
    let sent = within("send after the bad frame", producer.send_and_wait("after")).await;
    assert!(sent.is_ok(), "{:?}", sent.err());
    assert!(broker.received_of(Type::Producer).len() >= 2, "re-created");
    client.close().await.unwrap();
}
