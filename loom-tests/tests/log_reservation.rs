// Exact log — `check_all`'s reservation (committed, or released when another limit
// denies) racing a plain check on the same exact log, L = 1.
//
// Proves: a reservation holds its room (a committed reservation and a charge are never both
// admitted), a commit becomes exactly one unit, and a release leaves no trace: afterwards
// `admitted_total()` is what was charged and committed, and a peek finds room iff nothing
// was.
// Would fail if a check did not count pending reservations (both admitted), if commit were
// not one CAS `count += n, pending −= n` (a lost or doubled unit), or if a release touched
// the count (a phantom unit: the final peek is denied).
#![cfg(slidegate_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::{log_quota, model};
use slidegate::clock::ManualClock;
use slidegate::{Limit, Quota, SlidingWindow, check_all};

fn race(other_exhausted: bool) {
    model(move || {
        let clock = ManualClock::new();
        let log = Arc::new(SlidingWindow::with_clock(log_quota(1, 10), clock.clone()));
        let quota = Quota::new(1, std::time::Duration::from_nanos(10)).unwrap();
        let other = Arc::new(SlidingWindow::with_clock(quota, clock));
        if other_exhausted {
            assert!(other.check().is_allowed());
        }
        let multi = {
            let (log, other) = (log.clone(), other.clone());
            thread::spawn(move || {
                check_all(&[(&*log as &dyn Limit, 1), (&*other, 1)])
                    .unwrap()
                    .is_allowed()
            })
        };
        let checked = log.check();
        let committed = multi.join().unwrap();
        assert!(!(committed && other_exhausted));
        assert!(!(committed && checked.is_allowed()), "{checked:?}");
        let charged = u64::from(committed) + u64::from(checked.is_allowed());
        assert_eq!(log.admitted_total(), charged);
        assert_eq!(log.peek().is_allowed(), charged == 0, "a trace was left");
    });
}

#[test]
fn a_committed_reservation_racing_a_check() {
    race(false);
}

#[test]
fn a_released_reservation_racing_a_check() {
    race(true);
}
