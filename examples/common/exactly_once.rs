//! The consume → transform → produce loop of `examples/exactly_once.rs`, shared with its test
//! (`tests/protocol/transactions/exactly_once.rs`), so the test kills and restarts exactly
//! the code the example runs.
//!
//! Exactly once, with one transaction per input (PIP-31): the input's output is produced and
//! the input acknowledged in the same transaction, then the transaction commits. A crash (or
//! any failure) before the commit leaves neither: the output is never delivered (the
//! coordinator aborts the transaction at its timeout, or the loop aborts it) and the input is
//! received again. A commit leaves both: the output is delivered once, the input never again.
//! The transformation is the `pipeline` example's order enricher; an input that is not an
//! order is acknowledged in its transaction with no output (counted as rejected).
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use pulsar_sdk::{
    Client, Consumer, Error, Message, Producer, ProducerMessage, Result, Transaction,
    TransactionState,
};

/// The output's property naming the input it came from (the test counts outputs per input).
pub const INPUT_ID: &str = "input-id";

/// What the loop did, once it stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Inputs whose output and acknowledgement committed.
    pub committed: u64,
    /// Malformed inputs whose acknowledgement (and no output) committed.
    pub rejected: u64,
    /// Attempts that failed before or at the commit: the input comes back.
    pub failed: u64,
}

/// What one input's transaction holds once [`stage`] returns.
#[derive(Debug)]
pub struct Staged {
    /// The open transaction: the output produced in it, the input acknowledged in it.
    pub txn: Transaction,
    /// Whether the input was an order (an output was produced) or not (none).
    pub produced: bool,
}

/// One input's transaction up to its commit: begin, produce the output, acknowledge the
/// input, all in the transaction. The send's receipt is not awaited: the commit waits for
/// it. On an error the transaction is aborted (best effort: if that fails too, the
/// coordinator aborts it at its timeout) and the error returned.
pub async fn stage(
    client: &Client,
    consumer: &Consumer,
    producer: &Producer,
    msg: &Message,
    txn_timeout: Duration,
) -> Result<Staged> {
    let txn = client.transaction().timeout(txn_timeout).begin().await?;
    let staged = async {
        let produced = match super::pipeline::enrich(&msg.payload) {
            Ok((key, json)) => {
                let out = ProducerMessage::new(json)
                    .key(key)
                    .property(INPUT_ID, msg.id.to_string())
                    .transaction(&txn);
                let _receipt = producer.send(out).await?;
                true
            }
            Err(_) => false,
        };
        consumer.ack_with_transaction(msg, &txn).await?;
        Ok(produced)
    }
    .await;
    match staged {
        Ok(produced) => Ok(Staged { txn, produced }),
        Err(e) => {
            if txn.state() == TransactionState::Open {
                let _ = txn.abort().await;
            }
            Err(e)
        }
    }
}

/// Processes inputs one transaction each until `shutdown` resolves or the consumer ends for
/// good; then closes the consumer (the client and producer belong to the caller). `work` is
/// a stand-in for slow processing, spent inside each transaction before its commit (zero:
/// none).
///
/// A failed attempt (`stage` or the commit) negatively acknowledges the input so that it is
/// received again. After a commit that failed without an answer (a timeout, a lost
/// connection) the outcome is the coordinator's: if it committed, the input is acknowledged
/// and the negative acknowledgement does nothing; if not, the input comes back. Either way
/// each input has exactly one committed output.
pub async fn run(
    client: &Client,
    mut consumer: Consumer,
    producer: &Producer,
    txn_timeout: Duration,
    work: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut ended = None;
    tokio::pin!(shutdown);
    loop {
        let msg = tokio::select! {
            _ = &mut shutdown => break,
            msg = consumer.recv() => msg,
        };
        let msg = match msg {
            Ok(msg) => msg,
            Err(e) if consumer.state().is_terminal() => {
                ended = Some(e);
                break;
            }
            Err(e) => {
                eprintln!("exactly_once: receive: {e}");
                continue;
            }
        };
        let attempt = async {
            let staged = stage(client, &consumer, producer, &msg, txn_timeout).await?;
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            staged.txn.commit().await?;
            Ok::<_, Error>(staged.produced)
        };
        match attempt.await {
            Ok(true) => stats.committed += 1,
            Ok(false) => stats.rejected += 1,
            Err(e) => {
                eprintln!("exactly_once: {}: {e}; it comes back", msg.id);
                stats.failed += 1;
                // Closed consumer: the input is redelivered to the next one anyway.
                let _ = consumer.nack(&msg);
            }
        }
    }
    consumer.close().await?;
    match ended {
        Some(e) if !matches!(e, Error::Closed) => Err(e),
        _ => Ok(stats),
    }
}
