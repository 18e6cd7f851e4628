// Threads on a keyed limiter whose store evicts, and on `check_all` across it and a direct
// limiter, under shuttle's random and PCT schedulers: many random interleavings of three
// checkers and a `retain_recent` caller, beyond the two or three threads and handful of
// steps loom can enumerate.
//
// Proves, on every schedule run: the store never holds more than `max_keys`; no key and no
// direct limit ever admits more than `L` in one window; nothing admitted is lost or counted
// twice (after each phase every key and the direct limit have exactly `L` minus what the
// threads saw admitted left) even while idle keys are evicted under the checks, re-made
// and raced by `retain_recent`; and an idle key is never forced out (forced evictions 0).
//
// It runs on both of a keyed limiter's stores: with buckets of 50 ns every key is in the
// store; with buckets of 2²⁶ ns (`u8` keys) the keys live in the inline table, each
// `check_all` moves its key to the store with its counts, and the bound and the evictions
// span both stores.
//
// Would fail if a check or a `check_all` reservation landing on an entry retired under it
// were counted on the dead entry (lost) or on both (twice), if `check_all` charged one limit
// and not the other, or if a full store forced out a key while an idle one was there.
#![cfg(slidegate_shuttle)]

use std::time::Duration;

use shuttle::sync::Arc;
use shuttle::thread;
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Limit, Quota, SlidingWindow, check_all};

/// Each key's limit, and the direct limit's, in a window of two buckets.
const L: u64 = 3;
const KEYS: usize = 4;
const MAX_KEYS: usize = 3;

/// A bucket of 50 ns: the keys live in the store.
const STORE: u64 = 50;

/// A bucket of 2²⁶ ns, the shortest a line ring takes: the keys live in the inline table,
/// and each `check_all` moves its key to the store.
const INLINE: u64 = 1 << 26;

fn quota(bucket: u64) -> Quota {
    Quota::new(L, Duration::from_nanos(2 * bucket))
        .and_then(|q| q.with_granularity(Duration::from_nanos(bucket)))
        .expect("a valid quota")
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Schedules per scheduler: `SLIDEGATE_SHUTTLE_ITERATIONS` (default 5000).
fn iterations() -> usize {
    env("SLIDEGATE_SHUTTLE_ITERATIONS", 5000) as usize
}

/// The random scheduler's seed: `SLIDEGATE_SHUTTLE_SEED` (default 17, so CI repeats).
fn seed() -> u64 {
    env("SLIDEGATE_SHUTTLE_SEED", 17)
}

struct Limiters {
    clock: ManualClock,
    keyed: KeyedLimiter<u8, ManualClock>,
    direct: SlidingWindow<ManualClock>,
}

/// One checker's work: `(key a, key b)`: check 1 on `a`, `check_all` of 1 on `b` and 1 on the
/// direct limit, check 2 on `a`. Returns the cost admitted per key and on the direct limit.
fn checker(limiters: &Limiters, a: u8, b: u8) -> ([u64; KEYS], u64) {
    let (mut keys, mut direct) = ([0; KEYS], 0);
    if limiters.keyed.check_n(&a, 1).unwrap().is_allowed() {
        keys[usize::from(a)] += 1;
    }
    let handle = limiters.keyed.key(&b);
    let d = check_all(&[(&handle as &dyn Limit, 1), (&limiters.direct, 1)]).unwrap();
    if d.is_allowed() {
        keys[usize::from(b)] += 1;
        direct += 1;
    }
    if limiters.keyed.check_n(&a, 2).unwrap().is_allowed() {
        keys[usize::from(a)] += 2;
    }
    (keys, direct)
}

/// Runs the checkers `plan` (and a thread calling `retain_recent` twice, if `retain`) at one
/// instant, then asserts the bound and the exact accounting.
fn phase(limiters: &Arc<Limiters>, plan: [(u8, u8); 3], retain: bool) {
    let mut handles = Vec::new();
    for (a, b) in plan {
        let limiters = Arc::clone(limiters);
        handles.push(thread::spawn(move || checker(&limiters, a, b)));
    }
    let sweeper = retain.then(|| {
        let limiters = Arc::clone(limiters);
        thread::spawn(move || {
            limiters.keyed.retain_recent();
            limiters.keyed.retain_recent();
        })
    });
    let (mut keys, mut direct) = ([0; KEYS], 0);
    for handle in handles {
        let (k, d) = handle.join().unwrap();
        for i in 0..KEYS {
            keys[i] += k[i];
        }
        direct += d;
    }
    if let Some(sweeper) = sweeper {
        sweeper.join().unwrap();
    }
    let keyed = &limiters.keyed;
    assert!(keyed.len() <= MAX_KEYS, "{} keys held", keyed.len());
    assert_eq!(
        keyed.forced_evictions(),
        0,
        "an idle key was there to evict"
    );
    for (key, &admitted) in keys.iter().enumerate() {
        assert!(
            admitted <= L,
            "key {key}: {admitted} admitted in one window"
        );
        let left = keyed.peek(&(key as u8)).remaining();
        assert_eq!(
            left,
            L - admitted,
            "key {key}: admitted {admitted}, {left} left"
        );
    }
    assert!(direct <= L);
    assert_eq!(
        limiters.direct.peek().remaining(),
        L - direct,
        "direct: admitted {direct}"
    );
}

/// Phase 1 makes keys 0 and 1 (contended); a window and a bucket later every key is idle, and
/// phase 2 checks keys 0 (its idle entry), 2 and 3 while `retain_recent` evicts idle entries
/// and inserts at `max_keys` evict idle key 1 under the checks.
fn scenario(bucket: u64) {
    let clock = ManualClock::new();
    let limiters = Arc::new(Limiters {
        keyed: KeyedLimiter::builder(quota(bucket))
            .clock(clock.clone())
            .max_keys(MAX_KEYS)
            .build(),
        direct: SlidingWindow::with_clock(quota(bucket), clock.clone()),
        clock,
    });
    phase(&limiters, [(0, 1), (1, 0), (0, 0)], false);
    limiters.clock.advance(Duration::from_nanos(3 * bucket));
    phase(&limiters, [(2, 0), (3, 2), (0, 3)], true);
    // Four keys in a store of three: at least one idle key went (by a sweep, at an insert or
    // by retain_recent) while the checks ran.
    assert!(limiters.keyed.evictions() >= 1);
}

#[test]
fn random_schedules() {
    shuttle::check_random_with_seed(|| scenario(STORE), seed(), iterations());
}

#[test]
fn pct_schedules() {
    shuttle::check_pct(|| scenario(STORE), iterations(), 3);
}

#[test]
fn random_schedules_across_the_two_stores() {
    shuttle::check_random_with_seed(|| scenario(INLINE), seed(), iterations());
}

#[test]
fn pct_schedules_across_the_two_stores() {
    shuttle::check_pct(|| scenario(INLINE), iterations(), 3);
}
