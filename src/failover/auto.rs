//! [`AutoClusterFailover`]: probes the clusters itself and switches when the one in use is down
//! (upstream C++ 4.1 / Python 3.11 `AutoClusterFailover`, Java `AutoClusterFailover`).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{ServiceInfoProvider, ServiceInfoUpdater};
use crate::error::{Error, Result};
use crate::service_info::ServiceInfo;

/// Upstream's probe timeout (C++ `probeTimeout_`, Java `TIMEOUT`: 30 s).
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A provider that starts on a primary cluster, probes the cluster in use every
/// [`check_interval`](AutoClusterFailoverBuilder::check_interval), moves to the first
/// secondary that answers once the one in use failed
/// [`failover_threshold`](AutoClusterFailoverBuilder::failover_threshold) probes in a row, and
/// comes back to the primary once it answered
/// [`switch_back_threshold`](AutoClusterFailoverBuilder::switch_back_threshold) probes in a
/// row.
///
/// A probe is what upstream's is: a TCP connection to the cluster's service URL (each of its
/// hosts in turn, the first that accepts is enough), bounded by
/// [`probe_timeout`](AutoClusterFailoverBuilder::probe_timeout), then closed. It says the
/// port is open, not that the brokers serve: a cluster whose brokers accept connections but
/// fail every lookup is not failed over from (use a controlled provider, or
/// [`Client::update_service_info`](crate::Client::update_service_info), for that). At most
/// one probe per cluster is in flight: one that has not finished by the next check (a name
/// resolution that hangs) is not started again and counts as failed.
///
/// If the application moves the client itself
/// ([`Client::update_service_info`](crate::Client::update_service_info)) to one of the
/// provider's clusters, the provider follows: that cluster is the one in use from the next
/// check on (probed, failed over from, switched back from if it is a secondary). A move to a
/// cluster the provider does not know leaves the provider where it was, as upstream's (Java's
/// keeps its own current URL whatever the application does): it goes on probing the cluster
/// it chose last and may move the client away when that one fails or the primary returns.
///
/// ```no_run
/// # async fn run() -> pulsar_sdk::Result<()> {
/// use pulsar_sdk::{AutoClusterFailover, Client, ServiceInfo};
/// use std::time::Duration;
///
/// let failover = AutoClusterFailover::builder()
///     .primary(ServiceInfo::builder("pulsar://east:6650").auth_token("east-token").build()?)
///     .secondary(ServiceInfo::builder("pulsar://west:6650").auth_token("west-token").build()?)
///     .check_interval(Duration::from_secs(5))
///     .failover_threshold(3)
///     .switch_back_threshold(6)
///     .build()?;
/// let client = Client::builder().service_info_provider(failover).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AutoClusterFailover {
    primary: ServiceInfo,
    secondaries: Vec<ServiceInfo>,
    check_interval: Duration,
    failover_threshold: u32,
    switch_back_threshold: u32,
    failover_delay: Duration,
    switch_back_delay: Duration,
    probe_timeout: Duration,
}

/// Builds an [`AutoClusterFailover`]; see [`AutoClusterFailover::builder`].
#[derive(Debug, Clone)]
pub struct AutoClusterFailoverBuilder {
    primary: Option<ServiceInfo>,
    secondaries: Vec<ServiceInfo>,
    check_interval: Duration,
    failover_threshold: u32,
    switch_back_threshold: u32,
    failover_delay: Duration,
    switch_back_delay: Duration,
    probe_timeout: Duration,
}

impl AutoClusterFailover {
    /// Starts building the provider.
    pub fn builder() -> AutoClusterFailoverBuilder {
        AutoClusterFailoverBuilder {
            primary: None,
            secondaries: Vec::new(),
            check_interval: Duration::from_secs(5),
            failover_threshold: 1,
            switch_back_threshold: 1,
            failover_delay: Duration::ZERO,
            switch_back_delay: Duration::ZERO,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
        }
    }

    fn cluster(&self, i: usize) -> &ServiceInfo {
        match i {
            0 => &self.primary,
            i => &self.secondaries[i - 1],
        }
    }

    /// The number of the cluster at `url` (0 the primary), if it is one of these.
    fn index_of(&self, url: &crate::service_url::ServiceUrl) -> Option<usize> {
        (0..=self.secondaries.len()).find(|i| self.cluster(*i).service_url() == url)
    }
}

impl AutoClusterFailoverBuilder {
    /// The cluster the client starts on and comes back to. Required.
    pub fn primary(mut self, info: ServiceInfo) -> Self {
        self.primary = Some(info);
        self
    }

    /// Adds a secondary cluster; secondaries are tried in the order added. At least one.
    pub fn secondary(mut self, info: ServiceInfo) -> Self {
        self.secondaries.push(info);
        self
    }

    /// Adds several secondary clusters, in order.
    pub fn secondaries(mut self, infos: impl IntoIterator<Item = ServiceInfo>) -> Self {
        self.secondaries.extend(infos);
        self
    }

    /// How often the cluster in use (and, while on a secondary, the primary) is probed.
    /// Default 5 s (C++/Python `check_interval`).
    pub fn check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    /// Failed probes in a row of the cluster in use before the client moves. Default 1
    /// (C++/Python `failover_threshold`). At least 1.
    pub fn failover_threshold(mut self, n: u32) -> Self {
        self.failover_threshold = n;
        self
    }

    /// Good probes in a row of the primary, while on a secondary, before the client comes back.
    /// Default 1 (C++/Python `switch_back_threshold`). At least 1.
    pub fn switch_back_threshold(mut self, n: u32) -> Self {
        self.switch_back_threshold = n;
        self
    }

    /// Java's `failoverDelay`: also wait until the cluster in use has been failing its probes
    /// for this long (since the first failed probe of the run) before moving. Default zero:
    /// the threshold alone decides.
    pub fn failover_delay(mut self, delay: Duration) -> Self {
        self.failover_delay = delay;
        self
    }

    /// Java's `switchBackDelay`: also wait until the primary has been answering for this long
    /// (since the first good probe of the run) before coming back. Default zero.
    pub fn switch_back_delay(mut self, delay: Duration) -> Self {
        self.switch_back_delay = delay;
        self
    }

    /// The bound on one probe (name resolution and TCP connect, per host). Default 30 s, like
    /// upstream.
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// Checks the settings and builds the provider.
    pub fn build(self) -> Result<AutoClusterFailover> {
        let primary = self
            .primary
            .ok_or_else(|| Error::InvalidConfig("AutoClusterFailover needs a primary".into()))?;
        if self.secondaries.is_empty() {
            return Err(Error::InvalidConfig(
                "AutoClusterFailover needs at least one secondary".into(),
            ));
        }
        if self.failover_threshold == 0 || self.switch_back_threshold == 0 {
            return Err(Error::InvalidConfig(
                "failover_threshold and switch_back_threshold must be at least 1".into(),
            ));
        }
        if self.check_interval.is_zero() || self.probe_timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "check_interval and probe_timeout must be greater than zero".into(),
            ));
        }
        Ok(AutoClusterFailover {
            primary,
            secondaries: self.secondaries,
            check_interval: self.check_interval,
            failover_threshold: self.failover_threshold,
            switch_back_threshold: self.switch_back_threshold,
            failover_delay: self.failover_delay,
            switch_back_delay: self.switch_back_delay,
            probe_timeout: self.probe_timeout,
        })
    }
}

impl ServiceInfoProvider for AutoClusterFailover {
    fn initial_service_info(&self) -> ServiceInfo {
        self.primary.clone()
    }

    fn initialize(self: Arc<Self>, updater: ServiceInfoUpdater) {
        let interval = self.check_interval;
        let prober = Prober::tcp(self.probe_timeout);
        super::spawn_polls(
            updater,
            interval,
            AutoPoll {
                config: self,
                machine: Machine::default(),
                prober,
            },
        );
    }
}

/// [`AutoClusterFailover`] at work for one client.
struct AutoPoll {
    config: Arc<AutoClusterFailover>,
    machine: Machine,
    prober: Arc<Prober>,
}

impl super::Poll for AutoPoll {
    type Mark = usize;

    fn check(
        &mut self,
        current: ServiceInfo,
    ) -> impl Future<Output = Option<(ServiceInfo, usize)>> + Send {
        self.machine.follow(&self.config, &current);
        let (config, machine, prober) = (&self.config, &mut self.machine, &self.prober);
        async move {
            let i = machine.check(config, |info| prober.probe(info)).await?;
            Some((config.cluster(i).clone(), i))
        }
    }

    fn switched(&mut self, i: usize) {
        self.machine.switched_to(i);
    }
}

/// What a probe does: `true` if the cluster answers. Boxed so tests can stand in for the
/// network.
type ProbeFn = dyn Fn(ServiceInfo) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync;

/// Runs probes, at most one in flight per cluster (by service URL). A probe runs in a task of
/// its own; the check waits for it at most `wait`. A probe still running at the next check
/// (a name resolution that hangs: it runs on a blocking thread nothing can cancel) is not
/// started again and counts as failed, so a hanging resolver holds one thread per cluster,
/// never one more per check.
struct Prober {
    probe: Arc<ProbeFn>,
    wait: Duration,
    running: Mutex<HashSet<String>>,
}

impl Prober {
    /// Upstream's probe (see [`tcp_probe`]), each host bounded by `timeout`.
    fn tcp(timeout: Duration) -> Arc<Prober> {
        Prober::new(
            Arc::new(move |info: ServiceInfo| Box::pin(tcp_probe(info, timeout)) as _),
            timeout,
        )
    }

    fn new(probe: Arc<ProbeFn>, wait: Duration) -> Arc<Prober> {
        Arc::new(Prober {
            probe,
            wait,
            running: Mutex::new(HashSet::new()),
        })
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Probes `info`'s cluster, unless a probe of it is still running (then: `false`).
    fn probe(self: &Arc<Self>, info: &ServiceInfo) -> impl Future<Output = bool> + Send + use<> {
        let key = info.service_url().to_string();
        // Each host in turn may take the whole timeout.
        let wait = self
            .wait
            .saturating_mul(info.service_url().hosts().len().max(1) as u32);
        let started = self.running().insert(key.clone());
        let done = started.then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (me, info) = (self.clone(), info.clone());
            tokio::spawn(async move {
                let up = (me.probe)(info).await;
                me.running().remove(&key);
                let _ = tx.send(up);
            });
            rx
        });
        async move {
            let Some(rx) = done else {
                tracing::debug!("cluster probe: the previous one still runs; counted as failed");
                return false;
            };
            matches!(tokio::time::timeout(wait, rx).await, Ok(Ok(true)))
        }
    }
}

/// Whether a TCP connection to one of `info`'s hosts opens (upstream's probe: C++
/// `probeAvailableAsync`, Java `AutoClusterFailover.probeAvailable`): per host, the name is
/// resolved on a blocking thread (as the system resolver needs), then each address is tried
/// with `timeout`; the first that accepts is enough, and the connection is closed.
async fn tcp_probe(info: ServiceInfo, timeout: Duration) -> bool {
    for host in info.service_url().hosts() {
        let (name, port) = (host.host.clone(), host.port);
        let resolved = tokio::task::spawn_blocking(move || {
            std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port))
                .map(|addrs| addrs.collect::<Vec<_>>())
        })
        .await;
        let addrs = match resolved {
            Ok(Ok(addrs)) => addrs,
            Ok(Err(e)) => {
                tracing::debug!(%host, error = %e, "cluster probe: cannot resolve");
                continue;
            }
            Err(_) => continue,
        };
        for addr in addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(_)) => return true,
                Ok(Err(e)) => tracing::debug!(%host, %addr, error = %e, "cluster probe failed"),
                Err(_) => tracing::debug!(%host, %addr, ?timeout, "cluster probe timed out"),
            }
        }
    }
    false
}

/// The decisions of [`AutoClusterFailover`], apart from probing and switching (so they can be
/// tested with any probe). Clusters are numbered: 0 the primary, then the secondaries.
#[derive(Debug, Default)]
struct Machine {
    current: usize,
    /// Failed probes in a row of the cluster in use, and when the run began.
    failures: u32,
    failing_since: Option<Instant>,
    /// Good probes in a row of the primary while on a secondary, and when the run began.
    recoveries: u32,
    recovered_since: Option<Instant>,
}

impl Machine {
    /// One check: probes as needed, and answers the cluster to switch to, if any (not yet
    /// taken: call [`switched_to`](Self::switched_to) once the switch happened).
    async fn check<P, F>(&mut self, config: &AutoClusterFailover, mut probe: P) -> Option<usize>
    where
        P: FnMut(&ServiceInfo) -> F,
        F: Future<Output = bool>,
    {
        let now = Instant::now();
        let up = probe(config.cluster(self.current)).await;
        if up {
            self.failures = 0;
            self.failing_since = None;
        } else {
            self.failures += 1;
            self.failing_since.get_or_insert(now);
        }
        let must_move = !up
            && self.failures >= config.failover_threshold
            && self
                .failing_since
                .is_some_and(|t| now.duration_since(t) >= config.failover_delay);
        if self.current == 0 {
            if !must_move {
                return None;
            }
            // Upstream: the first secondary that answers, in order.
            for i in 1..=config.secondaries.len() {
                if probe(config.cluster(i)).await {
                    return Some(i);
                }
            }
            tracing::warn!(
                primary = %config.primary.service_url(),
                "cluster failover: the primary is down and no secondary answers; staying"
            );
            return None;
        }
        let primary_up = probe(&config.primary).await;
        if !primary_up {
            self.recoveries = 0;
            self.recovered_since = None;
        } else {
            self.recoveries += 1;
            self.recovered_since.get_or_insert(now);
        }
        if must_move {
            // The secondary in use is down: the primary if it answers (upstream C++), else the
            // other secondaries in order (upstream stays on the dead one).
            if primary_up {
                return Some(0);
            }
            for i in (1..=config.secondaries.len()).filter(|i| *i != self.current) {
                if probe(config.cluster(i)).await {
                    return Some(i);
                }
            }
            return None;
        }
        let back = primary_up
            && self.recoveries >= config.switch_back_threshold
            && self
                .recovered_since
                .is_some_and(|t| now.duration_since(t) >= config.switch_back_delay);
        back.then_some(0)
    }

    /// Follows a switch the provider did not make (the application's
    /// [`Client::update_service_info`](crate::Client::update_service_info)): if the client now
    /// uses another of the provider's clusters, that one is the cluster in use from now on
    /// (probed, failed over from), and every count starts over. A cluster the provider does
    /// not know changes nothing: the provider goes on from the cluster it chose last, as
    /// upstream's, which keeps its own `currentPulsarServiceUrl` whatever the application did.
    fn follow(&mut self, config: &AutoClusterFailover, current: &ServiceInfo) {
        if let Some(i) = config.index_of(current.service_url()) {
            if i != self.current {
                tracing::info!(to = %current.service_url(),
                    "cluster failover: the application switched; following");
                self.switched_to(i);
            }
        }
    }

    /// The client now uses cluster `i`: every count starts over.
    fn switched_to(&mut self, i: usize) {
        *self = Machine {
            current: i,
            ..Machine::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    fn info(url: &str) -> ServiceInfo {
        ServiceInfo::new(url).unwrap()
    }

    fn config(fail: u32, back: u32) -> AutoClusterFailover {
        AutoClusterFailover::builder()
            .primary(info("pulsar://p:6650"))
            .secondary(info("pulsar://s1:6650"))
            .secondary(info("pulsar://s2:6650"))
            .failover_threshold(fail)
            .switch_back_threshold(back)
            .build()
            .unwrap()
    }

    /// Which hosts answer, and which were probed.
    #[derive(Default)]
    struct Net {
        up: Mutex<HashMap<String, bool>>,
        probed: Mutex<Vec<String>>,
    }

    impl Net {
        fn set(&self, host: &str, up: bool) {
            self.up.lock().unwrap().insert(host.into(), up);
        }
        fn probe(&self, info: &ServiceInfo) -> std::future::Ready<bool> {
            let host = info.service_url().first_host().host.clone();
            self.probed.lock().unwrap().push(host.clone());
            std::future::ready(*self.up.lock().unwrap().get(&host).unwrap_or(&true))
        }
        fn probed(&self) -> Vec<String> {
            std::mem::take(&mut *self.probed.lock().unwrap())
        }
    }

    async fn step(m: &mut Machine, c: &AutoClusterFailover, net: &Net) -> Option<usize> {
        let t = m.check(c, |i| net.probe(i)).await;
        if let Some(i) = t {
            m.switched_to(i);
        }
        t
    }

    #[tokio::test(start_paused = true)]
    async fn fails_over_after_the_threshold_and_back_after_its_own() {
        let (c, net, mut m) = (config(3, 2), Net::default(), Machine::default());
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(net.probed(), ["p"], "only the primary while it answers");
        net.set("p", false);
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(
            step(&mut m, &c, &net).await,
            Some(1),
            "third failure in a row"
        );
        assert_eq!(net.probed(), ["p", "p", "p", "s1"]);
        // On s1: the primary is probed too; back after two good probes in a row.
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(net.probed(), ["s1", "p"]);
        net.set("p", true);
        assert_eq!(step(&mut m, &c, &net).await, None);
        net.set("p", false);
        assert_eq!(step(&mut m, &c, &net).await, None, "the run was broken");
        net.set("p", true);
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(step(&mut m, &c, &net).await, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_run_broken_by_a_good_probe_starts_over() {
        let (c, net, mut m) = (config(2, 1), Net::default(), Machine::default());
        net.set("p", false);
        assert_eq!(step(&mut m, &c, &net).await, None);
        net.set("p", true);
        assert_eq!(step(&mut m, &c, &net).await, None);
        net.set("p", false);
        assert_eq!(step(&mut m, &c, &net).await, None);
        assert_eq!(step(&mut m, &c, &net).await, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_secondary_that_is_down_too_is_skipped_and_none_up_means_staying() {
        let (c, net, mut m) = (config(1, 1), Net::default(), Machine::default());
        net.set("p", false);
        net.set("s1", false);
        assert_eq!(step(&mut m, &c, &net).await, Some(2));
        assert_eq!(net.probed(), ["p", "s1", "s2"]);
        // Everything down: the client stays where it is.
        net.set("s2", false);
        assert_eq!(step(&mut m, &c, &net).await, None);
        // s2 down, s1 back: moves to s1 (upstream C++ would stay on s2).
        net.set("s1", true);
        assert_eq!(step(&mut m, &c, &net).await, Some(1));
        // The primary back: home.
        net.set("p", true);
        assert_eq!(step(&mut m, &c, &net).await, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn javas_delays_also_hold_the_switch() {
        let c = AutoClusterFailover::builder()
            .primary(info("pulsar://p:6650"))
            .secondary(info("pulsar://s1:6650"))
            .failover_delay(Duration::from_secs(30))
            .switch_back_delay(Duration::from_secs(60))
            .build()
            .unwrap();
        let (net, mut m) = (Net::default(), Machine::default());
        net.set("p", false);
        for _ in 0..6 {
            assert_eq!(step(&mut m, &c, &net).await, None);
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        assert_eq!(
            step(&mut m, &c, &net).await,
            Some(1),
            "30 s after the first failure"
        );
        net.set("p", true);
        for _ in 0..12 {
            assert_eq!(step(&mut m, &c, &net).await, None);
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        assert_eq!(
            step(&mut m, &c, &net).await,
            Some(0),
            "60 s after the first good probe"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        let b = || AutoClusterFailover::builder().primary(info("pulsar://p:6650"));
        assert!(b().build().is_err(), "no secondary");
        let b = || b().secondary(info("pulsar://s:6650"));
        assert!(b().failover_threshold(0).build().is_err());
        assert!(b().switch_back_threshold(0).build().is_err());
        assert!(b().check_interval(Duration::ZERO).build().is_err());
        assert!(b().build().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_manual_switch_to_one_of_its_clusters_is_followed() {
        let (c, net, mut m) = (config(1, 1), Net::default(), Machine::default());
        // The application moved the client to s1: s1 is probed (and the primary, to come
        // back), not the primary alone as if the client were still there.
        m.follow(&c, &info("pulsar://s1:6650"));
        net.set("s1", false);
        net.set("p", false);
        assert_eq!(step(&mut m, &c, &net).await, Some(2), "s1 down: on to s2");
        assert_eq!(net.probed(), ["s1", "p", "s2"]);
        // A cluster the provider does not know: it stays with the one it chose last.
        m.follow(&c, &info("pulsar://elsewhere:6650"));
        assert_eq!(m.current, 2);
    }

    /// A probe that never ends (a name resolution that hangs) is waited for at most the
    /// timeout, and not started again while it runs: one per cluster, never one per check.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_probe_is_never_started_twice() {
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let hang = {
            let started = started.clone();
            Arc::new(move |_info: ServiceInfo| {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(std::future::pending::<bool>())
                    as Pin<Box<dyn Future<Output = bool> + Send>>
            })
        };
        let prober = Prober::new(hang, Duration::from_secs(2));
        let p = info("pulsar://p:6650");
        let t0 = Instant::now();
        for _ in 0..5 {
            assert!(
                !prober.probe(&p).await,
                "a probe that does not answer failed"
            );
        }
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(2),
            "waited once, then not at all"
        );
        // Another cluster has its own probe.
        assert!(!prober.probe(&info("pulsar://s1:6650")).await);
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_finished_is_started_again() {
        let answers = Arc::new(Mutex::new(vec![false, true]));
        let probe = {
            let answers = answers.clone();
            Arc::new(move |_info: ServiceInfo| {
                let up = answers.lock().unwrap().remove(0);
                Box::pin(std::future::ready(up)) as Pin<Box<dyn Future<Output = bool> + Send>>
            })
        };
        let prober = Prober::new(probe, Duration::from_secs(2));
        let p = info("pulsar://p:6650");
        assert!(!prober.probe(&p).await);
        assert!(prober.probe(&p).await);
        assert!(answers.lock().unwrap().is_empty());
    }
}
