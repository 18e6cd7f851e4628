//! The exact sliding log's rule: cost `n` is admitted at `t` iff the units admitted in
//! `(t − W, t]`, plus those reserved, plus `n`, are at most `L`.
//!
//! The rule reads the units a log holds through [`Units`], by their distance `d ≥ 1` below
//! the log's count (`d = 1` is the newest unit). Each unit carries a *stamp*: `t + 1` for a
//! unit admitted at time `t` ns, `0` for "before time began" (outside every window, even
//! while `t < W`). Stamps never decrease with position (the log keeps them so), so the units
//! inside a window are the newest ones, and
//!
//! > inside + pending + n ≤ L  ⇔  the unit `k = L − pending − n + 1` below the count is
//! > outside the window,
//!
//! which makes the test one load. `remaining` needs the number of units inside: a galloping
//! search from a hint of where the window starts ([`count_inside`]), a few probes in
//! steady traffic (the window's oldest unit moves about one position per check), `log L` at
//! worst. A unit claimed by an admission but not yet written counts as inside: its stamp
//! will be at least every written one's.
//!
//! Times are clamped to [`MAX_TIME`] (about 73 years from the clock's origin, what a stamp's
//! 61 bits hold): there time stops for the log, units stop leaving, which errs toward
//! denial, and a denial that waits on a unit that never leaves says so with a `retry_after`
//! of `u64::MAX` ns.

use crate::decision::{Decision, NEVER};

/// The latest time (ns) the log distinguishes; later readings count as it. A stamp is
/// `t + 1` in 61 bits.
pub(crate) const MAX_TIME: u64 = (1 << 61) - 2;

/// The `retry_after` of a check that gave up waiting on a unit still being written (or the
/// window, if shorter): that admission's last stores are moments away, after which the same
/// request may fit at once.
const RETRY_UNWRITTEN: u64 = 1_000;

/// The exact log's rule for `limit` units per `window` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogRule {
    pub(crate) limit: u64,
    pub(crate) window: u64,
}

/// One unit of a log, as [`Units::unit`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Written, with its stamp.
    Written(u64),
    /// Claimed by an admission that has not written it yet.
    Unwritten,
}

/// The units a log holds, as a judgement reads them.
pub(crate) trait Units {
    /// The unit `d` positions below the count (`1 ≤ d ≤ capacity`); `None` if the reading
    /// went stale (the log moved on since its count was read).
    fn unit(&self, d: u64) -> Option<Unit>;

    /// The distance below the count of the newest unit a past admission found outside the
    /// window: where a search for the window's oldest unit starts. Only a guess: every
    /// conclusion comes from [`Units::unit`].
    fn hinted(&self) -> u64;

    /// The number of units the log keeps (at least the limit).
    fn capacity(&self) -> u64;
}

/// What a judgement reads besides the units: the time judged at, the pending cost, the cost
/// and the newest unit's stamp (written).
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    pub(crate) t: u64,
    pub(crate) pending: u64,
    pub(crate) n: u64,
    pub(crate) last_stamp: u64,
}

/// Whether a unit stamped `stamp` is inside the window `(t − window, t]`.
#[inline]
pub(crate) fn inside(stamp: u64, t: u64, window: u64) -> bool {
    stamp != 0 && stamp.saturating_add(window) > t + 1
}

/// The time a stamp stands for (0 for "never"): a lower bound for later stamps.
#[inline]
pub(crate) fn time_of(stamp: u64) -> u64 {
    stamp.saturating_sub(1)
}

/// The time a check reading `now` judges at, given the newest unit's stamp: never before
/// that unit (time does not go backwards as the log sees it), never past [`MAX_TIME`].
#[inline]
pub(crate) fn judged_time(now: u64, last_stamp: u64) -> u64 {
    now.min(MAX_TIME).max(time_of(last_stamp))
}

impl LogRule {
    pub(crate) fn new(limit: u64, window: u64) -> LogRule {
        LogRule { limit, window }
    }

    /// How long until a unit stamped `stamp` leaves the window of `t` (0 if it is outside);
    /// `u64::MAX` ns (never) if it is still inside at [`MAX_TIME`], where time stops.
    #[inline]
    fn leaves_after(&self, stamp: u64, t: u64) -> u64 {
        let window = self.window;
        if !inside(stamp, t, window) {
            0
        } else if inside(stamp, MAX_TIME, window) {
            NEVER
        } else {
            stamp.saturating_add(window) - (t + 1)
        }
    }

    /// How long until the window is empty if nothing else arrives; pending cost counts as
    /// admitted now (it may be committed now), so it leaves a whole window from now.
    #[inline]
    pub(crate) fn reset_after(&self, view: &View) -> u64 {
        if view.pending > 0 {
            self.window
        } else {
            self.leaves_after(view.last_stamp, view.t)
        }
    }

    /// The decision for `view.n` on `view`, as if charged when allowed, and the number of
    /// units inside the window; `None` if the reading turned out to be stale.
    pub(crate) fn judge(&self, view: &View, units: &impl Units) -> Option<(Decision, u64)> {
        let (limit, pending, n, window) = (self.limit, view.pending, view.n, self.window);
        let cap = units.capacity();
        if pending + n > limit {
            // No unit leaving makes room: only the reservations can, within a window.
            let known = u64::from(inside(view.last_stamp, view.t, window));
            let within = count_inside(units, view.t, window, known, cap + 1, true)?;
            let remaining = limit.saturating_sub(within + pending);
            return Some((Decision::denied(limit, remaining, window, window), within));
        }
        // The unit that must be outside for `n` to fit: `k` below the count, 1 ≤ k ≤ limit.
        let k = limit - pending - n + 1;
        if !inside(view.last_stamp, view.t, window) {
            // The newest unit is outside, so all are (stamps are sorted).
            return Some((self.allowed(view, 0), 0));
        }
        // A unit `d ≤ k` below the count found outside proves `k` outside too (it is older),
        // with the count of units inside in the same few probes.
        let hinted = units.hinted();
        if 1 < hinted && hinted <= k && !probe(units, view.t, window, hinted)? {
            let within = count_inside(units, view.t, window, 1, hinted, false)?;
            return Some((self.allowed(view, within), within));
        }
        let k_stamp = if k == 1 {
            view.last_stamp
        } else {
            match units.unit(k)? {
                Unit::Written(stamp) => stamp,
                // The newest unit is written, so every older one is: the log moved on.
                Unit::Unwritten => return None,
            }
        };
        if inside(k_stamp, view.t, window) {
            let within = count_inside(units, view.t, window, k, cap + 1, true)?;
            // `k` inside means fewer than `n` fit; the minimum keeps that so even if the
            // count saw a concurrent refund that the test of `k` did not.
            let remaining = limit.saturating_sub(within + pending).min(n - 1);
            let retry = self.leaves_after(k_stamp, view.t);
            let denied = Decision::denied(limit, remaining, retry, self.reset_after(view));
            return Some((denied, within));
        }
        // The newest unit (`d = 1`) is inside and `k` outside.
        let within = count_inside(units, view.t, window, 1, k, false)?;
        Some((self.allowed(view, within), within))
    }

    /// The allowed decision when `within ≤ k − 1 = limit − pending − n` units are inside.
    /// The new units (or the reservation, which counts as admitted now) leave a whole window
    /// from now.
    #[inline]
    fn allowed(&self, view: &View, within: u64) -> Decision {
        let remaining = self.limit - view.pending - view.n - within;
        Decision::allowed(self.limit, remaining, self.window)
    }

    /// An allowed `decision` of `view` as a peek reports it: nothing was taken, so the room
    /// there is now.
    #[inline]
    pub(crate) fn uncharged(&self, view: &View, decision: &Decision) -> Decision {
        Decision::allowed(
            self.limit,
            decision.remaining() + view.n,
            self.reset_after(view),
        )
    }

    /// The conservative denial of a check that gave up waiting for the newest unit to be
    /// written: within a window every unit now inside has left, the one being written too
    /// (it was stamped no later than now), so the wait is at most `W`.
    #[inline]
    pub(crate) fn unwritten_denial(&self) -> Decision {
        let retry = RETRY_UNWRITTEN.min(self.window);
        Decision::denied(self.limit, 0, retry, self.window)
    }
}

/// Whether the unit `d` below the count (`d ≥ 1`) is inside the window of `t`: a unit
/// not yet written counts as inside. `None` if the reading is stale.
#[inline]
fn probe(units: &impl Units, t: u64, window: u64, d: u64) -> Option<bool> {
    Some(match units.unit(d)? {
        Unit::Written(stamp) => inside(stamp, t, window),
        Unit::Unwritten => true,
    })
}

/// The number of units inside the window `(t − window, t]`, given that the unit `inside_d`
/// below the count is inside (0: none known) and the unit `outside_d` below is outside
/// (`capacity + 1`: none known). Gallops from the `from_inside` end, then bisects: O(log) of
/// the distance. `None` if the reading is stale.
pub(crate) fn count_inside(
    units: &impl Units,
    t: u64,
    window: u64,
    mut inside_d: u64,
    mut outside_d: u64,
    from_inside: bool,
) -> Option<u64> {
    let mut step = 1;
    while outside_d - inside_d > 1 {
        let d = if from_inside {
            (inside_d + step).min(outside_d - 1)
        } else {
            outside_d.saturating_sub(step).max(inside_d + 1)
        };
        let is_inside = probe(units, t, window, d)?;
        if is_inside {
            inside_d = d;
        } else {
            outside_d = d;
        }
        if is_inside != from_inside {
            break;
        }
        step *= 2;
    }
    while outside_d - inside_d > 1 {
        let d = inside_d + (outside_d - inside_d) / 2;
        if probe(units, t, window, d)? {
            inside_d = d;
        } else {
            outside_d = d;
        }
    }
    Some(inside_d)
}
