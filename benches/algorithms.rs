//! Every algorithm behind slidegate's one interface, in one run, against governor (the peer)
//! and a naive exact log (the baseline an exact log must beat: a `Mutex` around a deque of
//! admission times per key).
//!
//! - `algorithms_direct`: one limiter, allowed checks.
//! - `algorithms_keyed_1000`: 1000 held keys visited in a scattered order, allowed checks.
//! - `check_all`: one request against two direct Strict limits, all or nothing, against the
//!   two plain checks it replaces (which are not atomic together).
//! - `algorithms_keyed_2_threads`: two threads, each on its own 1000 keys, for the exact logs
//!   (slidegate's lock-free one against the naive one behind its mutex) and governor. An
//!   iteration is one check on each thread: the time shown is wall time per pair.
//!
//! Every quota admits every check of the run: the counters, the fixed window and GCRA allow
//! 2³¹ − 1 per hour; the logs (slidegate's and the naive one) allow 2²⁰ per millisecond
//! direct and 1024 per millisecond per key (a key is visited about every 20–50 µs), so the
//! logs also expire entries as they go, which is their steady state. Every limiter reads
//! quanta's TSC.
//!
//! ```text
//! cargo bench --bench algorithms
//! ```

use std::collections::{HashMap, VecDeque};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

mod common;

use common::{scattered, two_threads};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use slidegate::clock::{Clock, QuantaClock};
use slidegate::{KeyedLimiter, Limit, MAX_LIMIT, Mode, Quota, SlidingWindow, check_all};

const KEYS: u64 = 1000;

const ALGORITHMS: [(Mode, &str); 5] = [
    (Mode::Strict, "strict"),
    (Mode::Weighted, "weighted"),
    (Mode::FixedWindow, "fixed_window"),
    (Mode::ExactLog, "exact_log"),
    (Mode::Gcra, "gcra"),
];

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
        .throughput(Throughput::Elements(1));
}

/// A quota of `mode` that admits every check of a run: see the module documentation.
fn quota(mode: Mode, log_limit: u64) -> Quota {
    let q = if mode == Mode::ExactLog {
        Quota::new(log_limit, Duration::from_millis(1))
    } else {
        Quota::new(MAX_LIMIT, Duration::from_secs(3600))
    };
    q.expect("a valid quota").with_mode(mode)
}

/// The naive exact log: admission times per key behind one mutex.
struct NaiveLog {
    limit: usize,
    window: u64,
    clock: QuantaClock,
    keys: Mutex<HashMap<u64, VecDeque<u64>>>,
}

impl NaiveLog {
    fn new(limit: usize, window: Duration) -> NaiveLog {
        NaiveLog {
            limit,
            window: window.as_nanos() as u64,
            clock: QuantaClock::new(),
            keys: Mutex::new(HashMap::new()),
        }
    }

    fn check(&self, key: u64) -> bool {
        let now = self.clock.now().0;
        let mut keys = self.keys.lock().expect("never poisoned");
        let log = keys.entry(key).or_default();
        while log.front().is_some_and(|&t| t + self.window <= now) {
            log.pop_front();
        }
        let allowed = log.len() < self.limit;
        if allowed {
            log.push_back(now);
        }
        allowed
    }
}

fn direct(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithms_direct");
    configure(&mut group);
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
    group.bench_function(BenchmarkId::new("governor", "gcra"), |b| {
        b.iter(|| black_box(governor.check().is_ok()))
    });
    for (mode, name) in ALGORITHMS {
        let limiter = SlidingWindow::new(quota(mode, 1 << 20));
        group.bench_function(BenchmarkId::new("slidegate", name), |b| {
            b.iter(|| black_box(limiter.check().is_allowed()))
        });
        assert!(limiter.check().is_allowed(), "{name} ran out of quota");
    }
    let naive = NaiveLog::new(1 << 20, Duration::from_millis(1));
    group.bench_function(BenchmarkId::new("naive", "mutex_vecdeque_log"), |b| {
        b.iter(|| black_box(naive.check(0)))
    });
    assert!(naive.check(0), "the naive log ran out of quota");
    group.finish();
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("algorithms_keyed_{KEYS}"));
    configure(&mut group);
    let mut i = 0u64;
    let mut next = move || {
        i += 1;
        scattered(i, KEYS)
    };

    let governor = governor::RateLimiter::keyed(governor::Quota::per_second(NonZeroU32::MAX));
    for key in 0..KEYS {
        assert!(governor.check_key(&key).is_ok());
    }
    group.bench_function(BenchmarkId::new("governor", "gcra"), |b| {
        b.iter(|| black_box(governor.check_key(&next()).is_ok()))
    });
    for (mode, name) in ALGORITHMS {
        let limiter = KeyedLimiter::<u64>::new(quota(mode, 1024));
        for key in 0..KEYS {
            assert!(limiter.check(&key).is_allowed());
        }
        group.bench_function(BenchmarkId::new("slidegate", name), |b| {
            b.iter(|| black_box(limiter.check(&next()).is_allowed()))
        });
        assert!(limiter.check(&0).is_allowed(), "{name} ran out of quota");
    }
    let naive = NaiveLog::new(1024, Duration::from_millis(1));
    for key in 0..KEYS {
        assert!(naive.check(key));
    }
    group.bench_function(
        BenchmarkId::new("naive", "mutex_hashmap_vecdeque_log"),
        |b| b.iter(|| black_box(naive.check(next()))),
    );
    assert!(naive.check(0), "the naive log ran out of quota");
    group.finish();
}

fn multi(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_all");
    configure(&mut group);
    let (a, b) = (
        SlidingWindow::new(quota(Mode::Strict, 0)),
        SlidingWindow::new(quota(Mode::Strict, 0)),
    );
    group.bench_function(BenchmarkId::new("slidegate", "two_checks"), |bench| {
        bench.iter(|| black_box(a.check().is_allowed() && b.check().is_allowed()))
    });
    group.bench_function(BenchmarkId::new("slidegate", "check_all_2"), |bench| {
        bench.iter(|| {
            let limits: [(&dyn Limit, u64); 2] = [(&a, 1), (&b, 1)];
            black_box(check_all(&limits).is_ok_and(|d| d.is_allowed()))
        })
    });
    group.finish();
}

fn keyed_two_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithms_keyed_2_threads");
    configure(&mut group);
    group.throughput(Throughput::Elements(2));
    // Thread t checks keys t·1000 .. t·1000 + 999.
    let key = |t: u64, i: u64| t * KEYS + scattered(i, KEYS);

    let governor = governor::RateLimiter::keyed(governor::Quota::per_second(NonZeroU32::MAX));
    group.bench_function(BenchmarkId::new("governor", "gcra"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|t, i| {
                black_box(governor.check_key(&key(t, i)).is_ok());
            })
        })
    });
    let log = KeyedLimiter::<u64>::new(quota(Mode::ExactLog, 1024));
    let gcra = KeyedLimiter::<u64>::new(quota(Mode::Gcra, 1024));
    let naive = NaiveLog::new(1024, Duration::from_millis(1));
    for k in 0..2 * KEYS {
        assert!(log.check(&k).is_allowed() && gcra.check(&k).is_allowed() && naive.check(k));
    }
    for (name, limiter) in [("exact_log", &log), ("gcra", &gcra)] {
        group.bench_function(BenchmarkId::new("slidegate", name), |b| {
            b.iter_custom(|iters| {
                two_threads(iters, &|t, i| {
                    black_box(limiter.check(&key(t, i)).is_allowed());
                })
            })
        });
    }
    group.bench_function(
        BenchmarkId::new("naive", "mutex_hashmap_vecdeque_log"),
        |b| {
            b.iter_custom(|iters| {
                two_threads(iters, &|t, i| {
                    black_box(naive.check(key(t, i)));
                })
            })
        },
    );
    group.finish();
}

// A hand-written `main` rather than `criterion_group!`, whose generated `pub fn` has no docs.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    direct(&mut criterion);
    keyed(&mut criterion);
    keyed_two_threads(&mut criterion);
    multi(&mut criterion);
    criterion.final_summary();
}
