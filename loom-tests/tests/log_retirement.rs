// Exact log — a keyed check racing the idle retirement and reclamation of the
// key's log.
//
// Proves the log's retirement protocol (`window/log.rs`, "Retirement"): a key's log holds
// one unit at 0 (L = 1, W = 10 ns); at 10 it is idle and one thread evicts it
// (`retain_recent`: retire by a CAS on `cum`, unlink, `defer_destroy`, collect) while another
// checks the key. The check is admitted with `remaining == 0`, as on a fresh key, and counted
// exactly once on the key's live entry; a second check is denied.
// Would fail if retirement stored `RETIRED` instead of CASing from the `cum` it judged idle,
// or if it judged a newest unit that is claimed but not yet stored by its slot's previous
// contents (the unit at 0, outside at 10): either way it retires a log holding the new unit,
// whose admission is lost, and the second check is admitted.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom_tests::{keyed, log_quota, model, spawn_evictor};
use slidegate::clock::ManualClock;

#[test]
fn check_racing_retirement_loses_no_admission() {
    model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(keyed(log_quota(1, 10), clock.clone()));
        assert!(limiter.check(&1u32).is_allowed());
        clock.set(Duration::from_nanos(10));
        let evictor = spawn_evictor(&limiter);
        let d = limiter.check(&1);
        let evicted = evictor.join().unwrap();
        assert!(d.is_allowed(), "{d:?}");
        assert_eq!(d.remaining(), 0);
        assert!(evicted <= 1);
        assert_eq!(limiter.len(), 1);
        let held = if evicted == 1 { 1 } else { 2 };
        assert_eq!(limiter.admitted_total(&1), held, "the admission was lost");
        assert!(
            !limiter.check(&1).is_allowed(),
            "a second admission in one window"
        );
    });
}
