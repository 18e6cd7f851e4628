//! GCRA, the generic cell rate algorithm, as governor implements it: the rule on one
//! theoretical arrival time (TAT).
//!
//! The rule is governor's virtual scheduling (ITU-T I.371's GCRA, as in governor's
//! `src/gcra.rs`): with emission interval `T = ⌈W / L⌉` ns and tolerance `τ = L·T`, a cost
//! `n` at time `t` is admitted iff `new − t ≤ τ`, where `base = max(TAT, t)` and
//! `new = base + n·T`; admitting it moves the TAT to `new`. One unit of room comes back every
//! `T`; an idle cell holds a burst of `L`. It is one implementation of the token bucket and
//! of the leaky bucket as a meter. Every TAT below the time of a reading is the same state to
//! it (`max(TAT, t) = t`).
//!
//! A reading older than the state: every TAT was written by a judgement at some `t_w` with
//! `TAT − t_w ≤ τ`, so `TAT − τ` is a time already seen. A reading below it (a clock set back,
//! or skew between cores) is judged at `TAT − τ` instead — a reading older than one already
//! seen is treated as the newest seen, as far as the TAT can tell. For a monotone clock this
//! never applies, and it changes no admission, only the `retry_after` of a denial.
//!
//! Arithmetic is exact: the judgement works in `u128` (`n·T` and `t + τ` may exceed `u64`
//! for windows near 2⁶³ ns); a TAT never passes [`MAX_TIME`] (292 years from the clock's
//! origin; the cell keeps its word's top bit for retirement): readings count as at most
//! `MAX_TIME`, and a cost whose TAT would pass it is denied with a `retry_after` of
//! `u64::MAX` ns (never: time stops there). Capping the TAT instead would let every check
//! through once it reached the cap.

use crate::algo::Op;
use crate::decision::{Decision, NEVER};

/// The largest TAT (ns): times are below 2⁶³, so that the word that holds a TAT has its top
/// bit free.
pub(crate) const MAX_TIME: u64 = (1 << 63) - 1;

/// GCRA's parameters for a quota of `limit` units per `window` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GcraRule {
    /// The quota's limit `L`: the largest burst.
    pub(crate) limit: u64,
    /// The emission interval `T = ⌈window / limit⌉` ns: one unit of room comes back every `T`.
    pub(crate) interval: u64,
    /// The tolerance `τ = L·T`: a cost is admitted iff the new TAT is at most `τ` after now.
    pub(crate) tolerance: u64,
}

/// What [`GcraRule::judge`] decided: the decision, and the TAT to write if it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The decision to report.
    pub(crate) decision: Decision,
    /// The TAT an allowed charge or reservation writes (capped at `MAX_TIME`).
    pub(crate) next: Option<u64>,
}

impl GcraRule {
    /// The rule for `limit` units per `window` ns (both ≥ 1, `window < 2⁶³`).
    pub(crate) fn new(limit: u64, window: u64) -> GcraRule {
        GcraRule::from_interval(limit, window.div_ceil(limit))
    }

    /// The rule for `limit` units at one per `interval` ns (what a keyed entry keeps).
    #[inline]
    pub(crate) fn from_interval(limit: u64, interval: u64) -> GcraRule {
        GcraRule {
            limit,
            interval,
            tolerance: interval.saturating_mul(limit),
        }
    }

    /// `τ` exactly (`L·T` may exceed `u64` by less than `L`; the field saturates).
    #[inline]
    fn tau(&self) -> u128 {
        u128::from(self.limit) * u128::from(self.interval)
    }

    /// The pure rule: cost `n` (`1 ≤ n ≤ L`) at time `t` against `tat` (not retired).
    #[inline]
    pub(crate) fn judge(&self, tat: u64, t: u64, n: u64, op: Op) -> Verdict {
        let (interval, tau) = (u128::from(self.interval), self.tau());
        // A reading older than the state's newest lower bound is judged at that bound, and
        // waits are measured from the reading: on its clock, that is how long they are.
        let reading = u128::from(t.min(MAX_TIME));
        let t = reading.max(u128::from(tat).saturating_sub(tau));
        let tat = u128::from(tat);
        let base = tat.max(t);
        let new = base + u128::from(n) * interval;
        let units = |room: u128| u64::try_from(room / interval).unwrap_or(u64::MAX);
        let wait = |until: u128| u64::try_from(until.saturating_sub(reading)).unwrap_or(u64::MAX);
        let l = self.limit;
        // The latest TAT the cell can hold: `t + τ`, and never past `MAX_TIME`, where time
        // stops (a TAT capped there would let every later check through).
        let top = (t + tau).min(u128::from(MAX_TIME));
        if new <= top {
            if op == Op::Peek {
                let d = Decision::allowed(l, units(top - base), wait(tat));
                return Verdict {
                    decision: d,
                    next: None,
                };
            }
            let d = Decision::allowed(l, units(top - new), wait(new));
            return Verdict {
                decision: d,
                // `new ≤ MAX_TIME`.
                next: Some(new as u64),
            };
        }
        let remaining = units(top.saturating_sub(base));
        // Past `MAX_TIME` the cost never fits: time stops there.
        let retry = if new > u128::from(MAX_TIME) {
            NEVER
        } else {
            wait(new - tau)
        };
        let d = Decision::denied(l, remaining, retry, wait(tat));
        Verdict {
            decision: d,
            next: None,
        }
    }

    /// The TAT a refund of `n` at `now` leaves, `max(TAT − n·T, now)`; `None` for a TAT
    /// that is empty at `now` already (a refund would only raise it).
    #[inline]
    pub(crate) fn refunded(&self, tat: u64, now: u64, n: u64) -> Option<u64> {
        (tat > now).then(|| tat.saturating_sub(n.saturating_mul(self.interval)).max(now))
    }

    /// The units a refund that moved the TAT from `tat` to `next` (`now ≤ next < tat`) freed:
    /// `⌈(tat − next)/T⌉`, the last one perhaps partly drained already. Without debt it is
    /// the rise of `remaining` at `now`; in debt (`TAT` past `now + τ`) `remaining` stays 0
    /// until the debt is paid, and the units still come off the usage.
    #[inline]
    pub(crate) fn freed(&self, tat: u64, next: u64) -> u64 {
        (tat - next).div_ceil(self.interval)
    }

    /// The TAT a release of a reservation of `n` that wrote `ticket` leaves at `now`: less
    /// the part of it that has not drained by `now`, `min(n·T, ticket − now)`; `None` if all
    /// of it has (see the cell's "Reservations and release").
    #[inline]
    pub(crate) fn released(&self, tat: u64, ticket: u64, now: u64, n: u64) -> Option<u64> {
        let undrained = ticket
            .saturating_sub(now)
            .min(n.saturating_mul(self.interval));
        (undrained > 0).then(|| tat.saturating_sub(undrained))
    }
}
