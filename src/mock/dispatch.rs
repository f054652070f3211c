//! Dispatch: sending stored entries to consumers with permits, by subscription type.
//!
//! Run after anything that can make delivery possible (FLOW, SEND, a consumer leaving or
//! becoming active, REDELIVER). Entries waiting for redelivery go first, in entry order, then
//! entries never dispatched. An entry goes to a consumer with at least one permit and costs the
//! number of messages it carries (the still-unacknowledged ones for a partly acknowledged
//! batch), so permits may go negative, as upstream.
//!
//! - Exclusive / Failover: everything to the active consumer; dispatch stops when it has no
//!   permits.
//! - Shared: round robin over consumers with permits (best priority level first).
//! - Shared / Key_Shared: an entry whose `deliver_at_time` is not due yet is skipped (it waits
//!   in the replay set; the broker's timer dispatches again when it falls due).
//! - Key_Shared: each entry to the owner of its key ([`Subscription::key_owner`]); an entry
//!   whose owner has no permits waits in the replay set while other keys proceed (as upstream).

use super::bitset::count_bits;
use super::conns::Conns;
use super::subscription::{ConsumerKey, SubType, Subscription};
use super::topic::{StoredEntry, Topic};
use super::wire::{self, base_command::Type};
use crate::codec::Frame;

/// Where messages of a topic are addressed from.
struct Source {
    ledger_id: u64,
    partition: i32,
}

/// Dispatches what can be dispatched on every subscription of `topic`.
pub(crate) fn dispatch_all(topic: &mut Topic, conns: &Conns) {
    let names: Vec<String> = topic.subscriptions.keys().cloned().collect();
    for name in names {
        dispatch(topic, &name, conns);
    }
}

/// Dispatches what can be dispatched on subscription `sub_name` of `topic`; on a terminated
/// topic, then tells its consumers when they have reached the end ([`end_of_topic`]).
pub(crate) fn dispatch(topic: &mut Topic, sub_name: &str, conns: &Conns) {
    dispatch_entries(topic, sub_name, conns);
    end_of_topic(topic, sub_name, conns);
}

/// On a terminated topic whose subscription `sub_name` has dispatched and had acknowledged
/// every entry, sends REACHED_END_OF_TOPIC to each of its consumers not yet told (upstream's
/// dispatchers do when a read finds no more entries and the backlog is empty).
pub(crate) fn end_of_topic(topic: &mut Topic, sub_name: &str, conns: &Conns) {
    let len = topic.len();
    if !topic.terminated || !topic.persistent {
        return;
    }
    let Some(sub) = topic.subscriptions.get_mut(sub_name) else {
        return;
    };
    if !sub.at_end(len) {
        return;
    }
    for consumer in sub.consumers.iter_mut().filter(|c| !c.reached_end) {
        consumer.reached_end = true;
        conns.send(
            consumer.key.0,
            Frame::simple(wire::BaseCommand {
                r#type: Type::ReachedEndOfTopic as i32,
                reached_end_of_topic: Some(wire::CommandReachedEndOfTopic {
                    consumer_id: consumer.key.1,
                }),
                ..Default::default()
            }),
        );
    }
}

fn dispatch_entries(topic: &mut Topic, sub_name: &str, conns: &Conns) {
    if !topic.persistent {
        return;
    }
    let source = Source {
        ledger_id: topic.ledger_id,
        partition: topic.partition,
    };
    let now = tokio::time::Instant::now();
    let Topic {
        messages,
        subscriptions,
        deliver_at,
        txns,
        ..
    } = topic;
    // PIP-31: nothing at or after the first entry of an open transaction is read (upstream
    // `TopicTransactionBuffer`'s max read position bounds the dispatcher's reads).
    let max_read = txns.max_read(messages.len() as u64);
    let Some(sub) = subscriptions.get_mut(sub_name) else {
        return;
    };
    if sub.consumers.is_empty() {
        return;
    }
    let key_shared = sub.sub_type == SubType::KeyShared;
    // Delayed delivery applies to Shared/Key_Shared only (as upstream).
    let delays = !sub.single_active();
    let held_back = |e: u64| delays && deliver_at.get(&e).is_some_and(|due| *due > now);
    let replay: Vec<u64> = sub.replay.iter().copied().collect();
    for e in replay {
        if sub.is_acked(e) || e as usize >= messages.len() {
            sub.replay.remove(&e);
            continue;
        }
        if held_back(e) {
            continue;
        }
        if deliver(sub, e, &messages[e as usize], &source, conns) {
            sub.replay.remove(&e);
        } else if !key_shared {
            return;
        }
    }
    while sub.read_pos < max_read {
        let e = sub.read_pos;
        // An aborted transaction's entry is skipped and acknowledged (upstream
        // `AbstractBaseDispatcher.filterEntriesForConsumer`, `isTxnAborted`).
        if txns.is_aborted(e) {
            let n = messages[e as usize].num_messages();
            sub.ack_individual(e, &[], n);
            sub.read_pos += 1;
            continue;
        }
        if sub.is_acked(e) || sub.pending.contains_key(&e) || sub.replay.contains(&e) {
            sub.read_pos += 1;
            continue;
        }
        if held_back(e) {
            // Waits in the replay set until due (the timer dispatches again then).
            sub.replay.insert(e);
            sub.read_pos += 1;
            continue;
        }
        if deliver(sub, e, &messages[e as usize], &source, conns) {
            sub.read_pos += 1;
        } else if key_shared {
            sub.replay.insert(e);
            sub.read_pos += 1;
        } else {
            return;
        }
    }
}

/// Sends entry `e` to the consumer the subscription type picks, if it has permits.
fn deliver(
    sub: &mut Subscription,
    e: u64,
    entry: &StoredEntry,
    source: &Source,
    conns: &Conns,
) -> bool {
    let Some(key) = pick_consumer(sub, entry) else {
        return false;
    };
    let ack_set = sub.remaining(e).cloned();
    let cost = ack_set.as_deref().map_or(entry.num_messages(), count_bits);
    let single_active = sub.single_active();
    let redelivery_count = if single_active {
        0
    } else {
        sub.redelivery_count(e)
    };
    let Some(consumer) = sub.consumer_mut(key) else {
        return false;
    };
    if consumer.permits <= 0 {
        return false;
    }
    consumer.permits -= i64::from(cost);
    // Upstream `PersistentDispatcherSingleActiveConsumer.dispatchEntriesToConsumer` passes the
    // consumer's epoch (taken when the read was issued) to `Consumer.sendMessages`; the
    // Shared/Key_Shared dispatchers call the overload without one (DEFAULT_CONSUMER_EPOCH, so
    // `Commands.newMessageCommand` leaves `consumer_epoch` out).
    let epoch = if single_active { consumer.epoch } else { None };
    sub.pending.insert(e, key);
    let id = wire::MessageIdData {
        ledger_id: source.ledger_id,
        entry_id: e,
        partition: Some(source.partition),
        ..Default::default()
    };
    let frame = message_frame(key.1, id, redelivery_count, ack_set, epoch, entry);
    conns.send(key.0, frame);
    true
}

/// The consumer an entry goes to, if any has permits (Key_Shared: the key's owner, permits or
/// not; checked by the caller).
fn pick_consumer(sub: &mut Subscription, entry: &StoredEntry) -> Option<ConsumerKey> {
    match sub.sub_type {
        SubType::Exclusive | SubType::Failover => sub.active,
        SubType::Shared => sub.next_shared(),
        SubType::KeyShared => sub.key_owner(&entry.sticky_key()),
    }
}

/// Non-persistent topics: sends a just-published entry to one consumer with permits on each
/// subscription (chosen as for a persistent topic), with message id `(0, 0)`; subscriptions
/// without such a consumer drop it. Nothing is stored or tracked for redelivery.
///
/// Upstream `NonPersistentTopic.publishMessage` wraps every message in `EntryImpl.create(0L,
/// 0L, ...)` for each subscription's dispatcher (and completes the publish with `(0, 0)`);
/// `NonPersistentDispatcherSingleActiveConsumer` / `...MultipleConsumers` /
/// `NonPersistentStickyKeyDispatcherMultipleConsumers.sendMessages` send to the picked consumer
/// if it has permits, else count a drop. `NonPersistentSubscription` ignores acks and
/// redelivery requests (no-ops).
pub(crate) fn dispatch_transient(topic: &mut Topic, entry: &StoredEntry, conns: &Conns) {
    for sub in topic.subscriptions.values_mut() {
        let Some(key) = pick_consumer(sub, entry) else {
            continue;
        };
        let Some(consumer) = sub.consumer_mut(key) else {
            continue;
        };
        if consumer.permits <= 0 {
            continue;
        }
        consumer.permits -= i64::from(entry.num_messages());
        let id = wire::MessageIdData {
            ledger_id: 0,
            entry_id: 0,
            partition: Some(topic.partition),
            ..Default::default()
        };
        // Upstream's non-persistent dispatchers send without an epoch and without a
        // redelivery tracker (`RedeliveryTrackerDisabled`).
        conns.send(key.0, message_frame(key.1, id, 0, None, None, entry));
    }
}

/// A MESSAGE frame, as upstream `Commands.newMessageCommand` builds it: `redelivery_count`
/// only when above 0, `consumer_epoch` only when the dispatcher passed one.
fn message_frame(
    consumer_id: u64,
    message_id: wire::MessageIdData,
    redelivery_count: u32,
    ack_set: Option<Vec<i64>>,
    consumer_epoch: Option<u64>,
    entry: &StoredEntry,
) -> Frame {
    let command = wire::BaseCommand {
        r#type: Type::Message as i32,
        message: Some(wire::CommandMessage {
            consumer_id,
            message_id,
            redelivery_count: (redelivery_count > 0).then_some(redelivery_count),
            ack_set: ack_set.unwrap_or_default(),
            consumer_epoch,
        }),
        ..Default::default()
    };
    Frame::with_payload(command, entry.metadata.clone(), entry.payload.clone())
}

/// Exclusive/Failover: re-picks the active consumer after consumers changed. When it changes,
/// the previous active consumer's unacknowledged entries go back for redelivery (upstream
/// rewinds the cursor) and, on Failover, every consumer learns who is active
/// (ACTIVE_CONSUMER_CHANGE). When it does not, a just `added` Failover consumer alone learns
/// it is not active.
pub(crate) fn update_active(
    sub: &mut Subscription,
    partition: i32,
    added: Option<ConsumerKey>,
    conns: &Conns,
) {
    if !sub.single_active() {
        sub.active = None;
        return;
    }
    let new = sub.pick_active(partition);
    let old = sub.active;
    let failover = sub.sub_type == SubType::Failover;
    if new != old {
        sub.active = new;
        if let Some(old) = old {
            sub.return_pending_of(old, false);
        }
        if failover {
            for c in &sub.consumers {
                conns.send(c.key.0, active_change(c.key.1, Some(c.key) == new));
            }
        }
    } else if let (true, Some(added)) = (failover, added) {
        conns.send(added.0, active_change(added.1, Some(added) == new));
    }
}

/// An ACTIVE_CONSUMER_CHANGE frame.
fn active_change(consumer_id: u64, is_active: bool) -> Frame {
    Frame::simple(wire::BaseCommand {
        r#type: Type::ActiveConsumerChange as i32,
        active_consumer_change: Some(wire::CommandActiveConsumerChange {
            consumer_id,
            is_active: Some(is_active),
        }),
        ..Default::default()
    })
}
