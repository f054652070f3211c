//! # Producing
//!
//! [`Client::producer`] returns a [`ProducerBuilder`]; [`create`](crate::ProducerBuilder::create)
//! registers the producer with the broker (on every partition of a partitioned topic). A
//! [`Producer`] is cheap to clone and clones share it, so hand one to every task that
//! publishes.
//!
//! ## Sending, and what a receipt means
//!
//! Sending has two steps, so sends are pipelined:
//!
//! 1. [`Producer::send`] *queues* the message and returns at once (or, with
//!    `block_if_queue_full`, once there is room) with a [`SendFuture`], the message's
//!    *receipt*. It fails right away only when the message cannot be queued: the producer is
//!    closing or has ended ([`Error::Closed`], or the error that ended it), or the queue is
//!    full ([`Error::ProducerQueueFull`]).
//! 2. The [`SendFuture`] resolves to the [`MessageId`] once the broker has **persisted** the
//!    message (its SEND_RECEIPT). `Ok(id)` is the only proof the message is stored.
//!
//! [`Producer::send_and_wait`] does both for one message.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client, ProducerMessage};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("orders").create().await?;
//!
//! // Queue 100 messages without waiting for each receipt...
//! let mut receipts = Vec::new();
//! for i in 0..100 {
//!     let msg = ProducerMessage::new(format!("order {i}"))
//!         .key(format!("customer-{}", i % 10))
//!         .property("source", "guide");
//!     receipts.push(producer.send(msg).await?);
//! }
//! // ... then collect them: receipts resolve in the order the messages were sent.
//! for receipt in receipts {
//!     let id = receipt.await?;
//!     assert_eq!(id.partition, -1); // not a partitioned topic
//! }
//! producer.close().await?;
//! # Ok(()) }
//! ```
//!
//! A failed receipt says what happened to that message, and only to it:
//!
//! | Receipt error | Meaning |
//! |---|---|
//! | [`Error::Timeout`] (`operation: "send"`) | no receipt within the send timeout; the outcome is **unknown** (the broker may have stored it) |
//! | [`Error::MessageTooBig`] | larger (after compression) than the broker's maximum message size, with chunking off (see [Large messages](#large-messages-chunking)); not sent |
//! | [`Error::Broker`] with [`ServerError::NotAllowed`] | the broker refused this message (SEND_ERROR); the others go on |
//! | [`Error::InvalidConfig`] | its compression codec is not compiled in (cargo feature off) |
//! | [`Error::Closed`] | still pending when the producer was closed |
//! | [`Error::ClosedByBroker`], [`Error::TopicTerminated`], [`Error::ProducerFenced`] | the producer ended for good while it was pending |
//!
//! A lost connection is **not** a receipt error: the producer reconnects with backoff and
//! re-sends every message not yet receipted, in order, with the same sequence ids (so a
//! broker with deduplication stores each once). Sequence ids continue from the broker's last
//! one for the producer name; [`ProducerMessage::sequence_id`] sets them explicitly.
//!
//! Dropping a [`SendFuture`] does not cancel the send: only the receipt is ignored.
//!
//! ## Cancel safety
//!
//! [`Producer::send`] is cancel safe: if its future is dropped before it completes (e.g. in a
//! losing `tokio::select!` branch), the message was not queued and will not be sent; once it
//! returned `Ok`, the message is queued and will be sent whether or not the receipt is
//! awaited.
//!
//! ```no_run
//! # async fn demo(producer: pulsar_sdk::Producer,
//! #     shutdown: tokio::sync::oneshot::Receiver<()>) -> pulsar_sdk::Result<()> {
//! tokio::select! {
//!     _ = shutdown => {} // the message was not queued
//!     queued = producer.send("hello") => {
//!         let receipt = queued?; // queued: it will be sent
//!         tokio::spawn(async move {
//!             if let Err(e) = receipt.await {
//!                 eprintln!("not stored: {e}");
//!             }
//!         });
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! ## Messages: keys, properties, delayed delivery
//!
//! [`ProducerMessage`] carries the payload (anything `Into<Bytes>`: `&'static str`, `String`,
//! `Vec<u8>`, [`bytes::Bytes`]) and optional metadata:
//!
//! - [`key`](crate::ProducerMessage::key): the partition key. Messages with the same key go to the
//!   same partition (the Java client's hash, so both clients agree) and, on a Key_Shared
//!   subscription, to the same consumer. [`ordering_key`](crate::ProducerMessage::ordering_key)
//!   overrides the key for Key_Shared dispatch only.
//! - [`property`](crate::ProducerMessage::property), [`event_time`](crate::ProducerMessage::event_time).
//! - [`deliver_after`](crate::ProducerMessage::deliver_after) /
//!   [`deliver_at`](crate::ProducerMessage::deliver_at): delayed delivery (honoured by the broker on
//!   Shared and Key_Shared subscriptions). Such a message is sent on its own, never batched.
//!
//! ## Batching
//!
//! Batching is on by default: messages are grouped into one entry of at most 1000 messages or
//! 128 KiB, and a batch waits at most 10 ms to fill. [`batching(false)`](crate::ProducerBuilder::batching)
//! sends each message on its own; [`batching_options`](crate::ProducerBuilder::batching_options)
//! changes the limits. For Key_Shared consumers, set [`BatchingOptions::key_based`] so a batch
//! never mixes keys (the broker dispatches a batch as a whole, by its key).
//!
//! Compression applies to the whole batch (or message): [`CompressionType`] `Lz4`, `Zlib`,
//! `Zstd` or `Snappy`, byte-compatible with the official clients. Each codec is a cargo
//! feature (all on by default); [`CompressionType::is_available`] says whether this build has
//! it.
//!
//! ```no_run
//! use std::time::Duration;
//! use pulsar_sdk::producer::BatchingOptions;
//! use pulsar_sdk::CompressionType;
//!
//! # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
//! let producer = client
//!     .producer("events")
//!     .name("events-writer-1") // unique per topic; the broker assigns one by default
//!     .batching_options(BatchingOptions {
//!         max_messages: 500,
//!         max_bytes: 256 * 1024,
//!         max_publish_delay: Duration::from_millis(5),
//!         key_based: true,
//!     })
//!     .compression(CompressionType::Lz4)
//!     .create()
//!     .await?;
//! # let _ = producer; Ok(()) }
//! ```
//!
//! ## Large messages (chunking)
//!
//! A message larger (after compression) than the broker's `max_message_size` (announced when
//! the client connects; 5 MiB when the broker does not say) fails with
//! [`Error::MessageTooBig`] unless the producer chunks (PIP-37):
//! [`chunking(true)`](crate::ProducerBuilder::chunking) splits such a message into chunks that
//! the broker stores as separate entries and every consumer (this crate's and the official
//! clients') reassembles into one message. Chunking turns batching off (the two cannot be
//! combined: asking for both fails `create` with [`Error::InvalidConfig`]), and needs a
//! persistent topic. Messages that fit are sent as usual.
//!
//! - The payload is compressed first, then split; each chunk (metadata included) stays within
//!   `max_message_size`, or within
//!   [`chunk_max_message_size`](crate::ProducerBuilder::chunk_max_message_size) when smaller.
//! - The receipt is one [`MessageId`](crate::MessageId) for the whole message: the last
//!   chunk's id, carrying where the first chunk is
//!   ([`first_chunk_id`](crate::MessageId::first_chunk_id), displayed `first-last` like
//!   upstream). It is the id consumers see, and works for ack and seek (a seek goes to the
//!   first chunk).
//! - A chunked message counts once against the client
//!   [`memory_limit`](crate::ClientBuilder::memory_limit) (its payload size) and once against
//!   [`max_pending_messages`](crate::ProducerBuilder::max_pending_messages). The client memory
//!   limit (64 MiB by default) must hold the largest message; with
//!   [`block_if_queue_full`](crate::ProducerBuilder::block_if_queue_full) off, a send that does
//!   not fit fails with [`Error::ProducerQueueFull`](crate::Error::ProducerQueueFull).
//! - The chunks of one message are consecutive on the wire (no other message of the producer
//!   comes between them); after a reconnect the chunks not yet receipted are re-sent in order
//!   with the rest of the pending queue. Only the last chunk's receipt completes the send.
//! - Consumers reassemble chunks up to their
//!   [`max_chunked_message_bytes`](crate::ConsumerBuilder::max_chunked_message_bytes) (128 MiB
//!   by default); see the [consuming chapter](super::consuming).
//!
//! ```no_run
//! # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
//! let producer = client.producer("videos").chunking(true).create().await?;
//! let id = producer.send_and_wait(vec![0u8; 20_000_000]).await?; // 4 chunks at 5 MiB
//! assert!(id.is_chunked());
//! # Ok(()) }
//! ```
//!
//! ## Send timeout and queue limits
//!
//! - [`send_timeout`](crate::ProducerBuilder::send_timeout) (default 30 s, zero disables it): a
//!   message without a receipt after that long fails with [`Error::Timeout`], and with it every
//!   other pending message (also those of the batch being built), as upstream's Java client
//!   does, so a retry cannot put them out of order; the producer keeps going.
//! - Pending messages (queued, not yet receipted) are bounded by the client's
//!   [`memory_limit`](crate::ClientBuilder::memory_limit) (payload bytes across all its
//!   producers, with their keys, properties and the producer name each frame carries, 64 MiB
//!   by default) and optionally by
//!   [`max_pending_messages`](crate::ProducerBuilder::max_pending_messages) per partition (0, the
//!   default, means no count limit).
//! - When either is reached, `send` fails with [`Error::ProducerQueueFull`], or with
//!   [`block_if_queue_full(true)`](crate::ProducerBuilder::block_if_queue_full) waits for room
//!   (which is how to apply back-pressure to the code that produces).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pulsar_sdk::{mock::MockBroker, Client, Error};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client
//!     .producer("slow")
//!     .batching(false)
//!     .send_timeout(Duration::from_millis(200))
//!     .create()
//!     .await?;
//!
//! broker.set_unresponsive(true); // the broker stops answering
//! let receipt = producer.send("hello").await?; // queued
//! match receipt.await {
//!     Err(Error::Timeout { operation, .. }) => assert_eq!(operation, "send"),
//!     other => panic!("expected a send timeout, got {other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Access modes and initial subscriptions
//!
//! [`access_mode`](crate::ProducerBuilder::access_mode) takes a [`ProducerAccessMode`]: `Shared` (the
//! default), `Exclusive` (creation fails if another producer is connected),
//! `WaitForExclusive`, or `ExclusiveWithFencing` (the new producer fences the old one, which
//! ends with [`Error::ProducerFenced`]).
//! [`initial_subscription_name`](crate::ProducerBuilder::initial_subscription_name) (PIP-124) asks the
//! broker to create a subscription along with the topic, so nothing published before the
//! first consumer subscribes is lost.
//!
//! ## Flush and close
//!
//! - [`Producer::flush`] sends open batches now and waits until every message sent before it
//!   is receipted **or failed**. It is a barrier, not a result: it returns `Ok` even when some
//!   of those messages failed (each failure is on its own receipt), and fails only when the
//!   producer itself has ended.
//! - [`Producer::close`] closes the producer for every clone: it sends the batch being
//!   assembled, then closes on the broker, which answers once what it received is persisted.
//!   Messages still pending when the close ends fail with [`Error::Closed`], so **flush (or
//!   await the receipts) before closing** to know every message is stored. Bounded by the
//!   operation timeout ([`Error::Timeout`]); closing twice is fine.
//! - Dropping the last clone lets pending messages finish, then closes the producer in the
//!   background.
//! - [`Client::close`] closes every producer gracefully: each sends what it holds and waits
//!   for its receipts.
//!
//! ```no_run
//! # async fn demo(producer: pulsar_sdk::Producer) -> pulsar_sdk::Result<()> {
//! let receipt = producer.send("last words").await?;
//! producer.flush().await?; // every earlier message is receipted or failed
//! receipt.await?; // this one is stored (or the error says why not)
//! producer.close().await?;
//! # Ok(()) }
//! ```
//!
//! [`Client::producer`]: crate::Client::producer
//! [`Client::close`]: crate::Client::close
//! [`ProducerBuilder`]: crate::ProducerBuilder
//! [`Producer`]: crate::Producer
//! [`Producer::send`]: crate::Producer::send
//! [`Producer::send_and_wait`]: crate::Producer::send_and_wait
//! [`Producer::flush`]: crate::Producer::flush
//! [`Producer::close`]: crate::Producer::close
//! [`SendFuture`]: crate::SendFuture
//! [`MessageId`]: crate::MessageId
//! [`ProducerMessage`]: crate::ProducerMessage
//! [`ProducerMessage::sequence_id`]: crate::ProducerMessage::sequence_id
//! [`BatchingOptions::key_based`]: crate::producer::BatchingOptions::key_based
//! [`ProducerAccessMode`]: crate::producer::ProducerAccessMode
//! [`CompressionType`]: crate::CompressionType
//! [`CompressionType::is_available`]: crate::CompressionType::is_available
//! [`Error::Closed`]: crate::Error::Closed
//! [`Error::ProducerQueueFull`]: crate::Error::ProducerQueueFull
//! [`Error::Timeout`]: crate::Error::Timeout
//! [`Error::MessageTooBig`]: crate::Error::MessageTooBig
//! [`Error::Broker`]: crate::Error::Broker
//! [`Error::InvalidConfig`]: crate::Error::InvalidConfig
//! [`Error::ClosedByBroker`]: crate::Error::ClosedByBroker
//! [`Error::TopicTerminated`]: crate::Error::TopicTerminated
//! [`Error::ProducerFenced`]: crate::Error::ProducerFenced
//! [`ServerError::NotAllowed`]: crate::ServerError::NotAllowed
