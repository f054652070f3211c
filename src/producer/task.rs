//! The task behind one (partition) producer: it owns the pending queue and the open batches;
//! the shared [`Entity`] driver owns its registration, reconnects and ending.
//!
//! After a reconnect everything not yet receipted is re-sent, in sequence order, with the same
//! sequence ids; the producer re-creates itself with the broker-assigned name, a bumped
//! `epoch` and the `topic_epoch` of its last ProducerSuccess, so an Exclusive producer that
//! was fenced meanwhile is refused (upstream Go client behaviour; the broker checks the epoch
//! only when it is present).

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::entity::{Entity, Requests, Wake};
use crate::error::{Error, Result, ServerError};
use crate::message_id::MessageId;
use crate::proto::base_command::Type;
use crate::stats::counters::SendFailure;

use super::batch_container::{single_message_entry, BatchContainer, FrameContext};
use super::create::{create_command, Created};
use super::options::ProducerOptions;
use super::pending::{Completion, InFlight, Outgoing, PendingQueue, ReceiptOutcome};
use super::receipt::Receipts;
use crate::codec::EncodedFrame;
use crate::inbox::InboxReceiver;

/// Requests from producer handles to the task. A Send is about 110 bytes (an [`Outgoing`]
/// boxes all but the payload and key, and only when there is more), so moving it through the
/// queue is cheap.
// Nearly every op is a Send: boxing it to shrink the rare Flush/Close variants would cost an
// allocation per message for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum ProducerOp {
    Send {
        msg: Outgoing,
        completion: Completion,
    },
    Flush(oneshot::Sender<Result<()>>),
    Close(oneshot::Sender<Result<()>>),
}

/// What building entries produced: entries to queue and send, and sends that failed to
/// build (each with its error). Empty between ops, but for entries waiting for their frame's
/// charge (see `frame_charge`).
#[derive(Debug, Default)]
pub(crate) struct Built {
    pub out: Vec<InFlight>,
    pub failed: Vec<(Error, Completion)>,
}

/// The producer's task state.
pub(crate) struct ProducerTask {
    pub entity: Entity,
    pub partition: i32,
    /// Shared with the handle and every partition's task (not a copy per task: an idle
    /// producer's task state stays small, issue #39).
    pub opts: Arc<ProducerOptions>,
    pub ctx: FrameContext,
    /// Encoded frames waiting for room in the connection's queue (in order). The task never
    /// blocks on a busy connection, so it keeps timing out sends and reading receipts.
    pub unsent: VecDeque<EncodedFrame>,
    pub ops: InboxReceiver<ProducerOp, Receipts>,
    pub next_seq: u64,
    /// Bumped on every re-create (CommandProducer.epoch).
    pub epoch: u64,
    /// The topic epoch of the last ProducerSuccess, sent when re-creating.
    pub topic_epoch: Option<u64>,
    pub pending: PendingQueue,
    pub batches: Option<BatchContainer>,
    /// Entries built and sends failed by the last op, taken by `dispatch`; entries waiting
    /// for their frame's charge stay (in order) until it is had.
    pub built: Built,
    /// What each built entry is charged for the name its frame carries.
    pub charge: super::frame_charge::FrameCharge,
    pub flush_waiters: Vec<(u64, oneshot::Sender<Result<()>>)>,
    /// Who waits for `close()`; set once the application (or the client) asked to close.
    pub close_waiters: Vec<oneshot::Sender<Result<()>>>,
    pub closing: bool,
    /// When the close must be over: the operation timeout after it was asked for.
    pub close_deadline: Option<Instant>,
    /// Why the close was not confirmed by the broker (reported by `close()`, though the
    /// producer still ends Closed).
    /// Boxed: set only by a close, it sits in every idle producer's task state otherwise.
    pub close_outcome: Option<Box<Error>>,
    /// Set once the producer is closed for good; handles report it on later sends.
    pub terminal: Arc<OnceLock<Error>>,
    /// Statistics (read by `Producer::stats`).
    pub stats: Arc<crate::stats::ProducerCounters>,
}

impl ProducerTask {
    // Not an `async fn`: its argument would be moved from the future's state into a local
    // of the same future, and both slots would stay in the task's allocation for as long as
    // the entity lives (the task state twice). An `async move` block uses it in place
    // (`entity::idle_sizes` bounds the future above the state).
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn run(mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        async move {
            let timeout_tick = (!self.opts.send_timeout.is_zero()).then(|| {
                (self.opts.send_timeout / 10)
                    .clamp(Duration::from_millis(10), Duration::from_secs(1))
            });
            // When the send timeout is checked next: every `timeout_tick` while something is
            // pending (an idle producer does not wake), so no expiry is seen more than one tick
            // late. A deadline, not an `Interval`: the task's timers share one `Sleep` (each
            // is ~130 bytes in the task's state, for as long as the entity lives: issue #39).
            let mut next_check: Option<Instant> = None;
            // The one timer for all of them (see `util::set_timer`): an idle producer holds none.
            let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
            let mut accepting = true;
            // The CloseProducer request, once everything pending is done.
            let mut close_request: Requests<()> = Requests::new();
            let final_error: Error = loop {
                let batch_deadline = self.batches.as_ref().and_then(|b| b.deadline());
                if let (None, Some(tick), false) =
                    (next_check, timeout_tick, self.pending.is_empty())
                {
                    next_check = Some(Instant::now() + tick);
                }
                // The earliest of the task's deadlines: one timer for all.
                let deadline = [self.close_deadline, batch_deadline, next_check]
                    .into_iter()
                    .flatten()
                    .min();
                crate::util::set_timer(&mut timer, deadline);
                let conn_ready = self.entity.conn.clone();
                let step: Result<()> = tokio::select! {
                    biased;
                    wake = self.entity.next() => self.on_wake(wake),
                    (_, r) = close_request.next() => {
                        if let Err(e) = r {
                            tracing::debug!(topic = %self.entity.topic, error = %e, "close producer");
                            // Like upstream's closeAsync: a CloseProducer that failed while the
                            // connection stayed up is an error for close(); a lost connection is
                            // not (the broker forgets the producer with it).
                            if !crate::entity::connection_gone(&e) {
                                self.close_outcome = Some(Box::new(e));
                            }
                        }
                        Err(Error::Closed)
                    }
                    op = self.ops.recv(), if accepting => match op {
                        Some(op) => {
                            let mut r = self.on_op(op);
                            // Drain what is already queued before waiting again.
                            let mut n = 0;
                            while r.is_ok() && n < 256 {
                                match self.ops.try_recv() {
                                    Some(op) => r = self.on_op(op),
                                    None => break,
                                }
                                n += 1;
                            }
                            r
                        }
                        None => {
                            // Every handle is gone: finish what is pending, then close.
                            accepting = false;
                            self.start_close();
                            Ok(())
                        }
                    },
                    () = async { timer.as_mut().expect("guarded").await }, if timer.is_some() => {
                        let now = Instant::now();
                        if self.close_deadline.is_some_and(|d| d <= now) {
                            Err(self.close_timed_out())
                        } else {
                            if batch_deadline.is_some_and(|d| d <= now) {
                                self.flush_due_batches();
                            }
                            if next_check.is_some_and(|d| d <= now) {
                                next_check = None; // the next one is a tick from now
                                self.check_send_timeout();
                            }
                            Ok(())
                        }
                    }
                    () = self.charge.wait(), if self.charge.waiting() => {
                        self.resume();
                        Ok(())
                    }
                    _ = async { conn_ready.as_ref().expect("guarded").ready().await },
                        if !self.unsent.is_empty() && conn_ready.is_some() => {
                        self.drain_unsent();
                        Ok(())
                    }
                };
                if let Err(e) = step {
                    break e;
                }
                // The close deadline is seen even while sends keep the loop busy (the timer's
                // branch comes after theirs).
                if self.close_deadline.is_some_and(|d| d <= Instant::now()) {
                    break self.close_timed_out();
                }
                if self.charge.waiting() && self.pending.is_empty() {
                    // Nothing of ours left to give memory back: not waiting for it (see
                    // `frame_charge`).
                    self.charge.stop_waiting();
                    self.resume();
                }
                self.stats
                    .pending(self.pending.messages(), self.pending.bytes());
                // Like upstream's `ProducerImpl.closeAsync`, CloseProducer goes out at once (after
                // the open batch, flushed by `start_close`, and whatever waited for room in the
                // connection's queue), without waiting for receipts: the broker answers it once the
                // messages it received before are persisted, so their receipts come first; what is
                // still pending when it answers fails with `Error::Closed` ("already closed"). Only
                // while reconnecting does the close wait, for the pending messages to be re-sent;
                // the close deadline (one operation timeout) bounds it all.
                if self.closing
                    && close_request.is_empty()
                    && self.batches_empty()
                    && self.built.out.is_empty()
                    && !self.charge.defers()
                    && self.unsent.is_empty()
                    && (self.pending.is_empty() || self.entity.conn.is_some())
                {
                    match self.entity.close_request() {
                        Some(req) => close_request.push((), req),
                        None => break Error::Closed,
                    }
                    self.entity.stop_reconnecting();
                }
            };
            self.shutdown(final_error);
        }
    }

    /// Pending messages or the CloseProducer did not finish in time (e.g. the broker stopped
    /// reading): the close ends here, unconfirmed.
    fn close_timed_out(&mut self) -> Error {
        let after = self.entity.core.operation_timeout();
        tracing::warn!(topic = %self.entity.topic, ?after, "close producer timed out");
        self.close_outcome = Some(Box::new(Error::Timeout {
            operation: "close producer",
            after,
        }));
        Error::Closed
    }

    fn on_wake(&mut self, wake: Wake) -> Result<()> {
        match wake {
            wake @ (Wake::Command(_) | Wake::Receipt(_)) => {
                let mut r = self.on_inbound(wake);
                // Receipts come in bursts: handle what has already arrived before waiting.
                for _ in 0..256 {
                    match r.is_ok().then(|| self.entity.try_next()).flatten() {
                        Some(wake) => r = self.on_inbound(wake),
                        None => break,
                    }
                }
                r
            }
            Wake::Message(_) => {
                // Per frame: trace (never more than one line per message above trace).
                tracing::trace!(topic = %self.entity.topic, "MESSAGE for a producer; ignored");
                Ok(())
            }
            Wake::Detached => {
                // Closing with nothing left to deliver: the broker forgot this producer with
                // the connection (or closed it), so the close is done. Reconnecting would
                // re-create it on the broker only to drop it (like the consumer's close).
                if self.closing && self.pending.is_empty() && self.batches_empty() {
                    return Err(Error::Closed);
                }
                // Everything unsent is still pending: it is re-sent after the reconnect.
                self.unsent.clear();
                let cmd = create_command(
                    self.entity.topic.as_str(),
                    self.entity.id,
                    Some(&self.ctx.producer_name),
                    self.epoch + 1,
                    self.topic_epoch,
                    &self.opts,
                    self.entity.core.transactions_enabled(),
                );
                self.entity.reconnect(cmd);
                Ok(())
            }
            Wake::Attached(response) => {
                let created = Created::parse(*response, Some(&self.ctx.producer_name))?;
                // Java `ProducerImpl.connectionOpened`: while no sequence id was handed out
                // yet (`msgIdGenerator == 0`), every (re)connection adopts the broker's
                // `last_sequence_id + 1`, not only the first: a producer that re-attaches
                // before its first send goes on after what the broker stored under its name
                // meanwhile (with deduplication on, its messages would be dropped as
                // duplicates otherwise). Once one was handed out, the client's count rules.
                if self.next_seq == 0 {
                    self.next_seq = created.next_sequence_id;
                }
                self.epoch += 1;
                if created.topic_epoch.is_some() {
                    self.topic_epoch = created.topic_epoch;
                }
                if let Some(conn) = &self.entity.conn {
                    self.ctx.max_message_size =
                        FrameContext::limit_for(&self.ctx.sealer, conn.info().max_message_size);
                }
                // Messages from now on carry the version the broker names now; pending ones
                // are re-sent as encoded (like upstream's re-sent buffers).
                self.ctx.schema_version = created.schema_version;
                tracing::info!(topic = %self.entity.topic, pending = self.pending.messages(),
                    "producer re-created; re-sending pending messages");
                // Re-send everything not yet receipted, in sequence order, same sequence ids.
                self.unsent = self.pending.iter().map(|e| e.encoded.clone()).collect();
                self.drain_unsent();
                Ok(())
            }
            Wake::Refused(e) => {
                // Java `ProducerImpl.connectionOpened` on `ProducerBlockedQuotaExceededException`:
                // the pending messages fail with the quota error; the driver keeps retrying.
                let n = self.fail_pending(&e, SendFailure::Broker);
                tracing::warn!(topic = %self.entity.topic, failed = n, error = %e,
                    "producer re-create refused; failed the pending messages");
                self.finish_flush_waiters();
                Ok(())
            }
            Wake::Ended(e) | Wake::GroupEnded(e) => Err(e),
            Wake::Shutdown => {
                self.start_close();
                Ok(())
            }
        }
    }

    fn batches_empty(&self) -> bool {
        self.batches.as_ref().is_none_or(|b| b.is_empty())
    }

    /// Queues an encoded frame for the connection without waiting.
    fn send_frame(&mut self, frame: EncodedFrame) {
        if self.entity.conn.is_none() {
            return; // re-sent from the pending queue after the reconnect
        }
        self.unsent.push_back(frame);
        self.drain_unsent();
    }

    /// Moves unsent frames into the connection's queue while it has room.
    fn drain_unsent(&mut self) {
        let Some(conn) = self.entity.conn.clone() else {
            self.unsent.clear();
            return;
        };
        while let Some(frame) = self.unsent.front() {
            match conn.try_send_raw(frame.to_bytes()) {
                Ok(()) => {
                    self.unsent.pop_front();
                }
                Err(Some(_)) => return,
                Err(None) => {
                    self.unsent.clear();
                    self.entity
                        .lose_connection("connection closed while sending");
                    self.on_wake(Wake::Detached).ok();
                    return;
                }
            }
        }
    }

    fn on_op(&mut self, op: ProducerOp) -> Result<()> {
        match op {
            ProducerOp::Send { msg, completion } => {
                self.on_send(msg, completion);
                Ok(())
            }
            ProducerOp::Flush(tx) => {
                self.flush_all_batches();
                // Entries waiting for their frame's charge, and the sends deferred behind them,
                // come after the pending ones.
                let deferred = self.charge.deferred_seqs().map(|(_, last)| last);
                let built = self.built.out.last().map(|e| e.last_seq);
                match deferred.or(built).or_else(|| self.pending.last_seq()) {
                    None => {
                        let _ = tx.send(Ok(()));
                    }
                    Some(seq) => self.flush_waiters.push((seq, tx)),
                }
                Ok(())
            }
            ProducerOp::Close(tx) => {
                self.close_waiters.push(tx);
                self.start_close();
                Ok(())
            }
        }
    }

    /// Stops taking messages and sends what is open; the loop closes once nothing is pending.
    fn start_close(&mut self) {
        if !self.closing {
            self.closing = true;
            self.close_deadline = Some(crate::util::deadline_after(
                self.entity.core.operation_timeout(),
            ));
            self.entity
                .life
                .apply(crate::lifecycle::Event::CloseRequested);
        }
        self.flush_all_batches();
    }

    fn on_send(&mut self, msg: Outgoing, completion: Completion) {
        if self.closing {
            completion.complete(Err(Error::Closed));
            return;
        }
        let seq = match msg.extras().sequence_id {
            Some(s) => {
                self.next_seq = self.next_seq.max(s.saturating_add(1));
                s
            }
            None => {
                let s = self.next_seq;
                self.next_seq = self.next_seq.saturating_add(1);
                s
            }
        };
        if self.charge.defers() {
            // Built once the entries before it are charged (see `frame_charge`).
            self.charge.defer(msg, seq, completion);
            return;
        }
        self.build_send(msg, seq, completion);
    }

    /// Builds what the charge waited for and then the sends deferred behind it, until an
    /// entry waits again (see `frame_charge`).
    fn resume(&mut self) {
        self.dispatch();
        let mut replayed = false;
        while let Some((msg, seq, completion)) = self.charge.next_deferred() {
            self.build_send(msg, seq, completion);
            replayed = true;
        }
        // A flush or close taken meanwhile covers them: not left in an open batch.
        if replayed && (self.closing || !self.flush_waiters.is_empty()) {
            self.flush_all_batches();
        }
    }

    /// Adds message `seq` to the open batch, or builds its entry, and sends what was built.
    fn build_send(&mut self, msg: Outgoing, seq: u64, completion: Completion) {
        // Built into the task's own lists: most messages only join the open batch, and
        // then nothing is built, moved or dropped per message.
        let Built { out, failed } = &mut self.built;
        match self.batches.as_mut() {
            Some(b)
                if msg.extras().deliver_at.is_none()
                    && msg.extras().txn.is_none()
                    && !b.too_big_for_batch(&msg, self.ctx.max_message_size) =>
            {
                b.add(&self.ctx, msg, seq, completion, out, failed);
            }
            batches => {
                // Sent on its own: close open batches first to keep sequence order.
                if let Some(b) = batches {
                    b.flush(&self.ctx, out, failed);
                }
                let auto = msg.extras().sequence_id.is_none();
                let built = if self.opts.chunking {
                    super::chunker::message_entries(
                        &self.ctx,
                        self.opts.chunk_max_message_size,
                        msg,
                        seq,
                        completion,
                    )
                    .map(|entries| out.extend(entries))
                } else {
                    single_message_entry(&self.ctx, msg, seq, completion).map(|e| out.push(e))
                };
                if let Err(f) = built {
                    failed.push(f);
                    // Java `ProducerImpl.sendAsync` refuses such a message (too big, no
                    // chunking) before `msgIdGenerator++`: it takes no sequence id, so a
                    // producer whose sends were all refused so far still adopts the broker's
                    // `last_sequence_id + 1` when it re-attaches (see `Wake::Attached`).
                    if auto && self.next_seq == seq.saturating_add(1) {
                        self.next_seq = seq;
                    }
                }
            }
        }
        self.dispatch();
    }

    /// Queues and sends the entries built (`self.built`), and fails the sends that failed
    /// to build.
    fn dispatch(&mut self) {
        if self.built.out.is_empty() && self.built.failed.is_empty() {
            return; // most messages only join the open batch
        }
        let mut built = std::mem::take(&mut self.built);
        self.stats.failed(SendFailure::Rejected, built.failed.len());
        for (e, c) in built.failed.drain(..) {
            c.complete(Err(e));
        }
        // Those whose frame's charge is not had yet stay, in order (see `frame_charge`).
        let ready = self.charge.charge(&mut built.out, self.pending.is_empty());
        for entry in built.out.drain(..ready) {
            let frame = self.entity.conn.is_some().then(|| entry.encoded.clone());
            self.pending.push(entry);
            if let Some(frame) = frame {
                self.send_frame(frame);
            }
        }
        // Kept for the next entries (their room included).
        self.built = built;
    }

    fn flush_all_batches(&mut self) {
        let Built { out, failed } = &mut self.built;
        if let Some(b) = self.batches.as_mut() {
            b.flush(&self.ctx, out, failed);
        }
        self.dispatch();
    }

    fn flush_due_batches(&mut self) {
        let Built { out, failed } = &mut self.built;
        if let Some(b) = self.batches.as_mut() {
            b.flush_due(&self.ctx, Instant::now(), out, failed);
        }
        self.dispatch();
    }

    /// A SEND_RECEIPT: completes the pending head, or (ahead of it) breaks the connection
    /// like upstream `ProducerImpl.ackReceived`.
    fn on_receipt(&mut self, r: crate::proto::CommandSendReceipt) -> Result<()> {
        let partition = self.partition;
        let id = r.message_id.unwrap_or_default();
        // A receipt for the head completes it: counted before its sends complete, so that a
        // caller whose `send_and_wait` returned (on another thread) finds it in the stats,
        // like upstream's send callback, which records the stats before completing the
        // application's future.
        if let Some(e) = self.pending.head().filter(|e| e.first_seq == r.sequence_id) {
            let (n, bytes) = (e.messages(), e.encoded.len());
            let age = self.pending.age(e, Instant::now());
            self.stats
                .pending(self.pending.messages() - n, self.pending.bytes() - bytes);
            self.stats.sent(n as u64, bytes as u64, age);
        }
        let outcome = self
            .pending
            .on_receipt(r.sequence_id, |batch_index| MessageId {
                ledger_id: id.ledger_id,
                entry_id: id.entry_id,
                partition,
                batch_index: batch_index.unwrap_or(-1),
                batch_size: 0,
                first_chunk: None,
            });
        if let ReceiptOutcome::AheadOfHead { expected, got } = outcome {
            tracing::warn!(topic = %self.entity.topic, expected, got,
                "receipt ahead of the pending head; reconnecting");
            self.entity.drop_connection("receipt out of order");
            self.on_wake(Wake::Detached)?;
        }
        self.finish_flush_waiters();
        Ok(())
    }

    /// A receipt or another command (a MESSAGE is not for a producer).
    fn on_inbound(&mut self, wake: Wake) -> Result<()> {
        match wake {
            Wake::Receipt(r) => self.on_receipt(r),
            Wake::Command(frame) => self.on_command(frame),
            _ => Ok(()),
        }
    }

    /// Takes the frame boxed and moves out only the part it needs (a `BaseCommand` is several
    /// KB; moving it per receipt is a needless copy).
    fn on_command(&mut self, mut frame: Box<crate::codec::Frame>) -> Result<()> {
        let cmd = &mut frame.command;
        match Type::try_from(cmd.r#type) {
            Ok(Type::SendReceipt) => match cmd.send_receipt.take() {
                Some(r) => self.on_receipt(r),
                None => Ok(()),
            },
            Ok(Type::SendError) => {
                let e = cmd.send_error.take().unwrap_or_default();
                let code = ServerError::from_code(e.error);
                match code {
                    ServerError::TopicTerminatedError => Err(Error::TopicTerminated {
                        topic: self.entity.topic.to_string(),
                    }),
                    ServerError::NotAllowed => {
                        // That message is refused (e.g. too big); the others go on. Only when
                        // it is the head's: a refused chunk fails its whole message, and the
                        // refusals of its later chunks (same sequence id) are then stale. A
                        // batch is the head's when the id falls in its range: upstream's
                        // `recoverNotAllowedError` matches the highest sequence id of the op;
                        // the broker (`Producer.checkAndStartPublish`) answers a batch with its
                        // `highest_sequence_id`.
                        let is_head = self
                            .pending
                            .head()
                            .is_some_and(|h| (h.first_seq..=h.last_seq).contains(&e.sequence_id));
                        if is_head {
                            let error = Error::Broker {
                                code,
                                message: e.message,
                            };
                            let stats = &self.stats;
                            self.pending
                                .fail_head_counted(error, |n| stats.failed(SendFailure::Broker, n));
                        }
                        self.finish_flush_waiters();
                        Ok(())
                    }
                    _ => {
                        // Upstream `ClientCnx.handleSendError` closes the connection for any
                        // other code; reconnect and re-send. For ChecksumError Java's
                        // `recoverChecksumError` re-checks the message's checksum and re-sends on
                        // the same connection; ours is computed over an immutable buffer, so the
                        // bytes were damaged on the way and a fresh connection is the recovery.
                        tracing::warn!(topic = %self.entity.topic, ?code, message = %e.message,
                            "send error; reconnecting");
                        self.entity.drop_connection("send error");
                        self.on_wake(Wake::Detached)
                    }
                }
            }
            _ => {
                tracing::debug!(topic = %self.entity.topic, command = cmd.r#type,
                    "ignored producer command");
                Ok(())
            }
        }
    }

    /// Java `ProducerImpl`'s send-timeout task (`run(Timeout)`): once the oldest pending
    /// message has waited `send_timeout`, every pending message fails with the timeout, not
    /// only the expired ones (`failPendingMessages`, which also discards the batch being built),
    /// so an application that retries cannot reorder its messages behind younger ones that
    /// then succeed. The producer goes on with the next messages (sequence ids are not reused).
    fn check_send_timeout(&mut self) {
        let timeout = self.opts.send_timeout;
        if timeout.is_zero() || !self.pending.head_timed_out(Instant::now(), timeout) {
            return;
        }
        let error = Error::Timeout {
            operation: "send",
            after: timeout,
        };
        let n = self.fail_pending(&error, SendFailure::Timeout);
        tracing::warn!(topic = %self.entity.topic, failed = n, "send timeout; failed every pending message");
        self.finish_flush_waiters();
    }

    /// Fails every pending message (in sequence order) and then those of the open batch with
    /// `error`, counted as `kind` before their sends complete; returns how many. Java
    /// `ProducerImpl.failPendingMessages` (with `failPendingBatchMessages`): the one way the
    /// pending messages fail at once, used by the send timeout, a create refused for the
    /// backlog quota, and the producer's end.
    fn fail_pending(&mut self, error: &Error, kind: SendFailure) -> usize {
        // Frames not yet handed to the connection belong to pending entries: not sent now.
        self.unsent.clear();
        let stats = &self.stats;
        let mut n = self.pending.fail_all(error, |n| stats.failed(kind, n));
        let mut failed = Vec::new();
        // Entries waiting for their frame's charge come before the open batch's, the sends
        // deferred behind them after it.
        let mut out = std::mem::take(&mut self.built.out);
        let (paid, deferred) = self.charge.reset();
        self.pending.release(paid);
        if let Some(b) = self.batches.as_mut() {
            b.flush(&self.ctx, &mut out, &mut failed);
        }
        failed.extend(deferred.into_iter().map(|(_, _, c)| (error.clone(), c)));
        let open = failed.len() + out.iter().map(InFlight::messages).sum::<usize>();
        self.stats.failed(kind, open);
        for (_, c) in failed {
            c.complete(Err(error.clone()));
        }
        for entry in out {
            // What it holds goes back before its sends complete (as when it leaves the queue).
            self.pending.release(entry.reserved);
            entry.senders.fail(error);
        }
        n += open;
        self.stats
            .pending(self.pending.messages(), self.pending.bytes());
        n
    }

    fn finish_flush_waiters(&mut self) {
        let head = (self.pending.head().map(|e| e.first_seq))
            .or_else(|| self.built.out.first().map(|e| e.first_seq))
            .or_else(|| self.charge.deferred_seqs().map(|(first, _)| first));
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
        let state = self.entity.end(&error);
        if !matches!(error, Error::Closed) {
            tracing::warn!(topic = %self.entity.topic, %error, %state, "producer closed");
        }
        // Set once: this is the task's end.
        let _ = self.terminal.set(error.clone());
        self.fail_pending(&error, SendFailure::Closed);
        self.stats.closed();
        for (_, tx) in self.flush_waiters.drain(..) {
            let _ = tx.send(Err(error.clone()));
        }
        // close() reports what really happened: Ok for a close of ours, else the error that
        // ended the producer (e.g. closed for good by the broker during the close).
        let close_result = match (&error, self.close_outcome.take().map(|e| *e)) {
            (Error::Closed, None) => Ok(()),
            (Error::Closed, Some(unconfirmed)) => Err(unconfirmed),
            (e, _) => Err(e.clone()),
        };
        for tx in self.close_waiters.drain(..) {
            let _ = tx.send(close_result.clone());
        }
        // Later sends fail with the same error.
        self.ops.close();
        while let Some(op) = self.ops.try_recv() {
            match op {
                ProducerOp::Send { completion, .. } => completion.complete(Err(error.clone())),
                ProducerOp::Flush(tx) => {
                    let _ = tx.send(Err(error.clone()));
                }
                ProducerOp::Close(tx) => {
                    let _ = tx.send(close_result.clone());
                }
            }
        }
    }
}
