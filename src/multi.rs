//! Checks across several limits at once: every limit charged, or none.
//!
//! A request often has to pass several quotas — 10/s *and* 1000/h, per user *and* per tenant
//! — and must be charged to all of them or to none. Charging each in turn and subtracting on
//! a denial is wrong for a snapshot ring: a bucket's snapshot may be taken between the add
//! and the subtract, after which a later window undercounts by the phantom (over-admits).
//!
//! [`check_all`] instead runs a two-phase protocol on the `cum` word of each limit's ring
//! (`window/ring.rs`, "The `cum` word and reservations"):
//! 1. **Reserve**, in the order given: judge the request on the limit, counting every pending
//!    reservation as admitted, and if it is allowed add the cost to the limit's *pending*
//!    field by compare-and-swap from the value judged (re-judging on a lost CAS).
//! 2. If a limit denies: **release** the reservations made so far (`pending −= n`; the
//!    admitted count, and hence every snapshot, is untouched) and report the denial.
//! 3. If all reserved: **commit** each (`count += n, pending −= n`, one CAS).
//!
//! A reservation holds its room against every other check (plain or multi) until it is
//! committed or released, so a concurrent check may be denied for room that a multi-check
//! then gives back: a spurious denial bounded, like every other one, by the overlap of the
//! calls. Two multi-checks that take the same limits in opposite orders can deny each other
//! this way; list limits in one agreed order (say, the widest first) to avoid it.
//!
//! A keyed limit's entry is kept alive by the epoch pin of the whole call, from reservation
//! to commit or release. An idle eviction never retires an entry with a pending reservation;
//! a forced one (`max_keys`, or a quota change of shape) may, and then the reservation counts
//! as admitted before the eviction and is forgotten with the evicted key's other admissions
//! (see `window/ring.rs`).

use core::cell::OnceCell;
use core::time::Duration;

use crate::algo::sliding_counter::Rule;
use crate::clock::Clock;
use crate::decision::{CostError, Decision};
use crate::sync::epoch::Guard;
use crate::window::Op;
use crate::window::state::State;

pub(crate) mod sealed {
    use core::cell::OnceCell;

    use super::{Clock, CostError, Decision, Guard, State};

    /// What a limit answered in [`check_all`](super::check_all): its decision for the cost,
    /// and the reservation if one was made.
    pub struct Judged<'g> {
        pub(crate) decision: Decision,
        pub(crate) reserved: Option<Reserved<'g>>,
    }

    /// A reservation held by [`check_all`](super::check_all).
    #[derive(Clone, Copy)]
    pub struct Reserved<'g> {
        /// The state holding it.
        pub(crate) state: State<'g>,
        /// The algorithm's ticket for a release.
        pub(crate) ticket: u64,
        /// The limit's clock, for stamping a commit or judging a release.
        pub(crate) clock: &'g dyn Clock,
    }

    /// The protocol side of [`Limit`](super::Limit), not part of the public API.
    pub trait Reserve {
        /// Judges cost `n` now. With `reserve`, an allowed cost is reserved on the returned
        /// ring, which stays alive while the epoch guard in `pin` lives (a keyed limit pins it
        /// on first use, so checks over direct limiters alone never pin); without `reserve`,
        /// nothing is written.
        fn judge_cost<'g>(
            &'g self,
            n: u64,
            reserve: bool,
            pin: &'g OnceCell<Guard>,
        ) -> Result<Judged<'g>, CostError>;
    }
}

use sealed::{Judged, Reserved};

/// One limit a request can be checked against with [`check_all`]: a
/// [`SlidingWindow`](crate::SlidingWindow), or one key of a
/// [`KeyedLimiter`](crate::KeyedLimiter) (made by [`KeyedLimiter::key`](crate::KeyedLimiter::key)).
///
/// The trait is sealed: slidegate's limiters implement it, others cannot.
///
/// ```
/// use slidegate::{check_all, KeyedLimiter, Limit, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let global = SlidingWindow::new(Quota::new(100, Duration::from_secs(1))?);
/// let users = KeyedLimiter::new(Quota::new(5, Duration::from_secs(1))?);
/// let alice = users.key(&"alice");
/// let limits: [(&dyn Limit, u64); 2] = [(&global, 1), (&alice, 1)];
/// assert!(check_all(&limits)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Limit: sealed::Reserve {}

/// The answer to a [`check_all`]: allowed (every limit charged) or denied (none charged), which
/// limit denied, and what the caller can do next.
///
/// ```
/// use slidegate::{check_all, clock::ManualClock, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let per_second = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
/// let per_minute = SlidingWindow::with_clock(Quota::new(3, Duration::from_secs(60))?, clock.clone());
/// let d = check_all(&[(&per_second, 2), (&per_minute, 2)])?;
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining(), 0); // per_second has nothing left
/// let d = check_all(&[(&per_second, 1), (&per_minute, 1)])?;
/// assert_eq!(d.denied_by(), Some(0));
/// assert!(d.retry_after().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a rate-limit decision does nothing unless `is_allowed` is consulted"]
pub struct MultiDecision {
    denied_by: Option<usize>,
    remaining: u64,
    retry_after: u64,
}

impl MultiDecision {
    /// Whether every limit admitted the request (and was charged).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// When denied: the index, in the slice given to [`check_all`], of the first limit that
    /// denied. `None` when allowed.
    #[inline]
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// The least [`Decision::remaining`] among the limits: how much more cost could be
    /// admitted by all of them right now, after this decision. `u64::MAX` for no limits.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When denied: the longest [`Decision::retry_after`] among the limits that deny the
    /// request now, the earliest wait after which they would all admit it if nothing else
    /// arrives. `None` when allowed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.denied_by
            .map(|_| Duration::from_nanos(self.retry_after))
    }
}

/// Checks one request against several limits and charges all of them or none.
///
/// Each entry is a limit and the cost to charge it (costs may differ per limit). The limits
/// are judged and reserved in the order given; if one denies, the reservations made so far
/// are released — nothing is charged, and no trace is left once this returns — and the
/// remaining limits are only judged, for the tightest `retry_after`. A cost of zero or above
/// a limit's limit is a [`CostError`], and then nothing is charged either. Lock-free, like a
/// single check; see the module documentation of the source for the protocol.
///
/// ```
/// use slidegate::{check_all, clock::ManualClock, KeyedLimiter, Limit, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let q = |n, secs| Quota::new(n, Duration::from_secs(secs));
/// let users = KeyedLimiter::with_clock(q(2, 1)?, clock.clone());
/// let tenants = KeyedLimiter::with_clock(q(3, 1)?, clock.clone());
/// let hourly = SlidingWindow::with_clock(q(1000, 3600)?, clock.clone());
///
/// let request = |user: &'static str| {
///     let (u, t) = (users.key(&user), tenants.key(&7u32));
///     check_all(&[(&u as &dyn Limit, 1), (&t, 1), (&hourly, 1)])
/// };
/// assert!(request("alice")?.is_allowed());
/// assert!(request("alice")?.is_allowed());
/// assert_eq!(request("alice")?.denied_by(), Some(0)); // alice's 2/s
/// assert!(request("bob")?.is_allowed());
/// assert_eq!(request("carol")?.denied_by(), Some(1)); // tenant 7's 3/s
/// // The denied requests charged nothing anywhere.
/// assert_eq!(hourly.peek().remaining(), 997);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_all(limits: &[(&dyn Limit, u64)]) -> Result<MultiDecision, CostError> {
    // Pinned only if a keyed limit needs it; it keeps reserved entries alive to the end.
    let guard = OnceCell::new();
    let mut held: Vec<(Reserved<'_>, u64)> = Vec::with_capacity(limits.len());
    let mut remaining = u64::MAX;
    for (i, &(limit, n)) in limits.iter().enumerate() {
        let judged = match limit.judge_cost(n, true, &guard) {
            Ok(judged) => judged,
            Err(e) => {
                release(&held);
                return Err(e);
            }
        };
        remaining = remaining.min(judged.decision.remaining());
        if let Some(reserved) = judged.reserved {
            held.push((reserved, n));
            continue;
        }
        // Denied: give back what was reserved before anything else, then judge the rest
        // without reserving, for the longest wait.
        release(&held);
        let mut retry_after = wait(&judged.decision);
        for &(limit, n) in &limits[i + 1..] {
            let d = limit.judge_cost(n, false, &guard)?.decision;
            remaining = remaining.min(d.remaining());
            retry_after = retry_after.max(wait(&d));
        }
        return Ok(MultiDecision {
            denied_by: Some(i),
            remaining,
            retry_after,
        });
    }
    for &(r, n) in &held {
        // `false` only if the state was forcibly retired (a key evicted at `max_keys`, or
        // whose quota changed shape) since the reservation: the reservation counts as
        // admitted before that retirement and is forgotten with everything it forgot. Other
        // limits may be committed already, and counts are never subtracted, so no redo.
        let _ = r.state.commit(n, || r.clock.now().0);
    }
    Ok(MultiDecision {
        denied_by: None,
        remaining,
        retry_after: 0,
    })
}

fn release(held: &[(Reserved<'_>, u64)]) {
    for &(r, n) in held {
        r.state.release(n, r.ticket, || r.clock.now().0);
    }
}

fn wait(d: &Decision) -> u64 {
    d.retry_after().map_or(0, |w| w.as_nanos() as u64)
}

/// Judges cost `n` on `state` under `rule` at `clock`'s now, reserving it if allowed and
/// `reserve` is set (re-judging after a lost CAS). `None` if the state is retired.
#[inline]
pub(crate) fn judge_on<'r>(
    state: State<'r>,
    rule: &Rule,
    clock: &'r dyn Clock,
    n: u64,
    reserve: bool,
) -> Option<Judged<'r>> {
    let op = if reserve { Op::Reserve } else { Op::Peek };
    let (decision, ticket) = state.check(rule, || clock.now().0, n, op)?;
    let reserved = (reserve && decision.is_allowed()).then_some(Reserved {
        state,
        ticket,
        clock,
    });
    Some(Judged { decision, reserved })
}
