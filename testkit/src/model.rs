//! The plain sequential reference model every algorithm is compared to.
//!
//! It applies the admission rules of `docs/design.md` literally: the sliding-window counter and
//! the fixed window keep the admitted cost of every bucket in a map (with exact rational
//! arithmetic for the Weighted mode, and the time of each bucket's last admission for Strict
//! with marks), the exact log keeps every admitted unit's time, GCRA its theoretical arrival
//! time. It is deliberately slow and obvious.
//!
//! It also holds the specification of usage known afterwards (`docs/design.md`, "Usage known
//! afterwards"): [`Model::reserve`] (a check that returns where its estimate is counted),
//! [`Model::commit`] and [`Model::cancel`] (a give-back from that place only, or the excess
//! charged as debt), [`Model::record_usage`] (the library's `record`: debt allowed, up to the
//! quota's [`Model::usage_ceiling`]) and [`Model::peek_n`] (a check only). Debt is usage past
//! `L`: in the counter's buckets, in GCRA's arrival time, and for the exact log in one debt
//! record `(amount, time of its newest charge)` beside the units.

use std::collections::{BTreeMap, VecDeque};

use slidegate::{Decision, Mode, Quota};

/// Every algorithm, for tests that run them all.
pub const MODES: [Mode; 6] = [
    Mode::Strict,
    Mode::StrictMarked,
    Mode::Weighted,
    Mode::FixedWindow,
    Mode::ExactLog,
    Mode::Gcra,
];

/// The algorithms the Redis backend runs: all of them.
pub const REDIS_MODES: [Mode; 6] = [
    Mode::Strict,
    Mode::StrictMarked,
    Mode::Weighted,
    Mode::FixedWindow,
    Mode::ExactLog,
    Mode::Gcra,
];

/// The sequential specification of a sliding-window quota.
#[derive(Clone, Debug)]
pub struct Model {
    limit: u64,
    window: u64,
    granularity: u64,
    buckets: u64,
    mode: Mode,
    /// Admitted cost per bucket index `t / G` (counter and fixed window).
    counts: BTreeMap<u64, u64>,
    /// Per bucket index, the offset of its last admission into it (Strict with marks).
    last: BTreeMap<u64, u64>,
    /// The time of every admitted unit still held, oldest first (exact log).
    log: VecDeque<u64>,
    /// GCRA's theoretical arrival time.
    tat: u64,
    /// Exact log: the debt record's amount, usage charged past `L`.
    debt: u64,
    /// Exact log: the time of the debt record's newest charge.
    debt_at: u64,
    /// Counter: units a refund moved into bucket −1 (see [`Model::refund`]).
    before_zero: u64,
}

/// A reservation the model admitted: where its estimate is counted, for its commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// When it was admitted: its bucket is `at / G`, and the exact log's units are stamped
    /// `at`.
    pub at: u64,
    /// The estimate charged.
    pub cost: u64,
    /// GCRA: the arrival time its charge wrote (its ticket); 0 for the others.
    pub ticket: u64,
}

/// What a commit, a cancel or a report did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Units charged unconditionally (debt allowed).
    pub charged: u64,
    /// Units given back from the reservation's place.
    pub given_back: u64,
    /// Units of a report beyond the usage ceiling, not counted.
    pub clamped: u64,
}

/// GCRA's largest arrival time (`MAX_TIME` in the library).
const MAX_TIME: u64 = (1 << 63) - 1;

impl Model {
    /// The model of `quota`, empty.
    pub fn new(quota: Quota) -> Model {
        Model {
            limit: quota.limit(),
            window: quota.window().as_nanos() as u64,
            granularity: quota.granularity().as_nanos() as u64,
            buckets: quota.buckets(),
            mode: quota.mode(),
            counts: BTreeMap::new(),
            last: BTreeMap::new(),
            log: VecDeque::new(),
            tat: 0,
            debt: 0,
            debt_at: 0,
            before_zero: 0,
        }
    }

    /// GCRA's emission interval `T = ⌈W / L⌉` and tolerance `τ = L·T`.
    fn gcra(&self) -> (u64, u64) {
        let t = self.window.div_ceil(self.limit);
        (t, t * self.limit)
    }

    /// Exact log: units admitted in `(t − W, t]`.
    fn in_log_window(&self, t: u64) -> u64 {
        self.log.iter().filter(|&&ts| ts + self.window > t).count() as u64
    }

    /// Exact log: the debt record's amount if it is inside the window of `t` (its newest
    /// charge after `t − W`), else 0.
    fn log_debt_in(&self, t: u64) -> u64 {
        if self.debt > 0 && self.debt_at + self.window > t {
            self.debt
        } else {
            0
        }
    }

    /// Strict with marks: whether at `t` the oldest bucket `b − N` holds something and its
    /// last admission has left the window. The limiter stores that time rounded up to a step
    /// of `⌈G / 254⌉` ns (8 bits per bucket), so the model rounds it the same way: the bucket
    /// leaves once `t − W` reaches the rounded time.
    fn oldest_has_left(&self, t: u64) -> bool {
        let g = self.granularity;
        let (b, r) = (t / g, t % g);
        if b < self.buckets {
            return false;
        }
        let oldest = b - self.buckets;
        let step = g.div_ceil(254);
        self.sum(oldest, oldest) > 0 && self.last[&oldest].div_ceil(step) * step <= r
    }

    fn sum(&self, from: u64, to: u64) -> u64 {
        if from > to {
            return 0;
        }
        self.counts.range(from..=to).map(|(_, c)| c).sum()
    }

    /// How much of the limit is used at `t`, as an exact fraction `numerator / G` (Weighted) or
    /// a whole number times `G` (Strict).
    fn used_scaled(&self, t: u64) -> i128 {
        let g = self.granularity;
        let b = t / g;
        let r = t % g;
        match self.mode {
            Mode::Strict => i128::from(self.sum(b.saturating_sub(self.buckets), b)) * i128::from(g),
            Mode::StrictMarked => {
                let from = b.saturating_sub(self.buckets) + u64::from(self.oldest_has_left(t));
                i128::from(self.sum(from, b)) * i128::from(g)
            }
            Mode::FixedWindow => i128::from(self.sum(b, b)) * i128::from(g),
            Mode::ExactLog => {
                i128::from(self.in_log_window(t) + self.log_debt_in(t)) * i128::from(g)
            }
            Mode::Gcra => unreachable!("GCRA is not a bucket sum"),
            _ => {
                let rest = self.sum((b + 1).saturating_sub(self.buckets), b);
                let oldest = if b >= self.buckets {
                    self.sum(b - self.buckets, b - self.buckets)
                } else {
                    0
                };
                i128::from(rest) * i128::from(g) + i128::from(oldest) * i128::from(g - r)
            }
        }
    }

    /// Whether cost `n` would be admitted at `t`.
    pub fn admits(&self, t: u64, n: u64) -> bool {
        if self.mode == Mode::Gcra {
            let (interval, tolerance) = self.gcra();
            return self.tat.max(t) + n * interval - t <= tolerance;
        }
        let g = i128::from(self.granularity);
        self.used_scaled(t) + i128::from(n) * g <= i128::from(self.limit) * g
    }

    /// The largest cost that would be admitted at `t` (0 if none).
    pub fn remaining(&self, t: u64) -> u64 {
        if self.mode == Mode::Gcra {
            let (interval, tolerance) = self.gcra();
            return (t + tolerance).saturating_sub(self.tat.max(t)) / interval;
        }
        let g = i128::from(self.granularity);
        let room = i128::from(self.limit) * g - self.used_scaled(t);
        if room <= 0 { 0 } else { (room / g) as u64 }
    }

    /// Whether the window at `t` holds nothing.
    pub fn is_empty_at(&self, t: u64) -> bool {
        let b = t / self.granularity;
        match self.mode {
            Mode::Gcra => self.tat <= t,
            Mode::ExactLog => self.in_log_window(t) == 0 && self.log_debt_in(t) == 0,
            Mode::FixedWindow => self.sum(b, b) == 0,
            Mode::StrictMarked => self.used_scaled(t) == 0,
            _ => self.sum(b.saturating_sub(self.buckets), b) == 0,
        }
    }

    /// A check of cost `n` at `t`: `(allowed, remaining after)`.
    pub fn check(&mut self, t: u64, n: u64) -> (bool, u64) {
        let allowed = self.admits(t, n);
        if allowed {
            self.record(t, n);
        }
        (allowed, self.remaining(t))
    }

    /// Records an admission made elsewhere (in time order).
    pub fn record(&mut self, t: u64, n: u64) {
        match self.mode {
            Mode::Gcra => self.tat = self.tat.max(t) + n * self.gcra().0,
            Mode::ExactLog => self.log.extend(std::iter::repeat_n(t, n as usize)),
            _ => {
                let b = t / self.granularity;
                *self.counts.entry(b).or_default() += n;
                let last = self.last.entry(b).or_default();
                *last = (*last).max(t % self.granularity);
            }
        }
    }

    /// Frees up to `n` units of room at `t`, the oldest units the window counts first (GCRA:
    /// moves its arrival time back by `n` intervals, not before `t`); returns how many.
    pub fn refund(&mut self, t: u64, n: u64) -> u64 {
        match self.mode {
            Mode::Gcra => {
                let (interval, _) = self.gcra();
                let back = self.tat.saturating_sub(n * interval).max(t);
                if back >= self.tat {
                    return 0;
                }
                // Whole units of room, the last one perhaps partly drained already.
                let freed = (self.tat - back).div_ceil(interval);
                self.tat = back;
                freed
            }
            Mode::ExactLog => {
                // The oldest first, the debt record's units counted as stamped at its time
                // (after the log's units of that time).
                let mut freed = 0;
                while freed < n {
                    let unit = self.log.iter().position(|&ts| ts + self.window > t);
                    let debt = self.log_debt_in(t);
                    match unit {
                        Some(i) if debt == 0 || self.log[i] <= self.debt_at => {
                            self.log.remove(i);
                            freed += 1;
                        }
                        _ if debt > 0 => {
                            let take = debt.min(n - freed);
                            self.debt -= take;
                            freed += take;
                        }
                        _ => break,
                    }
                }
                freed
            }
            mode => {
                let b = t / self.granularity;
                let first = if mode == Mode::FixedWindow {
                    b
                } else if mode == Mode::StrictMarked && self.oldest_has_left(t) {
                    b - self.buckets + 1
                } else {
                    b.saturating_sub(self.buckets)
                };
                let mut freed = 0;
                for (_, c) in self.counts.range_mut(first..=b) {
                    let take = (*c).min(n - freed);
                    *c -= take;
                    freed += take;
                }
                // The library frees units by raising snapshots from bucket `first` on: they
                // move into the bucket before, which the ring still holds (the fixed window's
                // previous bucket, or an oldest bucket marked as left) though no rule counts
                // them there. Only the usage a report is clamped against sees them.
                if first > b.saturating_sub(self.buckets) && freed > 0 {
                    *self.counts.entry(first - 1).or_default() += freed;
                } else if first == 0 && b < self.buckets && mode == Mode::FixedWindow {
                    // Bucket −1, which the ring holds until bucket `N`.
                    self.before_zero += freed;
                }
                freed
            }
        }
    }
}

/// Usage known afterwards: reserve, commit, cancel, record and check only.
impl Model {
    /// The most usage a debt charge leaves a window counting (`docs/design.md`, "Debt per
    /// store"): `2²³ − 1 − L` for `L ≤ 2²¹`, `2³¹ − 1 − L` above. A function of the quota
    /// alone, so that every store and backend clamps alike.
    pub fn usage_ceiling(&self) -> u64 {
        let top: u64 = if self.limit <= 1 << 21 {
            (1 << 23) - 1
        } else {
            (1 << 31) - 1
        };
        top.saturating_sub(self.limit)
    }

    /// The usage a debt charge at `t` is clamped against: the counter's raw sum of the
    /// `N + 1` buckets `b − N ..= b` (whatever its mode counts of them), the exact log's
    /// units and debt inside the window, GCRA's `⌈(TAT − t)/T⌉`.
    fn raw_usage(&self, t: u64) -> u64 {
        match self.mode {
            Mode::Gcra => (self.tat.max(t) - t).div_ceil(self.gcra().0),
            Mode::ExactLog => self.in_log_window(t) + self.log_debt_in(t),
            _ => {
                let b = t / self.granularity;
                let before_zero = if b < self.buckets {
                    self.before_zero
                } else {
                    0
                };
                self.sum(b.saturating_sub(self.buckets), b) + before_zero
            }
        }
    }

    /// A reservation of estimate `n` at `t` (`1 ≤ n ≤ L`): decided and charged exactly as
    /// [`Model::check`]; `None` when denied.
    pub fn reserve(&mut self, t: u64, n: u64) -> Option<Reservation> {
        if !self.admits(t, n) {
            return None;
        }
        self.record(t, n);
        let ticket = if self.mode == Mode::Gcra { self.tat } else { 0 };
        Some(Reservation {
            at: t,
            cost: n,
            ticket,
        })
    }

    /// Commits `reservation` with its actual cost at `t`: below the estimate, gives the
    /// difference back from the reservation's place while it is still counted; above, charges
    /// the excess at `t` as debt ([`Model::record_usage`]).
    pub fn commit(&mut self, t: u64, reservation: Reservation, actual: u64) -> Usage {
        if actual >= reservation.cost {
            return self.record_usage(t, actual - reservation.cost);
        }
        Usage {
            given_back: self.give_back(t, reservation, reservation.cost - actual),
            ..Usage::default()
        }
    }

    /// Cancels `reservation` at `t`: a commit of 0.
    pub fn cancel(&mut self, t: u64, reservation: Reservation) -> Usage {
        self.commit(t, reservation, 0)
    }

    /// Gives back up to `back` units of `r`'s estimate at `t`, from where it charged them
    /// only; returns how many.
    fn give_back(&mut self, t: u64, r: Reservation, back: u64) -> u64 {
        match self.mode {
            Mode::Gcra => {
                let (interval, _) = self.gcra();
                if self.tat <= t || r.ticket <= t {
                    return 0;
                }
                // The part of its last `back` intervals not yet drained at `t`.
                let delta = (back * interval).min(r.ticket - t);
                let new = self.tat.saturating_sub(delta).max(t);
                let freed = (self.tat - new).div_ceil(interval);
                self.tat = new;
                freed
            }
            Mode::ExactLog => {
                if r.at + self.window <= t {
                    return 0;
                }
                // The oldest units inside, never more than those at or before its own.
                let Some(first) = self.log.iter().position(|&ts| ts + self.window > t) else {
                    return 0;
                };
                let held = self
                    .log
                    .iter()
                    .skip(first)
                    .filter(|&&ts| ts <= r.at)
                    .count() as u64;
                let take = back.min(held);
                self.log.drain(first..first + take as usize);
                take
            }
            mode => {
                let b = t / self.granularity;
                let own = r.at / self.granularity;
                let counted = match mode {
                    Mode::FixedWindow => own == b,
                    Mode::StrictMarked => {
                        own + self.buckets >= b
                            && !(own + self.buckets == b && self.oldest_has_left(t))
                    }
                    _ => own + self.buckets >= b,
                };
                if !counted {
                    return 0;
                }
                // The mark (Strict with marks) stays: an upper bound stays one.
                let c = self.counts.entry(own).or_default();
                let take = back.min(*c);
                *c -= take;
                take
            }
        }
    }

    /// Usage that already happened, `n` at `t`: charged unconditionally, past `L` as debt, up
    /// to [`Model::usage_ceiling`] (the rest is `clamped`). The library's `record`; unlike
    /// [`Model::record`] (an admission made elsewhere), it clamps, and the exact log keeps
    /// what does not fit under `L` in its debt record.
    pub fn record_usage(&mut self, t: u64, n: u64) -> Usage {
        let used = self.raw_usage(t);
        let mut x = n.min(self.usage_ceiling().saturating_sub(used));
        match self.mode {
            Mode::Gcra => {
                let interval = self.gcra().0;
                let base = self.tat.max(t);
                x = x.min((MAX_TIME - base) / interval);
                self.tat = base + x * interval;
            }
            Mode::ExactLog => {
                let fit = x.min(self.limit.saturating_sub(used));
                self.log.extend(std::iter::repeat_n(t, fit as usize));
                if x > fit {
                    self.debt = self.log_debt_in(t) + (x - fit);
                    self.debt_at = t;
                }
            }
            _ if x > 0 => self.record(t, x),
            _ => {}
        }
        Usage {
            charged: x,
            given_back: 0,
            clamped: n - x,
        }
    }

    /// A check only of cost `n` at `t`: `(would be allowed, remaining)`, charging nothing.
    /// [`Model::admits`] and [`Model::remaining`] together.
    pub fn peek_n(&self, t: u64, n: u64) -> (bool, u64) {
        (self.admits(t, n), self.remaining(t))
    }

    /// When cost `n` is denied at `t`: the earliest wait after which it would be admitted if
    /// nothing else arrived (`u64::MAX` if none before `MAX_TIME`); `None` when admitted now.
    /// Usage never grows while nothing arrives, so the first admitting time is found by
    /// galloping and bisecting.
    pub fn retry_after(&self, t: u64, n: u64) -> Option<u64> {
        if self.admits(t, n) {
            return None;
        }
        Some(first_true(t, 1, |w| self.admits(t + w, n)))
    }

    /// How long until the window at `t` holds nothing, debt included, if nothing arrives.
    pub fn reset_after(&self, t: u64) -> u64 {
        if self.is_empty_at(t) {
            return 0;
        }
        first_true(t, 1, |w| self.is_empty_at(t + w))
    }
}

/// The least `w ≥ from` with `holds(w)`, for a `holds` false below some `w` and true from it
/// on; `u64::MAX` if it is false up to `MAX_TIME − t`.
fn first_true(t: u64, from: u64, holds: impl Fn(u64) -> bool) -> u64 {
    let end = MAX_TIME.saturating_sub(t);
    let (mut lo, mut hi) = (from - 1, from);
    while !holds(hi) {
        if hi >= end {
            return u64::MAX;
        }
        lo = hi;
        hi = hi.saturating_mul(2).min(end);
    }
    // `holds(lo)` is false (or `lo` is below `from`), `holds(hi)` true.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// The most cost admitted in any interval `[s, s + window)`, for admissions `(time, cost)`.
pub fn worst_window(admitted: &mut [(u64, u64)], window: u64) -> u64 {
    admitted.sort_unstable();
    let (mut worst, mut sum, mut lo) = (0, 0, 0);
    for hi in 0..admitted.len() {
        sum += admitted[hi].1;
        while admitted[hi].0 - admitted[lo].0 >= window {
            sum -= admitted[lo].1;
            lo += 1;
        }
        worst = worst.max(sum);
    }
    worst
}

/// `retry_after` is the earliest wait that admits: waiting it admits, 1 ns less does not.
pub fn assert_retry_is_tight(model: &Model, t: u64, n: u64, d: &Decision) {
    let retry = d
        .retry_after()
        .expect("a denial carries retry_after")
        .as_nanos() as u64;
    assert!(
        retry >= 1,
        "a denied request cannot be admitted with no wait"
    );
    assert!(
        model.admits(t + retry, n),
        "waiting retry_after={retry} does not admit {n} at {t}"
    );
    assert!(
        !model.admits(t + retry - 1, n),
        "retry_after={retry} is not the earliest for {n} at {t}"
    );
}

/// `reset_after` is when the window is empty: empty then, not empty 1 ns before.
pub fn assert_reset_is_tight(model: &Model, t: u64, d: &Decision) {
    let reset = d.reset_after().as_nanos() as u64;
    assert!(
        model.is_empty_at(t + reset),
        "window not empty after reset_after={reset} at {t}"
    );
    if reset > 0 {
        assert!(
            !model.is_empty_at(t + reset - 1),
            "reset_after={reset} is not the earliest at {t}"
        );
    }
}

/// A report's answer (`record` of `n` at `t`) against the model after it: what it charged,
/// gave back and clamped (`expected`, the model's own), and the state a check of cost 1
/// would find: `remaining`, `available_after` (its tight `retry_after`, or zero) and
/// `reset_after`. `at` names the call in a failure.
pub fn assert_usage(model: &Model, t: u64, usage: &slidegate::Usage, expected: Usage, at: &str) {
    assert_eq!(
        (usage.charged(), usage.given_back(), usage.clamped()),
        (expected.charged, expected.given_back, expected.clamped),
        "{at}: charged, given back, clamped"
    );
    assert_eq!(usage.remaining(), model.remaining(t), "{at}: remaining");
    assert_eq!(
        usage.available_after().as_nanos() as u64,
        model.retry_after(t, 1).unwrap_or(0),
        "{at}: available_after"
    );
    assert_eq!(
        usage.reset_after().as_nanos() as u64,
        model.reset_after(t),
        "{at}: reset_after"
    );
}

#[cfg(test)]
mod usage_tests;
