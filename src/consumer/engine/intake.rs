//! A consumer task's intake ([`Intake`]): commands and messages from the broker, decoded,
//! filtered (acked, compacted out, dead-lettered, stale epoch) and put in the queue to the
//! application, with the permits the broker spent accounted for and flow-control violations
//! caught (handed back to the task, which drops the connection: see `flow_violation`). Chunks
//! go to the assembler (`chunk_intake`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::codec::Frame;
use crate::commands;
use crate::connection::MessageFrame;
use crate::entity::Wake;
use crate::message::Message;
use crate::message_id::MessageId;
use crate::proto::base_command::Type;

use crate::consumer::engine::acks::{Acks, EntryAcks};
use crate::consumer::engine::budget::entry_cost;
use crate::consumer::engine::chunks::ChunkAssembler;
use crate::consumer::engine::decode::decode_sized;
use crate::consumer::engine::dlq::DeadLetterSink;
use crate::consumer::engine::flow::Flow;
use crate::consumer::engine::io::Io;
use crate::consumer::entry::Entry;
use crate::consumer::queue::Item;

/// A flow-control violation: the broker delivered beyond its permits or into a full queue
/// (`queued`: this partition's items queued). The task closes the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Violation {
    pub queued: u64,
}

/// What the intake of one partition task keeps: where it starts and skips, the consumer
/// epoch, the dead-letter candidates, the chunked messages (being reassembled, and delivered
/// but not acked yet) and how many messages it queued.
pub(crate) struct Intake {
    /// Messages at or before this position are skipped (reader start, non-durable resume).
    pub skip_through: Option<MessageId>,
    /// The consumer epoch (Exclusive / Failover redeliver-all).
    pub consumer_epoch: u64,
    /// Dead-letter publishing (Shared / Key_Shared with a policy).
    pub dlq: Option<Arc<DeadLetterSink>>,
    /// Messages delivered at the maximum redelivery count: dead-lettered on nack/timeout.
    pub dlq_candidates: HashMap<MessageId, Message>,
    /// How many messages this task has put in the queue (numbers them for `unacked`).
    pub queued_messages: u64,
    /// Where a non-durable subscription created again starts when the application has
    /// received nothing since the start or the last seek (the SUBSCRIBE position).
    pub start: Option<MessageId>,
    /// After a time seek: the next message queued sets `start`.
    pub start_from_next: bool,
    /// An end-of-topic notice is queued since the last seek: the broker's next ones (it says
    /// it again after each re-subscribe at the end) are not queued again. A notice queued
    /// before a seek is dropped by the handle (see `end_epoch`), so a seek clears this.
    pub end_queued: bool,
    /// Chunked messages being reassembled.
    pub chunks: ChunkAssembler,
    /// The chunk entries of each delivered chunked message not acked yet (keyed by its id):
    /// ack, nack, ack timeout and DLQ act on all of them (upstream
    /// `unAckedChunkedMessageIdSequenceMap`).
    pub chunk_ids: HashMap<MessageId, Vec<MessageId>>,
    /// Decryption, and the entries waiting for a data key (`decrypt`).
    pub crypto: crate::consumer::engine::key_wait::CryptoIntake,
}

impl Intake {
    /// A command or message (from [`Entity::next`](crate::entity::Entity::next) or
    /// [`Entity::try_next`](crate::entity::Entity::try_next)).
    pub(crate) fn on_inbound(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        wake: Wake,
    ) -> Option<Violation> {
        match wake {
            // Kept boxed down to the decoding: a frame's command and metadata are several
            // hundred bytes, each move of them a copy (the unbatched consume path's largest).
            Wake::Message(m) => self.on_message(io, flow, acks, m),
            Wake::Command(frame) => self.on_command(io, flow, acks, frame),
            _ => None,
        }
    }

    /// Takes the frame boxed and moves out only the fields it needs: a `BaseCommand` is
    /// several KB, and moving it per message showed as the consume path's largest copy.
    fn on_command(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        mut frame: Box<Frame>,
    ) -> Option<Violation> {
        let command = &mut frame.command;
        match Type::try_from(command.r#type) {
            Ok(Type::Message) => {
                let (Some(cmd), Some(payload)) = (command.message.take(), frame.payload.take())
                else {
                    tracing::warn!(topic = %io.entity.topic, "MESSAGE without its payload; ignored");
                    return None;
                };
                return self.on_message(io, flow, acks, MessageFrame::boxed(cmd, payload));
            }
            // Java ConsumerImpl.setTerminated / ClientCnx.handleReachedEndOfTopic: only a flag
            // (and the listener told). The consumer stays a consumer: attached, acking,
            // seeking, and closed with CloseConsumer like any other (the broker sends this
            // again after a re-subscribe at the end; it is reported once).
            Ok(Type::ReachedEndOfTopic) => {
                if !io.shared.reached_end.swap(true, Ordering::AcqRel) {
                    tracing::info!(topic = %io.entity.topic, "consumer reached the end of the topic");
                }
                // One notice queued per position: the handle takes it (a notice queued
                // before a seek is dropped there, and the broker's next one, at the end
                // again, is queued instead: see `end_queued`).
                if !self.end_queued {
                    self.end_queued = true;
                    io.emit(Item::EndOfTopic);
                }
            }
            Ok(Type::ActiveConsumerChange) => {
                let active = command
                    .active_consumer_change
                    .take()
                    .and_then(|c| c.is_active)
                    .unwrap_or(false);
                tracing::info!(topic = %io.entity.topic, active, "active consumer change");
                io.shared.active.send_replace(Some(active));
            }
            _ => {
                tracing::debug!(topic = %io.entity.topic, command = command.r#type,
                    "ignored consumer command");
            }
        }
        None
    }

    pub(crate) fn on_message(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        frame: Box<MessageFrame>,
    ) -> Option<Violation> {
        let violation = self.take_message(io, flow, acks, frame);
        if violation.is_none() {
            // The task does it after the violation's disconnect otherwise.
            flow.after_entry(io);
        }
        violation
    }

    fn take_message(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        frame: Box<MessageFrame>,
    ) -> Option<Violation> {
        let Some(payload) = &frame.payload else {
            tracing::warn!(topic = %io.entity.topic, "MESSAGE without its payload; ignored");
            return None;
        };
        let cmd = &frame.command;
        // Upstream's consumer checks only the compressed size against the broker's limit and
        // decompresses whatever size the metadata declares; producers (upstream's and ours,
        // with chunking on) send a large payload that compression makes fit as one entry,
        // unchunked. So the cap on the declared size is also the largest message this consumer
        // accepts in chunks (`max_chunked_message_bytes`), not only twice the broker's limit.
        let max = crate::consumer::engine::decode::max_decompressed(io.max_message_size())
            .max(io.opts.max_chunked_message_bytes);
        // Permits the broker spent: the batch's messages, or only those its ack set still
        // delivers.
        let spent = crate::consumer::engine::decode::permits_spent(cmd, &payload.metadata);
        // A broker may overshoot by a batch; one far beyond the permits it was given, or one
        // delivering into a queue already full, breaks flow control (see `Flow::spend`).
        let queued = io.shared.room().queued;
        // Counted by what it decodes to where the metadata says so (a compressed entry), not
        // by its wire size (see `decoded_size`).
        let bytes = crate::consumer::engine::decode::decoded_size(
            &payload.metadata,
            payload.data.len(),
            max,
        );
        let (size, limit) = (io.opts.receiver_queue_size, io.max_message_size());
        if flow.spend(spent, queued, size, bytes, limit) && io.entity.conn.is_some() {
            return Some(Violation { queued });
        }
        // Upstream ConsumerBase.isValidConsumerEpoch: on Exclusive / Failover, a message sent
        // before the last redeliver-all is dropped, and its permit given back.
        if io.single_active() && cmd.consumer_epoch.is_some_and(|e| e < self.consumer_epoch) {
            flow.release(io, spent);
            return None;
        }
        // End-to-end encryption: decrypted here, or parked until its key comes (`decrypt`).
        // (`None`: parked or handled by the failure action, no violation.)
        let mut frame = self.decrypt_step(io, flow, acks, frame, spent)?;
        let MessageFrame {
            command: cmd,
            payload: Some(payload),
            ..
        } = &mut *frame
        else {
            return None; // not reached: checked above, and decrypting keeps a payload
        };
        let entry = {
            let mut id = MessageId::from_proto(&cmd.message_id);
            id.partition = io.partition;
            id.entry()
        };
        if let Some(header) = crate::consumer::engine::chunks::ChunkHeader::of(&payload.metadata) {
            let MessageFrame {
                command, payload, ..
            } = *frame;
            if let Some(payload) = payload {
                self.on_chunk(io, flow, acks, header, entry, command, payload);
            }
            return None;
        }
        let (messages, held) = match decode_sized(&io.entity.topic, io.partition, cmd, payload, max)
        {
            Ok(decoded) => decoded,
            Err(bad) => {
                // Upstream ConsumerImpl.discardCorruptedMessage: ack it with the validation
                // error so it is not redelivered forever, and give its permits back (all the
                // messages the broker counted, where upstream returns one).
                tracing::warn!(topic = %io.entity.topic, id = %entry, error = %bad.error,
                    "undecodable entry discarded");
                io.shared.discarded.fetch_add(1, Ordering::Relaxed);
                if io.persistent() {
                    let id = io.entity.id;
                    io.entity
                        .send_control(commands::ack_discarded(id, entry, bad.validation));
                }
                // One permit comes back when the application takes the error item.
                flow.release(io, spent - 1);
                io.emit(Item::Discarded(Box::new(bad.error)));
                return None;
            }
        };
        flow.observe(held, spent);
        self.deliver(io, flow, acks, messages, held, &cmd.ack_set, spent);
        None
    }

    /// Puts the decoded messages of an entry that spent `spent` permits in the queue, less
    /// those filtered out (whose permits come back), as one item charged with its bytes
    /// (`held`: the payload bytes its messages keep alive) in the consumer's budget.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn deliver(
        &mut self,
        io: &mut Io,
        flow: &mut Flow,
        acks: &mut Acks,
        entry: Entry,
        held: usize,
        ack_set: &[i64],
        spent: u32,
    ) {
        let Entry {
            mut head,
            mut records,
        } = entry;
        head.source = io.index;
        head.cluster = io.shared.cluster.load(Ordering::Relaxed);
        let persistent = io.persistent();
        let dlq_max = self.dlq.as_ref().map(|d| d.policy.max_redeliver_count);
        let track_unacked = persistent && !io.opts.ack_timeout.is_zero();
        // The messages share one entry, so its ack state is looked up once.
        let acked = match records.first() {
            Some(first) if persistent => acks.delivered_entry(&head.id_of(first), ack_set),
            _ => EntryAcks::None,
        };
        let mut first_kept = None;
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
                    dead_letter(&self.dlq, io, head.message(r.clone()));
                    return false;
                }
                if head.redelivery_count >= max {
                    // Delivered once more; dead-lettered if it fails again.
                    self.dlq_candidates.insert(id, head.message(r.clone()));
                }
            }
            if track_unacked {
                acks.unacked.queued(self.queued_messages, id);
            }
            // Numbered like the handle counts them in `QueueRoom::taken`.
            self.queued_messages += 1;
            first_kept.get_or_insert(id);
            true
        });
        if let Some(id) = first_kept {
            self.note_delivered(id);
        }
        let emitted = records.len() as u32;
        if emitted > 0 {
            let entry = Entry { head, records };
            let mut charge = flow.budget().charge(entry_cost(&entry, held), true);
            let beyond = std::mem::take(&mut flow.arrived_beyond);
            if beyond > 0 {
                charge.beyond_permits(beyond);
            }
            io.emit(Item::Messages(entry, charge));
        }
        // Whatever the broker counted and the application will never consume by receiving
        // (filtered, acked, compacted out, dead-lettered) gives its permits back here.
        if spent > emitted {
            flow.release(io, spent - emitted);
        }
    }

    /// The connection is gone (`last`: the last message the application took): what was
    /// being reassembled or waits for a key is dropped, as the broker redelivers every
    /// unacked entry to the new subscription, and a non-durable one resumes after `last`.
    /// Returns where the new subscription starts and its rollback (see `resubscribe_start`).
    pub(crate) fn detached(
        &mut self,
        opts: &crate::consumer::options::ConsumerOptions,
        durable: bool,
        last: Option<MessageId>,
    ) -> (Option<MessageId>, u64) {
        let held_from = self.chunks.earliest_first_chunk();
        self.chunks.clear();
        self.crypto.clear();
        if !durable {
            if let Some(last) = last {
                self.skip_through = Some(last);
            }
        }
        crate::consumer::engine::subscribe::resubscribe_start(
            opts, durable, last, held_from, self.start,
        )
    }

    /// A message is queued for the application: after a time seek, the first one is where a
    /// non-durable re-subscribe starts.
    fn note_delivered(&mut self, id: MessageId) {
        if self.start_from_next {
            self.start_from_next = false;
            self.start = Some(crate::consumer::engine::subscribe::start_position(id, true));
        }
    }

    /// Publishes a message to the dead-letter topic in the background (see [`dead_letter`]).
    pub(crate) fn dead_letter(&self, io: &Io, msg: Message) {
        dead_letter(&self.dlq, io, msg);
    }
}

/// Publishes a message to the dead-letter topic in the background; it is acked once
/// published, or redelivered if publishing fails.
fn dead_letter(dlq: &Option<Arc<DeadLetterSink>>, io: &Io, msg: Message) {
    match dlq {
        Some(sink) => {
            crate::consumer::engine::dlq::spawn_dead_letter(sink.clone(), msg, io.shared.clone())
        }
        None => tracing::error!(topic = %io.entity.topic, "dead letter without a policy"),
    }
}
