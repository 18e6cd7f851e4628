//! What the key-store models share.

use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Quota};

/// A hasher with fixed keys: loom replays every execution, so hashing must not be random.
pub type FixedHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// A keyed limiter on `clock` with a deterministic hasher.
pub fn keyed(quota: Quota, clock: ManualClock) -> KeyedLimiter<u32, ManualClock, FixedHasher> {
    KeyedLimiter::builder(quota)
        .clock(clock)
        .hasher(FixedHasher::default())
        .build()
}
