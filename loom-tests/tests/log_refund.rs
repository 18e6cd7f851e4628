// Exact log — a refund racing a check whose clock reads behind it.
//
// Proves: L = 2 with units at 0 and 5 ns (W = 10); a `refund(1)` at 12 and a `check_n(2)` by
// a thread whose clock lags 3 ns (it reads 9): the refund frees exactly one unit, and the
// check is denied on every interleaving — at 9 both units are still in the window, refunded
// or not (a refund takes effect from its own time) — so no window ever holds more than the
// definition allows; afterwards a check of 2 at 12 is admitted.
// Would fail if a refund replaced the unit's time by "empty": the
// check, judging at 9, would find the newest unit outside and admit two more at 9 beside the
// unit at 0 — three in (−1, 9].
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{LaggingClock, Unit, assert_log_safe, log_quota, model};
use slidegate::SlidingWindow;
use slidegate::clock::ManualClock;

#[test]
fn a_refund_racing_a_check_behind_it() {
    model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(SlidingWindow::with_clock(
            log_quota(2, 10),
            LaggingClock(clock.clone()),
        ));
        assert!(limiter.check().is_allowed());
        clock.set(Duration::from_nanos(5));
        assert!(limiter.check().is_allowed());
        clock.set(Duration::from_nanos(12));
        let refund = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.refund(1))
        };
        let checker = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                LaggingClock::lag(3);
                limiter.check_n(2).unwrap()
            })
        };
        let freed = refund.join().unwrap();
        let checked = checker.join().unwrap();
        assert_eq!(freed, 1);
        let mut units = vec![
            Unit::at(0),
            Unit {
                time: 5,
                freed: Some(12),
            },
        ];
        if checked.is_allowed() {
            units.extend([Unit::at(9), Unit::at(9)]);
        }
        assert_log_safe(2, 10, &units);
        assert!(!checked.is_allowed(), "{checked:?}");
        assert!(limiter.check_n(2).unwrap().is_allowed());
    });
}
