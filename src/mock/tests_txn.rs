//! The mock's transaction coordinator against a raw client: the END_TXN phases of upstream
//! `TransactionMetadataStoreService.endTransaction` and the recovery of
//! `TransactionRecoverTrackerImpl`, which the real client never drives into (it never sends
//! the other action once committing).

use std::time::Duration;

use super::tests_support::{metadata, Client};
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

/// SEND in transaction `id` (no receipt awaited).
async fn send_in(c: &mut Client, producer_id: u64, sequence_id: u64, id: (u64, u64)) {
    let cmd = wire::BaseCommand {
        send: Some(wire::CommandSend {
            producer_id,
            sequence_id,
            txnid_most_bits: Some(id.0),
            txnid_least_bits: Some(id.1),
            ..Default::default()
        }),
        ..command(Type::Send)
    };
    let meta = metadata("p", sequence_id, None);
    c.raw
        .send_with_payload(cmd, meta, bytes::Bytes::from_static(b"in-txn"))
        .await;
}

/// A SEND in a transaction to a partition never registered with it is stored (upstream's
/// transaction buffer checks nothing else) and holds the topic's max read position; the
/// coordinator never tells that partition the transaction ended. Once the coordinator's low
/// water mark passes the transaction, its entries are aborted (upstream
/// `TopicTransactionBuffer.handleLowWaterMark`) and what was published after them is
/// dispatched. A SEND at or below the low water mark is refused (NotAllowed), and the
/// coordinator keeps nothing of an ended transaction.
#[tokio::test]
async fn a_send_never_registered_is_aborted_once_the_low_water_mark_passes_it() {
    let broker = broker().await;
    let mut c = Client::connect(&broker).await;
    let t0 = new_txn(&mut c, Duration::from_secs(60)).await;
    let t1 = new_txn(&mut c, Duration::from_secs(60)).await;
    let topic = "persistent://public/default/t";
    c.producer(topic, 1).await;
    send_in(&mut c, 1, 0, t0).await;
    c.raw.expect(Type::SendReceipt).await;
    c.publish(1, metadata("p", 1, None), b"plain").await;
    c.subscribe(
        topic,
        "s",
        super::wire::command_subscribe::SubType::Exclusive,
        7,
    )
    .await;
    c.flow(7, 10).await;
    c.quiet().await;

    // t1 ended: t0 is still open, the low water mark does not reach it.
    assert_eq!(end(&mut c, t1, true).await, None);
    c.quiet().await;
    // t0 ended without the partition knowing: its entry is aborted, the rest delivered.
    assert_eq!(end(&mut c, t0, true).await, None);
    let m = tokio::time::timeout(Duration::from_secs(5), c.message())
        .await
        .expect("the message after the pinned entry");
    assert_eq!(&m.payload[..], b"plain");
    assert_eq!(m.entry(), 1);

    send_in(&mut c, 1, 2, t0).await;
    let refused = c.raw.expect(Type::SendError).await.send_error.unwrap();
    assert_eq!(
        ServerError::from_code(refused.error),
        ServerError::NotAllowed,
        "{refused:?}"
    );
    let state = super::lock(&broker.shared().state);
    assert!(state.coordinator.open.is_empty());
    assert_eq!(state.coordinator.low_water_mark(0), Some(1));
}

/// An ACK in a transaction on a subscription never registered with it is pending (upstream's
/// pending-ack handle checks nothing else) and holds its entry; the coordinator never tells
/// that subscription the transaction ended. Once the low water mark passes it, the
/// acknowledgement is aborted (upstream `PendingAckHandleImpl.handleLowWaterMark`) and the
/// message delivered again.
#[tokio::test]
async fn an_ack_never_registered_is_aborted_once_the_low_water_mark_passes_it() {
    let broker = broker().await;
    let mut c = Client::connect(&broker).await;
    let t0 = new_txn(&mut c, Duration::from_secs(60)).await;
    let topic = "persistent://public/default/t";
    c.producer(topic, 1).await;
    c.publish(1, metadata("p", 0, None), b"m").await;
    c.subscribe(
        topic,
        "s",
        super::wire::command_subscribe::SubType::Shared,
        7,
    )
    .await;
    c.flow(7, 10).await;
    let m = c.message().await;
    let rid = c.request_id();
    c.raw
        .send(wire::BaseCommand {
            ack: Some(wire::CommandAck {
                consumer_id: 7,
                ack_type: wire::command_ack::AckType::Individual as i32,
                message_id: vec![m.message.message_id.clone()],
                txnid_most_bits: Some(t0.0),
                txnid_least_bits: Some(t0.1),
                request_id: Some(rid),
                ..Default::default()
            }),
            ..command(Type::Ack)
        })
        .await;
    let answer = c.raw.expect(Type::AckResponse).await.ack_response.unwrap();
    assert_eq!(answer.error, None);

    assert_eq!(end(&mut c, t0, true).await, None);
    let again = tokio::time::timeout(Duration::from_secs(5), c.message())
        .await
        .expect("redelivered once the acknowledgement is aborted");
    assert_eq!(again.entry(), m.entry());
    assert_eq!(broker.subscription_backlog(topic, "s"), 1);
}
