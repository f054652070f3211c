//! State streams, `closed()` futures, and what a client close does to its producers and
//! consumers.

use common::client;
use support as common;

use std::time::Duration;

use common::{full, within};
use futures::{FutureExt, StreamExt};
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{Error, InitialPosition, State, StateStream};

/// Collects a state stream from a spawned task (it is `Send + 'static`) until it ends.
fn collect(states: StateStream) -> tokio::task::JoinHandle<Vec<State>> {
    tokio::spawn(states.collect::<Vec<_>>())
}

#[test]
fn state_streams_and_closed_futures_can_move_into_spawned_tasks() {
    fn send_static<T: Send + 'static>(_: &T) {}
    async fn demo(p: pulsar_sdk::Producer, c: pulsar_sdk::Consumer, r: pulsar_sdk::Reader) {
        send_static(&p.states());
        send_static(&p.closed());
        send_static(&c.states());
        send_static(&c.closed());
        send_static(&r.states());
        send_static(&r.closed());
    }
    let _ = demo;
}

#[tokio::test]
async fn a_producer_state_stream_follows_a_restart_and_ends_with_its_close() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer(full("states-producer"))
        .create()
        .await
        .unwrap();
    let mut states = producer.states();
    assert_eq!(within("first", states.next()).await, Some(State::Ready));
    // A restart: Reconnecting lasts at least the downtime, and Ready comes back after it.
    let watch = async {
        let mut seen = Vec::new();
        while let Some(s) = states.next().await {
            seen.push(s);
            if s == State::Ready {
                break;
            }
        }
        seen
    };
    let (restarted, seen) = tokio::join!(broker.restart_after(Duration::from_millis(300)), watch);
    restarted.unwrap();
    assert_eq!(seen, [State::Reconnecting, State::Ready]);
    let ended = producer.closed();
    assert!(ended.now_or_never().is_none(), "not closed yet");
    let ended = tokio::spawn(producer.closed());
    producer.close().await.unwrap();
    assert_eq!(within("closed()", ended).await.unwrap(), State::Closed);
    let rest: Vec<State> = within("the rest", states.collect()).await;
    assert_eq!(rest.last(), Some(&State::Closed), "{rest:?}");
    // On a closed producer: at once.
    assert_eq!(producer.closed().now_or_never(), Some(State::Closed));
    let again: Vec<State> = within("a new stream", producer.states().collect()).await;
    assert_eq!(again, [State::Closed]);
}

#[tokio::test]
async fn a_consumer_or_reader_closed_future_resolves_on_close_and_on_drop() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("states-consumer");
    let consumer = client
        .consumer(&topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let ended = tokio::spawn(consumer.closed());
    let states = collect(consumer.states());
    consumer.close().await.unwrap();
    assert_eq!(within("closed()", ended).await.unwrap(), State::Closed);
    let seen = within("states", states).await.unwrap();
    assert_eq!(seen.first(), Some(&State::Ready));
    assert_eq!(seen.last(), Some(&State::Closed));

    let reader = client.reader(&topic).create().await.unwrap();
    assert_eq!(reader.state(), State::Ready);
    let ended = tokio::spawn(reader.closed());
    drop(reader);
    assert_eq!(
        within("closed() on drop", ended).await.unwrap(),
        State::Closed
    );
}

#[tokio::test]
async fn after_a_client_close_sends_fail_at_once_and_nothing_shows_reconnecting() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = full("client-close");
    let producer = client.producer(&topic).create().await.unwrap();
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let producer_states = collect(producer.states());
    let consumer_states = collect(consumer.states());
    let consumer_ended = tokio::spawn(consumer.closed());
    producer.send_and_wait("before").await.unwrap();
    client.close().await.unwrap();

    // Refused at once: no `Ok(SendFuture)` that fails later.
    match producer.send("after").now_or_never() {
        Some(Err(Error::Closed)) => {}
        other => panic!("a send after the client closed: {other:?}"),
    }
    assert!(matches!(
        producer.send_and_wait("after").await,
        Err(Error::Closed)
    ));
    assert_eq!(producer.state(), State::Closed);
    assert_eq!(consumer.state(), State::Closed);
    assert_eq!(
        within("consumer closed()", consumer_ended).await.unwrap(),
        State::Closed
    );
    for (what, states) in [("producer", producer_states), ("consumer", consumer_states)] {
        let seen = within("states", states).await.unwrap();
        assert!(!seen.contains(&State::Reconnecting), "{what}: {seen:?}");
        assert_eq!(seen.last(), Some(&State::Closed), "{what}: {seen:?}");
    }
    // What was delivered may still be read; then the consumer ends.
    let ended = within("the consumer ends", async {
        loop {
            if let Err(e) = consumer.recv().await {
                break e;
            }
        }
    })
    .await;
    assert!(matches!(ended, Error::Closed), "{ended:?}");
    // New producers and consumers are refused at once.
    assert!(matches!(
        within("create", client.producer(&topic).create()).await,
        Err(Error::Closed)
    ));
    assert!(matches!(
        within(
            "subscribe",
            client.consumer(&topic).subscription("t").subscribe()
        )
        .await,
        Err(Error::Closed)
    ));
    assert_eq!(broker.accepted_connections(), 1, "nothing reconnected");
}

#[tokio::test]
async fn sends_are_refused_as_soon_as_a_client_close_starts() {
    let broker = MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let producer = client
        .producer(full("client-closing"))
        .create()
        .await
        .unwrap();
    producer.send_and_wait("before").await.unwrap();
    // The broker is slow, so the graceful close takes a while.
    broker.set_response_delay(Duration::from_millis(300));
    let mut closing = Box::pin(client.close());
    assert!(futures::poll!(closing.as_mut()).is_pending());
    match producer.send("during").now_or_never() {
        Some(Err(Error::Closed)) => {}
        other => panic!("a send while the client closes: {other:?}"),
    }
    within("client close", closing).await.unwrap();
}

/// A producer task dropped without ending (its runtime shut down) leaves no queued send
/// hanging: like the tokio channel the queue replaced, what it never took is dropped, so the
/// receipt resolves to `Closed` (a send is queued synchronously, before the task runs).
#[test]
fn a_send_queued_when_the_producer_task_is_dropped_resolves_to_closed() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (broker, client, producer, receipt) = rt.block_on(async {
        let broker = MockBroker::start().await.unwrap();
        let client = client(&broker.service_url());
        let producer = client
            .producer(full("task-dropped"))
            .batching(false)
            .create()
            .await
            .unwrap();
        // Taken by the fast path without yielding: the task has not seen it yet.
        let receipt = producer.send("queued").await.unwrap();
        (broker, client, producer, receipt)
    });
    // Drops every task of the runtime, the producer's among them.
    drop(rt);
    match receipt.now_or_never() {
        Some(Err(Error::Closed)) => {}
        other => panic!("the receipt of a send the task never took: {other:?}"),
    }
    // What is left is dropped inside a runtime (it may spawn clean-ups).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        drop(producer);
        drop(client);
        drop(broker);
    });
}

/// `close_within` bounds the whole client close by the caller's deadline, however many
/// entities the client has and however long the operation timeout is: against a stalled
/// broker it gives up at the deadline, the pending send fails on its receipt (not lost
/// silently), and the entities end closed.
#[tokio::test]
async fn a_client_close_within_a_deadline_against_a_stalled_broker_ends_at_the_deadline() {
    let broker = MockBroker::start().await.unwrap();
    // An operation timeout far beyond the test's patience: only the deadline can end the close.
    let client = common::test_client(&broker.service_url())
        .operation_timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let producer = client
        .producer(full("close-within"))
        .batching(false)
        .create()
        .await
        .unwrap();
    let consumer = client
        .consumer(full("close-within"))
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let consumer2 = client
        .consumer(full("close-within-2"))
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    broker.set_unresponsive(true);
    let receipt = producer.send("never receipted").await.unwrap();
    // The broker got the send but will never answer it.
    let sent = broker
        .wait_for_command(
            pulsar_sdk::mock::wire::base_command::Type::Send,
            Duration::from_secs(10),
        )
        .await;
    assert!(sent.is_some(), "the broker never got the send");

    let closed = within(
        "close_within against a stalled broker",
        client.close_within(Duration::from_millis(300)),
    )
    .await;
    match closed {
        Err(Error::Timeout { operation, after }) => {
            assert_eq!(operation, "client close");
            assert_eq!(after, Duration::from_millis(300));
        }
        other => panic!("close_within past its deadline: {other:?}"),
    }
    // The message the broker never confirmed fails on its receipt: the application knows.
    let failed = within("the pending receipt", receipt).await;
    assert!(failed.is_err(), "a send cut off by the close: {failed:?}");
    // Every entity ends.
    within("the producer's end", producer.closed()).await;
    within("the consumer's end", consumer.closed()).await;
    within("the second consumer's end", consumer2.closed()).await;
}

/// Review r-38: `close_within(Duration::ZERO)` still closes the client: whatever it
/// returns, the client is closed afterwards (Java `closeAsync` marks the client closed
/// before waiting for anything) and a new producer is refused with `Error::Closed`.
#[tokio::test]
async fn close_within_zero_still_closes_the_client() {
    let broker = pulsar_sdk::mock::MockBroker::start().await.unwrap();
    let client = client(&broker.service_url());
    let topic = "persistent://public/default/r38-close-zero";
    let _p = client.producer(topic).create().await.unwrap();
    let _ = client.close_within(Duration::ZERO).await;
    let r = client.producer(topic).create().await;
    assert!(matches!(r, Err(pulsar_sdk::Error::Closed)), "{:?}", r.err());
}
