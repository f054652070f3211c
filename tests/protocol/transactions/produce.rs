//! Sends in a transaction, and the broker's transaction buffer: upstream
//! `ProducerImpl.internalSendWithTxnAsync` (AddPartitionToTxn once per partition, the txn id
//! on SEND), `TransactionImpl.commit` (waits for the sends; a failed one aborts instead), and
//! `TopicTransactionBuffer` (nothing past an open transaction's first entry is dispatched; an
//! aborted transaction's entries never are; the coordinator aborts a timed-out one).

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::{Error, ProducerMessage, SubscriptionType, TransactionError, TransactionState};

use super::support::{consumer, next_text, nothing_for_now, producer, setup};

/// Messages of an open transaction are not delivered (nor anything published after them)
/// until it commits; then in publish order.
#[tokio::test]
async fn uncommitted_messages_wait_for_the_commit() {
    let (_broker, client) = setup().await;
    let topic = "txn-commit";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("in-txn").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    p.send_and_wait("after").await.unwrap();
    nothing_for_now(&mut c).await;
    txn.commit().await.unwrap();
    assert_eq!(txn.state(), TransactionState::Committed);
    assert_eq!(next_text(&mut c).await, "in-txn");
    assert_eq!(next_text(&mut c).await, "after");
}

/// An aborted transaction's messages are never delivered; what follows them is.
#[tokio::test]
async fn aborted_messages_are_never_delivered() {
    let (broker, client) = setup().await;
    let topic = "txn-abort";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Exclusive).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    for i in 0..3 {
        let _receipt = p
            .send(ProducerMessage::new(format!("aborted-{i}")).transaction(&txn))
            .await
            .unwrap();
    }
    p.send_and_wait("plain").await.unwrap();
    txn.abort().await.unwrap();
    assert_eq!(txn.state(), TransactionState::Aborted);
    let plain = support::recv(&mut c).await;
    assert_eq!(&plain.payload[..], b"plain");
    let end = broker.received_of(Type::EndTxn);
    assert_eq!(end.len(), 1);
    assert_eq!(
        end[0].command.end_txn.as_ref().unwrap().txn_action(),
        pulsar_sdk::mock::wire::TxnAction::Abort
    );
    // The aborted entries left the backlog (skipped and acknowledged by the dispatcher).
    c.ack(&plain).unwrap();
    let full = support::full(topic);
    support::wait_until("backlog empty", || {
        broker.subscription_backlog(&full, "s") == 0
    })
    .await;
    nothing_for_now(&mut c).await;
}

/// One AddPartitionToTxn per partition, before that partition's first send; every SEND and
/// its metadata carry the txn id; no transactional message is batched.
#[tokio::test]
async fn partitions_are_registered_once_and_sends_carry_the_txn_id() {
    let (broker, client) = setup().await;
    let topic = support::full("txn-parts");
    broker.create_partitioned_topic(&topic, 2);
    let p = client.producer(&topic).create().await.unwrap();
    let mut c = consumer(&client, &topic, "s", SubscriptionType::Shared).await;
    let txn = client.transaction().begin().await.unwrap();
    let mut receipts = Vec::new();
    for i in 0..6 {
        let msg = ProducerMessage::new(format!("m-{i}"))
            .key(format!("key-{i}"))
            .transaction(&txn);
        receipts.push(p.send(msg).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
    let adds = broker.received_of(Type::AddPartitionToTxn);
    let mut partitions: Vec<String> = adds
        .iter()
        .flat_map(|r| {
            r.command
                .add_partition_to_txn
                .as_ref()
                .unwrap()
                .partitions
                .clone()
        })
        .collect();
    partitions.sort();
    assert_eq!(
        partitions,
        vec![
            format!("{topic}-partition-0"),
            format!("{topic}-partition-1")
        ]
    );
    let id = txn.id();
    let sends = broker.received_of(Type::Send);
    assert_eq!(sends.len(), 6, "one entry per message: never batched");
    for s in &sends {
        let cmd = s.command.send.as_ref().unwrap();
        assert_eq!(
            (cmd.txnid_most_bits, cmd.txnid_least_bits),
            (Some(id.most_bits()), Some(id.least_bits()))
        );
        let meta = &s.payload.as_ref().unwrap().0;
        assert_eq!(meta.txnid_least_bits, Some(id.least_bits()));
    }
    txn.commit().await.unwrap();
    let mut got: Vec<String> = Vec::new();
    for _ in 0..6 {
        got.push(next_text(&mut c).await);
    }
    got.sort();
    assert_eq!(got, (0..6).map(|i| format!("m-{i}")).collect::<Vec<_>>());
}

/// A send of the transaction that failed makes the commit fail (`OperationFailed`) and the
/// transaction abort instead: its other messages are never delivered.
#[tokio::test]
async fn a_failed_send_fails_the_commit_and_aborts() {
    let (broker, client) = setup().await;
    let topic = "txn-failed-send";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    let _receipt = p
        .send(ProducerMessage::new("kept").transaction(&txn))
        .await
        .unwrap();
    // Over the broker's 5 MiB limit, without chunking: the send fails.
    let big = vec![0u8; 6 * 1024 * 1024];
    let failed = match p.send(ProducerMessage::new(big).transaction(&txn)).await {
        Ok(receipt) => receipt.await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(
        matches!(failed, Err(Error::MessageTooBig { .. })),
        "{failed:?}"
    );
    let e = txn.commit().await.unwrap_err();
    assert!(
        matches!(e, Error::Transaction(TransactionError::OperationFailed { txn: id }) if id == txn.id()),
        "{e:?}"
    );
    assert_eq!(txn.state(), TransactionState::Aborted);
    let end = broker.received_of(Type::EndTxn);
    assert_eq!(
        end.last()
            .unwrap()
            .command
            .end_txn
            .as_ref()
            .unwrap()
            .txn_action(),
        pulsar_sdk::mock::wire::TxnAction::Abort
    );
    p.send_and_wait("plain").await.unwrap();
    assert_eq!(next_text(&mut c).await, "plain");
}

/// The commit waits for the receipts of the transaction's sends (upstream `registerSendOp`):
/// sends queued without awaiting their receipts are all stored before the END_TXN.
#[tokio::test]
async fn commit_waits_for_the_sends() {
    let (broker, client) = setup().await;
    let topic = "txn-wait";
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    for i in 0..20 {
        // Receipts dropped: the transaction still waits for them.
        drop(
            p.send(ProducerMessage::new(format!("m-{i}")).transaction(&txn))
                .await
                .unwrap(),
        );
    }
    txn.commit().await.unwrap();
    let log = broker.received();
    let end_at = log
        .iter()
        .position(|r| r.command.r#type == Type::EndTxn as i32)
        .unwrap();
    let sends_before = log[..end_at]
        .iter()
        .filter(|r| r.command.r#type == Type::Send as i32)
        .count();
    assert_eq!(sends_before, 20);
    assert_eq!(broker.topic_messages(&support::full(topic)), 20);
}

/// Past its timeout the client refuses work in the transaction (TIME_OUT) and the
/// coordinator aborts it (upstream `TransactionTimeoutTrackerImpl`): its message is never
/// delivered, and what was published after it is, once the abort lifts the max read position.
#[tokio::test]
async fn a_timed_out_transaction_is_aborted_by_the_coordinator() {
    let (_broker, client) = setup().await;
    let topic = "txn-timeout";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client
        .transaction()
        .timeout(Duration::from_millis(300))
        .begin()
        .await
        .unwrap();
    p.send(ProducerMessage::new("timed-out").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    p.send_and_wait("after").await.unwrap();
    // Delivered only once the coordinator aborted the transaction.
    assert_eq!(next_text(&mut c).await, "after");
    // The client's clock started at NEW_TXN's answer, the coordinator's at the request: the
    // client's timeout may pass a moment after the abort (it failed once under load).
    support::wait_until("the client's timeout passed", || {
        txn.state() == TransactionState::TimedOut
    })
    .await;
    let e = txn.commit().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Transaction(TransactionError::InvalidState {
                state: TransactionState::TimedOut,
                ..
            })
        ),
        "{e:?}"
    );
    nothing_for_now(&mut c).await;
}

/// Connections lost inside an open transaction: the producer re-sends what was pending
/// (with its txn id) on its new connection, the coordinator connection is opened again for
/// the next request (upstream's handler reconnects and re-sends), and the commit delivers
/// every message of the transaction once.
#[tokio::test]
async fn a_transaction_survives_lost_connections() {
    let (broker, client) = setup().await;
    let topic = "txn-reconnect";
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let p = producer(&client, topic).await;
    let txn = client.transaction().begin().await.unwrap();
    for i in 0..3 {
        p.send(ProducerMessage::new(format!("before-{i}")).transaction(&txn))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let connects = broker.received_of(Type::TcClientConnectRequest).len();
    broker.drop_all_connections();
    for i in 0..2 {
        p.send(ProducerMessage::new(format!("after-{i}")).transaction(&txn))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    txn.commit().await.unwrap();
    assert!(broker.received_of(Type::TcClientConnectRequest).len() > connects);
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(next_text(&mut c).await);
    }
    assert_eq!(
        got,
        ["before-0", "before-1", "before-2", "after-0", "after-1"]
    );
    nothing_for_now(&mut c).await;
}

/// A producer of a client with transactions on says so when it attaches (Java
/// `ProducerImpl.connectionOpened` sends the client's `enableTransaction` as `txn_enabled`);
/// one of a client without them does not.
#[tokio::test]
async fn producers_of_a_transactional_client_say_txn_enabled() {
    let (broker, client) = setup().await;
    let _p = producer(&client, "txn-enabled").await;
    let plain = support::client(&broker.service_url());
    let _q = producer(&plain, "txn-not-enabled").await;
    let flags: Vec<(String, Option<bool>)> = broker
        .received_of(Type::Producer)
        .iter()
        .map(|r| {
            let c = r.command.producer.as_ref().unwrap();
            (c.topic.clone(), c.txn_enabled)
        })
        .collect();
    assert_eq!(
        flags,
        vec![
            (support::full("txn-enabled"), Some(true)),
            (support::full("txn-not-enabled"), None),
        ]
    );
}

/// GET_LAST_MESSAGE_ID names the last entry a reader can be given, as the broker does: the
/// max read position while a transaction is open (upstream PR #21466, `ServerCnx
/// .handleGetLastMessageId` returns `getMaxReadPosition`), never an aborted transaction's
/// entry (PR #22610, `getLastDispatchablePosition`). Otherwise a table view (or
/// `has_message_available`) waits for a message that is not delivered yet, or never will be.
#[tokio::test]
async fn the_last_message_id_skips_open_and_aborted_transactions_so_a_table_view_returns() {
    let (_broker, client) = setup().await;
    let topic = "txn-last-id";
    let p = producer(&client, topic).await;
    p.send_and_wait(ProducerMessage::new("1").key("a"))
        .await
        .unwrap();
    let last = |c: pulsar_sdk::Consumer| async move {
        let ids = c.last_message_ids().await.unwrap();
        c.close().await.unwrap();
        ids[0].entry_id
    };
    let probe = |name: &'static str| consumer(&client, topic, name, SubscriptionType::Shared);

    // An open transaction's entry (1) is past the max read position.
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("2").key("b").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(last(probe("p1").await).await, 0, "the max read position");
    let view = support::within("a table view beside an open transaction", async {
        client.table_view(topic).create().await.unwrap()
    })
    .await;
    assert_eq!(view.len(), 1);

    // Aborted: entry 1 is never dispatched; a later one (2) is the last.
    txn.abort().await.unwrap();
    assert_eq!(last(probe("p2").await).await, 0, "not the aborted entry");
    support::within("a refresh after the abort", view.refresh())
        .await
        .unwrap();
    p.send_and_wait(ProducerMessage::new("3").key("c"))
        .await
        .unwrap();
    assert_eq!(last(probe("p3").await).await, 2);
    support::within("a refresh after a later message", view.refresh())
        .await
        .unwrap();
    assert_eq!(view.keys().len(), 2, "a and c, never b");
    assert_eq!(view.get("b"), None);
}

/// A broker without apache/pulsar#22610 names an aborted transaction's entry, which no reader
/// is ever given, as the last message id: a table view's `create` and `refresh` waited for it
/// for ever (as upstream's). They fail with a timeout once the view read nothing for its
/// `read_timeout`; with the fixed broker's answer both return, and the view keeps what it read.
#[tokio::test]
async fn a_table_view_does_not_wait_for_ever_for_a_last_id_that_never_arrives() {
    let (broker, client) = setup().await;
    let topic = "txn-table-view-marker";
    let p = producer(&client, topic).await;
    p.send_and_wait(ProducerMessage::new("v1").key("k"))
        .await
        .unwrap();
    let txn = client.transaction().begin().await.unwrap();
    p.send(ProducerMessage::new("v2").key("k").transaction(&txn))
        .await
        .unwrap()
        .await
        .unwrap();
    txn.abort().await.unwrap();

    broker.set_last_message_id_names_aborted(true);
    let bound = Duration::from_millis(300);
    let e = support::within(
        "create fails",
        client.table_view(topic).read_timeout(bound).create(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, Error::Timeout { after, .. } if after == bound),
        "{e:?}"
    );

    broker.set_last_message_id_names_aborted(false);
    let view = support::within(
        "create",
        client.table_view(topic).read_timeout(bound).create(),
    )
    .await
    .unwrap();
    assert_eq!(view.get("k").as_deref(), Some(&b"v1"[..]));
    broker.set_last_message_id_names_aborted(true);
    let e = support::within("refresh fails", view.refresh())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    // The view goes on: a message published now is read, and a refresh against a broker
    // with the fix returns.
    p.send_and_wait(ProducerMessage::new("v3").key("k"))
        .await
        .unwrap();
    broker.set_last_message_id_names_aborted(false);
    support::within("refresh", view.refresh()).await.unwrap();
    assert_eq!(view.get("k").as_deref(), Some(&b"v3"[..]));
    view.close().await.unwrap();
}
