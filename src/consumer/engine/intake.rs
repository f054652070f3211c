//! A consumer task's intake: commands and messages from the broker, decoded, filtered
//! (acked, compacted out, dead-lettered, stale epoch) and put in the queue to the application,
//! with the permits the broker spent accounted for and flow-control violations caught.

use crate::codec::Frame;
use crate::commands;
use crate::entity::Wake;
use crate::error::{Error, Result};
use crate::message_id::MessageId;
use crate::proto::base_command::Type;
use std::sync::atomic::Ordering;

use crate::consumer::engine::acks::EntryAcks;
use crate::consumer::engine::budget::entry_cost;
use crate::consumer::engine::decode::decode_sized;
use crate::consumer::engine::flow::overshoot_bound;
use crate::consumer::engine::ConsumerTask;
use crate::consumer::entry::Entry;
use crate::consumer::queue::Item;

impl ConsumerTask {
    /// The broker delivered beyond its flow permits, or into a queue already full: a
    /// protocol violation. Upstream has no such check (its receiver queue grows without
    /// bound); a careful client closes that connection with an error naming the violation,
    /// re-subscribes after the backoff (the broker redelivers every unacked message, within
    /// the new permits), and tells the application with an error item. The entry that
    /// crossed the line is not accepted; the broker redelivers it.
    pub(crate) fn flow_violation(&mut self, queued: u64) {
        self.over_delivered += 1;
        let size = self.opts.receiver_queue_size;
        let error = Error::Protocol(format!(
            "flow control violated by the broker for {}: {} messages delivered beyond the \
             permits granted and {queued} queued, above the bound of {} for a receiver queue \
             of {size}; connection closed, re-subscribing (unacked messages are redelivered)",
            self.entity.topic,
            (-self.permits).max(0),
            i64::from(size) + overshoot_bound(size),
        ));
        tracing::warn!(topic = %self.entity.topic, error = %error, "closing the connection");
        self.entity.drop_connection(&error.to_string());
        self.detached();
        // Emitted after the epoch changed, so the handle does not discard it as stale.
        self.emit(Item::Error(error));
    }

    /// Gives back the permits of `n` messages the application will never consume.
    pub(crate) fn release_permits(&mut self, n: u32) {
        if let Some(permits) = self.shared.consume(n, self.refill_at()) {
            self.grant(permits);
        }
    }

    /// The broker's maximum message size (the client's default before it said).
    pub(crate) fn max_message_size(&self) -> usize {
        self.entity
            .conn
            .as_ref()
            .map_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE, |c| {
                c.info().max_message_size
            })
    }

    /// A command or message (from [`Entity::next`] or [`Entity::try_next`]).
    pub(crate) fn on_inbound(&mut self, wake: Wake) -> Result<()> {
        match wake {
            Wake::Message(m) => {
                let crate::connection::MessageFrame { command, payload } = *m;
                match payload {
                    Some(payload) => self.on_message(command, payload),
                    None => {
                        tracing::warn!(topic = %self.entity.topic, "MESSAGE without its payload; ignored")
                    }
                }
                Ok(())
            }
            Wake::Command(frame) => self.on_command(frame),
            _ => Ok(()),
        }
    }

    /// Takes the frame boxed and moves out only the fields it needs: a `BaseCommand` is
    /// several KB, and moving it per message showed as the consume path's largest copy.
    fn on_command(&mut self, mut frame: Box<Frame>) -> Result<()> {
        let command = &mut frame.command;
        match Type::try_from(command.r#type) {
            Ok(Type::Message) => {
                let (Some(cmd), Some(payload)) = (command.message.take(), frame.payload.take())
                else {
                    tracing::warn!(topic = %self.entity.topic, "MESSAGE without its payload; ignored");
                    return Ok(());
                };
                self.on_message(cmd, payload);
            }
            // Java ConsumerImpl.setTerminated / ClientCnx.handleReachedEndOfTopic: only a flag
            // (and the listener told). The consumer stays a consumer: attached, acking,
            // seeking, and closed with CloseConsumer like any other (the broker sends this
            // again after a re-subscribe at the end; it is reported once).
            Ok(Type::ReachedEndOfTopic) => {
                if !self.shared.reached_end.swap(true, Ordering::AcqRel) {
                    tracing::info!(topic = %self.entity.topic, "consumer reached the end of the topic");
                }
                // Queued until the handle took one (a notice queued before a seek is dropped
                // there, and the broker's next one, at the end again, is queued instead).
                if !self.shared.end_taken.load(Ordering::Acquire) {
                    self.emit(Item::EndOfTopic);
                }
            }
            Ok(Type::ActiveConsumerChange) => {
                let active = command
                    .active_consumer_change
                    .take()
                    .and_then(|c| c.is_active)
                    .unwrap_or(false);
                tracing::info!(topic = %self.entity.topic, active, "active consumer change");
                self.shared.active.send_replace(Some(active));
            }
            _ => {
                tracing::debug!(topic = %self.entity.topic, command = command.r#type,
                    "ignored consumer command");
            }
        }
        Ok(())
    }

    pub(crate) fn on_message(
        &mut self,
        cmd: crate::proto::CommandMessage,
        payload: crate::codec::Payload,
    ) {
        self.take_message(cmd, payload);
        // Withholding permits for want of room: what arrived may have changed the estimate
        // (whatever became of it: queued, filtered, refused, a chunk).
        if self.bytes.owed > 0 {
            self.grant_owed();
        } else {
            self.bytes.budget().reserve_held();
        }
    }

    fn take_message(&mut self, cmd: crate::proto::CommandMessage, payload: crate::codec::Payload) {
        // Upstream's consumer checks only the compressed size against the broker's limit and
        // decompresses whatever size the metadata declares; producers (upstream's and ours,
        // with chunking on) send a large payload that compression makes fit as one entry,
        // unchunked. So the cap on the declared size is also the largest message this consumer
        // accepts in chunks (`max_chunked_message_bytes`), not only twice the broker's limit.
        let max = crate::consumer::engine::decode::max_decompressed(
            self.entity
                .conn
                .as_ref()
                .map(|c| c.info().max_message_size)
                .unwrap_or(crate::codec::DEFAULT_MAX_MESSAGE_SIZE),
        )
        .max(self.opts.max_chunked_message_bytes);
        // Permits the broker spent: the batch's messages, or only those its ack set still
        // delivers.
        let spent = crate::consumer::engine::decode::permits_spent(&cmd, &payload.metadata);
        self.permits -= i64::from(spent);
        // A broker may overshoot by a batch; one far beyond the permits it was given, or one
        // delivering into a queue that older subscriptions' items (the application is not
        // reading) already fill, breaks flow control. Checked before anything is decoded, so
        // the queue holds at most the receiver queue, the tolerance and one entry's messages.
        let size = self.opts.receiver_queue_size;
        let bound = overshoot_bound(size);
        let queued = self.shared.room().queued;
        if self.entity.conn.is_some()
            && (self.permits < -bound || queued >= (i64::from(size) + bound) as u64)
        {
            self.flow_violation(queued);
            return;
        }
        // Upstream ConsumerBase.isValidConsumerEpoch: on Exclusive / Failover, a message sent
        // before the last redeliver-all is dropped, and its permit given back.
        if self.single_active() && cmd.consumer_epoch.is_some_and(|e| e < self.consumer_epoch) {
            self.release_permits(spent);
            return;
        }
        // End-to-end encryption: decrypted here, or parked until its key comes (`decrypt`).
        let Some((cmd, payload)) = self.decrypt_step(cmd, payload, spent) else {
            return;
        };
        let entry = {
            let mut id = MessageId::from_proto(&cmd.message_id);
            id.partition = self.partition;
            id.entry()
        };
        if let Some(header) = crate::consumer::engine::chunks::ChunkHeader::of(&payload.metadata) {
            self.on_chunk(header, entry, cmd, payload);
            return;
        }
        let (messages, held) =
            match decode_sized(&self.entity.topic, self.partition, &cmd, payload, max) {
                Ok(decoded) => decoded,
                Err(bad) => {
                    // Upstream ConsumerImpl.discardCorruptedMessage: ack it with the validation
                    // error so it is not redelivered forever, and give its permits back (all the
                    // messages the broker counted, where upstream returns one).
                    tracing::warn!(topic = %self.entity.topic, id = %entry, error = %bad.error,
                    "undecodable entry discarded");
                    self.shared.discarded.fetch_add(1, Ordering::Relaxed);
                    if self.persistent() {
                        self.entity.send_control(commands::ack_discarded(
                            self.entity.id,
                            entry,
                            bad.validation,
                        ));
                    }
                    // One permit comes back when the application takes the error item.
                    self.release_permits(spent - 1);
                    self.emit(Item::Discarded(bad.error));
                    return;
                }
            };
        self.bytes.observe(held, spent);
        self.deliver(messages, held, &cmd.ack_set, spent);
    }

    /// Puts the decoded messages of an entry that spent `spent` permits in the queue, less
    /// those filtered out (whose permits come back), as one item charged with its bytes
    /// (`held`: the payload bytes its messages keep alive) in the consumer's budget.
    pub(crate) fn deliver(&mut self, entry: Entry, held: usize, ack_set: &[i64], spent: u32) {
        let Entry {
            mut head,
            mut records,
        } = entry;
        head.source = self.index;
        let persistent = self.persistent();
        let dlq_max = self.dlq.as_ref().map(|d| d.policy.max_redeliver_count);
        let track_unacked = persistent && !self.opts.ack_timeout.is_zero();
        // The messages share one entry, so its ack state is looked up once.
        let acked = match records.first() {
            Some(first) if persistent => self.acks.delivered_entry(&head.id_of(first), ack_set),
            _ => EntryAcks::None,
        };
        // Filtered in place (`retain` moves only what follows a removed record): the records
        // that stay are not moved, nearly always all of them.
        records.retain(|r| {
            let id = head.id_of(r);
            if acked.acked(id.batch_index) {
                return false;
            }
            if self.skip_through.is_some_and(|s| id <= s) {
                return false;
            }
            if let Some(max) = dlq_max {
                if head.redelivery_count > max {
                    // Over the limit: straight to the dead-letter topic (rare).
                    self.dead_letter(head.message(r.clone()));
                    return false;
                }
                if head.redelivery_count >= max {
                    // Delivered once more; dead-lettered if it fails again.
                    self.dlq_candidates.insert(id, head.message(r.clone()));
                }
            }
            if track_unacked {
                self.acks.unacked.queued(self.queued_messages, id);
            }
            // Numbered like the handle counts them in `QueueRoom::taken`.
            self.queued_messages += 1;
            self.note_delivered(id);
            true
        });
        let emitted = records.len() as u32;
        if emitted > 0 {
            let entry = Entry { head, records };
            let charge = self.bytes.budget().charge(entry_cost(&entry, held), true);
            self.emit(Item::Messages(entry, charge));
        }
        // Whatever the broker counted and the application will never consume by receiving
        // (filtered, acked, compacted out, dead-lettered) gives its permits back here.
        if spent > emitted {
            self.release_permits(spent - emitted);
        }
    }
}
