//! Errors pushed per request type (librdkafka's `rd_kafka_mock_push_request_errors`), and the
//! storage cut: what the broker answers instead of serving a request.
//!
//! A test pushes [`MockError`]s; the session asks [`intercept`] about every command it receives
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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::handlers::{error, SessionView};
use super::state::{canonical_topic, BrokerState};
use super::wire::{self, base_command::Type};
use super::ConnectionId;
use crate::error::ServerError;

/// A request type whose next occurrences can be answered with a pushed error
/// ([`MockBroker::push_error`](super::MockBroker::push_error)), and how that error is
/// answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MockRequest {
    /// LOOKUP: answered LOOKUP_RESPONSE `Failed` with the code and message.
    Lookup,
    /// PARTITIONED_METADATA: answered PARTITIONED_METADATA_RESPONSE `Failed`.
    PartitionedMetadata,
    /// PRODUCER: answered ERROR; no producer is created.
    Producer,
    /// SEND (one frame: a batch counts once): answered SEND_ERROR with the frame's producer and
    /// sequence ids; nothing is stored. Only SENDs of attached producers match.
    Send,
    /// SUBSCRIBE: answered ERROR; no consumer (or subscription) is created.
    Subscribe,
    /// FLOW: the dispatch it triggers fails. Nothing is answered (a broker never answers
    /// FLOW); its permits are granted only after the error's delay, as upstream's dispatcher
    /// retries a failed read after a backoff. With no delay the permits are lost.
    Flow,
    /// ACK with a `request_id` (an ack receipt): answered ACK_RESPONSE with the error; the ack
    /// is not applied. Acks without a receipt never match.
    Ack,
    /// UNSUBSCRIBE: answered ERROR; the subscription stays.
    Unsubscribe,
    /// SEEK: answered ERROR; the cursor does not move.
    Seek,
    /// GET_LAST_MESSAGE_ID: answered ERROR.
    GetLastMessageId,
    /// CLOSE_PRODUCER: answered ERROR; the producer stays attached.
    CloseProducer,
    /// CLOSE_CONSUMER: answered ERROR; the consumer stays attached.
    CloseConsumer,
    /// GET_TOPICS_OF_NAMESPACE: answered ERROR (a failed poll of a pattern consumer). Names
    /// no topic: a topic scope never matches it.
    GetTopicsOfNamespace,
    /// WATCH_TOPIC_LIST (PIP-145): answered ERROR; no watcher is registered. Names no topic.
    WatchTopicList,
}

impl MockRequest {
    /// The request type of a command, if errors can be pushed for it.
    fn of(ty: Type) -> Option<MockRequest> {
        Some(match ty {
            Type::Lookup => MockRequest::Lookup,
            Type::PartitionedMetadata => MockRequest::PartitionedMetadata,
            Type::Producer => MockRequest::Producer,
            Type::Send => MockRequest::Send,
            Type::Subscribe => MockRequest::Subscribe,
            Type::Flow => MockRequest::Flow,
            Type::Ack => MockRequest::Ack,
            Type::Unsubscribe => MockRequest::Unsubscribe,
            Type::Seek => MockRequest::Seek,
            Type::GetLastMessageId => MockRequest::GetLastMessageId,
            Type::CloseProducer => MockRequest::CloseProducer,
            Type::CloseConsumer => MockRequest::CloseConsumer,
            Type::GetTopicsOfNamespace => MockRequest::GetTopicsOfNamespace,
            Type::WatchTopicList => MockRequest::WatchTopicList,
            _ => return None,
        })
    }
}

/// An error to answer the next requests of one type with (see
/// [`MockBroker::push_error`](super::MockBroker::push_error)). Built with [`MockError::new`]
/// and the scoping methods:
///
/// ```
/// # use std::time::Duration;
/// use pulsar_sdk::mock::{MockError, MockRequest};
/// use pulsar_sdk::ServerError;
///
/// let error = MockError::new(MockRequest::Producer, ServerError::ServiceNotReady, "loading")
///     .times(3)
///     .after(Duration::from_millis(200))
///     .on_topic("orders");
/// assert_eq!(error.times, 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MockError {
    /// The request type it answers.
    pub request: MockRequest,
    /// The broker error code.
    pub code: ServerError,
    /// The error message.
    pub message: String,
    /// How many requests it answers (default 1; 0 answers none).
    pub times: usize,
    /// How many matching requests it lets through (served normally) before it answers the
    /// next ones (default 0). E.g. the second chunk of a chunked message: `skip(1)`.
    pub skip: usize,
    /// How long the error answer waits (on top of the broker's round-trip time and response
    /// delay); for [`MockRequest::Flow`], how long the permits wait. Default zero.
    pub delay: Duration,
    /// Only requests on this topic (canonical name; a partitioned topic's name also matches its
    /// partitions). Default `None`: any topic.
    pub topic: Option<String>,
    /// Only requests on this connection. Default `None`: any connection.
    pub connection: Option<ConnectionId>,
}

impl MockError {
    /// Answers the next request of type `request` with `code` and `message`.
    pub fn new(request: MockRequest, code: ServerError, message: impl Into<String>) -> Self {
        MockError {
            request,
            code,
            message: message.into(),
            times: 1,
            skip: 0,
            delay: Duration::ZERO,
            topic: None,
            connection: None,
        }
    }

    /// Answers the next `n` requests instead of one.
    pub fn times(mut self, n: usize) -> Self {
        self.times = n;
        self
    }

    /// Lets the first `n` matching requests through before answering.
    pub fn skip(mut self, n: usize) -> Self {
        self.skip = n;
        self
    }

    /// Sends each error answer `delay` late.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Only answers requests on `topic` (any form: `t`, `tenant/ns/t`, full name).
    pub fn on_topic(mut self, topic: &str) -> Self {
        self.topic = Some(canonical_topic(topic));
        self
    }

    /// Only answers requests on connection `conn`.
    pub fn on_connection(mut self, conn: ConnectionId) -> Self {
        self.connection = Some(conn);
        self
    }
}

/// One use of a pushed error: which request it answered (see
/// [`MockBroker::consumed_errors`](super::MockBroker::consumed_errors)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumedError {
    /// The request type answered.
    pub request: MockRequest,
    /// The error code answered.
    pub code: ServerError,
    /// The error message answered.
    pub message: String,
    /// The connection the request came on.
    pub connection: ConnectionId,
    /// The request's topic, when it names or implies one.
    pub topic: Option<String>,
    /// The service URL of the broker that answered.
    pub broker: String,
}

/// A pushed error still pending.
#[derive(Debug, Clone)]
struct Pending {
    error: MockError,
    /// Only requests to this broker (service URL); `None`: any broker of the cluster.
    broker: Option<String>,
}

/// The pushed errors of a cluster, and the report of those consumed.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    pending: Vec<Pending>,
    consumed: Vec<ConsumedError>,
    /// Woken when an error is consumed.
    pub(crate) notify: Arc<Notify>,
}

impl Injected {
    /// Queues `error` after those already pending, for the broker at `broker` only or (None)
    /// for any broker.
    pub(crate) fn push(&mut self, error: MockError, broker: Option<&str>) {
        if error.times > 0 {
            self.pending.push(Pending {
                error,
                broker: broker.map(str::to_owned),
            });
        }
    }

    /// The uses reported so far, of the broker at `broker` or (None) of every broker.
    pub(crate) fn consumed(&self, broker: Option<&str>) -> Vec<ConsumedError> {
        self.consumed
            .iter()
            .filter(|c| broker.is_none_or(|b| c.broker == b))
            .cloned()
            .collect()
    }

    /// The errors still pending that the broker at `broker` (None: any) could consume, with
    /// the number of requests each still answers.
    pub(crate) fn pending(&self, broker: Option<&str>) -> Vec<MockError> {
        self.pending
            .iter()
            .filter(|p| broker.is_none_or(|b| p.broker.as_deref().is_none_or(|pb| pb == b)))
            .map(|p| p.error.clone())
            .collect()
    }

    /// Drops the pending errors that only the broker at `broker` (None: every pending error).
    pub(crate) fn clear(&mut self, broker: Option<&str>) {
        match broker {
            Some(b) => self.pending.retain(|p| p.broker.as_deref() != Some(b)),
            None => self.pending.clear(),
        }
    }
}

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
        MockRequest::GetTopicsOfNamespace | MockRequest::WatchTopicList => Subject::None,
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
        _ => error(
            super::handlers::request_id(cmd).unwrap_or_default(),
            code,
            message,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
