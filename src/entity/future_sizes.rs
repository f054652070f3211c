//! The size of the request-path futures (`std::mem::size_of_val` of a future not yet polled: its
//! whole state, every future it awaits inline included). A future's state sits wherever it is
//! awaited — inline in its caller's state, on the stack under `block_on` — and a debug
//! build's poll frames copy it, so a large one costs stack at every level of the chain (see
//! `tests/protocol/lifecycle/stack_depth.rs`). The bounds keep a 6 KB `BaseCommand` or a large
//! sub-future from creeping back in by value; run with `--nocapture` to see the figures.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backoff_policy::BackoffPolicy;
use crate::connection::ConnectionConfig;
use crate::core::ClientCore;
use crate::lookup::LookupService;
use crate::pool::ConnectionPool;

/// A client core for a broker nobody runs (nothing here is polled).
fn core() -> CoreRef {
    let url = ServiceUrl::parse("pulsar://127.0.0.1:1").unwrap();
    let pool = Arc::new(ConnectionPool::new(
        url.clone(),
        ConnectionConfig::default(),
        None,
    ));
    let lookup = LookupService::new(pool.clone(), 20, 1000);
    Arc::new(ClientCore::new(
        url,
        pool,
        lookup,
        Duration::from_secs(30),
        BackoffPolicy::default(),
        64 << 20,
        Duration::from_secs(60),
    ))
}

/// Prints the figure; names it in `over` if it is above its bound.
fn report(over: &mut Vec<String>, name: &str, size: usize, bound: usize) {
    println!("{name:>28}: {size:>7} bytes (bound {bound})");
    if size > bound {
        over.push(format!("{name}: {size} bytes, above its bound of {bound}"));
    }
}

#[tokio::test]
async fn request_path_futures_stay_small() {
    let core = core();
    let topic = TopicName::new("t").unwrap();
    let url = ServiceUrl::parse("pulsar://127.0.0.1:1").unwrap();
    let slot = Slot {
        kind: EntityKind::Producer,
        id: 1,
        inbound_bound: 8,
        inbound_bytes: usize::MAX,
    };
    let command: CreateCommand = Arc::new(|_| BaseCommand::default());
    let mut backoff = core.backoff();
    let group = GroupClose::new();
    let mut over = Vec::new();

    let f = core.lookup.lookup(&topic);
    report(
        &mut over,
        "LookupService::lookup",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    let f = core.connection_to(&url, 0);
    report(
        &mut over,
        "ClientCore::connection_to",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    let f = core.connection_for(&topic);
    report(
        &mut over,
        "ClientCore::connection_for",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    let f = attach_once(&core, &topic, slot, &command, None);
    report(
        &mut over,
        "entity::attach_once",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    let f = attach_with_retry(
        core.clone(),
        topic.clone(),
        slot,
        command.clone(),
        &mut backoff,
        None,
        Retry::Until(Instant::now()),
    );
    report(
        &mut over,
        "entity::attach_with_retry",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    let f = Entity::create(&core, topic.clone(), slot, command.clone(), &group);
    report(
        &mut over,
        "Entity::create",
        std::mem::size_of_val(&f),
        BOUND,
    );
    drop(f);
    assert!(over.is_empty(), "{over:#?}");
}

/// What any one of them may hold inline.
const BOUND: usize = 4 * 1024;

/// The public entry points, for the record (their bound is looser: they hold the builder's
/// options and the consumer's or producer's start-up).
#[tokio::test]
async fn entry_point_futures_stay_small() {
    let client = crate::Client::builder()
        .service_url("pulsar://127.0.0.1:1")
        .build()
        .unwrap();
    let mut over = Vec::new();
    let f = client.producer("t").create();
    report(
        &mut over,
        "ProducerBuilder::create",
        std::mem::size_of_val(&f),
        ENTRY_BOUND,
    );
    drop(f);
    let f = client.consumer("t").subscription("s").subscribe();
    report(
        &mut over,
        "ConsumerBuilder::subscribe",
        std::mem::size_of_val(&f),
        ENTRY_BOUND,
    );
    drop(f);
    assert!(over.is_empty(), "{over:#?}");
}

/// What a public entry point's future may hold inline.
const ENTRY_BOUND: usize = 4 * 1024;
