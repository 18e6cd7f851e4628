//! Two threads on disjoint keys against one: the speed-up of a keyed check, and of the pieces
//! of its work, measured the same way side by side.
//!
//! Each case runs `check(thread, i)` for 10⁶ iterations on one thread, then on two threads at
//! once (thread `t` on keys `t·1000 ..`), fifteen times alternating; it prints the median and
//! the fastest of each, in ns per check (per pair of checks on two threads), and the speed-up
//! `2 × one / pair`. The cases:
//!
//! - `compute`: twenty multiply-xorshift rounds, no memory (the bench's `baseline`,
//!   `unshared_work`);
//! - `memory`: a keyed check's memory work and nothing else: hash the key (ahash), probe a
//!   linear-probing table of 4096 pointers to separately allocated 152-byte blocks (the size
//!   of an entry of ten buckets), load the block's `front`, `cum` and one slot, CAS `cum`.
//!   Each thread has a table of its own: the threads share no line;
//! - `pin`: a crossbeam-epoch pin and unpin alone (the peer of the store's own reclamation);
//! - `own_pin`, `memory_own_pinned`: the store's own pin (`src/sync/epoch.rs`), which every
//!   keyed check takes, alone and around `memory`;
//! - `memory_pinned`, `memory_pinned_clock`: `memory` inside a pin, then with a clock reading
//!   (`QuantaClock`) too;
//! - `light_pin`, `memory_light_pinned`: what a reader would pay with a reclaimer that fences
//!   for it (Linux's `membarrier`, as liburcu and the `seize` crate do): the global epoch
//!   loaded, stored in a thread-local word, a compiler fence, the word cleared on the way
//!   out. Only the reader's half, with no reclaimer: a measure of what such a scheme's pin
//!   would cost a check, not one that frees anything;
//! - `slidegate`: `KeyedLimiter::check` on one limiter holding both threads' keys (a limit
//!   of `MAX_LIMIT`: the general store);
//! - `separate_limiters`: each thread a limiter of its own;
//! - `slidegate_inline`: `slidegate` with a limit of 2²¹, whose `u64` keys live in the
//!   inline table (`docs/design.md`, 4.5);
//! - `floor_sparse`, `floor_eighth`: the floor of an inline store's check (the bench's
//!   `common/inline.rs`) with both threads' keys in one table at load 1/32, and at 1/8 as
//!   in `slidegate_inline`;
//! - `floor_eighth_padded`: `floor_eighth` followed by 101 instructions of work that shares
//!   nothing (`unshared_wide_work`, 8 rounds), the instructions `slidegate_inline`'s
//!   admission runs beyond the floor's (callgrind: 250 against 143).
//!
//! On a machine with other work, run it at real-time priority so that the other work does
//! not take the two cores; it pauses a second between cases, keeping each within the
//! kernel's real-time budget (950 ms a second):
//!
//! ```sh
//! cargo bench --no-run --bench keyed_scaling
//! flock /tmp/slidegate-bench.lock chrt -f 50 cargo bench --bench keyed_scaling -- [case ...]
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering, compiler_fence};
use std::thread;
use std::time::Duration;

use slidegate::clock::{Clock, QuantaClock};
use slidegate::{KeyedLimiter, MAX_LIMIT, Quota};

// The benchmark's two-thread timing, key order and baselines, as `benches/keyed.rs` has
// them; the denial's `read` is the benchmark's alone.
mod common;

use common::inline::InlineFloor;
use common::scaling::{MemoryWork, one_thread, unshared_wide_work, unshared_work};
use common::{args, scattered, two_threads};

/// Keys per thread.
const KEYS: u64 = 1000;
const ITERATIONS: u64 = 1_000_000;
const ROUNDS: usize = 15;

/// Thread `t`'s `i`-th key, in a scattered order.
fn key(t: u64, i: u64) -> u64 {
    t * KEYS + scattered(i, KEYS)
}

/// The epoch of the light pin's (absent) reclaimer.
static EPOCH: AtomicU64 = AtomicU64::new(2);

thread_local! {
    /// This thread's pinned epoch (odd while pinned), in a line of its own.
    static PINNED: Padded = const { Padded(AtomicU64::new(0)) };
}

#[repr(align(128))]
struct Padded(AtomicU64);

/// `f` inside a light pin: the epoch published in this thread's word, ordered before `f`'s
/// loads by a compiler fence only (the reclaimer's `membarrier` would supply the processor's
/// fence), and withdrawn with a release store.
fn light_pinned<R>(f: impl FnOnce() -> R) -> R {
    PINNED.with(|word| {
        word.0
            .store(EPOCH.load(Ordering::Relaxed) | 1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        let r = f();
        word.0.store(0, Ordering::Release);
        r
    })
}

type Check<'a> = Box<dyn Fn(u64, u64) + Sync + 'a>;

/// ns per check on thread 0 alone.
fn one(check: &(dyn Fn(u64, u64) + Sync)) -> f64 {
    one_thread(ITERATIONS, check).as_nanos() as f64 / ITERATIONS as f64
}

/// ns per pair of checks on two threads at once.
fn pair(check: &(dyn Fn(u64, u64) + Sync)) -> f64 {
    two_threads(ITERATIONS, check).as_nanos() as f64 / ITERATIONS as f64
}

fn main() {
    let memory = [0, 1].map(|t| MemoryWork::new(t * KEYS..(t + 1) * KEYS, 4096));
    let clock = QuantaClock::new();
    let quota = Quota::new(MAX_LIMIT, Duration::from_secs(3600)).expect("a valid quota");
    let shared = KeyedLimiter::<u64>::new(quota);
    let separate = [
        KeyedLimiter::<u64>::new(quota),
        KeyedLimiter::<u64>::new(quota),
    ];
    let inline_quota = Quota::new(1 << 21, Duration::from_secs(3600)).expect("a valid quota");
    let inline = KeyedLimiter::<u64>::new(inline_quota);
    for k in 0..2 * KEYS {
        assert!(shared.check(&k).is_allowed());
        assert!(separate[(k / KEYS) as usize].check(&k).is_allowed());
        assert!(inline.check(&k).is_allowed());
    }
    let [sparse, eighth] = [32, 8].map(|load| InlineFloor::at_load(2 * KEYS, 1 << 21, load));
    let cases: Vec<(&str, Check<'_>)> = vec![
        (
            "compute",
            Box::new(|_, i| {
                black_box(unshared_work(i));
            }),
        ),
        (
            "memory",
            Box::new(|t, i| {
                black_box(memory[t as usize].touch(key(t, i)));
            }),
        ),
        (
            "pin",
            Box::new(|_, i| {
                let guard = crossbeam_epoch::pin();
                black_box(i);
                drop(guard);
            }),
        ),
        (
            "own_pin",
            Box::new(|_, i| {
                let guard = slidegate::__private::epoch::pin();
                black_box(i);
                drop(guard);
            }),
        ),
        (
            "memory_own_pinned",
            Box::new(|t, i| {
                let guard = slidegate::__private::epoch::pin();
                black_box(memory[t as usize].touch(key(t, i)));
                drop(guard);
            }),
        ),
        (
            "light_pin",
            Box::new(|_, i| {
                light_pinned(|| black_box(i));
            }),
        ),
        (
            "memory_light_pinned",
            Box::new(|t, i| {
                light_pinned(|| black_box(memory[t as usize].touch(key(t, i))));
            }),
        ),
        (
            "memory_pinned",
            Box::new(|t, i| {
                let guard = crossbeam_epoch::pin();
                black_box(memory[t as usize].touch(key(t, i)));
                drop(guard);
            }),
        ),
        (
            "memory_pinned_clock",
            Box::new(|t, i| {
                let guard = crossbeam_epoch::pin();
                black_box(clock.now());
                black_box(memory[t as usize].touch(key(t, i)));
                drop(guard);
            }),
        ),
        (
            "slidegate",
            Box::new(|t, i| {
                let _ = black_box(shared.check(&key(t, i)));
            }),
        ),
        (
            "separate_limiters",
            Box::new(|t, i| {
                let _ = black_box(separate[t as usize].check(&key(t, i)));
            }),
        ),
        (
            "slidegate_inline",
            Box::new(|t, i| {
                let _ = black_box(inline.check(&key(t, i)));
            }),
        ),
        (
            "floor_sparse",
            Box::new(|t, i| {
                black_box(sparse.check::<true, true>(key(t, i)).map(|d| d.remaining));
            }),
        ),
        (
            "floor_eighth",
            Box::new(|t, i| {
                black_box(eighth.check::<true, true>(key(t, i)).map(|d| d.remaining));
            }),
        ),
        (
            "floor_eighth_padded",
            Box::new(|t, i| {
                black_box(eighth.check::<true, true>(key(t, i)).map(|d| d.remaining));
                black_box(unshared_wide_work(black_box(i), 8));
            }),
        ),
    ];
    let chosen: Vec<String> = args().skip(1).collect();
    println!("case                 one (median, fastest)  pair (median, fastest)  speed-up");
    for (name, check) in &cases {
        if !chosen.is_empty() && !chosen.iter().any(|c| c == name) {
            continue;
        }
        let (mut ones, mut pairs) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            ones.push(one(check.as_ref()));
            pairs.push(pair(check.as_ref()));
        }
        ones.sort_by(f64::total_cmp);
        pairs.sort_by(f64::total_cmp);
        let (one_median, pair_median) = (ones[ROUNDS / 2], pairs[ROUNDS / 2]);
        println!(
            "{name:20} {one_median:6.2} {:6.2} ns       {pair_median:6.2} {:6.2} ns        \
             {:.2}x / {:.2}x",
            ones[0],
            pairs[0],
            2.0 * one_median / pair_median,
            2.0 * ones[0] / pairs[0],
        );
        thread::sleep(Duration::from_secs(1));
    }
}
