//! What the broker does when time passes: delayed deliveries (`deliver_at_time`) fall due,
//! PIP-247 partition updates without a result are sent again.
//!
//! The deadlines live in the shared [`BrokerState`]; each broker runs one timer task
//! ([`spawn`]) that sleeps until the earliest deadline (or until a handler changes them, via
//! [`Timers::wake`]) and then fires what is due under the state lock. Brokers of a cluster
//! each run one; whichever locks first fires, the others find nothing due. All waiting uses
//! tokio time, so tests with paused time advance straight to the next deadline.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::state::BrokerState;
use super::{dispatch, lock, watchers};

/// Deadlines other than the watchers' (those are in [`watchers::Watchers`]).
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

    fn next(&self) -> Option<Instant> {
        self.deliveries.first().map(|(at, _)| *at)
    }

    fn take_due(&mut self, now: Instant) -> Vec<String> {
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

/// Fires every deadline due at `now`.
pub(crate) fn fire_due(state: &mut BrokerState, now: Instant) {
    let topics = state.timers.take_due(now);
    let BrokerState {
        topics: table,
        conns,
        ..
    } = state;
    for name in topics {
        if let Some(topic) = table.get_mut(&name) {
            dispatch::dispatch_all(topic, conns);
        }
    }
    watchers::fire_due(state, now);
}

/// The earliest deadline.
pub(crate) fn next_deadline(state: &BrokerState) -> Option<Instant> {
    match (state.timers.next(), watchers::next_deadline(state)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Starts the timer task of one broker serving `state`; abort it to stop it.
pub(crate) fn spawn(state: Arc<Mutex<BrokerState>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let changed = Arc::clone(&lock(&state).timers.changed);
        loop {
            let notified = changed.notified();
            tokio::pin!(notified);
            // Registered before reading the deadlines, so no change can slip in between.
            notified.as_mut().enable();
            let next = {
                let mut state = lock(&state);
                fire_due(&mut state, Instant::now());
                next_deadline(&state)
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        () = sleep_until(at) => {}
                        () = &mut notified => {}
                    }
                }
                None => notified.await,
            }
        }
    })
}
