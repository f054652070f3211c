//! Interceptors: code of the application's that runs at fixed points of every message's life,
//! for auditing, metrics or stamping headers, as upstream's `ProducerInterceptor` and
//! `ConsumerInterceptor` (Java `org.apache.pulsar.client.api.interceptor`; Go and C++ have the
//! same hooks).
//!
//! Install them on a builder ([`ProducerBuilder::interceptor`](crate::ProducerBuilder::interceptor),
//! [`ConsumerBuilder::interceptor`](crate::ConsumerBuilder::interceptor), also for readers
//! through [`ReaderBuilder::interceptor`](crate::ReaderBuilder::interceptor)); several run in the
//! order they were added. Every hook has an empty default body: implement the ones you need.
//!
//! Where each hook runs (as in the Java client):
//! - [`ProducerInterceptor::before_send`]: in [`Producer::send`](crate::Producer::send), before
//!   the message is queued; it may change the message (properties, key, payload).
//! - [`ProducerInterceptor::on_send_acknowledgement`]: when the send's receipt completes (the
//!   broker stored it, or it failed), whether or not the application awaits the
//!   [`SendFuture`](crate::producer::SendFuture); on the producer's task, so keep it short.
//! - [`ConsumerInterceptor::before_consume`]: when the application takes the message
//!   (`recv`, the stream, a reader's `next`, a typed consumer), before it sees it; it may
//!   change the message.
//! - [`ConsumerInterceptor::on_acknowledge`] / [`on_acknowledge_cumulative`]: when the
//!   application acks (the consumer, an [`Acker`](crate::Acker)), with the ack's outcome.
//! - [`ConsumerInterceptor::on_negative_acks_send`] / [`on_ack_timeout_send`]: when the
//!   redelivery of negatively acked / timed-out messages is asked of the broker (after the
//!   negative-ack delay, not at the `nack` call: Java's `NegativeAcksTracker`).
//! - `on_partitions_change`: when a partitioned topic gained partitions and the producer or
//!   consumer has started using them.
//!
//! An interceptor that panics never breaks a send or a receive: the panic is caught, counted
//! ([`ProducerStats::interceptor_panics`](crate::stats::ProducerStats::interceptor_panics),
//! [`ConsumerStats::interceptor_panics`](crate::stats::ConsumerStats::interceptor_panics)) and
//! logged once per interceptor (a `warn`), and the other interceptors still run. A producer
//! or consumer without interceptors pays one `Option` check per message.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use pulsar_sdk::interceptor::ProducerInterceptor;
//! use pulsar_sdk::{ProducerMessage, TopicName};
//!
//! /// Stamps every message with the service that sent it.
//! struct Stamp;
//! impl ProducerInterceptor for Stamp {
//!     fn before_send(&self, _topic: &TopicName, message: &mut ProducerMessage) {
//!         message.properties.insert("sent-by".into(), "billing".into());
//!     }
//! }
//!
//! /// Counts failed sends.
//! #[derive(Default)]
//! struct Failures(AtomicU64);
//! impl ProducerInterceptor for Failures {
//!     fn on_send_acknowledgement(
//!         &self,
//!         _topic: &TopicName,
//!         _message: &ProducerMessage,
//!         result: Result<&pulsar_sdk::MessageId, &pulsar_sdk::Error>,
//!     ) {
//!         if result.is_err() {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//! # async fn demo(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
//! let producer = client
//!     .producer("orders")
//!     .interceptor(Stamp)
//!     .interceptor(Failures::default())
//!     .create()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! [`on_acknowledge_cumulative`]: ConsumerInterceptor::on_acknowledge_cumulative
//! [`on_ack_timeout_send`]: ConsumerInterceptor::on_ack_timeout_send

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Error;
use crate::message::{Message, ProducerMessage};
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// Hooks into a producer's sends (upstream `ProducerInterceptor`). See the [module
/// docs](self) for where each runs.
#[allow(unused_variables)]
pub trait ProducerInterceptor: Send + Sync + 'static {
    /// Before the message is queued, in [`Producer::send`](crate::Producer::send); may change
    /// it. `topic` is the producer's topic (the partitioned topic, not a partition).
    fn before_send(&self, topic: &TopicName, message: &mut ProducerMessage) {}

    /// When the send completed: the message's id once the broker stored it, or why it failed.
    /// `message` is the message as sent (after every `before_send`). Runs on the producer's
    /// task: keep it short.
    fn on_send_acknowledgement(
        &self,
        topic: &TopicName,
        message: &ProducerMessage,
        result: Result<&MessageId, &Error>,
    ) {
    }

    /// The partitioned topic `topic` now has `partitions` partitions, all of them in use.
    fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {}
}

/// Hooks into a consumer's (or reader's) messages and acks (upstream `ConsumerInterceptor`).
/// See the [module docs](self) for where each runs.
#[allow(unused_variables)]
pub trait ConsumerInterceptor: Send + Sync + 'static {
    /// When the application takes `message`, before it sees it; may change it
    /// ([`Message::topic`] says which topic or partition it came from).
    fn before_consume(&self, message: &mut Message) {}

    /// The application acked `id` (of `topic`, a partition's name on a partitioned topic):
    /// `Ok` when the ack was accepted, or why it was refused.
    fn on_acknowledge(&self, topic: &TopicName, id: &MessageId, result: Result<(), &Error>) {}

    /// The application acked everything up to `id` of `topic` (cumulatively).
    fn on_acknowledge_cumulative(
        &self,
        topic: &TopicName,
        id: &MessageId,
        result: Result<(), &Error>,
    ) {
    }

    /// The redelivery of these negatively acknowledged messages of `topic` is being asked of
    /// the broker (once their negative-ack delay passed).
    fn on_negative_acks_send(&self, topic: &TopicName, ids: &[MessageId]) {}

    /// These messages of `topic` were not acked within the ack timeout; their redelivery (or
    /// dead-lettering) is being asked.
    fn on_ack_timeout_send(&self, topic: &TopicName, ids: &[MessageId]) {}

    /// The partitioned topic `topic` now has `partitions` partitions, all of them subscribed.
    fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {}
}

/// The interceptors of one producer or consumer, in order, shared by its handles and tasks.
pub(crate) struct Chain<I: ?Sized> {
    entries: Box<[Entry<I>]>,
    /// Panics caught, over every interceptor and hook.
    panics: AtomicU64,
}

struct Entry<I: ?Sized> {
    hook: Arc<I>,
    /// Whether a panic of this interceptor was logged (once each).
    warned: AtomicBool,
}

/// The interceptors set on a builder: `None` when there are none (the only check a message
/// pays then).
pub(crate) type Interceptors<I> = Option<Arc<Chain<I>>>;

impl<I: ?Sized> Chain<I> {
    /// `chain` with `hook` added at the end (a new chain: builders are cloned).
    pub(crate) fn push(chain: &Interceptors<I>, hook: Arc<I>) -> Interceptors<I> {
        let mut hooks: Vec<Arc<I>> = chain
            .iter()
            .flat_map(|c| c.entries.iter().map(|e| e.hook.clone()))
            .collect();
        hooks.push(hook);
        Some(Arc::new(Chain {
            entries: hooks
                .into_iter()
                .map(|hook| Entry {
                    hook,
                    warned: AtomicBool::new(false),
                })
                .collect(),
            panics: AtomicU64::new(0),
        }))
    }

    /// Runs `f` on each interceptor in order; a panic is caught, counted and logged once per
    /// interceptor, and the next one still runs.
    pub(crate) fn each(&self, hook: &'static str, mut f: impl FnMut(&I)) {
        for (index, e) in self.entries.iter().enumerate() {
            // AssertUnwindSafe: what an interceptor may leave half-changed is the message it
            // was handed (sent or handed out as it is) and its own state.
            if catch_unwind(AssertUnwindSafe(|| f(&e.hook))).is_err() {
                self.panics.fetch_add(1, Ordering::Relaxed);
                if !e.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        interceptor = index,
                        hook,
                        "an interceptor panicked; the message goes on (logged once per \
                         interceptor, counted in stats)"
                    );
                }
            }
        }
    }

    /// Panics caught so far.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }
}

/// The panics caught by `chain`'s interceptors (0 without any).
pub(crate) fn panics<I: ?Sized>(chain: &Interceptors<I>) -> u64 {
    chain.as_ref().map_or(0, |c| c.panics())
}

impl<I: ?Sized> fmt::Debug for Chain<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interceptors")
            .field("count", &self.entries.len())
            .field("panics", &self.panics())
            .finish()
    }
}

impl Chain<dyn ProducerInterceptor> {
    pub(crate) fn before_send(&self, topic: &TopicName, message: &mut ProducerMessage) {
        self.each("before_send", |i| i.before_send(topic, message));
    }

    pub(crate) fn on_send_acknowledgement(
        &self,
        topic: &TopicName,
        message: &ProducerMessage,
        result: Result<&MessageId, &Error>,
    ) {
        self.each("on_send_acknowledgement", |i| {
            i.on_send_acknowledgement(topic, message, result)
        });
    }

    pub(crate) fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {
        self.each("on_partitions_change", |i| {
            i.on_partitions_change(topic, partitions)
        });
    }
}

impl Chain<dyn ConsumerInterceptor> {
    pub(crate) fn before_consume(&self, message: &mut Message) {
        self.each("before_consume", |i| i.before_consume(message));
    }

    pub(crate) fn on_acknowledge(
        &self,
        topic: &TopicName,
        id: &MessageId,
        result: Result<(), &Error>,
    ) {
        self.each("on_acknowledge", |i| i.on_acknowledge(topic, id, result));
    }

    pub(crate) fn on_acknowledge_cumulative(
        &self,
        topic: &TopicName,
        id: &MessageId,
        result: Result<(), &Error>,
    ) {
        self.each("on_acknowledge_cumulative", |i| {
            i.on_acknowledge_cumulative(topic, id, result)
        });
    }

    pub(crate) fn on_negative_acks_send(&self, topic: &TopicName, ids: &[MessageId]) {
        self.each("on_negative_acks_send", |i| {
            i.on_negative_acks_send(topic, ids)
        });
    }

    pub(crate) fn on_ack_timeout_send(&self, topic: &TopicName, ids: &[MessageId]) {
        self.each("on_ack_timeout_send", |i| i.on_ack_timeout_send(topic, ids));
    }

    pub(crate) fn on_partitions_change(&self, topic: &TopicName, partitions: u32) {
        self.each("on_partitions_change", |i| {
            i.on_partitions_change(topic, partitions)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Rec(&'static str, Arc<Mutex<Vec<&'static str>>>);
    impl ProducerInterceptor for Rec {
        fn on_partitions_change(&self, _: &TopicName, _: u32) {
            self.1.lock().unwrap().push(self.0);
            if self.0 == "boom" {
                panic!("interceptor test panic");
            }
        }
    }

    /// Interceptors run in order; one that panics is counted (each time) and the next still
    /// runs.
    #[test]
    fn a_panicking_interceptor_is_counted_and_the_rest_run() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut chain: Interceptors<dyn ProducerInterceptor> = None;
        for name in ["a", "boom", "c"] {
            chain = Chain::push(&chain, Arc::new(Rec(name, log.clone())));
        }
        let chain = chain.unwrap();
        let topic = TopicName::new("t").unwrap();
        chain.on_partitions_change(&topic, 2);
        chain.on_partitions_change(&topic, 3);
        assert_eq!(*log.lock().unwrap(), ["a", "boom", "c", "a", "boom", "c"]);
        assert_eq!(chain.panics(), 2);
    }
}
