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
