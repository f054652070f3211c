//! The task behind one (partition) consumer: flow permits, decoding, grouped acks,
//! negative-ack and ack-timeout redelivery, seek, and what to clear when re-subscribing. The
//! shared [`Entity`] driver owns its registration, reconnects and ending.

pub(crate) mod acks;
pub(crate) mod budget;
pub(crate) mod chunk_intake;
pub(crate) mod chunks;
pub(crate) mod decode;
pub(crate) mod decrypt;
pub(crate) mod dlq;
pub(crate) mod flow;
pub(crate) mod intake;
pub(crate) mod io;
pub(crate) mod key_wait;
pub(crate) mod seek;
pub(crate) mod start;
pub(crate) mod subscribe;
#[cfg(feature = "transactions")]
pub(crate) mod txn_ack;

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::commands;
use crate::entity::{Requests, Wake};
use crate::error::{Error, Result};
use crate::message_id::MessageId;
use crate::proto::BaseCommand;
use crate::util::deadline_after;

use crate::consumer::engine::acks::{remove_if_any, Acks, NackTracker, MAX_REDELIVER_IDS};
use crate::consumer::engine::seek::{last_ids, start_after, wait_for_resubscribe};
use crate::consumer::engine::subscribe::{subscribe_command, SubscribeParams};
use crate::consumer::op::{ConsumerOp, IdRequest, SeekTarget};
use crate::consumer::queue::Item;

/// What an in-flight request's answer is for.
pub(crate) enum Pending {
    /// A seek or get-last-message-id, and when it gives up waiting for a re-subscribe.
    Id(IdRequest, Instant),
    Unsubscribe(oneshot::Sender<Result<()>>),
    /// The CloseConsumer of the application's close.
    Close,
    /// A transactional ack: the broker's answer completes it.
    #[cfg(feature = "transactions")]
    TxnAck(crate::consumer::op::TxnAck),
}

pub(crate) struct ConsumerTask {
    /// The entity, the queue to the application, the shared state and the options.
    pub io: io::Io,
    pub consumer_name: String,
    pub durable: bool,
    pub ops: crate::consumer::op::OpReceiver,
    /// Ack trackers, negative acks, the ack timeout's bookkeeping and the grouping timer.
    pub acks: Acks,
    /// Flow permits, and those withheld for the consumer's byte budget.
    pub flow: flow::Flow,
    /// Decoding, filtering and queueing what the broker delivers, chunks included.
    pub intake: intake::Intake,
    /// Flow-control violations seen (each closed its connection).
    pub over_delivered: u64,
    /// Seeks in flight or waiting for a re-subscribe, and the acks held behind them.
    pub seeks: crate::consumer::engine::seek::Seeks,
}

/// Most commands handled in one wake-up of the task (then it looks at its other sources).
const BURST: usize = 256;

/// How often the task hands the metrics facade what the application received while nothing
/// else woke it (feature `metrics` only): well under any scrape interval.
const METRICS_PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl ConsumerTask {
    /// The key reader answered: the entries waiting for a data key go on (see `decrypt`).
    fn on_keys_loaded(&mut self, done: key_wait::Loaded) {
        let (io, flow, acks) = (&mut self.io, &mut self.flow, &mut self.acks);
        if let Some(v) = self.intake.on_keys_loaded(io, flow, acks, done) {
            self.flow_violation(v.queued);
            self.flow.after_entry(&mut self.io);
        }
        self.flush_if_due();
    }

    /// A command or message from the broker (see [`Intake`](intake::Intake)).
    pub(crate) fn on_inbound(&mut self, wake: Wake) -> Result<()> {
        let (io, flow, acks) = (&mut self.io, &mut self.flow, &mut self.acks);
        if let Some(v) = self.intake.on_inbound(io, flow, acks, wake) {
            self.flow_violation(v.queued);
            self.flow.after_entry(&mut self.io);
        }
        self.flush_if_due();
        Ok(())
    }

    /// The broker delivered beyond its flow permits, or into a queue already full: a
    /// protocol violation. Upstream has no such check (its receiver queue grows without
    /// bound); a careful client closes that connection with an error naming the violation,
    /// re-subscribes after the backoff (the broker redelivers every unacked message, within
    /// the new permits), and tells the application with an error item. The entry that
    /// crossed the line is not accepted; the broker redelivers it.
    fn flow_violation(&mut self, queued: u64) {
        self.over_delivered += 1;
        let error = self.flow.violation(&self.io, queued);
        tracing::warn!(topic = %self.io.entity.topic, error = %error, "closing the connection");
        self.io.entity.drop_connection(&error.to_string());
        self.detached();
        // Emitted after the epoch changed, so the handle does not discard it as stale.
        self.io.emit(Item::Error(Box::new(error)));
    }

    /// Acks chunk entries individually, and sends them if that is due.
    fn ack_chunks(&mut self, ids: Vec<MessageId>) {
        self.intake.ack_chunks(&self.io, &mut self.acks, ids);
        self.flush_if_due();
    }

    /// Sends the acks the intake applied if that is due (see `Acks::ack_entries`).
    #[inline]
    fn flush_if_due(&mut self) {
        if self.acks.take_flush_due() {
            self.flush_acks();
        }
    }

    // Not an `async fn`: its argument would be moved from the future's state into a local
    // of the same future, and both slots would stay in the task's allocation for as long as
    // the entity lives (the task state twice). An `async move` block uses it in place
    // (`entity::idle_sizes` bounds the future above the state).
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn run(mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        async move {
            let mut requests: Requests<Pending> = Requests::new();
            let mut close_waiters: Vec<oneshot::Sender<Result<()>>> = Vec::new();
            let mut silent = false;
            let mut close_outcome: Option<Error> = None;
            let ack_timeout_on = !self.io.opts.ack_timeout.is_zero() && self.io.persistent();
            // Java `UnAckedMessageTracker`: the tick is at most the ack timeout.
            let ack_timeout_tick = (self.io.opts.ack_timeout_tick)
                .min(self.io.opts.ack_timeout)
                .max(std::time::Duration::from_millis(1));
            // Periodic wake-ups are deadlines, not `Interval`s, sharing the one timer with the
            // others (ack grouping, nacks, chunks, seeks): see `util::set_timer` (issue #39).
            let mut ack_tick_at: Option<Instant> = None;
            let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
            // With the `metrics` feature, a wake-up every second hands the facade what the
            // application took since the last one: the handle counts `recv`s without waking the
            // task, so an idle consumer's received count and queue gauge would otherwise stay
            // stale until the next frame (upstream's Java consumer updates its OpenTelemetry
            // counters as each message is taken, so a scrape always sees them).
            // It stops after two ticks in a row found nothing new and the queue empty (only the task
            // fills it; any other wake-up restarts them): idle, the consumer sleeps (issue #39).
            let metrics_on = crate::stats::sink::ENABLED;
            let mut quiet_ticks = 0u8;
            // The first one at once, as an `Interval`'s first tick was: a new consumer's two
            // quiet ticks are over a second after it started.
            let mut metrics_at: Option<Instant> = metrics_on.then(Instant::now);
            let out = self.io.out.clone();
            // Created once: a fresh `closed()` per wake-up would register a waiter per message.
            let out_closed = out.closed();
            tokio::pin!(out_closed);
            let final_error = loop {
                let ack_deadline = self.acks.deadline;
                let nack_deadline = self.acks.nacks.next_deadline();
                let deferred_deadline = self.seeks.deferred_deadline();
                let chunk_deadline = self.intake.chunks.next_expiry();
                // Only while something is tracked: an idle consumer does not wake per tick.
                if ack_timeout_on && ack_tick_at.is_none() && !self.acks.unacked.is_empty() {
                    ack_tick_at = Some(crate::util::deadline_after(ack_timeout_tick));
                }
                if metrics_on && quiet_ticks < 2 && metrics_at.is_none() {
                    metrics_at = Some(Instant::now() + METRICS_PUBLISH_INTERVAL);
                }
                let deadline = [
                    ack_deadline,
                    nack_deadline,
                    chunk_deadline,
                    deferred_deadline,
                    ack_tick_at,
                    metrics_at,
                ]
                .into_iter()
                .flatten()
                .min();
                crate::util::set_timer(&mut timer, deadline);
                // While the ack group's timer runs, acks wait for it until the group is full
                // (Java flushes at `maxAckGroupSize` pending); detached, none waits.
                let attached = self.io.entity.conn.is_some();
                self.ops.set_folds_may_wait(
                    (ack_deadline.is_some() && attached).then(|| self.acks.group_room()),
                );
                let closing = !close_waiters.is_empty();
                let mut ticked = false;
                let step: Result<()> = tokio::select! {
                    biased;
                    wake = self.io.entity.next() => match wake {
                        wake @ (Wake::Command(_) | Wake::Message(_)) => {
                            let mut r = self.on_inbound(wake);
                            // Handle what has already arrived before waiting again: one select!
                            // round per burst, not per message.
                            for _ in 0..BURST {
                                let Some(wake) = r.is_ok().then(|| self.io.entity.try_next()).flatten() else {
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
                            if let Some(e) = self.io.entity.take_violation() {
                                self.over_delivered += 1;
                                self.io.emit(Item::Error(Box::new(e)));
                            }
                            // Acks waiting for the group's timer are applied now, kept while
                            // detached (acks wait for no timer then): the tracker knows them
                            // before the re-subscribe, so the broker's redeliveries of acked
                            // messages are filtered (Java `isDuplicate`), and a re-subscribe on
                            // another cluster forgets them with the rest.
                            self.on_ops(None, &mut close_waiters, &mut requests)
                        }
                        Wake::Attached(_) => {
                            tracing::info!(topic = %self.io.entity.topic, "consumer re-subscribed");
                            let cluster = self.io.entity.generation();
                            if self.io.shared.cluster.swap(cluster, Ordering::AcqRel) != cluster {
                                // On another cluster the ids kept (acks, nacks, ack timeout) name
                                // other messages: forgotten, never sent there.
                                self.acks.reset();
                            }
                            self.flow.start(&mut self.io);
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
                        ) if !self.io.opts.force_topic_creation => {
                            tracing::info!(topic = %self.io.entity.topic, "topic deleted; its consumer ends");
                            self.io.shared.topic_deleted.store(true, Ordering::Release);
                            self.io.shared.ended.notify_one();
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
                            self.close_after_ops(&mut close_waiters, &mut requests)
                        }
                    },
                    done = self.intake.crypto.loaded(), if self.intake.crypto.loading() => {
                        self.on_keys_loaded(done);
                        Ok(())
                    }
                    (pending, r) = requests.next() => match (pending, r) {
                        // Like upstream's closeAsync: a CloseConsumer that failed while the
                        // connection stayed up (a timeout, a broker error) fails close(); the
                        // consumer still ends Closed. A lost connection does not: the broker forgot
                        // the consumer with it.
                        (Pending::Close, Err(e)) if !crate::entity::connection_gone(&e) => {
                            tracing::debug!(topic = %self.io.entity.topic, error = %e, "close consumer");
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
                        Some(op) => self.on_ops(Some(op), &mut close_waiters, &mut requests),
                        // Unreachable while `shared` holds a sender; kept for completeness.
                        None => Err(Error::Closed),
                    },
                    // The consumer handle is gone (dropped): close.
                    _ = &mut out_closed, if !closing => {
                        self.close_after_ops(&mut close_waiters, &mut requests)
                    }
                    // Whichever of the task's deadlines came (one timer for all).
                    () = async { timer.as_mut().expect("guarded").await }, if timer.is_some() => { 'timer: {
                        // Acks folded in while the ack group's timer ran waited for it (see
                        // `set_folds_may_wait`): applied before anything is sent or times out.
                        if let Err(e) = self.on_ops(None, &mut close_waiters, &mut requests) {
                            break 'timer Err(e);
                        }
                        let now = Instant::now();
                        let due = |d: Option<Instant>| d.is_some_and(|d| d <= now);
                        if due(ack_deadline) {
                            self.flush_acks();
                        }
                        if due(nack_deadline) {
                            let due = self.acks.nacks.take_due(now);
                            // Java `NegativeAcksTracker.triggerRedelivery`: the interceptors hear
                            // of the nacks as their redelivery is asked.
                            if let (Some(c), false) = (&self.io.opts.interceptors, due.is_empty()) {
                                c.on_negative_acks_send(&self.io.entity.topic, &due);
                            }
                            self.redeliver(due);
                        }
                        if due(chunk_deadline) {
                            let out = self.intake.chunks.expire(now);
                            self.intake.apply_chunk_outcome(&mut self.io, &mut self.acks, out);
                            self.flush_if_due();
                        }
                        if due(deferred_deadline) {
                            self.expire_deferred();
                        }
                        if due(ack_tick_at) {
                            ack_tick_at = None; // the next one is a tick from now
                            self.on_ack_timeout_tick();
                        }
                        if due(metrics_at) {
                            metrics_at = None;
                            ticked = true; // published below
                        }
                        Ok(())
                    }}
                    // Permits withheld for the byte budget: bytes were released.
                    _ = self.flow.freed.changed(), if self.flow.owed > 0 => {
                        self.flow.grant_owed(&mut self.io);
                        Ok(())
                    }
                };
                if let Err(e) = step {
                    break e;
                }
                let quiet = self
                    .io
                    .shared
                    .stats
                    .publish(|| self.io.shared.room().queued);
                // Other wake-ups neither count nor restart them unless they found something
                // new (with the queue empty, the application takes nothing not queued first).
                quiet_ticks = if quiet {
                    quiet_ticks + u8::from(ticked)
                } else {
                    0
                };
            };
            let state = self.io.entity.end(&final_error);
            self.io.shared.stats.closed();
            let result = match (&final_error, close_outcome) {
                (Error::Closed, None) => Ok(()),
                (Error::Closed, Some(unconfirmed)) => Err(unconfirmed),
                (e, _) => Err(e.clone()),
            };
            for tx in close_waiters {
                let _ = tx.send(result.clone());
            }
            if !matches!(final_error, Error::Closed) && !silent {
                tracing::warn!(topic = %self.io.entity.topic, error = %final_error, %state, "consumer closed");
                self.io.emit(Item::Error(Box::new(final_error)));
            }
        }
    }

    /// Ops of the handles: `first` (which the loop waited for), then what else is queued or
    /// folded in, up to a burst (acks come one op each); without `first`, all that waits (the
    /// timer, a detach or a close of the task's own takes what waited for it).
    fn on_ops(
        &mut self,
        mut first: Option<ConsumerOp>,
        waiters: &mut Vec<oneshot::Sender<Result<()>>>,
        requests: &mut Requests<Pending>,
    ) -> Result<()> {
        // Draining: at most what can wait at once (a handle acking without pause elsewhere
        // cannot keep the task here).
        let limit = if first.is_some() {
            BURST
        } else {
            crate::inbox::CAPACITY + BURST
        };
        for _ in 0..=limit {
            let Some(op) = first.take().or_else(|| self.ops.try_recv()) else {
                break;
            };
            match op {
                ConsumerOp::Close(tx) => self.start_close(tx, waiters, requests)?,
                op => self.on_op(op, requests)?,
            }
        }
        Ok(())
    }

    /// Closes on the task's own account (the handle dropped, the client shut down), after
    /// what the handles made before (acks waiting for the group's timer among them).
    fn close_after_ops(
        &mut self,
        waiters: &mut Vec<oneshot::Sender<Result<()>>>,
        requests: &mut Requests<Pending>,
    ) -> Result<()> {
        self.on_ops(None, waiters, requests)?;
        let (tx, _) = oneshot::channel();
        self.start_close(tx, waiters, requests)
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
        self.io
            .entity
            .life
            .apply(crate::lifecycle::Event::CloseRequested);
        // Acks held behind a seek in flight go before the CloseConsumer too: after it they
        // would be dropped by the broker (Java `closeAsync` flushes its tracker at once).
        for op in self.seeks.release_all() {
            self.on_folded(op);
        }
        self.flush_acks();
        self.io.entity.stop_reconnecting();
        match self.io.entity.close_request() {
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
        let (epoch, last) = self.io.shared.new_epoch(false);
        self.io.shared.permit_epoch.store(epoch, Ordering::Release);
        {
            let mut room = self.io.shared.room();
            room.consumed = 0;
            room.withheld = 0;
        }
        self.flow.key_wait = false;
        let (start, rollback_secs) = self.intake.detached(&self.io.opts, self.durable, last);
        let cmd = subscribe_command(&SubscribeParams {
            topic: &self.io.entity.topic,
            consumer_id: self.io.entity.id,
            consumer_name: &self.consumer_name,
            opts: &self.io.opts,
            durable: self.durable,
            start,
            rollback_secs,
            consumer_epoch: self.intake.consumer_epoch,
        });
        self.io.entity.reconnect(cmd);
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
                    tracing::debug!(topic = %self.io.entity.topic, error = %e, "close consumer");
                }
                return Err(Error::Closed);
            }
            #[cfg(feature = "transactions")]
            Pending::TxnAck(ack) => return txn_ack::answered(self, ack, r),
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
                let deadline = deadline_after(self.io.entity.core.operation_timeout());
                seek::id_request(self, IdRequest::Seek(target, tx), deadline, requests);
            }
            ConsumerOp::LastMessageId(tx) => {
                let deadline = deadline_after(self.io.entity.core.operation_timeout());
                seek::id_request(self, IdRequest::LastMessageId(tx), deadline, requests);
            }
            ConsumerOp::Unsubscribe(tx) => match &self.io.entity.conn {
                Some(conn) => {
                    let cid = self.io.entity.id;
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
            #[cfg(feature = "transactions")]
            ConsumerOp::TxnAck(ack) => txn_ack::send(&self.io, ack, requests),
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
                self.io.shared.stats.acked();
                self.intake.dlq_candidates.retain(|k, _| *k > id);
                // The cumulative ack of a chunked message's last chunk covers its chunks.
                let covered = acks::take_chunks_through(&mut self.intake.chunk_ids, id);
                self.acks.unacked.remove_through(id);
                if !self.io.persistent() {
                    return;
                }
                let first_chunk = self.intake.chunks.earliest_first_chunk();
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
                self.io.shared.stats.nacked();
                self.acks.unacked.remove(&id);
                if let Some(msg) = self.intake.dlq_candidates.remove(&id) {
                    self.intake.dead_letter(&self.io, msg);
                } else {
                    self.acks.nack(&self.io.opts, id, redelivery_count);
                }
            }
            ConsumerOp::Redeliver(id) => self.redeliver(vec![id]),
            ConsumerOp::Flow(n) => self.flow.grant(&mut self.io, n),
            ConsumerOp::RecvWaits if self.flow.zero_queue => {
                self.flow.want_one(&mut self.io, false)
            }
            ConsumerOp::RecvWaits => self.flow.expect_more(&mut self.io),
            // Control ops are taken by `on_op`.
            ConsumerOp::Seek(..)
            | ConsumerOp::LastMessageId(_)
            | ConsumerOp::Unsubscribe(_)
            | ConsumerOp::Close(_) => {
                debug_assert!(false, "a control op among the folded ones: {op:?}")
            }
            #[cfg(feature = "transactions")]
            ConsumerOp::TxnAck(_) => {
                debug_assert!(false, "a control op among the folded ones: {op:?}")
            }
        }
    }

    /// Sends the acks waiting, unless they are kept (see [`Acks::send`]): also while a
    /// seek's disconnect is awaited (see `seek::Seeks`).
    pub(crate) fn flush_acks(&mut self) {
        let keep = self.seeks.acks_wait(Instant::now());
        self.acks.send(&mut self.io, keep);
    }

    /// An individual ack from the application.
    pub(crate) fn on_ack(&mut self, id: MessageId) {
        self.io.shared.stats.acked();
        self.forget(&id);
        if !self.io.persistent() {
            return;
        }
        if let Some(chunks) = remove_if_any(&mut self.intake.chunk_ids, &id) {
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
        remove_if_any(&mut self.intake.dlq_candidates, id);
        self.acks.unacked.remove(id);
    }

    /// Redelivers (or dead-letters) messages unacked for longer than the ack timeout after the
    /// application took them.
    fn on_ack_timeout_tick(&mut self) {
        if self.acks.unacked.is_empty() {
            return;
        }
        let now = Instant::now();
        let taken = self.io.shared.room().taken;
        self.acks.unacked.taken(taken, now);
        let expired = self.acks.unacked.expired(now, self.io.opts.ack_timeout);
        self.io.shared.stats.ack_timed_out(expired.len());
        // Java `UnAckedMessageTracker`: `onAckTimeoutSend` before the redelivery.
        if let (Some(c), false) = (&self.io.opts.interceptors, expired.is_empty()) {
            c.on_ack_timeout_send(&self.io.entity.topic, &expired);
        }
        let mut redeliver = Vec::new();
        for id in expired {
            match self.intake.dlq_candidates.remove(&id) {
                Some(msg) => self.intake.dead_letter(&self.io, msg),
                None => redeliver.push(id),
            }
        }
        if !redeliver.is_empty() {
            tracing::debug!(topic = %self.io.entity.topic, n = redeliver.len(), "ack timeout: redelivering");
            self.redeliver(redeliver);
        }
    }

    /// Asks the broker to deliver these messages again: by id on Shared / Key_Shared; on
    /// Exclusive / Failover by rewinding everything unacked (redeliver-all).
    pub(crate) fn redeliver(&mut self, ids: Vec<MessageId>) {
        if ids.is_empty() || !self.io.persistent() {
            return;
        }
        if self.io.single_active() {
            self.redeliver_all();
            return;
        }
        // A chunked message is redelivered whole: all its chunks.
        let ids = acks::redelivery_entries(ids, &self.intake.chunk_ids);
        // Java ConsumerImpl.redeliverUnacknowledgedMessages(Set): at most
        // MAX_REDELIVER_UNACKNOWLEDGED (1000) ids per command, so a large redelivery (an ack
        // timeout expiring a long backlog) never builds one oversized frame.
        for part in ids.chunks(MAX_REDELIVER_IDS) {
            self.io.shared.stats.redelivery_requested();
            self.io
                .entity
                .send_control(commands::redeliver(self.io.entity.id, part));
        }
    }

    /// Upstream `ConsumerImpl.redeliverUnacknowledgedMessages()`: clear the receiver queue,
    /// bump the consumer epoch, ask the broker to rewind to the mark-delete position under
    /// that epoch, and drop messages of an older epoch still in flight. The permits of the
    /// cleared messages come back as the handle discards them; acks pending are sent first
    /// so the rewind does not bring acked messages back.
    fn redeliver_all(&mut self) {
        if self.io.entity.conn.is_none() {
            return; // re-subscribing redelivers everything unacked anyway
        }
        self.flush_acks();
        self.intake.consumer_epoch += 1;
        self.io.shared.new_epoch(false);
        self.acks.unacked.clear();
        self.acks.nacks = NackTracker::default();
        self.io.shared.stats.redelivery_requested();
        let frame = commands::redeliver_all(self.io.entity.id, self.intake.consumer_epoch);
        self.io.entity.send_control(frame);
    }

    // The task's side of seek and get-last-message-id (the state is `seek::Seeks`).

    /// The broker's answer to a seek or get-last-message-id.
    pub(crate) fn on_id_answer(
        &mut self,
        req: IdRequest,
        deadline: Instant,
        r: Result<BaseCommand>,
    ) {
        match (req, r) {
            (req, Err(e)) if wait_for_resubscribe(&e) && Instant::now() < deadline => {
                tracing::debug!(topic = %self.io.entity.topic, error = %e,
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
                let _ = tx.send(r.and_then(|resp| last_ids(resp, self.io.partition)));
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
        if ok && self.io.entity.conn.is_some() {
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
            seek::id_request(self, req, deadline, requests);
        }
    }

    /// Fails the deferred requests whose time is up.
    pub(crate) fn expire_deferred(&mut self) {
        let after = self.io.entity.core.operation_timeout();
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
        let (epoch, _) = self.io.shared.new_epoch(true);
        self.io.shared.permit_epoch.store(epoch, Ordering::Release);
        // An end-of-topic notice queued before the seek is stale (Java's seek clears the
        // incoming queue): the consumer reads from the new position; the broker says the end
        // again once it gets there.
        self.io.shared.end_epoch.store(epoch, Ordering::Release);
        self.intake.end_queued = false;
        self.io.shared.room().consumed = 0;
        self.acks.reset();
        self.intake.chunks.clear();
        self.intake.dlq_candidates.clear();
        let intake = &mut self.intake;
        (intake.start, intake.skip_through, intake.start_from_next) = start_after(target);
        self.flow.start(&mut self.io);
    }
}
