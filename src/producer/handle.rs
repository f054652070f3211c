//! The handle of one partition's (or a non-partitioned topic's) producer task: what
//! [`Producer`](super::Producer) calls to queue a message, flush or close.
//!
//! A send takes, in this order, a slot of `max_pending_messages` (when set), the message's
//! share of the client memory limit (upstream `ProducerImpl.canEnqueueRequest` takes them in
//! that order too), and room in the task's queue; it gets its receipt as it is queued, under
//! the queue's lock, and from then on holds the permits as counts (see `limits`). The common
//! case has room everywhere and is done synchronously by [`PartitionProducer::try_send`] (a
//! CAS per semaphore, the queue's included, and one lock to queue it), with no future to
//! build, move and drop. When something is full, [`PartitionProducer::send_waiting`] waits
//! for it and then for the rest, in the same order (with `block_if_queue_full`; without it a
//! full limit fails the send, and what it took goes back), keeping what the fast path took,
//! as upstream keeps its slot while it waits for memory: given back, what it took could go to
//! another send before it is taken again (the waiting future may yield as it takes it, or
//! another thread's send take it in between), and a later send would then get ahead of it,
//! or a send without `block_if_queue_full` wait for a limit. tokio's semaphores hand released
//! permits to queued waiters first, so trying first never overtakes a waiting send.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::{oneshot, watch, Semaphore, TryAcquireError};

use crate::connection::EntityKind;
use crate::core::CoreRef;
use crate::entity::Entity;
use crate::error::{Error, QueueLimit, Result};
use crate::lifecycle::{GroupClose, StateNow};
use crate::topic::TopicName;

use super::batch_container::{BatchContainer, FrameContext};
use crate::inbox::TrySendError;

use super::create;
use super::limits::{slot_count, Held, Limits, Reservation};
use super::pending::{Outgoing, PendingQueue};
use super::queueing::{inbox, send_message, OpSender};
use super::receipt::{Receipts, SendFuture};
use super::task::{ProducerOp, ProducerTask};
use super::ProducerOptions;

/// What [`PartitionProducer::try_send`] did.
#[derive(Debug)]
pub(super) enum Queued {
    Done(SendFuture),
    /// Something was full: the message, to queue with [`PartitionProducer::send_waiting`].
    /// Boxed: rare, and it keeps what the fast path returns small to move.
    Wait(Box<Waiting>),
}

/// A send that must wait for room.
#[derive(Debug)]
pub(super) struct Waiting {
    msg: Outgoing,
    /// Where it must wait, with what it holds already.
    from: Step,
}

/// The first thing a waiting send must wait for; it keeps what it took before.
#[derive(Debug)]
enum Step {
    /// A slot of `max_pending_messages` (then memory, then room).
    Slot,
    /// Memory, holding its slot (if the producer has a count limit): as upstream's
    /// `canEnqueueRequest`, which keeps the slot it took while it waits for memory. Given
    /// back, the slot would be taken again by a future that can yield as it takes it (its
    /// coop budget spent), before it gets in line for memory: a later send would then get
    /// the memory first.
    Memory(Held),
    /// Room in the task's queue, holding everything else.
    Room(Held),
}

/// The receipt backlog bound of a producer without a `max_pending_messages` limit.
const UNLIMITED_PENDING_RECEIPT_BOUND: usize = 1_000_000;

/// A handle to one partition's (or a non-partitioned topic's) producer task.
#[derive(Debug)]
pub(super) struct PartitionProducer {
    pub(super) name: String,
    ops: OpSender,
    /// What the producer's messages take while pending.
    limits: Arc<Limits>,
    memory_limit: usize,
    /// What every unbatched message of this producer carries besides its payload and own
    /// metadata, counted against the memory limit with it (see [`Self::memory_bytes`]); 0 for
    /// a batching producer, whose built entries are charged it instead (`frame_charge`).
    per_message: usize,
    /// `max_pending_messages` (0: none), for the error that says it was reached.
    max_pending: usize,
    block: bool,
    /// Set once by the task when the producer ended for good.
    terminal: Arc<OnceLock<Error>>,
    pub(super) state: crate::lifecycle::StateNow,
    /// The same state, read without a lock on every send.
    state_now: StateNow,
    /// Whether the client is closing (sends are refused at once from then on).
    shutdown: watch::Receiver<bool>,
    /// `shutdown`'s value when this handle subscribed.
    shutdown_at_start: bool,
    pub(super) partition: i32,
    pub(super) stats: Arc<crate::stats::ProducerCounters>,
}

impl PartitionProducer {
    /// Creates the producer of one partition (or of a non-partitioned topic). `shared_name`:
    /// the name the first partition's producer got from the broker, for the other partitions
    /// of a producer whose application set none (sent as not user-provided).
    pub(super) async fn create(
        client: &CoreRef,
        topic: TopicName,
        partition: i32,
        options: &Arc<ProducerOptions>,
        group: &GroupClose,
        shared_name: Option<&str>,
    ) -> Result<PartitionProducer> {
        let producer_id = client.new_producer_id();
        let cmd = create::create_command(
            topic.as_str(),
            producer_id,
            options.name.as_deref().or(shared_name),
            0,
            None,
            options,
            client.transactions_enabled(),
        );
        let slot = crate::entity::Slot {
            kind: EntityKind::Producer,
            id: producer_id,
            // One receipt per entry in flight: with a count limit, a backlog beyond it (plus
            // slack) is a broker sending what was never asked for. Without one only the memory
            // limit caps the entries in flight, so the bound is generous; receipts travel
            // without their BaseCommand envelope (~100 bytes each), so it holds ~100 MB at most.
            // A chunked message has one receipt per chunk, so with chunking only the memory
            // limit bounds them.
            inbound_bound: if options.max_pending_messages > 0 && !options.chunking {
                options.max_pending_messages.saturating_add(1024)
            } else {
                UNLIMITED_PENDING_RECEIPT_BOUND
            },
            // Sent receipts, never messages.
            inbound_bytes: usize::MAX,
        };
        let (entity, response) = Entity::create(client, topic.clone(), slot, cmd, group).await?;
        let created = create::Created::parse(*response, options.name.as_deref())?;
        let max_message_size = entity
            .conn
            .as_ref()
            .map_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE, |c| {
                c.info().max_message_size
            });
        let limits = Arc::new(Limits {
            memory: client.memory.clone(),
            slots: (options.max_pending_messages > 0)
                .then(|| Arc::new(Semaphore::new(options.max_pending_messages))),
            consumers: Some(client.consumer_share.clone()),
        });
        let (ops_tx, ops_rx) = inbox(Receipts::new(partition, limits.clone()));
        let terminal = Arc::new(OnceLock::new());
        #[cfg(feature = "encryption")]
        let sealer = options.encryptor.clone();
        #[cfg(not(feature = "encryption"))]
        let sealer = ();
        let ctx = FrameContext {
            producer_id,
            producer_name: created.name.clone(),
            compression: options.compression,
            max_message_size: FrameContext::limit_for(&sealer, max_message_size),
            schema_version: created.schema_version.clone(),
            sealer,
        };
        tracing::debug!(%topic, producer_id, name = %created.name,
            next_sequence_id = created.next_sequence_id, "producer created");
        let state = entity.life.now();
        let entity_state_now = entity.life.now();
        let stats = Arc::new(crate::stats::ProducerCounters::new(
            entity.link.clone(),
            client.metric_labels,
            &topic,
        ));
        // What every frame carries besides its messages: charged per message unbatched (each
        // is a frame of its own), per built entry when batching (see `frame_charge`).
        let name_bytes = frame_name_bytes(&created.name, created.schema_version.as_ref());
        let task = ProducerTask {
            entity,
            partition,
            opts: options.clone(),
            ctx,
            unsent: Default::default(),
            ops: ops_rx,
            next_seq: created.next_sequence_id,
            epoch: 0,
            topic_epoch: created.topic_epoch,
            pending: PendingQueue::new(limits.clone()),
            batches: options.batching.clone().map(BatchContainer::new),
            built: Default::default(),
            charge: super::frame_charge::FrameCharge::new(
                if options.batching.is_some() {
                    name_bytes
                } else {
                    0
                },
                limits.memory.clone(),
                client.memory_limit,
            ),
            flush_waiters: Vec::new(),
            close_waiters: Vec::new(),
            closing: false,
            close_deadline: None,
            close_outcome: None,
            terminal: terminal.clone(),
            stats: stats.clone(),
        };
        let span = tracing::debug_span!("producer", topic = %topic, id = producer_id, name = %created.name);
        tokio::spawn(tracing::Instrument::instrument(task.run(), span));
        let shutdown = client.shutdown_signal();
        let shutdown_at_start = *shutdown.borrow();
        let state_now = entity_state_now;
        let per_message = if options.batching.is_some() {
            0
        } else {
            name_bytes
        };
        Ok(PartitionProducer {
            name: created.name,
            ops: ops_tx,
            limits,
            memory_limit: client.memory_limit,
            per_message,
            max_pending: options.max_pending_messages,
            block: options.block_if_queue_full,
            terminal,
            state,
            state_now,
            shutdown,
            shutdown_at_start,
            partition,
            stats,
        })
    }

    /// Whether sends are refused: this producer or the whole client is closing or closed.
    fn refusing(&self) -> bool {
        // Neither read takes a lock (issue #18): the state through its lock-free snapshot;
        // the client's shutdown flag through its watch's version (`has_changed`, one atomic
        // load), its value read only once it changed (once, at the client's close).
        if self.state_now.get().refuses_work() {
            return true;
        }
        match self.shutdown.has_changed() {
            Ok(false) => self.shutdown_at_start,
            _ => *self.shutdown.borrow(),
        }
    }

    fn closed_error(&self) -> Error {
        self.terminal.get().cloned().unwrap_or(Error::Closed)
    }

    /// Queues `msg` if there is room for it everywhere, without waiting; otherwise gives back
    /// what it took and says it must wait (with `block_if_queue_full`; without it a full
    /// limit fails the send).
    pub(super) fn try_send(&self, msg: Outgoing) -> Result<Queued> {
        if let Some(e) = self.terminal.get() {
            return Err(e.clone());
        }
        // Refused at once while closing (this producer or the whole client), like upstream's
        // `isValidProducerState`: such a message could only fail later.
        if self.refusing() {
            return Err(self.closed_error());
        }
        let slot = match &self.limits.slots {
            None => None,
            Some(limit) => match limit.try_acquire() {
                Ok(p) => Some(p),
                Err(TryAcquireError::NoPermits) if self.block => {
                    let from = Step::Slot;
                    return Ok(Queued::Wait(Box::new(Waiting { msg, from })));
                }
                Err(TryAcquireError::Closed) if self.block => return Err(Error::Closed),
                Err(_) => return Err(self.slots_full()),
            },
        };
        let memory = match self.limits.memory.try_acquire_many(self.memory_bytes(&msg)) {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) if self.block => {
                let from = Step::Memory(Held::new(self.limits.clone(), slot_count(slot)));
                return Ok(Queued::Wait(Box::new(Waiting { msg, from })));
            }
            Err(TryAcquireError::Closed) if self.block => return Err(Error::Closed),
            Err(_) => return Err(self.memory_full()),
        };
        let room = match self.ops.try_room() {
            Ok(room) => room,
            Err(TrySendError::Full(())) => {
                // Kept while it waits for room (see the module docs).
                let held = Held::new(self.limits.clone(), Reservation::of(memory, slot));
                let from = Step::Room(held);
                return Ok(Queued::Wait(Box::new(Waiting { msg, from })));
            }
            Err(TrySendError::Closed) => return Err(self.closed_error()),
        };
        match send_message(&self.ops, room, msg, || Reservation::of(memory, slot)) {
            Ok(receipt) => Ok(Queued::Done(receipt)),
            Err(_) => Err(self.closed_error()),
        }
    }

    /// Queues `msg` once there is room for it everywhere, waiting for each in turn (after
    /// [`try_send`](Self::try_send) found something full). Dropped before it completes, the
    /// message was not queued (what it held is given back).
    pub(super) async fn send_waiting(self: Arc<Self>, waiting: Box<Waiting>) -> Result<SendFuture> {
        let Waiting { msg, from } = *waiting;
        let held = match from {
            Step::Room(held) => held,
            Step::Memory(held) => self.take_memory(&msg, held).await?,
            Step::Slot => {
                let slot = match &self.limits.slots {
                    None => None,
                    Some(limit) => Some(limit.acquire().await.map_err(|_| Error::Closed)?),
                };
                let held = Held::new(self.limits.clone(), slot_count(slot));
                self.take_memory(&msg, held).await?
            }
        };
        // Dropped here (cancelled, or the task ended), `held` gives its counts back.
        let room = self.ops.room().await.map_err(|_| self.closed_error())?;
        send_message(&self.ops, room, msg, || held.take()).map_err(|_| self.closed_error())
    }

    /// Waits for `msg`'s memory, then holds it with `held`.
    async fn take_memory(&self, msg: &Outgoing, mut held: Held) -> Result<Held> {
        let memory = self
            .limits
            .memory
            .acquire_many(self.memory_bytes(msg))
            .await
            .map_err(|_| Error::Closed)?;
        held.add(Reservation::of(memory, None));
        Ok(held)
    }

    /// The client memory a message holds while pending: its payload, its own metadata (key,
    /// ordering key, properties) and, unbatched, the producer name and schema version its
    /// frame carries (`per_message`); at least 1 byte, at most the whole limit, so it can
    /// always be had eventually.
    #[inline]
    fn memory_bytes(&self, msg: &Outgoing) -> u32 {
        (msg.payload.len() + msg.metadata_len() + self.per_message).clamp(1, self.memory_limit)
            as u32
    }

    fn memory_full(&self) -> Error {
        Error::ProducerQueueFull {
            limit: QueueLimit::MemoryLimit {
                bytes: self.memory_limit,
            },
        }
    }

    fn slots_full(&self) -> Error {
        Error::ProducerQueueFull {
            limit: QueueLimit::MaxPendingMessages {
                max: self.max_pending,
            },
        }
    }

    pub(super) async fn flush(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(ProducerOp::Flush(tx))
            .await
            .map_err(|_| self.closed_error())?;
        rx.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    /// Closes this partition's producer: Ok once closed by us (now or before), else the error
    /// that ended it (e.g. closed for good by the broker).
    pub(super) async fn close(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let ended = |e: Error| match e {
            Error::Closed => Ok(()),
            e => Err(e),
        };
        if self.ops.send(ProducerOp::Close(tx)).await.is_err() {
            return ended(self.closed_error());
        }
        rx.await.unwrap_or_else(|_| ended(self.closed_error()))
    }
}

/// The bytes every frame of a producer carries in its metadata besides what the application
/// gave its messages: the producer name (the broker's, at most `MAX_PRODUCER_NAME`, or the
/// application's, any length) and the schema version (at most `MAX_SCHEMA_VERSION`), as
/// attached (issue #31: a broker naming the producer with megabytes made every pending
/// message carry them, uncounted). An unbatched message is charged them when sent (it is a
/// frame of its own); a batching producer's entries when built (`frame_charge`: a batch of
/// many carries one copy, a batch of one its own). Java's `ProducerImpl.sendAsync` reserves
/// only the payload's `readableBytes()` (`canEnqueueRequest(.., uncompressedSize)`); this
/// counts what the pending frames hold. A schema version that changes on a re-attach (at
/// most `MAX_SCHEMA_VERSION` bytes) is not re-counted.
fn frame_name_bytes(name: &str, schema_version: Option<&Bytes>) -> usize {
    name.len() + schema_version.map_or(0, Bytes::len)
}
