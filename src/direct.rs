//! The direct (single-key) limiter.

use core::cell::OnceCell;
use core::fmt;

use crate::algo::sliding_counter::Rule;
use crate::clock::{Clock, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::multi::{self, Limit, sealed};
use crate::quota::Quota;
use crate::sync::Backoff;
use crate::sync::epoch::Guard;
use crate::window::ring::{Effect, Ring};

/// A lock-free sliding-window rate limiter for one key.
///
/// `Send + Sync`: share it by reference or in an `Arc` and call it from any number of
/// threads. A check is a clock read, four loads and one compare-and-swap; a denial writes
/// nothing.
///
/// ```
/// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let quota = Quota::new(3, Duration::from_secs(1))?.with_granularity(Duration::from_millis(250))?;
/// let limiter = SlidingWindow::with_clock(quota, clock.clone());
///
/// assert!(limiter.check_n(3).unwrap().is_allowed());
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// // The 3 admitted at t = 0 sit in bucket [0, 250 ms): Strict counts it until 1.25 s.
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(1250)));
///
/// clock.advance(Duration::from_millis(1250));
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
pub struct SlidingWindow<C = QuantaClock> {
    rule: Rule,
    ring: Ring,
    clock: C,
}

impl SlidingWindow<QuantaClock> {
    /// A limiter for `quota` on the default clock.
    ///
    /// ```
    /// use slidegate::{Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::new(Quota::new(100, Duration::from_secs(1))?);
    /// assert!(limiter.check().is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        SlidingWindow::with_clock(quota, QuantaClock::new())
    }
}

impl<C: Clock> SlidingWindow<C> {
    /// A limiter for `quota` reading time from `clock`.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::with_clock(Quota::new(1, Duration::from_secs(1))?, ManualClock::new());
    /// assert!(limiter.check().is_allowed());
    /// assert!(!limiter.check().is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        SlidingWindow {
            rule: Rule::new(quota),
            ring: Ring::new(quota.buckets()),
            clock,
        }
    }

    /// Checks and, if allowed, charges a cost of 1.
    ///
    /// ```
    /// use slidegate::{Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::new(Quota::new(2, Duration::from_secs(60))?);
    /// assert_eq!(limiter.check().remaining(), 1);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check(&self) -> Decision {
        self.acquire(1)
    }

    /// Checks and, if allowed, charges a cost of `n`. A cost of zero or above the limit is an
    /// error, not a denial: no wait would ever admit it.
    ///
    /// ```
    /// use slidegate::{CostError, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::new(Quota::new(10, Duration::from_secs(1))?);
    /// assert!(limiter.check_n(7)?.is_allowed());
    /// assert!(!limiter.check_n(4)?.is_allowed());
    /// assert!(matches!(limiter.check_n(11), Err(CostError::ExceedsLimit { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, CostError> {
        self.rule.validate(n)?;
        Ok(self.acquire(n))
    }

    /// What a check of cost 1 would decide now, without charging anything. `remaining` is
    /// what could be admitted now.
    ///
    /// ```
    /// use slidegate::{Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::new(Quota::new(5, Duration::from_secs(1))?);
    /// assert_eq!(limiter.peek().remaining(), 5);
    /// assert_eq!(limiter.peek().remaining(), 5);
    /// limiter.check();
    /// assert_eq!(limiter.peek().remaining(), 4);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn peek(&self) -> Decision {
        let rule = &self.rule;
        let decided = self.ring.decide(
            rule.granularity,
            || self.clock.now().0,
            Effect::None,
            |r| rule.judge(r.offset, 1, true, |j| r.tail(j)),
        );
        decided.expect("a direct limiter's ring is never retired")
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> Quota {
        self.rule.quota
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    // Hand-written rather than through `Ring::decide` (which the keyed limiter and
    // `check_all` use): routed through it, the allowed check measured 20–27 ns instead of
    // 12 ns (`cargo bench --bench check -- check_allowed`), because it stops being inlined.
    #[inline]
    fn acquire(&self, n: u64) -> Decision {
        let backoff = Backoff::new();
        loop {
            let Some((decision, reading)) = self.ring.read(
                self.rule.granularity,
                || self.clock.now().0,
                true,
                |r| self.rule.judge(r.offset, n, false, |j| r.tail(j)),
            ) else {
                unreachable!("a direct limiter's ring is never retired")
            };
            if !decision.is_allowed() || self.ring.try_charge(&reading, n) {
                return decision;
            }
            // Lost the CAS to a concurrent admission: judge again against the new total.
            backoff.spin();
        }
    }

    /// The total cost this limiter has ever admitted (wrapping at 2³²). For tests and metrics.
    #[doc(hidden)]
    pub fn admitted_total(&self) -> u64 {
        self.ring.admitted()
    }
}

impl<C: Clock> sealed::Reserve for SlidingWindow<C> {
    fn judge_cost<'g>(
        &'g self,
        n: u64,
        reserve: bool,
        _pin: &'g OnceCell<Guard>,
    ) -> Result<sealed::Judged<'g>, CostError> {
        self.rule.validate(n)?;
        match multi::judge_on(&self.ring, &self.rule, || self.clock.now().0, n, reserve) {
            Some(judged) => Ok(judged),
            None => unreachable!("a direct limiter's ring is never retired"),
        }
    }
}

impl<C: Clock> Limit for SlidingWindow<C> {}

impl<C> fmt::Debug for SlidingWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("quota", &self.rule.quota)
            .finish_non_exhaustive()
    }
}
