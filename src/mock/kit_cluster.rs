//! [`MockCluster`]: N mock brokers sharing one storage, with the cluster operations in one
//! place (librdkafka's `rd_kafka_mock_cluster_new`, `_broker_set_down` / `_up`,
//! `_partition_set_leader`).

use std::io;
use std::time::Duration;

use super::admin_error::MockAdminError;
use super::injected::{ConsumedError, MockError};
use super::namespace::canonical_topic;
use super::{lock, MockBroker};

/// How [`MockCluster::move_topic`] tells the clients where the topic went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TopicMove {
    /// The close commands carry the new broker as PIP-307's `assignedBrokerServiceUrl`, so
    /// clients reconnect there without a lookup (a broker with the extensible load manager).
    #[default]
    AssignedUrl,
    /// The close commands carry no URL: clients look the topic up again and are redirected to
    /// the new broker (a broker without PIP-307).
    Lookup,
}

/// A cluster of mock brokers on `127.0.0.1` sharing one storage (topics, subscriptions,
/// messages, topic assignments), the test kit's drop-in: one call starts it and
/// [`service_url`](Self::service_url) names every broker, so an application's tests point their
/// client at it by configuration only. Dropping it stops every broker and closes its
/// connections. Brokers are addressed by their index, `0..len()`.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use pulsar_sdk::mock::{MockCluster, TopicMove};
///
/// let cluster = MockCluster::start(3).await?;
/// let url = cluster.service_url(); // pulsar://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C
/// // ... run the application against `url` ...
/// cluster.move_topic("orders", 2, TopicMove::AssignedUrl)?;
/// cluster.broker_down(0).await?;
/// cluster.broker_up(0).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MockCluster {
    brokers: Vec<MockBroker>,
}

impl MockCluster {
    /// Starts `n` brokers (default configuration) forming one cluster. Fails for `n == 0`.
    pub async fn start(n: usize) -> io::Result<MockCluster> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a mock cluster needs at least one broker",
            ));
        }
        Ok(MockCluster {
            brokers: MockBroker::start_cluster(n).await?,
        })
    }

    /// A cluster of brokers already sharing one storage (e.g. from
    /// [`MockBroker::start_cluster`] and [`MockBroker::start_with_shared_state`]); `None` if
    /// `brokers` is empty or they do not all share the first one's storage.
    pub fn from_brokers(brokers: Vec<MockBroker>) -> Option<MockCluster> {
        let first = brokers.first()?;
        brokers
            .iter()
            .all(|b| b.shares_state_with(first))
            .then_some(MockCluster { brokers })
    }

    /// The service URL naming every broker, `pulsar://127.0.0.1:P0,127.0.0.1:P1,...`: a
    /// client tries them in turn, so it reaches the cluster while any broker is up.
    pub fn service_url(&self) -> String {
        let hosts: Vec<String> = self.brokers.iter().map(|b| b.addr().to_string()).collect();
        format!("pulsar://{}", hosts.join(","))
    }

    /// The brokers, by index.
    pub fn brokers(&self) -> &[MockBroker] {
        &self.brokers
    }

    /// Broker `index`, if the cluster has it.
    pub fn broker(&self, index: usize) -> Option<&MockBroker> {
        self.brokers.get(index)
    }

    /// How many brokers the cluster has (at least one).
    pub fn len(&self) -> usize {
        self.brokers.len()
    }

    /// Always `false`: a cluster has at least one broker.
    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }

    fn get(&self, index: usize) -> Result<&MockBroker, MockAdminError> {
        self.brokers
            .get(index)
            .ok_or(MockAdminError::BrokerNotFound {
                index,
                brokers: self.brokers.len(),
            })
    }

    /// Takes broker `index` down ([`MockBroker::take_down`]): its port refuses connections and
    /// its connections are closed; the storage stays. Topics assigned to it stay assigned.
    pub async fn broker_down(&self, index: usize) -> Result<(), MockAdminError> {
        let broker = self.get(index)?;
        broker.take_down().await.map_err(|e| listen_error(index, e))
    }

    /// Brings broker `index` up again ([`MockBroker::bring_up`]): its port accepts again.
    pub async fn broker_up(&self, index: usize) -> Result<(), MockAdminError> {
        let broker = self.get(index)?;
        broker.bring_up().await.map_err(|e| listen_error(index, e))
    }

    /// Restarts broker `index`: down for `downtime`, then up ([`MockBroker::restart_after`]).
    pub async fn restart_broker(
        &self,
        index: usize,
        downtime: Duration,
    ) -> Result<(), MockAdminError> {
        let broker = self.get(index)?;
        broker
            .restart_after(downtime)
            .await
            .map_err(|e| listen_error(index, e))
    }

    /// Moves topic `topic`'s ownership to broker `index` (a partitioned topic: every
    /// partition): its producers and consumers are closed (reconnect allowed), every broker
    /// redirects its lookups to broker `index`, and the others refuse its producers and
    /// consumers (ServiceNotReady). `how` says whether the close commands name the new broker
    /// (PIP-307). The topic keeps its messages and subscriptions (shared storage). Fails with
    /// [`MockAdminError::TopicNotFound`] or [`MockAdminError::BrokerNotFound`].
    pub fn move_topic(
        &self,
        topic: &str,
        index: usize,
        how: TopicMove,
    ) -> Result<(), MockAdminError> {
        let target = self.get(index)?;
        target.unload(
            topic,
            Some(&target.service_url()),
            how == TopicMove::AssignedUrl,
        )
    }

    /// The index of the broker topic `topic` was moved to ([`move_topic`](Self::move_topic)),
    /// if any (until then every broker serves it).
    pub fn topic_owner(&self, topic: &str) -> Option<usize> {
        let owner = lock(&self.brokers[0].shared().state)
            .owners
            .get(&canonical_topic(topic))
            .cloned()?;
        self.brokers.iter().position(|b| b.service_url() == owner)
    }

    /// Cuts broker `index` from the storage (`true`: every write fails with a retriable error)
    /// or restores it ([`MockBroker::set_storage_cut`]).
    pub fn set_storage_cut(&self, index: usize, cut: bool) -> Result<(), MockAdminError> {
        self.get(index)?.set_storage_cut(cut);
        Ok(())
    }

    /// Sets broker `index`'s round-trip time ([`MockBroker::set_round_trip_time`]).
    pub fn set_round_trip_time(&self, index: usize, rtt: Duration) -> Result<(), MockAdminError> {
        self.get(index)?.set_round_trip_time(rtt);
        Ok(())
    }

    /// Stalls broker `index` (`true`: it accepts and reads but answers nothing) or resumes it
    /// ([`MockBroker::set_unresponsive`]).
    pub fn set_stalled(&self, index: usize, stalled: bool) -> Result<(), MockAdminError> {
        self.get(index)?.set_unresponsive(stalled);
        Ok(())
    }

    /// Pushes `error` for whichever broker of the cluster first receives a matching request
    /// (see [`MockBroker::push_error`], which pushes for one broker only).
    pub fn push_error(&self, error: MockError) {
        lock(&self.brokers[0].shared().state)
            .injected
            .push(error, None);
    }

    /// Every pushed error consumed by any broker of the cluster, in order.
    pub fn consumed_errors(&self) -> Vec<ConsumedError> {
        lock(&self.brokers[0].shared().state)
            .injected
            .consumed(None)
    }

    /// Every pushed error still pending, for any broker.
    pub fn pending_errors(&self) -> Vec<MockError> {
        lock(&self.brokers[0].shared().state).injected.pending(None)
    }
}

fn listen_error(index: usize, e: io::Error) -> MockAdminError {
    MockAdminError::Listen {
        index,
        kind: e.kind(),
        message: e.to_string(),
    }
}
