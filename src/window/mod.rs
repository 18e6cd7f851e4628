//! Storage for the algorithms: atomics laid out so that any number of threads can check one
//! key without a lock.
//!
//! - [`ring`]: the cumulative counter and snapshot ring behind the sliding-window counter
//!   (Strict, Weighted) and the fixed window.
//! - [`log`]: the exact sliding log, a ring of the last `L` admission times.
//! - [`gcra`]: the theoretical arrival time of GCRA in one word.

pub(crate) mod gcra;
pub(crate) mod log;
pub(crate) mod ring;
pub(crate) mod state;

use crate::sync::{AtomicU64, Ordering};

/// The top bit of every cell's state word (the ring's and the log's `cum`, GCRA's TAT):
/// set, the cell is retired and every compare-and-swap that expects a word without it fails
/// (see `ring.rs`, "Retirement").
pub(crate) const RETIRED: u64 = 1 << 63;

/// Retires the cell whose state word is `word`, whatever it holds; `true` if this call did.
/// Admissions counted in it are forgotten; none made after it is charged to it.
pub(crate) fn retire_now(word: &AtomicU64) -> bool {
    // AcqRel: as each cell's idle retirement; every later charge fails because its expected
    // word lacks the bit.
    word.fetch_or(RETIRED, Ordering::AcqRel) & RETIRED == 0
}

/// Whether the cell whose state word is `word` is retired.
pub(crate) fn is_retired(word: &AtomicU64) -> bool {
    // Relaxed: a hint for stores; decisions go through each cell's Acquire load.
    word.load(Ordering::Relaxed) & RETIRED != 0
}

/// What a check does with a cost it allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Nothing: report what a check of the cost would decide now, writing nothing at all.
    /// The decision's `remaining` is what could be admitted now (the cost is not taken off).
    Peek,
    /// Admit and charge it.
    Charge,
    /// Reserve it for a check across several limits, to be committed or released.
    Reserve,
}
