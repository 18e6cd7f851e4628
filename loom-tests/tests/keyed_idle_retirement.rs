// Keyed store — idle retirement judged on the window's contents, racing a check and a
// refund (`window/ring.rs`, "Retirement").
//
// `retire_idle` retires a key's ring when a consistent read at `now` shows its window
// empty, even while the newest established bucket (`front`) is still inside that window:
// a denial establishes its bucket, and a refund empties a window without moving `front`.
//
// Proves, each on every interleaving of one thread evicting (`retain_recent`, then collect)
// with one using the key:
// - after a denial: a check racing the eviction is admitted exactly as on a fresh key
//   (`remaining = L − 1`), its unit is counted exactly once on the key's live entry, and a
//   second check in the window is denied (nothing lost, nothing admitted twice);
// - a refund of more than the window holds, racing an eviction that its own raises make
//   possible, reports every unit it freed (2) and leaves the key with its whole limit.
//
// Would fail if retirement judged the window without the CAS from the reading's `cum` (the
// racing check's admission lands on the dead ring: total 0 and a second admission), or if a
// refund whose next read finds the ring retired dropped what it had freed: it reported 0
// freed, having freed 2 (`Ring::refund` reports what it freed before it met the retirement).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom_tests::{keyed, model, spawn_evictor};
use slidegate::Quota;
use slidegate::clock::ManualClock;

/// `limit` per 20 ns in buckets of 10 ns.
fn quota(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(20))
        .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
        .expect("valid quota")
}

#[test]
fn a_check_racing_retirement_after_a_denial_is_counted_once() {
    model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(keyed(quota(1), clock.clone()));
        assert!(limiter.check(&1u32).is_allowed());
        // A denial at 25 establishes bucket 2; at 30 the window (buckets 1..=3) is empty
        // while `front` is inside it.
        clock.set(Duration::from_nanos(25));
        assert!(!limiter.check(&1).is_allowed());
        clock.set(Duration::from_nanos(30));
        let evictor = spawn_evictor(&limiter);
        let d = limiter.check(&1);
        let evicted = evictor.join().expect("evictor panicked");
        assert!(d.is_allowed() && d.remaining() == 0, "{d:?}");
        assert!(evicted <= 1);
        assert_eq!(limiter.len(), 1);
        let held = if evicted == 1 { 1 } else { 2 };
        assert_eq!(limiter.admitted_total(&1), held, "admission lost");
        assert!(
            !limiter.check(&1).is_allowed(),
            "a second admission in one window"
        );
    });
}

#[test]
fn a_refund_racing_retirement_reports_what_it_freed() {
    model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(keyed(quota(2), clock.clone()));
        clock.set(Duration::from_nanos(15));
        assert!(limiter.check_n(&1u32, 2).unwrap().is_allowed());
        clock.set(Duration::from_nanos(30));
        assert!(!limiter.check(&1).is_allowed());
        let evictor = spawn_evictor(&limiter);
        let freed = limiter.refund(&1, 3);
        let evicted = evictor.join().expect("evictor panicked");
        assert!(evicted <= 1);
        assert_eq!(freed, 2, "refund reported {freed} (evicted {evicted})");
        assert_eq!(limiter.peek(&1).remaining(), 2);
    });
}
