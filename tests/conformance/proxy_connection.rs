//! Upstream `ProxyConnection`: the behaviours the ledger (`docs/conformance.md`) records for it.

use crate::common::{test_client, within};
use prost::Message as _;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{wire, MockBroker};
use pulsar_sdk::ServerError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one CONNECT naming `target`; returns the proxy's answer (`None` if it closed the
/// connection without one) and the socket.
async fn raw_connect(proxy: &MockBroker, target: &str) -> (Option<wire::BaseCommand>, TcpStream) {
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    let connect = wire::BaseCommand {
        r#type: Type::Connect as i32,
        connect: Some(wire::CommandConnect {
            client_version: "raw".into(),
            protocol_version: Some(21),
            proxy_to_broker_url: Some(target.to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let body = connect.encode_to_vec();
    let mut frame = Vec::new();
    frame.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    socket.write_all(&frame).await.unwrap();
    let answer = within("the proxy's answer", read_command(&mut socket)).await;
    (answer, socket)
}

async fn read_command(socket: &mut TcpStream) -> Option<wire::BaseCommand> {
    let mut size = [0u8; 4];
    socket.read_exact(&mut size).await.ok()?;
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize];
    socket.read_exact(&mut rest).await.ok()?;
    let cmd_size = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
    Some(wire::BaseCommand::decode(&rest[4..4 + cmd_size]).unwrap())
}

/// `ProxyConnection.handleConnect` → `BrokerProxyValidator.resolveAndCheckTargetAddress`: the
/// target is split at the last `:`; what is not `host:port` is refused with an ERROR (request
/// id -1) and the connection closed. A URL (`pulsar://host:port`, what this client sent
/// before) leaves an unresolvable host `pulsar://host`; no port or a bad port throws inside
/// `handleConnect` and is answered as a failed authentication.
#[tokio::test]
async fn the_proxy_refuses_a_target_that_is_not_host_colon_port() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let url = owner.service_url();
    let host = owner.addr().ip().to_string();
    let cases = [
        (url.as_str(), ServerError::ServiceNotReady),
        (host.as_str(), ServerError::AuthenticationError),
        ("broker:not-a-port", ServerError::AuthenticationError),
    ];
    for (target, code) in cases {
        let (answer, mut socket) = raw_connect(&proxy, target).await;
        let answer = answer.unwrap_or_else(|| panic!("{target}: no answer"));
        assert_eq!(answer.r#type, Type::Error as i32, "{target}: {answer:?}");
        let error = answer.error.unwrap();
        assert_eq!(error.error, code.code(), "{target}: {error:?}");
        assert_eq!(error.request_id, u64::MAX, "request id -1");
        let after = within("the proxy closing", read_command(&mut socket)).await;
        assert!(after.is_none(), "{target}: the proxy closes the connection");
    }
    assert_eq!(owner.accepted_connections(), 0, "nothing was relayed");
}

/// `ProxyConnection.handleConnect` with a valid target: the proxy connects to the broker
/// (`DirectProxyHandler`), and the client gets CONNECTED once the broker answered; from then
/// on frames pass through. (The IPv6 forms, `[::1]:6650` and `::1:6650`, are accepted by the
/// same check: `mock::proxy`'s unit test.)
#[tokio::test]
async fn the_proxy_relays_a_host_colon_port_target() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let (answer, _) = raw_connect(&proxy, &owner.addr().to_string()).await;
    let answer = answer.expect("CONNECTED");
    assert_eq!(answer.r#type, Type::Connected as i32, "{answer:?}");
    assert_eq!(owner.accepted_connections(), 1, "relayed to the owner");
    let to_owner = owner.received_of(Type::Connect);
    assert_eq!(
        to_owner[0]
            .command
            .connect
            .as_ref()
            .unwrap()
            .proxy_to_broker_url,
        None,
        "the proxy's own CONNECT names no further broker"
    );
}

/// `ClientCnx.setTargetBroker`: a client reaching a broker through the proxy names it as
/// `host:port`, which the proxy accepts and relays; the producer lives on the broker.
#[tokio::test]
async fn a_client_produces_through_the_proxy_to_the_owner() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let client = test_client(&proxy.service_url()).build().unwrap();
    let producer = within("create via proxy", client.producer("via-proxy").create())
        .await
        .unwrap();
    within("send via proxy", producer.send_and_wait("hello"))
        .await
        .unwrap();
    let named: Vec<_> = proxy
        .received_of(Type::Connect)
        .iter()
        .filter_map(|c| c.command.connect.as_ref()?.proxy_to_broker_url.clone())
        .collect();
    assert_eq!(named, vec![owner.addr().to_string()]);
    assert_eq!(owner.received_of(Type::Producer).len(), 1);
    assert_eq!(owner.received_of(Type::Send).len(), 1);
    client.close().await.unwrap();
}

/// r-h1: a lookup naming the broker by host name (`localhost`), as brokers advertise
/// themselves: the client names it `localhost:port` and the proxy resolves and relays it.
#[tokio::test]
async fn a_client_reaches_a_broker_named_by_host_name_through_the_proxy() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    let port = owner.addr().port();
    proxy.proxy_lookups_to(&format!("pulsar://localhost:{port}"));
    let client = test_client(&proxy.service_url()).build().unwrap();
    let producer = within("create via proxy", client.producer("by-name").create())
        .await
        .unwrap();
    within("send via proxy", producer.send_and_wait("hello"))
        .await
        .unwrap();
    let named: Vec<_> = proxy
        .received_of(Type::Connect)
        .iter()
        .filter_map(|c| c.command.connect.as_ref()?.proxy_to_broker_url.clone())
        .collect();
    assert_eq!(named, vec![format!("localhost:{port}")]);
    client.close().await.unwrap();
}

/// r-h1: the connection to the broker behind the proxy dropping (the broker restarts) is a
/// lost connection: the producer reconnects through the proxy, naming the broker again, and
/// sends go on.
#[tokio::test]
async fn a_producer_reconnects_through_the_proxy_when_the_broker_drops_it() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let client = test_client(&proxy.service_url()).build().unwrap();
    let producer = within(
        "create via proxy",
        client.producer("reconnect-proxy").create(),
    )
    .await
    .unwrap();
    producer.send_and_wait("one").await.unwrap();
    owner.drop_all_connections();
    within("send after the drop", producer.send_and_wait("two"))
        .await
        .unwrap();
    assert!(
        owner.received_of(Type::Producer).len() >= 2,
        "re-created on the owner"
    );
    client.close().await.unwrap();
}

/// r-h1: a broker advertised at an IPv6 address: the client names it `[::1]:port` (Java
/// `ClientCnx.setTargetBroker`, `getHostString()` of a host from `URI.getHost()`), which the
/// proxy's last-`:` split accepts, and the connection is relayed to it.
#[tokio::test]
async fn a_client_reaches_an_ipv6_broker_through_the_proxy() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    // The owner reached at [::1] (the mock binds 127.0.0.1): a plain TCP relay.
    let Ok(v6) = tokio::net::TcpListener::bind("[::1]:0").await else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let port = v6.local_addr().unwrap().port();
    let target = owner.addr();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = v6.accept().await {
            let mut upstream = TcpStream::connect(target).await.unwrap();
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    proxy.proxy_lookups_to(&format!("pulsar://[::1]:{port}"));
    let client = test_client(&proxy.service_url()).build().unwrap();
    let producer = within("create via proxy", client.producer("ipv6").create())
        .await
        .unwrap();
    within("send via proxy", producer.send_and_wait("hello"))
        .await
        .unwrap();
    let named: Vec<_> = proxy
        .received_of(Type::Connect)
        .iter()
        .filter_map(|c| c.command.connect.as_ref()?.proxy_to_broker_url.clone())
        .collect();
    assert_eq!(named, vec![format!("[::1]:{port}")]);
    assert_eq!(owner.received_of(Type::Send).len(), 1);
    client.close().await.unwrap();
}

/// Encodes a simple frame.
fn frame(cmd: &wire::BaseCommand) -> Vec<u8> {
    let body = cmd.encode_to_vec();
    let mut frame = Vec::new();
    frame.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// r-h1: a connection to the proxy that names no target broker is a lookup connection
/// (`ProxyConnection` state `ProxyLookupRequests`): it serves lookups, partition metadata,
/// schemas and namespace topic lists only. Anything else, such as CommandProducer, is not
/// handled (`PulsarDecoder.handleProducer` throws `UnsupportedOperationException`, and
/// `ProxyConnection.exceptionCaught` closes the connection): no producer is created on the
/// proxy.
#[tokio::test]
async fn the_proxy_serves_no_producer_on_a_lookup_connection() {
    let proxy = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    proxy.proxy_lookups_to(&owner.service_url());
    let mut socket = TcpStream::connect(proxy.addr()).await.unwrap();
    let connect = wire::BaseCommand {
        r#type: Type::Connect as i32,
        connect: Some(wire::CommandConnect {
            client_version: "raw".into(),
            protocol_version: Some(21),
            ..Default::default()
        }),
        ..Default::default()
    };
    socket.write_all(&frame(&connect)).await.unwrap();
    let connected = within("CONNECTED", read_command(&mut socket))
        .await
        .unwrap();
    assert_eq!(connected.r#type, Type::Connected as i32);
    let producer = wire::BaseCommand {
        r#type: Type::Producer as i32,
        producer: Some(wire::CommandProducer {
            topic: "persistent://public/default/on-the-proxy".into(),
            producer_id: 1,
            request_id: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    socket.write_all(&frame(&producer)).await.unwrap();
    let answer = within("the proxy's answer", read_command(&mut socket)).await;
    assert!(
        answer
            .as_ref()
            .is_none_or(|a| a.r#type != Type::ProducerSuccess as i32),
        "a producer created on the proxy itself: {answer:?}"
    );
}
