//! [`Reader`]: reads a topic from a chosen position without a durable subscription.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;

use crate::consumer::op::LastIds;
use crate::consumer::{
    Consumer, ConsumerOptions, InitialPosition, SubscriptionMode, SubscriptionType,
};
use crate::core::CoreRef;
use crate::error::{Error, Result, ServerError};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// Builds a [`Reader`]; see [`Client::reader`](crate::Client::reader).
#[derive(Debug, Clone)]
pub struct ReaderBuilder {
    client: CoreRef,
    topic: String,
    start: MessageId,
    inclusive: bool,
    receiver_queue_size: u32,
    name: Option<String>,
    schema: Option<crate::schema::SchemaInfo>,
    read_compacted: bool,
    rollback_secs: u64,
    #[cfg(feature = "encryption")]
    crypto_key_reader: Option<std::sync::Arc<dyn crate::crypto::CryptoKeyReader>>,
    #[cfg(feature = "encryption")]
    crypto_failure_action: crate::crypto::ConsumerCryptoFailureAction,
    interceptors: crate::interceptor::Interceptors<dyn crate::interceptor::ConsumerInterceptor>,
}

impl ReaderBuilder {
    pub(crate) fn new(client: CoreRef, topic: String) -> Self {
        ReaderBuilder {
            client,
            topic,
            start: MessageId::LATEST,
            inclusive: false,
            receiver_queue_size: 1000,
            name: None,
            schema: None,
            read_compacted: false,
            rollback_secs: 0,
            #[cfg(feature = "encryption")]
            crypto_key_reader: None,
            #[cfg(feature = "encryption")]
            crypto_failure_action: Default::default(),
            interceptors: None,
        }
    }

    /// Makes this a typed reader of `S::Type` values (see [`crate::schema`]).
    pub fn schema<S: crate::schema::Schema>(
        self,
        schema: S,
    ) -> crate::schema::TypedReaderBuilder<S> {
        crate::schema::TypedReaderBuilder::new(self, schema)
    }

    pub(crate) fn schema_info(mut self, info: Option<crate::schema::SchemaInfo>) -> Self {
        self.schema = info;
        self
    }

    pub(crate) fn core(&self) -> &CoreRef {
        &self.client
    }

    /// Start at the first stored message.
    pub fn start_earliest(mut self) -> Self {
        self.start = MessageId::EARLIEST;
        self
    }

    /// Start after the last stored message (the default).
    pub fn start_latest(mut self) -> Self {
        self.start = MessageId::LATEST;
        self
    }

    /// Start after `id` (or at it, with [`ReaderBuilder::start_inclusive`]). Not on a
    /// partitioned topic (an id names one partition's position): `create` fails there with
    /// [`Error::InvalidConfig`], like upstream; start at earliest or latest and
    /// [`Reader::seek`] the partition instead.
    pub fn start_message_id(mut self, id: MessageId) -> Self {
        self.start = id;
        self
    }

    /// Include the start message itself.
    pub fn start_inclusive(mut self, inclusive: bool) -> Self {
        self.inclusive = inclusive;
        self
    }

    /// Messages the broker may push ahead of the application. Default 1000. 0: nothing is
    /// prefetched, one message is asked per [`recv`](Reader::recv) (non-partitioned topics
    /// only; see [`ConsumerBuilder::receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size)).
    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.receiver_queue_size = n;
        self
    }

    /// Read the compacted view of the topic (Java `readCompacted`): the latest message of each
    /// key up to the compaction horizon, then everything after it. Persistent topics only.
    pub fn read_compacted(mut self, on: bool) -> Self {
        self.read_compacted = on;
        self
    }

    /// Start at the messages published during the `duration` before the reader subscribes
    /// (Java `startMessageFromRollbackDuration`): the broker moves the reader to the first
    /// message published at or after now minus `duration`, in whole seconds (rounded down;
    /// under a second means the latest position). Replaces any start position set before it,
    /// as upstream (which starts such a reader at latest). After a reconnect the reader
    /// resumes after what it received, as any reader does.
    pub fn start_message_from_rollback_duration(mut self, duration: std::time::Duration) -> Self {
        self.start = MessageId::LATEST;
        self.inclusive = false;
        self.rollback_secs = duration.as_secs();
        self
    }

    /// End-to-end encryption (PIP-4): where the private keys of encrypted messages come from
    /// (as [`ConsumerBuilder::crypto_key_reader`](crate::ConsumerBuilder::crypto_key_reader)).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_key_reader(
        mut self,
        reader: impl crate::crypto::CryptoKeyReader + 'static,
    ) -> Self {
        self.crypto_key_reader = Some(std::sync::Arc::new(reader));
        self
    }

    /// What happens to a message that cannot be decrypted (as
    /// [`ConsumerBuilder::crypto_failure_action`](crate::ConsumerBuilder::crypto_failure_action)).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_failure_action(
        mut self,
        action: crate::crypto::ConsumerCryptoFailureAction,
    ) -> Self {
        self.crypto_failure_action = action;
        self
    }

    /// The reader's subscription name (random by default; Java's `subscriptionName`, named
    /// like [`ConsumerBuilder::subscription`](crate::ConsumerBuilder::subscription)).
    pub fn subscription(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Renamed [`subscription`](Self::subscription).
    #[deprecated(note = "use `subscription`")]
    pub fn subscription_name(self, name: impl Into<String>) -> Self {
        self.subscription(name)
    }

    /// Adds an interceptor (upstream `ReaderBuilder.intercept`): its
    /// [`before_consume`](crate::interceptor::ConsumerInterceptor::before_consume) runs as the
    /// reader hands a message out (Java's `beforeRead`) and `on_partitions_change` as the
    /// topic grows. A reader acks each message it hands out cumulatively (as Java's), so
    /// `on_acknowledge_cumulative` runs for each too. Several run in the order they were added.
    pub fn interceptor(
        mut self,
        interceptor: impl crate::interceptor::ConsumerInterceptor,
    ) -> Self {
        self.interceptors =
            crate::interceptor::Chain::push(&self.interceptors, std::sync::Arc::new(interceptor));
        self
    }

    /// Creates the reader.
    pub async fn create(self) -> Result<Reader> {
        let topic = TopicName::new(&self.topic)?;
        let options = ConsumerOptions {
            subscription: self
                .name
                .unwrap_or_else(|| format!("reader-{:08x}", crate::consumer::rand_u32())),
            subscription_type: SubscriptionType::Exclusive,
            subscription_mode: Some(SubscriptionMode::NonDurable),
            initial_position: if self.start == MessageId::EARLIEST {
                InitialPosition::Earliest
            } else {
                InitialPosition::Latest
            },
            receiver_queue_size: self.receiver_queue_size,
            max_total_receiver_queue_size_across_partitions: self.receiver_queue_size.max(50_000),
            start_message_id: Some(self.start),
            start_inclusive: self.inclusive,
            start_message_rollback_secs: self.rollback_secs,
            read_compacted: self.read_compacted,
            schema: self.schema,
            #[cfg(feature = "encryption")]
            crypto_key_reader: self.crypto_key_reader,
            #[cfg(feature = "encryption")]
            crypto_failure_action: self.crypto_failure_action,
            interceptors: self.interceptors,
            ..Default::default()
        };
        options.validate()?;
        let consumer = Box::pin(Consumer::subscribe(self.client, topic, options)).await?;
        Ok(Reader {
            consumer,
            position: Position::Start {
                id: self.start,
                inclusive: self.inclusive,
            },
            partitions: HashMap::new(),
            end: None,
        })
    }
}

/// Where a reader is on one partition, for [`Reader::has_message_available`] (upstream
/// `ConsumerImpl` keeps `startMessageId`, `lastDequeuedMessageId` and whether it sought by
/// time, per partition consumer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Nothing received since the start or the last seek by id.
    Start { id: MessageId, inclusive: bool },
    /// The last message received.
    Received(MessageId),
    /// Nothing received since a seek by publish time: the broker's mark-delete position says
    /// where the cursor is.
    AfterTimeSeek,
}

/// Whether `last` (the last stored id) comes after `from` (or is it, when `inclusive`),
/// counting batch indexes when both name a message of the same batch (upstream compares
/// the full ids).
fn is_after(last: MessageId, from: MessageId, inclusive: bool) -> bool {
    let (a, b) = if last.is_batch() && from.is_batch() && last.entry() == from.entry() {
        (last.batch_index, from.batch_index)
    } else {
        let (a, b) = (last.entry(), from.entry());
        return if inclusive { a >= b } else { a > b };
    };
    if inclusive {
        a >= b
    } else {
        a > b
    }
}

/// Reads messages of a topic in order from a start position. Readers need no acks: each message
/// read is acked cumulatively by the reader itself (like Java's), which moves its
/// non-durable cursor and lets the broker say when the end of a terminated topic is reached
/// ([`Reader::has_reached_end_of_topic`]).
#[derive(Debug)]
pub struct Reader {
    consumer: Consumer,
    /// The position of partitions not in `partitions`.
    position: Position,
    /// The position of each partition (-1 for a non-partitioned topic) once it differs.
    partitions: HashMap<i32, Position>,
    /// The end of the topic, met by `has_message_available` (which answers `false`): the next
    /// `recv` reports it.
    end: Option<Error>,
}

impl Reader {
    /// The topic.
    pub fn topic(&self) -> &TopicName {
        self.consumer.topic()
    }

    /// A snapshot of the reader's statistics (those of its non-durable consumer, see
    /// [`crate::Consumer::stats`]).
    pub fn stats(&self) -> crate::stats::ConsumerStats {
        self.consumer.stats()
    }

    /// Waits for the next message.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Consumer::recv`]: dropping the future before it completes (e.g. in
    /// a `tokio::select!`) never loses a message; the next `recv` returns it.
    ///
    /// ```no_run
    /// # async fn demo(mut reader: pulsar_sdk::Reader) -> pulsar_sdk::Result<()> {
    /// let tick = tokio::time::sleep(std::time::Duration::from_secs(1));
    /// tokio::pin!(tick);
    /// loop {
    ///     tokio::select! {
    ///         _ = &mut tick => break, // the pending recv is dropped: nothing is lost
    ///         msg = reader.recv() => println!("{:?}", msg?.payload_str()),
    ///     }
    /// }
    /// let next = reader.recv().await?; // the next message, whatever the select! dropped
    /// # Ok(()) }
    /// ```
    pub async fn recv(&mut self) -> Result<Message> {
        if let Some(end) = self.end.take() {
            return Err(end);
        }
        let m = self.consumer.recv().await?;
        self.handed_out(&m);
        Ok(m)
    }

    /// A message goes to the application: it is the reader's position, and it is acked
    /// cumulatively. Java `ReaderImpl.readNext` acks each message it returns cumulatively
    /// (grouped by the ack-grouping tracker), so the broker's cursor follows the reader and,
    /// on a terminated topic, the broker sends REACHED_END_OF_TOPIC once it has read
    /// everything (`PersistentSubscription.acknowledgeMessage`). A failed ack is only logged,
    /// as Java's: a reader re-subscribes at its own position anyway.
    fn handed_out(&mut self, m: &Message) {
        self.partitions
            .insert(m.id.partition, Position::Received(m.id));
        if let Err(e) = self.consumer.ack_cumulative(m) {
            tracing::debug!(topic = %self.consumer.topic(), id = %m.id, error = %e,
                "reader: cumulative ack failed");
        }
    }

    /// Whether the reader reached the end of its terminated topic (every partition), like
    /// Java's `Reader.hasReachedEndOfTopic`: see [`Consumer::has_reached_end_of_topic`]. The
    /// reader learns it because it acks what it reads (cumulatively, as Java's does).
    pub fn has_reached_end_of_topic(&self) -> bool {
        self.consumer.has_reached_end_of_topic()
    }

    /// Whether a message is available to read now (asks the broker for the last stored id),
    /// like upstream's `hasMessageAvailable`:
    /// - after a message was received, whether the last stored one comes after it;
    /// - from a start id, whether the last stored one comes after it (or is it, inclusive),
    ///   counting batch indexes;
    /// - from latest inclusive, the reader first seeks each partition to its last message,
    ///   which it then reads;
    /// - after [`seek_by_time`](Self::seek_by_time), whether the subscription's mark-delete
    ///   position is before the last stored message.
    ///
    /// While the reader re-subscribes (e.g. right after a seek) the question waits for it, up
    /// to the operation timeout.
    pub async fn has_message_available(&mut self) -> Result<bool> {
        if self.consumer.peeked.is_some() {
            return Ok(true);
        }
        if let Some(m) = self.consumer.take_buffered() {
            self.partitions
                .insert(m.id.partition, Position::Received(m.id));
            self.consumer.peeked = Some(m);
            return Ok(true);
        }
        if self.end.is_some() {
            return Ok(false);
        }
        while let Some((index, epoch, item)) = self.consumer.inbound().try_next() {
            match self.consumer.accept(index, epoch, item) {
                Some(Ok(m)) => {
                    self.partitions
                        .insert(m.id.partition, Position::Received(m.id));
                    self.consumer.peeked = Some(m);
                    return Ok(true);
                }
                // At the end of the topic nothing is available (Java's hasMessageAvailable is
                // false there); the end is reported by the next `recv`.
                Some(Err(e @ Error::TopicTerminated { .. })) => {
                    self.end = Some(e);
                    return Ok(false);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        if !self.consumer.topic().is_persistent() {
            return Ok(false); // nothing is stored to ask about
        }
        let mut available = false;
        for last in self.consumer.last_ids_each().await {
            let LastIds { last, mark_delete } = match last {
                Ok(ids) => ids,
                // pulsar-lite answers GetLastMessageId on an empty topic with an error instead
                // of an empty position: that partition has nothing stored.
                Err(Error::Broker {
                    code: ServerError::UnknownError,
                    message,
                }) if message.contains("no messages") => continue,
                Err(e) => return Err(e),
            };
            if last.entry_id as i64 == -1 {
                continue; // empty partition
            }
            let position = *self
                .partitions
                .get(&last.partition)
                .unwrap_or(&self.position);
            // Ids are only comparable within one partition.
            let here = match position {
                Position::Received(received) => is_after(last, received, false),
                Position::Start { id, .. } if id == MessageId::EARLIEST => true,
                Position::Start {
                    id,
                    inclusive: false,
                } if id == MessageId::LATEST => false,
                Position::Start {
                    id,
                    inclusive: true,
                } if id == MessageId::LATEST => {
                    // Upstream seeks to the last message so that it is read (inclusive).
                    self.consumer.seek(last).await?;
                    self.partitions.insert(
                        last.partition,
                        Position::Start {
                            id: last,
                            inclusive: true,
                        },
                    );
                    true
                }
                Position::Start { id, inclusive } => is_after(last, id, inclusive),
                // Upstream compares the mark-delete position with the last id after a time
                // seek (by ledger and entry: the mark-delete position has no batch index).
                Position::AfterTimeSeek => mark_delete.is_none_or(|md| md.entry() < last.entry()),
            };
            available |= here;
        }
        Ok(available)
    }

    /// Moves the reader to a message id: the next message read is that one. On a partitioned
    /// topic only the partition of the id moves (earliest and latest move every partition).
    pub async fn seek(&mut self, id: MessageId) -> Result<()> {
        self.consumer.seek(id).await?;
        // The end met before the seek is no longer where the reader is (Java's seek moves
        // the reader; `hasMessageAvailable` asks the broker again).
        self.end = None;
        let at = Position::Start {
            id,
            inclusive: id != MessageId::LATEST,
        };
        if id == MessageId::EARLIEST || id == MessageId::LATEST {
            self.partitions.clear();
            self.position = at;
        } else {
            self.partitions.insert(id.partition, at);
        }
        Ok(())
    }

    /// Moves the reader to the first message published at or after `publish_time_ms`.
    pub async fn seek_by_time(&mut self, publish_time_ms: u64) -> Result<()> {
        self.consumer.seek_by_time(publish_time_ms).await?;
        self.end = None;
        self.partitions.clear();
        self.position = Position::AfterTimeSeek;
        Ok(())
    }

    /// The reader's lifecycle state.
    pub fn state(&self) -> crate::lifecycle::State {
        self.consumer.state()
    }

    /// The reader's lifecycle states as a
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html), like
    /// [`Consumer::states`].
    ///
    /// ```no_run
    /// # async fn demo(reader: pulsar_sdk::Reader) {
    /// use futures::StreamExt;
    /// let states: Vec<_> = reader.states().take(1).collect().await;
    /// println!("{states:?}");
    /// # }
    /// ```
    pub fn states(&self) -> crate::lifecycle::StateStream {
        self.consumer.states()
    }

    /// Resolves once the reader reached a terminal state, with that state, like
    /// [`Consumer::closed`].
    ///
    /// ```no_run
    /// # async fn demo(reader: pulsar_sdk::Reader) {
    /// let ended = reader.closed();
    /// tokio::spawn(async move { eprintln!("reader ended: {}", ended.await) });
    /// # }
    /// ```
    pub fn closed(
        &self,
    ) -> impl std::future::Future<Output = crate::lifecycle::State> + Send + 'static + use<> {
        self.consumer.closed()
    }

    /// Asks for the last stored id of each partition apart from the reader (a table view's
    /// refresh, while its task reads).
    pub(crate) fn last_ids_query(&self) -> crate::consumer::LastIdsQuery {
        self.consumer.last_ids_query()
    }

    /// Closes the reader (like [`Consumer::close`]; dropping it closes it too).
    pub async fn close(&self) -> Result<()> {
        self.consumer.close().await
    }
}

impl Stream for Reader {
    type Item = Result<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(end) = self.end.take() {
            return Poll::Ready(Some(Err(end)));
        }
        let polled = Pin::new(&mut self.consumer).poll_next(cx);
        if let Poll::Ready(Some(Ok(m))) = &polled {
            self.handed_out(m);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_after_counts_batch_indexes_within_one_entry_only() {
        let b = |e, i| MessageId {
            batch_index: i,
            batch_size: 3,
            ..MessageId::new(1, e, -1)
        };
        // Inside one batch: by index.
        assert!(is_after(b(4, 2), b(4, 0), false));
        assert!(!is_after(b(4, 2), b(4, 2), false));
        assert!(is_after(b(4, 2), b(4, 2), true));
        // A whole-entry start includes (inclusive) or excludes the entry's batch.
        assert!(is_after(b(4, 2), MessageId::new(1, 4, -1), true));
        assert!(!is_after(b(4, 2), MessageId::new(1, 4, -1), false));
        assert!(is_after(MessageId::new(1, 5, -1), b(4, 2), false));
    }
}
