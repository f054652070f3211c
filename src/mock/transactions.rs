//! Transactions (PIP-31): the coordinator's commands, and what a transaction does to topics
//! (the transaction buffer) and subscriptions (pending acknowledgements). Each rule follows
//! the broker code named beside it; the state is in [`super::txn_state`].
//!
//! Ending a transaction goes through upstream's phases (`TransactionMetadataStoreService
//! .endTransaction`): the status becomes COMMITTING (or ABORTING), the topics and
//! subscriptions are told, then the transaction is COMMITTED (or ABORTED) and forgotten. A
//! test can crash the coordinator between the phases
//! ([`MockBroker::crash_coordinator_on_next_end`]).
//!
//! Where the mock simplifies: one coordinator table serves every coordinator id (ids
//! `0..max(1, partitions of transaction_coordinator_assign)`, as a broker owning every
//! partition of that topic); the phases run at once (no END_TXN_ON_PARTITION/SUBSCRIPTION
//! round trips, no commit/abort marker entries in the topics); what a transaction at or below
//! its coordinator's low water mark left on a partition or subscription it never registered
//! is aborted on every topic at once (see `end`); a plain acknowledgement of an
//! entry pending in a transaction is not checked against it, and a redelivered batch entry
//! carries the cursor's ack set only (its messages pending in a transaction come along).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::reply::{error, SessionView, Step};
use super::state::BrokerState;
use super::txn_state::{MockCoordinatorCrash, TxnKey, TxnMeta, TxnStatus};
use super::wire::{self, base_command::Type};
use super::{dispatch, lock, MockBroker, MockTransactions};
use crate::error::ServerError;

/// The topic whose partitions are the coordinators (upstream
/// `TopicName.TRANSACTION_COORDINATOR_ASSIGN`).
const TC_ASSIGN: &str = "persistent://pulsar/system/transaction_coordinator_assign";

/// What a broker without a coordinator does with a coordinator command: upstream
/// `ServerCnx.checkTransactionEnableAndSendError` answers ERROR NotAllowed ("Transactions are
/// not enabled.") when `transactionCoordinatorEnabled` is off; a broker that does not know
/// the commands (pulsar-lite) does not answer. `None`: served.
pub(crate) fn gate(view: SessionView<'_>, request_id: u64) -> Option<Step> {
    match view.config.transactions {
        MockTransactions::Enabled => None,
        MockTransactions::Unanswered => Some(Step::Ignore),
        MockTransactions::Disabled => Some(Step::Reply(error(
            request_id,
            ServerError::NotAllowed,
            "Transactions are not enabled.",
        ))),
    }
}

fn coordinator_exists(state: &BrokerState, tc_id: u64) -> bool {
    tc_id < u64::from(state.topics.partitions(TC_ASSIGN).max(1))
}

fn code_and_message(r: Result<(), (ServerError, String)>) -> (Option<i32>, Option<String>) {
    match r {
        Ok(()) => (None, None),
        Err((code, message)) => (Some(code.code()), Some(message)),
    }
}

/// TC_CLIENT_CONNECT_REQUEST: success for a coordinator this cluster has, else
/// `TransactionCoordinatorNotFound` (upstream `TransactionMetadataStoreService
/// .handleTcClientConnect` fails for a coordinator it does not own).
pub(crate) fn tc_connect(state: &BrokerState, cmd: &wire::CommandTcClientConnectRequest) -> Step {
    let r = if coordinator_exists(state, cmd.tc_id) {
        Ok(())
    } else {
        Err((
            ServerError::TransactionCoordinatorNotFound,
            format!("transaction coordinator {} not found", cmd.tc_id),
        ))
    };
    let (error, message) = code_and_message(r);
    Step::Reply(wire::BaseCommand {
        r#type: Type::TcClientConnectResponse as i32,
        tc_client_connect_response: Some(wire::CommandTcClientConnectResponse {
            request_id: cmd.request_id,
            error,
            message,
        }),
        ..Default::default()
    })
}

/// NEW_TXN: a new id `(tc_id, sequence)` whose timeout starts now (upstream
/// `TransactionMetadataStoreService.newTransaction`; its `TransactionTimeoutTracker` aborts it
/// when the timeout, `txn_ttl_seconds` in milliseconds, passes).
pub(crate) fn new_txn(state: &mut BrokerState, cmd: &wire::CommandNewTxn) -> Step {
    let tc_id = cmd.tc_id();
    let mut resp = wire::CommandNewTxnResponse {
        request_id: cmd.request_id,
        ..Default::default()
    };
    if coordinator_exists(state, tc_id) {
        let id = state.coordinator.next_id(tc_id);
        let ttl = Duration::from_millis(cmd.txn_ttl_seconds());
        state.coordinator.open.insert(
            id,
            TxnMeta {
                status: TxnStatus::Open,
                deadline: crate::util::deadline_after(ttl),
                partitions: Default::default(),
                subscriptions: Default::default(),
            },
        );
        state.timers.wake();
        resp.txnid_most_bits = Some(id.0);
        resp.txnid_least_bits = Some(id.1);
    } else {
        resp.error = Some(ServerError::TransactionCoordinatorNotFound.code());
        resp.message = Some(format!("transaction coordinator {tc_id} not found"));
    }
    Step::Reply(wire::BaseCommand {
        r#type: Type::NewTxnResponse as i32,
        new_txn_response: Some(resp),
        ..Default::default()
    })
}

/// The transaction `id` the coordinator keeps, or its error: an ended transaction is gone
/// from its store (upstream `MLTransactionMetadataStore.updateTxnStatus` removes it once
/// committed or aborted), so both unknown and ended ones are `TransactionNotFound`.
fn kept_txn(state: &mut BrokerState, id: TxnKey) -> Result<&mut TxnMeta, (ServerError, String)> {
    state.coordinator.open.get_mut(&id).ok_or_else(|| {
        (
            ServerError::TransactionNotFound,
            format!("transaction ({},{}) not found", id.0, id.1),
        )
    })
}

/// The transaction `id` if it is OPEN: one being ended refuses new partitions and
/// subscriptions with `InvalidTxnStatus` (upstream `TxnMetaImpl.checkTxnStatus(OPEN)`).
fn open_txn(state: &mut BrokerState, id: TxnKey) -> Result<&mut TxnMeta, (ServerError, String)> {
    let meta = kept_txn(state, id)?;
    if meta.status != TxnStatus::Open {
        return Err(invalid_status(id, TxnStatus::Open, meta.status));
    }
    Ok(meta)
}

/// Upstream `InvalidTxnStatusException(txnID, expected, actual)`.
fn invalid_status(id: TxnKey, expected: TxnStatus, actual: TxnStatus) -> (ServerError, String) {
    (
        ServerError::InvalidTxnStatus,
        format!(
            "Expect Txn `({},{})` to be in {} status but it is in {} status",
            id.0,
            id.1,
            expected.name(),
            actual.name()
        ),
    )
}

/// ADD_PARTITION_TO_TXN (upstream `MLTransactionMetadataStore.addProducedPartitionToTxn`).
pub(crate) fn add_partition(state: &mut BrokerState, cmd: &wire::CommandAddPartitionToTxn) -> Step {
    let id = (cmd.txnid_most_bits(), cmd.txnid_least_bits());
    let r = open_txn(state, id).map(|m| m.partitions.extend(cmd.partitions.iter().cloned()));
    let (error, message) = code_and_message(r);
    Step::Reply(wire::BaseCommand {
        r#type: Type::AddPartitionToTxnResponse as i32,
        add_partition_to_txn_response: Some(wire::CommandAddPartitionToTxnResponse {
            request_id: cmd.request_id,
            txnid_most_bits: Some(id.0),
            txnid_least_bits: Some(id.1),
            error,
            message,
        }),
        ..Default::default()
    })
}

/// ADD_SUBSCRIPTION_TO_TXN (upstream `MLTransactionMetadataStore.addAckedPartitionToTxn`).
pub(crate) fn add_subscription(
    state: &mut BrokerState,
    cmd: &wire::CommandAddSubscriptionToTxn,
) -> Step {
    let id = (cmd.txnid_most_bits(), cmd.txnid_least_bits());
    let r = open_txn(state, id).map(|m| {
        m.subscriptions.extend(
            cmd.subscription
                .iter()
                .map(|s| (s.topic.clone(), s.subscription.clone())),
        )
    });
    let (error, message) = code_and_message(r);
    Step::Reply(wire::BaseCommand {
        r#type: Type::AddSubscriptionToTxnResponse as i32,
        add_subscription_to_txn_response: Some(wire::CommandAddSubscriptionToTxnResponse {
            request_id: cmd.request_id,
            txnid_most_bits: Some(id.0),
            txnid_least_bits: Some(id.1),
            error,
            message,
        }),
        ..Default::default()
    })
}

/// END_TXN, as upstream `TransactionMetadataStoreService.endTransaction`:
///
/// - an OPEN transaction becomes COMMITTING (ABORTING), then every registered partition and
///   subscription is told (END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION, here at once),
///   then it is COMMITTED (ABORTED) and forgotten, and the answer is a success;
/// - one already COMMITTING with a COMMIT (ABORTING with an ABORT), i.e. a resend after the
///   answer was lost, finishes the same way and succeeds;
/// - one being ended the other way is refused with `InvalidTxnStatus`;
/// - an unknown or already ended one is `TransactionNotFound`.
///
/// A crash asked for with [`MockBroker::crash_coordinator_on_next_end`] stops after the
/// phase it names: no answer, and the connection is closed.
pub(crate) fn end_txn(state: &mut BrokerState, cmd: &wire::CommandEndTxn) -> Step {
    let id = (cmd.txnid_most_bits(), cmd.txnid_least_bits());
    let commit = cmd.txn_action() == wire::TxnAction::Commit;
    let ending = if commit {
        TxnStatus::Committing
    } else {
        TxnStatus::Aborting
    };
    let r = kept_txn(state, id).and_then(|meta| match meta.status {
        TxnStatus::Open => {
            meta.status = ending;
            Ok(())
        }
        s if s == ending => Ok(()),
        s => Err(invalid_status(id, ending, s)),
    });
    if r.is_ok() {
        match state.coordinator.crash_on_end.take() {
            Some(MockCoordinatorCrash::BeforeEnding) => {
                return Step::Close(format!(
                    "coordinator crashed with transaction ({},{}) {}",
                    id.0,
                    id.1,
                    ending.name()
                ));
            }
            Some(MockCoordinatorCrash::BeforeAnswer) => {
                end(state, id, commit);
                return Step::Close(format!(
                    "coordinator crashed before answering the end of ({},{})",
                    id.0, id.1
                ));
            }
            None => end(state, id, commit),
        }
    }
    let (error, message) = code_and_message(r);
    Step::Reply(wire::BaseCommand {
        r#type: Type::EndTxnResponse as i32,
        end_txn_response: Some(wire::CommandEndTxnResponse {
            request_id: cmd.request_id,
            txnid_most_bits: Some(id.0),
            txnid_least_bits: Some(id.1),
            error,
            message,
        }),
        ..Default::default()
    })
}

/// A coordinator loaded again (a broker restart) finishes the transactions it finds
/// COMMITTING or ABORTING (upstream `TransactionRecoverTrackerImpl
/// .handleCommittingAndAbortingTransaction`); open ones keep their timeouts.
pub(crate) fn recover(state: &mut BrokerState) {
    for (id, commit) in state.coordinator.being_ended() {
        end(state, id, commit);
    }
}

impl MockBroker {
    /// Crashes the transaction coordinator at `at` while it ends the next transaction (the
    /// next END_TXN it accepts): that END_TXN gets no answer and the connection it came on is
    /// closed, as when the broker serving the coordinator goes away mid-commit and another
    /// loads it from its transaction log. The client's resend then meets the coordinator's
    /// recovered state: see [`MockCoordinatorCrash`]. Only with
    /// [`MockTransactions::Enabled`].
    pub fn crash_coordinator_on_next_end(&self, at: MockCoordinatorCrash) {
        lock(&self.shared().state).coordinator.crash_on_end = Some(at);
    }

    /// Answers GET_LAST_MESSAGE_ID with the last entry stored even when it belongs to an
    /// aborted transaction (`true`), as brokers before apache/pulsar#22610 did: an id no
    /// consumer or reader is ever given. `false` (the default) skips them, as brokers with
    /// the fix (`getLastDispatchablePosition`). For testing what waits for a last id (a
    /// reader's `has_message_available`, a table view's `create` and `refresh`).
    pub fn set_last_message_id_names_aborted(&self, on: bool) {
        lock(&self.shared().state).coordinator.last_id_names_aborted = on;
    }
}

/// Ends transaction `id` everywhere it went, and forgets it; then ends, on every topic and
/// subscription, what its coordinator's transactions at or below the new low water mark left
/// there without being told (upstream `TopicTransactionBuffer.handleLowWaterMark` and
/// `PendingAckHandleImpl.handleLowWaterMark`, on each END_TXN_ON_PARTITION /
/// _SUBSCRIPTION: such a transaction is aborted). That is what a SEND or ACK in a
/// transaction to a partition or subscription never registered with it left (the
/// coordinator never tells them), which would otherwise hold the topic's max read position
/// or the acknowledged entries for ever. Upstream does it on the topics and subscriptions
/// the ending transaction went to; the mock on every one.
///
/// - Its partitions (upstream `TopicTransactionBuffer.commitTxn` / `abortTxn`): the
///   transaction leaves the ongoing set, so the max read position moves past its entries
///   (`removeTxnAndUpdateMaxReadPosition`); an abort also records its entries as aborted,
///   which dispatchers skip and acknowledge (`AbstractBaseDispatcher.filterEntriesForConsumer`
///   with `isTxnAborted`). Then the topic dispatches again.
/// - Its subscriptions (upstream `PendingAckHandleImpl.commitTxn` / `abortTxn`): a commit
///   applies its pending acknowledgements to the cursor; an abort drops them and redelivers
///   the messages (below).
fn end(state: &mut BrokerState, id: TxnKey, commit: bool) {
    let Some(meta) = state.coordinator.open.remove(&id) else {
        return;
    };
    let BrokerState { topics, conns, .. } = &mut *state;
    for name in &meta.partitions {
        if let Some(topic) = topics.get_mut(name) {
            topic.txns.end(id, commit);
            dispatch::dispatch_all(topic, conns);
        }
    }
    for (name, sub_name) in &meta.subscriptions {
        if let Some(topic) = topics.get_mut(name) {
            end_on_subscription(topic, sub_name, id, commit, conns);
        }
    }
    tracing::debug!(txn = ?id, commit, "mock broker: transaction ended");
    let Some(lwm) = state.coordinator.low_water_mark(id.0) else {
        return;
    };
    let BrokerState { topics, conns, .. } = &mut *state;
    for topic in topics.iter_mut() {
        let left = topic.txns.below(id.0, lwm);
        for txn in &left {
            topic.txns.end(*txn, false);
        }
        if !left.is_empty() {
            tracing::debug!(txns = ?left, "mock broker: aborted below the low water mark");
            dispatch::dispatch_all(topic, conns);
        }
        let subs: Vec<(String, BTreeSet<TxnKey>)> = topic
            .subscriptions
            .iter()
            .map(|(name, sub)| (name.clone(), sub.txn_acks.below(id.0, lwm)))
            .filter(|(_, txns)| !txns.is_empty())
            .collect();
        for (sub_name, txns) in subs {
            for txn in txns {
                end_on_subscription(topic, &sub_name, txn, false, conns);
            }
        }
    }
}

/// Transaction `id` ends on subscription `sub_name` of `topic` (upstream
/// `PendingAckHandleImpl.commitTxn` / `abortTxn`).
fn end_on_subscription(
    topic: &mut super::topic::Topic,
    sub_name: &str,
    id: TxnKey,
    commit: bool,
    conns: &super::conns::Conns,
) {
    let super::topic::Topic {
        messages,
        subscriptions,
        ..
    } = &mut *topic;
    let Some(sub) = subscriptions.get_mut(sub_name) else {
        return;
    };
    let (individual, cumulative) = sub.txn_acks.take(id);
    if commit {
        // Upstream `individualAckCommitCommon`: the positions, with their ack sets, are
        // acknowledged on the cursor (`PersistentSubscription.acknowledgeMessage`), which
        // ANDs a batch's sets: the entry is acknowledged once all its messages are.
        let count = |e: u64| messages.get(e as usize).map_or(1, |m| m.num_messages());
        for (e, part) in individual {
            sub.ack_individual(e, part.as_deref().unwrap_or(&[]), count(e));
        }
        if let Some((e, set)) = cumulative {
            sub.ack_cumulative(e, &set, count(e));
        }
    } else {
        // Upstream `PendingAckHandleImpl.internalAbortTxn` redelivers: the individually
        // acknowledged positions (`redeliverUnacknowledgedMessages(consumer, positions)`;
        // a batch entry comes with the cursor's ack set, so the messages this transaction
        // held come again, `individualAckAbortCommon` having released them), or, for a
        // cumulative acknowledgement, everything unacknowledged
        // (`redeliverUnacknowledgedMessages(consumer, DEFAULT_CONSUMER_EPOCH)`).
        for (e, _) in individual {
            if !sub.is_acked(e) {
                sub.pending.remove(&e);
                sub.replay.insert(e);
            }
        }
        if cumulative.is_some() {
            sub.return_all_pending();
        }
    }
    dispatch::dispatch(topic, sub_name, conns);
}

/// Aborts the open transactions whose timeout passed (upstream
/// `TransactionTimeoutTrackerImpl` → `endTransactionForTimeout`: an abort).
pub(crate) fn expire(state: &mut BrokerState, now: Instant) {
    for id in state.coordinator.expired(now) {
        end(state, id, false);
    }
}

/// A SEND in transaction `id` to a topic, before it is stored: refused once the transaction
/// ended, i.e. is at or below its coordinator's low water mark (upstream
/// `TopicTransactionBuffer.internalAppendBufferToTxn`: NotAllowed, "Transaction ... has been
/// ended"). Upstream's buffer checks nothing else (neither that the coordinator issued the id
/// nor that the partition is registered with it): such a SEND is stored, and its entries are
/// aborted once the low water mark passes them (see [`end`]).
pub(crate) fn check_send(state: &BrokerState, id: TxnKey) -> Result<(), String> {
    if state
        .coordinator
        .low_water_mark(id.0)
        .is_some_and(|lwm| id.1 <= lwm)
    {
        return Err(format!(
            "Transaction [({},{})] has been ended. Please use a new transaction to send message.",
            id.0, id.1
        ));
    }
    Ok(())
}

/// A transactional ACK (`txnid` set), as upstream `PendingAckHandleImpl`, answered with
/// ACK_RESPONSE (`request_id` and the txn id echoed). `count`: the number of messages of a
/// stored entry.
///
/// - individual (`internalIndividualAcknowledgeMessage`, see [`PendingAcks::add`]): an entry
///   already acknowledged, or already pending in a transaction, is a `TransactionConflict`;
///   for a message of a batch (an `ack_set`), only the same message acknowledged on the
///   cursor or pending in a transaction is. Else it is pending in this transaction until it
///   ends, and once every message of the entry is acknowledged or pending, the consumer no
///   longer holds it (a consumer that leaves does not give it back for redelivery);
/// - cumulative (`internalCumulativeAcknowledgeMessage`), on Exclusive/Failover only (else
///   NotAllowed, `Subscription.isCumulativeAckMode`): a position at or before the
///   mark-delete position, while another transaction holds the subscription's pending
///   cumulative acknowledgement, or at or before the one this transaction holds (with its
///   ack set: `compareToWithAckSet`, more messages acknowledged is later), is a
///   `TransactionConflict`; else it is the pending one (`handleCumulativeAck`).
///
/// [`PendingAcks::add`]: super::txn_state::PendingAcks::add
pub(crate) fn ack(
    sub: &mut super::subscription::Subscription,
    cmd: &wire::CommandAck,
    count: impl Fn(u64) -> Option<u32>,
) -> Step {
    let id = (cmd.txnid_most_bits(), cmd.txnid_least_bits());
    let cumulative = cmd.ack_type() == wire::command_ack::AckType::Cumulative;
    let conflict = |what: String| Err((ServerError::TransactionConflict, what));
    // How far a position reaches inside its entry: the messages it acknowledges.
    let reach = |set: &[i64], n: u32| {
        if set.is_empty() {
            n
        } else {
            n.saturating_sub(super::subscription::count_bits(set))
        }
    };
    let mut r = Ok(());
    for m in &cmd.message_id {
        let e = m.entry_id;
        let n = count(e).unwrap_or(1);
        r = if cumulative {
            if !sub.single_active() {
                Err((
                    ServerError::NotAllowed,
                    "Cumulative ack is not supported for shared subscriptions".to_owned(),
                ))
            } else if e < sub.ack_floor {
                conflict(format!(
                    "cumulative ack at {e}: at or before the mark-delete position"
                ))
            } else {
                match &sub.txn_acks.cumulative {
                    Some((other, _, _)) if *other != id => conflict(format!(
                        "transaction ({},{}) already holds a cumulative ack",
                        other.0, other.1
                    )),
                    Some((_, held, held_set))
                        if (e, reach(&m.ack_set, n))
                            <= (*held, reach(held_set, count(*held).unwrap_or(1))) =>
                    {
                        conflict(format!(
                            "cumulative ack at {e}: at or before the {held} this transaction holds"
                        ))
                    }
                    _ => {
                        sub.txn_acks.cumulative = Some((id, e, m.ack_set.clone()));
                        Ok(())
                    }
                }
            }
        } else if sub.is_acked(e) {
            conflict(format!("message {e} is already acknowledged"))
        } else {
            let part = (!m.ack_set.is_empty()).then(|| m.ack_set.clone());
            let remaining = sub.remaining(e).cloned();
            match sub.txn_acks.add(id, e, part, n, remaining.as_deref()) {
                Err(what) => conflict(what),
                Ok(()) => {
                    // No longer the consumer's to redeliver once all of it is taken (upstream
                    // `Consumer.individualAckWithTransaction` →
                    // `checkCanRemovePendingAcksAndHandle`).
                    if sub.txn_acks.covers(e, n, remaining.as_deref()) {
                        sub.pending.remove(&e);
                    }
                    Ok(())
                }
            }
        };
        if r.is_err() {
            break;
        }
    }
    let (error, message) = code_and_message(r);
    match cmd.request_id {
        Some(request_id) => Step::Reply(wire::BaseCommand {
            r#type: Type::AckResponse as i32,
            ack_response: Some(wire::CommandAckResponse {
                consumer_id: cmd.consumer_id,
                txnid_most_bits: Some(id.0),
                txnid_least_bits: Some(id.1),
                error,
                message,
                request_id: Some(request_id),
            }),
            ..Default::default()
        }),
        None => Step::Ignore,
    }
}
