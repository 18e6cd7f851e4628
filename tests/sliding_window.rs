//! The direct limiter's public surface: configuration errors, cost errors, edges of buckets
//! and windows to the nanosecond, and extremes (the largest limit and costs, gaps of years,
//! the most buckets) with overflow checks on, and Strict's bound on a clock that lags.

use slidegate_testkit::model as common;

use std::time::Duration;

use common::Model;
use slidegate::clock::{Clock, ManualClock, Nanos};
use slidegate::{ConfigError, CostError, MAX_BUCKETS, MAX_LIMIT, Mode, Quota, SlidingWindow};

fn quota(limit: u64, window_ns: u64, granularity_ns: u64, mode: Mode) -> Quota {
    Quota::new(limit, Duration::from_nanos(window_ns))
        .unwrap()
        .with_granularity(Duration::from_nanos(granularity_ns))
        .unwrap()
        .with_mode(mode)
}

fn limiter(q: Quota) -> (SlidingWindow<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (SlidingWindow::with_clock(q, clock.clone()), clock)
}

#[test]
fn bad_quotas_are_errors_that_name_the_field() {
    let s = Duration::from_secs(1);
    let cases: Vec<(Result<Quota, ConfigError>, &str)> = vec![
        (Quota::new(0, s), "limit"),
        (Quota::new(MAX_LIMIT + 1, s), "limit 2147483648"),
        (Quota::new(1, Duration::ZERO), "window"),
        (Quota::new(1, Duration::from_secs(u64::MAX)), "window"),
        (
            Quota::new(1, s).and_then(|q| q.with_granularity(Duration::ZERO)),
            "granularity",
        ),
        (
            Quota::new(1, s).and_then(|q| q.with_granularity(2 * s)),
            "granularity 2s",
        ),
        (
            Quota::new(1, s).and_then(|q| q.with_granularity(Duration::from_millis(300))),
            "granularity 300ms does not divide the window 1s",
        ),
        (
            Quota::new(1, s).and_then(|q| q.with_granularity(Duration::from_micros(10))),
            "100000 buckets",
        ),
        (
            Quota::new(1, s).and_then(|q| {
                q.with_mode(Mode::FixedWindow)
                    .with_granularity(Duration::from_millis(100))
            }),
            "granularity 100ms must equal the window 1s",
        ),
    ];
    for (result, needle) in cases {
        let err = result.expect_err(needle);
        assert!(
            err.to_string().contains(needle),
            "{err} should mention {needle:?}"
        );
    }
}

#[test]
fn the_default_granularity_is_a_tenth_of_the_window_when_it_divides() {
    let q = Quota::new(5, Duration::from_secs(60)).unwrap();
    assert_eq!((q.granularity(), q.buckets()), (Duration::from_secs(6), 10));
    let odd = Quota::new(5, Duration::from_nanos(1_234_567)).unwrap();
    assert_eq!(
        (odd.granularity(), odd.buckets()),
        (Duration::from_nanos(1_234_567), 1)
    );
    let q = Quota::new(5, Duration::from_micros(MAX_BUCKETS)).unwrap();
    assert_eq!(q.with_granularity(q.window()).unwrap().buckets(), 1);
    let most = q.with_granularity(Duration::from_micros(1)).unwrap();
    assert_eq!(most.buckets(), MAX_BUCKETS);
}

#[test]
fn costs_of_zero_or_above_the_limit_are_errors_not_denials() {
    let (l, _) = limiter(quota(4, 100, 10, Mode::Strict));
    assert_eq!(l.check_n(0), Err(CostError::Zero));
    assert_eq!(
        l.check_n(5),
        Err(CostError::ExceedsLimit { cost: 5, limit: 4 })
    );
    assert!(
        l.check_n(5)
            .unwrap_err()
            .to_string()
            .contains("above the limit 4")
    );
    // Nothing was charged by the errors.
    assert_eq!(l.peek().remaining(), 4);
    assert!(l.check_n(4).unwrap().is_allowed());
}

/// Strict, W = 1000 ns in 10 buckets of 100: cost admitted at t = 99 (bucket 0) stays in the
/// window through bucket 10 and leaves when bucket 11 starts at t = 1100.
#[test]
fn strict_edges_to_the_nanosecond() {
    let (l, clock) = limiter(quota(2, 1000, 100, Mode::Strict));
    clock.set(Duration::from_nanos(99));
    assert!(l.check_n(2).unwrap().is_allowed());
    for (t, allowed) in [(100, false), (1000, false), (1099, false), (1100, true)] {
        clock.set(Duration::from_nanos(t));
        assert_eq!(l.peek().is_allowed(), allowed, "t = {t}");
    }
    clock.set(Duration::from_nanos(1099));
    let denied = l.check();
    assert_eq!(denied.retry_after(), Some(Duration::from_nanos(1)));
    assert_eq!(denied.reset_after(), Duration::from_nanos(1));
    clock.set(Duration::from_nanos(1100));
    let d = l.check();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 1);
    // Charged at bucket 11: it leaves when bucket 22 starts.
    assert_eq!(d.reset_after(), Duration::from_nanos(1100));
}

/// Weighted, one bucket (Cloudflare's two counters): 10 admitted in [0, 100) weigh
/// 10·(100 − r)/100 in the next bucket.
#[test]
fn weighted_edges_to_the_nanosecond() {
    let (l, clock) = limiter(quota(10, 100, 100, Mode::Weighted));
    clock.set(Duration::from_nanos(99));
    assert!(l.check_n(10).unwrap().is_allowed());
    clock.set(Duration::from_nanos(100));
    assert_eq!(l.peek().remaining(), 0);
    clock.set(Duration::from_nanos(101));
    assert_eq!(l.peek().remaining(), 0);
    // 10·(100 − 10)/100 = 9: one fits from r = 10 on, not at r = 9.
    clock.set(Duration::from_nanos(109));
    let denied = l.check();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Some(Duration::from_nanos(1)));
    clock.set(Duration::from_nanos(110));
    assert!(l.check().is_allowed());
    clock.set(Duration::from_nanos(199));
    assert_eq!(l.peek().remaining(), 10 - 1 - 1);
    clock.set(Duration::from_nanos(200));
    assert_eq!(l.peek().remaining(), 10 - 1);
}

#[test]
fn the_largest_limit_and_costs_near_it() {
    for mode in [Mode::Strict, Mode::Weighted] {
        let (l, clock) = limiter(quota(MAX_LIMIT, 1_000, 10, mode));
        assert!(l.check_n(MAX_LIMIT - 1).unwrap().is_allowed());
        assert!(l.check_n(1).unwrap().is_allowed());
        let d = l.check_n(MAX_LIMIT).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        clock.advance(Duration::from_nanos(
            d.retry_after().unwrap().as_nanos() as u64
        ));
        assert!(l.check_n(MAX_LIMIT).unwrap().is_allowed());
        // Many full windows: the wrapping 32-bit snapshots keep exact sums.
        for _ in 0..5 {
            clock.advance(Duration::from_nanos(1_010));
            assert_eq!(l.peek().remaining(), MAX_LIMIT);
            assert!(l.check_n(MAX_LIMIT).unwrap().is_allowed());
            assert!(!l.check().is_allowed());
        }
    }
}

#[test]
fn gaps_of_years_and_of_2_pow_24_and_2_pow_32_buckets_match_the_model() {
    for mode in [Mode::Strict, Mode::StrictMarked, Mode::Weighted] {
        for g in [1u64, 7, 1_000_000] {
            let q = quota(5, 10 * g, g, mode);
            let (l, clock) = limiter(q);
            let mut model = Model::new(q);
            let year = 365 * 24 * 3600 * 1_000_000_000u64;
            let steps = [
                0,
                3 * g,
                100 * year,
                g << 32,
                (g << 32) - 3 * g,
                g << 24,
                (g << 24) + 4 * g,
                (g << 24) - 2 * g,
                5 * g,
                10 * g,
                400 * year,
            ];
            let mut t = 0u64;
            for step in steps {
                t += step;
                clock.set(Duration::from_nanos(t));
                for n in [2, 3, 1] {
                    let d = l.check_n(n).unwrap();
                    assert_eq!(
                        (d.is_allowed(), d.remaining()),
                        model.check(t, n),
                        "g={g} t={t}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_end_of_time_does_not_panic() {
    let (l, clock) = limiter(quota(3, 10, 1, Mode::Strict));
    clock.set(Duration::from_nanos(u64::MAX - 5));
    assert!(l.check().is_allowed());
    clock.set(Duration::from_nanos(u64::MAX));
    assert!(l.check().is_allowed());
    clock.advance(Duration::from_secs(1));
    assert_eq!(l.clock().now(), Nanos(u64::MAX));
    assert!(l.check().is_allowed());
    assert!(!l.check().is_allowed());
    let _ = l.peek();
}

#[test]
fn the_most_buckets_match_the_model() {
    let q = quota(100, MAX_BUCKETS * 1_000, 1_000, Mode::Strict);
    let (l, clock) = limiter(q);
    let mut model = Model::new(q);
    for i in 0..400u64 {
        let t = i * i * 997;
        clock.set(Duration::from_nanos(t));
        let d = l.check();
        assert_eq!((d.is_allowed(), d.remaining()), model.check(t, 1));
    }
}

/// A clock read backwards is taken as the newest bucket seen: nothing is re-admitted.
#[test]
fn a_clock_set_backwards_cannot_reopen_the_window() {
    let (l, clock) = limiter(quota(2, 1_000, 100, Mode::Strict));
    clock.set(Duration::from_nanos(5_000));
    assert!(l.check_n(2).unwrap().is_allowed());
    clock.set(Duration::from_nanos(10));
    let d = l.check();
    assert!(!d.is_allowed());
    // Judged at the start of bucket 50, where the 2 stay until bucket 61 (6 100 ns); the
    // waits are measured from the reading, 10 ns, as the caller's clock will count them.
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(6_090)));
    assert_eq!(d.reset_after(), Duration::from_nanos(6_090));
    clock.set(Duration::from_nanos(6_099));
    assert!(!l.check().is_allowed());
    clock.set(Duration::from_nanos(6_100));
    assert!(l.check().is_allowed());
}

/// Regression: a reading older than the state's newest time was judged at that newer time
/// and its waits measured from there, so on the clock that gave the reading they were short
/// by its lag: a caller that waited `retry_after` and retried was denied again (here Strict
/// answered 1.1 s, judged at the start of the bucket of 10.25 s, to a reading of 9.3 s that
/// needs 2 s). Every algorithm now measures them from the reading: waiting them on that clock
/// admits, one nanosecond less does not.
#[test]
fn regression_waits_after_a_backwards_reading_were_short_by_its_lag() {
    const SEC: u64 = 1_000_000_000;
    for mode in common::MODES {
        let (l, clock) = limiter(quota(3, SEC, SEC / 10, mode));
        let at = |t: u64| clock.set(Duration::from_nanos(t));
        at(10 * SEC + 250_000_000);
        assert!(l.check_n(3).unwrap().is_allowed(), "{mode:?}");
        let back = 9 * SEC + 300_000_000;
        at(back);
        let d = l.check();
        assert!(!d.is_allowed(), "{mode:?}");
        let retry = d.retry_after().unwrap().as_nanos() as u64;
        let reset = d.reset_after().as_nanos() as u64;
        at(back + retry - 1);
        assert!(
            !l.peek().is_allowed(),
            "{mode:?}: retry_after {retry} is early"
        );
        at(back + retry);
        assert!(
            l.peek().is_allowed(),
            "{mode:?}: retry_after {retry} is late"
        );
        at(back + reset);
        assert_eq!(
            l.peek().remaining(),
            3,
            "{mode:?}: reset_after {reset} is early"
        );
    }
}

#[test]
fn peek_charges_nothing() {
    for mode in [Mode::Strict, Mode::Weighted] {
        let (l, clock) = limiter(quota(3, 100, 10, mode));
        for _ in 0..10 {
            assert_eq!(l.peek().remaining(), 3);
        }
        assert!(l.check().is_allowed());
        clock.advance(Duration::from_nanos(55));
        assert_eq!(l.peek().remaining(), 2);
        assert_eq!(l.admitted_total(), 1);
    }
}

#[test]
fn limiters_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SlidingWindow>();
    assert_send_sync::<SlidingWindow<ManualClock>>();
}

proptest::proptest! {
    /// What `CoarseClock` documents for a clock that lags real time by up to `δ` (readings
    /// monotone, as quanta's recent time is): Strict never admits more than `L` in any
    /// real-time interval of length `W − δ`. Real time `t` advances by random steps; each check
    /// reads `max(previous reading, t − lag)` with a random `lag ≤ δ`.
    #[test]
    fn strict_on_a_lagging_clock_admits_at_most_the_limit_in_w_minus_the_lag(
        steps in proptest::collection::vec((0u64..40, 0u64..=30, 1u64..=3), 1..300),
    ) {
        const W: u64 = 100;
        const DELTA: u64 = 30;
        const L: u64 = 4;
        let (limiter, clock) = limiter(quota(L, W, 10, Mode::Strict));
        let (mut t, mut reading) = (0u64, 0u64);
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (dt, lag, n) in steps {
            t += dt;
            reading = reading.max(t.saturating_sub(lag.min(DELTA)));
            clock.set(Duration::from_nanos(reading));
            if limiter.check_n(n).unwrap().is_allowed() {
                admitted.push((t, n));
            }
        }
        // The busiest interval of length W − δ starts at an admission.
        for &(s, _) in &admitted {
            let within: u64 = admitted
                .iter()
                .filter(|&&(u, _)| s <= u && u < s + W - DELTA)
                .map(|&(_, n)| n)
                .sum();
            proptest::prop_assert!(within <= L, "{within} admitted in [{s}, {})", s + W - DELTA);
        }
    }
}

#[test]
fn a_refund_frees_all_a_weighted_window_holds_beyond_one_raise() {
    // A Weighted window of N = 2 holds up to about 2L; one refund frees all of it, though a
    // single raise of the ring is at most 2³¹ − 1 (a cap on the whole refund freed only that).
    let l = MAX_LIMIT;
    let (w, clock) = limiter(quota(l, 2_000_000_000, 1_000_000_000, Mode::Weighted));
    assert!(w.check_n(l).unwrap().is_allowed());
    clock.set(Duration::from_nanos(3_000_000_000 - 1));
    assert!(w.check_n(l - 3).unwrap().is_allowed());
    assert_eq!(w.refund(u64::MAX), 2 * l - 3);
    assert_eq!(w.peek().remaining(), l);
}

/// A flood of denials after a burst, bucket after bucket of an hour of 3,600 buckets, reports
/// when the burst's buckets leave, exactly as the reference model does; a refund and an
/// admission in between change what the next denial reports at once, though the denials
/// before them found the same buckets again and again (the direct check keeps what the last
/// one found as a guess, and confirms it with loads).
#[test]
fn denials_after_a_burst_report_exact_waits_as_the_window_slides() {
    let s = 1_000_000_000;
    let q = quota(10, 3600 * s, s, Mode::Strict);
    let (limiter, clock) = limiter(q);
    let mut model = Model::new(q);
    let check = |model: &mut Model, t: u64, n: u64| {
        clock.set(Duration::from_nanos(t));
        let before = model.clone();
        let d = limiter.check_n(n).unwrap();
        let (allowed, remaining) = model.check(t, n);
        assert_eq!(
            (d.is_allowed(), d.remaining()),
            (allowed, remaining),
            "t={t}"
        );
        if !allowed {
            common::assert_retry_is_tight(&before, t, n, &d);
        }
        common::assert_reset_is_tight(model, t, &d);
        d
    };
    // The burst: 7 units in bucket 0, 3 in bucket 2.
    assert!(check(&mut model, s / 2, 7).is_allowed());
    assert!(check(&mut model, 2 * s + 1, 3).is_allowed());
    for k in 3..1800 {
        let t = k * s + s / 4;
        let d = check(&mut model, t, 1);
        assert!(!d.is_allowed());
        // One unit fits once bucket 0 leaves, at 3,601 s; the window is empty at 3,603 s.
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(3601 * s - t)));
        assert_eq!(d.reset_after(), Duration::from_nanos(3603 * s - t));
        // A cost of 8 fits only once bucket 2 has left too.
        let d = check(&mut model, t, 8);
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(3603 * s - t)));
    }
    // Expires the oldest units: all of bucket 0's, one of bucket 2's.
    assert!(!check(&mut model, 1800 * s, 1).is_allowed());
    assert_eq!(limiter.refund(8), 8);
    assert_eq!(model.refund(1800 * s, 8), 8);
    let d = check(&mut model, 1800 * s + 1, 9);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(1803 * s - 1)));
    assert!(check(&mut model, 1801 * s, 8).is_allowed());
    for k in 1802..1900 {
        let d = check(&mut model, k * s, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.reset_after(), Duration::from_nanos(5402 * s - k * s));
    }
}
