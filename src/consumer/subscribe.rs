//! Subscribing: the SUBSCRIBE command (with PIP-245's durability rule), the first FLOW, and
//! the connect-register-subscribe attempt with retries.

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::Client;
use crate::codec::Frame;
use crate::connection::{Connection, EntityEvent, EntityKind};
use crate::error::Result;
use crate::message_id::MessageId;
use crate::proto::{self, base_command::Type, BaseCommand};
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;

use super::options::{ConsumerOptions, InitialPosition, SubscriptionMode};

/// Capacity of a consumer's event channel from its connection: the flow permits bound what
/// the broker pushes, plus room for control commands.
pub(crate) fn event_queue(opts: &ConsumerOptions) -> usize {
    opts.receiver_queue_size as usize + 64
}

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
}

fn subscribe_command(p: &SubscribeParams<'_>, request_id: u64) -> BaseCommand {
    use crate::proto::command_subscribe::InitialPosition as Ip;
    let o = p.opts;
    let key_shared =
        (o.subscription_type == super::SubscriptionType::KeyShared).then(|| proto::KeySharedMeta {
            key_shared_mode: proto::KeySharedMode::AutoSplit as i32,
            ..Default::default()
        });
    BaseCommand {
        r#type: Type::Subscribe as i32,
        subscribe: Some(proto::CommandSubscribe {
            topic: p.topic.to_string(),
            subscription: o.subscription.clone(),
            sub_type: o.subscription_type.to_proto(),
            consumer_id: p.consumer_id,
            request_id,
            consumer_name: Some(p.consumer_name.to_string()),
            priority_level: o.priority_level,
            durable: Some(p.durable),
            start_message_id: p.start.map(|s| s.to_proto()),
            read_compacted: Some(o.read_compacted),
            initial_position: Some(match o.initial_position {
                InitialPosition::Latest => Ip::Latest,
                InitialPosition::Earliest => Ip::Earliest,
            } as i32),
            force_topic_creation: Some(true),
            key_shared_meta: key_shared,
            subscription_properties: o
                .subscription_properties
                .iter()
                .map(|(k, v)| proto::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn flow_frame(consumer_id: u64, permits: u32) -> Frame {
    Frame::simple(BaseCommand {
        r#type: Type::Flow as i32,
        flow: Some(proto::CommandFlow {
            consumer_id,
            message_permits: permits,
        }),
        ..Default::default()
    })
}

/// Looks up, registers and subscribes, retrying retriable failures until `deadline`.
pub(crate) async fn connect_and_subscribe(
    client: &Client,
    p: &SubscribeParams<'_>,
    deadline: Instant,
    direct: Option<&ServiceUrl>,
) -> Result<(Connection, mpsc::Receiver<EntityEvent>)> {
    let mut backoff = client.backoff();
    loop {
        let attempt = async {
            let conn = match direct {
                Some(url) => client.connection_to(url).await?,
                None => client.connection_for(p.topic).await?,
            };
            let (tx, rx) = mpsc::channel(event_queue(p.opts));
            conn.register(EntityKind::Consumer, p.consumer_id, tx)?;
            let request_id = conn.new_request_id();
            let result = conn
                .request(request_id, subscribe_command(p, request_id), "subscribe")
                .await;
            match result {
                Ok(_) => {
                    conn.send(flow_frame(p.consumer_id, p.opts.receiver_queue_size))
                        .await?;
                    Ok((conn, rx))
                }
                Err(e) => {
                    conn.unregister(EntityKind::Consumer, p.consumer_id);
                    Err(e)
                }
            }
        };
        let err = match attempt.await {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        let delay = backoff.next_delay();
        if !err.is_retriable() || Instant::now() + delay >= deadline {
            return Err(err);
        }
        tracing::debug!(topic = %p.topic, error = %err, ?delay, "subscribe failed; retrying");
        tokio::time::sleep(delay).await;
    }
}
