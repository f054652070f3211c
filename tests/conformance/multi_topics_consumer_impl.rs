//! Upstream `MultiTopicsConsumerImpl`: the behaviours the ledger (`docs/conformance.md`) records
//! for it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, InitialPosition, SubscriptionType};

/// Java `MultiTopicsConsumerImpl`: one topic reaching its end is no error (its consumer only
/// sets its flag); `hasReachedEndOfTopic` is true once every topic's consumer has reached it.
#[tokio::test]
async fn one_topic_ending_is_no_error_and_the_end_is_reached_once_all_have() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let (a, b) = (full("conf-multi-end-a"), full("conf-multi-end-b"));
    broker.create_topic(&a);
    broker.create_topic(&b);
    let mut consumer = client
        .new_consumer()
        .topics([a.clone(), b.clone()])
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    // A second consumer of a's subscription, on the same connection: the broker tells both in
    // one go, the multi-topic consumer's first, so once the witness knows, a's notice for the
    // multi-topic consumer has arrived too (and its task handles frames before its ops).
    let witness = client
        .consumer(&a)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    broker.terminate_topic(&a).unwrap();
    wait_until("a's end reached the witness", || {
        witness.has_reached_end_of_topic()
    })
    .await;
    assert!(!consumer.has_reached_end_of_topic(), "b has not ended");
    let pb = unbatched_producer(&client, &b).await;
    publish(&pb, "b", 1).await;
    let m = within("recv", consumer.recv()).await.unwrap();
    assert_eq!(m.topic.to_string(), b);
    consumer.ack(&m).unwrap();
    assert!(!consumer.state().is_terminal());
    // b ends too: now the consumer has reached the end, reported once by recv.
    drop(pb);
    broker.terminate_topic(&b).unwrap();
    let end = within("the end", consumer.recv()).await;
    assert!(matches!(end, Err(Error::TopicTerminated { .. })), "{end:?}");
    assert!(consumer.has_reached_end_of_topic());
    within("close", consumer.close()).await.unwrap();
    // Nothing else was reported: no error for a's end alone.
    let after = within("after the close", consumer.recv()).await;
    assert!(
        matches!(after, Err(Error::Closed)),
        "after the close: {after:?}"
    );
}
