//! The direct (single-key) limiter.

use core::cell::OnceCell;
use core::fmt;
use core::time::Duration;

use crossbeam_utils::CachePadded;

use crate::algo::{Op, Rule};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::multi::{self, Limit, sealed};
use crate::quota::Quota;
use crate::sync::epoch::Guard;
use crate::sync::{self, AtomicU64};
use crate::usage::Usage;
use crate::wait;
use crate::window::counter::{self, DenialGuess, charge_fast, charge_loop};
use crate::window::ring::{Loads, Parts, Ring, Wide};
use crate::window::state::{Head, Shape, State};

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
    head: Head,
    cells: Cells,
    /// A ring's snapshot slots (empty for the other algorithms).
    slots: Box<[AtomicU64]>,
    clock: C,
}

/// A direct limiter's atomics besides the ring's slots: the ring's `front` and `goal`, and
/// its `cum` (or GCRA's TAT) on a cache line of its own. Every admission writes `cum`, and
/// sharing its line with `front` and the rest would make every other thread's next check
/// miss on them (`contended_2_threads`). A keyed entry packs them instead (memory matters
/// more there, and one key is rarely hammered by many threads at once).
struct Cells {
    front: AtomicU64,
    goal: AtomicU64,
    /// Read by denials after a burst only, and written when what they find changes: on the
    /// line of `front`, which every check reads and only a fill writes.
    guess: DenialGuess,
    cum: CachePadded<AtomicU64>,
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
        let rule = Rule::new(quota);
        let shape = Shape::of(&rule).wide();
        // A fresh ring is established at front = N + 1 (see `Ring::initial`).
        let (start, slots) = match shape {
            Shape::Ring { buckets, .. } => (
                buckets + 1,
                (0..=buckets as usize)
                    .map(|s| AtomicU64::new(Ring::<Wide>::initial_slot(buckets, s)))
                    .collect(),
            ),
            Shape::Log { .. } | Shape::Gcra(_) => (0, Box::default()),
        };
        SlidingWindow {
            head: Head::new(shape),
            cells: Cells {
                front: AtomicU64::new(start),
                goal: AtomicU64::new(start),
                guess: DenialGuess::new(),
                cum: CachePadded::new(AtomicU64::new(0)),
            },
            slots,
            rule,
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
        self.decide(1, Op::Peek).0
    }

    /// What a check of cost `n` would decide now, without charging anything: whether `n`
    /// fits, `remaining` (what could be admitted now), and, when it would be denied, the
    /// `retry_after` after which it would fit if nothing else arrives. [`peek`](Self::peek) is
    /// `peek_n(1)`. The costs `check_n` refuses, it refuses too.
    ///
    /// A caller that charges usage known only afterwards (a response's tokens) asks this
    /// before starting, then charges what was used.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::with_clock(Quota::new(10, Duration::from_secs(60))?, ManualClock::new());
    /// limiter.check_n(7)?;
    /// assert!(limiter.peek_n(3)?.is_allowed());
    /// assert!(!limiter.peek_n(4)?.is_allowed());
    /// assert_eq!(limiter.peek().remaining(), 3); // nothing was charged
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n(&self, n: u64) -> Result<Decision, CostError> {
        self.rule.validate(n)?;
        if matches!(self.head, Head::Ring { .. })
            && let Some(decision) =
                counter::peek_fast(self.ring(), &self.rule.counter, || self.clock.now().0, n)
        {
            return Ok(decision);
        }
        Ok(self.decide(n, Op::Peek).0)
    }

    /// Gives back up to `n` units of room now, for cost admitted earlier that should not
    /// count (say, a request that failed upstream), and returns how many units it freed.
    ///
    /// One meaning for every [`Mode`](crate::Mode): the window holds up to `n` fewer units
    /// from now on, taken from the *oldest* units it still counts (never more than it holds).
    /// For the exact log and the sliding-window counter the refunded request's own units
    /// therefore stay until they would have left, and the oldest ones leave early instead:
    /// the same room now, and afterwards a limiter that can only be stricter than an exact
    /// refund (never looser). For GCRA, whose state is one arrival time, it moves that time
    /// back by `n` emission intervals, not before now: exact. For the fixed window the
    /// current window's count drops by up to `n`.
    ///
    /// Refunds racing each other are never looser than their reported total refunded in
    /// turn. One case over-reports (known, not yet fixed): two refunds of the counter racing
    /// while a check moves the ring into a new bucket can count the same oldest unit twice,
    /// so the limiter is stricter than their total says, never looser.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::with_clock(Quota::new(3, Duration::from_secs(1))?, ManualClock::new());
    /// assert!(limiter.check_n(3).unwrap().is_allowed());
    /// assert!(!limiter.check().is_allowed());
    /// assert_eq!(limiter.refund(1), 1); // the upstream call failed: give one back
    /// assert!(limiter.check().is_allowed());
    /// assert_eq!(limiter.refund(10), 3); // never more than the window holds
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64) -> u64 {
        self.state()
            .refund(&self.rule, || self.clock.now().0, n)
            .expect("a direct limiter's state is never retired")
    }

    /// Charges `n` units of usage that already happened (a response's tokens, bytes sent),
    /// whatever the window holds: past the limit as *debt*, after which checks deny until
    /// enough of it has left the window. Never denies. Returns what was charged and the
    /// state after it: [`Usage::remaining`], and [`Usage::available_after`], when the key
    /// is under its limit again.
    ///
    /// A report that would take the window's usage past
    /// [`Quota::usage_ceiling`] is charged up to it, and the rest is [`Usage::clamped`].
    /// `record(0)` charges nothing and answers the state. Semantics per algorithm:
    /// `docs/design.md`, "Usage known afterwards". The exact log counts a report up to its
    /// limit only for now (its debt record is not built yet): the rest is clamped.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::with_clock(Quota::new(100, Duration::from_secs(60))?, clock.clone());
    /// assert!(limiter.check_n(40)?.is_allowed());
    /// // The response used 130 tokens: 30 over the limit.
    /// let usage = limiter.record(130);
    /// assert_eq!((usage.charged(), usage.remaining()), (130, 0));
    /// assert!(!limiter.check().is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record(&self, n: u64) -> Usage {
        let now = || self.clock.now().0;
        let ceiling = self.rule.quota.usage_ceiling();
        let fast = match self.head {
            Head::Ring { .. } => {
                counter::charge_debt_fast(self.ring(), &self.rule.counter, now, n, ceiling)
            }
            _ => None,
        };
        let (charged, after) = fast
            .or_else(|| self.state().record(&self.rule, now, n))
            .expect("a direct limiter's state is never retired");
        Usage::new(charged, 0, n - charged, after)
    }

    /// Blocks until cost `n` is admitted, then returns that (allowed) decision: for
    /// client-side throttling of outbound calls. Between checks it waits each denial's
    /// `retry_after` through the clock's [`sleep`](Clock::sleep) (a thread sleep; a
    /// [`ManualClock`](crate::clock::ManualClock) advances instead). A cost of zero or above
    /// the limit is an error at once: no wait would admit it. A denial whose `retry_after`
    /// is `u64::MAX` ns (the exact log or GCRA at the end of its clock's range, where time
    /// stops) is returned as it is: no wait would admit it either.
    ///
    /// ```
    /// use slidegate::{clock::{Clock, ManualClock, Nanos}, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
    /// for _ in 0..3 {
    ///     limiter.wait(1)?;
    /// }
    /// // The third call waited until the first two left the window (Strict: 1.1 s).
    /// assert_eq!(clock.now(), Nanos(1_100_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait(&self, n: u64) -> Result<Decision, CostError> {
        self.wait_with_jitter(n, Duration::ZERO)
    }

    /// [`SlidingWindow::wait`], adding to each wait a random jitter of up to `jitter`, so
    /// that clients denied together do not retry in lockstep.
    ///
    /// ```
    /// use slidegate::{clock::{Clock, ManualClock}, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindow::with_clock(Quota::new(1, Duration::from_secs(1))?, clock.clone());
    /// limiter.wait_with_jitter(1, Duration::from_millis(50))?;
    /// limiter.wait_with_jitter(1, Duration::from_millis(50))?;
    /// let waited = clock.now().as_u64();
    /// assert!((1_100_000_000..=1_150_000_000).contains(&waited));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_with_jitter(&self, n: u64, jitter: Duration) -> Result<Decision, CostError> {
        self.rule.validate(n)?;
        wait::block(&self.clock, || Ok(self.acquire(n)), jitter)
    }

    /// Waits asynchronously until cost `n` is admitted, and returns that decision (feature
    /// `tokio`), as [`SlidingWindow::wait`] does: between checks it awaits the clock's
    /// [`sleep_async`](Clock::sleep_async), tokio's timer (a
    /// [`ManualClock`](crate::clock::ManualClock) advances instead and is ready at once). Use
    /// it with a [`TokioClock`](crate::clock::TokioClock) to test on tokio's paused time, or
    /// with the default clock in production. Dropping the future charges nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slidegate::{clock::{Clock, Nanos, TokioClock}, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, TokioClock::new());
    /// for _ in 0..3 {
    ///     limiter.until_ready(1).await?;
    /// }
    /// assert_eq!(limiter.clock().now(), Nanos(1_100_000_000));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready(&self, n: u64) -> Result<Decision, CostError> {
        self.until_ready_with_jitter(n, Duration::ZERO).await
    }

    /// [`SlidingWindow::until_ready`] with a random jitter of up to `jitter` added to each
    /// wait (feature `tokio`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slidegate::{clock::{Clock, TokioClock}, Quota, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let limiter = SlidingWindow::with_clock(Quota::new(1, Duration::from_secs(1))?, TokioClock::new());
    /// limiter.until_ready_with_jitter(1, Duration::from_millis(50)).await?;
    /// limiter.until_ready_with_jitter(1, Duration::from_millis(50)).await?;
    /// assert!(limiter.clock().now().as_u64() >= 1_100_000_000);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready_with_jitter(
        &self,
        n: u64,
        jitter: Duration,
    ) -> Result<Decision, CostError> {
        self.rule.validate(n)?;
        wait::ready(&self.clock, || Ok(self.acquire(n)), jitter).await
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> Quota {
        self.rule.quota
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Checks and charges `n`, already validated: the counter's common admission
    /// ([`charge_fast`]) inline, its general loop out of line in
    /// [`SlidingWindow::acquire_slow`], the other algorithms in
    /// [`SlidingWindow::charge_out_of_line`].
    #[inline(always)]
    fn acquire(&self, n: u64) -> Decision {
        if !matches!(self.head, Head::Ring { .. }) {
            return self.charge_out_of_line(n);
        }
        match charge_fast(self.ring(), &self.rule.counter, || self.clock.now().0, n) {
            Ok(decision) => decision,
            Err(loads) => self.acquire_slow(n, loads),
        }
    }

    /// [`SlidingWindow::acquire`] past the counter's fast path: its general loop
    /// ([`charge_loop`], from what the fast path loaded). Out of line to keep the inlined
    /// check small (either way measures the same in `check_allowed` and `check_denied`).
    #[inline(never)]
    fn acquire_slow(&self, n: u64, loads: Option<Loads>) -> Decision {
        if let Some(declined) = loads
            && self.rule.counter.is_strict()
            && let Some(decision) = counter::deny_guessed(
                &self.ring(),
                declined,
                &self.rule.counter,
                n,
                &self.cells.guess,
            )
        {
            return decision;
        }
        self.acquire_loop(n, loads)
    }

    /// The counter's general loop ([`charge_loop`]), from what the fast path loaded.
    #[inline(always)]
    fn acquire_loop(&self, n: u64, loads: Option<Loads>) -> Decision {
        match charge_loop(
            self.ring(),
            loads.as_ref().map(sync::copy_by_words),
            &self.rule.counter,
            || self.clock.now().0,
            n,
        ) {
            Some(decision) => sync::copy_by_words(&decision),
            None => unreachable!("a direct limiter's state is never retired"),
        }
    }

    /// Checks and charges `n` on an algorithm other than the counter. Out of line, and called
    /// straight from `acquire` rather than behind `acquire_slow`, which would be a second
    /// call (`algorithms_direct`). Returning the decision alone lets it be written where the
    /// caller returns it: returned in a tuple and copied out, it was reloaded with wide loads
    /// of what had just been stored in narrower pieces, a store-forwarding stall.
    #[inline(never)]
    fn charge_out_of_line(&self, n: u64) -> Decision {
        self.decide(n, Op::Charge).0
    }

    /// Judges `n` now under `op`, returning the decision and the reservation ticket.
    fn decide(&self, n: u64, op: Op) -> (Decision, u64) {
        self.state()
            .check(&self.rule, || self.clock.now().0, n, op)
            .expect("a direct limiter's state is never retired")
    }

    /// The total cost ever admitted (wrapping at 2³²; 0 for GCRA, which keeps no count). For
    /// tests and metrics.
    #[doc(hidden)]
    pub fn admitted_total(&self) -> u64 {
        self.state().admitted()
    }

    /// The state: the head's algorithm on this limiter's atomics.
    #[inline]
    fn state(&self) -> State<'_> {
        self.head.state(|| self.parts(), || &self.cells.cum)
    }

    /// The ring on this limiter's atomics (meaningful for the counter's heads only).
    #[inline]
    fn ring(&self) -> Ring<'_> {
        Ring::from_parts(self.parts(), self.slots.len() as u64 - 1)
    }

    /// Where this limiter's ring words are (meaningful for the counter's heads only).
    #[inline]
    fn parts(&self) -> Parts<'_> {
        let cells = &self.cells;
        (&cells.front, &cells.goal, &cells.cum, &self.slots)
    }
}

impl<C: Clock> sealed::Reserve for SlidingWindow<C> {
    // A direct limiter's state always exists: `make_and_reserve` is the default, this.
    fn judge_cost<'g>(
        &'g self,
        n: u64,
        op: Op,
        _pin: &'g OnceCell<Guard>,
        held: &mut sealed::ReservedCosts<'g>,
    ) -> Result<sealed::Judged, CostError> {
        self.rule.validate(n)?;
        match multi::judge_on(self.state(), &self.rule, &self.clock, n, op, held) {
            Some(judged) => Ok(judged),
            None => unreachable!("a direct limiter's state is never retired"),
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
