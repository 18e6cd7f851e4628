//! Usage known afterwards against the reference model (`slidegate-testkit`, which holds the
//! specification of `docs/design.md`, "Usage known afterwards"): on any schedule of checks,
//! peeks, refunds and reports of usage (`record`, past the limit as debt, up to the quota's
//! usage ceiling), a direct limiter run from one thread on a `ManualClock` answers what the
//! model answers: every decision, `remaining`, a tight `retry_after` and `reset_after`, and
//! for a report what it charged, what it clamped, `remaining`, `available_after` and
//! `reset_after`. One key of a `KeyedLimiter`, in its inline table and in its general store,
//! answers what the direct limiter answers.

use slidegate_testkit::model as common;

use std::time::Duration;

use common::{Model, assert_reset_is_tight, assert_retry_is_tight, assert_usage};
use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Mode, Quota, SlidingWindow};

#[derive(Clone, Debug)]
enum Op {
    Check(u64),
    Peek(u64),
    Record(u64),
    Refund(u64),
}

/// The algorithms whose debt is built: all but the exact log, whose debt record is not (its
/// report is counted up to the limit, `a_log_counts_a_report_up_to_its_limit`).
const DEBT_MODES: [Mode; 5] = [
    Mode::Strict,
    Mode::StrictMarked,
    Mode::Weighted,
    Mode::FixedWindow,
    Mode::Gcra,
];

fn case() -> impl Strategy<Value = (Quota, Vec<(u64, Op)>)> {
    (
        prop::sample::select(vec![1u64, 2, 3, 5, 12, (1 << 21) + 1]),
        prop::sample::select(vec![1u64, 2, 3, 10]),
        1u64..=40,
        prop::sample::select(DEBT_MODES.to_vec()),
    )
        .prop_flat_map(|(limit, buckets, g, mode)| {
            let q = Quota::new(limit, Duration::from_nanos(g * buckets))
                .unwrap()
                .with_granularity(Duration::from_nanos(g))
                .unwrap()
                .with_mode(mode);
            let w = g * buckets;
            let step = prop_oneof![
                4 => Just(0),
                4 => 1..=g,
                2 => Just(g),
                2 => Just(w),
                1 => Just(w + g),
                2 => 0..=3 * w,
            ];
            let op = prop_oneof![
                5 => (1..=limit).prop_map(Op::Check),
                1 => (1..=limit).prop_map(Op::Peek),
                3 => (0..=3 * limit).prop_map(Op::Record),
                1 => prop::sample::select(vec![q.usage_ceiling(), q.usage_ceiling() + 1, u64::MAX])
                    .prop_map(Op::Record),
                1 => (1..=2 * limit).prop_map(Op::Refund),
            ];
            (Just(q), prop::collection::vec((step, op), 1..60))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn reports_and_debt_equal_the_reference_model((quota, ops) in case()) {
        equals_the_model(quota, ops)?;
    }
}

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
                prop_assert_eq!(keyed.check_n(&1, n).unwrap(), d, "keyed at t={}", t);
                prop_assert_eq!(stored.check_n(&key, n).unwrap(), d, "stored at t={}", t);
                let (allowed, remaining) = model.check(t, n);
                prop_assert_eq!(d.is_allowed(), allowed, "check_n({}) at t={}", n, t);
                prop_assert_eq!(d.remaining(), remaining, "remaining at t={}", t);
                if !allowed {
                    assert_retry_is_tight(&before, t, n, &d);
                }
                assert_reset_is_tight(&model, t, &d);
            }
            Op::Peek(n) => {
                let d = limiter.peek_n(n).unwrap();
                prop_assert_eq!(keyed.peek_n(&1, n).unwrap(), d, "keyed peek at t={}", t);
                prop_assert_eq!(stored.peek_n(&key, n).unwrap(), d, "stored peek at t={}", t);
                prop_assert_eq!(
                    d.is_allowed(),
                    model.admits(t, n),
                    "peek_n({}) at t={}",
                    n,
                    t
                );
                prop_assert_eq!(d.remaining(), model.remaining(t), "peek_n at t={}", t);
                if !d.is_allowed() {
                    assert_retry_is_tight(&model, t, n, &d);
                }
                assert_reset_is_tight(&model, t, &d);
            }
            Op::Record(n) => {
                let usage = limiter.record(n);
                prop_assert_eq!(keyed.record(&1, n), usage, "keyed record at t={}", t);
                prop_assert_eq!(stored.record(&key, n), usage, "stored record at t={}", t);
                let expected = model.record_usage(t, n);
                assert_usage(
                    &model,
                    t,
                    &usage,
                    expected,
                    &format!("record({n}) at t={t}"),
                );
                prop_assert_eq!(usage.limit(), quota.limit());
            }
            Op::Refund(n) => {
                let freed = limiter.refund(n);
                prop_assert_eq!(keyed.refund(&1, n), freed, "keyed refund at t={}", t);
                prop_assert_eq!(stored.refund(&key, n), freed, "stored refund at t={}", t);
                prop_assert_eq!(freed, model.refund(t, n), "refund({}) at t={}", n, t);
            }
        }
    }
    Ok(())
}

/// A report of a flood's size: the debt is charged whole (up to the ceiling), every check
/// denies until it has left, and `available_after` says when that is.
#[test]
fn debt_denies_until_it_leaves_the_window() {
    for mode in DEBT_MODES {
        let clock = ManualClock::new();
        let quota = Quota::new(10, Duration::from_secs(1))
            .unwrap()
            .with_mode(mode);
        let limiter = SlidingWindow::with_clock(quota, clock.clone());
        let usage = limiter.record(35);
        assert_eq!((usage.charged(), usage.clamped()), (35, 0), "{mode:?}");
        assert_eq!(usage.remaining(), 0, "{mode:?}");
        let wait = usage.available_after();
        assert!(wait > Duration::ZERO, "{mode:?}");
        clock.set(wait - Duration::from_nanos(1));
        assert!(
            !limiter.check().is_allowed(),
            "{mode:?}: admitted before available_after"
        );
        clock.set(wait);
        assert!(
            limiter.check().is_allowed(),
            "{mode:?}: denied at available_after"
        );
    }
}

/// A report beyond the ceiling is charged up to it and the rest reported, never wrapped: the
/// window then denies as a full one.
#[test]
fn a_huge_report_is_clamped_at_the_ceiling() {
    for mode in DEBT_MODES {
        let quota = Quota::new(1000, Duration::from_secs(1))
            .unwrap()
            .with_mode(mode);
        let limiter = SlidingWindow::with_clock(quota, ManualClock::new());
        let usage = limiter.record(u64::MAX);
        assert_eq!(usage.charged(), quota.usage_ceiling(), "{mode:?}");
        assert_eq!(
            usage.clamped(),
            u64::MAX - quota.usage_ceiling(),
            "{mode:?}"
        );
        let again = limiter.record(5);
        assert_eq!((again.charged(), again.clamped()), (0, 5), "{mode:?}");
        assert!(!limiter.check().is_allowed(), "{mode:?}");
        assert_eq!(limiter.peek().remaining(), 0, "{mode:?}");
    }
}

/// The exact log counts a report as units stamped now up to its limit; the rest is clamped
/// until its debt record is built.
#[test]
fn a_log_counts_a_report_up_to_its_limit() {
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_secs(1))
        .unwrap()
        .with_mode(Mode::ExactLog);
    let limiter = SlidingWindow::with_clock(quota, clock.clone());
    assert!(limiter.check_n(4).unwrap().is_allowed());
    let usage = limiter.record(9);
    assert_eq!(
        (usage.charged(), usage.clamped(), usage.remaining()),
        (6, 3, 0)
    );
    assert_eq!(usage.available_after(), Duration::from_secs(1));
    clock.set(Duration::from_secs(1));
    assert_eq!(limiter.peek().remaining(), 10);
    assert_eq!(limiter.record(0).charged(), 0);
}
