//! The PIP-247 partition update watchers the brokers keep, and the lookups they served:
//! state only (a leaf under the broker state); what WATCH_PARTITION_UPDATE and its results
//! do with them is in [`super::watchers`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::wire::base_command::Type;
use super::ConnectionId;

/// The default resend timeout of a partition update.
pub(crate) const DEFAULT_RESEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A watcher: (connection, watcher id).
pub(crate) type WatcherKey = (ConnectionId, u64);

/// The update a watcher has not acknowledged yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InFlight {
    pub(crate) version: u64,
    pub(crate) sent_at: Instant,
    pub(crate) resend_at: Instant,
}

/// One registered watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    /// The broker it was registered on (by service URL): its resend timeout applies.
    pub(crate) service_url: String,
    /// The topics, as the client named them.
    pub(crate) topics: Vec<String>,
    /// The last version sent (0: none yet).
    pub(crate) version: u64,
    pub(crate) in_flight: Option<InFlight>,
    /// Every version sent, in order.
    pub(crate) versions_sent: Vec<u64>,
}

/// The watchers of every connection of the brokers sharing the state.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    pub(crate) map: BTreeMap<WatcherKey, Watcher>,
    /// Results still to drop (fault injection: the client's ack was lost).
    pub(crate) drop_results: usize,
    /// Results ignored (stale, unexpected, or dropped).
    pub(crate) ignored: u64,
}

/// Lookups and partitioned-metadata requests a broker answered.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub(crate) lookups: AtomicU64,
    pub(crate) metadata: AtomicU64,
}

impl Served {
    /// Counts a command of type `ty` answered.
    pub(crate) fn record(&self, ty: i32) {
        if ty == Type::Lookup as i32 {
            self.lookups.fetch_add(1, Ordering::Relaxed);
        } else if ty == Type::PartitionedMetadata as i32 {
            self.metadata.fetch_add(1, Ordering::Relaxed);
        }
    }
}
