//! Seek and get-last-message-id: the consumer handle's side (which partition a seek goes to)
//! and the partition task's side (requests deferred while the consumer re-subscribes, and what
//! a successful seek resets).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::acks::{AckTracker, NackTracker};
use super::partition::{skip_through, start_position};
use super::task::{ConsumerOp, ConsumerTask, PartitionShared, Pending, SeekTarget};
use super::Consumer;
use crate::commands;
use crate::entity::Requests;
use crate::error::{Error, Result, ServerError};
use crate::message_id::MessageId;
use crate::proto::BaseCommand;
use crate::topic::TopicName;

/// A partition's answer to get-last-message-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastIds {
    /// The id of the last stored message (for a batch, with the index of its last message);
    /// entry -1 on an empty partition.
    pub last: MessageId,
    /// The subscription's mark-delete position (everything at or before it is acknowledged),
    /// when the broker says.
    pub mark_delete: Option<MessageId>,
}

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
        let owner = super::registry::lock(&self.registry)
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
        let asks = self
            .all()
            .into_iter()
            .map(|p| async move { Self::ask(&p, ConsumerOp::LastMessageId).await });
        futures::future::join_all(asks).await
    }

    pub(super) fn check_persistent(&self, what: &str) -> Result<()> {
        match self.topics().into_iter().find(|t| !t.is_persistent()) {
            None => Ok(()),
            Some(t) => Err(Error::InvalidConfig(format!(
                "cannot {what} on a non-persistent topic ({t}): it stores no messages"
            ))),
        }
    }
}

/// A seek or get-last-message-id of the application, in flight or waiting for the consumer to
/// be subscribed again.
#[derive(Debug)]
pub(crate) enum IdRequest {
    Seek(SeekTarget, oneshot::Sender<Result<()>>),
    LastMessageId(oneshot::Sender<Result<LastIds>>),
}

impl IdRequest {
    fn operation(&self) -> &'static str {
        match self {
            IdRequest::Seek(..) => "seek",
            IdRequest::LastMessageId(_) => "get last message id",
        }
    }

    fn fail(self, e: Error) {
        match self {
            IdRequest::Seek(_, tx) => {
                let _ = tx.send(Err(e));
            }
            IdRequest::LastMessageId(tx) => {
                let _ = tx.send(Err(e));
            }
        }
    }
}

/// Whether a failed seek or get-last-message-id is sent again once the consumer is subscribed
/// again: the connection went away, or the broker no longer knows the consumer (it disconnects
/// every consumer of the subscription on a seek, and answers a request that crossed its
/// CLOSE_CONSUMER with "Consumer not found": upstream `ServerCnx` sends that as a MetadataError,
/// other brokers as ConsumerNotFound).
fn wait_for_resubscribe(e: &Error) -> bool {
    match e {
        Error::ConnectionLost(_) => true,
        Error::Broker {
            code: ServerError::ConsumerNotFound,
            ..
        } => true,
        Error::Broker {
            code: ServerError::MetadataError,
            message,
        } => message.contains("Consumer not found"),
        _ => false,
    }
}

impl ConsumerTask {
    /// Sends a seek or get-last-message-id now, or keeps it until the consumer is subscribed
    /// again (upstream `ConsumerImpl.internalGetLastMessageIdAsync` retries with backoff while
    /// the consumer is not connected, until the operation timeout; a seek made right after
    /// another finds the consumer re-subscribing the same way). `deadline` bounds the wait.
    pub(super) fn id_request(
        &mut self,
        req: IdRequest,
        deadline: Instant,
        requests: &mut Requests<Pending>,
    ) {
        let Some(conn) = self.entity.conn.clone() else {
            self.deferred.push((deadline, req));
            return;
        };
        let cid = self.entity.id;
        let operation = req.operation();
        match &req {
            IdRequest::Seek(target, _) => {
                // Upstream flushes the ack tracker around a seek (`flushAndClean`): acks the
                // application made before the seek are sent first, so they apply to the
                // position they were made at; the seek then decides what is unacknowledged.
                self.flush_acks();
                let (id, time) = match *target {
                    SeekTarget::Id(id) => (Some(id), None),
                    SeekTarget::PublishTime(t) => (None, Some(t)),
                };
                requests.send(
                    &conn,
                    Pending::Id(req, deadline),
                    |rid| commands::seek(cid, rid, id, time),
                    operation,
                );
            }
            IdRequest::LastMessageId(_) => requests.send(
                &conn,
                Pending::Id(req, deadline),
                |rid| commands::get_last_message_id(cid, rid),
                operation,
            ),
        }
    }

    /// The broker's answer to a seek or get-last-message-id.
    pub(super) fn on_id_answer(
        &mut self,
        req: IdRequest,
        deadline: Instant,
        r: Result<BaseCommand>,
    ) {
        match (req, r) {
            (req, Err(e)) if wait_for_resubscribe(&e) && Instant::now() < deadline => {
                tracing::debug!(topic = %self.entity.topic, error = %e,
                    operation = req.operation(), "sent again once re-subscribed");
                self.deferred.push((deadline, req));
            }
            (IdRequest::Seek(target, tx), r) => {
                let r = r.map(|_| self.after_seek(target));
                let _ = tx.send(r);
            }
            (IdRequest::LastMessageId(tx), r) => {
                let _ = tx.send(r.and_then(|resp| self.last_ids(resp)));
            }
        }
    }

    fn last_ids(&self, resp: BaseCommand) -> Result<LastIds> {
        let r = resp.get_last_message_id_response.ok_or_else(|| {
            Error::Protocol("GetLastMessageId answered without its response".into())
        })?;
        let with_partition = |id| MessageId {
            partition: self.partition,
            ..MessageId::from_proto(id)
        };
        Ok(LastIds {
            last: with_partition(&r.last_message_id),
            mark_delete: r.consumer_mark_delete_position.as_ref().map(with_partition),
        })
    }

    /// Subscribed again: sends what waited for it.
    pub(super) fn replay_deferred(&mut self, requests: &mut Requests<Pending>) {
        for (deadline, req) in std::mem::take(&mut self.deferred) {
            self.id_request(req, deadline, requests);
        }
    }

    /// When the first deferred request times out.
    pub(super) fn deferred_deadline(&self) -> Option<Instant> {
        self.deferred.iter().map(|(d, _)| *d).min()
    }

    /// Fails the deferred requests whose time is up.
    pub(super) fn expire_deferred(&mut self) {
        let now = Instant::now();
        let after = self.entity.core.operation_timeout();
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|(d, _)| *d <= now);
        self.deferred = keep;
        for (_, req) in due {
            let operation = req.operation();
            req.fail(Error::Timeout { operation, after });
        }
    }

    /// After a successful seek: discard what is queued, clean the ack bookkeeping, make the
    /// seek position the start of a non-durable re-subscribe, and ask for messages again (a
    /// broker that does not disconnect the consumer after a seek waits for new permits).
    fn after_seek(&mut self, target: SeekTarget) {
        let (epoch, _) = self.shared.new_epoch(true);
        self.shared.permit_epoch.store(epoch, Ordering::Release);
        // An end-of-topic notice queued before the seek is stale (Java's seek clears the
        // incoming queue): the consumer reads from the new position; the broker says the end
        // again once it gets there.
        self.shared.end_epoch.store(epoch, Ordering::Release);
        self.shared.room().consumed = 0;
        // Upstream `flushAndClean` (the acks were flushed when the seek was sent) and its
        // cleared unacked / negative-ack trackers: the rewound messages are delivered again
        // even if they were acked, negatively acked or counted for the ack timeout before.
        self.acks = AckTracker::new(self.opts.ack_group_max)
            .with_batch_index_ack(self.opts.batch_index_ack);
        self.ack_deadline = None;
        self.nacks = NackTracker::default();
        self.unacked.clear();
        self.chunks.clear();
        self.dlq_candidates.clear();
        match target {
            // Upstream sets `startMessageId` to the seek id: a non-durable subscription that
            // must be created again (connection lost) starts there, not at its first start.
            SeekTarget::Id(id) => {
                self.start = Some(start_position(id, true));
                self.skip_through = skip_through(id, true);
                self.start_from_next = false;
            }
            // Upstream restarts from earliest after a time seek; here the first message the
            // broker sends after it fixes the start (see `note_delivered`), and earliest only
            // covers a loss before any arrived.
            SeekTarget::PublishTime(_) => {
                self.start = Some(MessageId::EARLIEST);
                self.skip_through = None;
                self.start_from_next = true;
            }
        }
        self.start_flow();
    }

    /// A message is queued for the application: after a time seek, the first one is where a
    /// non-durable re-subscribe starts.
    pub(super) fn note_delivered(&mut self, id: MessageId) {
        if self.start_from_next {
            self.start_from_next = false;
            self.start = Some(start_position(id, true));
        }
    }
}
