//! Upstream `ClientCnx`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common;
use crate::common::{full, test_client, within};
use prost::Message as _;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, ConnectionId, MockBroker, MockError, MockRequest};
use pulsar_sdk::{Client, Error, ServerError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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

fn client_of(broker: &MockBroker) -> Client {
    test_client(&broker.service_url()).build().unwrap()
}

/// The connection and producer id of the (last) producer the mock created for `topic`.
fn producer_of(broker: &MockBroker, topic: &str) -> (ConnectionId, u64) {
    let create = broker
        .received_of(Type::Producer)
        .into_iter()
        .rev()
        .find(|r| r.command.producer.as_ref().unwrap().topic == topic)
        .expect("the producer was created");
    (
        create.connection,
        create.command.producer.as_ref().unwrap().producer_id,
    )
}

/// Java `ClientCnx.handleSendReceipt`: a receipt for a producer the connection does not know
/// (already closed) is ignored; the connection and its other producers go on.
#[tokio::test]
async fn a_receipt_for_an_unknown_producer_is_ignored() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("cnx-unknown-receipt");
    let producer = common::unbatched_producer(&client, &topic).await;
    producer.send_and_wait("first").await.unwrap();
    let (conn, id) = producer_of(&broker, &topic);
    let stray = wire::BaseCommand {
        r#type: Type::SendReceipt as i32,
        send_receipt: Some(wire::CommandSendReceipt {
            producer_id: id + 1000,
            sequence_id: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(broker.push(conn, stray));
    // Frames on one connection are handled in order: this receipt comes after the stray one.
    within(
        "a send after the stray receipt",
        producer.send_and_wait("second"),
    )
    .await
    .unwrap();
    assert_eq!(broker.accepted_connections(), 1, "the connection stayed up");
    assert_eq!(broker.received_of(Type::Producer).len(), 1, "no re-create");
}

/// Java `ClientCnx.handleCloseProducer`: a CloseProducer naming no producer of this connection
/// is only logged; nothing is closed or re-created.
#[tokio::test]
async fn a_close_producer_for_an_unknown_producer_is_ignored() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("cnx-unknown-close");
    let producer = common::unbatched_producer(&client, &topic).await;
    producer.send_and_wait("first").await.unwrap();
    let (conn, id) = producer_of(&broker, &topic);
    let stray = wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id: id + 1000,
            request_id: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(broker.push(conn, stray));
    within(
        "a send after the stray close",
        producer.send_and_wait("second"),
    )
    .await
    .unwrap();
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(broker.received_of(Type::Producer).len(), 1, "no re-create");
    assert_eq!(producer.state(), pulsar_sdk::State::Ready);
}

/// Java `ClientCnx.handleSendError` (default branch): a SEND_ERROR other than ChecksumError,
/// TopicTerminatedError and NotAllowedError closes the connection; the producer reconnects and
/// the message is sent again, so the send still succeeds.
#[tokio::test]
async fn a_transient_send_error_closes_the_connection_and_the_message_is_resent() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("cnx-send-error");
    let producer = common::unbatched_producer(&client, &topic).await;
    broker.push_error(MockError::new(
        MockRequest::Send,
        ServerError::PersistenceError,
        "bookie down",
    ));
    let id = within(
        "the send across the send error",
        producer.send_and_wait("m"),
    )
    .await
    .expect("the message is re-sent on the new connection");
    assert_eq!(
        broker.accepted_connections(),
        2,
        "the connection was replaced"
    );
    assert_eq!(broker.received_of(Type::Producer).len(), 2, "re-created");
    let sends = broker.received_of(Type::Send);
    assert_eq!(sends.len(), 2, "sent once, refused, sent again");
    assert_ne!(sends[0].connection, sends[1].connection);
    assert_eq!(broker.topic_messages(&topic), 1, "stored once: {id:?}");
}

/// Java `ClientCnx.handleError`: a CommandError fails only the request it names, with the
/// broker's code and message; the connection stays up for everything else.
#[tokio::test]
async fn an_error_fails_only_its_request_with_the_brokers_code() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    broker.push_error(
        MockError::new(
            MockRequest::Producer,
            ServerError::AuthorizationError,
            "no access",
        )
        .on_topic("cnx-refused"),
    );
    match client.producer("cnx-refused").create().await {
        Err(Error::Broker { code, message }) => {
            assert_eq!(code, ServerError::AuthorizationError);
            assert!(message.contains("no access"), "{message}");
        }
        other => panic!("expected the broker's refusal, got {other:?}"),
    }
    let fine = common::unbatched_producer(&client, "cnx-fine").await;
    fine.send_and_wait("m").await.unwrap();
    assert_eq!(
        broker.accepted_connections(),
        1,
        "the refusal closed nothing"
    );
}

/// Java `ClientCnx.checkServerError`, from `handleLookupResponse`: a lookup answered
/// `ServiceNotReady` fails with that code and closes the connection it came on, so the next
/// lookup opens a fresh one.
#[tokio::test]
async fn a_lookup_answered_service_not_ready_closes_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    broker.set_lookup_error(
        Some("cnx-not-ready"),
        ServerError::ServiceNotReady,
        "starting",
    );
    match client.lookup_topic("cnx-not-ready").await {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::ServiceNotReady),
        other => panic!("expected ServiceNotReady, got {other:?}"),
    }
    common::wait_until("the connection is closed", || {
        broker.connections().is_empty()
    })
    .await;
    broker.clear_lookup_errors();
    client.lookup_topic("cnx-not-ready").await.unwrap();
    assert_eq!(broker.accepted_connections(), 2);
}

/// Java `ClientCnx.checkServerError`, from `handlePartitionResponse`: the same for a
/// partitioned-metadata answer of `ServiceNotReady`.
#[tokio::test]
async fn a_metadata_answer_of_service_not_ready_closes_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    broker.push_error(MockError::new(
        MockRequest::PartitionedMetadata,
        ServerError::ServiceNotReady,
        "starting",
    ));
    match client
        .partitioned_topic_metadata("cnx-meta-not-ready")
        .await
    {
        Err(Error::Broker { code, .. }) => assert_eq!(code, ServerError::ServiceNotReady),
        other => panic!("expected ServiceNotReady, got {other:?}"),
    }
    common::wait_until("the connection is closed", || {
        broker.connections().is_empty()
    })
    .await;
    assert_eq!(
        client
            .partitioned_topic_metadata("cnx-meta-not-ready")
            .await
            .unwrap(),
        0
    );
    assert_eq!(broker.accepted_connections(), 2);
}

/// Java `ClientCnx.checkServerError`: other lookup errors (here TopicNotFound... any code but
/// ServiceNotReady / TooManyRequests) leave the connection alone.
#[tokio::test]
async fn other_lookup_errors_keep_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    broker.set_lookup_error(Some("cnx-authz"), ServerError::AuthorizationError, "no");
    assert!(client.lookup_topic("cnx-authz").await.is_err());
    client.lookup_topic("cnx-other").await.unwrap();
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(broker.connections().len(), 1);
}

/// Java `ClientCnx.channelInactive`: when the connection drops, every request waiting on it
/// fails at once (not at its timeout), as a lost connection.
#[tokio::test]
async fn a_dropped_connection_fails_its_pending_requests_at_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    client.lookup_topic("cnx-warm").await.unwrap();
    broker.set_unresponsive(true);
    let lookup = client.lookup_topic("cnx-pending");
    tokio::pin!(lookup);
    tokio::select! {
        r = &mut lookup => panic!("answered by an unresponsive broker: {r:?}"),
        _ = common::wait_until("the second lookup arrived", || {
            broker.received_of(Type::Lookup).len() == 2
        }) => {}
    }
    let started = tokio::time::Instant::now();
    broker.drop_all_connections();
    match lookup.await {
        Err(Error::ConnectionLost(_)) => {}
        other => panic!("expected a lost connection, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed at the drop, not at the 10 s operation timeout"
    );
}

/// Java `ClientCnx.handlePartitionResponse`: an answer without a result (`response` unset)
/// and without an error is a failure ("Empty lookup response"), not a count of 0 partitions
/// (which would make a partitioned topic look like a plain one).
#[tokio::test]
async fn a_metadata_answer_without_a_result_is_an_error_not_zero_partitions() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    client.lookup_topic("cnx-warm").await.unwrap();
    broker.set_unresponsive(true);
    let asked = client.partitioned_topic_metadata("cnx-empty-answer");
    tokio::pin!(asked);
    tokio::select! {
        r = &mut asked => panic!("answered by an unresponsive broker: {r:?}"),
        _ = common::wait_until("the metadata request arrived", || {
            !broker.received_of(Type::PartitionedMetadata).is_empty()
        }) => {}
    }
    let request = broker.received_of(Type::PartitionedMetadata);
    let request_id = request[0]
        .command
        .partition_metadata
        .as_ref()
        .unwrap()
        .request_id;
    let empty = wire::BaseCommand {
        r#type: Type::PartitionedMetadataResponse as i32,
        partition_metadata_response: Some(wire::CommandPartitionedTopicMetadataResponse {
            request_id,
            partitions: Some(3),
            response: None,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(broker.push(request[0].connection, empty));
    match within("the metadata answer", asked).await {
        Err(Error::Broker { message, .. }) => assert!(message.contains("empty"), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Java `ClientCnx.handleSendError` (ChecksumError) → `ProducerImpl.recoverChecksumError`:
/// Java re-checks the pending message's checksum and re-sends it when intact. This producer
/// encodes a message once into an immutable buffer (its checksum computed over it), so a
/// checksum error means the bytes were damaged on the way: it reconnects and re-sends, and
/// the send still succeeds.
#[tokio::test]
async fn a_checksum_error_re_sends_the_message() {
    let broker = MockBroker::start().await.unwrap();
    let client = client_of(&broker);
    let topic = full("cnx-checksum");
    let producer = common::unbatched_producer(&client, &topic).await;
    broker.push_error(MockError::new(
        MockRequest::Send,
        ServerError::ChecksumError,
        "checksum mismatch",
    ));
    within(
        "the send across the checksum error",
        producer.send_and_wait("m"),
    )
    .await
    .expect("the message is re-sent");
    assert_eq!(broker.received_of(Type::Send).len(), 2, "sent again");
    assert_eq!(broker.topic_messages(&topic), 1, "stored once");
}

/// r-h1: a reset at the other stages before a create — the handshake (CONNECT), the partition
/// metadata request and the lookup — is a lost connection too (`ClientCnx.channelInactive`
/// fails the connect future and the pending requests as disconnected, retriable): the create
/// succeeds on a new connection.
#[tokio::test]
async fn a_reset_during_connect_or_lookup_is_retried() {
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
async fn a_bad_frame_answering_connect_is_retried() {
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
async fn a_bad_frame_on_a_live_connection_is_followed_by_a_reconnect() {
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
