//! # Lifecycle and errors
//!
//! Every fallible call returns [`pulsar_sdk::Result`](crate::Result), whose error is the one
//! [`Error`] enum. It is `#[non_exhaustive]`, `Clone`, and keeps the broker's code as a
//! [`ServerError`] (not a string), so match on variants and codes, never on messages.
//!
//! ## What the client retries by itself
//!
//! | Situation | What happens | Visible as |
//! |---|---|---|
//! | connection lost, broker restarted, topic unloaded or moved (PIP-307), broker close *with* reconnect | the producer or consumer reconnects with backoff (100 ms → 60 s, [`BackoffPolicy`]) for as long as it takes; producers re-send every unreceipted message in order, consumers re-subscribe and keep their acks | [`State::Reconnecting`], then `Ready`; nothing fails (sends may hit their send timeout) |
//! | creating a producer / consumer / reader, and the partitioned-metadata lookup before it | retriable errors ([`Error::is_retriable`]) are retried with backoff until the operation timeout; a non-retriable one fails at once | the last error (often [`Error::Timeout`], [`Error::Connect`]) |
//! | a SEND_ERROR from the broker (other than `NotAllowed` / `TopicTerminatedError`) | reconnect and re-send | nothing |
//! | an auth provider failing | that connection closes; its entities reconnect and ask again | [`Error::Authentication`] on the operation that needed it |
//!
//! Once an entity exists, a reconnect retries *every* error except the ones that end it for
//! good: a deleted topic (`TopicNotFound`), a terminated topic, a fenced producer, or a close
//! by the application. So an `AuthorizationError` an operator fixes, or a `ConsumerBusy` while
//! the broker has not yet noticed the old connection died, heals by itself.
//!
//! ## `Error::is_retriable`
//!
//! [`Error::is_retriable`] says whether trying the *same operation* again later may succeed:
//! `true` for [`Error::Connect`], [`Error::ConnectionLost`], [`Error::Timeout`],
//! [`Error::Authentication`], and [`Error::Broker`] with a transient code
//! ([`ServerError::is_retriable`], the Java client's `isRetriableError`: e.g.
//! `ServiceNotReady`, `TooManyRequests`, `MetadataError`, `PersistenceError`); `false` for
//! everything else (bad configuration or input, `TopicNotFound`, `AuthorizationError`,
//! `ProducerBusy`, `NotAllowed`, terminal errors, [`Error::Closed`], a full queue, ...). Use
//! it for operations you retry yourself, such as a `create()` at start-up.
//!
//! ## Terminal errors and states
//!
//! Every [`Producer`](crate::Producer), [`Consumer`](crate::Consumer) and
//! [`Reader`](crate::Reader) has a lifecycle [`State`]: `state()` reads it, `states()` is a
//! [`StateStream`] of its changes, and `closed()` resolves with the terminal state it ends in
//! (both `Send + 'static`). When it ends, its calls fail with the matching error:
//!
//! | Terminal [`State`] | Error | Cause |
//! |---|---|---|
//! | `Closed` | [`Error::Closed`] | closed by the application: `close()`, dropping it, or [`Client::close`](crate::Client::close) |
//! | `ClosedByBroker` | [`Error::ClosedByBroker`] | the broker closed it with `allow_reconnect = false` (PIP-139), e.g. its namespace is being deleted; a partitioned one closes as a whole |
//! | `Terminated` | [`Error::TopicTerminated`] | the topic was terminated: no more publishing (a consumer at its end stays `Ready`; its `recv` reports the end once with this error) |
//! | `Fenced` | [`Error::ProducerFenced`] | a newer exclusive producer took the topic ([`ProducerAccessMode::ExclusiveWithFencing`](crate::producer::ProducerAccessMode::ExclusiveWithFencing)) |
//! | `Failed` | the error that ended it | a non-retriable error, e.g. the topic was deleted |
//!
//! None of these is retried: recreate the producer or consumer if it makes sense (it usually
//! does not for `TopicTerminated` or `ProducerFenced`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::{mock::MockBroker, Client, Error, InitialPosition, State};
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//!
//! // A terminated topic ends its producer.
//! let producer = client.producer("ledger").create().await?;
//! broker.terminate_topic("ledger")?;
//! let receipt = producer.send("too late").await?;
//! assert!(matches!(receipt.await, Err(Error::TopicTerminated { .. })));
//! assert_eq!(producer.closed().await, State::Terminated);
//!
//! // Deleting the namespace closes its consumers for good (PIP-139).
//! let mut consumer = client
//!     .consumer("orders")
//!     .subscription("billing")
//!     .initial_position(InitialPosition::Earliest)
//!     .subscribe()
//!     .await?;
//! broker.delete_namespace("public/default", true).await?;
//! assert!(matches!(consumer.recv().await, Err(Error::ClosedByBroker { .. })));
//! assert_eq!(consumer.closed().await, State::ClosedByBroker);
//! assert!(matches!(consumer.recv().await, Err(Error::Closed))); // from then on
//! # Ok(()) }
//! ```
//!
//! ## Matching errors
//!
//! A typical service logs and carries on for per-message failures, and stops (or rebuilds)
//! on terminal ones:
//!
//! ```no_run
//! use pulsar_sdk::{Error, ServerError};
//!
//! # async fn demo(producer: pulsar_sdk::Producer) {
//! let outcome = match producer.send("payload").await {
//!     Ok(receipt) => receipt.await,
//!     Err(e) => Err(e),
//! };
//! match outcome {
//!     Ok(id) => println!("stored as {id}"),
//!     // Unknown outcome: the broker may have stored it. Resend if duplicates are acceptable.
//!     Err(Error::Timeout { .. }) => eprintln!("no receipt in time"),
//!     // Back-pressure (block_if_queue_full = false): slow down and try again.
//!     Err(Error::ProducerQueueFull { limit }) => eprintln!("queue full: {limit}"),
//!     // This message only.
//!     Err(Error::MessageTooBig { size, max }) => eprintln!("{size} > {max} bytes"),
//!     Err(Error::Broker { code: ServerError::NotAllowed, message }) => eprintln!("{message}"),
//!     // The producer is gone for good: stop, alert, or build a new one.
//!     Err(Error::ClosedByBroker { topic })
//!     | Err(Error::TopicTerminated { topic })
//!     | Err(Error::ProducerFenced { topic }) => eprintln!("producer of {topic} ended"),
//!     Err(Error::Closed) => eprintln!("we closed it"),
//!     // `Error` is non-exhaustive.
//!     Err(e) if e.is_retriable() => eprintln!("transient: {e}"),
//!     Err(e) => eprintln!("failed: {e}"),
//! }
//! # }
//! ```
//!
//! A service can also follow the lifecycle directly:
//!
//! ```no_run
//! # async fn demo(consumer: pulsar_sdk::Consumer) {
//! use futures::StreamExt;
//! use pulsar_sdk::State;
//!
//! let mut states = consumer.states(); // current state first, then each change
//! tokio::spawn(async move {
//!     while let Some(state) = states.next().await {
//!         match state {
//!             State::Reconnecting => eprintln!("consumer reconnecting"),
//!             s if s.is_terminal() => eprintln!("consumer ended: {s}"),
//!             _ => {}
//!         }
//!     }
//! });
//! # }
//! ```
//!
//! ## Other errors worth knowing
//!
//! - [`Error::InvalidConfig`], [`Error::InvalidServiceUrl`], [`Error::InvalidTopicName`]:
//!   rejected before anything was sent.
//! - [`Error::InvalidOperation`]: not valid for this entity (a cumulative ack on a Shared
//!   subscription, a seek to an id naming no partition of the topic); nothing was sent.
//! - [`Error::Tls`] with a [`TlsFailure`]: see [`connecting`](super::connecting).
//! - [`Error::Protocol`]: the broker broke the protocol (including a flow-control violation,
//!   see [`java_differences`](super::java_differences)); the connection is closed and its
//!   entities reconnect.
//! - [`Error::Codec`]: a frame could not be encoded or decoded (e.g. a command over the
//!   maximum frame size). I/O errors of the socket (a reset, a broken pipe) are never a codec
//!   error: they are [`Error::ConnectionLost`], retried like any lost connection.
//! - [`Error::Lookup`]: a lookup failed (e.g. too many redirects).
//!
//! [`Error`]: crate::Error
//! [`Error::is_retriable`]: crate::Error::is_retriable
//! [`Error::Connect`]: crate::Error::Connect
//! [`Error::ConnectionLost`]: crate::Error::ConnectionLost
//! [`Error::Timeout`]: crate::Error::Timeout
//! [`Error::Authentication`]: crate::Error::Authentication
//! [`Error::Broker`]: crate::Error::Broker
//! [`Error::Closed`]: crate::Error::Closed
//! [`Error::ClosedByBroker`]: crate::Error::ClosedByBroker
//! [`Error::TopicTerminated`]: crate::Error::TopicTerminated
//! [`Error::ProducerFenced`]: crate::Error::ProducerFenced
//! [`Error::InvalidConfig`]: crate::Error::InvalidConfig
//! [`Error::InvalidServiceUrl`]: crate::Error::InvalidServiceUrl
//! [`Error::InvalidTopicName`]: crate::Error::InvalidTopicName
//! [`Error::InvalidOperation`]: crate::Error::InvalidOperation
//! [`Error::Tls`]: crate::Error::Tls
//! [`Error::Protocol`]: crate::Error::Protocol
//! [`Error::Codec`]: crate::Error::Codec
//! [`Error::Lookup`]: crate::Error::Lookup
//! [`ServerError`]: crate::ServerError
//! [`ServerError::is_retriable`]: crate::ServerError::is_retriable
//! [`TlsFailure`]: crate::TlsFailure
//! [`State`]: crate::State
//! [`State::Reconnecting`]: crate::State::Reconnecting
//! [`StateStream`]: crate::StateStream
//! [`BackoffPolicy`]: crate::BackoffPolicy
