//! What the benches share: two-thread timing and a scattered key order.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// The `i`-th of `keys` keys, in a scattered order (a multiplicative permutation).
#[inline]
pub fn scattered(i: u64, keys: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % keys
}

/// Runs `check(thread, i)` for `iters` iterations on two threads; the wall time of both.
pub fn two_threads(iters: u64, check: &(dyn Fn(u64, u64) + Sync)) -> Duration {
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let other = s.spawn(|| {
            barrier.wait();
            for i in 0..iters {
                check(1, i);
            }
        });
        barrier.wait();
        let start = Instant::now();
        for i in 0..iters {
            check(0, i);
        }
        let _ = other.join();
        start.elapsed()
    })
}
