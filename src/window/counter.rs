//! The sliding-window counter (Strict, Weighted) and the fixed window: the snapshot
//! [`Ring`] judged by their rule, [`CounterRule`]. Every check of a counter, direct or keyed,
//! runs here.
//!
//! A charge tries the ring's fast path first ([`charge_fast`]: the clock in the newest
//! bucket, the oldest snapshot current), which admits the cost or, under Strict, judges the
//! common denial from the same loads ([`deny_strict`]: a flood's, whose `retry_after` and
//! `reset_after` follow from the window's first, second and last tails), so that a flood of
//! denials costs two slot loads more than an admission, and no CAS, rather than the general
//! reading and its searches. The direct limiter then tries a Strict denial after a burst
//! ([`deny_guessed`]). Anything else goes on with the general loop ([`charge_loop`]) from
//! the loads the fast path made, so a check makes the same atomic accesses either way; the
//! loop first tries Weighted's and the fixed window's common denial on those loads
//! ([`deny_fast`]). The limiters call them without going through the state's dispatch,
//! through which the check stopped being inlined: the direct limiter calls the two itself,
//! keeping the fast path inline and the loop out of line; the keyed limiter calls
//! [`charge`]. Peeks and reservations go through [`decide`].

use crate::algo::Op;
use crate::algo::sliding_counter::CounterRule;
use crate::decision::Decision;
use crate::sync::{AtomicU64, Ordering};
use crate::window::ring::{Fast, FastTail, FastTails, Loads, Reading, Ring, Slots};

/// A counter's check: the common admission or Strict denial (the fast path, its denial
/// inline), else the general loop ([`charge_loop`]). `None` if the ring is retired.
#[inline]
pub(crate) fn charge<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    match charge_fast(ring, rule, &now, n) {
        Ok(decision) => Some(decision),
        Err(loads) => charge_loop(ring, loads, rule, now, n),
    }
}

/// The counter's common admission: [`Ring::fast_read`], judged by
/// [`CounterRule::judge_fast`] and charged by [`Fast::charge`](super::ring::Fast::charge);
/// under Strict, its common denial judged inline on the same reading ([`deny_strict`]).
/// Otherwise, having written nothing, `Err` with what the fast read loaded, if anything, for
/// the general loop ([`charge_loop`]) to go on from.
///
/// Both checks inline the denial. For a keyed check, inline, its denial does less work than
/// through a call, and its admission too (callgrind over a Strict hour of ten buckets and
/// 1000 `u64` keys; `keyed_denied`, `keyed_allowed`). For a direct check, the denial through
/// the general loop took twice the instructions of one inline and 2.2–2.7× governor's time
/// against 1.4–1.7×, for 8% more instructions in an allowed check and no time measured on an
/// AMD EPYC host (`check_denied`, `check_allowed`; on an Intel Xeon host the allowed check
/// measured slower when the denial was first inlined).
#[inline(always)]
pub(crate) fn charge_fast<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Result<Decision, Option<Loads>> {
    let fast = ring.fast_read(rule.granularity, now).map_err(Some)?;
    if rule.is_marked() {
        return charge_fast_marked(&fast, rule, n);
    }
    let Some(decision) = rule.judge_fast(fast.sum, fast.offset, || fast.rest(), n) else {
        if rule.is_strict() {
            return deny_strict(&fast, rule, n);
        }
        return Err(Some(fast.loads()));
    };
    // A lost CAS or a moved `front`: the loop reads afresh.
    if fast.charge(n) {
        Ok(decision)
    } else {
        Err(None)
    }
}

/// The common denial, from the loads of a fast read that declined: Weighted's and the fixed
/// window's, by [`CounterRule::judge_denied_fast`] (a flood's: the general judgement's values,
/// its searches skipped), made on a reading as consistent as [`Ring::read`]'s (the fast
/// read's conditions, then `front` re-checked). A denial writes nothing, so it is returned as
/// judged. `None`, having written nothing, for anything else: the general loop judges it
/// from the same loads. Out of line and called by the general loop, not by [`charge_fast`]:
/// a call there made the inlined admission build the reading in memory, a third more
/// instructions for every allowed check (`check_allowed`).
#[inline(never)]
fn deny_fast<S: Slots>(
    ring: &Ring<'_, S>,
    loads: Loads,
    rule: &CounterRule,
    n: u64,
) -> Option<Decision> {
    let fast = ring.fast_from(rule.granularity, loads)?;
    let at = fast.front_index();
    let decision = rule.judge_denied_fast(
        fast.sum,
        fast.offset,
        || fast.rest_at(at),
        || fast.current_at(at),
        n,
    )?;
    fast.unmoved().then_some(decision)
}

/// Strict's denial when the fast path declined to judge it ([`deny_strict`]: the current
/// bucket empty, as in a flood after a burst, or the first fit inside the window), on the
/// same reading made again from `loads`: [`CounterRule::strict_denied_guessed`] from
/// `guess`, the buckets the last such denial found, else
/// [`CounterRule::strict_denied_searched`], whose finds replace the guess. `None` for the
/// general loop, having written nothing but `guess`. The general reading's searches make up
/// to four times `log₂ N` slot loads for such a denial, the guess two, so that a direct
/// Strict denial costs about the same at any `N` (`check_denied` at `N = 3600`, whose
/// buckets of a second pass during its run).
///
/// `guess` is a hint and nothing more: every value taken from it is confirmed by loads of
/// this reading, which is as consistent as [`Ring::read`]'s (the fast read's conditions,
/// every slot tag-checked, then `front` re-checked), so the decision is the one the
/// searches make on the same loads, whatever a racing thread left in it.
#[inline]
pub(crate) fn deny_guessed<S: Slots>(
    ring: &Ring<'_, S>,
    loads: Loads,
    rule: &CounterRule,
    n: u64,
    guess: &DenialGuess,
) -> Option<Decision> {
    let fast = ring.fast_from(rule.granularity, loads)?;
    if fast.sum + n <= rule.limit {
        return None;
    }
    // The guess is kept as absolute bucket numbers, so that it holds from bucket to bucket.
    let first = fast.front() - rule.buckets;
    let tail = FastTails {
        fast: &fast,
        oldest_at: fast.oldest_index(),
    };
    // Relaxed: a hint, confirmed by this reading's own loads.
    let guessed = (
        guess.newest.load(Ordering::Relaxed).wrapping_sub(first),
        guess.fit.load(Ordering::Relaxed).wrapping_sub(first),
    );
    let (fast_sum, r) = (fast.sum, fast.offset);
    if let Some(decision) = rule.strict_denied_guessed(fast_sum, r, n, tail, guessed) {
        return fast.unmoved().then_some(decision);
    }
    let (decision, (newest, fit)) = rule.strict_denied_searched(fast_sum, r, n, tail)?;
    if !fast.unmoved() {
        return None;
    }
    // Relaxed: as above. Written only when the guess failed, so that a flood of denials
    // on one guess writes nothing.
    guess
        .newest
        .store(first.wrapping_add(newest), Ordering::Relaxed);
    guess.fit.store(first.wrapping_add(fit), Ordering::Relaxed);
    Some(decision)
}

/// What a direct limiter's last denial after a burst found, kept as absolute buckets (`j`
/// of a reading at `front` as bucket `front − N + j`): the bucket after the newest that held
/// anything, and the first bucket of the window in which the cost fitted. See
/// [`deny_guessed`].
#[derive(Debug)]
pub(crate) struct DenialGuess {
    newest: AtomicU64,
    fit: AtomicU64,
}

impl DenialGuess {
    /// No guess: the first denial after a burst searches.
    pub(crate) fn new() -> DenialGuess {
        DenialGuess {
            newest: AtomicU64::new(0),
            fit: AtomicU64::new(0),
        }
    }
}

/// Strict's common denial, judged on the fast path's reading when its cost is not admitted
/// ([`CounterRule::strict_denied_fast`]): the second and current snapshots (their slots
/// found from `front`'s with one division), then `front` again, as [`Ring::read`] would
/// load them, so that the denial is made on a reading as consistent as `read`'s. A denial
/// writes nothing, so it is returned as judged; anything else is `Err` with the loads, for
/// the general loop, having written nothing.
#[inline(always)]
fn deny_strict<S: Slots>(
    fast: &Fast<'_, S>,
    rule: &CounterRule,
    n: u64,
) -> Result<Decision, Option<Loads>> {
    let front_at = fast.front_index();
    let denied = rule.strict_denied_fast(
        fast.sum,
        fast.offset,
        FastTail::<_, false> { fast, front_at },
        FastTail::<_, true> { fast, front_at },
        n,
    );
    match denied {
        Some(decision) if fast.unmoved() => Ok(decision),
        _ => Err(Some(fast.loads())),
    }
}

/// [`charge_fast`] for Strict with marks, written without closures: through them the
/// compiler called the judgement out of line and built the ring in memory for it. It counts
/// `tail(1)` instead of the window's sum when the oldest bucket's mark (loaded with its
/// snapshot) says that bucket has left, and records this admission's mark before the charge
/// makes its cost visible.
#[inline(always)]
fn charge_fast_marked<S: Slots>(
    fast: &Fast<'_, S>,
    rule: &CounterRule,
    n: u64,
) -> Result<Decision, Option<Loads>> {
    let r = fast.offset;
    let used = if rule.has_left(r, fast.oldest_mark()) {
        match fast.rest() {
            Some(rest) => rest,
            None => return Err(Some(fast.loads())),
        }
    } else {
        fast.sum
    };
    if used + n > rule.limit {
        return Err(Some(fast.loads()));
    }
    let mark = fast.record_mark(rule.mark_step);
    let decision = rule.admitted_marked(used, r, n, mark);
    if fast.charge(n) {
        Ok(decision)
    } else {
        Err(None)
    }
}

/// The counter's general check: read (first from `loads`, those of a fast read that
/// declined, if any), judge, charge by CAS, judge again on a lost CAS. `None` if the ring is
/// retired.
#[inline]
pub(crate) fn charge_loop<S: Slots>(
    ring: Ring<'_, S>,
    mut loads: Option<Loads>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    // Marks have no fast denial, and Strict's was tried on these loads by every fast path
    // (`charge_fast`, the line ring's): what it declined, this would decline again. Both go
    // to the general loop without building the fast view again.
    if let Some(declined) = loads
        && !rule.is_marked()
        && !rule.is_strict()
        && let Some(decision) = deny_fast(&ring, declined, rule, n)
    {
        return Some(decision);
    }
    loop {
        let (decision, judged) =
            ring.read_from(loads.take(), rule.granularity, &now, true, |r| {
                judge_and_mark(rule, r, n)
            })?;
        if !decision.is_allowed() || ring.try_charge(judged, n) {
            return Some(decision);
        }
        // Lost the CAS to a concurrent admission (or a retirement): judge again at once. A
        // lost CAS means another check succeeded, so this is lock-free without a backoff,
        // and a backoff's spin only delays the retry (`contended_2_threads`).
    }
}

/// Judges cost `n` at `now()` and applies `op` if it is allowed: a peek writes nothing, a
/// reservation adds to pending. Returns the decision and the reservation's ticket for its
/// commit (see [`Ring::commit_marked`]). `None` if the ring is retired.
#[inline]
pub(crate) fn decide<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
    op: Op,
) -> Option<(Decision, u64)> {
    let peek = op == Op::Peek;
    ring.decide(rule.granularity, now, n, op, |r| {
        let decision = rule
            .judge(r.offset, n, peek, |j| r.tail(j), |j| r.mark(j))
            .measured_from_reading(r.lag);
        // A reservation records its mark when it is committed (`commit`): a released one
        // leaves none behind.
        let ticket = if rule.is_marked() && op == Op::Reserve && decision.is_allowed() {
            r.mark_ticket(rule.mark_step)
        } else {
            0
        };
        (decision, ticket)
    })
}

/// Judges a charge of cost `n` on reading `r`; for Strict with marks, an allowed one records
/// its mark before the caller's CAS. A mark recorded for a reading that then tears, or whose
/// CAS is lost, only keeps its bucket counted longer.
#[inline(always)]
fn judge_and_mark<S: Slots>(rule: &CounterRule, r: &Reading<'_, S>, n: u64) -> Decision {
    if rule.is_marked() {
        return judge_and_mark_marked(rule, r, n);
    }
    rule.judge_unmarked(r.offset, n, false, |j| r.tail(j))
        .measured_from_reading(r.lag)
}

/// [`judge_and_mark`] for Strict with marks, out of line: its closures and judgement
/// inlined into the general loop made the other rules' denials dearer.
#[inline(never)]
fn judge_and_mark_marked<S: Slots>(rule: &CounterRule, r: &Reading<'_, S>, n: u64) -> Decision {
    let decision = rule.judge(r.offset, n, false, |j| r.tail(j), |j| r.mark(j));
    if decision.is_allowed() {
        r.record_mark(rule.mark_step);
    }
    decision.measured_from_reading(r.lag)
}

/// Charges `x` at `now()` whatever the window holds, past the limit as debt, up to `ceiling`
/// units counted in the ring's `N + 1` buckets (pending included): a report's charge, an
/// admission that skips the judgement (`docs/design.md`, "Debt"). One reading, for the clamp
/// and the answer, and one CAS on `cum`, re-read when lost, as an admission's. Under marks it
/// records its mark as an admission does. Returns the units charged and the decision a peek
/// of cost 1 makes on the window with them in it. `None` if the ring is retired.
pub(crate) fn charge_debt<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    x: u64,
    ceiling: u64,
) -> Option<(u64, Decision)> {
    let nb = rule.buckets;
    loop {
        let ((charged, after), judged) = ring.read(rule.granularity, &now, true, |r| {
            let charged = x.min(ceiling.saturating_sub(r.tail(0)));
            let marked = rule.is_marked() && charged > 0;
            let mark = |j: u64| {
                let m = r.mark(j);
                if marked && j == nb {
                    m.max(rule.mark_for(r.offset))
                } else {
                    m
                }
            };
            let after = debt_judged(rule, (r.offset, r.lag), charged, |j| r.tail(j), mark);
            if marked {
                // Before the CAS, as an admission's (see `judge_and_mark`).
                r.record_mark(rule.mark_step);
            }
            (charged, after)
        })?;
        if charged == 0 || ring.try_charge(judged, charged) {
            return Some((charged, after));
        }
    }
}

/// [`charge_debt`]'s common case under Strict, on the fast path's reading (the clock in
/// bucket `front`, the oldest snapshot current): a report of `x ≥ 1` that leaves the window
/// under its limit, charged by the fast path's CAS. The window's sum then holds the charge,
/// in the current bucket, so a peek of 1 after it is an admission's decision with nothing
/// charged. `None`, having written nothing, for anything else (debt, another rule, a lost
/// CAS): [`charge_debt`] decides.
#[inline(always)]
pub(crate) fn charge_debt_fast<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    x: u64,
    ceiling: u64,
) -> Option<(u64, Decision)> {
    if !rule.is_strict() || x == 0 {
        return None;
    }
    let fast = ring.fast_read(rule.granularity, now).ok()?;
    let charged = x.min(ceiling.saturating_sub(fast.sum));
    let used = fast.sum + charged;
    if charged == 0 || used >= rule.limit || !fast.charge(charged) {
        return None;
    }
    Some((charged, rule.admitted(used, fast.offset, 0)))
}

/// [`decide`]'s common peek under Strict, on the fast path's reading: a cost that fits while
/// the current bucket holds something, so that the window clears `N + 1` bucket ends from
/// now. `None`, having written nothing, for anything else.
#[inline(always)]
pub(crate) fn peek_fast<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    if !rule.is_strict() {
        return None;
    }
    let fast = ring.fast_read(rule.granularity, now).ok()?;
    if fast.sum + n > rule.limit {
        return None;
    }
    let current = fast.current_at(fast.front_index())?;
    (current > 0 && fast.unmoved()).then(|| rule.admitted(fast.sum, fast.offset, 0))
}

/// The decision a peek of cost 1 makes after a debt charge of `charged` on a reading at
/// `(offset, lag)` whose tails are `tail` (pending included) and marks `mark` (the current
/// bucket's with the charge's own): the charge counted in the current bucket, which every
/// tail of the window holds. For both rings.
#[inline]
pub(crate) fn debt_judged(
    rule: &CounterRule,
    (offset, lag): (u64, u64),
    charged: u64,
    tail: impl Fn(u64) -> u64,
    mark: impl Fn(u64) -> u64,
) -> Decision {
    let with = |j: u64| tail(j) + if j <= rule.buckets { charged } else { 0 };
    rule.judge(offset, 1, true, with, mark)
        .measured_from_reading(lag)
}

/// What a peek of cost `n` decides on a ring that has admitted nothing, at `now`.
pub(crate) fn peek_fresh(rule: &CounterRule, now: u64, n: u64) -> Decision {
    rule.judge(now % rule.granularity, n, true, |_| 0, |_| 0)
}

/// Frees up to `n` units of room at `now()` (see [`Ring::refund`]): the sliding window's
/// oldest units, or the fixed window's in its current bucket alone. How many were freed;
/// `None` if the ring is retired.
pub(crate) fn refund<S: Slots>(
    ring: Ring<'_, S>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<u64> {
    let fixed = rule.is_fixed_window();
    let marked = rule.is_marked();
    ring.refund(rule.granularity, now, n, |r| {
        if fixed {
            rule.buckets
        } else if marked && r.tail(1) < r.tail(0) && rule.has_left(r.offset, r.mark(0)) {
            // The oldest bucket has left the window: the oldest units it counts are next.
            1
        } else {
            0
        }
    })
}
