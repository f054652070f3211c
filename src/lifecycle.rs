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
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;

use tokio::sync::watch;

use crate::error::Error;

/// Where a producer or consumer is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
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
    /// Every state, in `repr(u8)` order (see [`StateNow`]).
    const ALL: [State; 9] = [
        State::Connecting,
        State::Ready,
        State::Reconnecting,
        State::Closing,
        State::Closed,
        State::ClosedByBroker,
        State::Terminated,
        State::Fenced,
        State::Failed,
    ];

    /// Whether work is refused in this state: closing, or ended for good.
    pub(crate) fn refuses_work(self) -> bool {
        self == State::Closing || self.is_terminal()
    }

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
///
/// The table is total over the live states: every event that can reach a live entity has a
/// defined outcome, including while `Closing` (a close-for-good, termination, fencing or
/// non-retriable failure that arrives during the application's close ends in that terminal
/// state, so `state()` and `close()` say what really happened). The only invalid moves are a
/// `CloseDone` without a `Closing` and a `Created` while already `Ready`: the driver never
/// produces them, and [`Lifecycle::apply`] treats one as a bug.
pub(crate) fn next(from: State, event: Event) -> Result<State, InvalidTransition> {
    use Event as E;
    use State as S;
    if from.is_terminal() {
        return Err(InvalidTransition { from, event });
    }
    Ok(match (from, event) {
        // Outcomes for good, from every live state (Closing included).
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
        // Closing: connection trouble does not stop the close; it finishes on a new
        // connection (a producer still has pending messages to deliver) or locally.
        (S::Closing, E::CloseDone) => S::Closed,
        (
            S::Closing,
            E::Created
            | E::ConnectionLost
            | E::BrokerClose {
                allow_reconnect: true,
            },
        ) => S::Closing,
        (_, E::CloseDone) => return Err(InvalidTransition { from, event }),
        // Being (re)created.
        (S::Connecting | S::Reconnecting, E::Created) => S::Ready,
        (S::Ready, E::Created) => return Err(InvalidTransition { from, event }),
        (
            S::Connecting,
            E::ConnectionLost
            | E::BrokerClose {
                allow_reconnect: true,
            },
        ) => S::Connecting,
        (
            S::Ready | S::Reconnecting,
            E::ConnectionLost
            | E::BrokerClose {
                allow_reconnect: true,
            },
        ) => S::Reconnecting,
        (S::Closed | S::ClosedByBroker | S::Terminated | S::Fenced | S::Failed, _) => {
            unreachable!("terminal states return above")
        }
    })
}

/// A state machine instance that publishes its state to watchers and logs transitions.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    kind: &'static str,
    /// Shared with the entity (a copy per entity was ~50 bytes of every idle one's heap).
    topic: crate::topic::TopicName,
    now: StateNow,
}

/// The current state of a [`Lifecycle`], read without a lock: what a hot path checks on every
/// call (an ack refused once its consumer is closing). A `watch` read takes its lock, two
/// locked instructions per read (issue #18); the watch stays the way to wait for a change,
/// and is made when first asked for ([`StateNow::watch`]): a `watch` channel is ~340 bytes,
/// and most producers and consumers are never watched (issue #39). Written only by
/// [`Lifecycle::apply`].
#[derive(Debug, Clone)]
pub(crate) struct StateNow(Arc<StateShared>);

#[derive(Debug)]
struct StateShared {
    state: AtomicU8,
    /// Taken together with every change, so a watch made meanwhile starts from the state
    /// the next change replaces.
    watch: Mutex<StateWatch>,
}

#[derive(Debug)]
enum StateWatch {
    /// Nobody asked for one yet.
    Unmade,
    Made(watch::Sender<State>),
    /// The lifecycle is gone (its entity's task ended): the state changes no more.
    Gone,
}

impl StateNow {
    fn new(state: State) -> Self {
        StateNow(Arc::new(StateShared {
            state: AtomicU8::new(state as u8),
            watch: Mutex::new(StateWatch::Unmade),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StateWatch> {
        self.0.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: State) {
        let watch = self.lock();
        self.0.state.store(state as u8, Ordering::Release);
        // A variant added to `State` but not to `State::ALL` would read back as `Failed`.
        debug_assert_eq!(self.get(), state, "State::ALL lacks {state:?}");
        if let StateWatch::Made(tx) = &*watch {
            tx.send_replace(state);
        }
    }

    /// The state now.
    pub(crate) fn get(&self) -> State {
        // Only `set` writes it, always a discriminant of `ALL` (a test checks the order).
        State::ALL
            .get(usize::from(self.0.state.load(Ordering::Acquire)))
            .copied()
            .unwrap_or(State::Failed)
    }

    /// A watch of the state: its value now, then every change. Once the lifecycle is gone
    /// (its entity's task ended), the watch is closed after its value, as the channel's
    /// sender dropped with the task was.
    pub(crate) fn watch(&self) -> watch::Receiver<State> {
        let mut watch = self.lock();
        match &*watch {
            StateWatch::Made(tx) => tx.subscribe(),
            StateWatch::Unmade => {
                let tx = watch::Sender::new(self.get());
                let rx = tx.subscribe();
                *watch = StateWatch::Made(tx);
                rx
            }
            StateWatch::Gone => watch::channel(self.get()).1,
        }
    }
}

impl Lifecycle {
    pub(crate) fn new(kind: &'static str, topic: crate::topic::TopicName) -> Self {
        Lifecycle {
            kind,
            topic,
            now: StateNow::new(State::Connecting),
        }
    }

    /// A lock-free view of the state (see [`StateNow`]).
    pub(crate) fn now(&self) -> StateNow {
        self.now.clone()
    }

    pub(crate) fn state(&self) -> State {
        self.now.get()
    }

    #[cfg(test)]
    pub(crate) fn watch(&self) -> watch::Receiver<State> {
        self.now.watch()
    }

    /// Applies an event. Events after a terminal state are ignored (the entity is already
    /// done). Any other invalid transition is a driver bug: it fails debug builds (and so the
    /// tests) and is logged as an error otherwise, leaving the state unchanged.
    pub(crate) fn apply(&self, event: Event) -> State {
        let from = self.state();
        match next(from, event) {
            Ok(to) => {
                if to != from {
                    tracing::debug!(kind = self.kind, topic = %self.topic, %from, %to, ?event,
                        "state change");
                    self.now.set(to);
                }
                to
            }
            Err(e) if e.from.is_terminal() => from,
            Err(e) => {
                tracing::error!(kind = self.kind, topic = %self.topic, from = %e.from,
                    event = ?e.event, "invalid lifecycle transition (a bug)");
                debug_assert!(false, "invalid lifecycle transition {e:?}");
                from
            }
        }
    }
}

impl Drop for Lifecycle {
    fn drop(&mut self) {
        // Watchers see the channel close, as when the sender lived here.
        *self.now.lock() = StateWatch::Gone;
    }
}

/// A [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html) of a producer's,
/// consumer's or reader's lifecycle states: the state when the
/// stream was made first, then each change, ending after a terminal state (see [`State::is_terminal`]).
///
/// Made by `states()` on [`Producer`](crate::Producer::states),
/// [`Consumer`](crate::Consumer::states) and [`Reader`](crate::Reader::states). For a
/// partitioned producer or consumer it follows the aggregate over the partitions it had when
/// it was made (like `state()`). Changes in quick succession may be merged: the stream
/// always yields the latest state, never a stale one. It is `Send + 'static`, so it can move
/// into a spawned task, and owns nothing that keeps the entity alive.
///
/// ```no_run
/// # async fn demo(producer: pulsar_sdk::Producer) {
/// use futures::StreamExt;
/// let mut states = producer.states();
/// tokio::spawn(async move {
///     while let Some(state) = states.next().await {
///         println!("producer is now {state}");
///     }
///     // The stream ended: the producer reached a terminal state.
/// });
/// # }
/// ```
pub struct StateStream {
    inner: Pin<Box<dyn Stream<Item = State> + Send>>,
}

impl fmt::Debug for StateStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateStream").finish_non_exhaustive()
    }
}

impl Stream for StateStream {
    type Item = State;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<State>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl StateStream {
    /// Follows the aggregate state of `watchers` (one per partition).
    pub(crate) fn new(watchers: Vec<watch::Receiver<State>>) -> Self {
        Self::with(watchers, aggregate_state)
    }

    /// Follows the state of a consumer's tasks with [`aggregate_until_all_end`]: one
    /// topic ending for good does not end the stream while others still run.
    pub(crate) fn until_all_end(watchers: Vec<watch::Receiver<State>>) -> Self {
        Self::with(watchers, aggregate_until_all_end)
    }

    fn with(watchers: Vec<watch::Receiver<State>>, aggregate: fn(&[State]) -> State) -> Self {
        struct Follow {
            /// Each watcher, and whether its sender is still there to report changes.
            watchers: Vec<(watch::Receiver<State>, bool)>,
            /// The state when the stream was made, yielded first.
            first: Option<State>,
            last: Option<State>,
        }
        let mut watchers = watchers;
        let states: Vec<State> = watchers
            .iter_mut()
            .map(|w| *w.borrow_and_update())
            .collect();
        let follow = Follow {
            watchers: watchers.into_iter().map(|w| (w, true)).collect(),
            first: Some(aggregate(&states)),
            last: None,
        };
        let stream = futures::stream::unfold(follow, move |mut f| async move {
            if let Some(first) = f.first.take() {
                f.last = Some(first);
                return Some((first, f));
            }
            if f.last.is_some_and(State::is_terminal) {
                return None;
            }
            loop {
                let states: Vec<State> = f
                    .watchers
                    .iter_mut()
                    .map(|(w, _)| *w.borrow_and_update())
                    .collect();
                let now = aggregate(&states);
                if f.last != Some(now) {
                    f.last = Some(now);
                    return Some((now, f));
                }
                let waits: Vec<_> = f
                    .watchers
                    .iter_mut()
                    .enumerate()
                    .filter(|(_, (_, alive))| *alive)
                    .map(|(i, (w, _))| Box::pin(async move { (i, w.changed().await.is_ok()) }))
                    .collect();
                if waits.is_empty() {
                    return None; // nothing can change any more
                }
                let ((i, alive), _, _) = futures::future::select_all(waits).await;
                if !alive {
                    f.watchers[i].1 = false;
                }
            }
        });
        StateStream {
            inner: Box::pin(stream),
        }
    }

    /// Resolves with the first state the stream yields from now on (the current one first,
    /// if not yet taken) for which `accept` is true; `None` if the stream ends before.
    ///
    /// ```no_run
    /// # async fn demo(producer: pulsar_sdk::Producer) {
    /// use pulsar_sdk::State;
    /// let mut states = producer.states();
    /// if states.wait_for(|s| *s == State::Reconnecting).await.is_some() {
    ///     eprintln!("the producer lost its connection");
    /// }
    /// # }
    /// ```
    pub async fn wait_for(&mut self, mut accept: impl FnMut(&State) -> bool) -> Option<State> {
        use futures::StreamExt;
        while let Some(s) = self.next().await {
            if accept(&s) {
                return Some(s);
            }
        }
        None
    }

    /// Resolves with the first terminal state (or the last state, if nothing can change any
    /// more).
    pub(crate) async fn terminal(mut self) -> State {
        use futures::StreamExt;
        let mut last = State::Connecting;
        while let Some(s) = self.next().await {
            last = s;
        }
        last
    }
}

/// Maps an error that ends a producer/consumer to its lifecycle event.
pub(crate) fn terminal_event(error: &Error) -> Event {
    match error {
        Error::ClosedByBroker { .. } => Event::BrokerClose {
            allow_reconnect: false,
        },
        Error::TopicTerminated { .. } => Event::TopicTerminated,
        Error::ProducerFenced { .. } => Event::Fenced,
        Error::Closed => Event::CloseDone,
        _ => Event::NonRetriableError,
    }
}

/// The state of a consumer over several topics (or a topic and its retry topic), like
/// upstream's `MultiTopicsConsumerImpl`, whose state is its own: one topic's consumer ending
/// for good (its end reached, closed by the broker, failed) leaves it running on the others.
/// Terminal once every task is (the partitions of one topic still end together: PIP-139
/// closes them as a group); until then the aggregate of the tasks still running.
pub(crate) fn aggregate_until_all_end(states: &[State]) -> State {
    if states.iter().all(|s| s.is_terminal()) {
        return aggregate_state(states);
    }
    let running: Vec<State> = states
        .iter()
        .copied()
        .filter(|s| !s.is_terminal())
        .collect();
    aggregate_state(&running)
}

/// The state of a group of partitions: a terminal state if any partition is in one, else
/// Closing, Reconnecting or Connecting if any partition is, else Ready.
pub(crate) fn aggregate_state(states: &[State]) -> State {
    if let Some(t) = states.iter().find(|s| s.is_terminal()) {
        return *t;
    }
    for s in [State::Closing, State::Reconnecting, State::Connecting] {
        if states.contains(&s) {
            return s;
        }
    }
    State::Ready
}

/// Closes every partition of a partitioned producer/consumer together (PIP-139: a partitioned
/// producer closed by the broker on one partition closes as a whole).
///
/// Every producer and consumer has one, so it is small (issue #39): the first error and a
/// `Notify` (about 100 bytes, where a watch channel took about 400), shared by the members;
/// an entity that is a group of its own (a non-partitioned topic's, which never gains
/// partitions) has nothing to share and allocates nothing ([`GroupClose::solo`]).
#[derive(Debug, Clone)]
pub(crate) struct GroupClose(Option<Arc<GroupInner>>);

#[derive(Debug, Default)]
struct GroupInner {
    error: std::sync::OnceLock<Error>,
    closed: tokio::sync::Notify,
}

impl GroupClose {
    /// A group that members can join (a partitioned entity's).
    pub(crate) fn new() -> Self {
        GroupClose(Some(Arc::default()))
    }

    /// The group of an entity alone: there is no other member to tell or be told by.
    pub(crate) fn solo() -> Self {
        GroupClose(None)
    }

    /// Whether another member could close this one ([`GroupClose::closed`] can resolve).
    pub(crate) fn is_shared(&self) -> bool {
        self.0.is_some()
    }

    /// Tells every member to close with `error` (the first error wins).
    pub(crate) fn close_all(&self, error: &Error) {
        if let Some(inner) = &self.0 {
            if inner.error.set(error.clone()).is_ok() {
                inner.closed.notify_waiters();
            }
        }
    }

    /// Resolves when a member closed the group (never, for a [`GroupClose::solo`] one).
    pub(crate) async fn closed(&mut self) -> Error {
        let Some(inner) = &self.0 else {
            return std::future::pending().await;
        };
        loop {
            let notified = inner.closed.notified();
            tokio::pin!(notified);
            // Registered before the check: a close between the check and the wait wakes it.
            notified.as_mut().enable();
            if let Some(e) = inner.error.get() {
                return e.clone();
            }
            notified.await;
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

    #[test]
    fn state_now_reads_every_state_back() {
        // `StateNow` stores the discriminant and reads it back through `State::ALL`.
        let all: Vec<State> = LIVE.iter().chain(TERMINAL.iter()).copied().collect();
        assert_eq!(all.len(), State::ALL.len());
        for s in all {
            let now = StateNow::new(S::Connecting);
            now.set(s);
            assert_eq!(now.get(), s);
        }
    }

    #[test]
    fn state_now_follows_apply() {
        let life = Lifecycle::new("producer", crate::topic::TopicName::new("t").unwrap());
        let now = life.now();
        assert_eq!(now.get(), S::Connecting);
        life.apply(E::Created);
        assert_eq!(now.get(), S::Ready);
        life.apply(E::CloseRequested);
        assert_eq!(now.get(), S::Closing);
        assert_eq!(now.get(), *life.watch().borrow());
    }
    const ALLOW: Event = E::BrokerClose {
        allow_reconnect: true,
    };
    const DENY: Event = E::BrokerClose {
        allow_reconnect: false,
    };
    const EVENTS: [Event; 9] = [
        E::Created,
        E::ConnectionLost,
        ALLOW,
        DENY,
        E::NonRetriableError,
        E::TopicTerminated,
        E::Fenced,
        E::CloseRequested,
        E::CloseDone,
    ];

    /// The whole table, written out: (state, event) -> next state, None = invalid.
    fn expected(from: State, ev: Event) -> Option<State> {
        if from.is_terminal() {
            return None;
        }
        let row: [Option<State>; 9] = match from {
            S::Connecting => [
                Some(S::Ready),
                Some(S::Connecting),
                Some(S::Connecting),
                Some(S::ClosedByBroker),
                Some(S::Failed),
                Some(S::Terminated),
                Some(S::Fenced),
                Some(S::Closing),
                None,
            ],
            S::Ready => [
                None,
                Some(S::Reconnecting),
                Some(S::Reconnecting),
                Some(S::ClosedByBroker),
                Some(S::Failed),
                Some(S::Terminated),
                Some(S::Fenced),
                Some(S::Closing),
                None,
            ],
            S::Reconnecting => [
                Some(S::Ready),
                Some(S::Reconnecting),
                Some(S::Reconnecting),
                Some(S::ClosedByBroker),
                Some(S::Failed),
                Some(S::Terminated),
                Some(S::Fenced),
                Some(S::Closing),
                None,
            ],
            S::Closing => [
                Some(S::Closing),
                Some(S::Closing),
                Some(S::Closing),
                Some(S::ClosedByBroker),
                Some(S::Failed),
                Some(S::Terminated),
                Some(S::Fenced),
                Some(S::Closing),
                Some(S::Closed),
            ],
            _ => unreachable!(),
        };
        let i = EVENTS.iter().position(|e| *e == ev).unwrap();
        row[i]
    }

    #[test]
    fn the_transition_table_is_exactly_as_written() {
        for from in LIVE.into_iter().chain(TERMINAL) {
            for ev in EVENTS {
                assert_eq!(next(from, ev).ok(), expected(from, ev), "{from} + {ev:?}");
            }
        }
    }

    #[test]
    fn live_states_have_an_exit_for_every_event_but_two_impossible_ones() {
        let mut invalid = Vec::new();
        for from in LIVE {
            for ev in EVENTS {
                if next(from, ev).is_err() {
                    invalid.push((from, ev));
                }
            }
        }
        assert_eq!(
            invalid,
            [
                (S::Connecting, E::CloseDone),
                (S::Ready, E::Created),
                (S::Ready, E::CloseDone),
                (S::Reconnecting, E::CloseDone),
            ]
        );
        for s in LIVE {
            assert!(!s.is_terminal());
        }
        for s in TERMINAL {
            assert!(s.is_terminal());
        }
    }

    #[test]
    fn a_close_for_good_during_close_is_what_the_state_says() {
        // PIP-139: the broker's close-for-good wins over the application's close.
        assert_eq!(next(S::Closing, DENY), Ok(S::ClosedByBroker));
        assert_eq!(next(S::Closing, E::TopicTerminated), Ok(S::Terminated));
        assert_eq!(next(S::Closing, ALLOW), Ok(S::Closing));
    }

    #[test]
    fn lifecycle_publishes_changes_and_ignores_events_after_the_end() {
        let l = Lifecycle::new("producer", crate::topic::TopicName::new("t").unwrap());
        let rx = l.watch();
        assert_eq!(l.apply(E::Created), S::Ready);
        assert_eq!(*rx.borrow(), S::Ready);
        assert_eq!(l.apply(DENY), S::ClosedByBroker);
        assert_eq!(l.apply(E::Created), S::ClosedByBroker);
        assert_eq!(*rx.borrow(), S::ClosedByBroker);
    }

    #[test]
    #[should_panic(expected = "invalid lifecycle transition")]
    fn an_invalid_transition_is_a_bug_in_debug_builds() {
        let l = Lifecycle::new("consumer", crate::topic::TopicName::new("t").unwrap());
        l.apply(E::Created);
        l.apply(E::Created);
    }

    #[test]
    fn partition_states_aggregate() {
        assert_eq!(aggregate_state(&[S::Ready, S::Ready]), S::Ready);
        assert_eq!(
            aggregate_state(&[S::Ready, S::Reconnecting]),
            S::Reconnecting
        );
        assert_eq!(
            aggregate_state(&[S::Reconnecting, S::ClosedByBroker]),
            S::ClosedByBroker
        );
    }

    #[tokio::test]
    async fn a_group_close_wakes_every_member_with_the_first_error() {
        let group = GroupClose::new();
        let mut member = group.clone();
        let waiting = tokio::spawn(async move { member.closed().await });
        tokio::task::yield_now().await;
        group.close_all(&Error::Closed);
        group.close_all(&Error::Protocol("later".into()));
        assert!(matches!(waiting.await.unwrap(), Error::Closed));
        // A member that looks after the close sees it at once.
        assert!(matches!(group.clone().closed().await, Error::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_of_one_is_never_closed_by_another_member() {
        let group = GroupClose::solo();
        assert!(!group.is_shared());
        group.close_all(&Error::Closed);
        let mut member = group.clone();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(3600), member.closed());
        assert!(waited.await.is_err(), "a solo group's close never resolves");
    }
}
