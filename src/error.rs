//! Typed, matchable errors.
//!
//! Broker error codes are kept as [`ServerError`] (the protocol's code, not a string), and the
//! failure classes an application reacts to differently — a timeout, a lost connection, a broker
//! refusal, bad input — are distinct variants.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::codec::CodecError;
use crate::schema::error::SchemaError;

/// The error kept as the source of [`Error::Tls`] and [`Error::Authentication`].
pub type SourceError = Arc<dyn std::error::Error + Send + Sync>;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error this crate returns.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is invalid; nothing was sent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A service URL could not be parsed or uses an unsupported scheme.
    #[error("invalid service URL `{url}`: {reason}")]
    InvalidServiceUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A topic name is not valid; nothing was sent.
    #[error("invalid topic name `{topic}`: {reason}")]
    InvalidTopicName {
        /// The name as given.
        topic: String,
        /// Why it was rejected.
        reason: String,
    },

    /// Opening a TCP connection to a broker failed.
    #[error("could not connect to {addr}: {reason}")]
    Connect {
        /// The broker address.
        addr: String,
        /// The I/O error, as text.
        reason: String,
    },

    /// The TLS connection to a broker could not be established: see [`TlsFailure`] for why.
    #[error("TLS connection to {addr} failed: {kind}")]
    Tls {
        /// The address connected to (`host:port`).
        addr: String,
        /// What went wrong, for matching.
        kind: TlsFailure,
        /// The TLS library's error.
        #[source]
        source: Option<SourceError>,
    },

    /// The authentication provider could not supply credentials (for a new connection, or to
    /// answer the broker's auth challenge; that connection is then closed). Retriable: the
    /// provider is asked again on the next connection.
    #[error("authentication provider `{method}` failed: {source}")]
    Authentication {
        /// The auth method of the provider.
        method: String,
        /// The provider's error.
        #[source]
        source: SourceError,
    },

    /// The connection to the broker was lost (or closed) before the operation completed.
    /// The operation's outcome on the broker is unknown.
    #[error("connection lost: {0}")]
    ConnectionLost(String),

    /// The broker sent something that violates the protocol (or the handshake failed).
    #[error("protocol error: {0}")]
    Protocol(String),

    /// A frame could not be encoded or decoded (a bad frame, or a frame over the maximum
    /// size). Never an I/O error: a socket that fails (reset, broken pipe ...) is a lost
    /// connection, [`Error::ConnectionLost`].
    #[error(transparent)]
    Codec(CodecError),

    /// The operation did not complete within its timeout. For sends, the outcome is unknown:
    /// the broker may still have stored the message.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What timed out (e.g. "lookup", "producer create").
        operation: &'static str,
        /// The timeout that elapsed.
        after: Duration,
    },

    /// End-to-end encryption or decryption failed: see [`CryptoError`](crate::crypto::CryptoError).
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    #[error(transparent)]
    Crypto(crate::crypto::error::CryptoError),

    /// The broker answered with an error.
    #[error("broker error {code:?}: {message}")]
    Broker {
        /// The protocol error code.
        code: ServerError,
        /// The broker's message.
        message: String,
    },

    /// A lookup could not be completed (e.g. too many redirects).
    #[error("lookup of `{topic}` failed: {reason}")]
    Lookup {
        /// The topic looked up.
        topic: String,
        /// Why it failed.
        reason: String,
    },

    /// The client, connection or entity was closed by the application.
    #[error("already closed")]
    Closed,

    /// The broker closed the producer/consumer for good (PIP-139 `allow_reconnect = false`,
    /// e.g. because its namespace is being deleted). It will not reconnect.
    #[error("closed by the broker for good: {topic}")]
    ClosedByBroker {
        /// The topic of the closed producer/consumer.
        topic: String,
    },

    /// The topic was terminated: no more messages can be published (or, for a consumer, all
    /// messages have been consumed).
    #[error("topic terminated: {topic}")]
    TopicTerminated {
        /// The terminated topic.
        topic: String,
    },

    /// The producer was fenced by a newer exclusive producer.
    #[error("producer fenced on {topic}")]
    ProducerFenced {
        /// The topic.
        topic: String,
    },

    /// The producer's pending queue (by count or by client memory) is full and the producer is
    /// configured to fail rather than wait (`block_if_queue_full = false`); `limit` says which
    /// of the two was reached.
    #[error("producer queue is full: {limit}")]
    ProducerQueueFull {
        /// The limit the send found reached.
        limit: QueueLimit,
    },

    /// A message is larger than the broker accepts.
    #[error("message of {size} bytes exceeds the broker's maximum message size of {max} bytes")]
    MessageTooBig {
        /// The message's size on the wire (after compression).
        size: usize,
        /// The broker's limit.
        max: usize,
    },

    /// The operation is not valid for this producer or consumer (e.g. a cumulative ack on a
    /// Shared subscription); nothing was sent.
    #[error("invalid operation: {0}")]
    InvalidOperation(String),

    /// A received message could not be decoded (corrupt payload, unknown compression ...).
    #[error("invalid message: {0}")]
    InvalidMessage(String),

    /// A value could not be encoded with the producer's schema (nothing was sent).
    #[error(transparent)]
    Schema(#[from] SchemaError),

    /// A transaction operation failed on the client's side: see
    /// [`TransactionError`](crate::transaction::TransactionError). (The coordinator's and the
    /// broker's refusals are [`Error::Broker`] with their code.)
    #[cfg(feature = "transactions")]
    #[cfg_attr(docsrs, doc(cfg(feature = "transactions")))]
    #[error(transparent)]
    Transaction(crate::transaction::types::TransactionError),
}

impl From<CodecError> for Error {
    /// A codec error, except that the transport's I/O errors (which tokio-util's codecs report
    /// through the codec's error type) are a lost connection: retried like any other (Java
    /// `ClientCnx.exceptionCaught` closes the channel, and its pending requests fail as
    /// disconnected, which is retriable).
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::Io { kind, message } => {
                Error::ConnectionLost(format!("I/O error ({kind:?}): {message}"))
            }
            other => Error::Codec(other),
        }
    }
}

impl Error {
    /// Whether the broker refused a schema as incompatible with the topic's
    /// ([`ServerError::IncompatibleSchema`]; never retried).
    pub fn is_incompatible_schema(&self) -> bool {
        matches!(
            self,
            Error::Broker {
                code: ServerError::IncompatibleSchema,
                ..
            }
        )
    }

    /// Whether retrying the same operation later may succeed (connection trouble, timeouts and
    /// the broker's transient codes). Follows Java's `isRetriableError` for broker codes.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::ConnectionLost(_)
            | Error::Timeout { .. }
            | Error::Authentication { .. } => true,
            Error::Broker { code, .. } => code.is_retriable(),
            #[cfg(feature = "transactions")]
            Error::Transaction(e) => e.is_retriable(),
            Error::Lookup { .. } | Error::ProducerQueueFull { .. } => false,
            _ => false,
        }
    }
}

/// Which limit a send found reached (see [`Error::ProducerQueueFull`]). A send takes its
/// `max_pending_messages` slot before its memory, as upstream's `canEnqueueRequest`, so a
/// producer at both limits reports `MaxPendingMessages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueLimit {
    /// The producer's [`max_pending_messages`](crate::ProducerBuilder::max_pending_messages)
    /// (upstream's `ProducerQueueIsFullError`).
    MaxPendingMessages {
        /// The configured number of pending messages.
        max: usize,
    },
    /// The client's [`memory_limit`](crate::ClientBuilder::memory_limit), shared by all its
    /// producers (upstream's `MemoryBufferIsFullError`).
    MemoryLimit {
        /// The configured limit in bytes.
        bytes: usize,
    },
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::MaxPendingMessages { max } => {
                write!(f, "max_pending_messages of {max} reached")
            }
            QueueLimit::MemoryLimit { bytes } => {
                write!(f, "client memory limit of {bytes} bytes reached")
            }
        }
    }
}

/// Why a TLS connection failed (see [`Error::Tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The broker's certificate is not signed by a trusted certificate authority (check
    /// `tls_trust_certs_file_path`).
    UntrustedIssuer,
    /// The broker's certificate does not name the host connected to (hostname verification).
    HostnameMismatch,
    /// The broker's certificate has expired.
    CertificateExpired,
    /// The broker's certificate is invalid for another reason (not yet valid, revoked,
    /// malformed, wrong usage ...).
    InvalidCertificate,
    /// The broker refused the handshake (a TLS alert: e.g. it requires a client certificate,
    /// or rejected ours).
    RefusedByServer,
    /// The TLS handshake failed otherwise (protocol mismatch, connection closed ...).
    Handshake,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFailure::UntrustedIssuer => {
                "the broker's certificate is not signed by a trusted certificate authority"
            }
            TlsFailure::HostnameMismatch => {
                "the broker's certificate does not match the host name (hostname verification)"
            }
            TlsFailure::CertificateExpired => "the broker's certificate has expired",
            TlsFailure::InvalidCertificate => "the broker's certificate is invalid",
            TlsFailure::RefusedByServer => "the broker refused the TLS handshake",
            TlsFailure::Handshake => "the TLS handshake failed",
        })
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::ConnectionLost(e.to_string())
    }
}

macro_rules! server_errors {
    ($($(#[$doc:meta])* $name:ident = $code:literal,)*) => {
        /// A broker error code (the protocol's `ServerError`), mirrored so no generated type
        /// leaks into the public API.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ServerError {
            $($(#[$doc])* $name,)*
            /// A code this client does not know.
            Other(i32),
        }

        impl ServerError {
            /// Maps a wire code to the enum.
            pub fn from_code(code: i32) -> Self {
                match code {
                    $($code => ServerError::$name,)*
                    other => ServerError::Other(other),
                }
            }

            /// The wire code.
            pub fn code(self) -> i32 {
                match self {
                    $(ServerError::$name => $code,)*
                    ServerError::Other(c) => c,
                }
            }
        }
    };
}

server_errors! {
    /// Unknown error.
    UnknownError = 0,
    /// Error while interacting with the metadata store.
    MetadataError = 1,
    /// Error while interacting with the persistent storage.
    PersistenceError = 2,
    /// Authentication failed.
    AuthenticationError = 3,
    /// Not authorized for this operation.
    AuthorizationError = 4,
    /// The subscription already has an exclusive consumer.
    ConsumerBusy = 5,
    /// The broker cannot serve the request right now (e.g. topic being loaded).
    ServiceNotReady = 6,
    /// Producer blocked: backlog quota exceeded (request held).
    ProducerBlockedQuotaExceededError = 7,
    /// Producer blocked: backlog quota exceeded (exception).
    ProducerBlockedQuotaExceededException = 8,
    /// Checksum mismatch on a sent message.
    ChecksumError = 9,
    /// The operation is not supported by the broker.
    UnsupportedVersionError = 10,
    /// The topic does not exist.
    TopicNotFound = 11,
    /// The subscription does not exist.
    SubscriptionNotFound = 12,
    /// The consumer does not exist.
    ConsumerNotFound = 13,
    /// Too many concurrent requests.
    TooManyRequests = 14,
    /// The topic has been terminated.
    TopicTerminatedError = 15,
    /// Another producer holds the topic exclusively.
    ProducerBusy = 16,
    /// The topic name is invalid.
    InvalidTopicName = 17,
    /// The schema is incompatible with the topic's.
    IncompatibleSchema = 18,
    /// The consumer could not be assigned (Key_Shared).
    ConsumerAssignError = 19,
    /// Transaction coordinator not found.
    TransactionCoordinatorNotFound = 20,
    /// Invalid transaction status.
    InvalidTxnStatus = 21,
    /// The operation is not allowed (e.g. namespace being deleted).
    NotAllowed = 22,
    /// Transaction conflict.
    TransactionConflict = 23,
    /// Transaction not found.
    TransactionNotFound = 24,
    /// The producer was fenced by an exclusive producer.
    ProducerFenced = 25,
}

impl ServerError {
    /// Whether an operation refused with this code may succeed if retried, following the
    /// upstream Java client's `isRetriableError` (see `protocol-extensions.md`, PIP-139).
    pub fn is_retriable(self) -> bool {
        !matches!(
            self,
            ServerError::AuthenticationError
                | ServerError::AuthorizationError
                | ServerError::ConsumerBusy
                | ServerError::ChecksumError
                | ServerError::TopicNotFound
                | ServerError::SubscriptionNotFound
                | ServerError::TopicTerminatedError
                | ServerError::ProducerBusy
                | ServerError::InvalidTopicName
                | ServerError::IncompatibleSchema
                | ServerError::ConsumerAssignError
                | ServerError::NotAllowed
                | ServerError::TransactionConflict
                // The transaction's state does not change by asking again (upstream's client
                // ends the transaction in ERROR on either).
                | ServerError::TransactionNotFound
                | ServerError::InvalidTxnStatus
                | ServerError::ProducerFenced
                | ServerError::UnsupportedVersionError
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_error_codes_round_trip() {
        for code in -1..30 {
            assert_eq!(ServerError::from_code(code).code(), code);
        }
        assert_eq!(ServerError::from_code(22), ServerError::NotAllowed);
        assert_eq!(ServerError::from_code(99), ServerError::Other(99));
    }

    #[test]
    fn retriable_classification_matches_upstream() {
        assert!(ServerError::ServiceNotReady.is_retriable());
        assert!(ServerError::TooManyRequests.is_retriable());
        assert!(ServerError::MetadataError.is_retriable());
        assert!(!ServerError::NotAllowed.is_retriable());
        assert!(!ServerError::TopicNotFound.is_retriable());
        assert!(!ServerError::ProducerFenced.is_retriable());
        assert!(Error::ConnectionLost("x".into()).is_retriable());
        assert!(!Error::InvalidConfig("x".into()).is_retriable());
    }
}
