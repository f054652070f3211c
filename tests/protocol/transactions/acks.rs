//! Acknowledgements in a transaction: upstream `ConsumerBase.doAcknowledgeWithTxn`
//! (AddSubscriptionToTxn, the txn id on ACK, the ack response awaited) and the broker's
//! `PendingAckHandleImpl` (pending until commit, dropped on abort, conflicts).

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::{
    Error, ProducerMessage, ServerError, SubscriptionType, TransactionError, TransactionState,
};

use super::support::{consumer, next_text, producer, setup};

fn conflict(e: &Error) -> bool {
    matches!(
        e,
        Error::Broker {
            code: ServerError::TransactionConflict,
            ..
        }
    )
}

/// An acknowledgement in a transaction counts only once the transaction commits.
#[tokio::test]
async fn a_transactional_ack_is_pending_until_commit() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-commit";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 2).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let m0 = support::recv(&mut c).await;
    let txn = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&m0, &txn).await.unwrap();
    let ack = broker.received_of(Type::Ack);
    let ack = ack.last().unwrap().command.ack.as_ref().unwrap();
    assert_eq!(ack.txnid_least_bits, Some(txn.id().least_bits()));
    assert!(
        ack.request_id.is_some(),
        "a transactional ack asks for its response"
    );
    let subs = broker.received_of(Type::AddSubscriptionToTxn);
    assert_eq!(subs.len(), 1);
    assert_eq!(broker.subscription_backlog(&full, "s"), 2);
    txn.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 1);
}

/// A message pending in one transaction cannot be acknowledged in another
/// (`TransactionConflict`, not retriable); that transaction's commit then fails and aborts.
#[tokio::test]
async fn acking_a_message_pending_in_another_transaction_conflicts() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-conflict";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 1).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let m0 = support::recv(&mut c).await;
    let first = client.transaction().begin().await.unwrap();
    let second = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&m0, &first).await.unwrap();
    let e = c.ack_with_transaction(&m0, &second).await.unwrap_err();
    assert!(conflict(&e), "{e:?}");
    assert!(!e.is_retriable());
    let e = second.commit().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Transaction(TransactionError::OperationFailed { .. })
        ),
        "{e:?}"
    );
    assert_eq!(second.state(), TransactionState::Aborted);
    first.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 0);
    // Acknowledged for good: acking it again in a transaction conflicts too.
    let third = client.transaction().begin().await.unwrap();
    let e = c.ack_with_transaction(&m0, &third).await.unwrap_err();
    assert!(conflict(&e), "{e:?}");
}

/// An abort drops the transaction's acknowledgements and the broker redelivers the messages
/// (upstream `PendingAckHandleImpl.internalAbortTxn`): still unacknowledged, received again.
/// While the acknowledgement is pending, a consumer leaving does not give the message back.
#[tokio::test]
async fn an_abort_drops_the_ack_and_the_message_comes_back() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-abort";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 2).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let m0 = support::recv(&mut c).await;
    assert_eq!(&m0.payload[..], b"m-0");
    let txn = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&m0, &txn).await.unwrap();
    // Another consumer joins and the first leaves: m-1 (plainly unacknowledged) goes to the
    // newcomer, m-0 (pending in the transaction) does not.
    let mut other = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    c.close().await.unwrap();
    assert_eq!(next_text(&mut other).await, "m-1");
    super::support::nothing_for_now(&mut other).await;
    txn.abort().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 2);
    assert_eq!(next_text(&mut other).await, "m-0");
}

/// Cumulative acknowledgements in transactions: one transaction at a time holds the
/// subscription's (another conflicts); committed, everything up to it is acknowledged.
#[tokio::test]
async fn cumulative_acks_in_transactions() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-cumulative";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 3).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Exclusive).await;
    let _m0 = support::recv(&mut c).await;
    let m1 = support::recv(&mut c).await;
    let first = client.transaction().begin().await.unwrap();
    let second = client.transaction().begin().await.unwrap();
    c.ack_cumulative_with_transaction(&m1, &first)
        .await
        .unwrap();
    let e = c
        .ack_cumulative_with_transaction(&m1, &second)
        .await
        .unwrap_err();
    assert!(conflict(&e), "{e:?}");
    assert_eq!(broker.subscription_backlog(&full, "s"), 3);
    first.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 1);
}

/// Consume, transform, produce and acknowledge in one transaction per input: each input is
/// acknowledged and each output visible exactly once, together.
#[tokio::test]
async fn consume_transform_produce_leaves_one_output_per_input() {
    let (broker, client) = setup().await;
    let input = producer(&client, "txn-in").await;
    support::publish(&input, "in", 5).await;
    let mut source = consumer(&client, "txn-in", "pipeline", SubscriptionType::Shared).await;
    let mut sink = consumer(&client, "txn-out", "check", SubscriptionType::Shared).await;
    let output = producer(&client, "txn-out").await;
    for _ in 0..5 {
        let msg = support::recv(&mut source).await;
        let txn = client.transaction().begin().await.unwrap();
        let text = String::from_utf8(msg.payload.to_vec())
            .unwrap()
            .to_uppercase();
        // The receipt is not awaited: the commit waits for it.
        let _receipt = output
            .send(ProducerMessage::new(text).transaction(&txn))
            .await
            .unwrap();
        source.ack_with_transaction(&msg, &txn).await.unwrap();
        txn.commit().await.unwrap();
    }
    let mut out = Vec::new();
    for _ in 0..5 {
        out.push(next_text(&mut sink).await);
    }
    assert_eq!(out, (0..5).map(|i| format!("IN-{i}")).collect::<Vec<_>>());
    assert_eq!(
        broker.subscription_backlog(&support::full("txn-in"), "pipeline"),
        0
    );
    super::support::nothing_for_now(&mut sink).await;
}

/// The acker acknowledges in a transaction from any task, as the consumer does
/// (`Acker::ack_with_transaction`); once the consumer is closed it refuses before anything
/// is sent, and the transaction stays usable.
#[tokio::test]
async fn an_acker_acknowledges_in_a_transaction_from_another_task() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-acker";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 3).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Exclusive).await;
    let acker = c.acker();
    let m0 = support::recv(&mut c).await;
    let txn = client.transaction().begin().await.unwrap();
    let worker = {
        let (acker, txn) = (acker.clone(), txn.clone());
        tokio::spawn(async move { acker.ack_with_transaction(&m0, &txn).await })
    };
    worker.await.unwrap().unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 3);
    txn.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 2);

    let _m1 = support::recv(&mut c).await;
    let m2 = support::recv(&mut c).await;
    let cumulative = client.transaction().begin().await.unwrap();
    acker
        .ack_cumulative_with_transaction(&m2, &cumulative)
        .await
        .unwrap();
    cumulative.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 0);

    let late = client.transaction().begin().await.unwrap();
    c.close().await.unwrap();
    let acks = broker.received_of(Type::Ack).len();
    let e = acker.ack_with_transaction(&m2, &late).await.unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
    assert_eq!(broker.received_of(Type::Ack).len(), acks);
    late.commit().await.unwrap();
}

/// A cumulative acknowledgement in a transaction that aborts is dropped and the broker
/// redelivers what is unacknowledged (upstream `PendingAckHandleImpl.internalAbortTxn`:
/// `cumulativeAckOfTransaction` cleared, `redeliverUnacknowledgedMessages(consumer)`): the
/// messages come back, and another transaction may then acknowledge cumulatively, even at an
/// earlier position. Within one transaction, a cumulative ack at or before the one it holds
/// conflicts (`internalCumulativeAcknowledgeMessage`).
#[tokio::test]
async fn an_aborted_cumulative_ack_is_cleared_and_the_messages_come_back() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-cumulative-abort";
    let full = support::full(topic);
    let p = producer(&client, topic).await;
    support::publish(&p, "m", 3).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Exclusive).await;
    let m0 = support::recv(&mut c).await;
    let m1 = support::recv(&mut c).await;
    let aborted = client.transaction().begin().await.unwrap();
    c.ack_cumulative_with_transaction(&m1, &aborted)
        .await
        .unwrap();
    // Not again at or before what this transaction holds.
    let e = c
        .ack_cumulative_with_transaction(&m0, &aborted)
        .await
        .unwrap_err();
    assert!(conflict(&e), "{e:?}");
    // (That failed ack makes the commit abort; abort it directly.)
    aborted.abort().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 3);
    // The acknowledged messages come back.
    let mut again = Vec::new();
    while !(again.contains(&"m-0".to_owned()) && again.contains(&"m-1".to_owned())) {
        assert!(again.len() < 6, "m-0 and m-1 not received again: {again:?}");
        again.push(next_text(&mut c).await);
    }
    // The subscription's pending cumulative ack is gone: another transaction takes it, at
    // an earlier position than the aborted one held.
    let next = client.transaction().begin().await.unwrap();
    c.ack_cumulative_with_transaction(&m0, &next).await.unwrap();
    next.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 2);
}

/// After a cluster switch (PIP-121), an acknowledgement in a transaction of a message received
/// on the cluster left is never sent to the new cluster, where its id names another message
/// (as a plain ack is not): the call fails, and so does the commit (it aborts), so the
/// transaction's outputs are not committed without its input acknowledged.
#[tokio::test]
async fn a_transactional_ack_of_a_message_from_the_cluster_left_is_not_sent() {
    let a = super::support::broker_with(pulsar_sdk::mock::MockTransactions::Enabled).await;
    let b = super::support::broker_with(pulsar_sdk::mock::MockTransactions::Enabled).await;
    let client = support::test_client(&a.service_url())
        .enable_transaction(true)
        .build()
        .unwrap();
    let topic = "txn-ack-cluster-left";
    let p = producer(&client, topic).await;
    support::publish(&p, "a", 1).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let from_a = support::recv(&mut c).await;

    client
        .update_service_info(pulsar_sdk::ServiceInfo::new(&b.service_url()).unwrap())
        .unwrap();
    b.wait_for_commands(Type::Subscribe, 1, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let txn = client.transaction().begin().await.unwrap();
    let e = c.ack_with_transaction(&from_a, &txn).await.unwrap_err();
    assert!(matches!(e, Error::InvalidOperation(_)), "{e:?}");
    assert!(b.received_of(Type::Ack).is_empty(), "nothing acked on b");
    assert!(b.received_of(Type::AddSubscriptionToTxn).is_empty());
    let e = txn.commit().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Transaction(TransactionError::OperationFailed { .. })
        ),
        "{e:?}"
    );
    assert_eq!(txn.state(), TransactionState::Aborted);
}
