//! What a table view's task and its handle share: the map with how far it has read, and who
//! watches it change (listeners and [`TableViewUpdates`](super::TableViewUpdates) streams).
//! How far it has read is waited for in `progress`.
//!
//! Lock order: `table`, then `observers`. The task changes the map and, while it still holds it,
//! takes the listeners to call and sends the change to the streams; it calls the listeners
//! after both locks are released. A registration holds the map for reading while it looks at
//! the entries (`for_each_and_listen`) and adds itself: so each change is either among the
//! entries it saw or delivered to it afterwards, exactly once, as upstream's
//! `forEachAndListen` (which holds `listenersMutex` across both).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::{broadcast, Notify};

use super::position::Positions;
use super::updates::{TableViewUpdate, UPDATES_BOUND};
use crate::error::Result;
use crate::message_id::MessageId;

/// The map, and the last message read from each partition (moved with each change, under one
/// lock: a refresh that sees a position sees the changes before it).
pub(crate) struct Table<V> {
    pub map: HashMap<String, V>,
    pub positions: Positions,
}

/// A listener: called with each key and its new value (`None`: removed).
pub(crate) type Listener<V> = Mutex<Box<dyn FnMut(&str, Option<&V>) + Send>>;

/// Who watches the map change.
struct Observers<V> {
    /// Copy-on-write: the task takes the list (an `Arc` clone) per change.
    listeners: Arc<Vec<Arc<Listener<V>>>>,
    /// Made by the first [`Shared::subscribe`]; dropped when the view ends, which ends every
    /// stream.
    updates: Option<broadcast::Sender<TableViewUpdate<V>>>,
    /// The view has ended: nothing changes any more.
    ended: bool,
}

/// See the module docs.
pub(crate) struct Shared<V> {
    table: RwLock<Table<V>>,
    observers: Mutex<Observers<V>>,
    /// Set once anything watches: until then a change costs the map update alone.
    observed: AtomicBool,
    /// Woken when the task has read more while `waiting` is not 0, and when it ends.
    pub(super) progress: Notify,
    /// How many refreshes and closes wait on `progress` (the task wakes none otherwise).
    pub(super) waiting: AtomicUsize,
    /// How the task ended: `Ok` when closed by the application, else why.
    pub(super) end: OnceLock<Result<()>>,
}

impl<V: Clone + Send + Sync + 'static> Shared<V> {
    pub(crate) fn new() -> Self {
        Shared {
            table: RwLock::new(Table {
                map: HashMap::new(),
                positions: Positions::default(),
            }),
            observers: Mutex::new(Observers {
                listeners: Arc::new(Vec::new()),
                updates: None,
                ended: false,
            }),
            observed: AtomicBool::new(false),
            progress: Notify::new(),
            waiting: AtomicUsize::new(0),
            end: OnceLock::new(),
        }
    }

    /// Message `id` was read and changed nothing (no key, or a value that could not be
    /// decoded): its partition's position moves.
    pub(crate) fn skip(&self, id: MessageId) {
        let mut table = self.write();
        table.positions.record(id);
        let wake = self.waiting.load(Ordering::SeqCst) > 0;
        drop(table);
        if wake {
            self.progress.notify_waiters();
        }
    }

    /// Applies message `id`: `key` now has `value`, or is removed (`None`), and its
    /// partition's position moves. Then tells the streams (under the table lock, so that they
    /// see changes in the order applied), the waiting refreshes, and the listeners (after the
    /// lock: a listener may read the view).
    pub(crate) fn apply(&self, id: MessageId, key: String, value: Option<V>) {
        let mut table = self.write();
        table.positions.record(id);
        // Read under the lock, which a refresh takes after counting itself: one that found
        // this position missing is counted here, and woken (see `Shared::wait`).
        let wake = self.waiting.load(Ordering::SeqCst) > 0;
        let map = &mut table.map;
        let observers = if self.observed.load(Ordering::Acquire) {
            Some(self.observers())
        } else {
            None
        };
        // The streams still listening, if any (one whose streams all went costs no copies).
        let tx = observers
            .as_ref()
            .and_then(|o| o.updates.as_ref())
            .filter(|tx| tx.receiver_count() > 0);
        let listeners = observers
            .as_ref()
            .map(|o| o.listeners.clone())
            .filter(|l| !l.is_empty());
        if tx.is_none() && listeners.is_none() {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
            drop(observers);
            drop(table);
            if wake {
                self.progress.notify_waiters();
            }
            return;
        }
        match &value {
            Some(v) => map.insert(key.clone(), v.clone()),
            None => map.remove(&key),
        };
        if let Some(tx) = tx {
            // Err: every stream went meanwhile; nothing to tell.
            let _ = tx.send(TableViewUpdate {
                key: key.clone(),
                value: value.clone(),
                missed: 0,
            });
        }
        drop(observers);
        drop(table);
        if wake {
            self.progress.notify_waiters();
        }
        for listener in listeners.iter().flat_map(|l| l.iter()) {
            call(listener, &key, value.as_ref());
        }
    }

    /// The view ended: the streams end, the listeners are let go.
    pub(crate) fn end(&self) {
        let mut observers = self.observers();
        observers.ended = true;
        observers.updates = None;
        observers.listeners = Arc::new(Vec::new());
    }

    /// Adds a listener; when `existing` is set, first calls it with every entry, under the map
    /// lock (see the module docs).
    pub(crate) fn listen(&self, listener: Listener<V>, existing: bool) {
        let listener = Arc::new(listener);
        let table = self.read();
        if existing {
            for (k, v) in table.map.iter() {
                call(&listener, k, Some(v));
            }
        }
        let mut observers = self.observers();
        if observers.ended {
            return;
        }
        let mut list = Vec::with_capacity(observers.listeners.len() + 1);
        list.extend(observers.listeners.iter().cloned());
        list.push(listener);
        observers.listeners = Arc::new(list);
        self.observed.store(true, Ordering::Release);
        drop(observers);
        drop(table);
    }

    /// A receiver of the changes from now on (one whose sender is gone once the view ended).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<TableViewUpdate<V>> {
        let _table = self.read();
        let mut observers = self.observers();
        if observers.ended {
            return broadcast::channel(1).1;
        }
        let rx = observers
            .updates
            .get_or_insert_with(|| broadcast::channel(UPDATES_BOUND).0)
            .subscribe();
        self.observed.store(true, Ordering::Release);
        rx
    }
}

impl<V> Shared<V> {
    /// The table, for reading (a poisoned lock still holds a consistent table: each change is
    /// one call, and only the task writes).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Table<V>> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table<V>> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    fn observers(&self) -> MutexGuard<'_, Observers<V>> {
        self.observers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Calls a listener; a panic in it is caught and logged, and it stays registered (upstream's
/// `handleMessage` logs a listener's exception and goes on).
fn call<V>(listener: &Listener<V>, key: &str, value: Option<&V>) {
    // The lock is uncontended (only the task calls listeners, and a registration's first pass
    // ends before the task can see the listener); the panic is caught before the guard drops,
    // so it is not poisoned.
    let mut f = listener.lock().unwrap_or_else(|e| e.into_inner());
    if std::panic::catch_unwind(AssertUnwindSafe(|| (*f)(key, value))).is_err() {
        tracing::warn!("a table view listener panicked; it stays registered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: MessageId = MessageId::EARLIEST;

    /// What a test listener saw: each key and value it was called with.
    type Seen = Arc<Mutex<Vec<(String, Option<u32>)>>>;

    fn listener(seen: &Seen) -> Listener<u32> {
        let seen = seen.clone();
        Mutex::new(Box::new(move |k: &str, v: Option<&u32>| {
            seen.lock().unwrap().push((k.to_string(), v.copied()));
        }))
    }

    #[test]
    fn a_listener_sees_existing_entries_then_each_change_once() {
        let shared = Shared::<u32>::new();
        shared.apply(ID, "a".into(), Some(1));
        shared.apply(ID, "b".into(), Some(2));
        shared.apply(ID, "b".into(), None);
        let seen = Arc::new(Mutex::new(Vec::new()));
        shared.listen(listener(&seen), true);
        shared.apply(ID, "a".into(), Some(3));
        shared.apply(ID, "a".into(), None);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                ("a".into(), Some(1)),
                ("a".into(), Some(3)),
                ("a".into(), None)
            ]
        );
        assert!(shared.read().map.is_empty());
    }

    #[test]
    fn a_panicking_listener_is_caught_and_the_others_still_run() {
        let shared = Shared::<u32>::new();
        shared.listen(
            Mutex::new(Box::new(|_: &str, _: Option<&u32>| panic!("boom"))),
            false,
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        shared.listen(listener(&seen), false);
        shared.apply(ID, "k".into(), Some(1));
        shared.apply(ID, "k".into(), Some(2));
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert_eq!(shared.read().map.get("k"), Some(&2));
    }

    #[test]
    fn a_listener_may_read_the_view_it_listens_to() {
        let shared = Arc::new(Shared::<u32>::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (view, out) = (shared.clone(), seen.clone());
        shared.listen(
            Mutex::new(Box::new(move |k: &str, _: Option<&u32>| {
                out.lock().unwrap().push(view.read().map.get(k).copied());
            })),
            false,
        );
        shared.apply(ID, "k".into(), Some(7));
        assert_eq!(*seen.lock().unwrap(), vec![Some(7)]);
    }

    #[tokio::test]
    async fn streams_end_with_the_view_and_a_late_one_ends_at_once() {
        let shared = Shared::<u32>::new();
        let mut rx = shared.subscribe();
        shared.apply(ID, "k".into(), Some(1));
        shared.end();
        assert_eq!(rx.recv().await.unwrap().value, Some(1));
        assert!(rx.recv().await.is_err());
        assert!(shared.subscribe().recv().await.is_err());
    }
}
