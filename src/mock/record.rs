//! The command log: every command the mock broker decodes, in arrival order, for assertions.
//!
//! Entries are kept protobuf-encoded and decoded when a test asks for them. A decoded
//! `BaseCommand` holds every command type inline (about 6 KB whatever it carries); kept as
//! such, the log of a run creating 50,000 producers (three commands each) held about 1 GB and
//! spent a quarter of the broker's time copying it. Encoded, a create's commands take tens of
//! bytes each.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
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

/// One logged command, encoded.
#[derive(Debug)]
struct Entry {
    /// The connection it arrived on.
    connection: ConnectionId,
    /// The command's type code (filters decode only the entries they keep).
    ty: i32,
    /// The `BaseCommand`, protobuf-encoded.
    command: Box<[u8]>,
    /// The `MessageMetadata` (protobuf-encoded) and the payload bytes, for payload frames.
    payload: Option<(Box<[u8]>, Bytes)>,
}

impl Entry {
    fn encode(
        connection: ConnectionId,
        command: &wire::BaseCommand,
        payload: Option<(&wire::MessageMetadata, Bytes)>,
    ) -> Self {
        Entry {
            connection,
            ty: command.r#type,
            command: command.encode_to_vec().into_boxed_slice(),
            payload: payload.map(|(m, data)| (m.encode_to_vec().into_boxed_slice(), data)),
        }
    }

    fn decode(&self) -> Received {
        // Decoding what prost itself encoded cannot fail; should it, the entry still shows
        // its connection and type rather than vanishing from the log.
        let command = wire::BaseCommand::decode(&*self.command).unwrap_or_else(|e| {
            tracing::error!(%e, "mock broker: a logged command does not decode");
            wire::BaseCommand {
                r#type: self.ty,
                ..Default::default()
            }
        });
        let payload = self.payload.as_ref().map(|(metadata, data)| {
            let metadata = wire::MessageMetadata::decode(&**metadata).unwrap_or_else(|e| {
                tracing::error!(%e, "mock broker: a logged message metadata does not decode");
                wire::MessageMetadata::default()
            });
            (metadata, data.clone())
        });
        Received {
            connection: self.connection,
            command,
            payload,
        }
    }
}

/// The append-only log, with a change signal so waiters never poll.
#[derive(Debug)]
pub(crate) struct CommandLog {
    entries: Mutex<Vec<Entry>>,
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
    pub(crate) fn record(
        &self,
        connection: ConnectionId,
        command: &wire::BaseCommand,
        payload: Option<(&wire::MessageMetadata, Bytes)>,
    ) {
        let entry = Entry::encode(connection, command, payload);
        let len = {
            let mut entries = super::lock(&self.entries);
            entries.push(entry);
            entries.len()
        };
        self.len_tx.send_replace(len);
    }

    /// A snapshot of the whole log.
    pub(crate) fn all(&self) -> Vec<Received> {
        super::lock(&self.entries)
            .iter()
            .map(Entry::decode)
            .collect()
    }

    /// A snapshot of the entries of type `ty`.
    pub(crate) fn of_type(&self, ty: wire::base_command::Type) -> Vec<Received> {
        super::lock(&self.entries)
            .iter()
            .filter(|e| e.ty == ty as i32)
            .map(Entry::decode)
            .collect()
    }

    /// Waits (without polling) until `count` commands of type `ty` are in the log and returns
    /// the first `count` of them; `None` once `timeout` elapses. Each entry is looked at once.
    pub(crate) async fn wait_for(
        &self,
        ty: wire::base_command::Type,
        count: usize,
        timeout: Duration,
    ) -> Option<Vec<Received>> {
        // Subscribing before the first look means no append can slip between a look and the
        // wait: any append after `subscribe` marks the receiver changed.
        let mut rx = self.len_tx.subscribe();
        let mut seen = 0;
        let mut found = Vec::new();
        let wait = async {
            loop {
                {
                    let entries = super::lock(&self.entries);
                    for entry in &entries[seen..] {
                        if found.len() == count {
                            break;
                        }
                        if entry.ty == ty as i32 {
                            found.push(entry.decode());
                        }
                    }
                    seen = entries.len();
                }
                if found.len() == count {
                    return Some(std::mem::take(&mut found));
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::base_command::Type;

    fn command(ty: Type, request_id: u64) -> wire::BaseCommand {
        wire::BaseCommand {
            r#type: ty as i32,
            lookup_topic: (ty == Type::Lookup).then(|| wire::CommandLookupTopic {
                topic: format!("persistent://t/n/{request_id}"),
                request_id,
                ..Default::default()
            }),
            send: (ty == Type::Send).then(|| wire::CommandSend {
                producer_id: 1,
                sequence_id: request_id,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn entries_read_back_as_received_and_waits_take_the_first_ones() {
        let log = CommandLog::new();
        let conn = ConnectionId(7);
        let metadata = wire::MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 3,
            ..Default::default()
        };
        log.record(conn, &command(Type::Lookup, 1), None);
        log.record(
            conn,
            &command(Type::Send, 3),
            Some((&metadata, Bytes::from_static(b"payload"))),
        );
        log.record(conn, &command(Type::Lookup, 2), None);
        let all = log.all();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].command, command(Type::Lookup, 1));
        assert_eq!(
            all[1],
            Received {
                connection: conn,
                command: command(Type::Send, 3),
                payload: Some((metadata, Bytes::from_static(b"payload"))),
            }
        );
        let lookups = log.of_type(Type::Lookup);
        assert_eq!(
            lookups
                .iter()
                .map(|r| r.command.clone())
                .collect::<Vec<_>>(),
            vec![command(Type::Lookup, 1), command(Type::Lookup, 2)]
        );
        let first = log.wait_for(Type::Lookup, 1, Duration::from_secs(5)).await;
        assert_eq!(first.unwrap()[0].command, command(Type::Lookup, 1));
        // A third lookup arrives while the wait is under way.
        let wait = log.wait_for(Type::Lookup, 3, Duration::from_secs(5));
        let later = async {
            tokio::task::yield_now().await;
            log.record(conn, &command(Type::Lookup, 9), None);
        };
        let (three, ()) = tokio::join!(wait, later);
        let ids: Vec<u64> = three
            .unwrap()
            .iter()
            .map(|r| r.command.lookup_topic.as_ref().unwrap().request_id)
            .collect();
        assert_eq!(ids, vec![1, 2, 9]);
        assert!(log
            .wait_for(Type::Lookup, 5, Duration::from_millis(1))
            .await
            .is_none());
    }
}
