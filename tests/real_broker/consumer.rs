//! Consumer behaviour against a real broker (pulsar-lite, started by the harness): individual,
//! cumulative and batch acks surviving a resubscribe, negative acks, unsubscribe, seek, the
//! reader's `has_message_available` on an empty topic, and Key_Shared / Failover dispatch.
//!
//! pulsar-lite bugs worked around here (see shared/design/pulsar-lite.md), each again at the test
//! that meets it:
//! * Exclusive/Failover subscriptions duplicate deliveries under pipelined publishing: tests that
//!   count on them publish synchronously (`send_and_wait`), and still compare distinct ids.
//! * Two clients on one Shared/Key_Shared/Failover subscription collide on consumer ids: the
//!   multi-consumer tests use one `Client` for all consumers of a subscription.
//! * Nack is ignored on Exclusive/Failover: nack tests use Shared.
//! * Seek to earliest (-1,-1) poisons the subscription: seek tests seek to real ids and times
//!   only, on fresh subscriptions.
//! * Batch-index acks (`ack_set`) lose data: the client's default (off) is kept.
//! * GetLastMessageId errors on an empty topic: the client must turn that into `Ok(false)`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pulsar_sdk::{
    Client, Consumer, InitialPosition, Message, MessageId, Producer, SubscriptionType,
};
use support::unique_name;

/// How long one message may take to arrive.
const STEP: Duration = Duration::from_secs(15);
/// How long we watch for messages that must not come.
const QUIET: Duration = Duration::from_millis(1500);

use support::shared_client as client;

use support::unbatched_producer;

/// Publishes `p0..p{n-1}` one at a time (each send waits for its receipt).
async fn publish_sync(producer: &Producer, prefix: &str, n: usize) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            producer
                .send_and_wait(format!("{prefix}{i}"))
                .await
                .unwrap(),
        );
    }
    ids
}

async fn subscribe(
    client: &Client,
    topic: &str,
    subscription: &str,
    sub_type: SubscriptionType,
    position: InitialPosition,
) -> Consumer {
    client
        .consumer(topic)
        .subscription(subscription)
        .subscription_type(sub_type)
        .initial_position(position)
        .subscribe()
        .await
        .unwrap()
}

async fn recv(consumer: &mut Consumer, what: &str) -> Message {
    support::recv_within(consumer, STEP, what).await
}

/// Receives `n` messages (no acks).
async fn recv_n(consumer: &mut Consumer, n: usize, what: &str) -> Vec<Message> {
    let mut out = Vec::new();
    while out.len() < n {
        let m = recv(consumer, &format!("{what} (after {} of {n})", out.len())).await;
        out.push(m);
    }
    out
}

/// Asserts that nothing arrives for [`QUIET`].
async fn expect_nothing(consumer: &mut Consumer, what: &str) {
    if let Ok(r) = tokio::time::timeout(QUIET, consumer.recv()).await {
        let m = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        panic!(
            "{what}: expected nothing, got {:?} ({}, redelivery_count {})",
            m.payload_str(),
            m.id,
            m.redelivery_count
        );
    }
}

/// Receives until `n` distinct message ids have arrived, then for [`QUIET`] more; returns the
/// distinct messages in arrival order. For Exclusive/Failover, where pulsar-lite may dispatch an
/// entry more than once (a broker bug, not the client's).
async fn recv_distinct(consumer: &mut Consumer, n: usize, what: &str) -> Vec<Message> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let m = recv(consumer, &format!("{what} (after {} of {n})", out.len())).await;
        if seen.insert(m.id) {
            out.push(m);
        }
    }
    while let Ok(r) = tokio::time::timeout(QUIET, consumer.recv()).await {
        let m = r.unwrap();
        if seen.insert(m.id) {
            out.push(m);
        }
    }
    out
}

fn payloads(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.payload_str().unwrap().to_string())
        .collect()
}

fn names(prefix: &str, range: impl IntoIterator<Item = usize>) -> Vec<String> {
    range.into_iter().map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn individual_acks_survive_a_resubscribe_and_only_unacked_messages_return() {
    let client = client();
    let topic = unique_name("ack-individual");
    let sub = unique_name("sub");
    let producer = unbatched_producer(&client, &topic).await;
    let mut consumer = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    publish_sync(&producer, "m", 10).await;

    let got = recv_n(&mut consumer, 10, "first session").await;
    assert_eq!(payloads(&got), names("m", 0..10));
    for i in [0, 2, 4, 5, 6, 8] {
        consumer.ack(&got[i]).unwrap();
    }
    // close() flushes the grouped acks before closing.
    consumer.close().await.unwrap();

    let mut again = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    let back = recv_n(&mut again, 4, "after resubscribe").await;
    let mut back_payloads = payloads(&back);
    back_payloads.sort();
    assert_eq!(
        back_payloads,
        names("m", [1, 3, 7, 9]),
        "exactly the unacked ones"
    );
    for m in &back {
        let original = got.iter().find(|o| o.payload == m.payload).unwrap();
        assert_eq!(m.id, original.id, "the same stored message comes back");
    }
    expect_nothing(&mut again, "acked messages must not come back").await;
    for m in &back {
        again.ack(m).unwrap();
    }
    again.close().await.unwrap();

    let mut third = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    expect_nothing(&mut third, "everything is acked").await;
    third.close().await.unwrap();
}

#[tokio::test]
async fn cumulative_ack_then_resubscribe_delivers_only_later_messages() {
    let client = client();
    let topic = unique_name("ack-cumulative");
    let sub = unique_name("sub");
    let producer = unbatched_producer(&client, &topic).await;
    // pulsar-lite duplicates dispatch on Exclusive subscriptions under pipelined publishing:
    // publish the whole backlog synchronously *before* subscribing, and compare distinct ids.
    let ids = publish_sync(&producer, "c", 10).await;

    let mut consumer = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Exclusive,
        InitialPosition::Earliest,
    )
    .await;
    let got = recv_distinct(&mut consumer, 10, "first session").await;
    assert_eq!(got.len(), 10, "exactly the 10 published messages");
    let mut by_id: Vec<&Message> = got.iter().collect();
    by_id.sort_by_key(|m| m.id);
    assert_eq!(
        by_id.iter().map(|m| m.id).collect::<Vec<_>>(),
        ids,
        "the published ids"
    );
    // Cumulative ack of c5 acks c0..c5.
    consumer.ack_cumulative(by_id[5]).unwrap();
    consumer.close().await.unwrap();

    let mut again = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Exclusive,
        InitialPosition::Earliest,
    )
    .await;
    let back = recv_distinct(&mut again, 4, "after resubscribe").await;
    let mut back_payloads = payloads(&back);
    back_payloads.sort();
    assert_eq!(
        back_payloads,
        names("c", 6..10),
        "only the messages after the cumulatively acked one"
    );
    again.close().await.unwrap();
}

/// Five messages in one batch entry. The ids, in order.
async fn publish_one_batch(client: &Client, topic: &str, prefix: &str) -> Vec<MessageId> {
    let producer = client.producer(topic).create().await.unwrap(); // batching on (default)
    let mut sends = Vec::new();
    for i in 0..5 {
        sends.push(producer.send(format!("{prefix}{i}")).await.unwrap());
    }
    let ids = futures::future::try_join_all(sends).await.unwrap();
    producer.close().await.unwrap();
    let entry = ids[0].entry();
    assert!(
        ids.iter()
            .enumerate()
            .all(|(i, id)| id.is_batch() && id.entry() == entry && id.batch_index == i as i32),
        "the 5 pipelined sends form one batch: {ids:?}"
    );
    ids
}

/// With batch-index acks off (the default, and the only safe setting against pulsar-lite, which
/// treats any ack of a batch entry as an ack of the whole entry), acking 2 of 5 messages of a
/// batch must not ack the entry on the broker. So after a resubscribe the whole batch comes
/// back — all 5, including the 2 acked ones: the acked indexes are remembered only by the
/// consumer that acked them (the Java and C++ clients behave the same without batch-index acks).
#[tokio::test]
async fn a_partly_acked_batch_comes_back_whole_to_a_new_consumer() {
    let client = client();
    let topic = unique_name("batch-partial");
    let sub = unique_name("sub");
    let ids = publish_one_batch(&client, &topic, "b").await;

    let mut consumer = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    let got = recv_n(&mut consumer, 5, "first session").await;
    assert_eq!(payloads(&got), names("b", 0..5));
    assert_eq!(got.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
    consumer.ack(&got[0]).unwrap();
    consumer.ack(&got[3]).unwrap();
    consumer.close().await.unwrap();

    // If the client had acked the entry (or sent an ack_set that pulsar-lite would apply to the
    // whole entry), nothing would come back here.
    let mut again = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    let back = recv_n(&mut again, 5, "after resubscribe").await;
    assert_eq!(
        payloads(&back),
        names("b", 0..5),
        "the whole batch, acked indexes included (a new consumer does not know them)"
    );
    assert_eq!(back.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
    expect_nothing(&mut again, "one batch only").await;

    // Acking all five completes the batch: now the entry is acked on the broker.
    for m in &back {
        again.ack(m).unwrap();
    }
    again.close().await.unwrap();
    let mut third = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    expect_nothing(&mut third, "the fully acked batch").await;
    third.close().await.unwrap();
}

/// Within one consumer, a redelivered batch skips the indexes that consumer already acked.
/// Redelivery is triggered by a negative ack (Shared: pulsar-lite ignores nacks on
/// Exclusive/Failover); the broker redelivers the whole entry.
#[tokio::test]
async fn a_redelivered_batch_skips_indexes_acked_by_the_same_consumer() {
    let client = client();
    let topic = unique_name("batch-redeliver");
    let sub = unique_name("sub");
    let ids = publish_one_batch(&client, &topic, "r").await;

    let mut consumer = client
        .consumer(&topic)
        .subscription(&sub)
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(500))
        .subscribe()
        .await
        .unwrap();
    let got = recv_n(&mut consumer, 5, "first delivery").await;
    assert_eq!(payloads(&got), names("r", 0..5));
    consumer.ack(&got[0]).unwrap();
    consumer.ack(&got[1]).unwrap();
    consumer.nack(&got[2]).unwrap();

    let back = recv_n(&mut consumer, 3, "redelivery").await;
    assert_eq!(
        payloads(&back),
        names("r", 2..5),
        "the acked r0 and r1 are skipped; the rest of the entry comes again"
    );
    assert_eq!(back.iter().map(|m| m.id).collect::<Vec<_>>(), ids[2..]);
    assert!(
        back.iter().all(|m| m.redelivery_count == 1),
        "redelivery counts: {:?}",
        back.iter().map(|m| m.redelivery_count).collect::<Vec<_>>()
    );
    expect_nothing(&mut consumer, "after the redelivered batch").await;
    for m in &back {
        consumer.ack(m).unwrap();
    }
    consumer.close().await.unwrap();

    let mut again = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    expect_nothing(&mut again, "the batch is fully acked").await;
    again.close().await.unwrap();
}

#[tokio::test]
async fn nack_on_shared_redelivers_after_the_delay_with_redelivery_count_one() {
    let client = client();
    let topic = unique_name("nack");
    let producer = unbatched_producer(&client, &topic).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription(unique_name("sub"))
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .negative_ack_delay(Duration::from_millis(500))
        .subscribe()
        .await
        .unwrap();
    publish_sync(&producer, "n", 3).await;
    let got = recv_n(&mut consumer, 3, "first delivery").await;
    assert_eq!(payloads(&got), names("n", 0..3));
    assert!(got.iter().all(|m| m.redelivery_count == 0));
    consumer.ack(&got[0]).unwrap();
    consumer.ack(&got[2]).unwrap();
    let nacked_at = Instant::now();
    consumer.nack(&got[1]).unwrap();

    let m = recv(&mut consumer, "redelivery of the nacked message").await;
    let waited = nacked_at.elapsed();
    assert_eq!(m.payload_str(), Some("n1"));
    assert_eq!(m.id, got[1].id);
    assert_eq!(m.redelivery_count, 1);
    assert!(
        waited >= Duration::from_millis(450),
        "redelivered only after the 500 ms negative-ack delay, not after {waited:?}"
    );
    consumer.ack(&m).unwrap();
    expect_nothing(&mut consumer, "acked messages are not redelivered").await;
    consumer.close().await.unwrap();
}

#[tokio::test]
async fn unsubscribe_then_resubscribe_at_latest_sees_nothing_old() {
    let client = client();
    let topic = unique_name("unsub");
    let sub = unique_name("sub");
    let producer = unbatched_producer(&client, &topic).await;
    publish_sync(&producer, "old", 3).await;
    let mut consumer = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    // Received but deliberately not acked: had the subscription survived, they would come back.
    let got = recv_n(&mut consumer, 3, "before unsubscribe").await;
    assert_eq!(payloads(&got), names("old", 0..3));
    consumer.unsubscribe().await.unwrap();

    let mut again = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Shared,
        InitialPosition::Latest,
    )
    .await;
    expect_nothing(&mut again, "a new subscription at Latest").await;
    producer.send_and_wait("new").await.unwrap();
    let m = recv(&mut again, "a message published after resubscribing").await;
    assert_eq!(m.payload_str(), Some("new"));
    assert_eq!(m.redelivery_count, 0);
    again.ack(&m).unwrap();
    expect_nothing(&mut again, "only the new message").await;
    again.close().await.unwrap();
}

/// Ten messages, published 20 ms apart so that publish times differ; all received and acked
/// by a Shared consumer on a fresh subscription. Returns the consumer and the messages.
async fn seek_setup(client: &Client, prefix: &str) -> (Consumer, Vec<Message>) {
    let topic = unique_name(prefix);
    let producer = unbatched_producer(client, &topic).await;
    let mut consumer = subscribe(
        client,
        &topic,
        &unique_name("sub"),
        SubscriptionType::Shared,
        InitialPosition::Earliest,
    )
    .await;
    for i in 0..10 {
        producer.send_and_wait(format!("s{i}")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = recv_n(&mut consumer, 10, "before seek").await;
    assert_eq!(payloads(&got), names("s", 0..10));
    for m in &got {
        consumer.ack(m).unwrap();
    }
    expect_nothing(&mut consumer, "before seek").await;
    (consumer, got)
}

/// Seek by id on a live Shared consumer. pulsar-lite does not re-dispatch after a Seek until it
/// gets a new Flow (the client sends one), and a seek to earliest (-1,-1) would poison the
/// subscription, so this seeks to a real id on a fresh subscription.
#[tokio::test]
async fn seek_by_message_id_redelivers_from_that_message() {
    let client = client();
    let (mut consumer, got) = seek_setup(&client, "seek-id").await;
    consumer.seek(got[4].id).await.unwrap();
    let again = recv_n(&mut consumer, 6, "after seek").await;
    assert_eq!(
        payloads(&again),
        names("s", 4..10),
        "a seek to a message id delivers that message and everything after it, in order"
    );
    assert_eq!(
        again.iter().map(|m| m.id).collect::<Vec<_>>(),
        got[4..].iter().map(|m| m.id).collect::<Vec<_>>()
    );
    for m in &again {
        consumer.ack(m).unwrap();
    }
    expect_nothing(&mut consumer, "after the seek's messages").await;
    consumer.close().await.unwrap();
}

#[tokio::test]
async fn seek_by_publish_time_redelivers_from_that_time() {
    let client = client();
    let (mut consumer, got) = seek_setup(&client, "seek-time").await;
    let t = got[6].publish_time;
    let first = got.iter().position(|m| m.publish_time >= t).unwrap();
    assert_eq!(first, 6, "publish times are distinct: {:?}", {
        got.iter().map(|m| m.publish_time).collect::<Vec<_>>()
    });
    consumer.seek_by_time(t).await.unwrap();
    let again = recv_n(&mut consumer, 4, "after seek").await;
    assert_eq!(
        payloads(&again),
        names("s", 6..10),
        "a seek to a publish time delivers the messages published at or after it"
    );
    for m in &again {
        consumer.ack(m).unwrap();
    }
    expect_nothing(&mut consumer, "after the seek's messages").await;
    consumer.close().await.unwrap();
}

/// pulsar-lite answers GetLastMessageId on an empty topic with an error ("Topic has no
/// messages") instead of an empty position; the reader must report `Ok(false)`.
#[tokio::test]
async fn reader_has_message_available_on_an_empty_topic_is_false() {
    let client = client();
    let topic = unique_name("reader-empty");
    let mut earliest = client
        .reader(&topic)
        .start_earliest()
        .create()
        .await
        .unwrap();
    let mut latest = client.reader(&topic).start_latest().create().await.unwrap();
    assert!(!earliest.has_message_available().await.unwrap());
    assert!(!latest.has_message_available().await.unwrap());

    let producer = unbatched_producer(&client, &topic).await;
    let id = producer.send_and_wait("first").await.unwrap();
    // Earliest: the stored message is after the start, whether or not it has arrived yet.
    assert!(earliest.has_message_available().await.unwrap());
    for (name, reader) in [("earliest", &mut earliest), ("latest", &mut latest)] {
        // Latest is "after the last message when the reader was created", so both read it.
        let m = tokio::time::timeout(STEP, reader.recv())
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out"))
            .unwrap();
        assert_eq!(m.payload_str(), Some("first"), "{name}");
        assert_eq!(m.id, id, "{name}");
        assert!(
            !reader.has_message_available().await.unwrap(),
            "{name}: all read"
        );
    }
    earliest.close().await.unwrap();
    latest.close().await.unwrap();
}

/// Key_Shared with two consumers in ONE client: pulsar-lite rejects (by closing the connection)
/// a second client whose consumer id is already used on the subscription, and every client
/// starts its ids at 0, so two separate clients cannot share a subscription.
#[tokio::test]
async fn key_shared_sends_each_key_to_one_consumer_only() {
    const KEYS: usize = 16;
    const PER_KEY: usize = 4;
    let client = client();
    let topic = unique_name("key-shared");
    let sub = unique_name("sub");
    let mut a = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::KeyShared,
        InitialPosition::Earliest,
    )
    .await;
    let mut b = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::KeyShared,
        InitialPosition::Earliest,
    )
    .await;
    let producer = unbatched_producer(&client, &topic).await;
    let mut sends = Vec::new();
    for round in 0..PER_KEY {
        for k in 0..KEYS {
            let msg =
                pulsar_sdk::ProducerMessage::new(format!("k{k}-{round}")).key(format!("k{k}"));
            sends.push(producer.send(msg).await.unwrap());
        }
    }
    futures::future::try_join_all(sends).await.unwrap();

    // consumer (0 = a, 1 = b) -> key -> payloads in arrival order
    let mut seen: [BTreeMap<String, Vec<String>>; 2] = Default::default();
    let mut ids = BTreeSet::new();
    let mut total = 0;
    while total < KEYS * PER_KEY {
        let (which, m) = tokio::time::timeout(STEP, async {
            tokio::select! {
                m = a.recv() => (0, m.unwrap()),
                m = b.recv() => (1, m.unwrap()),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("only {total} of {} messages arrived", KEYS * PER_KEY));
        if which == 0 { a.ack(&m) } else { b.ack(&m) }.unwrap();
        if !ids.insert(m.id) {
            // At-least-once: a reconnect (a loaded broker missing its keep-alive) redelivers
            // what was not acked yet (an ack waits up to the group time before it is sent).
            // Without a reconnect, a second delivery is a client bug.
            assert_redelivered_after_reconnect(&a, &b, &m);
            continue;
        }
        seen[which]
            .entry(m.key.clone().unwrap())
            .or_default()
            .push(m.payload_str().unwrap().to_string());
        total += 1;
    }
    // Nothing more, except redeliveries of what a reconnect caught unacked.
    for which in [0, 1] {
        loop {
            let consumer = if which == 0 { &mut a } else { &mut b };
            let Ok(r) = tokio::time::timeout(QUIET, consumer.recv()).await else {
                break;
            };
            let m = r.unwrap_or_else(|e| panic!("consumer {which}, after all messages: {e}"));
            consumer.ack(&m).unwrap();
            assert!(
                ids.contains(&m.id),
                "consumer {which}, after all messages: {:?} ({}) is no message of the test",
                m.payload_str(),
                m.id
            );
            assert_redelivered_after_reconnect(&a, &b, &m);
        }
    }

    for k in 0..KEYS {
        let key = format!("k{k}");
        let in_a = seen[0].get(&key);
        let in_b = seen[1].get(&key);
        assert!(
            in_a.is_none() || in_b.is_none(),
            "{key} went to both consumers: {in_a:?} / {in_b:?}"
        );
        let got = in_a
            .or(in_b)
            .unwrap_or_else(|| panic!("{key} never arrived"));
        assert_eq!(
            got,
            &names(&format!("{key}-"), 0..PER_KEY),
            "{key}: all its messages, in order, to one consumer"
        );
    }
    assert!(
        !seen[0].is_empty() && !seen[1].is_empty(),
        "both consumers got keys ({} / {} of {KEYS})",
        seen[0].len(),
        seen[1].len()
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Fails unless `m`, delivered a second time, came after a reconnect of consumer `a` or `b`.
fn assert_redelivered_after_reconnect(a: &Consumer, b: &Consumer, m: &Message) {
    let reconnects =
        a.stats().totals.reconnects.reconnects + b.stats().totals.reconnects.reconnects;
    assert!(
        reconnects > 0,
        "{:?} ({}) delivered twice without a reconnect (redelivery_count {})",
        m.payload_str(),
        m.id,
        m.redelivery_count
    );
}

/// Failover with two consumers in one client (see the Key_Shared test for why one client).
/// pulsar-lite duplicates dispatch on Failover under pipelined publishing, so messages are
/// published synchronously and counted by distinct id; it also never sends
/// ActiveConsumerChange, so who is active is seen only from who receives.
#[tokio::test]
async fn failover_delivers_to_one_consumer_and_the_other_takes_over_when_it_leaves() {
    let client = client();
    let topic = unique_name("failover");
    let sub = unique_name("sub");
    let mut a = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Failover,
        InitialPosition::Earliest,
    )
    .await;
    let mut b = subscribe(
        &client,
        &topic,
        &sub,
        SubscriptionType::Failover,
        InitialPosition::Earliest,
    )
    .await;
    let producer = unbatched_producer(&client, &topic).await;
    publish_sync(&producer, "f", 10).await;

    let mut got: [Vec<Message>; 2] = Default::default();
    let mut ids = BTreeSet::new();
    while ids.len() < 10 {
        let (which, m) = tokio::time::timeout(STEP, async {
            tokio::select! {
                m = a.recv() => (0, m.unwrap()),
                m = b.recv() => (1, m.unwrap()),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("only {} of 10 messages arrived", ids.len()));
        if which == 0 { a.ack(&m) } else { b.ack(&m) }.unwrap();
        ids.insert(m.id);
        got[which].push(m);
    }
    let active = if got[0].is_empty() { 1 } else { 0 };
    assert!(
        got[1 - active].is_empty(),
        "only the active consumer receives: {:?} / {:?}",
        payloads(&got[0]),
        payloads(&got[1])
    );
    let mut distinct = got[active].clone();
    distinct.sort_by_key(|m| m.id);
    distinct.dedup_by_key(|m| m.id);
    assert_eq!(payloads(&distinct), names("f", 0..10));

    // The active consumer leaves: the other one gets what is published next.
    let (mut active_consumer, mut standby) = if active == 0 { (a, b) } else { (b, a) };
    expect_nothing(&mut standby, "the standby consumer").await;
    // Anything more on the active consumer may only be a duplicate dispatch (pulsar-lite bug on
    // Failover), never a new message.
    while let Ok(r) = tokio::time::timeout(QUIET, active_consumer.recv()).await {
        let m = r.unwrap();
        assert!(
            ids.contains(&m.id),
            "unexpected {:?} ({})",
            m.payload_str(),
            m.id
        );
    }
    active_consumer.close().await.unwrap();
    publish_sync(&producer, "g", 5).await;
    let after = recv_distinct(&mut standby, 5, "after the active consumer left").await;
    let mut after_payloads = payloads(&after);
    after_payloads.sort();
    assert_eq!(after_payloads, names("g", 0..5));
    standby.close().await.unwrap();
}

/// Cumulative acks on a Shared subscription are refused before anything is sent (the broker
/// would ignore them and the messages would be stuck); the message is still acked normally.
#[tokio::test]
async fn cumulative_ack_on_shared_is_refused_and_the_message_still_acks() {
    let client = client();
    let topic = format!("persistent://public/default/{}", unique_name("cumulative"));
    let producer = unbatched_producer(&client, &topic).await;
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    producer.send_and_wait("m0").await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        consumer.ack_cumulative(&m),
        Err(pulsar_sdk::Error::InvalidOperation(_))
    ));
    consumer.ack(&m).unwrap();
    consumer.close().await.unwrap();
    // Acked: a new consumer of the subscription gets nothing back.
    let mut again = client
        .consumer(&topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    producer.send_and_wait("m1").await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), again.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        next.payload_str(),
        Some("m1"),
        "m0 was acked, not redelivered"
    );
}
