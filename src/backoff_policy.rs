//! Reconnect backoff: exponential with jitter, 100 ms → 60 s by default like the upstream
//! clients, built on the `backoff` crate.

use std::time::Duration;

use backoff::backoff::Backoff as _;
use backoff::ExponentialBackoff;

/// Backoff settings for reconnects and create retries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffPolicy {
    /// The first delay. Default 100 ms.
    pub initial: Duration,
    /// The largest delay. Default 60 s.
    pub max: Duration,
    /// Growth factor per attempt. Default 2.
    pub multiplier: f64,
    /// Random spread around each delay, 0 to 1 (0.1 = ±10 %). Default 0.1.
    pub jitter: f64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.1,
        }
    }
}

impl BackoffPolicy {
    /// Checks the policy: a positive `initial`, `max >= initial`, a finite `multiplier` of at
    /// least 1 and a `jitter` from 0 to 1.
    pub(crate) fn validate(&self) -> crate::error::Result<()> {
        let bad = |why: &str| {
            Err(crate::error::Error::InvalidConfig(format!(
                "backoff: {why}"
            )))
        };
        if self.initial.is_zero() || self.max < self.initial {
            return bad("initial must be > 0 and max >= initial");
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return bad("multiplier must be a finite number >= 1");
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return bad("jitter must be between 0 and 1");
        }
        Ok(())
    }
}

/// One sequence of attempts.
#[derive(Debug)]
pub(crate) struct Backoff {
    inner: ExponentialBackoff,
}

impl Backoff {
    pub(crate) fn new(policy: &BackoffPolicy) -> Self {
        let inner = ExponentialBackoff {
            current_interval: policy.initial,
            initial_interval: policy.initial,
            randomization_factor: policy.jitter.clamp(0.0, 1.0),
            multiplier: policy.multiplier.max(1.0),
            max_interval: policy.max,
            max_elapsed_time: None,
            ..ExponentialBackoff::default()
        };
        Backoff { inner }
    }

    /// The delay before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.inner.next_backoff().unwrap_or(self.inner.max_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_and_caps_at_max() {
        let policy = BackoffPolicy::default();
        let mut b = Backoff::new(&policy);
        let mut expected = 0.1f64;
        for _ in 0..12 {
            let d = b.next_delay().as_secs_f64();
            let nominal = expected.min(60.0);
            assert!(
                d >= nominal * 0.9 - 1e-9 && d <= nominal * 1.1 + 1e-9,
                "{d} vs {nominal}"
            );
            expected *= 2.0;
        }
        for _ in 0..5 {
            let d = b.next_delay();
            assert!(d <= Duration::from_secs(66), "{d:?}");
            assert!(d >= Duration::from_secs(54), "{d:?}");
        }
    }

    #[test]
    fn zero_jitter_is_exact() {
        let mut b = Backoff::new(&BackoffPolicy {
            jitter: 0.0,
            ..Default::default()
        });
        let delays: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800]);
    }
}
