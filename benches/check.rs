//! The cost of one check: slidegate's `SlidingWindow` against governor's direct (GCRA)
//! limiter, as peers in each group so that every ratio comes from one run.
//!
//! - `check_allowed`: a quota so large that every check in the run is admitted.
//! - `check_denied`: a limit of 1, spent before the measurement, in a window of an hour.
//! - `coarse_clock`: the allowed check again, with both limiters on a clock that an upkeep
//!   thread refreshes every millisecond (slidegate's `CoarseClock`, governor's
//!   `QuantaUpkeepClock`): one atomic load per reading instead of a TSC read. Only one upkeep
//!   thread can run per process, so each limiter runs while its own is up.
//! - `contended_2_threads`: two threads hammering one limiter on the allowed path. An
//!   iteration is one check on each thread, so the time shown is the wall time per pair of
//!   checks and the throughput is the aggregate number of checks per second.
//! - `usage`: a report (`record`) and a check only (`peek_n`) against a check of the same
//!   cost on the same quota, and governor's check.
//!
//! Elsewhere both limiters read their default clock, quanta's calibrated TSC.
//!
//! ```text
//! cargo bench --bench check
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use slidegate::clock::CoarseClock;
use slidegate::{MAX_LIMIT, Mode, Quota, SlidingWindow};

/// The window of every slidegate quota: one hour, so nothing leaves it during a run.
const WINDOW_SECS: u64 = 3600;

/// Bucket counts `N`; each divides `WINDOW_SECS`.
const BUCKETS: [u64; 4] = [1, 10, 60, 3600];

const MODES: [(Mode, &str); 3] = [
    (Mode::Strict, "slidegate_strict"),
    (Mode::StrictMarked, "slidegate_strict_marked"),
    (Mode::Weighted, "slidegate_weighted"),
];

const THREADS: usize = 2;

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
}

/// `limit` per hour in `buckets` buckets.
fn quota(limit: u64, buckets: u64, mode: Mode) -> Quota {
    Quota::new(limit, Duration::from_secs(WINDOW_SECS))
        .and_then(|q| q.with_granularity(Duration::from_secs(WINDOW_SECS / buckets)))
        .expect("every benchmark quota is valid")
        .with_mode(mode)
}

/// 2³¹ − 1 per hour: at 10 ns a check a run of a few seconds spends under a quarter of it.
fn slidegate_allowing(buckets: u64, mode: Mode) -> SlidingWindow {
    let limiter = SlidingWindow::new(quota(MAX_LIMIT, buckets, mode));
    assert!(limiter.check().is_allowed());
    limiter
}

fn slidegate_denying(buckets: u64, mode: Mode) -> SlidingWindow {
    let limiter = SlidingWindow::new(quota(1, buckets, mode));
    assert!(limiter.check().is_allowed());
    assert!(!limiter.check().is_allowed());
    limiter
}

/// governor's emission interval is clamped to 1 ns, so this admits up to 10⁹ checks a second
/// with a burst of 2³² − 1: far above what one or two threads can ask for.
fn governor_allowing() -> governor::DefaultDirectRateLimiter {
    let limiter = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
    assert!(limiter.check().is_ok());
    limiter
}

fn governor_denying() -> governor::DefaultDirectRateLimiter {
    let limiter = governor::RateLimiter::direct(governor::Quota::per_hour(NonZeroU32::MIN));
    assert!(limiter.check().is_ok());
    assert!(limiter.check().is_err());
    limiter
}

fn check_allowed(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_allowed");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));

    let governor = governor_allowing();
    group.bench_function(BenchmarkId::new("governor", "direct"), |b| {
        b.iter(|| governor.check())
    });
    assert!(
        governor.check().is_ok(),
        "governor ran out of quota during the run"
    );

    for (mode, name) in MODES {
        for n in BUCKETS {
            let limiter = slidegate_allowing(n, mode);
            group.bench_function(BenchmarkId::new(name, n), |b| b.iter(|| limiter.check()));
            assert!(
                limiter.check().is_allowed(),
                "{name}/{n} ran out of quota during the run"
            );
        }
    }
    group.finish();
}

fn check_denied(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_denied");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));

    let governor = governor_denying();
    group.bench_function(BenchmarkId::new("governor", "direct"), |b| {
        b.iter(|| governor.check())
    });
    assert!(
        governor.check().is_err(),
        "governor admitted during the run"
    );

    for (mode, name) in MODES {
        for n in BUCKETS {
            let limiter = slidegate_denying(n, mode);
            group.bench_function(BenchmarkId::new(name, n), |b| b.iter(|| limiter.check()));
            assert!(
                !limiter.check().is_allowed(),
                "{name}/{n} admitted during the run"
            );
        }
    }
    group.finish();
}

/// The upkeep threads' refresh period.
const UPKEEP: Duration = Duration::from_millis(1);

fn coarse_clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("coarse_clock");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    {
        let clock = governor::clock::QuantaUpkeepClock::from_interval(UPKEEP)
            .expect("no upkeep thread is running");
        let governor = governor::RateLimiter::direct_with_clock(
            governor::Quota::per_second(NonZeroU32::MAX),
            clock,
        );
        group.bench_function(BenchmarkId::new("governor_upkeep", "direct"), |b| {
            b.iter(|| governor.check())
        });
        assert!(governor.check().is_ok(), "governor ran out of quota");
    } // Its upkeep thread stops here.
    let clock = CoarseClock::new(UPKEEP).expect("governor's upkeep thread has stopped");
    for (mode, name) in MODES {
        let limiter = SlidingWindow::with_clock(quota(MAX_LIMIT, 10, mode), clock.clone());
        group.bench_function(BenchmarkId::new(format!("{name}_coarse"), 10), |b| {
            b.iter(|| limiter.check())
        });
        assert!(limiter.check().is_allowed(), "{name} ran out of quota");
    }
    group.finish();
}

/// Runs `check` `iters` times on each of `THREADS` threads released together, and returns
/// the wall time from the first thread's start to the last one's end (thread start-up and
/// join are outside it).
fn hammer<T>(iters: u64, check: impl Fn() -> T + Sync) -> Duration {
    let barrier = Barrier::new(THREADS);
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(check());
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark thread panicked"))
            .collect()
    });
    let start = spans
        .iter()
        .map(|&(start, _)| start)
        .min()
        .expect("THREADS > 0");
    let end = spans
        .iter()
        .map(|&(_, end)| end)
        .max()
        .expect("THREADS > 0");
    end - start
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("contended_{THREADS}_threads"));
    configure(&mut group);
    // One iteration is one check on each thread: criterion's elem/s is the aggregate rate.
    group.throughput(Throughput::Elements(THREADS as u64));

    let governor = governor_allowing();
    group.bench_function(BenchmarkId::new("governor", "direct"), |b| {
        b.iter_custom(|iters| hammer(iters, || governor.check()))
    });
    assert!(
        governor.check().is_ok(),
        "governor ran out of quota during the run"
    );

    for (mode, name, n) in [
        (Mode::Strict, "slidegate_strict", 1),
        (Mode::Strict, "slidegate_strict", 60),
        (Mode::Strict, "slidegate_strict", 3600),
        (Mode::Weighted, "slidegate_weighted", 60),
    ] {
        let limiter = slidegate_allowing(n, mode);
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter_custom(|iters| hammer(iters, || limiter.check()))
        });
        assert!(
            limiter.check().is_allowed(),
            "{name}/{n} ran out of quota during the run"
        );
    }
    group.finish();
}

/// Usage known afterwards on a held direct Strict limiter of ten buckets: a report
/// (`record(1)`, charged unconditionally) and a check only (`peek_n(1)`) beside a check of
/// the same cost on the same quota and governor's check. 2³⁰ per hour, so that the reports
/// of a run stay under the quota's usage ceiling of 2³¹ − 1 − 2³⁰.
fn usage(c: &mut Criterion) {
    let mut group = c.benchmark_group("usage");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    let governor = governor_allowing();
    group.bench_function(BenchmarkId::new("governor", "check"), |b| {
        b.iter(|| governor.check())
    });
    let held = || {
        let limiter = SlidingWindow::new(quota(1 << 30, 10, Mode::Strict));
        assert!(limiter.check().is_allowed());
        limiter
    };
    let limiter = held();
    group.bench_function(BenchmarkId::new("slidegate", "check"), |b| {
        b.iter(|| limiter.check())
    });
    let limiter = held();
    group.bench_function(BenchmarkId::new("slidegate", "record"), |b| {
        b.iter(|| limiter.record(1))
    });
    assert_eq!(
        limiter.record(1).clamped(),
        0,
        "the reports reached the ceiling"
    );
    let limiter = held();
    group.bench_function(BenchmarkId::new("slidegate", "peek_n"), |b| {
        b.iter(|| limiter.peek_n(1))
    });
    group.finish();
}

// A hand-written `main` rather than `criterion_group!`, whose generated `pub fn` has no docs.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    check_allowed(&mut criterion);
    check_denied(&mut criterion);
    coarse_clock(&mut criterion);
    contended(&mut criterion);
    usage(&mut criterion);
    criterion.final_summary();
}
