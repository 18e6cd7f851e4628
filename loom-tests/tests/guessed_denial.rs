// The direct limiter's denial after a burst — judged from a guess of the window's newest
// non-empty bucket and first fit, confirmed by loads.
//
// Proves: a Strict denial whose current bucket is empty, which `counter::deny_guessed`
// answers from the buckets the last such denial found (`DenialGuess`, read and written
// Relaxed by every denier) once two tails confirm them, is in every field — `remaining`,
// `retry_after` and `reset_after` — the answer of a sequential limiter, while another
// thread's denials of another cost rewrite the guess. The calls are replayed on a fresh
// single-threaded limiter at the clock readings they took; denials write nothing the
// window's answers depend on, so one order stands for all.
//
// Would fail if the guess were taken without its confirmation: with
// `CounterRule::strict_denied_guessed` returning the guessed buckets' decision unchecked,
// this model fails (a denial of 3 reports the `retry_after` a unit's guess left, one bucket
// end, where the window must empty first), while `fast_denial` still passes.
//
// Direct limiter only: the keyed stores keep no guess.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Limiter, Op, Spec, run};
use slidegate::clock::ManualClock;
use slidegate::{Decision, Quota, SlidingWindow};

/// One check, its cost, the clock reading it took, and its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    n: u64,
    at: u64,
    decision: Decision,
}

fn check(limiter: &Limiter, n: u64) -> Call {
    let e = run(limiter, 0, Op::Check(n));
    Call {
        n,
        at: e.at,
        decision: e.decision,
    }
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
        .map(|call| {
            clock.set(Duration::from_nanos(call.at));
            Call {
                decision: limiter.check_n(call.n).expect("a valid cost"),
                ..*call
            }
        })
        .collect()
}

/// N = 2 (G = 10 ns), L = 3: two units admitted at t = 5 and one at t = 15, then a denial
/// at t = 25, whose current bucket is empty, finds (and keeps as the guess) bucket 1 as the
/// newest that held anything and the oldest bucket's leaving as a unit's first fit. Thread A
/// is denied a unit twice at t = 25, on that guess; thread B is denied a cost of 3, whose
/// first fit is the window's emptying, then a cost of 2: each rewrites the fit the other
/// guesses from.
fn guessed_denials_racing_each_other_are_sequential_answers() {
    let spec = Spec::strict(3, 2, 10);
    let (limiter, clock) = spec.limiter();
    clock.set(Duration::from_nanos(5));
    let mut pre = vec![check(&limiter, 2)];
    clock.set(Duration::from_nanos(15));
    pre.push(check(&limiter, 1));
    clock.set(Duration::from_nanos(25));
    pre.push(check(&limiter, 1));
    assert!(!pre[2].decision.is_allowed());

    let units = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![check(&limiter, 1), check(&limiter, 1)])
    };
    let larger = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![check(&limiter, 3), check(&limiter, 2)])
    };
    let a = units.join().unwrap();
    let b = larger.join().unwrap();
    // A denial writes nothing a check reads (the guess is only a hint), so every order of
    // these denials leaves the same window: one order's replay is every order's.
    let order: Vec<Call> = pre.iter().chain(&a).chain(&b).copied().collect();
    assert!(order[3..].iter().all(|call| !call.decision.is_allowed()));
    assert_eq!(replay(&spec, &order), order);
}

#[test]
fn direct() {
    loom_tests::model(guessed_denials_racing_each_other_are_sequential_answers);
}
