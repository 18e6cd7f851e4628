//! The plain sequential reference model every algorithm is compared to.
//!
//! It applies the admission rules of `docs/design.md` literally: the sliding-window counter and
//! the fixed window keep the admitted cost of every bucket in a map (with exact rational
//! arithmetic for the Weighted mode, and the time of each bucket's last admission for Strict
//! with marks), the exact log keeps every admitted unit's time, GCRA its theoretical arrival
//! time. It is deliberately slow and obvious.

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
}

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
            Mode::ExactLog => i128::from(self.in_log_window(t)) * i128::from(g),
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
            Mode::ExactLog => self.in_log_window(t) == 0,
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
                let mut freed = 0;
                while freed < n {
                    match self.log.iter().position(|&ts| ts + self.window > t) {
                        Some(i) => {
                            self.log.remove(i);
                            freed += 1;
                        }
                        None => break,
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
                freed
            }
        }
    }
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
