//! Seek and get-last-message-id, the consumer handle's side: which partition a seek goes
//! to (the task's side is `engine::seek`).

use std::sync::Arc;

use crate::consumer::handle::PartitionShared;
use crate::consumer::op::{ConsumerOp, LastIds, SeekTarget};
use crate::consumer::Consumer;
use crate::error::{Error, Result};
use crate::message_id::MessageId;
use crate::topic::TopicName;

impl Consumer {
    /// Moves the subscription to a message id: the next message received is that one (for
    /// a chunked message's id, the seek goes to its first chunk).
    ///
    /// On a partitioned consumer (or one with `retry_enable`), only the partition consumer
    /// that owns the id seeks, like upstream's `MultiTopicsConsumerImpl.seekAsync`: the other
    /// partitions keep their position, and (unlike upstream, whose `beforeSeek` empties the
    /// whole queue) their queued messages. An id naming no partition of
    /// this consumer's topic fails with [`Error::InvalidOperation`]; [`MessageId::EARLIEST`]
    /// and [`MessageId::LATEST`] go to every partition (and to the retry topic).
    ///
    /// The broker disconnects the consumer after a seek; a seek or
    /// [`last_message_ids`](Self::last_message_ids) made while it re-subscribes waits for it
    /// (up to the operation timeout, then [`Error::Timeout`]), like upstream's retries.
    pub async fn seek(&mut self, id: MessageId) -> Result<()> {
        self.check_persistent("seek")?;
        let targets = if id == MessageId::EARLIEST || id == MessageId::LATEST {
            self.all()
        } else {
            let owner = self.partition_of(&id)?.ok_or_else(|| {
                Error::InvalidOperation(format!(
                    "cannot seek to {id}: it names no partition of {} (only earliest and \
                     latest apply to every partition)",
                    self.topic
                ))
            })?;
            vec![owner]
        };
        // A chunked message's id names its last chunk; like upstream `ConsumerImpl.seekAsync`
        // the seek goes to its first chunk, so the whole message is read again.
        let to = id.first_chunk_id().unwrap_or(id);
        self.seek_each(&targets, SeekTarget::Id(to)).await
    }

    /// Moves one topic of this consumer to a message id: what a multi-topic or pattern
    /// consumer needs (an id names no topic, so [`seek`](Self::seek) cannot tell which topic
    /// an id of a plain topic belongs to). `topic` is the message's
    /// [`Message::topic`](crate::Message::topic) (a partition's name, or the partitioned
    /// topic's name with the id's partition). Like upstream's
    /// `MultiTopicsConsumerImpl.seekAsync` with a `TopicMessageId`: only that topic's consumer
    /// seeks; the others keep their position. A topic not in this consumer fails with
    /// [`Error::InvalidOperation`].
    pub async fn seek_topic_id(&mut self, topic: &TopicName, id: MessageId) -> Result<()> {
        // Only that topic must be persistent (a pattern consumer over all topic kinds may
        // hold non-persistent ones too).
        if !topic.is_persistent() {
            return Err(Error::InvalidConfig(format!(
                "cannot seek on a non-persistent topic ({topic}): it stores no messages"
            )));
        }
        let owner = crate::consumer::topics::registry::lock(&self.registry)
            .owner_of_topic(topic, &id)
            .ok_or_else(|| {
                Error::InvalidOperation(format!(
                    "cannot seek to {id} of {topic}: no such topic in this consumer"
                ))
            })?;
        let to = id.first_chunk_id().unwrap_or(id);
        self.seek_each(&[owner], SeekTarget::Id(to)).await
    }

    /// Moves the subscription to the first message published at or after `publish_time_ms`
    /// (every partition, and the retry topic).
    pub async fn seek_by_time(&mut self, publish_time_ms: u64) -> Result<()> {
        self.check_persistent("seek")?;
        let all = self.all();
        self.seek_each(&all, SeekTarget::PublishTime(publish_time_ms))
            .await
    }

    /// Seeks these partition consumers (concurrently, like upstream), then forgets a message
    /// peeked from one of them (it comes again if it is after the new position).
    async fn seek_each(&mut self, targets: &[Arc<PartitionShared>], to: SeekTarget) -> Result<()> {
        let seeks = targets
            .iter()
            .map(|p| Self::ask(p, |tx| ConsumerOp::Seek(to, tx)));
        let results = futures::future::join_all(seeks).await;
        if let Some(m) = &self.peeked {
            let all = self.all();
            let from_target = all
                .get(m.source)
                .is_some_and(|p| targets.iter().any(|t| Arc::ptr_eq(t, p)));
            if from_target {
                self.peeked = None;
            }
        }
        results.into_iter().collect()
    }

    /// The id of the last message stored on each partition (entry -1 on an empty one).
    pub async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.check_persistent("get the last message id")?;
        self.last_ids_each()
            .await
            .into_iter()
            .map(|r| r.map(|l| l.last))
            .collect()
    }

    /// The last stored id (and mark-delete position) of each partition, each with its own
    /// outcome (for readers).
    pub(crate) async fn last_ids_each(&self) -> Vec<Result<LastIds>> {
        self.last_ids_query().each().await
    }

    /// Asks for the last stored ids without a borrow of the consumer (a table view asks while
    /// its task receives).
    pub(crate) fn last_ids_query(&self) -> LastIdsQuery {
        LastIdsQuery {
            registry: self.registry.clone(),
        }
    }

    pub(crate) fn check_persistent(&self, what: &str) -> Result<()> {
        match self.topics().into_iter().find(|t| !t.is_persistent()) {
            None => Ok(()),
            Some(t) => Err(Error::InvalidConfig(format!(
                "cannot {what} on a non-persistent topic ({t}): it stores no messages"
            ))),
        }
    }
}

/// Asks a consumer's partitions (those it has when asked: a grown topic's new ones too) for
/// their last stored ids, apart from the consumer handle.
#[derive(Debug, Clone)]
pub(crate) struct LastIdsQuery {
    registry: crate::consumer::Registry,
}

impl LastIdsQuery {
    /// The last stored id (and mark-delete position) of each partition, each with its own
    /// outcome, concurrently.
    pub(crate) async fn each(&self) -> Vec<Result<LastIds>> {
        let all: Vec<Arc<PartitionShared>> =
            crate::consumer::topics::registry::lock(&self.registry)
                .iter()
                .cloned()
                .collect();
        let asks = all
            .into_iter()
            .map(|p| async move { Consumer::ask(&p, ConsumerOp::LastMessageId).await });
        futures::future::join_all(asks).await
    }
}
