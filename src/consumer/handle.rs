//! What a consumer's handles hold of each partition task: its identity, the few fields the
//! hot path reads without a message (queue room, epochs, state), the few the handles write
//! (each justified where it is declared), and the task's inbox, through which every other
//! change goes as an op.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::consumer::engine::flow::room::QueueRoom;
use crate::consumer::op::{ConsumerOp, OpSender};
use crate::inbox::Closed;
use crate::message_id::MessageId;

/// What a partition's task and the consumer's handles (`Consumer`, `Acker`, the registry)
/// share. The task owns its state; this holds only what cannot go as an op, in four kinds:
///
/// 1. **Identity**, fixed at creation: no synchronisation (`partition`, `main`, `topic`,
///    `base`, `durable`, `refill_at`, `ops`, `ended`).
/// 2. **Written by the task, read by the handles without a message** (lock-free where the
///    hot path reads them): the epochs (`epoch`, `permit_epoch`, `end_epoch`), the state
///    (`state`, `state_now`), `active`, `reached_end`, `topic_deleted`, `discarded`.
/// 3. **Written by the handles, read by the task.** Each says why it is no op: `room` (flow
///    and queue accounting, one lock per message), `stats` (counters of the hot path),
///    `last_dequeued` (a non-durable subscription's position, read under the lock a new
///    epoch takes). Everything else the handles tell the task (acks, negative acks,
///    redeliveries, flow permits, seek, last message id, unsubscribe, close) goes as a
///    [`ConsumerOp`] through `ops`.
/// 4. **Between the handles only** ([`HandleSide`]): flags one handle sets and another reads
///    (`end_taken`, `removed`, `close_gate`). The task never reads them: they are here only
///    because the registry holds each partition as this struct.
///
/// The hot path (`Consumer::recv`) takes one lock per message (`room`), plus
/// `last_dequeued` on a non-durable subscription only, as before.
#[derive(Debug)]
pub(crate) struct PartitionShared {
    // 1. Identity.
    /// The partition index (-1 for a non-partitioned topic).
    pub partition: i32,
    /// Whether it is a partition of the consumer's topic (not of its retry topic).
    pub main: bool,
    /// The topic this task subscribes (a partition's own name for a partitioned topic).
    pub topic: crate::topic::TopicName,
    /// The topic the application asked for that this task serves (its main topic, also for
    /// the tasks of its retry topic): routes a multi-topic consumer's acks and retries.
    pub base: crate::topic::TopicName,
    /// Whether the subscription is durable (then `last_dequeued` is not kept).
    pub durable: bool,
    /// Permits are granted once this many messages were taken (half the receiver queue; 0
    /// for a zero-size receiver queue: never, see `flow::zero`).
    pub refill_at: u32,
    /// The task's inbox: every change of the handles that is not listed below.
    pub ops: OpSender,
    /// Woken when `topic_deleted` is set (a pattern consumer's discovery listens); shared by
    /// every task of the consumer.
    pub ended: Arc<tokio::sync::Notify>,

    // 2. Written by the task, read by the handles.
    /// The task's epoch (bumped on a reconnect, seek, redeliver-all): the handle discards
    /// items of another one. Read for every message.
    pub epoch: AtomicU64,
    /// The cluster generation of the current subscription (see [`crate::pool::Cluster`]): a
    /// message received in another is not acked here, where its id names another message.
    pub cluster: AtomicU64,
    /// The client's cluster generation now (the pool's cell): a message received in an
    /// earlier one is never acked, even before this partition has re-subscribed.
    pub client_cluster: Arc<AtomicU64>,
    /// The epoch at which the current subscription's permit accounting began. A discarded
    /// item of an epoch at or after it used this subscription's permits: the handle counts it
    /// as consumed (upstream `messageProcessed` on a stale-epoch message), so its permit comes
    /// back. Items from before it belonged to a subscription that is gone.
    pub permit_epoch: AtomicU64,
    /// The epoch from which an end-of-topic notice counts: one queued before a seek is
    /// dropped (the seek moved the consumer away from the end).
    pub end_epoch: AtomicU64,
    /// The partition consumer's lifecycle state (written by its entity driver).
    pub state: crate::lifecycle::StateNow,
    /// The same state, read without a lock (every ack checks it).
    pub state_now: crate::lifecycle::StateNow,
    /// Failover: whether this consumer is the active one (None until the broker says). The
    /// task sends; `Consumer::active_updates` subscribes.
    pub active: tokio::sync::watch::Sender<Option<bool>>,
    /// Set once the broker said REACHED_END_OF_TOPIC (Java `ConsumerImpl.setTerminated`: a
    /// flag only; the consumer stays attached and usable).
    pub reached_end: std::sync::atomic::AtomicBool,
    /// Set when the task ended because its topic was deleted (a pattern consumer's topic):
    /// it no longer counts in the consumer's state, and discovery drops it.
    pub topic_deleted: std::sync::atomic::AtomicBool,
    /// Entries discarded because they could not be decoded (read by `Consumer::stats`).
    pub discarded: AtomicU64,

    // 3. Written by the handles, read by the task.
    /// This partition's share of the queue. Written by the task as it queues items and by the
    /// handle as it takes them (one lock per message for room, flow permits and the ack
    /// timeout's count): an op per message would cost more than the message (issue #18).
    pub room: Mutex<QueueRoom>,
    /// The last message the application took (kept for a non-durable subscription only, which
    /// resumes after it when subscribed again; a durable one resumes where the broker says).
    /// Written by the handle as it hands a message out, read by the task when the epoch
    /// changes, under one lock with the epoch check (see [`PartitionShared::new_epoch`]). An
    /// op would not do: the task builds the re-subscribe (its start position) the moment the
    /// connection is lost, while an op with the last id handed out may still wait in the
    /// inbox, and the reader would resume before a message it already handed out (delivered
    /// twice: the race this lock fixed).
    pub last_dequeued: Mutex<Option<MessageId>>,
    /// Statistics: counters written by both sides (the handle counts what it hands out, on
    /// the hot path), read by `Consumer::stats` and the metrics facade.
    pub stats: crate::stats::ConsumerCounters,
    // 4. Between the handles only.
    /// Flags the handles share about this partition (see [`HandleSide`]).
    pub handles: HandleSide,
}

/// What the consumer's handles share about one partition, that its task never reads (kind 4
/// of [`PartitionShared`]): no op carries them, because the task has nothing to do with them.
#[derive(Debug, Default)]
pub(crate) struct HandleSide {
    /// Set by `Consumer` when it took this partition's end-of-topic notice out of the queue;
    /// read by `Consumer` (is every partition at the end?). The task keeps its own flag (one
    /// notice queued per position: `Intake::end_queued`), so it no longer reads this one.
    pub end_taken: std::sync::atomic::AtomicBool,
    /// Set by the registry when the task left the consumer (a pattern consumer's topic
    /// removed): `Consumer` discards its messages still queued, including those of the entry
    /// it is handing out (it holds the partition, not its index, so it cannot look it up
    /// again without a registry lock per message). The removed topic's task is closed.
    pub removed: std::sync::atomic::AtomicBool,
    /// Whether acks are refused because `close()` began (see [`CloseGate`]): written by
    /// `Consumer::close`, read by every `Acker` clone on each ack. A flag, not an op, because
    /// it must hold from the moment `close` is called, before its Close op found room in the
    /// inbox, and the task is not who refuses the ack: the `Acker` returns the error itself.
    pub close_gate: CloseGate,
}

impl PartitionShared {
    /// Counts `n` messages as consumed for flow control; returns the permits to grant now
    /// (once half the receiver queue is due).
    pub(crate) fn consume(&self, n: u32, refill_at: u32) -> Option<u32> {
        self.room().consume(n, refill_at)
    }

    pub(crate) fn room(&self) -> std::sync::MutexGuard<'_, QueueRoom> {
        self.room.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn last_dequeued(&self) -> std::sync::MutexGuard<'_, Option<MessageId>> {
        self.last_dequeued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a new epoch (a reconnect, a seek, a redeliver-all): the handle discards what
    /// was queued before it. Returns the new epoch and the last message the application took
    /// (cleared first with `forget_last`: a seek).
    ///
    /// Done under the `last_dequeued` lock, which the handle of a non-durable subscription
    /// holds from its epoch check until it has recorded the message it hands out: so the id
    /// returned is exactly where the application is. A message handed out is in it; one not
    /// handed out yet is discarded and sent again by the broker. (With the epoch bumped
    /// between the handle's check and its record, a reader resumed before a message it then
    /// also delivered: twice. Upstream's `clearReceiverQueue` has the same window.)
    pub(crate) fn new_epoch(&self, forget_last: bool) -> (u64, Option<MessageId>) {
        let mut last = self.last_dequeued();
        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        if forget_last {
            *last = None;
        }
        (epoch, *last)
    }

    /// The handle took a counted item of `epoch` out of the queue; returns the permits to
    /// grant now. An item of the current subscription counts as consumed (upstream
    /// `messageProcessed`, also for a stale-epoch message); one of an older subscription frees
    /// room the current one was not granted yet.
    ///
    /// `message`: the item is a message (the task numbered it for the ack timeout, see
    /// `unacked`), not a discarded entry's error item (which the task does not number:
    /// counting it would start the clock of the next message while it is still queued).
    pub(crate) fn taken(&self, epoch: u64, refill_at: u32, message: bool) -> Option<u32> {
        // One lock per message for all of the handle's bookkeeping (room, ack-timeout count,
        // flow permits): each was an atomic read-modify-write of its own (issue #18).
        let mut room = self.room();
        room.queued = room.queued.saturating_sub(1);
        room.taken += u64::from(message);
        let credit = if epoch >= self.permit_epoch.load(Ordering::Acquire) {
            true
        } else if room.withheld > 0 {
            room.withheld -= 1;
            true
        } else {
            false
        };
        if credit {
            room.consume(1, refill_at)
        } else {
            None
        }
    }
}

impl PartitionShared {
    /// Acks `id` (an individual ack). `Err` once the task is gone.
    #[inline]
    pub(crate) fn send_ack(&self, id: MessageId) -> Result<(), Closed> {
        self.ops.fold(|f| f.push_ack(id))
    }

    /// Sends an ack, negative ack, redelivery or flow permit to the task, after the ops made
    /// before it; never waits. `Err` once the task is gone.
    pub(crate) fn send_op(&self, op: ConsumerOp) -> Result<(), Closed> {
        debug_assert!(op.folds(), "a control op waits for room: {op:?}");
        if op.folds() {
            self.ops.fold(|f| f.push(op))
        } else {
            // Not reached (see the assertion): queued if there is room, as a control op.
            self.ops.try_send(op).map_err(|_| Closed)
        }
    }

    /// Sends a control op (seek, last message id, unsubscribe, close) to the task, after the
    /// ops made before it, waiting for room. Dropped while waiting, nothing was sent. `Err`
    /// once the task is gone.
    pub(crate) async fn send_control(&self, op: ConsumerOp) -> Result<(), Closed> {
        if op.folds() {
            return self.ops.fold(|f| f.push(op));
        }
        self.ops.send(op).await.map_err(|_| Closed)
    }
}

/// Refuses acks from the start of `Consumer::close` (Java `ConsumerImpl.closeAsync` sets the
/// state to Closing first, and acks on a closing consumer fail), instead of folding them in
/// behind the Close op, to be dropped with the task once the CloseConsumer went out.
///
/// Counts the closes waiting for room for their Close op, plus a mark once one was queued
/// (for good: the task closes). A `close()` future dropped while its op still waited (see
/// [`CloseAttempt`]) closed nothing, and takes its count back: acks are taken again.
#[derive(Debug, Default)]
pub(crate) struct CloseGate(AtomicU32);

/// Set in [`CloseGate`] once a Close op was queued.
const CLOSE_QUEUED: u32 = 1 << 31;

impl CloseGate {
    /// Whether acks are refused.
    pub(crate) fn refuses(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

/// One `close()`'s hold on a partition's [`CloseGate`], from its first poll until its Close
/// op is queued (or dropped with the future, unqueued).
#[derive(Debug)]
pub(crate) struct CloseAttempt {
    part: Arc<PartitionShared>,
    /// The Close op was queued (or the task was gone): the gate stays shut.
    done: bool,
}

impl CloseAttempt {
    /// Shuts `part`'s gate until this attempt is queued or dropped.
    pub(crate) fn begin(part: Arc<PartitionShared>) -> Self {
        part.handles.close_gate.0.fetch_add(1, Ordering::AcqRel);
        CloseAttempt { part, done: false }
    }

    /// The partition this attempt closes.
    pub(crate) fn part(&self) -> &Arc<PartitionShared> {
        &self.part
    }

    /// The Close op was queued, or could not be (the task is gone): the gate stays shut for
    /// good.
    pub(crate) fn queued(mut self) {
        let gate = &self.part.handles.close_gate.0;
        gate.fetch_or(CLOSE_QUEUED, Ordering::AcqRel);
        gate.fetch_sub(1, Ordering::AcqRel);
        self.done = true;
    }
}

impl Drop for CloseAttempt {
    fn drop(&mut self) {
        if !self.done {
            self.part
                .handles
                .close_gate
                .0
                .fetch_sub(1, Ordering::AcqRel);
        }
    }
}
