//! Proves the integration-test harness (tests/support) against the real pulsar-lite broker and
//! the official client, without using the SDK's producer or consumer.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::official::{self, OfficialMessage, ProduceOpts};
use support::{shared_broker, unique_name, PulsarLite};

const TIMEOUT: Duration = Duration::from_secs(10);

fn messages(n: usize, tag: &str) -> Vec<OfficialMessage> {
    (0..n)
        .map(|i| OfficialMessage {
            payload: format!("{tag}-{i}").into_bytes(),
            key: Some(format!("key-{i}")),
            properties: BTreeMap::from([
                ("index".to_string(), i.to_string()),
                ("tag".to_string(), tag.to_string()),
            ]),
            event_time: Some(1_700_000_000_000 + i as u64),
        })
        .collect()
}

#[test]
fn shared_broker_accepts_tcp() {
    let started = Instant::now();
    let broker = shared_broker();
    eprintln!(
        "shared broker at {} (ready after {:.1?})",
        broker.url(),
        started.elapsed()
    );
    assert!(broker.url().starts_with("pulsar://127.0.0.1:"));
    TcpStream::connect_timeout(&broker.addr(), Duration::from_secs(2))
        .expect("the shared broker accepts TCP");
    // Same broker on every call.
    assert_eq!(shared_broker().port(), broker.port());
}

#[test]
fn official_client_round_trip_with_key_properties_and_event_time() {
    let broker = shared_broker();
    let topic = unique_name("smoke-roundtrip");
    let sent = messages(5, "m");
    let ids = official::produce(
        &broker.url(),
        &topic,
        &ProduceOpts {
            messages: sent.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ids.len(), 5);
    for id in &ids {
        assert!(
            official::parse_message_id(id).is_some(),
            "unparsable id {id}"
        );
    }

    // Shared + a fresh subscription: exact counts are reliable on pulsar-lite.
    let got = official::consume(
        &broker.url(),
        &topic,
        &unique_name("sub"),
        5,
        TIMEOUT,
        "earliest",
        "shared",
    )
    .unwrap();
    assert_eq!(got.len(), 5);
    for (i, (m, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(m.payload, s.payload, "message {i}");
        assert_eq!(m.key, s.key);
        assert_eq!(m.properties, s.properties);
        assert_eq!(m.event_time, s.event_time);
        assert_eq!(m.message_id, ids[i]);
        assert_eq!(m.redelivery_count, 0);
        assert!(m.publish_time > 1_700_000_000_000);
        assert_eq!(m.topic, format!("persistent://public/default/{topic}"));
    }

    // consume_available returns what arrived: a fresh subscription at Latest sees nothing old.
    let rest = official::consume_available(
        &broker.url(),
        &topic,
        &unique_name("sub-latest"),
        1,
        Duration::from_millis(500),
        "latest",
        "shared",
    )
    .unwrap();
    assert!(
        rest.is_empty(),
        "a Latest subscription sees no old messages: {rest:?}"
    );
}

#[tokio::test]
async fn official_client_batching_and_compression_async() {
    let broker = shared_broker();
    for compression in ["lz4", "zlib", "zstd", "snappy"] {
        let topic = unique_name(&format!("smoke-batch-{compression}"));
        let opts = ProduceOpts {
            messages: messages(10, compression),
            batching: true,
            compression: compression.to_string(),
            ..Default::default()
        };
        let ids = official::produce_async(&broker.url(), &topic, &opts)
            .await
            .unwrap();
        // Batched: entries carry batch indexes.
        assert!(
            ids.iter()
                .all(|id| official::parse_message_id(id).unwrap().3 >= 0),
            "{ids:?}"
        );
        let got = official::consume_async(
            &broker.url(),
            &topic,
            &unique_name("sub"),
            10,
            TIMEOUT,
            "earliest",
            "shared",
        )
        .await
        .unwrap();
        let payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
        let expected: Vec<_> = opts.messages.iter().map(|m| m.payload.clone()).collect();
        assert_eq!(payloads, expected, "{compression}");
    }
}

#[test]
fn restart_keeps_data() {
    let mut broker = PulsarLite::start();
    let port = broker.port();
    let topic = unique_name("smoke-restart");
    official::produce(
        &broker.url(),
        &topic,
        &ProduceOpts::payloads(["a", "b", "c"]),
    )
    .unwrap();

    let t = Instant::now();
    broker.restart();
    eprintln!("restart took {:.1?}", t.elapsed());
    assert_eq!(broker.port(), port, "same port after restart");
    assert!(
        broker.metadata_path().is_file(),
        "{}",
        broker.metadata_path().display()
    );

    let got = official::consume(
        &broker.url(),
        &topic,
        &unique_name("sub"),
        3,
        TIMEOUT,
        "earliest",
        "shared",
    )
    .unwrap();
    let payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(payloads, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);

    // Graceful stop, then the port is closed; start again, it accepts.
    broker.stop_graceful();
    assert!(TcpStream::connect_timeout(&broker.addr(), Duration::from_millis(200)).is_err());
    broker.start_again();
    TcpStream::connect_timeout(&broker.addr(), Duration::from_secs(2)).unwrap();
}

#[test]
fn with_config_partitions_every_topic() {
    let broker = PulsarLite::with_config("default_partitions = 3");
    let topic = unique_name("smoke-partitioned");
    official::produce(
        &broker.url(),
        &topic,
        &ProduceOpts::payloads(["0", "1", "2", "3", "4", "5"]),
    )
    .unwrap();
    let got = official::consume(
        &broker.url(),
        &topic,
        &unique_name("sub"),
        6,
        TIMEOUT,
        "earliest",
        "shared",
    )
    .unwrap();
    let mut partitions: Vec<i32> = got
        .iter()
        .map(|m| official::parse_message_id(&m.message_id).unwrap().2)
        .collect();
    partitions.sort();
    partitions.dedup();
    assert_eq!(partitions, vec![0, 1, 2], "round-robin over 3 partitions");
    assert!(broker.metadata_path().is_file());
}

#[test]
fn dropped_broker_is_gone() {
    let broker = PulsarLite::start();
    let addr = broker.addr();
    let dir = broker.dir().to_path_buf();
    drop(broker);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    assert!(!dir.exists(), "the data dir is removed on drop");
}

/// Helper for `broker_dies_with_its_test_process`: in a child test process only, starts the
/// shared broker, prints its port and exits without running any destructor.
#[test]
fn watchdog_helper_exit_without_drop() {
    if std::env::var_os("SUPPORT_WATCHDOG_HELPER").is_none() {
        return;
    }
    println!("PORT={}", shared_broker().port());
    std::process::exit(0);
}

#[test]
fn broker_dies_with_its_test_process() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pulsar_lite_smoke::watchdog_helper_exit_without_drop",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SUPPORT_WATCHDOG_HELPER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The test harness prints "test name ... " before the helper's own output.
    let port: u16 = stdout
        .split("PORT=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no PORT= in: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "broker on {port} outlived its test process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
