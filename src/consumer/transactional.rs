//! Acknowledgements in a transaction (PIP-31), the handle's side, as upstream's
//! `ConsumerBase.doAcknowledgeWithTxn`: the subscription is registered with the
//! transaction's coordinator (`registerAckedTopic`, once per topic and subscription), the
//! acknowledgement counts as an operation of the transaction (`registerAckOp`: the commit
//! waits for it and fails if it failed), and it completes with the broker's answer.

use crate::consumer::engine::txn_ack::TxnAck;
use crate::consumer::op::ConsumerOp;
use crate::consumer::{Acker, Consumer};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transaction::Transaction;

impl Consumer {
    /// Acknowledges `msg` in `txn` (Java's `acknowledgeAsync(messageId, txn)`): the
    /// acknowledgement takes effect when the transaction commits and is dropped if it aborts
    /// (the broker then redelivers the message). Resolves once the broker accepted it: a
    /// message already acknowledged, or pending in another transaction, is refused with
    /// [`Error::Broker`] code [`TransactionConflict`](crate::ServerError::TransactionConflict)
    /// (the broker's `PendingAckHandleImpl`), and the commit then fails. The same as
    /// [`Acker::ack_with_transaction`] (from any task).
    ///
    /// A message of a batch is acknowledged on its own, as upstream: its entry with an
    /// `ack_set` naming only it. Two transactions may acknowledge different messages of one
    /// batch; the same message twice is a `TransactionConflict`. The batch is acknowledged
    /// on the broker once each of its messages is, by a committed transaction or a plain
    /// acknowledgement; an abort makes the messages it held redeliverable.
    ///
    /// Not for a chunked message: refused with [`Error::InvalidOperation`] (upstream
    /// acknowledges only its last chunk in a transaction). Nor for a message received on a
    /// cluster the client has since left ([`Client::update_service_info`] or a failover
    /// provider): its id names another message on the cluster in use, so nothing is sent,
    /// the call fails with [`Error::InvalidOperation`] and the transaction's commit aborts
    /// it (the message is delivered again by the new cluster).
    ///
    /// [`Client::update_service_info`]: crate::Client::update_service_info
    pub async fn ack_with_transaction(&self, msg: &Message, txn: &Transaction) -> Result<()> {
        self.acker.ack_with_transaction(msg, txn).await
    }

    /// Acknowledges every message up to and including `msg` (on its partition) in `txn`
    /// (Java's `acknowledgeCumulativeAsync(messageId, txn)`): Exclusive and Failover
    /// subscriptions only. Only one transaction at a time may hold a cumulative
    /// acknowledgement of a subscription; another is refused with `TransactionConflict`, as
    /// is one at or before what is already acknowledged, or at or before what the same
    /// transaction already holds. Inside a batch, it covers the batch's messages through
    /// `msg` (upstream's `ack_set` with the bits through its index cleared). If the
    /// transaction aborts, the broker redelivers every unacknowledged message of the
    /// subscription. Not for a chunked message (see above). See
    /// [`ack_with_transaction`](Self::ack_with_transaction) and
    /// [`Acker::ack_cumulative_with_transaction`].
    pub async fn ack_cumulative_with_transaction(
        &self,
        msg: &Message,
        txn: &Transaction,
    ) -> Result<()> {
        self.acker.ack_cumulative_with_transaction(msg, txn).await
    }
}

impl Acker {
    /// [`Consumer::ack_with_transaction`] from any task: acknowledges `msg` in `txn`,
    /// resolved once the broker accepted it. Fails with [`Error::Closed`] once the consumer
    /// is closed, like the acker's other calls.
    ///
    /// ```no_run
    /// # async fn demo(client: pulsar_sdk::Client, acker: pulsar_sdk::consumer::Acker,
    /// #     msg: pulsar_sdk::Message) -> pulsar_sdk::Result<()> {
    /// let txn = client.transaction().begin().await?;
    /// tokio::spawn(async move {
    ///     // ... produce the outputs of `msg` in `txn`, then:
    ///     acker.ack_with_transaction(&msg, &txn).await?;
    ///     txn.commit().await
    /// });
    /// # Ok(()) }
    /// ```
    pub async fn ack_with_transaction(&self, msg: &Message, txn: &Transaction) -> Result<()> {
        self.txn_ack(msg, txn, false).await
    }

    /// [`Consumer::ack_cumulative_with_transaction`] from any task.
    pub async fn ack_cumulative_with_transaction(
        &self,
        msg: &Message,
        txn: &Transaction,
    ) -> Result<()> {
        self.txn_ack(msg, txn, true).await
    }

    async fn txn_ack(&self, msg: &Message, txn: &Transaction, cumulative: bool) -> Result<()> {
        // Upstream's `doTransactionAcknowledgeForResponse` acks a `ChunkMessageIdImpl` as its
        // last chunk's entry only (no per-chunk handling, unlike its plain ack), which would
        // leave the other chunks unacknowledged for ever: refused instead.
        if msg.id.is_chunked() {
            return Err(Error::InvalidOperation(format!(
                "message {} is chunked: acknowledging it in a transaction is not supported \
                 (upstream acknowledges only its last chunk)",
                msg.id
            )));
        }
        let (p, subscription) = self.txn_target(msg, cumulative)?;
        let op = txn.begin_op()?;
        let r = async {
            // Received on a cluster the client has left (cluster-level failover): not sent, as
            // a plain ack is not (the same check, `Acker::from_cluster_left`): its id names
            // another message here. Unlike a plain ack's, the drop fails the operation, so the
            // commit aborts instead of committing the transaction's outputs without its input
            // acknowledged (the message comes again from the new cluster and is processed in
            // another transaction). Java sends it to the new cluster as it is.
            if Acker::from_cluster_left(&p, msg) {
                return Err(Error::InvalidOperation(format!(
                    "message {} of {} was received on a cluster the client has left: it cannot \
                     be acknowledged in a transaction of the cluster in use",
                    msg.id, msg.topic
                )));
            }
            txn.register_subscription(p.topic.as_str(), subscription)
                .await?;
            let id = txn.raw_id();
            Consumer::ask(&p, |done| {
                ConsumerOp::TxnAck(TxnAck {
                    id: msg.id,
                    cumulative,
                    txn: id,
                    done,
                })
            })
            .await
        }
        .await;
        op.finish(r.is_ok());
        r
    }
}
