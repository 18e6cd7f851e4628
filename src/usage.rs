//! Usage known afterwards: what a report or a commit did, and the state after it
//! (`docs/design.md`, "Usage known afterwards").

use core::time::Duration;

use crate::decision::Decision;

/// What [`record`](crate::SlidingWindow::record), a commit or a cancel did, and the state of
/// the limit after it.
///
/// A report is usage that already happened: it is charged whatever the window holds, past the
/// limit as *debt*, which makes checks deny until enough of it has left the window. Up to a
/// bound that depends on the quota alone ([`Quota::usage_ceiling`](crate::Quota::usage_ceiling)),
/// beyond which the rest is reported as [`Usage::clamped`], never wrapped.
///
/// ```
/// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let quota = Quota::new(10, Duration::from_secs(1))?;
/// let limiter = SlidingWindow::with_clock(quota, clock.clone());
///
/// // A response used 25 tokens against a limit of 10 per second.
/// let usage = limiter.record(25);
/// assert_eq!(usage.charged(), 25);
/// assert_eq!(usage.remaining(), 0);
/// assert!(!limiter.check().is_allowed());
/// // Strict: the debt leaves with its bucket, a window and a bucket later.
/// assert_eq!(usage.available_after(), Duration::from_millis(1100));
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Usage {
    charged: u64,
    given_back: u64,
    clamped: u64,
    limit: u64,
    remaining: u64,
    available_after: u64,
    reset_after: u64,
}

impl Usage {
    /// What was charged (`charged`), given back and clamped, and the state after it, as a
    /// check of cost 1 would find it then (`after`, a peek's decision).
    pub(crate) fn new(charged: u64, given_back: u64, clamped: u64, after: Decision) -> Usage {
        Usage {
            charged,
            given_back,
            clamped,
            limit: after.limit(),
            remaining: after.remaining(),
            available_after: after.retry_after().map_or(0, |d| d.as_nanos() as u64),
            reset_after: after.reset_after().as_nanos() as u64,
        }
    }

    /// Units charged unconditionally by this call (a report, or a commit's excess over its
    /// estimate), past the limit as debt.
    #[inline]
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Units given back by this call (a commit below its estimate, or a cancel).
    #[inline]
    pub fn given_back(&self) -> u64 {
        self.given_back
    }

    /// Units of a report the limit could not count: beyond its usage ceiling. 0 unless a
    /// report or an excess was huge.
    #[inline]
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// How much cost could be admitted now, after this call: 0 while the window's usage is at
    /// or above the limit.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When a check of cost 1 would be admitted, if nothing else arrives: zero if now. After
    /// a report past the limit, when enough of the debt has left the window.
    #[inline]
    pub fn available_after(&self) -> Duration {
        Duration::from_nanos(self.available_after)
    }

    /// How long until the window holds nothing, debt included, if nothing else arrives.
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
