// Last-admission marks — an admission racing a check that would drop the admission's bucket.
//
// Proves the mark's ordering (`window/ring.rs`, "Last-admission marks"): an admission raises
// its bucket's mark before its compare-and-swap on `cum` makes its cost visible, so a check
// that counts the cost (its Acquire load of `cum` reads that CAS) also sees the mark, and
// never drops a bucket while a unit of it is inside the window. N = 1 bucket of 10 ns,
// L = 2, Strict with marks (exact at this granularity: a step of 1 ns). One unit is admitted
// at t = 1 (mark: offset 1). Then one thread checks 1 at t = 5 (same bucket: it raises the
// mark to offset 5) while the main thread moves the clock to 12 and checks 2: bucket 0 is
// then the oldest, and has left only if its last admission was at offset ≤ 2. On every
// interleaving:
// - no interval of length W holds more than L, each admission at its own clock reading;
// - the limiter's total equals the admitted costs.
//
// Would fail if the admission raised the mark after its CAS (checked by hand, swapping the
// two in `counter::charge_fast_marked`): the check at 12 then reads the unit of t = 5 in
// `cum` and the mark of t = 1 in the slot, drops bucket 0, and admits 2 with the unit of
// t = 5 inside its window (3 in [5, 15)).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Op, Spec, assert_safe_at_readings, charged, model, run};
use slidegate::Mode;

#[test]
fn a_mark_is_seen_with_the_unit_it_covers() {
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
        let admission = {
            let limiter = limiter.clone();
            thread::spawn(move || run(&limiter, 1, Op::Check(1)))
        };
        clock.set(Duration::from_nanos(12));
        let check = run(&limiter, 2, Op::Check(2));
        let admission = admission.join().unwrap();

        let all = [pre, admission, check];
        let admitted: Vec<(u64, u64)> = all.iter().map(|e| (e.at, e.charged())).collect();
        assert_safe_at_readings(&spec, &admitted);
        assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");
    });
}
