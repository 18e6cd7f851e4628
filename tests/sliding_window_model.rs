//! Property tests: on any sequence of (clock step, cost), a `SlidingWindow` run from one
//! thread on a `ManualClock` decides exactly what the reference model decides, in both modes.

mod common;

use std::time::Duration;

use common::{Model, assert_reset_is_tight, assert_retry_is_tight};
use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{Mode, Quota, SlidingWindow};

#[derive(Clone, Debug)]
enum Op {
    Check(u64),
    Peek,
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=12,
        prop::sample::select(vec![1u64, 2, 3, 4, 7, 10]),
        1u64..=50,
        any::<bool>(),
    )
        .prop_map(|(limit, buckets, g, weighted)| {
            Quota::new(limit, Duration::from_nanos(g * buckets))
                .unwrap()
                .with_granularity(Duration::from_nanos(g))
                .unwrap()
                .with_mode(if weighted {
                    Mode::Weighted
                } else {
                    Mode::Strict
                })
        })
}

/// Steps in units of the granularity `g`, so that edges are hit exactly and also missed by
/// one nanosecond, with the occasional idle gap of a window or of years.
fn step(g: u64, buckets: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => Just(0),
        4 => 1..=g,
        3 => Just(g),
        2 => Just(g - 1),
        2 => Just(g + 1),
        2 => 0..=3 * g * buckets,
        1 => Just(g * buckets),
        1 => Just(g * (buckets + 1)),
        1 => Just(3 * 365 * 24 * 3600 * 1_000_000_000u64),
        1 => Just(g << 32),
    ]
}

fn case() -> impl Strategy<Value = (Quota, Vec<(u64, Op)>)> {
    quota().prop_flat_map(|q| {
        let g = q.granularity().as_nanos() as u64;
        let op = prop_oneof![4 => (1..=q.limit()).prop_map(Op::Check), 1 => Just(Op::Peek)];
        (
            Just(q),
            prop::collection::vec((step(g, q.buckets()), op), 1..120),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn decisions_equal_the_reference_model((quota, ops) in case()) {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(quota, clock.clone());
        let mut model = Model::new(quota);
        let mut t = 0u64;
        for (step, op) in ops {
            t += step;
            clock.set(Duration::from_nanos(t));
            match op {
                Op::Check(n) => {
                    let before = model.clone();
                    let d = limiter.check_n(n).unwrap();
                    let (allowed, remaining) = model.check(t, n);
                    prop_assert_eq!(d.is_allowed(), allowed, "check_n({}) at t={}", n, t);
                    prop_assert_eq!(d.remaining(), remaining, "remaining after check_n({}) at t={}", n, t);
                    prop_assert_eq!(d.limit(), quota.limit());
                    if allowed {
                        prop_assert_eq!(d.retry_after(), None);
                    } else {
                        assert_retry_is_tight(&before, t, n, &d);
                    }
                    assert_reset_is_tight(&model, t, &d);
                }
                Op::Peek => {
                    let d = limiter.peek();
                    prop_assert_eq!(d.is_allowed(), model.admits(t, 1));
                    prop_assert_eq!(d.remaining(), model.remaining(t), "peek at t={}", t);
                    if !d.is_allowed() {
                        assert_retry_is_tight(&model, t, 1, &d);
                    }
                    assert_reset_is_tight(&model, t, &d);
                }
            }
        }
    }
}
