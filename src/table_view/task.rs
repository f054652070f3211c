//! A table view's task: reads the topic with its reader (every partition, and those it gains)
//! and folds each message into the map, until the view is closed or dropped (upstream
//! `AbstractTableViewImpl.readTailMessages` / `handleMessage`).

use std::sync::Arc;

use tokio::sync::watch;

use super::table::Shared;
use crate::error::Error;
use crate::schema::{Schema, TypedMessage, TypedReader};

/// The task's state.
pub(crate) struct Task<S: Schema> {
    pub reader: TypedReader<S>,
    pub shared: Arc<Shared<S::Type>>,
    /// Changes (or its sender goes) when the view is closed or dropped.
    pub close: watch::Receiver<bool>,
}

impl<S: Schema> Task<S>
where
    S::Type: Clone + Sync,
{
    pub(crate) async fn run(self) {
        let Task {
            mut reader,
            shared,
            mut close,
        } = self;
        let mut ended_by = None;
        {
            // One wait for the close for the task's life, not one per message.
            let closed = close.changed();
            tokio::pin!(closed);
            loop {
                tokio::select! {
                    biased;
                    // A close, or the view dropped (the sender went).
                    _ = &mut closed => break,
                    // Cancel safe: a message held while its writer schema is fetched stays in
                    // the reader for the next call.
                    received = reader.recv() => match received {
                        Ok(m) => apply(&shared, m),
                        // The end of a terminated topic: the view stays, as upstream's reader
                        // waits for more.
                        Err(Error::TopicTerminated { .. }) => {
                            tracing::debug!("table view: the topic is terminated");
                        }
                        // The reader was closed (the client closed): its close says how.
                        Err(Error::Closed) => break,
                        Err(e) if reader.inner_mut().state().is_terminal() => {
                            ended_by = Some(e);
                            break;
                        }
                        // Upstream retries every other error (readTailMessages); ours are
                        // about one message or entry (e.g. one that could not be decoded).
                        Err(e) => tracing::warn!(error = %e, "table view: a message was skipped"),
                    },
                }
            }
        }
        let closed = reader.close().await;
        let end = match ended_by {
            Some(e) => Err(e),
            None => closed,
        };
        tracing::debug!(?end, "table view ended");
        shared.end();
        shared.finish(end);
    }
}

/// Folds one message into the map (upstream `handleMessage`): a keyed message sets its key,
/// one with an empty payload removes it (upstream `getValueIfPresent`: `msg.size() > 0`, so
/// Java's null value and an empty value alike), one without a key changes nothing. Its
/// partition's position moves either way, with the change.
fn apply<V: Clone + Send + Sync + 'static>(shared: &Shared<V>, m: TypedMessage<V>) {
    let (value, msg) = m.into_parts();
    let Some(key) = msg.key else {
        tracing::trace!(id = %msg.id, "table view: a message without a key was skipped");
        return shared.skip(msg.id);
    };
    if msg.payload.is_empty() {
        return shared.apply(msg.id, key, None);
    }
    match value {
        Ok(v) => shared.apply(msg.id, key, Some(v)),
        Err(e) => {
            // The key keeps its value: a payload the schema cannot decode is no value
            // (upstream's `getValue` throws out of `handleMessage`, and its read loop goes on
            // with the next message).
            tracing::warn!(id = %msg.id, error = %e,
                "table view: a value that could not be decoded was skipped");
            shared.skip(msg.id);
        }
    }
}
