//! The task behind one (partition) producer: it owns the pending queue, the open batches and
//! the registration on the broker connection, and re-creates the producer after a reconnect.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::client::Client;
use crate::connection::{Connection, EntityEvent, EntityKind};
use crate::error::{Error, Result, ServerError};
use crate::lifecycle::{Event, Lifecycle};
use crate::message::ProducerMessage;
use crate::message_id::MessageId;
use crate::proto::{self, base_command::Type, BaseCommand};
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;
use crate::util::{recv_opt_unbounded as recv_opt, sleep_until_opt};

use super::batch_container::{single_message_entry, BatchContainer, FrameContext};
use super::options::ProducerOptions;
use super::pending::{Completion, InFlight, PendingQueue, ReceiptOutcome};

/// Requests from producer handles to the task.
#[derive(Debug)]
pub(crate) enum ProducerOp {
    Send {
        msg: ProducerMessage,
        completion: Completion,
    },
    Flush(oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

/// What the broker said when the producer was created.
#[derive(Debug, Clone)]
pub(crate) struct Created {
    pub name: String,
    pub last_sequence_id: i64,
}

/// Creates the producer on `conn` (CommandProducer → ProducerSuccess).
pub(crate) async fn create_on(
    conn: &Connection,
    topic: &TopicName,
    producer_id: u64,
    name: Option<&str>,
    epoch: u64,
    opts: &ProducerOptions,
) -> Result<Created> {
    let request_id = conn.new_request_id();
    let cmd = BaseCommand {
        r#type: Type::Producer as i32,
        producer: Some(proto::CommandProducer {
            topic: topic.to_string(),
            producer_id,
            request_id,
            producer_name: name.map(str::to_string),
            user_provided_producer_name: Some(opts.name.is_some()),
            epoch: Some(epoch),
            metadata: opts
                .properties
                .iter()
                .map(|(k, v)| proto::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            producer_access_mode: Some(opts.access_mode.to_proto()),
            initial_subscription_name: opts.initial_subscription_name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let response = conn.request(request_id, cmd, "create producer").await?;
    let ok = response.producer_success.ok_or_else(|| {
        Error::Protocol("producer create answered without ProducerSuccess".into())
    })?;
    Ok(Created {
        name: ok.producer_name,
        last_sequence_id: ok.last_sequence_id.unwrap_or(-1),
    })
}

/// Looks the topic up, gets its connection, registers and creates the producer, retrying
/// retriable failures with backoff until `deadline`. With `direct`, connects straight to that
/// broker (PIP-307) instead of looking the topic up.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn connect_and_create(
    client: &Client,
    topic: &TopicName,
    producer_id: u64,
    name: Option<&str>,
    epoch: u64,
    opts: &ProducerOptions,
    deadline: Instant,
    direct: Option<&ServiceUrl>,
) -> Result<(Connection, mpsc::UnboundedReceiver<EntityEvent>, Created)> {
    let mut backoff = client.backoff();
    loop {
        let attempt = async {
            let conn = match direct {
                Some(url) => client.connection_to(url).await?,
                None => client.connection_for(topic).await?,
            };
            // Unbounded: receipts never outnumber this producer's own pending messages.
            let (tx, rx) = mpsc::unbounded_channel();
            conn.register(EntityKind::Producer, producer_id, tx)?;
            match create_on(&conn, topic, producer_id, name, epoch, opts).await {
                Ok(created) => Ok((conn, rx, created)),
                Err(e) => {
                    conn.unregister(EntityKind::Producer, producer_id);
                    Err(e)
                }
            }
        };
        let err = match attempt.await {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        let delay = backoff.next_delay();
        if !err.is_retriable() || Instant::now() + delay >= deadline {
            return Err(err);
        }
        tracing::debug!(%topic, error = %err, ?delay, "producer create failed; retrying");
        tokio::time::sleep(delay).await;
    }
}

/// The producer's task state.
pub(crate) struct ProducerTask {
    pub client: Client,
    pub topic: TopicName,
    pub partition: i32,
    pub opts: ProducerOptions,
    pub ctx: FrameContext,
    pub conn: Option<Connection>,
    pub events: Option<mpsc::UnboundedReceiver<EntityEvent>>,
    /// Encoded frames waiting for room in the connection's queue (in order). The task never
    /// blocks on a busy connection, so it keeps timing out sends and reading receipts.
    pub unsent: VecDeque<Bytes>,
    pub ops: mpsc::Receiver<ProducerOp>,
    pub next_seq: u64,
    pub epoch: u64,
    pub pending: PendingQueue,
    pub batches: Option<BatchContainer>,
    pub flush_waiters: Vec<(u64, oneshot::Sender<Result<()>>)>,
    pub close_waiter: Option<oneshot::Sender<Result<()>>>,
    /// PIP-307: the broker to reconnect to directly (skipping lookup), from CloseProducer.
    pub assigned_broker: Option<String>,
    /// Set once the producer is closed for good; handles report it on later sends.
    pub terminal: std::sync::Arc<std::sync::Mutex<Option<Error>>>,
    /// The lifecycle state machine (observable through the handle).
    pub life: Lifecycle,
    /// Shared by the partitions of one partitioned producer: when one partition is closed for
    /// good by the broker, all close.
    pub group: GroupClose,
}

/// Closes every partition of a partitioned producer/consumer together (PIP-139: a partitioned
/// producer closed by the broker on one partition closes as a whole).
#[derive(Debug, Clone)]
pub(crate) struct GroupClose {
    tx: std::sync::Arc<tokio::sync::watch::Sender<Option<Error>>>,
    rx: tokio::sync::watch::Receiver<Option<Error>>,
}

impl GroupClose {
    pub(crate) fn new() -> Self {
        let (tx, rx) = tokio::sync::watch::channel(None);
        GroupClose {
            tx: std::sync::Arc::new(tx),
            rx,
        }
    }

    /// Tells every member to close with `error`.
    pub(crate) fn close_all(&self, error: &Error) {
        self.tx.send_if_modified(|e| {
            if e.is_none() {
                *e = Some(error.clone());
                true
            } else {
                false
            }
        });
    }

    /// Resolves when another member closed the group.
    pub(crate) async fn closed(&mut self) -> Error {
        loop {
            if let Some(e) = self.rx.borrow_and_update().clone() {
                return e;
            }
            if self.rx.changed().await.is_err() {
                return futures::future::pending().await;
            }
        }
    }
}

/// Maps an error that ends a producer/consumer to its lifecycle event.
pub(crate) fn terminal_event(error: &Error) -> Event {
    match error {
        Error::ClosedByBroker { .. } => Event::BrokerClose {
            allow_reconnect: false,
        },
        Error::TopicTerminated { .. } => Event::TopicTerminated,
        Error::ProducerFenced { .. } => Event::Fenced,
        Error::Closed => Event::CloseDone,
        _ => Event::NonRetriableError,
    }
}

/// Turns broker refusals that end a producer for good into their distinct errors.
fn classify(error: Error, topic: &TopicName) -> Error {
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

enum Wake {
    Op(Option<ProducerOp>),
    Event(Option<EntityEvent>),
    BatchDue,
    TimeoutTick,
    GroupClosed(Error),
    Reconnected(Result<(Connection, mpsc::UnboundedReceiver<EntityEvent>, Created)>),
    ConnectionReady,
}

impl ProducerTask {
    pub(crate) async fn run(mut self) {
        let timeout_tick = if self.opts.send_timeout.is_zero() {
            Duration::from_secs(3600)
        } else {
            (self.opts.send_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
        };
        let mut tick = tokio::time::interval(timeout_tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reconnect: Option<std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>> =
            None;
        let mut accepting = true;
        let mut group = self.group.clone();
        let final_error: Error = loop {
            if self.conn.is_none() && reconnect.is_none() {
                reconnect = Some(Box::pin(self.reconnect_future()));
            }
            let batch_deadline = self.batches.as_ref().and_then(|b| b.deadline());
            let wake = tokio::select! {
                biased;
                ev = recv_opt(&mut self.events) => Wake::Event(ev),
                r = async { reconnect.as_mut().expect("guarded").await }, if reconnect.is_some() => {
                    reconnect = None;
                    Wake::Reconnected(r)
                }
                op = self.ops.recv(), if accepting => Wake::Op(op),
                _ = sleep_until_opt(batch_deadline) => Wake::BatchDue,
                _ = tick.tick() => Wake::TimeoutTick,
                _ = ready_opt(self.conn.as_ref()), if !self.unsent.is_empty() => Wake::ConnectionReady,
                e = group.closed() => Wake::GroupClosed(e),
            };
            let step = match wake {
                Wake::Op(Some(op)) => {
                    let mut r = self.on_op(op).await;
                    // Drain what is already queued before waiting again.
                    let mut n = 0;
                    while r.is_ok() && n < 256 {
                        match self.ops.try_recv() {
                            Ok(op) => r = self.on_op(op).await,
                            Err(_) => break,
                        }
                        n += 1;
                    }
                    r
                }
                Wake::Op(None) => {
                    // Every handle is gone: finish what is pending, then close.
                    accepting = false;
                    self.life.apply(Event::CloseRequested);
                    if self.close_waiter.is_none() {
                        let (tx, _rx) = oneshot::channel();
                        self.close_waiter = Some(tx);
                    }
                    self.start_close().await
                }
                Wake::Event(Some(ev)) => self.on_event(ev).await,
                Wake::Event(None) => {
                    self.lose_connection("connection dropped the producer's channel");
                    Ok(())
                }
                Wake::BatchDue => self.flush_due_batches().await,
                Wake::TimeoutTick => {
                    if !self.opts.send_timeout.is_zero() {
                        let n = self.pending.expire(Instant::now(), self.opts.send_timeout);
                        if n > 0 {
                            tracing::warn!(topic = %self.topic, failed = n, "send timeout");
                        }
                        self.finish_flush_waiters();
                    }
                    Ok(())
                }
                Wake::Reconnected(Ok((conn, events, created))) => {
                    self.on_reconnected(conn, events, created).await
                }
                Wake::Reconnected(Err(e)) => {
                    if e.is_retriable() {
                        self.life.apply(Event::RetriableError);
                        Ok(()) // the loop schedules another attempt
                    } else {
                        Err(classify(e, &self.topic))
                    }
                }
                Wake::GroupClosed(e) => Err(e),
                Wake::ConnectionReady => {
                    self.drain_unsent();
                    Ok(())
                }
            };
            if let Err(e) = step {
                break e;
            }
            if self.close_waiter.is_some() && self.pending.is_empty() && self.batches_empty() {
                break self.finish_close().await;
            }
        };
        self.shutdown(final_error);
    }

    fn batches_empty(&self) -> bool {
        self.batches.as_ref().is_none_or(|b| b.is_empty())
    }

    fn reconnect_future(
        &mut self,
    ) -> impl std::future::Future<
        Output = Result<(Connection, mpsc::UnboundedReceiver<EntityEvent>, Created)>,
    > + Send
           + 'static {
        let client = self.client.clone();
        let topic = self.topic.clone();
        let id = self.ctx.producer_id;
        let name = self.ctx.producer_name.clone();
        let epoch = self.epoch + 1;
        let opts = self.opts.clone();
        // PIP-307: a broker named in CloseProducer is tried first, at once, without lookup.
        let direct = self
            .assigned_broker
            .take()
            .and_then(|u| ServiceUrl::from_broker_url(&u).ok());
        async move {
            crate::reconnect::reconnect(&client, &topic.clone(), "producer", direct, |target| {
                let (client, topic, name, opts) =
                    (client.clone(), topic.clone(), name.clone(), opts.clone());
                async move {
                    // One attempt per round (a deadline of now): the loop is the only backoff.
                    connect_and_create(
                        &client,
                        &topic,
                        id,
                        Some(&name),
                        epoch,
                        &opts,
                        Instant::now(),
                        target.as_ref(),
                    )
                    .await
                }
            })
            .await
        }
    }

    async fn on_reconnected(
        &mut self,
        conn: Connection,
        events: mpsc::UnboundedReceiver<EntityEvent>,
        created: Created,
    ) -> Result<()> {
        self.epoch += 1;
        self.life.apply(Event::Created);
        self.ctx.max_message_size = conn.info().max_message_size;
        tracing::info!(topic = %self.topic, pending = self.pending.messages(), "producer reconnected");
        self.conn = Some(conn);
        self.events = Some(events);
        let _ = created;
        // Re-send everything not yet receipted, in sequence order, same sequence ids.
        self.unsent = self.pending.iter().map(|e| e.encoded.clone()).collect();
        self.drain_unsent();
        Ok(())
    }

    fn lose_connection(&mut self, why: &str) {
        self.life.apply(Event::ConnectionLost);
        if let Some(conn) = self.conn.take() {
            tracing::info!(topic = %self.topic, why, "producer disconnected; reconnecting");
            conn.unregister(EntityKind::Producer, self.ctx.producer_id);
        }
        self.events = None;
        // Everything unsent is still pending: it is re-sent after the reconnect.
        self.unsent.clear();
    }

    /// Queues an encoded frame for the connection without waiting.
    fn send_bytes(&mut self, bytes: Bytes) {
        if self.conn.is_none() {
            return; // re-sent from the pending queue after the reconnect
        }
        self.unsent.push_back(bytes);
        self.drain_unsent();
    }

    /// Moves unsent frames into the connection's queue while it has room.
    fn drain_unsent(&mut self) {
        let Some(conn) = self.conn.clone() else {
            self.unsent.clear();
            return;
        };
        while let Some(bytes) = self.unsent.pop_front() {
            match conn.try_send_raw(bytes) {
                Ok(()) => {}
                Err(Some(bytes)) => {
                    self.unsent.push_front(bytes);
                    return;
                }
                Err(None) => {
                    self.lose_connection("connection closed while sending");
                    return;
                }
            }
        }
    }

    async fn on_op(&mut self, op: ProducerOp) -> Result<()> {
        match op {
            ProducerOp::Send { msg, completion } => self.on_send(msg, completion).await,
            ProducerOp::Flush(tx) => {
                self.flush_all_batches().await;
                match self.pending.last_seq() {
                    None => {
                        let _ = tx.send(Ok(()));
                    }
                    Some(seq) => self.flush_waiters.push((seq, tx)),
                }
                Ok(())
            }
            ProducerOp::Close(tx) => {
                self.life.apply(Event::CloseRequested);
                self.close_waiter = Some(tx);
                self.start_close().await
            }
        }
    }

    async fn start_close(&mut self) -> Result<()> {
        self.flush_all_batches().await;
        Ok(())
    }

    async fn finish_close(&mut self) -> Error {
        if let Some(conn) = self.conn.take() {
            let request_id = conn.new_request_id();
            let cmd = BaseCommand {
                r#type: Type::CloseProducer as i32,
                close_producer: Some(proto::CommandCloseProducer {
                    producer_id: self.ctx.producer_id,
                    request_id,
                    ..Default::default()
                }),
                ..Default::default()
            };
            if let Err(e) = conn.request(request_id, cmd, "close producer").await {
                tracing::debug!(topic = %self.topic, error = %e, "close producer");
            }
            conn.unregister(EntityKind::Producer, self.ctx.producer_id);
        }
        if let Some(tx) = self.close_waiter.take() {
            let _ = tx.send(Ok(()));
        }
        Error::Closed
    }

    async fn on_send(&mut self, msg: ProducerMessage, completion: Completion) -> Result<()> {
        if self.close_waiter.is_some() {
            completion.complete(Err(Error::Closed));
            return Ok(());
        }
        let seq = match msg.sequence_id {
            Some(s) => {
                self.next_seq = self.next_seq.max(s + 1);
                s
            }
            None => {
                let s = self.next_seq;
                self.next_seq += 1;
                s
            }
        };
        let mut out = Vec::new();
        let mut failed = Vec::new();
        match self.batches.as_mut() {
            Some(b)
                if msg.deliver_at.is_none()
                    && !b.too_big_for_batch(&msg, self.ctx.max_message_size) =>
            {
                b.add(&self.ctx, msg, seq, completion, &mut out, &mut failed);
            }
            batches => {
                // Sent on its own: close open batches first to keep sequence order.
                if let Some(b) = batches {
                    b.flush(&self.ctx, &mut out, &mut failed);
                }
                match single_message_entry(&self.ctx, msg, seq, completion) {
                    Ok(entry) => out.push(entry),
                    Err(f) => failed.push(f),
                }
            }
        }
        self.dispatch(out, failed).await;
        Ok(())
    }

    async fn dispatch(&mut self, out: Vec<InFlight>, failed: Vec<(Error, Completion)>) {
        for (e, c) in failed {
            c.complete(Err(e));
        }
        for entry in out {
            let bytes = self.conn.is_some().then(|| entry.encoded.clone());
            self.pending.push(entry);
            if let Some(bytes) = bytes {
                self.send_bytes(bytes);
            }
        }
    }

    async fn flush_all_batches(&mut self) {
        let mut out = Vec::new();
        let mut failed = Vec::new();
        if let Some(b) = self.batches.as_mut() {
            b.flush(&self.ctx, &mut out, &mut failed);
        }
        self.dispatch(out, failed).await;
    }

    async fn flush_due_batches(&mut self) -> Result<()> {
        let mut out = Vec::new();
        let mut failed = Vec::new();
        if let Some(b) = self.batches.as_mut() {
            b.flush_due(&self.ctx, Instant::now(), &mut out, &mut failed);
        }
        self.dispatch(out, failed).await;
        Ok(())
    }

    async fn on_event(&mut self, ev: EntityEvent) -> Result<()> {
        let frame = match ev {
            EntityEvent::ConnectionClosed(e) => {
                self.lose_connection(&e.to_string());
                return Ok(());
            }
            EntityEvent::Command(frame) => frame,
        };
        let cmd = frame.command;
        match Type::try_from(cmd.r#type) {
            Ok(Type::SendReceipt) => {
                let r = cmd.send_receipt.unwrap_or_default();
                let partition = self.partition;
                let id = r.message_id.unwrap_or_default();
                let outcome = self
                    .pending
                    .on_receipt(r.sequence_id, |batch_index| MessageId {
                        ledger_id: id.ledger_id,
                        entry_id: id.entry_id,
                        partition,
                        batch_index: batch_index.unwrap_or(-1),
                        batch_size: 0,
                    });
                if let ReceiptOutcome::AheadOfHead { expected, got } = outcome {
                    tracing::warn!(topic = %self.topic, expected, got,
                        "receipt ahead of the pending head; reconnecting");
                    if let Some(c) = &self.conn {
                        c.close();
                    }
                    self.lose_connection("receipt out of order");
                }
                self.finish_flush_waiters();
                Ok(())
            }
            Ok(Type::SendError) => {
                let e = cmd.send_error.unwrap_or_default();
                let code = ServerError::from_code(e.error);
                match code {
                    ServerError::TopicTerminatedError => Err(Error::TopicTerminated {
                        topic: self.topic.to_string(),
                    }),
                    ServerError::NotAllowed => {
                        // That message is refused (e.g. too big); the others go on.
                        self.pending.fail_head(Error::Broker {
                            code,
                            message: e.message,
                        });
                        self.finish_flush_waiters();
                        Ok(())
                    }
                    _ => {
                        tracing::warn!(topic = %self.topic, ?code, message = %e.message,
                            "send error; reconnecting");
                        if let Some(c) = &self.conn {
                            c.close();
                        }
                        self.lose_connection("send error");
                        Ok(())
                    }
                }
            }
            Ok(Type::CloseProducer) => {
                let c = cmd.close_producer.unwrap_or_default();
                if c.allow_reconnect == Some(false) {
                    return Err(Error::ClosedByBroker {
                        topic: self.topic.to_string(),
                    });
                }
                self.life.apply(Event::BrokerClose {
                    allow_reconnect: true,
                });
                self.assigned_broker = c.assigned_broker_service_url.filter(|u| !u.is_empty());
                self.lose_connection("broker closed the producer");
                Ok(())
            }
            Ok(Type::TopicMigrated) => {
                // The topic moved to another cluster: reconnect there.
                let m = cmd.topic_migrated.unwrap_or_default();
                self.assigned_broker = m.broker_service_url.filter(|u| !u.is_empty());
                tracing::info!(topic = %self.topic, to = ?self.assigned_broker, "topic migrated");
                if let Some(c) = &self.conn {
                    c.unregister(EntityKind::Producer, self.ctx.producer_id);
                }
                self.lose_connection("topic migrated");
                Ok(())
            }
            _ => {
                tracing::debug!(topic = %self.topic, command = cmd.r#type, "ignored producer command");
                Ok(())
            }
        }
    }

    fn finish_flush_waiters(&mut self) {
        let head = self.pending.iter().next().map(|e| e.first_seq);
        let mut i = 0;
        while i < self.flush_waiters.len() {
            let done = head.is_none_or(|h| h > self.flush_waiters[i].0);
            if done {
                let (_, tx) = self.flush_waiters.swap_remove(i);
                let _ = tx.send(Ok(()));
            } else {
                i += 1;
            }
        }
    }

    fn shutdown(mut self, error: Error) {
        if !matches!(error, Error::Closed) {
            tracing::warn!(topic = %self.topic, %error, "producer closed");
        }
        *self.terminal.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.clone());
        if matches!(error, Error::Closed) && self.life.state() != crate::lifecycle::State::Closing {
            self.life.apply(Event::CloseRequested);
        }
        self.life.apply(terminal_event(&error));
        if matches!(error, Error::ClosedByBroker { .. }) {
            self.group.close_all(&error);
        }
        if let Some(conn) = self.conn.take() {
            conn.unregister(EntityKind::Producer, self.ctx.producer_id);
        }
        let mut failed = Vec::new();
        let mut out = Vec::new();
        if let Some(b) = self.batches.as_mut() {
            b.flush(&self.ctx, &mut out, &mut failed);
        }
        for (_, c) in failed {
            c.complete(Err(error.clone()));
        }
        for entry in out {
            for c in entry.completions {
                c.complete(Err(error.clone()));
            }
        }
        self.pending.fail_all(&error);
        for (_, tx) in self.flush_waiters.drain(..) {
            let _ = tx.send(Err(error.clone()));
        }
        if let Some(tx) = self.close_waiter.take() {
            let _ = tx.send(Err(error.clone()));
        }
        // Later sends fail with the same error.
        self.ops.close();
        while let Ok(op) = self.ops.try_recv() {
            match op {
                ProducerOp::Send { completion, .. } => completion.complete(Err(error.clone())),
                ProducerOp::Flush(tx) | ProducerOp::Close(tx) => {
                    let _ = tx.send(Err(error.clone()));
                }
            }
        }
    }
}

async fn ready_opt(conn: Option<&Connection>) {
    match conn {
        Some(c) => c.ready().await,
        None => futures::future::pending().await,
    }
}
