//! Clusters of mock brokers sharing one storage, broker restarts, and counters.
//!
//! Brokers of a cluster share the [`BrokerState`](super::state::BrokerState): topics,
//! namespaces, subscriptions with their cursors, stored messages, topic assignments, and the
//! registry of live connections (connection ids are unique across the cluster). Each keeps its
//! own listener, configuration, lookup rules, faults, command log and sessions.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::admin::MockBrokerStats;
use super::{accept_loop, close_sessions, handlers, lock, MockBroker, MockBrokerConfig};

/// How long [`MockBroker::restart`] keeps the port closed.
const RESTART_DOWNTIME: Duration = Duration::from_millis(50);

impl MockBroker {
    /// Starts `n` brokers (default configuration, each on its own `127.0.0.1` port) forming
    /// one cluster: they share the storage, so a topic unloaded from one to another
    /// ([`unload_topic_to`](Self::unload_topic_to)) keeps its messages and subscriptions.
    pub async fn start_cluster(n: usize) -> io::Result<Vec<MockBroker>> {
        let mut brokers: Vec<MockBroker> = Vec::with_capacity(n);
        for _ in 0..n {
            let broker = match brokers.first() {
                Some(first) => {
                    Self::start_with_shared_state(first, MockBrokerConfig::default()).await?
                }
                None => Self::start().await?,
            };
            brokers.push(broker);
        }
        Ok(brokers)
    }

    /// Starts a broker with `config` on `127.0.0.1:0` that joins `other`'s cluster: it shares
    /// `other`'s storage (topics, namespaces, subscriptions, messages, topic assignments) but
    /// has its own listener, lookup rules, faults and command log.
    pub async fn start_with_shared_state(
        other: &MockBroker,
        config: MockBrokerConfig,
    ) -> io::Result<MockBroker> {
        Self::start_on(config, Arc::clone(&other.shared().state)).await
    }

    /// Whether this broker and `other` share their storage (same cluster, or same broker).
    pub fn shares_state_with(&self, other: &MockBroker) -> bool {
        Arc::ptr_eq(&self.shared().state, &other.shared().state)
    }

    /// Restarts the broker, as a broker process restarting: see
    /// [`restart_after`](Self::restart_after); the port stays closed 50 ms.
    pub async fn restart(&self) -> io::Result<()> {
        self.restart_after(RESTART_DOWNTIME).await
    }

    /// Restarts the broker: closes the port and every connection (their producers and
    /// consumers are detached; messages dispatched but not acknowledged go back to their
    /// subscriptions), stays down for `downtime` (TCP connects are refused, duplex connections
    /// are closed at once), then listens again on the same address (retrying the bind for
    /// about a second). The data stays: topics, namespaces, durable subscriptions with their
    /// cursors, stored messages (non-durable subscriptions go with their consumers), and the
    /// configuration, lookup rules, faults and command log. Returns when the broker accepts
    /// again; fails if the broker was shut down, or if the address could not be bound again
    /// (then it does not listen).
    pub async fn restart_after(&self, downtime: Duration) -> io::Result<()> {
        self.take_down().await?;
        tracing::debug!(addr = %self.addr(), "mock broker: restarting");
        tokio::time::sleep(downtime).await;
        if lock(&self.shared().connections).closed {
            return Ok(()); // shut down meanwhile
        }
        self.bring_up().await
    }

    /// Takes the broker down, as a broker process that stopped: closes the port (TCP connects
    /// are refused when this returns; duplex connections are closed at once) and every
    /// connection (their producers and consumers are detached; messages dispatched but not
    /// acknowledged go back to their subscriptions). The data stays, as for
    /// [`restart`](Self::restart); [`bring_up`](Self::bring_up) listens again. Topics it owns
    /// stay assigned to it (move them with [`unload_topic_to`](Self::unload_topic_to) or
    /// [`MockCluster::move_topic`](super::MockCluster::move_topic)). Does nothing if already
    /// down; fails if the broker was shut down.
    pub async fn take_down(&self) -> io::Result<()> {
        let shared = &self.inner.shared;
        let live = {
            let mut registry = lock(&shared.connections);
            if registry.closed {
                return Err(io::Error::other("mock broker is shut down"));
            }
            registry.paused = true;
            std::mem::take(&mut registry.live)
        };
        let accept = lock(&self.inner.accept_task).take();
        if let Some(task) = accept {
            task.abort();
            let _ = task.await; // the listener is closed once the task is gone
        }
        {
            let mut state = lock(&shared.state);
            for id in live.keys() {
                handlers::connection_closed(&mut state, *id);
            }
        }
        close_sessions(live).await;
        tracing::debug!(addr = %shared.addr, "mock broker: down");
        Ok(())
    }

    /// Brings a broker taken down ([`take_down`](Self::take_down)) up again: listens on the
    /// same address (retrying the bind for about a second) and accepts connections. Returns
    /// when it accepts; does nothing if it is up. Fails if the address could not be bound
    /// again (then it stays down) or the broker was shut down.
    pub async fn bring_up(&self) -> io::Result<()> {
        let shared = &self.inner.shared;
        {
            let registry = lock(&shared.connections);
            if registry.closed {
                return Err(io::Error::other("mock broker is shut down"));
            }
            if !registry.paused {
                return Ok(());
            }
        }
        // The transaction coordinator is loaded again from its log: it finishes what it was
        // ending (PIP-31).
        super::transactions::recover(&mut lock(&shared.state));
        let listener = rebind(shared.addr).await;
        let mut registry = lock(&shared.connections);
        if registry.closed {
            return Err(io::Error::other("mock broker is shut down"));
        }
        let listener = listener?;
        registry.paused = false;
        let task = tokio::spawn(accept_loop(listener, Arc::clone(shared)));
        *lock(&self.inner.accept_task) = Some(task);
        tracing::debug!(addr = %shared.addr, "mock broker: up");
        Ok(())
    }

    /// Whether the broker is down ([`take_down`](Self::take_down), or restarting).
    pub fn is_down(&self) -> bool {
        lock(&self.shared().connections).paused
    }

    /// Counters for leak checks: live connections of this broker and the producers and
    /// consumers on them, topics and namespaces in the storage.
    pub fn stats(&self) -> MockBrokerStats {
        let registry = lock(&self.shared().connections);
        let state = lock(&self.shared().state);
        let (producers, consumers) = registry
            .live
            .keys()
            .filter_map(|id| state.conns.get(*id))
            .fold((0, 0), |(p, c), conn| {
                (p + conn.producers.len(), c + conn.consumers.len())
            });
        MockBrokerStats {
            accepted_connections: registry.accepted,
            connections: registry.live.len(),
            producers,
            consumers,
            topics: state.topics.count(),
            namespaces: state.topics.namespaces.names().len(),
        }
    }
}

/// Binds `addr` again, retrying while the port is not free yet.
async fn rebind(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut attempts = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if attempts >= 50 => return Err(e),
            Err(e) => {
                attempts += 1;
                tracing::debug!(%addr, error = %e, "mock broker: rebind failed, retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
