//! HashDoS: 100 000 keys crafted to collide under a fixed hasher, checked through a keyed
//! limiter that uses that hasher, and through one on the default hasher (ahash, seeded at
//! random per limiter), against 100 000 random keys.
//!
//! Two fixed hashers a user might pass to `KeyedLimiterBuilder::hasher`:
//! - `fx`: FxHash's function (rustc-hash) on a `u64` key, `k · 0x517cc1b727220a95 mod 2⁶⁴`.
//!   The multiplier is odd, so the function is a bijection and keys with any chosen hashes
//!   can be computed: here hashes equal in their low 40 bits and their top 7, which send every
//!   key to one home slot in any table of up to 2⁴⁰ slots, with one slot tag.
//! - `ahash-fixed`: ahash with fixed seeds (`RandomState::with_seeds(1, 2, 3, 4)`, as the
//!   benches use for repeatable counts). Not invertible, but its seeds are known, so keys are
//!   searched for: those whose hash has its low 12 bits zero (about 400 million tries), which
//!   a table homing by low bits sends to 1 in 4 096 of its slots.
//!
//! Each case checks every key once (its insertion) and then each key again (a lookup), each
//! check timed with quanta's TSC (a reading costs about 7 ns, included in every figure), on a
//! `ManualClock` (a window of a minute: no key is evicted). The crafted keys under the fixed
//! `fx` hasher take quadratic time, so that case stops after 5 s. Cases under the default
//! hasher run three times, alternating, and the medians are printed.
//!
//! ```sh
//! flock /tmp/slidegate-bench.lock cargo bench --bench hashdos
//! ```

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use slidegate::clock::ManualClock;
use slidegate::{DefaultHashBuilder, KeyedLimiter, Quota};

const KEYS: usize = 100_000;
/// FxHash's multiplier (rustc-hash 1.x, 64-bit).
const FX: u64 = 0x517c_c1b7_2722_0a95;

/// FxHash's hasher: one multiply per word.
#[derive(Clone, Copy, Default)]
struct FxBuild;

struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl BuildHasher for FxBuild {
    type Hasher = FxHasher;

    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// The inverse of an odd `a` modulo 2⁶⁴ (Newton's iteration doubles the correct bits).
fn inverse(a: u64) -> u64 {
    let mut x = a;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

/// Keys whose `fx` hashes share their low 40 bits and top 7 bits, and differ in bits 40..57.
fn crafted_fx() -> Vec<u64> {
    let inv = inverse(FX);
    let low = 0x00ab_cdef_1234_u64 & ((1 << 40) - 1);
    (0..KEYS as u64)
        .map(|j| ((j << 40) | low).wrapping_mul(inv))
        .collect()
}

/// Keys whose hashes under ahash with seeds (1, 2, 3, 4) have their low 12 bits zero.
fn crafted_ahash(hasher: &ahash::RandomState) -> Vec<u64> {
    (0u64..)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .filter(|&k| hasher.hash_one(k) & 0xfff == 0)
        .take(KEYS)
        .collect()
}

fn random_keys(seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..KEYS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect()
}

struct Timings {
    inserts: Vec<u64>,
    lookups: Vec<u64>,
}

/// Checks every key once, then again, timing each check (ns); stops inserting after `budget`.
fn measure<S>(hasher: S, keys: &[u64], budget: Duration) -> Timings
where
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let quota = Quota::new(1000, Duration::from_secs(60)).unwrap();
    let limiter = KeyedLimiter::<u64>::builder(quota)
        .clock(ManualClock::new())
        .hasher(hasher)
        .build();
    let tsc = quanta::Clock::new();
    let started = tsc.now();
    let mut inserts = Vec::with_capacity(keys.len());
    for key in keys {
        let t0 = tsc.raw();
        let d = limiter.check(key);
        let t1 = tsc.raw();
        assert!(d.is_allowed());
        inserts.push(tsc.delta_as_nanos(t0, t1));
        if inserts.len() % 1024 == 0 && tsc.now() - started > budget {
            break;
        }
    }
    let inserted = &keys[..inserts.len()];
    let mut lookups = Vec::with_capacity(inserted.len());
    for key in inserted {
        let t0 = tsc.raw();
        let d = limiter.check(key);
        let t1 = tsc.raw();
        assert!(d.is_allowed());
        lookups.push(tsc.delta_as_nanos(t0, t1));
    }
    assert_eq!(limiter.len(), inserted.len());
    Timings { inserts, lookups }
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// p50, p99, p99.9 and max of `ns`.
fn summary(ns: &[u64]) -> [u64; 4] {
    let mut sorted = ns.to_vec();
    sorted.sort_unstable();
    [
        quantile(&sorted, 0.5),
        quantile(&sorted, 0.99),
        quantile(&sorted, 0.999),
        *sorted.last().unwrap(),
    ]
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn row(name: &str, t: &Timings) -> ([u64; 4], [u64; 4]) {
    let (i, l) = (summary(&t.inserts), summary(&t.lookups));
    println!(
        "| {name} | {} | {} / {} / {} / {} | {} / {} / {} / {} |",
        t.inserts.len(),
        i[0],
        i[1],
        i[2],
        i[3],
        l[0],
        l[1],
        l[2],
        l[3]
    );
    (i, l)
}

fn main() {
    let unlimited = Duration::from_secs(3600);
    let fixed_ahash = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let fx_keys = crafted_fx();
    let ahash_keys = crafted_ahash(&fixed_ahash);
    let random = random_keys(0x2545_f491_4f6c_dd1d);

    println!(
        "| keys, hasher | checked | insert ns p50 / p99 / p99.9 / max | lookup ns p50 / p99 / p99.9 / max |"
    );
    println!("|---|---:|---:|---:|");
    row("random, fx (fixed)", &measure(FxBuild, &random, unlimited));
    row(
        "crafted for fx, fx (fixed)",
        &measure(FxBuild, &fx_keys, Duration::from_secs(5)),
    );
    row(
        "random, ahash-fixed",
        &measure(fixed_ahash.clone(), &random, unlimited),
    );
    row(
        "crafted for ahash-fixed, ahash-fixed",
        &measure(fixed_ahash.clone(), &ahash_keys, unlimited),
    );

    // The default hasher, seeded at random per limiter: three rounds, alternating.
    let cases: [(&str, &Vec<u64>); 3] = [
        ("random, default", &random),
        ("crafted for fx, default", &fx_keys),
        ("crafted for ahash-fixed, default", &ahash_keys),
    ];
    let mut p99 = vec![(Vec::new(), Vec::new()); cases.len()];
    for _round in 0..3 {
        for (c, (name, keys)) in cases.iter().enumerate() {
            let (i, l) = row(name, &measure(DefaultHashBuilder::new(), keys, unlimited));
            p99[c].0.push(i[1]);
            p99[c].1.push(l[1]);
        }
    }
    let base = (median(p99[0].0.clone()), median(p99[0].1.clone()));
    println!("\nmedian p99 of three rounds under the default hasher (ratio to random keys):");
    for (c, (name, _)) in cases.iter().enumerate() {
        let (i, l) = (median(p99[c].0.clone()), median(p99[c].1.clone()));
        println!(
            "  {name}: insert {i} ns ({:.2}x), lookup {l} ns ({:.2}x)",
            i as f64 / base.0 as f64,
            l as f64 / base.1 as f64
        );
    }
}
