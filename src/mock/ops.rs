//! Lifecycle admin operations of the in-memory broker, as a real broker's admin API offers
//! them: namespaces (PIP-139 deletion, the "terminated namespace" of its discussion), topic
//! unload (also to another broker, PIP-307), termination and deletion.
//!
//! Namespace names are `tenant/namespace`; topic names may be given in any form (`t`,
//! `tenant/ns/t`, `persistent://tenant/ns/t`), and a partitioned topic's name stands for its
//! partitions in [`MockBroker::unload_topic`], [`MockBroker::unload_topic_to`] and
//! [`MockBroker::delete_topic`]. Every operation is atomic with respect to the commands the
//! broker serves (it runs under the state lock), except the deliberate window of a namespace
//! deletion (see [`MockBroker::delete_namespace`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::admin_error::MockAdminError;
use super::lifecycle::{self, CloseNotice};
use super::namespace::canonical_topic;
use super::namespace::parse_namespace;
use super::state::BrokerState;
use super::{lock, MockBroker};
use crate::message_id::MessageId;

impl MockBroker {
    /// Creates namespace `namespace` (`tenant/ns`) and, if new, its tenant. Optional: a
    /// namespace is also created with its first topic (by a producer, a consumer or the admin
    /// API). Fails if it exists or is being deleted. Creating explicitly a namespace that was
    /// terminated and deleted makes it a fresh one (not terminated).
    pub fn create_namespace(&self, namespace: &str) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        lock(&self.shared().state).topics.namespaces.create(&ns)
    }

    /// The namespaces that exist (also those being deleted), sorted.
    pub fn namespaces(&self) -> Vec<String> {
        lock(&self.shared().state).topics.namespaces.names()
    }

    /// The tenants (of every namespace ever created), sorted.
    pub fn tenants(&self) -> Vec<String> {
        lock(&self.shared().state).topics.namespaces.tenants()
    }

    /// The topics of namespace `namespace` (canonical names; partitions of partitioned topics
    /// are listed as topics), sorted.
    pub fn topics_in_namespace(&self, namespace: &str) -> Vec<String> {
        let Ok(ns) = parse_namespace(namespace) else {
            return Vec::new();
        };
        lock(&self.shared().state).topics.names_in(&ns)
    }

    /// Deletes namespace `namespace` with its topics (their subscriptions and messages), as a
    /// broker with PIP-139 does:
    ///
    /// 1. Without `force`, fails with [`MockAdminError::InUse`] if any producer or consumer is
    ///    attached to one of its topics (nothing changes).
    /// 2. Marks the namespace as being deleted: from now on a PRODUCER or SUBSCRIBE on any of
    ///    its topics (existing or not) is refused with ERROR NotAllowed "Namespace is being
    ///    deleted", and lookups of its topics fail the same way, so no client can re-create a
    ///    topic behind the deletion.
    /// 3. With `force`, sends CLOSE_PRODUCER / CLOSE_CONSUMER with `allow_reconnect = false`
    ///    (PIP-139, field 1000) to every producer and consumer of its topics, and detaches them.
    /// 4. Waits the deletion delay ([`set_deletion_delay`](Self::set_deletion_delay); by
    ///    default it only yields once to the runtime), as a real deletion takes a while.
    /// 5. Deletes the topics (and partition counts) and the namespace. A later create of a
    ///    topic in it creates it again, unless it was terminated
    ///    ([`terminate_namespace`](Self::terminate_namespace)).
    ///
    /// Fails with [`MockAdminError::NamespaceNotFound`] or
    /// [`MockAdminError::NamespaceBeingDeleted`]. If this future is dropped after step 2, the
    /// deletion completes at once.
    pub async fn delete_namespace(
        &self,
        namespace: &str,
        force: bool,
    ) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        lifecycle::begin_namespace_deletion(&mut lock(&self.shared().state), &ns, force)?;
        let finish = FinishDeletion {
            state: Arc::clone(&self.shared().state),
            ns,
        };
        let delay = lock(&self.shared().faults).deletion_delay;
        if delay.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(delay).await;
        }
        drop(finish);
        Ok(())
    }

    /// Sets how long a namespace deletion waits between closing the clients and deleting the
    /// topics ([`delete_namespace`](Self::delete_namespace), step 4), to widen the window in
    /// which clients racing the deletion are refused. Default zero.
    pub fn set_deletion_delay(&self, delay: Duration) {
        lock(&self.shared().faults).deletion_delay = delay;
    }

    /// Whether a deletion of namespace `namespace` is in progress.
    pub fn is_namespace_being_deleted(&self, namespace: &str) -> bool {
        parse_namespace(namespace).is_ok_and(|ns| {
            lock(&self.shared().state)
                .topics
                .namespaces
                .is_deleting(&ns)
        })
    }

    /// Terminates namespace `namespace` (the "terminated namespace" proposed in the PIP-139
    /// discussion): from now on no topic can be created in it. A PRODUCER or SUBSCRIBE on a
    /// topic of it that does not exist is refused with ERROR NotAllowed (as is
    /// [`create_topic`](Self::create_topic)); existing topics keep working, and the namespace
    /// may be deleted. The termination outlives a deletion: the namespace cannot be re-created
    /// by a topic, only by [`create_namespace`](Self::create_namespace). Fails with
    /// [`MockAdminError::NamespaceNotFound`].
    pub fn terminate_namespace(&self, namespace: &str) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        lock(&self.shared().state).topics.namespaces.terminate(&ns)
    }

    /// Whether namespace `namespace` is terminated (also after it was deleted).
    pub fn is_namespace_terminated(&self, namespace: &str) -> bool {
        parse_namespace(namespace).is_ok_and(|ns| {
            lock(&self.shared().state)
                .topics
                .namespaces
                .is_terminated(&ns)
        })
    }

    /// Turns message deduplication on or off for the topics of namespace `namespace`, as
    /// upstream's namespace policy (`pulsar-admin namespaces set-deduplication`); off by
    /// default, as on a broker with `brokerDeduplicationEnabled=false`. Upstream
    /// `MessageDeduplication`:
    ///
    /// - off: PRODUCER_SUCCESS carries `last_sequence_id = -1`, and every SEND is stored, a
    ///   duplicate too;
    /// - on: PRODUCER_SUCCESS carries the highest sequence id stored for the producer's name
    ///   (-1 if none), and a SEND whose `sequence_id` is not above it is a duplicate: it is
    ///   not stored, and its SEND_RECEIPT carries message id `(-1, -1)` (ledger and entry id
    ///   `u64::MAX` on the wire), with its own sequence ids. Only the last chunk of a chunked
    ///   message is checked and recorded (its chunks share one sequence id).
    ///
    /// The ids are tracked only while deduplication is on: turning it off forgets them, and
    /// turning it on starts from none (upstream clears its maps when disabling and, when
    /// enabling, recovers only from its own cursor, opened at the end of the topic). The
    /// setting applies from the next command on and goes with the namespace's deletion. Fails
    /// with [`MockAdminError::InvalidName`].
    pub fn set_deduplication(&self, namespace: &str, enabled: bool) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        let mut state = lock(&self.shared().state);
        let was = state.topics.namespaces.deduplication(&ns);
        state.topics.namespaces.set_deduplication(&ns, enabled);
        if was != enabled {
            for name in state.topics.names_in(&ns) {
                if let Some(topic) = state.topics.get_mut(&name) {
                    topic.last_sequence.clear();
                }
            }
        }
        Ok(())
    }

    /// Whether message deduplication is on for namespace `namespace`
    /// ([`set_deduplication`](Self::set_deduplication)).
    pub fn is_deduplication_enabled(&self, namespace: &str) -> bool {
        parse_namespace(namespace).is_ok_and(|ns| {
            lock(&self.shared().state)
                .topics
                .namespaces
                .deduplication(&ns)
        })
    }

    /// Unloads topic `topic` (a partitioned topic: each partition), as a broker does when it
    /// gives up a topic: sends CLOSE_PRODUCER / CLOSE_CONSUMER without `allow_reconnect`
    /// (reconnect allowed) to each producer and consumer and detaches them. They are expected
    /// to look the topic up again and re-create their producers and consumers; messages
    /// dispatched but not acknowledged go back to their subscriptions for redelivery. The
    /// topic's messages and durable subscriptions stay. An assignment made by
    /// [`unload_topic_to`](Self::unload_topic_to) is cleared. Fails with
    /// [`MockAdminError::TopicNotFound`].
    pub fn unload_topic(&self, topic: &str) -> Result<(), MockAdminError> {
        self.unload(topic, None, false)
    }

    /// Like [`unload_topic`](Self::unload_topic), but the topic moves to the broker serving
    /// `broker_service_url` (e.g. another mock broker's
    /// [`service_url`](Self::service_url)): the close commands carry it as PIP-307's
    /// `assignedBrokerServiceUrl` (field 3), so clients reconnect there without a lookup; this
    /// broker's later lookups of the topic answer an authoritative `Redirect` there (unless a
    /// test rule says otherwise), and its PRODUCER / SUBSCRIBE on the topic are refused with
    /// ServiceNotReady, as from a broker that no longer owns it.
    ///
    /// Brokers of one cluster ([`start_cluster`](Self::start_cluster),
    /// [`start_with_shared_state`](Self::start_with_shared_state)) share the storage, so the
    /// topic keeps its messages and subscriptions on the new broker, and every broker of the
    /// cluster redirects its lookups there. Independent mock brokers do not: on the target the
    /// topic starts empty. Fails with [`MockAdminError::TopicNotFound`].
    pub fn unload_topic_to(
        &self,
        topic: &str,
        broker_service_url: &str,
    ) -> Result<(), MockAdminError> {
        self.unload(topic, Some(broker_service_url), true)
    }

    /// Unloads `topic` (see [`unload_topic`](Self::unload_topic)) and, with a `target`,
    /// assigns it to that broker; `announce` puts the target in the close commands (PIP-307).
    pub(crate) fn unload(
        &self,
        topic: &str,
        target: Option<&str>,
        announce: bool,
    ) -> Result<(), MockAdminError> {
        let mut state = lock(&self.shared().state);
        let names = state.topics.resolve(topic);
        if names.is_empty() {
            return Err(MockAdminError::TopicNotFound(canonical_topic(topic)));
        }
        let notice = CloseNotice {
            allow_reconnect: None,
            assigned_broker: target.filter(|_| announce),
        };
        for name in names {
            lifecycle::disconnect_topic(&mut state, &name, notice);
            match target {
                Some(url) => state.owners.insert(name, url.to_owned()),
                None => state.owners.remove(&name),
            };
        }
        Ok(())
    }

    /// The broker topic `topic` was assigned to by
    /// [`unload_topic_to`](Self::unload_topic_to), if any.
    pub fn topic_owner(&self, topic: &str) -> Option<String> {
        lock(&self.shared().state)
            .owners
            .get(&canonical_topic(topic))
            .cloned()
    }

    /// Terminates topic `topic` (not a partitioned topic's name; one partition at a time), as
    /// upstream's `PersistentTopic.terminate`: every producer gets CLOSE_PRODUCER (reconnect
    /// allowed) and is detached, so its re-creation meets ERROR TopicTerminatedError, as does
    /// any new PRODUCER; a SEND still in flight from a disconnected producer is ignored (as
    /// upstream's `recentlyClosedProducers`). Consumers keep receiving what is stored; once a
    /// subscription has dispatched every entry and had all of them acknowledged, each of its
    /// consumers gets REACHED_END_OF_TOPIC, once (now, or when it gets there; a consumer that
    /// subscribes later, too), as upstream's dispatchers do. Returns the id of the last entry
    /// (entry id `u64::MAX`, i.e. -1, if the topic is empty). Fails with
    /// [`MockAdminError::TopicNotFound`], or [`MockAdminError::NotSupported`] for a
    /// non-persistent topic.
    pub fn terminate_topic(&self, topic: &str) -> Result<MessageId, MockAdminError> {
        lifecycle::terminate_topic(&mut lock(&self.shared().state), topic)
    }

    /// Whether topic `topic` exists and is terminated.
    pub fn is_topic_terminated(&self, topic: &str) -> bool {
        lock(&self.shared().state)
            .topics
            .get(topic)
            .is_some_and(|t| t.terminated)
    }

    /// Deletes topic `topic` (a partitioned topic: its partitions and its partition count)
    /// with its subscriptions and messages, as upstream's admin API does. Without `force`,
    /// fails with [`MockAdminError::InUse`] if any producer or consumer is attached. With
    /// `force`, first closes them with CLOSE_PRODUCER / CLOSE_CONSUMER without
    /// `allow_reconnect` (reconnect allowed, as upstream): clients reconnect and may re-create
    /// the topic at once (auto-creation), which is the race PIP-139's discussion describes
    /// (use [`delete_namespace`](Self::delete_namespace) to close them for good). Fails with
    /// [`MockAdminError::TopicNotFound`].
    pub fn delete_topic(&self, topic: &str, force: bool) -> Result<(), MockAdminError> {
        let mut state = lock(&self.shared().state);
        let r = lifecycle::delete_topic(&mut state, topic, force);
        super::topic_lists::sync(&mut state);
        r
    }
}

/// Completes a namespace deletion when dropped (also if the deleting future is dropped).
struct FinishDeletion {
    state: Arc<Mutex<BrokerState>>,
    ns: String,
}

impl Drop for FinishDeletion {
    fn drop(&mut self) {
        lifecycle::finish_namespace_deletion(&mut lock(&self.state), &self.ns);
    }
}
