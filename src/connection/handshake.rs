//! The CONNECT / CONNECTED exchange that opens every connection.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::{routing, BrokerFeatures, ConnectionConfig, ConnectionInfo};
use crate::auth::Credentials;
use crate::codec::{
    CodecError, Frame, PulsarCodec, DEFAULT_MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE_LIMIT,
};
use crate::error::{Error, Result, ServerError};
use crate::proto::{self, base_command::Type, BaseCommand};

/// The feature flags this client announces in CONNECT. `supports_auth_refresh`: every
/// AuthChallenge is answered with fresh credentials from the provider, keeping the connection.
pub(crate) fn client_feature_flags() -> proto::FeatureFlags {
    proto::FeatureFlags {
        supports_auth_refresh: Some(true),
        supports_broker_entry_metadata: Some(true),
        supports_partial_producer: Some(true),
        supports_partition_update_watchers: Some(true),
        ..Default::default()
    }
}

pub(crate) fn connect_command(
    proxy_to_broker_url: Option<&str>,
    auth: Option<&Credentials>,
) -> BaseCommand {
    BaseCommand {
        r#type: Type::Connect as i32,
        connect: Some(proto::CommandConnect {
            client_version: crate::CLIENT_VERSION.to_string(),
            protocol_version: Some(crate::PROTOCOL_VERSION),
            auth_method_name: auth.map(|a| a.method.clone()),
            auth_data: auth.map(|a| a.data.clone()),
            proxy_to_broker_url: proxy_to_broker_url.map(str::to_string),
            feature_flags: Some(client_feature_flags()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The answer to an auth challenge: credentials just fetched from the provider.
pub(crate) fn auth_response(auth: Option<&Credentials>) -> BaseCommand {
    BaseCommand {
        r#type: Type::AuthResponse as i32,
        auth_response: Some(proto::CommandAuthResponse {
            client_version: Some(crate::CLIENT_VERSION.to_string()),
            response: auth.map(|a| proto::AuthData {
                auth_method_name: Some(a.method.clone()),
                auth_data: Some(a.data.clone()),
            }),
            protocol_version: Some(crate::PROTOCOL_VERSION),
        }),
        ..Default::default()
    }
}

pub(crate) fn features_from(flags: Option<&proto::FeatureFlags>) -> BrokerFeatures {
    let Some(f) = flags else {
        return BrokerFeatures::default();
    };
    BrokerFeatures {
        supports_auth_refresh: f.supports_auth_refresh.unwrap_or(false),
        supports_broker_entry_metadata: f.supports_broker_entry_metadata.unwrap_or(false),
        supports_topic_watchers: f.supports_topic_watchers.unwrap_or(false),
        supports_partial_producer: f.supports_partial_producer.unwrap_or(false),
        supports_get_partitioned_metadata_without_auto_creation: f
            .supports_get_partitioned_metadata_without_auto_creation
            .unwrap_or(false),
        supports_partition_update_watchers: f.supports_partition_update_watchers.unwrap_or(false),
    }
}

/// Whether a frame's 4-byte length prefix is in fact a TLS record header: content type alert
/// (0x15) or handshake (0x16), then protocol version 3.x (SSL 3.0 to TLS 1.3 all send 0x03,
/// 0x00..=0x04). Such a "length" is far above any frame size limit.
fn looks_like_tls_record(prefix: [u8; 4]) -> bool {
    matches!(prefix, [0x15 | 0x16, 0x03, 0x00..=0x04, _])
}

/// A decoding error of the handshake's first answer, explained when the broker answered a
/// plain CONNECT with TLS (a `pulsar://` URL pointed at a TLS port).
fn tls_hint(error: Error) -> Error {
    if let Error::Codec(CodecError::FrameTooLarge { size, .. }) = &error {
        let prefix = size
            .checked_sub(4)
            .and_then(|total| u32::try_from(total).ok())
            .map(u32::to_be_bytes);
        if prefix.is_some_and(looks_like_tls_record) {
            return Error::Protocol(
                "the broker speaks TLS: use a pulsar+ssl:// service URL (its first answer was a \
                 TLS record, not a Pulsar frame)"
                    .into(),
            );
        }
    }
    error
}

/// A bad frame answering CONNECT ends the connection before it is up: a failed connect,
/// retried like any other (Java `ClientCnx.exceptionCaught` closes the channel and the connect
/// future fails with a retriable `PulsarClientException`), not `Error::Codec`, which would fail
/// a create or a subscribe for good. The TLS hint (a `pulsar://` URL at a TLS port) stays as is.
fn lost_in_handshake(error: Error) -> Error {
    match error {
        Error::Codec(e) => Error::ConnectionLost(format!("bad frame answering CONNECT: {e}")),
        other => other,
    }
}

/// The two halves of a connection's socket, each with its codec.
pub(crate) type Halves<S> = (
    FramedRead<ReadHalf<S>, PulsarCodec>,
    FramedWrite<WriteHalf<S>, PulsarCodec>,
);

/// The handshake's decoder: frames come out boxed, so the handshake's state (and a debug
/// build's poll frame, which copies every value it handles) holds a pointer per frame, not a
/// several-KB `BaseCommand`.
struct BoxedFrames(PulsarCodec);

impl tokio_util::codec::Decoder for BoxedFrames {
    type Item = Box<Frame>;
    type Error = CodecError;

    fn decode(
        &mut self,
        src: &mut bytes::BytesMut,
    ) -> std::result::Result<Option<Box<Frame>>, CodecError> {
        Ok(self.0.decode(src)?.map(Box::new))
    }
}

/// Builds a frame out of the async handshake's body (see [`BoxedFrames`]).
fn boxed(command: impl FnOnce() -> BaseCommand) -> Box<Frame> {
    Box::new(Frame::simple(command()))
}

/// Sends CONNECT and waits for CONNECTED, answering PINGs and auth challenges meanwhile.
pub(crate) async fn handshake<S>(
    stream: S,
    broker_url: &str,
    proxy_to_broker_url: Option<&str>,
    config: &ConnectionConfig,
) -> Result<(Halves<S>, ConnectionInfo)>
where
    S: AsyncRead + AsyncWrite,
{
    let (r, w) = tokio::io::split(stream);
    let mut reader = FramedRead::new(r, BoxedFrames(PulsarCodec::new()));
    let mut writer = FramedWrite::new(w, PulsarCodec::new());
    let credentials = match &config.auth {
        Some(provider) => Some(crate::auth::fetch(provider.as_ref()).await?),
        None => None,
    };
    let connect = boxed(|| connect_command(proxy_to_broker_url, credentials.as_ref()));
    writer.send(&*connect).await?;
    drop(connect);
    loop {
        let mut frame = match reader.next().await {
            Some(Err(e)) => return Err(lost_in_handshake(tls_hint(Error::from(e)))),
            Some(Ok(frame)) => frame,
            None => {
                return Err(Error::ConnectionLost(
                    "broker closed the connection during the handshake".into(),
                ))
            }
        };
        let cmd = &mut frame.command;
        match Type::try_from(cmd.r#type) {
            Ok(Type::Connected) => {
                let connected = cmd
                    .connected
                    .take()
                    .ok_or_else(|| Error::Protocol("CONNECTED frame without its body".into()))?;
                let advertised = connected
                    .max_message_size
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE);
                // Upstream trusts the advertised size; we cap it so that one frame header
                // cannot claim gigabytes (see MAX_MESSAGE_SIZE_LIMIT).
                let max_message_size = advertised.min(MAX_MESSAGE_SIZE_LIMIT);
                if max_message_size < advertised {
                    tracing::warn!(
                        advertised,
                        limit = MAX_MESSAGE_SIZE_LIMIT,
                        "broker advertised a max message size above the client's limit; capped"
                    );
                }
                reader
                    .decoder_mut()
                    .0
                    .set_max_message_size(max_message_size);
                writer.encoder_mut().set_max_message_size(max_message_size);
                let info = ConnectionInfo {
                    broker_url: broker_url.to_string(),
                    server_version: connected.server_version,
                    protocol_version: connected
                        .protocol_version
                        .unwrap_or(0)
                        .min(crate::PROTOCOL_VERSION),
                    max_message_size,
                    features: features_from(connected.feature_flags.as_ref()),
                };
                tracing::info!(
                    broker = %info.broker_url,
                    server_version = %info.server_version,
                    protocol_version = info.protocol_version,
                    max_message_size = info.max_message_size,
                    features = ?info.features,
                    "connected"
                );
                return Ok(((reader.map_decoder(|BoxedFrames(c)| c), writer), info));
            }
            Ok(Type::Error) => {
                let e = cmd.error.take().unwrap_or_default();
                return Err(Error::Broker {
                    code: ServerError::from_code(e.error),
                    message: e.message,
                });
            }
            Ok(Type::Ping) => {
                writer.send(&*boxed(crate::commands::pong)).await?;
            }
            Ok(Type::AuthChallenge) => {
                let fresh = match &config.auth {
                    Some(provider) => Some(crate::auth::fetch(provider.as_ref()).await?),
                    None => None,
                };
                writer
                    .send(&*boxed(|| auth_response(fresh.as_ref())))
                    .await?;
            }
            _ => {
                tracing::warn!(
                    command = %routing::type_name(cmd),
                    "unexpected command during the handshake; ignored"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_record_header_is_recognised_as_such() {
        // 0x15030300 (+4): the TLS alert of the review's report.
        let tls = Error::Codec(CodecError::FrameTooLarge {
            size: 352_518_916,
            max: 5 * 1024 * 1024,
        });
        assert!(tls_hint(tls).to_string().contains("pulsar+ssl://"));
        let big = Error::Codec(CodecError::FrameTooLarge {
            size: 200_000_000,
            max: 5 * 1024 * 1024,
        });
        assert!(!tls_hint(big).to_string().contains("TLS"));
        assert!(looks_like_tls_record([0x16, 0x03, 0x01, 0x02]));
        assert!(!looks_like_tls_record([0x16, 0x04, 0x01, 0x02]));
    }
}
