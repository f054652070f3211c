//! A consumer's partition tasks: subscribing one (partition) consumer and starting its task,
//! and adding partition tasks when the topic grows.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use super::acks::{AckTracker, NackTracker};
use super::task::{self, subscribe_command, ConsumerTask, Item, PartitionShared, SubscribeParams};
use super::{dlq, ConsumerOptions, Registry};
use crate::connection::EntityKind;
use crate::core::CoreRef;
use crate::entity::Entity;
use crate::error::Result;
use crate::lifecycle::GroupClose;
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// Puts a partition task in the registry at its index.
fn registry_insert(registry: &Registry, index: usize, shared: Arc<PartitionShared>) {
    super::registry::lock(registry).insert(index, shared);
}

/// Subscribes one (partition) consumer and starts its task. `options` are this partition's
/// (its receiver queue already bounded across partitions).
#[allow(clippy::too_many_arguments)]
pub(super) async fn spawn_partition(
    client: &CoreRef,
    topic: TopicName,
    base: &TopicName,
    partition: i32,
    index: usize,
    options: &Arc<ConsumerOptions>,
    consumer_name: &str,
    durable: bool,
    out: mpsc::UnboundedSender<(usize, u64, Item)>,
    group: &GroupClose,
    dlq: Option<Arc<dlq::DeadLetterSink>>,
    registry: &Registry,
    main: bool,
) -> Result<Arc<PartitionShared>> {
    let consumer_id = client.new_consumer_id();
    let start = options
        .start_message_id
        .map(|s| start_position(s, options.start_inclusive));
    let cmd = subscribe_command(&SubscribeParams {
        topic: &topic,
        consumer_id,
        consumer_name,
        opts: options,
        durable,
        start: if durable { None } else { start },
        rollback_secs: options.start_message_rollback_secs,
        consumer_epoch: 0,
    });
    let slot = crate::entity::Slot {
        kind: EntityKind::Consumer,
        id: consumer_id,
        // What the broker may push: the permits, plus the overshoot real dispatchers show.
        inbound_bound: (i64::from(options.receiver_queue_size)
            + task::overshoot_bound(options.receiver_queue_size))
        .try_into()
        .unwrap_or(usize::MAX),
    };
    let (entity, _) = Entity::create(client, topic.clone(), slot, cmd, group).await?;
    let (ops_tx, ops_rx) = super::ops::inbox();
    let shared = Arc::new(PartitionShared {
        partition,
        main,
        topic: topic.clone(),
        base: base.clone(),
        epoch: AtomicU64::new(0),
        permit_epoch: AtomicU64::new(0),
        last_dequeued: Mutex::new(None),
        durable,
        removed: std::sync::atomic::AtomicBool::new(false),
        ops: ops_tx,
        active: watch::Sender::new(None),
        state: entity.life.watch(),
        state_now: entity.life.now(),
        discarded: AtomicU64::new(0),
        stats: crate::stats::ConsumerCounters::new(
            entity.link.clone(),
            client.metric_labels,
            &topic,
            &options.subscription,
            options.receiver_queue_size,
        ),
        topic_deleted: std::sync::atomic::AtomicBool::new(false),
        reached_end: std::sync::atomic::AtomicBool::new(false),
        end_taken: std::sync::atomic::AtomicBool::new(false),
        end_epoch: AtomicU64::new(0),
        ended: super::registry::lock(registry).ended.clone(),
        room: Mutex::new(task::QueueRoom::default()),
        refill_at: (options.receiver_queue_size / 2).max(1),
    });
    // A reader skips what precedes its start position (and the start itself if exclusive).
    let skip_through = options
        .start_message_id
        .and_then(|s| skip_through(s, options.start_inclusive));
    let mut task = ConsumerTask {
        entity,
        partition,
        index,
        opts: options.clone(),
        consumer_name: consumer_name.to_string(),
        durable,
        ops: ops_rx,
        out,
        shared: shared.clone(),
        acks: AckTracker::new(options.ack_group_max).with_batch_index_ack(options.batch_index_ack),
        nacks: NackTracker::default(),
        ack_deadline: None,
        skip_through,
        permits: 0,
        consumer_epoch: 0,
        dlq: dlq.clone(),
        dlq_candidates: Default::default(),
        unacked: Default::default(),
        queued_messages: 0,
        over_delivered: 0,
        start,
        start_from_next: false,
        deferred: Vec::new(),
        chunks: super::chunks::ChunkAssembler::new(super::chunks::ChunkLimits::from_options(
            options,
        ))
        .with_memory_limit(client.memory.clone()),
        chunk_ids: Default::default(),
    };
    task.start_flow();
    registry_insert(registry, index, shared.clone());
    tracing::debug!(%topic, consumer_id, subscription = %options.subscription, "subscribed");
    let span = tracing::debug_span!("consumer", topic = %topic, id = consumer_id,
        subscription = %options.subscription);
    tokio::spawn(tracing::Instrument::instrument(task.run(), span));
    Ok(shared)
}

/// What a consumer needs to add partition tasks when its topic grows.
pub(super) struct GrowContext {
    pub(super) client: CoreRef,
    pub(super) topic: TopicName,
    pub(super) options: Arc<ConsumerOptions>,
    pub(super) consumer_name: String,
    pub(super) durable: bool,
    pub(super) out: mpsc::WeakUnboundedSender<(usize, u64, Item)>,
    pub(super) group: GroupClose,
    pub(super) dlq: Option<Arc<dlq::DeadLetterSink>>,
    pub(super) registry: Registry,
    pub(super) count: watch::Sender<usize>,
    pub(super) current: u32,
}

/// Adds partition consumers when the topic grows (PIP-247 updates or polling).
pub(super) async fn grow(
    mut ctx: GrowContext,
    mut rx: mpsc::UnboundedReceiver<crate::partitions::Grow>,
) {
    while let Some(req) = rx.recv().await {
        // The consumer is gone once nothing can receive its items.
        let Some(out) = ctx.out.upgrade() else { return };
        let mut result = Ok(());
        for i in ctx.current..req.partitions {
            let index = super::registry::lock(&ctx.registry).reserve(1).start;
            let created = Box::pin(spawn_partition(
                &ctx.client,
                ctx.topic.partition(i),
                &ctx.topic,
                i as i32,
                index,
                &ctx.options,
                &ctx.consumer_name,
                ctx.durable,
                out.clone(),
                &ctx.group,
                ctx.dlq.clone(),
                &ctx.registry,
                true,
            ))
            .await;
            match created {
                Ok(_) => ctx.current = i + 1,
                Err(e) => {
                    tracing::warn!(topic = %ctx.topic, partition = i, error = %e,
                        "could not subscribe to a new partition");
                    result = Err(e);
                    break;
                }
            }
        }
        ctx.count.send_replace(ctx.current as usize);
        let _ = req.done.send(result);
    }
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

/// The start position a SUBSCRIBE of a non-durable subscription carries to deliver from `s`
/// (`inclusive`) or after it. The broker starts after a whole-entry id (upstream makes it the
/// mark-delete position of the new cursor), and at the entry of an id with a batch index; the
/// task's `skip_through` filter drops what precedes `s` in that entry.
pub(super) fn start_position(s: MessageId, inclusive: bool) -> MessageId {
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
pub(super) fn skip_through(s: MessageId, inclusive: bool) -> Option<MessageId> {
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
