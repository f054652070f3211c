//! Tests of the lazily allocating queue: its storage, its end, its closing.

use super::*;

/// An owner keeping 4 to 16 slots.
#[derive(Debug, Default)]
struct Plain;

impl Owner for Plain {
    const RETAIN: Retain = Retain { min: 4, max: 16 };
}

/// An owner whose senders wait for the receiver's end.
#[derive(Debug, Default)]
struct Closing(tokio::sync::Notify);

impl Owner for Closing {
    const RETAIN: Retain = Plain::RETAIN;
    fn receiver_closed(&self) {
        self.0.notify_waiters();
    }
}

impl AsRef<tokio::sync::Notify> for Closing {
    fn as_ref(&self) -> &tokio::sync::Notify {
        &self.0
    }
}

type Q = (Sender<u64, (), Plain>, Receiver<u64, (), Plain>);

fn queue() -> Q {
    channel((), Plain)
}

fn capacity(rx: &Receiver<u64, (), Plain>) -> usize {
    rx.chan().lock().capacity()
}

const MIN: usize = Plain::RETAIN.min as usize;
const MAX: usize = Plain::RETAIN.max as usize;

/// Issue #39: a queue nothing was sent to holds no storage; a burst grows it, and once it is
/// taken out the queue keeps at most twice what its retention allows, not the burst's size.
#[test]
fn an_idle_queue_holds_no_storage_and_a_drained_one_gives_it_back() {
    let (tx, mut rx) = queue();
    assert_eq!(capacity(&rx), 0, "nothing before the first item");
    for i in 0..1_000 {
        tx.send(i).unwrap();
    }
    assert!(capacity(&rx) >= 1_000);
    for i in 0..1_000 {
        assert_eq!(rx.try_recv().unwrap(), i, "in order");
    }
    assert!(capacity(&rx) <= 2 * MAX, "{} slots kept", capacity(&rx));
    // A trickle afterwards: the recent bursts' size halves at each emptying, down to `min`.
    for i in 0..8 {
        tx.send(i).unwrap();
        assert_eq!(rx.try_recv().unwrap(), i);
    }
    assert!(capacity(&rx) <= 2 * MIN, "{} slots kept", capacity(&rx));
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
}

/// A queue emptied after every item keeps its storage: no allocation per item.
#[test]
fn a_queue_emptied_after_every_item_does_not_reallocate() {
    let (tx, mut rx) = queue();
    tx.send(0).unwrap();
    assert_eq!(rx.try_recv().unwrap(), 0);
    let cap = capacity(&rx);
    assert!(cap > 0);
    for i in 0..100 {
        tx.send(i).unwrap();
        assert_eq!(rx.try_recv().unwrap(), i);
        assert_eq!(capacity(&rx), cap, "item {i}");
    }
}

/// Many senders (a multi-topic consumer's tasks): the receiver takes what they queued and
/// then sees the end once the last is gone, as a tokio mpsc's `recv` returned `None`; a weak
/// sender does not keep it open, and no longer upgrades after the end.
#[tokio::test]
async fn the_receiver_sees_the_end_once_every_sender_is_gone() {
    let (tx, mut rx) = queue();
    let weak = tx.downgrade();
    let other = weak.upgrade().expect("a sender is live");
    let waiting = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(i) = rx.recv().await {
            got.push(i);
        }
        (rx, got)
    });
    tokio::task::yield_now().await;
    tx.send(1).unwrap();
    drop(tx);
    other.send(2).unwrap();
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "a sender is left");
    drop(other);
    let (mut rx, got) = waiting.await.unwrap();
    assert_eq!(got, [1, 2]);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    assert!(weak.upgrade().is_none(), "every sender was gone");
}

/// The receiver's end: later sends give their item back, what was queued is dropped, and a
/// sender waiting in `closed` (one future, polled before and after) completes.
#[tokio::test]
async fn a_gone_receiver_closes_the_queue() {
    let (tx, rx) = channel::<Arc<()>, (), Closing>((), Closing::default());
    let item = Arc::new(());
    tx.send(item.clone()).unwrap();
    let closed = tx.closed();
    tokio::pin!(closed);
    assert!(futures::poll!(closed.as_mut()).is_pending());
    assert!(!tx.is_closed());
    drop(rx);
    assert_eq!(Arc::strong_count(&item), 1, "the queued item was dropped");
    assert!(futures::poll!(closed.as_mut()).is_ready());
    assert!(tx.is_closed());
    assert!(tx.send(item).is_err(), "given back");
}

/// Cancel safety: a `recv` dropped while waiting takes nothing; the item sent afterwards is
/// there for the next one.
#[tokio::test]
async fn a_cancelled_recv_loses_nothing() {
    let (tx, mut rx) = queue();
    {
        let recv = rx.recv();
        tokio::pin!(recv);
        assert!(futures::poll!(recv.as_mut()).is_pending());
    }
    tx.send(7).unwrap();
    assert_eq!(rx.recv().await, Some(7));
}
