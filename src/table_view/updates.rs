//! [`TableViewUpdates`]: a table view's changes as a [`Stream`], bounded.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::broadcast;

/// How many changes a [`TableViewUpdates`] stream that falls behind keeps; past that the
/// oldest are dropped and counted in [`TableViewUpdate::missed`].
pub(crate) const UPDATES_BOUND: usize = 1024;

/// One change of a table view: `key` now has `value`, or was removed (`None`: a message with
/// an empty payload, Java's null value).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableViewUpdate<V> {
    /// The message key.
    pub key: String,
    /// The key's new value; `None` once it was removed.
    pub value: Option<V>,
    /// How many changes just before this one the stream dropped because it fell more than
    /// 1024 changes behind (0 normally); the view itself ([`TableView::get`](super::TableView::get))
    /// always has every change.
    pub missed: u64,
}

/// A table view's changes, as a [`Stream`]: one [`TableViewUpdate`] per message that changed
/// it (updates and removals, in the order the view applied them), from when the stream was
/// made. It ends when the view is closed (or dropped, or ended by an error).
///
/// Made by [`TableView::updates`](super::TableView::updates). Bounded: a stream that falls
/// more than 1024 changes behind loses the oldest, and the next change it yields says how many
/// in [`TableViewUpdate::missed`] (read the view again then).
pub struct TableViewUpdates<V> {
    inner: Pin<Box<dyn Stream<Item = TableViewUpdate<V>> + Send>>,
}

impl<V> fmt::Debug for TableViewUpdates<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableViewUpdates").finish_non_exhaustive()
    }
}

impl<V: Clone + Send + 'static> TableViewUpdates<V> {
    /// Changes until `rx`'s sender goes (the view ended); those sent before are still yielded.
    pub(crate) fn new(rx: broadcast::Receiver<TableViewUpdate<V>>) -> Self {
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let mut missed = 0u64;
            loop {
                match rx.recv().await {
                    Ok(mut change) => {
                        change.missed = missed;
                        return Some((change, rx));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        missed = missed.saturating_add(n);
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        TableViewUpdates {
            inner: Box::pin(stream),
        }
    }

    /// The next change; `None` once the view has ended. Cancel safe.
    pub async fn next_update(&mut self) -> Option<TableViewUpdate<V>> {
        futures::StreamExt::next(self).await
    }
}

impl<V> Stream for TableViewUpdates<V> {
    type Item = TableViewUpdate<V>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: &str) -> TableViewUpdate<u32> {
        TableViewUpdate {
            key: key.into(),
            value: Some(1),
            missed: 0,
        }
    }

    #[tokio::test]
    async fn a_stream_that_fell_behind_says_how_many_changes_it_missed_then_ends() {
        let (tx, rx) = broadcast::channel(2);
        let mut updates = TableViewUpdates::new(rx);
        for k in ["a", "b", "c", "d", "e"] {
            tx.send(change(k)).unwrap();
        }
        let first = updates.next_update().await.unwrap();
        assert_eq!((first.key.as_str(), first.missed), ("d", 3));
        let next = updates.next_update().await.unwrap();
        assert_eq!((next.key.as_str(), next.missed), ("e", 0));
        tx.send(change("f")).unwrap();
        drop(tx);
        assert_eq!(
            updates.next_update().await.unwrap().key,
            "f",
            "sent before the end"
        );
        assert!(updates.next_update().await.is_none());
    }
}
