//! A consumer task's decryption step (PIP-4, feature `encryption`), between the flow-control
//! checks and chunk reassembly / decoding: each entry (each chunk on its own) is decrypted
//! before anything else reads its payload (upstream `ConsumerImpl.messageReceived`: decrypt,
//! then chunk, then decompress).
//!
//! A data key already cached costs only the AES-GCM pass, done here. Otherwise the key reader
//! is asked in a task of its own (it may be slow or remote) while this entry, and every entry
//! after it, waits here in arrival order ("parked"); the task's loop wakes when the answer
//! comes and goes on with them. Parked entries already spent their permits and are held in
//! the consumer's byte budget until they go on (see `key_wait`); a re-subscribe drops them
//! (the broker redelivers them).
//!
//! What cannot be decrypted follows [`ConsumerCryptoFailureAction`] as upstream's
//! `decryptPayloadIfNeeded`: `Fail` delivers an error item in its place and leaves the entry
//! to the ack timeout, `Discard` acks it with `DecryptionError`, `Consume` delivers it still
//! encrypted.

#[cfg(not(feature = "encryption"))]
use crate::consumer::engine::{acks::Acks, flow::Flow, io::Io};

#[cfg(not(feature = "encryption"))]
impl crate::consumer::engine::intake::Intake {
    /// The entry, unchanged.
    #[inline(always)]
    pub(crate) fn decrypt_step(
        &mut self,
        _io: &mut Io,
        _flow: &mut Flow,
        _acks: &mut Acks,
        frame: Box<crate::connection::MessageFrame>,
        _spent: u32,
    ) -> Option<Box<crate::connection::MessageFrame>> {
        Some(frame)
    }

    pub(crate) fn on_keys_loaded(
        &mut self,
        _io: &mut Io,
        _flow: &mut Flow,
        _acks: &mut Acks,
        _done: (),
    ) -> Option<crate::consumer::engine::intake::Violation> {
        None
    }
}

#[cfg(feature = "encryption")]
mod enabled {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::codec::Payload;
    use crate::commands;
    use crate::connection::MessageFrame;
    use crate::consumer::engine::acks::Acks;
    use crate::consumer::engine::flow::Flow;
    use crate::consumer::engine::intake::{Intake, Violation};
    use crate::consumer::engine::io::Io;
    use crate::consumer::entry::{Entry, EntryHead, Extras, Record};
    use crate::consumer::queue::Item;
    use crate::crypto::{ConsumerCryptoFailureAction, CryptoError, Decrypted};
    use crate::error::Error;
    use crate::message_id::MessageId;
    use crate::proto;
    use crate::proto::command_ack::ValidationError;

    impl Intake {
        /// Decrypts an entry (see the module docs): the entry to decode, or `None` when it
        /// waits for a key or was handled by the failure action. An unencrypted entry with
        /// nothing parked ahead of it passes at the cost of two checks.
        #[inline(always)]
        pub(crate) fn decrypt_step(
            &mut self,
            io: &mut Io,
            flow: &mut Flow,
            acks: &mut Acks,
            frame: Box<MessageFrame>,
            spent: u32,
        ) -> Option<Box<MessageFrame>> {
            let plain =
                (frame.payload.as_ref()).is_some_and(|p| p.metadata.encryption_keys.is_empty());
            if plain && !self.crypto.is_parked() {
                return Some(frame);
            }
            let MessageFrame {
                command,
                payload,
                wire_len,
            } = *frame;
            let (command, payload) =
                self.decrypt_or_park(io, flow, acks, command, payload?, spent)?;
            Some(Box::new(MessageFrame {
                command,
                payload: Some(payload),
                wire_len,
            }))
        }

        #[inline(never)]
        fn decrypt_or_park(
            &mut self,
            io: &mut Io,
            flow: &mut Flow,
            acks: &mut Acks,
            cmd: proto::CommandMessage,
            mut payload: Payload,
            spent: u32,
        ) -> Option<(proto::CommandMessage, Payload)> {
            let replaying = std::mem::take(&mut self.crypto.replaying);
            if !replaying && self.crypto.is_parked() {
                // Behind a parked entry: keeps the order.
                self.crypto.park(flow.budget(), cmd, payload, false);
                return None;
            }
            if payload.metadata.encryption_keys.is_empty() {
                return Some((cmd, payload));
            }
            match self
                .crypto
                .decryptor
                .try_decrypt(&payload.metadata, &payload.data)
            {
                Decrypted::Plain(data) => {
                    payload.data = data;
                    Some((cmd, payload))
                }
                Decrypted::NeedKeys => {
                    let keys = crate::crypto::recipients(&payload.metadata).to_vec();
                    self.crypto.park(flow.budget(), cmd, payload, true);
                    flow.key_wait = true;
                    self.crypto.start_load(keys);
                    None
                }
                Decrypted::Failed(e) => {
                    self.crypto_failed(io, flow, acks, cmd, payload, spent, e);
                    None
                }
            }
        }

        /// The key reader answered: the parked entries go on, in order, until one needs
        /// another key (a failed answer fails the first one).
        pub(crate) fn on_keys_loaded(
            &mut self,
            io: &mut Io,
            flow: &mut Flow,
            acks: &mut Acks,
            done: Result<(), CryptoError>,
        ) -> Option<Violation> {
            if let Err(e) = done {
                if let Some((cmd, payload)) = self.crypto.unpark() {
                    let spent =
                        crate::consumer::engine::decode::permits_spent(&cmd, &payload.metadata);
                    self.crypto_failed(io, flow, acks, cmd, payload, spent, e);
                }
            }
            while !self.crypto.loading() {
                let Some((cmd, payload)) = self.crypto.unpark() else {
                    break;
                };
                // Through the whole intake again (its permits were counted when it arrived).
                let spent = crate::consumer::engine::decode::permits_spent(&cmd, &payload.metadata);
                flow.permits += i64::from(spent);
                self.crypto.replaying = true;
                let violation = self.on_message(io, flow, acks, MessageFrame::boxed(cmd, payload));
                self.crypto.replaying = false;
                if violation.is_some() {
                    flow.key_wait = self.crypto.is_parked();
                    return violation;
                }
            }
            flow.key_wait = self.crypto.is_parked();
            None
        }

        #[allow(clippy::too_many_arguments)]
        fn crypto_failed(
            &mut self,
            io: &mut Io,
            flow: &mut Flow,
            acks: &mut Acks,
            cmd: proto::CommandMessage,
            payload: Payload,
            spent: u32,
            error: CryptoError,
        ) {
            let entry = {
                let mut id = MessageId::from_proto(&cmd.message_id);
                id.partition = io.partition;
                id.entry()
            };
            let is_chunk = payload.metadata.num_chunks_from_msg.unwrap_or(1) > 1;
            let action = self.crypto.decryptor.action;
            tracing::warn!(topic = %io.entity.topic, id = %entry, error = %error, ?action,
                "message cannot be decrypted");
            match action {
                ConsumerCryptoFailureAction::Discard => {
                    io.shared.discarded.fetch_add(1, Ordering::Relaxed);
                    if io.persistent() {
                        io.entity.send_control(commands::ack_discarded(
                            io.entity.id,
                            entry,
                            ValidationError::DecryptionError,
                        ));
                    }
                    flow.release(io, spent);
                }
                // A chunk is not delivered on its own (its ciphertext is not the message's),
                // so `Consume` fails it like `Fail`.
                ConsumerCryptoFailureAction::Consume if !is_chunk => {
                    self.deliver_encrypted(io, flow, acks, cmd, payload, spent);
                }
                _ => {
                    // Upstream `decryptPayloadIfNeeded` (FAIL): not delivered, not acked, and
                    // added to the ack-timeout tracker, so an ack timeout redelivers it
                    // (apache/pulsar#5807: it is never dead-lettered, as it is never delivered).
                    if io.persistent() && !io.opts.ack_timeout.is_zero() {
                        acks.unacked.undelivered(entry, tokio::time::Instant::now());
                    }
                    flow.release(io, spent);
                    io.emit(Item::Error(Box::new(Error::Crypto(
                        CryptoError::Undelivered {
                            id: entry,
                            cause: Box::new(error),
                        },
                    ))));
                }
            }
        }

        /// `Consume`: the entry as one message, its payload still encrypted, with its context.
        fn deliver_encrypted(
            &mut self,
            io: &mut Io,
            flow: &mut Flow,
            acks: &mut Acks,
            cmd: proto::CommandMessage,
            payload: Payload,
            spent: u32,
        ) {
            let mut meta = payload.metadata;
            let context = crate::crypto::consumer_context(&meta);
            let mut id = MessageId::from_proto(&cmd.message_id);
            id.partition = io.partition;
            id.batch_index = -1;
            id.batch_size = 0;
            let extras = Extras {
                key: meta.partition_key.take(),
                ordering_key: meta.ordering_key.take(),
                properties: meta
                    .properties
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
                encryption: Some(Arc::new(context)),
            };
            let held = payload.data.len() + extras.cost();
            let record = Record {
                payload: payload.data,
                sequence_id: meta.sequence_id,
                event_time: meta.event_time.unwrap_or(0),
                batch_index: -1,
                key_b64_encoded: meta.partition_key_b64_encoded.unwrap_or(false),
                null_value: meta.null_value.unwrap_or(false),
                extras: Some(Box::new(extras)),
            };
            let entry = Entry {
                head: EntryHead {
                    topic: io.entity.topic.clone(),
                    id,
                    schema_version: meta.schema_version.take(),
                    publish_time: meta.publish_time,
                    producer_name: Arc::from(meta.producer_name.as_str()),
                    redelivery_count: cmd.redelivery_count.unwrap_or(0),
                    source: 0,
                    cluster: 0,
                },
                records: smallvec::smallvec![record],
            };
            flow.observe(held, spent);
            self.deliver(io, flow, acks, entry, held, &cmd.ack_set, spent);
        }
    }
}
