//! The task behind one (partition) consumer: subscription, flow permits, decoding, grouped
//! acks, negative-ack redelivery, seek, and re-subscribing after a reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::client::Client;
use crate::codec::Frame;
use crate::connection::{Connection, EntityEvent, EntityKind};
use crate::error::{Error, Result};
use crate::lifecycle::{Event, Lifecycle};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::producer::task_support::{terminal_event, GroupClose};
use crate::proto::{self, base_command::Type, BaseCommand};
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;
use crate::util::{recv_opt, sleep_until_opt};

use super::acks::{AckFlush, AckTracker, NackTracker};
use super::decode::decode;
use super::options::ConsumerOptions;
pub(crate) use super::subscribe::{
    connect_and_subscribe, effective_durable, flow_frame, SubscribeParams,
};

/// How far beyond its flow permits a broker may push (in messages: this many receiver queues
/// plus the slack) before the consumer treats it as broken and re-subscribes. Generous, so
/// brokers that overshoot by batches (or, like pulsar-lite, dispatch duplicates) keep flowing;
/// bounded, so none can make the client buffer without limit.
const OVERSHOOT_FACTOR: i64 = 10;
const OVERSHOOT_SLACK: i64 = 10_000;

/// Where a seek goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SeekTarget {
    Id(MessageId),
    PublishTime(u64),
}

/// Requests from the consumer handle to a partition's task.
#[derive(Debug)]
pub(crate) enum ConsumerOp {
    Ack(MessageId),
    AckCumulative(MessageId),
    /// A negative ack, with the message's redelivery count (for the backoff).
    Nack(MessageId, u32),
    /// Ask the broker to redeliver now (e.g. after a failed dead-letter publish).
    Redeliver(MessageId),
    Flow(u32),
    Seek(SeekTarget, oneshot::Sender<Result<()>>),
    LastMessageId(oneshot::Sender<Result<MessageId>>),
    Unsubscribe(oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

/// What the task puts in the consumer's queue, tagged with the partition's epoch so messages
/// from before a reconnect or seek can be discarded.
// Nearly every item is a message: boxing it would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Item {
    Message(Message),
    Error(Error),
}

/// State shared between a partition's task and the consumer handle.
#[derive(Debug)]
pub(crate) struct PartitionShared {
    /// The partition index (-1 for a non-partitioned topic).
    pub partition: i32,
    /// Whether it is a partition of the consumer's topic (not of its retry topic).
    pub main: bool,
    pub epoch: AtomicU64,
    pub consumed: AtomicU32,
    pub last_dequeued: Mutex<Option<MessageId>>,
    pub ops: mpsc::UnboundedSender<ConsumerOp>,
    /// Failover: whether this consumer is the active one (None until the broker says).
    pub active: tokio::sync::watch::Sender<Option<bool>>,
    /// The partition consumer's lifecycle state.
    pub state: tokio::sync::watch::Receiver<crate::lifecycle::State>,
}

pub(crate) struct ConsumerTask {
    pub client: Client,
    pub topic: TopicName,
    pub partition: i32,
    pub index: usize,
    pub opts: Arc<ConsumerOptions>,
    pub consumer_id: u64,
    pub consumer_name: String,
    pub durable: bool,
    pub conn: Option<Connection>,
    pub events: Option<mpsc::Receiver<EntityEvent>>,
    pub ops: mpsc::UnboundedReceiver<ConsumerOp>,
    pub out: mpsc::UnboundedSender<(usize, u64, Item)>,
    pub shared: Arc<PartitionShared>,
    pub acks: AckTracker,
    pub nacks: NackTracker,
    pub ack_deadline: Option<Instant>,
    /// Messages at or before this position are skipped (reader start, non-durable resume).
    pub skip_through: Option<MessageId>,
    /// PIP-307: the broker to reconnect to directly, from CloseConsumer.
    pub assigned_broker: Option<String>,
    /// Flow permits granted to the broker minus messages it delivered.
    pub permits: i64,
    /// Dead-letter publishing (Shared / Key_Shared with a policy).
    pub dlq: Option<Arc<super::dlq::DeadLetterSink>>,
    /// Messages delivered at the maximum redelivery count: dead-lettered on nack/timeout.
    pub dlq_candidates: HashMap<MessageId, Message>,
    /// Delivery times of unacked messages, for the ack timeout.
    pub unacked: HashMap<MessageId, Instant>,
    /// Messages dropped because the broker exceeded its permits by far.
    pub over_delivered: u64,
    pub life: Lifecycle,
    pub group: GroupClose,
}

type Reconnect = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(Connection, mpsc::Receiver<EntityEvent>)>> + Send>,
>;

enum Wake {
    Op(Option<ConsumerOp>),
    Event(Option<EntityEvent>),
    AckDue,
    NackDue,
    AckTimeoutTick,
    GroupClosed(Error),
    Reconnected(Result<(Connection, mpsc::Receiver<EntityEvent>)>),
}

impl ConsumerTask {
    fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    fn emit(&self, mut item: Item) {
        if let Item::Message(m) = &mut item {
            m.source = self.index;
        }
        let _ = self.out.send((self.index, self.epoch(), item));
    }

    pub(crate) async fn run(mut self) {
        let mut reconnect: Option<Reconnect> = None;
        let mut group = self.group.clone();
        let mut silent = false;
        let ack_timeout_on = !self.opts.ack_timeout.is_zero();
        let mut ack_timeout_tick = tokio::time::interval(self.opts.ack_timeout_tick);
        ack_timeout_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let final_error = loop {
            if self.conn.is_none() && reconnect.is_none() {
                reconnect = Some(Box::pin(self.reconnect_future()));
            }
            let ack_deadline = self.ack_deadline;
            let nack_deadline = self.nacks.next_deadline();
            let wake = tokio::select! {
                biased;
                ev = recv_opt(&mut self.events) => Wake::Event(ev),
                r = async { reconnect.as_mut().expect("guarded").await }, if reconnect.is_some() => {
                    reconnect = None;
                    Wake::Reconnected(r)
                }
                op = self.ops.recv() => Wake::Op(op),
                _ = sleep_until_opt(ack_deadline) => Wake::AckDue,
                _ = sleep_until_opt(nack_deadline) => Wake::NackDue,
                e = group.closed() => Wake::GroupClosed(e),
                _ = ack_timeout_tick.tick(), if ack_timeout_on => Wake::AckTimeoutTick,
            };
            let step = match wake {
                Wake::Op(Some(op)) => self.on_op(op).await,
                // The consumer handle is gone: close.
                Wake::Op(None) => {
                    self.life.apply(Event::CloseRequested);
                    Err(self.close().await.err().unwrap_or(Error::Closed))
                }
                Wake::Event(Some(ev)) => self.on_event(ev).await,
                Wake::Event(None) => {
                    self.lose_connection("connection dropped the consumer's channel");
                    Ok(())
                }
                Wake::AckDue => {
                    self.flush_acks().await;
                    Ok(())
                }
                Wake::AckTimeoutTick => {
                    self.on_ack_timeout_tick().await;
                    Ok(())
                }
                Wake::NackDue => {
                    let due = self.nacks.take_due(Instant::now());
                    self.redeliver(due).await;
                    Ok(())
                }
                Wake::GroupClosed(e) => {
                    // Another partition already reported it to the application.
                    silent = true;
                    Err(e)
                }
                Wake::Reconnected(Ok((conn, events))) => {
                    self.life.apply(Event::Created);
                    self.permits = i64::from(self.opts.receiver_queue_size);
                    tracing::info!(topic = %self.topic, "consumer re-subscribed");
                    self.conn = Some(conn);
                    self.events = Some(events);
                    Ok(())
                }
                Wake::Reconnected(Err(e)) if e.is_retriable() => {
                    self.life.apply(Event::RetriableError);
                    Ok(())
                }
                Wake::Reconnected(Err(e)) => Err(e),
            };
            if let Err(e) = step {
                break e;
            }
        };
        self.shutdown(final_error, silent);
    }

    fn reconnect_future(&mut self) -> Reconnect {
        // Messages still queued from the old connection will be redelivered: discard them.
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        self.shared.consumed.store(0, Ordering::Release);
        let last = *self
            .shared
            .last_dequeued
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let start = if self.durable {
            None
        } else {
            // A non-durable subscription resumes after the last message the app received.
            if let Some(last) = last {
                self.skip_through = Some(last);
            }
            // (A batch message id keeps its index: the broker then starts at that entry and
            // the filter drops what was already received.)
            last.or(self.opts.start_message_id)
        };
        let client = self.client.clone();
        let topic = self.topic.clone();
        let consumer_id = self.consumer_id;
        let name = self.consumer_name.clone();
        let opts = self.opts.clone();
        let durable = self.durable;
        let direct = self
            .assigned_broker
            .take()
            .and_then(|u| ServiceUrl::from_broker_url(&u).ok());
        Box::pin(async move {
            crate::reconnect::reconnect(&client, &topic.clone(), "consumer", direct, |target| {
                let (client, topic, name, opts) =
                    (client.clone(), topic.clone(), name.clone(), opts.clone());
                async move {
                    let params = SubscribeParams {
                        topic: &topic,
                        consumer_id,
                        consumer_name: &name,
                        opts: &opts,
                        durable,
                        start,
                    };
                    // One attempt per round (a deadline of now): the loop is the only backoff.
                    connect_and_subscribe(&client, &params, Instant::now(), target.as_ref()).await
                }
            })
            .await
        })
    }

    fn lose_connection(&mut self, why: &str) {
        self.life.apply(Event::ConnectionLost);
        if let Some(conn) = self.conn.take() {
            tracing::info!(topic = %self.topic, why, "consumer disconnected; reconnecting");
            conn.unregister(EntityKind::Consumer, self.consumer_id);
        }
        self.events = None;
    }

    async fn send(&mut self, frame: Frame) {
        if let Some(conn) = &self.conn {
            if conn.send(frame).await.is_err() {
                self.lose_connection("connection closed while sending");
            }
        }
    }

    async fn request(&mut self, mut cmd: BaseCommand, op: &'static str) -> Result<BaseCommand> {
        let conn = self
            .conn
            .clone()
            .ok_or_else(|| Error::ConnectionLost("consumer is reconnecting".into()))?;
        let request_id = conn.new_request_id();
        set_request_id(&mut cmd, request_id);
        conn.request(request_id, cmd, op).await
    }

    async fn on_op(&mut self, op: ConsumerOp) -> Result<()> {
        match op {
            ConsumerOp::Ack(id) => {
                self.forget(&id);
                if self.acks.ack(id) || self.opts.ack_group_time.is_zero() {
                    self.flush_acks().await;
                } else if self.ack_deadline.is_none() {
                    self.ack_deadline = Some(Instant::now() + self.opts.ack_group_time);
                }
            }
            ConsumerOp::AckCumulative(id) => {
                self.dlq_candidates.retain(|k, _| *k > id);
                self.unacked.retain(|k, _| *k > id);
                self.acks.ack_cumulative(id);
                if self.opts.ack_group_time.is_zero() {
                    self.flush_acks().await;
                } else if self.ack_deadline.is_none() {
                    self.ack_deadline = Some(Instant::now() + self.opts.ack_group_time);
                }
            }
            ConsumerOp::Nack(id, redelivery_count) => {
                self.unacked.remove(&id);
                if let Some(msg) = self.dlq_candidates.remove(&id) {
                    self.dead_letter(msg);
                } else {
                    let delay = match &self.opts.negative_ack_backoff {
                        Some(b) => b.delay(redelivery_count),
                        None => self.opts.negative_ack_delay,
                    };
                    self.nacks.add(id, Instant::now(), delay);
                }
            }
            ConsumerOp::Redeliver(id) => {
                self.redeliver(vec![id]).await;
            }
            ConsumerOp::Flow(n) => {
                self.permits += i64::from(n);
                let frame = flow_frame(self.consumer_id, n);
                self.send(frame).await;
            }
            ConsumerOp::Seek(target, tx) => {
                let r = self.seek(target).await;
                let _ = tx.send(r);
            }
            ConsumerOp::LastMessageId(tx) => {
                let cmd = BaseCommand {
                    r#type: Type::GetLastMessageId as i32,
                    get_last_message_id: Some(proto::CommandGetLastMessageId {
                        consumer_id: self.consumer_id,
                        request_id: 0,
                    }),
                    ..Default::default()
                };
                let r = self
                    .request(cmd, "get last message id")
                    .await
                    .and_then(|resp| {
                        let r = resp.get_last_message_id_response.ok_or_else(|| {
                            Error::Protocol("GetLastMessageId answered without its response".into())
                        })?;
                        let mut id = MessageId::from_proto(&r.last_message_id);
                        id.partition = self.partition;
                        Ok(id)
                    });
                let _ = tx.send(r);
            }
            ConsumerOp::Unsubscribe(tx) => {
                let cmd = BaseCommand {
                    r#type: Type::Unsubscribe as i32,
                    unsubscribe: Some(proto::CommandUnsubscribe {
                        consumer_id: self.consumer_id,
                        request_id: 0,
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                let r = self.request(cmd, "unsubscribe").await;
                let ok = r.is_ok();
                let _ = tx.send(r.map(|_| ()));
                if ok {
                    return Err(Error::Closed);
                }
            }
            ConsumerOp::Close(tx) => {
                self.life.apply(Event::CloseRequested);
                let r = self.close().await;
                let _ = tx.send(r);
                return Err(Error::Closed);
            }
        }
        Ok(())
    }

    async fn seek(&mut self, target: SeekTarget) -> Result<()> {
        let (message_id, publish_time) = match target {
            SeekTarget::Id(id) => (Some(id.to_proto()), None),
            SeekTarget::PublishTime(t) => (None, Some(t)),
        };
        let cmd = BaseCommand {
            r#type: Type::Seek as i32,
            seek: Some(proto::CommandSeek {
                consumer_id: self.consumer_id,
                request_id: 0,
                message_id,
                message_publish_time: publish_time,
            }),
            ..Default::default()
        };
        self.request(cmd, "seek").await?;
        // Discard what is queued, forget delivery filters, and ask for messages again (a broker
        // that does not disconnect the consumer after a seek waits for new permits).
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        self.shared.consumed.store(0, Ordering::Release);
        *self
            .shared
            .last_dequeued
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.skip_through = None;
        self.permits = i64::from(self.opts.receiver_queue_size);
        let frame = flow_frame(self.consumer_id, self.opts.receiver_queue_size);
        self.send(frame).await;
        Ok(())
    }

    /// Sends CloseConsumer for this consumer on `conn` and waits for the answer.
    async fn close_on(&self, conn: &Connection) -> Result<BaseCommand> {
        let request_id = conn.new_request_id();
        let cmd = BaseCommand {
            r#type: Type::CloseConsumer as i32,
            close_consumer: Some(proto::CommandCloseConsumer {
                consumer_id: self.consumer_id,
                request_id,
                ..Default::default()
            }),
            ..Default::default()
        };
        conn.request(request_id, cmd, "close consumer").await
    }

    async fn close(&mut self) -> Result<()> {
        self.flush_acks().await;
        if let Some(conn) = self.conn.take() {
            let r = self.close_on(&conn).await;
            conn.unregister(EntityKind::Consumer, self.consumer_id);
            if let Err(e) = r {
                tracing::debug!(topic = %self.topic, error = %e, "close consumer");
            }
        }
        Ok(())
    }

    async fn flush_acks(&mut self) {
        self.ack_deadline = None;
        if self.conn.is_none() {
            // Keep them for the next connection (the broker redelivers unacked messages; the
            // acks still apply after re-subscribing).
            if self.acks.has_pending() {
                self.ack_deadline = Some(
                    Instant::now()
                        + self
                            .opts
                            .ack_group_time
                            .max(std::time::Duration::from_millis(100)),
                );
            }
            return;
        }
        let AckFlush {
            individual,
            cumulative,
            partial,
        } = self.acks.take_flush();
        use crate::proto::command_ack::AckType;
        if !individual.is_empty() || !partial.is_empty() {
            let mut frame = ack_frame(self.consumer_id, AckType::Individual, &individual);
            if let Some(ack) = frame.command.ack.as_mut() {
                ack.message_id.extend(partial.into_iter().map(|(id, set)| {
                    let mut p = id.to_proto();
                    p.ack_set = set;
                    p.batch_size = (id.batch_size > 0).then_some(id.batch_size);
                    p
                }));
            }
            self.send(frame).await;
        }
        if let Some(c) = cumulative {
            let frame = ack_frame(self.consumer_id, AckType::Cumulative, &[c]);
            self.send(frame).await;
        }
    }

    /// Forgets a message the application acked.
    fn forget(&mut self, id: &MessageId) {
        self.dlq_candidates.remove(id);
        self.unacked.remove(id);
    }

    /// Publishes a message to the dead-letter topic in the background; it is acked once
    /// published, or redelivered if publishing fails.
    fn dead_letter(&self, msg: Message) {
        match &self.dlq {
            Some(sink) => super::dlq::spawn_dead_letter(sink.clone(), msg, self.shared.ops.clone()),
            None => tracing::error!(topic = %self.topic, "dead letter without a policy"),
        }
    }

    /// Redelivers (or dead-letters) messages unacked for longer than the ack timeout.
    async fn on_ack_timeout_tick(&mut self) {
        if self.unacked.is_empty() {
            return;
        }
        let now = Instant::now();
        let timeout = self.opts.ack_timeout;
        let expired: Vec<MessageId> = self
            .unacked
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) >= timeout)
            .map(|(id, _)| *id)
            .collect();
        let mut redeliver = Vec::new();
        for id in expired {
            self.unacked.remove(&id);
            match self.dlq_candidates.remove(&id) {
                Some(msg) => self.dead_letter(msg),
                None => redeliver.push(id.entry()),
            }
        }
        if !redeliver.is_empty() {
            tracing::debug!(topic = %self.topic, n = redeliver.len(), "ack timeout: redelivering");
            redeliver.sort();
            redeliver.dedup();
            self.redeliver(redeliver).await;
        }
    }

    /// Closes the consumer on the broker (so an Exclusive subscription takes it back) and
    /// subscribes again through the reconnect path.
    async fn resubscribe(&mut self, why: &str) {
        if let Some(conn) = self.conn.clone() {
            let _ = self.close_on(&conn).await;
        }
        self.lose_connection(why);
    }

    /// Counts `n` messages as consumed for flow control (like the handle does for delivered
    /// ones) and sends a FLOW when half the receiver queue is due.
    async fn release_permits(&mut self, n: u32) {
        let refill_at = (self.opts.receiver_queue_size / 2).max(1);
        let consumed = self.shared.consumed.fetch_add(n, Ordering::AcqRel) + n;
        if consumed >= refill_at {
            let permits = self.shared.consumed.swap(0, Ordering::AcqRel);
            if permits > 0 {
                self.permits += i64::from(permits);
                let frame = flow_frame(self.consumer_id, permits);
                self.send(frame).await;
            }
        }
    }

    async fn redeliver(&mut self, ids: Vec<MessageId>) {
        if ids.is_empty() {
            return;
        }
        let frame = Frame::simple(BaseCommand {
            r#type: Type::RedeliverUnacknowledgedMessages as i32,
            redeliver_unacknowledged_messages: Some(
                proto::CommandRedeliverUnacknowledgedMessages {
                    consumer_id: self.consumer_id,
                    message_ids: ids.iter().map(|i| i.to_proto()).collect(),
                    ..Default::default()
                },
            ),
            ..Default::default()
        });
        self.send(frame).await;
    }

    async fn on_event(&mut self, ev: EntityEvent) -> Result<()> {
        let frame = match ev {
            EntityEvent::ConnectionClosed(e) => {
                self.lose_connection(&e.to_string());
                return Ok(());
            }
            EntityEvent::Command(frame) => *frame,
        };
        let Frame { command, payload } = frame;
        match Type::try_from(command.r#type) {
            Ok(Type::Message) => {
                let (Some(cmd), Some(payload)) = (command.message, payload) else {
                    tracing::warn!(topic = %self.topic, "MESSAGE without its payload; ignored");
                    return Ok(());
                };
                let max = self
                    .conn
                    .as_ref()
                    .map(|c| c.info().max_message_size)
                    .unwrap_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE)
                    .saturating_mul(2);
                // Permits the broker spent: the batch's messages, or only those its ack set
                // still delivers.
                let entry_messages = if cmd.ack_set.is_empty() {
                    i64::from(payload.metadata.num_messages_in_batch.unwrap_or(1).max(1))
                } else {
                    cmd.ack_set
                        .iter()
                        .map(|w| i64::from(w.count_ones()))
                        .sum::<i64>()
                        .max(1)
                };
                self.permits -= entry_messages;
                // A broker may overshoot by a batch; one far beyond the permits it was given
                // is broken (e.g. dispatching duplicates). Rather than buffer without bound,
                // drop what it sends and subscribe again: the broker then redelivers every
                // unacked message, within permits.
                let bound =
                    OVERSHOOT_FACTOR * i64::from(self.opts.receiver_queue_size) + OVERSHOOT_SLACK;
                if self.permits < -bound {
                    self.over_delivered += 1;
                    if self.conn.is_some() {
                        tracing::warn!(topic = %self.topic, permits = self.permits,
                            "broker delivered far more messages than permitted; re-subscribing");
                        self.resubscribe("broker exceeded its flow permits").await;
                    }
                    return Ok(());
                }
                match decode(&self.topic, self.partition, &cmd, payload, max) {
                    Ok(messages) => {
                        let mut dropped = 0;
                        for m in messages {
                            self.acks.delivered(&m.id);
                            if self.acks.already_acked(&m.id)
                                || self.acks.ack_pending(&m.id)
                                || self.skip_through.is_some_and(|s| m.id <= s)
                            {
                                dropped += 1;
                                continue;
                            }
                            if let Some(max) =
                                self.dlq.as_ref().map(|d| d.policy.max_redeliver_count)
                            {
                                if m.redelivery_count > max {
                                    // Over the limit: straight to the dead-letter topic.
                                    dropped += 1;
                                    self.dead_letter(m);
                                    continue;
                                }
                                if m.redelivery_count >= max {
                                    // Delivered once more; dead-lettered if it fails again.
                                    self.dlq_candidates.insert(m.id, m.clone());
                                }
                            }
                            if !self.opts.ack_timeout.is_zero() {
                                self.unacked.insert(m.id, Instant::now());
                            }
                            self.emit(Item::Message(m));
                        }
                        // Dropped messages used broker permits the application will never
                        // return by consuming them: give them back here.
                        if dropped > 0 {
                            self.release_permits(dropped).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(topic = %self.topic, error = %e, "undecodable message");
                        self.emit(Item::Error(e));
                    }
                }
            }
            Ok(Type::CloseConsumer) => {
                let c = command.close_consumer.unwrap_or_default();
                if c.allow_reconnect == Some(false) {
                    return Err(Error::ClosedByBroker {
                        topic: self.topic.to_string(),
                    });
                }
                self.life.apply(Event::BrokerClose {
                    allow_reconnect: true,
                });
                self.assigned_broker = c.assigned_broker_service_url.filter(|u| !u.is_empty());
                self.lose_connection("broker closed the consumer");
            }
            Ok(Type::TopicMigrated) => {
                // The topic moved to another cluster: re-subscribe there.
                let m = command.topic_migrated.unwrap_or_default();
                self.assigned_broker = m.broker_service_url.filter(|u| !u.is_empty());
                tracing::info!(topic = %self.topic, to = ?self.assigned_broker, "topic migrated");
                self.lose_connection("topic migrated");
            }
            Ok(Type::ReachedEndOfTopic) => {
                return Err(Error::TopicTerminated {
                    topic: self.topic.to_string(),
                });
            }
            Ok(Type::ActiveConsumerChange) => {
                let active = command
                    .active_consumer_change
                    .and_then(|c| c.is_active)
                    .unwrap_or(false);
                tracing::info!(topic = %self.topic, active, "active consumer change");
                self.shared.active.send_replace(Some(active));
            }
            _ => {
                tracing::debug!(topic = %self.topic, command = command.r#type, "ignored consumer command");
            }
        }
        Ok(())
    }

    fn shutdown(mut self, error: Error, silent: bool) {
        if let Some(conn) = self.conn.take() {
            conn.unregister(EntityKind::Consumer, self.consumer_id);
        }
        if matches!(error, Error::Closed) && self.life.state() != crate::lifecycle::State::Closing {
            self.life.apply(Event::CloseRequested);
        }
        self.life.apply(terminal_event(&error));
        if matches!(error, Error::ClosedByBroker { .. }) {
            self.group.close_all(&error);
        }
        if !matches!(error, Error::Closed) && !silent {
            tracing::warn!(topic = %self.topic, %error, "consumer closed");
            self.emit(Item::Error(error));
        }
    }
}

fn ack_frame(consumer_id: u64, ack_type: proto::command_ack::AckType, ids: &[MessageId]) -> Frame {
    Frame::simple(BaseCommand {
        r#type: Type::Ack as i32,
        ack: Some(proto::CommandAck {
            consumer_id,
            ack_type: ack_type as i32,
            message_id: ids.iter().map(|i| i.entry().to_proto()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn set_request_id(cmd: &mut BaseCommand, id: u64) {
    if let Some(c) = cmd.get_last_message_id.as_mut() {
        c.request_id = id;
    }
    if let Some(c) = cmd.unsubscribe.as_mut() {
        c.request_id = id;
    }
    if let Some(c) = cmd.seek.as_mut() {
        c.request_id = id;
    }
}
