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

fn report(over: &mut Vec<String>, name: &str, size: usize, bound: usize) {
    println!("{name:>26}: {size:>6} bytes (bound {bound})");
    if size > bound {
        over.push(format!("{name}: {size} bytes, above its bound of {bound}"));
    }
}

#[test]
fn an_idle_entitys_task_state_stays_small() {
    let mut over = Vec::new();
    let o = &mut over;
    report(o, "ProducerTask", size_of::<ProducerTask>(), 1600);
    report(o, "  .entity", field(|t: &ProducerTask| &t.entity), 600);
    report(o, "  .opts", field(|t: &ProducerTask| &t.opts), 16);
    report(o, "  .ctx", field(|t: &ProducerTask| &t.ctx), 200);
    report(o, "  .pending", field(|t: &ProducerTask| &t.pending), 200);
    report(o, "  .batches", field(|t: &ProducerTask| &t.batches), 300);
    report(o, "  .charge", field(|t: &ProducerTask| &t.charge), 200);
    report(o, "  .ops", field(|t: &ProducerTask| &t.ops), 100);
    report(o, "ConsumerTask", size_of::<ConsumerTask>(), 2400);
    report(o, "  .io", field(|t: &ConsumerTask| &t.io), 700);
    report(o, "  .acks", field(|t: &ConsumerTask| &t.acks), 500);
    report(o, "  .flow", field(|t: &ConsumerTask| &t.flow), 200);
    report(o, "  .intake", field(|t: &ConsumerTask| &t.intake), 800);
    report(o, "  .seeks", field(|t: &ConsumerTask| &t.seeks), 300);
    report(o, "  .ops", field(|t: &ConsumerTask| &t.ops), 100);
    // One slot of the consumer's queue (allocated 32 at a time with the consumer).
    report(o, "consumer queue item", size_of::<Queued>(), 64);
    report(o, "tokio Sleep", size_of::<tokio::time::Sleep>(), 200);
    report(o, "tokio Interval", size_of::<tokio::time::Interval>(), 200);
    assert!(over.is_empty(), "{over:#?}");
}
