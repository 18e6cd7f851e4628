// GCRA — a refund racing checks.
//
// Proves: `refund` is one atomic step on the cell's TAT. A GCRA limiter (L = 2, W = 20 ns,
// T = 10 ns) holds one unit at t = 0 (TAT 10); thread A refunds 1 while thread B checks
// twice, all at t = 0. Depending on where the refund lands, B's second check is admitted
// (refund first or between) or denied (refund last, when the cell is full); on every
// interleaving the refund's count and every decision, `remaining` and waits included, are
// the sequential cell's for one order of the calls, and after joining the TAT a peek reads
// is that order's (`assert_gcra_linearizable`): the refund freed exactly what it reported,
// and no charge was lost to it.
//
// Would fail if the refund wrote its TAT with a plain store computed from a load that a
// check's CAS overtook (the charge is lost: the final TAT is 10 too low, or three units are
// admitted), or if it reported room it did not free. (Everything happens at t = 0, so the
// refund's floor at now is not exercised here; the property tests pin it.)
#![cfg(slidegate_loom)]

use loom::thread;
use loom_tests::{GcraOp, GcraSpec, assert_gcra_linearizable, model, run_gcra, tat_seen_at};
use slidegate::clock::ManualClock;

#[test]
fn refund_racing_two_checks() {
    model(|| {
        let spec = GcraSpec {
            limit: 2,
            window: 20,
        };
        let limiter = spec.limiter(&ManualClock::new());
        assert!(limiter.check().is_allowed());
        let refunder = {
            let limiter = limiter.clone();
            thread::spawn(move || run_gcra(&limiter, 0, GcraOp::Refund(1)))
        };
        let mut events = vec![
            run_gcra(&limiter, 1, GcraOp::Check(1)),
            run_gcra(&limiter, 1, GcraOp::Check(1)),
        ];
        events.push(refunder.join().unwrap());
        assert_eq!(
            events[2].answer.1, 1,
            "one unit held, one freed: {events:#?}"
        );
        assert!(events[0].answer.0, "room for a second unit: {events:#?}");
        let seen = tat_seen_at(&limiter.peek(), 0);
        assert_gcra_linearizable(spec, 10, &events, (0, seen));
    });
}
