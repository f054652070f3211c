//! The task behind one (partition) consumer: flow permits, decoding, grouped acks,
//! negative-ack and ack-timeout redelivery, seek, and what to clear when re-subscribing. The
//! shared [`Entity`] driver owns its registration, reconnects and ending.

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

use crate::consumer::engine::acks::{
    remove_if_any, AckFlush, Acks, NackTracker, MAX_REDELIVER_IDS,
};
use crate::consumer::engine::seek::{last_ids, start_after, wait_for_resubscribe};
use crate::consumer::engine::subscribe::{resubscribe_start, subscribe_command, SubscribeParams};
use crate::consumer::handle::PartitionShared;
use crate::consumer::op::{ConsumerOp, IdRequest, SeekTarget};
use crate::consumer::options::{ConsumerOptions, SubscriptionType};
use crate::consumer::queue::Item;

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
    /// Ack trackers, negative acks, the ack timeout's bookkeeping and the grouping timer.
    pub acks: Acks,
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
    /// How many messages this task has put in the queue (numbers them for `unacked`).
    pub queued_messages: u64,
    /// Flow-control violations seen (each closed its connection).
    pub over_delivered: u64,
    /// Where a non-durable subscription created again starts when the application has
    /// received nothing since the start or the last seek (the SUBSCRIBE position).
    pub start: Option<MessageId>,
    /// After a time seek: the next message queued sets `start`.
    pub start_from_next: bool,
    /// Seeks in flight or waiting for a re-subscribe, and the acks held behind them.
    pub seeks: crate::consumer::engine::seek::Seeks,
    /// Chunked messages being reassembled.
    pub chunks: crate::consumer::engine::chunks::ChunkAssembler,
    /// The chunk entries of each delivered chunked message not acked yet (keyed by its id):
    /// ack, nack, ack timeout and DLQ act on all of them (upstream
    /// `unAckedChunkedMessageIdSequenceMap`).
    pub chunk_ids: HashMap<MessageId, Vec<MessageId>>,
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
            let ack_deadline = self.acks.deadline;
            let nack_deadline = self.acks.nacks.next_deadline();
            let deferred_deadline = self.seeks.deferred_deadline();
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
                        let held = self.seeks.reattaching();
                        self.detached();
                        if held {
                            // Acks made during a seek waited for this: now they wait (as any
                            // kept while detached) for the new subscription.
                            self.flush_acks();
                        }
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
                        self.seeks.reattaching();
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
                        self.on_id_answer(req, deadline, r.map(|b| *b));
                        Ok(())
                    }
                    (pending, r) => self.on_answer(pending, r.map(|b| *b)),
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
                    let due = self.acks.nacks.take_due(Instant::now());
                    // Java `NegativeAcksTracker.triggerRedelivery`: the interceptors hear of
                    // the nacks as their redelivery is asked.
                    if let (Some(c), false) = (&self.opts.interceptors, due.is_empty()) {
                        c.on_negative_acks_send(&self.entity.topic, &due);
                    }
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
        // Acks held behind a seek in flight go before the CloseConsumer too: after it they
        // would be dropped by the broker (Java `closeAsync` flushes its tracker at once).
        for op in self.seeks.release_all() {
            self.on_folded(op);
        }
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
        if !self.durable {
            if let Some(last) = last {
                self.skip_through = Some(last);
            }
        }
        let (start, rollback_secs) =
            resubscribe_start(&self.opts, self.durable, last, held_from, self.start);
        let cmd = subscribe_command(&SubscribeParams {
            topic: &self.entity.topic,
            consumer_id: self.entity.id,
            consumer_name: &self.consumer_name,
            opts: &self.opts,
            durable: self.durable,
            start,
            rollback_secs,
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
        // Behind a seek not answered yet, acks wait (see `seek::Seeks`).
        let Some(op) = self.seeks.hold(op) else {
            return Ok(());
        };
        match op {
            ConsumerOp::Seek(target, tx) => {
                self.seeks.begin();
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
            op => self.on_folded(op),
        }
        Ok(())
    }

    /// An ack, negative ack, redelivery or flow permit of the application.
    pub(crate) fn on_folded(&mut self, op: ConsumerOp) {
        match op {
            ConsumerOp::Ack(id) => self.on_ack(id),
            ConsumerOp::AckIds(ids) => self.on_ack_ids(ids),
            ConsumerOp::AckCumulative(id) => {
                self.shared.stats.acked();
                self.dlq_candidates.retain(|k, _| *k > id);
                // The cumulative ack of a chunked message's last chunk covers its chunks.
                let covered = acks::take_chunks_through(&mut self.chunk_ids, id);
                self.acks.unacked.remove_through(id);
                if !self.persistent() {
                    return;
                }
                let first_chunk = self.chunks.earliest_first_chunk();
                let (through, entries) = acks::cumulative_plan(id, first_chunk, covered);
                if let Some(through) = through {
                    self.acks.tracker.ack_cumulative(through);
                }
                if !entries.is_empty() {
                    self.ack_chunks(entries);
                }
                if self.acks.after_ack(false) {
                    self.flush_acks();
                }
            }
            ConsumerOp::Nack(id, redelivery_count) => {
                self.shared.stats.nacked();
                self.acks.unacked.remove(&id);
                if let Some(msg) = self.dlq_candidates.remove(&id) {
                    self.dead_letter(msg);
                } else {
                    let delay = match &self.opts.negative_ack_backoff {
                        Some(b) => b.delay(redelivery_count),
                        None => self.opts.negative_ack_delay,
                    };
                    self.acks.nacks.add(id, Instant::now(), delay);
                }
            }
            ConsumerOp::Redeliver(id) => self.redeliver(vec![id]),
            ConsumerOp::Flow(n) => self.grant(n),
            // Control ops are taken by `on_op`.
            ConsumerOp::Seek(..)
            | ConsumerOp::LastMessageId(_)
            | ConsumerOp::Unsubscribe(_)
            | ConsumerOp::Close(_) => {
                debug_assert!(false, "a control op among the folded ones: {op:?}")
            }
        }
    }

    /// Sends the acks waiting, unless they are kept: no connection (the broker redelivers
    /// unacked messages; the acks still apply after re-subscribing), or a seek's disconnect
    /// awaited (see `seek::Seeks`).
    pub(crate) fn flush_acks(&mut self) {
        let keep = match self.seeks.acks_wait(Instant::now()) {
            Some(until) => Some(until),
            None if self.entity.conn.is_none() => Some(self.acks.detached_retry()),
            None => None,
        };
        let Some(AckFlush {
            individual,
            cumulative,
            partial,
        }) = self.acks.flush(keep)
        else {
            return;
        };
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

    /// An individual ack from the application.
    pub(crate) fn on_ack(&mut self, id: MessageId) {
        self.shared.stats.acked();
        self.forget(&id);
        if !self.persistent() {
            return;
        }
        if let Some(chunks) = remove_if_any(&mut self.chunk_ids, &id) {
            // A chunked message: every chunk is acked (upstream acks each chunk of a
            // `ChunkMessageIdImpl`).
            self.ack_chunks(chunks);
            return;
        }
        let full = self.acks.ack(id);
        if self.acks.after_ack(full) {
            self.flush_acks();
        }
    }

    /// `ConsumerOp::AckIds`: applies acks made in a row, in order, then gives their buffer
    /// back for the next ones.
    pub(crate) fn on_ack_ids(&mut self, mut ids: Vec<MessageId>) {
        for id in ids.drain(..) {
            self.on_ack(id);
        }
        // Kept for the next batch, unless a burst grew it past the usual size: the channel
        // the buffer replaced gave its memory back once drained, so a burst's room is not
        // kept for the consumer's lifetime either.
        let ids = crate::consumer::op::recycle(ids);
        if ids.capacity() > 0 {
            self.ops.with_folded(|f| f.give_back(ids));
        }
    }

    /// Forgets a message the application acked.
    #[inline]
    pub(crate) fn forget(&mut self, id: &MessageId) {
        remove_if_any(&mut self.dlq_candidates, id);
        self.acks.unacked.remove(id);
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
        if self.acks.unacked.is_empty() {
            return;
        }
        let now = Instant::now();
        let taken = self.shared.room().taken;
        self.acks.unacked.taken(taken, now);
        let expired = self.acks.unacked.expired(now, self.opts.ack_timeout);
        self.shared.stats.ack_timed_out(expired.len());
        // Java `UnAckedMessageTracker`: `onAckTimeoutSend` before the redelivery.
        if let (Some(c), false) = (&self.opts.interceptors, expired.is_empty()) {
            c.on_ack_timeout_send(&self.entity.topic, &expired);
        }
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
    pub(crate) fn redeliver(&mut self, ids: Vec<MessageId>) {
        if ids.is_empty() || !self.persistent() {
            return;
        }
        if self.single_active() {
            self.redeliver_all();
            return;
        }
        // A chunked message is redelivered whole: all its chunks.
        let ids = acks::redelivery_entries(ids, &self.chunk_ids);
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
        self.acks.unacked.clear();
        self.acks.nacks = NackTracker::default();
        self.shared.stats.redelivery_requested();
        let frame = commands::redeliver_all(self.entity.id, self.consumer_epoch);
        self.entity.send_control(frame);
    }

    // The task's side of seek and get-last-message-id (the state is `seek::Seeks`).

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
            self.seeks.defer(deadline, req);
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
                self.seeks.defer(deadline, req);
            }
            (IdRequest::Seek(target, tx), r) => {
                let ok = r.is_ok();
                if ok {
                    self.after_seek(target);
                }
                self.seek_ended(ok);
                let _ = tx.send(r.map(|_| ()));
            }
            (IdRequest::LastMessageId(tx), r) => {
                let _ = tx.send(r.and_then(|resp| last_ids(resp, self.partition)));
            }
        }
    }

    /// A seek was answered (`ok`: it succeeded, and its reset is done) or given up: the acks
    /// made since it began are applied now, after the reset (see [`Seeks`]), before anything
    /// else the task takes.
    fn seek_ended(&mut self, ok: bool) {
        let held = self.seeks.end();
        if held.is_empty() {
            return;
        }
        if ok && self.entity.conn.is_some() {
            // Not on the subscription the broker is dropping: on the next one.
            self.seeks.wait_for_disconnect(Instant::now());
        }
        for op in held {
            self.on_folded(op);
        }
        self.flush_acks();
    }

    /// Subscribed again: sends what waited for it.
    pub(crate) fn replay_deferred(&mut self, requests: &mut Requests<Pending>) {
        for (deadline, req) in self.seeks.take_deferred() {
            self.id_request(req, deadline, requests);
        }
    }

    /// Fails the deferred requests whose time is up.
    pub(crate) fn expire_deferred(&mut self) {
        let after = self.entity.core.operation_timeout();
        for req in self.seeks.take_expired(Instant::now()) {
            let operation = req.operation();
            let seek = matches!(req, IdRequest::Seek(..));
            req.fail(Error::Timeout { operation, after });
            if seek {
                self.seek_ended(false);
            }
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
        self.acks.reset();
        self.chunks.clear();
        self.dlq_candidates.clear();
        (self.start, self.skip_through, self.start_from_next) = start_after(target);
        self.start_flow();
    }

    /// A message is queued for the application: after a time seek, the first one is where a
    /// non-durable re-subscribe starts.
    pub(crate) fn note_delivered(&mut self, id: MessageId) {
        if self.start_from_next {
            self.start_from_next = false;
            self.start = Some(subscribe::start_position(id, true));
        }
    }
}
