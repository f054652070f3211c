//! PRODUCER, SEND and CLOSE_PRODUCER, as upstream's `ServerCnx` and `AbstractTopic` answer them.
//!
//! - PRODUCER auto-creates the topic (and, when it does, the producer's
//!   `initial_subscription_name` subscription at the earliest position, PIP-124). The name is
//!   the one given or a generated `mock-<n>`; a given name already attached to the topic is
//!   refused with ProducerBusy. Access modes, as upstream `AbstractTopic.incrementTopicEpochIfNeeded`:
//!   Shared unless an exclusive producer is attached or waiting (else ProducerBusy);
//!   Exclusive only when no producer is attached or waiting (else ProducerFenced);
//!   WaitForExclusive is answered `producer_ready: false` and queued, then granted (a second
//!   PRODUCER_SUCCESS with the same request id and `producer_ready: true`) when the topic has
//!   no producer left; ExclusiveWithFencing fails every waiting producer (ProducerFenced),
//!   removes every attached one without telling it (upstream `Producer.close(true)` sends
//!   nothing: the fenced producer's next SEND closes its connection) and takes over.
//! - Topic epoch: granting exclusive access sets the topic epoch to the producer's
//!   `topic_epoch` if it sent one, else bumps it (the first is 0); PRODUCER_SUCCESS carries the
//!   topic's epoch (also to Shared producers, once the topic has one). An Exclusive,
//!   WaitForExclusive (when not queued) or ExclusiveWithFencing producer whose `topic_epoch` is
//!   older than the topic's is refused with ProducerFenced: a newer exclusive producer has
//!   been there since (a producer without `topic_epoch` is never fenced this way).
//!   A producer id already registered on the connection for the same topic is answered
//!   PRODUCER_SUCCESS again (upstream treats it as a retry); for another topic, ERROR.
//! - PRODUCER_SUCCESS carries `last_sequence_id`: -1 while the namespace's deduplication is off
//!   (the default), else the highest sequence id stored for the producer's name.
//! - SEND stores the entry as sent (metadata and payload untouched) and answers SEND_RECEIPT
//!   with `(ledger, entry)`; with deduplication on, a duplicate (sequence id not above the
//!   highest stored for its producer name) is not stored and gets a receipt with `(-1, -1)`; a message (metadata + payload) over the broker's
//!   `max_message_size` gets SEND_ERROR NotAllowed "Exceed maximum message size". A SEND for
//!   a producer not registered closes the connection (as upstream), unless that producer was
//!   closed on this connection (then it is ignored).
//! - A message whose `deliver_at_time` (wall-clock ms) is in the future is stored at once but
//!   Shared and Key_Shared subscriptions dispatch it only when due (as upstream's delayed
//!   delivery; Exclusive/Failover ignore it). The due time is taken on tokio's clock at SEND
//!   (now + the time left), so tests with paused time advance to it; entries carrying the same
//!   `deliver_at_time` (a chunked message's chunks) share the first one's due time.
//! - Non-persistent topics store nothing: the message goes to the connected consumers with
//!   permits (else is dropped) and the receipt carries message id `(0, 0)`, as upstream.

use super::conns::ProducerRef;
use super::dispatch;
use super::namespace::canonical_topic;
use super::namespace::namespace_of;
use super::permissions::{self, MockAction};
use super::reply::{error, success, SessionView, Step};
use super::state::BrokerState;
use super::subscription::{SubType, Subscription};
use super::topic::{ProducerInfo, ProducerKey, StoredEntry, Topic, WaitingProducer};
use super::wire::{self, base_command::Type, ProducerAccessMode};
use crate::codec::{Frame, Payload, DEFAULT_MAX_MESSAGE_SIZE};
use crate::error::ServerError;

/// The version of an attached producer's schema (empty without one).
fn schema_version_of(
    registry: &super::schemas::Registry,
    topic: &str,
    cmd: &wire::CommandProducer,
) -> bytes::Bytes {
    cmd.schema
        .as_ref()
        .and_then(|s| {
            registry
                .versions(topic)
                .iter()
                .position(|v| v.r#type == s.r#type && v.schema_data == s.schema_data)
        })
        .map(super::schemas::version_bytes)
        .unwrap_or_default()
}

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
    if let Some(refusal) = permissions::refusal(
        &state.conns,
        &state.permissions,
        view.conn,
        &topic_name,
        MockAction::Produce,
        rid,
    ) {
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
        let version = schema_version_of(&state.schemas, &topic_name, cmd);
        let dedup = deduplication(state, &topic_name);
        let topic = state.topics.get(&topic_name).expect("registered producer");
        return Step::Reply(producer_success(
            rid, topic, &name, true, None, version, dedup,
        ));
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
                && permissions::may(
                    &state.conns,
                    &state.permissions,
                    view.conn,
                    &topic_name,
                    MockAction::Consume,
                );
            if !allowed {
                tracing::debug!(topic = %topic_name, "mock broker: initial subscription not created");
            }
            allowed
        });
    // Upstream checks (and registers) the producer's schema before adding it to the topic;
    // a producer without one is accepted (`isSchemaValidationEnforced` is off by default).
    let schema_version = match &cmd.schema {
        Some(s) => match state.schemas.get_or_create(&topic_name, s) {
            Ok(v) => super::schemas::version_bytes(v),
            Err(message) => {
                return Step::Reply(error(rid, ServerError::IncompatibleSchema, &message))
            }
        },
        None => bytes::Bytes::new(),
    };
    let dedup = deduplication(state, &topic_name);
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
    // Upstream `AbstractTopic.incrementTopicEpochIfNeeded`, mode by mode.
    let exclusive_holder = topic
        .producers
        .values()
        .find(|p| p.access_mode != ProducerAccessMode::Shared)
        .map(|p| p.name.clone());
    let fenced = |message: String| Step::Reply(error(rid, ServerError::ProducerFenced, &message));
    // A producer reconnecting with a `topic_epoch` older than the topic's: a newer exclusive
    // producer took the topic in between.
    let epoch_moved = |topic: &Topic| match (cmd.topic_epoch, topic.topic_epoch) {
        (Some(mine), Some(current)) if mine < current => Some(format!(
            "Topic epoch has already moved. Current epoch: {current}, Producer epoch: {mine}"
        )),
        _ => None,
    };
    match mode {
        ProducerAccessMode::Shared => {
            if exclusive_holder.is_some() || !topic.waiting_producers.is_empty() {
                return Step::Reply(error(
                    rid,
                    ServerError::ProducerBusy,
                    &format!(
                        "Topic has an existing exclusive producer: {}",
                        exclusive_holder.unwrap_or_default()
                    ),
                ));
            }
        }
        ProducerAccessMode::Exclusive => {
            if exclusive_holder.is_some() || !topic.waiting_producers.is_empty() {
                return fenced(format!(
                    "Topic has an existing exclusive producer: {}",
                    exclusive_holder.unwrap_or_default()
                ));
            }
            if !topic.producers.is_empty() {
                return fenced("Topic has existing shared producers".to_owned());
            }
            if let Some(message) = epoch_moved(topic) {
                return fenced(message);
            }
        }
        ProducerAccessMode::WaitForExclusive => {
            if !topic.producers.is_empty() {
                topic.waiting_producers.push_back(WaitingProducer {
                    key,
                    request_id: rid,
                    name: name.clone(),
                    epoch: cmd.epoch(),
                    topic_epoch: cmd.topic_epoch,
                    schema_version: schema_version.clone(),
                });
                // Upstream answers the queued producer with no topic epoch, not ready.
                let reply = producer_success(rid, topic, &name, false, None, schema_version, dedup);
                register(state, key, &topic_name, false);
                return Step::Reply(reply);
            }
            if let Some(message) = epoch_moved(topic) {
                return fenced(message);
            }
        }
        ProducerAccessMode::ExclusiveWithFencing => {
            // Waiting producers fail with ProducerFenced "Fenced out"; attached ones are
            // closed with `Producer.close(true)`, which sends the client nothing (their next
            // SEND finds no producer and the connection is closed).
            for waiting in std::mem::take(&mut topic.waiting_producers) {
                state.conns.send(
                    waiting.key.0,
                    Frame::simple(error(
                        waiting.request_id,
                        ServerError::ProducerFenced,
                        "Fenced out",
                    )),
                );
                if let Some(conn) = state.conns.get_mut(waiting.key.0) {
                    conn.producers.remove(&waiting.key.1);
                }
            }
            let others: Vec<ProducerKey> = topic.producers.keys().copied().collect();
            for other in others {
                topic.producers.remove(&other);
                if let Some(conn) = state.conns.get_mut(other.0) {
                    conn.producers.remove(&other.1);
                }
            }
            if let Some(message) = epoch_moved(topic) {
                return fenced(message);
            }
        }
    }
    // Granted: an exclusive producer sets the topic epoch to its own `topic_epoch` when it
    // sent one (`setTopicEpoch`), else bumps it (`incrementTopicEpoch`: the first is 0). A
    // Shared producer gets the current epoch, if the topic has one.
    if mode != ProducerAccessMode::Shared {
        topic.topic_epoch = Some(next_topic_epoch(topic, cmd.topic_epoch));
    }
    let epoch = topic.topic_epoch;
    topic.producers.insert(
        key,
        ProducerInfo {
            name: name.clone(),
            access_mode: mode,
            epoch: cmd.epoch(),
        },
    );
    let reply = producer_success(rid, topic, &name, true, epoch, schema_version, dedup);
    register(state, key, &topic_name, true);
    Step::Reply(reply)
}

/// The topic epoch an exclusive producer being granted the topic sets: its own `topic_epoch`
/// if it sent one, else the current one + 1, starting at 0 (upstream
/// `PersistentTopic.incrementTopicEpoch`: `currentEpoch.orElse(-1L) + 1`).
fn next_topic_epoch(topic: &Topic, requested: Option<u64>) -> u64 {
    requested.unwrap_or_else(|| topic.topic_epoch.map_or(0, |e| e + 1))
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

/// Whether message deduplication is on for topic `topic_name` (a namespace policy).
fn deduplication(state: &BrokerState, topic_name: &str) -> bool {
    state
        .topics
        .namespaces
        .deduplication(&namespace_of(topic_name))
}

/// PRODUCER_SUCCESS. Its `last_sequence_id` is upstream's
/// `MessageDeduplication.getLastPublishedSequenceId`: the highest sequence id stored for the
/// producer's name while deduplication is on, else -1 (nothing is tracked then).
fn producer_success(
    request_id: u64,
    topic: &Topic,
    name: &str,
    ready: bool,
    topic_epoch: Option<u64>,
    schema_version: bytes::Bytes,
    dedup: bool,
) -> wire::BaseCommand {
    let last_sequence_id = if dedup {
        topic.last_sequence.get(name).copied().unwrap_or(-1)
    } else {
        -1
    };
    wire::BaseCommand {
        r#type: Type::ProducerSuccess as i32,
        producer_success: Some(wire::CommandProducerSuccess {
            request_id,
            producer_name: name.to_owned(),
            last_sequence_id: Some(last_sequence_id),
            schema_version: Some(schema_version),
            topic_epoch,
            producer_ready: Some(ready),
        }),
        ..Default::default()
    }
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
    let txn = cmd.txnid_most_bits.zip(cmd.txnid_least_bits);
    if let Some(id) = txn {
        if let Err(message) = super::transactions::check_send(state, id) {
            return Step::Reply(send_error(cmd, ServerError::NotAllowed, &message));
        }
    }
    let dedup = deduplication(state, &topic_name);
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
    // Upstream `MessageDeduplication.isDuplicate`: with deduplication on, a message whose
    // sequence id is not above the highest one stored for its producer name is a duplicate;
    // `PersistentTopic.publishMessage` then acknowledges it at once without storing it
    // (`publishContext.completed(null, -1, -1)`: a receipt with message id (-1, -1)).
    // Chunks before the last share the message's sequence id and are not checked.
    let last_chunk = payload
        .metadata
        .num_chunks_from_msg
        .is_none_or(|n| payload.metadata.chunk_id.is_none_or(|c| c + 1 >= n));
    let duplicate = topic.persistent
        && dedup
        && last_chunk
        && topic
            .last_sequence
            .get(&producer_name)
            .is_some_and(|last| i64::try_from(cmd.sequence_id).unwrap_or(i64::MAX) <= *last);
    let message_id = if duplicate {
        wire::MessageIdData {
            ledger_id: u64::MAX,
            entry_id: u64::MAX,
            ..Default::default()
        }
    } else if topic.persistent {
        let entry = topic.append(payload.metadata.clone(), payload.data.clone());
        // PIP-31: an entry of a transaction stays behind the max read position until the
        // transaction ends (upstream `TopicTransactionBuffer.handleTransactionMessage`).
        if let Some(id) = txn {
            topic.txns.append(id, entry);
        }
        if let Some(due) = topic.delivery_due(&payload.metadata) {
            topic.deliver_at.insert(entry, due);
            timers.schedule_delivery(due, &topic.name);
        }
        // Tracked only while deduplication is on (upstream `MessageDeduplication` records
        // nothing while disabled), and for a chunked message only at its last chunk
        // (`isDuplicateNormal` returns before recording a chunk that is not the last, and
        // `recordMessagePersistedNormal` skips it): recording an earlier chunk would make the
        // last one, which carries the same sequence id, a duplicate.
        if dedup && last_chunk {
            let last = topic.last_sequence.entry(producer_name).or_insert(-1);
            *last = (*last).max(i64::try_from(highest).unwrap_or(i64::MAX));
        }
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

/// SEND_ERROR for `cmd` (also the kit's pushed errors).
pub(crate) fn send_error(
    cmd: &wire::CommandSend,
    code: ServerError,
    message: &str,
) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::SendError as i32,
        send_error: Some(wire::CommandSendError {
            producer_id: cmd.producer_id,
            // Upstream `Producer.publishMessage` → `checkAndStartPublish(highestSequenceId)`: a
            // batch (lowest ≤ highest) is refused with its highest sequence id.
            sequence_id: cmd
                .highest_sequence_id
                .filter(|h| *h >= cmd.sequence_id)
                .unwrap_or(cmd.sequence_id),
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
    let dedup = deduplication(state, &topic_name);
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
    // Upstream `AbstractTopic.handleProducerRemoved`: the next waiting producer is granted
    // (no epoch check there) with its own `topic_epoch` or a bumped one.
    let epoch = next_topic_epoch(topic, next.topic_epoch);
    topic.topic_epoch = Some(epoch);
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
        Some(epoch),
        next.schema_version.clone(),
        dedup,
    );
    if let Some(conn) = conns.get_mut(next.key.0) {
        if let Some(p) = conn.producers.get_mut(&next.key.1) {
            p.ready = true;
        }
    }
    conns.send(next.key.0, Frame::simple(granted));
}
