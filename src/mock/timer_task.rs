//! Each broker's timer task: sleeps until the earliest deadline of the shared state (the
//! [`Timers`](super::timers::Timers) and the partition watchers' resends), or until a handler
//! changes them, then fires what is due under the state lock (see [`super::timers`]).

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::state::BrokerState;
use super::{dispatch, lock, transactions, watchers};

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
    transactions::expire(state, now);
}

/// The earliest deadline.
pub(crate) fn next_deadline(state: &BrokerState) -> Option<Instant> {
    [
        state.timers.next(),
        watchers::next_deadline(state),
        state.coordinator.next_deadline(),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Starts the timer task of one broker serving `state`; abort it to stop it.
pub(crate) fn spawn(state: Arc<Mutex<BrokerState>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let changed = lock(&state).timers.changed();
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
