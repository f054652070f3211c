//! The one retry driver: attempt, classify the error, wait the [`BackoffPolicy`]'s delay, give
//! up at the deadline.
//!
//! Two forms over one decision ([`Schedule::wait`], a pure function of the proposed delay and
//! the time):
//! - [`retry`], for code that may await (a create, a lookup, a first listing): it runs the
//!   attempts itself.
//! - [`RetryTimer`], for event loops, which never await a retry: a failure gives the instant
//!   of the next attempt, which the loop sleeps on in its own `select!`; a success resets it.
//!
//! Classifying stays with the caller (which errors are retriable differs between a first
//! create, a reconnect and a lookup); the driver only decides *when*.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff_policy::{Backoff, BackoffPolicy};
use crate::error::{Error, Result};

/// What to do after a failed attempt (the caller's classification of its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Retry after the backoff's next delay.
    Retry,
    /// Retry after this delay instead of the backoff's (which does not advance).
    RetryAfter(Duration),
    /// Not retriable: return the error.
    Fail,
}

/// What the deadline means for the last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtDeadline {
    /// The delay is cut so that one last attempt starts at the deadline (Java `Backoff.next`
    /// with a mandatory stop: "the last attempt is made at the mandatory stop time"); an
    /// attempt that fails at or after the deadline is the last.
    LastAttemptAt,
    /// No attempt starts once the next delay would reach the deadline: the caller hears of the
    /// failure before its time is up rather than after one more full attempt (a create whose
    /// attempt alone may take the operation timeout).
    NoAttemptPast,
}

/// When attempts happen: the first one, and the deadline after which none starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// Wait the backoff's delay before the first attempt too (a reconnect).
    pub wait_first: bool,
    /// `None`: retry until an attempt succeeds or fails for good.
    pub deadline: Option<(Instant, AtDeadline)>,
}

impl Schedule {
    /// Attempt at once, then retry forever.
    #[cfg(test)]
    pub(crate) fn forever() -> Schedule {
        Schedule {
            wait_first: false,
            deadline: None,
        }
    }

    /// Attempt at once, then retry until `deadline`.
    pub(crate) fn until(deadline: Instant, at: AtDeadline) -> Schedule {
        Schedule {
            wait_first: false,
            deadline: Some((deadline, at)),
        }
    }

    /// How long to wait after a failed attempt at `now` when the next delay would be
    /// `proposed`; `None`: give up (the deadline is reached). Pure.
    pub(crate) fn wait(&self, proposed: Duration, now: Instant) -> Option<Duration> {
        let Some((deadline, at)) = self.deadline else {
            return Some(proposed);
        };
        if now >= deadline {
            return None;
        }
        let left = deadline - now;
        match at {
            AtDeadline::LastAttemptAt => Some(proposed.min(left)),
            AtDeadline::NoAttemptPast => (proposed < left).then_some(proposed),
        }
    }
}

/// Runs `attempt` until it succeeds, `classify` says [`Verdict::Fail`], or `schedule`'s
/// deadline passes (then the last error is returned). Delays come from `backoff`, which the
/// caller keeps (a reconnect carries its backoff across losses).
pub(crate) async fn retry<T, A, F, C>(
    backoff: &mut Backoff,
    schedule: Schedule,
    mut attempt: A,
    mut classify: C,
) -> Result<T>
where
    A: FnMut() -> F,
    F: Future<Output = Result<T>>,
    C: FnMut(&Error) -> Verdict,
{
    if schedule.wait_first {
        tokio::time::sleep(backoff.next_delay()).await;
    }
    loop {
        let e = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let proposed = match classify(&e) {
            Verdict::Fail => return Err(e),
            Verdict::Retry => backoff.next_delay(),
            Verdict::RetryAfter(d) => d,
        };
        match schedule.wait(proposed, Instant::now()) {
            Some(d) => tokio::time::sleep(d).await,
            None => return Err(e),
        }
    }
}

/// The event-loop form of the driver: the instant of the next attempt after each failure,
/// with the delays of one backoff sequence that starts over after a success.
#[derive(Debug)]
pub(crate) struct RetryTimer {
    policy: BackoffPolicy,
    backoff: Option<Backoff>,
}

impl RetryTimer {
    pub(crate) fn new(policy: BackoffPolicy) -> Self {
        RetryTimer {
            policy,
            backoff: None,
        }
    }

    /// The next delay of the sequence (the first after a reset is the policy's initial one).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let policy = &self.policy;
        self.backoff
            .get_or_insert_with(|| Backoff::new(policy))
            .next_delay()
    }

    /// An attempt failed at `now`: when to try again.
    pub(crate) fn failed(&mut self, now: Instant) -> Instant {
        let delay = self.next_delay();
        crate::util::later(now, delay)
    }

    /// An attempt worked: the next failure waits the initial delay again.
    pub(crate) fn reset(&mut self) {
        self.backoff = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    fn exact() -> BackoffPolicy {
        BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            multiplier: 2.0,
            jitter: 0.0,
        }
    }

    fn lost() -> Error {
        Error::ConnectionLost("test".into())
    }

    #[test]
    fn the_deadline_cuts_or_stops_the_wait() {
        let now = Instant::now();
        let d = Duration::from_millis;
        assert_eq!(Schedule::forever().wait(d(700), now), Some(d(700)));
        let clamp = Schedule::until(now + d(500), AtDeadline::LastAttemptAt);
        assert_eq!(clamp.wait(d(200), now), Some(d(200)));
        assert_eq!(
            clamp.wait(d(800), now),
            Some(d(500)),
            "last attempt at the deadline"
        );
        assert_eq!(
            clamp.wait(d(1), now + d(500)),
            None,
            "failed at the deadline: done"
        );
        let stop = Schedule::until(now + d(500), AtDeadline::NoAttemptPast);
        assert_eq!(stop.wait(d(200), now), Some(d(200)));
        assert_eq!(stop.wait(d(500), now), None, "would start at the deadline");
        assert_eq!(stop.wait(d(800), now), None);
    }

    /// Attempts at 0, 100, 300, 700 ms (delays 100, 200, 400), the next one cut to the
    /// deadline at 1 s; then the last error comes back.
    #[tokio::test(start_paused = true)]
    async fn retries_with_growing_delays_until_the_deadline() {
        let start = Instant::now();
        let at = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut backoff = Backoff::new(&exact());
        let schedule = Schedule::until(start + Duration::from_secs(1), AtDeadline::LastAttemptAt);
        let r: Result<()> = retry(
            &mut backoff,
            schedule,
            || {
                at.lock().unwrap().push(start.elapsed().as_millis());
                async { Err(lost()) }
            },
            |_| Verdict::Retry,
        )
        .await;
        assert!(matches!(r, Err(Error::ConnectionLost(_))), "{r:?}");
        assert_eq!(*at.lock().unwrap(), [0, 100, 300, 700, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_past_the_deadline_gives_up_before_it() {
        let start = Instant::now();
        let n = AtomicU32::new(0);
        let mut backoff = Backoff::new(&exact());
        let schedule = Schedule::until(
            start + Duration::from_millis(500),
            AtDeadline::NoAttemptPast,
        );
        let r: Result<()> = retry(
            &mut backoff,
            schedule,
            || {
                n.fetch_add(1, Ordering::Relaxed);
                async { Err(lost()) }
            },
            |_| Verdict::Retry,
        )
        .await;
        assert!(r.is_err());
        // 0, 100, 300; the next (at 700) would pass 500.
        assert_eq!(n.load(Ordering::Relaxed), 3);
        assert_eq!(start.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_non_retriable_error_returns_at_once_and_success_ends_it() {
        let mut backoff = Backoff::new(&exact());
        let n = AtomicU32::new(0);
        let r: Result<()> = retry(
            &mut backoff,
            Schedule::forever(),
            || {
                n.fetch_add(1, Ordering::Relaxed);
                async { Err(Error::Closed) }
            },
            |e| match e {
                Error::Closed => Verdict::Fail,
                _ => Verdict::Retry,
            },
        )
        .await;
        assert!(matches!(r, Err(Error::Closed)));
        assert_eq!(n.load(Ordering::Relaxed), 1);

        let start = Instant::now();
        let n = AtomicU32::new(0);
        let r = retry(
            &mut backoff,
            Schedule {
                wait_first: true,
                deadline: None,
            },
            || {
                let k = n.fetch_add(1, Ordering::Relaxed);
                async move {
                    if k < 2 {
                        Err(lost())
                    } else {
                        Ok(k)
                    }
                }
            },
            |_| Verdict::RetryAfter(Duration::from_millis(10)),
        )
        .await;
        assert_eq!(r.unwrap(), 2);
        // The failed-for-good run took no delay: 100 ms before the first attempt, then two
        // fixed 10 ms delays that do not advance the backoff.
        assert_eq!(start.elapsed(), Duration::from_millis(120));
        assert_eq!(backoff.next_delay(), Duration::from_millis(200));
    }

    #[test]
    fn the_timer_grows_and_starts_over_after_a_success() {
        let now = Instant::now();
        let mut t = RetryTimer::new(exact());
        let ms = |i: Instant| (i - now).as_millis();
        assert_eq!(ms(t.failed(now)), 100);
        assert_eq!(ms(t.failed(now)), 200);
        assert_eq!(ms(t.failed(now)), 400);
        t.reset();
        assert_eq!(ms(t.failed(now)), 100);
    }
}
