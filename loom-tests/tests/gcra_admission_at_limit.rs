// GCRA — concurrent admission at the limit.
//
// Proves: three threads `check()` a GCRA limiter (L = 2, W = 20 ns, so T = 10 ns) at one
// instant; the compare-and-swap on the cell's TAT admits exactly two. On every interleaving
// the three decisions — `remaining`, `retry_after` and `reset_after` included — are those of
// the sequential cell in some order of the calls (`assert_gcra_linearizable`), and after
// joining a peek reads the TAT of exactly two charges (20): no admission lost or doubled,
// and the denial wrote nothing.
//
// Would fail if a charge wrote the TAT with a plain store instead of a CAS from the value
// judged (two charges judged on one TAT: three admitted, or a lost update leaving TAT 10),
// if a lost CAS were not re-judged against the winner's TAT (three admitted), or if a
// decision's `remaining` or waits were computed from anything but the TAT it swapped.
#![cfg(slidegate_loom)]

use loom::thread;
use loom_tests::{
    GcraEvent, GcraOp, GcraSpec, assert_gcra_linearizable, model, run_gcra, tat_seen_at,
};
use slidegate::clock::ManualClock;

#[test]
fn three_checks_race_for_a_limit_of_two() {
    model(|| {
        let spec = GcraSpec {
            limit: 2,
            window: 20,
        };
        let limiter = spec.limiter(&ManualClock::new());
        let handles: Vec<_> = (0..3)
            .map(|th| {
                let limiter = limiter.clone();
                thread::spawn(move || run_gcra(&limiter, th, GcraOp::Check(1)))
            })
            .collect();
        let events: Vec<GcraEvent> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let admitted = events.iter().filter(|e| e.answer.0).count();
        assert_eq!(admitted, 2, "{events:#?}");
        let seen = tat_seen_at(&limiter.peek(), 0);
        assert_eq!(seen, 20, "the TAT holds {seen} ns of charges: {events:#?}");
        assert_gcra_linearizable(spec, 0, &events, (0, seen));
    });
}
