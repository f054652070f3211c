//! The lifecycle of a producer or consumer: a plain, synchronous state machine.
//!
//! ```text
//!                 created                 connection lost / broker close
//!   Connecting ───────────────▶ Ready ◀──────────────────────────▶ Reconnecting
//!      │  ▲ retriable error       │      re-created                    │  ▲ retriable error,
//!      │  └───────────┘           │                                    │  └ connection lost
//!      │                          │ close()                            │
//!      │ close()                  ▼                                    │ close()
//!      └──────────────────────▶ Closing ──────────▶ Closed ◀───────────┘ (via Closing)
//!
//!   From Connecting, Ready or Reconnecting, for good:
//!     broker close with allow_reconnect = false (PIP-139) ─▶ ClosedByBroker
//!     topic terminated / end of topic                     ─▶ Terminated
//!     producer fenced                                     ─▶ Fenced
//!     non-retriable error                                 ─▶ Failed
//! ```
//!
//! Closed, ClosedByBroker, Terminated, Fenced and Failed are terminal: no event leaves them.

use std::fmt;

use tokio::sync::watch;

/// Where a producer or consumer is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Being created for the first time.
    Connecting,
    /// Created and connected.
    Ready,
    /// Lost its connection (or was unloaded); re-creating with backoff. Sends are queued.
    Reconnecting,
    /// Closing at the application's request (pending work is being finished).
    Closing,
    /// Closed by the application.
    Closed,
    /// Closed for good by the broker (PIP-139 `allow_reconnect = false`).
    ClosedByBroker,
    /// The topic was terminated (or, for a consumer, its end was reached).
    Terminated,
    /// The producer was fenced by an exclusive producer.
    Fenced,
    /// Failed for good with a non-retriable error.
    Failed,
}

impl State {
    /// Whether no event can leave this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            State::Closed
                | State::ClosedByBroker
                | State::Terminated
                | State::Fenced
                | State::Failed
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What happened to a producer or consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Created (or re-created) on a connection.
    Created,
    /// The connection was lost.
    ConnectionLost,
    /// The broker sent CloseProducer/CloseConsumer.
    BrokerClose { allow_reconnect: bool },
    /// A create attempt failed with a retriable error.
    RetriableError,
    /// A non-retriable error.
    NonRetriableError,
    /// The topic was terminated.
    TopicTerminated,
    /// Fenced by an exclusive producer.
    Fenced,
    /// The application asked to close.
    CloseRequested,
    /// Closing finished.
    CloseDone,
}

/// A transition that the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InvalidTransition {
    pub from: State,
    pub event: Event,
}

/// The next state, or an error for a transition that makes no sense.
pub(crate) fn next(from: State, event: Event) -> Result<State, InvalidTransition> {
    use Event as E;
    use State as S;
    let invalid = Err(InvalidTransition { from, event });
    if from.is_terminal() {
        return invalid;
    }
    Ok(match (from, event) {
        // Terminal outcomes reachable from every live state.
        (S::Closing, E::CloseDone) => S::Closed,
        (S::Closing, E::BrokerClose { .. } | E::ConnectionLost | E::RetriableError) => S::Closing,
        (S::Closing, _) => return invalid,
        (
            _,
            E::BrokerClose {
                allow_reconnect: false,
            },
        ) => S::ClosedByBroker,
        (_, E::TopicTerminated) => S::Terminated,
        (_, E::Fenced) => S::Fenced,
        (_, E::NonRetriableError) => S::Failed,
        (_, E::CloseRequested) => S::Closing,
        (S::Connecting, E::Created) => S::Ready,
        (S::Connecting, E::RetriableError | E::ConnectionLost) => S::Connecting,
        (
            S::Ready,
            E::ConnectionLost
            | E::BrokerClose {
                allow_reconnect: true,
            },
        ) => S::Reconnecting,
        (S::Ready, E::RetriableError) => S::Reconnecting,
        (S::Reconnecting, E::Created) => S::Ready,
        (
            S::Reconnecting,
            E::ConnectionLost
            | E::RetriableError
            | E::BrokerClose {
                allow_reconnect: true,
            },
        ) => S::Reconnecting,
        _ => return invalid,
    })
}

/// A state machine instance that publishes its state to watchers and logs transitions.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    kind: &'static str,
    topic: String,
    tx: watch::Sender<State>,
}

impl Lifecycle {
    pub(crate) fn new(kind: &'static str, topic: String) -> Self {
        Lifecycle {
            kind,
            topic,
            tx: watch::Sender::new(State::Connecting),
        }
    }

    pub(crate) fn state(&self) -> State {
        *self.tx.borrow()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<State> {
        self.tx.subscribe()
    }

    /// Applies an event; an invalid transition is logged and leaves the state unchanged.
    pub(crate) fn apply(&self, event: Event) -> State {
        let from = self.state();
        match next(from, event) {
            Ok(to) => {
                if to != from {
                    tracing::debug!(kind = self.kind, topic = %self.topic, %from, %to, ?event,
                        "state change");
                    self.tx.send_replace(to);
                }
                to
            }
            Err(e) => {
                tracing::debug!(kind = self.kind, topic = %self.topic, from = %e.from,
                    event = ?e.event, "ignored event in this state");
                from
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use State as S;

    const LIVE: [State; 4] = [S::Connecting, S::Ready, S::Reconnecting, S::Closing];
    const TERMINAL: [State; 5] = [
        S::Closed,
        S::ClosedByBroker,
        S::Terminated,
        S::Fenced,
        S::Failed,
    ];
    const EVENTS: [Event; 10] = [
        E::Created,
        E::ConnectionLost,
        E::BrokerClose {
            allow_reconnect: true,
        },
        E::BrokerClose {
            allow_reconnect: false,
        },
        E::RetriableError,
        E::NonRetriableError,
        E::TopicTerminated,
        E::Fenced,
        E::CloseRequested,
        E::CloseDone,
    ];

    #[test]
    fn happy_path() {
        assert_eq!(next(S::Connecting, E::Created), Ok(S::Ready));
        assert_eq!(next(S::Ready, E::ConnectionLost), Ok(S::Reconnecting));
        assert_eq!(next(S::Reconnecting, E::Created), Ok(S::Ready));
        assert_eq!(next(S::Ready, E::CloseRequested), Ok(S::Closing));
        assert_eq!(next(S::Closing, E::CloseDone), Ok(S::Closed));
    }

    #[test]
    fn broker_close_reconnects_only_when_allowed() {
        let allow = E::BrokerClose {
            allow_reconnect: true,
        };
        let deny = E::BrokerClose {
            allow_reconnect: false,
        };
        assert_eq!(next(S::Ready, allow), Ok(S::Reconnecting));
        assert_eq!(next(S::Reconnecting, allow), Ok(S::Reconnecting));
        assert_eq!(next(S::Ready, deny), Ok(S::ClosedByBroker));
        assert_eq!(next(S::Reconnecting, deny), Ok(S::ClosedByBroker));
        assert_eq!(next(S::Connecting, deny), Ok(S::ClosedByBroker));
        // While the application closes, a broker close just lets the close finish.
        assert_eq!(next(S::Closing, deny), Ok(S::Closing));
    }

    #[test]
    fn errors_retry_or_fail() {
        assert_eq!(next(S::Connecting, E::RetriableError), Ok(S::Connecting));
        assert_eq!(next(S::Connecting, E::NonRetriableError), Ok(S::Failed));
        assert_eq!(next(S::Ready, E::RetriableError), Ok(S::Reconnecting));
        assert_eq!(
            next(S::Reconnecting, E::RetriableError),
            Ok(S::Reconnecting)
        );
        assert_eq!(next(S::Reconnecting, E::NonRetriableError), Ok(S::Failed));
        assert_eq!(next(S::Ready, E::TopicTerminated), Ok(S::Terminated));
        assert_eq!(next(S::Reconnecting, E::Fenced), Ok(S::Fenced));
    }

    #[test]
    fn terminal_states_never_change() {
        for from in TERMINAL {
            assert!(from.is_terminal());
            for ev in EVENTS {
                assert_eq!(next(from, ev), Err(InvalidTransition { from, event: ev }));
            }
        }
        for s in LIVE {
            assert!(!s.is_terminal());
        }
    }

    #[test]
    fn every_live_state_can_be_closed_and_invalid_moves_are_rejected() {
        for from in [S::Connecting, S::Ready, S::Reconnecting] {
            assert_eq!(next(from, E::CloseRequested), Ok(S::Closing));
        }
        assert!(next(S::Ready, E::CloseDone).is_err());
        assert!(next(S::Ready, E::Created).is_err());
        assert!(next(S::Closing, E::Created).is_err());
        assert!(next(S::Connecting, E::CloseDone).is_err());
    }

    #[test]
    fn lifecycle_publishes_changes_and_ignores_invalid_events() {
        let l = Lifecycle::new("producer", "t".into());
        let rx = l.watch();
        assert_eq!(l.apply(E::Created), S::Ready);
        assert_eq!(*rx.borrow(), S::Ready);
        assert_eq!(l.apply(E::CloseDone), S::Ready, "invalid: unchanged");
        assert_eq!(
            l.apply(E::BrokerClose {
                allow_reconnect: false
            }),
            S::ClosedByBroker
        );
        assert_eq!(l.apply(E::Created), S::ClosedByBroker);
        assert_eq!(*rx.borrow(), S::ClosedByBroker);
    }
}
