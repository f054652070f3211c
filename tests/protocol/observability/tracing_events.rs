//! The client's `tracing` output: spans name the producer and consumer, lifecycle events
//! (connect, reconnect after a broker restart) are there, no event above trace is logged per
//! message, and the authentication token never appears, even at trace level.

use support as common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{wait_until, within};
use pulsar_sdk::mock::{MockAuth, MockBroker, MockBrokerConfig};
use pulsar_sdk::{InitialPosition, State, SubscriptionType};

const TOKEN: &str = "tok-very-secret-4711";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// Lines logged by the client (not the mock broker) at `levels`.
fn client_lines<'a>(text: &'a str, levels: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.contains("pulsar_sdk::mock"))
        .filter(|l| levels.iter().any(|lvl| l.contains(lvl)))
        .collect()
}

// A current-thread runtime: every task (client and mock broker) runs on this thread, under the
// subscriber set as its default.
#[tokio::test]
async fn spans_lifecycle_events_no_per_message_noise_and_no_secret() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // See the rebuild before the restart below.
    tracing::callsite::rebuild_interest_cache();

    let broker = MockBroker::start_with(MockBrokerConfig {
        auth: Some(MockAuth::token(|t| t == TOKEN).challenge_every(Duration::from_millis(100))),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = common::test_client(&broker.service_url())
        .auth_token(TOKEN)
        .build()
        .unwrap();
    let topic = "persistent://public/default/traced";
    let producer = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .unwrap();
    let mut consumer = client
        .consumer(topic)
        .subscription("traced-sub")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .ack_group_time(Duration::ZERO)
        .subscribe()
        .await
        .unwrap();
    let setup = captured.text();
    assert!(
        setup.contains("connected"),
        "the connection is logged:\n{setup}"
    );

    // 200 messages produced, received and acked: the client logs nothing per message above
    // trace (the handful of lines allowed are the auth challenges' and timers').
    captured.clear();
    for i in 0..200 {
        producer.send_and_wait(format!("m-{i}")).await.unwrap();
        let m = within("recv", consumer.recv()).await.unwrap();
        consumer.ack(&m).unwrap();
    }
    let traffic = captured.text();
    let loud = client_lines(&traffic, &["DEBUG", "INFO", "WARN", "ERROR"]);
    assert!(
        loud.len() < 40,
        "{} lines above trace for 200 messages:\n{}",
        loud.len(),
        loud.join("\n")
    );

    // A restart: the producer and consumer are detached with a cause and re-created, in their
    // spans (topic and id).
    // Other tests of this binary run on other threads without this (thread-local) subscriber:
    // a callsite one of them registered at the moment this subscriber was set can keep an
    // interest that leaves it out. Rebuilt now, every callsite registered so far counts it.
    tracing::callsite::rebuild_interest_cache();
    broker.restart().await.unwrap();
    wait_until("both back", || {
        producer.state() == State::Ready && consumer.state() == State::Ready
    })
    .await;
    producer.send_and_wait("after").await.unwrap();
    let text = captured.text();
    let info = client_lines(&text, &["INFO"]);
    let detached: Vec<_> = info.iter().filter(|l| l.contains("detached")).collect();
    assert!(
        detached.iter().any(|l| l.contains("producer{topic=")),
        "the producer's detach, in its span:\n{}",
        info.join("\n")
    );
    assert!(
        detached
            .iter()
            .any(|l| l.contains("consumer{topic=") && l.contains("subscription=traced-sub")),
        "the consumer's detach, in its span:\n{}",
        info.join("\n")
    );
    assert!(info.iter().any(|l| l.contains("re-created")));
    assert!(
        info.iter()
            .any(|l| l.contains("connection{id=") && l.contains("connection closed")),
        "the lost connection, in its span:\n{}",
        info.join("\n")
    );

    drop(producer);
    consumer.close().await.unwrap();
    client.close().await.unwrap();
    let all = captured.text();
    assert!(all.contains("TRACE") || all.contains("DEBUG"));
    assert!(
        !all.contains(TOKEN) && !all.contains("very-secret"),
        "the token was logged"
    );
}
