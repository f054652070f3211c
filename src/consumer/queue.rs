//! The queue between a consumer's partition tasks and the application: its items, and each
//! partition's share of it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::Notify;

use crate::consumer::engine::budget::Charge;
use crate::consumer::entry::{Entry, EntryHead, Record, Records};
use crate::error::Error;
use crate::util::lazy_queue::{self, Retain};

use crate::consumer::handle::PartitionShared;

/// What the task puts in the consumer's queue, tagged with the partition's epoch so messages
/// from before a reconnect, seek or redeliver-all can be discarded.
// The large variant is nearly every item: boxing it cost an allocation per entry, and the
// small ones are rare (errors, the end of a topic).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Item {
    /// The messages of one delivered entry (a batch's, or one), in order; never empty. One
    /// item per entry, not per message: a `Message` is ~270 bytes, and queueing each one
    /// moved it through the channel's push, pop and receive and cost a channel operation per
    /// message (issue #18's profile: a third of the consume path). Kept compact (see
    /// [`Entry`]); the handle takes them out one at a time (`Consumer::take_buffered`), so
    /// each still counts, for flow permits and the queue's room, only once the application
    /// takes it. The charge holds the entry's bytes in the consumer's budget until the
    /// handle is done with its last message (or drops it). The entry is inline, not boxed:
    /// the queue allocates nothing until the first item ([`lazy_queue`]), so an idle
    /// consumer holds no slots whatever their size, and a box cost an allocation and a free
    /// per entry on the consume path (when the queue was a tokio mpsc, whose first block of
    /// 32 slots came with every consumer, the box kept that block small: issue #39).
    Messages(Entry, Charge),
    /// An entry discarded as undecodable: it holds a place in the queue (and one flow permit)
    /// like a message until the application takes it, so a broker sending only corrupt
    /// entries cannot grow the queue either.
    ///
    /// The errors are boxed: rare, they should not make every slot of the queue larger.
    Discarded(Box<Error>),
    /// An error for the application (a failed decryption, a violation, the consumer's end).
    Error(Box<Error>),
    /// The broker said the subscription reached the end of its terminated topic (sent once
    /// per partition): the handle reports it once every partition of every topic got there.
    EndOfTopic,
}

impl Item {
    /// How many places the item holds in the partition's share of the queue.
    pub(crate) fn counted(&self) -> u64 {
        match self {
            Item::Messages(e, _) => e.records.len() as u64,
            Item::Discarded(_) => 1,
            Item::Error(_) | Item::EndOfTopic => 0,
        }
    }
}

/// The messages of the entry the handle is handing out (taken from the queue as one item, out
/// of it one by one: they count as queued until the application takes each).
#[derive(Debug)]
pub(crate) struct Buffered {
    /// The task that delivered them (looked up once per entry, not per message).
    pub part: Option<Arc<PartitionShared>>,
    /// The epoch they were queued in.
    pub epoch: u64,
    /// What the messages share (`Some` whenever `part` is).
    pub head: Option<EntryHead>,
    pub records: smallvec::IntoIter<[Record; 1]>,
    /// The entry's bytes in the consumer's budget, given back once its last message is
    /// handed out.
    pub charge: Option<Charge>,
}

impl Default for Buffered {
    fn default() -> Self {
        Buffered {
            part: None,
            epoch: 0,
            head: None,
            records: Records::new().into_iter(),
            charge: None,
        }
    }
}

/// One item of the queue, with the index of the partition task that queued it and its epoch.
pub(crate) type Queued = (usize, u64, Item);

/// A partition task's end of the queue (each task of every topic holds one; the queue ends
/// once they are all gone). [`QueueSender::closed`] completes once the handle is gone.
pub(crate) type QueueSender = lazy_queue::Sender<Queued, (), Closing>;

/// A [`QueueSender`] that does not keep the queue open (what the consumer's topics keep to
/// start new tasks from).
pub(crate) type WeakQueueSender = lazy_queue::WeakSender<Queued, (), Closing>;

/// The handle's end of the queue.
pub(crate) type QueueReceiver = lazy_queue::Receiver<Queued, (), Closing>;

/// Beside the queue: the partition tasks waiting for the handle's end
/// ([`lazy_queue::Sender::closed`]).
#[derive(Debug, Default)]
pub(crate) struct Closing(Notify);

impl lazy_queue::Owner for Closing {
    /// What an emptied queue keeps of its storage (see [`lazy_queue::State`]): an idle
    /// consumer that never received anything holds none (issue #39: the tokio mpsc this
    /// replaced allocated a block of 32 slots and its channel, ~2.3 KB, with every consumer).
    /// A consumer whose application keeps up empties its queue after every entry, and keeps a
    /// few slots so as not to allocate at each; a burst (up to the receiver queue's permits)
    /// is given back down to what the recent bursts needed: an emptied queue holds at most
    /// twice `max` slots (~17 KB of 272-byte slots), twice `min` once its bursts are small.
    const RETAIN: Retain = Retain { min: 4, max: 32 };

    fn receiver_closed(&self) {
        self.0.notify_waiters();
    }
}

impl AsRef<Notify> for Closing {
    fn as_ref(&self) -> &Notify {
        &self.0
    }
}

/// The consumer's queue: the first sender (for its first tasks) and the handle's end.
pub(crate) fn channel() -> (QueueSender, QueueReceiver) {
    lazy_queue::channel((), Closing::default())
}

/// The handle's end of the queue: what the partition tasks queued, and the rest of the entry
/// being handed out. Behind a mutex only so that `Consumer::close(&self)` can empty it;
/// everything else has the consumer by `&mut` and reaches it through `Mutex::get_mut`,
/// without taking the lock.
#[derive(Debug)]
pub(crate) struct Inbound {
    /// Read through [`Inbound::next`] and friends, which hand out `held` first.
    pub rx: QueueReceiver,
    pub buffered: Buffered,
    /// Items a `Consumer::batch_recv` took out of the channel to count them, and not yet
    /// handed out: the front of the queue, in order. Still queued in every other respect (no
    /// permit, room or ack-timeout count taken), so bounded by the same permits as the
    /// channel; every read of the queue takes them first.
    pub held: VecDeque<Queued>,
}

impl Inbound {
    pub(crate) fn new(rx: QueueReceiver) -> Self {
        Inbound {
            rx,
            buffered: Buffered::default(),
            held: VecDeque::new(),
        }
    }

    /// The next queued item: a held one first, else the channel's (`None`: every task
    /// ended). Cancel safe (as [`lazy_queue::Receiver::poll_recv`]).
    #[inline]
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Queued>> {
        if let Some(q) = self.held.pop_front() {
            return Poll::Ready(Some(q));
        }
        self.rx.poll_recv(cx)
    }

    /// The next queued item if there is one now.
    pub(crate) fn try_next(&mut self) -> Option<Queued> {
        self.held.pop_front().or_else(|| self.rx.try_recv().ok())
    }

    /// Drops what is queued and the rest of the entry being handed out, never to be handed
    /// out (the consumer is closed): their bytes leave the consumer's budget, and so the
    /// client memory limit, now rather than when the handle is dropped. Upstream
    /// `ConsumerImpl.closeConsumerTasks` clears its incoming queue too (with `poolMessages`:
    /// `releasePooledMessagesAndStopAcceptNew` → `clearIncomingMessages`); here always, as
    /// nothing queued is handed out after the close. Items queued later (a task that had not
    /// ended yet) stay until the handle drops.
    pub(crate) fn clear(&mut self) {
        // The budget's reservation of the limit shrinks when a task next plans its permits;
        // the tasks are gone, so it is shrunk here (a partitioned consumer's growth task may
        // keep the budget alive until the handle drops).
        let mut budget = self.buffered.charge.as_ref().map(|c| c.budget().clone());
        self.buffered = Buffered::default();
        while let Some((_, _, item)) = self.try_next() {
            if let (None, Item::Messages(_, charge)) = (&budget, &item) {
                budget = Some(charge.budget().clone());
            }
        }
        if let Some(budget) = budget {
            budget.room();
        }
    }
}
