//! A lock-free sliding-window rate limiter.
//!
//! `slidegate` answers, on every request, "has this key used more than `limit` in the last
//! `window`?" from any number of threads in about the time governor takes, and in its
//! default Strict mode never lets more through than it promised.
//!
//! ```
//! use slidegate::{Quota, SlidingWindow};
//! use std::time::Duration;
//!
//! // At most 100 requests in any 60 s, counted in 1 s buckets.
//! let quota = Quota::new(100, Duration::from_secs(60))?.with_granularity(Duration::from_secs(1))?;
//! let limiter = SlidingWindow::new(quota); // Send + Sync: share it with an Arc
//! let decision = limiter.check();
//! if decision.is_allowed() {
//!     // serve the request
//! } else {
//!     let _wait = decision.retry_after();
//! }
//! # Ok::<(), slidegate::ConfigError>(())
//! ```
//!
//! # A guide to the API
//! - **What is promised:** a [`Quota`] of `limit` per `window`, counted by the algorithm its
//!   [`Mode`] names: [`Mode::Strict`] (the default: never more than `limit` in any interval
//!   of length `window`), [`Mode::StrictMarked`] (the same promise, closer to exact: it
//!   drops the oldest bucket once its last admission has left the window),
//!   [`Mode::Weighted`] (Cloudflare's sliding-window counter),
//!   [`Mode::ExactLog`] (the definition itself), [`Mode::FixedWindow`] and [`Mode::Gcra`]
//!   (governor's token bucket). [`Quota::bytes_per_key`] says what one key of it costs.
//! - **What is answered:** every check returns a [`Decision`] — allowed or not, `remaining`,
//!   `retry_after` when denied, `reset_after`. A cost of zero or above the limit is a
//!   [`CostError`], never a denial; a bad quota is a [`ConfigError`] naming the field.
//! - **One limit:** [`SlidingWindow`]. **One per key** (user, token, address):
//!   [`KeyedLimiter`], a lock-free store with bounded memory and per-key quotas, built by
//!   [`KeyedLimiter::builder`]. **Several at once**, all charged or none: [`check_all`] over
//!   [`Limit`]s (a direct limiter, or [`KeyedLimiter::key`]).
//! - **The request lifecycle:** [`SlidingWindow::peek`] judges without charging,
//!   [`SlidingWindow::refund`] gives back room for a request that failed upstream,
//!   [`SlidingWindow::wait`] blocks until a cost is admitted and, with the `tokio` feature,
//!   `until_ready` awaits it. The keyed limiter has the same per key.
//! - **Time:** limiters read a [`clock::Clock`]: [`clock::QuantaClock`] (the default, the
//!   CPU's time-stamp counter), [`clock::CoarseClock`] (cheaper, up to its refresh interval
//!   stale), [`clock::ManualClock`] for deterministic tests (yours too: its `sleep` advances
//!   it, so `wait` runs in simulated time), and with the `tokio` feature `clock::TokioClock`.
//! - **Features:** `tokio` (`until_ready`, `TokioClock`); `redis` (the `redis` module: the
//!   same limits shared through Redis or Redis Cluster); `tower` and `axum` (the `http`
//!   module: a tower layer for HTTP services). Without them the library depends on quanta,
//!   crossbeam, ahash and thiserror alone.
//!
//! ```
//! use slidegate::{check_all, clock::ManualClock, KeyedLimiter, Limit, Quota, SlidingWindow};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let per_user = KeyedLimiter::<String>::builder(Quota::new(10, Duration::from_secs(1))?)
//!     .clock(clock.clone())
//!     .max_keys(100_000)
//!     .build();
//! let hourly = SlidingWindow::with_clock(Quota::new(1000, Duration::from_secs(3600))?, clock);
//! let alice = per_user.key("alice");
//! assert!(check_all(&[(&alice as &dyn Limit, 1), (&hourly, 1)])?.is_allowed());
//! assert_eq!(per_user.peek("alice").remaining(), 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The request lifecycle on a [`clock::ManualClock`], as a test of your own code runs it: a
//! refund after a failed upstream call, and a `wait` that advances the simulated clock.
//!
//! ```
//! use slidegate::{clock::{Clock, ManualClock}, Quota, SlidingWindow};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let limiter = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
//! assert!(limiter.check_n(2)?.is_allowed());
//! assert_eq!(limiter.refund(1), 1); // the upstream call failed
//! assert!(limiter.check().is_allowed());
//! assert!(limiter.wait(1)?.is_allowed()); // blocks, in simulated time, until admitted
//! assert_eq!(clock.now().as_u64(), 1_100_000_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//! Under any interleaving of threads, Strict never admits more than `limit` in any interval
//! of length `window`, and the exact log never more than the definition allows; every
//! admitted unit is counted exactly once and a denial leaves no trace; once traffic stops,
//! one window and one bucket later a limiter is indistinguishable from a fresh one. No lock
//! is taken on the check path of a key the limiter holds. Every lock-free protocol is
//! model-checked with [loom], and every algorithm is property-tested against a plain
//! reference model.
//!
//! The repository's `README.md` has the table of algorithms and guarantees, the benchmarks
//! against governor and the `slidegate simulate` command that shows what each algorithm
//! admits on your traffic; `docs/design.md` has the semantics, the concurrency contract and
//! the protocols with their proofs.
//!
//! [loom]: https://docs.rs/loom

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algo;
pub mod clock;
mod decision;
mod direct;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
mod keyed;
mod multi;
mod quota;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod sync;
mod usage;
mod wait;
mod window;

pub use decision::{CostError, Decision};
pub use direct::SlidingWindow;
pub use keyed::{DefaultHashBuilder, KeyLimit, KeyedLimiter, KeyedLimiterBuilder};
pub use multi::{Limit, MultiDecision, check_all};
pub use quota::{ConfigError, MAX_BUCKETS, MAX_LIMIT, Mode, Quota};
pub use usage::Usage;

/// Hooks for slidegate's own tests; not part of the API.
#[doc(hidden)]
pub mod __private {
    /// Frees the keyed entries the calling thread evicted, and any other retired memory no
    /// thread can still reach (two epoch collections), unless a thread stays pinned.
    pub fn reclaim() {
        crate::sync::epoch::reclaim();
    }

    /// The epoch reclamation itself, for the loom model of its protocol
    /// (`loom-tests/tests/epoch_reclamation.rs`) and the benchmarks' pin.
    pub mod epoch {
        pub use crate::sync::epoch::{Guard, pin};
        pub use crossbeam_epoch::{Atomic, Owned, Shared};
    }

    /// The inline store's one-word ring, for its loom models (`loom-tests/tests/line_*.rs`).
    #[cfg(slidegate_loom)]
    pub use crate::window::line_counter::LoomLine;

    /// The inline store's table, for its loom models (`loom-tests/tests/inline_*.rs`).
    #[cfg(slidegate_loom)]
    pub use crate::keyed::inline::LoomInline;
}

/// The README's examples, compiled and run as doc tests. Two of them need the `axum` and
/// `redis` features, so they run with every feature on, as `bash .ci/test` runs them.
#[cfg(all(doctest, feature = "axum", feature = "redis"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
