//! Acknowledgements in a transaction (PIP-31), the handle's side, as upstream's
//! `ConsumerBase.doAcknowledgeWithTxn`: the subscription is registered with the
//! transaction's coordinator (`registerAckedTopic`, once per topic and subscription), the
//! acknowledgement counts as an operation of the transaction (`registerAckOp`: the commit
//! waits for it and fails if it failed), and it completes with the broker's answer.

use crate::consumer::engine::txn_ack::TxnAck;
use crate::consumer::op::ConsumerOp;
use crate::consumer::Consumer;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transaction::Transaction;

impl Consumer {
    /// Acknowledges `msg` in `txn` (Java's `acknowledgeAsync(messageId, txn)`): the
    /// acknowledgement takes effect when the transaction commits and is dropped if it aborts
    /// (the message can then be received again: after a redelivery, e.g. the ack timeout,
    /// a negative ack or a reconnect). Resolves once the broker accepted it: a message
    /// already acknowledged, or pending in another transaction, is refused with
    /// [`Error::Broker`] code [`TransactionConflict`](crate::ServerError::TransactionConflict)
    /// (the broker's `PendingAckHandleImpl`), and the commit then fails.
    ///
    /// Not for a message of a batch or a chunked message yet: refused with
    /// [`Error::InvalidOperation`] (produce the input without batching).
    pub async fn ack_with_transaction(&self, msg: &Message, txn: &Transaction) -> Result<()> {
        self.txn_ack(msg, txn, false).await
    }

    /// Acknowledges every message up to and including `msg` (on its partition) in `txn`
    /// (Java's `acknowledgeCumulativeAsync(messageId, txn)`): Exclusive and Failover
    /// subscriptions only. Only one transaction at a time may hold a cumulative
    /// acknowledgement of a subscription; another is refused with `TransactionConflict`, as
    /// is one at or before what is already acknowledged. See
    /// [`ack_with_transaction`](Self::ack_with_transaction).
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
        let (p, subscription) = self.acker.txn_target(msg, cumulative)?;
        let op = txn.begin_op()?;
        let r = async {
            txn.register_subscription(p.topic.as_str(), &subscription)
                .await?;
            let id = txn.wire_id();
            Self::ask(&p, |done| {
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
