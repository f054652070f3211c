//! # Table views
//!
//! A [`TableView`] ([`Client::table_view`]) is a topic read as a map: each message's key gets
//! its latest value, and the view keeps following the topic (the Java client's `TableView`).
//! Use one for configuration, prices, the state of entities: anything where the last message
//! of a key is what counts.
//!
//! - It reads the topic from the earliest message (every partition of a partitioned topic,
//!   and the partitions the topic gains later; the compacted topic on a persistent one, as
//!   upstream), on a reader of its own.
//! - A message with a key sets that key's value. A message with an empty payload (a
//!   *tombstone*: the Java client's `value(null)`) removes its key. A message without a key
//!   changes nothing.
//! - `create()` returns once the view has read every message stored when it was made; an
//!   empty topic gives an empty view at once. [`TableView::refresh`] waits in the same way for
//!   what is stored when it is called. Both fail with `Error::Timeout` when the view reads
//!   nothing for the builder's `read_timeout` meanwhile (the client's operation timeout by
//!   default): a broker without apache/pulsar#22610 may name as the last message one it never
//!   delivers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, schema::StringSchema, Client, ProducerMessage};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("settings").schema(StringSchema).create().await?;
//! for (key, value) in [("color", "red"), ("size", "L"), ("color", "blue")] {
//!     let msg = ProducerMessage::default().key(key);
//!     producer.send_with(&value.to_string(), msg).await?.await?;
//! }
//!
//! // Values as text (without `schema`, they are the payload bytes).
//! let settings = client.table_view("settings").schema(StringSchema).create().await?;
//! assert_eq!(settings.get("color").as_deref(), Some("blue"));
//! assert_eq!(settings.len(), 2);
//!
//! // An empty payload removes the key.
//! let tombstone = ProducerMessage::default().key("size");
//! producer.send_with(&String::new(), tombstone).await?.await?;
//! settings.refresh().await?;
//! assert!(!settings.contains_key("size"));
//! settings.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## Watching it change
//!
//! [`TableView::for_each_and_listen`] calls a closure with every entry, then with every change
//! (`None` for a removed key), with nothing missed in between; [`TableView::listen`] only with
//! the changes. Both run on the view's task: keep them short. [`TableView::updates`] is the
//! same as a [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) to
//! await in a task of yours. It is bounded: a stream that falls more than 1024 changes behind
//! loses the oldest, and the next change says how many
//! ([`TableViewUpdate::missed`](crate::TableViewUpdate::missed)); the view itself has them all.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use pulsar_sdk::{mock::MockBroker, schema::StringSchema, Client, ProducerMessage};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let prices = client.table_view("prices").schema(StringSchema).create().await?;
//! let mut updates = prices.updates();
//!
//! let producer = client.producer("prices").create().await?;
//! producer.send_and_wait(ProducerMessage::new("10").key("apple")).await?;
//! producer.send_and_wait(ProducerMessage::new("").key("apple")).await?;
//!
//! let set = updates.next().await.unwrap();
//! assert_eq!((set.key.as_str(), set.value.as_deref()), ("apple", Some("10")));
//! let removed = updates.next().await.unwrap();
//! assert_eq!((removed.key.as_str(), removed.value), ("apple", None));
//! # Ok(()) }
//! ```
//!
//! ## Partitions, and what it costs
//!
//! On a partitioned topic the view reads every partition into one map; partitions the topic
//! gains are read from their start as soon as the client sees them (PIP-247 pushes, or
//! polling every [`auto_update_partitions_interval`](crate::ClientBuilder::auto_update_partitions_interval):
//! set on the client, where Java sets it per view).
//!
//! The map holds one entry per live key: it is your data, as large as the topic's key space.
//! Values are copied out of the received frames (a value kept for long must not keep the whole
//! batch it came in alive). Everything else the view holds is bounded: the reader's receiver
//! queue, and the change streams above.
//!
//! [`TableView`]: crate::TableView
//! [`TableView::refresh`]: crate::TableView::refresh
//! [`TableView::for_each_and_listen`]: crate::TableView::for_each_and_listen
//! [`TableView::listen`]: crate::TableView::listen
//! [`TableView::updates`]: crate::TableView::updates
//! [`Client::table_view`]: crate::Client::table_view
