//! The consumer's state and statistics: the lifecycle state aggregated over its partitions
//! and topics, its changes as a stream, the terminal state as a future, the active flag of a
//! Failover subscription, and the counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;

use crate::consumer::handle::PartitionShared;
use crate::consumer::Consumer;
use crate::lifecycle::{aggregate_until_all_end, State, StateStream};

impl Consumer {
    /// The consumer's lifecycle state (aggregated over partitions like
    /// [`crate::Producer::state`]).
    ///
    /// A pattern consumer's topic that was deleted does not count (its consumer ended; the
    /// topic leaves the consumer). On a multi-topic or pattern consumer (or one with
    /// `retry_enable`) a topic that ended for good (closed by the broker,
    /// failed) does not end the consumer while its other topics run, like upstream's
    /// `MultiTopicsConsumerImpl`: the state is terminal once every topic ended.
    pub fn state(&self) -> State {
        let states: Vec<State> = self.state_watchers().iter().map(|w| *w.borrow()).collect();
        aggregate_until_all_end(&states)
    }

    /// What the state follows: the live tasks, and a pattern consumer's discovery (open while
    /// it has no topic).
    fn state_watchers(&self) -> Vec<watch::Receiver<State>> {
        let mut all: Vec<_> = self.live().iter().map(|p| p.state.watch()).collect();
        if let Some(d) = &self.discovery {
            all.push(d.state());
        }
        all
    }

    /// A snapshot of the consumer's statistics: per partition (and retry-topic member) and
    /// summed (see [`crate::stats`]).
    ///
    /// ```no_run
    /// # fn demo(consumer: &pulsar_sdk::Consumer) {
    /// let s = consumer.stats();
    /// println!("{} received, {} in the queue", s.totals.messages_received,
    ///     s.totals.receiver_queue_len);
    /// # }
    /// ```
    pub fn stats(&self) -> crate::stats::ConsumerStats {
        let parts = self.all();
        let mut members = Vec::with_capacity(parts.len());
        for p in &parts {
            let state = p.state.get();
            let mut counts = p.stats.snapshot();
            counts.discarded_undecodable = p.discarded.load(Ordering::Relaxed);
            counts.receiver_queue_len = p.room().queued;
            members.push(crate::stats::PartitionConsumerStats {
                topic: p.stats.topic().to_string(),
                partition: p.partition,
                state,
                counts,
            });
        }
        let mut stats = crate::stats::ConsumerStats::aggregate(self.state(), members);
        stats.interceptor_panics = crate::interceptor::panics(&self.interceptors);
        stats
    }

    /// The tasks whose topic was not deleted under them.
    pub(super) fn live(&self) -> Vec<Arc<PartitionShared>> {
        let mut all = self.all();
        all.retain(|p| !p.topic_deleted.load(Ordering::Acquire));
        all
    }

    /// How many entries were discarded because they could not be decoded (each was reported
    /// as an error item and acked with its validation error, like upstream).
    pub fn discarded_entries(&self) -> u64 {
        self.all()
            .iter()
            .map(|p| p.discarded.load(Ordering::Relaxed))
            .sum()
    }

    /// The consumer's lifecycle states as a
    /// [`Stream`](https://docs.rs/futures/0.3/futures/stream/trait.Stream.html): the current state
    /// first, then each
    /// change, ending after a terminal state. This is the documented way to follow the state
    /// (it hides the channel type, and is `Send + 'static`).
    ///
    /// ```no_run
    /// # async fn demo(consumer: pulsar_sdk::Consumer) {
    /// use futures::StreamExt;
    /// let mut states = consumer.states();
    /// tokio::spawn(async move {
    ///     while let Some(state) = states.next().await {
    ///         println!("consumer is now {state}");
    ///     }
    /// });
    /// # }
    /// ```
    ///
    /// A multi-topic or pattern consumer's stream follows the partitions subscribed when it was
    /// made (and a pattern consumer's discovery: it stays open without topics).
    pub fn states(&self) -> StateStream {
        StateStream::until_all_end(self.state_watchers())
    }

    /// Resolves once the consumer reached a terminal state ([`State::is_terminal`]), with
    /// that state: [`State::Closed`] after a close by the application (its
    /// [`close`](Self::close), dropping it, or [`Client::close`](crate::Client::close)), else
    /// why it ended (e.g. [`State::ClosedByBroker`], [`State::Failed`]; reaching the end of a
    /// terminated topic is no end, see [`Consumer::has_reached_end_of_topic`]). The future is
    /// `Send + 'static`.
    ///
    /// ```no_run
    /// # async fn demo(mut consumer: pulsar_sdk::Consumer) -> pulsar_sdk::Result<()> {
    /// let ended = consumer.closed();
    /// tokio::pin!(ended);
    /// loop {
    ///     tokio::select! {
    ///         state = &mut ended => { eprintln!("consumer ended: {state}"); break }
    ///         msg = consumer.recv() => consumer.ack(&msg?)?,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn closed(&self) -> impl std::future::Future<Output = State> + Send + 'static + use<> {
        self.states().terminal()
    }

    /// Failover subscriptions: whether this consumer is the active one (`None` until the
    /// broker says), and its changes: [`Updates::current`](crate::Updates::current),
    /// [`Updates::changed`](crate::Updates::changed) or the stream. (Of the first partition of
    /// the first topic; a pattern consumer with no topic yet: `None`, never changing.)
    pub fn active_updates(&self) -> crate::updates::Updates<Option<bool>> {
        crate::updates::Updates::until(
            match self.all().first() {
                Some(p) => p.active.subscribe(),
                None => watch::channel(None).1,
            },
            self.closed(),
        )
    }
}
