// Sliding counter — the denial path writes nothing, and a peek never charges.
//
// Proves: a check that is denied while other threads are admitted (and while a peek reads)
// leaves `admitted_total()` equal to the sum of the allowed costs, and no observer — a peek,
// another check — ever sees a denied cost, even transiently: every decision, peeks included,
// is that of a sequential limiter in some order of the calls (at one instant), or, across a
// bucket rotation, at some set of the other admissions. Peeks never change the total.
//
// Would fail if a denial charged and then rolled back (a concurrent peek or check would see
// the charge: no sequential order explains it), if a denial or a peek left any cost behind,
// or if a lost compare-and-swap were retried without judging again.
//
// Each model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracles check both stores' rings. On the keyed limiter the first model's
// racing checks also make the key's entry.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{
    Event, NewLimiter, Op, Spec, assert_explained, assert_final, assert_linearizable,
    assert_strict_safe, charged, run,
};

/// L = 3 at one instant: two threads ask for 2 each (one must be denied) while a third peeks
/// twice. Legitimate peeks see 3 or 1 remaining, never 0 (which a charge-then-refund denial
/// would show).
fn a_denial_racing_an_admission_and_peeks_leaves_no_trace(new: NewLimiter) {
    let spec = Spec::strict(3, 1, 10);
    let (limiter, _clock) = new(&spec);
    let checkers: Vec<_> = (1..=2)
        .map(|t| {
            let limiter = limiter.clone();
            thread::spawn(move || vec![run(&limiter, t, Op::Check(2))])
        })
        .collect();
    let peeker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 3, Op::Peek), run(&limiter, 3, Op::Peek)])
    };
    let mut events: Vec<Event> = peeker.join().unwrap();
    for h in checkers {
        events.extend(h.join().unwrap());
    }
    assert_eq!(
        events.iter().filter(|e| !e.decision.is_allowed()).count(),
        1,
        "{events:#?}"
    );
    assert_eq!(charged(&events), 2);
    assert_eq!(limiter.admitted_total(), 2, "{events:#?}");
    assert_linearizable(&spec, 0, &events);
    assert_eq!(limiter.peek().remaining(), 1);
    assert_eq!(limiter.admitted_total(), 2, "peek charged");
}

/// N = 1 (W = G = 10 ns), L = 3, full at t = 5. One thread moves the clock to 25 (the full
/// bucket has left the window) and asks for 2; the other asks for 2 (denied at 5, and at 25
/// if the first got there before it), then peeks. Whatever the interleaving, the total is the
/// sum of the allowed costs, every decision is explained, and peeks charge nothing.
fn a_denial_racing_rotation_and_an_admission_leaves_no_trace(new: NewLimiter) {
    let spec = Spec::strict(3, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    let pre = vec![run(&limiter, 0, Op::Check(3))];

    let mover = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(25));
            vec![run(&limiter, 1, Op::Check(2))]
        })
    };
    let other = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 2, Op::Check(2)), run(&limiter, 2, Op::Peek)])
    };
    let mut racing = mover.join().unwrap();
    racing.extend(other.join().unwrap());

    let all: Vec<Event> = pre.iter().chain(&racing).copied().collect();
    assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");
    assert!(charged(&racing) <= 2, "{all:#?}");
    assert_strict_safe(&spec, &all);
    assert_explained(&spec, &pre, &racing);
    let before = limiter.admitted_total();
    let finals = vec![run(&limiter, 9, Op::Peek), run(&limiter, 9, Op::Peek)];
    assert_eq!(limiter.admitted_total(), before, "peek charged");
    assert_final(&spec, &pre, &racing, &finals);
}

on_both_limiters! {
    a_denial_racing_an_admission_and_peeks_leaves_no_trace();
    a_denial_racing_rotation_and_an_admission_leaves_no_trace();
}
