// Keyed store — a check racing the eviction and reclamation of the entry it found.
//
// Proves the retirement protocol (`window/ring.rs`, "Retirement"): a key's entry is idle
// (its window is empty now) and one thread evicts it (`retain_recent`: retire the ring by a
// CAS on `cum`, unlink it, `defer_destroy` it, then collect garbage) while another thread
// checks the key, possibly having found the entry just before it was unlinked. On every
// interleaving the check's admission is counted exactly once on the key's live entry: after
// both threads finish, the store's entry for the key holds the admitted cost (plus the
// earlier unit if the entry was not evicted because the check came first), and a
// second check at the limit is denied. Eviction also changed no decision: the racing check
// is admitted with `remaining == L − 1`, as on a fresh key.
//
// Would fail if eviction unlinked without retiring, or retired with a plain store instead of
// a CAS against the `cum` it judged idle (the check's CAS on the dead ring succeeds, its
// admission is lost, and the next check is admitted: total 0 and a second admission), or
// if a reader could see the retired ring without being sent back to the writer path. And,
// through the loom cell every entry carries (`Entry::live` in `src/keyed/entry.rs`, a
// `sync::Liveness`), it would fail if the entry were freed while the checking thread can
// still reach it: a build that frees unlinked entries at once, instead of through
// `defer_destroy`, fails here with loom's "concurrent read and write accesses to
// `UnsafeCell`".
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom_tests::{keyed, model, spawn_evictor};
use slidegate::Quota;
use slidegate::clock::ManualClock;

#[test]
fn check_racing_eviction_loses_no_admission() {
    model(|| {
        // L = 1, N = 2 buckets of 10 ns: the admission at t = 0 leaves the window at t = 30.
        let quota = Quota::new(1, Duration::from_nanos(20))
            .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
            .expect("valid quota");
        let clock = ManualClock::new();
        let limiter = Arc::new(keyed(quota, clock.clone()));
        assert!(limiter.check(&1u32).is_allowed());
        clock.set(Duration::from_nanos(30));

        let evictor = spawn_evictor(&limiter);
        let d = limiter.check(&1);
        let evicted = evictor.join().expect("evictor panicked");

        assert!(d.is_allowed(), "{d:?}");
        assert_eq!(d.remaining(), 0);
        // The evictor found the entry either idle (and evicted it) or already charged.
        assert!(evicted <= 1);
        assert_eq!(limiter.len(), 1);
        // Evicted: the fresh entry holds the check's unit. Not evicted (the check came first
        // and made the window non-empty): the old entry holds both units.
        let held = if evicted == 1 { 1 } else { 2 };
        assert_eq!(limiter.admitted_total(&1), held, "the admission was lost");
        assert!(
            !limiter.check(&1).is_allowed(),
            "a second admission in one window"
        );
    });
}
