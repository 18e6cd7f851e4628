//! What the two-thread scaling measurements of `benches/keyed.rs` and
//! `benches/keyed_scaling.rs` share besides `common`'s `two_threads`: one thread's timing,
//! work that shares nothing, and the memory work of a keyed check and nothing else.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs `check(0, i)` for `iters` iterations on this thread, through the same dynamic call as
/// `two_threads`: the one-thread figure a two-thread pair's time is compared with.
pub fn one_thread(iters: u64, check: &(dyn Fn(u64, u64) + Sync)) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        check(0, i);
    }
    start.elapsed()
}

/// Work that shares nothing between threads (twenty multiply-xorshift rounds, about a keyed
/// check's time): the speed-up the machine itself gives two threads.
pub fn unshared_work(i: u64) -> u64 {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20 {
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
    x
}

/// Work that shares nothing and runs many instructions per cycle: `rounds` rounds of four
/// independent chains of single-cycle operations, each chain a different mix so that they
/// are not vectorised, about 12 instructions a round (24 rounds, about 290 instructions,
/// take about a keyed check's time; 8 rounds, 101 instructions by callgrind, are what a
/// keyed admission of a thousand held keys runs beyond the inline store's floor, 250
/// against 143). Bound by how fast a core retires instructions, where [`unshared_work`]'s
/// chain of dependent multiplications is bound by their latency.
#[inline(always)]
pub fn unshared_wide_work(i: u64, rounds: u64) -> u64 {
    let (mut a, mut b, mut c, mut d) = (i, i ^ 0x5555, i.wrapping_add(7), !i);
    for r in 0..rounds {
        a = a.wrapping_add(r ^ 0x1234).rotate_left(3);
        b = (b ^ r).wrapping_sub(0x5678).rotate_right(5);
        c = c.wrapping_add(c << 7) ^ r;
        d = (d ^ (d >> 11)).wrapping_add(r);
    }
    a ^ b ^ c ^ d
}

/// A key's block in [`MemoryWork`]: the size of an entry of a ring of ten buckets (152
/// bytes), with the hash and the key where an entry has them, then the ring's words.
#[repr(C)]
pub struct Block {
    hash: u64,
    head: [u64; 3],
    key: u64,
    /// `front`, `goal`, `cum` and eleven slots, as in an entry.
    words: [AtomicU64; 14],
}

/// The memory work of a keyed check of a held key and nothing else: hash the key (ahash),
/// probe a linear-probing table of pointers to separately allocated 152-byte blocks, load
/// the block's `front`, `cum` and one slot, and CAS `cum`. No clock, no epoch pin, no rule.
/// Each thread has its own, so the threads share no line.
pub struct MemoryWork {
    hasher: ahash::RandomState,
    slots: Box<[Option<Box<Block>>]>,
}

impl MemoryWork {
    /// A table of `capacity` slots (a power of two) holding `keys`.
    pub fn new(keys: impl Iterator<Item = u64>, capacity: usize) -> MemoryWork {
        let hasher = ahash::RandomState::new();
        let mut slots: Box<[Option<Box<Block>>]> = (0..capacity).map(|_| None).collect();
        for key in keys {
            let hash = hasher.hash_one(key);
            let mut i = hash as usize & (capacity - 1);
            while slots[i].is_some() {
                i = (i + 1) & (capacity - 1);
            }
            slots[i] = Some(Box::new(Block {
                hash,
                head: [0; 3],
                key,
                words: std::array::from_fn(|w| AtomicU64::new(if w < 2 { 11 } else { 0 })),
            }));
        }
        MemoryWork { hasher, slots }
    }

    /// `key`'s block (hash, then probe from its home slot).
    #[inline]
    pub fn find(&self, key: u64) -> Option<&Block> {
        let hash = self.hasher.hash_one(key);
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while let Some(block) = self.slots[i].as_deref() {
            if block.hash == hash && block.key == key {
                return Some(block);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The check's memory work on `key`: whether its CAS succeeded.
    #[inline]
    pub fn touch(&self, key: u64) -> bool {
        self.find(key).is_some_and(|block| {
            let front = block.words[0].load(Ordering::Acquire);
            let cum = &block.words[2];
            let seen = cum.load(Ordering::Acquire);
            black_box(block.words[3 + front as usize % 11].load(Ordering::Acquire));
            cum.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// A denial's memory work on `key`: the same loads, no CAS.
    #[inline]
    pub fn read(&self, key: u64) -> u64 {
        self.find(key).map_or(0, |block| {
            let front = block.words[0].load(Ordering::Acquire);
            let cum = block.words[2].load(Ordering::Acquire);
            cum.wrapping_sub(block.words[3 + front as usize % 11].load(Ordering::Acquire))
        })
    }
}
