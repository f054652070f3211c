//! Closing a consumer, the handle's side: acks refused from the first poll of `close`,
//! every partition task asked to close at once, and nothing changed if the future is dropped
//! before any Close op found room in a task's inbox.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::oneshot;

use crate::consumer::handle::CloseAttempt;
use crate::consumer::op::ConsumerOp;
use crate::consumer::{ended_error, Consumer};
use crate::error::{Error, Result};
use crate::lifecycle::State;

impl Consumer {
    /// Flushes pending acks and closes the consumer on the broker (and its dead-letter and
    /// retry producers). Returns `Ok` once it is closed by the application (closing twice is
    /// fine), or the error that ended it otherwise: e.g. [`Error::ClosedByBroker`] when the
    /// broker closed it for good before or during the close.
    ///
    /// The messages queued and never handed out are dropped once it is closed, and their bytes
    /// leave the client memory limit then (not only when the handle is dropped).
    ///
    /// Dropping the consumer closes it too, in the background.
    pub async fn close(&self) -> Result<()> {
        // Nothing is handed out from now on; undone if this future is dropped before any
        // Close op was queued (then nothing was closed).
        let app_close = AppClose {
            flag: &self.closed_by_app,
            was: self.closed_by_app.swap(true, Ordering::Relaxed),
            queued: AtomicBool::new(false),
        };
        // Acks are refused from now on (Java `closeAsync`: Closing first), before any Close
        // op is queued: one folded in behind the Close would never be sent. Each hold is
        // given back if this future is dropped before its Close op was queued.
        let early: Vec<CloseAttempt> = self.all().into_iter().map(CloseAttempt::begin).collect();
        if let Some(d) = &self.discovery {
            // No topic joins or leaves from now on.
            d.stop().await;
        }
        let mut result = Ok(());
        let attempts: Vec<CloseAttempt> = self.all().into_iter().map(CloseAttempt::begin).collect();
        drop(early);
        let queued = &app_close.queued;
        // Every task at once (a multi-topic consumer has many), like upstream's closeAsync.
        let closes = attempts.into_iter().map(|attempt| async move {
            let p = attempt.part().clone();
            let (tx, rx) = oneshot::channel();
            // Dropped while waiting for room, nothing was sent (see `send_control`).
            let sent = p.send_control(ConsumerOp::Close(tx)).await;
            attempt.queued();
            queued.store(true, Ordering::Relaxed);
            let answer = match sent {
                Ok(()) => rx.await.unwrap_or(Err(Error::Closed)),
                Err(_) => Err(Error::Closed),
            };
            match answer {
                // The task is gone: it ended before; its state says how.
                Err(Error::Closed) => match p.state.get() {
                    State::Closed => Ok(()),
                    other => Err(ended_error(other, &p.base)),
                },
                r => r,
            }
        });
        for r in futures::future::join_all(closes).await {
            if result.is_ok() {
                result = r;
            }
        }
        app_close.done();
        // Nothing is handed out from now on: what is queued goes, and its bytes with it
        // (upstream `ConsumerImpl.closeConsumerTasks` clears the incoming queue).
        self.clear_queue();
        let sinks: Vec<_> = self
            .lock_groups()
            .iter()
            .filter_map(|g| g.sink.clone())
            .collect();
        for sink in sinks {
            sink.close().await;
        }
        result
    }
}

impl Consumer {
    /// Drops what is queued for the application (see [`crate::consumer::queue::Inbound::clear`]).
    pub(crate) fn clear_queue(&self) {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

/// `Consumer::close`'s mark on `closed_by_app`, taken back if the close future is dropped
/// before any Close op was queued (the consumer lives on, and goes on handing out messages).
struct AppClose<'a> {
    flag: &'a AtomicBool,
    /// The mark before (an earlier close, or an unsubscribe).
    was: bool,
    /// A Close op was queued: the consumer closes.
    queued: AtomicBool,
}

impl AppClose<'_> {
    /// The close ran to its end: the mark stays.
    fn done(&self) {
        self.queued.store(true, Ordering::Relaxed);
    }
}

impl Drop for AppClose<'_> {
    fn drop(&mut self) {
        if !self.was && !self.queued.load(Ordering::Relaxed) {
            self.flag.store(false, Ordering::Relaxed);
        }
    }
}
