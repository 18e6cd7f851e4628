// Sliding counter — concurrent admission at the limit.
//
// Proves: when more is asked for than the limit allows, at one instant, the compare-and-swap
// on `cum` admits exactly up to the limit: the number admitted is exactly what a sequential
// limiter admits, `admitted_total()` equals the sum of the allowed costs (no admission lost,
// none phantom), and the decisions, `remaining` included, are those of some sequential order
// of the calls (linearisability). Would fail if admission were not one CAS from the value
// judged (a lost update, a double admission), if a lost CAS were not re-judged against the
// new total, or if `remaining` were computed from anything but the reading that was charged.
//
// Each model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracles check both stores' rings. On the keyed limiter the racing checks are
// also the key's first: they make its entry.
#![cfg(slidegate_loom)]

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{Event, NewLimiter, Op, Spec, assert_linearizable, charged, run};

fn race(new: NewLimiter, spec: Spec, costs: &'static [u64]) -> (Vec<Event>, u64) {
    let (limiter, _clock) = new(&spec);
    let handles: Vec<_> = costs
        .iter()
        .enumerate()
        .map(|(t, &n)| {
            let limiter = limiter.clone();
            thread::spawn(move || run(&limiter, t, Op::Check(n)))
        })
        .collect();
    let events: Vec<Event> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(limiter.admitted_total(), charged(&events), "{events:#?}");
    assert_linearizable(&spec, 0, &events);
    (events, limiter.peek().remaining())
}

/// Limit 2, three threads `check()` at the same instant: exactly two are admitted, with
/// `remaining` 1 and 0, and the third is denied with `remaining` 0 and a retry time.
fn three_checks_race_for_a_limit_of_two(new: NewLimiter) {
    let (events, left) = race(new, Spec::strict(2, 1, 10), &[1, 1, 1]);
    let mut remaining: Vec<u64> = events
        .iter()
        .filter(|e| e.decision.is_allowed())
        .map(|e| e.decision.remaining())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, [0, 1], "{events:#?}");
    let denied: Vec<&Event> = events.iter().filter(|e| !e.decision.is_allowed()).collect();
    assert_eq!(denied.len(), 1, "{events:#?}");
    assert_eq!(denied[0].decision.remaining(), 0);
    assert!(
        denied[0]
            .decision
            .retry_after()
            .is_some_and(|d| !d.is_zero())
    );
    assert_eq!(left, 0);
}

/// Limit 3, costs 2, 2 and 1 at the same instant (`check_n`): whatever the order, 3 is
/// admitted and exactly one cost-2 request is denied.
fn weighted_costs_race_for_a_limit_of_three(new: NewLimiter) {
    let (events, left) = race(new, Spec::strict(3, 2, 10), &[2, 2, 1]);
    assert_eq!(charged(&events), 3, "{events:#?}");
    let denied: Vec<&Event> = events.iter().filter(|e| !e.decision.is_allowed()).collect();
    assert_eq!(denied.len(), 1, "{events:#?}");
    assert_eq!(denied[0].op, Op::Check(2));
    assert_eq!(left, 0);
}

on_both_limiters! {
    three_checks_race_for_a_limit_of_two();
    weighted_costs_race_for_a_limit_of_three();
}
