//! Where an inbound broker command goes: to the responder of a pending request (by
//! `request_id`), to a registered producer / consumer / watcher (by its id), or to the
//! connection itself (PING, PONG, auth challenges). Pure functions, unit-tested without a socket.

use std::hash::Hasher;

use crate::proto::{base_command::Type, command_topic_migrated::ResourceType, BaseCommand};

/// The kind of entity a broker command can be addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EntityKind {
    /// A producer, addressed by `producer_id`.
    Producer,
    /// A consumer (or reader), addressed by `consumer_id`.
    Consumer,
    /// A partition-update watcher (PIP-247), addressed by `watcher_id`.
    PartitionWatcher,
    /// A topic-list watcher (PIP-145), addressed by `watcher_id`.
    TopicListWatcher,
}

/// Where one inbound command should be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Completes the pending request with this id.
    Request(u64),
    /// Goes to the registered entity.
    Entity(EntityKind, u64),
    /// A PING from the broker: answer with PONG.
    Ping,
    /// A PONG answering our PING.
    Pong,
    /// The broker challenges our authentication data.
    AuthChallenge,
    /// A command the client does not handle (or that is malformed); logged and dropped.
    Unhandled,
}

/// Decides the route of an inbound command.
pub(crate) fn route(cmd: &BaseCommand) -> Route {
    let ty = Type::try_from(cmd.r#type).ok();
    macro_rules! req {
        ($field:ident) => {
            cmd.$field.as_ref().map(|c| Route::Request(c.request_id))
        };
    }
    macro_rules! ent {
        ($field:ident, $kind:expr, $id:ident) => {
            cmd.$field.as_ref().map(|c| Route::Entity($kind, c.$id))
        };
    }
    let route = match ty {
        Some(Type::Ping) => Some(Route::Ping),
        Some(Type::Pong) => Some(Route::Pong),
        Some(Type::AuthChallenge) => Some(Route::AuthChallenge),
        // Responses to requests.
        Some(Type::Success) => req!(success),
        Some(Type::Error) => req!(error),
        Some(Type::ProducerSuccess) => req!(producer_success),
        Some(Type::LookupResponse) => req!(lookup_topic_response),
        Some(Type::PartitionedMetadataResponse) => req!(partition_metadata_response),
        Some(Type::GetLastMessageIdResponse) => {
            req!(get_last_message_id_response)
        }
        Some(Type::ConsumerStatsResponse) => req!(consumer_stats_response),
        Some(Type::GetTopicsOfNamespaceResponse) => {
            req!(get_topics_of_namespace_response)
        }
        Some(Type::GetSchemaResponse) => req!(get_schema_response),
        Some(Type::GetOrCreateSchemaResponse) => req!(get_or_create_schema_response),
        Some(Type::AckResponse) => cmd.ack_response.as_ref().map(|c| match c.request_id {
            Some(id) => Route::Request(id),
            None => Route::Entity(EntityKind::Consumer, c.consumer_id),
        }),
        Some(Type::WatchTopicListSuccess) => req!(watch_topic_list_success),
        Some(Type::WatchPartitionUpdateSuccess) => req!(watch_partition_update_success),
        Some(Type::NewTxnResponse) => req!(new_txn_response),
        Some(Type::AddPartitionToTxnResponse) => req!(add_partition_to_txn_response),
        Some(Type::AddSubscriptionToTxnResponse) => req!(add_subscription_to_txn_response),
        Some(Type::EndTxnResponse) => req!(end_txn_response),
        Some(Type::TcClientConnectResponse) => req!(tc_client_connect_response),
        // Commands addressed to a producer.
        Some(Type::SendReceipt) => ent!(send_receipt, EntityKind::Producer, producer_id),
        Some(Type::SendError) => ent!(send_error, EntityKind::Producer, producer_id),
        Some(Type::CloseProducer) => ent!(close_producer, EntityKind::Producer, producer_id),
        // Commands addressed to a consumer.
        Some(Type::Message) => ent!(message, EntityKind::Consumer, consumer_id),
        Some(Type::CloseConsumer) => ent!(close_consumer, EntityKind::Consumer, consumer_id),
        Some(Type::ReachedEndOfTopic) => {
            ent!(reached_end_of_topic, EntityKind::Consumer, consumer_id)
        }
        Some(Type::ActiveConsumerChange) => {
            ent!(active_consumer_change, EntityKind::Consumer, consumer_id)
        }
        Some(Type::TopicMigrated) => cmd.topic_migrated.as_ref().map(|c| {
            let kind = match ResourceType::try_from(c.resource_type) {
                Ok(ResourceType::Producer) => EntityKind::Producer,
                _ => EntityKind::Consumer,
            };
            Route::Entity(kind, c.resource_id)
        }),
        // Watchers.
        Some(Type::PartitionUpdate) => {
            ent!(partition_update, EntityKind::PartitionWatcher, watcher_id)
        }
        Some(Type::WatchTopicUpdate) => {
            ent!(watch_topic_update, EntityKind::TopicListWatcher, watcher_id)
        }
        _ => None,
    };
    route.unwrap_or(Route::Unhandled)
}

/// A short name for a command type, for logs and errors.
pub(crate) fn type_name(cmd: &BaseCommand) -> String {
    match Type::try_from(cmd.r#type) {
        Ok(t) => t.as_str_name().to_string(),
        Err(_) => format!("UNKNOWN({})", cmd.r#type),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::*;

    fn base(ty: Type) -> BaseCommand {
        BaseCommand {
            r#type: ty as i32,
            ..Default::default()
        }
    }

    #[test]
    fn responses_route_by_request_id() {
        let mut c = base(Type::Success);
        c.success = Some(CommandSuccess {
            request_id: 7,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Request(7));

        let mut c = base(Type::LookupResponse);
        c.lookup_topic_response = Some(CommandLookupTopicResponse {
            request_id: 9,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Request(9));

        // An ack response carries request_id only when the ack asked for a receipt.
        let mut c = base(Type::AckResponse);
        c.ack_response = Some(CommandAckResponse {
            consumer_id: 2,
            request_id: Some(11),
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Request(11));
        c.ack_response.as_mut().unwrap().request_id = None;
        assert_eq!(route(&c), Route::Entity(EntityKind::Consumer, 2));
    }

    #[test]
    fn entity_commands_route_by_entity_id() {
        let mut c = base(Type::SendReceipt);
        c.send_receipt = Some(CommandSendReceipt {
            producer_id: 3,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Entity(EntityKind::Producer, 3));

        let mut c = base(Type::CloseConsumer);
        c.close_consumer = Some(CommandCloseConsumer {
            consumer_id: 4,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Entity(EntityKind::Consumer, 4));

        let mut c = base(Type::PartitionUpdate);
        c.partition_update = Some(CommandPartitionUpdate {
            watcher_id: 5,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Entity(EntityKind::PartitionWatcher, 5));

        let mut c = base(Type::TopicMigrated);
        c.topic_migrated = Some(CommandTopicMigrated {
            resource_id: 6,
            resource_type: command_topic_migrated::ResourceType::Producer as i32,
            ..Default::default()
        });
        assert_eq!(route(&c), Route::Entity(EntityKind::Producer, 6));
    }

    #[test]
    fn missing_body_or_unknown_type_is_unhandled() {
        assert_eq!(route(&base(Type::SendReceipt)), Route::Unhandled);
        let c = BaseCommand {
            r#type: 999,
            ..Default::default()
        };
        assert_eq!(route(&c), Route::Unhandled);
        assert_eq!(type_name(&c), "UNKNOWN(999)");
        assert_eq!(route(&base(Type::Ping)), Route::Ping);
    }
}

/// A multiplicative hash (Fibonacci hashing) of the few words of an entity key.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}
