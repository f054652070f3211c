//! Subscribing one topic of a consumer: the unit a single-topic, multi-topic
//! ([`ConsumerBuilder::topics`](crate::consumer::ConsumerBuilder::topics)) and pattern consumer are made
//! of. Each topic is a [`TopicGroup`]: its partition tasks (and its retry topic's), its
//! dead-letter sink and its partition-growth registration. Every task of every topic feeds the
//! consumer's one queue and sits in its one [`Registry`], so receiving, acking, seeking and
//! closing work across topics the way they work across partitions.
//!
//! Like upstream's `MultiTopicsConsumerImpl`, each topic is an independent consumer on the
//! broker with its own flow permits (its receiver queue), and the handle reads one queue that
//! the tasks fill in arrival order. A busy topic cannot starve a quiet one: it can hold at most
//! its own receiver queue's worth of messages ahead of the quiet topic's next message, and it
//! gets no more permits until the application took them.

use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};

use crate::consumer::engine::dlq::DeadLetterSink;
use crate::consumer::engine::start::{grow, spawn_partition, GrowContext};
use crate::consumer::engine::subscribe::effective_durable;
use crate::consumer::handle::PartitionShared;
use crate::consumer::op::ConsumerOp;
use crate::consumer::topics::registry::{self, Registry};
use crate::consumer::{dlq, ConsumerOptions, DeadLetterPolicy, SubscriptionType};
use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::lifecycle::GroupClose;
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// What every topic of one consumer shares.
#[derive(Debug, Clone)]
pub(crate) struct SubscribeContext {
    pub client: CoreRef,
    pub options: Arc<ConsumerOptions>,
    pub consumer_name: String,
    pub out: crate::consumer::queue::WeakQueueSender,
    pub registry: Registry,
    /// The consumer's one byte budget: every task of every topic draws on it, so the
    /// per-topic receiver queues of a multi-topic or pattern consumer are bounded in bytes
    /// together, not each on its own.
    pub budget: Arc<crate::consumer::engine::budget::ConsumerBudget>,
}

impl SubscribeContext {
    /// The context and the sender its tasks feed (hold it until the first topics are live).
    pub(crate) fn new(
        client: CoreRef,
        mut options: ConsumerOptions,
    ) -> (
        Self,
        crate::consumer::queue::QueueSender,
        crate::consumer::queue::QueueReceiver,
    ) {
        if options.retry_enable && options.dead_letter_policy.is_none() {
            // Upstream's bound on retries without a policy (MAX_RECONSUMETIMES).
            options.dead_letter_policy = Some(DeadLetterPolicy::new(16));
        }
        let consumer_name = options
            .consumer_name
            .clone()
            .unwrap_or_else(|| format!("consumer-{:08x}", crate::consumer::rand_u32()));
        let (tx, rx) = crate::consumer::queue::channel();
        let budget =
            crate::consumer::engine::budget::ConsumerBudget::new(client.consumer_share.clone());
        let ctx = SubscribeContext {
            budget,
            client,
            options: Arc::new(options),
            consumer_name,
            out: tx.downgrade(),
            registry: Arc::new(Mutex::new(registry::Tasks::default())),
        };
        (ctx, tx, rx)
    }
}

/// One topic of a consumer (see the module docs).
#[derive(Debug)]
pub(crate) struct TopicGroup {
    pub topic: TopicName,
    /// Dead-letter / retry publishing for this topic's messages.
    pub sink: Option<Arc<DeadLetterSink>>,
    /// The topic's partition count (0 if not partitioned), growing with it.
    pub count: watch::Receiver<usize>,
    /// Keeps the topic registered for partition updates.
    pub _registration: Option<crate::partitions::Registration>,
}

impl TopicGroup {
    /// This topic's tasks (its partitions and its retry topic's), with their indexes.
    pub(crate) fn tasks(&self, registry: &Registry) -> Vec<(usize, Arc<PartitionShared>)> {
        registry::lock(registry)
            .entries()
            .filter(|(_, p)| p.base == self.topic)
            .map(|(i, p)| (i, p.clone()))
            .collect()
    }

    /// Closes this topic's tasks and forgets them (a pattern consumer dropping a topic that was
    /// deleted or no longer matches). Messages of it still queued are discarded by the handle
    /// (their index no longer resolves); the broker redelivers what was not acked.
    pub(crate) async fn close(self, registry: &Registry) {
        let tasks = self.tasks(registry);
        let closes = tasks.iter().map(|(_, p)| async move {
            let (tx, rx) = oneshot::channel();
            if p.send_control(ConsumerOp::Close(tx)).await.is_ok() {
                let _ = rx.await;
            }
        });
        futures::future::join_all(closes).await;
        {
            let mut r = registry::lock(registry);
            for (i, _) in &tasks {
                r.remove(*i);
            }
        }
        if let Some(sink) = &self.sink {
            sink.close().await;
        }
    }
}

/// Subscribes `topic` (all its partitions, and its retry topic with `retry_enable`) for the
/// consumer described by `ctx`. On failure nothing of it is left running.
pub(crate) async fn subscribe_topic(
    ctx: &SubscribeContext,
    topic: TopicName,
) -> Result<TopicGroup> {
    let client = &ctx.client;
    let options = &ctx.options;
    // A partition's own name (a pattern consumer lists partitions one by one, like upstream
    // brokers) is subscribed as one topic without asking for its metadata.
    let partitions = if topic.is_partition() {
        0
    } else {
        // Without forcing topic creation (a pattern consumer), the metadata request must not
        // create the topic either, like upstream's `subscribeAsync(topic,
        // createTopicIfDoesNotExist)` (PIP-344): a listed topic deleted since stays deleted.
        client
            .partitioned_metadata_of(&topic, options.force_topic_creation)
            .await?
    };
    if partitions > 0 && options.receiver_queue_size == 0 {
        return Err(crate::consumer::options::zero_queue_refused(&format!(
            "{topic}, a partitioned topic ({partitions} partitions)"
        )));
    }
    if partitions > 0 {
        if let Some(start) = options.start_message_id {
            // Upstream PulsarClientImpl.createReaderAsync: a reader of a partitioned topic
            // starts at earliest or latest only (an id names one partition's position).
            if start != MessageId::EARLIEST && start != MessageId::LATEST {
                return Err(Error::InvalidConfig(format!(
                    "the partitioned topic startMessageId is illegal: {topic} has \
                     {partitions} partitions; a reader of a partitioned topic starts at \
                     earliest or latest (then seek a partition by id)"
                )));
            }
        }
    }
    let main_options = Arc::new(options.for_partitions(partitions));
    let mut names: Vec<(TopicName, i32)> = if partitions == 0 {
        vec![(topic.clone(), -1)]
    } else {
        (0..partitions)
            .map(|i| (topic.partition(i), i as i32))
            .collect()
    };
    let main_count = names.len();
    let shared_type = matches!(
        options.subscription_type,
        SubscriptionType::Shared | SubscriptionType::KeyShared
    );
    // The dead-letter and retry topics' publisher. `reconsume_later` works on every
    // subscription type, like Java and Go (the retry topic is subscribed on all of them);
    // dead-lettering after too many redeliveries applies to Shared and Key_Shared only,
    // like upstream (Exclusive / Failover redeliver by rewinding, without counts). A
    // multi-topic consumer has one per topic, like upstream's per-topic ConsumerImpl.
    let sink = options
        .dead_letter_policy
        .clone()
        .filter(|_| shared_type || options.retry_enable)
        .map(|policy| {
            Arc::new(DeadLetterSink::new(
                client.clone(),
                &topic,
                &options.subscription,
                &ctx.consumer_name,
                policy,
                options.schema.clone(),
            ))
        });
    let dlq = sink.clone().filter(|_| shared_type);
    let mut retry_options = None;
    if options.retry_enable {
        let retry_topic = match &sink {
            Some(sink) => TopicName::new(&sink.retry_topic)?,
            None => TopicName::new(&dlq::default_topic(&topic, &options.subscription, "-RETRY"))?,
        };
        let n = client.partitioned_metadata_of(&retry_topic, true).await?;
        let mut retry = options.for_partitions(n);
        // The retry topic is the consumer's own: subscribed creating it if it does not exist
        // yet (Java creates it with the retry producer or the subscribe). A pattern consumer
        // subscribes its topics without creating them, and its retry topic did not exist
        // until the first retry: every matching topic was dropped as "not found", and
        // `subscribe()` returned a consumer of zero topics.
        retry.force_topic_creation = true;
        retry_options = Some(Arc::new(retry));
        if n == 0 {
            names.push((retry_topic, -1));
        } else {
            names.extend((0..n).map(|i| (retry_topic.partition(i), i as i32)));
        }
    }
    let durable = effective_durable(&topic, options);
    let Some(out) = ctx.out.upgrade() else {
        return Err(Error::Closed);
    };
    // One group per topic: a topic closed for good by the broker (PIP-139) closes its
    // partitions together, not the consumer's other topics. A non-partitioned topic without
    // a retry topic is a group of one (it never gains partitions).
    let group = if partitions == 0 && names.len() == 1 {
        GroupClose::solo()
    } else {
        GroupClose::new()
    };
    let first = registry::lock(&ctx.registry).reserve(names.len()).start;
    // Indexed, not `names.iter()`: a closure over borrowed items makes this future
    // non-`Send` (rustc cannot prove the higher-ranked bound), and applications spawn
    // subscribes.
    let creates = (0..names.len()).map(|k| {
        let (t, partition) = &names[k];
        Box::pin(spawn_partition(
            client,
            t.clone(),
            &topic,
            *partition,
            first + k,
            match &retry_options {
                Some(retry) if k >= main_count => retry,
                _ => &main_options,
            },
            &ctx.consumer_name,
            durable,
            out.clone(),
            &group,
            dlq.clone(),
            &ctx.registry,
            k < main_count,
            &ctx.budget,
        ))
    });
    let (shared, failure) = crate::entity::create_all(creates).await;
    if let Some(e) = failure {
        for s in &shared {
            let (t, _r) = oneshot::channel();
            let _ = s.send_control(ConsumerOp::Close(t)).await;
        }
        {
            let mut r = registry::lock(&ctx.registry);
            for k in 0..names.len() {
                r.remove(first + k);
            }
        }
        return Err(e);
    }
    let (count_tx, count) = watch::channel(partitions as usize);
    let registration = if partitions > 0 && options.auto_update_partitions {
        let (r, grow_rx) = client
            .partition_updates()
            .register(client, &topic, partitions);
        let grow_ctx = GrowContext {
            client: client.clone(),
            topic: topic.clone(),
            options: main_options.clone(),
            consumer_name: ctx.consumer_name.clone(),
            durable,
            out: ctx.out.clone(),
            group: group.clone(),
            dlq: dlq.clone(),
            registry: ctx.registry.clone(),
            count: count_tx,
            current: partitions,
            budget: ctx.budget.clone(),
        };
        tokio::spawn(grow(grow_ctx, grow_rx));
        Some(r)
    } else {
        None
    };
    Ok(TopicGroup {
        topic,
        sink,
        count,
        _registration: registration,
    })
}

/// Subscribes every topic of `topics` (at most a few at a time); on any failure closes what
/// was subscribed and returns the first error.
pub(crate) async fn subscribe_all(
    ctx: &SubscribeContext,
    topics: Vec<TopicName>,
) -> Result<Vec<TopicGroup>> {
    let creates = topics
        .into_iter()
        .map(|t| Box::pin(subscribe_topic(ctx, t)));
    let (groups, failure) = crate::entity::create_all(creates).await;
    if let Some(e) = failure {
        for g in groups {
            g.close(&ctx.registry).await;
        }
        return Err(e);
    }
    Ok(groups)
}
