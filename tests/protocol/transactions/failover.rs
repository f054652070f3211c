//! The coordinator going away mid-commit, as upstream: the client's
//! `TransactionMetaStoreHandler` re-sends its pending END_TXN once it is connected again
//! (`connectionOpened` → `checkStateAndSendRequest`) and retries on
//! `TransactionCoordinatorNotFound` (`checkIfNeedRetryByError`); `TransactionImpl.commit`
//! ends in ERROR on `TransactionNotFound` / `InvalidTxnStatus`. The coordinator
//! (`TransactionMetadataStoreService.endTransaction`) finishes a resent END_TXN of a
//! transaction it left COMMITTING, and no longer knows one it committed and forgot.

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::{MockCoordinatorCrash, MockError, MockRequest};
use pulsar_sdk::{Error, ProducerMessage, ServerError, SubscriptionType, TransactionState};

use super::support::{consumer, next_text, nothing_for_now, producer, setup};

/// The coordinator crashed after recording COMMITTING, before ending the transaction
/// anywhere: the END_TXN the client sends again on its new connection finishes the commit,
/// which succeeds; the message is delivered once.
#[tokio::test]
async fn a_commit_cut_while_committing_is_finished_by_the_resend() {
    let (broker, client) = setup().await;
    let topic = "txn-failover-committing";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("m").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    let connects = broker.received_of(Type::TcClientConnectRequest).len();
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeEnding);
    support::within("commit", txn.commit()).await.unwrap();
    assert_eq!(txn.state(), TransactionState::Committed);
    let ends = broker.received_of(Type::EndTxn);
    assert_eq!(ends.len(), 2, "the END_TXN and its resend");
    let ids: Vec<_> = ends
        .iter()
        .map(|r| {
            let e = r.command.end_txn.as_ref().unwrap();
            (e.txnid_most_bits, e.txnid_least_bits, e.txn_action)
        })
        .collect();
    assert_eq!(ids[0], ids[1], "the same transaction and action");
    assert!(broker.received_of(Type::TcClientConnectRequest).len() > connects);
    assert_eq!(next_text(&mut c).await, "m");
    nothing_for_now(&mut c).await;
}

/// The coordinator committed (and forgot) the transaction, then went away before
/// answering: the resend is answered `TransactionNotFound`, so the commit fails with it and
/// the transaction is in `Error` (upstream `TransactionImpl.commit`): the client cannot
/// tell the outcome, which here was a commit (the message is delivered, once).
#[tokio::test]
async fn a_commit_whose_answer_was_lost_ends_in_error_with_transaction_not_found() {
    let (broker, client) = setup().await;
    let topic = "txn-failover-answer-lost";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("m").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeAnswer);
    let e = support::within("commit", txn.commit()).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Broker {
                code: ServerError::TransactionNotFound,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_retriable());
    assert_eq!(txn.state(), TransactionState::Error);
    assert_eq!(broker.received_of(Type::EndTxn).len(), 2);
    // What the coordinator decided: committed.
    assert_eq!(next_text(&mut c).await, "m");
    nothing_for_now(&mut c).await;
    // Error is final: no second commit or abort from the client.
    assert!(txn.commit().await.is_err());
    assert!(txn.abort().await.is_err());
}

/// An abort cut the same way is finished by its resend too.
#[tokio::test]
async fn an_abort_cut_while_aborting_is_finished_by_the_resend() {
    let (broker, client) = setup().await;
    let topic = "txn-failover-aborting";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("aborted").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeEnding);
    support::within("abort", txn.abort()).await.unwrap();
    assert_eq!(txn.state(), TransactionState::Aborted);
    p.send_and_wait("plain").await.unwrap();
    assert_eq!(next_text(&mut c).await, "plain");
    nothing_for_now(&mut c).await;
}

/// While the coordinator is not loaded where the client reaches it
/// (`TransactionCoordinatorNotFound`), the commit is retried with backoff within the
/// operation timeout, then succeeds.
#[tokio::test]
async fn a_commit_is_retried_while_the_coordinator_is_not_found() {
    let (broker, client) = setup().await;
    let topic = "txn-failover-tc-not-found";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("m").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    broker.push_error(
        MockError::new(
            MockRequest::EndTxn,
            ServerError::TransactionCoordinatorNotFound,
            "coordinator moving",
        )
        .times(2),
    );
    support::within("commit", txn.commit()).await.unwrap();
    assert_eq!(txn.state(), TransactionState::Committed);
    assert_eq!(broker.consumed_errors().len(), 2);
    assert_eq!(broker.received_of(Type::EndTxn).len(), 3);
    assert_eq!(next_text(&mut c).await, "m");
}

/// Any other refusal of END_TXN is final: not retried, the state stays `Committing` so that
/// the commit may be called again (upstream `checkIfOpenOrCommitting`), and a second commit
/// then succeeds.
#[tokio::test]
async fn a_commit_refused_otherwise_is_not_retried_and_may_be_called_again() {
    let (broker, client) = setup().await;
    let txn = client.transaction().begin().await.unwrap();
    broker.push_error(MockError::new(
        MockRequest::EndTxn,
        ServerError::ServiceNotReady,
        "not now",
    ));
    let e = support::within("commit", txn.commit()).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Broker {
                code: ServerError::ServiceNotReady,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(broker.received_of(Type::EndTxn).len(), 1);
    assert_eq!(txn.state(), TransactionState::Committing);
    support::within("commit again", txn.commit()).await.unwrap();
    assert_eq!(txn.state(), TransactionState::Committed);
}
