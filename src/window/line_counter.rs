//! The sliding-window counter (Strict, Weighted) and the fixed window on the line ring: the
//! one-word [`Line`] judged by their rule, [`CounterRule`], as [`super::counter`] judges
//! the three-word ring. Every check of a key in the inline table runs here.
//!
//! A charge tries the fast path first ([`charge_fast`]: the clock in the newest bucket, no
//! flag set, the snapshots it needs current), which admits the cost or returns the common
//! denial from the same loads; anything else goes on with the general loop
//! ([`charge_loop`]), the ring's, over [`Line::read`]. Peeks ([`peek`]) and refunds
//! ([`refund`]) judge on the general read.

use crate::algo::sliding_counter::{CounterRule, Tail};
use crate::decision::Decision;
#[cfg(slidegate_loom)]
use crate::sync::AtomicU64;
#[cfg(test)]
use crate::sync::Backoff;
use crate::sync::Ordering;
use crate::window::counter;
use crate::window::cum::RETIRED;
#[cfg(slidegate_loom)]
use crate::window::line::LINE_MIN_GRANULARITY;
use crate::window::line::{FILLING, Line, SlotTail, front_of};
use crate::window::ring::{Compact, Slots};

/// The common check on the fewest loads: the reading falls in bucket `front`, no flag is
/// set, and the snapshots it needs belong to the window of `front`. Judged by
/// [`CounterRule::judge_fast_and_charge`]: an admission is charged by CAS from the word
/// loaded; a denial (`tail(1)` and `tail(N)`, the ring's fast denial) is returned as
/// judged. `None`, having written nothing, for anything else (or a lost CAS): the
/// caller goes on with the general loop. Every reading it judges is one
/// [`Line::read`] could make: the same word, the same slots, the same checks of their
/// tags and of snapshots past the count.
#[inline(always)]
pub(crate) fn charge_fast(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    let t = now();
    // Acquire: as `read`'s load of the word.
    let word = line.word.load(Ordering::Acquire);
    if word & (FILLING | RETIRED) != 0 {
        return None;
    }
    let front = front_of(word);
    let start = (front - (line.buckets + 1)).wrapping_mul(rule.granularity);
    let offset = t
        .checked_sub(start)
        .filter(|&into| into < rule.granularity)?;
    let count = Compact::count(word);
    let tail = |k: u64, i: usize| SlotTail {
        line,
        count,
        bucket: k,
        index: i,
    };
    let oldest = front - line.buckets;
    // One reciprocal multiplication for the three slots a check may read: the next
    // bucket's slot follows the oldest one's, and the front's (`oldest + N`, so
    // `oldest − 1` modulo `N + 1`) precedes it.
    let (i, last) = (line.index(oldest), line.buckets as usize);
    let all = tail(oldest, i).load()?;
    let next = tail(oldest + 1, if i == last { 0 } else { i + 1 });
    let current = tail(front, if i == 0 { last } else { i - 1 });
    rule.judge_fast_and_charge(all, offset, (next, current), n, || line.try_charge(word, n))
}

/// A check of cost `n` on `line` under a counter's `rule` (Strict, Weighted or the fixed
/// window; not marks, which keep the three-word ring): the common case on the fast path
/// ([`charge_fast`]), else the ring's general loop (`counter::charge_loop`) on the line ring,
/// with the same judgement. `None` if the ring is retired.
#[inline]
pub(crate) fn charge(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    debug_assert!(!rule.is_marked());
    if let Some(decision) = charge_fast(line, rule, &now, n) {
        return Some(decision);
    }
    charge_loop(line, rule, now, n)
}

/// [`charge`]'s general loop.
#[inline(never)]
pub(crate) fn charge_loop(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    loop {
        let (decision, seen) = line.read(rule.granularity, &now, true, |r| {
            rule.judge_unmarked(r.offset, n, false, |j| r.tail(j))
                .measured_from_reading(r.lag)
        })?;
        if !decision.is_allowed() || line.try_charge(seen, n) {
            return Some(decision);
        }
    }
}

/// What a check of cost `n` would decide on `line` at `now()`, writing nothing: the ring's
/// peek (`counter::decide` with `Op::Peek`). `None` if the ring is retired.
// The loom models check admissions only: a peek writes only when it helps a fill in
// progress, which the models' checks and sums exercise through `Line::read`.
pub(crate) fn peek(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<Decision> {
    line.read(rule.granularity, now, false, |r| {
        rule.judge_unmarked(r.offset, n, true, |j| r.tail(j))
            .measured_from_reading(r.lag)
    })
    .map(|(decision, _)| decision)
}

/// Charges `x` at `now()` whatever the window holds, past the limit as debt, up to `ceiling`
/// (`counter::charge_debt` on the line ring): the units charged and the decision a peek of
/// cost 1 makes after it. `None` if the ring is retired.
pub(crate) fn charge_debt(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    x: u64,
    ceiling: u64,
) -> Option<(u64, Decision)> {
    loop {
        let ((charged, after), seen) = line.read(rule.granularity, &now, true, |r| {
            let charged = x.min(ceiling.saturating_sub(r.tail(0)));
            let tail = |j| r.tail(j);
            (
                charged,
                counter::debt_judged(rule, (r.offset, r.lag), charged, tail, |_| 0),
            )
        })?;
        if charged == 0 || line.try_charge(seen, charged) {
            return Some((charged, after));
        }
    }
}

/// Frees up to `n` units of room at `now()`: the sliding window's oldest units, or the fixed
/// window's in its current bucket alone (`counter::refund`). `None` if the ring is retired.
pub(crate) fn refund(
    line: &Line<'_>,
    rule: &CounterRule,
    now: impl Fn() -> u64,
    n: u64,
) -> Option<u64> {
    let skip = if rule.is_fixed_window() {
        rule.buckets
    } else {
        0
    };
    line.refund(rule.granularity, now, n, |_| skip)
}

/// A Strict check of `cost` against `limit` on `line` at `now()`: the sliding-window
/// counter's rule (the window sum is `tail(0)`) on the general read alone, for the tests.
/// `None` if the ring is retired.
#[cfg(test)]
pub(crate) fn check_strict(
    line: &Line<'_>,
    granularity: u64,
    now: impl Fn() -> u64,
    limit: u64,
    cost: u64,
) -> Option<bool> {
    let backoff = Backoff::new();
    loop {
        let (fits, seen) = line.read(granularity, &now, true, |r| r.tail(0) + cost <= limit)?;
        if !fits {
            return Some(false);
        }
        if line.try_charge(seen, cost) {
            return Some(true);
        }
        backoff.spin();
    }
}

/// The Strict rule of `limit` over `buckets` buckets of `granularity` ns.
#[cfg(any(test, slidegate_loom))]
pub(crate) fn strict(limit: u64, buckets: u64, granularity: u64) -> CounterRule {
    let g = core::time::Duration::from_nanos(granularity);
    let quota = crate::quota::Quota::new(limit, g * buckets as u32)
        .and_then(|quota| quota.with_granularity(g))
        .expect("a valid quota");
    CounterRule::new(quota)
}

/// A line ring with its own words, for the loom models (`loom-tests/tests/line_*.rs`):
/// buckets of [`LINE_MIN_GRANULARITY`] ns, Strict checks.
#[cfg(slidegate_loom)]
pub struct LoomLine {
    words: Box<[AtomicU64]>,
    buckets: u64,
}

#[cfg(slidegate_loom)]
impl LoomLine {
    /// The length of a bucket (ns).
    pub const GRANULARITY: u64 = LINE_MIN_GRANULARITY;

    /// A fresh ring of `buckets` buckets.
    pub fn new(buckets: u64) -> LoomLine {
        LoomLine {
            words: (0..Line::words(buckets))
                .map(|i| AtomicU64::new(Line::initial(buckets, i)))
                .collect(),
            buckets,
        }
    }

    fn line(&self) -> Line<'_> {
        Line::on(&self.words, self.buckets)
    }

    /// A Strict check of `cost` against `limit` at `t` (`None`: retired): the fast path,
    /// then the general loop.
    pub fn check(&self, t: u64, limit: u64, cost: u64) -> Option<bool> {
        let rule = strict(limit, self.buckets, Self::GRANULARITY);
        charge(&self.line(), &rule, || t, cost).map(|d| d.is_allowed())
    }

    /// The whole decision of a Strict check of `cost` against `limit` at `t` (`None`:
    /// retired), as [`LoomLine::check`] makes it.
    pub fn decide(&self, t: u64, limit: u64, cost: u64) -> Option<Decision> {
        let rule = strict(limit, self.buckets, Self::GRANULARITY);
        charge(&self.line(), &rule, || t, cost)
    }

    /// The window sum at `t`, read without writing (`None`: retired).
    pub fn sum(&self, t: u64) -> Option<u64> {
        let line = self.line();
        line.read(Self::GRANULARITY, || t, false, |r| r.tail(0))
            .map(|r| r.0)
    }

    /// A refund of up to `n` units at `t`: the units freed (`None`: retired).
    pub fn refund(&self, t: u64, n: u64) -> Option<u64> {
        self.line().refund(Self::GRANULARITY, || t, n, |_| 0)
    }

    /// The total admitted (mod 2²⁴).
    pub fn admitted(&self) -> u64 {
        self.line().admitted()
    }

    /// The front bucket (an internal index: `t / G + N + 1`) and the `(tag, snapshot)` of
    /// each slot of its window, oldest first.
    pub fn window(&self) -> (u64, Vec<(u32, u32)>) {
        self.line().window()
    }

    /// Retires the ring if its window is empty at `t`: `true` if this call retired it.
    pub fn retire_idle(&self, t: u64) -> bool {
        self.line().retire_idle(Self::GRANULARITY, t)
    }

    /// Retires the ring whatever it holds: `true` if this call retired it.
    pub fn retire_now(&self) -> bool {
        self.line().retire_now()
    }

    /// Whether a fill's flag is set.
    pub fn filling(&self) -> bool {
        self.words[0].load(Ordering::Acquire) & FILLING != 0
    }
}
