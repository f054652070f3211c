//! Waiting for a table view's task: until it has read far enough (a refresh), or until it
//! has ended (a close). The task wakes waiters only while some wait: reading a message costs
//! an atomic load otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::position::Positions;
use super::table::Shared;
use crate::error::{Error, Result};

/// Counts one waiter from its creation to its drop (a wait cancelled too).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<V> Shared<V> {
    /// The task ended: `Ok` when closed by the application, else why. Wakes every waiter.
    pub(crate) fn finish(&self, end: Result<()>) {
        let _ = self.end.set(end);
        self.progress.notify_waiters();
    }

    /// How the task ended, if it has.
    pub(crate) fn ended(&self) -> Option<Result<()>> {
        self.end.get().cloned()
    }

    /// Waits until `done` holds for the positions read; fails with the error that ended the
    /// task ([`Error::Closed`] after a close by the application) if it ends first, or with
    /// [`Error::Timeout`] once the task read nothing for `stall` (`None`: no bound). Cancel
    /// safe.
    pub(crate) async fn wait_until(
        &self,
        done: impl Fn(&Positions) -> bool,
        stall: Option<Duration>,
    ) -> Result<()> {
        // Counted before the positions are read under the table lock, and the task reads the
        // count under that lock after it moved a position: either this sees the position, or
        // the task sees this waiter and wakes it (`notified` is enabled before the check).
        let _waiting = Waiting::new(&self.waiting);
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.read().positions) {
                return Ok(());
            }
            if let Some(end) = self.ended() {
                return Err(end.err().unwrap_or(Error::Closed));
            }
            // The task wakes this for each message it reads (and at its end): the bound is
            // on a stretch without one, however long the whole read takes.
            match stall {
                Some(after) => {
                    if tokio::time::timeout(after, notified).await.is_err() {
                        return Err(Error::Timeout {
                            operation: "table view read up to the last message id",
                            after,
                        });
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Waits until the task has ended; how it ended. Cancel safe.
    pub(crate) async fn wait_end(&self) -> Result<()> {
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(end) = self.ended() {
                return end;
            }
            notified.await;
        }
    }
}
