//! The `produce`, `consume` and `typed` example binaries against a real broker (the harness's shared
//! pulsar-lite): their JSON output, exit codes and usage messages.
//!
//! `cargo test` (with no target filter) builds the examples; with a filter such as
//! `cargo test --test real_broker examples::` they may be missing or stale: run `cargo build --examples`
//! first. Each run has a hard time limit, so a hanging example fails the test instead of hanging
//! it.

use std::time::{Duration, Instant};

use pulsar_sdk::MessageId;
use serde_json::Value;
use support::examples::run;
use support::{shared_broker, unique_name};

fn produce(topic: &str, extra: &[&str]) -> Value {
    let url = shared_broker().url();
    let mut args = vec!["--url", url.as_str(), "--topic", topic];
    args.extend_from_slice(extra);
    let r = run("produce", &args, Duration::from_secs(30));
    assert_eq!(
        r.code,
        Some(0),
        "produce {args:?} failed:\nstdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "produce prints one JSON line: {}", r.stdout);
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

fn consume_args<'a>(url: &'a str, topic: &'a str, sub: &'a str, count: &'a str) -> Vec<&'a str> {
    vec![
        "--url",
        url,
        "--topic",
        topic,
        "--subscription",
        sub,
        "--type",
        "shared",
        "--initial-position",
        "earliest",
        "--count",
        count,
    ]
}

#[test]
fn produce_then_consume_with_the_examples() {
    let url = shared_broker().url();
    let topic = unique_name("examples");
    let answer = produce(
        &topic,
        &[
            "--count",
            "5",
            "--key",
            "k",
            "--property",
            "a=b",
            "--batch",
            "--compression",
            "lz4",
        ],
    );
    assert_eq!(answer["sent"], 5, "{answer}");
    let last: MessageId = answer["last_message_id"]
        .as_str()
        .unwrap_or_else(|| panic!("last_message_id is a string: {answer}"))
        .parse()
        .unwrap();
    assert_eq!(answer.as_object().unwrap().len(), 2, "{answer}");
    assert!(
        last.is_batch(),
        "--batch: the messages went out in a batch ({last})"
    );

    let sub = unique_name("sub");
    let mut args = consume_args(&url, &topic, &sub, "5");
    args.extend_from_slice(&["--timeout-secs", "20"]);
    let r = run("consume", &args, Duration::from_secs(40));
    assert_eq!(
        r.code,
        Some(0),
        "consume failed:\nstdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), 5, "one line per message:\n{}", r.stdout);
    let mut ids = Vec::new();
    for (i, m) in lines.iter().enumerate() {
        assert_eq!(m["payload"], format!("msg-{i}"), "{m}");
        assert_eq!(m["key"], "k", "{m}");
        assert_eq!(m["properties"], serde_json::json!({"a": "b"}), "{m}");
        assert_eq!(m["redelivery_count"], 0, "{m}");
        assert_eq!(
            m["topic"],
            format!("persistent://public/default/{topic}"),
            "{m}"
        );
        assert!(m["publish_time"].as_u64().unwrap() > 0, "{m}");
        let id: MessageId = m["message_id"].as_str().unwrap().parse().unwrap();
        ids.push(id);
    }
    assert_eq!(
        ids.last().copied(),
        Some(last),
        "the last consumed id is the last produced id"
    );
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order: {ids:?}");
}

#[test]
fn consume_exits_non_zero_when_too_few_messages_arrive() {
    let url = shared_broker().url();
    let topic = unique_name("examples-short");
    let answer = produce(&topic, &["--count", "5"]);
    assert_eq!(answer["sent"], 5, "{answer}");

    let sub = unique_name("sub");
    let mut args = consume_args(&url, &topic, &sub, "6");
    args.extend_from_slice(&["--timeout-secs", "2"]);
    let started = Instant::now();
    let r = run("consume", &args, Duration::from_secs(30));
    assert_ne!(
        r.code,
        Some(0),
        "6 of 5 messages cannot arrive: {}",
        r.stderr
    );
    assert!(r.code.is_some(), "exited, not killed by a signal");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited for its timeout"
    );
    assert!(
        r.stderr.contains("only 5 of 6"),
        "says what happened: {}",
        r.stderr
    );
    // The five that did arrive were printed.
    assert_eq!(r.stdout.lines().count(), 5, "{}", r.stdout);
}

#[test]
fn bad_arguments_exit_non_zero_with_a_usage_message() {
    let url = shared_broker().url();
    let cases: &[(&str, &[&str])] = &[
        ("produce", &["--url", &url, "--topic", "t"]), // no --count
        ("produce", &["--url", &url, "--count", "1"]), // no --topic
        (
            "produce",
            &["--url", &url, "--topic", "t", "--count", "many"],
        ),
        (
            "produce",
            &[
                "--url",
                &url,
                "--topic",
                "t",
                "--count",
                "1",
                "--compression",
                "rot13",
            ],
        ),
        (
            "produce",
            &[
                "--url",
                &url,
                "--topic",
                "t",
                "--count",
                "1",
                "--property",
                "novalue",
            ],
        ),
        ("produce", &["positional"]),
        ("produce", &["--topic"]), // an option without its value
        ("consume", &["--url", &url, "--topic", "t", "--count", "1"]), // no --subscription
        (
            "consume",
            &[
                "--url",
                &url,
                "--topic",
                "t",
                "--subscription",
                "s",
                "--count",
                "1",
                "--type",
                "x",
            ],
        ),
        (
            "consume",
            &[
                "--url",
                &url,
                "--topic",
                "t",
                "--subscription",
                "s",
                "--count",
                "1",
                "--initial-position",
                "middle",
            ],
        ),
        (
            "consume",
            &["--url", &url, "--topic", "t", "--subscription", "s"],
        ), // no --count
    ];
    for (name, args) in cases {
        let r = run(name, args, Duration::from_secs(20));
        assert!(
            r.code.is_some_and(|c| c != 0),
            "{name} {args:?} must fail, got {:?}; stdout: {}",
            r.code,
            r.stdout
        );
        assert!(
            r.stderr.contains(&format!("usage: {name}")),
            "{name} {args:?} prints its usage: {}",
            r.stderr
        );
        assert!(r.stderr.contains("error:"), "{name} {args:?}: {}", r.stderr);
    }
    // --help prints the usage and succeeds.
    for name in ["produce", "consume"] {
        let r = run(name, &["--help"], Duration::from_secs(20));
        assert_eq!(r.code, Some(0), "{name} --help");
        assert!(r.stdout.contains(&format!("usage: {name}")), "{}", r.stdout);
    }
}

#[test]
fn the_dead_letter_example_dead_letters_poison_messages() {
    let url = shared_broker().url();
    let topic = unique_name("ex-dlq");
    produce(&topic, &["--count", "2", "--prefix", "poison-"]);
    let sub = unique_name("ex-dlq-sub");
    let r = run(
        "dead_letter",
        &[
            "--url",
            url.as_str(),
            "--topic",
            topic.as_str(),
            "--subscription",
            sub.as_str(),
            "--max-redeliver",
            "1",
            "--nack-delay-ms",
            "100",
            "--count",
            "2",
            "--timeout-secs",
            "30",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(
        r.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    let mut payloads: Vec<&str> = lines
        .iter()
        .map(|l| l["payload"].as_str().unwrap())
        .collect();
    payloads.sort();
    assert_eq!(payloads, ["poison-0", "poison-1"]);
    for l in &lines {
        assert_eq!(l["redelivery_count"], 1);
        assert!(l["dlq_topic"].as_str().unwrap().ends_with("-DLQ"));
    }
}

/// PIP-37 with the examples: `produce --size 20000000 --chunking` sends two 20 MB messages in
/// chunks (pulsar-lite's limit is 5 MiB) between small ones; `consume` prints each one's
/// length and CRC32C, which match what `produce` reported.
#[test]
fn a_chunked_20_mb_message_with_the_examples() {
    let url = shared_broker().url();
    let topic = unique_name("examples-chunked");
    produce(&topic, &["--count", "1", "--prefix", "before-"]);
    let answer = produce(
        &topic,
        &["--count", "2", "--size", "20000000", "--chunking"],
    );
    produce(&topic, &["--count", "1", "--prefix", "after-"]);
    let last: MessageId = answer["last_message_id"].as_str().unwrap().parse().unwrap();
    assert!(last.is_chunked(), "--chunking: {last}");
    let sent = answer["payloads"].as_array().unwrap().clone();
    assert_eq!(sent.len(), 2, "{answer}");

    let sub = unique_name("sub");
    let mut args = consume_args(&url, &topic, &sub, "4");
    args.extend_from_slice(&["--timeout-secs", "60"]);
    let r = run("consume", &args, Duration::from_secs(90));
    assert_eq!(
        r.code,
        Some(0),
        "consume failed:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    assert_eq!(lines[0]["payload"], "before-0");
    assert_eq!(lines[3]["payload"], "after-0");
    for (m, want) in lines[1..3].iter().zip(&sent) {
        assert_eq!(m["len"], want["len"], "{m}");
        assert_eq!(m["crc32c"], want["crc32c"], "{m}");
        assert!(
            m.get("payload").is_none() && m.get("payload_b64").is_none(),
            "{m}"
        );
        let id: MessageId = m["message_id"].as_str().unwrap().parse().unwrap();
        assert!(id.is_chunked(), "{m}");
    }
}

#[test]
fn the_typed_example_round_trips_json_structs_and_avro_records() {
    let url = shared_broker().url();
    let topic = unique_name("examples-typed");
    let r = run(
        "typed",
        &["--url", &url, "--topic", &topic, "--count", "2"],
        Duration::from_secs(60),
    );
    assert_eq!(
        r.code,
        Some(0),
        "typed failed:\nstdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(
        lines,
        [
            serde_json::json!({"schema": "json", "schema_version": null,
                "value": {"id": 0, "item": "item-0", "quantity": 1, "note": "gift"}}),
            serde_json::json!({"schema": "json", "schema_version": null,
                "value": {"id": 1, "item": "item-1", "quantity": 2, "note": null}}),
            serde_json::json!({"schema": "avro", "schema_version": null,
                "value": {"sensor": "s0", "celsius": 20.0}}),
            serde_json::json!({"schema": "avro", "schema_version": null,
                "value": {"sensor": "s1", "celsius": 20.5}}),
        ],
        "pulsar-lite names no schema version: {}",
        r.stdout
    );
}
