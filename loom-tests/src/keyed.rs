//! What the key-store models share.

use loom::sync::Arc;
use loom::thread::{self, JoinHandle};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{KeyedLimiter, Quota};

/// A hasher with fixed keys: loom replays every execution, so hashing must not be random.
pub type FixedHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// A keyed limiter on `clock` with a deterministic hasher.
pub fn keyed<C: Clock>(quota: Quota, clock: C) -> KeyedLimiter<u32, C, FixedHasher> {
    KeyedLimiter::builder(quota)
        .clock(clock)
        .hasher(FixedHasher::default())
        .build()
}

/// The keyed limiter every key-store model uses.
pub type Keyed = KeyedLimiter<u32, ManualClock, FixedHasher>;

/// Spawns a thread that evicts every idle key of `limiter` (`retain_recent`), then collects
/// the epoch's garbage so that retired entries are reclaimed while other threads may still
/// hold them; joining it gives the number evicted.
pub fn spawn_evictor(limiter: &Arc<Keyed>) -> JoinHandle<usize> {
    let limiter = Arc::clone(limiter);
    thread::spawn(move || {
        let evicted = limiter.retain_recent();
        slidegate::__private::reclaim();
        evicted
    })
}
