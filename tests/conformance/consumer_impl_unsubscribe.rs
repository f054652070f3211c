//! Upstream `ConsumerImpl.unsubscribeAsync` and the grouped acks made before it.

use crate::common::{client, full, publish, unbatched_producer, wait_until, within};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, InitialPosition, SubscriptionType};
use std::time::Duration;

/// Java `ConsumerImpl.unsubscribeAsync` sends UNSUBSCRIBE without flushing its
/// acknowledgments grouping tracker: `closeConsumerTasks`, which flushes it, runs only once
/// the unsubscribe succeeded. Refused (here: another consumer is attached to the shared
/// subscription, upstream's `ConsumerBusy`), the consumer is Ready again, and an ack grouped
/// before it goes with the group's next flush (here the close's, as Java's `closeAsync`
/// flushes the tracker): late, never lost. The group's time is an hour, so nothing but the
/// refusal itself could have flushed it before the first check.
#[tokio::test]
async fn an_ack_grouped_before_a_refused_unsubscribe_goes_at_the_group_flush() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("conf-ack-then-unsubscribe");
    let group = Duration::from_secs(3600);
    let shared = || {
        client
            .consumer(&topic)
            .subscription("s")
            .subscription_type(SubscriptionType::Shared)
            .initial_position(InitialPosition::Earliest)
            .ack_group_time(group)
            .receiver_queue_size(1)
            .subscribe()
    };
    let mut first = shared().await.unwrap();
    let _second = shared().await.unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    publish(&producer, "m", 1).await;
    let message = within("a message", first.recv()).await.unwrap();
    first.ack(&message).unwrap();
    let refused = within("unsubscribe", first.unsubscribe()).await;
    assert!(
        matches!(refused, Err(Error::Broker { .. })),
        "another consumer is attached: {refused:?}"
    );
    // Not flushed by the refusal either: the ack waits for its group.
    assert!(broker.received_of(Type::Ack).is_empty());
    // Still a working consumer: its close is answered, and flushes the group first.
    within("close", first.close()).await.unwrap();
    let ack = broker
        .wait_for_command(Type::Ack, Duration::from_secs(30))
        .await
        .expect("the ack made before the refused unsubscribe reaches the broker");
    let log = broker.received();
    let at = |ty: Type| log.iter().position(|r| r.is(ty));
    let (unsubscribe, acked, closed) = (
        at(Type::Unsubscribe).unwrap(),
        at(Type::Ack).unwrap(),
        at(Type::CloseConsumer).unwrap(),
    );
    assert!(
        unsubscribe < acked && acked < closed,
        "the UNSUBSCRIBE first, the grouped ack at the flush, then the close: \
         {unsubscribe} {acked} {closed}"
    );
    assert_eq!(ack.command.ack.unwrap().message_id.len(), 1);
    wait_until("the subscription's backlog empty", || {
        broker.subscription_backlog(&topic, "s") == 0
    })
    .await;
}
