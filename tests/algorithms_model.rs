//! Property tests for every algorithm behind the one interface: on any sequence of (clock
//! step, check / peek of a cost / refund), a `SlidingWindow` run from one thread on a
//! `ManualClock` decides exactly what the reference model (`slidegate-testkit`) decides, and
//! one key of a `KeyedLimiter` (in its inline table, and in its general store) decides
//! exactly what the direct limiter does.

use slidegate_testkit::model as common;

use std::time::Duration;

use common::{MODES, Model, assert_reset_is_tight, assert_retry_is_tight};
use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Quota, SlidingWindow};

#[derive(Clone, Debug)]
enum Op {
    Check(u64),
    Peek(u64),
    Refund(u64),
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=12,
        prop::sample::select(vec![1u64, 2, 3, 4, 7, 10]),
        1u64..=50,
        prop::sample::select(MODES.to_vec()),
    )
        .prop_map(|(limit, buckets, g, mode)| {
            Quota::new(limit, Duration::from_nanos(g * buckets))
                .unwrap()
                .with_granularity(Duration::from_nanos(g))
                .unwrap()
                .with_mode(mode)
        })
}

/// Steps in units of the window `w` and granularity `g`, hitting edges exactly and missing
/// them by one nanosecond, with the occasional gap of years.
fn step(g: u64, w: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => Just(0),
        4 => 1..=g,
        2 => Just(g),
        2 => Just(g - 1),
        2 => Just(g + 1),
        2 => Just(w),
        2 => Just(w - 1),
        1 => Just(w + 1),
        2 => 0..=3 * w,
        1 => Just(3 * 365 * 24 * 3600 * 1_000_000_000u64),
        // Gaps of 2⁸, 2²⁴ and 2³² buckets, and near 2⁸: tags (the bucket index mod 2²⁴ in
        // wide slots, mod 2⁸ in a keyed key's compact ones) that would alias without the
        // ring's half-way fill.
        1 => Just(g << 8),
        1 => 254 * g..=258 * g,
        1 => Just(g << 24),
        1 => Just(g << 32),
    ]
}

fn case() -> impl Strategy<Value = (Quota, Vec<(u64, Op)>)> {
    quota().prop_flat_map(|q| {
        let g = q.granularity().as_nanos() as u64;
        let w = q.window().as_nanos() as u64;
        let l = q.limit();
        let op = prop_oneof![
            6 => (1..=l).prop_map(Op::Check),
            1 => Just(Op::Peek(1)),
            1 => (1..=l).prop_map(Op::Peek),
            1 => (1..=l + 2).prop_map(Op::Refund),
        ];
        (Just(q), prop::collection::vec((step(g, w), op), 1..100))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn every_algorithm_equals_its_reference_model((quota, ops) in case()) {
        equals_the_model(quota, ops)?;
    }
}

/// The case proptest shrank the Weighted mode's model test to when it was
/// `tests/sliding_window_model.rs` (since folded into this file): checks of one unit at
/// t = 1, 3 and 3 under a limit of one in a window of one 2 ns bucket, where the oldest
/// bucket's weight is interpolated at an odd time.
#[test]
fn weighted_single_bucket_at_odd_times() {
    let quota = Quota::new(1, Duration::from_nanos(2))
        .unwrap()
        .with_granularity(Duration::from_nanos(2))
        .unwrap()
        .with_mode(slidegate::Mode::Weighted);
    let ops = vec![(1, Op::Check(1)), (2, Op::Check(1)), (0, Op::Check(1))];
    equals_the_model(quota, ops).unwrap();
}

/// Runs `ops` (each after advancing the clock by its step) on a direct and a keyed limiter
/// and the reference model, and fails on the first decision they do not share.
fn equals_the_model(quota: Quota, ops: Vec<(u64, Op)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(quota, clock.clone());
    let keyed = KeyedLimiter::<u8, _>::with_clock(quota, clock.clone());
    // `String` keys have no inline word: the general store.
    let stored = KeyedLimiter::<String, _>::with_clock(quota, clock.clone());
    let key = String::from("k");
    let mut model = Model::new(quota);
    let mut t = 0u64;
    for (step, op) in ops {
        t += step;
        clock.set(Duration::from_nanos(t));
        match op {
            Op::Check(n) => {
                let before = model.clone();
                let d = limiter.check_n(n).unwrap();
                prop_assert_eq!(
                    keyed.check_n(&1u8, n).unwrap(),
                    d,
                    "keyed check_n({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(
                    stored.check_n(&key, n).unwrap(),
                    d,
                    "stored check_n({}) at t={}",
                    n,
                    t
                );
                let (allowed, remaining) = model.check(t, n);
                prop_assert_eq!(d.is_allowed(), allowed, "check_n({}) at t={}", n, t);
                prop_assert_eq!(
                    d.remaining(),
                    remaining,
                    "remaining after check_n({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(d.limit(), quota.limit());
                if allowed {
                    prop_assert_eq!(d.retry_after(), None);
                } else {
                    assert_retry_is_tight(&before, t, n, &d);
                }
                assert_reset_is_tight(&model, t, &d);
            }
            Op::Peek(n) => {
                let d = limiter.peek_n(n).unwrap();
                if n == 1 {
                    prop_assert_eq!(limiter.peek(), d, "peek at t={}", t);
                    prop_assert_eq!(keyed.peek(&1u8), d, "keyed peek at t={}", t);
                }
                prop_assert_eq!(keyed.peek_n(&1u8, n).unwrap(), d, "keyed peek_n at t={}", t);
                prop_assert_eq!(
                    stored.peek_n(&key, n).unwrap(),
                    d,
                    "stored peek_n at t={}",
                    t
                );
                prop_assert_eq!(
                    d.is_allowed(),
                    model.admits(t, n),
                    "peek_n({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(
                    d.remaining(),
                    model.remaining(t),
                    "peek_n({}) at t={}",
                    n,
                    t
                );
                if d.is_allowed() {
                    prop_assert_eq!(d.retry_after(), None);
                } else {
                    assert_retry_is_tight(&model, t, n, &d);
                }
                assert_reset_is_tight(&model, t, &d);
            }
            Op::Refund(n) => {
                let freed = limiter.refund(n);
                prop_assert_eq!(
                    keyed.refund(&1u8, n),
                    freed,
                    "keyed refund({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(
                    stored.refund(&key, n),
                    freed,
                    "stored refund({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(freed, model.refund(t, n), "refund({}) at t={}", n, t);
                prop_assert_eq!(
                    limiter.peek().remaining(),
                    model.remaining(t),
                    "after refund at t={}",
                    t
                );
            }
        }
    }
    Ok(())
}
