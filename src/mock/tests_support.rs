//! Command builders and a raw-client wrapper for the in-memory broker tests.

use bytes::Bytes;
use tokio::io::DuplexStream;

use super::tests::{RawClient, WAIT};
use super::wire::{self, base_command::Type, command_subscribe::SubType};
use super::MockBroker;

pub(super) const TOPIC: &str = "persistent://public/default/t";

/// A handshaken raw client over a duplex pipe.
pub(super) struct Client {
    pub(super) raw: RawClient<DuplexStream>,
    next_request: u64,
}

/// A MESSAGE as received.
#[derive(Debug)]
pub(super) struct Delivery {
    pub(super) message: wire::CommandMessage,
    pub(super) metadata: wire::MessageMetadata,
    pub(super) payload: Bytes,
}

impl Delivery {
    pub(super) fn entry(&self) -> u64 {
        self.message.message_id.entry_id
    }
}

fn base(ty: Type) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

/// Message metadata as a producer sends it.
pub(super) fn metadata(
    producer: &str,
    sequence_id: u64,
    key: Option<&str>,
) -> wire::MessageMetadata {
    wire::MessageMetadata {
        producer_name: producer.into(),
        sequence_id,
        publish_time: 1_000 + sequence_id,
        partition_key: key.map(Into::into),
        ..Default::default()
    }
}

pub(super) fn subscribe_cmd(
    topic: &str,
    subscription: &str,
    sub_type: SubType,
    consumer_id: u64,
    request_id: u64,
) -> wire::CommandSubscribe {
    wire::CommandSubscribe {
        topic: topic.into(),
        subscription: subscription.into(),
        sub_type: sub_type as i32,
        consumer_id,
        request_id,
        consumer_name: Some(format!("consumer-{consumer_id}")),
        initial_position: Some(wire::command_subscribe::InitialPosition::Earliest as i32),
        ..Default::default()
    }
}

impl Client {
    pub(super) async fn connect(broker: &MockBroker) -> Client {
        let mut raw = RawClient::new(broker.connect_duplex());
        raw.handshake().await;
        Client {
            raw,
            next_request: 100,
        }
    }

    /// Connects with a token: the broker takes `token` as the connection's role.
    pub(super) async fn connect_as(broker: &MockBroker, token: &str) -> Client {
        let mut raw = RawClient::new(broker.connect_duplex());
        raw.send(wire::BaseCommand {
            connect: Some(wire::CommandConnect {
                client_version: "raw-test".into(),
                protocol_version: Some(21),
                auth_method_name: Some("token".into()),
                auth_data: Some(Bytes::copy_from_slice(token.as_bytes())),
                ..Default::default()
            }),
            ..base(Type::Connect)
        })
        .await;
        raw.expect(Type::Connected).await;
        Client {
            raw,
            next_request: 100,
        }
    }

    /// Waits an hour (not 5 s) for each frame: for tests with paused (virtual) time.
    pub(super) fn patient(mut self) -> Client {
        self.raw = self.raw.patient();
        self
    }

    pub(super) fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// Sends a request and returns the response (the next frame).
    pub(super) async fn request(&mut self, cmd: wire::BaseCommand) -> wire::BaseCommand {
        self.raw.send(cmd).await;
        self.raw.recv().await.expect("connection closed")
    }

    pub(super) async fn producer_with(&mut self, cmd: wire::CommandProducer) -> wire::BaseCommand {
        self.request(wire::BaseCommand {
            producer: Some(cmd),
            ..base(Type::Producer)
        })
        .await
    }

    /// Creates producer `producer_id` on `topic`; returns PRODUCER_SUCCESS.
    pub(super) async fn producer(
        &mut self,
        topic: &str,
        producer_id: u64,
    ) -> wire::CommandProducerSuccess {
        let request_id = self.request_id();
        let resp = self
            .producer_with(wire::CommandProducer {
                topic: topic.into(),
                producer_id,
                request_id,
                ..Default::default()
            })
            .await;
        let ok = resp.producer_success.expect("PRODUCER_SUCCESS");
        assert_eq!(ok.request_id, request_id);
        ok
    }

    /// Sends one message (no wait for the receipt).
    pub(super) async fn send(
        &mut self,
        producer_id: u64,
        metadata: wire::MessageMetadata,
        payload: &'static [u8],
    ) {
        let cmd = wire::BaseCommand {
            send: Some(wire::CommandSend {
                producer_id,
                sequence_id: metadata.sequence_id,
                num_messages: metadata.num_messages_in_batch,
                ..Default::default()
            }),
            ..base(Type::Send)
        };
        self.raw
            .send_with_payload(cmd, metadata, Bytes::from_static(payload))
            .await;
    }

    /// Publishes one message and returns its receipt.
    pub(super) async fn publish(
        &mut self,
        producer_id: u64,
        metadata: wire::MessageMetadata,
        payload: &'static [u8],
    ) -> wire::CommandSendReceipt {
        let sequence_id = metadata.sequence_id;
        self.send(producer_id, metadata, payload).await;
        let receipt = self.raw.expect(Type::SendReceipt).await;
        let receipt = receipt.send_receipt.unwrap();
        assert_eq!(
            (receipt.producer_id, receipt.sequence_id),
            (producer_id, sequence_id)
        );
        receipt
    }

    /// Subscribes; returns the response (SUCCESS or ERROR).
    pub(super) async fn subscribe_with(
        &mut self,
        cmd: wire::CommandSubscribe,
    ) -> wire::BaseCommand {
        self.request(wire::BaseCommand {
            subscribe: Some(cmd),
            ..base(Type::Subscribe)
        })
        .await
    }

    /// Subscribes at the earliest position, expecting SUCCESS.
    pub(super) async fn subscribe(
        &mut self,
        topic: &str,
        subscription: &str,
        sub_type: SubType,
        consumer_id: u64,
    ) {
        let request_id = self.request_id();
        let resp = self
            .subscribe_with(subscribe_cmd(
                topic,
                subscription,
                sub_type,
                consumer_id,
                request_id,
            ))
            .await;
        assert_eq!(resp.r#type, Type::Success as i32, "{resp:?}");
        assert_eq!(resp.success.unwrap().request_id, request_id);
    }

    pub(super) async fn flow(&mut self, consumer_id: u64, message_permits: u32) {
        self.raw
            .send(wire::BaseCommand {
                flow: Some(wire::CommandFlow {
                    consumer_id,
                    message_permits,
                }),
                ..base(Type::Flow)
            })
            .await;
    }

    /// The next frame, which must be a MESSAGE.
    pub(super) async fn message(&mut self) -> Delivery {
        let frame = self.raw.recv_frame().await.expect("connection closed");
        let message = frame.command.message.clone().unwrap_or_else(|| {
            panic!("expected MESSAGE, got {:?}", frame.command);
        });
        let payload = frame.payload.expect("MESSAGE without payload");
        Delivery {
            message,
            metadata: payload.metadata,
            payload: payload.data,
        }
    }

    /// The next `n` MESSAGEs.
    pub(super) async fn messages(&mut self, n: usize) -> Vec<Delivery> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.message().await);
        }
        out
    }

    /// Asserts nothing arrives for a short while.
    pub(super) async fn quiet(&mut self) {
        self.raw
            .expect_silence(std::time::Duration::from_millis(50))
            .await;
    }

    /// Acknowledges (no request id: no response).
    pub(super) async fn ack(
        &mut self,
        consumer_id: u64,
        ids: Vec<wire::MessageIdData>,
        cumulative: bool,
    ) {
        let ack_type = if cumulative {
            wire::command_ack::AckType::Cumulative
        } else {
            wire::command_ack::AckType::Individual
        };
        self.raw
            .send(wire::BaseCommand {
                ack: Some(wire::CommandAck {
                    consumer_id,
                    ack_type: ack_type as i32,
                    message_id: ids,
                    ..Default::default()
                }),
                ..base(Type::Ack)
            })
            .await;
    }

    pub(super) async fn redeliver(&mut self, consumer_id: u64, ids: Vec<wire::MessageIdData>) {
        self.raw
            .send(wire::BaseCommand {
                redeliver_unacknowledged_messages: Some(
                    wire::CommandRedeliverUnacknowledgedMessages {
                        consumer_id,
                        message_ids: ids,
                        ..Default::default()
                    },
                ),
                ..base(Type::RedeliverUnacknowledgedMessages)
            })
            .await;
    }

    pub(super) async fn close_consumer(&mut self, consumer_id: u64) -> wire::BaseCommand {
        let request_id = self.request_id();
        self.request(wire::BaseCommand {
            close_consumer: Some(wire::CommandCloseConsumer {
                consumer_id,
                request_id,
                ..Default::default()
            }),
            ..base(Type::CloseConsumer)
        })
        .await
    }

    pub(super) async fn unsubscribe(&mut self, consumer_id: u64) -> wire::BaseCommand {
        let request_id = self.request_id();
        self.request(wire::BaseCommand {
            unsubscribe: Some(wire::CommandUnsubscribe {
                consumer_id,
                request_id,
                ..Default::default()
            }),
            ..base(Type::Unsubscribe)
        })
        .await
    }

    pub(super) async fn seek(&mut self, seek: wire::CommandSeek) -> wire::BaseCommand {
        self.request(wire::BaseCommand {
            seek: Some(seek),
            ..base(Type::Seek)
        })
        .await
    }

    pub(super) async fn last_message_id(
        &mut self,
        consumer_id: u64,
    ) -> wire::CommandGetLastMessageIdResponse {
        let request_id = self.request_id();
        let resp = self
            .request(wire::BaseCommand {
                get_last_message_id: Some(wire::CommandGetLastMessageId {
                    consumer_id,
                    request_id,
                }),
                ..base(Type::GetLastMessageId)
            })
            .await;
        let resp = resp.get_last_message_id_response.expect("response");
        assert_eq!(resp.request_id, request_id);
        resp
    }
}

/// Waits (briefly) until `check` holds; for state changed by another connection's session.
pub(super) async fn eventually(mut check: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !check() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("condition not reached");
}
