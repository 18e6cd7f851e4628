//! Limits shared by many processes and machines, through Redis or Redis Cluster (feature
//! `redis`).
//!
//! A [`RedisLimiter`] holds one [`Quota`](crate::Quota) for every key, as a
//! [`KeyedLimiter`](crate::KeyedLimiter) does, but keeps each key's state in Redis, so every
//! process that builds a limiter of the same quota and prefix shares one limit. Every
//! algorithm is available and decides as the local one does (the same reference model and
//! property tests hold both): the decision is made by one call of a Lua function per
//! request, which reads, decides and writes atomically, in one round trip.
//!
//! ```no_run
//! use slidegate::Quota;
//! use slidegate::redis::{Connection, Policy, RedisLimiter};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let conn = Connection::open("redis://127.0.0.1:6379").await?;
//! // or: Connection::open_cluster(&["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]).await?
//! let quota = Quota::new(100, Duration::from_secs(60))?.with_granularity(Duration::from_secs(1))?;
//! let limiter = RedisLimiter::builder(quota)
//!     .prefix("api:")
//!     .deadline(Duration::from_millis(20))
//!     .policy(Policy::Local(Quota::new(10, Duration::from_secs(60))?))
//!     .build(&conn)?;
//! let d = limiter.check("user-42").await?;
//! if !d.is_allowed() {
//!     println!("retry in {:?} (decided by {:?})", d.retry_after(), d.path());
//! }
//! # Ok(()) }
//! ```
//!
//! # What the server holds
//! Per limiter key, at most two Redis keys sharing one hash tag (so one Cluster slot):
//! `<prefix>{<key>}:h`, a hash of a few counters, and `<prefix>{<key>}:z`, a sorted set.
//! - **Counter** (Strict, Weighted, fixed window), as the local ring: `c` counts every unit
//!   ever admitted, and the sorted set holds, for each bucket that admitted something, the
//!   snapshot of `c` when it started (scored by the bucket index). The cost in the window is
//!   `c` minus one snapshot, found in `O(log n)`: a window of 3600 buckets costs what one of
//!   10 does. Nothing is subtracted; refunds raise a floor under the snapshots.
//! - **Exact log**: one sorted-set entry per admission time, scored by the running count
//!   after it, and the count of units gone (expired or refunded).
//! - **GCRA**: the arrival time in the hash.
//!
//! Every write sets a TTL of the time until the key's window is empty plus a slack (1 s by
//! default), so nothing leaks: a key left alone disappears once it no longer matters.
//! Time comes from the server (`TIME`), never from the client, so clients whose clocks
//! disagree share one limit; it is counted in whole microseconds, so a quota's window and
//! granularity must be whole microseconds.
//!
//! # Round trips and connections
//! One `FCALL` of slidegate's function library per decision (Redis 7 or later; the library
//! is loaded when a connection opens, on every Cluster master). When the server has lost it
//! (restart, failover, `FUNCTION FLUSH`) it is loaded again on that node and the call made
//! again; nothing ran the first time, so nothing is counted twice, and no caller sees the
//! error. A server without functions (before Redis 7) gets the same code through `EVALSHA`,
//! and `EVAL` when its script cache was flushed. A [`Connection`] multiplexes: any number of tasks share one TCP connection per
//! server.
//!
//! # When Redis is slow or down
//! Each decision has a deadline (50 ms by default). A failed or late decision opens a
//! circuit breaker: for a cool-down (250 ms) every decision gets the [`Policy`] at once —
//! [`Policy::Allow`], [`Policy::Deny`] or [`Policy::Local`], a quota counted in this process
//! alone — so a dead Redis costs one deadline, not one per request; then one decision probes
//! Redis and, if it answers, Redis decides again. The connection reconnects by itself.
//! [`RedisDecision::path`] tells which path decided.
//!
//! # Several limits, and leases
//! [`check_all`] charges several limits all or nothing (one script when their keys share a
//! slot; a reserve-then-release protocol across slots, see its module). Leases
//! ([`RedisLimiterBuilder::leases`]) let a process admit from a slice of a hot key's window
//! it took in one round trip (see `lease.rs` for the protocol and the bound).

mod batch;
mod breaker;
mod conn;
mod decision;
#[cfg(feature = "tower")]
mod http;
mod lease;
mod limiter;
mod multi;
mod raw;
mod script;

use thiserror::Error;

pub use conn::Connection;
pub use decision::{Path, RedisDecision};
pub use lease::LeaseConfig;
pub use limiter::{Policy, RedisLimiter, RedisLimiterBuilder};
pub use multi::{RedisMultiDecision, check_all};
pub use script::{MAX_MARKED_GRANULARITY_NANOS, MAX_WINDOW_MICROS};

use crate::decision::CostError;

/// What can go wrong with the Redis backend. Redis being slow or down is not an error for a
/// check: the [`Policy`] decides then.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A cost of zero or above the limit.
    #[error(transparent)]
    Cost(#[from] CostError),
    /// A quota the backend cannot count exactly (see [`MAX_WINDOW_MICROS`]).
    #[error("quota not supported by the Redis backend: {0}")]
    Quota(String),
    /// A key the backend does not accept (empty, too long, or a prefix with braces).
    #[error("{0}")]
    Key(String),
    /// The server could not be reached, refused the credentials or does not speak Redis.
    #[error("cannot use Redis at {url}: {source}")]
    Connect {
        /// The URL or URLs tried.
        url: String,
        /// What the client reported.
        source: redis::RedisError,
    },
    /// Redis did not decide (for calls that have no policy: refunds, returning leases).
    #[error("Redis did not decide: {0:?}")]
    Unavailable(Degraded),
    /// The server answered with an error.
    #[error("Redis answered with an error: {0}")]
    Redis(#[from] redis::RedisError),
    /// The script answered something slidegate did not expect.
    #[error("unexpected reply from the script: {0}")]
    Reply(String),
}

impl Error {
    fn connect(url: &str, source: redis::RedisError) -> Error {
        Error::Connect {
            url: url.to_owned(),
            source,
        }
    }
}

/// Why Redis did not decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Degraded {
    /// No answer within the deadline.
    Deadline,
    /// The server answered with an error, or the connection failed.
    Failed,
    /// The circuit breaker was open: Redis was not asked.
    BreakerOpen,
}
