// Sliding counter — a report's debt charge racing an admission and a bucket rotation.
//
// Proves: a debt charge (`record`) is one compare-and-swap on `cum`, like an admission, so
// the two are ordered and each is judged on the other when it comes second. Strict, L = 2,
// N = 2 buckets of 10 ns, at t = 5; a ticker moves the clock into the next bucket while
// thread A checks a cost of 2 and thread B records 1. On every interleaving B charges its 1
// whole; if A is admitted, B's answer was read with A's 2 in the window (remaining 0), since
// B coming first would have made A's judgement see 1 + 2 > L; and the ring counts exactly
// what the two report (`admitted_total`).
//
// Would fail if a debt charge were kept beside `cum` (a counter an admission reads after its
// load of `cum` and does not compare), if it were an unconditional add whose answer came
// from a reading made before another thread's CAS, or if it skipped the fill its bucket
// needs (counted in a bucket the ring does not hold). On the direct limiter's wide ring and
// on a keyed key's compact ring in the general store (10 ns buckets are below the inline
// table's); the line ring's debt charge is the same reading and CAS on its word.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{NewLimiter, Spec, model};

#[test]
fn a_report_racing_an_admission_and_a_rotation() {
    report_racing_admission(Spec::limiter);
}

#[test]
fn a_report_racing_an_admission_on_a_keyed_ring() {
    report_racing_admission(Spec::keyed_limiter);
}

fn report_racing_admission(new: NewLimiter) {
    model(move || {
        let spec = Spec::strict(2, 2, 10);
        let (limiter, clock) = new(&spec);
        clock.set(Duration::from_nanos(5));
        let ticker = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(10)))
        };
        let reporter = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.record(1))
        };
        let checked = limiter.check_n(2).unwrap();
        let usage = reporter.join().unwrap();
        ticker.join().unwrap();
        assert_eq!((usage.charged(), usage.clamped()), (1, 0), "{usage:?}");
        if checked.is_allowed() {
            assert_eq!(usage.remaining(), 0, "admitted over a report: {usage:?}");
        } else {
            assert_eq!(
                usage.remaining(),
                1,
                "denied though nothing came first: {usage:?}"
            );
        }
        let admitted = if checked.is_allowed() { 2 } else { 0 };
        assert_eq!(limiter.admitted_total(), admitted + 1);
    });
}
