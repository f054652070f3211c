//! Sends in a transaction (PIP-31), as upstream's `ProducerImpl.internalSendWithTxnAsync`: the
//! transaction must be open; the message's partition is registered with the coordinator
//! (`TransactionImpl.registerProducedTopic`, once per partition) before the message is
//! queued; the send counts as an operation of the transaction until its receipt
//! (`registerSendOp`), so that the commit waits for it and fails if it failed.

use std::sync::Arc;

use super::pending::Outgoing;
use super::{Producer, Queued, SendFuture};
use crate::error::Result;
use crate::message::ProducerMessage;

impl Producer {
    /// [`Producer::send`] of a message with a transaction.
    pub(super) async fn send_transactional(&self, mut msg: ProducerMessage) -> Result<SendFuture> {
        let Some(txn) = msg.transaction.take() else {
            return Box::pin(self.send(msg)).await;
        };
        // Counted before the registration: a send whose registration fails fails the commit
        // (upstream registers the send's future, which includes the registration).
        let op = txn.begin_op()?;
        let chain = self.inner.interceptors.clone();
        if let Some(c) = &chain {
            c.before_send(&self.inner.topic, &mut msg);
        }
        let sent = chain.as_ref().map(|_| msg.clone());
        let mut out = Outgoing::from(msg);
        out.set_txn(txn.raw_id());
        let (p, partition) = match &self.inner.single {
            Some(p) => (p.clone(), self.inner.topic.clone()),
            None => {
                let parts = self
                    .inner
                    .partitions
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                let i = self.pick(&out, parts.len());
                (parts[i].clone(), self.inner.topic.partition(i as u32))
            }
        };
        let queued = async {
            txn.register_partition(partition.as_str()).await?;
            match p.try_send(out)? {
                Queued::Done(receipt) => Ok(receipt),
                Queued::Wait(blocked) => Arc::clone(&p).send_waiting(blocked).await,
            }
        }
        .await;
        let mut receipt = match queued {
            Ok(r) => r,
            Err(e) => {
                if let (Some(c), Some(sent)) = (&chain, &sent) {
                    c.on_send_acknowledgement(&self.inner.topic, sent, Err(&e));
                }
                op.finish(false);
                return Err(e);
            }
        };
        let topic = self.inner.topic.clone();
        receipt.on_complete(Box::new(move |result| {
            if let (Some(c), Some(sent)) = (&chain, &sent) {
                c.on_send_acknowledgement(&topic, sent, result);
            }
            op.finish(result.is_ok());
        }));
        Ok(receipt)
    }
}
