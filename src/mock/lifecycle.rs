//! Lifecycle operations on the broker state: closing the clients of a topic (unload, forced
//! deletion, PIP-139 close without reconnect), deleting topics and namespaces, terminating
//! topics. Pure functions of the state, like the handlers; the admin methods (`ops`) call them
//! under the state lock, so no command handler ever sees a half-done step.

use super::admin_error::MockAdminError;
use super::conns::Conns;
use super::dispatch;
use super::namespace::canonical_topic;
use super::state::BrokerState;
use super::topic::Topic;
use super::wire::{self, base_command::Type};
use crate::codec::Frame;
use crate::message_id::MessageId;

/// What CLOSE_PRODUCER / CLOSE_CONSUMER tell the client.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CloseNotice<'a> {
    /// PIP-139 `allow_reconnect` (field 1000); `None` leaves it out (reconnect allowed).
    pub(crate) allow_reconnect: Option<bool>,
    /// PIP-307 `assignedBrokerServiceUrl` (field 3): where to reconnect, skipping lookup.
    pub(crate) assigned_broker: Option<&'a str>,
}

impl CloseNotice<'static> {
    /// Reconnect allowed, through a fresh lookup (unload, forced topic deletion).
    pub(crate) const RECONNECT: CloseNotice<'static> = CloseNotice {
        allow_reconnect: None,
        assigned_broker: None,
    };
    /// Closed for good (PIP-139: namespace deletion).
    pub(crate) const FOR_GOOD: CloseNotice<'static> = CloseNotice {
        allow_reconnect: Some(false),
        assigned_broker: None,
    };
}

/// A CLOSE_PRODUCER from the broker.
pub(crate) fn close_producer_frame(producer_id: u64, notice: CloseNotice<'_>) -> Frame {
    Frame::simple(wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id,
            request_id: 0,
            assigned_broker_service_url: notice.assigned_broker.map(str::to_owned),
            allow_reconnect: notice.allow_reconnect,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A CLOSE_CONSUMER from the broker.
pub(crate) fn close_consumer_frame(consumer_id: u64, notice: CloseNotice<'_>) -> Frame {
    Frame::simple(wire::BaseCommand {
        r#type: Type::CloseConsumer as i32,
        close_consumer: Some(wire::CommandCloseConsumer {
            consumer_id,
            request_id: 0,
            assigned_broker_service_url: notice.assigned_broker.map(str::to_owned),
            allow_reconnect: notice.allow_reconnect,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// How many producers (attached or queued for exclusive access) and consumers the topics
/// `names` have.
pub(crate) fn clients(state: &BrokerState, names: &[String]) -> (usize, usize) {
    names
        .iter()
        .filter_map(|name| state.topics.get(name))
        .fold((0, 0), |(p, c), t| {
            (
                p + t.producers.len() + t.waiting_producers.len(),
                c + t
                    .subscriptions
                    .values()
                    .map(|s| s.consumers.len())
                    .sum::<usize>(),
            )
        })
}

/// Fails with [`MockAdminError::InUse`] if the topics `names` have any client.
fn check_unused(state: &BrokerState, what: &str, names: &[String]) -> Result<(), MockAdminError> {
    match clients(state, names) {
        (0, 0) => Ok(()),
        (producers, consumers) => Err(MockAdminError::InUse {
            name: what.to_owned(),
            producers,
            consumers,
        }),
    }
}

/// Detaches every producer and consumer of topic `name`, telling each with CLOSE_PRODUCER /
/// CLOSE_CONSUMER carrying `notice` (a late SEND from a closed producer is ignored). Their
/// unacknowledged entries go back to their subscriptions for redelivery (without counting a
/// redelivery); non-durable subscriptions, left without consumers, are removed. Nothing is
/// dispatched meanwhile: the topic is left without clients.
pub(crate) fn disconnect_topic(state: &mut BrokerState, name: &str, notice: CloseNotice<'_>) {
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(name) else {
        return;
    };
    disconnect_producers(topic, conns, notice);
    for sub in topic.subscriptions.values_mut() {
        for consumer in std::mem::take(&mut sub.consumers) {
            let (conn, id) = consumer.key;
            conns.send(conn, close_consumer_frame(id, notice));
            conns.forget_consumer(conn, id);
        }
        sub.active = None;
        sub.return_all_pending();
    }
    topic.subscriptions.retain(|_, sub| sub.durable);
}

/// Sends CLOSE_PRODUCER carrying `notice` to every producer of `topic` (attached or waiting
/// for exclusive access) and detaches them (a late SEND from one of them is ignored).
fn disconnect_producers(topic: &mut Topic, conns: &mut Conns, notice: CloseNotice<'_>) {
    let mut producers: Vec<_> = std::mem::take(&mut topic.producers).into_keys().collect();
    producers.extend(
        std::mem::take(&mut topic.waiting_producers)
            .into_iter()
            .map(|w| w.key),
    );
    for (conn, id) in producers {
        conns.send(conn, close_producer_frame(id, notice));
        conns.forget_producer(conn, id);
    }
}

/// Removes topic `name` with its subscriptions and messages, and its assignment to a broker.
/// Its clients must have been detached.
fn remove_topic(state: &mut BrokerState, name: &str) {
    state.topics.remove(name);
    state.owners.remove(&canonical_topic(name));
}

/// Deletes topic `topic` (a partitioned topic: its partitions and its partition count).
/// Without `force`, fails if any has producers or consumers; with it, closes them first with
/// reconnect allowed, as upstream does (so they may re-create it at once: the race PIP-139's
/// discussion describes).
pub(crate) fn delete_topic(
    state: &mut BrokerState,
    topic: &str,
    force: bool,
) -> Result<(), MockAdminError> {
    let topic = canonical_topic(topic);
    let names = state.topics.resolve(&topic);
    if names.is_empty() {
        return Err(MockAdminError::TopicNotFound(topic));
    }
    if !force {
        check_unused(state, &topic, &names)?;
    }
    for name in &names {
        disconnect_topic(state, name, CloseNotice::RECONNECT);
        remove_topic(state, name);
    }
    state.topics.set_partitions(&topic, 0);
    Ok(())
}

/// First step of a namespace deletion: checks, marks the namespace as being deleted (no
/// client may attach, no topic be created from now on) and, with `force`, closes every
/// producer and consumer of its topics for good (PIP-139 `allow_reconnect = false`). Without
/// `force`, fails if any is attached.
pub(crate) fn begin_namespace_deletion(
    state: &mut BrokerState,
    ns: &str,
    force: bool,
) -> Result<(), MockAdminError> {
    let names = state.topics.names_in(ns);
    if !state.topics.namespaces.is_deleting(ns) && !force {
        check_unused(state, ns, &names)?;
    }
    state.topics.namespaces.start_deleting(ns)?;
    if force {
        for name in &names {
            disconnect_topic(state, name, CloseNotice::FOR_GOOD);
        }
    }
    Ok(())
}

/// Last step of a namespace deletion: deletes its topics (subscriptions, messages, partition
/// counts, assignments) and the namespace itself (a termination stays).
pub(crate) fn finish_namespace_deletion(state: &mut BrokerState, ns: &str) {
    for name in state.topics.names_in(ns) {
        // Nothing can have attached meanwhile; this only keeps the registry consistent.
        disconnect_topic(state, &name, CloseNotice::FOR_GOOD);
        remove_topic(state, &name);
    }
    state.topics.remove_partitioned_in(ns);
    state.topics.namespaces.remove(ns);
    state.permissions.remove_namespace(ns);
}

/// Terminates topic `name`: its producers are disconnected (CLOSE_PRODUCER, reconnect allowed),
/// later SENDs fail with TopicTerminatedError, new producers are refused, and consumers that have acknowledged everything get REACHED_END_OF_TOPIC (now, or
/// when they get there). Returns the id of the last entry (entry `u64::MAX`, i.e. -1, for an
/// empty topic).
pub(crate) fn terminate_topic(
    state: &mut BrokerState,
    name: &str,
) -> Result<MessageId, MockAdminError> {
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(name) else {
        return Err(MockAdminError::TopicNotFound(canonical_topic(name)));
    };
    if !topic.persistent {
        return Err(MockAdminError::NotSupported(
            "Termination of a non-persistent topic is not supported".to_owned(),
        ));
    }
    topic.terminated = true;
    // Upstream `PersistentTopic.terminate`: once the ledger is terminated, every producer is
    // disconnected (`Producer::disconnect`: CLOSE_PRODUCER, reconnect allowed); the client's
    // re-create then meets TopicTerminatedError (`addProducer` on a terminated topic) and the
    // producer ends Terminated.
    disconnect_producers(topic, conns, CloseNotice::RECONNECT);
    dispatch::dispatch_all(topic, conns);
    Ok(MessageId::new(
        topic.ledger_id,
        topic.len().wrapping_sub(1),
        topic.partition,
    ))
}
