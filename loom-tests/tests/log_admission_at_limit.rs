// Exact log — concurrent admission at the limit.
//
// Proves: three threads `check()` at one instant against an exact log with L = 2: at most 2
// are admitted; `admitted_total()` equals the number admitted (none lost, none phantom); the
// admitted see `remaining` 1 then 0, as in a sequential order; every denial reports no room
// and a retry when the units at 0 leave (10 ns). Fewer than 2 are admitted only on the
// documented spurious denial (`docs/design.md`, concurrency contract), while an admission is held between its CAS
// and its slot store — loom reaches that interleaving.
// Would fail if admission were not one CAS from the `cum` judged (with `fetch_add` all three
// are admitted), if a lost CAS were not re-judged, or if `remaining` came from a stale
// reading.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{log_quota, model};
use slidegate::clock::ManualClock;
use slidegate::{Decision, SlidingWindow};

#[test]
fn three_checks_race_for_a_limit_of_two() {
    model(|| {
        let limiter = Arc::new(SlidingWindow::with_clock(
            log_quota(2, 10),
            ManualClock::new(),
        ));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let limiter = limiter.clone();
                thread::spawn(move || limiter.check())
            })
            .collect();
        let ds: Vec<Decision> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let allowed: Vec<&Decision> = ds.iter().filter(|d| d.is_allowed()).collect();
        assert!(allowed.len() <= 2, "{ds:?}");
        assert_eq!(limiter.admitted_total(), allowed.len() as u64, "{ds:?}");
        let mut remaining: Vec<u64> = allowed.iter().map(|d| d.remaining()).collect();
        remaining.sort_unstable();
        let want: &[u64] = if allowed.len() == 2 { &[0, 1] } else { &[1] };
        assert_eq!(remaining, want, "{ds:?}");
        for d in ds.iter().filter(|d| !d.is_allowed()) {
            assert_eq!(d.remaining(), 0, "{ds:?}");
            assert_eq!(d.retry_after(), Some(Duration::from_nanos(10)), "{ds:?}");
        }
        // Afterwards the window holds exactly what was admitted.
        let left = limiter.peek().remaining();
        assert_eq!(left, 2 - allowed.len() as u64);
    });
}
