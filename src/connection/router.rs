//! The connection task's routing state: the requests in flight (each with its deadline, the
//! one place it times out) and the registered entities, with what to do when a frame for one
//! arrives. No I/O, so it is tested without a socket (`router_tests.rs`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::entity_channel::{Backpressure, Delivery};
use super::routing::{self, EntityKind, IdHasher};
use super::{ConnectionStats, EntitySender};
use crate::codec::Inbound;
use crate::error::{Error, ServerError};
use crate::proto::{base_command::Type, BaseCommand};

/// What the connection task does next.
pub(super) enum Step {
    /// Go on.
    Continue,
    /// End the connection with this error.
    Stop(Error),
}

/// A request issued on the connection, until it is answered, times out or its caller leaves.
pub(super) struct PendingRequest {
    /// Where the answer goes.
    pub(super) responder: oneshot::Sender<super::Response>,
    /// What the request is for (named in its timeout error).
    pub(super) operation: &'static str,
    /// The timeout it was issued with (named in its timeout error).
    pub(super) timeout: Duration,
    /// When it times out.
    pub(super) deadline: Instant,
    /// Its frame has been handed to the writer (until then it waits in the ops queue).
    pub(super) sent: bool,
}

/// The routing state: pending requests and registered entities. No I/O, so it is testable.
#[derive(Default)]
pub(super) struct Router {
    /// Every request from the moment it is issued (its frame may still wait in the ops queue)
    /// until it is answered, times out, or its caller leaves: the one owner of its deadline.
    /// Request ids are this client's own, hashed with [`IdHasher`] like the entities.
    pending: HashMap<u64, PendingRequest, BuildHasherDefault<IdHasher>>,
    deadlines: BTreeSet<(Instant, u64)>,
    /// Pending requests the broker answered "wait" (`producer_ready = false`): no deadline.
    waiting: HashSet<u64, BuildHasherDefault<IdHasher>>,
    /// Looked up for every inbound MESSAGE and SEND_RECEIPT: hashed with [`IdHasher`], not
    /// SipHash (a third of the lookup's cost went to hashing). The keys are ids this client
    /// assigned, so a broker cannot make them collide; it only picks which one it looks up.
    pub(super) entities: HashMap<(EntityKind, u64), EntitySender, BuildHasherDefault<IdHasher>>,
    /// A consumer's channel past its byte allowance: nothing more is read from the socket
    /// until its consumer task has taken it back within it (see `consumer_channel`).
    pub(super) backpressure: Option<Backpressure>,
}

impl Router {
    pub(super) fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            pending_requests: self.pending.len(),
            registered_entities: self.entities.len(),
        }
    }

    pub(super) fn add_request(&mut self, id: u64, req: PendingRequest) {
        // Requests waiting without a deadline (WaitForExclusive) whose caller is gone can
        // never be answered to anyone: forget them (the entity closed the producer on the
        // broker when it gave up). Bounded by the creates waiting on this connection.
        if !self.waiting.is_empty() {
            let pending = &mut self.pending;
            self.waiting.retain(|w| {
                let gone = pending.get(w).is_none_or(|r| r.responder.is_closed());
                if gone {
                    pending.remove(w);
                }
                !gone
            });
        }
        self.deadlines.insert((req.deadline, id));
        if let Some(old) = self.pending.insert(id, req) {
            // A reused request id: the older request can never be matched now.
            self.deadlines.remove(&(old.deadline, id));
            let _ = old.responder.send(Err(Error::Protocol(format!(
                "request id {id} reused before its response arrived"
            ))));
        }
    }

    /// Whether the frame of request `id`, taken from the ops queue, is to be written: only
    /// while the request is pending, not yet sent, and its caller still waits. A request that
    /// timed out (or whose caller left) while its frame was queued is never sent.
    pub(super) fn take_frame(&mut self, id: u64) -> bool {
        let Some(req) = self.pending.get_mut(&id) else {
            return false;
        };
        if req.responder.is_closed() {
            self.forget(id);
            return false;
        }
        if req.sent {
            // A second frame for one issued request (a caller bug): the first one stands.
            return false;
        }
        req.sent = true;
        true
    }

    /// Whether request `id` is pending (issued, not yet answered or expired).
    pub(super) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// The caller of request `id` left: its entry goes, if it is that caller's (a reused id's
    /// newer request has an open responder and stays).
    pub(super) fn cancel(&mut self, id: u64) {
        if self
            .pending
            .get(&id)
            .is_some_and(|req| req.responder.is_closed())
        {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(req) = self.pending.remove(&id) {
            self.deadlines.remove(&(req.deadline, id));
        }
        self.waiting.remove(&id);
        crate::util::shrink_after_burst(&mut self.pending);
    }

    pub(super) fn complete(&mut self, id: u64, cmd: Box<BaseCommand>) {
        if cmd
            .producer_success
            .as_ref()
            .is_some_and(|p| p.producer_ready == Some(false))
        {
            // WaitForExclusive: the producer is queued on the broker; a second ProducerSuccess
            // with the same request id follows when it may produce. Wait for it, without a
            // timeout (like upstream), until then or until the connection closes.
            if let Some(req) = self.pending.get(&id) {
                self.deadlines.remove(&(req.deadline, id));
                self.waiting.insert(id);
                tracing::info!(request_id = id, "producer waiting for exclusive access");
            }
            return;
        }
        self.waiting.remove(&id);
        let Some(req) = self.pending.remove(&id) else {
            tracing::debug!(request_id = id, command = %routing::type_name(&cmd),
                "response for an unknown or timed-out request; dropped");
            return;
        };
        self.deadlines.remove(&(req.deadline, id));
        crate::util::shrink_after_burst(&mut self.pending);
        let result = match (Type::try_from(cmd.r#type), cmd.error.as_ref()) {
            (Ok(Type::Error), Some(e)) => Err(Error::Broker {
                code: ServerError::from_code(e.error),
                message: e.message.clone(),
            }),
            _ => Ok(cmd),
        };
        let _ = req.responder.send(result);
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Fails every request whose deadline has passed; only those.
    pub(super) fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(req) = self.pending.remove(&id) {
                tracing::warn!(
                    request_id = id,
                    operation = req.operation,
                    "request timed out"
                );
                let _ = req.responder.send(Err(Error::Timeout {
                    operation: req.operation,
                    after: req.timeout,
                }));
            }
        }
        crate::util::shrink_after_burst(&mut self.pending);
    }

    /// Hands `frame` to its entity. An entity holding more than its bound of commands not
    /// yet taken means the broker ignores flow control: the connection ends with an error
    /// naming it (the entities reconnect; the broker redelivers what was not acked).
    pub(super) fn deliver(&mut self, kind: EntityKind, id: u64, frame: Inbound) -> Step {
        let Some(sender) = self.entities.get(&(kind, id)) else {
            // Per frame (e.g. messages still in flight to a consumer that closed): trace.
            tracing::trace!(?kind, id, "command for an unknown entity; dropped");
            return Step::Continue;
        };
        match sender.deliver(frame) {
            Delivery::Delivered => {}
            Delivery::Full(pause) => self.backpressure = Some(pause),
            Delivery::Gone => {
                tracing::debug!(?kind, id, "entity is gone; unregistering");
                self.entities.remove(&(kind, id));
                crate::util::shrink_after_burst(&mut self.entities);
            }
            Delivery::Overflow { bound } => {
                return Step::Stop(Error::Protocol(format!(
                    "the broker sent {kind:?} {id} more than {bound} commands it has not \
                     consumed yet: flow control violated; closing the connection"
                )));
            }
        }
        Step::Continue
    }

    /// Fails everything: each pending request and each entity is told once.
    pub(super) fn shutdown(&mut self, reason: &Error) {
        self.deadlines.clear();
        self.waiting.clear();
        let lost = lost_for_requests(reason);
        for (_, req) in self.pending.drain() {
            let _ = req.responder.send(Err(lost.clone()));
        }
        for (_, sender) in self.entities.drain() {
            sender.notify_closed(reason);
        }
    }
}

/// What a request pending on a connection that ended learns: the connection is lost, whatever
/// ended it (a reset, a bad frame, a broken rule), so it is retried like any loss; only the
/// client's own close stays [`Error::Closed`]. Java `ClientCnx.channelInactive` fails every
/// pending request as disconnected whatever closed the channel. The connection's own close
/// reason (and what its entities are told) keeps the cause.
pub(super) fn lost_for_requests(reason: &Error) -> Error {
    match reason {
        Error::Closed | Error::ConnectionLost(_) => reason.clone(),
        other => Error::ConnectionLost(format!("connection closed: {other}")),
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod router_tests;
