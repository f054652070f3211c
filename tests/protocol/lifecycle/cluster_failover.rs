//! Cluster-level failover (PIP-121) against two (or three) mock brokers that share nothing:
//! each is a cluster of its own. `Client::update_service_info` moves everything; the
//! `AutoClusterFailover` provider decides by itself.

use support as common;

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{
    MockAuth, MockBroker, MockBrokerConfig, MockCluster, MockError, MockRequest, TopicMove,
};
use pulsar_sdk::{
    AutoClusterFailover, BackoffPolicy, Client, InitialPosition, ServerError, ServiceInfo, State,
    SubscriptionType,
};

/// A generous bound on anything that should happen within a few reconnect rounds.
pub(super) const WITHIN: Duration = Duration::from_secs(30);

fn backoff() -> BackoffPolicy {
    BackoffPolicy {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(500),
        ..Default::default()
    }
}

/// The first `n` payloads of `topic`, read from the start by a subscription of their own
/// (acked as they come).
pub(super) async fn read_all(client: &Client, topic: &str, n: usize) -> Vec<String> {
    let mut c = client
        .consumer(topic)
        .subscription("check")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..n {
        let m = tokio::time::timeout(WITHIN, c.recv())
            .await
            .unwrap()
            .unwrap();
        got.push(String::from_utf8(m.payload.to_vec()).unwrap());
        c.ack(&m).unwrap();
    }
    got
}

#[tokio::test]
async fn update_service_info_moves_a_producer_and_its_pending_sends_in_order() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/moving-producer";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    for i in 0..3 {
        producer.send(format!("m{i}")).await.unwrap().await.unwrap();
    }
    // Five more the old cluster takes but never acknowledges.
    a.set_unresponsive(true);
    let mut pending = Vec::new();
    for i in 3..8 {
        pending.push(producer.send(format!("m{i}")).await.unwrap());
    }
    a.wait_for_commands(Type::Send, 8, WITHIN).await.unwrap();
    let mut updates = client.service_info_updates();
    assert_eq!(updates.current().service_url().to_string(), a.service_url());

    client
        .update_service_info(ServiceInfo::new(&b.service_url()).unwrap())
        .unwrap();

    assert_eq!(client.service_url().to_string(), b.service_url());
    let now = updates.changed().await.unwrap();
    assert_eq!(now.service_url().to_string(), b.service_url());
    for p in pending {
        let id = tokio::time::timeout(WITHIN, p).await.unwrap().unwrap();
        assert!(id.entry_id <= 4, "a receipt of the new cluster: {id:?}");
    }
    // The new cluster has exactly the five, in order; nothing went to the old one after.
    assert_eq!(
        read_all(&client, topic, 5).await,
        ["m3", "m4", "m5", "m6", "m7"]
    );
    producer.send("m8").await.unwrap().await.unwrap();
    assert_eq!(b.topic_messages(topic), 6);
    // Every connection to the old cluster closed.
    common::wait_until("the old cluster has no connection", || {
        a.stats().connections == 0
    })
    .await;
}

#[tokio::test]
async fn update_service_info_resubscribes_consumers_and_readers_on_the_new_cluster() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/moving-consumer";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let mut reader = client
        .reader(topic)
        .start_message_id(pulsar_sdk::MessageId::EARLIEST)
        .create()
        .await
        .unwrap();

    client
        .update_service_info(ServiceInfo::new(&b.service_url()).unwrap())
        .unwrap();
    b.wait_for_commands(Type::Subscribe, 2, WITHIN)
        .await
        .unwrap();

    let producer = client.producer(topic).create().await.unwrap();
    producer.send("after").await.unwrap().await.unwrap();
    let m = tokio::time::timeout(WITHIN, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"after");
    consumer.ack(&m).unwrap();
    let r = tokio::time::timeout(WITHIN, reader.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&r.payload[..], b"after");
    assert_eq!(a.topic_messages(topic), 0);
}

#[tokio::test]
async fn each_cluster_gets_its_own_credentials() {
    let secured = |token: &'static str| MockBrokerConfig {
        auth: Some(MockAuth::token(move |t| t == token)),
        ..Default::default()
    };
    let a = MockBroker::start_with(secured("a-token")).await.unwrap();
    let b = MockBroker::start_with(secured("b-token")).await.unwrap();
    let client = common::test_client(&a.service_url())
        .auth_token("a-token")
        .build()
        .unwrap();
    let topic = "persistent://public/default/credentials";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send("on a").await.unwrap().await.unwrap();

    let info = ServiceInfo::builder(b.service_url())
        .auth_token("b-token")
        .build()
        .unwrap();
    client.update_service_info(info).unwrap();
    // b refuses a-token: only b-token gets the producer back.
    tokio::time::timeout(WITHIN, producer.send("on b").await.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.topic_messages(topic), 1);
    assert_eq!(client.service_info().auth_method(), Some("token"));
}

#[tokio::test]
async fn a_closed_client_does_not_switch() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    client.close().await.unwrap();
    let r = client.update_service_info(ServiceInfo::new(&b.service_url()).unwrap());
    assert!(matches!(r, Err(pulsar_sdk::Error::Closed)), "{r:?}");
    assert_eq!(client.service_url().to_string(), a.service_url());
}

#[tokio::test]
async fn a_provider_and_a_service_url_together_are_refused() {
    let failover = AutoClusterFailover::builder()
        .primary(ServiceInfo::new("pulsar://127.0.0.1:1").unwrap())
        .secondary(ServiceInfo::new("pulsar://127.0.0.1:2").unwrap())
        .build()
        .unwrap();
    let r = Client::builder()
        .service_url("pulsar://127.0.0.1:3")
        .service_info_provider(failover)
        .build();
    assert!(
        matches!(r, Err(pulsar_sdk::Error::InvalidConfig(_))),
        "{r:?}"
    );
}

/// The whole loop with real probes (TCP connects to the mock brokers' listeners): the primary
/// goes down, the first secondary is down too, the client moves to the second; the primary
/// comes back, the client goes home. Waits on the client's own update stream, never on time.
#[tokio::test]
async fn auto_failover_skips_a_dead_secondary_and_switches_back_when_the_primary_returns() {
    let primary = MockBroker::start().await.unwrap();
    let dead = MockBroker::start().await.unwrap();
    let standby = MockBroker::start().await.unwrap();
    dead.take_down().await.unwrap();
    let failover = AutoClusterFailover::builder()
        .primary(ServiceInfo::new(&primary.service_url()).unwrap())
        .secondary(ServiceInfo::new(&dead.service_url()).unwrap())
        .secondary(ServiceInfo::new(&standby.service_url()).unwrap())
        .check_interval(Duration::from_millis(50))
        .failover_threshold(2)
        .switch_back_threshold(2)
        .probe_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = Client::builder()
        .service_info_provider(failover)
        .backoff(backoff())
        .build()
        .unwrap();
    assert_eq!(client.service_url().to_string(), primary.service_url());
    let topic = "persistent://public/default/auto";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send("p0").await.unwrap().await.unwrap();
    let mut updates = client.service_info_updates();

    primary.take_down().await.unwrap();
    let on = |url: String| move |i: &ServiceInfo| i.service_url().to_string() == url;
    tokio::time::timeout(WITHIN, updates.wait_for(on(standby.service_url())))
        .await
        .expect("failed over")
        .unwrap();
    tokio::time::timeout(WITHIN, producer.send("s0").await.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(standby.topic_messages(topic), 1);

    primary.bring_up().await.unwrap();
    tokio::time::timeout(WITHIN, updates.wait_for(on(primary.service_url())))
        .await
        .expect("switched back")
        .unwrap();
    tokio::time::timeout(WITHIN, producer.send("p1").await.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(primary.topic_messages(topic), 2);
    assert_eq!(standby.topic_messages(topic), 1);
    client.close().await.unwrap();
}

/// What the test's failover service answers next: a status and body, or nothing at all.
#[derive(Clone)]
enum Reply {
    Answer(u16, Vec<u8>),
    Silent,
}

/// A tiny HTTP service on loopback: each request takes the next scripted reply (the last one
/// repeats); the request heads are kept.
struct Service {
    replies: std::sync::Mutex<std::collections::VecDeque<Reply>>,
    heads: std::sync::Mutex<Vec<String>>,
}

impl Service {
    fn served(&self) -> usize {
        self.heads.lock().unwrap().len()
    }
}

async fn failover_service(replies: Vec<Reply>) -> (String, std::sync::Arc<Service>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/cluster", listener.local_addr().unwrap());
    let service = std::sync::Arc::new(Service {
        replies: std::sync::Mutex::new(replies.into()),
        heads: Default::default(),
    });
    let s = service.clone();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let reply = {
                    let mut replies = s.replies.lock().unwrap();
                    if replies.len() > 1 {
                        replies.pop_front().unwrap()
                    } else {
                        replies.front().unwrap().clone()
                    }
                };
                s.heads
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).into_owned());
                match reply {
                    Reply::Answer(status, body) => {
                        let head = format!(
                            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        let _ = sock.write_all(head.as_bytes()).await;
                        let _ = sock.write_all(&body).await;
                    }
                    // Holds the connection open without a byte until the client gives up.
                    Reply::Silent => {
                        let _ = sock.read(&mut chunk).await;
                    }
                }
            });
        }
    });
    (url, service)
}

/// A controlled provider whose service answers garbage (not JSON, the wrong shape, an unusable
/// URL, an unknown auth plugin, an error status, too many bytes) and then not at all (slow):
/// the client never moves. Then a good answer, with the cluster's token: it moves, once, and
/// the request carried the configured header.
#[tokio::test]
async fn a_controlled_provider_never_switches_on_garbage_or_silence_and_switches_on_a_good_answer()
{
    use pulsar_sdk::failover::ControlledClusterFailover;
    let a = MockBroker::start().await.unwrap();
    let b = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|t| t == "b-token")),
        ..Default::default()
    })
    .await
    .unwrap();
    let good = format!(
        r#"{{"serviceUrl":"{}","authPluginClassName":"org.apache.pulsar.client.impl.auth.AuthenticationToken","authParamsString":"token:b-token"}}"#,
        b.service_url()
    );
    let garbage: Vec<Reply> = [
        &b"<html>not json</html>"[..],
        b"[\"pulsar://x:6650\"]",
        b"{\"serviceUrl\": 42}",
        b"{\"serviceUrl\": \"http://not-pulsar:8080\"}",
        b"{\"serviceUrl\": \"pulsar://x:6650\", \"authPluginClassName\": \"com.acme.Magic\", \"authParamsString\": \"x\"}",
    ]
    .iter()
    .map(|body| Reply::Answer(200, body.to_vec()))
    .chain([
        Reply::Answer(500, good.clone().into_bytes()),
        // Well-formed and naming a cluster, but over `max_answer_bytes`: only the byte
        // bound refuses it.
        Reply::Answer(
            200,
            format!(
                "{{\"serviceUrl\": \"pulsar://x:6650\", \"pad\": \"{}\"}}",
                "p".repeat(2048)
            )
            .into_bytes(),
        ),
        Reply::Silent,
    ])
    .collect();
    let n_garbage = garbage.len();
    let (url, service) = failover_service(garbage).await;
    let provider =
        ControlledClusterFailover::builder(ServiceInfo::new(&a.service_url()).unwrap(), url)
            .header("X-Failover-Key", "k1")
            .check_interval(Duration::from_millis(20))
            .read_timeout(Duration::from_millis(200))
            .max_answer_bytes(1024)
            .build()
            .unwrap();
    let client = Client::builder()
        .service_info_provider(provider)
        .backoff(backoff())
        .build()
        .unwrap();
    let topic = "persistent://public/default/controlled";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();

    // Every garbage answer, and two silent requests that timed out, served: still on a.
    common::wait_until("the garbage was served", || {
        service.served() >= n_garbage + 2
    })
    .await;
    assert_eq!(client.service_url().to_string(), a.service_url());
    assert!(service.heads.lock().unwrap()[0].contains("X-Failover-Key: k1"));

    *service.replies.lock().unwrap() = [Reply::Answer(200, good.into_bytes())].into();
    let mut updates = client.service_info_updates();
    let moved = tokio::time::timeout(
        WITHIN,
        updates.wait_for(|i| i.service_url().to_string() == b.service_url()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(moved.auth_method(), Some("token"));
    tokio::time::timeout(WITHIN, producer.send("on b").await.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.topic_messages(topic), 1);
    // The same answer again is no new switch.
    let served = service.served();
    common::wait_until("more answers", || service.served() >= served + 3).await;
    assert!(updates.current().service_url().to_string() == b.service_url());
    assert_eq!(
        b.stats().accepted_connections,
        1,
        "not switched again: {:?}",
        b.stats()
    );
    client.close().await.unwrap();
}

fn to(broker: &MockBroker) -> ServiceInfo {
    ServiceInfo::new(&broker.service_url()).unwrap()
}

/// PIP-307 on the cluster left: the old cluster moves the topic to another of its brokers
/// (the close names it), and the client switches clusters while the producer waits out its
/// backoff before going there. The named broker is one of the cluster left: never connected
/// to; the producer ends on the new cluster.
#[tokio::test]
async fn a_broker_named_by_the_cluster_left_is_never_connected_to() {
    let old = MockCluster::start(2).await.unwrap();
    let (a0, a1) = (&old.brokers()[0], &old.brokers()[1]);
    let new = MockBroker::start().await.unwrap();
    let client = common::test_client(&a0.service_url())
        .backoff(BackoffPolicy {
            // The first reconnect of an entity attached moments ago waits this long even
            // for an assigned broker: the switch lands well within it.
            initial: Duration::from_secs(2),
            max: Duration::from_secs(2),
            jitter: 0.0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let topic = "persistent://public/default/named-by-the-old-cluster";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("on a0").await.unwrap();

    old.move_topic(topic, 1, TopicMove::AssignedUrl).unwrap();
    common::wait_until("the producer lost a0", || {
        producer.state() == State::Reconnecting
    })
    .await;
    client.update_service_info(to(&new)).unwrap();

    tokio::time::timeout(WITHIN, producer.send_and_wait("on new"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(new.topic_messages(topic), 1);
    assert!(
        a1.received_of(Type::Producer).is_empty(),
        "never attached on a1"
    );
    assert_eq!(a1.stats().accepted_connections, 0, "never connected to a1");
}

/// A switch while a lookup is in flight (the old cluster holds its answer for a minute): the
/// lookup ends on the new cluster, and nothing is left on the old one.
#[tokio::test]
async fn a_switch_during_a_lookup_ends_on_the_new_cluster() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    a.push_error(
        MockError::new(MockRequest::Lookup, ServerError::ServiceNotReady, "held")
            .after(Duration::from_secs(60)),
    );
    let topic = "persistent://public/default/looked-up-during-a-switch";
    let create = tokio::spawn({
        let client = client.clone();
        async move { client.producer(topic).batching(false).create().await }
    });
    a.wait_for_commands(Type::Lookup, 1, WITHIN).await.unwrap();

    client.update_service_info(to(&b)).unwrap();

    let producer = tokio::time::timeout(WITHIN, create)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    producer.send_and_wait("on b").await.unwrap();
    assert_eq!(b.topic_messages(topic), 1);
    assert!(a.received_of(Type::Producer).is_empty());
    common::wait_until("the old cluster has no connection", || {
        a.stats().connections == 0
    })
    .await;
}

/// Two switches back to back (a to b to c) while the producer reconnects, b slow to answer:
/// everything ends on c, no connection is left open to b, and the stats say where the client
/// is and how often it moved.
#[tokio::test]
async fn two_switches_back_to_back_end_on_the_last_with_nothing_left_on_the_middle_one() {
    let (a, b, c) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    b.set_response_delay(Duration::from_millis(300));
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/switched-twice";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    producer.send_and_wait("on a").await.unwrap();
    assert_eq!(client.stats().cluster_switches, 0);

    client.update_service_info(to(&b)).unwrap();
    // The producer is on its way to b (b holds its answers) when the client moves on.
    b.wait_for_commands(Type::Connect, 1, WITHIN).await.unwrap();
    client.update_service_info(to(&c)).unwrap();

    tokio::time::timeout(WITHIN, producer.send_and_wait("on c"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.topic_messages(topic), 1);
    assert_eq!(b.topic_messages(topic), 0);
    let stats = client.stats();
    assert_eq!(stats.service_url.to_string(), c.service_url());
    assert_eq!(stats.cluster_switches, 2);
    common::wait_until("no connection left to b", || b.stats().connections == 0).await;
    common::wait_until("no connection left to a", || a.stats().connections == 0).await;
    assert!(
        b.received_of(Type::Producer).is_empty(),
        "never attached on b"
    );
}

/// The application moves the client to the secondary itself while an `AutoClusterFailover`
/// runs: the provider follows, so when the secondary goes down it is the one found down and
/// the client goes back to the primary (a provider that still thought it was on the primary,
/// which answers, would leave the client on the dead secondary).
#[tokio::test]
async fn auto_failover_follows_a_manual_switch() {
    let (primary, secondary) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let failover = AutoClusterFailover::builder()
        .primary(to(&primary))
        .secondary(to(&secondary))
        .check_interval(Duration::from_millis(50))
        // Back to the primary only after many good probes: the manual switch holds for a
        // while, so the test sees the provider react to the secondary going down.
        .switch_back_threshold(1_000)
        .probe_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = Client::builder()
        .service_info_provider(failover)
        .backoff(backoff())
        .build()
        .unwrap();
    client.update_service_info(to(&secondary)).unwrap();
    let mut updates = client.service_info_updates();
    secondary.take_down().await.unwrap();
    let back = tokio::time::timeout(
        WITHIN,
        updates.wait_for(|i| i.service_url().to_string() == primary.service_url()),
    )
    .await;
    assert!(back.is_ok(), "the client stayed on the dead secondary");
    assert_eq!(client.stats().cluster_switches, 2);
    client.close().await.unwrap();
}

/// The ids of the messages `broker` was asked to acknowledge.
fn acked_ids(broker: &MockBroker) -> Vec<(u64, u64)> {
    broker
        .received_of(Type::Ack)
        .into_iter()
        .flat_map(|r| r.command.ack.unwrap().message_id)
        .map(|id| (id.ledger_id, id.entry_id))
        .collect()
}

/// Acks of messages received on the cluster left (kept in the ack group at the switch, or
/// made after it) never reach the new cluster, where the same ids name other messages: acking
/// them there would swallow those before they are delivered (what the real-broker kill test
/// caught: pulsar-lite's ids start at (0, 0) on both clusters).
#[tokio::test]
async fn acks_of_messages_from_the_cluster_left_never_reach_the_new_one() {
    let (a, b) = (
        MockBroker::start().await.unwrap(),
        MockBroker::start().await.unwrap(),
    );
    let client = common::test_client(&a.service_url()).build().unwrap();
    let topic = "persistent://public/default/acks-across-clusters";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        // Acks wait in the group until the consumer closes.
        .ack_group_time(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut from_a = Vec::new();
    for i in 0..4 {
        producer.send_and_wait(format!("a{i}")).await.unwrap();
        from_a.push(
            tokio::time::timeout(WITHIN, consumer.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    consumer.ack(&from_a[0]).unwrap();
    consumer.ack(&from_a[1]).unwrap();

    client.update_service_info(to(&b)).unwrap();
    consumer.ack(&from_a[2]).unwrap();
    b.wait_for_commands(Type::Subscribe, 1, WITHIN)
        .await
        .unwrap();
    consumer.ack(&from_a[3]).unwrap();
    producer.send_and_wait("b0").await.unwrap();
    let m = tokio::time::timeout(WITHIN, consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"b0");
    consumer.ack(&m).unwrap();
    consumer.close().await.unwrap();

    assert_eq!(
        acked_ids(&b),
        [(m.id.ledger_id, m.id.entry_id)],
        "only b's own message is acked on b"
    );
}
