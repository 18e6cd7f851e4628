//! Stress: several threads check one limiter while another thread steps a `ManualClock`.
//!
//! First the clock moves *while* checks run (rotations race admissions); then it moves only
//! between phases, with the checkers parked at a barrier, for more than a window. Afterwards:
//! - Strict (with or without last-admission marks) never admitted more than `L` in any
//!   interval of length `W`, judged by the clock reading each admitted check actually used;
//! - the limiter's total equals the sum of admitted costs (nothing lost, nothing phantom);
//! - `peek().remaining()` equals the reference model fed the admitted log;
//! - one window and one bucket after the last check, it is as good as new (no drift).

use slidegate_testkit::model as common;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::{Model, worst_window};
use slidegate::clock::{Clock, ManualClock, Nanos};
use slidegate::{Mode, Quota, SlidingWindow};

thread_local! {
    static LAST_READING: Cell<u64> = const { Cell::new(0) };
}

/// A `ManualClock` that remembers, per thread, the last time it handed out: the time the
/// limiter judged a check at.
#[derive(Clone)]
struct RecordingClock(ManualClock);

impl Clock for RecordingClock {
    fn now(&self) -> Nanos {
        let t = self.0.now();
        LAST_READING.with(|c| c.set(t.0));
        t
    }
}

/// A tiny deterministic generator, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const CHECKERS: usize = 3;
/// Clock steps taken while checks run.
const RACING_STEPS: usize = 20_000;

/// The work of a run (racing steps, checks per phase) is divided by `SLIDEGATE_STRESS_SHRINK`
/// (default 1): `.ci/valgrind` runs these tests about 50 times slower.
fn shrink() -> usize {
    std::env::var("SLIDEGATE_STRESS_SHRINK")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

fn stress(limit: u64, buckets: u64, g: u64, mode: Mode, seed: u64) {
    let window = g * buckets;
    let quota = Quota::new(limit, Duration::from_nanos(window))
        .unwrap()
        .with_granularity(Duration::from_nanos(g))
        .unwrap()
        .with_mode(mode);
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(quota, RecordingClock(clock.clone()));
    let log = Mutex::new(Vec::new());
    let racing = AtomicBool::new(true);
    let phases = 4 * (buckets as usize + 1);
    let barrier = Barrier::new(CHECKERS + 1);
    let shrink = shrink();

    thread::scope(|s| {
        for id in 0..CHECKERS {
            let (limiter, log, racing, barrier) = (&limiter, &log, &racing, &barrier);
            s.spawn(move || {
                let mut rng = XorShift(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut mine = Vec::new();
                let mut once = |rng: &mut XorShift| {
                    let cost = 1 + rng.next() % limit.min(3);
                    if limiter.check_n(cost).unwrap().is_allowed() {
                        mine.push((LAST_READING.with(Cell::get), cost));
                    }
                };
                while racing.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        once(&mut rng);
                    }
                }
                for _ in 0..phases {
                    barrier.wait();
                    for _ in 0..2_000 / shrink {
                        once(&mut rng);
                    }
                    barrier.wait();
                }
                log.lock().unwrap().extend(mine);
            });
        }
        // The stepper: first while checks run...
        let mut rng = XorShift(seed);
        for _ in 0..RACING_STEPS / shrink {
            clock.advance(Duration::from_nanos(rng.next() % (g / 3 + 1)));
            if rng.next() % 512 == 0 {
                clock.advance(Duration::from_nanos(window + rng.next() % window));
            }
            for _ in 0..rng.next() % 2048 {
                std::hint::spin_loop();
            }
        }
        racing.store(false, Ordering::Relaxed);
        // ...then only between phases, for more than a window.
        for _ in 0..phases {
            barrier.wait();
            barrier.wait();
            clock.advance(Duration::from_nanos(g / 2 + rng.next() % g));
        }
    });

    let mut admitted = log.into_inner().unwrap();
    let total: u64 = admitted.iter().map(|&(_, c)| c).sum();
    assert_eq!(limiter.admitted_total(), total, "lost or phantom cost");
    assert!(total > 0);
    if matches!(mode, Mode::Strict | Mode::StrictMarked) {
        let worst = worst_window(&mut admitted, window);
        assert!(
            worst <= limit,
            "{worst} admitted in one window of {window} ns, limit {limit}"
        );
    }
    // The phased tail spans more than W + G with no racing, so every admission the window
    // at the end can see was judged at the time it read: the model must agree exactly.
    let mut model = Model::new(quota);
    for &(t, c) in &admitted {
        model.record(t, c);
    }
    let now = clock.now().0;
    assert_eq!(
        limiter.peek().remaining(),
        model.remaining(now),
        "drift at {now}"
    );
    clock.advance(Duration::from_nanos(window + g));
    assert_eq!(
        limiter.peek().remaining(),
        limit,
        "not fresh one window and one bucket later"
    );
}

#[test]
fn strict_one_bucket() {
    stress(5, 1, 1_000, Mode::Strict, 1);
}

#[test]
fn strict_ten_buckets() {
    stress(40, 10, 300, Mode::Strict, 2);
}

#[test]
fn strict_many_buckets_small_limit() {
    stress(3, 64, 50, Mode::Strict, 3);
}

#[test]
fn strict_marked_one_bucket() {
    stress(5, 1, 1_000, Mode::StrictMarked, 5);
}

#[test]
fn strict_marked_ten_buckets() {
    stress(40, 10, 300, Mode::StrictMarked, 6);
}

#[test]
fn strict_marked_many_buckets_small_limit() {
    stress(3, 64, 50, Mode::StrictMarked, 7);
}

#[test]
fn weighted_counts_nothing_twice() {
    stress(30, 4, 500, Mode::Weighted, 4);
}
