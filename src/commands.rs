//! Every command the client sends, built in one place. Entity, connection and lookup code call
//! these instead of assembling `BaseCommand` literals. Request ids are parameters: the
//! connection hands them out when the command is sent.

use crate::codec::Frame;
use crate::message_id::MessageId;
use crate::proto::{self, base_command::Type, BaseCommand};

fn base(ty: Type) -> BaseCommand {
    BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

/// A keep-alive PING.
pub(crate) fn ping() -> BaseCommand {
    BaseCommand {
        ping: Some(proto::CommandPing {}),
        ..base(Type::Ping)
    }
}

/// The answer to a broker's PING.
pub(crate) fn pong() -> BaseCommand {
    BaseCommand {
        pong: Some(proto::CommandPong {}),
        ..base(Type::Pong)
    }
}

/// Topic lookup.
pub(crate) fn lookup(topic: &str, request_id: u64, authoritative: bool) -> BaseCommand {
    BaseCommand {
        lookup_topic: Some(proto::CommandLookupTopic {
            topic: topic.to_string(),
            request_id,
            authoritative: Some(authoritative),
            ..Default::default()
        }),
        ..base(Type::Lookup)
    }
}

/// Partitioned-topic metadata. `auto_creation`: PIP-344 `metadata_auto_creation_enabled`
/// (`None` leaves it out: the broker may create the topic's metadata, its default).
pub(crate) fn partitioned_metadata(
    topic: &str,
    request_id: u64,
    auto_creation: Option<bool>,
) -> BaseCommand {
    BaseCommand {
        partition_metadata: Some(proto::CommandPartitionedTopicMetadata {
            topic: topic.to_string(),
            request_id,
            metadata_auto_creation_enabled: auto_creation,
            ..Default::default()
        }),
        ..base(Type::PartitionedMetadata)
    }
}

/// CommandProducer: creates (or re-creates) a producer. `body` carries everything but the
/// request id.
pub(crate) fn producer(mut body: proto::CommandProducer, request_id: u64) -> BaseCommand {
    body.request_id = request_id;
    BaseCommand {
        producer: Some(body),
        ..base(Type::Producer)
    }
}

/// CommandCloseProducer.
pub(crate) fn close_producer(producer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_producer: Some(proto::CommandCloseProducer {
            producer_id,
            request_id,
            ..Default::default()
        }),
        ..base(Type::CloseProducer)
    }
}

/// CommandSubscribe. `body` carries everything but the request id.
pub(crate) fn subscribe(mut body: proto::CommandSubscribe, request_id: u64) -> BaseCommand {
    body.request_id = request_id;
    BaseCommand {
        subscribe: Some(body),
        ..base(Type::Subscribe)
    }
}

/// CommandCloseConsumer.
pub(crate) fn close_consumer(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_consumer: Some(proto::CommandCloseConsumer {
            consumer_id,
            request_id,
            ..Default::default()
        }),
        ..base(Type::CloseConsumer)
    }
}

/// FLOW: lets the broker push `permits` more messages.
pub(crate) fn flow(consumer_id: u64, permits: u32) -> Frame {
    Frame::simple(BaseCommand {
        flow: Some(proto::CommandFlow {
            consumer_id,
            message_permits: permits,
        }),
        ..base(Type::Flow)
    })
}

/// An individual ACK of whole entries plus partly acked batches (id, ack set).
pub(crate) fn ack_individual(
    consumer_id: u64,
    entries: &[MessageId],
    partial: Vec<(MessageId, Vec<i64>)>,
) -> Frame {
    let mut ids: Vec<proto::MessageIdData> = entries.iter().map(|i| i.entry().to_proto()).collect();
    ids.extend(partial.into_iter().map(|(id, set)| {
        let mut p = id.to_proto();
        p.ack_set = set;
        p.batch_size = (id.batch_size > 0).then_some(id.batch_size);
        p
    }));
    ack(
        consumer_id,
        proto::command_ack::AckType::Individual,
        ids,
        None,
    )
}

/// A cumulative ACK up to and including `id`'s entry.
pub(crate) fn ack_cumulative(consumer_id: u64, id: MessageId) -> Frame {
    ack(
        consumer_id,
        proto::command_ack::AckType::Cumulative,
        vec![id.entry().to_proto()],
        None,
    )
}

/// Discards an entry the client cannot decode: an individual ack with `validation_error`
/// set, like upstream's `ConsumerImpl.discardCorruptedMessage`.
pub(crate) fn ack_discarded(
    consumer_id: u64,
    id: MessageId,
    error: proto::command_ack::ValidationError,
) -> Frame {
    ack(
        consumer_id,
        proto::command_ack::AckType::Individual,
        vec![id.entry().to_proto()],
        Some(error),
    )
}

fn ack(
    consumer_id: u64,
    ack_type: proto::command_ack::AckType,
    message_id: Vec<proto::MessageIdData>,
    validation_error: Option<proto::command_ack::ValidationError>,
) -> Frame {
    Frame::simple(BaseCommand {
        ack: Some(proto::CommandAck {
            consumer_id,
            ack_type: ack_type as i32,
            message_id,
            validation_error: validation_error.map(|e| e as i32),
            ..Default::default()
        }),
        ..base(Type::Ack)
    })
}

/// Asks the broker to redeliver these unacked messages (Shared / Key_Shared).
pub(crate) fn redeliver(consumer_id: u64, ids: &[MessageId]) -> Frame {
    Frame::simple(BaseCommand {
        redeliver_unacknowledged_messages: Some(proto::CommandRedeliverUnacknowledgedMessages {
            consumer_id,
            message_ids: ids.iter().map(|i| i.entry().to_proto()).collect(),
            ..Default::default()
        }),
        ..base(Type::RedeliverUnacknowledgedMessages)
    })
}

/// Asks the broker to redeliver every unacked message from the mark-delete position, under a
/// new consumer epoch (upstream `Commands.newRedeliverUnacknowledgedMessages(id, epoch)`).
pub(crate) fn redeliver_all(consumer_id: u64, consumer_epoch: u64) -> Frame {
    Frame::simple(BaseCommand {
        redeliver_unacknowledged_messages: Some(proto::CommandRedeliverUnacknowledgedMessages {
            consumer_id,
            consumer_epoch: Some(consumer_epoch),
            ..Default::default()
        }),
        ..base(Type::RedeliverUnacknowledgedMessages)
    })
}

/// Seek to a message id or a publish time.
pub(crate) fn seek(
    consumer_id: u64,
    request_id: u64,
    message_id: Option<MessageId>,
    publish_time_ms: Option<u64>,
) -> BaseCommand {
    BaseCommand {
        seek: Some(proto::CommandSeek {
            consumer_id,
            request_id,
            message_id: message_id.map(|m| m.to_proto()),
            message_publish_time: publish_time_ms,
        }),
        ..base(Type::Seek)
    }
}

/// GetLastMessageId.
pub(crate) fn get_last_message_id(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        get_last_message_id: Some(proto::CommandGetLastMessageId {
            consumer_id,
            request_id,
        }),
        ..base(Type::GetLastMessageId)
    }
}

/// Unsubscribe.
pub(crate) fn unsubscribe(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        unsubscribe: Some(proto::CommandUnsubscribe {
            consumer_id,
            request_id,
            ..Default::default()
        }),
        ..base(Type::Unsubscribe)
    }
}

/// What a CloseProducer / CloseConsumer / TopicMigrated from the broker asks of an entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerClose {
    /// False: closed for good (PIP-139).
    pub allow_reconnect: bool,
    /// PIP-307 / migration: the broker to reconnect to directly.
    pub assigned_broker: Option<String>,
    /// Why, for logs.
    pub reason: &'static str,
}

/// Reads a broker-initiated close of a producer or consumer (or a topic migration) out of an
/// inbound command; `None` for any other command.
pub(crate) fn broker_close(cmd: &BaseCommand) -> Option<BrokerClose> {
    let non_empty = |u: &Option<String>| u.clone().filter(|u| !u.is_empty());
    match Type::try_from(cmd.r#type).ok()? {
        Type::CloseProducer => cmd.close_producer.as_ref().map(|c| BrokerClose {
            allow_reconnect: c.allow_reconnect != Some(false),
            assigned_broker: non_empty(&c.assigned_broker_service_url),
            reason: "broker closed the producer",
        }),
        Type::CloseConsumer => cmd.close_consumer.as_ref().map(|c| BrokerClose {
            allow_reconnect: c.allow_reconnect != Some(false),
            assigned_broker: non_empty(&c.assigned_broker_service_url),
            reason: "broker closed the consumer",
        }),
        Type::TopicMigrated => cmd.topic_migrated.as_ref().map(|m| BrokerClose {
            allow_reconnect: true,
            assigned_broker: non_empty(&m.broker_service_url),
            reason: "topic migrated",
        }),
        _ => None,
    }
}

/// SEND of the messages with sequence ids `first..=last` (one entry: a message or a batch).
/// Without its `BaseCommand` envelope: [`crate::codec::encode_send`] writes that.
pub(crate) fn send(
    producer_id: u64,
    first: u64,
    last: u64,
    num_messages: usize,
) -> proto::CommandSend {
    proto::CommandSend {
        producer_id,
        sequence_id: first,
        num_messages: Some(i32::try_from(num_messages).unwrap_or(i32::MAX)),
        highest_sequence_id: (last != first).then_some(last),
        ..Default::default()
    }
}

/// SEND of one chunk of a chunked message (PIP-37): every chunk carries the message's sequence
/// id and `is_chunk`, like upstream `Commands.newSend` for a chunk.
pub(crate) fn send_chunk(producer_id: u64, sequence_id: u64) -> proto::CommandSend {
    proto::CommandSend {
        producer_id,
        sequence_id,
        num_messages: Some(1),
        is_chunk: Some(true),
        ..Default::default()
    }
}

/// PIP-247: watch the partition counts of `topics` (the full list, every time).
pub(crate) fn watch_partition_update(
    request_id: u64,
    watcher_id: u64,
    topics: impl IntoIterator<Item = String>,
) -> BaseCommand {
    BaseCommand {
        watch_partition_update: Some(proto::CommandWatchPartitionUpdate {
            request_id,
            watcher_id,
            topics: topics.into_iter().collect(),
        }),
        ..base(Type::WatchPartitionUpdate)
    }
}

/// PIP-247: the client's answer to one partition update version.
pub(crate) fn partition_update_result(
    watcher_id: u64,
    version: u64,
    error: Option<String>,
) -> BaseCommand {
    BaseCommand {
        partition_update_result: Some(proto::CommandPartitionUpdateResult {
            watcher_id,
            version,
            success: error.is_none(),
            error_message: error,
        }),
        ..base(Type::PartitionUpdateResult)
    }
}

/// PIP-247: close a partition watcher.
pub(crate) fn watch_partition_update_close(request_id: u64, watcher_id: u64) -> BaseCommand {
    BaseCommand {
        watch_partition_update_close: Some(proto::CommandWatchPartitionUpdateClose {
            request_id,
            watcher_id,
        }),
        ..base(Type::WatchPartitionUpdateClose)
    }
}

/// CommandGetSchema: the topic's schema at `version` (its latest without one).
pub(crate) fn get_schema(topic: &str, version: Option<&[u8]>, request_id: u64) -> BaseCommand {
    BaseCommand {
        get_schema: Some(proto::CommandGetSchema {
            request_id,
            topic: topic.to_string(),
            schema_version: version.map(bytes::Bytes::copy_from_slice),
        }),
        ..base(Type::GetSchema)
    }
}

/// CommandGetOrCreateSchema: registers `schema` on the topic (or finds it) and names its version.
pub(crate) fn get_or_create_schema(
    topic: &str,
    schema: proto::Schema,
    request_id: u64,
) -> BaseCommand {
    BaseCommand {
        get_or_create_schema: Some(proto::CommandGetOrCreateSchema {
            request_id,
            topic: topic.to_string(),
            schema,
            producer_name: None,
        }),
        ..base(Type::GetOrCreateSchema)
    }
}

/// GetTopicsOfNamespace: the topics of `namespace` in `mode`, filtered by the broker with
/// `pattern` and answered `changed = false` when the list still hashes to `hash`.
pub(crate) fn get_topics_of_namespace(
    request_id: u64,
    namespace: &str,
    mode: i32,
    pattern: &str,
    hash: Option<String>,
) -> BaseCommand {
    BaseCommand {
        get_topics_of_namespace: Some(proto::CommandGetTopicsOfNamespace {
            request_id,
            namespace: namespace.to_string(),
            mode: Some(mode),
            topics_pattern: Some(pattern.to_string()),
            topics_hash: hash,
            properties: Vec::new(),
        }),
        ..base(Type::GetTopicsOfNamespace)
    }
}

/// PIP-145: watch the topics of `namespace` matching `pattern`; `hash` (after a reconnect) is
/// the list the client holds, so the broker sends the topics only if they differ.
pub(crate) fn watch_topic_list(
    request_id: u64,
    watcher_id: u64,
    namespace: &str,
    pattern: &str,
    hash: Option<String>,
) -> BaseCommand {
    BaseCommand {
        watch_topic_list: Some(proto::CommandWatchTopicList {
            request_id,
            watcher_id,
            namespace: namespace.to_string(),
            topics_pattern: pattern.to_string(),
            topics_hash: hash,
        }),
        ..base(Type::WatchTopicList)
    }
}

/// PIP-145: stop a topic-list watcher.
pub(crate) fn watch_topic_list_close(request_id: u64, watcher_id: u64) -> BaseCommand {
    BaseCommand {
        watch_topic_list_close: Some(proto::CommandWatchTopicListClose {
            request_id,
            watcher_id,
        }),
        ..base(Type::WatchTopicListClose)
    }
}

/// PIP-31: connect to transaction coordinator `tc_id` on this connection (upstream
/// `Commands.newTcClientConnectRequest`).
#[cfg(feature = "transactions")]
pub(crate) fn tc_client_connect(tc_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        tc_client_connect_request: Some(proto::CommandTcClientConnectRequest {
            request_id,
            tc_id,
            ..Default::default()
        }),
        ..base(Type::TcClientConnectRequest)
    }
}

/// PIP-31: open a transaction on coordinator `tc_id` that it aborts after `timeout_ms`
/// (upstream `Commands.newTxn`: the field is named `txn_ttl_seconds` but carries
/// milliseconds).
#[cfg(feature = "transactions")]
pub(crate) fn new_txn(tc_id: u64, timeout_ms: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        new_txn: Some(proto::CommandNewTxn {
            request_id,
            txn_ttl_seconds: Some(timeout_ms),
            tc_id: Some(tc_id),
            ..Default::default()
        }),
        ..base(Type::NewTxn)
    }
}

/// PIP-31: register a partition the transaction produces to (upstream
/// `Commands.newAddPartitionToTxn`).
#[cfg(feature = "transactions")]
pub(crate) fn add_partition_to_txn(
    (most, least): (u64, u64),
    partition: &str,
    request_id: u64,
) -> BaseCommand {
    BaseCommand {
        add_partition_to_txn: Some(proto::CommandAddPartitionToTxn {
            request_id,
            txnid_least_bits: Some(least),
            txnid_most_bits: Some(most),
            partitions: vec![partition.to_owned()],
            ..Default::default()
        }),
        ..base(Type::AddPartitionToTxn)
    }
}

/// PIP-31: register a subscription the transaction acknowledges on (upstream
/// `Commands.newAddSubscriptionToTxn`).
#[cfg(feature = "transactions")]
pub(crate) fn add_subscription_to_txn(
    (most, least): (u64, u64),
    topic: &str,
    subscription: &str,
    request_id: u64,
) -> BaseCommand {
    BaseCommand {
        add_subscription_to_txn: Some(proto::CommandAddSubscriptionToTxn {
            request_id,
            txnid_least_bits: Some(least),
            txnid_most_bits: Some(most),
            subscription: vec![proto::Subscription {
                topic: topic.to_owned(),
                subscription: subscription.to_owned(),
            }],
            ..Default::default()
        }),
        ..base(Type::AddSubscriptionToTxn)
    }
}

/// PIP-31: commit (`commit = true`) or abort a transaction (upstream `Commands.newEndTxn`).
#[cfg(feature = "transactions")]
pub(crate) fn end_txn((most, least): (u64, u64), commit: bool, request_id: u64) -> BaseCommand {
    let action = if commit {
        proto::TxnAction::Commit
    } else {
        proto::TxnAction::Abort
    };
    BaseCommand {
        end_txn: Some(proto::CommandEndTxn {
            request_id,
            txnid_least_bits: Some(least),
            txnid_most_bits: Some(most),
            txn_action: Some(action as i32),
            ..Default::default()
        }),
        ..base(Type::EndTxn)
    }
}

#[cfg(feature = "transactions")]
/// The `ack_set` of a transactional ack of a message in a batch, as upstream's
/// `ConsumerImpl.doTransactionAcknowledgeForResponse`: bits `0..batch_size` set (a set bit is
/// a message this ack leaves alone), then the message's own bit cleared (individual) or
/// bits `0..=batch_index` cleared (cumulative: the entry's messages up to this one). `None`
/// (no set: the whole entry) for a message outside a batch, one of unknown size, or a
/// cumulative ack through the batch's last message (upstream's set is then empty, and an
/// empty `BitSet.toLongArray` puts no `ack_set` on the wire).
pub(crate) fn txn_ack_set(id: MessageId, cumulative: bool) -> Option<Vec<i64>> {
    if !id.is_batch() || id.batch_size <= 0 || id.batch_index >= id.batch_size {
        return None;
    }
    let (size, index) = (id.batch_size as usize, id.batch_index as usize);
    let mut set = vec![0u64; size.div_ceil(64)];
    for i in 0..size {
        let acked = if cumulative { i <= index } else { i == index };
        if !acked {
            set[i / 64] |= 1 << (i % 64);
        }
    }
    // Java's `BitSet.toLongArray` drops trailing zero words.
    while set.last() == Some(&0) {
        set.pop();
    }
    if set.is_empty() {
        return None;
    }
    Some(set.into_iter().map(|w| w as i64).collect())
}

/// PIP-31: a transactional ACK of one message, awaiting its ACK_RESPONSE by `request_id`
/// (upstream `ConsumerImpl.doTransactionAcknowledgeForResponse`: `Commands.newAck` with the
/// txn id and a request id, sent with `newAckForReceipt`): its entry, with an `ack_set` and
/// the batch size for a message in a batch (see [`txn_ack_set`]).
#[cfg(feature = "transactions")]
pub(crate) fn txn_ack(
    consumer_id: u64,
    id: MessageId,
    cumulative: bool,
    (most, least): (u64, u64),
    request_id: u64,
) -> BaseCommand {
    let ack_type = if cumulative {
        proto::command_ack::AckType::Cumulative
    } else {
        proto::command_ack::AckType::Individual
    };
    let mut data = id.entry().to_proto();
    if let Some(set) = txn_ack_set(id, cumulative) {
        data.ack_set = set;
        data.batch_size = Some(id.batch_size);
    }
    BaseCommand {
        ack: Some(proto::CommandAck {
            consumer_id,
            ack_type: ack_type as i32,
            message_id: vec![data],
            txnid_least_bits: Some(least),
            txnid_most_bits: Some(most),
            request_id: Some(request_id),
            ..Default::default()
        }),
        ..base(Type::Ack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_close_reads_pip139_and_pip307_fields() {
        let mut c = base(Type::CloseConsumer);
        c.close_consumer = Some(proto::CommandCloseConsumer {
            consumer_id: 1,
            allow_reconnect: Some(false),
            ..Default::default()
        });
        let bc = broker_close(&c).unwrap();
        assert!(!bc.allow_reconnect);
        let mut c = base(Type::CloseProducer);
        c.close_producer = Some(proto::CommandCloseProducer {
            assigned_broker_service_url: Some("pulsar://b:6650".into()),
            ..Default::default()
        });
        let bc = broker_close(&c).unwrap();
        assert!(bc.allow_reconnect);
        assert_eq!(bc.assigned_broker.as_deref(), Some("pulsar://b:6650"));
        assert!(broker_close(&ping()).is_none());
    }

    #[test]
    fn redeliver_all_carries_the_epoch_and_no_ids() {
        let f = redeliver_all(3, 7);
        let r = f.command.redeliver_unacknowledged_messages.unwrap();
        assert_eq!((r.consumer_id, r.consumer_epoch), (3, Some(7)));
        assert!(r.message_ids.is_empty());
    }

    #[test]
    fn discarded_entries_are_acked_with_their_validation_error() {
        let id = MessageId::new(5, 6, -1);
        let f = ack_discarded(
            2,
            id,
            proto::command_ack::ValidationError::DecompressionError,
        );
        let a = f.command.ack.unwrap();
        assert_eq!(
            a.validation_error,
            Some(proto::command_ack::ValidationError::DecompressionError as i32)
        );
        assert_eq!(a.message_id.len(), 1);
    }
}
