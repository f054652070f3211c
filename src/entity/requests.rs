//! Requests an entity task has in flight (seek, unsubscribe, close ...), kept as futures the
//! task's loop polls, so the task keeps handling broker events while they run.

use std::future::Future;
use std::pin::Pin;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::connection::{Connection, Response};
use crate::proto::BaseCommand;

type InFlight<T> = Pin<Box<dyn Future<Output = (T, Response)> + Send>>;

/// Requests in flight, each tagged with what to do with its answer. The set is allocated at
/// the first request: an empty `FuturesUnordered` allocates two shared blocks, and most
/// entities never send one (issue #39: every idle producer and consumer held them).
pub(crate) struct Requests<T> {
    inflight: Option<FuturesUnordered<InFlight<T>>>,
}

impl<T: Send + 'static> Requests<T> {
    pub(crate) fn new() -> Self {
        Requests { inflight: None }
    }

    /// Sends `build(request_id)` on `conn`; its answer comes back from [`Requests::next`] with
    /// `tag`.
    pub(crate) fn send(
        &mut self,
        conn: &Connection,
        tag: T,
        build: impl FnOnce(u64) -> BaseCommand,
        operation: &'static str,
    ) {
        let conn = conn.clone();
        let request_id = conn.new_request_id();
        let cmd = build(request_id);
        self.set().push(Box::pin(async move {
            let r = conn.request(request_id, cmd, operation).await;
            (tag, r)
        }));
    }

    /// Tracks any future whose answer belongs to this task.
    pub(crate) fn push(&mut self, tag: T, fut: impl Future<Output = Response> + Send + 'static) {
        self.set().push(Box::pin(async move { (tag, fut.await) }));
    }

    fn set(&mut self) -> &mut FuturesUnordered<InFlight<T>> {
        self.inflight.get_or_insert_with(FuturesUnordered::new)
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.inflight.as_ref().is_none_or(|f| f.is_empty())
    }

    /// The next answer; waits forever while nothing is in flight.
    pub(crate) async fn next(&mut self) -> (T, Response) {
        match self.inflight.as_mut() {
            Some(set) => match set.next().await {
                Some(done) => done,
                None => futures::future::pending().await,
            },
            None => futures::future::pending().await,
        }
    }
}
