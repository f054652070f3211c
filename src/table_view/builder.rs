//! [`TableViewBuilder`]: what a table view reads and how (upstream `TableViewBuilderImpl` and
//! `AbstractTableViewImpl`'s constructor).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::table::Shared;
use super::task::Task;
use super::TableView;
use crate::consumer::ReaderBuilder;
use crate::core::CoreRef;
use crate::error::Result;
use crate::schema::{BytesSchema, Schema};
use crate::topic::TopicName;

/// Builds a [`TableView`]; see [`Client::table_view`](crate::Client::table_view). Without
/// [`schema`](Self::schema) the values are the payload bytes ([`Bytes`](bytes::Bytes)).
pub struct TableViewBuilder<S = BytesSchema> {
    topic: String,
    reader: ReaderBuilder,
    schema: S,
    /// See [`TableViewBuilder::read_timeout`]; `None`: no bound.
    stall: Option<Duration>,
}

impl<S> std::fmt::Debug for TableViewBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableViewBuilder")
            .field("topic", &self.topic)
            .field("reader", &self.reader)
            .finish_non_exhaustive()
    }
}

impl TableViewBuilder<BytesSchema> {
    pub(crate) fn new(client: CoreRef, topic: String) -> Self {
        TableViewBuilder {
            stall: Some(client.operation_timeout()),
            reader: ReaderBuilder::new(client, topic.clone()),
            topic,
            schema: BytesSchema,
        }
    }

    /// Makes the values `S::Type`, decoded with `schema` (see [`crate::schema`]), as
    /// [`ReaderBuilder::schema`] does for a reader. A value the schema cannot decode is skipped
    /// (logged at `warn`): its key keeps the value it had.
    pub fn schema<S: Schema>(self, schema: S) -> TableViewBuilder<S> {
        TableViewBuilder {
            topic: self.topic,
            reader: self.reader,
            schema,
            stall: self.stall,
        }
    }
}

impl<S: Schema> TableViewBuilder<S>
where
    S::Type: Clone + Sync,
{
    /// The name of the view's reader subscription (random by default; Java's
    /// `subscriptionName`).
    pub fn subscription(mut self, name: impl Into<String>) -> Self {
        self.reader = self.reader.subscription(name);
        self
    }

    /// How long [`create`](Self::create) and [`TableView::refresh`] wait for the view to read
    /// its next message while the last message ids are not reached, before failing with
    /// [`Error::Timeout`](crate::Error::Timeout): by default the client's
    /// [`operation_timeout`](crate::ClientBuilder::operation_timeout); `Duration::ZERO` waits
    /// without a bound (as upstream, whose `createAsync` and `refreshAsync` never time out).
    /// A broker without apache/pulsar#22610 may name as the last message an entry it never
    /// delivers (an aborted transaction's), which would keep them waiting for ever. The bound
    /// is on a stretch without a message, so a long topic is read whatever it takes.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.stall = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// End-to-end encryption (PIP-4): where the private keys of encrypted messages come from
    /// (as [`ReaderBuilder::crypto_key_reader`]).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_key_reader(
        mut self,
        reader: impl crate::crypto::CryptoKeyReader + 'static,
    ) -> Self {
        self.reader = self.reader.crypto_key_reader(reader);
        self
    }

    /// What happens to a message that cannot be decrypted (as
    /// [`ReaderBuilder::crypto_failure_action`]).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn crypto_failure_action(
        mut self,
        action: crate::crypto::ConsumerCryptoFailureAction,
    ) -> Self {
        self.reader = self.reader.crypto_failure_action(action);
        self
    }

    /// Creates the view: subscribes a reader at the earliest position (reading the compacted
    /// topic on a persistent one), then reads every message stored when it asked the broker
    /// for the last message of each partition, and returns (upstream `createAsync`, which
    /// completes after `readAllExistingMessages`). An empty topic gives an empty view at once.
    /// On a non-persistent topic, which stores nothing, it returns once the reader is
    /// subscribed (as upstream).
    ///
    /// Fails as [`ReaderBuilder::create`] does, or with the error that stopped the first read
    /// (the reader is closed then): [`Error::Timeout`](crate::Error::Timeout) when nothing
    /// was read for the [`read_timeout`](Self::read_timeout).
    pub async fn create(self) -> Result<TableView<S::Type>> {
        let topic = TopicName::new(&self.topic)?;
        let persistent = topic.is_persistent();
        // Upstream reads the compacted view of persistent topics only (readCompacted is
        // refused on others).
        let mut reader = self
            .reader
            .start_earliest()
            .read_compacted(persistent)
            .schema(self.schema)
            .create()
            .await?;
        let query = reader.inner_mut().last_ids_query();
        let (close, close_rx) = watch::channel(false);
        let shared = Arc::new(Shared::new());
        let task = Task {
            reader,
            shared: shared.clone(),
            close: close_rx,
        };
        let span = tracing::debug_span!("table_view", topic = %topic);
        tokio::spawn(tracing::Instrument::instrument(task.run(), span));
        let view = TableView {
            topic,
            persistent,
            shared,
            query,
            close,
            stall: self.stall,
        };
        if persistent {
            let started = std::time::Instant::now();
            if let Err(e) = view.refresh().await {
                let _ = view.close().await;
                return Err(e);
            }
            tracing::debug!(topic = %view.topic, keys = view.len(), elapsed = ?started.elapsed(),
                "table view read the existing messages");
        }
        Ok(view)
    }
}
