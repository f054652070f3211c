//! The channel from a connection to one registered entity (producer, consumer, watcher).
//!
//! The broker decides how much goes into it, so it is bounded by what the entity can
//! legitimately be sent: a consumer's flow permits (plus the overshoot tolerated from real
//! dispatchers), a producer's pending messages. The connection never waits on it (that would
//! stall every other entity on the connection): a broker that fills it beyond the bound breaks
//! the protocol, and the connection closes with an error naming the violation, so the entities
//! reconnect and the broker redelivers.
//!
//! Every producer and consumer holds one, idle or not, so an idle one costs a single small
//! allocation (issue #39): a `VecDeque` behind a mutex, which allocates at the first event,
//! grows with what traffic queues (up to the bound) and shrinks back once emptied. A tokio unbounded mpsc allocated a block
//! of 32 events (~4 KB) and a cache-padded channel (~0.5 KB) up front, for every entity.
//! Sending is one short uncontended lock and a wake-up only when the receiver waits; receiving
//! takes part in tokio's cooperative budget as the mpsc's receiver did.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

pub(crate) use tokio::sync::mpsc::error::TryRecvError;

use super::{EntityEvent, MessageFrame};
use crate::codec::Inbound;
use crate::error::Error;

/// A channel whose sender refuses commands beyond `bound` not yet taken by the receiver.
pub(crate) fn entity_channel(bound: usize) -> (EntitySender, EntityReceiver) {
    channel(bound, None)
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
    channel(bound, Some((bytes, memory)))
}

fn channel(
    bound: usize,
    bytes: Option<(usize, Arc<dyn QueueMemory>)>,
) -> (EntitySender, EntityReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            events: VecDeque::new(),
            senders: 1,
            receiver_gone: false,
            waiting: None,
        }),
        queued: AtomicUsize::new(0),
        bound: bound.max(1),
        overflowed: AtomicBool::new(false),
        lossy: bytes.map(|(bound, memory)| Lossy {
            bound,
            memory,
            held: Mutex::new(Held::default()),
            dropped: AtomicBool::new(false),
        }),
    });
    (
        EntitySender {
            shared: shared.clone(),
        },
        EntityReceiver { shared },
    )
}

/// What both ends share.
#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Commands, messages and receipts queued and not yet taken (not the closing event).
    queued: AtomicUsize,
    bound: usize,
    /// Set when this entity's bound was crossed: the connection closes because of it.
    overflowed: AtomicBool,
    /// A watcher's channel: bounded in bytes too, and dropping past its bounds.
    lossy: Option<Lossy>,
}

#[derive(Debug)]
struct Queue {
    /// Empty and unallocated until the first event.
    events: VecDeque<EntityEvent>,
    /// Live senders: the receiver sees the end once they are all gone and the queue is empty.
    senders: usize,
    receiver_gone: bool,
    /// The receiver found the queue empty and waits: the next event wakes it.
    waiting: Option<Waker>,
}

/// What an emptied queue keeps of its storage: a burst (up to the bound: a consumer's
/// permits and overshoot, a producer's pending messages) grew it, and an idle entity should
/// not hold that for the rest of its life (issue #39). A tokio mpsc, which this replaced, kept
/// about as much: its released blocks of 32 went back to the sender a few times, the rest
/// were freed.
const RETAINED: usize = 32;

impl Queue {
    /// The next event; an emptied queue gives back the storage a burst grew beyond
    /// [`RETAINED`] (one reallocation per burst, not per event).
    fn pop(&mut self) -> Option<EntityEvent> {
        let ev = self.events.pop_front();
        if ev.is_some() && self.events.is_empty() && self.events.capacity() > 4 * RETAINED {
            self.events.shrink_to(RETAINED);
        }
        ev
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Poisoned only by a panic while held; the queue is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `event` unless the receiver is gone (then it is given back).
    fn push(&self, event: EntityEvent) -> Result<(), EntityEvent> {
        let mut q = self.lock();
        if q.receiver_gone {
            return Err(event);
        }
        q.events.push_back(event);
        let waiting = q.waiting.take();
        drop(q);
        if let Some(w) = waiting {
            w.wake();
        }
        Ok(())
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
#[derive(Debug)]
pub(crate) struct EntitySender {
    shared: Arc<Shared>,
}

impl Clone for EntitySender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        EntitySender {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for EntitySender {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.senders -= 1;
        let waiting = if q.senders == 0 {
            q.waiting.take()
        } else {
            None
        };
        drop(q);
        if let Some(w) = waiting {
            w.wake();
        }
    }
}

/// What became of a command handed to an entity.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    Delivered,
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
        let s = &*self.shared;
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
                    EntityEvent::Message(Box::new(MessageFrame {
                        command,
                        payload: frame.payload.take(),
                    }))
                } else if let Some(receipt) = frame.command.send_receipt.take() {
                    EntityEvent::Receipt(receipt)
                } else {
                    EntityEvent::Command(frame)
                }
            }
        };
        if let Err(event) = s.push(event) {
            s.queued.fetch_sub(1, Ordering::AcqRel);
            if let (Some(lossy), EntityEvent::Command(f)) = (&s.lossy, &event) {
                lossy.release(held_bytes(f));
            }
            return Delivery::Gone;
        }
        Delivery::Delivered
    }

    /// Tells the entity its connection is gone (never blocks; not counted: sent once).
    pub(super) fn notify_closed(&self, reason: &Error) {
        let _ = self
            .shared
            .push(EntityEvent::ConnectionClosed(reason.clone()));
    }
}

/// The entity's end of an entity channel.
#[derive(Debug)]
pub(crate) struct EntityReceiver {
    shared: Arc<Shared>,
}

impl Drop for EntityReceiver {
    /// Later deliveries find the entity gone; what is queued goes now (a watcher's bytes
    /// back to the memory limit with it).
    fn drop(&mut self) {
        let events = {
            let mut q = self.shared.lock();
            q.receiver_gone = true;
            q.waiting = None;
            std::mem::take(&mut q.events)
        };
        for ev in &events {
            self.taken(Some(ev));
        }
    }
}

impl EntityReceiver {
    /// Whether a watcher's channel dropped a command since this was last asked (see
    /// [`watcher_channel`]); always false for other channels.
    pub(crate) fn take_dropped(&self) -> bool {
        self.shared
            .lossy
            .as_ref()
            .is_some_and(|l| l.dropped.swap(false, Ordering::AcqRel))
    }

    /// The bytes of the commands queued in a watcher's channel (0 for other channels).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.shared.lossy.as_ref().map_or(0, |l| l.held().bytes)
    }

    /// The next event; `None` once every sender is gone (the connection dropped the
    /// entity) and nothing is left.
    pub(crate) async fn recv(&mut self) -> Option<EntityEvent> {
        let ev = poll_fn(|cx| {
            // Like tokio's channels: an event taken costs the task budget, and a task
            // out of budget yields first.
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            let mut q = self.shared.lock();
            match q.pop() {
                Some(ev) => {
                    coop.made_progress();
                    Poll::Ready(Some(ev))
                }
                None if q.senders == 0 => Poll::Ready(None),
                None => {
                    match &q.waiting {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => q.waiting = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
            }
        })
        .await;
        self.taken(ev.as_ref());
        ev
    }

    /// An event that has already arrived, without waiting.
    pub(crate) fn try_recv(&mut self) -> Result<EntityEvent, TryRecvError> {
        let ev = {
            let mut q = self.shared.lock();
            match q.pop() {
                Some(ev) => Ok(ev),
                None if q.senders == 0 => Err(TryRecvError::Disconnected),
                None => Err(TryRecvError::Empty),
            }
        };
        self.taken(ev.as_ref().ok());
        ev
    }

    /// Whether the broker sent this entity more than its bound, so that the connection
    /// closed because of this entity (the others on it only lost their connection).
    pub(crate) fn overflowed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Acquire)
    }

    fn taken(&self, ev: Option<&EntityEvent>) {
        if let Some(EntityEvent::Command(_) | EntityEvent::Message(_) | EntityEvent::Receipt(_)) =
            ev
        {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        }
        if let (Some(lossy), Some(EntityEvent::Command(f))) = (&self.shared.lossy, ev) {
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
mod watcher_channel_tests {
    use super::*;
    use crate::codec::Frame;
    use crate::proto;

    /// A memory limit of `free` bytes (what `take` takes, `give_back` gives back).
    #[derive(Debug)]
    struct Limit(AtomicUsize);

    impl QueueMemory for Limit {
        fn take(&self, n: usize) -> usize {
            let mut taken = 0;
            let _ = self
                .0
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                    taken = n.min(free);
                    Some(free - taken)
                });
            taken
        }
        fn give_back(&self, n: usize) {
            self.0.fetch_add(n, Ordering::AcqRel);
        }
    }

    fn limit(free: usize) -> Arc<Limit> {
        Arc::new(Limit(AtomicUsize::new(free)))
    }

    fn free(l: &Limit) -> usize {
        l.0.load(Ordering::Acquire)
    }

    /// A WATCH_TOPIC_UPDATE listing `n` new topics of ~100 bytes each.
    fn update(n: usize) -> Inbound {
        let cmd = proto::BaseCommand {
            r#type: proto::base_command::Type::WatchTopicUpdate as i32,
            watch_topic_update: Some(proto::CommandWatchTopicUpdate {
                watcher_id: 1,
                new_topics: (0..n)
                    .map(|i| format!("persistent://public/default/{i:0>72}"))
                    .collect(),
                deleted_topics: Vec::new(),
                topics_hash: String::new(),
            }),
            ..Default::default()
        };
        Inbound::Other(Box::new(Frame::simple(cmd)))
    }

    /// Issue #31 §3: the watcher's update queue was bounded in items only (1,024 updates of
    /// any size: 5 GiB of 5 MiB topic lists). Ten updates of ~1 MiB against a 4 MiB bound:
    /// the first ones are queued up to the bound, the rest are dropped (delivered as far as
    /// the connection is concerned: it is not closed) and the receiver is told once.
    #[test]
    fn a_watcher_channel_is_bounded_in_bytes_and_says_it_dropped() {
        let (tx, mut rx) = watcher_channel(1024, 4 * 1024 * 1024, limit(usize::MAX / 2));
        for _ in 0..10 {
            assert_eq!(tx.deliver(update(10_000)), Delivery::Delivered);
        }
        let held = rx.queued_bytes();
        assert!(held <= 4 * 1024 * 1024, "{held} bytes queued");
        assert!(rx.take_dropped());
        assert!(!rx.take_dropped(), "told once");
        let mut taken = 0;
        while rx.try_recv().is_ok() {
            taken += 1;
        }
        assert!((1..10).contains(&taken), "{taken} queued");
        assert_eq!(
            rx.queued_bytes(),
            0,
            "the bytes come back as updates are taken"
        );
        // A single update larger than the whole bound is still taken when the queue is empty.
        assert_eq!(tx.deliver(update(50_000)), Delivery::Delivered);
        assert!(rx.try_recv().is_ok());
        assert!(!rx.take_dropped());
    }

    /// Issue #31 §3 (leftover): the watcher's queue had its own 4 MiB, outside the client
    /// memory limit; its bytes are now taken from the limit, within its 4 MiB. With 1.5 MiB
    /// of the limit free, updates of ~1 MiB: one is queued, taking its bytes from the limit;
    /// the next finds no room and is dropped (the owner re-reads); taken out, the bytes come
    /// back. A channel dropped with updates queued gives their bytes back too.
    #[test]
    fn a_watcher_channel_takes_its_bytes_from_the_memory_limit() {
        let memory = limit(1536 * 1024);
        let (tx, mut rx) = watcher_channel(1024, 4 * 1024 * 1024, memory.clone());
        assert_eq!(tx.deliver(update(10_000)), Delivery::Delivered);
        let one = rx.queued_bytes();
        assert!(one > 1_000_000, "{one} bytes");
        assert_eq!(free(&memory), 1536 * 1024 - one, "taken from the limit");
        assert_eq!(tx.deliver(update(10_000)), Delivery::Delivered);
        assert!(rx.take_dropped(), "no room in the limit: dropped");
        assert_eq!(rx.queued_bytes(), one);
        assert_eq!(
            free(&memory),
            1536 * 1024 - one,
            "nothing kept of the dropped one"
        );
        assert!(rx.try_recv().is_ok());
        assert_eq!(free(&memory), 1536 * 1024, "given back when taken");
        // Into an empty queue one update is always taken, even with no room: what it could
        // take of the limit goes back when it is taken.
        let tight = limit(1000);
        let (tx, mut rx) = watcher_channel(1024, 4 * 1024 * 1024, tight.clone());
        assert_eq!(tx.deliver(update(10_000)), Delivery::Delivered);
        assert!(!rx.take_dropped());
        assert_eq!(free(&tight), 0);
        assert!(rx.try_recv().is_ok());
        assert_eq!(free(&tight), 1000);
        // Dropped with an update queued: its bytes go back with the channel.
        assert_eq!(tx.deliver(update(1)), Delivery::Delivered);
        assert!(free(&tight) < 1000);
        drop((tx, rx));
        assert_eq!(free(&tight), 1000);
    }

    /// The count bound of a watcher's channel drops too (it closed the connection before).
    #[test]
    fn a_watcher_channel_past_its_count_drops_instead_of_overflowing() {
        let (tx, mut rx) = watcher_channel(3, usize::MAX, limit(usize::MAX / 2));
        for _ in 0..5 {
            assert_eq!(tx.deliver(update(1)), Delivery::Delivered);
        }
        assert!(rx.take_dropped());
        assert!(!rx.overflowed());
        let mut taken = 0;
        while rx.try_recv().is_ok() {
            taken += 1;
        }
        assert_eq!(taken, 3);
    }

    /// Other entities' channels are unchanged: past the count, an overflow.
    #[test]
    fn an_entity_channel_still_overflows() {
        let (tx, rx) = entity_channel(1);
        assert_eq!(tx.deliver(update(1)), Delivery::Delivered);
        assert_eq!(tx.deliver(update(1)), Delivery::Overflow { bound: 1 });
        assert!(rx.overflowed());
        assert!(!rx.take_dropped());
    }

    /// Issue #39: an idle entity's channel holds no queue storage; it grows with traffic, a
    /// waiting receiver is woken, and the receiver sees the end once the senders are gone.
    #[tokio::test]
    async fn an_entity_channel_allocates_its_queue_at_the_first_event() {
        let (tx, mut rx) = entity_channel(8);
        assert_eq!(
            rx.shared.lock().events.capacity(),
            0,
            "nothing before traffic"
        );
        let waiting = tokio::spawn(async move {
            let ev = rx.recv().await;
            (rx, ev)
        });
        tokio::task::yield_now().await;
        let receipt = proto::CommandSendReceipt {
            sequence_id: 7,
            ..Default::default()
        };
        assert_eq!(tx.deliver(Inbound::Receipt(receipt)), Delivery::Delivered);
        let (mut rx, ev) = waiting.await.unwrap();
        assert!(matches!(ev, Some(EntityEvent::Receipt(r)) if r.sequence_id == 7));
        let other = tx.clone();
        drop(tx);
        assert!(
            matches!(rx.try_recv(), Err(TryRecvError::Empty)),
            "a sender is left"
        );
        drop(other);
        assert!(rx.recv().await.is_none());
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    }

    /// Issue #39: a burst grows the queue up to the bound; once it is taken, an idle entity
    /// keeps no more than a tokio mpsc did of it (before: the storage of the whole burst,
    /// ~100 KB for 1,000 receipts, for the rest of the entity's life).
    #[test]
    fn an_emptied_entity_channel_gives_back_what_a_burst_grew() {
        let (tx, mut rx) = entity_channel(10_000);
        for round in 0..2 {
            for i in 0..1_000 {
                let receipt = proto::CommandSendReceipt {
                    sequence_id: i,
                    ..Default::default()
                };
                assert_eq!(tx.deliver(Inbound::Receipt(receipt)), Delivery::Delivered);
            }
            assert!(rx.shared.lock().events.capacity() >= 1_000);
            for i in 0..1_000 {
                let ev = rx.try_recv();
                assert!(
                    matches!(ev, Ok(EntityEvent::Receipt(r)) if r.sequence_id == i),
                    "round {round}: in order"
                );
            }
            let kept = rx.shared.lock().events.capacity();
            assert!(kept <= 4 * RETAINED, "round {round}: {kept} slots kept");
        }
    }
}
