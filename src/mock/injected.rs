//! The errors a test pushed ([`MockError`], per [`MockRequest`] type) and the report of those
//! consumed ([`ConsumedError`]): state only (a leaf under the broker state); how a pushed
//! error answers a request is in [`super::inject`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::namespace::canonical_topic;
use super::wire::base_command::Type;
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
    /// WATCH_PARTITION_UPDATE (PIP-247): answered ERROR; no watcher is registered. Names no
    /// topic.
    WatchPartitionUpdate,
    /// END_TXN (PIP-31): answered END_TXN_RESPONSE with the error; the transaction is not
    /// ended (e.g. `TransactionCoordinatorNotFound` while the coordinator moves). Names no
    /// topic.
    EndTxn,
}

impl MockRequest {
    /// The request type of a command, if errors can be pushed for it.
    pub(crate) fn of(ty: Type) -> Option<MockRequest> {
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
            Type::WatchPartitionUpdate => MockRequest::WatchPartitionUpdate,
            Type::EndTxn => MockRequest::EndTxn,
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
pub(crate) struct Pending {
    pub(crate) error: MockError,
    /// Only requests to this broker (service URL); `None`: any broker of the cluster.
    pub(crate) broker: Option<String>,
}

/// The pushed errors of a cluster, and the report of those consumed.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    pub(crate) pending: Vec<Pending>,
    pub(crate) consumed: Vec<ConsumedError>,
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
