//! Authentication against the mock broker requiring credentials: bad credentials are refused
//! with AuthenticationError; a rotating-token client keeps its one connection through several
//! AuthChallenge(REFRESH_AUTH_DATA) rounds with a producer and a consumer undisturbed; a provider
//! that fails on a challenge gets its connection closed with a clear error; no secret shows in
//! Debug output.

use support as common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulsar_sdk::mock::wire::{self, base_command::Type};
use pulsar_sdk::mock::{Connection, ConnectionConfig};
use pulsar_sdk::mock::{MockAuth, MockBroker, MockBrokerConfig, REFRESH_AUTH_DATA};
use pulsar_sdk::{Error, ServerError, SubscriptionType, TokenAuth};

/// A broker that accepts each `tok-` token once (so a reused token is refused), challenging
/// every `interval` if given.
async fn broker_with_fresh_tokens(interval: Option<Duration>) -> MockBroker {
    let seen = Mutex::new(HashSet::new());
    let mut auth = MockAuth::token(move |t| {
        t.starts_with("tok-") && seen.lock().unwrap().insert(t.to_owned())
    });
    if let Some(i) = interval {
        auth = auth.challenge_every(i);
    }
    MockBroker::start_with(MockBrokerConfig {
        auth: Some(auth),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn rotating_tokens() -> (TokenAuth, Arc<AtomicU32>) {
    let n = Arc::new(AtomicU32::new(0));
    let counter = n.clone();
    let auth =
        TokenAuth::from_fn(move || Ok(format!("tok-{}", counter.fetch_add(1, Ordering::SeqCst))));
    (auth, n)
}

#[tokio::test]
async fn bad_credentials_are_refused_with_authentication_error() {
    let broker = broker_with_fresh_tokens(None).await;
    for client in [
        common::test_client(&broker.service_url()).build().unwrap(),
        common::test_client(&broker.service_url())
            .auth_token("wrong")
            .build()
            .unwrap(),
    ] {
        match client.lookup_topic("t").await {
            Err(Error::Broker { code, message }) => {
                assert_eq!(code, ServerError::AuthenticationError);
                assert!(!message.is_empty());
            }
            other => panic!("expected AuthenticationError, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn rotating_tokens_keep_one_connection_through_challenges() {
    const CHALLENGES: usize = 5;
    let broker = broker_with_fresh_tokens(Some(Duration::from_millis(60))).await;
    let (auth, fetched) = rotating_tokens();
    let client = common::test_client(&broker.service_url())
        .auth_provider(auth)
        .build()
        .unwrap();
    let topic = "persistent://public/default/auth-rotation";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();

    // Produce and consume until the broker has had CHALLENGES answers.
    let mut sent = 0usize;
    let mut received = Vec::new();
    while broker.received_of(Type::AuthResponse).len() < CHALLENGES {
        producer
            .send(format!("m{sent}"))
            .await
            .unwrap()
            .await
            .unwrap();
        sent += 1;
        let msg = common::within("receive", consumer.recv()).await.unwrap();
        consumer.ack(&msg).unwrap();
        received.push(msg.payload_str().unwrap().to_owned());
        assert!(
            sent < 100_000,
            "the broker never got {CHALLENGES} auth responses"
        );
    }
    let expected: Vec<String> = (0..sent).map(|i| format!("m{i}")).collect();
    assert_eq!(received, expected, "no message lost or duplicated");

    // One connection, never reopened; every answer carried a new token.
    assert_eq!(broker.accepted_connections(), 1);
    assert_eq!(client.connections_opened(), 1);
    let responses = broker.received_of(Type::AuthResponse);
    let tokens: HashSet<Vec<u8>> = responses
        .iter()
        .map(|r| {
            let data = r
                .command
                .auth_response
                .as_ref()
                .unwrap()
                .response
                .as_ref()
                .unwrap();
            assert_eq!(data.auth_method_name.as_deref(), Some("token"));
            data.auth_data.as_ref().unwrap().to_vec()
        })
        .collect();
    assert_eq!(
        tokens.len(),
        responses.len(),
        "a fresh token for each challenge"
    );
    assert!(fetched.load(Ordering::SeqCst) as usize > CHALLENGES);
    assert_eq!(producer.state(), pulsar_sdk::State::Ready);
    assert_eq!(consumer.state(), pulsar_sdk::State::Ready);
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failing_provider_is_disconnected_with_a_clear_error() {
    let broker = broker_with_fresh_tokens(None).await;
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let auth = TokenAuth::from_fn(move || match counter.fetch_add(1, Ordering::SeqCst) {
        0 => Ok("tok-first".to_owned()),
        _ => Err("the token service is unreachable".into()),
    });
    let config = ConnectionConfig {
        auth: Some(Arc::new(auth)),
        ..Default::default()
    };
    let conn = Connection::connect_with_stream(
        broker.connect_duplex(),
        &broker.service_url(),
        None,
        &config,
    )
    .await
    .unwrap();
    let id = broker.connections()[0];
    broker.push(
        id,
        wire::BaseCommand {
            r#type: Type::AuthChallenge as i32,
            auth_challenge: Some(wire::CommandAuthChallenge {
                challenge: Some(wire::AuthData {
                    auth_method_name: Some("token".into()),
                    auth_data: Some(REFRESH_AUTH_DATA.to_vec().into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    match conn.closed().await {
        Error::Authentication { method, source } => {
            assert_eq!(method, "token");
            assert!(source.to_string().contains("unreachable"), "{source}");
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
    assert!(broker.received_of(Type::AuthResponse).is_empty());
}

#[test]
fn secrets_never_show_in_debug_output() {
    let builder = pulsar_sdk::Client::builder()
        .service_url("pulsar://localhost:6650")
        .auth_token("s3cret-token");
    let debug = format!("{builder:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    let basic = pulsar_sdk::BasicAuth::new("alice", "pa55word");
    assert!(!format!("{basic:?}").contains("pa55word"));
    let auth = pulsar_sdk::Authentication::token("s3cret-token");
    assert!(!format!("{auth:?}").contains("s3cret"));
}
