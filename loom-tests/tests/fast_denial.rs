// The counter's fast denial — a flood's denial judged from the fast read's loads.
//
// Proves: a Strict denial that `counter::deny_strict` answers (from `front`, `cum` and the
// oldest, second and newest snapshots, `front` re-checked; see `window/counter.rs`) is, in
// every field — `remaining`, `retry_after` and `reset_after` — the answer of a sequential
// limiter in some order of the racing calls, while a refund raises the snapshots it reads
// or a fill recycles them. The other counter models check `remaining` only; here every
// call, refunds' counts included, is replayed on a fresh single-threaded limiter in each
// order the threads allow, at the clock readings the calls took, and one order must give
// exactly the answers seen.
//
// Would fail if the fast denial took a snapshot whose tag it did not check (a slot a fill
// recycled for a newer bucket: its count read as the current bucket's, and `reset_after`
// reported a bucket early): with that check removed from `Fast::rest_at` the fill model
// fails, while `denial`, `rotation` and `admission_at_limit` still pass.
//
// Each model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracles check both stores' rings.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{Limiter, NewLimiter, Op, Spec, interleavings, last_reading, run};
use slidegate::clock::ManualClock;
use slidegate::{Decision, Quota, SlidingWindow};

/// One call of a model thread and what it answered: a check's decision, or a refund's
/// count of units freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Check { at: u64, decision: Decision },
    Refund { at: u64, freed: u64 },
}

/// What a fresh sequential limiter of `spec` answers to `calls` made in this order, each at
/// its own clock reading (a reading older than one already seen is judged at the newest, as
/// every limiter does).
fn replay(spec: &Spec, calls: &[Call]) -> Vec<Call> {
    let quota = Quota::new(spec.limit, Duration::from_nanos(spec.window()))
        .and_then(|q| q.with_granularity(Duration::from_nanos(spec.granularity)))
        .expect("a valid quota");
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(quota, clock.clone());
    calls
        .iter()
        .map(|call| match *call {
            Call::Check { at, .. } => {
                clock.set(Duration::from_nanos(at));
                Call::Check {
                    at,
                    decision: limiter.check(),
                }
            }
            Call::Refund { at, .. } => {
                clock.set(Duration::from_nanos(at));
                Call::Refund {
                    at,
                    freed: limiter.refund(1),
                }
            }
        })
        .collect()
}

/// Whether some interleaving of `a` and `b` (each in its own order), after `pre`, replays to
/// exactly the answers seen.
fn linearizable(spec: &Spec, pre: &[Call], a: &[Call], b: &[Call]) -> bool {
    interleavings(pre, a, b)
        .into_iter()
        .any(|(order, _)| replay(spec, &order) == order)
}

fn check(limiter: &Limiter) -> Call {
    let e = run(limiter, 0, Op::Check(1));
    Call::Check {
        at: e.at,
        decision: e.decision,
    }
}

/// The state both models start from (N = 1, G = W = 10 ns, L = 2): a unit admitted at t = 5
/// and one at t = 15, the clock at 15; the two checks that made it.
fn full_at_15(new: NewLimiter) -> (Spec, Limiter, ManualClock, Vec<Call>) {
    let spec = Spec::strict(2, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    let mut pre = vec![check(&limiter)];
    clock.set(Duration::from_nanos(15));
    pre.push(check(&limiter));
    (spec, limiter, clock, pre)
}

/// N = 1 (G = W = 10 ns), L = 2, a unit admitted at t = 5 and one at t = 15: the window of
/// bucket 1 is full, and a check there is denied with the oldest bucket's leaving as its
/// `retry_after` (the fast denial's case). Thread A refunds 1 (the oldest unit) while thread
/// B checks twice at t = 15.
fn a_fast_denial_racing_a_refund_is_a_sequential_answer(new: NewLimiter) {
    let (spec, limiter, _, pre) = full_at_15(new);

    let refunder = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            let freed = limiter.refund(1);
            vec![Call::Refund {
                at: last_reading(),
                freed,
            }]
        })
    };
    let checker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![check(&limiter), check(&limiter)])
    };
    let a = refunder.join().unwrap();
    let b = checker.join().unwrap();
    assert!(
        linearizable(&spec, &pre, &a, &b),
        "{pre:#?}\n{a:#?}\n{b:#?}"
    );
}

/// N = 1, L = 2, full at t = 15 as above. Thread A moves the clock to 35 and checks (a fill
/// of buckets 2 and 3 recycles both slots); thread B checks, at 15 or 35.
fn a_fast_denial_racing_a_fill_is_a_sequential_answer(new: NewLimiter) {
    let (spec, limiter, clock, pre) = full_at_15(new);

    let mover = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(35));
            vec![check(&limiter)]
        })
    };
    let checker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![check(&limiter)])
    };
    let a = mover.join().unwrap();
    let b = checker.join().unwrap();
    assert!(
        linearizable(&spec, &pre, &a, &b),
        "{pre:#?}\n{a:#?}\n{b:#?}"
    );
}

on_both_limiters! {
    a_fast_denial_racing_a_refund_is_a_sequential_answer();
    a_fast_denial_racing_a_fill_is_a_sequential_answer();
}
