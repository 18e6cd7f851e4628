// Sliding counter — admission racing bucket rotation.
//
// Proves: while one thread moves the clock across a bucket boundary and then across a whole
// window, concurrent checks (which fill the ring's new buckets, help each other's fills and
// retry when the ring moves under them) keep Strict's promise: no interval of length W holds
// more than L of the admitted cost, each admission taken at the time it judged at — the last
// clock reading of the call, recorded by a wrapping clock, or, when the ring moved past that
// reading once more, the start of the newer bucket (either, where the decision cannot tell;
// see `effective_times`). Every decision is one the sequential counter gives at that time for
// some set of the other admissions, each counted no earlier than its own bucket; the final
// window sums match the sequential counter's; and nothing drifts: W + G after the last
// admission the limiter has all of L again.
//
// Would fail if a reader used a slot overwritten by a fill in progress (an old bucket read
// as empty: over-admission at the old time), if a snapshot were taken from a `cum` that
// misses an admission judged at its bucket, if admission were not one compare-and-swap from
// the total judged, or if a retry judged with a stale total.
//
// On the direct limiter only: on one key of a keyed limiter (`Spec::keyed_limiter`) the two
// models take 63 s and 111 s, each run alone in `--release` on two cores (the first explores
// 525 408 interleavings, against 168 525 on the direct limiter); `fill` and `denial` run the
// keyed ring through fills, resets and rotations.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{
    Event, Op, Spec, assert_explained, assert_final, assert_strict_safe, charged, model, run,
};

/// N = 2 buckets of 10 ns, L = 1. One unit admitted at t = 5. Then a ticker moves the clock
/// to 15 (next bucket: still denied) and to 35 (bucket 3: the t = 5 unit has left the
/// window, a jump of more than N buckets) while two threads `check()`.
#[test]
fn checks_race_a_clock_crossing_a_bucket_and_a_window() {
    model(|| {
        let spec = Spec::strict(1, 2, 10);
        let (limiter, clock) = spec.limiter();
        clock.set(Duration::from_nanos(5));
        let pre = vec![run(&limiter, 0, Op::Check(1))];
        assert!(pre[0].decision.is_allowed());

        let ticker = {
            let clock = clock.clone();
            thread::spawn(move || {
                clock.advance(Duration::from_nanos(10));
                clock.advance(Duration::from_nanos(20));
            })
        };
        let checkers: Vec<_> = (1..=2)
            .map(|t| {
                let limiter = limiter.clone();
                thread::spawn(move || run(&limiter, t, Op::Check(1)))
            })
            .collect();
        ticker.join().unwrap();
        let racing: Vec<Event> = checkers.into_iter().map(|h| h.join().unwrap()).collect();

        let all: Vec<Event> = pre.iter().chain(&racing).copied().collect();
        assert_strict_safe(&spec, &all);
        assert_explained(&spec, &pre, &racing);
        assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");

        // The window sums, bucket by bucket, then no drift: W + G after the last admission
        // the limiter is as fresh.
        let mut finals = vec![run(&limiter, 9, Op::Peek)];
        for _ in 0..3 {
            clock.advance(Duration::from_nanos(spec.granularity));
            finals.push(run(&limiter, 9, Op::Peek));
        }
        assert_final(&spec, &pre, &racing, &finals);
        assert_eq!(finals[3].at, 35 + spec.window() + spec.granularity);
        assert_eq!(finals[3].decision.remaining(), spec.limit, "{all:#?}");
    });
}

/// N = 1 (G = W = 10 ns), L = 2. Two units admitted at t = 5. The ticker crosses one bucket
/// (t = 15: the units are still in Strict's window) and then another (t = 25: they have
/// left) while one thread asks for 2 and another twice for 1.
#[test]
fn costs_race_a_clock_crossing_two_buckets() {
    model(|| {
        let spec = Spec::strict(2, 1, 10);
        let (limiter, clock) = spec.limiter();
        clock.set(Duration::from_nanos(5));
        let pre = vec![run(&limiter, 0, Op::Check(2))];
        assert!(pre[0].decision.is_allowed());

        let ticker = {
            let clock = clock.clone();
            thread::spawn(move || {
                clock.advance(Duration::from_nanos(10));
                clock.advance(Duration::from_nanos(10));
            })
        };
        let big = {
            let limiter = limiter.clone();
            thread::spawn(move || vec![run(&limiter, 1, Op::Check(2))])
        };
        let small = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                vec![
                    run(&limiter, 2, Op::Check(1)),
                    run(&limiter, 2, Op::Check(1)),
                ]
            })
        };
        ticker.join().unwrap();
        let mut racing = big.join().unwrap();
        racing.extend(small.join().unwrap());

        let all: Vec<Event> = pre.iter().chain(&racing).copied().collect();
        assert_strict_safe(&spec, &all);
        assert_explained(&spec, &pre, &racing);
        assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");

        let mut finals = vec![run(&limiter, 9, Op::Peek)];
        for _ in 0..2 {
            clock.advance(Duration::from_nanos(spec.granularity));
            finals.push(run(&limiter, 9, Op::Peek));
        }
        assert_final(&spec, &pre, &racing, &finals);
        assert_eq!(finals[2].decision.remaining(), spec.limit, "{all:#?}");
    });
}
