//! What a batching producer's built entries hold of the client memory limit besides their
//! messages: the producer name and schema version each frame carries (issue #31 §2).
//!
//! A message of a batching producer is charged its payload and own metadata when it is sent
//! (an open batch holds exactly that); the frame it ends up in is only known when the batch is
//! built: one name for a batch of many, one for a batch of one or a message too big to batch.
//! So each entry is charged the name when it is built, before it is queued and sent. When the
//! limit has no room for that, the task holds the entry (and those built after it, in order)
//! and builds nothing more until the memory is had: the sends it takes meanwhile wait unbuilt
//! (deferred, holding their payloads only, no copy of the name), and it keeps reading
//! receipts, which give memory back, and its other ops (a flush, a close). So what the name
//! copies hold stays within the limit.
//! With nothing of the producer pending (nothing of its own will give memory back, and the
//! sends queued behind hold some of it) an entry goes uncharged rather than wait, also when
//! the last pending entry leaves while the task waits: at most one such entry at a time,
//! never a deadlock.
//!
//! Java's `ProducerImpl.canEnqueueRequest` reserves the payload size only; the name is memory
//! each pending frame holds (a broker-chosen one up to `MAX_PRODUCER_NAME`, an application's
//! of any length), uncounted there.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use super::limits::Reservation;
use super::pending::{Completion, InFlight, Outgoing};

type Wait = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// See the module docs.
pub(crate) struct FrameCharge {
    /// What each built entry is charged (0: nothing; an unbatched producer's messages are
    /// charged the name when sent, each being a frame of its own).
    bytes: u32,
    memory: Arc<Semaphore>,
    /// The charge of the first entry held, being waited for.
    wait: Option<Wait>,
    /// The charge of the first entry held, had.
    paid: Option<Reservation>,
    /// Sends taken while an entry waits for its charge, with their sequence ids, unbuilt.
    deferred: VecDeque<(Outgoing, u64, Completion)>,
}

impl std::fmt::Debug for FrameCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCharge")
            .field("bytes", &self.bytes)
            .field("waiting", &self.wait.is_some())
            .field("paid", &self.paid)
            .field("deferred", &self.deferred.len())
            .finish()
    }
}

impl FrameCharge {
    /// Charges each built entry `bytes` (at most `limit`, the whole memory limit, so it can
    /// always be had eventually) of `memory`.
    pub(crate) fn new(bytes: usize, memory: Arc<Semaphore>, limit: usize) -> Self {
        FrameCharge {
            bytes: u32::try_from(bytes.min(limit)).unwrap_or(u32::MAX),
            memory,
            wait: None,
            paid: None,
            deferred: VecDeque::new(),
        }
    }

    /// Whether a send must wait unbuilt ([`defer`](Self::defer)): an entry waits for its
    /// charge, or sends before it still wait.
    pub(crate) fn defers(&self) -> bool {
        self.wait.is_some() || !self.deferred.is_empty()
    }

    /// Keeps a send unbuilt until the entries before it are charged.
    pub(crate) fn defer(&mut self, msg: Outgoing, seq: u64, completion: Completion) {
        self.deferred.push_back((msg, seq, completion));
    }

    /// The next send to build, once nothing waits for its charge.
    pub(crate) fn next_deferred(&mut self) -> Option<(Outgoing, u64, Completion)> {
        if self.wait.is_some() {
            return None;
        }
        self.deferred.pop_front()
    }

    /// The sequence ids of the first and last deferred sends.
    pub(crate) fn deferred_seqs(&self) -> Option<(u64, u64)> {
        Some((self.deferred.front()?.1, self.deferred.back()?.1))
    }

    /// Whether the task waits for an entry's charge (it takes no sends meanwhile).
    pub(crate) fn waiting(&self) -> bool {
        self.wait.is_some()
    }

    /// Charges the entries of `out` from the front as far as the limit has room, and says how
    /// many are charged (to queue and send now); the rest wait, in order, for
    /// [`wait`](Self::wait). `nothing_pending`: nothing of the producer is pending, so the
    /// first entry goes uncharged rather than wait (see the module docs).
    pub(crate) fn charge(&mut self, out: &mut [InFlight], nothing_pending: bool) -> usize {
        if self.bytes == 0 {
            return out.len();
        }
        if self.wait.is_some() {
            return 0;
        }
        for (n, entry) in out.iter_mut().enumerate() {
            if let Some(paid) = self.paid.take() {
                entry.reserved.merge(paid);
                continue;
            }
            match self.memory.try_acquire_many(self.bytes) {
                Ok(permit) => entry.reserved.merge(Reservation::of(permit, None)),
                Err(TryAcquireError::NoPermits) if !(n == 0 && nothing_pending) => {
                    let wait = self.memory.clone().acquire_many_owned(self.bytes);
                    self.wait = Some(Box::pin(wait));
                    return n;
                }
                // Nothing of ours to wait for, or the limit is gone (the client closed).
                Err(_) => {}
            }
        }
        out.len()
    }

    /// Waits for the charge of the first entry held (pending for ever when none is): the
    /// next [`charge`](Self::charge) gives it to that entry.
    pub(crate) async fn wait(&mut self) {
        let Some(wait) = self.wait.as_mut() else {
            return std::future::pending().await;
        };
        let permit = wait.await;
        self.wait = None;
        if let Ok(permit) = permit {
            let n = permit.num_permits();
            permit.forget();
            self.paid = Some(Reservation {
                memory: u32::try_from(n).unwrap_or(u32::MAX),
                slots: 0,
            });
        }
    }

    /// Stops waiting (nothing of the producer is pending any more: the next
    /// [`charge`](Self::charge) lets the first entry go uncharged).
    pub(crate) fn stop_waiting(&mut self) {
        self.wait = None;
    }

    /// The entries held are failed: stops waiting, gives back a charge had for them, and
    /// hands over the deferred sends (to fail too).
    pub(crate) fn reset(&mut self) -> (Reservation, VecDeque<(Outgoing, u64, Completion)>) {
        self.wait = None;
        let paid = self.paid.take().unwrap_or_default();
        (paid, std::mem::take(&mut self.deferred))
    }
}
