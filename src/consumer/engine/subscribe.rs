//! Subscribing: the SUBSCRIBE command, with PIP-245's durability rule.

use std::sync::Arc;

use crate::commands;
use crate::entity::CreateCommand;
use crate::message_id::MessageId;
use crate::proto;
use crate::topic::TopicName;

use crate::consumer::options::{ConsumerOptions, InitialPosition, SubscriptionMode};

/// Whether subscriptions on `topic` are durable, applying PIP-245: on a non-persistent topic
/// always non-durable, with one warning if the application explicitly asked for durable.
pub(crate) fn effective_durable(topic: &TopicName, opts: &ConsumerOptions) -> bool {
    if !topic.is_persistent() {
        if opts.subscription_mode == Some(SubscriptionMode::Durable) {
            tracing::warn!(
                topic = %topic,
                subscription = %opts.subscription,
                "a durable subscription was requested on a non-persistent topic; using a \
                 non-durable one (PIP-245)"
            );
        }
        return false;
    }
    opts.subscription_mode != Some(SubscriptionMode::NonDurable)
}

pub(crate) struct SubscribeParams<'a> {
    pub topic: &'a TopicName,
    pub consumer_id: u64,
    pub consumer_name: &'a str,
    pub opts: &'a ConsumerOptions,
    pub durable: bool,
    pub start: Option<MessageId>,
    /// `start_message_rollback_duration_sec` to send (0: none). Upstream sends it only while
    /// the consumer has not moved from its initial start (`ConsumerImpl.connectionOpened`).
    pub rollback_secs: u64,
    /// The consumer epoch (redeliver-all on Exclusive / Failover bumps it; upstream sends it
    /// on every subscribe).
    pub consumer_epoch: u64,
}

/// The SUBSCRIBE command of one attempt (PIP-245's durability already applied).
pub(crate) fn subscribe_command(p: &SubscribeParams<'_>) -> CreateCommand {
    use crate::proto::command_subscribe::InitialPosition as Ip;
    let o = p.opts;
    let key_shared =
        (o.subscription_type == crate::consumer::SubscriptionType::KeyShared).then(|| {
            proto::KeySharedMeta {
                key_shared_mode: proto::KeySharedMode::AutoSplit as i32,
                ..Default::default()
            }
        });
    let body = proto::CommandSubscribe {
        topic: p.topic.to_string(),
        subscription: o.subscription.clone(),
        sub_type: o.subscription_type.to_proto(),
        consumer_id: p.consumer_id,
        consumer_name: Some(p.consumer_name.to_string()),
        priority_level: o.priority_level,
        durable: Some(p.durable),
        start_message_id: p.start.map(|s| s.to_proto()),
        read_compacted: Some(o.read_compacted),
        start_message_rollback_duration_sec: (p.rollback_secs > 0).then_some(p.rollback_secs),
        initial_position: Some(match o.initial_position {
            InitialPosition::Latest => Ip::Latest,
            InitialPosition::Earliest => Ip::Earliest,
        } as i32),
        force_topic_creation: Some(o.force_topic_creation),
        key_shared_meta: key_shared,
        subscription_properties: o
            .subscription_properties
            .iter()
            .map(|(k, v)| proto::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        consumer_epoch: Some(p.consumer_epoch),
        // BYTES sends no schema (upstream ConsumerImpl drops BYTES/NONE schema infos).
        schema: o
            .schema
            .as_ref()
            .filter(|s| s.schema_type != crate::schema::SchemaType::Bytes)
            .map(|s| s.to_proto()),
        ..Default::default()
    };
    Arc::new(move |request_id| commands::subscribe(body.clone(), request_id))
}

/// Delivering *from* a chunked message's id (which names its last chunk) starts at its first
/// chunk, so the whole message is read (upstream `ConsumerImpl` seeks and starts inclusive
/// readers at a `ChunkMessageIdImpl`'s first chunk); delivering *after* it needs nothing.
fn from_first_chunk(s: MessageId, inclusive: bool) -> MessageId {
    match s.first_chunk_id() {
        Some(first) if inclusive => first,
        _ => s,
    }
}

/// Where a subscription created again after a lost connection starts, and the rollback it
/// asks for: `last` is the last message the application took, `held_from` the first chunk
/// of the earliest incomplete chunked message, `start` the start kept since the first
/// subscribe or the last seek. A durable subscription resumes where the broker says.
pub(crate) fn resubscribe_start(
    opts: &ConsumerOptions,
    durable: bool,
    last: Option<MessageId>,
    held_from: Option<MessageId>,
    start: Option<MessageId>,
) -> (Option<MessageId>, u64) {
    // Only while nothing was received and no seek moved the start (upstream
    // `ConsumerImpl.connectionOpened`: while `startMessageId` is still the initial one);
    // afterwards the reader resumes after what it received.
    let initial = opts
        .start_message_id
        .map(|s| start_position(s, opts.start_inclusive));
    let rollback_secs = if last.is_none() && held_from.is_none() && start == initial {
        opts.start_message_rollback_secs
    } else {
        0
    };
    if durable {
        return (None, rollback_secs);
    }
    // (A batch message id keeps its index: the broker then starts at that entry and the
    // filter drops what was already received.)
    let at = match (last, held_from) {
        // An incomplete chunked message whose first chunk came before the last message
        // received (chunks of messages from several producers interleave): resuming after
        // that message would never deliver the first chunk again, and the message would be
        // lost. Resume at that first chunk instead; the filter drops what the application
        // already received (it ends at or before `last`). Beyond upstream, whose reader
        // resumes after the last message dequeued.
        (Some(last), Some(first)) if first < last => Some(start_position(first, true)),
        _ => last.or(start),
    };
    (at, rollback_secs)
}

/// The start position a SUBSCRIBE of a non-durable subscription carries to deliver from `s`
/// (`inclusive`) or after it. The broker starts after a whole-entry id (upstream makes it the
/// mark-delete position of the new cursor), and at the entry of an id with a batch index; the
/// task's `skip_through` filter drops what precedes `s` in that entry.
pub(crate) fn start_position(s: MessageId, inclusive: bool) -> MessageId {
    let s = from_first_chunk(s, inclusive);
    if s.is_batch() || !inclusive || s == MessageId::EARLIEST || s == MessageId::LATEST {
        s
    } else {
        // One entry earlier (entry -1 of the ledger for its first entry).
        MessageId::new(s.ledger_id, s.entry_id.wrapping_sub(1), s.partition)
    }
}

/// What the task skips (messages at or before it) to deliver from `s` (`inclusive`) or
/// after it.
pub(crate) fn skip_through(s: MessageId, inclusive: bool) -> Option<MessageId> {
    let s = from_first_chunk(s, inclusive);
    if s == MessageId::EARLIEST || s == MessageId::LATEST {
        None
    } else if inclusive {
        previous_position(s)
    } else {
        Some(s)
    }
}

/// The position just before `id` (so that `id` itself is not skipped).
fn previous_position(id: MessageId) -> Option<MessageId> {
    if id.is_batch() && id.batch_index > 0 {
        Some(MessageId {
            batch_index: id.batch_index - 1,
            ..id
        })
    } else if id.entry_id > 0 {
        // Every message of the previous entry sorts at or before its whole-entry id.
        Some(MessageId::new(id.ledger_id, id.entry_id - 1, id.partition))
    } else {
        None
    }
}
