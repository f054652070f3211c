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
    /// Not for a message of a batch or a chunked message yet: refused with
    /// [`Error::InvalidOperation`] (produce the input without batching).
    pub async fn ack_with_transaction(&self, msg: &Message, txn: &Transaction) -> Result<()> {
        self.acker.ack_with_transaction(msg, txn).await
    }

    /// Acknowledges every message up to and including `msg` (on its partition) in `txn`
    /// (Java's `acknowledgeCumulativeAsync(messageId, txn)`): Exclusive and Failover
    /// subscriptions only. Only one transaction at a time may hold a cumulative
    /// acknowledgement of a subscription; another is refused with `TransactionConflict`, as
    /// is one at or before what is already acknowledged, or at or before what the same
    /// transaction already holds. If the transaction aborts, the broker redelivers every
    /// unacknowledged message of the subscription. See
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
        if msg.id.is_batch() || msg.id.is_chunked() {
            return Err(Error::InvalidOperation(format!(
                "message {} is part of a batch or chunked: acknowledging it in a transaction is \
                 not supported yet",
                msg.id
            )));
        }
        let (p, subscription) = self.txn_target(msg, cumulative)?;
        let op = txn.begin_op()?;
        let r = async {
            txn.register_subscription(p.topic.as_str(), &subscription)
                .await?;
            let id = txn.wire_id();
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
