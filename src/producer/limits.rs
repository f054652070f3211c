//! What a pending message holds: client memory for its payload and, with
//! `max_pending_messages`, a slot of its producer. Taken when the application sends, given back
//! when the message's entry leaves the pending queue (receipt, failure, timeout, close).
//!
//! What is held travels as plain counts ([`Reservation`]), not as semaphore permits: a permit
//! owning its semaphore costs a reference-count increment where the application sends and a
//! decrement where the task merges it into its batch, on a cache line both threads then write
//! for every message (measured: ~7% of the client's CPU per batched message). The counts go
//! back through the producer's [`Limits`], reached by whoever holds them: the pending queue and
//! the batch container own a handle, and a message's own counts go back through its receipt
//! (every receipt group of a producer holds the handle).

use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

/// The semaphores a producer's messages take from: the client's memory limit (shared by all
/// its producers) and the producer's own `max_pending_messages` (when it has one).
#[derive(Debug)]
pub(crate) struct Limits {
    pub memory: Arc<Semaphore>,
    pub slots: Option<Arc<Semaphore>>,
    /// Told when memory goes back, so consumers withholding permits for want of room look
    /// again (`ConsumerShare::room_freed`); `None` in unit tests.
    pub consumers: Option<Arc<crate::core::ConsumerShare>>,
}

impl Limits {
    /// Limits that never run out (unit tests of the parts that only carry counts).
    #[cfg(test)]
    pub(crate) fn unlimited() -> Arc<Limits> {
        Arc::new(Limits {
            memory: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            slots: None,
            consumers: None,
        })
    }

    /// Gives `held` back.
    pub(crate) fn release(&self, held: Reservation) {
        if held.memory > 0 {
            self.memory.add_permits(held.memory as usize);
            if let Some(consumers) = &self.consumers {
                // Only if consumers could take some of it: with their share full, a
                // producer's release changes no consumer's room, and waking every consumer
                // task withholding permits at each receipt would be a wake-up storm.
                consumers.room_freed_if_free();
            }
        }
        if let (Some(slots), 1..) = (&self.slots, held.slots) {
            slots.add_permits(held.slots as usize);
        }
    }
}

/// Counts of what some pending messages hold (see the module docs). Not a guard: whoever
/// holds one gives it back with [`Limits::release`]; every holder does so when it is dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Bytes of the client's memory limit.
    pub memory: u32,
    /// Slots of the producer's `max_pending_messages`.
    pub slots: u32,
}

impl Reservation {
    /// Takes over what `other` holds (the messages of a batch are released once, for the
    /// whole entry: every release takes the semaphore's waiter lock).
    pub(crate) fn merge(&mut self, other: Reservation) {
        // Counts fit: the memory limit is below 4 GiB, and a producer holds one slot per
        // message up to its `max_pending_messages`.
        self.memory = self.memory.saturating_add(other.memory);
        self.slots = self.slots.saturating_add(other.slots);
    }

    pub(crate) fn is_empty(self) -> bool {
        self == Reservation::default()
    }

    /// The counts of the permits taken for one message, which are forgotten: from now on
    /// the counts hold them.
    pub(crate) fn of(memory: SemaphorePermit<'_>, slot: Option<SemaphorePermit<'_>>) -> Self {
        Reservation {
            memory: forget(memory),
            slots: slot.map_or(0, forget),
        }
    }
}

/// Counts held by a send on its own while it waits for room in its task's queue: given back
/// when dropped (the send was cancelled or refused), unless [`take`](Self::take)n to queue it.
#[derive(Debug)]
pub(crate) struct Held {
    limits: Arc<Limits>,
    counts: Reservation,
}

impl Held {
    pub(crate) fn new(limits: Arc<Limits>, counts: Reservation) -> Self {
        Held { limits, counts }
    }

    /// Takes over what `more` holds too.
    pub(crate) fn add(&mut self, more: Reservation) {
        self.counts.merge(more);
    }

    /// The counts, handed on to the op that queues the send.
    pub(crate) fn take(mut self) -> Reservation {
        std::mem::take(&mut self.counts)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.limits.release(std::mem::take(&mut self.counts));
    }
}

/// The count of a `max_pending_messages` slot (if any), which is forgotten.
pub(crate) fn slot_count(slot: Option<SemaphorePermit<'_>>) -> Reservation {
    Reservation {
        memory: 0,
        slots: slot.map_or(0, forget),
    }
}

/// Forgets `permit` (it is not given back when dropped) and returns its count.
fn forget(permit: SemaphorePermit<'_>) -> u32 {
    let n = permit.num_permits();
    permit.forget();
    // A send takes at most the whole memory limit (below 4 GiB) and one slot.
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #31 (leftover): memory a producer gives back wakes the consumers withholding
    /// permits for want of room (`ConsumerShare::room_freed`), as a consumer's release does.
    #[test]
    fn a_release_wakes_consumers_waiting_for_room() {
        let memory = Arc::new(Semaphore::new(4096));
        let share = Arc::new(crate::core::ConsumerShare::new(memory.clone(), 4096));
        let limits = Limits {
            memory: memory.clone(),
            slots: None,
            consumers: Some(share.clone()),
        };
        let mut woken = share.freed();
        let held = Reservation::of(memory.try_acquire_many(1024).unwrap(), None);
        share.wait_for_room();
        limits.release(held);
        assert!(woken.has_changed().unwrap());
        woken.borrow_and_update();
        let held = Reservation::of(memory.try_acquire_many(1024).unwrap(), None);
        limits.release(held);
        assert!(!woken.has_changed().unwrap(), "nobody waits");
        assert_eq!(memory.available_permits(), 4096);
    }
}
