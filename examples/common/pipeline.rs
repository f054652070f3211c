//! The consume → transform → produce loop of `examples/pipeline.rs`, shared with its test
//! (`tests/protocol/mock_kit/pipeline.rs`), so the test runs exactly the code the example runs.
//!
//! At-least-once: an input is acked only once its output's receipt arrived (the broker stored
//! it), so a crash or a broker restart can repeat an output but never lose one. Work is
//! bounded (at most `max_in_flight` inputs between receive and ack), sends are pipelined (each
//! worker queues its output without waiting for the others'), a failure nacks the input (the
//! consumer's dead-letter policy moves it aside after too many tries), and shutdown is
//! graceful: stop receiving, let the in-flight work finish, then close.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;

use pulsar_sdk::{Consumer, Error, Message, Producer, ProducerMessage};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// What the pipeline did, once it stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Inputs whose output was stored, then acked.
    pub processed: u64,
    /// Inputs nacked (malformed, or their output could not be stored).
    pub nacked: u64,
}

/// How one input ended.
enum Outcome {
    Processed,
    Nacked,
}

/// The transformation: an order `ORDER-ID:QUANTITY:UNIT-PRICE-CENTS` becomes a JSON line with
/// its total, keyed by the order id (so the outputs of one order stay in order on a
/// partitioned topic). Anything else is malformed.
pub fn enrich(payload: &[u8]) -> Result<(String, String), String> {
    let text = std::str::from_utf8(payload).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut parts = text.split(':');
    let (Some(id), Some(qty), Some(price), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not ORDER-ID:QUANTITY:PRICE: {text:?}"));
    };
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(format!("bad order id {id:?}"));
    }
    let qty: u64 = qty
        .parse()
        .map_err(|e| format!("bad quantity {qty:?}: {e}"))?;
    let price: u64 = price
        .parse()
        .map_err(|e| format!("bad price {price:?}: {e}"))?;
    let total = qty
        .checked_mul(price)
        .ok_or_else(|| "total overflows".to_string())?;
    let json = format!(r#"{{"order":"{id}","quantity":{qty},"price":{price},"total":{total}}}"#);
    Ok((id.to_string(), json))
}

/// Runs the pipeline until `shutdown` resolves or the consumer ends for good; then finishes
/// the in-flight work, flushes and closes the consumer (the producer belongs to the caller).
pub async fn run(
    mut consumer: Consumer,
    producer: Producer,
    max_in_flight: usize,
    shutdown: impl Future<Output = ()>,
) -> pulsar_sdk::Result<Stats> {
    let acker = consumer.acker();
    let room = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let mut workers = JoinSet::new();
    let mut stats = Stats::default();
    let mut ended = None;
    tokio::pin!(shutdown);
    loop {
        // Bounded in-flight work: a slot first, then a message for it.
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            slot = room.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        // `recv` is cancel safe: if shutdown wins, no message is lost (it is redelivered to
        // the next consumer, since it was not acked).
        let msg = tokio::select! {
            _ = &mut shutdown => break,
            msg = consumer.recv() => msg,
        };
        let msg = match msg {
            Ok(msg) => msg,
            // The consumer ended for good (closed, topic terminated ...): stop.
            Err(e) if consumer.state().is_terminal() => {
                ended = Some(e);
                break;
            }
            // Anything else (an undecodable entry, a reconnect) is reported and skipped.
            Err(e) => {
                eprintln!("pipeline: receive: {e}");
                continue;
            }
        };
        while let Some(done) = workers.try_join_next() {
            count(&mut stats, done);
        }
        let acker = acker.clone();
        let producer = producer.clone();
        workers.spawn(async move {
            let _slot = slot; // held until the input is acked or nacked
            let result = process(&producer, &msg).await;
            let acked = match result {
                Ok(()) => acker.ack(&msg).map(|_| Outcome::Processed),
                Err(e) => {
                    eprintln!("pipeline: {}: {e}; nacked", msg.id);
                    acker.nack(&msg).map(|_| Outcome::Nacked)
                }
            };
            // Only fails once the consumer is closed: the input is redelivered then.
            acked.unwrap_or(Outcome::Nacked)
        });
    }
    // Graceful shutdown: no new inputs; the in-flight ones finish (and are acked) first.
    while let Some(done) = workers.join_next().await {
        count(&mut stats, done);
    }
    producer.flush().await?;
    consumer.close().await?;
    match ended {
        Some(e) if !matches!(e, Error::Closed) => Err(e),
        _ => Ok(stats),
    }
}

/// Transforms one input and produces its output; `Ok` once the broker stored the output.
async fn process(producer: &Producer, msg: &Message) -> Result<(), String> {
    let (key, output) = enrich(&msg.payload)?;
    // `send` only queues the message (pipelined with the other workers' sends); the receipt
    // says it was stored.
    let receipt = producer
        .send(ProducerMessage::new(output).key(key))
        .await
        .map_err(|e| format!("send: {e}"))?;
    receipt
        .await
        .map(|_| ())
        .map_err(|e| format!("receipt: {e}"))
}

fn count(stats: &mut Stats, done: Result<Outcome, tokio::task::JoinError>) {
    match done {
        Ok(Outcome::Processed) => stats.processed += 1,
        Ok(Outcome::Nacked) => stats.nacked += 1,
        Err(e) => eprintln!("pipeline: a worker failed: {e}"),
    }
}
