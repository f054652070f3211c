//! Acknowledging messages of a batch in a transaction: the client as upstream's
//! `ConsumerImpl.doTransactionAcknowledgeForResponse` (each message on its own, its entry with
//! an `ack_set` clearing only its bit, and the batch size), the broker as
//! `PendingAckHandleImpl` with ack sets (the same message pending in two transactions
//! conflicts, different messages of one batch do not; a commit acknowledges the messages on
//! the cursor, the entry once all are; an abort makes them redeliverable).

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Consumer, Error, Message, ServerError, SubscriptionType};

use super::support::{consumer, nothing_for_now, setup};

/// The consumer's next `n` messages.
async fn recv_n(c: &mut Consumer, n: usize) -> Vec<Message> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(support::recv(c).await);
    }
    out
}

fn text(m: &Message) -> String {
    String::from_utf8(m.payload.to_vec()).unwrap()
}

/// The message ids of the ACKs the broker received, with their ack sets, transactional
/// (`true`) or plain.
fn acks(broker: &MockBroker) -> Vec<(bool, u64, Vec<i64>, Option<i32>)> {
    broker
        .received_of(Type::Ack)
        .iter()
        .filter_map(|f| f.command.ack.as_ref())
        .flat_map(|a| {
            a.message_id.iter().map(|m| {
                (
                    a.txnid_most_bits.is_some(),
                    m.entry_id,
                    m.ack_set.clone(),
                    m.batch_size,
                )
            })
        })
        .collect()
}

/// A batch acknowledged message by message in a transaction that commits: each ACK names the
/// entry with an ack set clearing only that message's bit; nothing is acknowledged until the
/// commit, the whole entry after it, and nothing is delivered again (not even to a consumer
/// that subscribes anew). No plain ACK goes out for those messages.
#[tokio::test]
async fn a_batch_acked_in_a_committed_transaction_is_not_redelivered() {
    let (broker, client) = setup().await;
    let topic = "txn-batch-commit";
    let full = support::full(topic);
    support::publish_batch(&client, topic, 3).await;
    assert_eq!(broker.topic_messages(&full), 1, "one batch entry");
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let ms = recv_n(&mut c, 3).await;
    let txn = client.transaction().begin().await.unwrap();
    for m in &ms {
        assert!(m.id.is_batch());
        c.ack_with_transaction(m, &txn).await.unwrap();
    }
    assert_eq!(
        acks(&broker),
        vec![
            (true, 0, vec![0b110], Some(3)),
            (true, 0, vec![0b101], Some(3)),
            (true, 0, vec![0b011], Some(3)),
        ]
    );
    assert_eq!(
        broker.subscription_backlog(&full, "s"),
        1,
        "pending until commit"
    );
    txn.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 0);
    nothing_for_now(&mut c).await;
    c.close().await.unwrap();
    let mut again = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    nothing_for_now(&mut again).await;
    assert!(
        acks(&broker).iter().all(|a| a.0),
        "no plain ack: {:?}",
        acks(&broker)
    );
}

/// An aborted transaction's messages of a batch come back (upstream `internalAbortTxn`
/// redelivers the positions; the entry carries the cursor's ack set): here message 0 was
/// acknowledged plainly and message 1 in the aborted transaction, so message 1 is received
/// again and message 0 is not. Acknowledged again in a transaction that commits (with
/// message 2), the batch is done: the plain acknowledgement of message 0 went with an ack set
/// leaving out the messages pending in the transaction, never as the whole entry.
#[tokio::test]
async fn an_aborted_transactions_batch_messages_are_redelivered() {
    let (broker, client) = setup().await;
    let topic = "txn-batch-abort";
    let full = support::full(topic);
    support::publish_batch(&client, topic, 3).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let ms = recv_n(&mut c, 3).await;
    c.ack(&ms[0]).unwrap();
    let aborted = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&ms[1], &aborted).await.unwrap();
    aborted.abort().await.unwrap();
    // The entry is delivered again: message 1 (and 2, never acknowledged) but not 0.
    let mut again = Vec::new();
    while !again.iter().any(|m: &Message| text(m) == "b-1") {
        assert!(again.len() < 3, "b-1 not received again: {again:?}");
        again.push(support::recv(&mut c).await);
    }
    assert!(again.iter().all(|m| text(m) != "b-0"), "{again:?}");
    let b1 = again.iter().find(|m| text(m) == "b-1").unwrap();
    assert_eq!(b1.id, ms[1].id);
    let txn = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(b1, &txn).await.unwrap();
    c.ack_with_transaction(&ms[2], &txn).await.unwrap();
    txn.commit().await.unwrap();
    support::wait_until("the batch acknowledged", || {
        broker.subscription_backlog(&full, "s") == 0
    })
    .await;
    let plain: Vec<_> = acks(&broker).into_iter().filter(|a| !a.0).collect();
    assert_eq!(plain, vec![(false, 0, vec![0b110], Some(3))]);
}

/// Two transactions may hold different messages of one batch (upstream checks only that
/// the ack sets do not overlap, `isAckSetOverlap`); the same message in a second transaction
/// is a `TransactionConflict`. Both commits together acknowledge the entry.
#[tokio::test]
async fn two_transactions_conflict_on_the_same_batch_message_only() {
    let (broker, client) = setup().await;
    let topic = "txn-batch-conflict";
    let full = support::full(topic);
    support::publish_batch(&client, topic, 2).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let ms = recv_n(&mut c, 2).await;
    let first = client.transaction().begin().await.unwrap();
    let second = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&ms[0], &first).await.unwrap();
    let e = c.ack_with_transaction(&ms[0], &second).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Broker {
                code: ServerError::TransactionConflict,
                ..
            }
        ),
        "{e:?}"
    );
    let third = client.transaction().begin().await.unwrap();
    c.ack_with_transaction(&ms[1], &third).await.unwrap();
    first.commit().await.unwrap();
    assert_eq!(
        broker.subscription_backlog(&full, "s"),
        1,
        "message 1 pending"
    );
    third.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 0);
    // Once committed, acknowledging the message again conflicts too.
    let late = client.transaction().begin().await.unwrap();
    let e = c.ack_with_transaction(&ms[1], &late).await.unwrap_err();
    assert!(matches!(e, Error::Broker { .. }), "{e:?}");
}

/// A cumulative acknowledgement in a transaction through a message of a batch sends the
/// entry with the bits through its index cleared (upstream: `clear(0, batchIndex + 1)`); its
/// commit leaves the rest of the batch unacknowledged, and a later one through the batch's
/// last message acknowledges the whole entry.
#[tokio::test]
async fn a_cumulative_transactional_ack_inside_a_batch_covers_it_through_the_message() {
    let (broker, client) = setup().await;
    let topic = "txn-batch-cumulative";
    let full = support::full(topic);
    support::publish_batch(&client, topic, 3).await;
    let mut c = consumer(&client, topic, "s", SubscriptionType::Exclusive).await;
    let ms = recv_n(&mut c, 3).await;
    let txn = client.transaction().begin().await.unwrap();
    c.ack_cumulative_with_transaction(&ms[1], &txn)
        .await
        .unwrap();
    assert_eq!(acks(&broker), vec![(true, 0, vec![0b100], Some(3))]);
    txn.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 1);
    let txn = client.transaction().begin().await.unwrap();
    c.ack_cumulative_with_transaction(&ms[2], &txn)
        .await
        .unwrap();
    assert_eq!(acks(&broker).last(), Some(&(true, 0, vec![], None)));
    txn.commit().await.unwrap();
    assert_eq!(broker.subscription_backlog(&full, "s"), 0);
}

/// A chunked message is still refused (upstream acknowledges only its last chunk in a
/// transaction): before anything is sent, and the transaction stays usable.
#[tokio::test]
async fn a_chunked_message_is_refused() {
    let (broker, client) = setup().await;
    let topic = "txn-ack-chunked";
    let p = client
        .producer(topic)
        .batching(false)
        .chunking(true)
        .chunk_max_message_size(100)
        .create()
        .await
        .unwrap();
    p.send(vec![7u8; 250]).await.unwrap().await.unwrap();
    let mut c = consumer(&client, topic, "s", SubscriptionType::Shared).await;
    let m = support::recv(&mut c).await;
    assert!(m.id.is_chunked());
    let txn = client.transaction().begin().await.unwrap();
    let e = c.ack_with_transaction(&m, &txn).await.unwrap_err();
    assert!(matches!(e, Error::InvalidOperation(_)), "{e:?}");
    assert!(broker.received_of(Type::AddSubscriptionToTxn).is_empty());
    txn.commit().await.unwrap();
}
