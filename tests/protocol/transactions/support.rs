//! What the transaction tests share: a mock broker with a coordinator and a client with
//! transactions on.

use std::time::Duration;

use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTransactions};
use pulsar_sdk::{Client, Consumer, Producer, SubscriptionType};

/// The topic whose partitions are the coordinators (upstream
/// `TopicName.TRANSACTION_COORDINATOR_ASSIGN`).
pub(super) const TC_ASSIGN: &str = "persistent://pulsar/system/transaction_coordinator_assign";

/// A broker with `transactions`.
pub(super) async fn broker_with(transactions: MockTransactions) -> MockBroker {
    MockBroker::start_with(MockBrokerConfig {
        transactions,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A broker with a coordinator, and a client with transactions on.
pub(super) async fn setup() -> (MockBroker, Client) {
    let broker = broker_with(MockTransactions::Enabled).await;
    let client = support::test_client(&broker.service_url())
        .enable_transaction(true)
        .build()
        .unwrap();
    (broker, client)
}

/// An unbatched producer of `topic`.
pub(super) async fn producer(client: &Client, topic: &str) -> Producer {
    support::unbatched_producer(client, topic).await
}

/// A consumer of `topic` on subscription `sub` of type `ty`, from the earliest message.
pub(super) async fn consumer(
    client: &Client,
    topic: &str,
    sub: &str,
    ty: SubscriptionType,
) -> Consumer {
    client
        .consumer(topic)
        .subscription(sub)
        .subscription_type(ty)
        .initial_position(pulsar_sdk::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap()
}

/// The payload of the consumer's next message, as text.
pub(super) async fn next_text(c: &mut Consumer) -> String {
    let m = support::recv(c).await;
    String::from_utf8(m.payload.to_vec()).unwrap()
}

/// Asserts that `c` receives nothing for a while (what must not be delivered yet).
pub(super) async fn nothing_for_now(c: &mut Consumer) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(300), c.recv()).await {
        panic!("expected nothing yet, received {m:?}");
    }
}
