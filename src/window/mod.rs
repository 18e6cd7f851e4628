//! Storage for the algorithms: atomics laid out so that any number of threads can check one
//! key without a lock. Each cell reads its state, asks its algorithm's rule in
//! [`crate::algo`], and owns the compare-and-swap.
//!
//! - [`cum`]: the state word the cells share, and its retired flag.
//! - [`ring`]: the cumulative counter and snapshot ring, and [`counter`], its checks under
//!   the sliding-window counter's rule (Strict, Weighted) and the fixed window's.
//! - [`line`](mod@line): the one-word ring of the inline store's table, and [`line_counter`], its
//!   checks under the same rules.
//! - [`log`]: the exact sliding log, a ring of the last `L` admission times.
//! - [`gcra`]: GCRA's theoretical arrival time in one word.
//! - [`state`]: one key's state, whichever of these it is: what the limiters call.

pub(crate) mod counter;
pub(crate) mod cum;
pub(crate) mod gcra;
// The one-word ring of the inline store's table (`keyed::inline`), and its checks.
pub(crate) mod line;
pub(crate) mod line_counter;
pub(crate) mod log;
pub(crate) mod ring;
pub(crate) mod state;
