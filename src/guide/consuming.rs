//! # Consuming
//!
//! [`Client::consumer`] returns a [`ConsumerBuilder`]; [`subscribe`](crate::ConsumerBuilder::subscribe)
//! joins (or creates) a subscription on every partition of the topic and merges them into one
//! [`Consumer`]. Receive with [`Consumer::recv`], or use the consumer as a
//! [`futures::Stream`] of `Result<Message>`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! use pulsar_sdk::{mock::MockBroker, Client, InitialPosition, SubscriptionType};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("orders").create().await?;
//! for i in 0..3 {
//!     producer.send_and_wait(format!("order {i}")).await?;
//! }
//!
//! let mut consumer = client
//!     .consumer("orders")
//!     .subscription("billing")
//!     .subscription_type(SubscriptionType::Shared)
//!     .initial_position(InitialPosition::Earliest) // a new subscription starts at the beginning
//!     .subscribe()
//!     .await?;
//! let first = consumer.recv().await?;
//! assert_eq!(first.payload_str(), Some("order 0"));
//! consumer.ack(&first)?;
//! while let Some(msg) = consumer.next().await {
//!     let msg = msg?;
//!     consumer.ack(&msg)?;
//!     if msg.payload_str() == Some("order 2") {
//!         break;
//!     }
//! }
//! consumer.close().await?; // flushes the acks first
//! # Ok(()) }
//! ```
//!
//! A [`Message`] has its [`id`](crate::Message::id), payload (a zero-copy [`bytes::Bytes`]),
//! key, properties, event and publish times, producer name and
//! [`redelivery_count`](crate::Message::redelivery_count) (0 on the first delivery).
//!
//! ## Subscription types
//!
//! | [`SubscriptionType`] | Who gets what | Cumulative acks |
//! |---|---|---|
//! | `Exclusive` (default) | one consumer; a second one is refused (`ConsumerBusy`) | yes |
//! | `Failover` | one active consumer, the others take over when it leaves ([`Consumer::active_updates`]) | yes |
//! | `Shared` | messages spread round-robin over every consumer; no ordering | no |
//! | `KeyShared` | messages of one key always go to the same consumer, in order | no |
//!
//! A new subscription starts at [`InitialPosition::Latest`] (the default: only messages
//! published from now on) or `Earliest`. Subscriptions are durable (the broker keeps the
//! position) on persistent topics and always non-durable on `non-persistent://` topics
//! (PIP-245); see [`subscription_mode`](crate::ConsumerBuilder::subscription_mode).
//! [`receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size) (default 1000) is how many
//! messages the broker may push ahead of the application; see
//! [`partitions`](super::partitions) for partitioned consumers.
//!
//! ### What a consumer holds: two bounds
//!
//! The queue between the broker and the application is bounded twice, and the smaller bound
//! wins:
//!
//! - in messages: `receiver_queue_size` (for a partitioned consumer, each partition's share of
//!   [`max_total_receiver_queue_size_across_partitions`](crate::ConsumerBuilder::max_total_receiver_queue_size_across_partitions));
//! - in bytes: the consumer's byte budget, half the client's
//!   [`memory_limit`](crate::ClientBuilder::memory_limit) (32 MiB by default), shared by the
//!   client's consumers and by every partition and topic of one consumer. It counts queued
//!   messages (their decompressed payload and what the queue keeps per message) until the
//!   application takes them, and incomplete chunked messages by the bytes that arrived.
//!
//! At the byte bound the consumer grants no more flow permits, so the broker stops sending until
//! the application takes messages out; no message is dropped or failed for it, and a message
//! larger than the whole budget is still delivered. Consumers never take more than half of the
//! memory limit, so producers of the same client always have the other half: a pipeline that
//! consumes and produces cannot block its own `send` with prefetched messages. The first FLOW
//! of a consumer whose budget cannot hold a queue of maximum-size messages is smaller than the
//! queue and grows with the sizes of the first messages (see `receiver_queue_size`). A consumer
//! holding back permits grants again as soon as memory comes back anywhere in the client
//! (another consumer's messages taken, a producer's sends acknowledged).
//!
//! Permits count messages, not bytes (as upstream): after a run of small messages, the
//! permits already granted may each bring a message of the broker's maximum size, so the
//! budget can be overshot by at most the permits out times that size (the next grant follows
//! the larger size at once). Between the connection and the consumer, at most 1 MiB of
//! received messages (or a quarter of the budget) waits; past it the connection stops reading
//! from the broker until the consumer catches up. Every producer and consumer sharing that
//! connection waits meanwhile (as upstream's, whose connection thread hands each message to
//! its consumer): never block the runtime a consumer runs on. A pause longer than two
//! keep-alive intervals is logged once (warn, "connection not reading").
//!
//! ### An auto-scaled receiver queue (PIP-74)
//!
//! With [`auto_scaled_receiver_queue_size(true)`](crate::ConsumerBuilder::auto_scaled_receiver_queue_size)
//! (off by default, as in Java) each partition's queue starts at 1 message and doubles, up to
//! `receiver_queue_size`, each time a `recv` finds it empty after the broker had used every
//! permit it was given, while the client memory limit is less than 75 % used; it halves once
//! the usage passes 95 %. A consumer that keeps up grows to its full queue; one that is slower
//! than its messages keeps a small one and holds little memory.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client, InitialPosition};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("events").batching(false).create().await?;
//! for i in 0..20 {
//!     producer.send_and_wait(format!("event {i}")).await?;
//! }
//! let mut consumer = client
//!     .consumer("events")
//!     .subscription("audit")
//!     .initial_position(InitialPosition::Earliest)
//!     .receiver_queue_size(8) // the most it grows to
//!     .auto_scaled_receiver_queue_size(true) // starts at 1
//!     .subscribe()
//!     .await?;
//! for i in 0..20 {
//!     let msg = consumer.recv().await?;
//!     assert_eq!(msg.payload_str(), Some(format!("event {i}").as_str()));
//!     consumer.ack(&msg)?;
//!     assert!(consumer.stats().totals.receiver_queue_len <= 8);
//! }
//! # Ok(()) }
//! ```
//!
//! ### A zero-size receiver queue: one message at a time
//!
//! With `receiver_queue_size(0)` (Java's `ZeroQueueConsumerImpl`) nothing is pushed ahead: the
//! broker is granted one flow permit when a `recv` waits with nothing queued, so every message
//! goes to a consumer that asked for it. On a Shared subscription this is what long processing
//! wants (a slow consumer holds no messages another consumer could be working on) and what
//! strict fairness wants (consumers that alternate `recv` calls get alternate messages). It
//! costs a round trip to the broker per message.
//!
//! - A `recv` dropped before it completes (a `select!` branch that lost) leaves its permit out;
//!   the message it brings waits for the next `recv`, which sends no other permit. A stream
//!   polled and then left alone likewise holds at most that one message.
//! - After a reconnect or a seek, a permit is asked again only if a `recv` waits.
//! - A batched message (our producers batch by default) is one entry: its messages are handed
//!   out by the next `recv`s before another permit is asked. Upstream closes the consumer on a
//!   batch instead; the permits the broker counts for it are given back with the next one.
//! - It works on one non-partitioned topic, readers included. A partitioned topic, a list of
//!   topics, a pattern or `retry_enable` (a second topic) is refused with
//!   [`Error::InvalidConfig`] when subscribing, as upstream refuses them; use a receiver queue
//!   of 1 there (at most one message prefetched per partition).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client, InitialPosition, SubscriptionType};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("jobs").create().await?;
//! for i in 0..3 {
//!     producer.send_and_wait(format!("job {i}")).await?;
//! }
//! let worker = || {
//!     client
//!         .consumer("jobs")
//!         .subscription("workers")
//!         .subscription_type(SubscriptionType::Shared)
//!         .initial_position(InitialPosition::Earliest)
//!         .receiver_queue_size(0) // no prefetch: one message per recv
//!         .subscribe()
//! };
//! let (mut first, mut second) = (worker().await?, worker().await?);
//! let job = first.recv().await?;
//! assert_eq!(job.payload_str(), Some("job 0"));
//! // `first` holds nothing it did not ask for: the next job goes to whoever asks next.
//! assert_eq!(second.recv().await?.payload_str(), Some("job 1"));
//! assert_eq!(first.recv().await?.payload_str(), Some("job 2"));
//! first.ack(&job)?;
//! # Ok(()) }
//! ```
//!
//! ## Acknowledging
//!
//! - [`Consumer::ack`] / [`ack_id`](crate::Consumer::ack_id): this message is processed. Acks are
//!   grouped (for 100 ms or 1000 acks, see
//!   [`ack_group_time`](crate::ConsumerBuilder::ack_group_time)) and sent in the background;
//!   the call only queues the ack. A message of a batch is acked on the broker once every
//!   message of its batch is (or, with
//!   [`batch_index_ack`](crate::ConsumerBuilder::batch_index_ack), precisely, with an ack set).
//! - [`Consumer::ack_cumulative`] / [`ack_cumulative_id`](crate::Consumer::ack_cumulative_id):
//!   everything up to this message on its partition. Exclusive and Failover only; on Shared
//!   and Key_Shared it fails with [`Error::InvalidOperation`] and sends nothing.
//! - Acks made while the consumer reconnects are kept and sent once it is subscribed again.
//!   Acks made once it is closing fail with [`Error::Closed`]; a close flushes the acks made
//!   before it.
//!
//! ### Acking from other tasks: [`Acker`]
//!
//! [`Consumer::recv`] takes `&mut self`, so one loop receives; [`Consumer::acker`] hands out an
//! [`Acker`]: cheap to clone, `Send + Sync + 'static`, with `ack`, `ack_id`, `nack`,
//! `nack_id`, `ack_cumulative` and `ack_cumulative_id`. Workers ack what they processed while
//! the loop keeps receiving. It does not keep the consumer alive and fails with
//! [`Error::Closed`] once the consumer is closing or closed.
//!
//! `recv` is cancel safe (a dropped `recv` loses no message: the next one returns it), so it
//! fits in a `tokio::select!` with a shutdown signal:
//!
//! ```no_run
//! # async fn demo(mut consumer: pulsar_sdk::Consumer,
//! #     mut shutdown: tokio::sync::watch::Receiver<bool>) -> pulsar_sdk::Result<()> {
//! let acker = consumer.acker();
//! let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(64)); // at most 64 in flight
//! loop {
//!     let permit = limit.clone().acquire_owned().await.expect("never closed");
//!     tokio::select! {
//!         _ = shutdown.changed() => break,
//!         msg = consumer.recv() => {
//!             let msg = msg?;
//!             let acker = acker.clone();
//!             tokio::spawn(async move {
//!                 let processed = !msg.payload.is_empty(); // ... your work ...
//!                 let _ = if processed { acker.ack(&msg) } else { acker.nack(&msg) };
//!                 drop(permit);
//!             });
//!         }
//!     }
//! }
//! consumer.close().await
//! # }
//! ```
//!
//! `examples/pipeline.rs` in the repository is a complete consume → transform → produce
//! service built this way (at-least-once, bounded, with a dead-letter topic and a graceful
//! Ctrl-C).
//!
//! ## Batch receive
//!
//! [`Consumer::batch_recv`] returns several messages at once ([`Messages`], Java's
//! `batchReceive`): it completes as soon as one bound of the consumer's
//! [`BatchReceivePolicy`] is reached, with what was queued then: `max_num_messages` (no bound
//! by default), `max_num_bytes` of payload (10 MiB) or the `timeout`, counted from the call
//! (100 ms; a batch cut by it may be empty). Each message is taken as `recv` takes it (flow
//! permits, the ack-timeout clock, interceptors) when the batch completes, so a `batch_recv`
//! dropped in a `select!` loses nothing, and `recv` and `batch_recv` can be mixed. A
//! multi-topic, pattern or partitioned consumer fills a batch from all of its topics (or only
//! from one per batch, with `messages_from_multi_topics(false)`).
//! [`Consumer::ack_all`] acks a whole batch (each message),
//! [`nack_all`](crate::Consumer::nack_all) nacks it, and on Exclusive and Failover
//! subscriptions [`ack_cumulative_all`](crate::Consumer::ack_cumulative_all) acks the last
//! message of each partition in it cumulatively; the [`Acker`] has the same three. A typed
//! consumer's [`batch_recv`](crate::schema::TypedConsumer::batch_recv) returns
//! [`TypedMessages`](crate::schema::TypedMessages), each message decoded as `recv` decodes
//! it, with the same `ack_all`, `nack_all` and `ack_cumulative_all`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pulsar_sdk::{mock::MockBroker, BatchReceivePolicy, Client, InitialPosition};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("events").create().await?;
//! for i in 0..5 {
//!     producer.send_and_wait(format!("event {i}")).await?;
//! }
//! let mut consumer = client
//!     .consumer("events")
//!     .subscription("loader")
//!     .initial_position(InitialPosition::Earliest)
//!     .batch_receive_policy(
//!         BatchReceivePolicy::default()
//!             .max_num_messages(3)
//!             .timeout(Duration::from_secs(1)),
//!     )
//!     .subscribe()
//!     .await?;
//! let batch = consumer.batch_recv().await?; // three queued: complete at once
//! assert_eq!(batch.len(), 3);
//! assert_eq!(batch[0].payload_str(), Some("event 0"));
//! consumer.ack_all(&batch)?;
//! let rest = consumer.batch_recv().await?; // two left: the timeout ends it
//! assert_eq!(rest.len(), 2);
//! consumer.ack_cumulative_all(&rest)?; // Exclusive (the default): the last one per partition
//! consumer.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## Negative acks, ack timeout, redelivery
//!
//! - [`Consumer::nack`] (or [`Acker::nack`]): redeliver this message after
//!   [`negative_ack_delay`](crate::ConsumerBuilder::negative_ack_delay) (default **60 s**; set a
//!   few milliseconds in tests), or after a delay growing with its redelivery count with
//!   [`negative_ack_backoff`](crate::ConsumerBuilder::negative_ack_backoff) and a
//!   [`RedeliveryBackoff`]. Prefer `nack(&msg)` to `nack_id(id)`: the id does not carry the
//!   redelivery count the backoff needs.
//! - [`ack_timeout`](crate::ConsumerBuilder::ack_timeout) (off by default, at least 1 s):
//!   messages not acked within it are redelivered.
//!
//! ## Dead-letter and retry topics
//!
//! With a [`DeadLetterPolicy`] on a Shared or Key_Shared subscription, a message is delivered
//! at most `max_redeliver_count + 1` times: nacked (or timed out) once more, it is published to
//! the dead-letter topic (by default `<topic>-<subscription>-DLQ`, with the `REAL_TOPIC`,
//! `ORIGIN_MESSAGE_ID` and `REAL_SUBSCRIPTION` properties and the original key and
//! properties) and only then acked. A failed publish leaves it for redelivery: nothing is
//! lost. The policy's `initial_subscription_name` (PIP-124) makes the broker create that
//! subscription with the dead-letter topic, so dead letters are kept until someone reads them.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pulsar_sdk::{mock::MockBroker, Client, DeadLetterPolicy, InitialPosition, SubscriptionType};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let mut consumer = client
//!     .consumer("payments")
//!     .subscription("ledger")
//!     .subscription_type(SubscriptionType::Shared)
//!     .initial_position(InitialPosition::Earliest)
//!     .negative_ack_delay(Duration::from_millis(10))
//!     .dead_letter_policy(DeadLetterPolicy::new(1).initial_subscription_name("audit"))
//!     .subscribe()
//!     .await?;
//! let dlq = "persistent://public/default/payments-ledger-DLQ";
//! assert_eq!(consumer.dead_letter_topic(), Some(dlq));
//!
//! client.producer("payments").create().await?.send_and_wait("poison").await?;
//! for delivery in 0..2 {
//!     let msg = consumer.recv().await?;
//!     assert_eq!(msg.redelivery_count, delivery);
//!     consumer.nack(&msg)?; // the second nack sends it to the dead-letter topic
//! }
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
//! while broker.topic_messages(dlq) == 0 {
//!     assert!(tokio::time::Instant::now() < deadline, "not dead-lettered");
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! # Ok(()) }
//! ```
//!
//! With [`retry_enable`](crate::ConsumerBuilder::retry_enable) the consumer also subscribes to
//! the retry topic (`<topic>-<subscription>-RETRY` by default), and
//! [`Consumer::reconsume_later`] publishes a message there to come back after a delay, then
//! acks it; past the policy's maximum (16 without a policy) it goes to the dead-letter topic.
//! This works on every subscription type.
//!
//! ## Seek
//!
//! [`Consumer::seek`] moves the subscription to a message id (the next message received is that
//! one; [`MessageId::EARLIEST`] and [`MessageId::LATEST`] work too), and
//! [`Consumer::seek_by_time`] to the first message published at or after a time. On a
//! partitioned consumer a seek by id moves only the partition that owns the id. Messages
//! queued before the seek are dropped; the broker sends from the new position.
//! [`Consumer::last_message_ids`] asks for the last stored id of each partition.
//!
//! ```no_run
//! # async fn demo(mut consumer: pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
//! use pulsar_sdk::MessageId;
//! let replay_from: MessageId = "123:45:-1".parse()?; // ids print and parse back
//! consumer.seek(replay_from).await?;
//! let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
//! let millis = an_hour_ago.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
//! consumer.seek_by_time(millis).await?;
//! # Ok(()) }
//! ```
//!
//! [`Consumer::unsubscribe`] deletes the subscription (the consumer must be its only one).
//!
//! ## Many topics, and patterns
//!
//! [`Client::multi_topic_consumer`] receives from several topics
//! (partitioned or not) as one stream; [`Message::topic`](crate::Message::topic) says where a
//! message came from, and acks, nacks, the ack timeout, dead-lettering (one dead-letter topic per
//! topic), [`Consumer::seek_by_time`], [`Consumer::unsubscribe`] and close cover every topic. A
//! bare [`MessageId`](crate::MessageId) names no topic: ack the [`Message`], or use
//! [`Acker::ack_topic_id`] with its topic.
//!
//! [`Client::pattern_consumer`] follows every topic of a namespace whose name matches a
//! regex: topics created later join, deleted ones leave, and
//! [`Consumer::topic_updates`] tells each change. The client asks the broker for a PIP-145
//! topic-list watcher when it has one, and polls the namespace's topic list every
//! [`pattern_auto_discovery_period`](crate::ConsumerBuilder::pattern_auto_discovery_period)
//! (1 minute) in any case.
//!
//! **A topic that joins starts at the consumer's initial position.** With the default,
//! [`InitialPosition::Latest`], the subscription a pattern consumer creates on a new topic
//! starts after what the topic already holds, so messages published to it before the consumer
//! discovered it (up to one discovery period without a watcher) are not delivered. Java's
//! pattern consumer does the same. Subscribe with
//! [`initial_position(InitialPosition::Earliest)`](crate::ConsumerBuilder::initial_position) when
//! a new topic's first messages matter: a topic the subscription already exists on resumes where
//! it was either way.
//!
//! **Patterns, retry and dead-letter topics.** The default retry and dead-letter topics are
//! named after the topic (`orders-eu-audit-RETRY`, `orders-eu-audit-DLQ`), so a pattern like
//! `orders-.*` matches them too. With [`retry_enable`](crate::ConsumerBuilder::retry_enable)
//! each matched topic is subscribed together with its retry topic, which is created if it does
//! not exist yet; and a pattern consumer with `retry_enable` or a dead-letter policy leaves out
//! of its topics its own letters: those its policy names, and those ending in
//! `-<subscription>-RETRY` (with `retry_enable`, unless the policy names the retry topic) or
//! `-<subscription>-DLQ` (unless the policy names the dead-letter topic), so it neither consumes its retry topic twice nor consumes again what it
//! dead-lettered. Upstream's Java pattern consumer filters only system topics: there, an
//! `orders-.*` pattern consumes its own `-DLQ` topic. Another subscription's letters (another
//! `-<subscription>-` in the name) are ordinary topics to this one: name patterns (or the
//! policy's topics) so they do not match if that is not wanted.
//!
//! A consumer that reached the end of a terminated topic stays attached, as in Java:
//! [`Consumer::has_reached_end_of_topic`] says so (for a multi-topic or pattern consumer, once
//! every topic has), [`Consumer::recv`] reports it once as
//! [`Error::TopicTerminated`](crate::Error::TopicTerminated), and [`Consumer::close`] detaches
//! it. A [`Reader`] acks what it reads, so it learns the end too.
//!
//! ```no_run
//! # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
//! let mut consumer = client
//!     .pattern_consumer("persistent://public/default/orders-.*")
//!     .subscription("audit")
//!     .subscribe()
//!     .await?;
//! let mut changes = consumer.topic_updates();
//! tokio::spawn(async move {
//!     while let Some(change) = changes.next_change().await {
//!         println!("joined {:?}, left {:?}", change.added, change.removed);
//!     }
//! });
//! let msg = consumer.recv().await?;
//! println!("{} from {}", msg.id, msg.topic);
//! consumer.ack(&msg)?;
//! # Ok(()) }
//! ```
//!
//! ## Readers
//!
//! A [`Reader`] ([`Client::reader`]) reads a topic in order from a position you choose, on a
//! non-durable subscription of its own: no acks to make (it acks what it reads itself, like
//! Java's), nothing kept on the broker once it is gone.
//! Start it at [`start_earliest`](crate::ReaderBuilder::start_earliest),
//! [`start_latest`](crate::ReaderBuilder::start_latest) (the default), or after (with
//! [`start_inclusive`](crate::ReaderBuilder::start_inclusive), at) a
//! [`start_message_id`](crate::ReaderBuilder::start_message_id). A start id is refused on a
//! partitioned topic ([`Error::InvalidConfig`], as in the Java client): start at earliest or
//! latest and [`seek`](crate::Reader::seek) the partition instead.
//!
//! [`Reader::has_message_available`] asks the broker whether anything is left to read from
//! where the reader is, so a reader can drain a topic and stop:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("config").create().await?;
//! for setting in ["a=1", "b=2", "a=3"] {
//!     producer.send_and_wait(setting).await?;
//! }
//!
//! let mut reader = client.reader("config").start_earliest().create().await?;
//! let mut seen = Vec::new();
//! while reader.has_message_available().await? {
//!     let msg = reader.recv().await?;
//!     seen.push(msg.payload_str().unwrap_or_default().to_owned());
//! }
//! assert_eq!(seen, ["a=1", "b=2", "a=3"]);
//! reader.close().await?;
//! # Ok(()) }
//! ```
//!
//! `Reader::recv` is cancel safe like `Consumer::recv`, and a reader is a
//! [`futures::Stream`] too.
//!
//! ## Chunked messages
//!
//! A message that a producer split into chunks (PIP-37; this crate's
//! [`chunking`](crate::ProducerBuilder::chunking) or an official client's) arrives as one
//! [`Message`](crate::Message) once all its chunks are in, whatever the subscription type.
//! Its id is the last chunk's, carrying the first chunk's
//! ([`MessageId::first_chunk_id`](crate::MessageId::first_chunk_id)); ack, nack, ack timeout,
//! cumulative ack and the dead-letter topic act on every chunk, and a seek to it starts at its
//! first chunk. Upstream's knobs, with its defaults:
//! [`max_pending_chunked_messages`](crate::ConsumerBuilder::max_pending_chunked_messages) (10
//! messages being assembled; the oldest is evicted, and acked when
//! [`auto_ack_oldest_chunked_message_on_queue_full`](crate::ConsumerBuilder::auto_ack_oldest_chunked_message_on_queue_full)),
//! [`expire_time_of_incomplete_chunked_message`](crate::ConsumerBuilder::expire_time_of_incomplete_chunked_message)
//! (60 s), plus [`max_chunked_message_bytes`](crate::ConsumerBuilder::max_chunked_message_bytes)
//! (128 MiB held in incomplete messages; a larger claim is refused as an undecodable message).
//!
//! The receiver queue counts whole messages (a chunk that does not complete a message gives
//! its flow permit back at once, like upstream); the bytes of the reassembled messages and of
//! those being assembled count in the consumer's byte budget. With the budget full, only the
//! partition holding the consumer's oldest incomplete message gets permits (once the
//! application has taken what is queued), so incomplete messages complete one after the other
//! rather than all growing at once. A message may have at most 262,144 chunks.
//!
//! ## Undecodable messages
//!
//! An entry that cannot be decoded (corrupt payload, a codec not compiled in, a chunked
//! message larger than `max_chunked_message_bytes`) is reported once as an `Err` from `recv` ([`Error::InvalidMessage`]) and
//! acknowledged on the broker with its validation error, like the Java client; receiving
//! simply continues.
//! [`Consumer::discarded_entries`] counts them.
//!
//! ## Ending
//!
//! [`Consumer::close`] flushes the acks, then closes on the broker; dropping the consumer does
//! the same in the background. Afterwards `recv` fails with [`Error::Closed`] and the stream
//! ends. When the broker ends the consumer for good (see [`errors`](super::errors)), `recv`
//! returns that error once, then [`Error::Closed`].
//!
//! [`Client::consumer`]: crate::Client::consumer
//! [`Client::reader`]: crate::Client::reader
//! [`ConsumerBuilder`]: crate::ConsumerBuilder
//! [`Consumer`]: crate::Consumer
//! [`Consumer::recv`]: crate::Consumer::recv
//! [`Consumer::ack`]: crate::Consumer::ack
//! [`Consumer::ack_cumulative`]: crate::Consumer::ack_cumulative
//! [`Consumer::acker`]: crate::Consumer::acker
//! [`Consumer::nack`]: crate::Consumer::nack
//! [`Consumer::active_updates`]: crate::Consumer::active_updates
//! [`Consumer::reconsume_later`]: crate::Consumer::reconsume_later
//! [`Consumer::seek`]: crate::Consumer::seek
//! [`Consumer::has_reached_end_of_topic`]: crate::Consumer::has_reached_end_of_topic
//! [`Consumer::seek_by_time`]: crate::Consumer::seek_by_time
//! [`Consumer::last_message_ids`]: crate::Consumer::last_message_ids
//! [`Consumer::unsubscribe`]: crate::Consumer::unsubscribe
//! [`Consumer::discarded_entries`]: crate::Consumer::discarded_entries
//! [`Consumer::close`]: crate::Consumer::close
//! [`Acker`]: crate::Acker
//! [`Consumer::batch_recv`]: crate::Consumer::batch_recv
//! [`Consumer::ack_all`]: crate::Consumer::ack_all
//! [`Messages`]: crate::Messages
//! [`BatchReceivePolicy`]: crate::BatchReceivePolicy
//! [`Acker::ack_topic_id`]: crate::Acker::ack_topic_id
//! [`Client::multi_topic_consumer`]: crate::Client::multi_topic_consumer
//! [`Client::pattern_consumer`]: crate::Client::pattern_consumer
//! [`Consumer::topic_updates`]: crate::Consumer::topic_updates
//! [`Acker::nack`]: crate::Acker::nack
//! [`Message`]: crate::Message
//! [`MessageId::EARLIEST`]: crate::MessageId::EARLIEST
//! [`MessageId::LATEST`]: crate::MessageId::LATEST
//! [`SubscriptionType`]: crate::SubscriptionType
//! [`InitialPosition::Latest`]: crate::InitialPosition::Latest
//! [`RedeliveryBackoff`]: crate::RedeliveryBackoff
//! [`DeadLetterPolicy`]: crate::DeadLetterPolicy
//! [`Reader`]: crate::Reader
//! [`Reader::has_message_available`]: crate::Reader::has_message_available
//! [`Error::InvalidOperation`]: crate::Error::InvalidOperation
//! [`Error::InvalidConfig`]: crate::Error::InvalidConfig
//! [`Error::InvalidMessage`]: crate::Error::InvalidMessage
//! [`Error::Closed`]: crate::Error::Closed
