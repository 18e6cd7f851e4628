//! What a limiter answers.

use core::time::Duration;

use thiserror::Error;

/// The `retry_after` (ns) of a denial no wait can end: an algorithm whose clock reached the
/// end of the range it tells apart, where time stops (the exact log, GCRA). `wait` and
/// `until_ready` return such a denial instead of sleeping for it.
pub(crate) const NEVER: u64 = u64::MAX;

/// The answer to one check: allowed or not, and what the caller can do next.
///
/// ```
/// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
/// let d = limiter.check();
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining(), 1);
/// assert_eq!(d.limit(), 2);
/// assert_eq!(d.retry_after(), None);
///
/// limiter.check();
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// // Strict mode, 10 buckets of 100 ms: the two admitted at t = 0 leave the window at 1.1 s.
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(1100)));
/// assert_eq!(denied.reset_after(), Duration::from_millis(1100));
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a rate-limit decision does nothing unless `is_allowed` is consulted"]
pub struct Decision {
    // A whole word rather than a `bool`: with a `bool` and seven bytes of padding, moving a
    // decision through the check path copied the padding with wide loads over the narrow
    // store of the flag, a store-forwarding stall on every check.
    allowed: u64,
    limit: u64,
    remaining: u64,
    retry_after: u64,
    reset_after: u64,
}

// SAFETY: five `u64` fields, nothing else: 40 bytes, 8-aligned, no padding.
unsafe impl crate::sync::Words for Decision {}

impl Decision {
    /// An admission under a quota of `limit`, with `remaining` left and the window empty
    /// again `reset_after` ns from now.
    #[inline]
    pub(crate) fn allowed(limit: u64, remaining: u64, reset_after: u64) -> Decision {
        Decision {
            allowed: 1,
            limit,
            remaining,
            retry_after: 0,
            reset_after,
        }
    }

    /// A denial under a quota of `limit`, with `remaining` left now, the same request
    /// admitted `retry_after` ns from now at the earliest and the window empty again
    /// `reset_after` ns from now.
    #[inline]
    pub(crate) fn denied(
        limit: u64,
        remaining: u64,
        retry_after: u64,
        reset_after: u64,
    ) -> Decision {
        Decision {
            allowed: 0,
            limit,
            remaining,
            retry_after,
            reset_after,
        }
    }

    /// This decision, made at a time `lag` ns after the clock reading it was asked at (a
    /// reading older than one the state has seen is judged at the newer time), with its
    /// durations measured from that reading: on the caller's clock the same request is
    /// admitted, and the window empties, `lag` ns later than from the time judged.
    #[inline]
    pub(crate) fn measured_from_reading(mut self, lag: u64) -> Decision {
        // The common case first, so that a reading not behind skips the additions below
        // (`check_denied`).
        if lag == 0 {
            return self;
        }
        if !self.is_allowed() {
            self.retry_after = self.retry_after.saturating_add(lag);
        }
        // An empty window is empty at the earlier reading too.
        if self.reset_after != 0 {
            self.reset_after = self.reset_after.saturating_add(lag);
        }
        self
    }

    /// Whether the request was admitted (and, for a check, charged).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed != 0
    }

    /// How much more cost could be admitted right now, after this decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When denied: the earliest wait after which the same request would be admitted if
    /// nothing else arrives. `None` when allowed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        (!self.is_allowed()).then(|| Duration::from_nanos(self.retry_after))
    }

    /// How long until the window holds nothing again, if nothing else arrives (zero if it is
    /// empty already).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after)
    }

    /// The quota's limit.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// A cost that can never be checked: distinct from a denial, which is about timing.
///
/// ```
/// use slidegate::{CostError, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let limiter = SlidingWindow::new(Quota::new(5, Duration::from_secs(1))?);
/// assert_eq!(limiter.check_n(0), Err(CostError::Zero));
/// assert_eq!(limiter.check_n(6), Err(CostError::ExceedsLimit { cost: 6, limit: 5 }));
/// assert!(limiter.check_n(5).unwrap().is_allowed());
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostError {
    /// A cost of zero: nothing to check.
    #[error("cost must be at least 1, got 0")]
    Zero,
    /// A cost above the limit can never be admitted, however long the caller waits
    /// (governor's `InsufficientCapacity`).
    #[error("cost {cost} is above the limit {limit} and can never be admitted")]
    ExceedsLimit {
        /// The cost asked for.
        cost: u64,
        /// The quota's limit.
        limit: u64,
    },
}
