//! Seek and get-last-message-id, the partition task's side: requests deferred while the
//! consumer re-subscribes, and what a successful seek resets (the handle's side is
//! `consumer::seek`).

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::commands;
use crate::consumer::engine::acks::{AckTracker, NackTracker};
use crate::consumer::engine::subscribe::{skip_through, start_position};
use crate::consumer::engine::{ConsumerTask, Pending};
use crate::consumer::op::{IdRequest, LastIds, SeekTarget};
use crate::entity::Requests;
use crate::error::{Error, Result, ServerError};
use crate::message_id::MessageId;
use crate::proto::BaseCommand;

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
    pub(crate) fn id_request(
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
    pub(crate) fn on_id_answer(
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
    pub(crate) fn replay_deferred(&mut self, requests: &mut Requests<Pending>) {
        for (deadline, req) in std::mem::take(&mut self.deferred) {
            self.id_request(req, deadline, requests);
        }
    }

    /// When the first deferred request times out.
    pub(crate) fn deferred_deadline(&self) -> Option<Instant> {
        self.deferred.iter().map(|(d, _)| *d).min()
    }

    /// Fails the deferred requests whose time is up.
    pub(crate) fn expire_deferred(&mut self) {
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
    pub(crate) fn note_delivered(&mut self, id: MessageId) {
        if self.start_from_next {
            self.start_from_next = false;
            self.start = Some(start_position(id, true));
        }
    }
}
