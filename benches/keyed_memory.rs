//! Memory of the keyed limiter, measured as resident-set size (Linux `/proc/self/statm`).
//!
//! 1. Churn: 10 million random keys through a limiter bounded at 100 000 keys, the clock
//!    advancing 1 ms per 50 checks, so a key goes idle a window (50 000 checks) after its
//!    check: the insert sweeps evict most keys as idle, the bound forces out the few they have
//!    not reached yet, live keys never exceed the bound and resident memory levels off.
//! 2. Bytes per key: the resident-memory delta of 1 million live keys, for N = 1, 10, 60 at
//!    a limit of 10, and N = 10 at a limit of 10⁹ (wide counts).
//!
//! ```sh
//! cargo bench --bench keyed_memory
//! ```

mod common;

use std::time::{Duration, Instant};

use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Quota};

/// Resident-set size in bytes, or 0 where `/proc` is unavailable.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn churn() -> Result<(), slidegate::ConfigError> {
    const KEYS: u64 = 10_000_000;
    const BOUND: usize = 100_000;
    let clock = ManualClock::new();
    let quota = Quota::new(10, Duration::from_secs(1))?;
    let limiter = KeyedLimiter::<u64>::builder(quota)
        .clock(clock.clone())
        .max_keys(BOUND)
        .build();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    let before = rss();
    let mut peak_len = 0;
    let mut before_full = 0;
    println!("churn: {KEYS} random keys, max_keys = {BOUND}, 1 ms per 50 checks");
    for i in 1..=KEYS {
        let _ = limiter.check(&rng.next());
        peak_len = peak_len.max(limiter.len());
        if i == 100_000 {
            // Resident memory once the bound is first reached: the baseline it levels off at.
            before_full = rss();
        }
        if i % 50 == 0 {
            clock.advance(Duration::from_millis(1));
        }
        if i % 1_000_000 == 0 {
            println!(
                "  {:>4}M keys: live {:>6}, rss +{:>6.1} MiB, evicted idle {:>8}, forced {:>8}",
                i / 1_000_000,
                limiter.len(),
                (rss().saturating_sub(before)) as f64 / (1 << 20) as f64,
                limiter.evictions(),
                limiter.forced_evictions(),
            );
        }
    }
    println!(
        "  rss growth after the bound was first reached: {:.1} MiB",
        (rss().saturating_sub(before_full)) as f64 / (1 << 20) as f64
    );
    println!(
        "  peak live keys {peak_len} (bound {BOUND}); {:.0} ns per check",
        start.elapsed().as_nanos() as f64 / KEYS as f64
    );
    Ok(())
}

fn bytes_per_key(buckets: u64, limit: u64) -> Result<(), slidegate::ConfigError> {
    const KEYS: u64 = 1_000_000;
    let quota = Quota::new(limit, Duration::from_secs(buckets))?
        .with_granularity(Duration::from_secs(1))?;
    let before = rss();
    let limiter = KeyedLimiter::<u64, _>::with_clock(quota, ManualClock::new());
    for key in 0..KEYS {
        let _ = limiter.check(&key);
    }
    let after = rss();
    println!(
        "  N = {buckets:>2}, limit {limit}: {:.0} bytes per key (u64 keys; of which the state, \
         Quota::bytes_per_key: {})",
        (after.saturating_sub(before)) as f64 / KEYS as f64,
        quota.bytes_per_key()
    );
    drop(limiter);
    Ok(())
}

/// Each measurement runs in a fresh process (this program, re-run with an argument), so no
/// allocator state carries over from one to the next.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    match common::args().nth(1).as_deref() {
        Some("churn") => churn()?,
        Some(n) => {
            let limit = common::args().nth(2).map_or(Ok(10), |l| l.parse())?;
            bytes_per_key(n.parse()?, limit)?
        }
        None => {
            let me = std::env::current_exe()?;
            std::process::Command::new(&me).arg("churn").status()?;
            println!("bytes per key at 1M live keys (resident-memory delta):");
            for args in [&["1"][..], &["10"], &["60"], &["10", "1000000000"]] {
                std::process::Command::new(&me).args(args).status()?;
            }
        }
    }
    Ok(())
}
