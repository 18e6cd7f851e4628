//! The cost of one keyed check: slidegate's `KeyedLimiter` against governor's keyed limiter
//! (DashMap store, with its default hasher and with ahash), as peers in each group so that
//! every ratio comes from one run.
//!
//! - `keyed_allowed/{1, 1000, 1000000}`: held keys visited in a pseudo-random order, a quota
//!   so large that every check is admitted: 2²¹ an hour, the largest a key keeps in compact
//!   slots (`u64` keys under it live in the inline table), and `MAX_LIMIT` for one key and
//!   for `slidegate_wide` (wide slots, in the store).
//! - `keyed_coarse_clock/1000`: as `keyed_allowed/1000` with every limiter on a clock that an
//!   upkeep thread refreshes every millisecond (slidegate's `CoarseClock`, governor's
//!   `QuantaUpkeepClock`).
//! - `keyed_denied/1000`: held keys whose limit of 1 was spent before the measurement;
//!   `floor/1000` is what such a denial cannot do without on this store (an epoch pin, a
//!   clock reading, the hash, the probe and the entry's loads), with no rule.
//! - `keyed_new_key`: the first check of a key never seen (a fresh limiter per sample,
//!   dropped outside the timing). `inline_floor` is the same on the floor of a store whose
//!   windows live inline in its table (`common/inline.rs`: the writer lock, an epoch pin, a
//!   clock reading, ahash, a probe to an empty slot, the slot written, the table doubled
//!   before load 1/2); `inline_floor_presized` on a table made large enough never to grow.
//! - `keyed_2_threads/{disjoint, same_key}`: two threads on 1000 keys each (in the inline
//!   table), or on one key (`MAX_LIMIT`, in the store, as every iteration charges it). An
//!   iteration is one check on each thread: the time shown is wall time per pair.
//!   `slidegate/one_thread` runs thread 0's checks alone through the same call, so two
//!   threads' speed-up is `2 × one_thread / disjoint`; `baseline/{one_thread, disjoint}` does
//!   the same with work that shares nothing, the speed-up the machine itself gives;
//!   `baseline_wide/…` with work that shares nothing and retires many instructions per
//!   cycle (four independent chains), where `baseline`'s is a chain of dependent
//!   multiplications; `slidegate_coarse_clock/…` runs slidegate's checks on a
//!   `CoarseClock` (no TSC reading per check); `inline_floor_eighth/…` is the inline floor
//!   (below) at slidegate's load for these keys, 1/8, and `inline_floor_eighth_padded/…` the
//!   same with `unshared_wide_work`'s 101 instructions after each check, the instructions
//!   slidegate's admission runs beyond the floor's, as work that shares nothing;
//!   `slidegate/separate_limiters` gives each thread a limiter of its own;
//!   `memory/{one_thread, disjoint}` makes a keyed check's memory accesses with no limiter
//!   (hash, probe, a 152-byte block per key, a CAS), each thread in a table of its own, and
//!   `memory_pinned/…` the same inside a crossbeam-epoch pin (the peer of the store's own
//!   reclamation, whose pin `floor` takes). `inline_floor_one_table/…` is the floor of an
//!   inline store's check (`common/inline.rs`) with both threads' keys in one table at load
//!   1/2, as in `slidegate`; `inline_floor_sparse/…` the same at load 1/32, where a probe
//!   rarely reads a slot of the other thread's; `inline_floor_own_tables/disjoint` each
//!   thread's keys in a table of its own.
//! - `keyed_inline_floor/{allowed/1000, denied/1000, allowed/1000000}`: the floor of a store
//!   whose windows live inline in its table (`common/inline.rs`: one 64-byte slot per key, an
//!   epoch pin, a clock reading, ahash, the probe, a Strict judgement, a CAS), against
//!   governor with ahash; allowed checks also without the pin, the clock, or both.
//!
//! Elsewhere every limiter reads its default clock, quanta's calibrated TSC.
//!
//! ```text
//! cargo bench --bench keyed
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

mod common;

use common::inline::{Decided, InlineFloor, InlineInserts};
use common::scaling::{MemoryWork, one_thread, unshared_wide_work, unshared_work};
use common::{scattered, two_threads};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use slidegate::clock::{Clock, CoarseClock, QuantaClock};
use slidegate::{KeyedLimiter, MAX_LIMIT, Quota};

type Governor<S, K = u64> = governor::RateLimiter<
    K,
    governor::state::keyed::DashMapStateStore<K, S>,
    governor::clock::DefaultClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
}

/// The limit of the checks meant to be allowed: the largest a keyed store keeps in compact
/// slots (`Quota::bytes_per_key`), as every limit up to about two million is, and more than
/// a key of a thousand checks in a run of a few seconds reaches. One key, checked by every
/// iteration, takes `MAX_LIMIT` (wide slots); so does `slidegate_wide`.
const LIMIT: u64 = 1 << 21;

/// `limit` per hour in 10 buckets.
fn quota(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_secs(3600)).expect("a valid quota")
}

fn slidegate(limit: u64) -> KeyedLimiter<u64> {
    KeyedLimiter::new(quota(limit))
}

fn governor_quota(limit: u32) -> governor::Quota {
    let limit = NonZeroU32::new(limit).expect("a positive limit");
    governor::Quota::per_hour(limit)
}

fn governor_default(limit: u32) -> Governor<std::collections::hash_map::RandomState> {
    governor::RateLimiter::keyed(governor_quota(limit))
}

fn governor_ahash(limit: u32) -> Governor<ahash::RandomState> {
    governor::RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(limit),
        governor::clock::DefaultClock::default(),
        ahash::RandomState::new(),
    )
}

/// Holds `keys` keys in each peer (limits `ours` / `theirs`, each key checked once), then
/// benches one check of a scattered held key per peer in `group`; with `wide`, also a
/// slidegate limiter of `MAX_LIMIT`, whose keys keep wide slots (`slidegate_wide`).
fn held_keys(
    group: &mut BenchmarkGroup<'_, WallTime>,
    keys: u64,
    ours: u64,
    theirs: u32,
    wide: bool,
) {
    let ours = slidegate(ours);
    let (plain, hashed) = (governor_default(theirs), governor_ahash(theirs));
    let wide = wide.then(|| slidegate(MAX_LIMIT));
    for key in 0..keys {
        assert!(ours.check(&key).is_allowed());
        assert!(plain.check_key(&key).is_ok());
        assert!(hashed.check_key(&key).is_ok());
        assert!(wide.as_ref().is_none_or(|w| w.check(&key).is_allowed()));
    }
    let mut i = 0u64;
    let mut next = || {
        i += 1;
        scattered(i, keys)
    };
    group.bench_function(BenchmarkId::new("slidegate", keys), |b| {
        b.iter(|| black_box(ours.check(&next())))
    });
    if let Some(wide) = &wide {
        group.bench_function(BenchmarkId::new("slidegate_wide", keys), |b| {
            b.iter(|| black_box(wide.check(&next())))
        });
    }
    group.bench_function(BenchmarkId::new("governor", keys), |b| {
        b.iter(|| black_box(plain.check_key(&next()).is_ok()))
    });
    group.bench_function(BenchmarkId::new("governor_ahash", keys), |b| {
        b.iter(|| black_box(hashed.check_key(&next()).is_ok()))
    });
}

fn allowed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_allowed");
    configure(&mut group);
    held_keys(&mut group, 1, MAX_LIMIT, u32::MAX, false);
    for keys in [1_000, 1_000_000] {
        held_keys(&mut group, keys, LIMIT, u32::MAX, true);
    }
    group.finish();
}

/// `String` keys (`user:<n>`), which live in the general store: `keys` held in each peer
/// (limits `ours` / `theirs`, each checked once), then one check of a scattered held key per
/// peer, both given a reference to a key made beforehand, so that neither allocates.
fn held_string_keys(group: &mut BenchmarkGroup<'_, WallTime>, keys: u64, ours: u64, theirs: u32) {
    let names: Vec<String> = (0..keys).map(|k| format!("user:{k}")).collect();
    let ours = KeyedLimiter::<String>::new(quota(ours));
    let hashed: Governor<ahash::RandomState, String> =
        governor::RateLimiter::dashmap_with_clock_and_hasher(
            governor_quota(theirs),
            governor::clock::DefaultClock::default(),
            ahash::RandomState::new(),
        );
    for name in &names {
        assert!(ours.check(name.as_str()).is_allowed());
        assert!(hashed.check_key(name).is_ok());
    }
    let mut i = 0u64;
    let mut next = || {
        i += 1;
        &names[scattered(i, keys) as usize]
    };
    group.bench_function(BenchmarkId::new("slidegate", keys), |b| {
        b.iter(|| black_box(ours.check(next().as_str())))
    });
    group.bench_function(BenchmarkId::new("governor_ahash", keys), |b| {
        b.iter(|| black_box(hashed.check_key(next()).is_ok()))
    });
}

/// `String` keys: 1000 and a million held keys allowed, 1000 denied (limit 1).
fn string_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_string_allowed");
    configure(&mut group);
    for keys in [1_000, 1_000_000] {
        held_string_keys(&mut group, keys, LIMIT, u32::MAX);
    }
    group.finish();
    let mut group = c.benchmark_group("keyed_string_denied");
    configure(&mut group);
    held_string_keys(&mut group, 1_000, 1, 1);
    group.finish();
}

/// 1000 keys, both limiters on a clock that an upkeep thread refreshes every millisecond
/// (slidegate's `CoarseClock`, governor's `QuantaUpkeepClock`); one upkeep thread can run per
/// process, so each limiter runs while its own is up.
fn coarse_clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_coarse_clock");
    configure(&mut group);
    let (keys, interval) = (1_000u64, Duration::from_millis(1));
    let mut i = 0u64;
    let mut next = || {
        i += 1;
        scattered(i, keys)
    };
    {
        let clock = governor::clock::QuantaUpkeepClock::from_interval(interval)
            .expect("no upkeep thread is running");
        let plain: governor::RateLimiter<u64, _, _> =
            governor::RateLimiter::dashmap_with_clock(governor_quota(u32::MAX), clock.clone());
        let hashed = governor::RateLimiter::dashmap_with_clock_and_hasher(
            governor_quota(u32::MAX),
            clock,
            ahash::RandomState::new(),
        );
        for key in 0..keys {
            assert!(plain.check_key(&key).is_ok() && hashed.check_key(&key).is_ok());
        }
        group.bench_function(BenchmarkId::new("governor_upkeep", keys), |b| {
            b.iter(|| black_box(plain.check_key(&next()).is_ok()))
        });
        group.bench_function(BenchmarkId::new("governor_ahash_upkeep", keys), |b| {
            b.iter(|| black_box(hashed.check_key(&next()).is_ok()))
        });
    } // Its upkeep thread stops here.
    let clock = CoarseClock::new(interval).expect("governor's upkeep thread has stopped");
    let ours = KeyedLimiter::<u64, _>::with_clock(quota(LIMIT), clock);
    for key in 0..keys {
        assert!(ours.check(&key).is_allowed());
    }
    group.bench_function(BenchmarkId::new("slidegate_coarse", keys), |b| {
        b.iter(|| black_box(ours.check(&next())))
    });
    group.finish();
}

fn denied(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_denied");
    configure(&mut group);
    // Limit 1, each key checked once: every benched check is denied.
    held_keys(&mut group, 1_000, 1, 1, false);
    // What a denial of this store cannot do without: its epoch pin, a clock reading and the
    // memory reads of a keyed check (hash, probe, the block's `front`, `cum` and a slot, in a
    // table of the size of `slidegate`'s for 1000 keys), with no rule and no write.
    let (keys, clock) = (1_000u64, QuantaClock::new());
    let memory = MemoryWork::new(0..keys, 2048);
    let mut i = 0u64;
    group.bench_function(BenchmarkId::new("floor", keys), |b| {
        b.iter(|| {
            i += 1;
            let guard = slidegate::__private::epoch::pin();
            let now = clock.now().0;
            black_box(memory.read(scattered(i, keys)).wrapping_add(now));
            drop(guard);
        })
    });
    group.finish();
}

fn new_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_new_key");
    configure(&mut group);
    group.bench_function("slidegate", |b| {
        b.iter_custom(|iters| {
            let limiter = slidegate(LIMIT);
            let start = Instant::now();
            for key in 0..iters {
                let _ = black_box(limiter.check(&key));
            }
            start.elapsed()
        })
    });
    for (name, sized) in [("inline_floor", false), ("inline_floor_presized", true)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let floor = InlineInserts::new(if sized { iters as usize } else { 0 }, LIMIT);
                let start = Instant::now();
                for key in 0..iters {
                    black_box(floor.check_new(key).remaining);
                }
                start.elapsed()
            })
        });
    }
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            let limiter = governor_default(u32::MAX);
            let start = Instant::now();
            for key in 0..iters {
                black_box(limiter.check_key(&key).is_ok());
            }
            start.elapsed()
        })
    });
    group.bench_function("governor_ahash", |b| {
        b.iter_custom(|iters| {
            let limiter = governor_ahash(u32::MAX);
            let start = Instant::now();
            for key in 0..iters {
                black_box(limiter.check_key(&key).is_ok());
            }
            start.elapsed()
        })
    });
    group.finish();
}

/// Benches `check` as `name/disjoint` (on two threads at once) and `name/one_thread`
/// (thread 0's checks alone, through the same call).
fn disjoint_and_one_thread(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    check: &(dyn Fn(u64, u64) + Sync),
) {
    group.bench_function(BenchmarkId::new(name, "disjoint"), |b| {
        b.iter_custom(|iters| two_threads(iters, check))
    });
    group.bench_function(BenchmarkId::new(name, "one_thread"), |b| {
        b.iter_custom(|iters| one_thread(iters, check))
    });
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_2_threads");
    configure(&mut group);
    let keys = 1_000u64;
    // Disjoint keys in the inline table (a limit no key reaches in a run); one key, checked
    // by every iteration of both threads, on `MAX_LIMIT` in the store (wide slots).
    let ours = slidegate(LIMIT);
    let one = slidegate(MAX_LIMIT);
    let theirs = governor_default(u32::MAX);
    for key in 0..2 * keys {
        assert!(ours.check(&key).is_allowed());
        assert!(theirs.check_key(&key).is_ok());
    }
    assert!(one.check(&0).is_allowed());
    // Disjoint: thread t checks keys t·1000 .. t·1000 + 999.
    let key = |t: u64, i: u64| t * keys + scattered(i, keys);
    disjoint_and_one_thread(&mut group, "slidegate", &|t, i| {
        let _ = black_box(ours.check(&key(t, i)));
    });
    // The same checks on a clock an upkeep thread refreshes every millisecond (the
    // `keyed_coarse_clock` group's has stopped): one reading of the TSC fewer per check.
    {
        let clock = CoarseClock::new(Duration::from_millis(1)).expect("no upkeep thread runs");
        let coarse = KeyedLimiter::<u64, _>::with_clock(quota(LIMIT), clock);
        for k in 0..2 * keys {
            assert!(coarse.check(&k).is_allowed());
        }
        disjoint_and_one_thread(&mut group, "slidegate_coarse_clock", &|t, i| {
            let _ = black_box(coarse.check(&key(t, i)));
        });
    }
    // Each thread its own limiter (thread t's keys in limiter t): the same checks with no
    // table, entry or store field shared, only the epoch's global state.
    let separate = [slidegate(LIMIT), slidegate(LIMIT)];
    for t in 0..2 {
        for i in 0..keys {
            assert!(separate[t as usize].check(&(t * keys + i)).is_allowed());
        }
    }
    group.bench_function(BenchmarkId::new("slidegate", "separate_limiters"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|t, i| {
                let _ = black_box(separate[t as usize].check(&key(t, i)));
            })
        })
    });
    // The same memory work without a limiter: thread t's keys in a table of its own, of the
    // size of `ours` (4096 slots for 2000 keys: it doubles past a load of 3/4); then the same
    // inside a crossbeam-epoch pin, the reclamation the store used before its own
    // (`src/sync/epoch.rs`), kept as the peer whose two-thread cost that one removed.
    let memory = [0, 1].map(|t| MemoryWork::new(t * keys..(t + 1) * keys, 4096));
    disjoint_and_one_thread(&mut group, "memory", &|t, i| {
        black_box(memory[t as usize].touch(key(t, i)));
    });
    disjoint_and_one_thread(&mut group, "memory_pinned", &|t, i| {
        let guard = crossbeam_epoch::pin();
        black_box(memory[t as usize].touch(key(t, i)));
        drop(guard);
    });
    // The floor of an inline store's check (common/inline.rs) on two threads: both threads'
    // keys in one table at load 1/2, as in `ours`, where a probe reads slots the other
    // thread writes; the same keys at load 1/32, where a probe rarely passes another key's
    // slot; and each thread's keys in a table of its own, where no slot is shared.
    let one_table = InlineFloor::new(2 * keys, LIMIT);
    let sparse = InlineFloor::at_load(2 * keys, LIMIT, 32);
    // At slidegate's load for 2000 keys (1/8), alone and with the instructions slidegate's
    // admission runs beyond the floor's added as work that shares nothing.
    let eighth = InlineFloor::at_load(2 * keys, LIMIT, 8);
    disjoint_and_one_thread(&mut group, "inline_floor_eighth", &|t, i| {
        black_box(eighth.check::<true, true>(key(t, i)).map(|d| d.remaining));
    });
    disjoint_and_one_thread(&mut group, "inline_floor_eighth_padded", &|t, i| {
        black_box(eighth.check::<true, true>(key(t, i)).map(|d| d.remaining));
        black_box(unshared_wide_work(black_box(i), 8));
    });
    for (name, floor) in [
        ("inline_floor_one_table", &one_table),
        ("inline_floor_sparse", &sparse),
    ] {
        disjoint_and_one_thread(&mut group, name, &|t, i| {
            black_box(floor.check::<true, true>(key(t, i)).map(|d| d.remaining));
        });
    }
    let own_tables = [0, 1].map(|_| InlineFloor::new(keys, LIMIT));
    group.bench_function(
        BenchmarkId::new("inline_floor_own_tables", "disjoint"),
        |b| {
            b.iter_custom(|iters| {
                two_threads(iters, &|t, i| {
                    let floor = &own_tables[t as usize];
                    black_box(
                        floor
                            .check::<true, true>(scattered(i, keys))
                            .map(|d| d.remaining),
                    );
                })
            })
        },
    );
    disjoint_and_one_thread(&mut group, "baseline", &|_, i| {
        black_box(unshared_work(i));
    });
    disjoint_and_one_thread(&mut group, "baseline_wide", &|_, i| {
        black_box(unshared_wide_work(black_box(i), 24));
    });
    // The same work inside a crossbeam-epoch pin: the epoch's own cost to two threads (a pin
    // every 128 tries to advance the global epoch, reading every thread's record).
    disjoint_and_one_thread(&mut group, "epoch_pin", &|_, i| {
        let guard = crossbeam_epoch::pin();
        black_box(unshared_work(i));
        drop(guard);
    });
    group.bench_function(BenchmarkId::new("governor", "disjoint"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|t, i| {
                black_box(theirs.check_key(&key(t, i)).is_ok());
            })
        })
    });
    group.bench_function(BenchmarkId::new("slidegate", "same_key"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|_, _| {
                let _ = black_box(one.check(&0));
            })
        })
    });
    group.bench_function(BenchmarkId::new("governor", "same_key"), |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|_, _| {
                black_box(theirs.check_key(&0).is_ok());
            })
        })
    });
    group.finish();
}

/// The floor of a store with each key's window inline in its table slot
/// (`common/inline.rs`), against governor with ahash on the same keys in the same order: with
/// everything a check pays (`inline`) and, for allowed checks, without the epoch pin
/// (`inline_no_pin`), without the clock reading (`inline_no_clock`) and without both
/// (`inline_neither`).
fn inline_floor(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_inline_floor");
    configure(&mut group);
    for (case, keys, limit) in [
        ("allowed", 1_000u64, LIMIT),
        ("denied", 1_000, 1),
        ("allowed", 1_000_000, LIMIT),
    ] {
        let ours = InlineFloor::new(keys, limit);
        let theirs = governor_ahash(limit as u32);
        for key in 0..keys {
            assert!(theirs.check_key(&key).is_ok());
        }
        let mut i = 0u64;
        let mut next = || {
            i += 1;
            scattered(i, keys)
        };
        let id = |name: &str| BenchmarkId::new(name, format!("{case}/{keys}"));
        let decided = |d: Option<Decided>| d.map(|d| (d.allowed, d.remaining, d.reset_after));
        group.bench_function(id("inline"), |b| {
            b.iter(|| black_box(decided(ours.check::<true, true>(next()))))
        });
        if case == "allowed" {
            group.bench_function(id("inline_no_pin"), |b| {
                b.iter(|| black_box(decided(ours.check::<false, true>(next()))))
            });
            group.bench_function(id("inline_no_clock"), |b| {
                b.iter(|| black_box(decided(ours.check::<true, false>(next()))))
            });
            group.bench_function(id("inline_neither"), |b| {
                b.iter(|| black_box(decided(ours.check::<false, false>(next()))))
            });
        }
        group.bench_function(id("governor_ahash"), |b| {
            b.iter(|| black_box(theirs.check_key(&next()).is_ok()))
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    allowed(&mut criterion);
    coarse_clock(&mut criterion);
    denied(&mut criterion);
    string_keys(&mut criterion);
    new_key(&mut criterion);
    contended(&mut criterion);
    inline_floor(&mut criterion);
    criterion.final_summary();
}
