//! The plain sequential reference model every algorithm is compared to.
//!
//! It keeps the admitted cost of every bucket in a map and applies `shared/design.md`'s
//! admission rules literally, with exact rational arithmetic for the Weighted mode. It is
//! deliberately slow and obvious.

#![allow(dead_code)]

use std::collections::BTreeMap;

use slidegate::{Mode, Quota};

/// The sequential specification of a sliding-window quota.
#[derive(Clone, Debug)]
pub struct Model {
    limit: u64,
    granularity: u64,
    buckets: u64,
    mode: Mode,
    /// Admitted cost per bucket index `t / G`.
    counts: BTreeMap<u64, u64>,
}

impl Model {
    pub fn new(quota: Quota) -> Model {
        Model {
            limit: quota.limit(),
            granularity: quota.granularity().as_nanos() as u64,
            buckets: quota.buckets(),
            mode: quota.mode(),
            counts: BTreeMap::new(),
        }
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
        let g = i128::from(self.granularity);
        self.used_scaled(t) + i128::from(n) * g <= i128::from(self.limit) * g
    }

    /// The largest cost that would be admitted at `t` (0 if none).
    pub fn remaining(&self, t: u64) -> u64 {
        let g = i128::from(self.granularity);
        let room = i128::from(self.limit) * g - self.used_scaled(t);
        if room <= 0 { 0 } else { (room / g) as u64 }
    }

    /// Whether the window at `t` holds nothing.
    pub fn is_empty_at(&self, t: u64) -> bool {
        let b = t / self.granularity;
        self.sum(b.saturating_sub(self.buckets), b) == 0
    }

    /// A check of cost `n` at `t`: `(allowed, remaining after)`.
    pub fn check(&mut self, t: u64, n: u64) -> (bool, u64) {
        let allowed = self.admits(t, n);
        if allowed {
            *self.counts.entry(t / self.granularity).or_default() += n;
        }
        (allowed, self.remaining(t))
    }

    /// Records an admission made elsewhere.
    pub fn record(&mut self, t: u64, n: u64) {
        *self.counts.entry(t / self.granularity).or_default() += n;
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
