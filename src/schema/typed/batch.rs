//! Batch receive for typed consumers: [`TypedConsumer::batch_recv`] → [`TypedMessages`], the
//! typed side of [`Consumer::batch_recv`](crate::Consumer::batch_recv) (Java's
//! `Consumer<T>.batchReceive` → `Messages<T>`).

use std::ops::Deref;

use super::{Decoder, TypedConsumer, TypedMessage};
use crate::error::Result;
use crate::schema::Schema;

/// The messages of one [`TypedConsumer::batch_recv`], in the order received (Java's
/// `Messages<T>`). Derefs to a slice of [`TypedMessage`]s; iterates by value or by reference;
/// ack it whole with [`TypedConsumer::ack_all`].
#[derive(Debug)]
pub struct TypedMessages<T> {
    messages: Vec<TypedMessage<T>>,
}

impl<T> Default for TypedMessages<T> {
    fn default() -> Self {
        TypedMessages {
            messages: Vec::new(),
        }
    }
}

impl<T> TypedMessages<T> {
    /// The messages, as a `Vec`.
    pub fn into_vec(self) -> Vec<TypedMessage<T>> {
        self.messages
    }
}

impl<T> Deref for TypedMessages<T> {
    type Target = [TypedMessage<T>];

    fn deref(&self) -> &[TypedMessage<T>] {
        &self.messages
    }
}

impl<T> IntoIterator for TypedMessages<T> {
    type Item = TypedMessage<T>;
    type IntoIter = std::vec::IntoIter<TypedMessage<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a TypedMessages<T> {
    type Item = &'a TypedMessage<T>;
    type IntoIter = std::slice::Iter<'a, TypedMessage<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

impl<T> From<TypedMessages<T>> for Vec<TypedMessage<T>> {
    fn from(m: TypedMessages<T>) -> Self {
        m.messages
    }
}

impl<S: Schema> Decoder<S> {
    /// Decodes the held batch, in order: the writer schemas it needs are fetched first (the
    /// batch stays held meanwhile, so a call cancelled then loses nothing), then every
    /// message is decoded at once.
    async fn decode_batch(&mut self) -> Vec<TypedMessage<S::Type>> {
        let mut found = Vec::with_capacity(self.batch.len());
        for msg in &self.batch {
            found.push(Self::writer_of(&self.schema, &self.core, &mut self.writers, msg).await);
        }
        let batch = std::mem::take(&mut self.batch);
        batch
            .into_iter()
            .zip(found)
            .map(|(msg, w)| self.decode(msg, w))
            .collect()
    }
}

impl<S: Schema> TypedConsumer<S> {
    /// Waits for a batch of messages and decodes each; see
    /// [`Consumer::batch_recv`](crate::Consumer::batch_recv), whose bounds
    /// ([`batch_receive_policy`](crate::consumer::ConsumerBuilder::batch_receive_policy), set
    /// through [`TypedConsumerBuilder::configure`](super::TypedConsumerBuilder::configure))
    /// and errors it has. As with [`recv`](Self::recv), a message that does not decode is in
    /// the batch with its error ([`TypedMessage::value`]).
    ///
    /// Cancel safe, also while a writer schema is fetched: the batch is kept for the next
    /// call (or the next `recv`s, one at a time). A message a cancelled `recv` kept comes
    /// first, as a batch of its own.
    ///
    /// ```no_run
    /// # use pulsar_sdk::schema::{StringSchema, TypedConsumer};
    /// # async fn demo(mut consumer: TypedConsumer<StringSchema>) -> pulsar_sdk::Result<()> {
    /// let batch = consumer.batch_recv().await?;
    /// for msg in &batch {
    ///     println!("{:?}", msg.value());
    /// }
    /// consumer.ack_all(&batch)?;
    /// # Ok(()) }
    /// ```
    pub async fn batch_recv(&mut self) -> Result<TypedMessages<S::Type>> {
        if self.decoder.batch.is_empty() {
            match self.decoder.held.take() {
                Some(m) => self.decoder.batch.push_back(m),
                None => self.decoder.batch = self.inner.batch_recv().await?.into_vec().into(),
            }
        }
        Ok(TypedMessages {
            messages: self.decoder.decode_batch().await,
        })
    }

    /// Acknowledges each message (e.g. a [`TypedMessages`]); see
    /// [`Consumer::ack_all`](crate::Consumer::ack_all).
    pub fn ack_all<'a>(
        &self,
        msgs: impl IntoIterator<Item = &'a TypedMessage<S::Type>>,
    ) -> Result<()>
    where
        S::Type: 'a,
    {
        self.inner.ack_all(msgs.into_iter().map(|m| &m.message))
    }

    /// Negatively acknowledges each message; see
    /// [`Consumer::nack_all`](crate::Consumer::nack_all).
    pub fn nack_all<'a>(
        &self,
        msgs: impl IntoIterator<Item = &'a TypedMessage<S::Type>>,
    ) -> Result<()>
    where
        S::Type: 'a,
    {
        self.inner.nack_all(msgs.into_iter().map(|m| &m.message))
    }

    /// Acknowledges a batch cumulatively (the last message of each partition in it); see
    /// [`Consumer::ack_cumulative_all`](crate::Consumer::ack_cumulative_all).
    pub fn ack_cumulative_all<'a>(
        &self,
        msgs: impl IntoIterator<Item = &'a TypedMessage<S::Type>>,
    ) -> Result<()>
    where
        S::Type: 'a,
    {
        self.inner
            .ack_cumulative_all(msgs.into_iter().map(|m| &m.message))
    }
}
