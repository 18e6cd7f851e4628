//! loom models of slidegate live in `tests/`, one file per claim, each opening with what it
//! proves. This library holds what they share, compiled (like the models) only with
//! `RUSTFLAGS="--cfg slidegate_loom"`; see `.ci/test` for the command.
//!
//! - `model`: a loom runner with the preemption bound fixed in code (`PREEMPTION_BOUND`),
//!   so a run does not depend on `LOOM_*` environment variables.
//! - `keyed` and `FixedHasher`: a keyed limiter whose hashing loom can replay.
//! - `RecordingClock`: a `ManualClock` that remembers, per loom thread, the last reading it
//!   gave; `effective_times` derives from a decision whether the call judged at that reading
//!   or at the start of a newer bucket; `RecordingClock::read_at_most` makes one thread's
//!   clock lag behind the others'.
//! - `Limiter`: what the ring models drive, a direct limiter (`Spec::limiter`) or one key of
//!   a keyed limiter (`Spec::keyed_limiter`); a model written over `NewLimiter` runs on both.
//!   A keyed model that fails aborts its test binary after loom's report (unwinding drops
//!   the epoch's thread-local record outside the model): rerun it alone with `--exact`.
//! - `Event` and `run`: one check or peek, the reading it used and its decision.
//! - The oracles: `assert_strict_safe` (no interval of length `W` holds more than `L`;
//!   `assert_safe_at_readings` the same over plain `(reading, cost)` pairs),
//!   `assert_linearizable` (at one instant, the decisions are those of some sequential
//!   order), `assert_explained` and `assert_final` (every decision and every final window sum
//!   is what a sequential sliding-window counter answers, given which concurrent admissions
//!   the call had seen and in which bucket, no older than its own, each was counted).
//! - `gcra_oracle`: GCRA's sequential cell (`GcraModel`), calls on a GCRA limiter
//!   (`run_gcra`) and `assert_gcra_linearizable`, which explains every answer — `remaining`,
//!   waits and a refund's count included — and the final state by one sequential order.
//! - `refund_oracle`: calls mixing checks and refunds on a Strict `Limiter` (`run_ring`) and
//!   `assert_refunds_explained`: a sequential counter whose refunds remove the oldest units
//!   counted explains every answer and the window sums after joining.
//!
//! - `line`: the line ring's invariant once its threads have joined (`assert_established`)
//!   and its clock arithmetic (`at`, `bucket_of`).
//! - `log_oracle`: the exact log's definition as an oracle (`assert_log_safe`, with refunds)
//!   and `LaggingClock`, a clock some threads read behind.
//!
//! All times are nanoseconds on a `ManualClock` that starts at zero.

#[cfg(slidegate_loom)]
mod gcra_oracle;
#[cfg(slidegate_loom)]
mod keyed;
#[cfg(slidegate_loom)]
mod line;
#[cfg(slidegate_loom)]
mod log_oracle;
#[cfg(slidegate_loom)]
mod oracle;
#[cfg(slidegate_loom)]
mod refund_oracle;

#[cfg(slidegate_loom)]
pub use gcra_oracle::*;
#[cfg(slidegate_loom)]
pub use keyed::{FixedHasher, Keyed, keyed, spawn_evictor};
#[cfg(slidegate_loom)]
pub use line::{assert_established, at, bucket_of};
#[cfg(slidegate_loom)]
pub use log_oracle::*;
#[cfg(slidegate_loom)]
pub use oracle::*;
#[cfg(slidegate_loom)]
pub use refund_oracle::*;
