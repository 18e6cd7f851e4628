// Multi-limit checks on a keyed limit — a reservation racing the eviction of its entry.
//
// Proves that a `check_all` over one key of a `KeyedLimiter` and a direct limiter keeps the
// key's entry alive from reservation to commit or release (the epoch pin of the call), and
// that idle eviction (`retain_recent`: retire by CAS, unlink, `defer_destroy`, collect)
// never retires an entry while a reservation on it is pending (it requires pending == 0 in
// the `cum` it swaps). The key's entry is idle when a thread evicts it while the multi-check
// runs; on every interleaving:
// - allowed (the direct limit has room): the key's live entry holds the request's unit
//   exactly once — alone if the entry was evicted first, beside the earlier unit if not —
//   and the direct limiter holds its unit;
// - denied (the direct limit is full): nothing is charged anywhere; the key reads as a fresh
//   window, whichever of eviction and release came first.
//
// Would fail if a denied multi-check left its reservation or a charge on the key (the key's
// `admitted_total` or `remaining`), or if an allowed one charged a retired entry instead of
// the live one (the key's unit lost). Note: retiring despite a pending reservation is not
// visible here, nor in any decision: the reservation fills the ring to its bucket, so the
// entry is idle only once a whole window has passed, and a commit that late lands in a
// bucket outside every current window; the `pending == 0` rule keeps the accounting exact.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom_tests::{FixedHasher, model, spawn_evictor};
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Limit, Quota, SlidingWindow, check_all};

/// L = 2, N = 2 buckets of 10 ns: an admission at t = 0 leaves the window at t = 30.
fn quota() -> Quota {
    Quota::new(2, Duration::from_nanos(20))
        .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
        .expect("valid quota")
}

fn race(direct_full: bool) {
    let clock = ManualClock::new();
    let keyed = Arc::new(
        KeyedLimiter::<u32>::builder(quota())
            .clock(clock.clone())
            .hasher(FixedHasher::default())
            .build(),
    );
    let direct = SlidingWindow::with_clock(quota(), clock.clone());
    assert!(keyed.check(&1u32).is_allowed());
    clock.set(Duration::from_nanos(30));
    if direct_full {
        assert!(direct.check_n(2).expect("valid cost").is_allowed());
    }

    let evictor = spawn_evictor(&keyed);
    let key = keyed.key(&1);
    let d = check_all(&[(&key as &dyn Limit, 1), (&direct, 1)]).expect("valid costs");
    let evicted = evictor.join().expect("evictor panicked");

    assert_eq!(d.is_allowed(), !direct_full, "{d:?}");
    assert!(evicted <= 1);
    let before = if evicted == 1 { 0 } else { 1 };
    if direct_full {
        assert_eq!(d.denied_by(), Some(1));
        assert_eq!(
            keyed.admitted_total(&1),
            before,
            "the denial charged the key"
        );
        assert_eq!(direct.admitted_total(), 2);
    } else {
        assert_eq!(keyed.admitted_total(&1), before + 1, "the key's unit lost");
        assert_eq!(direct.admitted_total(), 1);
    }
    // The unit at t = 0 is out of the window either way.
    let expect = if direct_full { 2 } else { 1 };
    assert_eq!(keyed.peek(&1).remaining(), expect);
}

#[test]
fn allowed_multi_check_racing_eviction_charges_the_live_entry() {
    model(|| race(false));
}

#[test]
fn denied_multi_check_racing_eviction_leaves_no_trace() {
    model(|| race(true));
}
