//! The command log: every command the mock broker decodes, in arrival order, for assertions.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::wire;
use super::ConnectionId;

/// One command the mock broker received, as decoded from the wire.
///
/// Commands are recorded before the broker acts on them, so a test that observes a response
/// always finds the request in [`MockBroker::received`](super::MockBroker::received).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The connection the command arrived on.
    pub connection: ConnectionId,
    /// The decoded command, exactly as the client sent it (including fields the mock ignores,
    /// such as the client's `FeatureFlags` in CONNECT).
    pub command: wire::BaseCommand,
    /// For payload frames (SEND): the message metadata and the payload bytes.
    pub payload: Option<(wire::MessageMetadata, Bytes)>,
}

impl Received {
    /// The command's type, or `None` for a type code this crate's protocol definition does not
    /// know (such commands are recorded and otherwise ignored).
    pub fn command_type(&self) -> Option<wire::base_command::Type> {
        wire::base_command::Type::try_from(self.command.r#type).ok()
    }

    /// Whether the command has type `ty`.
    pub fn is(&self, ty: wire::base_command::Type) -> bool {
        self.command.r#type == ty as i32
    }
}

/// The append-only log, with a change signal so waiters never poll.
#[derive(Debug)]
pub(crate) struct CommandLog {
    entries: Mutex<Vec<Received>>,
    /// Carries the number of entries; bumped on every append.
    len_tx: watch::Sender<usize>,
}

impl CommandLog {
    pub(crate) fn new() -> Self {
        let (len_tx, _) = watch::channel(0);
        CommandLog {
            entries: Mutex::new(Vec::new()),
            len_tx,
        }
    }

    /// Appends one command and wakes every waiter.
    pub(crate) fn record(&self, received: Received) {
        let len = {
            let mut entries = super::lock(&self.entries);
            entries.push(received);
            entries.len()
        };
        self.len_tx.send_replace(len);
    }

    /// A snapshot of the whole log.
    pub(crate) fn all(&self) -> Vec<Received> {
        super::lock(&self.entries).clone()
    }

    /// A snapshot of the entries matching `filter`.
    pub(crate) fn filtered(&self, filter: impl Fn(&Received) -> bool) -> Vec<Received> {
        super::lock(&self.entries)
            .iter()
            .filter(|r| filter(r))
            .cloned()
            .collect()
    }

    /// Waits (without polling) until `check` returns `Some` on the log, or `timeout` elapses.
    pub(crate) async fn wait_until<T>(
        &self,
        timeout: Duration,
        check: impl Fn(&[Received]) -> Option<T>,
    ) -> Option<T> {
        // Subscribing before the first check means no append can slip between the check and
        // the wait: any append after `subscribe` marks the receiver changed.
        let mut rx = self.len_tx.subscribe();
        let wait = async {
            loop {
                let found = check(&super::lock(&self.entries));
                if found.is_some() {
                    return found;
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }
}
