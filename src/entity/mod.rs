//! The one driver behind every producer and consumer: create (or subscribe) with retries and
//! fail-fast classification, reconnect (backoff, lookup, PIP-307 assigned broker, topic
//! migration), broker close with or without reconnect (PIP-139), the client's shutdown, the
//! group close of a partitioned entity, and the end of an entity for good. It drives the
//! [`lifecycle`](crate::lifecycle) machine, which decides; the entity tasks plug in what
//! differs (the create command, what to replay or clear after a reconnect) by reacting to the
//! [`Wake`]s it returns.
//!
//! An entity task's loop selects on [`Entity::next`] next to its own sources (application
//! requests, timers). `next` never waits on anything but those events, and requests the task
//! sends while running (seek, close ...) are futures in [`Requests`], polled by the same loop:
//! a task never stops listening to its broker.

#[cfg(test)]
mod future_sizes;
#[cfg(test)]
mod idle_sizes;
mod requests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff_policy::Backoff;
use crate::codec::Frame;
use crate::commands;
use crate::connection::{
    consumer_channel, Connection, EntityEvent, EntityKind, EntityReceiver, MessageFrame, Response,
};
use crate::core::{CoreRef, TaskGuard};
use crate::error::{Error, Result, ServerError};
use crate::lifecycle::{terminal_event, Event, GroupClose, Lifecycle, State};
use crate::proto::BaseCommand;
use crate::retry::{AtDeadline, Schedule, Verdict};
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;

pub(crate) use requests::Requests;

/// Builds the create (CommandProducer) or subscribe command of one attempt, given its
/// request id.
pub(crate) type CreateCommand = Arc<dyn Fn(u64) -> BaseCommand + Send + Sync>;

/// After a connection loss, while the broker refuses connections (e.g. it is restarting),
/// attempts stay at the initial backoff delay for this long before growing: such an attempt
/// costs nothing, and the entity is back as soon as the broker is.
pub(crate) const FAST_RETRY_WINDOW: Duration = Duration::from_secs(5);

/// The delay between those fast attempts (or the policy's initial delay, if smaller).
pub(crate) const FAST_RETRY_DELAY: Duration = Duration::from_millis(50);

/// The backoff starts over only after an entity stayed attached this long: a broker that
/// accepts a create and drops the connection right away meets a growing delay.
pub(crate) const STAYED_HEALTHY: Duration = Duration::from_secs(5);

/// Who an entity is on a connection, and how many inbound commands it may hold untaken
/// (beyond that the broker breaks flow control: see `connection::entity_channel`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub kind: EntityKind,
    pub id: u64,
    pub inbound_bound: usize,
    /// The bytes of MESSAGE frames its channel holds before the connection stops reading
    /// (`connection::consumer_channel`); `usize::MAX` for entities sent no messages.
    pub inbound_bytes: usize,
}

/// An entity registered and created on a connection.
pub(crate) struct Attached {
    pub conn: Connection,
    /// The cluster generation of `conn` (see [`crate::pool::Cluster`]).
    pub generation: u64,
    pub events: EntityReceiver,
    /// The broker's answer to the create command (ProducerSuccess / Success).
    pub response: Box<BaseCommand>,
}

/// What woke an entity's driver, for the entity task to act on.
#[derive(Debug)]
pub(crate) enum Wake {
    /// A command addressed to the entity (broker closes are handled by the driver).
    Command(Box<Frame>),
    /// A MESSAGE for a consumer.
    Message(Box<MessageFrame>),
    /// A SEND_RECEIPT for a producer.
    Receipt(crate::proto::CommandSendReceipt),
    /// The connection is gone (lost, or the broker closed the entity with reconnect allowed).
    /// The task clears what the broker will send again, then calls [`Entity::reconnect`].
    Detached,
    /// Created again on a new connection, with the broker's answer.
    Attached(Box<BaseCommand>),
    /// A re-create attempt was refused with an error the entity acts on while the driver goes
    /// on retrying (see [`acted_on_refusal`]): a producer fails its pending messages.
    Refused(Error),
    /// The entity is done for good with this error (PIP-139 close, topic terminated, fenced,
    /// a non-retriable create failure).
    Ended(Error),
    /// Another member of a partitioned entity's group ended it (already reported there).
    GroupEnded(Error),
    /// The client is closing: close gracefully.
    Shutdown,
}

type Reconnect = Pin<Box<dyn Future<Output = (Backoff, Result<Attached>)> + Send>>;

/// The shared part of a producer or consumer task (see the module docs).
pub(crate) struct Entity {
    pub core: CoreRef,
    pub topic: TopicName,
    pub kind: EntityKind,
    pub id: u64,
    inbound_bound: usize,
    inbound_bytes: usize,
    pub life: Lifecycle,
    /// Reconnect counts, for the entity's stats.
    pub link: Arc<crate::stats::LinkCounters>,
    pub conn: Option<Connection>,
    events: Option<EntityReceiver>,
    /// An event [`Entity::try_next`] took but left for [`Entity::next`].
    /// Boxed, like the other rarely set fields: each sits in every idle entity's task state
    /// (issue #39).
    stashed: Option<Box<EntityEvent>>,
    /// The connection was lost outside [`Entity::next`] (a control send failed): the next
    /// call reports [`Wake::Detached`].
    detach_pending: bool,
    reconnect: Option<Reconnect>,
    /// The create command of the reconnect in progress, to go on with after a
    /// [`Wake::Refused`], and when that reconnect started.
    reconnect_command: Option<Box<(CreateCommand, Instant)>>,
    /// None while a reconnect future owns it.
    backoff: Option<Backoff>,
    /// A PIP-307 assigned broker, with the cluster generation it was named in.
    assigned_broker: Option<Box<(String, u64)>>,
    /// The cluster generation of the connection the entity is (or was last) attached to.
    generation: u64,
    attached_at: Instant,
    group: GroupClose,
    /// Resolves when another member closes the group. Created once and kept: re-creating it
    /// on every wake-up would register and drop a waiter per message. `None` for an entity
    /// that is a group of its own: nothing to wait for, nothing allocated (issue #39).
    group_closed: Option<Pin<Box<dyn Future<Output = Error> + Send>>>,
    /// Resolves when the client shuts down (`None` once seen). Kept like `group_closed`.
    shutdown: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Why the last connection closed, when it was this entity's flow-control violation
    /// (see [`Entity::take_violation`]).
    violation: Option<Box<Error>>,
    _guard: TaskGuard,
}

impl Entity {
    /// The flow-control violation that ended the last connection, if the broker broke it
    /// towards this entity (taken once).
    pub(crate) fn take_violation(&mut self) -> Option<Error> {
        self.violation.take().map(|e| *e)
    }

    /// Creates the entity on the broker for the first time: retriable failures are retried
    /// with backoff within the operation timeout, others fail at once.
    pub(crate) async fn create(
        core: &CoreRef,
        topic: TopicName,
        slot: Slot,
        command: CreateCommand,
        group: &GroupClose,
    ) -> Result<(Entity, Box<BaseCommand>)> {
        let Slot { kind, id, .. } = slot;
        let life = Lifecycle::new(kind_name(kind), topic.clone());
        let mut backoff = core.backoff();
        let deadline = crate::util::deadline_after(core.operation_timeout());
        // Boxed: the attach is a large future, and the create of a pattern consumer's topic
        // runs deep in the discovery's (debug builds overflowed a test thread's stack).
        let attach = Box::pin(attach_with_retry(
            core.clone(),
            topic.clone(),
            slot,
            command,
            &mut backoff,
            None,
            Retry::Until(deadline),
        ));
        // The client closing ends a create still in flight (Java `PulsarClientImpl.closeAsync`
        // closes every producer and consumer, those being created too): dropping the attach
        // closes the create on the broker. Without this a create the broker answers during
        // the close (a WaitForExclusive slot freed by the close itself) would hand out an
        // entity on a closed client.
        let mut signal = core.shutdown_signal();
        let attached = tokio::select! {
            biased;
            _ = crate::core::shut_down(&mut signal) => Err(Error::Closed),
            attached = attach => attached,
        }
        .map_err(|e| classify(e, &topic))?;
        life.apply(Event::Created);
        let entity = Entity {
            core: core.clone(),
            topic,
            kind,
            id,
            inbound_bound: slot.inbound_bound,
            inbound_bytes: slot.inbound_bytes,
            life,
            link: Default::default(),
            conn: Some(attached.conn),
            events: Some(attached.events),
            stashed: None,
            detach_pending: false,
            reconnect: None,
            reconnect_command: None,
            backoff: Some(backoff),
            assigned_broker: None,
            generation: attached.generation,
            attached_at: Instant::now(),
            group: group.clone(),
            group_closed: group.is_shared().then(|| {
                let mut group = group.clone();
                Box::pin(async move { group.closed().await })
                    as Pin<Box<dyn Future<Output = _> + Send>>
            }),
            shutdown: {
                let mut signal = core.shutdown_signal();
                Some(Box::pin(async move {
                    crate::core::shut_down(&mut signal).await
                }))
            },
            violation: None,
            _guard: core.task_started(),
        };
        Ok((entity, attached.response))
    }

    /// Waits for the next thing the entity task must act on.
    pub(crate) async fn next(&mut self) -> Wake {
        if std::mem::take(&mut self.detach_pending) && self.conn.is_none() {
            return Wake::Detached;
        }
        if let Some(ev) = self.stashed.take() {
            return self.on_event(Some(*ev));
        }
        tokio::select! {
            biased;
            ev = recv_opt(&mut self.events) => self.on_event(ev),
            r = async { self.reconnect.as_mut().expect("guarded").await }, if self.reconnect.is_some() => {
                self.reconnect = None;
                let (backoff, result) = r;
                self.backoff = Some(backoff);
                match result {
                    Ok(a) => {
                        self.reconnect_command = None;
                        self.life.apply(Event::Created);
                        self.conn = Some(a.conn);
                        self.generation = a.generation;
                        self.events = Some(a.events);
                        self.attached_at = Instant::now();
                        self.link.reattached();
                        tracing::info!(topic = %self.topic, kind = kind_name(self.kind), "re-created");
                        Wake::Attached(a.response)
                    }
                    Err(e) if acted_on_refusal(&e) && !self.core.is_shut_down() => {
                        match self.reconnect_command.as_deref().cloned() {
                            Some((command, lost_at)) => {
                                // Retried as any refusal is, after the (growing) backoff.
                                self.start_reconnect(command, lost_at, None, false);
                                Wake::Refused(e)
                            }
                            None => Wake::Ended(e),
                        }
                    }
                    Err(e) => Wake::Ended(classify(e, &self.topic)),
                }
            }
            e = async { self.group_closed.as_mut().expect("guarded").await }, if self.group_closed.is_some() => {
                Wake::GroupEnded(e)
            }
            _ = async { self.shutdown.as_mut().expect("guarded").await }, if self.shutdown.is_some() => {
                self.shutdown = None;
                Wake::Shutdown
            }
        }
    }

    /// A command or message that has already arrived, without waiting: lets a task handle a
    /// burst in one wake-up instead of one `select!` round each. Anything else (a broker
    /// close, the connection's end) is kept for [`Entity::next`].
    pub(crate) fn try_next(&mut self) -> Option<Wake> {
        if self.stashed.is_some() {
            return None;
        }
        match self.events.as_mut()?.try_recv() {
            Ok(EntityEvent::Message(m)) => Some(Wake::Message(m)),
            Ok(EntityEvent::Receipt(r)) => Some(Wake::Receipt(r)),
            Ok(EntityEvent::Command(frame)) if commands::broker_close(&frame.command).is_none() => {
                Some(Wake::Command(frame))
            }
            Ok(other) => {
                self.stashed = Some(Box::new(other));
                None
            }
            Err(_) => None,
        }
    }

    fn on_event(&mut self, ev: Option<EntityEvent>) -> Wake {
        match ev {
            Some(EntityEvent::Message(m)) => Wake::Message(m),
            Some(EntityEvent::Receipt(r)) => Wake::Receipt(r),
            Some(EntityEvent::Command(frame)) => match commands::broker_close(&frame.command) {
                None => Wake::Command(frame),
                Some(close) if !close.allow_reconnect => {
                    tracing::info!(topic = %self.topic, kind = kind_name(self.kind),
                        reason = close.reason, "closed for good by the broker (PIP-139)");
                    Wake::Ended(Error::ClosedByBroker {
                        topic: self.topic.to_string(),
                    })
                }
                Some(close) => {
                    tracing::info!(topic = %self.topic, kind = kind_name(self.kind),
                        to = ?close.assigned_broker, "{}", close.reason);
                    self.life.apply(Event::BrokerClose {
                        allow_reconnect: true,
                    });
                    // Named on a connection of `generation`: after a cluster switch it is a
                    // broker of the cluster left, and never connected to.
                    self.assigned_broker = close
                        .assigned_broker
                        .map(|b| Box::new((b, self.generation)));
                    self.detach(close.reason);
                    Wake::Detached
                }
            },
            Some(EntityEvent::ConnectionClosed(e)) => {
                // The connection closed because the broker broke flow control towards this
                // entity: kept for the task to report (a consumer hands it to the
                // application as an error item, as when it notices the violation itself).
                self.keep_violation(e.clone());
                self.lose_connection(&e.to_string());
                Wake::Detached
            }
            None => {
                self.lose_connection("the connection dropped the entity's channel");
                Wake::Detached
            }
        }
    }

    /// Keeps `reason` (why the connection closed) as this entity's flow-control violation if
    /// the broker overfilled this entity's channel (see [`Entity::take_violation`]).
    fn keep_violation(&mut self, reason: Error) {
        if self.events.as_ref().is_some_and(|ev| ev.overflowed()) {
            self.violation = Some(Box::new(reason));
        }
    }

    /// The connection was lost: count it in the lifecycle and forget the registration.
    pub(crate) fn lose_connection(&mut self, why: &str) {
        self.life.apply(Event::ConnectionLost);
        self.detach(why);
    }

    fn detach(&mut self, why: &str) {
        if let Some(conn) = self.conn.take() {
            tracing::info!(topic = %self.topic, kind = kind_name(self.kind), why, "detached");
            conn.unregister(self.kind, self.id);
            self.link.detached();
        }
        self.events = None;
        self.stashed = None;
    }

    /// The cluster generation of the connection the entity is (or was last) attached to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Drops the connection on purpose (e.g. the broker broke a rule) and reconnects: the
    /// broker then forgets this entity with the connection.
    pub(crate) fn drop_connection(&mut self, why: &str) {
        if let Some(c) = &self.conn {
            // Lost, not closed, for the other entities and requests on it (they retry).
            c.drop_as_lost(why);
        }
        self.lose_connection(why);
    }

    /// Starts re-creating the entity with `command` (after [`Wake::Detached`]). The first
    /// attempt goes at once to a PIP-307 assigned broker, otherwise after the backoff delay.
    pub(crate) fn reconnect(&mut self, command: CreateCommand) {
        if self.reconnect.is_some() || self.conn.is_some() {
            return;
        }
        let mut backoff = self.backoff.take().unwrap_or_else(|| self.core.backoff());
        let healthy = self.attached_at.elapsed() >= STAYED_HEALTHY;
        if healthy {
            backoff = self.core.backoff();
        }
        let direct = self.assigned_broker.take().and_then(|b| {
            let (u, generation) = *b;
            Some((ServiceUrl::from_broker_url(&u).ok()?, generation))
        });
        // PIP-307: go to the assigned broker at once (upstream reconnects with no delay), but
        // only if the entity had been healthy: a broker that closes every create and names
        // itself must meet the growing backoff, not a hot loop.
        let immediate = direct.is_some() && healthy;
        self.backoff = Some(backoff);
        self.start_reconnect(command, Instant::now(), direct, immediate);
    }

    /// Starts the reconnect future with the entity's backoff as it stands.
    fn start_reconnect(
        &mut self,
        command: CreateCommand,
        lost_at: Instant,
        direct: Option<(ServiceUrl, u64)>,
        immediate: bool,
    ) {
        let mut backoff = self.backoff.take().unwrap_or_else(|| self.core.backoff());
        self.reconnect_command = Some(Box::new((command.clone(), lost_at)));
        let (core, topic) = (self.core.clone(), self.topic.clone());
        let slot = Slot {
            kind: self.kind,
            id: self.id,
            inbound_bound: self.inbound_bound,
            inbound_bytes: self.inbound_bytes,
        };
        self.reconnect = Some(Box::pin(async move {
            let r = attach_with_retry(
                core,
                topic,
                slot,
                command,
                &mut backoff,
                direct,
                Retry::Forever { lost_at, immediate },
            )
            .await;
            (backoff, r)
        }));
    }

    /// Stops reconnecting (the entity is closing and has nothing left to deliver).
    pub(crate) fn stop_reconnecting(&mut self) {
        self.reconnect = None;
    }

    /// Sends a command that gets no answer (flow, ack, redeliver) on the control path: it is
    /// never dropped and never waits. Without a connection it is not sent: the broker forgets
    /// this entity's state with the connection.
    pub(crate) fn send_control(&mut self, frame: Frame) {
        if let Some(conn) = &self.conn {
            if let Err(reason) = conn.send_control(frame) {
                // The connection may have closed because the broker overfilled this entity's
                // channel: the event saying so waits behind the backlog in the channel, which
                // the detach drops, so the violation is kept from here (the send's error is
                // the connection's close reason). Without this a consumer whose backlog
                // made it send a FLOW first never told the application.
                self.keep_violation(reason);
                self.lose_connection("connection closed while sending");
                // The task learns of it like of any other loss: `next` says Detached, so it
                // clears what the broker will send again and reconnects.
                self.detach_pending = true;
            }
        }
    }

    /// The CloseProducer / CloseConsumer request for this entity, as a future (`None` without
    /// a connection). The entity stays registered meanwhile, so a broker close that arrives
    /// during the close is still seen; [`Entity::end`] (or a detach) drops the registration.
    pub(crate) fn close_request(
        &self,
    ) -> Option<impl Future<Output = Response> + Send + 'static + use<>> {
        let conn = self.conn.clone()?;
        let (kind, id) = (self.kind, self.id);
        Some(async move {
            let request_id = conn.new_request_id();
            let cmd = match kind {
                EntityKind::Producer => commands::close_producer(id, request_id),
                _ => commands::close_consumer(id, request_id),
            };
            conn.request(request_id, cmd, "close").await
        })
    }

    /// Ends the entity for good with `error`: the lifecycle's terminal state, the group told
    /// (PIP-139: a partitioned entity closed for good by the broker closes as a whole), the
    /// registration dropped. Returns the final state.
    pub(crate) fn end(&mut self, error: &Error) -> State {
        self.reconnect = None;
        self.link.ended();
        if matches!(error, Error::Closed) && self.life.state() != State::Closing {
            self.life.apply(Event::CloseRequested);
        }
        let state = self.life.apply(terminal_event(error));
        if matches!(error, Error::ClosedByBroker { .. }) {
            self.group.close_all(error);
        }
        if let Some(conn) = self.conn.take() {
            conn.unregister(self.kind, self.id);
        }
        self.events = None;
        state
    }
}

/// At most this many creates of one partitioned entity's partitions are in flight at once: a
/// topic's partition count (up to `MAX_PARTITIONS`) comes from the broker, and starting every
/// create at once would hold that many requests and their buffers together.
pub(crate) const MAX_CONCURRENT_CREATES: usize = 32;

/// Runs the creates of a partitioned entity's members, at most [`MAX_CONCURRENT_CREATES`] at
/// once. After the first failure no further create starts (the group fails as a whole); those
/// already started finish, so the caller can close what they created. Returns the members
/// created, in order, and the first error.
pub(crate) async fn create_all<T, F>(
    creates: impl IntoIterator<Item = F>,
) -> (Vec<T>, Option<Error>)
where
    F: Future<Output = Result<T>>,
{
    use futures::StreamExt;
    let mut pending = creates.into_iter();
    let mut in_flight = futures::stream::FuturesOrdered::new();
    let mut created = Vec::new();
    let mut first_error = None;
    loop {
        while first_error.is_none() && in_flight.len() < MAX_CONCURRENT_CREATES {
            match pending.next() {
                Some(create) => in_flight.push_back(create),
                None => break,
            }
        }
        match in_flight.next().await {
            Some(Ok(t)) => created.push(t),
            Some(Err(e)) => {
                first_error.get_or_insert(e);
            }
            None => break,
        }
    }
    (created, first_error)
}

fn kind_name(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Producer => "producer",
        _ => "consumer",
    }
}

/// Whether a request failed because the connection went away (the broker then forgets the
/// entity with it), rather than being answered with an error or timing out.
pub(crate) fn connection_gone(error: &Error) -> bool {
    matches!(error, Error::ConnectionLost(_) | Error::Closed)
}

/// Whether a refused re-create is reported to the entity task ([`Wake::Refused`]) before the
/// driver retries: Java `ProducerImpl.connectionOpened` fails the pending messages when the
/// broker refuses the producer for its backlog quota with the `producer_exception` policy
/// (`ProducerBlockedQuotaExceededException` → `failPendingMessages`) and keeps reconnecting;
/// the `producer_request_hold` policy's `ProducerBlockedQuotaExceededError` is only retried.
fn acted_on_refusal(error: &Error) -> bool {
    matches!(
        error,
        Error::Broker {
            code: ServerError::ProducerBlockedQuotaExceededException,
            ..
        }
    )
}

/// Turns broker refusals that end an entity for good into their distinct errors.
pub(crate) fn classify(error: Error, topic: &TopicName) -> Error {
    match error {
        Error::Broker {
            code: ServerError::TopicTerminatedError,
            ..
        } => Error::TopicTerminated {
            topic: topic.to_string(),
        },
        Error::Broker {
            code: ServerError::ProducerFenced,
            ..
        } => Error::ProducerFenced {
            topic: topic.to_string(),
        },
        other => other,
    }
}

#[derive(Clone, Copy)]
enum Retry {
    /// First creation: attempt at once, retry within the deadline.
    Until(Instant),
    /// Reconnect: wait before each attempt (fast while the broker refuses connections), retry
    /// until an attempt succeeds or fails for good.
    /// `immediate`: the first attempt goes without a delay.
    Forever { lost_at: Instant, immediate: bool },
}

impl Retry {
    /// Whether a failed attempt is tried again. A first create fails fast on a non-retriable
    /// error (PIP-139). Once the entity exists, only a deleted topic, a terminated topic and a
    /// fenced producer end it; anything else (ConsumerBusy while the broker has not yet seen
    /// the old connection die, a denial an operator fixes, a failed lookup) is retried with
    /// backoff, as upstream `ConsumerImpl`/`ProducerImpl.connectionOpened` do once the
    /// subscribe/create future is done.
    fn retries(self, error: &Error) -> bool {
        match self {
            Retry::Until(_) => error.is_retriable(),
            Retry::Forever { .. } => {
                !acted_on_refusal(error)
                    && !matches!(
                        error,
                        Error::Broker {
                            code: ServerError::TopicNotFound
                                | ServerError::TopicTerminatedError
                                | ServerError::ProducerFenced,
                            ..
                        } | Error::Closed
                    )
            }
        }
    }
}

/// Attaches (register + create) with retries, through the one retry driver
/// ([`crate::retry`]) for creates and reconnects.
async fn attach_with_retry(
    core: CoreRef,
    topic: TopicName,
    slot: Slot,
    command: CreateCommand,
    backoff: &mut Backoff,
    mut direct: Option<(ServiceUrl, u64)>,
    retry: Retry,
) -> Result<Attached> {
    let schedule = match retry {
        // A first create hears of its failure before the deadline, never after one more
        // attempt that could itself take the whole operation timeout.
        Retry::Until(deadline) => Schedule::until(deadline, AtDeadline::NoAttemptPast),
        Retry::Forever { immediate, .. } => Schedule {
            wait_first: !immediate,
            deadline: None,
        },
    };
    crate::retry::retry(
        backoff,
        schedule,
        || {
            let target = direct.take();
            let (core, topic, command) = (&core, &topic, &command);
            async move { attach_once(core, topic, slot, command, target.as_ref()).await }
        },
        |e| {
            if !retry.retries(e) || core.is_shut_down() {
                return Verdict::Fail;
            }
            tracing::debug!(%topic, kind = kind_name(slot.kind), error = %e, "create failed; retrying");
            match retry {
                // While the broker refuses connections (restarting), the next reconnect
                // attempt comes fast for a while: it costs nothing.
                Retry::Forever { lost_at, .. }
                    if matches!(e, Error::Connect { .. }) && lost_at.elapsed() < FAST_RETRY_WINDOW =>
                {
                    Verdict::RetryAfter(core.backoff_policy().initial.min(FAST_RETRY_DELAY))
                }
                _ => Verdict::Retry,
            }
        },
    )
    .await
}

/// One attempt: the connection (direct, or by lookup), the registration, the create command.
async fn attach_once(
    core: &CoreRef,
    topic: &TopicName,
    slot: Slot,
    command: &CreateCommand,
    direct: Option<&(ServiceUrl, u64)>,
) -> Result<Attached> {
    let Slot {
        kind,
        id,
        inbound_bound,
        inbound_bytes,
    } = slot;
    let (conn, generation) = match direct {
        Some((url, generation)) => core.connection_to(url, *generation).await?,
        None => core.connection_for(topic).await?,
    };
    let (tx, events) = consumer_channel(inbound_bound, inbound_bytes);
    conn.register(kind, id, tx)?;
    let request_id = conn.new_request_id();
    let request = {
        let (conn, cmd) = (conn.clone(), command(request_id));
        async move { conn.request(request_id, cmd, "create").await }
    };
    let mut create = PendingCreate {
        request: Some(Box::pin(request)),
        conn: conn.clone(),
        kind,
        id,
        abandoned: true,
    };
    let result = create.answer().await;
    // Answered (created, or refused: nothing exists on the broker) or the connection is gone
    // (the broker forgets the entity with it): nothing to undo. A timeout leaves `abandoned`.
    create.abandoned = matches!(result, Err(Error::Timeout { .. }));
    drop(create);
    match result {
        Ok(response) => Ok(Attached {
            conn,
            generation,
            events,
            response,
        }),
        Err(e) => {
            conn.unregister(kind, id);
            Err(e)
        }
    }
}

type CreateRequest = Pin<Box<dyn Future<Output = Response> + Send>>;

/// A create (CommandProducer / CommandSubscribe) in flight. If it is given up — it timed out,
/// or the caller dropped it (the application stopped waiting, the entity closed while
/// reconnecting) — the broker may still create the entity, or create it later
/// (WaitForExclusive grants the slot when it frees up), and would keep it for nobody: an
/// Exclusive producer nobody holds fences every later one. So giving up sends
/// CloseProducer / CloseConsumer for the id, as Java `ProducerImpl.connectionOpened` and
/// `ConsumerImpl.connectionOpened` do on a create timeout ("we need to ensure the broker
/// closes the producer in case it was indeed created"), and the registration is dropped.
struct PendingCreate {
    request: Option<CreateRequest>,
    conn: Connection,
    kind: EntityKind,
    id: u64,
    /// Whether dropping this undoes the create on the broker.
    abandoned: bool,
}

impl PendingCreate {
    async fn answer(&mut self) -> Response {
        match self.request.as_mut() {
            Some(request) => {
                let result = request.await;
                self.request = None;
                result
            }
            None => Err(Error::ConnectionLost("create already answered".into())),
        }
    }
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        // The request goes first: its responder closed, the connection task skips it if it
        // has not taken it yet, and otherwise it is already ahead of the close on the wire.
        drop(self.request.take());
        if !self.abandoned {
            return;
        }
        self.conn.unregister(self.kind, self.id);
        let request_id = self.conn.new_request_id();
        let close = match self.kind {
            EntityKind::Producer => commands::close_producer(self.id, request_id),
            _ => commands::close_consumer(self.id, request_id),
        };
        tracing::debug!(
            kind = kind_name(self.kind),
            id = self.id,
            "create given up; closing it on the broker in case it was (or will be) created"
        );
        // Its answer (Success) is not waited for: the router drops it as unknown.
        let _ = self.conn.send_control(Frame::simple(close));
    }
}

async fn recv_opt(rx: &mut Option<EntityReceiver>) -> Option<EntityEvent> {
    match rx {
        Some(rx) => rx.recv().await,
        None => futures::future::pending().await,
    }
}
