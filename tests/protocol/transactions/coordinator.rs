//! Coordinator discovery and the transaction's life: upstream
//! `TransactionCoordinatorClientImpl.startAsync` (the partitions of
//! `transaction_coordinator_assign`), `TransactionMetaStoreHandler` (TC_CLIENT_CONNECT, a
//! broker that refuses or ignores it), `TransactionImpl` (states, use after the end).

use std::time::{Duration, Instant};

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockTransactions;
use pulsar_sdk::{Error, ProducerMessage, ServerError, TransactionError, TransactionState, TxnId};

use super::support::{broker_with, producer, setup, TC_ASSIGN};

/// pulsar-lite ignores TC_CLIENT_CONNECT: `begin` fails with `NoCoordinator` (its source the
/// timeout) after one operation timeout, not later and not never.
#[tokio::test]
async fn a_broker_that_ignores_the_coordinator_fails_begin_after_one_operation_timeout() {
    let broker = broker_with(MockTransactions::Unanswered).await;
    let op_timeout = Duration::from_millis(500);
    let client = support::test_client(&broker.service_url())
        .operation_timeout(op_timeout)
        .enable_transaction(true)
        .build()
        .unwrap();
    let started = Instant::now();
    let e = support::within("begin", client.transaction().begin())
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &e {
        Error::Transaction(TransactionError::NoCoordinator { source }) => {
            assert!(source.to_string().contains("timed out"), "{source}");
        }
        other => panic!("expected NoCoordinator, got {other:?}"),
    }
    assert!(!e.is_retriable());
    assert!(
        took >= op_timeout,
        "failed before the operation timeout: {took:?}"
    );
    assert!(
        took < op_timeout * 4,
        "took {took:?} for a {op_timeout:?} operation timeout"
    );
    assert_eq!(broker.received_of(Type::TcClientConnectRequest).len(), 1);
}

/// A broker with transactions disabled answers NotAllowed (upstream
/// `ServerCnx.checkTransactionEnableAndSendError`): refused at once, with that source.
#[tokio::test]
async fn a_broker_without_a_coordinator_refuses_at_once() {
    let broker = broker_with(MockTransactions::Disabled).await;
    let client = support::test_client(&broker.service_url())
        .enable_transaction(true)
        .build()
        .unwrap();
    let e = support::within("begin", client.transaction().begin())
        .await
        .unwrap_err();
    let Error::Transaction(TransactionError::NoCoordinator { source }) = &e else {
        panic!("expected NoCoordinator, got {e:?}");
    };
    let source = source.downcast_ref::<Error>().expect("the client's error");
    assert!(
        matches!(
            source,
            Error::Broker {
                code: ServerError::NotAllowed,
                ..
            }
        ),
        "{source:?}"
    );
}

/// Without `enable_transaction`, nothing is sent and `begin` says why.
#[tokio::test]
async fn a_client_without_transactions_enabled_refuses() {
    let broker = broker_with(MockTransactions::Enabled).await;
    let client = support::client(&broker.service_url());
    let e = client.transaction().begin().await.unwrap_err();
    assert!(
        matches!(e, Error::Transaction(TransactionError::NotEnabled)),
        "{e:?}"
    );
    assert!(broker.received_of(Type::TcClientConnectRequest).is_empty());
}

/// Two partitions of the assign topic: two coordinators, each connected once, transactions
/// handed out in turn; an id's most bits name its coordinator.
#[tokio::test]
async fn coordinators_are_the_partitions_of_the_assign_topic() {
    let (broker, client) = setup().await;
    broker.set_partitions(TC_ASSIGN, 2);
    let mut coordinators = Vec::new();
    for _ in 0..4 {
        let txn = client.transaction().begin().await.unwrap();
        assert_eq!(txn.state(), TransactionState::Open);
        coordinators.push(txn.id().most_bits());
        txn.commit().await.unwrap();
    }
    assert_eq!(coordinators, vec![0, 1, 0, 1]);
    let mut connected: Vec<u64> = broker
        .received_of(Type::TcClientConnectRequest)
        .iter()
        .map(|r| r.command.tc_client_connect_request.as_ref().unwrap().tc_id)
        .collect();
    connected.sort_unstable();
    assert_eq!(connected, vec![0, 1]);
    let ends = broker.received_of(Type::EndTxn);
    assert_eq!(ends.len(), 4);
}

/// States as upstream `TransactionImpl`: a committed transaction refuses a second commit, an
/// abort and new sends (`InvalidTxnStatusException` on the client); an aborted one a commit.
#[tokio::test]
async fn an_ended_transaction_refuses_further_use() {
    let (_broker, client) = setup().await;
    let p = producer(&client, "ended").await;
    let txn = client.transaction().begin().await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(txn.state(), TransactionState::Committed);
    let invalid = |e: Error, expected: (TxnId, TransactionState)| match e {
        Error::Transaction(TransactionError::InvalidState { txn, state }) => {
            assert_eq!((txn, state), expected);
        }
        other => panic!("expected InvalidState, got {other:?}"),
    };
    let committed = (txn.id(), TransactionState::Committed);
    invalid(txn.commit().await.unwrap_err(), committed);
    invalid(txn.abort().await.unwrap_err(), committed);
    let sent = p.send(ProducerMessage::new("late").transaction(&txn)).await;
    invalid(sent.unwrap_err(), committed);

    let aborted = client.transaction().begin().await.unwrap();
    aborted.abort().await.unwrap();
    assert_eq!(aborted.state(), TransactionState::Aborted);
    invalid(
        aborted.commit().await.unwrap_err(),
        (aborted.id(), TransactionState::Aborted),
    );
}
