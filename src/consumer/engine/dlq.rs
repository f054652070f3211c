//! The task's side of dead-letter and retry-letter topics (PIP-124): the producers that
//! publish to them (see `consumer::dlq` for the policy and what the messages carry).

use std::time::Duration;

use tokio::sync::OnceCell;

use crate::consumer::dlq::*;
use crate::consumer::op::ConsumerOp;
use crate::core::CoreRef;
use crate::error::Result;
use crate::message::{Message, ProducerMessage};
use crate::producer::Producer;
use crate::producer::ProducerBuilder;
use crate::topic::TopicName;

/// Publishes dead-lettered and retried messages for one consumer.
#[derive(Debug)]
pub(crate) struct DeadLetterSink {
    client: CoreRef,
    pub policy: DeadLetterPolicy,
    pub dlq_topic: String,
    pub retry_topic: String,
    subscription: String,
    /// The dead-letter producer's name (see [`dlq_producer_name`]).
    dlq_producer_name: String,
    dlq: OnceCell<Producer>,
    retry: OnceCell<Producer>,
    /// The schema the dead-letter and retry producers register: the consumer's, like
    /// upstream's `Schema.AUTO_PRODUCE_BYTES(schema)` producers (the payloads are passed on
    /// as they are). None for AUTO_CONSUME, whose info is no writer schema.
    schema: Option<crate::schema::SchemaInfo>,
}

impl DeadLetterSink {
    pub(crate) fn new(
        client: CoreRef,
        topic: &TopicName,
        subscription: &str,
        consumer_name: &str,
        policy: DeadLetterPolicy,
        schema: Option<crate::schema::SchemaInfo>,
    ) -> Self {
        let dlq_topic = policy
            .dead_letter_topic
            .clone()
            .unwrap_or_else(|| default_topic(topic, subscription, "-DLQ"));
        let retry_topic = policy
            .retry_letter_topic
            .clone()
            .unwrap_or_else(|| default_topic(topic, subscription, "-RETRY"));
        DeadLetterSink {
            client,
            policy,
            dlq_topic,
            retry_topic,
            subscription: subscription.to_string(),
            dlq_producer_name: dlq_producer_name(topic, subscription, consumer_name),
            dlq: OnceCell::new(),
            retry: OnceCell::new(),
            schema: schema.filter(|s| s.schema_type != crate::schema::SchemaType::AutoConsume),
        }
    }

    async fn dlq_producer(&self) -> Result<&Producer> {
        self.dlq
            .get_or_try_init(|| async {
                let mut b = ProducerBuilder::new(self.client.clone(), self.dlq_topic.clone())
                    .name(self.dlq_producer_name.clone())
                    .batching(false)
                    .chunking(persistent(&self.dlq_topic))
                    .schema_info(self.schema.clone());
                if let Some(sub) = &self.policy.initial_subscription_name {
                    b = b.initial_subscription_name(sub);
                }
                b.create().await
            })
            .await
    }

    async fn retry_producer(&self) -> Result<&Producer> {
        self.retry
            .get_or_try_init(|| async {
                ProducerBuilder::new(self.client.clone(), self.retry_topic.clone())
                    .batching(false)
                    .chunking(persistent(&self.retry_topic))
                    .schema_info(self.schema.clone())
                    .create()
                    .await
            })
            .await
    }

    /// The message to publish: the original payload, key, properties and event time, plus
    /// where it came from.
    fn letter(&self, msg: &Message) -> ProducerMessage {
        let mut out = ProducerMessage::new(msg.payload.clone());
        out.key = msg.key.clone();
        // A binary key (separated key/value schema) stays binary (upstream copies `keyBytes`
        // when the key is base64-encoded).
        out.key_b64_encoded = msg.key_b64_encoded;
        out.ordering_key = msg.ordering_key.clone();
        out.event_time = msg.event_time;
        out.properties = msg.properties.clone();
        out.properties
            .entry(REAL_TOPIC.into())
            .or_insert_with(|| msg.topic.partitioned_topic_name().to_string());
        out.properties
            .entry(REAL_SUBSCRIPTION.into())
            .or_insert_with(|| self.subscription.clone());
        out.properties
            .entry(ORIGIN_MESSAGE_ID.into())
            .or_insert_with(|| msg.id.to_string());
        out
    }

    /// Publishes `msg` to the dead-letter topic.
    pub(crate) async fn dead_letter(&self, msg: &Message) -> Result<()> {
        self.publish_dead_letter(self.letter(msg)).await
    }

    async fn publish_dead_letter(&self, letter: ProducerMessage) -> Result<()> {
        let producer = self.dlq_producer().await?;
        producer.send_and_wait(letter).await.map(|_| ())
    }

    /// Publishes `msg` to the retry topic (or, past the maximum, to the dead-letter topic).
    /// Returns true when it went to the dead-letter topic.
    ///
    /// Like upstream's `ConsumerImpl.doReconsumeLater`, RECONSUMETIMES and DELAY_TIME are set
    /// to this call's values first, so the dead-letter copy made after the last retry carries
    /// them too (the count past the maximum, and this call's delay), not the previous retry's.
    pub(crate) async fn retry_later(&self, msg: &Message, delay: Duration) -> Result<bool> {
        let times = msg
            .properties
            .get(RECONSUME_TIMES)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
            .saturating_add(1);
        let mut letter = self.letter(msg);
        letter
            .properties
            .insert(RECONSUME_TIMES.into(), times.to_string());
        letter
            .properties
            .insert(DELAY_TIME.into(), delay.as_millis().to_string());
        if times > self.policy.max_redeliver_count {
            // Delivered at once: the dead-letter topic is not delayed.
            self.publish_dead_letter(letter).await?;
            return Ok(true);
        }
        let producer = self.retry_producer().await?;
        producer.send_and_wait(letter.deliver_after(delay)).await?;
        Ok(false)
    }

    pub(crate) async fn close(&self) {
        if let Some(p) = self.dlq.get() {
            let _ = p.close().await;
        }
        if let Some(p) = self.retry.get() {
            let _ = p.close().await;
        }
    }
}

/// Dead-letters `msg` in the background, then acks it on its topic; if publishing fails, asks
/// for a normal redelivery instead (nothing is lost).
pub(crate) fn spawn_dead_letter(
    sink: std::sync::Arc<DeadLetterSink>,
    msg: Message,
    partition: std::sync::Arc<crate::consumer::handle::PartitionShared>,
) {
    tokio::spawn(async move {
        match sink.dead_letter(&msg).await {
            Ok(()) => {
                partition.stats.dead_lettered();
                tracing::info!(topic = %msg.topic, id = %msg.id, dlq = %sink.dlq_topic,
                    redelivery_count = msg.redelivery_count, "message dead-lettered");
                let _ = partition.send_op(ConsumerOp::Ack(msg.id));
            }
            Err(e) => {
                tracing::warn!(topic = %msg.topic, id = %msg.id, error = %e,
                    "dead-letter publish failed; the message stays for redelivery");
                let _ = partition.send_op(ConsumerOp::Redeliver(msg.id));
            }
        }
    });
}

/// Whether `topic` names a persistent topic (upstream's DLQ and retry producers chunk; chunking
/// needs a persistent topic). An invalid name is left for `create` to report.
fn persistent(topic: &str) -> bool {
    crate::topic::TopicName::new(topic).is_ok_and(|t| t.is_persistent())
}
