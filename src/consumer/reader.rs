//! [`Reader`]: reads a topic from a chosen position without a durable subscription.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;

use super::{Consumer, ConsumerOptions, InitialPosition, SubscriptionMode, SubscriptionType};
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
        }
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

    /// Start after `id` (or at it, with [`ReaderBuilder::start_inclusive`]).
    pub fn start_message_id(mut self, id: MessageId) -> Self {
        self.start = id;
        self
    }

    /// Include the start message itself.
    pub fn start_inclusive(mut self, inclusive: bool) -> Self {
        self.inclusive = inclusive;
        self
    }

    /// Messages the broker may push ahead of the application. Default 1000.
    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.receiver_queue_size = n;
        self
    }

    /// The reader's subscription name (random by default).
    pub fn subscription_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Creates the reader.
    pub async fn create(self) -> Result<Reader> {
        let topic = TopicName::new(&self.topic)?;
        let options = ConsumerOptions {
            subscription: self
                .name
                .unwrap_or_else(|| format!("reader-{:08x}", super::rand_u32())),
            subscription_type: SubscriptionType::Exclusive,
            subscription_mode: Some(SubscriptionMode::NonDurable),
            initial_position: if self.start == MessageId::EARLIEST {
                InitialPosition::Earliest
            } else {
                InitialPosition::Latest
            },
            receiver_queue_size: self.receiver_queue_size,
            start_message_id: Some(self.start),
            start_inclusive: self.inclusive,
            ..Default::default()
        };
        options.validate()?;
        let consumer = Box::pin(Consumer::subscribe(self.client, topic, options)).await?;
        Ok(Reader {
            consumer,
            start: self.start,
            inclusive: self.inclusive,
            last_received: HashMap::new(),
        })
    }
}

/// Reads messages of a topic in order from a start position. Readers need no acks.
#[derive(Debug)]
pub struct Reader {
    consumer: Consumer,
    start: MessageId,
    inclusive: bool,
    /// The last message received from each partition (-1 for a non-partitioned topic).
    last_received: HashMap<i32, MessageId>,
}

impl Reader {
    /// The topic.
    pub fn topic(&self) -> &TopicName {
        self.consumer.topic()
    }

    /// Waits for the next message.
    pub async fn recv(&mut self) -> Result<Message> {
        let m = self.consumer.recv().await?;
        self.last_received.insert(m.id.partition, m.id);
        Ok(m)
    }

    /// Whether a message is available to read now (asks the broker for the last stored id).
    pub async fn has_message_available(&mut self) -> Result<bool> {
        if self.consumer.peeked.is_some() {
            return Ok(true);
        }
        while let Ok((index, epoch, item)) = self.consumer.rx.try_recv() {
            match self.consumer.accept(index, epoch, item) {
                Some(Ok(m)) => {
                    self.consumer.peeked = Some(m);
                    return Ok(true);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        if !self.consumer.topic().is_persistent() {
            return Ok(false); // nothing is stored to ask about
        }
        for last in self.consumer.last_message_id_each().await {
            let last = match last {
                Ok(id) => id,
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
            // Ids are only comparable within one partition.
            let available = match self.last_received.get(&last.partition) {
                Some(received) => last.entry() > received.entry(),
                None if self.start == MessageId::EARLIEST => true,
                None if self.start == MessageId::LATEST => false,
                None if self.inclusive => last.entry() >= self.start.entry(),
                None => last.entry() > self.start.entry(),
            };
            if available {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves the reader to a message id.
    pub async fn seek(&mut self, id: MessageId) -> Result<()> {
        self.last_received.clear();
        self.start = id;
        self.inclusive = true;
        self.consumer.seek(id).await
    }

    /// Moves the reader to the first message published at or after `publish_time_ms`.
    pub async fn seek_by_time(&mut self, publish_time_ms: u64) -> Result<()> {
        self.last_received.clear();
        self.consumer.seek_by_time(publish_time_ms).await
    }

    /// Closes the reader (like [`Consumer::close`]; dropping it closes it too).
    pub async fn close(&self) -> Result<()> {
        self.consumer.close().await
    }
}

impl Stream for Reader {
    type Item = Result<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.consumer).poll_next(cx);
        if let Poll::Ready(Some(Ok(m))) = &polled {
            let id = m.id;
            self.last_received.insert(id.partition, id);
        }
        polled
    }
}
