//! The keyed limiter's public surface: decisions per key equal a direct limiter's, eviction
//! never changes a decision, evicted keys are dropped exactly once, bounds hold, per-key
//! quotas apply at runtime, and concurrent checks lose nothing.
//!
//! Every test runs twice: with the default hasher, and with one that sends every key to the
//! same hash (every lookup then walks one long probe sequence through tombstones and all).
//! All time comes from a `ManualClock`; nothing sleeps.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{
    CostError, Decision, DefaultHashBuilder, KeyedLimiter, Mode, Quota, SlidingWindow,
};

/// A hasher that sends every key to the same hash.
#[derive(Clone, Default)]
struct OneHash;

impl BuildHasher for OneHash {
    type Hasher = OneHasher;
    fn build_hasher(&self) -> OneHasher {
        OneHasher
    }
}

struct OneHasher;

impl Hasher for OneHasher {
    fn finish(&self) -> u64 {
        0x5eed
    }
    fn write(&mut self, _: &[u8]) {}
}

trait TestHasher: BuildHasher + Clone + Default + Send + Sync + 'static {}
impl<S: BuildHasher + Clone + Default + Send + Sync + 'static> TestHasher for S {}

type Limiter<K, S> = KeyedLimiter<K, ManualClock, S>;

fn limiter<K, S>(quota: Quota, clock: &ManualClock, max_keys: usize) -> Limiter<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: TestHasher,
{
    KeyedLimiter::builder(quota)
        .clock(clock.clone())
        .hasher(S::default())
        .max_keys(max_keys)
        .build()
}

/// Runs each named generic test with both hashers.
macro_rules! with_both_hashers {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn ahash() {
                super::$name::<slidegate::DefaultHashBuilder>();
            }
            #[test]
            fn one_hash() {
                super::$name::<super::OneHash>();
            }
        }
    )*};
}

/// A key keeps 32-bit snapshots under a quota with no marks and a limit of at most 2²¹, 64-bit
/// ones otherwise (`Quota::bytes_per_key`): an override within either side keeps its counts,
/// one across starts afresh, as any change of geometry does. Large limits count exactly on
/// both sides.
fn override_across_slot_widths_starts_afresh<S: TestHasher>() {
    const COMPACT: u64 = 1 << 21;
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(quota(COMPACT, 1000, 100), &clock, usize::MAX);
    assert!(l.check_n(&"k", COMPACT - 1).is_ok_and(|d| d.is_allowed()));
    assert_eq!(l.peek(&"k").remaining(), 1);
    // Lowered within the compact side: the counts stay.
    l.quota_for(&"k", quota(COMPACT - 5, 1000, 100));
    assert!(!l.check(&"k").is_allowed());
    // Above 2²¹: wide snapshots, a fresh window.
    l.quota_for(&"k", quota(COMPACT + 1, 1000, 100));
    assert_eq!(l.peek(&"k").remaining(), COMPACT + 1);
    assert!(l.check_n(&"k", COMPACT + 1).is_ok_and(|d| d.is_allowed()));
    assert!(!l.check(&"k").is_allowed());
    assert_eq!(l.admitted_total(&"k"), COMPACT + 1);
    // Strict with marks keeps wide snapshots too: the same side, the counts stay.
    l.quota_for(
        &"k",
        quota(COMPACT + 1, 1000, 100).with_mode(Mode::StrictMarked),
    );
    assert_eq!(l.peek(&"k").remaining(), 0);
    // Back to the compact default: afresh.
    l.clear_quota_for(&"k");
    assert_eq!(l.peek(&"k").remaining(), COMPACT);
    // Both sides slide alike: the window empties a second after its admissions.
    assert!(l.check_n(&"k", COMPACT).is_ok_and(|d| d.is_allowed()));
    clock.set(Duration::from_millis(1099));
    assert!(!l.check(&"k").is_allowed());
    clock.set(Duration::from_millis(1100));
    assert_eq!(l.check(&"k").remaining(), COMPACT - 1);
    assert_eq!(l.forced_evictions(), 0);
}

with_both_hashers!(
    override_across_slot_widths_starts_afresh,
    keys_are_independent,
    peek_of_an_unknown_key_inserts_nothing,
    cost_errors_use_the_key_quota,
    idle_keys_are_evicted_and_decide_as_fresh,
    max_keys_bounds_the_store_and_counts_forced_evictions,
    evicted_keys_are_dropped_exactly_once,
    override_with_the_same_geometry_keeps_counts,
    override_with_another_geometry_starts_afresh,
    gcra_override_of_limit_or_interval_starts_afresh,
    overrides_change_while_checks_run,
    threads_on_disjoint_and_shared_keys_lose_nothing,
    checks_racing_eviction_lose_no_admission,
    concurrent_churn_keeps_the_bound_and_drops_each_entry_once,
    a_string_key_is_one_key_by_str_and_by_string,
);

fn quota(limit: u64, window_ms: u64, granularity_ms: u64) -> Quota {
    Quota::new(limit, Duration::from_millis(window_ms))
        .and_then(|q| q.with_granularity(Duration::from_millis(granularity_ms)))
        .expect("a valid test quota")
}

fn keys_are_independent<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<u32, S> = limiter(quota(2, 1000, 100), &clock, usize::MAX);
    for key in 0..50 {
        assert!(l.check(&key).is_allowed());
        assert!(l.check(&key).is_allowed());
        assert!(!l.check(&key).is_allowed());
    }
    assert_eq!(l.len(), 50);
    clock.advance(Duration::from_millis(1100));
    for key in 0..50 {
        assert_eq!(l.peek(&key).remaining(), 2);
        assert!(l.check(&key).is_allowed());
    }
}

/// A `String` key checked by `&str` and by `&String` is one key: one entry, one window, one
/// override, whichever form each call gives (with `OneHash` every key shares one probe
/// sequence, so only `Eq` across the two forms tells keys apart).
fn a_string_key_is_one_key_by_str_and_by_string<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<String, S> = limiter(quota(4, 1000, 100), &clock, usize::MAX);
    let alice = "alice".to_string();
    assert!(l.check("bob").is_allowed());
    assert!(l.check("alice").is_allowed());
    assert!(l.check(&alice).is_allowed());
    assert!(l.check_n("alice", 2).unwrap().is_allowed());
    assert_eq!(l.len(), 2, "alice was inserted once");
    assert!(!l.check(&alice).is_allowed(), "the limit of 4 is shared");
    assert_eq!(l.peek("alice").remaining(), 0);
    assert_eq!(l.admitted_total("alice"), 4);
    assert_eq!(l.refund("alice", 1), 1);
    assert_eq!(l.peek(&alice).remaining(), 1);
    assert_eq!(l.peek("bob").remaining(), 3, "bob is another key");
    l.quota_for("alice", quota(10, 1000, 100));
    assert_eq!(l.quota(&alice).limit(), 10);
    assert_eq!(
        l.check(&alice).remaining(),
        6,
        "the override kept alice's counts"
    );
    l.clear_quota_for(&alice);
    assert_eq!(l.quota("alice").limit(), 4);
    assert_eq!(l.len(), 2);
}

fn peek_of_an_unknown_key_inserts_nothing<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(quota(3, 1000, 100), &clock, usize::MAX);
    clock.advance(Duration::from_millis(250));
    let fresh = SlidingWindow::with_clock(quota(3, 1000, 100), clock.clone());
    assert_eq!(l.peek(&"ghost"), fresh.peek());
    assert_eq!(l.len(), 0);
    assert!(l.is_empty());
    // In every mode, and at the end of time, where a fresh GCRA cell admits nothing
    // (regression: its peek said allowed, with the whole limit remaining).
    for mode in [
        Mode::Weighted,
        Mode::FixedWindow,
        Mode::ExactLog,
        Mode::Gcra,
    ] {
        for at in [Duration::from_millis(250), Duration::from_nanos(u64::MAX)] {
            clock.set(at);
            let q = quota(3, 1000, 100).with_mode(mode);
            let l: Limiter<&str, S> = limiter(q, &clock, usize::MAX);
            let fresh = SlidingWindow::with_clock(q, clock.clone());
            let peek = l.peek(&"ghost");
            assert_eq!(peek, fresh.peek(), "{mode:?} at {at:?}");
            assert_eq!(l.len(), 0);
            assert_eq!(
                peek.is_allowed(),
                l.check(&"ghost").is_allowed(),
                "{mode:?}"
            );
        }
    }
}

fn cost_errors_use_the_key_quota<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(quota(3, 1000, 100), &clock, usize::MAX);
    assert_eq!(l.check_n(&"a", 0), Err(CostError::Zero));
    assert_eq!(
        l.check_n(&"a", 4),
        Err(CostError::ExceedsLimit { cost: 4, limit: 3 })
    );
    l.quota_for(&"big", quota(10, 1000, 100));
    assert!(l.check_n(&"big", 10).is_ok_and(|d| d.is_allowed()));
    // Errors insert nothing.
    assert_eq!(l.len(), 1);
}

fn idle_keys_are_evicted_and_decide_as_fresh<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<u32, S> = limiter(quota(2, 1000, 100), &clock, usize::MAX);
    for key in 0..20 {
        assert!(l.check(&key).is_allowed());
    }
    // One window later the keys are still counted (Strict keeps bucket 0 until 1.1 s).
    clock.set(Duration::from_millis(1099));
    assert_eq!(l.retain_recent(), 0);
    clock.set(Duration::from_millis(1100));
    assert_eq!(l.retain_recent(), 20);
    assert_eq!(l.evictions(), 20);
    assert_eq!(l.len(), 0);
    for key in 0..20 {
        assert_eq!(l.check(&key).remaining(), 1);
    }
    assert_eq!(l.forced_evictions(), 0);
}

fn max_keys_bounds_the_store_and_counts_forced_evictions<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<u32, S> = limiter(quota(2, 1000, 100), &clock, 8);
    for key in 0..8 {
        assert!(l.check(&key).is_allowed());
        clock.advance(Duration::from_millis(100));
    }
    assert_eq!(l.len(), 8);
    // No key is idle: the least recently active one (key 0, in the oldest bucket) goes.
    assert!(l.check(&8).is_allowed());
    assert_eq!(l.len(), 8);
    assert_eq!(l.forced_evictions(), 1);
    // Its admissions are forgotten: it starts afresh.
    assert_eq!(l.peek(&0).remaining(), 2);
    // Once keys are idle, they go first and nothing more is forced.
    clock.set(Duration::from_secs(5));
    for key in 100..108 {
        assert!(l.check(&key).is_allowed());
        assert!(l.len() <= 8);
    }
    assert_eq!(l.forced_evictions(), 1);
}

/// A key whose clones (the store's copies) record their drops in a shared registry, which
/// fails the test on a second drop of one clone.
struct Counted {
    id: u64,
    /// 0 for the test's own keys; a fresh serial for every clone.
    serial: u64,
    registry: Arc<Registry>,
}

#[derive(Default)]
struct Registry {
    next: AtomicU64,
    dropped: Mutex<HashSet<u64>>,
}

impl Registry {
    fn dropped(&self) -> usize {
        self.dropped.lock().map(|d| d.len()).unwrap_or(usize::MAX)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted {
            id: self.id,
            serial: self.registry.next.fetch_add(1, Ordering::Relaxed) + 1,
            registry: Arc::clone(&self.registry),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.serial != 0 {
            let fresh = self
                .registry
                .dropped
                .lock()
                .map(|mut d| d.insert(self.serial))
                .unwrap_or(false);
            assert!(fresh, "clone {} dropped twice", self.serial);
        }
    }
}

impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Counted {}
impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

/// Collects epoch garbage until `registry` has seen `want` drops, or for at most 60 s (the
/// epoch advances only once every thread pinned anywhere in the process has moved on, and
/// other tests run beside this one). The bound only ends a wait that would never succeed; it
/// is normally met in milliseconds, but under valgrind, with the file's other tests running
/// beside it, even 60 s was not always enough, so `.ci/valgrind` runs them one at a time.
fn collect_until(registry: &Registry, want: usize) {
    let start = std::time::Instant::now();
    while registry.dropped() < want && start.elapsed() < Duration::from_secs(60) {
        slidegate::__private::reclaim();
        thread::yield_now();
    }
}

fn evicted_keys_are_dropped_exactly_once<S: TestHasher>() {
    let registry = Arc::new(Registry::default());
    let key = |id| Counted {
        id,
        serial: 0,
        registry: Arc::clone(&registry),
    };
    let clock = ManualClock::new();
    let l: Limiter<Counted, S> = limiter(quota(2, 1000, 100), &clock, 40);
    // Waves of keys: each wave is idle by the next, and the bound forces some out too.
    for wave in 0..5u64 {
        for id in 0..60 {
            let _ = l.check(&key(wave * 1000 + id));
        }
        clock.advance(Duration::from_millis(1200));
    }
    let evicted = (l.evictions() + l.forced_evictions()) as usize;
    let inserted = registry.next.load(Ordering::Relaxed) as usize;
    assert_eq!(inserted, 300, "one clone per new key");
    assert_eq!(inserted - evicted, l.len());
    assert!(l.evictions() > 0 && l.forced_evictions() > 0);
    collect_until(&registry, evicted);
    assert_eq!(
        registry.dropped(),
        evicted,
        "evicted entries not freed, or freed twice"
    );
    drop(l);
    // The limiter's own drop frees the live entries at once.
    assert_eq!(registry.dropped(), inserted);
}

fn override_with_the_same_geometry_keeps_counts<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(quota(5, 1000, 100), &clock, usize::MAX);
    assert!(l.check_n(&"k", 4).is_ok_and(|d| d.is_allowed()));
    // Raise the limit: the 4 already admitted still count.
    l.quota_for(&"k", quota(6, 1000, 100));
    assert_eq!(l.quota(&"k").limit(), 6);
    assert_eq!(l.check(&"k").remaining(), 1);
    // Lower it below what the window holds: denied until the window empties.
    l.quota_for(&"k", quota(3, 1000, 100));
    let d = l.check(&"k");
    assert!(!d.is_allowed());
    assert_eq!(d.limit(), 3);
    assert_eq!(d.retry_after(), Some(Duration::from_millis(1100)));
    // Back to the default: still the same counts.
    l.clear_quota_for(&"k");
    assert_eq!(l.peek(&"k").remaining(), 0);
    assert_eq!(l.check(&"other").limit(), 5);
}

fn override_with_another_geometry_starts_afresh<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(quota(5, 1000, 100), &clock, usize::MAX);
    assert!(l.check_n(&"k", 5).is_ok_and(|d| d.is_allowed()));
    assert!(!l.check(&"k").is_allowed());
    l.quota_for(&"k", quota(5, 2000, 100));
    // The peek already reads the fresh window the next check starts.
    assert_eq!(l.peek(&"k").remaining(), 5);
    assert_eq!(l.check(&"k").remaining(), 4);
    assert_eq!(l.len(), 1);
    // The new window is twice as long.
    clock.set(Duration::from_millis(1500));
    assert_eq!(l.check(&"k").remaining(), 3);
    // Clearing it changes the geometry back: afresh again, under the default.
    l.clear_quota_for(&"k");
    assert_eq!(l.check(&"k").remaining(), 4);
    assert_eq!(l.forced_evictions(), 0);
}

/// A GCRA key's state is its limit and emission interval (`T = W / L`): an override that
/// changes either starts it afresh, even with the other unchanged. Kept, its TAT would carry
/// over and the key would get 10 or 5 of the fresh burst, not all of it.
fn gcra_override_of_limit_or_interval_starts_afresh<S: TestHasher>() {
    let gcra = |limit, window_ms| quota(limit, window_ms, 100).with_mode(Mode::Gcra);
    let clock = ManualClock::new();
    let l: Limiter<&str, S> = limiter(gcra(10, 10_000), &clock, usize::MAX);
    assert!(l.check_n(&"k", 10).is_ok_and(|d| d.is_allowed()));
    assert!(!l.check(&"k").is_allowed());
    // Twice the limit over twice the window: the same interval (1 s), another limit.
    l.quota_for(&"k", gcra(20, 20_000));
    assert!(l.check_n(&"k", 20).is_ok_and(|d| d.is_allowed()));
    assert!(!l.check(&"k").is_allowed());
    // The same limit over twice the window: another interval (2 s).
    l.quota_for(&"k", gcra(20, 40_000));
    assert!(l.check_n(&"k", 20).is_ok_and(|d| d.is_allowed()));
    assert!(!l.check(&"k").is_allowed());
    // The same quota again: the state is kept, and stays spent.
    l.quota_for(&"k", gcra(20, 40_000));
    assert!(!l.check(&"k").is_allowed());
    assert_eq!(l.forced_evictions(), 0);
}

fn overrides_change_while_checks_run<S: TestHasher>() {
    let clock = ManualClock::new();
    let l: Arc<Limiter<u32, S>> = Arc::new(limiter(quota(1000, 1000, 100), &clock, usize::MAX));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let (l, stop) = (Arc::clone(&l), Arc::clone(&stop));
        thread::spawn(move || {
            let mut allowed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for key in 0..8 {
                    let d = l.check(&key);
                    assert!(d.limit() == 1000 || d.limit() == 2000, "{d:?}");
                    allowed += u64::from(d.is_allowed());
                }
            }
            allowed
        })
    };
    for round in 0..200 {
        if round % 2 == 0 {
            l.quota_for(&(round % 8), quota(2000, 1000, 100));
        } else {
            l.clear_quota_for(&((round - 1) % 8));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let allowed = checker.join().expect("checker panicked");
    let held: u64 = (0..8).map(|key| l.admitted_total(&key)).sum();
    // Same geometry throughout, so no entry was replaced and every admission is held.
    assert_eq!(allowed, held);
    assert!(held <= 8 * 2000);
}

fn threads_on_disjoint_and_shared_keys_lose_nothing<S: TestHasher>() {
    const THREADS: u64 = 4;
    const LIMIT: u64 = 300;
    let clock = ManualClock::new();
    let l: Arc<Limiter<u64, S>> = Arc::new(limiter(quota(LIMIT, 1000, 100), &clock, usize::MAX));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|me| {
            let (l, barrier) = (Arc::clone(&l), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                let mut allowed: HashMap<u64, u64> = HashMap::new();
                for i in 0..4 * LIMIT {
                    let cost = 1 + i % 3;
                    // Keys 0..4 are shared by every thread; 100 + me·10 + x are this thread's.
                    for key in [i % 4, 100 + me * 10 + i % 5] {
                        let d = l.check_n(&key, cost).expect("cost within the limit");
                        if d.is_allowed() {
                            *allowed.entry(key).or_default() += cost;
                        }
                    }
                }
                allowed
            })
        })
        .collect();
    let mut allowed: HashMap<u64, u64> = HashMap::new();
    for h in handles {
        for (key, cost) in h.join().expect("checker panicked") {
            *allowed.entry(key).or_default() += cost;
        }
    }
    assert_eq!(allowed.len(), 4 + 5 * THREADS as usize);
    for (key, cost) in allowed {
        assert_eq!(
            l.admitted_total(&key),
            cost,
            "key {key}: lost or phantom cost"
        );
        // The clock never moved: Strict admitted at most the limit, and nearly all of it.
        assert!(cost <= LIMIT && cost + 3 > LIMIT, "key {key}: {cost}");
    }
}

/// Each phase, every key's entry from the previous phase is idle; threads check the keys
/// while another thread evicts idle entries. A check charged to an entry retired under it
/// would be lost, and the fresh entry would then admit the limit again: more than `LIMIT`
/// allowed in one phase.
fn checks_racing_eviction_lose_no_admission<S: TestHasher>() {
    const THREADS: usize = 3;
    const LIMIT: u64 = 50;
    const KEYS: u64 = 6;
    let clock = ManualClock::new();
    let l: Arc<Limiter<u64, S>> = Arc::new(limiter(quota(LIMIT, 1000, 100), &clock, usize::MAX));
    let barrier = Arc::new(Barrier::new(THREADS + 2));
    let phases = 30;
    let checkers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (l, barrier) = (Arc::clone(&l), Arc::clone(&barrier));
            thread::spawn(move || {
                let mut allowed = vec![[0u64; KEYS as usize]; phases];
                for phase in allowed.iter_mut() {
                    barrier.wait();
                    for i in 0..KEYS * LIMIT {
                        let key = i % KEYS;
                        phase[key as usize] += u64::from(l.check(&key).is_allowed());
                    }
                    barrier.wait();
                }
                allowed
            })
        })
        .collect();
    let evictor = {
        let (l, barrier) = (Arc::clone(&l), Arc::clone(&barrier));
        thread::spawn(move || {
            for _ in 0..phases {
                barrier.wait();
                for _ in 0..20 {
                    l.retain_recent();
                }
                barrier.wait();
            }
        })
    };
    for _ in 0..phases {
        barrier.wait();
        barrier.wait();
        clock.advance(Duration::from_millis(1100));
    }
    evictor.join().expect("evictor panicked");
    let mut totals = vec![[0u64; KEYS as usize]; phases];
    for c in checkers {
        for (phase, counts) in c.join().expect("checker panicked").into_iter().enumerate() {
            for key in 0..KEYS as usize {
                totals[phase][key] += counts[key];
            }
        }
    }
    for (phase, counts) in totals.iter().enumerate() {
        for (key, &n) in counts.iter().enumerate() {
            assert_eq!(n, LIMIT, "phase {phase}, key {key}");
        }
    }
    // How often the evictor wins a race is up to the scheduler (checkers that come first
    // make the entry busy again), so it is not asserted; `loom-tests/tests/keyed_eviction.rs`
    // covers every interleaving of the race.
}

/// Threads insert random keys into a bounded store while the clock moves and another thread
/// evicts idle keys: the bound holds throughout, and every entry evicted (idle or forced) is
/// dropped exactly once, the rest when the limiter is dropped.
fn concurrent_churn_keeps_the_bound_and_drops_each_entry_once<S: TestHasher>() {
    const BOUND: usize = 64;
    const THREADS: u64 = 3;
    let registry = Arc::new(Registry::default());
    let clock = ManualClock::new();
    let l: Arc<Limiter<Counted, S>> = Arc::new(limiter(quota(3, 1000, 100), &clock, BOUND));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let evictor = {
        let (l, stop) = (Arc::clone(&l), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                l.retain_recent();
            }
        })
    };
    let checkers: Vec<_> = (0..THREADS)
        .map(|me| {
            let (l, registry, clock) = (Arc::clone(&l), Arc::clone(&registry), clock.clone());
            thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (me + 1);
                for i in 0..3000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = Counted {
                        id: x % 400,
                        serial: 0,
                        registry: Arc::clone(&registry),
                    };
                    let _ = l.check(&key);
                    assert!(l.len() <= BOUND, "{} keys live", l.len());
                    if i % 100 == 0 {
                        clock.advance(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    for c in checkers {
        c.join().expect("checker panicked");
    }
    stop.store(true, Ordering::Relaxed);
    evictor.join().expect("evictor panicked");
    let evicted = (l.evictions() + l.forced_evictions()) as usize;
    let inserted = registry.next.load(Ordering::Relaxed) as usize;
    assert_eq!(inserted - evicted, l.len());
    collect_until(&registry, evicted);
    assert_eq!(registry.dropped(), evicted);
    drop(l);
    assert_eq!(registry.dropped(), inserted);
}

// ---- Property tests: random traces ----

#[derive(Clone, Debug)]
enum Op {
    Check(u64, u64),
    Peek(u64),
    RetainRecent,
}

fn any_quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=6,
        prop::sample::select(vec![1u64, 2, 3, 5]),
        1u64..=20,
        any::<bool>(),
    )
        .prop_map(|(limit, buckets, g, weighted)| {
            Quota::new(limit, Duration::from_nanos(g * buckets))
                .and_then(|q| q.with_granularity(Duration::from_nanos(g)))
                .map(|q| {
                    q.with_mode(if weighted {
                        Mode::Weighted
                    } else {
                        Mode::Strict
                    })
                })
                .expect("a valid generated quota")
        })
}

fn trace(keys: u64) -> impl Strategy<Value = (Quota, Vec<(u64, Op)>)> {
    any_quota().prop_flat_map(move |q| {
        let window = q.window().as_nanos() as u64 + q.granularity().as_nanos() as u64;
        let op = prop_oneof![
            6 => (0..keys, 1..=q.limit()).prop_map(|(k, n)| Op::Check(k, n)),
            2 => (0..keys).prop_map(Op::Peek),
            1 => Just(Op::RetainRecent),
        ];
        let step = prop_oneof![4 => Just(0u64), 4 => 0..=window, 1 => Just(window)];
        (Just(q), prop::collection::vec((step, op), 1..200))
    })
}

/// Runs `ops` through `l` and returns its decisions; `RetainRecent` runs only if `evict`.
fn run<S: TestHasher>(
    l: &Limiter<u64, S>,
    clock: &ManualClock,
    ops: &[(u64, Op)],
    evict: bool,
) -> Vec<Decision> {
    let mut out = Vec::new();
    for (step, op) in ops {
        clock.advance(Duration::from_nanos(*step));
        match op {
            Op::Check(k, n) => out.push(l.check_n(k, *n).expect("cost within the limit")),
            Op::Peek(k) => out.push(l.peek(k)),
            Op::RetainRecent if evict => {
                l.retain_recent();
            }
            Op::RetainRecent => {}
        }
    }
    out
}

/// The decisions of one direct limiter per key, none ever dropped: the store that never
/// evicts.
fn direct_decisions(q: Quota, ops: &[(u64, Op)]) -> Vec<Decision> {
    let clock = ManualClock::new();
    let mut direct: HashMap<u64, SlidingWindow<ManualClock>> = HashMap::new();
    let mut expected = Vec::new();
    for (step, op) in ops {
        clock.advance(Duration::from_nanos(*step));
        let k = match op {
            Op::Check(k, _) | Op::Peek(k) => *k,
            Op::RetainRecent => continue,
        };
        let of = direct
            .entry(k)
            .or_insert_with(|| SlidingWindow::with_clock(q, clock.clone()));
        match op {
            Op::Check(_, n) => expected.push(of.check_n(*n).expect("valid cost")),
            // A direct limiter never checked reads as fresh, as an absent key does.
            _ => expected.push(of.peek()),
        }
    }
    expected
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Each key decides exactly as its own direct limiter would.
    #[test]
    fn every_key_decides_as_a_direct_limiter((q, ops) in trace(5)) {
        for one_hash in [false, true] {
            let clock = ManualClock::new();
            let decisions = if one_hash {
                run(&limiter::<u64, OneHash>(q, &clock, usize::MAX), &clock, &ops, true)
            } else {
                run(&limiter::<u64, DefaultHashBuilder>(q, &clock, usize::MAX), &clock, &ops, true)
            };
            prop_assert_eq!(decisions, direct_decisions(q, &ops));
        }
    }

    /// A store that evicts (idle entries, on inserts and on `retain_recent`, and under a bound
    /// no trace reaches while its keys are active) decides exactly as one that never does.
    #[test]
    fn eviction_never_changes_a_decision((q, ops) in trace(12)) {
        let (c1, c2, c3) = (ManualClock::new(), ManualClock::new(), ManualClock::new());
        let lazy: Limiter<u64, DefaultHashBuilder> = limiter(q, &c1, usize::MAX);
        let evict: Limiter<u64, DefaultHashBuilder> = limiter(q, &c2, usize::MAX);
        let colliding: Limiter<u64, OneHash> = limiter(q, &c3, usize::MAX);
        // The store that never evicts is the direct limiters' map; `lazy` evicts only as
        // inserts sweep by, the other two also on every `RetainRecent`.
        let expected = direct_decisions(q, &ops);
        prop_assert_eq!(&expected, &run(&lazy, &c1, &ops, false));
        prop_assert_eq!(&expected, &run(&evict, &c2, &ops, true));
        prop_assert_eq!(&expected, &run(&colliding, &c3, &ops, true));
    }
}

/// As above, with `max_keys` in play: keys arrive in generations of 8, each generation
/// active within one window, so a store bounded at 32 holds at most 8 active keys, always
/// finds an idle one in the 16 it samples, and never has to force one out.
#[test]
fn a_bound_that_only_evicts_idle_keys_changes_no_decision() {
    let q = quota(3, 1000, 100);
    let (c1, c2, c3) = (ManualClock::new(), ManualClock::new(), ManualClock::new());
    let keep: Limiter<u64, DefaultHashBuilder> = limiter(q, &c1, usize::MAX);
    let bounded: Limiter<u64, DefaultHashBuilder> = limiter(q, &c2, 32);
    let colliding: Limiter<u64, OneHash> = limiter(q, &c3, 32);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for generation in 0..40u64 {
        for _ in 0..100 {
            let step = Duration::from_millis(rand() % 5);
            let key = generation * 8 + rand() % 8;
            let n = 1 + rand() % 3;
            let peek = rand() % 4 == 0;
            let decide = |l: &dyn Fn() -> Decision, clock: &ManualClock| {
                clock.advance(step);
                l()
            };
            let a = decide(
                &|| {
                    if peek {
                        keep.peek(&key)
                    } else {
                        keep.check_n(&key, n).expect("valid")
                    }
                },
                &c1,
            );
            let b = decide(
                &|| {
                    if peek {
                        bounded.peek(&key)
                    } else {
                        bounded.check_n(&key, n).expect("valid")
                    }
                },
                &c2,
            );
            let c = decide(
                &|| {
                    if peek {
                        colliding.peek(&key)
                    } else {
                        colliding.check_n(&key, n).expect("valid")
                    }
                },
                &c3,
            );
            assert_eq!(a, b, "generation {generation}, key {key}");
            assert_eq!(a, c, "generation {generation}, key {key}");
            assert!(bounded.len() <= 32 && colliding.len() <= 32);
        }
        for c in [&c1, &c2, &c3] {
            c.advance(Duration::from_millis(1100));
        }
    }
    assert_eq!(bounded.forced_evictions(), 0);
    assert_eq!(colliding.forced_evictions(), 0);
    assert!(bounded.evictions() > 0);
}

/// Churn: a million random keys through a store bounded at 10 000. Live keys never exceed
/// the bound, and the table does not grow past what the bound needs.
#[test]
fn churn_never_exceeds_the_bound() {
    const BOUND: usize = 10_000;
    let clock = ManualClock::new();
    let l: Limiter<u64, DefaultHashBuilder> = limiter(quota(5, 1000, 100), &clock, BOUND);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..1_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let _ = l.check(&x);
        assert!(l.len() <= BOUND, "{} keys live after {i} checks", l.len());
        // First time crawls, so the bound forces active keys out; then it runs, so keys go
        // idle before the bound is reached and are evicted first.
        if i % (if i < 500_000 { 1000 } else { 5 }) == 0 {
            clock.advance(Duration::from_millis(1));
        }
    }
    assert!(l.len() <= BOUND);
    assert!(
        l.evictions() > 0,
        "keys idle for a window were not evicted first"
    );
    assert!(l.forced_evictions() > 0);
}

/// Shared across threads with an `Arc`, like the direct limiter.
#[test]
fn keyed_limiters_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KeyedLimiter<String>>();
    send_sync::<KeyedLimiter<u64, ManualClock, OneHash>>();
}

/// Regression: idleness was judged from the newest bucket a check had established, and a
/// denial establishes one too, so a key denied late in its window was kept (by
/// `retain_recent`) a whole window after its window emptied, and at `max_keys` its eviction
/// was counted as forced, as if it still held admissions.
#[test]
fn a_key_whose_window_emptied_after_a_denial_is_idle() {
    let clock = ManualClock::new();
    let q = quota(1, 1000, 100);
    let l: Limiter<&str, DefaultHashBuilder> = limiter(q, &clock, usize::MAX);
    let bounded: Limiter<&str, DefaultHashBuilder> = limiter(q, &clock, 1);
    for l in [&l, &bounded] {
        assert!(l.check(&"d").is_allowed());
    }
    clock.set(Duration::from_millis(950));
    for l in [&l, &bounded] {
        assert!(!l.check(&"d").is_allowed());
    }
    clock.set(Duration::from_millis(1100));
    let fresh = SlidingWindow::with_clock(q, clock.clone());
    assert_eq!(l.peek(&"d"), fresh.peek(), "the window is empty");
    assert_eq!(l.retain_recent(), 1);
    // At the bound, a new key evicts `d` as idle, not forced.
    assert!(bounded.check(&"e").is_allowed());
    assert_eq!((bounded.evictions(), bounded.forced_evictions()), (1, 0));
    // Still in its window at 999 ms, it is kept.
    clock.set(Duration::from_millis(999));
    let kept: Limiter<&str, DefaultHashBuilder> = limiter(q, &clock, usize::MAX);
    assert!(kept.check(&"d").is_allowed());
    clock.set(Duration::from_millis(1099));
    assert!(!kept.check(&"d").is_allowed());
    assert_eq!(kept.retain_recent(), 0);
}

/// Quotas whose keys of `u64` live in the inline table's wide slots: a limit around 10⁹
/// (past the compact snapshots' 2²¹) or marks, at most ten buckets of a few nanoseconds.
fn wide_quota() -> impl Strategy<Value = Quota> {
    (
        prop_oneof![
            1u64..=6,
            1_000_000_000u64..=1_000_000_006,
            Just((1 << 31) - 1)
        ],
        prop::sample::select(vec![1u64, 2, 3, 5, 10]),
        1u64..=20,
        prop::sample::select(vec![
            Mode::Strict,
            Mode::StrictMarked,
            Mode::Weighted,
            Mode::FixedWindow,
        ]),
    )
        .prop_filter("a wide quota", |(limit, _, _, mode)| {
            *limit > 1 << 21 || *mode == Mode::StrictMarked
        })
        .prop_map(|(limit, buckets, g, mode)| {
            let buckets = if mode == Mode::FixedWindow {
                1
            } else {
                buckets
            };
            Quota::new(limit, Duration::from_nanos(g * buckets))
                .and_then(|q| q.with_granularity(Duration::from_nanos(g)))
                .map(|q| q.with_mode(mode))
                .expect("a valid generated quota")
        })
}

/// A trace on a wide quota: costs of a few units or a large share of the limit.
fn wide_trace(keys: u64) -> impl Strategy<Value = (Quota, Vec<(u64, Op)>)> {
    wide_quota().prop_flat_map(move |q| {
        let window = q.window().as_nanos() as u64 + q.granularity().as_nanos() as u64;
        let l = q.limit();
        let cost = prop_oneof![1..=3u64.min(l), (l / 3).max(1)..=l];
        let op = prop_oneof![
            6 => (0..keys, cost).prop_map(|(k, n)| Op::Check(k, n)),
            2 => (0..keys).prop_map(Op::Peek),
            1 => Just(Op::RetainRecent),
        ];
        let step = prop_oneof![4 => Just(0u64), 4 => 0..=window, 1 => Just(window)];
        (Just(q), prop::collection::vec((step, op), 1..200))
    })
}

/// The reference model's decisions, one `slidegate_testkit::model::Model` per key (allowed
/// and `remaining`); a peek judges a unit without charging it.
fn model_decisions(q: Quota, ops: &[(u64, Op)]) -> Vec<(bool, u64)> {
    let mut models: HashMap<u64, slidegate_testkit::model::Model> = HashMap::new();
    let mut t = 0;
    let mut out = Vec::new();
    for (step, op) in ops {
        t += step;
        match op {
            Op::Check(k, n) => {
                let model = models
                    .entry(*k)
                    .or_insert_with(|| slidegate_testkit::model::Model::new(q));
                out.push(model.check(t, *n));
            }
            Op::Peek(k) => {
                let model = models
                    .entry(*k)
                    .or_insert_with(|| slidegate_testkit::model::Model::new(q));
                out.push((model.admits(t, 1), model.remaining(t)));
            }
            Op::RetainRecent => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Keys of a wide quota (the inline table's wide slots) decide as the reference model,
    /// with evictions, and the same with every key on one hash.
    #[test]
    fn keys_of_a_wide_quota_decide_as_the_model((q, ops) in wide_trace(12)) {
        let expected = model_decisions(q, &ops);
        let seen = |decisions: Vec<Decision>| {
            decisions.iter().map(|d| (d.is_allowed(), d.remaining())).collect::<Vec<_>>()
        };
        let (c1, c2) = (ManualClock::new(), ManualClock::new());
        let spread: Limiter<u64, DefaultHashBuilder> = limiter(q, &c1, usize::MAX);
        let colliding: Limiter<u64, OneHash> = limiter(q, &c2, usize::MAX);
        prop_assert_eq!(&expected, &seen(run(&spread, &c1, &ops, true)));
        prop_assert_eq!(&expected, &seen(run(&colliding, &c2, &ops, true)));
    }
}

/// A limit of 10⁹ an hour in ten buckets: the inline table's wide slots through growth
/// (migrations), idle eviction, the bound, `check_all` moves and overrides.
#[test]
fn a_limit_of_a_billion_keeps_every_key_s_count() {
    const L: u64 = 1_000_000_000;
    let clock = ManualClock::new();
    let hour = Quota::new(L, Duration::from_secs(3600)).unwrap();
    let keyed: KeyedLimiter<u64, ManualClock> = KeyedLimiter::with_clock(hour, clock.clone());
    // 20,000 keys take the table from 4 slots through sparse and dense migrations.
    for key in 0..20_000u64 {
        assert!(
            keyed.check_n(&key, L - 1 - key).unwrap().is_allowed(),
            "key {key}"
        );
    }
    for key in 0..20_000u64 {
        let d = keyed.check_n(&key, key + 1).unwrap();
        assert!(d.is_allowed(), "key {key}");
        assert_eq!(d.remaining(), 0, "key {key}");
        assert!(!keyed.check(&key).is_allowed(), "key {key}");
    }
    // `check_all` moves a key to the store with its count; a denied one charges nothing.
    let other = SlidingWindow::with_clock(
        Quota::new(10, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    assert_eq!(keyed.refund(&7, 5), 5);
    let (seven, eight) = (keyed.key(&7), keyed.key(&8));
    let d = slidegate::check_all(&[(&seven, 3), (&other, 1)]).unwrap();
    assert!(d.is_allowed());
    assert_eq!(keyed.peek(&7).remaining(), 2);
    assert!(keyed.check_n(&7, 2).unwrap().is_allowed());
    assert!(!keyed.check(&7).is_allowed());
    let denied = slidegate::check_all(&[(&eight, 1), (&other, 1)]).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(keyed.len(), 20_000);
    // An override of the same shape keeps the key's count; of another shape starts afresh.
    keyed.quota_for(&9, Quota::new(2 * L, Duration::from_secs(3600)).unwrap());
    assert_eq!(keyed.peek(&9).remaining(), L);
    keyed.quota_for(&10, Quota::new(5, Duration::from_secs(3600)).unwrap());
    assert_eq!(keyed.peek(&10).remaining(), 5);
    assert!(keyed.check_n(&10, 5).unwrap().is_allowed());
    // A window later every key is idle: evicted, and fresh again.
    clock.advance(Duration::from_secs(3600 + 360));
    let held = keyed.len();
    assert_eq!(keyed.retain_recent(), held);
    assert_eq!(keyed.len(), 0);
    assert_eq!(keyed.check(&1).remaining(), L - 1);
}

/// At `max_keys`, wide keys are evicted (idle, else forced out and counted) to keep the
/// bound; as with line slots, a sample may hold no idle key and force out a recent one.
#[test]
fn a_bounded_limiter_of_wide_keys_keeps_its_bound() {
    let clock = ManualClock::new();
    let q = Quota::new(1 << 30, Duration::from_secs(1)).unwrap();
    let keyed: KeyedLimiter<u64, ManualClock> = KeyedLimiter::builder(q)
        .clock(clock.clone())
        .max_keys(64)
        .build();
    for key in 0..64 {
        assert!(keyed.check(&key).is_allowed());
    }
    assert_eq!(keyed.len(), 64);
    clock.advance(Duration::from_secs(3));
    for key in 64..140 {
        assert!(keyed.check(&key).is_allowed());
        assert!(keyed.len() <= 64);
    }
    assert_eq!(
        keyed.len() as u64 + keyed.evictions() + keyed.forced_evictions(),
        140
    );
}
