//! Small async helpers shared by the connection, producer and consumer tasks.

use tokio::time::Instant;

pub(crate) mod lazy_queue;

/// Sleeps until `deadline`, or forever without one (a disabled `select!` timer).
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => futures::future::pending().await,
    }
}

/// Sets an entity task's one timer to `deadline`: made at the first deadline, moved
/// (`reset`) only when the deadline changes, dropped when nothing is due. A `Sleep` made
/// afresh on every pass of a task's loop was registered with the runtime's timer and taken out
/// again each time, and sat in the task's future (~110 bytes) even while nothing was due
/// (issue #39).
pub(crate) fn set_timer(
    timer: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    deadline: Option<Instant>,
) {
    match (deadline, timer.as_mut()) {
        (None, _) => *timer = None,
        (Some(d), Some(t)) if t.deadline() == d => {}
        (Some(d), Some(t)) => t.as_mut().reset(d),
        (Some(d), None) => *timer = Some(Box::pin(tokio::time::sleep_until(d))),
    }
}

/// About thirty years: a deadline this far out never comes (tokio's own "far future").
const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);

/// `now + d`, without the panic of `Instant + Duration::MAX`: a duration too large to add
/// gives a deadline that never comes.
pub(crate) fn deadline_after(d: std::time::Duration) -> Instant {
    later(Instant::now(), d)
}

/// `at + d`, saturating at a far-future instant instead of panicking (configured timeouts and
/// delays may be `Duration::MAX`).
pub(crate) fn later(at: Instant, d: std::time::Duration) -> Instant {
    at.checked_add(d.min(FAR_FUTURE))
        .unwrap_or_else(|| at + FAR_FUTURE)
}
