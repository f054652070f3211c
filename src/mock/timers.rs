//! What the broker does when time passes: delayed deliveries (`deliver_at_time`) fall due,
//! PIP-247 partition updates without a result are sent again.
//!
//! The deadlines live in the shared broker state ([`Timers`], a leaf: it imports no handler);
//! each broker runs one timer task ([`super::timer_task`]) that sleeps until the earliest
//! deadline (or until a handler changes them, via [`Timers::wake`]) and then fires what is
//! due under the state lock. Brokers of a cluster each run one; whichever locks first fires,
//! the others find nothing due. All waiting uses tokio time, so tests with paused time
//! advance straight to the next deadline.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Deadlines other than the watchers' (those are in the partition watchers' state).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// Delayed entries falling due: (when, canonical topic name).
    deliveries: BTreeSet<(Instant, String)>,
    /// Woken when deadlines change.
    changed: Arc<Notify>,
}

impl Timers {
    /// Dispatches `topic` again at `at` (a delayed entry falls due then).
    pub(crate) fn schedule_delivery(&mut self, at: Instant, topic: &str) {
        self.deliveries.insert((at, topic.to_owned()));
        self.wake();
    }

    /// Tells the timer tasks that deadlines changed.
    pub(crate) fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// What [`wake`](Self::wake) notifies.
    pub(crate) fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    /// The earliest delivery deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.deliveries.first().map(|(at, _)| *at)
    }

    /// Takes the topics whose deliveries are due at `now`.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.deliveries.first() {
            if *at > now {
                break;
            }
            let (_, topic) = self.deliveries.pop_first().expect("just seen");
            due.push(topic);
        }
        due
    }
}
