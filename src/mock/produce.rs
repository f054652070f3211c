//! PRODUCER, SEND and CLOSE_PRODUCER, as upstream's `ServerCnx` and `AbstractTopic` answer them.
//!
//! - PRODUCER auto-creates the topic (and, when it does, the producer's
//!   `initial_subscription_name` subscription at the earliest position, PIP-124). The name is
//!   the one given or a generated `mock-<n>`; a given name already attached to the topic is
//!   refused with ProducerBusy. Access modes: Shared unless an exclusive producer is attached;
//!   Exclusive only when no producer is attached (else ProducerBusy); WaitForExclusive is
//!   answered `producer_ready: false` and queued, then granted (a second PRODUCER_SUCCESS with
//!   the same request id and `producer_ready: true`) when the topic has no producer left;
//!   ExclusiveWithFencing closes every other producer (CLOSE_PRODUCER) and takes over.
//!   A producer id already registered on the connection for the same topic is answered
//!   PRODUCER_SUCCESS again (upstream treats it as a retry); for another topic, ERROR.
//! - SEND stores the entry as sent (metadata and payload untouched) and answers SEND_RECEIPT
//!   with `(ledger, entry)`; a message (metadata + payload) over the broker's
//!   `max_message_size` gets SEND_ERROR NotAllowed "Exceed maximum message size". A SEND for
//!   a producer not registered closes the connection (as upstream), unless that producer was
//!   closed on this connection (then it is ignored).
//! - A message whose `deliver_at_time` (wall-clock ms) is in the future is stored at once but
//!   Shared and Key_Shared subscriptions dispatch it only when due (as upstream's delayed
//!   delivery; Exclusive/Failover ignore it). The due time is taken on tokio's clock at SEND
//!   (now + the time left), so tests with paused time advance to it.
//! - Non-persistent topics store nothing: the message goes to the connected consumers with
//!   permits (else is dropped) and the receipt carries message id `(0, 0)`, as upstream.

use super::conns::ProducerRef;
use super::dispatch;
use super::handlers::{error, success, SessionView, Step};
use super::permissions::{self, MockAction};
use super::state::{canonical_topic, BrokerState};
use super::subscription::{SubType, Subscription};
use super::topic::{delivery_due, ProducerInfo, ProducerKey, StoredEntry, Topic, WaitingProducer};
use super::wire::{self, base_command::Type, ProducerAccessMode};
use crate::codec::{Frame, Payload, DEFAULT_MAX_MESSAGE_SIZE};
use crate::error::ServerError;

/// PRODUCER.
pub(crate) fn producer(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandProducer,
) -> Step {
    let topic_name = canonical_topic(&cmd.topic);
    let rid = cmd.request_id;
    let Some(conn) = state.conns.get(view.conn) else {
        return Step::Ignore;
    };
    if let Some(refusal) =
        permissions::refusal(state, view.conn, &topic_name, MockAction::Produce, rid)
    {
        return refusal;
    }
    if let Some(existing) = conn.producers.get(&cmd.producer_id) {
        if existing.topic != topic_name || !existing.ready {
            return Step::Reply(error(
                rid,
                ServerError::ServiceNotReady,
                "Producer is already present on the connection",
            ));
        }
        let topic = state.topics.get(&topic_name).expect("registered producer");
        let name = topic.producers[&(view.conn, cmd.producer_id)].name.clone();
        return Step::Reply(producer_success(rid, topic, &name, true, None));
    }
    // Producers whose connection died but is not cleaned up yet, or that the new one succeeds
    // (same name, higher epoch), are replaced (upstream `tryOverwriteOldProducer`).
    let given = cmd.producer_name.clone().filter(|n| !n.is_empty());
    let stale: Vec<ProducerKey> = state
        .topics
        .get(&topic_name)
        .map(|t| {
            t.producers
                .iter()
                .filter(|(k, p)| {
                    !state.conns.is_live(k.0)
                        || (given.as_deref() == Some(p.name.as_str()) && cmd.epoch() > p.epoch)
                })
                .map(|(k, _)| *k)
                .collect()
        })
        .unwrap_or_default();
    if let Some((code, message)) = state.attach_refusal(&topic_name, view.service_url) {
        return Step::Reply(error(rid, code, &message));
    }
    if state.topics.get(&topic_name).is_some_and(|t| t.terminated) {
        return Step::Reply(error(
            rid,
            ServerError::TopicTerminatedError,
            "Topic was already terminated",
        ));
    }
    for key in stale {
        remove_producer(state, key);
    }
    let name = given
        .clone()
        .unwrap_or_else(|| state.generate_producer_name());
    // PIP-124: only if the broker allows auto subscription creation and the role may consume.
    let initial_subscription = cmd
        .initial_subscription_name
        .as_deref()
        .filter(|sub| !sub.is_empty())
        .filter(|_| {
            let allowed = state
                .settings(view.service_url, view.config)
                .allow_auto_subscription_creation
                && permissions::may(state, view.conn, &topic_name, MockAction::Consume);
            if !allowed {
                tracing::debug!(topic = %topic_name, "mock broker: initial subscription not created");
            }
            allowed
        });
    let (topic, created) = state.topics.get_or_create(&topic_name);
    if created {
        if let Some(sub) = initial_subscription {
            topic.subscriptions.insert(
                sub.to_owned(),
                Subscription::new(sub, SubType::Exclusive, topic.persistent, 0),
            );
        }
    }
    if given.is_some() && topic.has_producer_named(&name) {
        return Step::Reply(error(
            rid,
            ServerError::ProducerBusy,
            &format!("Producer with name '{name}' is already connected to topic"),
        ));
    }
    let key = (view.conn, cmd.producer_id);
    let mode = cmd.producer_access_mode();
    let exclusive_holder = topic
        .producers
        .values()
        .find(|p| p.access_mode != ProducerAccessMode::Shared)
        .map(|p| p.name.clone());
    let busy = |message: String| Step::Reply(error(rid, ServerError::ProducerBusy, &message));
    match mode {
        ProducerAccessMode::Shared => {
            if let Some(holder) = exclusive_holder {
                return busy(format!(
                    "Topic has an existing exclusive producer: {holder}"
                ));
            }
        }
        ProducerAccessMode::Exclusive => {
            if let Some(holder) = exclusive_holder {
                return busy(format!(
                    "Topic has an existing exclusive producer: {holder}"
                ));
            }
            if !topic.producers.is_empty() {
                return busy("Topic has existing shared producers".to_owned());
            }
        }
        ProducerAccessMode::WaitForExclusive => {
            if !topic.producers.is_empty() {
                topic.waiting_producers.push_back(WaitingProducer {
                    key,
                    request_id: rid,
                    name: name.clone(),
                    epoch: cmd.epoch(),
                });
                let reply = producer_success(rid, topic, &name, false, None);
                register(state, key, &topic_name, false);
                return Step::Reply(reply);
            }
        }
        ProducerAccessMode::ExclusiveWithFencing => {
            let fenced: Vec<ProducerKey> = topic.producers.keys().copied().collect();
            for other in fenced {
                topic.producers.remove(&other);
                state.conns.send(other.0, close_producer(other.1));
                state.conns.forget_producer(other.0, other.1);
            }
        }
    }
    let epoch = (mode != ProducerAccessMode::Shared).then(|| {
        topic.topic_epoch += 1;
        topic.topic_epoch
    });
    topic.producers.insert(
        key,
        ProducerInfo {
            name: name.clone(),
            access_mode: mode,
            epoch: cmd.epoch(),
        },
    );
    let reply = producer_success(rid, topic, &name, true, epoch);
    register(state, key, &topic_name, true);
    Step::Reply(reply)
}

fn register(state: &mut BrokerState, key: ProducerKey, topic: &str, ready: bool) {
    if let Some(conn) = state.conns.get_mut(key.0) {
        conn.closed_producers.remove(&key.1);
        conn.producers.insert(
            key.1,
            ProducerRef {
                topic: topic.to_owned(),
                ready,
            },
        );
    }
}

fn producer_success(
    request_id: u64,
    topic: &Topic,
    name: &str,
    ready: bool,
    topic_epoch: Option<u64>,
) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::ProducerSuccess as i32,
        producer_success: Some(wire::CommandProducerSuccess {
            request_id,
            producer_name: name.to_owned(),
            last_sequence_id: Some(topic.last_sequence.get(name).copied().unwrap_or(-1)),
            schema_version: Some(Default::default()),
            topic_epoch,
            producer_ready: Some(ready),
        }),
        ..Default::default()
    }
}

/// A CLOSE_PRODUCER from the broker (reconnect allowed).
fn close_producer(producer_id: u64) -> Frame {
    Frame::simple(wire::BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(wire::CommandCloseProducer {
            producer_id,
            request_id: 0,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// SEND.
pub(crate) fn send(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandSend,
    payload: Option<&Payload>,
) -> Step {
    let Some(conn) = state.conns.get(view.conn) else {
        return Step::Ignore;
    };
    let topic_name = match conn.producers.get(&cmd.producer_id) {
        Some(p) if p.ready => p.topic.clone(),
        _ if conn.closed_producers.contains(&cmd.producer_id) => return Step::Ignore,
        _ => {
            return Step::Close(format!(
                "Received message, but the producer is not ready: {}",
                cmd.producer_id
            ))
        }
    };
    let Some(payload) = payload else {
        return Step::Close("SEND without a payload".to_owned());
    };
    let max = view
        .config
        .max_message_size
        .map_or(DEFAULT_MAX_MESSAGE_SIZE, |n| n as usize);
    let size = prost::Message::encoded_len(&payload.metadata) + payload.data.len();
    if size > max {
        return Step::Reply(send_error(
            cmd,
            ServerError::NotAllowed,
            "Exceed maximum message size",
        ));
    }
    let BrokerState {
        topics,
        conns,
        timers,
        ..
    } = state;
    let Some(topic) = topics.get_mut(&topic_name) else {
        return Step::Reply(send_error(
            cmd,
            ServerError::TopicNotFound,
            "Topic not found",
        ));
    };
    if topic.terminated {
        return Step::Reply(send_error(
            cmd,
            ServerError::TopicTerminatedError,
            "Topic was already terminated",
        ));
    }
    let highest = cmd.highest_sequence_id().max(cmd.sequence_id);
    let producer_name = payload.metadata.producer_name.clone();
    let message_id = if topic.persistent {
        let entry = topic.append(payload.metadata.clone(), payload.data.clone());
        if let Some(due) = delivery_due(&payload.metadata) {
            topic.deliver_at.insert(entry, due);
            timers.schedule_delivery(due, &topic.name);
        }
        let last = topic.last_sequence.entry(producer_name).or_insert(-1);
        *last = (*last).max(i64::try_from(highest).unwrap_or(i64::MAX));
        dispatch::dispatch_all(topic, conns);
        wire::MessageIdData {
            ledger_id: topic.ledger_id,
            entry_id: entry,
            ..Default::default()
        }
    } else {
        let entry = StoredEntry {
            metadata: payload.metadata.clone(),
            payload: payload.data.clone(),
        };
        dispatch::dispatch_transient(topic, &entry, conns);
        wire::MessageIdData::default()
    };
    Step::Reply(wire::BaseCommand {
        r#type: Type::SendReceipt as i32,
        send_receipt: Some(wire::CommandSendReceipt {
            producer_id: cmd.producer_id,
            sequence_id: cmd.sequence_id,
            message_id: Some(message_id),
            highest_sequence_id: Some(highest),
        }),
        ..Default::default()
    })
}

fn send_error(cmd: &wire::CommandSend, code: ServerError, message: &str) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::SendError as i32,
        send_error: Some(wire::CommandSendError {
            producer_id: cmd.producer_id,
            sequence_id: cmd.sequence_id,
            error: code.code(),
            message: message.to_owned(),
        }),
        ..Default::default()
    }
}

/// CLOSE_PRODUCER from the client: Success (also for an unknown producer, as upstream).
pub(crate) fn close(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandCloseProducer,
) -> Step {
    remove_producer(state, (view.conn, cmd.producer_id));
    Step::Reply(success(cmd.request_id))
}

/// Detaches a producer (closed, or its connection gone) and grants exclusive access to the
/// next waiting producer if the topic is left without one.
pub(crate) fn remove_producer(state: &mut BrokerState, key: ProducerKey) {
    let Some(topic_name) = state
        .conns
        .get(key.0)
        .and_then(|c| c.producers.get(&key.1))
        .map(|p| p.topic.clone())
    else {
        return;
    };
    state.conns.forget_producer(key.0, key.1);
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&topic_name) else {
        return;
    };
    topic.producers.remove(&key);
    topic.waiting_producers.retain(|w| w.key != key);
    if !topic.producers.is_empty() {
        return;
    }
    let Some(next) = topic.waiting_producers.pop_front() else {
        return;
    };
    topic.topic_epoch += 1;
    topic.producers.insert(
        next.key,
        ProducerInfo {
            name: next.name.clone(),
            access_mode: ProducerAccessMode::WaitForExclusive,
            epoch: next.epoch,
        },
    );
    let granted = producer_success(
        next.request_id,
        topic,
        &next.name,
        true,
        Some(topic.topic_epoch),
    );
    if let Some(conn) = conns.get_mut(next.key.0) {
        if let Some(p) = conn.producers.get_mut(&next.key.1) {
            p.ready = true;
        }
    }
    conns.send(next.key.0, Frame::simple(granted));
}
