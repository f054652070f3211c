//! The mock broker against a raw framed client (the real client is tested against it elsewhere).

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::wire::{self, base_command::Type};
use super::*;
use crate::codec::{Frame, PulsarCodec};

pub(super) const WAIT: Duration = Duration::from_secs(5);

/// A client speaking raw frames, for driving the broker command by command.
pub(super) struct RawClient<T> {
    framed: Framed<T, PulsarCodec>,
    /// How long `recv` waits; long for tests with paused time (where it is virtual).
    patience: Duration,
}

impl<T: AsyncRead + AsyncWrite + Unpin> RawClient<T> {
    pub(super) fn new(io: T) -> Self {
        RawClient {
            framed: Framed::new(io, PulsarCodec::new()),
            patience: WAIT,
        }
    }

    pub(super) fn patient(mut self) -> Self {
        self.patience = Duration::from_secs(3600);
        self
    }

    pub(super) async fn send(&mut self, cmd: wire::BaseCommand) {
        self.framed.send(Frame::simple(cmd)).await.expect("send");
    }

    /// Sends a payload frame (SEND).
    pub(super) async fn send_with_payload(
        &mut self,
        cmd: wire::BaseCommand,
        metadata: wire::MessageMetadata,
        data: bytes::Bytes,
    ) {
        self.framed
            .send(Frame::with_payload(cmd, metadata, data))
            .await
            .expect("send");
    }

    /// The next frame, or `None` if the connection closed (or failed).
    pub(super) async fn recv_frame(&mut self) -> Option<Frame> {
        match tokio::time::timeout(self.patience, self.framed.next()).await {
            Ok(Some(Ok(frame))) => Some(frame),
            Ok(_) => None,
            Err(_) => panic!("nothing received within {:?}", self.patience),
        }
    }

    /// The next decoding result as it is: `None` on a clean end of stream, an error for a
    /// frame cut short.
    pub(super) async fn next_result(&mut self) -> Option<Result<Frame, crate::codec::CodecError>> {
        tokio::time::timeout(self.patience, self.framed.next())
            .await
            .expect("nothing received in time")
    }

    /// The next command, or `None` if the connection closed (or failed).
    pub(super) async fn recv(&mut self) -> Option<wire::BaseCommand> {
        self.recv_frame().await.map(|f| f.command)
    }

    pub(super) async fn expect(&mut self, ty: Type) -> wire::BaseCommand {
        let cmd = self.recv().await.expect("connection closed");
        assert_eq!(cmd.r#type, ty as i32, "expected {ty:?}, got {cmd:?}");
        cmd
    }

    /// Whether the connection is closed (EOF) rather than a frame arriving.
    pub(super) async fn is_closed(&mut self) -> bool {
        self.recv().await.is_none()
    }

    /// Asserts that nothing arrives within `within`.
    pub(super) async fn expect_silence(&mut self, within: Duration) {
        if let Ok(next) = tokio::time::timeout(within, self.framed.next()).await {
            panic!("expected silence, got {next:?}");
        }
    }

    pub(super) async fn handshake(&mut self) -> wire::CommandConnected {
        self.send(connect(21, None)).await;
        self.expect(Type::Connected).await.connected.unwrap()
    }
}

pub(super) async fn tcp_client(broker: &MockBroker) -> RawClient<TcpStream> {
    RawClient::new(TcpStream::connect(broker.addr()).await.expect("connect"))
}

pub(super) fn connect(
    protocol_version: i32,
    flags: Option<wire::FeatureFlags>,
) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Connect as i32,
        connect: Some(wire::CommandConnect {
            client_version: "raw-test".into(),
            protocol_version: Some(protocol_version),
            feature_flags: flags,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn lookup(topic: &str, request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Lookup as i32,
        lookup_topic: Some(wire::CommandLookupTopic {
            topic: topic.into(),
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn partitioned_metadata(topic: &str, request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::PartitionedMetadata as i32,
        partition_metadata: Some(wire::CommandPartitionedTopicMetadata {
            topic: topic.into(),
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn ping() -> wire::BaseCommand {
    reply::ping_or_pong(Type::Ping)
}

fn consumer_stats(request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::ConsumerStats as i32,
        consumer_stats: Some(wire::CommandConsumerStats {
            request_id,
            consumer_id: 1,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn handshake_advertises_flags_and_max_size() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    let flags = wire::FeatureFlags {
        supports_auth_refresh: Some(true),
        supports_partition_update_watchers: Some(true),
        ..Default::default()
    };
    client.send(connect(25, Some(flags))).await;
    let connected = client.expect(Type::Connected).await.connected.unwrap();
    assert_eq!(connected.server_version, "pulsar-sdk-mock");
    assert_eq!(connected.protocol_version, Some(21)); // min(client's 25, 21)
    assert_eq!(connected.max_message_size, Some(5 * 1024 * 1024));
    let broker_flags = connected.feature_flags.unwrap();
    assert_eq!(broker_flags.supports_partition_update_watchers, Some(true));

    // The client's flags are recorded.
    let received = broker.wait_for_command(Type::Connect, WAIT).await.unwrap();
    assert_eq!(received.connection, broker.connections()[0]);
    assert_eq!(received.command.connect.unwrap().feature_flags, Some(flags));

    let broker = MockBroker::start_with(MockBrokerConfig {
        server_version: "custom".into(),
        max_message_size: Some(1024),
        supports_partition_update_watchers: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = tcp_client(&broker).await;
    client.send(connect(15, None)).await;
    let connected = client.expect(Type::Connected).await.connected.unwrap();
    assert_eq!(connected.server_version, "custom");
    assert_eq!(connected.protocol_version, Some(15));
    assert_eq!(connected.max_message_size, Some(1024));
    assert_eq!(
        connected
            .feature_flags
            .unwrap()
            .supports_partition_update_watchers,
        Some(false)
    );
}

#[tokio::test]
async fn command_before_connect_closes_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.send(lookup("t", 1)).await;
    assert!(client.is_closed().await);
    assert_eq!(broker.received_of(Type::Lookup).len(), 1); // still recorded

    let broker = MockBroker::start_with(MockBrokerConfig {
        require_connect_first: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = tcp_client(&broker).await;
    client.send(ping()).await;
    client.expect(Type::Pong).await;
}

#[tokio::test]
async fn lookup_connects_to_itself_or_redirects() {
    let broker = MockBroker::start().await.unwrap();
    let other = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;

    client
        .send(lookup("persistent://public/default/t", 7))
        .await;
    let resp = client.expect(Type::LookupResponse).await;
    let resp = resp.lookup_topic_response.unwrap();
    assert_eq!(resp.request_id, 7);
    assert_eq!(
        resp.response,
        Some(wire::command_lookup_topic_response::LookupType::Connect as i32)
    );
    assert_eq!(
        resp.broker_service_url.as_deref(),
        Some(&*broker.service_url())
    );
    assert_eq!(resp.authoritative, Some(true));
    assert_eq!(resp.proxy_through_service_url, Some(false));

    broker.redirect_lookups_to(&other.service_url(), false);
    client
        .send(lookup("persistent://public/default/t", 8))
        .await;
    let resp = client.expect(Type::LookupResponse).await;
    let resp = resp.lookup_topic_response.unwrap();
    assert_eq!(resp.request_id, 8);
    assert_eq!(
        resp.response,
        Some(wire::command_lookup_topic_response::LookupType::Redirect as i32)
    );
    assert_eq!(
        resp.broker_service_url.as_deref(),
        Some(&*other.service_url())
    );
    assert_eq!(resp.authoritative, Some(false));

    // A per-topic failure beats the broker-wide redirect.
    broker.set_lookup_error(Some("t"), ServerError::ServiceNotReady, "loading");
    client
        .send(lookup("persistent://public/default/t", 9))
        .await;
    let resp = client.expect(Type::LookupResponse).await;
    let resp = resp.lookup_topic_response.unwrap();
    assert_eq!(
        resp.response,
        Some(wire::command_lookup_topic_response::LookupType::Failed as i32)
    );
    assert_eq!(resp.error, Some(ServerError::ServiceNotReady.code()));
    assert_eq!(resp.message.as_deref(), Some("loading"));

    broker.clear_lookup_errors();
    broker.clear_lookup_redirect();
    client
        .send(lookup("persistent://public/default/t", 10))
        .await;
    let resp = client.expect(Type::LookupResponse).await;
    assert_eq!(
        resp.lookup_topic_response.unwrap().response,
        Some(wire::command_lookup_topic_response::LookupType::Connect as i32)
    );
}

#[tokio::test]
async fn partitioned_metadata_comes_from_the_table() {
    let broker = MockBroker::start().await.unwrap();
    broker.set_partitions("persistent://public/default/orders", 3);
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    for (topic, request_id, expected) in [
        ("persistent://public/default/orders", 1, 3),
        ("persistent://public/default/unknown", 2, 0),
    ] {
        client.send(partitioned_metadata(topic, request_id)).await;
        let resp = client.expect(Type::PartitionedMetadataResponse).await;
        let resp = resp.partition_metadata_response.unwrap();
        assert_eq!(resp.request_id, request_id);
        assert_eq!(resp.partitions, Some(expected));
        assert_eq!(
            resp.response,
            Some(wire::command_partitioned_topic_metadata_response::LookupType::Success as i32)
        );
    }
}

#[tokio::test]
async fn ping_pong_and_unimplemented_requests() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    client.send(ping()).await;
    client.expect(Type::Pong).await;

    client.send(consumer_stats(42)).await;
    let err = client.expect(Type::Error).await.error.unwrap();
    assert_eq!(err.request_id, 42);
    assert_eq!(err.error, ServerError::UnknownError.code());
    assert!(
        err.message.contains("CONSUMER_STATS not implemented"),
        "{}",
        err.message
    );

    // Closing an unknown producer succeeds, as on a real broker.
    let close = wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id: 1,
            request_id: 43,
            ..Default::default()
        }),
        ..Default::default()
    };
    client.send(close).await;
    let success = client.expect(Type::Success).await.success.unwrap();
    assert_eq!(success.request_id, 43);

    // Commands without a request id and unknown types are recorded and ignored.
    let flow = wire::BaseCommand {
        r#type: Type::Flow as i32,
        flow: Some(wire::CommandFlow {
            consumer_id: 1,
            message_permits: 10,
        }),
        ..Default::default()
    };
    client.send(flow).await;
    client
        .send(wire::BaseCommand {
            r#type: 999,
            ..Default::default()
        })
        .await;
    client.send(ping()).await;
    client.expect(Type::Pong).await; // still alive, nothing else was sent in between
    let types: Vec<i32> = broker.received().iter().map(|r| r.command.r#type).collect();
    assert_eq!(
        types,
        [
            Type::Connect,
            Type::Ping,
            Type::ConsumerStats,
            Type::CloseProducer,
            Type::Flow
        ]
        .map(|t| t as i32)
        .into_iter()
        .chain([999, Type::Ping as i32])
        .collect::<Vec<_>>()
    );
    assert_eq!(broker.received()[5].command_type(), None);
}

#[tokio::test]
async fn push_reaches_the_chosen_connection() {
    let broker = MockBroker::start().await.unwrap();
    let mut first = tcp_client(&broker).await;
    first.handshake().await;
    let mut second = tcp_client(&broker).await;
    second.handshake().await;
    let conns = broker.connections();
    assert_eq!(conns.len(), 2);
    assert_eq!(broker.accepted_connections(), 2);

    let close = wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id: 3,
            request_id: 0,
            allow_reconnect: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(broker.push(conns[1], close.clone()));
    assert_eq!(second.expect(Type::CloseProducer).await, close);
    first.expect_silence(Duration::from_millis(50)).await;

    assert!(broker.drop_connection(conns[1]));
    assert!(!broker.push(conns[1], close));
}

#[tokio::test]
async fn drop_connection_closes_the_socket() {
    let broker = MockBroker::start().await.unwrap();
    let mut first = tcp_client(&broker).await;
    first.handshake().await;
    let mut second = tcp_client(&broker).await;
    second.handshake().await;
    let conns = broker.connections();

    assert!(broker.drop_connection(conns[0]));
    assert!(!broker.drop_connection(conns[0]));
    assert!(first.is_closed().await);
    assert_eq!(broker.connections(), vec![conns[1]]);
    second.send(ping()).await;
    second.expect(Type::Pong).await;

    broker.drop_all_connections();
    assert!(second.is_closed().await);
    assert!(broker.connections().is_empty());

    // Still accepting.
    let mut third = tcp_client(&broker).await;
    third.handshake().await;
    assert_eq!(broker.accepted_connections(), 3);
}

#[tokio::test]
async fn client_closing_removes_the_connection() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    assert_eq!(broker.connections().len(), 1);
    drop(client);
    tokio::time::timeout(WAIT, async {
        while !broker.connections().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("session not removed");
}

#[tokio::test]
async fn unresponsive_broker_records_but_sends_nothing() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    broker.set_unresponsive(true);
    client.send(ping()).await;
    client.send(lookup("t", 1)).await;
    broker.wait_for_command(Type::Lookup, WAIT).await.unwrap();
    client.expect_silence(Duration::from_millis(100)).await;
    assert_eq!(broker.received_of(Type::Ping).len(), 1);

    // Pushed frames still go out; answers resume (the lost ones are not replayed).
    let conn = broker.connections()[0];
    assert!(broker.push(conn, ping()));
    client.expect(Type::Ping).await;
    broker.set_unresponsive(false);
    client.send(lookup("t", 2)).await;
    let resp = client.expect(Type::LookupResponse).await;
    assert_eq!(resp.lookup_topic_response.unwrap().request_id, 2);
}

#[tokio::test(start_paused = true)]
async fn responses_are_delayed_in_order_but_pong_is_not() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = RawClient::new(broker.connect_duplex()).patient();
    client.handshake().await;
    broker.set_response_delay(Duration::from_secs(10));
    let start = tokio::time::Instant::now();
    client.send(lookup("t", 1)).await;
    client.send(partitioned_metadata("t", 2)).await;
    client.send(ping()).await;
    client.expect(Type::Pong).await;
    assert!(start.elapsed() < Duration::from_secs(1));
    let first = client.expect(Type::LookupResponse).await;
    assert!(start.elapsed() >= Duration::from_secs(10));
    assert_eq!(first.lookup_topic_response.unwrap().request_id, 1);
    client.expect(Type::PartitionedMetadataResponse).await;

    broker.set_response_delay(Duration::ZERO);
    let start = tokio::time::Instant::now();
    client.send(lookup("t", 3)).await;
    client.expect(Type::LookupResponse).await;
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn duplex_transport_with_paused_time() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = RawClient::new(broker.connect_duplex());
    let connected = client.handshake().await;
    assert_eq!(connected.server_version, "pulsar-sdk-mock");
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(broker.connections().len(), 1);
    // Waiting with a timeout under paused time auto-advances instead of hanging.
    assert!(broker
        .wait_for_command(Type::Lookup, Duration::from_secs(30))
        .await
        .is_none());
    client.send(lookup("t", 5)).await;
    let got = broker.wait_for_command(Type::Lookup, WAIT).await.unwrap();
    assert_eq!(got.command.lookup_topic.unwrap().request_id, 5);
}

#[tokio::test(start_paused = true)]
async fn keepalive_pings_idle_connections_and_closes_silent_ones() {
    let broker = MockBroker::start_with(MockBrokerConfig {
        keepalive_interval: Some(Duration::from_secs(30)),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = RawClient::new(broker.connect_duplex()).patient();
    client.handshake().await;
    let start = tokio::time::Instant::now();
    client.expect(Type::Ping).await;
    assert!(start.elapsed() >= Duration::from_secs(30));
    client.send(reply::ping_or_pong(Type::Pong)).await;
    client.expect(Type::Ping).await; // the next idle interval
    assert!(start.elapsed() >= Duration::from_secs(60));
    // No PONG this time: closed one interval later.
    assert!(client.is_closed().await);
    assert!(start.elapsed() >= Duration::from_secs(90));
    assert_eq!(broker.received_of(Type::Pong).len(), 1);

    // A connection that never sends CONNECT is closed after one interval.
    let mut silent = RawClient::new(broker.connect_duplex()).patient();
    assert!(silent.is_closed().await);
}

#[tokio::test]
async fn wait_for_commands_counts() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = RawClient::new(broker.connect_duplex());
    client.handshake().await;
    let waiter = {
        let broker = broker.clone();
        tokio::spawn(async move {
            broker
                .wait_for_commands(Type::Ping, 2, WAIT)
                .await
                .map(|v| v.len())
        })
    };
    client.send(ping()).await;
    client.send(ping()).await;
    assert_eq!(waiter.await.unwrap(), Some(2));
    assert!(broker
        .wait_for_commands(Type::Ping, 3, Duration::from_millis(20))
        .await
        .is_none());
}

#[tokio::test]
async fn malformed_frames_close_the_connection() {
    use tokio::io::AsyncWriteExt;
    let broker = MockBroker::start().await.unwrap();
    let mut stream = TcpStream::connect(broker.addr()).await.unwrap();
    // A frame whose command bytes are not a BaseCommand.
    stream
        .write_all(&[0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let mut client = RawClient::new(stream);
    assert!(client.is_closed().await);
    assert!(broker.received().is_empty());
}

#[tokio::test]
async fn shutdown_closes_connections_and_the_port() {
    let broker = MockBroker::start().await.unwrap();
    let addr = broker.addr();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    let handle = broker.clone();
    broker.shutdown().await;
    assert!(client.is_closed().await);
    assert!(TcpStream::connect(addr).await.is_err());
    let mut late = RawClient::new(handle.connect_duplex());
    assert!(late.is_closed().await);
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_broker() {
    let broker = MockBroker::start().await.unwrap();
    let mut client = tcp_client(&broker).await;
    client.handshake().await;
    drop(broker);
    assert!(client.is_closed().await);
}
