//! A consumer's partition tasks: subscribing one (partition) consumer and starting its task,
//! and adding partition tasks when the topic grows.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::connection::EntityKind;
use crate::consumer::engine::acks::Acks;
use crate::consumer::engine::dlq::DeadLetterSink;
use crate::consumer::engine::flow::{overshoot_bound, Flow, QueueRoom};
use crate::consumer::engine::intake::Intake;
use crate::consumer::engine::io::Io;
use crate::consumer::engine::subscribe::{
    skip_through, start_position, subscribe_command, SubscribeParams,
};
use crate::consumer::engine::ConsumerTask;
use crate::consumer::handle::PartitionShared;
use crate::consumer::{ConsumerOptions, Registry};
use crate::core::CoreRef;
use crate::entity::Entity;
use crate::error::Result;
use crate::lifecycle::GroupClose;
use crate::topic::TopicName;

/// Puts a partition task in the registry at its index.
fn registry_insert(registry: &Registry, index: usize, shared: Arc<PartitionShared>) {
    crate::consumer::topics::registry::lock(registry).insert(index, shared);
}

/// Subscribes one (partition) consumer and starts its task. `options` are this partition's
/// (its receiver queue already bounded across partitions).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn spawn_partition(
    client: &CoreRef,
    topic: TopicName,
    base: &TopicName,
    partition: i32,
    index: usize,
    options: &Arc<ConsumerOptions>,
    consumer_name: &str,
    durable: bool,
    out: crate::consumer::queue::QueueSender,
    group: &GroupClose,
    dlq: Option<Arc<DeadLetterSink>>,
    registry: &Registry,
    main: bool,
    budget: &Arc<crate::consumer::engine::budget::ConsumerBudget>,
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
            + overshoot_bound(options.receiver_queue_size))
        .try_into()
        .unwrap_or(usize::MAX),
        inbound_bytes: budget.channel_bytes(),
    };
    let (entity, _) = Entity::create(client, topic.clone(), slot, cmd, group).await?;
    let (ops_tx, ops_rx) = crate::consumer::op::inbox();
    let shared = Arc::new(PartitionShared {
        partition,
        main,
        topic: topic.clone(),
        base: base.clone(),
        epoch: AtomicU64::new(0),
        cluster: AtomicU64::new(entity.generation()),
        client_cluster: client.pool.generation_cell(),
        permit_epoch: AtomicU64::new(0),
        last_dequeued: Mutex::new(None),
        durable,
        ops: ops_tx,
        active: watch::Sender::new(None),
        state: entity.life.now(),
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
        end_epoch: AtomicU64::new(0),
        ended: crate::consumer::topics::registry::lock(registry)
            .ended
            .clone(),
        room: Mutex::new(QueueRoom {
            scaled_refill_at: if options.auto_scaled_receiver_queue_size {
                crate::consumer::engine::flow::refill_at(task_start_size(options))
            } else {
                0
            },
            ..QueueRoom::default()
        }),
        refill_at: crate::consumer::engine::flow::refill_at(options.receiver_queue_size),
        handles: Default::default(),
    });
    // A reader skips what precedes its start position (and the start itself if exclusive).
    let skip_through = options
        .start_message_id
        .and_then(|s| skip_through(s, options.start_inclusive));
    let mut task = ConsumerTask {
        io: Io {
            entity,
            partition,
            index,
            opts: options.clone(),
            out,
            shared: shared.clone(),
        },
        consumer_name: consumer_name.to_string(),
        durable,
        ops: ops_rx,
        acks: Acks::new(options),
        flow: Flow::new(budget),
        intake: Intake {
            skip_through,
            consumer_epoch: 0,
            dlq: dlq.clone(),
            dlq_candidates: Default::default(),
            queued_messages: 0,
            start,
            start_from_next: false,
            end_queued: false,
            chunks: crate::consumer::engine::chunks::ChunkAssembler::new(
                crate::consumer::engine::chunks::ChunkLimits::from_options(options),
            )
            .with_budget(budget.clone(), index),
            chunk_ids: Default::default(),
            crypto: crate::consumer::engine::key_wait::CryptoIntake::new(options),
        },
        over_delivered: 0,
        seeks: Default::default(),
    };
    task.flow.no_slow_start = !task.io.persistent();
    task.flow.zero_queue = options.receiver_queue_size == 0;
    task.flow.auto = options
        .auto_scaled_receiver_queue_size
        .then(|| crate::consumer::engine::flow::AutoScale::new(options));
    task.flow.start(&mut task.io);
    registry_insert(registry, index, shared.clone());
    tracing::debug!(%topic, consumer_id, subscription = %options.subscription, "subscribed");
    let span = tracing::debug_span!("consumer", topic = %topic, id = consumer_id,
        subscription = %options.subscription);
    tokio::spawn(tracing::Instrument::instrument(task.run(), span));
    Ok(shared)
}

/// What a consumer needs to add partition tasks when its topic grows.
pub(crate) struct GrowContext {
    pub(crate) client: CoreRef,
    pub(crate) topic: TopicName,
    pub(crate) options: Arc<ConsumerOptions>,
    pub(crate) consumer_name: String,
    pub(crate) durable: bool,
    pub(crate) out: crate::consumer::queue::WeakQueueSender,
    pub(crate) group: GroupClose,
    pub(crate) dlq: Option<Arc<DeadLetterSink>>,
    pub(crate) registry: Registry,
    pub(crate) count: watch::Sender<usize>,
    pub(crate) current: u32,
    /// The consumer's byte budget (one for all its tasks).
    pub(crate) budget: Arc<crate::consumer::engine::budget::ConsumerBudget>,
}

/// Adds partition consumers when the topic grows (PIP-247 updates or polling).
pub(crate) async fn grow(
    mut ctx: GrowContext,
    mut rx: mpsc::UnboundedReceiver<crate::partitions::Grow>,
) {
    while let Some(req) = rx.recv().await {
        // The consumer is gone once nothing can receive its items.
        let Some(out) = ctx.out.upgrade() else { return };
        let mut result = Ok(());
        for i in ctx.current..req.partitions {
            let index = crate::consumer::topics::registry::lock(&ctx.registry)
                .reserve(1)
                .start;
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
                &ctx.budget,
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
        if let Some(c) = &ctx.options.interceptors {
            c.on_partitions_change(&ctx.topic, ctx.current);
        }
        let _ = req.done.send(result);
    }
}

/// The size an auto-scaled receiver queue starts at (see `flow::auto_scale`).
fn task_start_size(options: &crate::consumer::ConsumerOptions) -> u32 {
    crate::consumer::engine::flow::AutoScale::new(options).current
}
