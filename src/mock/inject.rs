//! Errors pushed per request type (librdkafka's `rd_kafka_mock_push_request_errors`), and the
//! storage cut: what the broker answers instead of serving a request.
//!
//! A test pushes [`MockError`](super::MockError)s; the session asks [`intercept`] about every command it receives
//! once connected, before the handlers see it. The first pending error that matches the
//! command (request type, broker, topic, connection) answers it instead, with the answer a
//! broker gives when that request fails (see [`MockRequest`]); the request is not executed.
//! Each pushed error answers `times` requests, then is gone; every use is reported
//! ([`ConsumedError`]). Pending errors live in the cluster's state, so a cluster-wide push
//! (from [`MockCluster`](super::MockCluster)) is consumed by whichever broker meets the request
//! first.
//!
//! A broker cut from storage ([`MockBroker::set_storage_cut`](super::MockBroker::set_storage_cut))
//! fails every write with a retriable error: SEND gets SEND_ERROR PersistenceError (nothing is
//! stored), and a PRODUCER or SUBSCRIBE that would create a topic or a durable subscription
//! gets ERROR ServiceNotReady (upstream's answer while a topic cannot be loaded). Acks stay in
//! memory (upstream keeps the in-memory mark-delete position when persisting a cursor fails).

use std::time::Duration;

use super::injected::{ConsumedError, MockRequest};
use super::namespace::canonical_topic;
use super::reply::{error, SessionView};
use super::state::BrokerState;
use super::wire::{self, base_command::Type};
use super::ConnectionId;
use crate::error::ServerError;

/// What the session does instead of handling a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Injection {
    /// Send this answer after `delay` (on top of the broker's latency).
    Reply {
        /// The error answer.
        response: Box<wire::BaseCommand>,
        /// The pushed error's delay.
        delay: Duration,
    },
    /// Apply this FLOW after `delay`; never if `None`.
    DeferFlow(Option<Duration>),
}

/// Whether a pushed error or the storage cut answers `cmd` (received on a connected session);
/// consumes the error if so.
pub(crate) fn intercept(
    state: &mut BrokerState,
    view: SessionView<'_>,
    cmd: &wire::BaseCommand,
) -> Option<Injection> {
    let request = MockRequest::of(Type::try_from(cmd.r#type).ok()?)?;
    let topic = match request_topic(state, view.conn, request, cmd) {
        Subject::Topic(t) => Some(t),
        Subject::None => None,
        Subject::NotMatchable => return None,
    };
    if let Some(cut) = storage_cut(state, view, request, cmd, topic.as_deref()) {
        return Some(cut);
    }
    let injected = &mut state.injected;
    let index = injected.pending.iter().position(|p| {
        p.error.request == request
            && p.broker.as_deref().is_none_or(|b| b == view.service_url)
            && p.error.connection.is_none_or(|c| c == view.conn)
            && p.error.topic.as_deref().is_none_or(|scope| {
                topic
                    .as_deref()
                    .is_some_and(|t| t == scope || is_partition_of(t, scope))
            })
    })?;
    let pending = &mut injected.pending[index];
    if pending.error.skip > 0 {
        // Served normally; the error waits for a later request.
        pending.error.skip -= 1;
        return None;
    }
    let error = pending.error.clone();
    pending.error.times -= 1;
    if pending.error.times == 0 {
        injected.pending.remove(index);
    }
    tracing::debug!(?request, code = ?error.code, conn = %view.conn, "mock broker: pushed error consumed");
    injected.consumed.push(ConsumedError {
        request,
        code: error.code,
        message: error.message.clone(),
        connection: view.conn,
        topic,
        broker: view.service_url.to_owned(),
    });
    injected.notify.notify_waiters();
    if request == MockRequest::Flow {
        return Some(Injection::DeferFlow(
            (!error.delay.is_zero()).then_some(error.delay),
        ));
    }
    Some(Injection::Reply {
        response: Box::new(answer(request, cmd, error.code, &error.message)),
        delay: error.delay,
    })
}

/// What topic a request is about.
enum Subject {
    Topic(String),
    /// The request names no topic it could be matched on (a topic scope never matches).
    None,
    /// The request is not one a pushed error answers (e.g. a SEND for an unknown producer,
    /// which the handlers refuse by closing the connection).
    NotMatchable,
}

fn request_topic(
    state: &BrokerState,
    conn: ConnectionId,
    request: MockRequest,
    cmd: &wire::BaseCommand,
) -> Subject {
    let entry = state.conns.get(conn);
    let producer = |id: u64| {
        entry
            .and_then(|e| e.producers.get(&id))
            .map_or(Subject::None, |p| Subject::Topic(p.topic.clone()))
    };
    let consumer = |id: u64| {
        entry
            .and_then(|e| e.consumers.get(&id))
            .map_or(Subject::None, |c| Subject::Topic(c.topic.clone()))
    };
    let named = |t: Option<&str>| t.map_or(Subject::None, |t| Subject::Topic(canonical_topic(t)));
    match request {
        MockRequest::Lookup => named(cmd.lookup_topic.as_ref().map(|c| c.topic.as_str())),
        MockRequest::PartitionedMetadata => {
            named(cmd.partition_metadata.as_ref().map(|c| c.topic.as_str()))
        }
        MockRequest::Producer => named(cmd.producer.as_ref().map(|c| c.topic.as_str())),
        MockRequest::Subscribe => named(cmd.subscribe.as_ref().map(|c| c.topic.as_str())),
        MockRequest::Send => match cmd.send.as_ref().and_then(|s| {
            entry
                .and_then(|e| e.producers.get(&s.producer_id))
                .filter(|p| p.ready)
        }) {
            Some(p) if cmd.send.is_some() => Subject::Topic(p.topic.clone()),
            _ => Subject::NotMatchable,
        },
        MockRequest::Ack => match &cmd.ack {
            Some(a) if a.request_id.is_some() => consumer(a.consumer_id),
            _ => Subject::NotMatchable,
        },
        MockRequest::Flow => cmd
            .flow
            .as_ref()
            .map_or(Subject::NotMatchable, |f| consumer(f.consumer_id)),
        MockRequest::Unsubscribe => cmd
            .unsubscribe
            .as_ref()
            .map_or(Subject::NotMatchable, |c| consumer(c.consumer_id)),
        MockRequest::Seek => cmd
            .seek
            .as_ref()
            .map_or(Subject::NotMatchable, |c| consumer(c.consumer_id)),
        MockRequest::GetLastMessageId => cmd
            .get_last_message_id
            .as_ref()
            .map_or(Subject::NotMatchable, |c| consumer(c.consumer_id)),
        MockRequest::CloseConsumer => cmd
            .close_consumer
            .as_ref()
            .map_or(Subject::NotMatchable, |c| consumer(c.consumer_id)),
        MockRequest::CloseProducer => cmd
            .close_producer
            .as_ref()
            .map_or(Subject::NotMatchable, |c| producer(c.producer_id)),
        MockRequest::GetTopicsOfNamespace
        | MockRequest::WatchTopicList
        | MockRequest::WatchPartitionUpdate
        | MockRequest::EndTxn => Subject::None,
    }
}

/// Whether `topic` is a partition of the partitioned topic `parent`.
fn is_partition_of(topic: &str, parent: &str) -> bool {
    topic
        .strip_prefix(parent)
        .and_then(|rest| rest.strip_prefix("-partition-"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The storage cut's answer to a write, if the broker at `view` is cut from storage.
fn storage_cut(
    state: &BrokerState,
    view: SessionView<'_>,
    request: MockRequest,
    cmd: &wire::BaseCommand,
    topic: Option<&str>,
) -> Option<Injection> {
    if !state.settings(view.service_url, view.config).storage_cut {
        return None;
    }
    let existing = topic.and_then(|t| state.topics.get(t));
    let (code, message) = match request {
        MockRequest::Send => (
            ServerError::PersistenceError,
            "mock broker: storage unreachable",
        ),
        MockRequest::Producer if existing.is_none() => (
            ServerError::ServiceNotReady,
            "mock broker: topic cannot be loaded (storage unreachable)",
        ),
        MockRequest::Subscribe => {
            let sub = cmd.subscribe.as_ref()?;
            let creates = existing.is_none_or(|t| !t.subscriptions.contains_key(&sub.subscription));
            if !creates || !sub.durable() {
                return None;
            }
            (
                ServerError::ServiceNotReady,
                "mock broker: subscription cannot be created (storage unreachable)",
            )
        }
        _ => return None,
    };
    Some(Injection::Reply {
        response: Box::new(answer(request, cmd, code, message)),
        delay: Duration::ZERO,
    })
}

/// How a broker answers a failed request of type `request`.
fn answer(
    request: MockRequest,
    cmd: &wire::BaseCommand,
    code: ServerError,
    message: &str,
) -> wire::BaseCommand {
    match request {
        MockRequest::Lookup => {
            use wire::command_lookup_topic_response::LookupType;
            let request_id = cmd.lookup_topic.as_ref().map_or(0, |c| c.request_id);
            wire::BaseCommand {
                r#type: Type::LookupResponse as i32,
                lookup_topic_response: Some(wire::CommandLookupTopicResponse {
                    request_id,
                    response: Some(LookupType::Failed as i32),
                    error: Some(code.code()),
                    message: Some(message.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }
        MockRequest::PartitionedMetadata => {
            use wire::command_partitioned_topic_metadata_response::LookupType;
            let request_id = cmd.partition_metadata.as_ref().map_or(0, |c| c.request_id);
            wire::BaseCommand {
                r#type: Type::PartitionedMetadataResponse as i32,
                partition_metadata_response: Some(wire::CommandPartitionedTopicMetadataResponse {
                    request_id,
                    response: Some(LookupType::Failed as i32),
                    error: Some(code.code()),
                    message: Some(message.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }
        MockRequest::Send => {
            super::produce::send_error(&cmd.send.clone().unwrap_or_default(), code, message)
        }
        MockRequest::Ack => {
            let ack = cmd.ack.clone().unwrap_or_default();
            wire::BaseCommand {
                r#type: Type::AckResponse as i32,
                ack_response: Some(wire::CommandAckResponse {
                    consumer_id: ack.consumer_id,
                    request_id: ack.request_id,
                    error: Some(code.code()),
                    message: Some(message.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }
        MockRequest::EndTxn => {
            let end = cmd.end_txn.unwrap_or_default();
            wire::BaseCommand {
                r#type: Type::EndTxnResponse as i32,
                end_txn_response: Some(wire::CommandEndTxnResponse {
                    request_id: end.request_id,
                    txnid_most_bits: end.txnid_most_bits,
                    txnid_least_bits: end.txnid_least_bits,
                    error: Some(code.code()),
                    message: Some(message.to_owned()),
                }),
                ..Default::default()
            }
        }
        _ => error(
            super::reply::request_id(cmd).unwrap_or_default(),
            code,
            message,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::injected::{Injected, MockError};

    #[test]
    fn partitions_match_their_parent_only() {
        let parent = "persistent://public/default/orders";
        assert!(is_partition_of(
            "persistent://public/default/orders-partition-2",
            parent
        ));
        assert!(!is_partition_of(
            "persistent://public/default/orders-partition-",
            parent
        ));
        assert!(!is_partition_of(
            "persistent://public/default/orders2",
            parent
        ));
    }

    #[test]
    fn exhausted_errors_are_not_kept() {
        let mut injected = Injected::default();
        injected.push(
            MockError::new(MockRequest::Send, ServerError::UnknownError, "x").times(0),
            None,
        );
        assert!(injected.pending(None).is_empty());
        injected.push(
            MockError::new(MockRequest::Send, ServerError::UnknownError, "x"),
            Some("pulsar://a"),
        );
        assert_eq!(injected.pending(Some("pulsar://a")).len(), 1);
        assert!(injected.pending(Some("pulsar://b")).is_empty());
        injected.clear(Some("pulsar://a"));
        assert!(injected.pending(None).is_empty());
    }
}
