//! Typed handles: thin wrappers over the byte [`Producer`], [`Consumer`] and [`Reader`] that
//! encode and decode with a [`Schema`]. Everything else (batching, acks, reconnection, DLQ) is
//! the byte handles' own; the raw handle stays reachable (`inner`).

use std::sync::Arc;

use super::registry::Writer;
use super::{Schema, SchemaError, SchemaInfo, SchemaVersion, WriterSchemas};
use crate::consumer::{Consumer, ConsumerBuilder, Reader, ReaderBuilder};
use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::message::{Message, ProducerMessage};
use crate::message_id::MessageId;
use crate::producer::{Producer, ProducerBuilder, SendFuture};

mod batch;
pub use batch::TypedMessages;

/// A received message with its decoded value. A payload the schema could not decode keeps the
/// [`SchemaError`] in [`TypedMessage::value`]: the message can still be acked, nacked or
/// dead-lettered like any other.
#[derive(Debug)]
pub struct TypedMessage<T> {
    message: Message,
    value: std::result::Result<T, SchemaError>,
}

impl<T> TypedMessage<T> {
    /// The decoded value, or why it could not be decoded.
    pub fn value(&self) -> std::result::Result<&T, &SchemaError> {
        self.value.as_ref()
    }

    /// Takes the decoded value (or the decode error) and the message.
    pub fn into_parts(self) -> (std::result::Result<T, SchemaError>, Message) {
        (self.value, self.message)
    }

    /// The message as received: payload bytes, key, properties, id.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The message id.
    pub fn id(&self) -> MessageId {
        self.message.id
    }

    /// The raw payload.
    pub fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    /// The version of the schema the producer wrote it with (empty from a broker without a
    /// registry; `None` from a producer without a schema).
    pub fn schema_version(&self) -> Option<SchemaVersion> {
        self.message
            .schema_version
            .as_ref()
            .map(|v| SchemaVersion(v.clone()))
    }
}

impl<T> AsRef<Message> for TypedMessage<T> {
    fn as_ref(&self) -> &Message {
        &self.message
    }
}

/// What a typed consumer or reader needs to decode: the schema, the client (for GetSchema),
/// the writer schemas fetched so far, and the message being decoded. The message waits in
/// `held` while its writer schema is fetched, so a `recv` cancelled meanwhile loses nothing:
/// the next `recv` decodes it.
/// A typed consumer's batch waits in `batch` the same way (see `batch`).
#[derive(Debug)]
struct Decoder<S> {
    schema: S,
    core: CoreRef,
    writers: WriterSchemas,
    held: Option<Message>,
    /// The messages of a `batch_recv` being decoded (see [`TypedConsumer::batch_recv`]).
    batch: std::collections::VecDeque<Message>,
}

/// What decoding a message needs from the registry: the writer's schema, or why it could not
/// be had.
struct WriterOf {
    writer: Option<Arc<SchemaInfo>>,
    unavailable: Option<SchemaError>,
}

impl<S: Schema> Decoder<S> {
    fn new(schema: S, core: CoreRef) -> Self {
        Decoder {
            schema,
            core,
            writers: WriterSchemas::default(),
            held: None,
            batch: Default::default(),
        }
    }

    /// Decodes the held message with the schema, fetching the writer's schema by version when
    /// the schema needs it. A version the broker has not (it says so) decodes with the local
    /// schema; one that could not be had (GetSchema failed or timed out, or was given up on)
    /// makes the message an error item ([`SchemaError::WriterSchemaUnavailable`]).
    async fn decode_held(&mut self) -> Option<TypedMessage<S::Type>> {
        let msg = self.held.as_ref()?;
        let found = Self::writer_of(&self.schema, &self.core, &mut self.writers, msg).await;
        let msg = self.held.take()?;
        Some(self.decode(msg, found))
    }

    /// The writer's schema `msg` needs, fetched by version when the schema needs it (see
    /// [`Decoder::decode_held`]).
    async fn writer_of(
        schema: &S,
        core: &CoreRef,
        writers: &mut WriterSchemas,
        msg: &Message,
    ) -> WriterOf {
        let mut writer: Option<Arc<SchemaInfo>> = None;
        let mut unavailable = None;
        if schema.needs_writer_schema() && !msg.null_value {
            if let Some(v) = msg.schema_version.clone().filter(|v| !v.is_empty()) {
                // Schemas belong to the topic, not a partition (upstream keys them by the
                // partitioned topic's name): one fetch per version for all partitions.
                let topic = msg.topic.partitioned_topic();
                match writers.get(core, &topic, &v).await {
                    Writer::Known(info) => writer = Some(info),
                    Writer::Missing => {}
                    Writer::Unavailable(e) => {
                        unavailable = Some(SchemaError::WriterSchemaUnavailable {
                            version: SchemaVersion(v),
                            reason: e.to_string(),
                            source: Some(Arc::new(e)),
                        })
                    }
                }
            }
        }
        WriterOf {
            writer,
            unavailable,
        }
    }

    /// Decodes `msg` with what [`Decoder::writer_of`] found.
    fn decode(&self, msg: Message, found: WriterOf) -> TypedMessage<S::Type> {
        // Upstream `MessageImpl.getValue` answers null for a `null_value` message without
        // decoding its (empty) payload.
        let value = if msg.null_value {
            Err(SchemaError::NullValue)
        } else if let Some(e) = found.unavailable {
            Err(e)
        } else {
            decode_in_client(&self.core, || {
                self.schema.decode_message(&msg, found.writer.as_deref())
            })
        };
        TypedMessage {
            message: msg,
            value,
        }
    }
}

/// Runs a schema's decode with the client's writer-schema cache (see
/// `avro::ClientWriterCache`).
#[cfg(feature = "avro")]
fn decode_in_client<R>(core: &CoreRef, f: impl FnOnce() -> R) -> R {
    super::avro::ClientWriterCache::of(core).scope(f)
}

#[cfg(not(feature = "avro"))]
fn decode_in_client<R>(_core: &CoreRef, f: impl FnOnce() -> R) -> R {
    f()
}

/// Builds a [`TypedProducer`]; see [`ProducerBuilder::schema`].
#[derive(Debug)]
pub struct TypedProducerBuilder<S> {
    inner: ProducerBuilder,
    schema: Arc<S>,
}

impl<S: Schema> TypedProducerBuilder<S> {
    pub(crate) fn new(inner: ProducerBuilder, schema: S) -> Self {
        let info = schema.info();
        TypedProducerBuilder {
            inner: inner.schema_info(info),
            schema: Arc::new(schema),
        }
    }

    /// Configures the underlying byte producer builder (name, batching, compression ...).
    pub fn configure(mut self, f: impl FnOnce(ProducerBuilder) -> ProducerBuilder) -> Self {
        self.inner = f(self.inner);
        self
    }

    /// Creates the producer. The broker registers the schema (or finds it registered) and
    /// refuses an incompatible one with [`ServerError::IncompatibleSchema`]
    /// (a non-retriable [`Error::Broker`]).
    ///
    /// [`ServerError::IncompatibleSchema`]: crate::ServerError::IncompatibleSchema
    pub async fn create(self) -> Result<TypedProducer<S>> {
        Ok(TypedProducer {
            inner: self.inner.create().await?,
            schema: self.schema,
        })
    }
}

/// A producer of `S::Type` values.
#[derive(Debug)]
pub struct TypedProducer<S> {
    inner: Producer,
    schema: Arc<S>,
}

impl<S: Schema> TypedProducer<S> {
    /// The byte producer underneath (to send raw payloads, close, watch the state ...).
    pub fn inner(&self) -> &Producer {
        &self.inner
    }

    /// The schema.
    pub fn schema(&self) -> &S {
        &self.schema
    }

    /// Encodes `value` and queues it; see [`Producer::send`]. An encode failure is
    /// [`Error::Schema`] and nothing is sent.
    pub async fn send(&self, value: &S::Type) -> Result<SendFuture> {
        self.send_with(value, ProducerMessage::default()).await
    }

    /// Encodes `value` into `msg` (which carries the key, properties, event time ...) and
    /// queues it.
    pub async fn send_with(&self, value: &S::Type, mut msg: ProducerMessage) -> Result<SendFuture> {
        self.schema
            .encode_message(value, &mut msg)
            .map_err(Error::Schema)?;
        self.inner.send(msg).await
    }

    /// Sends `value` and waits for its receipt.
    pub async fn send_and_wait(&self, value: &S::Type) -> Result<MessageId> {
        self.send(value).await?.await
    }

    /// Waits until everything queued is acknowledged; see [`Producer::flush`].
    pub async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    /// Closes the producer; see [`Producer::close`].
    pub async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// Builds a [`TypedConsumer`]; see [`ConsumerBuilder::schema`].
#[derive(Debug)]
pub struct TypedConsumerBuilder<S> {
    inner: ConsumerBuilder,
    schema: S,
}

impl<S: Schema> TypedConsumerBuilder<S> {
    pub(crate) fn new(inner: ConsumerBuilder, schema: S) -> Self {
        let info = schema.info();
        TypedConsumerBuilder {
            inner: inner.schema_info(info),
            schema,
        }
    }

    /// Configures the underlying byte consumer builder.
    pub fn configure(mut self, f: impl FnOnce(ConsumerBuilder) -> ConsumerBuilder) -> Self {
        self.inner = f(self.inner);
        self
    }

    /// Subscribes. The broker checks the schema against the topic's and refuses an
    /// incompatible one with [`ServerError::IncompatibleSchema`](crate::ServerError).
    pub async fn subscribe(self) -> Result<TypedConsumer<S>> {
        let core = self.inner.core().clone();
        Ok(TypedConsumer {
            inner: self.inner.subscribe().await?,
            decoder: Decoder::new(self.schema, core),
        })
    }
}

/// A consumer of `S::Type` values.
#[derive(Debug)]
pub struct TypedConsumer<S> {
    inner: Consumer,
    decoder: Decoder<S>,
}

impl<S: Schema> TypedConsumer<S> {
    /// Waits for the next message and decodes it. The outer error is the consumer's (closed,
    /// ...); a decode failure is in the message ([`TypedMessage::value`]) and never stops the
    /// consumer. Cancel safe like [`Consumer::recv`], including while a writer schema is being
    /// fetched (the message is kept for the next call).
    pub async fn recv(&mut self) -> Result<TypedMessage<S::Type>> {
        if self.decoder.held.is_none() {
            // A cancelled `batch_recv`'s messages first.
            self.decoder.held = match self.decoder.batch.pop_front() {
                Some(m) => Some(m),
                None => Some(self.inner.recv().await?),
            };
        }
        self.decoder.decode_held().await.ok_or(Error::Closed)
    }

    /// Acknowledges a message.
    pub fn ack(&self, msg: &TypedMessage<S::Type>) -> Result<()> {
        self.inner.ack(&msg.message)
    }

    /// Negatively acknowledges a message (redelivered later; dead-lettered past the DLQ
    /// policy's count).
    pub fn nack(&self, msg: &TypedMessage<S::Type>) -> Result<()> {
        self.inner.nack(&msg.message)
    }

    /// Acknowledges every message up to and including this one; see
    /// [`Consumer::ack_cumulative`].
    pub fn ack_cumulative(&self, msg: &TypedMessage<S::Type>) -> Result<()> {
        self.inner.ack_cumulative(&msg.message)
    }

    /// A cheap, cloneable handle that acks this consumer's messages from any task; see
    /// [`Consumer::acker`]. A [`TypedMessage`] is acked through its message
    /// ([`TypedMessage::message`]).
    pub fn acker(&self) -> crate::consumer::Acker {
        self.inner.acker()
    }

    /// Publishes the message to the retry topic, to be delivered again after `delay`, then acks
    /// it; see [`Consumer::reconsume_later`] (and [`Acker::reconsume_later`] to do it from
    /// another task while this one keeps receiving).
    ///
    /// [`Acker::reconsume_later`]: crate::consumer::Acker::reconsume_later
    pub async fn reconsume_later(
        &self,
        msg: &TypedMessage<S::Type>,
        delay: std::time::Duration,
    ) -> Result<()> {
        self.inner.reconsume_later(&msg.message, delay).await
    }

    /// Deletes the subscription and closes the consumer; see [`Consumer::unsubscribe`].
    pub async fn unsubscribe(&self) -> Result<()> {
        self.inner.unsubscribe().await
    }

    /// The consumer's statistics; see [`Consumer::stats`].
    pub fn stats(&self) -> crate::stats::ConsumerStats {
        self.inner.stats()
    }

    /// The lifecycle state; see [`Consumer::state`].
    pub fn state(&self) -> crate::State {
        self.inner.state()
    }

    /// The lifecycle states as a stream; see [`Consumer::states`].
    pub fn states(&self) -> crate::StateStream {
        self.inner.states()
    }

    /// Resolves once the consumer ended, with its final state; see [`Consumer::closed`].
    pub fn closed(
        &self,
    ) -> impl std::future::Future<Output = crate::State> + Send + 'static + use<S> {
        self.inner.closed()
    }

    /// The dead-letter topic, when this consumer publishes to one; see
    /// [`Consumer::dead_letter_topic`].
    pub fn dead_letter_topic(&self) -> Option<&str> {
        self.inner.dead_letter_topic()
    }

    /// The last message id of each topic and partition; see [`Consumer::last_message_ids`].
    pub async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.inner.last_message_ids().await
    }

    /// The byte consumer underneath (acks by id, topic changes, active state ...).
    pub fn inner(&self) -> &Consumer {
        &self.inner
    }

    /// The byte consumer underneath, mutably (to receive raw messages). To seek, use
    /// [`TypedConsumer::seek`]: a seek through the byte consumer leaves a message held by a
    /// cancelled [`recv`](Self::recv) to be returned first.
    pub fn inner_mut(&mut self) -> &mut Consumer {
        &mut self.inner
    }

    /// Seeks to a message id; see [`Consumer::seek`]. A message held by a cancelled `recv`
    /// (waiting for its writer schema) is dropped, like upstream `ConsumerImpl.seek` clears the
    /// messages already received.
    pub async fn seek(&mut self, id: MessageId) -> Result<()> {
        self.inner.seek(id).await?;
        self.decoder.held = None;
        Ok(())
    }

    /// Seeks to a publish time; see [`Consumer::seek_by_time`]. Drops a held message like
    /// [`TypedConsumer::seek`].
    pub async fn seek_by_time(&mut self, publish_time_ms: u64) -> Result<()> {
        self.inner.seek_by_time(publish_time_ms).await?;
        self.decoder.held = None;
        Ok(())
    }

    /// The schema.
    pub fn schema(&self) -> &S {
        &self.decoder.schema
    }

    /// Whether the consumer reached the end of its terminated topic; see
    /// [`Consumer::has_reached_end_of_topic`].
    pub fn has_reached_end_of_topic(&self) -> bool {
        self.inner.has_reached_end_of_topic()
    }

    /// Closes the consumer; see [`Consumer::close`].
    pub async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// Builds a [`TypedReader`]; see [`ReaderBuilder::schema`].
#[derive(Debug)]
pub struct TypedReaderBuilder<S> {
    inner: ReaderBuilder,
    schema: S,
}

impl<S: Schema> TypedReaderBuilder<S> {
    pub(crate) fn new(inner: ReaderBuilder, schema: S) -> Self {
        let info = schema.info();
        TypedReaderBuilder {
            inner: inner.schema_info(info),
            schema,
        }
    }

    /// Configures the underlying byte reader builder (start position ...).
    pub fn configure(mut self, f: impl FnOnce(ReaderBuilder) -> ReaderBuilder) -> Self {
        self.inner = f(self.inner);
        self
    }

    /// Creates the reader.
    pub async fn create(self) -> Result<TypedReader<S>> {
        let core = self.inner.core().clone();
        Ok(TypedReader {
            inner: self.inner.create().await?,
            decoder: Decoder::new(self.schema, core),
        })
    }
}

/// A reader of `S::Type` values.
#[derive(Debug)]
pub struct TypedReader<S> {
    inner: Reader,
    decoder: Decoder<S>,
}

impl<S: Schema> TypedReader<S> {
    /// Waits for the next message and decodes it (see [`TypedConsumer::recv`]).
    pub async fn recv(&mut self) -> Result<TypedMessage<S::Type>> {
        if self.decoder.held.is_none() {
            self.decoder.held = Some(self.inner.recv().await?);
        }
        self.decoder.decode_held().await.ok_or(Error::Closed)
    }

    /// The schema.
    pub fn schema(&self) -> &S {
        &self.decoder.schema
    }

    /// Whether the reader reached the end of its terminated topic; see
    /// [`Reader::has_reached_end_of_topic`].
    pub fn has_reached_end_of_topic(&self) -> bool {
        self.inner.has_reached_end_of_topic()
    }

    /// Whether a message is available to [`recv`](Self::recv): a message held by a cancelled
    /// `recv` (waiting for its writer schema) counts, which the byte reader cannot see; see
    /// [`Reader::has_message_available`].
    pub async fn has_message_available(&mut self) -> Result<bool> {
        if self.decoder.held.is_some() {
            return Ok(true);
        }
        self.inner.has_message_available().await
    }

    /// The byte reader underneath. Use [`TypedReader::seek`] and
    /// [`TypedReader::has_message_available`] rather than the byte reader's: they know of a
    /// message held by a cancelled [`recv`](Self::recv).
    pub fn inner_mut(&mut self) -> &mut Reader {
        &mut self.inner
    }

    /// Seeks to a message id; see [`Reader::seek`]. A message held by a cancelled `recv`
    /// (waiting for its writer schema) is dropped, like upstream's seek clears the messages
    /// already received.
    pub async fn seek(&mut self, id: MessageId) -> Result<()> {
        self.inner.seek(id).await?;
        self.decoder.held = None;
        Ok(())
    }

    /// Seeks to a publish time; see [`Reader::seek_by_time`]. Drops a held message like
    /// [`TypedReader::seek`].
    pub async fn seek_by_time(&mut self, publish_time_ms: u64) -> Result<()> {
        self.inner.seek_by_time(publish_time_ms).await?;
        self.decoder.held = None;
        Ok(())
    }

    /// Closes the reader.
    pub async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
