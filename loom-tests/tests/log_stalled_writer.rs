// Exact log — admission racing a stalled writer while its slot is reused.
//
// Proves: L = 1 (one slot, reused by every admission), a unit admitted at 0, one thread
// moving the clock to 10 ns (= W) while two threads `check()`: whichever of them is held
// between its CAS and its slot store, the other never judges on the slot's previous occupant,
// so no two admitted units share a window (checked against the definition at the clock
// readings the checks judged at) and `admitted_total()` is exact.
// Would fail if a check treated a slot whose lap tag is not its unit's as written (it would
// see the unit of time 0 in the reused slot, judge it outside at 10 and admit a second unit
// at 10), or if a check judged at a clock reading older than the newest unit's time.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{RecordingClock, Unit, assert_log_safe, last_reading, log_quota, model};
use slidegate::SlidingWindow;
use slidegate::clock::ManualClock;

#[test]
fn admission_racing_a_stalled_writer_on_a_reused_slot() {
    model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(SlidingWindow::with_clock(
            log_quota(1, 10),
            RecordingClock(clock.clone()),
        ));
        assert!(limiter.check().is_allowed());
        let tick = thread::spawn(move || clock.set(Duration::from_nanos(10)));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                thread::spawn(move || {
                    let d = limiter.check();
                    (d, last_reading())
                })
            })
            .collect();
        tick.join().unwrap();
        let runs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // A check reads the clock after acquiring the newest unit's store, so with a clock
        // that only moves forward its last reading is the time it judged and stamped at.
        let mut units = vec![Unit::at(0)];
        units.extend(
            runs.iter()
                .filter(|(d, _)| d.is_allowed())
                .map(|&(_, t)| Unit::at(t)),
        );
        assert_log_safe(1, 10, &units);
        assert_eq!(limiter.admitted_total(), units.len() as u64, "{runs:?}");
    });
}
