// Last-admission marks — a `check_all` commit racing a check that would drop its bucket.
//
// Proves that a reservation's mark, recorded when the reservation is committed
// (`Ring::commit_marked`) rather than when it is made (so that a released one leaves no mark),
// is in place before the commit's compare-and-swap makes the cost visible. The setting of
// `mark_racing_admission.rs` (N = 1 bucket of 10 ns, L = 2, Strict with marks, one unit
// admitted at t = 1), with the unit of t = 5 taken by `check_all` — a reservation and a
// commit — while the main thread moves the clock to 12 and checks 2. On every interleaving:
// - no interval of length W holds more than L, each admission at its own clock reading;
// - the limiter's total equals the admitted costs.
//
// Would fail if the commit recorded the mark after its CAS (checked by hand, moving the
// raise in `Ring::commit_marked` after `self.commit(cost)`), or not at all: the check at 12
// reads the committed unit with the mark of t = 1 and admits 2 beside it.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Op, Spec, assert_safe_at_readings, last_reading, model, run};
use slidegate::{Mode, check_all};

#[test]
fn a_committed_reservation_is_seen_with_its_mark() {
    model(|| {
        let spec = Spec {
            mode: Mode::StrictMarked,
            ..Spec::strict(2, 1, 10)
        };
        let (limiter, clock) = spec.limiter();
        clock.set(Duration::from_nanos(1));
        let pre = run(&limiter, 0, Op::Check(1));
        assert!(pre.decision.is_allowed());

        clock.set(Duration::from_nanos(5));
        let multi = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                let d = check_all(&[(limiter.direct(), 1)]).expect("a valid cost");
                // The reservation's judgement read the clock last.
                (d.is_allowed(), last_reading())
            })
        };
        clock.set(Duration::from_nanos(12));
        let check = run(&limiter, 2, Op::Check(2));
        let (allowed, at) = multi.join().unwrap();

        let admitted = [
            (pre.at, pre.charged()),
            (at, u64::from(allowed)),
            (check.at, check.charged()),
        ];
        assert_safe_at_readings(&spec, &admitted);
        let total: u64 = admitted.iter().map(|&(_, n)| n).sum();
        assert_eq!(limiter.admitted_total(), total, "{admitted:?}");
    });
}
