//! The cost of reading the time, the one thing every check does besides its atomics: the ways
//! quanta offers, slidegate's `QuantaClock` (which is `raw` plus `delta_as_nanos`), and
//! `std::time::Instant`.
//!
//! ```text
//! cargo bench --bench clock
//! ```

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use slidegate::clock::{Clock, QuantaClock};

fn clock_read(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock_read");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
        .throughput(Throughput::Elements(1));

    let quanta = quanta::Clock::new();
    let origin = quanta.raw();
    group.bench_function(BenchmarkId::new("quanta", "now"), |b| {
        b.iter(|| quanta.now())
    });
    group.bench_function(BenchmarkId::new("quanta", "raw"), |b| {
        b.iter(|| quanta.raw())
    });
    group.bench_function(BenchmarkId::new("quanta", "raw_delta_as_nanos"), |b| {
        b.iter(|| quanta.delta_as_nanos(origin, quanta.raw()))
    });

    let slidegate = QuantaClock::new();
    group.bench_function(BenchmarkId::new("slidegate", "QuantaClock"), |b| {
        b.iter(|| slidegate.now())
    });

    {
        // Only one upkeep thread may run per process; it stops when the handle drops.
        let _upkeep = quanta::Upkeep::new(Duration::from_millis(1))
            .start()
            .expect("no other upkeep thread is running");
        group.bench_function(BenchmarkId::new("quanta", "recent_upkeep_1ms"), |b| {
            b.iter(|| quanta.recent())
        });
    }

    group.bench_function(BenchmarkId::new("std", "Instant_now"), |b| {
        b.iter(Instant::now)
    });
    group.finish();
}

// A hand-written `main` rather than `criterion_group!`, whose generated `pub fn` has no docs.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    clock_read(&mut criterion);
    criterion.final_summary();
}
