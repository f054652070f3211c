//! Review probes of the multi-topic and pattern consumers (issue 14) against the mock broker:
//! each test is a way a user could see them go wrong.

use crate::hostile;
use common::client;
use support as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{
    Client, Consumer, InitialPosition, Message, ServerError, State, SubscriptionType, TopicsChanged,
};

async fn recv(consumer: &mut Consumer) -> Message {
    within("recv", consumer.recv()).await.expect("a message")
}

async fn pattern_consumer(client: &Client, pattern: &str, period: Duration) -> Consumer {
    client
        .pattern_consumer(pattern)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .pattern_auto_discovery_period(period)
        .subscribe()
        .await
        .expect("pattern consumer")
}

async fn next_change(changes: &mut pulsar_sdk::TopicUpdates) -> TopicsChanged {
    within("a topics change", changes.next_change())
        .await
        .expect("a change")
}

fn added(c: &TopicsChanged) -> BTreeSet<String> {
    c.added.iter().map(|t| t.to_string()).collect()
}

fn topics_of(consumer: &Consumer) -> BTreeSet<String> {
    consumer.topics().iter().map(|t| t.to_string()).collect()
}

/// Upstream's topic-list hash, computed here independently of the crate (CRC32C of the sorted
/// names joined with ",", Guava's little-endian hex).
fn upstream_hash(topics: &[&str]) -> String {
    let mut sorted = topics.to_vec();
    sorted.sort();
    let crc = crc32c::crc32c(sorted.join(",").as_bytes());
    crc.to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Java's `MultiTopicsConsumerImpl` keeps its own state: one topic's consumer ending for good
/// (here: the topic was terminated and its end reached) leaves the multi-topic consumer
/// `Ready` and receiving from the other topics.
#[tokio::test]
async fn one_topic_ending_for_good_does_not_end_a_multi_topic_consumer() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-end-a"), full("rv-end-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    assert_eq!(consumer.state(), State::Ready);
    // A plain consumer of a, on the same connection, to see the end arrive.
    let witness = client
        .consumer(&a)
        .subscription("witness")
        .subscribe()
        .await
        .unwrap();
    // Topic a ends: both consumers have read everything, so both are told
    // REACHED_END_OF_TOPIC (in one go, on the one connection).
    broker.terminate_topic(&a).unwrap();
    // (A consumer at the end stays attached, as in Java: its flag says it.)
    wait_until("a's end", || witness.has_reached_end_of_topic()).await;
    assert_eq!(witness.state(), State::Ready);
    // Whatever the a-task reports, the consumer still serves b.
    let pb = unbatched_producer(&client, &b).await;
    publish(&pb, "b", 1).await;
    let m = loop {
        match within("recv", consumer.recv()).await {
            Ok(m) => break m,
            // An end-of-topic notice for a is acceptable as an item; keep reading.
            Err(pulsar_sdk::Error::TopicTerminated { .. }) => continue,
            Err(e) => panic!("the consumer failed: {e:?}"),
        }
    };
    assert_eq!(m.topic.to_string(), b);
    consumer.ack(&m).unwrap();
    assert!(
        !consumer.state().is_terminal(),
        "one topic's end ended the whole consumer: {:?}",
        consumer.state()
    );
}

/// A broker pushing (into a persistent-only pattern consumer's watcher) a non-persistent topic
/// that matches the regex, a topic of another namespace and a malformed name: none of them is
/// subscribed.
#[tokio::test]
async fn a_watcher_update_with_topics_outside_the_mode_or_namespace_is_ignored() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let one = full("rv-w-orders-1");
    broker.create_topic(&one);
    let np = "non-persistent://public/default/rv-w-orders-np".to_string();
    broker.create_topic(&np);
    let other_ns = "persistent://public/other/rv-w-orders-x".to_string();
    let _ = broker.create_namespace("public/other");
    broker.create_topic(&other_ns);
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-w-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    let mut changes = consumer.topic_updates();
    assert_eq!(topics_of(&consumer), BTreeSet::from([one.clone()]));
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    let (conn, watcher_id, ..) = broker.topic_list_watchers()[0].clone();
    assert!(broker.push(
        conn,
        wire::BaseCommand {
            r#type: Type::WatchTopicUpdate as i32,
            watch_topic_update: Some(wire::CommandWatchTopicUpdate {
                watcher_id,
                new_topics: vec![np.clone(), other_ns.clone(), "persistent://x".into()],
                deleted_topics: vec![],
                // The set did not change (what an honest broker would say).
                topics_hash: upstream_hash(&[&one]),
            }),
            ..Default::default()
        },
    ));
    // A real new topic: its change must be the first one seen.
    let two = full("rv-w-orders-2");
    broker.create_topic(&two);
    let c = next_change(&mut changes).await;
    assert_eq!(added(&c), BTreeSet::from([two.clone()]), "{c:?}");
    assert!(c.removed.is_empty(), "{c:?}");
    assert_eq!(topics_of(&consumer), BTreeSet::from([one, two]));
    assert_eq!(broker.consumers(&np, "s"), 0);
    assert_eq!(broker.consumers(&other_ns, "s"), 0);
}

/// A WatchTopicUpdate for a watcher id nobody registered is dropped: the connection and the
/// real watcher keep working.
#[tokio::test]
async fn a_watcher_update_for_an_unknown_watcher_is_harmless() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("rv-u-orders-1"));
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-u-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    let mut changes = consumer.topic_updates();
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    let (conn, watcher_id, ..) = broker.topic_list_watchers()[0].clone();
    let stranger = full("rv-u-orders-stranger");
    broker.create_topic(&stranger);
    // The real watcher hears of `stranger` too; drain that change first.
    let c = next_change(&mut changes).await;
    assert_eq!(added(&c), BTreeSet::from([stranger.clone()]));
    assert!(broker.push(
        conn,
        wire::BaseCommand {
            r#type: Type::WatchTopicUpdate as i32,
            watch_topic_update: Some(wire::CommandWatchTopicUpdate {
                watcher_id: watcher_id.wrapping_add(1000),
                new_topics: vec![],
                deleted_topics: vec![stranger.clone()],
                topics_hash: "deadbeef".into(),
            }),
            ..Default::default()
        },
    ));
    let three = full("rv-u-orders-3");
    broker.create_topic(&three);
    let c = next_change(&mut changes).await;
    assert_eq!(added(&c), BTreeSet::from([three.clone()]), "{c:?}");
    assert!(c.removed.is_empty(), "{c:?}");
    assert!(topics_of(&consumer).contains(&stranger));
    assert_eq!(broker.connections().len(), 1, "the connection survived");
}

/// Dropping a pattern consumer stops its discovery: the watcher is closed and polling stops.
#[tokio::test]
async fn dropping_a_pattern_consumer_stops_discovery() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    broker.create_topic(&full("rv-d-orders-1"));
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-d-orders-.*",
        Duration::from_millis(100),
    )
    .await;
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    // Polling runs (a few polls at a 100 ms period).
    let polls = || broker.received_of(Type::GetTopicsOfNamespace).len();
    let before = polls();
    wait_until("a few polls", || polls() >= before + 2).await;
    drop(consumer);
    wait_until("the watcher is closed", || {
        broker.topic_list_watchers().is_empty()
    })
    .await;
    let after = polls();
    // Ten periods: a leaked discovery task would poll about ten times.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        polls() <= after + 1,
        "discovery kept polling after the consumer was dropped: {after} -> {}",
        polls()
    );
    // No consumer is left on the topic either.
    wait_until("the topic's consumer is closed", || {
        broker.consumers(&full("rv-d-orders-1"), "s") == 0
    })
    .await;
}

/// A cumulative ack of one topic's message acks that topic only (upstream routes it to the
/// message's topic consumer): the other topic's unacked message is redelivered.
#[tokio::test]
async fn a_cumulative_ack_covers_only_the_messages_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-c-a"), full("rv-c-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let subscribe = || {
        client
            .multi_topic_consumer([a.clone(), b.clone()])
            .subscription("s")
            .subscription_type(SubscriptionType::Failover)
            .initial_position(InitialPosition::Earliest)
            .ack_group_time(Duration::ZERO)
            .subscribe()
    };
    let mut consumer = subscribe().await.unwrap();
    let pa = unbatched_producer(&client, &a).await;
    let pb = unbatched_producer(&client, &b).await;
    publish(&pb, "b", 2).await;
    publish(&pa, "a", 2).await;
    let mut last_a = None;
    for _ in 0..4 {
        let m = recv(&mut consumer).await;
        if m.topic.to_string() == a {
            last_a = Some(m);
        }
    }
    consumer.ack_cumulative(last_a.as_ref().unwrap()).unwrap();
    wait_until("a's cursor moved", || {
        broker
            .received_of(Type::Ack)
            .iter()
            .any(|r| r.command.ack.is_some())
    })
    .await;
    consumer.close().await.unwrap();
    let mut consumer = subscribe().await.unwrap();
    let mut seen = BTreeSet::new();
    for _ in 0..2 {
        let m = recv(&mut consumer).await;
        seen.insert((m.topic.to_string(), m.payload_str().unwrap().to_string()));
    }
    assert_eq!(
        seen,
        BTreeSet::from([
            (b.clone(), "b-0".to_string()),
            (b.clone(), "b-1".to_string())
        ])
    );
}

/// Closing a pattern consumer while a poll is unanswered does not wait for the poll (up to
/// the operation timeout): discovery is stopped, not waited for, like upstream's close.
#[tokio::test]
async fn close_does_not_wait_for_a_poll_in_flight() {
    let broker = MockBroker::start().await.unwrap();
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    broker.create_topic(&full("rv-f-orders-1"));
    broker.set_topic_watchers(false);
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-f-orders-.*",
        Duration::from_millis(100),
    )
    .await;
    let polls = || broker.received_of(Type::GetTopicsOfNamespace).len();
    let before = polls();
    // Every later listing is answered (with an error) only after two minutes.
    broker.push_error(
        MockError::new(
            MockRequest::GetTopicsOfNamespace,
            ServerError::ServiceNotReady,
            "slow",
        )
        .times(100)
        .after(Duration::from_secs(120)),
    );
    wait_until("a poll is in flight", || polls() > before).await;
    within("close", consumer.close()).await.unwrap();
}

/// A pattern consumer asks the partitioned metadata of a listed topic without letting the
/// broker create it (PIP-344 `metadata_auto_creation_enabled = false`, like upstream's
/// `subscribeAsync(topic, createTopicIfDoesNotExist = false)`): a topic deleted between the
/// listing and the subscribe must stay deleted, also on a broker that auto-creates
/// partitioned topics.
#[tokio::test]
async fn a_listed_topics_metadata_is_asked_without_auto_creation() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let one = full("rv-m-orders-1");
    broker.create_topic(&one);
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-m-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    assert_eq!(topics_of(&consumer), BTreeSet::from([one.clone()]));
    let asked: Vec<Option<bool>> = broker
        .received_of(Type::PartitionedMetadata)
        .iter()
        .filter_map(|r| r.command.partition_metadata.as_ref())
        .filter(|m| m.topic == one)
        .map(|m| m.metadata_auto_creation_enabled)
        .collect();
    assert!(!asked.is_empty());
    assert!(
        asked.iter().all(|a| *a == Some(false)),
        "metadata asked with auto-creation: {asked:?}"
    );
}

/// Seeking a multi-topic consumer to a received message's position: upstream's messages carry
/// a `TopicMessageId`, so `seek(msg.getMessageId())` rewinds that topic only. Here an id
/// names no topic; the topic and id together do.
#[tokio::test]
async fn seek_to_a_received_message_rewinds_only_its_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-s-a"), full("rv-s-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let pa = unbatched_producer(&client, &a).await;
    let pb = unbatched_producer(&client, &b).await;
    publish(&pa, "a", 3).await;
    publish(&pb, "b", 1).await;
    let mut a1 = None;
    for _ in 0..4 {
        let m = recv(&mut consumer).await;
        consumer.ack(&m).unwrap();
        if m.payload_str() == Some("a-1") {
            a1 = Some(m);
        }
    }
    let a1 = a1.unwrap();
    // With the id alone the consumer cannot tell the topic: a clear error, not a wrong seek.
    assert!(matches!(
        consumer.seek(a1.id).await,
        Err(pulsar_sdk::Error::InvalidOperation(_))
    ));
    consumer.seek_topic_id(&a1.topic, a1.id).await.unwrap();
    pb.send_and_wait("b-1".to_string()).await.unwrap();
    let mut seen = BTreeSet::new();
    for _ in 0..3 {
        let m = recv(&mut consumer).await;
        seen.insert(m.payload_str().unwrap().to_string());
    }
    assert_eq!(
        seen,
        BTreeSet::from(["a-1".to_string(), "a-2".to_string(), "b-1".to_string()])
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Publishes chunk `chunk_id` of 2 of message `uuid` (whole payload `whole`) to `topic`.
fn chunk(broker: &MockBroker, topic: &str, uuid: &str, whole: &[u8], chunk_id: usize) {
    let size = whole.len().div_ceil(2);
    let part = &whole[chunk_id * size..((chunk_id + 1) * size).min(whole.len())];
    broker
        .publish_raw(
            topic,
            wire::MessageMetadata {
                producer_name: "raw".into(),
                sequence_id: 7,
                publish_time: now_ms(),
                uuid: Some(uuid.into()),
                num_chunks_from_msg: Some(2),
                total_chunk_msg_size: Some(whole.len() as i32),
                chunk_id: Some(chunk_id as i32),
                ..Default::default()
            },
            bytes::Bytes::copy_from_slice(part),
        )
        .unwrap();
}

/// Chunked messages of two topics, interleaved and even with the same uuid (the producers of
/// two topics may both be called `raw` with the same sequence id), are each reassembled from
/// their own topic's chunks.
#[tokio::test]
async fn chunked_messages_of_two_topics_are_reassembled_per_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-k-a"), full("rv-k-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let (wa, wb) = (b"AAAAaaaa".as_slice(), b"BBBBbbbbXX".as_slice());
    chunk(&broker, &a, "raw-7", wa, 0);
    chunk(&broker, &b, "raw-7", wb, 0);
    chunk(&broker, &a, "raw-7", wa, 1);
    chunk(&broker, &b, "raw-7", wb, 1);
    let mut got = BTreeSet::new();
    for _ in 0..2 {
        let m = recv(&mut consumer).await;
        got.insert((m.topic.to_string(), m.payload.to_vec()));
        consumer.ack(&m).unwrap();
    }
    assert_eq!(
        got,
        BTreeSet::from([(a.clone(), wa.to_vec()), (b.clone(), wb.to_vec())])
    );
}

/// With the watcher, a topic deleted and created again under the same name ends up subscribed
/// (its messages received), not dropped for good.
#[tokio::test]
async fn a_topic_deleted_and_created_again_is_followed_by_the_watcher() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let t = full("rv-r-orders-1");
    broker.create_topic(&t);
    let mut consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-r-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    let mut changes = consumer.topic_updates();
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    broker.delete_topic(&t, true).unwrap();
    broker.create_topic(&t);
    // Whatever the changes in between, the topic is subscribed again at the end.
    loop {
        let _ = next_change(&mut changes).await;
        if topics_of(&consumer).contains(&t) && broker.consumers(&t, "s") == 1 {
            break;
        }
    }
    let p = unbatched_producer(&client, &t).await;
    p.send_and_wait("again".to_string()).await.unwrap();
    let m = recv(&mut consumer).await;
    assert_eq!(m.payload_str(), Some("again"));
    assert_eq!(m.topic.to_string(), t);
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct UserV1 {
    name: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct UserV2 {
    name: String,
    #[serde(default)]
    age: i32,
}

const V1: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},
    {"name":"age","type":"int","default":0}]}"#;

/// A typed consumer over two topics whose writer schemas differ but share a version number
/// (each topic's first version is 0): each message is decoded with its own topic's writer
/// schema.
#[tokio::test]
async fn a_typed_consumer_decodes_each_topic_with_its_own_writer_schema() {
    use pulsar_sdk::schema::AvroSchema;
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-t-a"), full("rv-t-b"));
    let pa = client
        .producer(&a)
        .schema(AvroSchema::<UserV1>::new(V1).unwrap())
        .create()
        .await
        .unwrap();
    let pb = client
        .producer(&b)
        .schema(AvroSchema::<UserV2>::new(V2).unwrap())
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .multi_topic_consumer([a.clone(), b.clone()])
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .schema(AvroSchema::<UserV2>::new(V2).unwrap())
        .subscribe()
        .await
        .unwrap();
    pa.send_and_wait(&UserV1 { name: "x".into() })
        .await
        .unwrap();
    pb.send_and_wait(&UserV2 {
        name: "y".into(),
        age: 42,
    })
    .await
    .unwrap();
    let mut got = BTreeSet::new();
    for _ in 0..2 {
        let m = within("typed recv", consumer.recv()).await.unwrap();
        let v = m.value().expect("decoded").clone();
        got.insert((m.message().topic.to_string(), v.name, v.age));
        consumer.ack(&m).unwrap();
    }
    assert_eq!(
        got,
        BTreeSet::from([(a, "x".to_string(), 0), (b, "y".to_string(), 42)])
    );
}

/// System topics as upstream's `SystemTopicNames.isSystemTopic` knows them (the namespace
/// events topics, transaction internals, pending-ack stores `<topic>-<sub>__transaction_pending_ack`)
/// are never subscribed by a pattern; a user's own topic whose name starts with `__` is.
#[tokio::test]
async fn system_topics_are_the_upstream_ones_not_a_name_prefix() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let user = full("__rv-y-orders-1");
    let plain = full("rv-y-orders-2");
    let pending_ack = full("rv-y-orders-2-s__transaction_pending_ack");
    for t in [&user, &plain, &pending_ack] {
        broker.create_topic(t);
    }
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/(__)?rv-y-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    assert_eq!(topics_of(&consumer), BTreeSet::from([user, plain]));
    assert_eq!(broker.consumers(&pending_ack, "s"), 0);
}

/// A broker answering GetTopicsOfNamespace with duplicates, topics of other namespaces (while
/// claiming to have filtered), malformed names and non-persistent topics: the pattern consumer
/// subscribes each topic of its own namespace and mode once, and nothing else.
#[tokio::test]
async fn a_hostile_topic_listing_subscribes_only_the_patterns_topics_once() {
    use std::sync::{Arc, Mutex};
    let subscribed: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = subscribed.clone();
    let broker = hostile::Hostile::start(move |mut peer| {
        let seen = seen.clone();
        async move {
            peer.handshake(None).await;
            while let Some(f) = peer.recv().await {
                let answer = match f.ty() {
                    Type::GetTopicsOfNamespace => {
                        let req = f.cmd.get_topics_of_namespace.as_ref().unwrap();
                        let mut topics = vec![
                            full("rv-h-orders-1"),
                            full("rv-h-orders-1"),
                            "persistent://evil/ns/rv-h-orders-1".to_string(),
                            "persistent://public/other/rv-h-orders-2".to_string(),
                            "non-persistent://public/default/rv-h-orders-3".to_string(),
                            "persistent://".to_string(),
                            "not a topic at all".to_string(),
                            String::new(),
                        ];
                        topics.extend((0..50).map(|_| full("rv-h-orders-1")));
                        Some(wire::BaseCommand {
                            r#type: Type::GetTopicsOfNamespaceResponse as i32,
                            get_topics_of_namespace_response: Some(
                                wire::CommandGetTopicsOfNamespaceResponse {
                                    request_id: req.request_id,
                                    topics,
                                    filtered: Some(true),
                                    topics_hash: Some("0".into()),
                                    changed: Some(true),
                                },
                            ),
                            ..Default::default()
                        })
                    }
                    Type::Subscribe => {
                        let s = f.cmd.subscribe.as_ref().unwrap();
                        seen.lock().unwrap().push(s.topic.clone());
                        peer.reply(&f.cmd)
                    }
                    _ => peer.reply(&f.cmd),
                };
                if let Some(a) = answer {
                    if peer.send(a).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    let client = client(&broker.url());
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-h-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    assert_eq!(
        topics_of(&consumer),
        BTreeSet::from([full("rv-h-orders-1")])
    );
    assert_eq!(*subscribed.lock().unwrap(), vec![full("rv-h-orders-1")]);
}

/// A pattern consumer with no matching topic yet (or whose every topic was deleted) is open:
/// `closed()` does not resolve until the application closes it, then with `Closed`.
#[tokio::test]
async fn closed_of_a_pattern_consumer_without_topics_waits_for_the_close() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-z-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    assert!(consumer.topics().is_empty());
    assert_eq!(consumer.state(), State::Ready);
    let ended = consumer.closed();
    tokio::pin!(ended);
    // An open consumer's `closed()` must not be ready (checked without waiting on a clock).
    assert!(
        futures::poll!(&mut ended).is_pending(),
        "closed() resolved on an open pattern consumer"
    );
    consumer.close().await.unwrap();
    assert_eq!(within("closed", ended).await, State::Closed);
}

/// The same topic named twice (also once by its short name) is subscribed once, like upstream
/// (its topic set): an Exclusive subscription does not refuse the consumer's own second
/// consumer, and each message arrives once.
#[tokio::test]
async fn a_topic_named_twice_is_subscribed_once() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("rv-2-a"), full("rv-2-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .multi_topic_consumer([a.clone(), "rv-2-a".to_string(), b.clone(), a.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Exclusive)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .expect("subscribed");
    assert_eq!(topics_of(&consumer), BTreeSet::from([a.clone(), b.clone()]));
    assert_eq!(broker.consumers(&a, "s"), 1);
    let pa = unbatched_producer(&client, &a).await;
    publish(&pa, "a", 1).await;
    pa.send_and_wait("marker".to_string()).await.unwrap();
    let first = recv(&mut consumer).await;
    let second = recv(&mut consumer).await;
    assert_eq!(first.payload_str(), Some("a-0"));
    assert_eq!(second.payload_str(), Some("marker"));
}

/// Acking a message of a topic the pattern consumer dropped (deleted) fails or is a no-op for
/// that topic; it never reaches another topic's consumer.
#[tokio::test]
async fn acking_a_message_of_a_dropped_topic_does_not_reach_another_topic() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (t1, t2) = (full("rv-g-orders-1"), full("rv-g-orders-2"));
    broker.create_topic(&t1);
    broker.create_topic(&t2);
    let mut consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-g-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    let mut changes = consumer.topic_updates();
    let p1 = unbatched_producer(&client, &t1).await;
    // A first message, so that t1's next one has an entry id t2's first one cannot have.
    p1.send_and_wait("zero".to_string()).await.unwrap();
    let m0 = recv(&mut consumer).await;
    consumer.ack(&m0).unwrap();
    wait_until("m0's ack", || !broker.received_of(Type::Ack).is_empty()).await;
    p1.send_and_wait("one".to_string()).await.unwrap();
    let m1 = recv(&mut consumer).await;
    assert_eq!(m1.topic.to_string(), t1);
    p1.close().await.unwrap();
    broker.delete_topic(&t1, true).unwrap();
    let c = next_change(&mut changes).await;
    assert_eq!(
        c.removed.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        vec![t1.clone()]
    );
    let acks_before = broker.received_of(Type::Ack).len();
    let _ = consumer.ack(&m1);
    let _ = consumer.nack(&m1);
    // t2 still works, and no ack for t1's message went out on t2's consumer.
    let p2 = unbatched_producer(&client, &t2).await;
    p2.send_and_wait("two".to_string()).await.unwrap();
    let m2 = recv(&mut consumer).await;
    assert_eq!(m2.payload_str(), Some("two"));
    assert_ne!(
        (m1.id.ledger_id, m1.id.entry_id),
        (m2.id.ledger_id, m2.id.entry_id)
    );
    consumer.ack(&m2).unwrap();
    wait_until("t2's ack", || {
        broker.received_of(Type::Ack).len() > acks_before
    })
    .await;
    let acks: Vec<_> = broker.received_of(Type::Ack)[acks_before..]
        .iter()
        .filter_map(|r| r.command.ack.clone())
        .collect();
    for ack in &acks {
        for id in &ack.message_id {
            assert_eq!(
                (id.ledger_id, id.entry_id),
                (m2.id.ledger_id, m2.id.entry_id),
                "an ack other than t2's message went out: {acks:?}"
            );
        }
    }
}

/// Unsubscribing a pattern consumer while discovery is subscribing a new topic leaves no
/// subscription behind on that topic: discovery stops before the topics are unsubscribed.
#[tokio::test]
async fn unsubscribe_leaves_no_subscription_on_a_topic_joining_meanwhile() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let t1 = full("rv-q-orders-1");
    broker.create_topic(&t1);
    let consumer = pattern_consumer(
        &client,
        "persistent://public/default/rv-q-orders-.*",
        Duration::from_secs(3600),
    )
    .await;
    wait_until("a watcher is registered", || {
        broker.topic_list_watchers().len() == 1
    })
    .await;
    // Every answer now comes late: the new topic's subscribe is still in flight when the
    // application unsubscribes.
    broker.set_response_delay(Duration::from_millis(500));
    let x = full("rv-q-orders-x");
    broker.create_topic(&x);
    let asked_x = || {
        broker
            .received_of(Type::PartitionedMetadata)
            .iter()
            .any(|r| r.command.partition_metadata.as_ref().unwrap().topic == x)
    };
    wait_until("x's subscribe began", asked_x).await;
    within("unsubscribe", consumer.unsubscribe()).await.unwrap();
    // Discovery is over once its watcher is closed.
    wait_until("the watcher is closed", || {
        broker.topic_list_watchers().is_empty()
    })
    .await;
    broker.set_response_delay(Duration::ZERO);
    assert!(
        broker.subscriptions(&t1).is_empty(),
        "{:?}",
        broker.subscriptions(&t1)
    );
    assert!(
        !broker.subscriptions(&x).contains(&"s".to_string()),
        "x kept a subscription: {:?}",
        broker.subscriptions(&x)
    );
}
