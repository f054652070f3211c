//! SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, UNSUBSCRIBE, CLOSE_CONSUMER, SEEK
//! and GET_LAST_MESSAGE_ID, as upstream's `ServerCnx`, `PersistentSubscription` and
//! dispatchers answer them (see each function).

use super::conns::ConsumerRef;
use super::dispatch;
use super::namespace::canonical_topic;
use super::permissions::{self, MockAction};
use super::reply::{error, success, SessionView, Step};
use super::state::BrokerState;
use super::subscription::{Consumer, ConsumerKey, SubType, Subscription};
use super::topic::Topic;
use super::wire::{self, base_command::Type, command_ack::AckType};
use super::ConnectionId;
use crate::codec::Frame;
use crate::error::ServerError;

/// SUBSCRIBE: auto-creates the topic (unless `force_topic_creation` is false: TopicNotFound)
/// and the subscription. A new subscription starts at the end (Latest) or the start
/// (Earliest); a non-durable one with `start_message_id` starts after that entry (upstream
/// makes it the mark-delete position), or at it when it carries a batch index. Exclusive with
/// a consumer attached, or another type than the attached consumers', is refused with
/// ConsumerBusy. A consumer id already on the connection for the same subscription is answered
/// Success again (upstream treats it as a retry).
pub(crate) fn subscribe(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandSubscribe,
) -> Step {
    let rid = cmd.request_id;
    let topic_name = canonical_topic(&cmd.topic);
    let key = (view.conn, cmd.consumer_id);
    let Some(conn) = state.conns.get(view.conn) else {
        return Step::Ignore;
    };
    if let Some(refusal) = permissions::refusal(
        &state.conns,
        &state.permissions,
        view.conn,
        &topic_name,
        MockAction::Consume,
        rid,
    ) {
        return refusal;
    }
    if let Some(existing) = conn.consumers.get(&cmd.consumer_id) {
        if existing.topic == topic_name && existing.subscription == cmd.subscription {
            return Step::Reply(success(rid));
        }
        return Step::Reply(error(
            rid,
            ServerError::ServiceNotReady,
            "Consumer is already present on the connection",
        ));
    }
    // A consumer whose connection died but is not cleaned up yet does not hold the
    // subscription (upstream checks the liveness of the exclusive consumer's connection).
    let dead: Vec<ConsumerKey> = state
        .topics
        .get(&topic_name)
        .and_then(|t| t.subscriptions.get(&cmd.subscription))
        .map(|sub| {
            sub.consumers
                .iter()
                .map(|c| c.key)
                .filter(|k| !state.conns.is_live(k.0))
                .collect()
        })
        .unwrap_or_default();
    for key in dead {
        remove_consumer(state, key);
    }
    if let Some((code, message)) = state.attach_refusal(&topic_name, view.service_url) {
        return Step::Reply(error(rid, code, &message));
    }
    if state.topics.get(&topic_name).is_none() && !cmd.force_topic_creation() {
        return Step::Reply(error(
            rid,
            ServerError::TopicNotFound,
            "Topic does not exist",
        ));
    }
    // Upstream `addSchemaIfIdleOrCheckCompatible` (after the topic exists, as upstream, so a
    // refused subscribe registers nothing): a consumer's schema must be compatible
    // with the topic's (registered only if the topic is idle and has none); AUTO_CONSUME reads
    // anything.
    if let Some(schema) = &cmd.schema {
        let idle = state.topics.get(&topic_name).is_none_or(|t| {
            t.producers.is_empty()
                && t.messages.is_empty()
                && t.subscriptions
                    .values()
                    .all(|s| s.consumers.iter().all(|c| c.auto_consume))
        });
        if let Err(message) = state.schemas.check_consumer(&topic_name, schema, idle) {
            return Step::Reply(error(rid, ServerError::IncompatibleSchema, &message));
        }
    }
    let BrokerState { topics, conns, .. } = state;
    let (topic, _) = topics.get_or_create(&topic_name);
    let sub_type = cmd.sub_type();
    let len = topic.len();
    let persistent = topic.persistent;
    let start = start_position(topic, cmd);
    // Upstream PersistentTopic.internalSubscribe: a SUBSCRIBE with
    // start_message_rollback_duration_sec > 0 resets the subscription's cursor to the first
    // entry published at or after now minus that duration (resetCursor by timestamp).
    let rollback = cmd
        .start_message_rollback_duration_sec
        .filter(|secs| *secs > 0)
        .map(|secs| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            topic.first_published_at_or_after(now.saturating_sub(secs.saturating_mul(1000)))
        });
    let sub = topic
        .subscriptions
        .entry(cmd.subscription.clone())
        .or_insert_with(|| {
            let mut sub = Subscription::new(
                &cmd.subscription,
                sub_type,
                cmd.durable() && persistent,
                start.min(len),
            );
            sub.properties = cmd.subscription_properties.clone();
            sub
        });
    if !sub.consumers.is_empty() {
        if sub.sub_type != sub_type {
            return Step::Reply(error(
                rid,
                ServerError::ConsumerBusy,
                "Subscription is of different type",
            ));
        }
        if sub_type == SubType::Exclusive {
            return Step::Reply(error(
                rid,
                ServerError::ConsumerBusy,
                "Exclusive consumer is already connected",
            ));
        }
    }
    sub.sub_type = sub_type;
    if let Some(pos) = rollback {
        // With no consumer attached (checked above for Exclusive; a shared subscription's
        // other consumers keep what they were dispatched, as a reset would redeliver it).
        if sub.consumers.is_empty() {
            sub.reset(pos);
        }
    }
    let name = cmd.consumer_name.clone().unwrap_or_default();
    let name_index = sub.free_name_index(&name);
    sub.consumers.push(Consumer {
        key,
        name,
        name_index,
        priority: cmd.priority_level.unwrap_or(0),
        permits: 0,
        epoch: cmd.consumer_epoch,
        reached_end: false,
        auto_consume: cmd
            .schema
            .as_ref()
            .is_some_and(|s| s.r#type == wire::schema::Type::AutoConsume as i32),
    });
    tracing::debug!(topic = %topic.name, subscription = %sub.name, ?sub_type, "mock broker: consumer attached");
    dispatch::update_active(sub, topic.partition, Some(key), conns);
    dispatch::dispatch(topic, &cmd.subscription, conns);
    if let Some(conn) = conns.get_mut(view.conn) {
        conn.consumers.insert(
            cmd.consumer_id,
            ConsumerRef {
                topic: topic_name,
                subscription: cmd.subscription.clone(),
            },
        );
    }
    Step::Reply(success(rid))
}

/// Where a subscription created by `cmd` starts.
fn start_position(topic: &Topic, cmd: &wire::CommandSubscribe) -> u64 {
    use wire::command_subscribe::InitialPosition;
    match &cmd.start_message_id {
        Some(id) if !cmd.durable() => {
            let pos = topic.position_of(id.ledger_id, id.entry_id);
            let exact = id.ledger_id == topic.ledger_id && (id.entry_id as i64) >= 0;
            if exact && id.batch_index.unwrap_or(-1) < 0 {
                pos + 1
            } else {
                pos
            }
        }
        _ if cmd.initial_position() == InitialPosition::Earliest => 0,
        _ => topic.len(),
    }
}

/// Finds the consumer `consumer_id` of connection `conn`: its topic and subscription names.
fn find(state: &BrokerState, conn: ConnectionId, consumer_id: u64) -> Option<ConsumerRef> {
    state.conns.get(conn)?.consumers.get(&consumer_id).cloned()
}

/// FLOW: adds permits and dispatches. Unknown consumers are ignored.
pub(crate) fn flow(state: &mut BrokerState, view: SessionView<'_>, cmd: &wire::CommandFlow) {
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return;
    };
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return;
    };
    if let Some(sub) = topic.subscriptions.get_mut(&c.subscription) {
        if let Some(consumer) = sub.consumer_mut((view.conn, cmd.consumer_id)) {
            consumer.permits += i64::from(cmd.message_permits);
        }
    }
    dispatch::dispatch(topic, &c.subscription, conns);
}

/// ACK: Individual (each id; a non-empty `ack_set` acknowledges part of a batch) or
/// Cumulative (up to and including the one id; ignored on Shared/Key_Shared, as upstream).
/// Acknowledged entries are never redelivered. With a `request_id`, answered ACK_RESPONSE
/// (error ConsumerNotFound for an unknown consumer).
///
/// An ack with `validation_error` (a client discarding an entry it could not decode: bad
/// checksum, decompression or batch deserialization, upstream `ConsumerImpl.discardCorruptedMessage`)
/// is an ordinary acknowledgement: upstream `Consumer.messageAcked` only logs the error and
/// then acknowledges as usual, so the entry leaves the backlog and is not redelivered.
pub(crate) fn ack(state: &mut BrokerState, view: SessionView<'_>, cmd: &wire::CommandAck) -> Step {
    let reply = |error: Option<(ServerError, &str)>| match cmd.request_id {
        Some(request_id) => Step::Reply(wire::BaseCommand {
            r#type: Type::AckResponse as i32,
            ack_response: Some(wire::CommandAckResponse {
                consumer_id: cmd.consumer_id,
                request_id: Some(request_id),
                error: error.map(|(code, _)| code.code()),
                message: error.map(|(_, message)| message.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        None => Step::Ignore,
    };
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return reply(Some((ServerError::ConsumerNotFound, "Consumer not found")));
    };
    if let Some(code) = cmd.validation_error {
        tracing::debug!(topic = %c.topic, subscription = %c.subscription, validation_error = code,
            "mock broker: message discarded by the client as corrupt; acknowledged");
    }
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return reply(None);
    };
    let (ledger, len) = (topic.ledger_id, topic.len());
    let Topic {
        messages,
        subscriptions,
        ..
    } = topic;
    let Some(sub) = subscriptions.get_mut(&c.subscription) else {
        return reply(None);
    };
    if cmd.txnid_most_bits.is_some() {
        let count = |e: u64| messages.get(e as usize).map(|m| m.num_messages());
        return super::transactions::ack(sub, cmd, count);
    }
    let cumulative = cmd.ack_type() == AckType::Cumulative;
    if cumulative && !sub.single_active() {
        return reply(None);
    }
    for id in &cmd.message_id {
        if id.ledger_id != ledger || id.entry_id >= len {
            continue;
        }
        let n = messages[id.entry_id as usize].num_messages();
        if cumulative {
            sub.ack_cumulative(id.entry_id, &id.ack_set, n);
        } else {
            sub.ack_individual(id.entry_id, &id.ack_set, n);
        }
    }
    dispatch::end_of_topic(topic, &c.subscription, conns);
    reply(None)
}

/// REDELIVER_UNACKNOWLEDGED_MESSAGES, as upstream `ServerCnx.handleRedeliverUnacknowledged`:
///
/// - Shared/Key_Shared (individual-ack mode) with ids: those of the consumer's unacknowledged
///   entries (`Consumer.redeliverUnacknowledgedMessages(List<MessageIdData>)`); without ids,
///   all of them. Redelivery counts go up.
/// - Exclusive/Failover, with or without ids (ServerCnx takes the per-id path only in
///   individual-ack mode): `Consumer.redeliverUnacknowledgedMessages(consumerEpoch)` →
///   `PersistentDispatcherSingleActiveConsumer.internalRedeliverUnacknowledgedMessages`: the
///   consumer's epoch is raised to `consumer_epoch` if that is greater (also for a consumer
///   that is not active), then, for the active consumer only, the cursor is rewound to the
///   mark-delete position + 1 and everything not acknowledged is dispatched again, in entry
///   order, with the new epoch and redelivery count 0 (the tracker is disabled there).
///
/// Permits are NOT given back: upstream only re-adds the permits received while the consumer
/// was blocked (`flowConsumerBlockedPermits`); a client that rewinds must send FLOW again.
pub(crate) fn redeliver(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandRedeliverUnacknowledgedMessages,
) {
    let key = (view.conn, cmd.consumer_id);
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return;
    };
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return;
    };
    let ledger = topic.ledger_id;
    let Some(sub) = topic.subscriptions.get_mut(&c.subscription) else {
        return;
    };
    // Absent: DEFAULT_CONSUMER_EPOCH (-1), never greater than the current one.
    if let (Some(epoch), Some(consumer)) = (cmd.consumer_epoch, sub.consumer_mut(key)) {
        consumer.epoch = Some(consumer.epoch.map_or(epoch, |e| e.max(epoch)));
    }
    if sub.single_active() {
        if sub.active == Some(key) {
            sub.return_pending_of(key, true);
        }
    } else if cmd.message_ids.is_empty() {
        sub.return_pending_of(key, true);
    } else {
        for id in cmd.message_ids.iter().filter(|id| id.ledger_id == ledger) {
            sub.return_if_held(key, id.entry_id, true);
        }
    }
    dispatch::dispatch(topic, &c.subscription, conns);
}

/// CLOSE_CONSUMER from the client: Success (also for an unknown consumer, as upstream).
pub(crate) fn close(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandCloseConsumer,
) -> Step {
    remove_consumer(state, (view.conn, cmd.consumer_id));
    Step::Reply(success(cmd.request_id))
}

/// Detaches a consumer (closed, or its connection gone): its unacknowledged entries go back
/// for redelivery to the others (without counting a redelivery, as upstream), the active
/// consumer is re-picked, and a non-durable subscription left without consumers is removed.
pub(crate) fn remove_consumer(state: &mut BrokerState, key: ConsumerKey) {
    let Some(c) = find(state, key.0, key.1) else {
        return;
    };
    state.conns.forget_consumer(key.0, key.1);
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return;
    };
    let Some(sub) = topic.subscriptions.get_mut(&c.subscription) else {
        return;
    };
    sub.consumers.retain(|consumer| consumer.key != key);
    sub.return_pending_of(key, false);
    dispatch::update_active(sub, topic.partition, None, conns);
    if sub.consumers.is_empty() && !sub.durable {
        topic.subscriptions.remove(&c.subscription);
    } else {
        dispatch::dispatch(topic, &c.subscription, conns);
    }
}

/// Detaches every consumer of a subscription, telling each with CLOSE_CONSUMER (reconnect
/// allowed). Their unacknowledged entries are not returned (the caller resets or deletes).
fn disconnect_all(sub: &mut Subscription, state_conns: &mut super::conns::Conns) {
    for consumer in std::mem::take(&mut sub.consumers) {
        let (conn, id) = consumer.key;
        state_conns.send(conn, close_consumer(id));
        state_conns.forget_consumer(conn, id);
    }
    sub.active = None;
}

/// A CLOSE_CONSUMER from the broker (reconnect allowed).
pub(crate) fn close_consumer(consumer_id: u64) -> Frame {
    Frame::simple(wire::BaseCommand {
        r#type: Type::CloseConsumer as i32,
        close_consumer: Some(wire::CommandCloseConsumer {
            consumer_id,
            request_id: 0,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// UNSUBSCRIBE: removes the subscription and detaches the consumer (no CLOSE_CONSUMER to it).
/// With other consumers attached it is refused with ConsumerBusy, unless `force` (then they
/// get CLOSE_CONSUMER).
pub(crate) fn unsubscribe(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandUnsubscribe,
) -> Step {
    let key = (view.conn, cmd.consumer_id);
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return Step::Reply(error(
            cmd.request_id,
            ServerError::ConsumerNotFound,
            "Consumer not found",
        ));
    };
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return Step::Reply(success(cmd.request_id));
    };
    if let Some(sub) = topic.subscriptions.get_mut(&c.subscription) {
        let others = sub.consumers.iter().any(|consumer| consumer.key != key);
        if others && !cmd.force() {
            return Step::Reply(error(
                cmd.request_id,
                ServerError::ConsumerBusy,
                "Subscription has active consumers",
            ));
        }
        sub.consumers.retain(|consumer| consumer.key != key);
        disconnect_all(sub, conns);
        topic.subscriptions.remove(&c.subscription);
    }
    conns.forget_consumer(view.conn, cmd.consumer_id);
    Step::Reply(success(cmd.request_id))
}

/// SEEK (message id, or publish time: the first entry published at or after it): resets the
/// cursor so that entry is the next dispatched, and, as upstream, disconnects every consumer of
/// the subscription (CLOSE_CONSUMER, sent after the Success) so that they subscribe again.
/// Refused (NotAllowed) on non-persistent topics.
pub(crate) fn seek(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandSeek,
) -> Step {
    let rid = cmd.request_id;
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return Step::Reply(error(
            rid,
            // As upstream ServerCnx: MetadataError "Consumer not found".
            ServerError::MetadataError,
            "Consumer not found",
        ));
    };
    let BrokerState { topics, conns, .. } = state;
    let Some(topic) = topics.get_mut(&c.topic) else {
        return Step::Reply(error(rid, ServerError::TopicNotFound, "Topic not found"));
    };
    if !topic.persistent {
        return Step::Reply(error(
            rid,
            ServerError::NotAllowed,
            "Seek is not supported on non-persistent topics",
        ));
    }
    let pos = match (&cmd.message_id, cmd.message_publish_time) {
        (Some(id), _) => topic.position_of(id.ledger_id, id.entry_id),
        (None, Some(time)) => topic.first_published_at_or_after(time),
        (None, None) => {
            return Step::Reply(error(
                rid,
                ServerError::MetadataError,
                "Message id and timestamp were not present",
            ))
        }
    };
    if let Some(sub) = topic.subscriptions.get_mut(&c.subscription) {
        disconnect_all(sub, conns);
        sub.reset(pos);
    }
    Step::Reply(success(rid))
}

/// GET_LAST_MESSAGE_ID: the id of the last entry a reader can be given (past none of an open
/// transaction's, nor an aborted one's; for a batch, with batch index `num_messages - 1`), or
/// `(ledger, -1)` when there is none; and the subscription's
/// mark-delete position.
pub(crate) fn get_last_message_id(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::CommandGetLastMessageId,
) -> Step {
    let rid = cmd.request_id;
    let Some(c) = find(state, view.conn, cmd.consumer_id) else {
        return Step::Reply(error(
            rid,
            // As upstream ServerCnx: MetadataError "Consumer not found".
            ServerError::MetadataError,
            "Consumer not found",
        ));
    };
    let Some(topic) = state.topics.get(&c.topic) else {
        return Step::Reply(error(rid, ServerError::TopicNotFound, "Topic not found"));
    };
    // The last entry a reader can be given: before the first entry of an open transaction
    // (upstream PR #21466: the max read position) and not of an aborted one (PR #22610:
    // `getLastDispatchablePosition`); `(ledger, -1)` when there is none.
    let mut e = topic.txns.max_read(topic.len());
    while e > 0 && topic.txns.is_aborted(e - 1) && !state.coordinator.last_id_names_aborted {
        e -= 1;
    }
    let e = e.wrapping_sub(1);
    let mut last = topic.message_id(e);
    if let Some(entry) = usize::try_from(e).ok().and_then(|e| topic.messages.get(e)) {
        if entry.is_batch() {
            last.batch_index = Some(entry.num_messages() as i32 - 1);
        }
    }
    let mark_delete = topic
        .subscriptions
        .get(&c.subscription)
        .map(|sub| topic.message_id(sub.ack_floor.wrapping_sub(1)));
    Step::Reply(wire::BaseCommand {
        r#type: Type::GetLastMessageIdResponse as i32,
        get_last_message_id_response: Some(wire::CommandGetLastMessageIdResponse {
            last_message_id: last,
            request_id: rid,
            consumer_mark_delete_position: mark_delete,
        }),
        ..Default::default()
    })
}
