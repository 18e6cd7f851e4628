//! The request lifecycle around a check: blocking `wait`, tokio's `until_ready` (feature
//! `tokio`), jitter, and `refund` with `check_all`, for every algorithm. Time is a
//! `ManualClock` (whose `sleep` advances it) or tokio's paused clock: nothing here sleeps for
//! real.

use slidegate_testkit::model as common;

use std::time::Duration;

use common::{MODES, Model, worst_window};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{CostError, KeyedLimiter, Limit, Mode, Quota, SlidingWindow, check_all};

fn quota(limit: u64, window_ms: u64, mode: Mode) -> Quota {
    Quota::new(limit, Duration::from_millis(window_ms))
        .unwrap()
        .with_mode(mode)
}

/// Each `wait` returns at the first instant the model admits: the clock it advanced ends
/// where the sequential model says the request fits, for every algorithm.
#[test]
fn wait_returns_at_the_earliest_admitting_instant() {
    for mode in MODES {
        let q = quota(3, 100, mode);
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(q, clock.clone());
        let mut model = Model::new(q);
        for (i, n) in [1, 2, 3, 1, 3, 2, 2, 1].into_iter().enumerate() {
            let before = clock.now().0;
            let d = limiter.wait(n).unwrap();
            let t = clock.now().0;
            assert!(d.is_allowed(), "{mode:?} #{i}");
            assert!(model.admits(t, n), "{mode:?} #{i}: admitted at {t}");
            if t > before {
                assert!(
                    !model.admits(t - 1, n),
                    "{mode:?} #{i}: waited past {t} - 1"
                );
            }
            model.record(t, n);
        }
    }
}

/// Strict waits never let more than the limit into any window, whatever the costs.
#[test]
fn strict_waits_keep_every_window_within_the_limit() {
    let q = quota(5, 1000, Mode::Strict);
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(q, clock.clone());
    let mut admitted = Vec::new();
    for i in 0..200u64 {
        let n = 1 + i % 5;
        assert!(limiter.wait(n).unwrap().is_allowed());
        admitted.push((clock.now().0, n));
        clock.advance(Duration::from_millis(i % 7));
    }
    assert!(worst_window(&mut admitted, 1_000_000_000) <= 5);
}

#[test]
fn a_cost_no_wait_can_admit_is_an_error_at_once() {
    for mode in MODES {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(quota(2, 100, mode), clock.clone());
        assert_eq!(
            limiter.wait(3),
            Err(CostError::ExceedsLimit { cost: 3, limit: 2 })
        );
        assert_eq!(limiter.wait(0), Err(CostError::Zero));
        let keyed = KeyedLimiter::<&str, _>::with_clock(quota(2, 100, mode), clock.clone());
        assert_eq!(keyed.wait(&"k", 0), Err(CostError::Zero));
        assert_eq!(clock.now().0, 0, "{mode:?}: an error must not wait");
    }
}

/// Jitter adds a random 0 ..= jitter to each wait: the total lands in the expected range and
/// differs between runs.
#[test]
fn jitter_spreads_waits_within_its_bound() {
    let mut ends = std::collections::HashSet::new();
    for _ in 0..20 {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(quota(1, 100, Mode::Gcra), clock.clone());
        assert!(limiter.wait(1).unwrap().is_allowed());
        let d = limiter
            .wait_with_jitter(1, Duration::from_millis(10))
            .unwrap();
        assert!(d.is_allowed());
        let t = clock.now().0;
        assert!((100_000_000..=110_000_000).contains(&t), "waited until {t}");
        ends.insert(t);
    }
    assert!(ends.len() > 10, "jitter did not vary: {ends:?}");
}

#[test]
fn keyed_waits_are_per_key() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<&str, _>::with_clock(quota(1, 100, Mode::ExactLog), clock.clone());
    assert!(limiter.wait(&"a", 1).unwrap().is_allowed());
    assert!(limiter.wait(&"b", 1).unwrap().is_allowed());
    assert_eq!(clock.now().0, 0, "b has its own window");
    assert!(limiter.wait(&"a", 1).unwrap().is_allowed());
    assert_eq!(clock.now().0, 100_000_000);
}

/// A refunded request's room comes back for every algorithm, and `check_all` over mixed
/// algorithms charges all or none.
#[test]
fn refunds_and_multi_checks_work_for_every_algorithm() {
    for mode in MODES {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(quota(4, 1000, mode), clock.clone());
        assert!(limiter.check_n(4).unwrap().is_allowed(), "{mode:?}");
        assert!(!limiter.check().is_allowed(), "{mode:?}");
        assert_eq!(limiter.refund(2), 2, "{mode:?}");
        assert_eq!(limiter.peek().remaining(), 2, "{mode:?}");
        assert!(limiter.check_n(2).unwrap().is_allowed(), "{mode:?}");

        for other in MODES {
            let clock = ManualClock::new();
            let a = SlidingWindow::with_clock(quota(3, 1000, mode), clock.clone());
            let b = KeyedLimiter::<&str, _>::with_clock(quota(2, 1000, other), clock.clone());
            let key = b.key(&"k");
            let limits = [(&a as &dyn Limit, 1), (&key, 1)];
            assert!(check_all(&limits).unwrap().is_allowed());
            assert!(check_all(&limits).unwrap().is_allowed());
            let d = check_all(&limits).unwrap();
            assert_eq!(d.denied_by(), Some(1), "{mode:?} + {other:?}");
            // The denial charged nothing: `a` still has one left.
            assert_eq!(a.peek().remaining(), 1, "{mode:?} + {other:?}");
            assert!(a.check().is_allowed());
            assert!(!a.check().is_allowed());
        }
    }
}

/// A key's counts survive a quota change that keeps its state's shape (Strict to Weighted to
/// fixed window over one bucket; a log limit of the same capacity) and start afresh when the
/// shape changes (another algorithm's state).
#[test]
fn quota_changes_keep_counts_only_within_one_shape() {
    let clock = ManualClock::new();
    let one_bucket = |limit, mode| {
        Quota::new(limit, Duration::from_secs(1))
            .unwrap()
            .with_granularity(Duration::from_secs(1))
            .unwrap()
            .with_mode(mode)
    };
    let limiter = KeyedLimiter::<&str, _>::with_clock(one_bucket(2, Mode::Strict), clock.clone());
    assert!(limiter.check_n(&"k", 2).unwrap().is_allowed());
    for mode in [Mode::Weighted, Mode::FixedWindow, Mode::Strict] {
        limiter.quota_for(&"k", one_bucket(2, mode));
        assert!(
            !limiter.check(&"k").is_allowed(),
            "{mode:?} lost the counts"
        );
    }
    // Another algorithm: a fresh state.
    limiter.quota_for(&"k", one_bucket(3, Mode::ExactLog));
    assert!(limiter.check_n(&"k", 3).unwrap().is_allowed());
    // The log's capacity for 3 and 4 is 4: the units stay, under the larger limit.
    limiter.quota_for(&"k", one_bucket(4, Mode::ExactLog));
    assert_eq!(limiter.peek(&"k").remaining(), 1);
    // GCRA keeps its state only for the same limit and window.
    limiter.quota_for(&"k", one_bucket(2, Mode::Gcra));
    assert!(limiter.check_n(&"k", 2).unwrap().is_allowed());
    assert!(!limiter.check(&"k").is_allowed());
    limiter.quota_for(&"k", one_bucket(3, Mode::Gcra));
    assert!(
        limiter.check_n(&"k", 3).unwrap().is_allowed(),
        "a new GCRA rule starts afresh"
    );
}

#[test]
fn at_the_end_of_time_a_wait_returns_the_denial_that_says_never() {
    // The exact log's time stops ~73 years after its clock's origin, GCRA's at ~292; a
    // cost that cannot leave then is denied with a retry_after of u64::MAX ns, and a wait
    // returns that denial instead of sleeping forever.
    // GCRA admits while the TAT it would write fits before its end: 1.5 s before it, one
    // unit of 1 per second does, a second does not.
    let gcra_start = (1 << 63) - 1 - 1_500_000_000;
    for (mode, start) in [(Mode::ExactLog, u64::MAX), (Mode::Gcra, gcra_start)] {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(start));
        let l = SlidingWindow::with_clock(quota(1, 1000, mode), clock.clone());
        assert!(l.wait(1).unwrap().is_allowed(), "{mode:?}");
        let d = l.wait(1).unwrap();
        assert!(!d.is_allowed(), "{mode:?}");
        assert_eq!(
            d.retry_after(),
            Some(Duration::from_nanos(u64::MAX)),
            "{mode:?}"
        );
    }
}

#[test]
fn readings_near_the_largest_do_not_overflow_the_ring() {
    // 1 ns buckets at a reading near u64::MAX overflowed the ring's bucket arithmetic (a
    // panic with overflow checks on, a check that never returned without them).
    for mode in [Mode::Strict, Mode::Weighted, Mode::FixedWindow] {
        let q = Quota::new(1, Duration::from_nanos(1))
            .unwrap()
            .with_mode(mode);
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(u64::MAX - 1));
        let l = SlidingWindow::with_clock(q, clock.clone());
        assert!(l.check().is_allowed(), "{mode:?}");
        assert!(
            !l.check().is_allowed(),
            "{mode:?}: time stops at the largest reading"
        );
        clock.advance(Duration::from_nanos(1));
        assert!(!l.check().is_allowed(), "{mode:?}");
    }
}

/// `until_ready`, on tokio's paused time and on a `ManualClock`.
#[cfg(feature = "tokio")]
mod until_ready {
    use super::*;
    use slidegate::clock::TokioClock;

    /// Two tasks share one limiter of 2 per second on tokio's paused clock: six requests are
    /// served two per second, at 0, 1 s and 2 s of virtual time.
    #[tokio::test(start_paused = true)]
    async fn until_ready_paces_tasks_on_virtual_time() {
        let clock = TokioClock::new();
        let limiter = std::sync::Arc::new(SlidingWindow::with_clock(
            Quota::new(2, Duration::from_secs(1))
                .unwrap()
                .with_mode(Mode::ExactLog),
            clock,
        ));
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut at = Vec::new();
                    for _ in 0..3 {
                        assert!(limiter.until_ready(1).await.unwrap().is_allowed());
                        at.push(limiter.clock().now().0 / 1_000_000);
                    }
                    at
                })
            })
            .collect();
        let mut at = Vec::new();
        for task in tasks {
            at.extend(task.await.unwrap());
        }
        at.sort_unstable();
        assert_eq!(at, [0, 0, 1000, 1000, 2000, 2000]);
    }

    #[tokio::test(start_paused = true)]
    async fn until_ready_rejects_impossible_costs_and_honours_jitter() {
        let limiter = SlidingWindow::with_clock(quota(1, 100, Mode::Strict), TokioClock::new());
        assert_eq!(limiter.until_ready(0).await, Err(CostError::Zero));
        assert!(limiter.until_ready(1).await.unwrap().is_allowed());
        assert!(
            limiter
                .until_ready_with_jitter(1, Duration::from_millis(5))
                .await
                .unwrap()
                .is_allowed()
        );
        let t = limiter.clock().now().0;
        // Strict, 10 buckets of 10 ms: the first admission leaves at 110 ms.
        assert!((110_000_000..=115_000_000).contains(&t), "ready at {t}");
        let keyed =
            KeyedLimiter::<i32, _>::with_clock(quota(1, 100, Mode::Gcra), TokioClock::new());
        assert!(keyed.until_ready(&1, 1).await.unwrap().is_allowed());
        assert!(keyed.until_ready(&1, 1).await.unwrap().is_allowed());
        assert_eq!(keyed.clock().now().0, 100_000_000);
    }

    #[tokio::test(start_paused = true)]
    async fn until_ready_on_a_manual_clock_runs_in_simulated_time() {
        // Were `until_ready` to sleep on tokio's timer while the manual clock stood still, the
        // second wait would never end: the deadline below, on tokio's paused time, fails it.
        for mode in MODES {
            let clock = ManualClock::new();
            let l = SlidingWindow::with_clock(quota(1, 1000, mode), clock.clone());
            let k = KeyedLimiter::<i32, _>::with_clock(quota(1, 1000, mode), clock.clone());
            for _ in 0..3 {
                let waited = tokio::time::timeout(Duration::from_secs(60), async {
                    assert!(l.until_ready(1).await.unwrap().is_allowed());
                    assert!(k.until_ready(&7, 1).await.unwrap().is_allowed());
                })
                .await;
                assert!(
                    waited.is_ok(),
                    "{mode:?}: still waiting at {:?}",
                    clock.now()
                );
            }
            // Three single units a second apart at least, at most a granularity more.
            assert!(clock.now().as_u64() >= 2_000_000_000, "{mode:?}");
        }
    }
}
