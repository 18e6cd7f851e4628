//! What the benches share: two-thread timing, a scattered key order, the inline store's
//! floor (`inline`), one thread's timing and the baselines of the scaling cases (`scaling`),
//! and the arguments of the benches that are programs.

// Each bench uses a part of what is here.
#![allow(dead_code)]

pub mod inline;
pub mod scaling;

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

/// The program's arguments, without the `--bench` that `cargo bench` passes to a bench
/// whose harness is its own `main`.
pub fn args() -> impl Iterator<Item = String> {
    std::env::args().filter(|a| a != "--bench")
}
