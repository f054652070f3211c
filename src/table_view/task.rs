//! A table view's task: reads the topic with its reader (every partition, and those it gains)
//! and folds each message into the map, until the view is closed or dropped (upstream
//! `AbstractTableViewImpl.readTailMessages` / `handleMessage`).

use std::sync::Arc;

use tokio::sync::watch;

use super::position::Positions;
use super::table::Shared;
use crate::error::{Error, Result};
use crate::schema::{Schema, TypedMessage, TypedReader};

/// What the task tells the handles: how far it has read, and how it ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    /// The last message read from each partition.
    pub positions: Positions,
    /// Set once the task has ended: `Ok` when closed by the application, else why it ended.
    pub end: Option<Result<()>>,
}

/// The task's state.
pub(crate) struct Task<S: Schema> {
    pub reader: TypedReader<S>,
    pub shared: Arc<Shared<S::Type>>,
    pub progress: watch::Sender<Progress>,
    /// Changes (or its sender goes) when the view is closed or dropped.
    pub close: watch::Receiver<bool>,
}

impl<S: Schema> Task<S>
where
    S::Type: Clone + Sync,
{
    pub(crate) async fn run(mut self) {
        let mut ended_by = None;
        loop {
            tokio::select! {
                biased;
                // A close, or the view dropped (the sender went).
                _ = self.close.changed() => break,
                // Cancel safe: a message held while its writer schema is fetched stays in the
                // reader for the next call.
                received = self.reader.recv() => match received {
                    Ok(m) => self.apply(m),
                    // The end of a terminated topic: the view stays, as upstream's reader
                    // waits for more.
                    Err(Error::TopicTerminated { .. }) => {
                        tracing::debug!("table view: the topic is terminated");
                    }
                    // The reader was closed (the client closed): its close says how.
                    Err(Error::Closed) => break,
                    Err(e) if self.reader.inner_mut().state().is_terminal() => {
                        ended_by = Some(e);
                        break;
                    }
                    // Upstream retries every other error (readTailMessages); ours are about
                    // one message or entry (e.g. one that could not be decoded).
                    Err(e) => tracing::warn!(error = %e, "table view: a message was skipped"),
                },
            }
        }
        let closed = self.reader.close().await;
        let end = match ended_by {
            Some(e) => Err(e),
            None => closed,
        };
        tracing::debug!(?end, "table view ended");
        self.shared.end();
        self.progress.send_modify(|p| p.end = Some(end));
    }

    /// Folds one message into the map (upstream `handleMessage`): a keyed message sets its
    /// key, one with an empty payload removes it (upstream `getValueIfPresent`: `msg.size() >
    /// 0`, so Java's null value and an empty value alike), one without a key changes nothing.
    /// Its partition's position moves either way, after the map changed: a refresh that sees
    /// the position sees the change.
    fn apply(&mut self, m: TypedMessage<S::Type>) {
        let (value, msg) = m.into_parts();
        if let Some(key) = msg.key {
            if msg.payload.is_empty() {
                self.shared.apply(key, None);
            } else {
                match value {
                    Ok(v) => self.shared.apply(key, Some(v)),
                    // The key keeps its value: a payload the schema cannot decode is no value
                    // (upstream's `getValue` throws out of `handleMessage`, and its read loop
                    // goes on with the next message).
                    Err(e) => tracing::warn!(id = %msg.id, error = %e,
                        "table view: a value that could not be decoded was skipped"),
                }
            }
        } else {
            tracing::trace!(id = %msg.id, "table view: a message without a key was skipped");
        }
        self.progress.send_modify(|p| p.positions.record(msg.id));
    }
}
