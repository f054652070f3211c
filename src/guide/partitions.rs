//! # Partitioned topics and growth
//!
//! A partitioned topic `orders` with N partitions is N topics `orders-partition-0` ...
//! `orders-partition-{N-1}`. Give the client the partitioned topic's name: producers,
//! consumers and readers find the partitions themselves ([`Client::partitioned_topic_metadata`]
//! answers 0 for a topic that is not partitioned) and run one task per partition.
//! [`Client::partitions_for_topic`] lists them.
//!
//! ## Producing
//!
//! A [`Producer`] of a partitioned topic routes each message:
//!
//! - **with a key**: by the key's hash, the same hash as the Java client's
//!   (`JavaStringHash`), so both clients put a key on the same partition and per-key order
//!   holds;
//! - **without a key**: round-robin; with batching the producer stays on one partition for a
//!   batch delay (`max_publish_delay`) so that batches fill, like the Java client's
//!   round-robin router.
//!
//! Receipts carry the partition: [`MessageId::partition`].
//!
//! ## Consuming
//!
//! A [`Consumer`] subscribes on every partition and merges them into one stream; order holds
//! within a partition, not across them. Acks, nacks and seeks by id go to the partition of the
//! message id. Each partition's receiver queue is
//! `min(receiver_queue_size, max_total_receiver_queue_size_across_partitions / partitions)`
//! (at least 1; the total defaults to 50,000), like the Java client, so a consumer of many
//! partitions does not buffer `partitions × 1000` messages. A [`Reader`] of a partitioned topic
//! starts at earliest or latest only (a message id names one partition's position).
//!
//! ## Growing with the topic
//!
//! Partitions can be added to a topic while it is in use. Producers and consumers follow by
//! default ([`auto_update_partitions`](crate::ProducerBuilder::auto_update_partitions) on both
//! builders; turn it off to stay at the count seen at creation):
//!
//! - when the broker advertises PIP-247 partition-update watchers
//!   (`supports_partition_update_watchers`), the client keeps one watcher (for all its topics) and the
//!   broker pushes each change: new partitions are used within a round trip;
//! - otherwise the client polls the partitioned metadata every
//!   [`auto_update_partitions_interval`](crate::ClientBuilder::auto_update_partitions_interval)
//!   (60 s by default, like the Java client).
//!
//! `partition_updates()` ([`Producer::partition_updates`], [`Consumer::partition_updates`]) is
//! an [`Updates`](crate::Updates) of the count (its current value, `changed().await`,
//! `wait_for(..)`, or a stream), which changes once the producer publishes to (or the
//! consumer receives from) the new partitions. A count that shrinks is ignored with a warning
//! (Pulsar cannot remove partitions).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pulsar_sdk::{mock::MockBroker, Client, ProducerMessage};
//!
//! let broker = MockBroker::start().await?; // advertises PIP-247 watchers
//! broker.create_partitioned_topic("orders", 2);
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client.producer("orders").create().await?;
//! assert_eq!(producer.partitions(), 2);
//!
//! // Same key, same partition.
//! let a = producer.send_and_wait(ProducerMessage::new("1").key("customer-7")).await?;
//! let b = producer.send_and_wait(ProducerMessage::new("2").key("customer-7")).await?;
//! assert_eq!(a.partition, b.partition);
//!
//! // An operator adds two partitions; the producer follows.
//! let mut count = producer.partition_updates();
//! broker.update_partitions("orders", 4)?;
//! let grown = tokio::time::timeout(Duration::from_secs(10), count.wait_for(|n| *n == 4)).await?;
//! assert_eq!(grown, Some(4));
//! assert_eq!(producer.partitions(), 4);
//! # Ok(()) }
//! ```
//!
//! [`Client::partitioned_topic_metadata`]: crate::Client::partitioned_topic_metadata
//! [`Client::partitions_for_topic`]: crate::Client::partitions_for_topic
//! [`Producer`]: crate::Producer
//! [`Producer::partition_updates`]: crate::Producer::partition_updates
//! [`Consumer`]: crate::Consumer
//! [`Consumer::partition_updates`]: crate::Consumer::partition_updates
//! [`Reader`]: crate::Reader
//! [`MessageId::partition`]: crate::MessageId::partition
