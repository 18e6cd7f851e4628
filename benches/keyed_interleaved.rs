//! A keyed check against governor's (DashMap with ahash) in short alternating rounds: the
//! ratio of the two in each round, and its median.
//!
//! criterion's groups time each peer for seconds at a time, so on a host whose speed drifts
//! within a run, each ratio compares two different machines. Here the two peers take turns
//! every `per` checks on the same keys in the same scattered order as `benches/keyed.rs`, and
//! the median of the per-round ratios is what drift leaves alone. Pin it to one CPU, since a
//! virtual machine's CPUs can differ:
//!
//! ```text
//! cargo bench --no-run --bench keyed_interleaved
//! taskset -c 0 cargo bench --bench keyed_interleaved -- 1000 2097152   # allowed
//! taskset -c 0 cargo bench --bench keyed_interleaved -- 1000 1         # denied
//! taskset -c 0 cargo bench --bench keyed_interleaved -- 1000 1000000000 30 200000 1000000000
//! ```
//!
//! The arguments: keys held (each checked once beforehand; default 1000), the limit an hour
//! (default 2²¹: every check allowed; 1: every check denied), rounds (default 30),
//! checks per peer per round (default 200,000), and the cost each key is charged beforehand
//! besides its check (default 0; the limit: every check denied, whatever the limit).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use slidegate::{KeyedLimiter, Quota};

mod common;
use common::{args, scattered};

type Governor = governor::RateLimiter<
    u64,
    governor::state::keyed::DashMapStateStore<u64, ahash::RandomState>,
    governor::clock::DefaultClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `n`-th argument, or `default`.
fn arg(n: usize, default: u64) -> Result<u64, String> {
    args().nth(n).map_or(Ok(default), |a| {
        a.parse().map_err(|e| format!("argument {n} ({a:?}): {e}"))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (keys, limit) = (arg(1, 1000)?.max(1), arg(2, 1 << 21)?);
    let (rounds, per) = (arg(3, 30)?.max(1), arg(4, 200_000)?.max(1));
    let used = arg(5, 0)?;
    let ours: KeyedLimiter<u64> = KeyedLimiter::new(Quota::new(limit, Duration::from_secs(3600))?);
    let per_hour = NonZeroU32::new(u32::try_from(limit)?).ok_or("a limit of at least 1")?;
    let theirs: Governor = governor::RateLimiter::dashmap_with_clock_and_hasher(
        governor::Quota::per_hour(per_hour),
        governor::clock::DefaultClock::default(),
        ahash::RandomState::new(),
    );
    for key in 0..keys {
        black_box(ours.check(&key).is_allowed());
        black_box(theirs.check_key(&key).is_ok());
        if let Some(used) = NonZeroU32::new(u32::try_from(used)?) {
            black_box(ours.check_n(&key, used.get().into())?.is_allowed());
            black_box(theirs.check_key_n(&key, used)?.is_ok());
        }
    }
    let (mut slidegate, mut governor, mut ratios) = (vec![], vec![], vec![]);
    let mut i = 0u64;
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..per {
            i += 1;
            black_box(ours.check(&scattered(i, keys)).is_allowed());
        }
        let a = start.elapsed().as_nanos() as f64 / per as f64;
        let start = Instant::now();
        for _ in 0..per {
            i += 1;
            black_box(theirs.check_key(&scattered(i, keys)).is_ok());
        }
        let b = start.elapsed().as_nanos() as f64 / per as f64;
        slidegate.push(a);
        governor.push(b);
        ratios.push(a / b);
    }
    println!(
        "{keys} keys, limit {limit}: slidegate {:.1} ns, governor + ahash {:.1} ns (medians), \
         median ratio {:.3}",
        median(slidegate),
        median(governor),
        median(ratios)
    );
    Ok(())
}
