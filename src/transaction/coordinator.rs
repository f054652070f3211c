//! The client's side of the transaction coordinators (upstream
//! `TransactionCoordinatorClientImpl` and `TransactionMetaStoreHandler`): discovery, one
//! connection per coordinator, and the requests to them.
//!
//! Discovery as upstream's `TransactionCoordinatorClientImpl.startAsync`: the partition count
//! of `persistent://pulsar/system/transaction_coordinator_assign` is the number of
//! coordinators; coordinator `i` is reached through the owner of partition `i` (a
//! non-partitioned topic: one coordinator, id 0, through the topic itself), and each
//! connection is announced with TC_CLIENT_CONNECT_REQUEST (`TransactionMetaStoreHandler
//! .connectionOpened`). A new transaction goes to the next coordinator in turn
//! (`nextHandler`); every later request to the one its id names (`txnID.getMostSigBits()`).
//!
//! Requests are retried within the operation timeout while the coordinator cannot be
//! reached (a lost connection: reconnect and send again, as upstream re-sends its pending
//! requests when its handler reconnects) and when it answers `TransactionCoordinatorNotFound`
//! (upstream `checkIfNeedRetryByError`: reconnect, retry with backoff). Any other answer is
//! final. Discovery that fails is not kept: the next transaction tries again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::connection::Connection;
use crate::core::CoreRef;
use crate::error::{Error, Result, ServerError};
use crate::proto::BaseCommand;
use crate::retry::{retry, AtDeadline, Schedule, Verdict};
use crate::topic::TopicName;
use crate::transaction::types::TransactionError;

/// Upstream `TopicName.TRANSACTION_COORDINATOR_ASSIGN`.
pub(crate) const TC_ASSIGN_TOPIC: &str =
    "persistent://pulsar/system/transaction_coordinator_assign";

/// One coordinator: its id, the topic whose owner serves it, the connection announced to it.
#[derive(Debug)]
struct Coordinator {
    id: u64,
    topic: TopicName,
    conn: std::sync::Mutex<Option<Connection>>,
}

impl Coordinator {
    fn live(&self) -> Option<Connection> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    fn forget(&self) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The coordinators of one client (`ClientBuilder::enable_transaction`).
#[derive(Debug)]
pub(crate) struct Coordinators {
    core: CoreRef,
    found: tokio::sync::Mutex<Option<Arc<[Coordinator]>>>,
    next: AtomicU64,
}

/// The error field of a coordinator's answer, as a broker error.
fn answer_error(cmd: &BaseCommand) -> Option<Error> {
    let (code, message) = if let Some(r) = &cmd.new_txn_response {
        (r.error, r.message.as_deref())
    } else if let Some(r) = &cmd.add_partition_to_txn_response {
        (r.error, r.message.as_deref())
    } else if let Some(r) = &cmd.add_subscription_to_txn_response {
        (r.error, r.message.as_deref())
    } else if let Some(r) = &cmd.end_txn_response {
        (r.error, r.message.as_deref())
    } else if let Some(r) = &cmd.tc_client_connect_response {
        (r.error, r.message.as_deref())
    } else {
        (None, None)
    };
    code.map(|code| Error::Broker {
        code: ServerError::from_code(code),
        message: message.unwrap_or_default().to_owned(),
    })
}

/// What is worth another attempt: a coordinator not (yet) loaded where it was looked for
/// (`TransactionCoordinatorNotFound`), or no connection. A timeout already took the whole
/// operation timeout; any other answer is the coordinator's decision.
fn retriable(e: &Error) -> Verdict {
    match e {
        Error::Broker {
            code: ServerError::TransactionCoordinatorNotFound,
            ..
        }
        | Error::ConnectionLost(_)
        | Error::Connect { .. } => Verdict::Retry,
        _ => Verdict::Fail,
    }
}

fn no_coordinator(e: Error) -> Error {
    Error::Transaction(TransactionError::NoCoordinator {
        source: Arc::new(e),
    })
}

impl Coordinators {
    pub(crate) fn new(core: CoreRef) -> Self {
        Coordinators {
            core,
            found: tokio::sync::Mutex::new(None),
            next: AtomicU64::new(0),
        }
    }

    /// The coordinators, discovered and connected on first use, all within one operation
    /// timeout (the metadata lookup and the connections share it: a broker that ignores
    /// TC_CLIENT_CONNECT, or has no `pulsar/system` namespace, fails it after one).
    async fn coordinators(&self) -> Result<Arc<[Coordinator]>> {
        let mut found = self.found.lock().await;
        if let Some(c) = &*found {
            return Ok(c.clone());
        }
        let budget = self.core.operation_timeout();
        let all = tokio::time::timeout(budget, self.discover())
            .await
            .map_err(|_| {
                no_coordinator(Error::Timeout {
                    operation: "transaction coordinator discovery",
                    after: budget,
                })
            })??;
        *found = Some(all.clone());
        Ok(all)
    }

    /// [`coordinators`](Self::coordinators)' discovery itself.
    async fn discover(&self) -> Result<Arc<[Coordinator]>> {
        let assign = TopicName::new(TC_ASSIGN_TOPIC)?;
        let n = self
            .core
            .partitioned_topic_metadata(TC_ASSIGN_TOPIC)
            .await
            .map_err(no_coordinator)?;
        let all: Arc<[Coordinator]> = if n > 0 {
            (0..n)
                .map(|i| Coordinator {
                    id: u64::from(i),
                    topic: assign.partition(i),
                    conn: Default::default(),
                })
                .collect()
        } else {
            Arc::new([Coordinator {
                id: 0,
                topic: assign,
                conn: Default::default(),
            }])
        };
        // Upstream waits for every coordinator's connection (`FutureUtil.waitForAll`); a
        // connection that failed is retried (`ConnectionHandler.reconnectLater`) unless the
        // broker refused it (NotAllowed: transactions are disabled there) or did not answer.
        let deadline = crate::util::deadline_after(self.core.operation_timeout());
        let connected = futures::future::join_all(all.iter().map(|c| async move {
            retry(
                &mut self.core.backoff(),
                Schedule::until(deadline, AtDeadline::LastAttemptAt),
                || self.connect(c),
                retriable,
            )
            .await
        }))
        .await;
        for r in connected {
            r.map_err(no_coordinator)?;
        }
        Ok(all)
    }

    /// Connects to coordinator `c`: its topic's broker, then TC_CLIENT_CONNECT_REQUEST.
    async fn connect(&self, c: &Coordinator) -> Result<Connection> {
        // A cluster switch closes this connection like every other; the next request finds
        // it closed and connects again (to the new cluster), so the generation is not kept.
        let (conn, _generation) = self.core.connection_for(&c.topic).await?;
        let rid = conn.new_request_id();
        let answer = conn
            .request(
                rid,
                crate::commands::tc_client_connect(c.id, rid),
                "transaction coordinator connect",
            )
            .await?;
        if let Some(e) = answer_error(&answer) {
            return Err(e);
        }
        *c.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// The coordinator a new transaction goes to (round robin, upstream `nextHandler`).
    pub(crate) async fn next_coordinator(&self) -> Result<u64> {
        let all = self.coordinators().await?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % all.len() as u64;
        Ok(all[i as usize].id)
    }

    /// Sends a request to coordinator `tc_id` and returns its answer, retried as the module
    /// docs say.
    pub(crate) async fn request(
        &self,
        tc_id: u64,
        build: impl Fn(u64) -> BaseCommand,
        operation: &'static str,
    ) -> Result<Box<BaseCommand>> {
        let all = self.coordinators().await?;
        // Upstream `MetaStoreHandlerNotExistsException`: an id no coordinator has.
        let Some(c) = all.iter().find(|c| c.id == tc_id) else {
            return Err(Error::Broker {
                code: ServerError::TransactionCoordinatorNotFound,
                message: format!("no transaction coordinator {tc_id}"),
            });
        };
        let deadline = crate::util::deadline_after(self.core.operation_timeout());
        retry(
            &mut self.core.backoff(),
            Schedule::until(deadline, AtDeadline::LastAttemptAt),
            || async {
                let conn = match c.live() {
                    Some(conn) => conn,
                    None => self.connect(c).await?,
                };
                let rid = conn.new_request_id();
                let answer = conn.request(rid, build(rid), operation).await?;
                match answer_error(&answer) {
                    Some(e) => Err(e),
                    None => Ok(answer),
                }
            },
            |e| {
                let verdict = retriable(e);
                if verdict == Verdict::Retry {
                    c.forget();
                }
                verdict
            },
        )
        .await
    }
}
