//! Review probes of chunking (PIP-37), producer side and message ids, against the mock broker
//! (which refuses a SEND whose metadata plus payload exceed its `max_message_size`, like the
//! limit the broker checks, and stores every chunk as its own entry). The consumer-side probes
//! with hand-made chunk entries are in `review_chunking_consumer.rs`.

use support as common;

use common::chunks::*;
use common::{full, wait_until, within};

use std::time::Duration;

use futures::FutureExt as _;
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::{Error, MessageId, SubscriptionType};

/// Every payload size around the broker's limit (where the metadata size decides between one
/// entry and chunks) and around two full chunks is sent, each SEND within the limit the mock
/// enforces, and each arrives whole.
#[tokio::test]
async fn every_size_around_the_limit_is_sent_and_arrives_whole() {
    let max = 2048u32;
    let broker = broker_with_max(max).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-boundaries");
    let mut c = consumer(&client, &topic, SubscriptionType::Exclusive)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let sizes: Vec<usize> = (1900..=2060).chain(3900..=4100).chain([0, 1]).collect();
    let mut single = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let body = noise(n, i as u64 + 1);
        let id = within("send", p.send_and_wait(body.clone()))
            .await
            .unwrap_or_else(|e| panic!("{n} bytes: {e}"));
        let m = recv(&mut c).await;
        assert!(m.payload == body, "{n} bytes arrive byte-identical");
        assert_eq!(m.id, id);
        if !id.is_chunked() {
            single.push(n);
        }
        c.ack(&m).unwrap();
    }
    // The largest single entries are right below the limit (metadata is ~20-40 bytes).
    let largest = single.iter().copied().max().unwrap();
    assert!(
        largest > max as usize - 64 && largest < max as usize,
        "{largest}"
    );
    assert!(
        single.iter().all(|&n| n <= largest),
        "one size threshold: {single:?}"
    );
    let refused = broker
        .received_of(Type::SendError)
        .len()
        .max(broker.consumed_errors().len());
    assert_eq!(refused, 0);
}

/// A broker announcing a tiny `max_message_size`: a message is split into many small chunks
/// (and still arrives whole); one whose metadata alone is over it fails with an error.
#[tokio::test]
async fn a_tiny_announced_max_message_size() {
    let broker = broker_with_max(160).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-tiny-max");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let body = noise(20_000, 3);
    let id = within("send", p.send_and_wait(body.clone())).await.unwrap();
    assert!(id.is_chunked());
    let m = recv(&mut c).await;
    assert!(m.payload == body);
    // Metadata of ~300 bytes of properties cannot fit in 160 bytes: an error, not a panic.
    let mut msg = pulsar_sdk::ProducerMessage::from(noise(1000, 4));
    msg.properties.insert("k".repeat(300), "v".into());
    let r = within("send", async { p.send(msg).await?.await }).await;
    assert!(r.is_err(), "{r:?}");
    // The producer goes on.
    p.send_and_wait("after").await.unwrap();
    assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
}

/// Sends queued while a chunked message is in flight keep their order; no chunks of
/// another message come between a message's chunks.
#[tokio::test]
async fn sends_behind_a_chunked_one_are_not_interleaved_with_its_chunks() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-interleave");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let a = noise(20_000, 5);
    let b = noise(15_000, 6);
    let fa = p.send(a.clone()).await.unwrap();
    let fs = p.send("small").await.unwrap();
    let fb = p.send(b.clone()).await.unwrap();
    let (ia, is, ib) = within("receipts", async {
        (fa.await.unwrap(), fs.await.unwrap(), fb.await.unwrap())
    })
    .await;
    assert!(ia < is && is < ib, "{ia} {is} {ib}");
    assert!(ia.is_chunked() && !is.is_chunked() && ib.is_chunked());
    let s = sends(&broker);
    // Sequence ids never go back, and each uuid's chunks are consecutive and in order.
    for w in s.windows(2) {
        assert!(w[0].0 <= w[1].0, "{s:?}");
        if w[0].0 == w[1].0 {
            assert_eq!(w[0].1, w[1].1);
            assert_eq!(w[0].2.unwrap() + 1, w[1].2.unwrap());
        }
    }
    assert!(recv(&mut c).await.payload == a);
    assert_eq!(recv(&mut c).await.payload_str(), Some("small"));
    assert!(recv(&mut c).await.payload == b);
}

/// `flush()` returns only once the chunked message sent before it is receipted.
#[tokio::test]
async fn flush_waits_for_every_chunk() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-flush");
    let p = chunking_producer(&client, &topic).await;
    broker.set_response_delay(Duration::from_millis(30));
    let f = p.send(noise(30_000, 7)).await.unwrap();
    within("flush", p.flush()).await.unwrap();
    let id = f
        .now_or_never()
        .expect("the chunked send is complete when flush returns")
        .unwrap();
    assert!(id.is_chunked());
}

/// A chunked send that times out gives its memory back, and the sends after it succeed.
#[tokio::test]
async fn a_timed_out_chunked_send_frees_its_memory_and_the_next_sends_work() {
    let broker = broker_with_max(8192).await;
    let size = 100_000;
    let client = common::test_client(&broker.service_url())
        .memory_limit(size + 10)
        .build()
        .unwrap();
    let topic = full("review-chunk-timeout");
    let p = client
        .producer(&topic)
        .chunking(true)
        .send_timeout(Duration::from_millis(300))
        .create()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let f = p.send(noise(size, 8)).await.unwrap();
    match within("timeout", f).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    broker.set_unresponsive(false);
    // The connection may still be up (the receipts were lost): the next whole-limit message
    // needs the memory of the first back.
    let id = within("next", async { p.send(noise(size, 9)).await?.await })
        .await
        .expect("memory given back");
    assert!(id.is_chunked());
    p.send_and_wait("small").await.unwrap();
}

/// close() while a chunked message is in flight settles its send (no hang), and a send after
/// close fails.
#[tokio::test]
async fn close_during_a_chunked_send_settles_it() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-close");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    broker.set_response_delay(Duration::from_millis(20));
    let body = noise(40_000, 10);
    let f = p.send(body.clone()).await.unwrap();
    let closed = within("close", p.close()).await;
    let r = within("send settles", f).await;
    match (&r, &closed) {
        (Ok(id), Ok(())) => {
            assert!(id.is_chunked());
            let m = recv(&mut c).await;
            assert!(m.payload == body);
        }
        (Err(Error::Closed), _) => {}
        other => panic!("{other:?}"),
    }
    assert!(p.send("late").await.is_err());
}

/// The receipts of every chunk are lost with the connection: the producer sends the whole
/// message again, and the consumer still gets the message whole (the first copy's chunks and
/// the second's never mix), and acking what it received leaves no backlog.
#[tokio::test]
async fn chunks_sent_again_after_lost_receipts_never_mix() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-lost-receipts");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let body = noise(20_000, 11);
    broker.set_unresponsive(true);
    let f = p.send(body.clone()).await.unwrap();
    wait_until("every chunk reached the broker", || {
        sends(&broker).len() >= 5
    })
    .await;
    let n = sends(&broker).len();
    broker.drop_all_connections();
    broker.set_unresponsive(false);
    let id = within("receipt", f).await.unwrap();
    assert!(id.is_chunked());
    assert_eq!(sends(&broker).len(), 2 * n, "all chunks sent again");
    p.send_and_wait("after").await.unwrap();
    let mut got = Vec::new();
    loop {
        let m = recv(&mut c).await;
        c.ack(&m).unwrap();
        if m.payload_str() == Some("after") {
            break;
        }
        assert!(m.payload == body, "a whole copy");
        got.push(m.id);
    }
    assert!(!got.is_empty() && got.len() <= 2, "{got:?}");
    assert!(got.contains(&id), "the receipt names a delivered copy");
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// Ack, cumulative ack and nack of chunked messages on every subscription type leave no
/// chunk behind.
#[tokio::test]
async fn acks_of_chunked_ids_on_every_subscription_type() {
    for (i, t) in [
        SubscriptionType::Exclusive,
        SubscriptionType::Failover,
        SubscriptionType::Shared,
        SubscriptionType::KeyShared,
    ]
    .into_iter()
    .enumerate()
    {
        let broker = broker_with_max(4096).await;
        let client = client(&broker.service_url());
        let topic = full(&format!("review-chunk-acks-{i}"));
        let mut c = consumer(&client, &topic, t)
            .negative_ack_delay(Duration::from_millis(100))
            .subscribe()
            .await
            .unwrap();
        let p = chunking_producer(&client, &topic).await;
        let big = noise(12_000, i as u64 + 20);
        p.send_and_wait("a").await.unwrap();
        let big_id = p.send_and_wait(big.clone()).await.unwrap();
        let a = recv(&mut c).await;
        let m = recv(&mut c).await;
        assert!(m.payload == big);
        // Nacked: redelivered whole (on Exclusive / Failover with everything unacked, so
        // "a" may come again first).
        c.nack(&m).unwrap();
        let mut again = recv(&mut c).await;
        if again.payload_str() == Some("a") {
            again = recv(&mut c).await;
        }
        assert!(again.payload == big, "{t:?}: redelivered whole");
        assert_eq!(again.id, big_id);
        // Acked: cumulatively where allowed (covering "a" too), else each.
        if matches!(t, SubscriptionType::Exclusive | SubscriptionType::Failover) {
            // A user who kept only the id's string acks by it.
            let parsed: MessageId = again.id.to_string().parse().unwrap();
            c.ack_cumulative_id(parsed).unwrap();
        } else {
            c.ack(&a).unwrap();
            let parsed: MessageId = again.id.to_string().parse().unwrap();
            c.ack_id(parsed).unwrap();
        }
        wait_until("no backlog", || {
            broker.subscription_backlog(&topic, "s") == 0
        })
        .await;
        // And nothing comes again after a re-subscribe.
        c.close().await.unwrap();
        let mut c = consumer(&client, &topic, t).subscribe().await.unwrap();
        p.send_and_wait("z").await.unwrap();
        assert_eq!(recv(&mut c).await.payload_str(), Some("z"), "{t:?}");
    }
}

/// A chunked message id displays, parses and orders like upstream's `ChunkMessageIdImpl`.
#[test]
fn chunk_message_id_display_parse_and_order() {
    let last: MessageId = "7:12:3:-1".parse().unwrap();
    let id: MessageId = "7:9:3:-1-7:12:3:-1".parse().unwrap();
    assert_eq!(id, last, "identity is the last chunk");
    assert_eq!(id.first_chunk_id(), Some(MessageId::new(7, 9, 3)));
    // Java `ChunkMessageIdImpl.toString`: `first-last`, each as `MessageIdImpl` prints it.
    assert_eq!(id.to_string(), "7:9:3-7:12:3");
    let non_part: MessageId = "7:9:-1:-1-7:12:-1:-1".parse().unwrap();
    assert_eq!(non_part.first_chunk_id(), Some(MessageId::new(7, 9, -1)));
    assert_eq!(non_part.to_string().parse::<MessageId>().unwrap(), non_part);
    assert!(MessageId::new(7, 11, 3) < id && id < MessageId::new(7, 13, 3));
    // Malformed: different partitions, nested chunk ids, garbage.
    for bad in [
        "7:9:1:-1-7:12:3:-1",
        "1:2:3:-1-4:5:3:-1-6:7:3:-1",
        "7:9-",
        "7:9:3:-1-",
    ] {
        assert!(bad.parse::<MessageId>().is_err(), "{bad} parsed");
    }
}

/// Hostile chunk headers never panic or stall the consumer: each gets an error item (or is
/// Zero-length chunks claiming a huge chunk count do not grow anything without bound: a
/// Two incomplete messages that together claim more than `max_chunked_message_bytes`: the
/// A receiver queue smaller than a message's chunk count still receives it (each chunk that
/// completes nothing gives its permit back).
#[tokio::test]
async fn a_receiver_queue_of_one_receives_a_many_chunk_message() {
    let broker = broker_with_max(2048).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-queue-one");
    for t in [SubscriptionType::Exclusive, SubscriptionType::Shared] {
        let sub = format!("{t:?}");
        let mut c = client
            .consumer(&topic)
            .subscription(&sub)
            .subscription_type(t)
            .receiver_queue_size(1)
            .subscribe()
            .await
            .unwrap();
        let p = chunking_producer(&client, &topic).await;
        let body = noise(30_000, 30);
        p.send_and_wait(body.clone()).await.unwrap();
        p.send_and_wait("after").await.unwrap();
        let m = recv(&mut c).await;
        assert!(m.payload == body, "{t:?}");
        c.ack(&m).unwrap();
        assert_eq!(recv(&mut c).await.payload_str(), Some("after"));
        c.close().await.unwrap();
        p.close().await.unwrap();
    }
}

/// Ack timeout on a Shared subscription redelivers a chunked message whole, and its ack then
/// leaves no chunk behind.
#[tokio::test]
async fn an_ack_timeout_redelivers_a_chunked_message_whole() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-ack-timeout");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .ack_timeout(Duration::from_millis(1000))
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let body = noise(15_000, 31);
    let id = p.send_and_wait(body.clone()).await.unwrap();
    let m = recv(&mut c).await;
    assert!(m.payload == body);
    let again = recv(&mut c).await;
    assert!(
        again.payload == body,
        "redelivered whole after the ack timeout"
    );
    assert_eq!(again.id, id);
    c.ack(&again).unwrap();
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// Sends that fail before reaching the wire (metadata too big for any chunk) give their
/// memory back: a limit that fits one message is never used up by failures.
#[tokio::test]
async fn failed_chunked_sends_give_their_memory_back() {
    let broker = broker_with_max(200).await;
    let client = common::test_client(&broker.service_url())
        .memory_limit(5000)
        .build()
        .unwrap();
    let topic = full("review-chunk-fail-memory");
    let p = chunking_producer(&client, &topic).await;
    for i in 0..10 {
        let mut msg = pulsar_sdk::ProducerMessage::from(noise(4000, i));
        msg.properties.insert("k".repeat(300), "v".into());
        match within("send", async { p.send(msg).await?.await }).await {
            Err(Error::ProducerQueueFull { limit }) => {
                panic!("memory leaked by a failure: {limit}")
            }
            Err(_) => {}
            Ok(id) => panic!("sent? {id}"),
        }
    }
    let id = within("send", p.send_and_wait(noise(4000, 99)))
        .await
        .unwrap();
    assert!(id.is_chunked());
}

/// A refused chunked message (claiming more than `max_chunked_message_bytes`) must not make
/// the consumer drop a later, valid message that reuses its uuid (a producer of the same name
/// A producer closed with a chunked message pending gives its memory back to the client: the
/// client's other producers can use the whole limit again.
#[tokio::test]
async fn closing_a_producer_with_a_pending_chunked_message_frees_the_client_memory() {
    let broker = broker_with_max(8192).await;
    let size = 100_000;
    let client = common::test_client(&broker.service_url())
        .memory_limit(size + 10)
        .operation_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let topic = full("review-chunk-close-memory");
    let p1 = chunking_producer(&client, &topic).await;
    let p2 = chunking_producer(&client, &topic).await;
    broker.set_unresponsive(true);
    let f = p1.send(noise(size, 50)).await.unwrap();
    let _ = within("close", p1.close()).await;
    assert!(within("settled", f).await.is_err());
    broker.set_unresponsive(false);
    let id = within("p2", async { p2.send(noise(size, 51)).await?.await })
        .await
        .expect("the memory of p1's message is back");
    assert!(id.is_chunked());
}

/// A reader whose connection drops while one chunked message is incomplete, after another
/// one interleaved with it was delivered, still reads the incomplete one after the reconnect
/// Key_Shared: every chunk carries the message's key, so all chunks of a message go to the
/// consumer owning the key and each message arrives whole at exactly one consumer.
#[tokio::test]
async fn key_shared_consumers_each_get_whole_chunked_messages() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-key-shared");
    let mut c1 = consumer(&client, &topic, SubscriptionType::KeyShared)
        .name("c1")
        .subscribe()
        .await
        .unwrap();
    let mut c2 = consumer(&client, &topic, SubscriptionType::KeyShared)
        .name("c2")
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let mut sent = Vec::new();
    for i in 0..8u64 {
        let body = noise(10_000 + i as usize, 70 + i);
        let mut msg = pulsar_sdk::ProducerMessage::from(body.clone());
        msg.key = Some(format!("key-{i}"));
        p.send_and_wait(msg).await.unwrap();
        sent.push(body);
    }
    let mut got = Vec::new();
    let mut from = [0, 0];
    while got.len() < sent.len() {
        let (m, who) = tokio::select! {
            m = c1.recv() => (m.unwrap(), 0),
            m = c2.recv() => (m.unwrap(), 1),
            _ = tokio::time::sleep(Duration::from_secs(10)) => panic!("stalled at {}", got.len()),
        };
        from[who] += 1;
        if who == 0 {
            c1.ack(&m).unwrap()
        } else {
            c2.ack(&m).unwrap()
        }
        got.push(m.payload.to_vec());
    }
    for s in &sent {
        assert_eq!(got.iter().filter(|g| *g == s).count(), 1);
    }
    assert!(
        from[0] > 0 && from[1] > 0,
        "both consumers got keys: {from:?}"
    );
    wait_until("no backlog", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// Exclusive with one pending chunked message at a time and two interleaved messages: the
/// evicted one comes back (redelivery rewinds the subscription) and completes once the
/// A large but compressible payload that compression makes fit in one entry is sent unchunked
/// (upstream too); the consumer must still accept it, although it is bigger than the broker's
/// limit once decompressed (upstream's consumer decompresses it; a chunked message of that
/// size is accepted anyway, up to `max_chunked_message_bytes`).
#[tokio::test]
async fn a_compressed_message_that_fits_but_is_large_uncompressed_arrives() {
    let broker = broker_with_max(100_000).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-compressed-fits");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = client
        .producer(&topic)
        .chunking(true)
        .compression(pulsar_sdk::CompressionType::Lz4)
        .create()
        .await
        .unwrap();
    // 1 MB that compresses far below 100 KB: ten times the broker's limit uncompressed.
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 7) as u8 + b'a').collect();
    let id = p.send_and_wait(body.clone()).await.unwrap();
    assert!(!id.is_chunked(), "compression made it fit");
    let m = within("recv", c.recv())
        .await
        .expect("the message, not an error");
    assert!(m.payload == body);
}

/// `reconsume_later` of a chunked message: the retry producer chunks it (over the broker's
/// limit), it comes back whole from the retry topic, and the original's chunks are all acked.
#[tokio::test]
async fn a_chunked_message_reconsumed_later_comes_back_whole() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-reconsume");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(3))
        .retry_enable(true)
        .subscribe()
        .await
        .unwrap();
    let p = chunking_producer(&client, &topic).await;
    let body = noise(20_000, 110);
    p.send_and_wait(body.clone()).await.unwrap();
    let m = recv(&mut c).await;
    assert!(m.payload == body);
    within(
        "reconsume",
        c.reconsume_later(&m, Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let again = recv(&mut c).await;
    assert!(again.payload == body, "back whole from the retry topic");
    assert_eq!(
        again.properties.get("RECONSUMETIMES").map(String::as_str),
        Some("1")
    );
    c.ack(&again).unwrap();
    wait_until("no backlog on the original", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}

/// A reader started at the latest message inclusively reads the last message even when it is
/// a chunked one (its last entry is the last chunk).
///
/// Known defect, not fixed in the review: `has_message_available` seeks to the id
/// GetLastMessageId answers, the last chunk's entry, so only that chunk comes (an orphan) and
/// the message never arrives. The first chunk's position is not in the answer; a fix needs a
/// design (e.g. seek back by `chunk_id` entries when the chunks are consecutive, or read
/// backwards). Upstream's behaviour here was not checked.
#[tokio::test]
#[ignore = "known defect: latest-inclusive reader seeks to the last chunk of a chunked last message"]
async fn a_reader_from_latest_inclusive_reads_a_chunked_last_message() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-latest-inclusive");
    let p = chunking_producer(&client, &topic).await;
    p.send_and_wait("a").await.unwrap();
    let body = noise(20_000, 120);
    let id = p.send_and_wait(body.clone()).await.unwrap();
    let mut r = client
        .reader(&topic)
        .start_latest()
        .start_inclusive(true)
        .create()
        .await
        .unwrap();
    assert!(within("available", r.has_message_available())
        .await
        .unwrap());
    let m = within("the last message", r.recv()).await.unwrap();
    assert!(m.payload == body, "the whole chunked message");
    assert_eq!(m.id, id);
    assert!(!within("more", r.has_message_available()).await.unwrap());
}

/// With one pending message allowed and blocking sends, chunked messages go one after the
/// other (a chunked message holds one slot, not one per chunk) without a deadlock.
#[tokio::test]
async fn blocking_sends_of_chunked_messages_with_one_pending_slot() {
    let broker = broker_with_max(4096).await;
    let client = client(&broker.service_url());
    let topic = full("review-chunk-blocking");
    let mut c = consumer(&client, &topic, SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let p = client
        .producer(&topic)
        .chunking(true)
        .max_pending_messages(1)
        .block_if_queue_full(true)
        .create()
        .await
        .unwrap();
    let bodies: Vec<Vec<u8>> = (0..4).map(|i| noise(12_000, 130 + i)).collect();
    let mut futures = Vec::new();
    for b in &bodies {
        futures.push(within("send admitted", p.send(b.clone())).await.unwrap());
    }
    for f in futures {
        assert!(within("receipt", f).await.unwrap().is_chunked());
    }
    for b in &bodies {
        assert!(recv(&mut c).await.payload == *b);
    }
}
