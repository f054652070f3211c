//! Table views: a topic read into a key → latest value map that follows it (upstream
//! `TableView`, `AbstractTableViewImpl`).
//!
//! [`Client::table_view`](crate::Client::table_view) builds one: a reader from the earliest
//! position (of every partition, and of those the topic gains; the compacted topic on a
//! persistent one) folds each message into the map: a keyed message sets its key's value, one
//! with an empty payload (a tombstone: Java's null value) removes the key, and one without a
//! key is skipped. `create()` returns once the view has read what was stored when it was made;
//! [`TableView::refresh`] waits for what is stored now.
//!
//! The map is the view's only unbounded part, and it is the application's data: one entry per
//! live key. Changes reach [`listen`](TableView::listen)ers and
//! [`updates`](TableView::updates) streams (each bounded: one that falls behind loses the
//! oldest changes and says so).

mod builder;
mod position;
mod progress;
mod table;
mod task;
mod updates;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::watch;

pub use builder::TableViewBuilder;
pub use updates::{TableViewUpdate, TableViewUpdates};

use crate::consumer::LastIdsQuery;
use crate::error::{Error, Result};
use crate::topic::TopicName;
use table::Shared;

/// A topic as a key → latest value map, kept current as messages arrive. Values are the
/// payload bytes ([`Bytes`]), or `S::Type` with [`TableViewBuilder::schema`].
///
/// Reads ([`get`](Self::get), [`len`](Self::len), [`keys`](Self::keys), ...) take a read
/// lock on the map for a moment and never wait for the broker; the view's task applies each
/// message under the write lock. `TableView` is `Send + Sync`: share it in an `Arc`.
///
/// Dropping the view closes it in the background; [`close`](Self::close) does the same and
/// says how it went.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let broker = pulsar_sdk::mock::MockBroker::start().await?;
/// # let client = pulsar_sdk::Client::builder().service_url(broker.service_url()).build()?;
/// use pulsar_sdk::ProducerMessage;
///
/// let producer = client.producer("prices").create().await?;
/// producer.send_and_wait(ProducerMessage::new("10").key("apple")).await?;
/// producer.send_and_wait(ProducerMessage::new("4").key("pear")).await?;
///
/// let prices = client.table_view("prices").create().await?;
/// assert_eq!(prices.get("apple").as_deref(), Some(&b"10"[..]));
///
/// producer.send_and_wait(ProducerMessage::new("12").key("apple")).await?;
/// producer.send_and_wait(ProducerMessage::new("").key("pear")).await?; // a tombstone
/// prices.refresh().await?; // everything stored until now is in the view
/// assert_eq!(prices.get("apple").as_deref(), Some(&b"12"[..]));
/// assert_eq!(prices.keys(), ["apple"]);
/// prices.close().await?;
/// # Ok(()) }
/// ```
pub struct TableView<V = Bytes> {
    topic: TopicName,
    persistent: bool,
    shared: Arc<Shared<V>>,
    /// Asks the reader's partitions for their last stored ids (a refresh).
    query: LastIdsQuery,
    /// Set (or dropped) to close the task.
    close: watch::Sender<bool>,
    /// How long `create` and `refresh` wait for the next message (see
    /// [`TableViewBuilder::read_timeout`]); `None`: no bound.
    stall: Option<std::time::Duration>,
}

impl<V> std::fmt::Debug for TableView<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableView")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + Sync + 'static> TableView<V> {
    /// The topic.
    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// The latest value of `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<V> {
        self.shared.read().map.get(key).cloned()
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.shared.read().map.contains_key(key)
    }

    /// The number of keys with a value.
    pub fn len(&self) -> usize {
        self.shared.read().map.len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.shared.read().map.is_empty()
    }

    /// The keys with a value now (a copy, in no particular order).
    pub fn keys(&self) -> Vec<String> {
        self.shared.read().map.keys().cloned().collect()
    }

    /// Calls `f` with each key and its value (upstream `forEach`), while the map is locked
    /// for reading: the view applies no message meanwhile, so keep `f` short, and do not call
    /// this view's methods from it (taking the map's lock again on one thread can deadlock).
    /// Code that must call the view per entry can iterate [`keys`](Self::keys) and
    /// [`get`](Self::get) each instead.
    pub fn for_each(&self, mut f: impl FnMut(&str, &V)) {
        // Under the lock, not over a snapshot: a snapshot copies every key (a `String` each)
        // and value per call, and keeping the entries `Arc`'d so that a snapshot only counts
        // references would cost every applied message two more allocations (the key and the
        // value), on the view's hot path, for a call Java's `ConcurrentHashMap` makes
        // lock-free. The re-entrant deadlock is documented above instead.
        for (k, v) in self.shared.read().map.iter() {
            f(k, v);
        }
    }

    /// Calls `f` with every change from now on, on the view's task: the key and its new
    /// value, or `None` when the key was removed (upstream `listen`). `f` may read the view;
    /// the view applies no message while it runs, so keep it short. A panic in `f` is caught
    /// and logged; `f` stays registered, as upstream's listeners do.
    pub fn listen(&self, f: impl FnMut(&str, Option<&V>) + Send + 'static) {
        self.shared.listen(Mutex::new(Box::new(f)), false);
    }

    /// Calls `f` with each key and its value now, then with every change from now on, with
    /// none missed or seen twice in between (upstream `forEachAndListen`). The first pass runs
    /// here, under the map's read lock (as [`for_each`](Self::for_each): `f` must not call
    /// this view then); the changes reach `f` as with [`listen`](Self::listen).
    ///
    /// ```
    /// # async fn demo(view: pulsar_sdk::TableView) {
    /// view.for_each_and_listen(|key, value| match value {
    ///     Some(v) => println!("{key} = {} bytes", v.len()),
    ///     None => println!("{key} removed"),
    /// });
    /// # }
    /// ```
    pub fn for_each_and_listen(&self, f: impl FnMut(&str, Option<&V>) + Send + 'static) {
        self.shared.listen(Mutex::new(Box::new(f)), true);
    }

    /// The changes of the view from now on, as a
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) (see
    /// [`TableViewUpdates`]: bounded, it says how many changes it missed when it fell behind).
    /// A change made after this call is in the stream; `get` already sees those before it.
    ///
    /// ```
    /// # async fn demo(view: pulsar_sdk::TableView) {
    /// use futures::StreamExt;
    /// let mut updates = view.updates();
    /// while let Some(change) = updates.next().await {
    ///     println!("{} -> {:?}", change.key, change.value);
    /// }
    /// # }
    /// ```
    pub fn updates(&self) -> TableViewUpdates<V> {
        TableViewUpdates::new(self.shared.subscribe())
    }

    /// Waits until the view has read every message stored on the topic when it was called
    /// (upstream `refreshAsync`): it asks each partition for its last message id
    /// (GET_LAST_MESSAGE_ID), then waits until the view has read up to each. Empty partitions
    /// are not waited for. On a non-persistent topic, which stores nothing, it returns at once.
    ///
    /// Fails with [`Error::Timeout`] when the view reads nothing for the builder's
    /// [`read_timeout`](TableViewBuilder::read_timeout) (the client's operation timeout by
    /// default) while it waits: a broker without apache/pulsar#22610 may name an entry that is
    /// never delivered (an aborted transaction's) as the last one, and upstream's refresh would
    /// wait for ever. The bound is on a stretch without a message, not on the whole read, so
    /// a long topic is read whatever it takes; the view goes on reading after a timeout. Fails
    /// also with the error of the last-id request, with [`Error::Closed`] once the view is
    /// closed, or with the error that ended it. Cancel safe.
    pub async fn refresh(&self) -> Result<()> {
        if let Some(end) = self.shared.ended() {
            return Err(end.err().unwrap_or(Error::Closed));
        }
        if !self.persistent {
            return Ok(());
        }
        let targets = position::targets(self.query.each().await)?;
        let r = self
            .shared
            .wait_until(|read| read.covers(&targets), self.stall)
            .await;
        if let Err(Error::Timeout { after, .. }) = &r {
            let read = self.shared.read().positions.clone();
            tracing::warn!(topic = %self.topic, ?targets, ?read, ?after,
                "table view: no message read while waiting for the last message ids \
                 (a broker without apache/pulsar#22610 names entries it never delivers)");
        }
        r
    }

    /// Closes the view: its reader closes on the broker, streams end and listeners are let
    /// go; the map keeps what it had. Returns `Ok` for a close by the application (twice is
    /// fine), or the error that ended the view before (e.g. [`Error::ClosedByBroker`]).
    pub async fn close(&self) -> Result<()> {
        self.close.send_replace(true);
        self.shared.wait_end().await
    }
}

#[cfg(test)]
mod tests {
    /// A view is shared between tasks (`Arc<TableView>`), its stream moved into one.
    #[test]
    fn views_are_send_and_sync_and_streams_are_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<super::TableView>();
        send_sync::<super::TableView<String>>();
        send::<super::TableViewUpdates<bytes::Bytes>>();
        send::<super::TableViewBuilder>();
    }
}
