//! Small async helpers shared by the connection, producer and consumer tasks.

use tokio::sync::mpsc;
use tokio::time::Instant;

/// Sleeps until `deadline`, or forever without one (a disabled `select!` timer).
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => futures::future::pending().await,
    }
}

/// Receives from a bounded channel, or waits forever without one (while reconnecting).
pub(crate) async fn recv_opt<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => futures::future::pending().await,
    }
}

/// Receives from an unbounded channel, or waits forever without one (while reconnecting).
pub(crate) async fn recv_opt_unbounded<T>(
    rx: &mut Option<mpsc::UnboundedReceiver<T>>,
) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => futures::future::pending().await,
    }
}
