//! The channel from a connection to one registered entity (producer, consumer, watcher).
//!
//! The broker decides how much goes into it, so it is bounded by what the entity can
//! legitimately be sent: a consumer's flow permits (plus the overshoot tolerated from real
//! dispatchers), a producer's pending messages. The connection never waits on it for room in
//! frames: a broker that fills it beyond the bound breaks the protocol, and the connection
//! closes with an error naming the violation, so the entities reconnect and the broker
//! redelivers.
//!
//! A consumer's channel is bounded in bytes too, by back-pressure rather than by a violation:
//! past its byte allowance ([`consumer_channel`]) the connection stops reading its socket until
//! the consumer task has taken the frames out (see [`Backpressure`]). Messages within the
//! flow permits may legitimately be large (a size jump after small ones), so the bytes cannot
//! be a broker's violation; the allowance only slows a socket reader running ahead of its
//! consumer task, which always drains its channel into its queue, where the byte budget and
//! the flow-control checks apply.
//!
//! Every producer and consumer holds one, idle or not, so an idle one costs a single small
//! allocation (issue #39): the crate's lazily allocating queue ([`crate::util::lazy_queue`]),
//! with the bounds, the byte allowance and its back-pressure kept here beside it.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

pub(crate) use crate::util::lazy_queue::TryRecvError;
use crate::util::lazy_queue::{self, Retain};

use super::{EntityEvent, MessageFrame};
use crate::codec::Inbound;
use crate::error::Error;

/// A channel whose sender refuses commands beyond `bound` not yet taken by the receiver (with
/// no byte allowance: [`consumer_channel`] with `usize::MAX`).
#[cfg(test)]
pub(crate) fn entity_channel(bound: usize) -> (EntitySender, EntityReceiver) {
    channel(bound, usize::MAX, None)
}

/// A consumer's channel: bounded by `bound` commands (a broker past it breaks flow control, as
/// `entity_channel`) and by `bytes` of the MESSAGE frames it holds not yet taken (their wire
/// size plus what a frame costs in memory, [`message_cost`]), by back-pressure: a delivery
/// that leaves it holding more than `bytes` asks the connection to stop reading until the
/// receiver has taken it back to `bytes` or less ([`Delivery::Full`]). So it holds at most
/// `bytes` plus one frame (of at most the broker's maximum message size).
///
/// Upstream has no queue here: `ClientCnx.handleMessage` hands each message to
/// `ConsumerImpl.messageReceived` on the connection's event loop, so a consumer slow to take a
/// message in stalls the connection's reads the same way (Netty reads no more from a channel
/// whose event loop is busy; `ClientCnx` never turns `autoRead` off). Here the connection task
/// and the consumer task are apart; the allowance keeps what sits between them bounded in
/// bytes as that synchronous hand-over does.
pub(crate) fn consumer_channel(bound: usize, bytes: usize) -> (EntitySender, EntityReceiver) {
    channel(bound, bytes, None)
}

/// Where a paused reader reads again: once the channel holds half its allowance or less (a
/// low-water mark, as Netty's write buffer has one). Resuming as soon as it is back within the
/// allowance would hand frames over one at a time while the consumer task is the bottleneck:
/// a pause, a wake-up and two locks per message.
fn resume_at(allowance: usize) -> usize {
    allowance / 2
}

/// What a MESSAGE frame holds while it waits in a channel: its wire bytes (its payload is a
/// slice of the buffer it arrived in; its metadata, decoded, about as much) and its box.
/// Counted at every delivery and every take, so it reads a figure the decoder recorded.
pub(crate) fn message_cost(m: &MessageFrame) -> usize {
    std::mem::size_of::<MessageFrame>() + m.wire_len
}

/// Where a watcher's channel takes the bytes of the commands it queues from: the client
/// memory limit (the core's consumers' share of it), never waiting.
pub(crate) trait QueueMemory: Send + Sync + std::fmt::Debug {
    /// Takes up to `n` bytes without waiting; returns how many were taken.
    fn take(&self, n: usize) -> usize;
    /// Gives back `n` bytes taken with [`take`](Self::take).
    fn give_back(&self, n: usize);
}

/// A watcher's channel (PIP-145 topic lists, PIP-247 partition updates): bounded by `bound`
/// commands and by `bytes` of them (their encoded size; one command is always taken), the
/// smaller of the two, and the bytes queued are taken from `memory` (the client memory
/// limit): a command it has no room for is past the bound too. A command past a bound is
/// dropped, not queued, and the receiver is told ([`EntityReceiver::take_dropped`]) so its
/// owner re-reads the whole state (a re-listing), as upstream does on an update whose hash
/// does not match. A broker pushing huge topic lists then costs at most `bytes`, within the
/// client's memory limit, and the connection (shared with producers and consumers) is not
/// closed over a watcher's backlog.
pub(crate) fn watcher_channel(
    bound: usize,
    bytes: usize,
    memory: Arc<dyn QueueMemory>,
) -> (EntitySender, EntityReceiver) {
    channel(bound, usize::MAX, Some((bytes, memory)))
}

fn channel(
    bound: usize,
    allowance: usize,
    bytes: Option<(usize, Arc<dyn QueueMemory>)>,
) -> (EntitySender, EntityReceiver) {
    let ext = Ext {
        queued: AtomicUsize::new(0),
        bound: bound.max(1),
        allowance,
        overflowed: AtomicBool::new(false),
        lossy: bytes.map(|(bound, memory)| Lossy {
            bound,
            memory,
            held: Mutex::new(Held::default()),
            dropped: AtomicBool::new(false),
        }),
    };
    let (tx, rx) = lazy_queue::channel(Locked::default(), ext);
    (EntitySender { tx }, EntityReceiver { rx })
}

/// The queue both ends share.
type Chan = lazy_queue::Chan<EntityEvent, Locked, Ext>;

/// What the channel keeps beside its queue, outside the lock.
#[derive(Debug)]
struct Ext {
    /// Commands, messages and receipts queued and not yet taken (not the closing event).
    queued: AtomicUsize,
    bound: usize,
    /// A consumer's byte allowance for MESSAGE frames ([`consumer_channel`]); `usize::MAX`
    /// for other channels.
    allowance: usize,
    /// Set when this entity's bound was crossed: the connection closes because of it.
    overflowed: AtomicBool,
    /// A watcher's channel: bounded in bytes too, and dropping past its bounds.
    lossy: Option<Lossy>,
}

impl lazy_queue::Owner for Ext {
    const RETAIN: Retain = Retain {
        min: RETAINED,
        max: RETAINED_BUSY,
    };
}

/// What the channel keeps beside its queue, under the queue's lock.
#[derive(Debug, Default)]
struct Locked {
    /// The [`message_cost`] of the MESSAGE frames queued.
    message_bytes: usize,
    /// The connection stopped reading until `message_bytes` is back to half the allowance
    /// ([`Backpressure`], [`resume_at`]): woken then.
    reader: Option<Waker>,
}

/// What an emptied queue keeps of its storage at least: a burst (up to the bound: a
/// consumer's permits and overshoot, a producer's pending messages) grew it, and an idle
/// entity should not hold that for the rest of its life (issue #39). A tokio mpsc, which this
/// replaced, kept about as much: its released blocks of 32 went back to the sender a few
/// times, the rest were freed.
const RETAINED: u32 = 32;

/// What an emptied queue keeps at most: the size of the recent bursts, up to this. A busy
/// entity whose bursts stay under it grows its queue once and keeps it (shrunk back to
/// [`RETAINED`] at every emptying, a burst of 1,000 reallocated ~6 times); larger bursts grow
/// from it (2 reallocations for 1,000 events) and shrink back to it. So an idle entity keeps
/// at most this many slots (~25 KB) after a burst, and [`RETAINED`] once its traffic has
/// calmed down for a few emptyings.
const RETAINED_BUSY: u32 = 8 * RETAINED;

impl Locked {
    /// `event` was queued.
    fn pushed(&mut self, event: &EntityEvent) {
        if let EntityEvent::Message(m) = event {
            self.message_bytes += message_cost(m);
        }
    }

    /// `event` was taken; the connection's reader to wake now that the message bytes are
    /// back to [`resume_at`], if it waits.
    fn taken(&mut self, event: &EntityEvent, allowance: usize) -> Option<Waker> {
        if let EntityEvent::Message(m) = event {
            self.message_bytes = self.message_bytes.saturating_sub(message_cost(m));
        }
        if self.reader.is_some() && self.message_bytes <= resume_at(allowance) {
            self.reader.take()
        } else {
            None
        }
    }
}

/// A consumer's channel past its byte allowance ([`consumer_channel`]): the connection reads
/// nothing more from its socket until [`poll_drained`](Self::poll_drained) is ready, and so
/// never waits on the channel inside its loop (a poll with a waker, not an await).
pub(crate) struct Backpressure {
    chan: Arc<Chan>,
}

impl std::fmt::Debug for Backpressure {
    /// Not what the channel holds (megabytes of messages).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backpressure")
            .field("allowance", &self.chan.ext.allowance)
            .finish_non_exhaustive()
    }
}

impl Backpressure {
    /// Ready once the receiver has taken the channel back to half its allowance or less
    /// ([`resume_at`]), or is gone.
    pub(crate) fn poll_drained(&self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let mut q = self.chan.lock();
        if q.locked.message_bytes <= resume_at(self.chan.ext.allowance) || q.receiver_gone() {
            return Poll::Ready(());
        }
        match &q.locked.reader {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => q.locked.reader = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Waits (by polling) until [`poll_drained`](Self::poll_drained) is ready.
    pub(crate) async fn drained(&self) {
        poll_fn(|cx| self.poll_drained(cx)).await
    }
}

/// The byte bound of a watcher's channel, what it holds, and whether it dropped something.
#[derive(Debug)]
struct Lossy {
    bound: usize,
    memory: Arc<dyn QueueMemory>,
    held: Mutex<Held>,
    dropped: AtomicBool,
}

/// The bytes of the commands a watcher's channel holds, and how many of them it took from
/// the memory limit: all of them, but for a command taken into an empty queue while the
/// limit had no room for it (one command is always taken).
#[derive(Debug, Default)]
struct Held {
    bytes: usize,
    charged: usize,
}

impl Lossy {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `size` bytes, into a queue holding `queued` commands: `false` (nothing taken)
    /// when they are past the byte bound or the memory limit has no room for them.
    fn admit(&self, queued: usize, size: usize) -> bool {
        let mut held = self.held();
        if queued > 0 && held.bytes.saturating_add(size) > self.bound {
            return false;
        }
        let taken = self.memory.take(size);
        if taken < size && queued > 0 {
            self.memory.give_back(taken);
            return false;
        }
        held.bytes += size;
        held.charged += taken;
        true
    }

    /// A command of `size` bytes left the queue: what it took of the memory limit goes back.
    fn release(&self, size: usize) {
        let mut held = self.held();
        held.bytes = held.bytes.saturating_sub(size);
        let over = held.charged.saturating_sub(held.bytes);
        if over > 0 {
            held.charged -= over;
            self.memory.give_back(over);
        }
    }
}

impl Drop for Lossy {
    /// Commands still queued when the channel goes give their bytes back with it.
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(|e| e.into_inner());
        self.memory.give_back(std::mem::take(&mut held.charged));
    }
}

/// The bytes a watcher's command holds while queued: its encoded size.
fn held_bytes(frame: &crate::codec::Frame) -> usize {
    use prost::Message as _;
    frame.command.encoded_len() + frame.payload.as_ref().map_or(0, |p| p.data.len())
}

/// The connection's end of an entity channel.
#[derive(Debug, Clone)]
pub(crate) struct EntitySender {
    tx: lazy_queue::Sender<EntityEvent, Locked, Ext>,
}

/// The same channel's back-pressure.
impl PartialEq for Backpressure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }
}

impl Eq for Backpressure {}

/// What became of a command handed to an entity.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    Delivered,
    /// Delivered, and the consumer's channel is now past its byte allowance: the connection
    /// reads no more until the consumer task has taken it back within it.
    Full(Backpressure),
    /// The entity is gone (its receiver dropped).
    Gone,
    /// The entity already holds `bound` commands it has not taken: the command was not
    /// delivered, and the broker is breaking flow control.
    Overflow {
        bound: usize,
    },
}

impl EntitySender {
    pub(super) fn deliver(&self, frame: Inbound) -> Delivery {
        let s = &self.tx.chan().ext;
        if let (Some(lossy), Inbound::Other(f)) = (&s.lossy, &frame) {
            // Only what becomes a command (what a watcher is sent) is counted in bytes.
            let command = f.command.message.is_none() && f.command.send_receipt.is_none();
            let size = if command { held_bytes(f) } else { 0 };
            let queued = s.queued.load(Ordering::Acquire);
            if queued >= s.bound || !lossy.admit(queued, size) {
                lossy.dropped.store(true, Ordering::Release);
                return Delivery::Delivered;
            }
        }
        if s.queued.load(Ordering::Acquire) >= s.bound {
            s.overflowed.store(true, Ordering::Release);
            return Delivery::Overflow { bound: s.bound };
        }
        s.queued.fetch_add(1, Ordering::AcqRel);
        let event = match frame {
            Inbound::Message(m) => EntityEvent::Message(m),
            Inbound::Receipt(r) => EntityEvent::Receipt(r),
            // A MESSAGE or SEND_RECEIPT the fast decode passed over (an unusual envelope):
            // delivered the same way.
            Inbound::Other(mut frame) => {
                if let Some(command) = frame.command.message.take() {
                    use prost::Message as _;
                    let wire_len = command.encoded_len()
                        + frame.payload.as_ref().map_or(0, |p| {
                            p.data.len()
                                + p.metadata.encoded_len()
                                + p.broker_entry_metadata.as_ref().map_or(0, |b| b.len())
                        });
                    EntityEvent::Message(Box::new(MessageFrame {
                        command,
                        payload: frame.payload.take(),
                        wire_len,
                    }))
                } else if let Some(receipt) = frame.command.send_receipt.take() {
                    EntityEvent::Receipt(receipt)
                } else {
                    EntityEvent::Command(frame)
                }
            }
        };
        let allowance = s.allowance;
        let pushed = self.tx.send_with(event, |l, event| {
            l.pushed(event);
            l.message_bytes > allowance
        });
        let over = match pushed {
            Ok(over) => over,
            Err(event) => {
                s.queued.fetch_sub(1, Ordering::AcqRel);
                if let (Some(lossy), EntityEvent::Command(f)) = (&s.lossy, &event) {
                    lossy.release(held_bytes(f));
                }
                return Delivery::Gone;
            }
        };
        if over {
            return Delivery::Full(Backpressure {
                chan: self.tx.chan().clone(),
            });
        }
        Delivery::Delivered
    }

    /// Tells the entity its connection is gone (never blocks; not counted: sent once).
    pub(super) fn notify_closed(&self, reason: &Error) {
        let _ = self.tx.send(EntityEvent::ConnectionClosed(reason.clone()));
    }
}

/// The entity's end of an entity channel.
#[derive(Debug)]
pub(crate) struct EntityReceiver {
    rx: lazy_queue::Receiver<EntityEvent, Locked, Ext>,
}

impl Drop for EntityReceiver {
    /// Later deliveries find the entity gone; what is queued goes now (a watcher's bytes
    /// back to the memory limit with it).
    fn drop(&mut self) {
        let (events, reader) = self.rx.close_with(|l| {
            l.message_bytes = 0;
            l.reader.take()
        });
        if let Some(w) = reader {
            w.wake();
        }
        for ev in &events {
            self.taken(Some(ev));
        }
    }
}

impl EntityReceiver {
    fn ext(&self) -> &Ext {
        &self.rx.chan().ext
    }

    /// Whether a watcher's channel dropped a command since this was last asked (see
    /// [`watcher_channel`]); always false for other channels.
    pub(crate) fn take_dropped(&self) -> bool {
        self.ext()
            .lossy
            .as_ref()
            .is_some_and(|l| l.dropped.swap(false, Ordering::AcqRel))
    }

    /// The bytes of the commands queued in a watcher's channel (0 for other channels).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.ext().lossy.as_ref().map_or(0, |l| l.held().bytes)
    }

    /// The slots of the queue's storage (0 before the first event).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.rx.chan().lock().capacity()
    }

    /// The next event; `None` once every sender is gone (the connection dropped the
    /// entity) and nothing is left. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<EntityEvent> {
        let allowance = self.ext().allowance;
        let next = poll_fn(|cx| self.rx.poll_recv_with(cx, |l, ev| l.taken(ev, allowance))).await;
        let ev = next.map(|(ev, reader)| {
            if let Some(w) = reader {
                w.wake();
            }
            ev
        });
        self.taken(ev.as_ref());
        ev
    }

    /// An event that has already arrived, without waiting.
    pub(crate) fn try_recv(&mut self) -> Result<EntityEvent, TryRecvError> {
        let allowance = self.ext().allowance;
        let ev = self
            .rx
            .try_recv_with(|l, ev| l.taken(ev, allowance))
            .map(|(ev, reader)| {
                if let Some(w) = reader {
                    w.wake();
                }
                ev
            });
        self.taken(ev.as_ref().ok());
        ev
    }

    /// Whether the broker sent this entity more than its bound, so that the connection
    /// closed because of this entity (the others on it only lost their connection).
    pub(crate) fn overflowed(&self) -> bool {
        self.ext().overflowed.load(Ordering::Acquire)
    }

    fn taken(&self, ev: Option<&EntityEvent>) {
        let ext = self.ext();
        if let Some(EntityEvent::Command(_) | EntityEvent::Message(_) | EntityEvent::Receipt(_)) =
            ev
        {
            ext.queued.fetch_sub(1, Ordering::AcqRel);
        }
        if let (Some(lossy), Some(EntityEvent::Command(f))) = (&ext.lossy, ev) {
            lossy.release(held_bytes(f));
        }
    }
}

/// A watcher's channel registered on a connection (PIP-247 partition watcher, PIP-145
/// topic-list watcher), unregistered when dropped: the one way both watchers hold their slot,
/// so no path (error, close, reconnect) leaves a stale registration behind.
pub(crate) struct WatchSlot {
    conn: super::Connection,
    kind: super::EntityKind,
    id: u64,
    /// What the connection routes to this watcher.
    pub(crate) events: EntityReceiver,
}

impl WatchSlot {
    /// Registers watcher `id` of `kind` on `conn`, with a channel of `bound` events and
    /// `bytes` of them, taken from `memory` ([`watcher_channel`]).
    pub(crate) fn register(
        conn: &super::Connection,
        kind: super::EntityKind,
        id: u64,
        bound: usize,
        bytes: usize,
        memory: Arc<dyn QueueMemory>,
    ) -> crate::error::Result<WatchSlot> {
        let (tx, events) = watcher_channel(bound, bytes, memory);
        conn.register(kind, id, tx)?;
        Ok(WatchSlot {
            conn: conn.clone(),
            kind,
            id,
            events,
        })
    }

    /// The connection it is registered on.
    pub(crate) fn conn(&self) -> &super::Connection {
        &self.conn
    }

    /// The watcher id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.conn.unregister(self.kind, self.id);
    }
}

#[cfg(test)]
#[path = "entity_channel_tests.rs"]
mod tests;
