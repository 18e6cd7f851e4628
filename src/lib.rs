//! A lock-free sliding-window rate limiter.
//!
//! `slidegate` answers, on every request, "has this key used more than `limit` in the last
//! `window`?" in a few nanoseconds, from any number of threads, without ever letting more
//! through than it promised.
//!
//! ```
//! use slidegate::{Quota, SlidingWindow};
//! use std::time::Duration;
//!
//! // At most 100 requests in any 60 s, counted in 1 s buckets.
//! let quota = Quota::new(100, Duration::from_secs(60))?.with_granularity(Duration::from_secs(1))?;
//! let limiter = SlidingWindow::new(quota);
//! let decision = limiter.check();
//! if decision.is_allowed() {
//!     // serve the request
//! } else {
//!     let _wait = decision.retry_after();
//! }
//! # Ok::<(), slidegate::ConfigError>(())
//! ```
//!
//! # Algorithms
//! A [`Quota`] of `L` per `W` is counted by the algorithm its [`Mode`] names; every limiter
//! (direct, keyed, [`check_all`]) takes any of them and returns the same [`Decision`]. The
//! sliding-window counter counts in `N = W / G` buckets of length `G`: time `t` (nanoseconds
//! from the clock's origin) falls in bucket `b(t) = t / G`, and `C(i)` is the cost admitted in
//! bucket `i`.
//!
//! | mode | admits cost `n` at `t` iff | guarantee | state per key |
//! |---|---|---|---|
//! | [`Mode::Strict`] (default) | `Σ C(i), i ∈ b−N ..= b` `+ n ≤ L` | never more than `L` in any interval of length `W`; may deny up to one bucket early | `8·(N+1)` bytes + 40 |
//! | [`Mode::Weighted`] | `Σ C(i), i ∈ b−N+1 ..= b` `+ C(b−N)·(1 − (t mod G)/G) + n ≤ L` | Cloudflare's interpolation; closer to `L` on smooth traffic, can over-admit on bursts | as Strict |
//! | [`Mode::ExactLog`] | cost admitted in `(t − W, t]` `+ n ≤ L` | the definition itself, exact | 8 bytes per unit of `L` |
//! | [`Mode::FixedWindow`] | `C(b) + n ≤ L` with `G = W` | the classic baseline; up to `2L` across a window boundary | as Strict with `N = 1` |
//! | [`Mode::Gcra`] | `max(TAT, t) + n·T − t ≤ L·T`, `T = ⌈W/L⌉` | governor's token bucket: bursts of `L`, one unit back every `T` | one word |
//!
//! With `G = W` (one bucket), Weighted is exactly the two-counter sliding window Cloudflare
//! describes in "How we built rate limiting capable of scaling to millions of domains" (2017).
//! Strict's proof: the last request admitted in an interval `[s, s + W)` at time `t` saw the
//! buckets `b(t) − N ..= b(t)`, and `b(t) − N ≤ b(s)`, so it saw everything admitted in
//! `[s, t]`. How far each algorithm strays from the exact log on a given traffic is what
//! `slidegate simulate` measures (see the README).
//!
//! # How it is stored
//! One ever-increasing counter of admitted cost, `cum`, and a ring of `N + 1` snapshots of it,
//! one taken as each bucket starts and tagged with that bucket's index (its epoch). The window
//! sum is `cum − snapshot[b − N]`: a check is a handful of loads and one compare-and-swap,
//! O(1) whether the window has 1 bucket or 3600, and nothing is ever subtracted, so nothing
//! drifts. A stale snapshot is recognised by its tag and overwritten in place; expiry never
//! needs a delete or a sweep. The protocol, and why it never over-admits, is documented in
//! the source of `window/ring.rs` and checked with [loom] in the repository's `loom-tests/`.
//! The fixed window is the same ring with one bucket, judged on the current bucket alone.
//!
//! The exact log keeps a ring of the last `L` admitted units' times behind a counter of
//! units ever admitted: a check reads the counter and the one unit whose leaving the window
//! decides the request (units are in time order), and claims its positions with one
//! compare-and-swap (`window/log.rs`). GCRA keeps its theoretical arrival time in one word,
//! updated by compare-and-swap (`window/gcra.rs`). All three protocols are lock-free and
//! model-checked.
//!
//! # Decisions
//! Every check returns a [`Decision`]: allowed or not, `remaining`, `retry_after` when denied
//! (the earliest wait after which the same request would be admitted if nothing else
//! arrives) and `reset_after` (when the window would be empty again). A cost of zero or above
//! the limit is a [`CostError`], never a denial. A bad quota is a [`ConfigError`] naming the
//! field at fault.
//!
//! # Many keys
//! [`KeyedLimiter`] keeps one such window per key (user, token, address) in a hash table
//! built on crossbeam-epoch: checking a key it holds takes no lock and writes nothing shared
//! but that key's window; a key's first check inserts it under a lock that checks of held
//! keys never wait for. A key whose window is empty is indistinguishable from one never
//! seen and is evicted as inserts sweep by, through a retirement protocol that never loses
//! an admission; `max_keys` bounds memory, forcing out approximately least-recently-active
//! keys (counted) when no idle one is found. Keys can have their own quotas, changed at run
//! time.
//!
//! ```
//! use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
//! use std::time::Duration;
//!
//! let limiter = KeyedLimiter::builder(Quota::new(10, Duration::from_secs(1))?)
//!     .clock(ManualClock::new())
//!     .max_keys(100_000)
//!     .build();
//! limiter.quota_for(&"batch-job", Quota::new(1000, Duration::from_secs(1))?);
//! assert!(limiter.check(&"alice").is_allowed());
//! assert_eq!(limiter.check_n(&"batch-job", 500)?.remaining(), 500);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Several limits at once
//! [`check_all`] checks one request against several limits — 10/s *and* 1000/h, per user
//! *and* per tenant, direct and keyed limiters mixed — and charges all of them or none. It
//! reserves the cost on each limit in turn (reservations count against every other check),
//! releases them if one denies, and commits them if all admit; a reservation never touches
//! the admitted count until it is committed, so a denied request leaves no trace.
//!
//! ```
//! use slidegate::{check_all, KeyedLimiter, Limit, Quota, SlidingWindow};
//! use std::time::Duration;
//!
//! let per_user = KeyedLimiter::new(Quota::new(10, Duration::from_secs(1))?);
//! let hourly = SlidingWindow::new(Quota::new(1000, Duration::from_secs(3600))?);
//! let user = per_user.key(&"alice");
//! let d = check_all(&[(&user as &dyn Limit, 1), (&hourly, 1)])?;
//! assert!(d.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The request lifecycle
//! - [`SlidingWindow::peek`] judges without charging; [`SlidingWindow::check_n`] charges.
//! - [`SlidingWindow::refund`] gives back room for cost admitted earlier (a request that
//!   failed upstream): the window holds up to `n` fewer units from then on, taken from the
//!   oldest units it counts — so, for the log and the counter, a limiter that can only be
//!   stricter than an exact refund, never looser; GCRA moves its arrival time back exactly.
//! - For outbound calls, [`SlidingWindow::wait`] blocks until a cost is admitted and, with
//!   the `tokio` feature, `SlidingWindow::until_ready` awaits it; both can add a random
//!   jitter to each wait. The keyed limiter has the same four per key.
//!
//! # Time
//! Limiters read a [`clock::Clock`]. [`clock::QuantaClock`] (the default) reads the CPU's
//! time-stamp counter; [`clock::CoarseClock`] reads a time an upkeep thread refreshes, which
//! halves a direct check's cost at the price of up to its refresh interval of staleness;
//! [`clock::ManualClock`] moves only when told to (and its
//! [`sleep`](clock::Clock::sleep) advances it), for deterministic tests; with the `tokio`
//! feature, `clock::TokioClock` reads tokio's clock, so tests can run on paused time.
//! Time never goes backwards as a limiter sees it: a reading older than the newest bucket a
//! limiter has seen is read again once and, if still older, taken as the start of that bucket.
//!
//! # Concurrency
//! Under any interleaving, Strict never admits more than `L` in any interval of length `W`;
//! every admitted unit is counted exactly once and a denial leaves no trace; once traffic
//! stops, one window and one bucket later the limiter is indistinguishable from a fresh one.
//! No lock is taken on the check path and a stalled thread blocks no other: the one piece of
//! shared work (establishing a new bucket's snapshot) is finished by whichever thread needs
//! it. Contention can deny spuriously in two ways only: a request whose clock read is a bucket
//! older than a concurrent one's is counted in the newer bucket, so it stays in the window up
//! to one granularity longer than a sequential run would keep it; and a [`check_all`] holds
//! its reservations while it checks its other limits, so a check overlapping it may be denied
//! for room that is then given back (only while the two calls overlap).
//!
//! [loom]: https://docs.rs/loom

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod algo;
pub mod clock;
mod decision;
mod direct;
#[cfg(feature = "tower")]
pub mod http;
mod keyed;
mod multi;
mod quota;
#[cfg(feature = "redis")]
pub mod redis;
mod sync;
mod wait;
mod window;

pub use decision::{CostError, Decision};
pub use direct::SlidingWindow;
pub use keyed::{DefaultHashBuilder, KeyLimit, KeyedLimiter, KeyedLimiterBuilder};
pub use multi::{Limit, MultiDecision, check_all};
pub use quota::{ConfigError, MAX_BUCKETS, MAX_LIMIT, Mode, Quota};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
