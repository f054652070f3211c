//! What every handler builds its answer from: the [`Step`] the session applies, the
//! [`SessionView`] of the connection a command arrived on, and the common answers (SUCCESS,
//! ERROR, PING/PONG) and request ids. A leaf: it imports no handler and no broker state, so
//! the feature handlers (produce, consume, watchers, ...) and the dispatcher
//! ([`super::handlers`]) all stand on it.

use super::proxy::Target;
use super::wire::{self, base_command::Type};
use super::{ConnectionId, MockBrokerConfig};
use crate::error::ServerError;

/// The highest protocol version the mock broker speaks (upstream `v21`).
pub(crate) const MAX_PROTOCOL_VERSION: i32 = 21;

/// What the session does after a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// The handshake succeeded: send this CONNECTED and mark the session connected.
    Handshake(wire::BaseCommand),
    /// Send this response (subject to the configured delay).
    Reply(wire::BaseCommand),
    /// Answer a PING (never delayed).
    Pong,
    /// Nothing to send.
    Ignore,
    /// Close the connection, as a real broker does on a protocol violation.
    Close(String),
    /// Send this (an ERROR) and close the connection: refused credentials.
    Refuse(wire::BaseCommand, String),
    /// Proxy mode: relay this connection to the target broker ([`super::proxy`]).
    Forward(Box<Target>),
}

/// Per-connection facts a handler needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionView<'a> {
    /// The broker's configuration.
    pub(crate) config: &'a MockBrokerConfig,
    /// This broker's own service URL (the answer to a lookup it serves itself).
    pub(crate) service_url: &'a str,
    /// Whether CONNECT has been answered on this connection.
    pub(crate) connected: bool,
    /// The connection the command arrived on.
    pub(crate) conn: ConnectionId,
}

/// A SUCCESS response.
pub(crate) fn success(request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Success as i32,
        success: Some(wire::CommandSuccess {
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An ERROR response.
pub(crate) fn error(request_id: u64, code: ServerError, message: &str) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Error as i32,
        error: Some(wire::CommandError {
            request_id,
            error: code.code(),
            message: message.to_owned(),
        }),
        ..Default::default()
    }
}

/// A PING or PONG.
pub(crate) fn ping_or_pong(ty: Type) -> wire::BaseCommand {
    let mut cmd = wire::BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    };
    match ty {
        Type::Ping => cmd.ping = Some(wire::CommandPing::default()),
        _ => cmd.pong = Some(wire::CommandPong::default()),
    }
    cmd
}

/// The request id of a client-to-broker request, if the command is one and carries it.
pub(crate) fn request_id(cmd: &wire::BaseCommand) -> Option<u64> {
    macro_rules! rid {
        ($field:ident) => {
            cmd.$field.as_ref().map(|c| c.request_id)
        };
    }
    let ty = Type::try_from(cmd.r#type).ok()?;
    match ty {
        Type::Subscribe => rid!(subscribe),
        Type::Producer => rid!(producer),
        Type::Unsubscribe => rid!(unsubscribe),
        Type::CloseProducer => rid!(close_producer),
        Type::CloseConsumer => rid!(close_consumer),
        Type::PartitionedMetadata => rid!(partition_metadata),
        Type::Lookup => rid!(lookup_topic),
        Type::ConsumerStats => rid!(consumer_stats),
        Type::Seek => rid!(seek),
        Type::GetLastMessageId => rid!(get_last_message_id),
        Type::GetTopicsOfNamespace => rid!(get_topics_of_namespace),
        Type::GetSchema => rid!(get_schema),
        Type::GetOrCreateSchema => rid!(get_or_create_schema),
        Type::Ack => cmd.ack.as_ref().and_then(|a| a.request_id),
        Type::NewTxn => rid!(new_txn),
        Type::AddPartitionToTxn => rid!(add_partition_to_txn),
        Type::AddSubscriptionToTxn => rid!(add_subscription_to_txn),
        Type::EndTxn => rid!(end_txn),
        Type::EndTxnOnPartition => rid!(end_txn_on_partition),
        Type::EndTxnOnSubscription => rid!(end_txn_on_subscription),
        Type::TcClientConnectRequest => rid!(tc_client_connect_request),
        Type::WatchTopicList => rid!(watch_topic_list),
        Type::WatchTopicListClose => rid!(watch_topic_list_close),
        Type::ScalableTopicSubscribe => rid!(scalable_topic_subscribe),
        Type::WatchPartitionUpdate => rid!(watch_partition_update),
        Type::WatchPartitionUpdateClose => rid!(watch_partition_update_close),
        _ => None,
    }
}
