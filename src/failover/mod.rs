//! Cluster-level failover (upstream PIP-121): a client that moves to a standby cluster by
//! itself, and back.
//!
//! - [`ServiceInfo`] is one cluster as the client reaches it (service URL,
//!   authentication, TLS trust).
//! - [`Client::update_service_info`](crate::Client::update_service_info) moves a client to
//!   another cluster: every connection to the old one closes, lookups go to the new one, and
//!   every producer, consumer and reader reconnects there through its usual reconnect path
//!   (producers re-send what they hold, in order; consumers and readers re-subscribe), with
//!   the new cluster's credentials. [`Client::service_info_updates`](crate::Client::service_info_updates)
//!   follows the active cluster; each switch is also logged at `info`.
//! - A [`ServiceInfoProvider`] decides when to switch: set one with
//!   [`ClientBuilder::service_info_provider`](crate::ClientBuilder::service_info_provider).
//!   [`AutoClusterFailover`] probes the clusters itself; `ControlledClusterFailover` (cargo
//!   feature `controlled-failover`) asks an HTTP service which cluster to use.
//!
//! What the brokers must be set up with so that nothing is missed is in the guide's
//! connecting chapter ([`crate::guide::connecting`]).

mod auto;
#[cfg(feature = "controlled-failover")]
mod controlled;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::core::ClientCore;
use crate::error::{Error, Result};
use crate::service_info::ServiceInfo;

pub use auto::{AutoClusterFailover, AutoClusterFailoverBuilder};
#[cfg(feature = "controlled-failover")]
#[cfg_attr(docsrs, doc(cfg(feature = "controlled-failover")))]
pub use controlled::{ControlledClusterFailover, ControlledClusterFailoverBuilder};

/// Gives a client its first cluster and tells it when to move to another (upstream C++ and
/// Python `ServiceInfoProvider`, push-style; Java's `ServiceUrlProvider`).
///
/// The client calls [`initial_service_info`](Self::initial_service_info) once when it is
/// built, then [`initialize`](Self::initialize) with the [`ServiceInfoUpdater`] through which
/// the provider switches it. A provider that watches something runs its own task (spawned in
/// `initialize`) and ends it when [`ServiceInfoUpdater::closed`] resolves.
pub trait ServiceInfoProvider: fmt::Debug + Send + Sync + 'static {
    /// The cluster the client starts on.
    fn initial_service_info(&self) -> ServiceInfo;

    /// Starts the provider for a client (once per client built with it, inside the tokio
    /// runtime the client was built in). Must not block: spawn what runs on.
    fn initialize(self: Arc<Self>, updater: ServiceInfoUpdater);
}

/// The handle through which a [`ServiceInfoProvider`] switches its client (upstream's
/// `onServiceInfoUpdate` callback). Holds the client weakly: once the client is closed or
/// gone, [`update`](Self::update) fails with [`Error::Closed`] and [`closed`](Self::closed)
/// resolves.
#[derive(Clone)]
pub struct ServiceInfoUpdater {
    core: Weak<ClientCore>,
}

impl fmt::Debug for ServiceInfoUpdater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceInfoUpdater")
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl ServiceInfoUpdater {
    pub(crate) fn new(core: &Arc<ClientCore>) -> Self {
        ServiceInfoUpdater {
            core: Arc::downgrade(core),
        }
    }

    /// Moves the client to `info`'s cluster, as
    /// [`Client::update_service_info`](crate::Client::update_service_info) does.
    pub fn update(&self, info: ServiceInfo) -> Result<()> {
        self.core
            .upgrade()
            .ok_or(Error::Closed)?
            .switch_service(info)
    }

    /// The cluster the client uses now (`None` once the client is gone).
    pub fn current(&self) -> Option<ServiceInfo> {
        self.core.upgrade().map(|c| c.service.borrow().clone())
    }

    /// Whether the client is closed (or gone).
    pub fn is_closed(&self) -> bool {
        self.core.upgrade().is_none_or(|c| c.is_shut_down())
    }

    /// Resolves once the client is closing, or gone.
    pub async fn closed(&self) {
        let Some(mut signal) = self.core.upgrade().map(|c| c.shutdown_signal()) else {
            return;
        };
        // The sender lives in the client core: an error means the core is gone.
        let _ = signal.wait_for(|closing| *closing).await;
    }
}

/// What a provider that polls does at each check (see [`spawn_polls`]): the one mechanism
/// both [`AutoClusterFailover`] and `ControlledClusterFailover` run on.
trait Poll: Send + 'static {
    /// What the provider remembers once a switch it asked for is made.
    type Mark: Send;

    /// One check, with the cluster the client uses now: the cluster to move to, if any.
    fn check(
        &mut self,
        current: ServiceInfo,
    ) -> impl Future<Output = Option<(ServiceInfo, Self::Mark)>> + Send;

    /// The client now uses the cluster `check` asked for.
    fn switched(&mut self, mark: Self::Mark);
}

/// Runs `poll` every `interval` (the first check one interval after the start; a slow check
/// delays the next, checks never pile up) until the client closes, and makes the switches it
/// asks for. A switch the client refuses (e.g. a TLS trust file it cannot load) is logged at
/// `warn` and the client stays where it is.
fn spawn_polls<P: Poll>(updater: ServiceInfoUpdater, interval: Duration, mut poll: P) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = updater.closed() => return,
                _ = ticks.tick() => {}
            }
            let Some(current) = updater.current() else {
                return;
            };
            let found = tokio::select! {
                _ = updater.closed() => return,
                found = poll.check(current) => found,
            };
            let Some((info, mark)) = found else { continue };
            let to = info.service_url().clone();
            match updater.update(info) {
                Ok(()) => poll.switched(mark),
                Err(Error::Closed) => return,
                Err(e) => {
                    tracing::warn!(%to, error = %e, "cluster failover: cannot switch; staying")
                }
            }
        }
    });
}
