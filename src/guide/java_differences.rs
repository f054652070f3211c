//! # Differences from the Java client
//!
//! The client follows the Java client (the reference implementation) in naming, defaults and
//! protocol behaviour; where it differs, this chapter says so and why.
//!
//! What this client offers of the Java client's features, and what it lacks, is one list:
//! [`features`](super::features). This chapter is about what behaves differently.
//!
//! ## Behaves differently
//!
//! - **`send` has two steps.** [`Producer::send`] returns once the message is queued, with a
//!   [`SendFuture`] of its id (Java's `sendAsync` returns one future for both). This keeps
//!   back-pressure (`block_if_queue_full`) apart from the wait for the broker, and makes
//!   `send` cancel safe: a dropped `send` queued nothing, a dropped receipt does not cancel
//!   the send.
//! - **[`Producer::flush`] is a barrier, not a result.** It returns `Ok` once every earlier
//!   message is receipted *or failed*; each failure is on that message's receipt. Java's
//!   `flush` fails once when the last send before it failed, which reports one failure and
//!   hides the others.
//! - **Flow-control violations are caught.** A broker that delivers far beyond the flow
//!   permits it was given (more than 10 receiver queues + 10,000 messages), or into a receiver
//!   queue that messages from before a reconnect still fill, has its connection closed with an
//!   [`Error::Protocol`] naming the violation, which the application receives from `recv`; the
//!   consumer re-subscribes after the backoff and the broker redelivers what was not
//!   acknowledged. Java has no such check: its queue grows without bound.
//! - **The consumer queue is bounded in messages and in bytes.** Each partition buffers at
//!   most its receiver queue (plus the tolerance above); the total across partitions follows
//!   `max_total_receiver_queue_size_across_partitions` like Java. In bytes, each consumer has
//!   one budget drawn from the client [`memory_limit`](crate::ClientBuilder::memory_limit)
//!   (queued messages and incomplete chunked messages), and consumers together take at most
//!   half of the limit, so they never starve the client's producers (Java force-reserves what
//!   consumers receive without bound). A consumer over its budget grants no permits until the
//!   application takes messages out; its first FLOW may be smaller than the receiver queue
//!   (see [`receiver_queue_size`](crate::ConsumerBuilder::receiver_queue_size)).
//! - **After a reconnect or seek, the first FLOW grants only the queue's free room**, and
//!   the rest follows as the application takes out older messages (Java clears its receiver
//!   queue instead). Messages queued before the reconnect that the broker will redeliver are
//!   dropped as they are taken, never delivered twice by the client.
//! - **A zero-size receiver queue takes batched messages.** With
//!   [`receiver_queue_size(0)`](crate::ConsumerBuilder::receiver_queue_size) a batch is handed
//!   out whole by the next `recv`s before another permit is asked; Java's
//!   `ZeroQueueConsumerImpl` closes the consumer on the first batch (and producers batch by
//!   default). Partitioned, multi-topic and pattern consumers are refused with 0, as in Java.
//! - **Undecodable messages reach the application** as an `Err(`[`Error::InvalidMessage`]`)`
//!   from `recv` (and are acknowledged with their validation error, like Java, which only
//!   logs them), so a corrupt producer is visible where the data is consumed.
//! - **Dropping closes.** Dropping a [`Consumer`] or [`Reader`] flushes its acks and closes it
//!   in the background; dropping the last clone of a [`Producer`] lets its pending messages
//!   finish, then closes it. [`Client::close`] is async and graceful (producers send what
//!   they hold, consumers flush their acks) and bounded by the operation timeout.
//! - **Acks after close are refused.** Acks and nacks made once a consumer is closing fail
//!   with [`Error::Closed`] instead of being queued and possibly lost.
//! - **Broker protocol extensions.** The client carries PIP-139 (a broker closes a producer or
//!   consumer *for good*: [`Error::ClosedByBroker`]), PIP-124 (dead-letter topics with an
//!   initial subscription), PIP-247 (partition updates pushed by the broker, polling as the
//!   fallback) and PIP-245 (subscriptions on non-persistent topics are always non-durable);
//!   see the README.
//! - **Reconnects are quick while a broker restarts**: while the broker refuses connections,
//!   attempts repeat every 50 ms for up to 5 s before the exponential backoff grows, so a
//!   restarted broker is used as soon as it is back.
//! - **Chunking (PIP-37) on a non-persistent topic is refused** when the producer is created
//!   ([`Error::InvalidConfig`]); Java accepts the setting and silently does not chunk there.
//!   `chunking(true)` on the builder also turns batching off (Java makes the application do
//!   it). A chunk's size is computed with the chunk fields of its metadata counted, so no
//!   chunk exceeds the broker's `max_message_size` (Java counts the metadata before adding
//!   them and relies on the broker's 10 KB frame padding).
//! - **Message id order.** [`MessageId`]'s equality and hash follow Java (ledger, entry,
//!   partition, batch index); its order puts the messages of a batch before the id of the
//!   whole entry, the order Java itself calls correct but does not use for compatibility
//!   (apache/pulsar#18981).
//! - **Failover active state** is an [`Updates`](crate::Updates) value and stream
//!   ([`Consumer::active_updates`]), not a listener callback; lifecycle changes are a stream ([`Consumer::states`]).
//! - **Table views** ([`TableView`](crate::TableView)): the changes are also a bounded
//!   stream ([`TableView::updates`](crate::TableView::updates)) besides Java's listeners;
//!   `keys()` is a copy, not a live set; the partition-update interval is the client's, not
//!   the view's; a batch whose last id the broker gives without a batch index is waited for
//!   whole by `refresh`; there is no `topicCompactionStrategyClassName` (every newer value
//!   wins); on a non-persistent topic `refresh` returns at once (nothing is stored to wait for).
//!
//! Same as Java, and sometimes surprising: cumulative acks are refused on Shared and
//! Key_Shared subscriptions; a seek by id on a partitioned consumer moves only the partition
//! that owns the id; a reader with a start id is refused on a partitioned topic;
//! [`reconsume_later`](crate::Consumer::reconsume_later) works on every subscription type; the
//! negative-ack delay defaults to 60 s; `Producer::close` answers once the broker persisted
//! what it received, and fails what was still pending.
//!
//! [`Error::MessageTooBig`]: crate::Error::MessageTooBig
//! [`Error::InvalidMessage`]: crate::Error::InvalidMessage
//! [`Error::Protocol`]: crate::Error::Protocol
//! [`Error::Closed`]: crate::Error::Closed
//! [`Error::InvalidConfig`]: crate::Error::InvalidConfig
//! [`Error::ClosedByBroker`]: crate::Error::ClosedByBroker
//! [`ServerError`]: crate::ServerError
//! [`ServerError::IncompatibleSchema`]: crate::ServerError::IncompatibleSchema
//! [`Client::connection_stats`]: crate::Client::connection_stats
//! [`Client::close`]: crate::Client::close
//! [`Producer`]: crate::Producer
//! [`Producer::send`]: crate::Producer::send
//! [`Producer::flush`]: crate::Producer::flush
//! [`SendFuture`]: crate::SendFuture
//! [`Consumer`]: crate::Consumer
//! [`Consumer::active_updates`]: crate::Consumer::active_updates
//! [`Consumer::states`]: crate::Consumer::states
//! [`Reader`]: crate::Reader
//! [`MessageId`]: crate::MessageId
