//! Acknowledgements in a transaction (PIP-31), the task's side: unlike plain acks they are
//! not grouped; each goes at once as its own ACK with the transaction's id and a request id,
//! and its ACK_RESPONSE (an error such as `TransactionConflict`, or none) completes the
//! caller, as upstream's `ConsumerImpl.doTransactionAcknowledgeForResponse`
//! (`cnx.newAckForReceipt`). Upstream forgets the message (unacked tracker) when it sends the
//! ack; here it is forgotten once the broker accepted it, so a refused ack leaves it to the
//! ack timeout or a redelivery like any unacked message.
//!
//! A message of a batch goes as its entry with an `ack_set` clearing only its own bit (for a
//! cumulative ack, the bits through its index) and the batch size, as upstream's
//! `doTransactionAcknowledgeForResponse` for a batch message id; each message of a batch is
//! acknowledged on its own.

use super::{ConsumerTask, Pending};
use crate::commands;
use crate::consumer::op::TxnAck;
use crate::entity::Requests;
use crate::error::{Error, Result, ServerError};
use crate::proto::BaseCommand;

/// Sends the ACK (refused at once without a connection: the caller's transaction fails, as
/// upstream's, whose `cnx()` is gone then).
pub(crate) fn send(io: &super::io::Io, ack: TxnAck, requests: &mut Requests<Pending>) {
    let Some(conn) = &io.entity.conn else {
        let _ = ack.done.send(Err(Error::ConnectionLost(
            "consumer is reconnecting".into(),
        )));
        return;
    };
    let (consumer_id, id, cumulative, txn) = (io.entity.id, ack.id, ack.cumulative, ack.txn);
    requests.send(
        conn,
        Pending::TxnAck(ack),
        |rid| commands::txn_ack(consumer_id, id, cumulative, txn, rid),
        "transactional acknowledgement",
    );
}

/// The broker's answer: accepted, the message is forgotten (no ack timeout, no redelivery
/// by this client); refused, the caller hears the broker's code.
pub(crate) fn answered(task: &mut ConsumerTask, ack: TxnAck, r: Result<BaseCommand>) -> Result<()> {
    let r = r.and_then(
        |cmd| match cmd.ack_response.as_ref().and_then(|a| a.error) {
            Some(code) => Err(Error::Broker {
                code: ServerError::from_code(code),
                message: cmd.ack_response.and_then(|a| a.message).unwrap_or_default(),
            }),
            None => Ok(()),
        },
    );
    if r.is_ok() {
        task.io.shared.stats.acked();
        if ack.cumulative {
            task.acks.unacked.remove_through(ack.id);
        } else {
            task.forget(&ack.id);
        }
        // A message of a batch: its batch's plain ack must leave it out (see
        // `AckTracker::txn_acked`); that may complete a batch whose other messages were acked.
        let full = task.acks.tracker.txn_acked(ack.id, ack.cumulative);
        if task.acks.after_ack(full) {
            task.flush_acks();
        }
    }
    let _ = ack.done.send(r);
    Ok(())
}
