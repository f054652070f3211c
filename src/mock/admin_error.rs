//! The error of the mock broker's admin operations: a leaf, so the state modules that refuse
//! an operation (namespaces, permissions) do not import the admin view.

/// Why an admin operation of the mock broker failed (as a real broker's admin API answers
/// 404, 409 or 412).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MockAdminError {
    /// The namespace does not exist.
    #[error("namespace {0} does not exist")]
    NamespaceNotFound(String),
    /// The namespace already exists.
    #[error("namespace {0} already exists")]
    NamespaceExists(String),
    /// A deletion of the namespace is in progress.
    #[error("namespace {0} is being deleted")]
    NamespaceBeingDeleted(String),
    /// The topic does not exist.
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    /// A non-forced deletion found producers or consumers attached.
    #[error("{name} has {producers} producer(s) and {consumers} consumer(s) connected")]
    InUse {
        /// The namespace or topic.
        name: String,
        /// Producers attached (or queued for exclusive access).
        producers: usize,
        /// Consumers attached.
        consumers: usize,
    },
    /// The name is not a valid namespace (`tenant/namespace`) or topic name.
    #[error("invalid name {0:?}")]
    InvalidName(String),
    /// The operation is not supported on this topic (e.g. terminating a non-persistent one).
    #[error("{0}")]
    NotSupported(String),
    /// A [`MockCluster`](super::MockCluster) operation named a broker it does not have.
    #[error("the cluster has {brokers} broker(s): there is no broker {index}")]
    BrokerNotFound {
        /// The index given.
        index: usize,
        /// How many brokers the cluster has.
        brokers: usize,
    },
    /// A broker could not go down or come up again: it was shut down, or its address could not
    /// be bound again.
    #[error("broker {index} cannot listen: {kind} ({message})")]
    Listen {
        /// The broker's index in its cluster.
        index: usize,
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// An update of a partitioned topic did not grow its partition count (counts only grow).
    #[error("partitioned topic {topic} has {current} partitions: {requested} is not more")]
    PartitionCountNotIncreased {
        /// The partitioned topic.
        topic: String,
        /// Its partition count.
        current: u32,
        /// The count asked for.
        requested: u32,
    },
}
