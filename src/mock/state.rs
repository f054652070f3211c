//! The broker's state: what a real broker keeps in its metadata store and its topic registry.
//!
//! One [`BrokerState`] per cluster: a lone mock broker has its own; brokers started with
//! [`MockBroker::start_cluster`](super::MockBroker::start_cluster) share one, as the brokers of
//! a real cluster share the metadata store and the storage. It sits behind a
//! `std::sync::Mutex` that is never held across an `.await`. It is plain data with synchronous
//! methods, so the command handlers ([`super::handlers`]) stay pure functions of (state,
//! command) and are testable without a socket. Topics (with their messages and subscriptions)
//! and namespaces live in [`TopicTable`], the live connections of every broker (with their
//! producers and consumers) in [`Conns`]. What is per broker (lookup rules) is keyed by the
//! broker's service URL.
//!
//! Each feature's part of the state is a leaf module that imports no handler (`conns`,
//! `namespace`, `permissions`, `schemas`, `timers`, `topic_list_watchers`,
//! `partition_watchers`, `injected`), so the handlers can import this state without a cycle.
//!
//! Lock order: the registry of sessions (`Shared::connections`) may be held while taking this
//! state's lock, never the reverse.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::conns::Conns;
use super::injected::Injected;
use super::namespace::{canonical_topic, namespace_of, Namespaces};
use super::partition_watchers::Watchers;
use super::permissions::Permissions;
use super::timers::Timers;
use super::topic::Topic;
use super::topic_list_watchers::TopicListWatchers;
use super::{ConnectionId, MockBrokerConfig};
use crate::error::ServerError;

/// Everything the brokers know about the cluster they are part of.
#[derive(Debug, Default)]
pub(crate) struct BrokerState {
    /// Topics: partition counts, namespaces, and the topics themselves.
    pub(crate) topics: TopicTable,
    /// How lookups are answered, per broker (by service URL).
    pub(crate) lookup: HashMap<String, LookupRules>,
    /// Topics assigned to a broker (by service URL) by an unload to it: the other brokers
    /// redirect lookups there and refuse producers and consumers.
    pub(crate) owners: HashMap<String, String>,
    /// The live connections, their producers and consumers, and their outbound channels.
    pub(crate) conns: Conns,
    /// Producer names generated so far (`mock-<n>`).
    pub(crate) generated_names: u64,
    /// The last connection id handed out (ids are unique across the brokers sharing the state).
    pub(crate) last_connection: u64,
    /// Who may produce / consume where (namespace policies).
    pub(crate) permissions: Permissions,
    /// PIP-247 partition update watchers, of every broker's connections.
    pub(crate) watchers: Watchers,
    /// PIP-145 topic-list watchers, of every broker's connections.
    pub(crate) topic_lists: TopicListWatchers,
    /// Deadlines (delayed deliveries), served by each broker's timer task.
    pub(crate) timers: Timers,
    /// Runtime broker settings, per broker (by service URL).
    pub(crate) settings: HashMap<String, BrokerSettings>,
    /// Errors pushed by the test, and the report of those consumed ([`super::inject`]).
    pub(crate) injected: Injected,
    /// Schemas by topic, and the compatibility strategy ([`super::schemas`]).
    pub(crate) schemas: super::schemas::Registry,
    /// The transaction coordinators' transactions ([`super::transactions`]).
    pub(crate) coordinator: super::txn_state::Coordinator,
}

/// The broker settings a test may change at runtime (initially from the broker's
/// [`MockBrokerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BrokerSettings {
    /// `allowAutoSubscriptionCreation` (PIP-124 initial subscriptions).
    pub(crate) allow_auto_subscription_creation: bool,
    /// Whether CONNECTED advertises `supports_topic_watchers` and WATCH_TOPIC_LIST is served.
    pub(crate) topic_watchers: bool,
    /// `enableBrokerSideSubscriptionPatternEvaluation` (GET_TOPICS_OF_NAMESPACE filtering).
    pub(crate) pattern_evaluation: bool,
    /// How long a PIP-247 partition update waits for its result before being sent again.
    pub(crate) partition_update_resend_timeout: Duration,
    /// Cut from the storage: every write fails with a retriable error ([`super::inject`]).
    pub(crate) storage_cut: bool,
}

impl BrokerSettings {
    /// The settings `config` starts with.
    pub(crate) fn from_config(config: &MockBrokerConfig) -> Self {
        BrokerSettings {
            allow_auto_subscription_creation: config.allow_auto_subscription_creation,
            topic_watchers: config.supports_topic_watchers,
            pattern_evaluation: config.broker_side_pattern_evaluation,
            partition_update_resend_timeout: config.partition_update_resend_timeout,
            storage_cut: false,
        }
    }
}

impl BrokerState {
    /// A unique producer name, `mock-<n>`.
    pub(crate) fn generate_producer_name(&mut self) -> String {
        self.generated_names += 1;
        format!("mock-{}", self.generated_names)
    }

    /// A new connection id.
    pub(crate) fn next_connection_id(&mut self) -> ConnectionId {
        self.last_connection += 1;
        ConnectionId(self.last_connection)
    }

    /// The settings of the broker serving at `service_url` (started with `config`).
    pub(crate) fn settings(&self, service_url: &str, config: &MockBrokerConfig) -> BrokerSettings {
        self.settings
            .get(service_url)
            .copied()
            .unwrap_or_else(|| BrokerSettings::from_config(config))
    }

    /// The settings of the broker serving at `service_url` (started with `config`), to change.
    pub(crate) fn settings_mut(
        &mut self,
        service_url: &str,
        config: &MockBrokerConfig,
    ) -> &mut BrokerSettings {
        self.settings
            .entry(service_url.to_owned())
            .or_insert_with(|| BrokerSettings::from_config(config))
    }

    /// The lookup rules of the broker serving at `service_url`.
    pub(crate) fn lookup_rules(&mut self, service_url: &str) -> &mut LookupRules {
        self.lookup.entry(service_url.to_owned()).or_default()
    }

    /// How the broker at `service_url` answers a lookup of `topic`: a namespace being deleted
    /// fails it (NotAllowed); otherwise the test's per-topic rule, then its broker-wide
    /// failure, then the topic's owner if another broker (authoritative Redirect), then the
    /// broker-wide redirect, else `Connect`.
    pub(crate) fn lookup_answer(&self, topic: &str, service_url: &str) -> LookupAnswer {
        let name = canonical_topic(topic);
        if self.topics.namespaces.is_deleting(&namespace_of(&name)) {
            return LookupAnswer::Failed {
                code: ServerError::NotAllowed,
                message: "Namespace is being deleted".to_owned(),
            };
        }
        let owner = self
            .owners
            .get(&name)
            .filter(|owner| *owner != service_url)
            .map(|owner| LookupAnswer::Redirect {
                service_url: owner.clone(),
                authoritative: true,
            });
        match self.lookup.get(service_url) {
            Some(rules) => rules.answer_with_owner(&name, owner),
            None => owner.unwrap_or(LookupAnswer::Connect),
        }
    }

    /// Why a producer or consumer may not attach to `topic` on the broker at `service_url`:
    /// its namespace is being deleted (NotAllowed), another broker owns it (ServiceNotReady,
    /// as a broker not owning the bundle), or it does not exist and cannot be created (its
    /// namespace is terminated: NotAllowed).
    pub(crate) fn attach_refusal(
        &self,
        topic: &str,
        service_url: &str,
    ) -> Option<(ServerError, String)> {
        let name = canonical_topic(topic);
        let ns = namespace_of(&name);
        if self.topics.namespaces.is_deleting(&ns) {
            return Some((ServerError::NotAllowed, "Namespace is being deleted".into()));
        }
        if let Some(owner) = self.owners.get(&name).filter(|o| *o != service_url) {
            return Some((
                ServerError::ServiceNotReady,
                format!("Topic {name} is not served by this broker (assigned to {owner})"),
            ));
        }
        if self.topics.get(&name).is_none() {
            return self
                .topics
                .namespaces
                .creation_refusal(&ns)
                .map(|message| (ServerError::NotAllowed, message));
        }
        None
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
    /// Tenants and namespaces.
    pub(crate) namespaces: Namespaces,
    /// Bumped whenever a topic is created or removed (topic-list watchers compare it).
    pub(crate) version: u64,
}

impl TopicTable {
    /// Every topic.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Topic> {
        self.topics.values_mut()
    }

    /// The topic `name` (any form), if it exists.
    pub(crate) fn get(&self, name: &str) -> Option<&Topic> {
        self.topics.get(&canonical_topic(name))
    }

    /// The topic `name` (any form), if it exists.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Topic> {
        self.topics.get_mut(&canonical_topic(name))
    }

    /// The topic `name` (any form), created if absent (with its namespace); the flag tells
    /// whether it was. Callers check [`BrokerState::attach_refusal`] or
    /// [`Namespaces::creation_refusal`] first.
    pub(crate) fn get_or_create(&mut self, name: &str) -> (&mut Topic, bool) {
        let name = canonical_topic(name);
        let created = !self.topics.contains_key(&name);
        if created {
            self.namespaces.ensure(&namespace_of(&name));
            self.last_ledger += 1;
            let ledger = self.last_ledger;
            self.topics.insert(name.clone(), Topic::new(&name, ledger));
            self.version += 1;
        }
        (self.topics.get_mut(&name).expect("just ensured"), created)
    }

    /// Removes topic `name` (any form) with its messages and subscriptions.
    pub(crate) fn remove(&mut self, name: &str) -> Option<Topic> {
        let removed = self.topics.remove(&canonical_topic(name));
        if removed.is_some() {
            self.version += 1;
        }
        removed
    }

    /// The existing topics of namespace `ns`, sorted.
    pub(crate) fn names_in(&self, ns: &str) -> Vec<String> {
        self.topics
            .keys()
            .filter(|name| namespace_of(name) == ns)
            .cloned()
            .collect()
    }

    /// How many topics exist.
    pub(crate) fn count(&self) -> usize {
        self.topics.len()
    }

    /// `topic` (any form) if it is not partitioned, else its partitions; only those that exist.
    pub(crate) fn resolve(&self, topic: &str) -> Vec<String> {
        let topic = canonical_topic(topic);
        let n = self.partitions(&topic);
        let names = if n == 0 {
            vec![topic]
        } else {
            (0..n).map(|i| format!("{topic}-partition-{i}")).collect()
        };
        names
            .into_iter()
            .filter(|name| self.topics.contains_key(name))
            .collect()
    }

    /// Forgets the partition counts of the partitioned topics of namespace `ns`.
    pub(crate) fn remove_partitioned_in(&mut self, ns: &str) {
        self.partitioned.retain(|name, _| namespace_of(name) != ns);
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
    /// `Connect` to another broker, reached directly.
    ConnectTo {
        /// The serving broker's service URL.
        service_url: String,
    },
    /// `Connect` to another broker, reached through this one as a proxy
    /// (`proxy_through_service_url = true`).
    Proxied {
        /// The serving broker's service URL.
        service_url: String,
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
    #[cfg(test)]
    pub(crate) fn answer(&self, topic: &str) -> LookupAnswer {
        self.answer_with_owner(topic, None)
    }

    /// The answer for a lookup of `topic` whose `owner` answer (a redirect to the broker it
    /// was assigned to) ranks between the broker-wide failure and the broker-wide redirect.
    pub(crate) fn answer_with_owner(
        &self,
        topic: &str,
        owner: Option<LookupAnswer>,
    ) -> LookupAnswer {
        self.per_topic
            .get(&canonical_topic(topic))
            .or(self.failure.as_ref())
            .cloned()
            .or(owner)
            .or_else(|| self.redirect.clone())
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

    /// Answers every lookup `Connect` to `service_url`, to be reached through this broker.
    pub(crate) fn proxy_all(&mut self, service_url: &str) {
        self.redirect = Some(LookupAnswer::Proxied {
            service_url: service_url.to_owned(),
        });
    }

    /// Whether this broker acts as a proxy (it answers lookups `Connect` through itself), so
    /// that it relays a CONNECT naming a target broker ([`super::proxy`]).
    pub(crate) fn is_proxy(&self) -> bool {
        matches!(self.redirect, Some(LookupAnswer::Proxied { .. }))
            || self
                .per_topic
                .values()
                .any(|a| matches!(a, LookupAnswer::Proxied { .. }))
    }

    /// Answers every lookup `Connect` to `service_url`, reached directly.
    pub(crate) fn connect_all(&mut self, service_url: &str) {
        self.redirect = Some(LookupAnswer::ConnectTo {
            service_url: service_url.to_owned(),
        });
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
    /// Round-trip time: delay applied to everything the broker sends of its own (responses,
    /// PONG, MESSAGE and other broker-initiated frames), on top of `response_delay`.
    pub(crate) round_trip_time: Duration,
    /// How long a namespace deletion takes between closing the clients and deleting the
    /// topics.
    pub(crate) deletion_delay: Duration,
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
        let owner = LookupAnswer::Redirect {
            service_url: "pulsar://owner:6650".into(),
            authoritative: true,
        };
        assert_eq!(rules.answer_with_owner("u", Some(owner.clone())), owner);
        rules.clear_redirect();
        assert_eq!(rules.answer("u"), LookupAnswer::Connect);
    }
}
