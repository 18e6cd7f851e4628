//! GCRA: see /tmp/specs/gcra.md (to be replaced by the protocol's docs).

use crate::decision::Decision;
use crate::window::Op;

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

impl GcraRule {
    /// The rule for `limit` units per `window` ns (both ≥ 1, `window < 2⁶³`).
    pub(crate) fn new(limit: u64, window: u64) -> GcraRule {
        let interval = window.div_ceil(limit);
        GcraRule {
            limit,
            interval,
            tolerance: interval.saturating_mul(limit),
        }
    }
}

/// A GCRA cell: the theoretical arrival time in one atomic word.
pub(crate) struct Gcra {}

impl Gcra {
    /// A cell that has admitted nothing.
    pub(crate) fn new() -> Gcra {
        Gcra {}
    }

    /// Judges cost `n` (`1 ≤ n ≤ limit`, validated by the caller) at `now()`, applying `op`
    /// if allowed. Returns the decision and, for an allowed `Op::Reserve`, a ticket for
    /// [`Gcra::release`] (0 otherwise). `None` if the cell is retired.
    pub(crate) fn check(
        &self,
        rule: &GcraRule,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<(Decision, u64)> {
        let _ = (rule, now, n, op);
        unimplemented!()
    }

    /// Gives back a reservation of `n` made with `ticket`, at time `now`. Nothing on a
    /// retired cell.
    pub(crate) fn release(&self, rule: &GcraRule, n: u64, ticket: u64, now: u64) {
        let _ = (rule, n, ticket, now);
        unimplemented!()
    }

    /// Frees up to `n` units of room now; returns how many were freed.
    pub(crate) fn refund(&self, rule: &GcraRule, now: u64, n: u64) -> u64 {
        let _ = (rule, now, n);
        unimplemented!()
    }

    /// Retires the cell if it is as empty as a fresh one at `now`; `true` if this call did.
    pub(crate) fn retire_idle(&self, now: u64) -> bool {
        let _ = now;
        unimplemented!()
    }

    /// Retires the cell whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        unimplemented!()
    }

    /// Whether the cell is retired.
    pub(crate) fn is_retired(&self) -> bool {
        unimplemented!()
    }

    /// The time (ns) from which the cell was last charged, a recency for LRU choices.
    pub(crate) fn last_active(&self, rule: &GcraRule) -> u64 {
        let _ = rule;
        unimplemented!()
    }
}
