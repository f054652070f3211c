//! The broker's registry of live connections: what each one has open (producers, consumers)
//! and the channel that carries broker-initiated frames to it.
//!
//! A real broker's `ServerCnx` keeps the producers and consumers of its connection; admin
//! operations and dispatchers reach a client through the connection that owns the producer or
//! consumer. Here every session registers an unbounded channel when it starts
//! ([`Conns::register`]); handlers push frames into it while holding the state lock (sending
//! never blocks), so frames for one connection leave in the order the state changed. The
//! session writes them after any response it is writing inline, and drops them while the
//! broker is unresponsive (like every frame the broker itself originates).

use std::collections::{HashMap, HashSet};

use tokio::sync::mpsc;

use super::ConnectionId;
use crate::codec::Frame;

/// The role of a connection that sent no auth data (see [`super::permissions`]).
pub(crate) const ANONYMOUS: &str = "anonymous";

/// A producer registered on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProducerRef {
    /// The canonical topic name.
    pub(crate) topic: String,
    /// `false` while queued for exclusive access (`WaitForExclusive`): SEND is not allowed yet.
    pub(crate) ready: bool,
}

/// A consumer registered on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerRef {
    /// The canonical topic name.
    pub(crate) topic: String,
    /// The subscription name.
    pub(crate) subscription: String,
}

/// One live connection.
#[derive(Debug)]
pub(crate) struct ConnEntry {
    /// Broker-initiated frames (MESSAGE, ACTIVE_CONSUMER_CHANGE, CLOSE_CONSUMER, ...).
    tx: mpsc::UnboundedSender<Box<Frame>>,
    /// Producers by producer id.
    pub(crate) producers: HashMap<u64, ProducerRef>,
    /// Producer ids closed on this connection: a late SEND for one is ignored instead of
    /// closing the connection (as upstream's `recentlyClosedProducers`).
    pub(crate) closed_producers: HashSet<u64>,
    /// Consumers by consumer id.
    pub(crate) consumers: HashMap<u64, ConsumerRef>,
    /// The role it authenticated as ([`super::permissions`]).
    pub(crate) role: String,
}

/// The live connections, by id.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    map: HashMap<ConnectionId, ConnEntry>,
}

impl Conns {
    /// Registers a new connection and the sender of its broker-initiated frames.
    pub(crate) fn register(&mut self, id: ConnectionId, tx: mpsc::UnboundedSender<Box<Frame>>) {
        self.map.insert(
            id,
            ConnEntry {
                tx,
                producers: HashMap::new(),
                closed_producers: HashSet::new(),
                consumers: HashMap::new(),
                role: ANONYMOUS.to_owned(),
            },
        );
    }

    /// Forgets a connection, returning what it had open.
    pub(crate) fn unregister(&mut self, id: ConnectionId) -> Option<ConnEntry> {
        self.map.remove(&id)
    }

    /// The connection `id`, if live.
    pub(crate) fn get(&self, id: ConnectionId) -> Option<&ConnEntry> {
        self.map.get(&id)
    }

    /// The connection `id`, if live.
    pub(crate) fn get_mut(&mut self, id: ConnectionId) -> Option<&mut ConnEntry> {
        self.map.get_mut(&id)
    }

    /// The live connection ids (unordered).
    #[allow(
        dead_code,
        reason = "for admin operations that address every connection"
    )]
    pub(crate) fn ids(&self) -> impl Iterator<Item = ConnectionId> + '_ {
        self.map.keys().copied()
    }

    /// Whether connection `id` is registered and its session still running (a session that
    /// ended but is not yet cleaned up is not live: upstream's `checkConnectionLiveness`).
    pub(crate) fn is_live(&self, id: ConnectionId) -> bool {
        self.map.get(&id).is_some_and(|c| !c.tx.is_closed())
    }

    /// Queues `frame` for connection `id`; `false` if the connection is gone.
    pub(crate) fn send(&self, id: ConnectionId, frame: Frame) -> bool {
        self.map
            .get(&id)
            .is_some_and(|c| c.tx.send(Box::new(frame)).is_ok())
    }

    /// Forgets the consumer `consumer_id` of connection `id` (e.g. closed by the broker).
    pub(crate) fn forget_consumer(&mut self, id: ConnectionId, consumer_id: u64) {
        if let Some(conn) = self.map.get_mut(&id) {
            conn.consumers.remove(&consumer_id);
        }
    }

    /// Forgets the producer `producer_id` of connection `id`, remembering it as closed.
    pub(crate) fn forget_producer(&mut self, id: ConnectionId, producer_id: u64) {
        if let Some(conn) = self.map.get_mut(&id) {
            conn.producers.remove(&producer_id);
            conn.closed_producers.insert(producer_id);
        }
    }
}
