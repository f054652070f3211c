//! Stack depth: a subscribe, a producer create, a send and a receive, polled on a thread with a
//! small stack (a current-thread runtime's `block_on`, so the user's future itself sits on
//! that stack too, as under `#[tokio::main]`). A debug build's subscribe used to need
//! ~1.5 MB: 6 KB `BaseCommand`s held by value across awaits, and large sub-futures inlined
//! into their callers, so a tokio worker (2 MiB) left a user's task ~0.5 MB.
//!
//! A stack overflow aborts the process, so the work runs in a child process (this test binary
//! again, running only the ignored [`stack_probe`] with the stack size in an environment
//! variable) and the parent checks how it ended. The mock broker runs on its own runtime in the
//! child: only the client's stack is measured.

use std::process::Command;
use std::time::Duration;

use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::Client;

/// The stack the client's work must fit in (debug build). A tokio worker has 2 MiB; this
/// leaves a caller three quarters of it.
const SMALL_STACK: usize = 512 * 1024;

/// Where the child reads the stack size to run with.
const PROBE_ENV: &str = "PULSAR_SDK_STACK_PROBE";

/// The probe's name as the test harness knows it.
const PROBE: &str = "lifecycle::stack_depth::stack_probe";

/// Runs the probe in a child process with `stack` bytes of stack; whether it completed.
fn fits(stack: usize) -> Result<(), String> {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            PROBE,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, stack.to_string())
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains("1 passed") {
        Ok(())
    } else {
        Err(format!(
            "{stack} bytes of stack: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(8)
                .collect::<Vec<_>>()
                .join("\n")
        ))
    }
}

#[test]
fn subscribe_create_send_and_receive_fit_a_512_kib_stack() {
    if let Err(e) = fits(SMALL_STACK) {
        panic!("the client's work does not fit a small stack: {e}");
    }
}

/// The child's side of the test above (run by it, with the stack size in `PULSAR_SDK_STACK_PROBE`;
/// it does nothing without it). Ignored: not a test on its own.
#[test]
#[ignore = "entry point of the child process of subscribe_create_send_and_receive_fit_a_512_kib_stack"]
fn stack_probe() {
    let Some(stack) = std::env::var(PROBE_ENV).ok().and_then(|s| s.parse().ok()) else {
        return;
    };
    let broker_rt = tokio::runtime::Runtime::new().unwrap();
    let broker = broker_rt.block_on(MockBroker::start()).unwrap();
    let url = broker.service_url();
    let client_thread = std::thread::Builder::new()
        .name("small-stack".into())
        .stack_size(stack)
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(client_work(url));
        })
        .unwrap();
    client_thread.join().expect("the client's work completed");
    drop(broker);
}

async fn client_work(url: String) {
    let client = Client::builder()
        .service_url(url)
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let topic = "persistent://public/default/stack-depth";
    let mut consumer = client
        .consumer(topic)
        .subscription("s")
        .subscribe()
        .await
        .unwrap();
    let producer = client.producer(topic).create().await.unwrap();
    producer.send_and_wait("deep").await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
        .await
        .expect("a message within 10 s")
        .unwrap();
    assert_eq!(&msg.payload[..], b"deep");
    consumer.ack(&msg).unwrap();
    producer.close().await.unwrap();
    consumer.close().await.unwrap();
    client.close().await.unwrap();
}

/// Prints the smallest stack (to 16 KiB) the work fits in, for measuring: run with
/// `--ignored --nocapture stack_need`.
#[test]
#[ignore = "a measurement, not a check"]
fn stack_need() {
    let (mut lo, mut hi) = (16 * 1024, 8 * 1024 * 1024);
    assert!(fits(hi).is_ok(), "does not fit even 8 MiB");
    while hi - lo > 16 * 1024 {
        let mid = (lo + hi) / 2;
        if fits(mid).is_ok() {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    println!("the work needs at most {} KiB of stack", hi / 1024);
}
