//! The mock's transaction coordinator against a raw client: the END_TXN phases of upstream
//! `TransactionMetadataStoreService.endTransaction` and the recovery of
//! `TransactionRecoverTrackerImpl`, which the real client never drives into (it never sends
//! the other action once committing).

use std::time::Duration;

use super::tests_support::Client;
use super::wire::{self, base_command::Type};
use super::{MockBroker, MockBrokerConfig, MockCoordinatorCrash, MockTransactions};
use crate::error::ServerError;

async fn broker() -> MockBroker {
    MockBroker::start_with(MockBrokerConfig {
        transactions: MockTransactions::Enabled,
        ..Default::default()
    })
    .await
    .unwrap()
}

fn command(ty: Type) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

/// NEW_TXN with a timeout; the transaction's id.
async fn new_txn(c: &mut Client, ttl: Duration) -> (u64, u64) {
    let request_id = c.request_id();
    let answer = c
        .request(wire::BaseCommand {
            new_txn: Some(wire::CommandNewTxn {
                request_id,
                txn_ttl_seconds: Some(ttl.as_millis() as u64),
                tc_id: Some(0),
                ..Default::default()
            }),
            ..command(Type::NewTxn)
        })
        .await;
    let r = answer.new_txn_response.unwrap();
    assert_eq!(r.error, None);
    (r.txnid_most_bits(), r.txnid_least_bits())
}

fn end_txn(request_id: u64, id: (u64, u64), commit: bool) -> wire::BaseCommand {
    let action = if commit {
        wire::TxnAction::Commit
    } else {
        wire::TxnAction::Abort
    };
    wire::BaseCommand {
        end_txn: Some(wire::CommandEndTxn {
            request_id,
            txnid_most_bits: Some(id.0),
            txnid_least_bits: Some(id.1),
            txn_action: Some(action as i32),
            ..Default::default()
        }),
        ..command(Type::EndTxn)
    }
}

/// END_TXN's error code, if any.
async fn end(c: &mut Client, id: (u64, u64), commit: bool) -> Option<ServerError> {
    let rid = c.request_id();
    let answer = c.request(end_txn(rid, id, commit)).await;
    let r = answer.end_txn_response.unwrap();
    assert_eq!(r.request_id, rid);
    r.error.map(ServerError::from_code)
}

async fn add_partition(c: &mut Client, id: (u64, u64)) -> Option<ServerError> {
    let request_id = c.request_id();
    let answer = c
        .request(wire::BaseCommand {
            add_partition_to_txn: Some(wire::CommandAddPartitionToTxn {
                request_id,
                txnid_most_bits: Some(id.0),
                txnid_least_bits: Some(id.1),
                partitions: vec!["persistent://public/default/t".into()],
                ..Default::default()
            }),
            ..command(Type::AddPartitionToTxn)
        })
        .await;
    answer
        .add_partition_to_txn_response
        .unwrap()
        .error
        .map(ServerError::from_code)
}

/// A transaction left COMMITTING by a crash: its timeout does not abort it, an ABORT and new
/// partitions are refused `InvalidTxnStatus`, and a restart finishes it (the coordinator
/// forgets it: a later END_TXN is `TransactionNotFound`).
#[tokio::test]
async fn a_transaction_left_committing_is_not_aborted_and_a_restart_finishes_it() {
    let broker = broker().await;
    let mut c = Client::connect(&broker).await;
    let id = new_txn(&mut c, Duration::from_millis(100)).await;
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeEnding);
    let rid = c.request_id();
    c.raw.send(end_txn(rid, id, true)).await;
    assert!(c.raw.is_closed().await, "the crash closes the connection");

    // Past its timeout: still committing, not aborted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = Client::connect(&broker).await;
    assert_eq!(
        end(&mut c, id, false).await,
        Some(ServerError::InvalidTxnStatus)
    );
    assert_eq!(
        add_partition(&mut c, id).await,
        Some(ServerError::InvalidTxnStatus)
    );

    broker.restart().await.unwrap();
    let mut c = Client::connect(&broker).await;
    assert_eq!(
        end(&mut c, id, true).await,
        Some(ServerError::TransactionNotFound)
    );
}

/// A resend of the same action finishes a transaction left COMMITTING; after the answer
/// was lost instead, the resend finds it forgotten.
#[tokio::test]
async fn a_resend_finishes_a_committing_transaction_and_misses_an_ended_one() {
    let broker = broker().await;
    let mut c = Client::connect(&broker).await;
    let committing = new_txn(&mut c, Duration::from_secs(60)).await;
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeEnding);
    let rid = c.request_id();
    c.raw.send(end_txn(rid, committing, true)).await;
    assert!(c.raw.is_closed().await);
    let mut c = Client::connect(&broker).await;
    assert_eq!(end(&mut c, committing, true).await, None);
    assert_eq!(
        end(&mut c, committing, true).await,
        Some(ServerError::TransactionNotFound)
    );

    let answered = new_txn(&mut c, Duration::from_secs(60)).await;
    broker.crash_coordinator_on_next_end(MockCoordinatorCrash::BeforeAnswer);
    let rid = c.request_id();
    c.raw.send(end_txn(rid, answered, false)).await;
    assert!(c.raw.is_closed().await);
    let mut c = Client::connect(&broker).await;
    assert_eq!(
        end(&mut c, answered, false).await,
        Some(ServerError::TransactionNotFound)
    );
}
