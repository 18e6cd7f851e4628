//! loom models of slidegate live in `tests/`; this library holds what they share (compiled
//! only with `RUSTFLAGS="--cfg slidegate_loom"`, like the models):
//!
//! - [`model`]: a loom runner with the preemption bound fixed in code, so a run does not
//!   depend on `LOOM_*` environment variables.
//! - [`RecordingClock`]: a [`ManualClock`](slidegate::clock::ManualClock) that remembers, per
//!   loom thread, the last reading it gave, which is the time a check or peek judged at.
//! - [`Event`] and [`run`]: one check or peek with the reading it used and its decision.
//! - The oracles: [`assert_strict_safe`] (no interval of length `W` holds more than `L`),
//!   [`assert_linearizable`] (at one instant, the decisions are those of some sequential
//!   order), [`assert_explained`] and [`assert_final`] (every decision and every final window
//!   sum is what a sequential sliding-window counter would answer, given which concurrent
//!   admissions it had seen and where each was counted).
//!
//! All times are nanoseconds on a [`ManualClock`](slidegate::clock::ManualClock) that starts
//! at zero.

#[cfg(slidegate_loom)]
mod oracle;

#[cfg(slidegate_loom)]
pub use oracle::*;
