//! Small async helpers shared by the connection, producer and consumer tasks.

use tokio::time::Instant;

pub(crate) mod lazy_queue;

/// Sleeps until `deadline`, or forever without one (a disabled `select!` timer).
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => futures::future::pending().await,
    }
}

/// Sets an entity task's one timer to `deadline`: made at the first deadline, moved
/// (`reset`) only when the deadline changes, dropped when nothing is due. A `Sleep` made
/// afresh on every pass of a task's loop was registered with the runtime's timer and taken out
/// again each time, and sat in the task's future (~110 bytes) even while nothing was due
/// (issue #39).
pub(crate) fn set_timer(
    timer: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    deadline: Option<Instant>,
) {
    match (deadline, timer.as_mut()) {
        (None, _) => *timer = None,
        (Some(d), Some(t)) if t.deadline() == d => {}
        (Some(d), Some(t)) => t.as_mut().reset(d),
        (Some(d), None) => *timer = Some(Box::pin(tokio::time::sleep_until(d))),
    }
}

/// About thirty years: a deadline this far out never comes (tokio's own "far future").
const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);

/// `now + d`, without the panic of `Instant + Duration::MAX`: a duration too large to add
/// gives a deadline that never comes.
pub(crate) fn deadline_after(d: std::time::Duration) -> Instant {
    later(Instant::now(), d)
}

/// `at + d`, saturating at a far-future instant instead of panicking (configured timeouts and
/// delays may be `Duration::MAX`).
pub(crate) fn later(at: Instant, d: std::time::Duration) -> Instant {
    at.checked_add(d.min(FAR_FUTURE))
        .unwrap_or_else(|| at + FAR_FUTURE)
}

/// Gives back the storage of a map a burst grew once it holds a quarter of what it has room
/// for, keeping room for twice what it holds (at least [`MAP_KEPT`]; a map with room for four
/// times that or less is left alone). A `HashMap` never shrinks by itself, so the requests of
/// a burst of creates (hundreds in flight at once) kept their slots for the client's life
/// (~165 KB after 1,000 producers were created 512 at a time: 165 bytes per idle producer,
/// issue #39). Amortised: a shrink at most halves the room, after as many removals as it has
/// items left.
pub(crate) fn shrink_after_burst<K, V, S>(map: &mut std::collections::HashMap<K, V, S>)
where
    K: Eq + std::hash::Hash,
    S: std::hash::BuildHasher,
{
    if map.capacity() > 4 * MAP_KEPT && map.len() * 4 <= map.capacity() {
        map.shrink_to((map.len() * 2).max(MAP_KEPT));
    }
}

/// The room [`shrink_after_burst`] always leaves a map.
const MAP_KEPT: usize = 32;

#[cfg(test)]
mod tests {
    #[test]
    fn a_map_a_burst_grew_gives_its_room_back_as_it_empties() {
        let mut map = std::collections::HashMap::new();
        for i in 0..1000 {
            map.insert(i, [0u8; 64]);
        }
        let grown = map.capacity();
        assert!(grown >= 1000);
        let mut shrinks = 0;
        for i in 0..1000 {
            map.remove(&i);
            // (A removal alone can lower `capacity`: a tombstone is not room.)
            let before = map.capacity();
            super::shrink_after_burst(&mut map);
            shrinks += usize::from(map.capacity() != before);
            if i == 799 {
                // 200 left: the room left is within a few times what is held.
                assert!(map.capacity() < grown, "{} of {grown}", map.capacity());
                assert!(map.capacity() <= 8 * map.len(), "{}", map.capacity());
            }
        }
        assert!(map.capacity() <= 4 * super::MAP_KEPT, "{}", map.capacity());
        // Amortised: each shrink at least halves the room, so a few in all, not one per removal.
        assert!((1..=5).contains(&shrinks), "{shrinks} shrinks");
        // A map with room for at most four times MAP_KEPT is left alone, however empty.
        let mut small: std::collections::HashMap<u32, u32> = (0..100).map(|i| (i, i)).collect();
        let room = small.capacity();
        assert!(
            room > super::MAP_KEPT && room <= 4 * super::MAP_KEPT,
            "{room}"
        );
        small.clear();
        super::shrink_after_burst(&mut small);
        assert_eq!(small.capacity(), room);
    }
}
