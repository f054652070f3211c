//! What the broker answers: pure functions from (broker state, command) to a [`Step`].
//!
//! No I/O here. The session ([`super::session`]) records the command, calls [`handle`], and
//! applies the step (sending, delaying, dropping or closing). Frames for other consumers (or
//! broker-initiated frames for this connection: MESSAGE, ACTIVE_CONSUMER_CHANGE, ...) are
//! queued on the connections' channels in [`BrokerState::conns`](super::state::BrokerState)
//! while the handler runs. Producers are in [`super::produce`], consumers in
//! [`super::consume`]; new broker features add an arm to [`handle`] and state to
//! [`super::state`].

use super::proxy::{check_target, Target};
use super::reply::{error, request_id, SessionView, Step, MAX_PROTOCOL_VERSION};
use super::state::{BrokerState, LookupAnswer};
use super::wire::{self, base_command::Type};
use super::{
    consume, permissions, produce, schemas, topic_lists, transactions, watchers, ConnectionId,
};
use crate::codec::Payload;
use crate::error::ServerError;

/// Decides the broker's answer to one received command.
pub(crate) fn handle(
    state: &mut BrokerState,
    session: SessionView<'_>,
    cmd: &wire::BaseCommand,
    payload: Option<&Payload>,
) -> Step {
    let Ok(ty) = Type::try_from(cmd.r#type) else {
        tracing::warn!(
            r#type = cmd.r#type,
            "mock broker: unknown command type, ignored"
        );
        return Step::Ignore;
    };
    if ty == Type::Connect {
        let proxy_to = cmd
            .connect
            .as_ref()
            .and_then(|c| c.proxy_to_broker_url.as_deref());
        if let Some(target) = proxy_to {
            let is_proxy = state
                .lookup
                .get(session.service_url)
                .is_some_and(|rules| rules.is_proxy());
            if is_proxy && !session.connected {
                return proxy_connect(target, cmd);
            }
        }
        let mut step = connect(session, cmd);
        if let Step::Handshake(c) = &mut step {
            let on = state
                .settings(session.service_url, session.config)
                .topic_watchers;
            if let Some(f) = c.connected.as_mut().and_then(|c| c.feature_flags.as_mut()) {
                f.supports_topic_watchers = Some(on);
            }
        }
        if let (Step::Handshake(_), Some(c)) = (&step, &cmd.connect) {
            if let Some(conn) = state.conns.get_mut(session.conn) {
                conn.role = permissions::role_of(c);
            }
        }
        return step;
    }
    if !session.connected && session.config.require_connect_first {
        return Step::Close(format!("{} received before CONNECT", ty.as_str_name()));
    }
    // Proxy mode, a connection that named no target broker: upstream `ProxyConnection` in
    // state `ProxyLookupRequests` serves only lookups, partition metadata, namespace topic
    // lists and schemas; any other command reaches `PulsarDecoder`'s default handler, which
    // throws `UnsupportedOperationException`, and `ProxyConnection.exceptionCaught` closes the
    // connection. (A relayed connection never gets here: the relay passes its frames on.)
    let lookup_only = matches!(
        ty,
        Type::Ping
            | Type::Pong
            | Type::AuthResponse
            | Type::Lookup
            | Type::PartitionedMetadata
            | Type::GetTopicsOfNamespace
            | Type::GetSchema
    );
    if !lookup_only
        && state
            .lookup
            .get(session.service_url)
            .is_some_and(|rules| rules.is_proxy())
    {
        return Step::Close(format!(
            "proxy: {} is not served on a lookup connection",
            ty.as_str_name()
        ));
    }
    match ty {
        Type::Ping => Step::Pong,
        Type::AuthResponse => auth_response(session, cmd),
        Type::Lookup => match &cmd.lookup_topic {
            Some(lookup) => Step::Reply(lookup_response(state, session, lookup)),
            None => malformed(ty),
        },
        Type::PartitionedMetadata => match &cmd.partition_metadata {
            Some(req) => Step::Reply(partition_metadata_response(state, req)),
            None => malformed(ty),
        },
        Type::Producer => match &cmd.producer {
            Some(c) => produce::producer(state, session, c),
            None => malformed(ty),
        },
        Type::Send => match &cmd.send {
            Some(c) => produce::send(state, session, c, payload),
            None => malformed(ty),
        },
        // A real broker answers Success to closing a producer/consumer it does not know
        // (upstream ServerCnx: "not registered on the connection" → success).
        Type::CloseProducer => match &cmd.close_producer {
            Some(c) => produce::close(state, session, c),
            None => malformed(ty),
        },
        Type::CloseConsumer => match &cmd.close_consumer {
            Some(c) => consume::close(state, session, c),
            None => malformed(ty),
        },
        Type::Subscribe => match &cmd.subscribe {
            Some(c) => consume::subscribe(state, session, c),
            None => malformed(ty),
        },
        Type::Flow => match &cmd.flow {
            Some(c) => {
                consume::flow(state, session, c);
                Step::Ignore
            }
            None => malformed(ty),
        },
        Type::Ack => match &cmd.ack {
            Some(c) => consume::ack(state, session, c),
            None => malformed(ty),
        },
        Type::RedeliverUnacknowledgedMessages => match &cmd.redeliver_unacknowledged_messages {
            Some(c) => {
                consume::redeliver(state, session, c);
                Step::Ignore
            }
            None => malformed(ty),
        },
        Type::Unsubscribe => match &cmd.unsubscribe {
            Some(c) => consume::unsubscribe(state, session, c),
            None => malformed(ty),
        },
        Type::Seek => match &cmd.seek {
            Some(c) => consume::seek(state, session, c),
            None => malformed(ty),
        },
        Type::GetLastMessageId => match &cmd.get_last_message_id {
            Some(c) => consume::get_last_message_id(state, session, c),
            None => malformed(ty),
        },
        Type::GetSchema => match &cmd.get_schema {
            Some(c) => schemas::get_schema(&state.schemas, c),
            None => malformed(ty),
        },
        Type::GetOrCreateSchema => match &cmd.get_or_create_schema {
            Some(c) => schemas::get_or_create_schema(&mut state.schemas, c),
            None => malformed(ty),
        },
        Type::WatchPartitionUpdate => match &cmd.watch_partition_update {
            Some(c) => watchers::watch(state, session, c),
            None => malformed(ty),
        },
        Type::PartitionUpdateResult => match &cmd.partition_update_result {
            Some(c) => {
                watchers::result(state, session, c);
                Step::Ignore
            }
            None => malformed(ty),
        },
        Type::WatchPartitionUpdateClose => match &cmd.watch_partition_update_close {
            Some(c) => watchers::close(state, session, c),
            None => malformed(ty),
        },
        Type::GetTopicsOfNamespace => match &cmd.get_topics_of_namespace {
            Some(c) => {
                let evaluate = state
                    .settings(session.service_url, session.config)
                    .pattern_evaluation;
                topic_lists::get_topics(state, c, evaluate)
            }
            None => malformed(ty),
        },
        Type::WatchTopicList => match &cmd.watch_topic_list {
            Some(c) => topic_lists::watch(state, session, c),
            None => malformed(ty),
        },
        Type::WatchTopicListClose => match &cmd.watch_topic_list_close {
            Some(c) => topic_lists::close(state, session, c),
            None => malformed(ty),
        },
        Type::TcClientConnectRequest
        | Type::NewTxn
        | Type::AddPartitionToTxn
        | Type::AddSubscriptionToTxn
        | Type::EndTxn => coordinator(state, session, cmd, ty),
        _ => match request_id(cmd) {
            Some(request_id) => Step::Reply(error(
                request_id,
                ServerError::UnknownError,
                &format!("mock broker: {} not implemented yet", ty.as_str_name()),
            )),
            None => {
                tracing::debug!(command = ty.as_str_name(), "mock broker: command ignored");
                Step::Ignore
            }
        },
    }
}

/// A connection ended: its producers and consumers are detached (a consumer's unacknowledged
/// messages go back to its subscription for the other consumers), its watchers removed.
pub(crate) fn connection_closed(state: &mut BrokerState, conn: ConnectionId) {
    watchers::connection_closed(state, conn);
    topic_lists::connection_closed(state, conn);
    let Some(entry) = state.conns.get(conn) else {
        return;
    };
    let mut producers: Vec<u64> = entry.producers.keys().copied().collect();
    let mut consumers: Vec<u64> = entry.consumers.keys().copied().collect();
    producers.sort_unstable();
    consumers.sort_unstable();
    for id in producers {
        produce::remove_producer(state, (conn, id));
    }
    for id in consumers {
        consume::remove_consumer(state, (conn, id));
    }
    state.conns.unregister(conn);
}

/// The transaction coordinator's commands ([`transactions`]).
fn coordinator(
    state: &mut BrokerState,
    session: SessionView<'_>,
    cmd: &wire::BaseCommand,
    ty: Type,
) -> Step {
    let Some(rid) = request_id(cmd) else {
        return malformed(ty);
    };
    if let Some(step) = transactions::gate(session, rid) {
        return step;
    }
    match ty {
        Type::TcClientConnectRequest => cmd
            .tc_client_connect_request
            .as_ref()
            .map_or_else(|| malformed(ty), |c| transactions::tc_connect(state, c)),
        Type::NewTxn => cmd
            .new_txn
            .as_ref()
            .map_or_else(|| malformed(ty), |c| transactions::new_txn(state, c)),
        Type::AddPartitionToTxn => cmd
            .add_partition_to_txn
            .as_ref()
            .map_or_else(|| malformed(ty), |c| transactions::add_partition(state, c)),
        Type::AddSubscriptionToTxn => cmd.add_subscription_to_txn.as_ref().map_or_else(
            || malformed(ty),
            |c| transactions::add_subscription(state, c),
        ),
        _ => cmd
            .end_txn
            .as_ref()
            .map_or_else(|| malformed(ty), |c| transactions::end_txn(state, c)),
    }
}

fn malformed(ty: Type) -> Step {
    Step::Close(format!("{} without its command body", ty.as_str_name()))
}

fn connect(session: SessionView<'_>, cmd: &wire::BaseCommand) -> Step {
    let Some(connect) = &cmd.connect else {
        return malformed(Type::Connect);
    };
    if session.connected {
        // Upstream ServerCnx only accepts CONNECT in its initial state.
        return Step::Close("duplicate CONNECT".to_owned());
    }
    let config = session.config;
    if let Some(auth) = &config.auth {
        if let Some(reason) = auth.check(
            connect.auth_method_name.as_deref(),
            connect.auth_data.as_deref(),
        ) {
            return Step::Refuse(error(0, ServerError::AuthenticationError, &reason), reason);
        }
    }
    let connected = wire::CommandConnected {
        server_version: config.server_version.clone(),
        protocol_version: Some(connect.protocol_version().min(MAX_PROTOCOL_VERSION)),
        max_message_size: config
            .max_message_size
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        feature_flags: Some(wire::FeatureFlags {
            supports_partition_update_watchers: Some(config.supports_partition_update_watchers),
            // PIP-344 (brokers since 3.3): PARTITIONED_METADATA honours
            // `metadata_auto_creation_enabled = false`.
            supports_get_partitioned_metadata_without_auto_creation: Some(true),
            ..Default::default()
        }),
    };
    Step::Handshake(wire::BaseCommand {
        r#type: Type::Connected as i32,
        connected: Some(connected),
        ..Default::default()
    })
}

/// An answer to an auth challenge: checked like CONNECT's credentials (upstream ServerCnx
/// closes the connection when they are refused).
fn auth_response(session: SessionView<'_>, cmd: &wire::BaseCommand) -> Step {
    let Some(auth) = &session.config.auth else {
        return Step::Ignore;
    };
    let data = cmd.auth_response.as_ref().and_then(|r| r.response.as_ref());
    match auth.check(
        data.and_then(|d| d.auth_method_name.as_deref()),
        data.and_then(|d| d.auth_data.as_deref()),
    ) {
        None => Step::Ignore,
        Some(reason) => Step::Refuse(error(0, ServerError::AuthenticationError, &reason), reason),
    }
}

/// Puts a broker URL in the lookup answer's field for its scheme.
fn set_broker_url(resp: &mut wire::CommandLookupTopicResponse, url: String) {
    if url.starts_with("pulsar+ssl://") {
        resp.broker_service_url_tls = Some(url);
    } else {
        resp.broker_service_url = Some(url);
    }
}

fn lookup_response(
    state: &BrokerState,
    session: SessionView<'_>,
    req: &wire::CommandLookupTopic,
) -> wire::BaseCommand {
    use wire::command_lookup_topic_response::LookupType;
    let mut resp = wire::CommandLookupTopicResponse {
        request_id: req.request_id,
        ..Default::default()
    };
    match state.lookup_answer(&req.topic, session.service_url) {
        LookupAnswer::Connect => {
            resp.response = Some(LookupType::Connect as i32);
            set_broker_url(&mut resp, session.service_url.to_owned());
            resp.authoritative = Some(true);
            resp.proxy_through_service_url = Some(false);
        }
        LookupAnswer::Redirect {
            service_url,
            authoritative,
        } => {
            resp.response = Some(LookupType::Redirect as i32);
            set_broker_url(&mut resp, service_url);
            resp.authoritative = Some(authoritative);
            resp.proxy_through_service_url = Some(false);
        }
        LookupAnswer::ConnectTo { service_url } => {
            resp.response = Some(LookupType::Connect as i32);
            set_broker_url(&mut resp, service_url);
            resp.authoritative = Some(true);
            resp.proxy_through_service_url = Some(false);
        }
        LookupAnswer::Proxied { service_url } => {
            resp.response = Some(LookupType::Connect as i32);
            set_broker_url(&mut resp, service_url);
            resp.authoritative = Some(true);
            resp.proxy_through_service_url = Some(true);
        }
        LookupAnswer::Failed { code, message } => {
            resp.response = Some(LookupType::Failed as i32);
            resp.error = Some(code.code());
            resp.message = Some(message);
        }
    }
    wire::BaseCommand {
        r#type: Type::LookupResponse as i32,
        lookup_topic_response: Some(resp),
        ..Default::default()
    }
}

fn partition_metadata_response(
    state: &BrokerState,
    req: &wire::CommandPartitionedTopicMetadata,
) -> wire::BaseCommand {
    use wire::command_partitioned_topic_metadata_response::LookupType;
    let partitions = state.topics.partitions(&req.topic);
    // PIP-344: asked not to create it, a broker answers TopicNotFound for a topic that exists
    // neither partitioned nor non-partitioned (the mock never creates metadata itself).
    if req.metadata_auto_creation_enabled == Some(false)
        && partitions == 0
        && state.topics.get(&req.topic).is_none()
    {
        return wire::BaseCommand {
            r#type: Type::PartitionedMetadataResponse as i32,
            partition_metadata_response: Some(wire::CommandPartitionedTopicMetadataResponse {
                request_id: req.request_id,
                response: Some(LookupType::Failed as i32),
                error: Some(ServerError::TopicNotFound.code()),
                message: Some(format!("topic {} does not exist", req.topic)),
                ..Default::default()
            }),
            ..Default::default()
        };
    }
    wire::BaseCommand {
        r#type: Type::PartitionedMetadataResponse as i32,
        partition_metadata_response: Some(wire::CommandPartitionedTopicMetadataResponse {
            partitions: Some(partitions),
            request_id: req.request_id,
            response: Some(LookupType::Success as i32),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The request id of the proxy's ERROR answers (upstream `Commands.newError(-1, ...)`).
const NO_REQUEST: u64 = u64::MAX;

/// What the proxy does with a CONNECT naming `target` (see [`super::proxy`]).
fn proxy_connect(target: &str, cmd: &wire::BaseCommand) -> Step {
    match check_target(target) {
        Ok((host, port)) => {
            let mut connect = cmd.clone();
            if let Some(c) = connect.connect.as_mut() {
                c.proxy_to_broker_url = None;
            }
            Step::Forward(Box::new(Target {
                host,
                port,
                connect,
            }))
        }
        Err((code, message)) => Step::Refuse(
            error(NO_REQUEST, code, message),
            format!("proxy refused target broker {target:?}: {message}"),
        ),
    }
}
