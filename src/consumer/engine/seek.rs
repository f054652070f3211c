//! Seek and get-last-message-id, the partition task's side: requests deferred while the
//! consumer re-subscribes, and what a successful seek resets (the handle's side is
//! `consumer::seek`).

use tokio::time::Instant;

use crate::commands;
use crate::consumer::engine::subscribe::{skip_through, start_position};
use crate::consumer::engine::{ConsumerTask, Pending};
use crate::consumer::op::{ConsumerOp, IdRequest, LastIds, SeekTarget};
use crate::entity::Requests;
use crate::error::{Error, Result, ServerError};
use crate::message_id::MessageId;
use crate::proto::BaseCommand;

/// Whether a failed seek or get-last-message-id is sent again once the consumer is subscribed
/// again: the connection went away, or the broker no longer knows the consumer (it disconnects
/// every consumer of the subscription on a seek, and answers a request that crossed its
/// CLOSE_CONSUMER with "Consumer not found": upstream `ServerCnx` sends that as a MetadataError,
/// other brokers as ConsumerNotFound).
pub(crate) fn wait_for_resubscribe(e: &Error) -> bool {
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

/// The task's seeks as a small state machine: requests deferred until the consumer is
/// subscribed again, how many seeks are begun and not answered yet, the acks made meanwhile
/// (held back so that none overtakes a seek), and after a seek, how long acks wait for the
/// re-subscribe the broker forces.
///
/// Why acks are held: the task writes acks on the connection's control lane, which the
/// connection drains before the ops lane carrying the SEEK request, so an ack applied after
/// the Seek op could reach the broker first, and the broker's reset of the cursor would undo
/// it. Java `ConsumerImpl.seekAsync` writes the SEEK in the caller's thread, so later acks
/// follow it on the same channel; here an ack-like op taken while a seek is begun is kept,
/// in order, and applied once every seek is answered, after what a successful seek resets
/// (so the reset does not wipe it either).
///
/// Why acks then wait for the re-subscribe: the broker disconnects every consumer of the
/// subscription on a seek (`PersistentSubscription.resetCursor` calls
/// `disconnectAllConsumers` before it resets the cursor; `ServerCnx.handleSeek` answers once
/// that is done) and ignores an ack for a consumer it no longer has (`ServerCnx.handleAck`).
/// An ack sent between the seek's answer and our noticing the CLOSE_CONSUMER would be lost;
/// it goes on the new subscription instead. A broker that does not disconnect gets it after
/// [`DISCONNECT_WAIT`].
#[derive(Debug, Default)]
pub(crate) struct Seeks {
    /// Seeks and get-last-message-ids waiting for the consumer to be subscribed again, with
    /// their deadlines.
    deferred: Vec<(Instant, IdRequest)>,
    /// Seeks taken from the inbox and not answered (or given up) yet.
    begun: usize,
    /// Ack-like ops (acks, negative acks, redeliveries) taken while a seek was begun, in the
    /// order made. Bounded by what the application makes while a seek waits for its answer
    /// (at most the operation timeout); consecutive acks share a buffer in the inbox already.
    held: Vec<ConsumerOp>,
    /// After a successful seek answered while still attached: acks are kept until the
    /// consumer is detached or subscribed again, at most until then.
    acks_wait_until: Option<Instant>,
}

/// How long acks made during a seek wait, after its answer, for the broker to disconnect the
/// consumer (upstream brokers always do, right behind or before the answer).
pub(crate) const DISCONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Seeks {
    /// A seek was taken from the inbox: acks are held from now on.
    pub(crate) fn begin(&mut self) {
        self.begun += 1;
    }

    /// Keeps `op` when a seek is begun (an ack-like op: see the type); returns it to be
    /// applied now otherwise. Flow permits (and a zero-size queue's ask for one) are never held: they keep no order
    /// with acks.
    pub(crate) fn hold(&mut self, op: ConsumerOp) -> Option<ConsumerOp> {
        if self.begun == 0
            || !op.folds()
            || matches!(op, ConsumerOp::Flow(_) | ConsumerOp::RecvWaits)
        {
            return Some(op);
        }
        self.held.push(op);
        None
    }

    /// A seek was answered or given up. Returns the ops held, to apply now, once no seek is
    /// begun any more.
    pub(crate) fn end(&mut self) -> Vec<ConsumerOp> {
        self.begun = self.begun.saturating_sub(1);
        if self.begun == 0 {
            std::mem::take(&mut self.held)
        } else {
            Vec::new()
        }
    }

    /// Everything held, whatever is begun (the consumer closes: its acks go before the
    /// CloseConsumer, as Java's `closeAsync` flushes the tracker).
    pub(crate) fn release_all(&mut self) -> Vec<ConsumerOp> {
        self.acks_wait_until = None;
        std::mem::take(&mut self.held)
    }

    /// A seek succeeded while the consumer is attached, after `held` ops were applied: acks
    /// wait for the disconnect (see the type).
    pub(crate) fn wait_for_disconnect(&mut self, now: Instant) {
        self.acks_wait_until = Some(now + DISCONNECT_WAIT);
    }

    /// Until when a flush keeps the acks (`None`: send them now).
    pub(crate) fn acks_wait(&mut self, now: Instant) -> Option<Instant> {
        match self.acks_wait_until {
            Some(t) if now < t => Some(t),
            _ => {
                self.acks_wait_until = None;
                None
            }
        }
    }

    /// The consumer was detached or subscribed again: acks no longer wait for it. Returns
    /// whether they did.
    pub(crate) fn reattaching(&mut self) -> bool {
        self.acks_wait_until.take().is_some()
    }

    /// Keeps `req` until the consumer is subscribed again.
    pub(crate) fn defer(&mut self, deadline: Instant, req: IdRequest) {
        self.deferred.push((deadline, req));
    }

    /// The deferred requests, to send again (the consumer is subscribed again).
    pub(crate) fn take_deferred(&mut self) -> Vec<(Instant, IdRequest)> {
        std::mem::take(&mut self.deferred)
    }

    /// When the first deferred request times out.
    pub(crate) fn deferred_deadline(&self) -> Option<Instant> {
        self.deferred.iter().map(|(d, _)| *d).min()
    }

    /// Takes the deferred requests whose time is up.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<IdRequest> {
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|(d, _)| *d <= now);
        self.deferred = keep;
        due.into_iter().map(|(_, req)| req).collect()
    }
}

/// The answer to a get-last-message-id, with the ids of partition `partition`.
pub(crate) fn last_ids(resp: BaseCommand, partition: i32) -> Result<LastIds> {
    let r = resp
        .get_last_message_id_response
        .ok_or_else(|| Error::Protocol("GetLastMessageId answered without its response".into()))?;
    let with_partition = |id| MessageId {
        partition,
        ..MessageId::from_proto(id)
    };
    Ok(LastIds {
        last: with_partition(&r.last_message_id),
        mark_delete: r.consumer_mark_delete_position.as_ref().map(with_partition),
    })
}

/// After a successful seek to `target`: where a non-durable subscription created again
/// starts, what the task skips up to, and whether the next message queued sets the start.
pub(crate) fn start_after(target: SeekTarget) -> (Option<MessageId>, Option<MessageId>, bool) {
    match target {
        // Upstream sets `startMessageId` to the seek id: a non-durable subscription that
        // must be created again (connection lost) starts there, not at its first start.
        SeekTarget::Id(id) => (
            Some(start_position(id, true)),
            skip_through(id, true),
            false,
        ),
        // Upstream restarts from earliest after a time seek; here the first message the
        // broker sends after it fixes the start (see `note_delivered`), and earliest only
        // covers a loss before any arrived.
        SeekTarget::PublishTime(_) => (Some(MessageId::EARLIEST), None, true),
    }
}

/// Sends a seek or get-last-message-id now, or keeps it until the consumer is subscribed
/// again (upstream `ConsumerImpl.internalGetLastMessageIdAsync` retries with backoff while
/// the consumer is not connected, until the operation timeout; a seek made right after
/// another finds the consumer re-subscribing the same way). `deadline` bounds the wait.
pub(crate) fn id_request(
    task: &mut ConsumerTask,
    req: IdRequest,
    deadline: Instant,
    requests: &mut Requests<Pending>,
) {
    let Some(conn) = task.io.entity.conn.clone() else {
        task.seeks.defer(deadline, req);
        return;
    };
    let cid = task.io.entity.id;
    let operation = req.operation();
    match &req {
        IdRequest::Seek(target, _) => {
            // Upstream flushes the ack tracker around a seek (`flushAndClean`): acks the
            // application made before the seek are sent first, so they apply to the
            // position they were made at; the seek then decides what is unacknowledged.
            task.flush_acks();
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
