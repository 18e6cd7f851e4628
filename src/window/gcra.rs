//! GCRA's cell: the theoretical arrival time (TAT) in one atomic word, judged by the rule
//! in [`crate::algo::gcra`].
//!
//! # State
//! One `AtomicU64`: bits 0..63 the TAT, in ns since the clock's origin (at most
//! [`MAX_TIME`], about 292 years), bit 63 [`RETIRED`]. A fresh cell holds TAT 0, as empty as
//! can be. Every TAT below the time of a reading is the same state to it
//! (`max(TAT, t) = t`): this is what makes every argument below work with "equal for every
//! later time".
//!
//! # Check ([`Gcra::check`])
//! Load the TAT (Acquire), read the clock, judge ([`GcraRule::judge`]); a charge or a
//! reservation is one compare-and-swap from the TAT judged to `new` (AcqRel). A lost CAS
//! backs off and retries with a *fresh clock reading*: the winner's reading may be newer
//! than ours, and judging its TAT at our older time would err toward denial and report a
//! `retry_after` measured from the past; reading after the Acquire that saw its TAT makes
//! our time at least the winner's, so each decision is the sequential rule's at its CAS
//! (linearisable, for a clock monotone across threads). A peek loads once and writes nothing;
//! a denial writes nothing.
//!
//! # Reservations and release ([`Gcra::release`], for `check_all`)
//! A reservation is a charge: `check(.., Op::Reserve)` CASes the TAT to `new` and returns it
//! as the *ticket*. Committing it is doing nothing. Releasing it must leave no trace: the cell
//! should end as if the reservation had never been made. Write `start = ticket − n·T` (the TAT
//! the reservation started from, up to times below its reading, which are all the same
//! state) and let the operations after it be admissions `x ↦ max(x, t_j) + c_j`. Their
//! composition is `f(x) = max(x + a, m)` with `m ≤ now + a` when every `t_j ≤ now` (each
//! `t_j` plus the costs after it). The TAT now is `S = f(ticket) ≥ ticket + a`, the TAT
//! without us would be `R = f(start) = max(S − n·T, m)` when `S = ticket + a`. So
//!
//! > subtracting `Δ = min(n·T, ticket − now)` (nothing if `now ≥ ticket`) leaves a TAT
//! > that is never below `R` up to times `≥ now`, and equals it when `now ≤ start`:
//!
//! `S − Δ ≥ ticket + a − (ticket − now) = now + a ≥ m`, and `S − Δ ≥ S − n·T`. The release
//! gives back exactly the part of the reservation that has not drained by `now`.
//!
//! **Not all of `n·T`.** Subtracting all of `n·T` whenever `now ≤ ticket` over-admits: with
//! `T = 10`, `L = 3`, a reservation of 2 at `t = 0` (ticket 20, start 0), then a check of 1 at
//! `t = 15` (TAT 30, allowed), then a release at 15: that leaves TAT 10 (3 units of room at
//! 15), but without the reservation the check would have left `max(0, 15) + 10 = 25` (2 units).
//! Any admission at a time in `(start, ticket]` clamps in the world without the reservation and
//! not in ours. Also, `now` must bound the time of every admission folded into the TAT the
//! release swaps, so it is read *after* each load of the TAT (Acquire, pairing with the
//! admissions' Release CAS that follows their own clock read): [`Gcra::release`] takes the
//! clock, not a reading taken before it was called (an admission between the two could have
//! read a later time and clamped).
//!
//! Limit of the argument: a refund that races an outstanding reservation and frees more than
//! the cell holds besides it (emptying the cell down to `now`) cannot tell reserved time from
//! admitted time, so it may free the reservation's room, which a release then gives back a
//! second time (at most `n` units, once). The ring keeps reservations in a separate field and
//! has no such case; here it would cost a second word per cell.
//!
//! # Refund ([`Gcra::refund`])
//! "Free up to `n` units of room now": `TAT' = max(TAT − n·T, now)` by CAS loop, and never
//! above the TAT (a TAT already below `now` is empty; `max(TAT − n·T, now)` would *raise* it to
//! `now`, harmlessly but as a write, so it writes nothing then). Reports the room
//! freed in whole units: the rise of `remaining` at `now`, `⌊(now+τ−TAT')/T⌋ −
//! ⌊(now+τ−TAT)/T⌋`. It is `n` when the cell held `n·T` beyond `now`, otherwise the
//! `⌈(TAT − now)/T⌉` units it held, a partly drained unit counting as one (`⌊(TAT − TAT')/T⌋`
//! would report 1 for a cell whose `remaining` rose by 2). A stale `now`
//! only floors at an older time, which is the same state to later readings.
//!
//! # Retirement (for stores that evict)
//! - [`Gcra::retire_idle`]: if `TAT ≤ now`, CAS `TAT → TAT | RETIRED`. A cell with
//!   `TAT ≤ now` answers every check at `now` or later exactly as a fresh one
//!   (`max(TAT, t) = t = max(0, t)`); the CAS succeeding proves nothing changed since the
//!   load, and a check that raced it either changed the TAT first (failing the retirement)
//!   or fails its own CAS (expecting a TAT without the bit) and finds the key's new cell: no
//!   admission is lost. As for the ring, this needs clock readings after the retirement to be
//!   no older than `now` (a clock monotone across threads).
//! - [`Gcra::retire_now`]: `fetch_or`, whatever the cell holds (forced eviction).
//!
//! The loom models in `loom-tests/` (gcra_*.rs) check these claims on small cases.

use crate::algo::Op;
use crate::algo::gcra::{GcraRule, MAX_TIME};
use crate::decision::Decision;
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::window::cum::{self, RETIRED};

const _: () = assert!(MAX_TIME < RETIRED, "a TAT never reaches the retired bit");

/// A GCRA cell: the theoretical arrival time in one atomic word (see the module docs),
/// viewed where its owner keeps it. A fresh cell's word is 0.
#[derive(Clone, Copy)]
pub(crate) struct Gcra<'a> {
    tat: &'a AtomicU64,
}

impl<'a> Gcra<'a> {
    /// The cell kept in `tat`.
    #[inline]
    pub(crate) fn view(tat: &'a AtomicU64) -> Gcra<'a> {
        Gcra { tat }
    }

    /// Judges cost `n` (`1 ≤ n ≤ limit`, validated by the caller) at `now()`, applying `op`
    /// if allowed. Returns the decision and, for an allowed `Op::Reserve`, a ticket for
    /// [`Gcra::release`] (0 otherwise). `None` if the cell is retired.
    ///
    /// Always inlined, so that the decision is built where the limiters return it: out of
    /// line, its caller copied the returned decision with wide loads of what had just been
    /// stored in narrower pieces, a store-forwarding stall (`algorithms_direct`).
    #[inline(always)]
    pub(crate) fn check(
        &self,
        rule: &GcraRule,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<(Decision, u64)> {
        let backoff = Backoff::new();
        // Acquire: pairs with the Release of the CAS that wrote it, so the clock read next is
        // no older than the writer's (for a clock monotone across threads).
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat & RETIRED != 0 {
                return None;
            }
            let verdict = rule.judge(tat, now(), n, op);
            let Some(next) = verdict.next else {
                return Some((verdict.decision, 0));
            };
            // AcqRel: Release publishes our clock reading before the TAT it justifies;
            // Acquire on failure orders the retry's clock reading after the winner's.
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let ticket = if op == Op::Reserve { next } else { 0 };
                    return Some((verdict.decision, ticket));
                }
                Err(seen) => {
                    tat = seen;
                    backoff.spin();
                }
            }
        }
    }

    /// Gives back a reservation of `n` that wrote `ticket`: subtracts the part of it that
    /// has not drained by `now()`, `min(n·T, ticket − now)` (see "Reservations and release"
    /// for why not all of `n·T`, and why the clock is read here). Nothing on a retired cell.
    pub(crate) fn release(&self, rule: &GcraRule, n: u64, ticket: u64, now: impl Fn() -> u64) {
        let backoff = Backoff::new();
        // Acquire: pairs with the Release of every admission in the TAT, so the clock read
        // next is no older than any of their readings.
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat & RETIRED != 0 {
                return;
            }
            let Some(next) = rule.released(tat, ticket, now(), n) else {
                return;
            };
            // AcqRel: Release publishes the release like an admission; Acquire on failure
            // orders the next clock reading after what the failed CAS saw.
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(seen) => {
                    tat = seen;
                    backoff.spin();
                }
            }
        }
    }

    /// Charges `x` at `now()` whatever the TAT says, past the tolerance as debt: `TAT =
    /// max(TAT, t) + x'·T` with `x'` at most `ceiling` less the usage `⌈(max(TAT, t) − t)/T⌉`
    /// and at most what `MAX_TIME` leaves room for. Returns `x'` and the decision a peek of
    /// cost 1 makes after it. `None` if the cell is retired.
    pub(crate) fn charge_debt(
        &self,
        rule: &GcraRule,
        now: impl Fn() -> u64,
        x: u64,
        ceiling: u64,
    ) -> Option<(u64, Decision)> {
        let backoff = Backoff::new();
        // Acquire: as in `check`, so the clock read next is no older than the writer's.
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat & RETIRED != 0 {
                return None;
            }
            let t = now().min(MAX_TIME);
            let base = tat.max(t);
            let used = (base - t).div_ceil(rule.interval);
            let charged = x
                .min(ceiling.saturating_sub(used))
                .min((MAX_TIME - base) / rule.interval);
            // At most `MAX_TIME`: `charged·T ≤ MAX_TIME − base`.
            let next = base + charged * rule.interval;
            let after = rule.judge(next, t, 1, Op::Peek).decision;
            if charged == 0 {
                return Some((0, after));
            }
            // AcqRel: as an admission's CAS in `check`.
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((charged, after)),
                Err(seen) => {
                    tat = seen;
                    backoff.spin();
                }
            }
        }
    }

    /// Frees up to `n` units of room now; returns how many were freed (the rise of
    /// `remaining` at `now`, whole units). 0 on a retired cell.
    pub(crate) fn refund(&self, rule: &GcraRule, now: u64, n: u64) -> u64 {
        let backoff = Backoff::new();
        // Relaxed: the CAS below validates it; a refund depends on no other memory.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            if tat & RETIRED != 0 {
                return 0;
            }
            let Some(next) = rule.refunded(tat, now, n) else {
                return 0;
            };
            // AcqRel: Release publishes the refund like an admission (a later check's
            // Acquire then reads a time no older than `now`); Acquire orders it after the
            // admissions it gives back.
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return rule.freed(tat, next),
                Err(seen) => {
                    tat = seen;
                    backoff.spin();
                }
            }
        }
    }

    /// Retires the cell if it is as empty as a fresh one at `now`; `true` if this call did.
    pub(crate) fn retire_idle(&self, now: u64) -> bool {
        // Acquire: pairs with the Release of the admissions in the TAT (see `check`).
        let tat = self.tat.load(Ordering::Acquire);
        if tat & RETIRED != 0 || tat > now {
            return false;
        }
        // AcqRel: success proves nothing changed since the load; the Release orders the
        // retirement before the store's unlinking of the entry that follows.
        self.tat
            .compare_exchange(tat, tat | RETIRED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Retires the cell whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        cum::retire_now(self.tat)
    }

    /// Whether the cell is retired.
    pub(crate) fn is_retired(&self) -> bool {
        cum::is_retired(self.tat)
    }

    /// The time (ns) from which the cell was last charged, a recency for LRU choices:
    /// `TAT − τ`, a lower bound on the last charge's reading (its TAT was at most `τ` past
    /// it), exact for a charge that used the whole tolerance. Among cells of one rule it
    /// orders them by TAT, i.e. by when each becomes as empty as a fresh one.
    pub(crate) fn last_active(&self, tolerance: u64) -> u64 {
        // Relaxed: a heuristic; a stale value only makes a worse eviction choice.
        (self.tat.load(Ordering::Relaxed) & !RETIRED).saturating_sub(tolerance)
    }

    /// The TAT, for tests.
    #[cfg(test)]
    fn tat(&self) -> u64 {
        self.tat.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The sequential specification, written from the rule's formulas with no shared code:
    /// a TAT and the rule, in `u128`, the TAT capped as the cell caps it.
    #[derive(Clone, Copy, Debug)]
    struct Model {
        tat: u128,
        l: u128,
        t_: u128,
        tau: u128,
    }

    impl Model {
        fn new(rule: &GcraRule) -> Model {
            let t_ = u128::from(rule.interval);
            Model {
                tat: 0,
                l: u128::from(rule.limit),
                t_,
                tau: u128::from(rule.limit) * t_,
            }
        }

        /// (allowed, remaining, retry_after, reset_after) of cost `n` at `t`, charging if
        /// `charge` and allowed.
        fn check(&mut self, t: u64, n: u64, charge: bool) -> (bool, u64, u64, u64) {
            let (t, n) = (u128::from(t), u128::from(n));
            let base = self.tat.max(t);
            let new = base + n * self.t_;
            let reset = |tat: u128| tat.saturating_sub(t) as u64;
            // The TAT may reach `t + τ`, and never pass the end of time.
            let top = (t + self.tau).min(u128::from(MAX_TIME));
            if new <= top {
                if !charge {
                    return (true, ((top - base) / self.t_) as u64, 0, reset(self.tat));
                }
                self.tat = new;
                return (true, ((top - new) / self.t_) as u64, 0, reset(self.tat));
            }
            let remaining = (top.saturating_sub(base) / self.t_) as u64;
            let retry = if new > u128::from(MAX_TIME) {
                u64::MAX
            } else {
                (new - self.tau - t) as u64
            };
            (false, remaining, retry, reset(self.tat))
        }

        fn room(&self, t: u64) -> u128 {
            let t = u128::from(t);
            (t + self.tau - self.tat.max(t)) / self.t_
        }

        /// Frees up to `n` units of room at `t`; the rise of the room.
        fn refund(&mut self, t: u64, n: u64) -> u64 {
            let before = self.room(t);
            let empty = u128::from(t);
            if self.tat > empty {
                self.tat = self.tat.saturating_sub(u128::from(n) * self.t_).max(empty);
            }
            let freed = self.room(t) - before;
            assert!(freed <= u128::from(n) && freed <= self.l);
            freed as u64
        }
    }

    fn decision_of(d: Decision) -> (bool, u64, u64, u64) {
        let retry = d.retry_after().map_or(0, |r| r.as_nanos() as u64);
        (
            d.is_allowed(),
            d.remaining(),
            retry,
            d.reset_after().as_nanos() as u64,
        )
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Check(u64),
        Peek(u64),
        Refund(u64),
        /// Reserve `n`, then admit `m` after `gap` ns, then release at that time.
        ReserveRelease {
            n: u64,
            m: u64,
            gap: u64,
        },
        /// Reserve and keep (a committed reservation).
        Reserve(u64),
    }

    fn step(limit: u64, interval: u64) -> impl Strategy<Value = (u64, Step)> {
        let cost = 1..=limit;
        let kind = prop_oneof![
            3 => cost.clone().prop_map(Step::Check),
            1 => cost.clone().prop_map(Step::Peek),
            1 => (1..=limit + 2).prop_map(Step::Refund),
            2 => (cost.clone(), cost.clone(), 0..=2 * interval * limit)
                .prop_map(|(n, m, gap)| Step::ReserveRelease { n, m, gap }),
            1 => cost.prop_map(Step::Reserve),
        ];
        // Clock steps: mostly within a few intervals, sometimes a window or more.
        let dt = prop_oneof![4 => 0..=2 * interval, 1 => 0..=3 * interval * limit];
        (dt, kind)
    }

    fn scenario() -> impl Strategy<Value = (u64, u64, Vec<(u64, Step)>)> {
        (1u64..=5, 1u64..=60).prop_flat_map(|(limit, window)| {
            let rule = GcraRule::new(limit, window);
            (
                Just(limit),
                Just(window),
                prop::collection::vec(step(limit, rule.interval), 1..40),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Every decision equals the sequential model's; a release leaves exactly the state
        /// without its reservation when nothing drained (`now ≤ ticket − n·T`) and never
        /// less than it otherwise (for every time from `now` on).
        #[test]
        fn cell_equals_the_sequential_model((limit, window, steps) in scenario()) {
            let rule = GcraRule::new(limit, window);
            let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
            let mut model = Model::new(&rule);
            let mut t = 0u64;
            for (dt, s) in steps {
                t += dt;
                match s {
                    Step::Check(n) | Step::Peek(n) | Step::Reserve(n) => {
                        let op = match s {
                            Step::Check(_) => Op::Charge,
                            Step::Peek(_) => Op::Peek,
                            _ => Op::Reserve,
                        };
                        let (d, ticket) = cell.check(&rule, || t, n, op).unwrap();
                        let want = model.check(t, n, op != Op::Peek);
                        prop_assert_eq!(decision_of(d), want, "{:?} at {}", s, t);
                        if op == Op::Reserve && d.is_allowed() {
                            prop_assert_eq!(ticket, cell.tat());
                        }
                    }
                    Step::Refund(n) => {
                        prop_assert_eq!(cell.refund(&rule, t, n), model.refund(t, n));
                    }
                    Step::ReserveRelease { n, m, gap } => {
                        let (d, ticket) = cell.check(&rule, || t, n, Op::Reserve).unwrap();
                        let ghost = model;
                        prop_assert_eq!(decision_of(d), model.check(t, n, true));
                        let t2 = t + gap;
                        let (dm, _) = cell.check(&rule, || t2, m, Op::Charge).unwrap();
                        prop_assert_eq!(decision_of(dm), model.check(t2, m, true));
                        if !d.is_allowed() {
                            t = t2;
                            continue;
                        }
                        cell.release(&rule, n, ticket, || t2);
                        // The state without the reservation: the admission, if it was made,
                        // applied alone (a denied one left no trace in either).
                        let mut without = ghost;
                        if dm.is_allowed() {
                            let t2 = u128::from(t2);
                            without.tat = without.tat.max(t2) + u128::from(m) * without.t_;
                        }
                        let got = u128::from(cell.tat()).max(u128::from(t2));
                        let exact = without.tat.max(u128::from(t2));
                        prop_assert!(got >= exact, "release over-admits: {got} < {exact}");
                        let start = u128::from(ticket) - u128::from(n * rule.interval);
                        if u128::from(t2) <= start {
                            prop_assert_eq!(got, exact, "release not exact");
                        }
                        model.tat = u128::from(cell.tat());
                        t = t2;
                    }
                }
                prop_assert_eq!(u128::from(cell.tat()), model.tat);
            }
        }
    }

    #[test]
    fn a_fresh_cell_admits_a_burst_of_the_limit_at_time_zero() {
        let rule = GcraRule::new(3, 30);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        for left in [2, 1, 0] {
            let (d, _) = cell.check(&rule, || 0, 1, Op::Charge).unwrap();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
        }
        let (d, _) = cell.check(&rule, || 0, 1, Op::Charge).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Some(core::time::Duration::from_nanos(10)));
        assert_eq!(d.reset_after(), core::time::Duration::from_nanos(30));
    }

    #[test]
    fn limit_one_and_one_nanosecond_windows() {
        let rule = GcraRule::new(1, 1);
        assert_eq!((rule.interval, rule.tolerance), (1, 1));
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        assert!(
            cell.check(&rule, || 0, 1, Op::Charge)
                .unwrap()
                .0
                .is_allowed()
        );
        assert!(
            !cell
                .check(&rule, || 0, 1, Op::Charge)
                .unwrap()
                .0
                .is_allowed()
        );
        assert!(
            cell.check(&rule, || 1, 1, Op::Charge)
                .unwrap()
                .0
                .is_allowed()
        );
    }

    #[test]
    fn the_largest_limit_and_window_do_not_overflow() {
        let max_limit = crate::quota::MAX_LIMIT;
        let huge = (1u64 << 63) - 1;
        for (limit, window) in [(max_limit, huge), (3, huge), (1, huge), (max_limit, 1)] {
            let rule = GcraRule::new(limit, window);
            let word = AtomicU64::new(0);
            let cell = Gcra::view(&word);
            let mut model = Model::new(&rule);
            // A full burst at t = 0, then checks at a gap of years and near the end of time.
            for t in [0, 0, 1 << 40, 1 << 62, huge - 1, huge] {
                let (d, _) = cell.check(&rule, || t, limit, Op::Charge).unwrap();
                assert_eq!(
                    decision_of(d),
                    model.check(t, limit, true),
                    "{limit} {window} {t}"
                );
                assert!(!cell.is_retired(), "a TAT reached the RETIRED bit");
                assert_eq!(u128::from(cell.tat()), model.tat);
            }
        }
    }

    #[test]
    fn time_stops_at_max_time_and_the_limit_still_holds() {
        // 2 per 10 s, checked at one instant within τ of the end of time, and past it: two
        // admitted, then denials that say the cost never fits. With the TAT capped at
        // `MAX_TIME` instead, every one of the 1000 checks was admitted.
        let rule = GcraRule::new(2, 10_000_000_000);
        for t in [MAX_TIME - 2_000_000_000, u64::MAX] {
            let word = AtomicU64::new(0);
            let cell = Gcra::view(&word);
            let mut model = Model::new(&rule);
            let admitted = (0..1000)
                .filter(|_| {
                    let (d, _) = cell.check(&rule, || t, 1, Op::Charge).unwrap();
                    assert_eq!(decision_of(d), model.check(t.min(MAX_TIME), 1, true));
                    d.is_allowed()
                })
                .count();
            assert!(admitted <= 2, "at {t}: {admitted} admitted");
            let (d, _) = cell.check(&rule, || t, 1, Op::Peek).unwrap();
            assert!(!d.is_allowed());
            assert_eq!(
                d.retry_after(),
                Some(core::time::Duration::from_nanos(u64::MAX))
            );
        }
    }

    #[test]
    fn refund_frees_whole_units_and_never_raises_the_tat() {
        let rule = GcraRule::new(4, 40);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let _ = cell.check(&rule, || 0, 2, Op::Charge).unwrap();
        // At 5 the cell holds 1.5 units: remaining 2; refunding 2 empties it: remaining 4.
        assert_eq!(cell.refund(&rule, 5, 2), 2);
        assert_eq!(cell.tat(), 5);
        assert_eq!(
            cell.refund(&rule, 7, 1),
            0,
            "an empty cell has nothing to free"
        );
        assert_eq!(cell.tat(), 5, "a refund raised the TAT");
        let _ = cell.check(&rule, || 10, 3, Op::Charge).unwrap();
        assert_eq!(cell.refund(&rule, 10, 1), 1);
        assert_eq!(cell.tat(), 30);
    }

    #[test]
    fn release_gives_back_only_the_undrained_part() {
        // Subtracting all of `n·T` over-admits here: T = 10, L = 3.
        let rule = GcraRule::new(3, 30);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let (_, ticket) = cell.check(&rule, || 0, 2, Op::Reserve).unwrap();
        assert_eq!(ticket, 20);
        assert!(
            cell.check(&rule, || 15, 1, Op::Charge)
                .unwrap()
                .0
                .is_allowed()
        );
        cell.release(&rule, 2, ticket, || 15);
        // Without the reservation the check leaves 25; subtracting all 20 would leave 10.
        assert_eq!(cell.tat(), 25);
        // Released at once, it is exact.
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let (_, ticket) = cell.check(&rule, || 0, 2, Op::Reserve).unwrap();
        cell.release(&rule, 2, ticket, || 0);
        assert_eq!(cell.tat(), 0);
        // Drained entirely: nothing to give back.
        let (_, ticket) = cell.check(&rule, || 0, 1, Op::Reserve).unwrap();
        cell.release(&rule, 1, ticket, || 10);
        assert_eq!(cell.tat(), 10);
    }

    #[test]
    fn a_clock_behind_the_state_is_judged_at_the_newest_time_seen() {
        let rule = GcraRule::new(2, 20);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let _ = cell.check(&rule, || 100, 2, Op::Charge).unwrap();
        // TAT 120, so a time ≥ 100 was seen; a reading of 0 is judged at 100, and its wait
        // counted on the clock that read 0: a unit fits again at 110.
        let (d, _) = cell.check(&rule, || 0, 1, Op::Charge).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Some(core::time::Duration::from_nanos(110)));
        assert_eq!(d.reset_after(), core::time::Duration::from_nanos(120));
    }

    #[test]
    fn retirement() {
        let rule = GcraRule::new(2, 20);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let _ = cell.check(&rule, || 0, 1, Op::Charge).unwrap();
        assert!(!cell.retire_idle(9), "retired while holding a unit");
        assert!(cell.retire_idle(10));
        assert!(cell.is_retired());
        assert!(!cell.retire_idle(10) && !cell.retire_now());
        assert!(cell.check(&rule, || 10, 1, Op::Charge).is_none());
        assert_eq!(cell.refund(&rule, 10, 1), 0);
        cell.release(&rule, 1, 10, || 0);
        assert_eq!(cell.tat(), 10 | RETIRED);
        assert_eq!(cell.last_active(rule.tolerance), 0);
        let word = AtomicU64::new(0);
        let cell = Gcra::view(&word);
        let _ = cell.check(&rule, || 50, 2, Op::Charge).unwrap();
        assert_eq!(cell.last_active(rule.tolerance), 50);
        assert!(cell.retire_now());
    }
}
