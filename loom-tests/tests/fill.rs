// Sliding counter — the window-sum structure and the fill protocol.
//
// Proves: when threads are the first to see a new bucket — including a jump of more than N
// buckets, which resets the whole window in one fill — they claim one goal, establish each
// new slot exactly once with a snapshot that under-counts nothing and is monotone across the
// window (even when helpers read different totals), and publish `front` only after; a
// helper that wakes up after its fill is over overwrites nothing; a peek never mixes a total
// with a `front` from different moments. Checked through the public API: every decision,
// concurrent peeks included, is the sequential counter's at the time it judged at for some
// set of the other admissions; and after every thread has joined, the window sums `peek()`
// reports, stepped bucket by bucket until the window is empty (no drift), are the
// sequential counter's for one placement of each concurrent admission in its own bucket or
// a newer one (the documented "counted in the newer bucket" of a late compare-and-swap).
//
// Would fail if a snapshot under-counted (an admission counted in an older bucket than its
// own), if snapshots were not monotone (an admission would leave a window and come back),
// if a late helper overwrote a newer bucket (the ring then reads as torn for ever: loom
// reports the livelock as "exceeded maximum number of branches"), or if a read accepted a
// `cum` that includes an admission judged in a bucket newer than the one it judges.
//
// Each model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracles check both stores' rings.
//
// Checked in scratch builds: without the `front` re-check in `Ring::fill`, the late
// helper's model fails on both (the livelock); with a helper that finds a slot established
// keeping its own, older snapshot for the next slots (no longer monotone), the model of
// helpers with different totals fails on both.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{
    Event, Limiter, NewLimiter, Op, Spec, assert_explained, assert_final, assert_strict_safe,
    charged, finals, run,
};
use slidegate::Mode;
use slidegate::clock::ManualClock;

fn settle(spec: &Spec, limiter: &Limiter, pre: &[Event], racing: &[Event], finals: &[Event]) {
    let all: Vec<Event> = pre.iter().chain(racing).copied().collect();
    assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");
    if spec.mode == Mode::Strict {
        assert_strict_safe(spec, &all);
    }
    assert_explained(spec, pre, racing);
    assert_final(spec, pre, racing, finals);
    let last = finals.last().unwrap();
    assert_eq!(last.decision.remaining(), spec.limit, "drift: {finals:#?}");
}

/// N = 2 buckets of 10 ns, L = 3; one unit at t = 5 and one at t = 15, so `front` is bucket
/// 1 and the ring holds real snapshots. Returns the limiter, its clock and those calls.
fn two_buckets_in(new: NewLimiter) -> (Spec, Limiter, ManualClock, Vec<Event>) {
    let spec = Spec::strict(3, 2, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    let mut pre = vec![run(&limiter, 0, Op::Check(1))];
    clock.set(Duration::from_nanos(15));
    pre.push(run(&limiter, 0, Op::Check(1)));
    (spec, limiter, clock, pre)
}

/// Two first-seers of a reset fill. With the clock at 45 (bucket 4: a jump of 3 > N from
/// bucket 1), two threads check: both race to claim the fill, establish its three slots
/// (each exactly once, with one snapshot) and publish `front`, and each one's admission
/// races the other's fill.
fn two_first_seers_race_one_reset_fill(new: NewLimiter) {
    let (spec, limiter, clock, pre) = two_buckets_in(new);
    clock.set(Duration::from_nanos(45));
    let seers: Vec<_> = (1..=2)
        .map(|t| {
            let limiter = limiter.clone();
            thread::spawn(move || run(&limiter, t, Op::Check(1)))
        })
        .collect();
    let racing: Vec<Event> = seers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(charged(&racing), 2, "{racing:#?}");

    let finals = finals(&limiter, &clock, &spec, 3);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

/// An admission at the old bucket racing a reset fill. One thread sets the clock to 45 and
/// checks (the reset fill); the other checks at 15 (an admission judged in bucket 1 whose
/// compare-and-swap may land before or after the fill reads `cum`) or at 45 (a second
/// first-seer).
fn an_old_admission_races_a_reset_fill(new: NewLimiter) {
    let (spec, limiter, clock, pre) = two_buckets_in(new);
    let mover = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(45));
            run(&limiter, 1, Op::Check(1))
        })
    };
    let other = {
        let limiter = limiter.clone();
        thread::spawn(move || run(&limiter, 2, Op::Check(1)))
    };
    let racing = vec![mover.join().unwrap(), other.join().unwrap()];

    let finals = finals(&limiter, &clock, &spec, 3);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

/// Helpers of one reset fill whose `cum` readings differ keep the snapshots monotone. One
/// thread sets the clock to 45 and checks (claiming the fill to bucket 4, reading `cum`);
/// the other checks twice: first at 15 (an admission in bucket 1 that may land after the
/// filler read `cum`), then at 45 (helping the same fill with the newer `cum`). Whichever
/// helper establishes which of the three slots, a later slot never gets an older snapshot:
/// else the bucket-1 admission would leave the window at bucket 4 and come back at bucket 5.
fn helpers_with_different_totals_keep_snapshots_monotone(new: NewLimiter) {
    let (spec, limiter, clock, pre) = two_buckets_in(new);
    let mover = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(45));
            vec![run(&limiter, 1, Op::Check(1))]
        })
    };
    let twice = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            vec![
                run(&limiter, 2, Op::Check(1)),
                run(&limiter, 2, Op::Check(1)),
            ]
        })
    };
    let mut racing = mover.join().unwrap();
    racing.extend(twice.join().unwrap());

    let finals = finals(&limiter, &clock, &spec, 3);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

/// A helper that wakes up after its fill is over. N = 1 (W = G = 10 ns), L = 2; one unit at
/// t = 5, the clock at 15 (bucket 1). Thread 1 checks (claiming or helping the fill to bucket
/// 1); thread 2 checks, sets the clock to 35 and checks again: a reset fill (jump of 2 > N)
/// that reuses the slot of bucket 1. If thread 1 stalled inside the first fill, it resumes
/// after both and must write nothing.
fn a_late_helper_after_a_reset_fill_writes_nothing(new: NewLimiter) {
    let spec = Spec::strict(2, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    let pre = vec![run(&limiter, 0, Op::Check(1))];
    clock.set(Duration::from_nanos(15));

    let first = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 1, Op::Check(1))])
    };
    let second = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            let a = run(&limiter, 2, Op::Check(1));
            clock.set(Duration::from_nanos(35));
            vec![a, run(&limiter, 2, Op::Check(1))]
        })
    };
    let mut racing = first.join().unwrap();
    racing.extend(second.join().unwrap());

    let finals = finals(&limiter, &clock, &spec, 2);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

/// A Weighted peek racing the fill and admission of the bucket after `front`. N = 1 (W = G =
/// 10 ns), L = 3; 2 admitted at t = 0, the clock at 15 (bucket 1, half-way). One thread asks
/// for 2 (fill to bucket 1; admitted: 2 + ⌈2·5/10⌉ = 3); another peeks. The peek must report
/// 2 (before the admission) or 0 (after): an admission judged in bucket 1 counted as if in the
/// oldest bucket would show as 1.
fn a_weighted_peek_racing_the_next_bucket_sees_a_consistent_window(new: NewLimiter) {
    let spec = Spec {
        mode: Mode::Weighted,
        ..Spec::strict(3, 1, 10)
    };
    let (limiter, clock) = new(&spec);
    let pre = vec![run(&limiter, 0, Op::Check(2))];
    clock.set(Duration::from_nanos(15));

    let checker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 1, Op::Check(2))])
    };
    let peeker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 2, Op::Peek)])
    };
    let mut racing = checker.join().unwrap();
    racing.extend(peeker.join().unwrap());
    assert!(racing[0].decision.is_allowed(), "{racing:#?}");

    let finals = finals(&limiter, &clock, &spec, 2);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

/// A peek whose reading is a bucket behind a concurrent admission. N = 1 (W = G = 10 ns),
/// L = 2; one unit at t = 5. One thread peeks (reading t = 5, or 15); another sets the clock
/// to 15 and checks (fill to bucket 1, admitted). A peek judged at t = 5 must not count the
/// unit judged at t = 15: it reports 1, never 0.
fn a_peek_behind_a_concurrent_admission_does_not_count_it(new: NewLimiter) {
    let spec = Spec::strict(2, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    let pre = vec![run(&limiter, 0, Op::Check(1))];

    let peeker = {
        let limiter = limiter.clone();
        thread::spawn(move || vec![run(&limiter, 1, Op::Peek)])
    };
    let mover = {
        let (limiter, clock) = (limiter.clone(), clock.clone());
        thread::spawn(move || {
            clock.set(Duration::from_nanos(15));
            vec![run(&limiter, 2, Op::Check(1))]
        })
    };
    let mut racing = peeker.join().unwrap();
    racing.extend(mover.join().unwrap());

    let finals = finals(&limiter, &clock, &spec, 2);
    settle(&spec, &limiter, &pre, &racing, &finals);
}

on_both_limiters! {
    two_first_seers_race_one_reset_fill();
    an_old_admission_races_a_reset_fill();
    helpers_with_different_totals_keep_snapshots_monotone();
    a_late_helper_after_a_reset_fill_writes_nothing();
    a_weighted_peek_racing_the_next_bucket_sees_a_consistent_window();
    a_peek_behind_a_concurrent_admission_does_not_count_it();
}
