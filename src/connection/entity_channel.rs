//! The channel from a connection to one registered entity (producer, consumer, watcher).
//!
//! The broker decides how much goes into it, so it is bounded by what the entity can
//! legitimately be sent: a consumer's flow permits (plus the overshoot tolerated from real
//! dispatchers), a producer's pending messages. The connection never waits on it (that would
//! stall every other entity on the connection): a broker that fills it beyond the bound breaks
//! the protocol, and the connection closes with an error naming the violation, so the entities
//! reconnect and the broker redelivers.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{EntityEvent, MessageFrame};
use crate::codec::Inbound;
use crate::error::Error;

/// A channel whose sender refuses commands beyond `bound` not yet taken by the receiver.
pub(crate) fn entity_channel(bound: usize) -> (EntitySender, EntityReceiver) {
    channel(bound, None)
}

/// A watcher's channel (PIP-145 topic lists, PIP-247 partition updates): bounded by `bound`
/// commands and by `bytes` of them (their encoded size; one command is always taken), the
/// smaller of the two. A command past either bound is dropped, not queued, and the receiver
/// is told ([`EntityReceiver::take_dropped`]) so its owner re-reads the whole state (a
/// re-listing), as upstream does on an update whose hash does not match. A broker pushing
/// huge topic lists then costs at most `bytes`, and the connection (shared with producers
/// and consumers) is not closed over a watcher's backlog.
pub(crate) fn watcher_channel(bound: usize, bytes: usize) -> (EntitySender, EntityReceiver) {
    channel(bound, Some(bytes))
}

fn channel(bound: usize, bytes: Option<usize>) -> (EntitySender, EntityReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let overflowed = Arc::new(AtomicBool::new(false));
    let lossy = bytes.map(|bound| {
        Arc::new(Lossy {
            bound,
            bytes: AtomicUsize::new(0),
            dropped: AtomicBool::new(false),
        })
    });
    (
        EntitySender {
            tx,
            queued: queued.clone(),
            bound: bound.max(1),
            overflowed: overflowed.clone(),
            lossy: lossy.clone(),
        },
        EntityReceiver {
            rx,
            queued,
            overflowed,
            lossy,
        },
    )
}

/// The byte bound of a watcher's channel, and whether it dropped something.
#[derive(Debug)]
struct Lossy {
    bound: usize,
    bytes: AtomicUsize,
    dropped: AtomicBool,
}

/// The bytes a watcher's command holds while queued: its encoded size.
fn held_bytes(frame: &crate::codec::Frame) -> usize {
    use prost::Message as _;
    frame.command.encoded_len() + frame.payload.as_ref().map_or(0, |p| p.data.len())
}

/// The connection's end of an entity channel.
#[derive(Debug, Clone)]
pub(crate) struct EntitySender {
    tx: mpsc::UnboundedSender<EntityEvent>,
    queued: Arc<AtomicUsize>,
    bound: usize,
    /// Set when this entity's bound was crossed: the connection closes because of it.
    overflowed: Arc<AtomicBool>,
    /// A watcher's channel: bounded in bytes too, and dropping past its bounds.
    lossy: Option<Arc<Lossy>>,
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
        if let (Some(lossy), Inbound::Other(f)) = (&self.lossy, &frame) {
            // Only what becomes a command (what a watcher is sent) is counted in bytes.
            let command = f.command.message.is_none() && f.command.send_receipt.is_none();
            let size = if command { held_bytes(f) } else { 0 };
            let queued = self.queued.load(Ordering::Acquire);
            let held = lossy.bytes.load(Ordering::Acquire);
            if queued >= self.bound || (queued > 0 && held.saturating_add(size) > lossy.bound) {
                lossy.dropped.store(true, Ordering::Release);
                return Delivery::Delivered;
            }
            lossy.bytes.fetch_add(size, Ordering::AcqRel);
        }
        if self.queued.load(Ordering::Acquire) >= self.bound {
            self.overflowed.store(true, Ordering::Release);
            return Delivery::Overflow { bound: self.bound };
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
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
        if let Err(mpsc::error::SendError(event)) = self.tx.send(event) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            if let (Some(lossy), EntityEvent::Command(f)) = (&self.lossy, &event) {
                lossy.bytes.fetch_sub(held_bytes(f), Ordering::AcqRel);
            }
            return Delivery::Gone;
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
    rx: mpsc::UnboundedReceiver<EntityEvent>,
    queued: Arc<AtomicUsize>,
    overflowed: Arc<AtomicBool>,
    lossy: Option<Arc<Lossy>>,
}

impl EntityReceiver {
    /// Whether a watcher's channel dropped a command since this was last asked (see
    /// [`watcher_channel`]); always false for other channels.
    pub(crate) fn take_dropped(&self) -> bool {
        self.lossy
            .as_ref()
            .is_some_and(|l| l.dropped.swap(false, Ordering::AcqRel))
    }

    /// The bytes of the commands queued in a watcher's channel (0 for other channels).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.lossy
            .as_ref()
            .map_or(0, |l| l.bytes.load(Ordering::Acquire))
    }

    /// The next event; `None` once the connection dropped its sender.
    pub(crate) async fn recv(&mut self) -> Option<EntityEvent> {
        let ev = self.rx.recv().await;
        self.taken(ev.as_ref());
        ev
    }

    /// An event that has already arrived, without waiting.
    pub(crate) fn try_recv(&mut self) -> Result<EntityEvent, mpsc::error::TryRecvError> {
        let ev = self.rx.try_recv();
        self.taken(ev.as_ref().ok());
        ev
    }

    /// Whether the broker sent this entity more than its bound, so that the connection
    /// closed because of this entity (the others on it only lost their connection).
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    fn taken(&self, ev: Option<&EntityEvent>) {
        if let Some(EntityEvent::Command(_) | EntityEvent::Message(_) | EntityEvent::Receipt(_)) =
            ev
        {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        if let (Some(lossy), Some(EntityEvent::Command(f))) = (&self.lossy, ev) {
            lossy.bytes.fetch_sub(held_bytes(f), Ordering::AcqRel);
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
    /// `bytes` of them ([`watcher_channel`]).
    pub(crate) fn register(
        conn: &super::Connection,
        kind: super::EntityKind,
        id: u64,
        bound: usize,
        bytes: usize,
    ) -> crate::error::Result<WatchSlot> {
        let (tx, events) = watcher_channel(bound, bytes);
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
        let (tx, mut rx) = watcher_channel(1024, 4 * 1024 * 1024);
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

    /// The count bound of a watcher's channel drops too (it closed the connection before).
    #[test]
    fn a_watcher_channel_past_its_count_drops_instead_of_overflowing() {
        let (tx, mut rx) = watcher_channel(3, usize::MAX);
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
}
