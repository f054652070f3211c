//! The broker's state: what a real broker keeps in its metadata store and its topic registry.
//!
//! One [`BrokerState`] per mock broker, behind a `std::sync::Mutex` that is never held across an
//! `.await`. It is plain data with synchronous methods, so the command handlers
//! ([`super::handlers`]) stay pure functions of (state, command) and are testable without a
//! socket. Topics (with their messages and subscriptions) live in [`TopicTable`], the live
//! connections (with their producers and consumers) in [`Conns`]; namespaces and policies will
//! sit beside them, and admin operations are methods on [`BrokerState`].
//!
//! Lock order: the registry of sessions (`Shared::connections`) may be held while taking this
//! state's lock, never the reverse.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::conns::Conns;
use super::topic::Topic;
use crate::error::ServerError;

/// Everything the broker knows about the cluster it pretends to be part of.
#[derive(Debug, Default)]
pub(crate) struct BrokerState {
    /// Topics: partition counts, and the topics themselves.
    pub(crate) topics: TopicTable,
    /// How lookups are answered.
    pub(crate) lookup: LookupRules,
    /// The live connections, their producers and consumers, and their outbound channels.
    pub(crate) conns: Conns,
    /// Producer names generated so far (`mock-<n>`).
    pub(crate) generated_names: u64,
}

impl BrokerState {
    /// A unique producer name, `mock-<n>`.
    pub(crate) fn generate_producer_name(&mut self) -> String {
        self.generated_names += 1;
        format!("mock-{}", self.generated_names)
    }
}

/// The topic registry, keyed by canonical topic name (`persistent://tenant/namespace/local`).
#[derive(Debug, Default)]
pub(crate) struct TopicTable {
    partitioned: HashMap<String, u32>,
    /// Topics that exist (auto-created by a producer or consumer, or by the admin API).
    topics: BTreeMap<String, Topic>,
    /// The last ledger id handed out (each topic gets its own).
    last_ledger: u64,
}

impl TopicTable {
    /// The topic `name` (any form), if it exists.
    pub(crate) fn get(&self, name: &str) -> Option<&Topic> {
        self.topics.get(&canonical_topic(name))
    }

    /// The topic `name` (any form), if it exists.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Topic> {
        self.topics.get_mut(&canonical_topic(name))
    }

    /// The topic `name` (any form), created if absent; the flag tells whether it was.
    pub(crate) fn get_or_create(&mut self, name: &str) -> (&mut Topic, bool) {
        let name = canonical_topic(name);
        let created = !self.topics.contains_key(&name);
        if created {
            self.last_ledger += 1;
            let ledger = self.last_ledger;
            self.topics.insert(name.clone(), Topic::new(&name, ledger));
        }
        (self.topics.get_mut(&name).expect("just ensured"), created)
    }

    /// Sets the partition count of a partitioned topic; 0 makes it non-partitioned.
    pub(crate) fn set_partitions(&mut self, topic: &str, partitions: u32) {
        let topic = canonical_topic(topic);
        if partitions == 0 {
            self.partitioned.remove(&topic);
        } else {
            self.partitioned.insert(topic, partitions);
        }
    }

    /// The partition count of `topic`: 0 for a non-partitioned or unknown topic, as a broker
    /// with topic auto-creation of non-partitioned topics answers.
    pub(crate) fn partitions(&self, topic: &str) -> u32 {
        self.partitioned
            .get(&canonical_topic(topic))
            .copied()
            .unwrap_or(0)
    }
}

/// What a lookup of one topic is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LookupAnswer {
    /// `Connect` to this broker (the topic is served here).
    Connect,
    /// `Redirect` to another broker.
    Redirect {
        /// The target broker's service URL.
        service_url: String,
        /// Whether the redirect is authoritative.
        authoritative: bool,
    },
    /// `Failed` with an error code and message.
    Failed {
        /// The broker error code.
        code: ServerError,
        /// The error message.
        message: String,
    },
}

/// The lookup rules a test sets. A per-topic rule beats the broker-wide failure, which beats
/// the broker-wide redirect; with no rule the broker answers `Connect` for itself.
#[derive(Debug, Default)]
pub(crate) struct LookupRules {
    per_topic: HashMap<String, LookupAnswer>,
    failure: Option<LookupAnswer>,
    redirect: Option<LookupAnswer>,
}

impl LookupRules {
    /// The answer for a lookup of `topic`.
    pub(crate) fn answer(&self, topic: &str) -> LookupAnswer {
        self.per_topic
            .get(&canonical_topic(topic))
            .or(self.failure.as_ref())
            .or(self.redirect.as_ref())
            .cloned()
            .unwrap_or(LookupAnswer::Connect)
    }

    /// Redirects every lookup (without a per-topic rule) to `service_url`.
    pub(crate) fn redirect_all(&mut self, service_url: &str, authoritative: bool) {
        self.redirect = Some(LookupAnswer::Redirect {
            service_url: service_url.to_owned(),
            authoritative,
        });
    }

    /// Removes the broker-wide redirect.
    pub(crate) fn clear_redirect(&mut self) {
        self.redirect = None;
    }

    /// Sets the answer for one topic.
    pub(crate) fn set_topic(&mut self, topic: &str, answer: LookupAnswer) {
        self.per_topic.insert(canonical_topic(topic), answer);
    }

    /// Removes the rule for one topic.
    pub(crate) fn clear_topic(&mut self, topic: &str) {
        self.per_topic.remove(&canonical_topic(topic));
    }

    /// Fails every lookup (without a per-topic rule).
    pub(crate) fn fail_all(&mut self, code: ServerError, message: &str) {
        self.failure = Some(LookupAnswer::Failed {
            code,
            message: message.to_owned(),
        });
    }

    /// Removes every failure rule, broker-wide and per topic.
    pub(crate) fn clear_failures(&mut self) {
        self.failure = None;
        self.per_topic
            .retain(|_, answer| !matches!(answer, LookupAnswer::Failed { .. }));
    }
}

/// Injected faults: how the broker misbehaves, as opposed to what it knows.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Faults {
    /// Keep reading and recording, but send nothing (no responses, no PONG, no keepalive PING).
    pub(crate) unresponsive: bool,
    /// Delay applied to every response except PONG.
    pub(crate) response_delay: Duration,
}

/// Completes a short topic name the way brokers and clients do: `t` →
/// `persistent://public/default/t`, `tenant/ns/t` → `persistent://tenant/ns/t`; full names are
/// kept as they are.
pub(crate) fn canonical_topic(topic: &str) -> String {
    if topic.contains("://") {
        topic.to_owned()
    } else if topic.contains('/') {
        format!("persistent://{topic}")
    } else {
        format!("persistent://public/default/{topic}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_completed() {
        assert_eq!(canonical_topic("t"), "persistent://public/default/t");
        assert_eq!(canonical_topic("a/b/t"), "persistent://a/b/t");
        assert_eq!(
            canonical_topic("non-persistent://a/b/t"),
            "non-persistent://a/b/t"
        );
    }

    #[test]
    fn partition_table_defaults_to_zero() {
        let mut topics = TopicTable::default();
        topics.set_partitions("t", 4);
        assert_eq!(topics.partitions("persistent://public/default/t"), 4);
        assert_eq!(topics.partitions("persistent://public/default/u"), 0);
        topics.set_partitions("persistent://public/default/t", 0);
        assert_eq!(topics.partitions("t"), 0);
    }

    #[test]
    fn lookup_rule_precedence() {
        let mut rules = LookupRules::default();
        assert_eq!(rules.answer("t"), LookupAnswer::Connect);
        rules.redirect_all("pulsar://other:6650", false);
        assert!(matches!(rules.answer("t"), LookupAnswer::Redirect { .. }));
        rules.fail_all(ServerError::ServiceNotReady, "busy");
        assert!(matches!(rules.answer("t"), LookupAnswer::Failed { .. }));
        rules.set_topic("t", LookupAnswer::Connect);
        assert_eq!(rules.answer("t"), LookupAnswer::Connect);
        assert!(matches!(rules.answer("u"), LookupAnswer::Failed { .. }));
        rules.clear_failures();
        assert!(matches!(rules.answer("u"), LookupAnswer::Redirect { .. }));
        rules.clear_redirect();
        assert_eq!(rules.answer("u"), LookupAnswer::Connect);
    }
}
