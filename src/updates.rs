//! Streams of a value that changes over time, without a channel type in the public API.
//!
//! [`Updates`] follows one value (a partition count, whether a Failover consumer is the active
//! one): read it now with [`Updates::current`], wait for the next value with
//! [`Updates::changed`] or for one you want with [`Updates::wait_for`], or use it as a
//! [`Stream`] of values. [`TopicUpdates`] is the stream of a pattern consumer's topic changes.
//! Both are `Send + 'static`, to move into a spawned task, and follow the shape of
//! [`StateStream`](crate::StateStream).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::{broadcast, watch};

use crate::topic::TopicName;

type Wait = Pin<Box<dyn Future<Output = bool> + Send>>;
/// Resolves once the entity whose value this is reached a terminal state.
type Ended = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The topics a pattern consumer gained and lost in one change (see
/// [`Consumer::topic_updates`](crate::Consumer::topic_updates)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicsChanged {
    /// Topics now subscribed (partitions by their own names, as the broker lists them).
    pub added: Vec<TopicName>,
    /// Topics no longer subscribed (deleted, or no longer matching).
    pub removed: Vec<TopicName>,
    /// How many changes just before this one the stream dropped because it fell more than
    /// 256 changes behind (0 normally); [`Consumer::topics`](crate::Consumer::topics) is the
    /// current set either way.
    pub missed: u64,
    /// How many topics matching the pattern are not subscribed, as of this change, because
    /// the consumer has `pattern_max_topics` of them already (0 normally). A change of this
    /// count alone is a change too (`added` and `removed` empty). The current count is
    /// [`Consumer::pattern_topics_skipped`](crate::Consumer::pattern_topics_skipped).
    pub skipped: u64,
}

/// A value that changes over time, and a [`Stream`] of its values: the value when the stream
/// was made first, then each new one. Values set in quick succession may be folded into the
/// last one (a stream of *states*, not of events). The stream ends once the value can no
/// longer change (its producer or consumer is gone).
///
/// Made by [`Producer::partition_updates`](crate::Producer::partition_updates),
/// [`Consumer::partition_updates`](crate::Consumer::partition_updates) and
/// [`Consumer::active_updates`](crate::Consumer::active_updates).
///
/// ```no_run
/// # async fn demo(producer: pulsar_sdk::Producer) {
/// let mut partitions = producer.partition_updates();
/// println!("{} partitions", partitions.current());
/// while let Some(n) = partitions.changed().await {
///     println!("now {n} partitions");
/// }
/// # }
/// ```
pub struct Updates<T> {
    rx: watch::Receiver<T>,
    /// Whether the stream has yet to yield the value it was made with.
    first: bool,
    /// The stream's wait for a change (on a clone of `rx`, which sees what `rx` has seen).
    wait: Option<Wait>,
    /// The entity's end (closed, unsubscribed, failed for good): after it the value no longer
    /// changes, though its sender may live on in the handle. `None` once it happened (or for
    /// a value without an entity).
    ended: Option<Ended>,
    /// The end happened: no wait any more, only a value set before it.
    over: bool,
}

impl<T> fmt::Debug for Updates<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Updates").finish_non_exhaustive()
    }
}

impl<T: Clone + Send + Sync + 'static> Updates<T> {
    /// Values that end when `rx`'s sender goes.
    pub(crate) fn new(rx: watch::Receiver<T>) -> Self {
        Updates {
            rx,
            first: true,
            wait: None,
            ended: None,
            over: false,
        }
    }

    /// Values of an entity: they also end once `ended` resolves (the entity reached a terminal
    /// state), as the docs promise ("its producer or consumer is gone"), even while the
    /// handle, which holds the sender, is kept.
    pub(crate) fn until<S>(
        rx: watch::Receiver<T>,
        ended: impl Future<Output = S> + Send + 'static,
    ) -> Self {
        Updates {
            ended: Some(Box::pin(async move {
                ended.await;
            })),
            ..Updates::new(rx)
        }
    }

    /// Polls the entity's end; true once it happened.
    fn poll_over(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(ended) = &mut self.ended {
            if ended.as_mut().poll(cx).is_ready() {
                self.ended = None;
                self.over = true;
                self.wait = None;
            }
        }
        self.over
    }

    /// After the end: a value set before it and not yet seen, once.
    fn last_unseen(&mut self) -> Option<T> {
        let unseen = self.rx.borrow().has_changed();
        unseen.then(|| self.rx.borrow_and_update().clone())
    }

    /// The value now (it does not count as seen for [`changed`](Self::changed)).
    pub fn current(&self) -> T {
        self.rx.borrow().clone()
    }

    /// Waits for a value this handle has not returned yet and returns it; `None` once the
    /// value can no longer change. Cancel safe.
    pub async fn changed(&mut self) -> Option<T> {
        self.first = false;
        self.wait = None;
        let changed = match self.ended.as_mut() {
            _ if self.over => false,
            None => self.rx.changed().await.is_ok(),
            // Both kept in `self` or cancel safe: so is this.
            Some(ended) => tokio::select! {
                biased;
                _ = ended.as_mut() => None,
                r = self.rx.changed() => Some(r.is_ok()),
            }
            .unwrap_or_else(|| {
                self.ended = None;
                self.over = true;
                false
            }),
        };
        if changed {
            Some(self.rx.borrow_and_update().clone())
        } else {
            // The end, or the sender gone: a value set before it is still seen, once.
            self.last_unseen()
        }
    }

    /// Resolves with the first value, the current one included, for which `accept` is true;
    /// `None` if the value can no longer change before one is.
    pub async fn wait_for(&mut self, mut accept: impl FnMut(&T) -> bool) -> Option<T> {
        self.first = false;
        self.wait = None;
        let found = match self.ended.as_mut() {
            _ if self.over => None,
            None => Some(
                self.rx
                    .wait_for(|v| accept(v))
                    .await
                    .ok()
                    .map(|v| v.clone()),
            ),
            Some(ended) => tokio::select! {
                biased;
                _ = ended.as_mut() => None,
                r = self.rx.wait_for(|v| accept(v)) => Some(r.ok().map(|v| v.clone())),
            },
        };
        match found {
            Some(found) => found,
            None => {
                // The end: the value is final; it is the one if it is accepted.
                self.ended = None;
                self.over = true;
                let last = self.rx.borrow_and_update().clone();
                accept(&last).then_some(last)
            }
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Stream for Updates<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = &mut *self;
        if this.first {
            this.first = false;
            return Poll::Ready(Some(this.rx.borrow_and_update().clone()));
        }
        if this.poll_over(cx) {
            return Poll::Ready(this.last_unseen());
        }
        let wait = this.wait.get_or_insert_with(|| {
            let mut rx = this.rx.clone();
            Box::pin(async move { rx.changed().await.is_ok() })
        });
        let changed = futures::ready!(wait.as_mut().poll(cx));
        this.wait = None;
        // A value set before the sender went away is still yielded (`changed` reports it).
        if changed && this.rx.has_changed().unwrap_or(true) {
            Poll::Ready(Some(this.rx.borrow_and_update().clone()))
        } else {
            Poll::Ready(None)
        }
    }
}

/// The topic changes of a pattern consumer, as a [`Stream`]: one [`TopicsChanged`] each time
/// topics were subscribed or closed, from when it was made. It ends when the consumer stops
/// discovering topics (closed, unsubscribed); a consumer that is not a pattern consumer gives a
/// stream that ends at once.
///
/// Made by [`Consumer::topic_updates`](crate::Consumer::topic_updates). Changes are kept for a
/// stream that falls behind, up to 256; past that the oldest are dropped, and the next change
/// yielded says how many in [`TopicsChanged::missed`] ([`Consumer::topics`](crate::Consumer::topics)
/// is always the current set).
pub struct TopicUpdates {
    inner: Pin<Box<dyn Stream<Item = TopicsChanged> + Send>>,
}

impl fmt::Debug for TopicUpdates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TopicUpdates").finish_non_exhaustive()
    }
}

impl TopicUpdates {
    /// Changes until `rx`'s sender goes or `ended` resolves (the consumer stopped
    /// discovering: closed, unsubscribed), whichever is first; changes sent before the end are
    /// still yielded.
    pub(crate) fn new<S>(
        rx: broadcast::Receiver<TopicsChanged>,
        ended: impl Future<Output = S> + Send + 'static,
    ) -> Self {
        let ended: Option<Ended> = Some(Box::pin(async move {
            ended.await;
        }));
        let stream = futures::stream::unfold((rx, ended), |(mut rx, mut ended)| async move {
            let mut missed = 0u64;
            loop {
                let next = match ended.as_mut() {
                    Some(end) => tokio::select! {
                        biased;
                        r = rx.recv() => r,
                        _ = end.as_mut() => {
                            ended = None;
                            continue;
                        }
                    },
                    // After the end: only what was sent before it.
                    None => rx.try_recv().map_err(|e| match e {
                        broadcast::error::TryRecvError::Lagged(n) => {
                            broadcast::error::RecvError::Lagged(n)
                        }
                        _ => broadcast::error::RecvError::Closed,
                    }),
                };
                match next {
                    Ok(mut change) => {
                        change.missed = change.missed.saturating_add(missed);
                        return Some((change, (rx, ended)));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        missed = missed.saturating_add(n);
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        TopicUpdates {
            inner: Box::pin(stream),
        }
    }

    /// The next change; `None` once there will be no more. Cancel safe.
    pub async fn next_change(&mut self) -> Option<TopicsChanged> {
        futures::StreamExt::next(self).await
    }
}

impl Stream for TopicUpdates {
    type Item = TopicsChanged;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TopicsChanged>> {
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn updates_yield_the_current_value_then_each_change_then_end() {
        let (tx, rx) = watch::channel(1usize);
        let mut updates = Updates::new(rx);
        assert_eq!(updates.current(), 1);
        assert_eq!(updates.next().await, Some(1));
        tx.send(2).unwrap();
        assert_eq!(updates.next().await, Some(2));
        tx.send(3).unwrap();
        drop(tx);
        // The last value set before the sender went away is still seen, then the end.
        assert_eq!(updates.next().await, Some(3));
        assert_eq!(updates.next().await, None);
    }

    #[tokio::test]
    async fn changed_waits_for_an_unseen_value_and_wait_for_checks_the_current_one() {
        let (tx, rx) = watch::channel(0usize);
        let mut updates = Updates::new(rx);
        assert_eq!(updates.wait_for(|n| *n == 0).await, Some(0));
        tx.send(4).unwrap();
        assert_eq!(updates.changed().await, Some(4));
        let waiting = tokio::spawn(async move { updates.wait_for(|n| *n >= 6).await });
        tx.send(5).unwrap();
        tx.send(6).unwrap();
        assert_eq!(waiting.await.unwrap(), Some(6));
        drop(tx);
    }

    #[tokio::test]
    async fn changed_is_none_once_nothing_can_change() {
        let (tx, rx) = watch::channel(0usize);
        drop(tx);
        let mut updates = Updates::new(rx);
        assert_eq!(updates.changed().await, None);
        assert_eq!(updates.current(), 0);
    }

    /// #32: no tokio channel type in a public signature (`AsyncRead + AsyncWrite` transport
    /// bounds are fine). Reads every `pub fn` of the crate but the mock's.
    #[test]
    fn no_public_fn_returns_or_takes_a_tokio_channel() {
        fn visit(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    if !path.ends_with("mock") {
                        visit(&path, out);
                    }
                } else if path.extension().is_some_and(|x| x == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        visit(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let banned = [
            "watch::",
            "broadcast::",
            "mpsc::",
            "oneshot::",
            "tokio::sync",
            "Notify",
        ];
        let mut found = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let t = line.trim_start();
                if !(t.starts_with("pub fn ") || t.starts_with("pub async fn ")) {
                    continue;
                }
                // The signature, up to its body or its end.
                let mut sig = String::new();
                for l in &lines[i..] {
                    sig.push_str(l);
                    if l.contains('{') || l.trim_end().ends_with(';') {
                        break;
                    }
                }
                let sig = sig.split('{').next().unwrap_or_default();
                if banned.iter().any(|b| sig.contains(b)) {
                    found.push(format!("{}:{}: {}", file.display(), i + 1, sig.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "tokio types in public signatures:\n{}",
            found.join("\n")
        );
    }

    #[tokio::test]
    async fn a_topic_stream_that_fell_behind_says_how_many_changes_it_missed() {
        let (tx, rx) = broadcast::channel(2);
        let mut updates = TopicUpdates::new(rx, futures::future::pending::<()>());
        for _ in 0..5 {
            tx.send(TopicsChanged::default()).unwrap();
        }
        let first = updates.next_change().await.unwrap();
        assert_eq!(first.missed, 3, "5 sent into room for 2");
        assert_eq!(updates.next_change().await.unwrap().missed, 0);
        drop(tx);
        assert!(updates.next_change().await.is_none());
    }

    /// An entity's values end at its end though the sender lives on; a value set before the
    /// end is still seen once; `changed` dropped while pending loses nothing.
    #[tokio::test]
    async fn values_of_an_entity_end_at_its_end_and_changed_is_cancel_safe() {
        let (tx, rx) = watch::channel(1usize);
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let mut updates = Updates::until(rx.clone(), end_rx);
        let mut stream = Updates::until(rx, futures::future::pending::<()>());
        assert!(futures::FutureExt::now_or_never(updates.changed()).is_none());
        tx.send(2).unwrap();
        assert_eq!(
            updates.changed().await,
            Some(2),
            "the cancelled wait lost nothing"
        );
        tx.send(3).unwrap();
        end_tx.send(()).unwrap();
        assert_eq!(updates.changed().await, Some(3), "set before the end");
        assert_eq!(updates.changed().await, None);
        assert_eq!(
            updates.wait_for(|n| *n == 3).await,
            Some(3),
            "the final value"
        );
        assert_eq!(updates.wait_for(|n| *n == 4).await, None);
        assert_eq!(updates.next().await, None);
        assert_eq!(stream.next().await, Some(3));
        drop(tx);
        assert_eq!(stream.next().await, None);
    }
}
