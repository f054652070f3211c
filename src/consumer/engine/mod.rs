//! The task behind one (partition) consumer: flow permits, decoding, grouped acks,
//! negative-ack and ack-timeout redelivery, seek, and what to clear when re-subscribing. The
//! shared [`Entity`] driver owns its registration, reconnects and ending.

pub(crate) mod acking;
pub(crate) mod acks;
pub(crate) mod budget;
pub(crate) mod chunk_intake;
pub(crate) mod chunks;
pub(crate) mod decode;
pub(crate) mod dlq;
pub(crate) mod flow;
pub(crate) mod intake;
pub(crate) mod seek;
pub(crate) mod start;
pub(crate) mod subscribe;
pub(crate) mod unacked;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::commands;
use crate::entity::{Entity, Requests, Wake};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::MessageId;
use crate::proto::BaseCommand;
use crate::util::{deadline_after, sleep_until_opt};

use crate::consumer::engine::acks::{AckFlush, AckTracker, NackTracker};

use crate::consumer::engine::subscribe::{subscribe_command, SubscribeParams};
use crate::consumer::engine::unacked::Unacked;
use crate::consumer::handle::PartitionShared;
use crate::consumer::op::{ConsumerOp, IdRequest};
use crate::consumer::options::{ConsumerOptions, SubscriptionType};
use crate::consumer::queue::Item;

/// The most message ids one REDELIVER_UNACKNOWLEDGED_MESSAGES carries (Java
/// `ConsumerImpl.MAX_REDELIVER_UNACKNOWLEDGED`).
const MAX_REDELIVER_IDS: usize = 1000;

/// What an in-flight request's answer is for.
pub(crate) enum Pending {
    /// A seek or get-last-message-id, and when it gives up waiting for a re-subscribe.
    Id(IdRequest, Instant),
    Unsubscribe(oneshot::Sender<Result<()>>),
    /// The CloseConsumer of the application's close.
    Close,
}

pub(crate) struct ConsumerTask {
    pub entity: Entity,
    pub partition: i32,
    pub index: usize,
    pub opts: Arc<ConsumerOptions>,
    pub consumer_name: String,
    pub durable: bool,
    pub ops: crate::consumer::op::OpReceiver,
    pub out: mpsc::UnboundedSender<(usize, u64, Item)>,
    pub shared: Arc<PartitionShared>,
    pub acks: AckTracker,
    pub nacks: NackTracker,
    pub ack_deadline: Option<Instant>,
    /// Messages at or before this position are skipped (reader start, non-durable resume).
    pub skip_through: Option<MessageId>,
    /// Flow permits granted to the broker minus messages it delivered.
    pub permits: i64,
    /// The permits withheld for the consumer's byte budget (see `flow`).
    pub bytes: crate::consumer::engine::flow::ByteFlow,
    /// The consumer epoch (Exclusive / Failover redeliver-all).
    pub consumer_epoch: u64,
    /// Dead-letter publishing (Shared / Key_Shared with a policy).
    pub dlq: Option<Arc<crate::consumer::engine::dlq::DeadLetterSink>>,
    /// Messages delivered at the maximum redelivery count: dead-lettered on nack/timeout.
    pub dlq_candidates: HashMap<MessageId, Message>,
    /// Unacked messages, for the ack timeout.
    pub unacked: Unacked,
    /// How many messages this task has put in the queue (numbers them for `unacked`).
    pub queued_messages: u64,
    /// Flow-control violations seen (each closed its connection).
    pub over_delivered: u64,
    /// Where a non-durable subscription created again starts when the application has
    /// received nothing since the start or the last seek (the SUBSCRIBE position).
    pub start: Option<MessageId>,
    /// After a time seek: the next message queued sets `start`.
    pub start_from_next: bool,
    /// Seeks and get-last-message-ids waiting for the consumer to be subscribed again, with
    /// their deadlines.
    pub deferred: Vec<(Instant, IdRequest)>,
    /// Chunked messages being reassembled.
    pub chunks: crate::consumer::engine::chunks::ChunkAssembler,
    /// The chunk entries of each delivered chunked message not acked yet (keyed by its id):
    /// ack, nack, ack timeout and DLQ act on all of them (upstream
    /// `unAckedChunkedMessageIdSequenceMap`).
    pub chunk_ids: HashMap<MessageId, Vec<MessageId>>,
}

/// `map.remove(key)`, without hashing the key when the map is empty: on the ack path the maps
/// of optional features (DLQ candidates, chunked messages) are nearly always empty, and
/// hashing a `MessageId` (SipHash) cost more than the rest of an ack (issue #18's profile).
pub(crate) fn remove_if_any<V>(map: &mut HashMap<MessageId, V>, key: &MessageId) -> Option<V> {
    if map.is_empty() {
        None
    } else {
        map.remove(key)
    }
}

/// Most commands handled in one wake-up of the task (then it looks at its other sources).
const BURST: usize = 256;

/// How often the task hands the metrics facade what the application received while nothing
/// else woke it (feature `metrics` only): well under any scrape interval.
const METRICS_PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl ConsumerTask {
    pub(crate) fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Puts an item in the queue. The messages of an [`Item::Messages`] come with their
    /// `source` set and numbered in `queued_messages` (see `deliver`).
    pub(crate) fn emit(&mut self, item: Item) {
        let counted = item.counted();
        if counted > 0 {
            self.shared.room().queued += counted;
        }
        if self.out.send((self.index, self.epoch(), item)).is_err() && counted > 0 {
            // The handle is gone: nothing will take it out.
            let mut room = self.shared.room();
            room.queued = room.queued.saturating_sub(counted);
        }
    }

    /// Upstream keeps no ack state for non-persistent topics (a no-op ack tracker): their
    /// messages all carry the same id, and acks mean nothing to the broker.
    pub(crate) fn persistent(&self) -> bool {
        self.entity.topic.is_persistent()
    }

    /// Exclusive and Failover subscriptions have one active consumer: the broker cannot
    /// redeliver single messages to it, only rewind (upstream ConsumerImpl redelivers all on
    /// those subscription types).
    pub(crate) fn single_active(&self) -> bool {
        matches!(
            self.opts.subscription_type,
            SubscriptionType::Exclusive | SubscriptionType::Failover
        )
    }

    pub(crate) fn refill_at(&self) -> u32 {
        (self.opts.receiver_queue_size / 2).max(1)
    }

    /// Sends the first FLOW of a (new) subscription: the receiver queue's free room (see
    /// [`QueueRoom`]), as far as the consumer's byte budget has room for it (the rest follows
    /// as it does: see [`ByteFlow`](crate::consumer::engine::flow::ByteFlow)).
    pub(crate) fn start_flow(&mut self) {
        let size = self.opts.receiver_queue_size;
        let occupied = {
            let mut room = self.shared.room();
            let occupied = room.queued.min(u64::from(size)) as u32;
            room.withheld = u64::from(occupied);
            occupied
        };
        self.permits = 0;
        self.bytes.owed = 0;
        self.grant(size - occupied);
    }

    pub(crate) async fn run(mut self) {
        let mut requests: Requests<Pending> = Requests::new();
        let mut close_waiters: Vec<oneshot::Sender<Result<()>>> = Vec::new();
        let mut silent = false;
        let mut close_outcome: Option<Error> = None;
        let ack_timeout_on = !self.opts.ack_timeout.is_zero() && self.persistent();
        let mut ack_timeout_tick = tokio::time::interval(self.opts.ack_timeout_tick);
        ack_timeout_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // With the `metrics` feature, a wake-up every second hands the facade what the
        // application took since the last one: the handle counts `recv`s without waking the
        // task, so an idle consumer's received count and queue gauge would otherwise stay
        // stale until the next frame (upstream's Java consumer updates its OpenTelemetry
        // counters as each message is taken, so a scrape always sees them).
        let metrics_on = crate::stats::sink::ENABLED;
        let mut metrics_tick = tokio::time::interval(METRICS_PUBLISH_INTERVAL);
        metrics_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let out = self.out.clone();
        // Created once: a fresh `closed()` per wake-up would register a waiter per message.
        let out_closed = out.closed();
        tokio::pin!(out_closed);
        let final_error = loop {
            let ack_deadline = self.ack_deadline;
            let nack_deadline = self.nacks.next_deadline();
            let deferred_deadline = self.deferred_deadline();
            let chunk_deadline = self.chunks.next_expiry();
            let closing = !close_waiters.is_empty();
            let step: Result<()> = tokio::select! {
                biased;
                wake = self.entity.next() => match wake {
                    wake @ (Wake::Command(_) | Wake::Message(_)) => {
                        let mut r = self.on_inbound(wake);
                        // Handle what has already arrived before waiting again: one select!
                        // round per burst, not per message.
                        for _ in 0..BURST {
                            let Some(wake) = r.is_ok().then(|| self.entity.try_next()).flatten() else {
                                break;
                            };
                            r = self.on_inbound(wake);
                        }
                        r
                    }
                    Wake::Receipt(_) => Ok(()), // not for a consumer
                    Wake::Refused(_) => Ok(()), // a producer's (the driver retries)
                    Wake::Detached if closing => Err(Error::Closed),
                    Wake::Detached => {
                        self.detached();
                        // The connection noticed first that the broker delivered beyond
                        // this consumer's bound (see `flow_violation` for the other way):
                        // the application hears of it the same way, after the epoch changed.
                        if let Some(e) = self.entity.take_violation() {
                            self.over_delivered += 1;
                            self.emit(Item::Error(e));
                        }
                        Ok(())
                    }
                    Wake::Attached(_) => {
                        tracing::info!(topic = %self.entity.topic, "consumer re-subscribed");
                        self.start_flow();
                        self.replay_deferred(&mut requests);
                        Ok(())
                    }
                    // A pattern consumer's topic deleted on the broker (it subscribes without
                    // creating topics): the topic leaves the consumer, which is no error for
                    // the application (upstream's pattern consumer drops it the same way).
                    Wake::Ended(
                        e @ Error::Broker {
                            code: crate::error::ServerError::TopicNotFound,
                            ..
                        },
                    ) if !self.opts.force_topic_creation => {
                        tracing::info!(topic = %self.entity.topic, "topic deleted; its consumer ends");
                        self.shared.topic_deleted.store(true, Ordering::Release);
                        self.shared.ended.notify_one();
                        silent = true;
                        Err(e)
                    }
                    Wake::Ended(e) => Err(e),
                    Wake::GroupEnded(e) => {
                        // Another partition already reported it to the application.
                        silent = true;
                        Err(e)
                    }
                    Wake::Shutdown => {
                        let (tx, _) = oneshot::channel();
                        self.start_close(tx, &mut close_waiters, &mut requests)
                    }
                },
                (pending, r) = requests.next() => match (pending, r) {
                    // Like upstream's closeAsync: a CloseConsumer that failed while the
                    // connection stayed up (a timeout, a broker error) fails close(); the
                    // consumer still ends Closed. A lost connection does not: the broker forgot
                    // the consumer with it.
                    (Pending::Close, Err(e)) if !crate::entity::connection_gone(&e) => {
                        tracing::debug!(topic = %self.entity.topic, error = %e, "close consumer");
                        close_outcome = Some(e);
                        Err(Error::Closed)
                    }
                    (Pending::Id(req, deadline), r) => {
                        self.on_id_answer(req, deadline, r);
                        Ok(())
                    }
                    (pending, r) => self.on_answer(pending, r),
                },
                op = self.ops.recv() => match op {
                    Some(ConsumerOp::Close(tx)) => self.start_close(tx, &mut close_waiters, &mut requests),
                    Some(op) => {
                        let mut r = self.on_op(op, &mut requests);
                        // Acks come one op each: drain what is queued in this wake-up.
                        for _ in 0..BURST {
                            if r.is_err() {
                                break;
                            }
                            r = match self.ops.try_recv() {
                                Some(ConsumerOp::Close(tx)) => {
                                    self.start_close(tx, &mut close_waiters, &mut requests)
                                }
                                Some(op) => self.on_op(op, &mut requests),
                                None => break,
                            };
                        }
                        r
                    }
                    // Unreachable while `shared` holds a sender; kept for completeness.
                    None => Err(Error::Closed),
                },
                // The consumer handle is gone (dropped): close.
                _ = &mut out_closed, if !closing => {
                    let (tx, _) = oneshot::channel();
                    self.start_close(tx, &mut close_waiters, &mut requests)
                }
                _ = sleep_until_opt(ack_deadline) => {
                    self.flush_acks();
                    Ok(())
                }
                _ = sleep_until_opt(nack_deadline) => {
                    let due = self.nacks.take_due(Instant::now());
                    self.redeliver(due);
                    Ok(())
                }
                _ = sleep_until_opt(chunk_deadline) => {
                    let out = self.chunks.expire(Instant::now());
                    self.apply_chunk_outcome(out);
                    Ok(())
                }
                // Permits withheld for the byte budget: bytes were released.
                _ = self.bytes.freed.changed(), if self.bytes.owed > 0 => {
                    self.grant_owed();
                    Ok(())
                }
                _ = sleep_until_opt(deferred_deadline) => {
                    self.expire_deferred();
                    Ok(())
                }
                _ = ack_timeout_tick.tick(), if ack_timeout_on => {
                    self.on_ack_timeout_tick();
                    Ok(())
                }
                _ = metrics_tick.tick(), if metrics_on => Ok(()), // published below
            };
            if let Err(e) = step {
                break e;
            }
            self.shared.stats.publish(|| self.shared.room().queued);
        };
        let state = self.entity.end(&final_error);
        self.shared.stats.closed();
        let result = match (&final_error, close_outcome) {
            (Error::Closed, None) => Ok(()),
            (Error::Closed, Some(unconfirmed)) => Err(unconfirmed),
            (e, _) => Err(e.clone()),
        };
        for tx in close_waiters {
            let _ = tx.send(result.clone());
        }
        if !matches!(final_error, Error::Closed) && !silent {
            tracing::warn!(topic = %self.entity.topic, error = %final_error, %state, "consumer closed");
            self.emit(Item::Error(final_error));
        }
    }

    /// Starts the application's close: acks flushed, then CloseConsumer. Ends the task at
    /// once without a connection (the broker forgot the consumer with it).
    fn start_close(
        &mut self,
        tx: oneshot::Sender<Result<()>>,
        waiters: &mut Vec<oneshot::Sender<Result<()>>>,
        requests: &mut Requests<Pending>,
    ) -> Result<()> {
        let first = waiters.is_empty();
        waiters.push(tx);
        if !first {
            return Ok(());
        }
        self.entity
            .life
            .apply(crate::lifecycle::Event::CloseRequested);
        self.flush_acks();
        self.entity.stop_reconnecting();
        match self.entity.close_request() {
            Some(req) => {
                requests.push(Pending::Close, req);
                Ok(())
            }
            None => Err(Error::Closed),
        }
    }

    /// The connection is gone: what was queued will be redelivered, so the handle discards
    /// it; then subscribe again (a non-durable subscription resumes after what the
    /// application received).
    pub(crate) fn detached(&mut self) {
        let (epoch, last) = self.shared.new_epoch(false);
        self.shared.permit_epoch.store(epoch, Ordering::Release);
        {
            let mut room = self.shared.room();
            room.consumed = 0;
            room.withheld = 0;
        }
        // The broker redelivers every unacked chunk to the new subscription.
        let held_from = self.chunks.earliest_first_chunk();
        self.chunks.clear();
        let start = if self.durable {
            None
        } else {
            if let Some(last) = last {
                self.skip_through = Some(last);
            }
            // (A batch message id keeps its index: the broker then starts at that entry and
            // the filter drops what was already received.)
            match (last, held_from) {
                // An incomplete chunked message whose first chunk came before the last message
                // received (chunks of messages from several producers interleave): resuming
                // after that message would never deliver the first chunk again, and the
                // message would be lost. Resume at that first chunk instead; the filter drops
                // what the application already received (it ends at or before `last`).
                // Beyond upstream, whose reader resumes after the last message dequeued.
                (Some(last), Some(first)) if first < last => Some(
                    crate::consumer::engine::subscribe::start_position(first, true),
                ),
                _ => last.or(self.start),
            }
        };
        let cmd = subscribe_command(&SubscribeParams {
            topic: &self.entity.topic,
            consumer_id: self.entity.id,
            consumer_name: &self.consumer_name,
            opts: &self.opts,
            durable: self.durable,
            start,
            // Only while nothing was received and no seek moved the start (upstream
            // `ConsumerImpl.connectionOpened`: while `startMessageId` is still the initial
            // one); afterwards the reader resumes after what it received.
            rollback_secs: if last.is_none()
                && held_from.is_none()
                && self.start
                    == self.opts.start_message_id.map(|s| {
                        crate::consumer::engine::subscribe::start_position(
                            s,
                            self.opts.start_inclusive,
                        )
                    }) {
                self.opts.start_message_rollback_secs
            } else {
                0
            },
            consumer_epoch: self.consumer_epoch,
        });
        self.entity.reconnect(cmd);
    }

    fn on_answer(&mut self, pending: Pending, r: Result<BaseCommand>) -> Result<()> {
        match pending {
            Pending::Id(req, deadline) => self.on_id_answer(req, deadline, r),
            Pending::Unsubscribe(tx) => {
                let ok = r.is_ok();
                let _ = tx.send(r.map(|_| ()));
                if ok {
                    return Err(Error::Closed);
                }
            }
            Pending::Close => {
                if let Err(e) = r {
                    tracing::debug!(topic = %self.entity.topic, error = %e, "close consumer");
                }
                return Err(Error::Closed);
            }
        }
        Ok(())
    }

    fn on_op(&mut self, op: ConsumerOp, requests: &mut Requests<Pending>) -> Result<()> {
        let no_conn = || Error::ConnectionLost("consumer is reconnecting".into());
        match op {
            ConsumerOp::Ack(id) => self.on_ack(id),
            ConsumerOp::AckIds(ids) => self.on_ack_ids(ids),
            ConsumerOp::AckCumulative(id) => {
                self.shared.stats.acked();
                self.dlq_candidates.retain(|k, _| *k > id);
                // The cumulative ack of a chunked message's last chunk covers its chunks.
                let done: Vec<MessageId> = self
                    .chunk_ids
                    .keys()
                    .filter(|k| **k <= id)
                    .copied()
                    .collect();
                let covered: Vec<(MessageId, Vec<MessageId>)> = done
                    .into_iter()
                    .filter_map(|k| self.chunk_ids.remove_entry(&k))
                    .collect();
                self.unacked.remove_through(id);
                if !self.persistent() {
                    return Ok(());
                }
                match self
                    .chunks
                    .earliest_first_chunk()
                    .filter(|f| *f < id.entry())
                {
                    // An incomplete chunked message has its first chunk before `id` (chunks of
                    // several producers interleave): a cumulative ack through `id` would ack
                    // that first chunk, and after a reconnect the rest of the message would
                    // come without it (lost). Like an unfinished batch, the cumulative ack
                    // stops before it; the chunked messages delivered after it (and `id`) are
                    // acked entry by entry. Other messages in between stay unacked until a
                    // later cumulative ack (redelivered after a reconnect: at least once).
                    // Beyond upstream, whose cumulative ack loses the incomplete message.
                    Some(first) => {
                        if first.entry_id > 0 {
                            self.acks.ack_cumulative(MessageId::new(
                                first.ledger_id,
                                first.entry_id - 1,
                                first.partition,
                            ));
                        }
                        let mut entries: Vec<MessageId> = covered
                            .into_iter()
                            .filter(|(k, _)| *k > first)
                            .flat_map(|(_, chunks)| chunks)
                            .collect();
                        if !id.is_chunked() && !id.is_batch() {
                            entries.push(id.entry());
                        }
                        self.ack_chunks(entries);
                    }
                    None => {
                        self.acks.ack_cumulative(id);
                    }
                }
                if self.opts.ack_group_time.is_zero() {
                    self.flush_acks();
                } else if self.ack_deadline.is_none() {
                    self.ack_deadline = Some(deadline_after(self.opts.ack_group_time));
                }
            }
            ConsumerOp::Nack(id, redelivery_count) => {
                self.shared.stats.nacked();
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
            ConsumerOp::Redeliver(id) => self.redeliver(vec![id]),
            ConsumerOp::Flow(n) => self.grant(n),
            ConsumerOp::Seek(target, tx) => {
                let deadline = deadline_after(self.entity.core.operation_timeout());
                self.id_request(IdRequest::Seek(target, tx), deadline, requests);
            }
            ConsumerOp::LastMessageId(tx) => {
                let deadline = deadline_after(self.entity.core.operation_timeout());
                self.id_request(IdRequest::LastMessageId(tx), deadline, requests);
            }
            ConsumerOp::Unsubscribe(tx) => match &self.entity.conn {
                Some(conn) => {
                    let cid = self.entity.id;
                    requests.send(
                        conn,
                        Pending::Unsubscribe(tx),
                        |rid| commands::unsubscribe(cid, rid),
                        "unsubscribe",
                    );
                }
                None => {
                    let _ = tx.send(Err(no_conn()));
                }
            },
            ConsumerOp::Close(_) => unreachable!("handled by the loop"),
        }
        Ok(())
    }

    pub(crate) fn flush_acks(&mut self) {
        self.ack_deadline = None;
        if self.entity.conn.is_none() {
            // Keep them for the next connection (the broker redelivers unacked messages; the
            // acks still apply after re-subscribing).
            if self.acks.has_pending() {
                self.ack_deadline = Some(deadline_after(
                    self.opts
                        .ack_group_time
                        .max(std::time::Duration::from_millis(100)),
                ));
            }
            return;
        }
        let AckFlush {
            individual,
            cumulative,
            partial,
        } = self.acks.take_flush();
        let id = self.entity.id;
        let sent = individual.len() + partial.len() + usize::from(cumulative.is_some());
        self.shared.stats.acks_sent(sent);
        if !individual.is_empty() || !partial.is_empty() {
            self.entity
                .send_control(commands::ack_individual(id, &individual, partial));
        }
        if let Some(c) = cumulative {
            self.entity.send_control(commands::ack_cumulative(id, c));
        }
    }

    /// Forgets a message the application acked.
    pub(crate) fn forget(&mut self, id: &MessageId) {
        remove_if_any(&mut self.dlq_candidates, id);
        self.unacked.remove(id);
    }

    /// Publishes a message to the dead-letter topic in the background; it is acked once
    /// published, or redelivered if publishing fails.
    pub(crate) fn dead_letter(&self, msg: Message) {
        match &self.dlq {
            Some(sink) => crate::consumer::engine::dlq::spawn_dead_letter(
                sink.clone(),
                msg,
                self.shared.clone(),
            ),
            None => tracing::error!(topic = %self.entity.topic, "dead letter without a policy"),
        }
    }

    /// Redelivers (or dead-letters) messages unacked for longer than the ack timeout after the
    /// application took them.
    fn on_ack_timeout_tick(&mut self) {
        if self.unacked.is_empty() {
            return;
        }
        let now = Instant::now();
        let taken = self.shared.room().taken;
        self.unacked.taken(taken, now);
        let expired = self.unacked.expired(now, self.opts.ack_timeout);
        self.shared.stats.ack_timed_out(expired.len());
        let mut redeliver = Vec::new();
        for id in expired {
            match self.dlq_candidates.remove(&id) {
                Some(msg) => self.dead_letter(msg),
                None => redeliver.push(id),
            }
        }
        if !redeliver.is_empty() {
            tracing::debug!(topic = %self.entity.topic, n = redeliver.len(), "ack timeout: redelivering");
            self.redeliver(redeliver);
        }
    }

    /// Asks the broker to deliver these messages again: by id on Shared / Key_Shared; on
    /// Exclusive / Failover by rewinding everything unacked (redeliver-all).
    pub(crate) fn redeliver(&mut self, mut ids: Vec<MessageId>) {
        if ids.is_empty() || !self.persistent() {
            return;
        }
        if self.single_active() {
            self.redeliver_all();
            return;
        }
        // A chunked message is redelivered whole: all its chunks.
        let chunks: Vec<MessageId> = ids
            .iter()
            .filter_map(|id| self.chunk_ids.get(id))
            .flatten()
            .copied()
            .collect();
        ids.extend(chunks);
        for id in &mut ids {
            *id = id.entry();
        }
        ids.sort();
        ids.dedup();
        // Java ConsumerImpl.redeliverUnacknowledgedMessages(Set): at most
        // MAX_REDELIVER_UNACKNOWLEDGED (1000) ids per command, so a large redelivery (an ack
        // timeout expiring a long backlog) never builds one oversized frame.
        for part in ids.chunks(MAX_REDELIVER_IDS) {
            self.shared.stats.redelivery_requested();
            self.entity
                .send_control(commands::redeliver(self.entity.id, part));
        }
    }

    /// Upstream `ConsumerImpl.redeliverUnacknowledgedMessages()`: clear the receiver queue,
    /// bump the consumer epoch, ask the broker to rewind to the mark-delete position under
    /// that epoch, and drop messages of an older epoch still in flight. The permits of the
    /// cleared messages come back as the handle discards them; acks pending are sent first
    /// so the rewind does not bring acked messages back.
    fn redeliver_all(&mut self) {
        if self.entity.conn.is_none() {
            return; // re-subscribing redelivers everything unacked anyway
        }
        self.flush_acks();
        self.consumer_epoch += 1;
        self.shared.new_epoch(false);
        self.unacked.clear();
        self.nacks = NackTracker::default();
        self.shared.stats.redelivery_requested();
        let frame = commands::redeliver_all(self.entity.id, self.consumer_epoch);
        self.entity.send_control(frame);
    }
}
