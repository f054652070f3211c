//! Review of the consumer's hot path (issue #18): one queue item per delivered entry, handed
//! out one message at a time, and acks gathered in a per-partition buffer. These check the
//! behaviours the rewrite must keep, on entries (batches) partly taken when something happens.

use common::{client, publish_batch, recv};
use support as common;

use std::time::Duration;

use pulsar_sdk::mock::wire::{base_command::Type, command_ack::AckType};
use pulsar_sdk::mock::MockBroker;

const WAIT: Duration = Duration::from_secs(10);

async fn eventually(what: &str, check: impl Fn() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not after {WAIT:?}"));
}

/// A seek while a batch is partly handed out: the rest of that batch (queued before the seek)
/// is never handed out after it; the replay starts at the seek position.
#[tokio::test]
async fn a_seek_in_the_middle_of_a_batch_drops_the_rest_of_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "review-seek-mid-batch";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let ids = publish_batch(&client, topic, 5).await;
    for id in &ids[..2] {
        assert_eq!(recv(&mut consumer).await.id, *id);
    }
    tokio::time::timeout(WAIT, consumer.seek(ids[0]))
        .await
        .unwrap()
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            recv(&mut consumer).await.id,
            *id,
            "message {i} after the seek"
        );
    }
}

/// A reader (non-durable) whose connection drops while a batch is partly handed out resumes
/// right after the last message it handed out: no message twice, none skipped.
#[tokio::test]
async fn a_reader_reconnecting_in_the_middle_of_a_batch_resumes_after_the_last_one_taken() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "review-reader-mid-batch";
    let ids = publish_batch(&client, topic, 5).await;
    let mut reader = client
        .reader(topic)
        .start_message_id(pulsar_sdk::MessageId::EARLIEST)
        .create()
        .await
        .unwrap();
    for id in &ids[..2] {
        let m = tokio::time::timeout(WAIT, reader.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.id, *id);
    }
    let subscribes = broker.received_of(Type::Subscribe).len();
    broker.drop_all_connections();
    eventually("re-subscribed", || {
        broker.received_of(Type::Subscribe).len() > subscribes
    })
    .await;
    for (i, id) in ids.iter().enumerate().skip(2) {
        let m = tokio::time::timeout(WAIT, reader.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.id, *id, "message {i} after the reconnect");
    }
}

/// Acks made just before close reach the broker before the CloseConsumer (close flushes
/// them, like upstream's `closeAsync`), even with a long ack group time.
#[tokio::test]
async fn acks_made_right_before_close_reach_the_broker_before_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "review-ack-then-close";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .ack_group_time(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    let ids = publish_batch(&client, topic, 4).await;
    for id in &ids {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        consumer.ack(&m).unwrap();
    }
    tokio::time::timeout(WAIT, consumer.close())
        .await
        .unwrap()
        .unwrap();
    let seq: Vec<_> = broker
        .received()
        .into_iter()
        .filter(|r| matches!(r.command.r#type(), Type::Ack | Type::CloseConsumer))
        .collect();
    let first_close = seq
        .iter()
        .position(|r| r.command.r#type() == Type::CloseConsumer)
        .expect("a CloseConsumer");
    let acked: Vec<_> = seq[..first_close]
        .iter()
        .filter_map(|r| r.command.ack.clone())
        .filter(|a| a.ack_type() == AckType::Individual)
        .flat_map(|a| a.message_id)
        .map(|m| m.entry_id)
        .collect();
    assert_eq!(
        acked,
        vec![ids[0].entry_id],
        "the batch's entry, once, before close"
    );
    assert_eq!(broker.subscription_backlog(topic, "s"), 0);
}

/// Flow permits count each message of a batch when the application takes it: with a queue of
/// 10, the refill (half of it) goes out once the fifth message of a batch of 10 is taken.
#[tokio::test]
async fn permits_of_a_batch_refill_as_its_messages_are_taken() {
    let broker = MockBroker::start().await.unwrap();
    // A byte budget that holds the queue of maximum-size messages: the first FLOW is all of it.
    let client = common::test_client(&broker.service_url())
        .memory_limit(128 * 1024 * 1024)
        .build()
        .unwrap();
    let topic = "review-flow-batch";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .receiver_queue_size(10)
        .subscribe()
        .await
        .unwrap();
    let ids = publish_batch(&client, topic, 10).await;
    let flows = || {
        broker
            .received_of(Type::Flow)
            .into_iter()
            .map(|r| r.command.flow.unwrap().message_permits)
            .collect::<Vec<_>>()
    };
    for id in &ids[..4] {
        assert_eq!(recv(&mut consumer).await.id, *id);
    }
    assert_eq!(flows(), vec![10], "4 taken: no refill yet");
    assert_eq!(recv(&mut consumer).await.id, ids[4]);
    eventually("refill of 5", || flows() == vec![10, 5]).await;
    for id in &ids[5..] {
        assert_eq!(recv(&mut consumer).await.id, *id);
    }
    eventually("second refill of 5", || flows() == vec![10, 5, 5]).await;
}

/// Acks made before a seek reach the broker before the Seek (the seek flushes them, like
/// upstream), even with a long ack group time and the acks still in the handle's buffer.
#[tokio::test]
async fn acks_made_right_before_a_seek_reach_the_broker_before_it() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "review-ack-then-seek";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .ack_group_time(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    let producer = common::unbatched_producer(&client, topic).await;
    let ids = common::publish(&producer, "m", 4).await;
    for id in &ids {
        let m = recv(&mut consumer).await;
        assert_eq!(m.id, *id);
        consumer.ack(&m).unwrap();
    }
    tokio::time::timeout(WAIT, consumer.seek(ids[3]))
        .await
        .unwrap()
        .unwrap();
    let seq: Vec<_> = broker
        .received()
        .into_iter()
        .filter(|r| matches!(r.command.r#type(), Type::Ack | Type::Seek))
        .collect();
    let seek = seq
        .iter()
        .position(|r| r.command.r#type() == Type::Seek)
        .expect("a Seek");
    let mut acked: Vec<_> = seq[..seek]
        .iter()
        .filter_map(|r| r.command.ack.clone())
        .flat_map(|a| a.message_id)
        .map(|m| m.entry_id)
        .collect();
    acked.sort_unstable();
    let want: Vec<_> = ids.iter().map(|i| i.entry_id).collect();
    assert_eq!(acked, want, "every ack, once, before the seek");
}

/// A pattern consumer's topic removed while one of its batches is partly handed out: the rest
/// of that batch is not handed out (upstream drops a removed topic's queued messages).
/// (With the mock, a forced delete also disconnects the consumer, so the epoch check drops
/// them too: this passes even without the handle's `removed` flag; it guards the outcome.)
#[tokio::test]
async fn a_removed_topics_partly_taken_batch_is_not_handed_out() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let a = "persistent://public/default/rm-orders-a";
    let b = "persistent://public/default/rm-orders-b";
    broker.create_topic(a);
    broker.create_topic(b);
    let mut consumer = client
        .pattern_consumer("persistent://public/default/rm-orders-.*")
        .subscription("s")
        .subscription_type(pulsar_sdk::SubscriptionType::Shared)
        .initial_position(pulsar_sdk::InitialPosition::Earliest)
        .pattern_auto_discovery_period(Duration::from_secs(3600))
        .subscribe()
        .await
        .unwrap();
    let mut changes = consumer.topic_updates();
    eventually("a watcher", || broker.topic_list_watchers().len() == 1).await;
    let ids = publish_batch(&client, a, 5).await;
    let first = recv(&mut consumer).await;
    assert_eq!(first.id, ids[0]);
    broker.delete_topic(a, true).unwrap();
    let c = tokio::time::timeout(WAIT, changes.next_change())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.removed.len(), 1, "{c:?}");
    let p = common::unbatched_producer(&client, b).await;
    p.send_and_wait("after".to_string()).await.unwrap();
    let m = recv(&mut consumer).await;
    assert_eq!(m.topic.to_string(), b, "got {:?} of {}", m.id, m.topic);
    assert_eq!(m.payload_str(), Some("after"));
}
