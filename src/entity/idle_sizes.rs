//! What an idle producer or consumer holds by value (issue #39): the state its task owns, which
//! sits in the task's allocation for as long as the entity lives. The bench
//! `benches/scale.rs` measures the heap an idle entity costs in all (task, channels, shared
//! state); this names the parts of its largest allocation. Run with `--nocapture` to see the
//! figures; the bounds keep traffic-sized state from creeping back into an idle entity.

use std::mem::size_of;

use crate::consumer::engine::ConsumerTask;
use crate::consumer::queue::Queued;
use crate::producer::task::ProducerTask;

/// The size of the field `f` picks out of a `T`.
fn field<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// The size of the future an async fn taking an `A` returns (what a spawned task holds).
fn returned<A, R>(_: fn(A) -> R) -> usize {
    size_of::<R>()
}

fn report(over: &mut Vec<String>, name: &str, size: usize, bound: usize) {
    println!("{name:>26}: {size:>6} bytes (bound {bound})");
    if size > bound {
        over.push(format!("{name}: {size} bytes, above its bound of {bound}"));
    }
}

/// What an entity task's loop may hold beside its task state (its `select!` branches' futures
/// and locals; ~820 bytes for the producer's, ~1,100 for the consumer's, debug build).
const LOOP: usize = 1280;

#[test]
fn an_idle_entitys_task_state_stays_small() {
    let mut over = Vec::new();
    let o = &mut over;
    report(o, "ProducerTask", size_of::<ProducerTask>(), 1100);
    report(o, "  .entity", field(|t: &ProducerTask| &t.entity), 400);
    report(o, "  .opts", field(|t: &ProducerTask| &t.opts), 16);
    report(o, "  .ctx", field(|t: &ProducerTask| &t.ctx), 200);
    report(o, "  .pending", field(|t: &ProducerTask| &t.pending), 200);
    report(o, "  .batches", field(|t: &ProducerTask| &t.batches), 300);
    report(o, "  .charge", field(|t: &ProducerTask| &t.charge), 200);
    report(o, "  .ops", field(|t: &ProducerTask| &t.ops), 100);
    // The task's loop future: the task state, the loop's locals and every `select!` branch's
    // future, for as long as the entity lives (the spawned task's allocation). Bounded above
    // the task state by what the loop adds: an `async fn run(self)` held the state twice (its
    // argument and the local it is moved into), and each timer of its own adds a `Sleep`.
    let task = size_of::<ProducerTask>();
    report(
        o,
        "ProducerTask::run",
        returned(ProducerTask::run),
        task + LOOP,
    );
    report(o, "ConsumerTask", size_of::<ConsumerTask>(), 1600);
    report(o, "  .io", field(|t: &ConsumerTask| &t.io), 450);
    report(o, "  .acks", field(|t: &ConsumerTask| &t.acks), 500);
    report(o, "  .flow", field(|t: &ConsumerTask| &t.flow), 200);
    report(o, "  .intake", field(|t: &ConsumerTask| &t.intake), 800);
    report(o, "  .seeks", field(|t: &ConsumerTask| &t.seeks), 300);
    report(o, "  .ops", field(|t: &ConsumerTask| &t.ops), 100);
    let task = size_of::<ConsumerTask>();
    report(
        o,
        "ConsumerTask::run",
        returned(ConsumerTask::run),
        task + LOOP,
    );
    // One slot of the consumer's queue: none is allocated while the consumer is idle (the
    // queue allocates at its first item, `util::lazy_queue`), a few are kept after traffic;
    // its entry is inline (boxed, it cost an allocation and a free per entry).
    report(o, "consumer queue item", size_of::<Queued>(), 300);
    report(o, "tokio Sleep", size_of::<tokio::time::Sleep>(), 200);
    report(o, "tokio Interval", size_of::<tokio::time::Interval>(), 200);
    assert!(over.is_empty(), "{over:#?}");
}
