//! Upstream `ProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

use std::time::Duration;

use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::producer::ProducerAccessMode;
use pulsar_sdk::{Client, Error};

use crate::common::{full, test_client, within};

const TIMEOUT: Duration = Duration::from_secs(2);

/// Two brokers: `lookup` answers every lookup `Connect` to `owner`, which serves the topics.
/// The owner's answers can then be slowed without slowing the lookups.
async fn lookup_and_owner() -> (MockBroker, MockBroker, Client) {
    let lookup = MockBroker::start().await.unwrap();
    let owner = MockBroker::start().await.unwrap();
    lookup.connect_lookups_to(&owner.service_url());
    let client = test_client(&lookup.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    (lookup, owner, client)
}

/// `ProducerImpl.connectionOpened`: when CommandProducer gets no answer within the operation
/// timeout, the client sends CloseProducer for that producer id, so a producer the broker did
/// create is not kept for nobody (an Exclusive one would fence the next).
#[tokio::test(start_paused = true)]
async fn a_create_that_times_out_is_closed_on_the_broker() {
    let (_lookup, owner, client) = lookup_and_owner().await;
    let topic = full("create-timeout");
    owner.set_response_delay(TIMEOUT * 3);
    let first = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    let created = owner.received_of(Type::Producer);
    let id = created[0].command.producer.as_ref().unwrap().producer_id;
    let close = within(
        "CloseProducer",
        owner.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the timed-out create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, id);

    // The broker kept nothing: the next Exclusive producer is not fenced.
    owner.set_response_delay(Duration::ZERO);
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(next.is_ok(), "{:?}", next.err());
}

/// `ClientCnx.handleProducerSuccess` marks a `producer_ready = false` answer as responded: a
/// WaitForExclusive create waits, past the operation timeout, until the broker grants the
/// exclusive slot (here when the Exclusive producer holding it closes).
#[tokio::test(start_paused = true)]
async fn wait_for_exclusive_waits_past_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-for-exclusive");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    // Ten operation timeouts of virtual time: still waiting, not timed out.
    tokio::time::sleep(TIMEOUT * 10).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    holder.close().await.unwrap();
    let granted = within("granted", waiting).await.unwrap();
    let granted = granted.expect("granted the exclusive slot");
    granted.send_and_wait("mine now").await.unwrap();
}

/// A WaitForExclusive create the application stops waiting for is closed on the broker (as a
/// timed-out create is, `ProducerImpl.connectionOpened`): when the slot frees up, it is not
/// granted to a producer nobody holds, and the next Exclusive producer gets it.
#[tokio::test(start_paused = true)]
async fn a_dropped_wait_for_exclusive_create_is_closed_on_the_broker() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("dropped-wait");
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    let queued = broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .expect("the waiting create reached the broker");
    let queued_id = queued[1].command.producer.as_ref().unwrap().producer_id;
    waiting.abort();
    let _ = waiting.await;
    let close = within(
        "CloseProducer",
        broker.wait_for_command(Type::CloseProducer, Duration::from_secs(10)),
    )
    .await
    .expect("the abandoned create is closed on the broker");
    assert_eq!(close.command.close_producer.unwrap().producer_id, queued_id);

    holder.close().await.unwrap();
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(
        next.is_ok(),
        "not fenced by a granted ghost: {:?}",
        next.err()
    );
}

/// r-h1: `ProducerImpl.connectionOpened` takes the partitioned case through the same path
/// (`PartitionedProducerImpl` creates one `ProducerImpl` per partition): a WaitForExclusive
/// producer on a partitioned topic also waits past the operation timeout until granted.
#[tokio::test(start_paused = true)]
async fn r_h1_partitioned_wait_for_exclusive_waits_past_the_operation_timeout() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-for-exclusive-partitioned");
    broker.set_partitions(&topic, 2);
    let holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    broker
        .wait_for_commands(Type::Producer, 4, Duration::from_secs(10))
        .await
        .expect("the waiting creates reached the broker");
    tokio::time::sleep(TIMEOUT * 10).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    holder.close().await.unwrap();
    let granted = within("granted", waiting).await.unwrap();
    let granted = granted.expect("granted the exclusive slot");
    granted.send_and_wait("mine now").await.unwrap();
}

/// r-h1: the client closing while a WaitForExclusive create waits ends the create (with an
/// error) instead of leaving the application waiting for a slot forever.
#[tokio::test(start_paused = true)]
async fn r_h1_client_close_ends_a_waiting_wait_for_exclusive_create() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("wait-then-close");
    let _holder = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await
        .unwrap();
    let waiting = {
        let (client, topic) = (client.clone(), topic.clone());
        tokio::spawn(async move {
            client
                .producer(&topic)
                .access_mode(ProducerAccessMode::WaitForExclusive)
                .create()
                .await
        })
    };
    broker
        .wait_for_commands(Type::Producer, 2, Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(TIMEOUT * 3).await;
    let _ = within("client close", client.close()).await;
    let ended = within("the waiting create ends", waiting).await.unwrap();
    // Java `PulsarClientImpl.closeAsync` closes every producer, the ones still being created
    // too: a create still waiting when the client closes does not hand out a producer.
    if let Ok(producer) = ended {
        let sent = within("send", producer.send_and_wait("after close")).await;
        panic!("the create succeeded after client.close(); a send on it: {sent:?}");
    }
}

/// r-h1: upstream deduplication is off by default (`brokerDeduplicationEnabled=false`, per
/// namespace), and then `ProducerSuccess.last_sequence_id` is -1 whatever was published
/// (`MessageDeduplication.getLastPublishedSequenceId` only knows sequence ids when enabled).
/// So a producer re-created with the same name starts again at sequence id 0, as Java's does
/// (`ProducerImpl`: `lastSequenceIdPublished` from the broker's -1).
#[tokio::test]
#[ignore = "r-h1 finding: the mock has no per-namespace deduplication switch; it always \
    answers the last stored sequence id (dedup on), so the re-created producer starts at 3; \
    needs the mock's dedup setting (off by default) and its tests that assume it on updated"]
async fn r_h1_without_deduplication_a_recreated_producer_restarts_at_sequence_zero() {
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url()).build().unwrap();
    let topic = full("dedup-off");
    let first = client.producer(&topic).name("same").create().await.unwrap();
    for i in 0..3 {
        first.send_and_wait(format!("m{i}")).await.unwrap();
    }
    first.close().await.unwrap();
    let again = client.producer(&topic).name("same").create().await.unwrap();
    again.send_and_wait("after").await.unwrap();
    let sends = broker.received_of(Type::Send);
    let last = sends.last().unwrap().command.send.as_ref().unwrap();
    assert_eq!(
        last.sequence_id, 0,
        "deduplication is off by default: the broker answers last_sequence_id -1"
    );
}

/// r-h1: `PartitionedProducerImpl.start`: when one partition's create fails (here it times
/// out: its answer comes after the operation timeout), the partitioned create fails and the
/// partitions already created are closed, so an Exclusive partitioned producer created next
/// is not fenced by a leftover partition producer.
#[tokio::test(start_paused = true)]
async fn r_h1_a_partitioned_create_with_a_partition_timing_out_leaves_nothing_behind() {
    use pulsar_sdk::mock::{MockError, MockRequest};
    use pulsar_sdk::ServerError;
    let broker = MockBroker::start().await.unwrap();
    let client = test_client(&broker.service_url())
        .operation_timeout(TIMEOUT)
        .build()
        .unwrap();
    let topic = full("partition-times-out");
    broker.set_partitions(&topic, 2);
    broker.push_error(
        MockError::new(MockRequest::Producer, ServerError::ServiceNotReady, "slow")
            .after(TIMEOUT * 3)
            .on_topic(&format!("{topic}-partition-1")),
    );
    let first = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(first.is_err(), "one partition never answered in time");
    assert!(
        broker.pending_errors().is_empty(),
        "the one slow answer was used"
    );
    tokio::time::sleep(TIMEOUT * 5).await;
    let next = client
        .producer(&topic)
        .access_mode(ProducerAccessMode::Exclusive)
        .create()
        .await;
    assert!(next.is_ok(), "fenced by a leftover: {:?}", next.err());
}
