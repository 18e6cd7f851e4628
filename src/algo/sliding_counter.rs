//! The sliding-window counter, Strict and Weighted, and the fixed window: the rules of the
//! table in `docs/design.md`, judged on a window's tail sums.
//!
//! A window of `N` buckets of length `G` is judged at bucket `b`, `r` nanoseconds into it.
//! The state is the *tail* function: `tail(j)` is the cost admitted in buckets
//! `b − N + j ..= b`, for `j` in `0..=N + 1` (`tail(N + 1) = 0`). It never increases with
//! `j`, which is what lets `retry_after` and `reset_after` be found by binary search.
//!
//! - Strict admits `n` iff `tail(0) + n ≤ L`.
//! - Weighted admits iff `tail(1) + C·(G − r)/G + n ≤ L` with `C = tail(0) − tail(1)`, the
//!   oldest bucket's count, compared exactly in integers: `C·(G − r) ≤ (L − tail(1) − n)·G`.
//! - The fixed window (`N = 1`, `G = W`) admits iff `tail(1) + n ≤ L`: the current bucket
//!   alone.
//! - Strict with last-admission marks admits iff Strict does, or iff `tail(1) + n ≤ L` and
//!   the oldest bucket's last admission has left the window: its mark `m(0)` (the offset of
//!   its last admission into it, rounded up to a step of `⌈G / 254⌉` ns) is at most `r`. Only
//!   a check Strict would deny reads a mark; an admission records its own (see
//!   [`crate::window::ring`], "Last-admission marks").

use core::cell::Cell;

use crate::decision::Decision;
use crate::quota::{Mode, Quota};

/// The largest mark. A mark `m ≥ 1` says the bucket's admissions were at most `(m − 1)`
/// steps of `⌈G / 254⌉` ns into it; 0 that none recorded one. 8 bits, which the ring packs
/// beside each snapshot.
pub(crate) const MAX_MARK: u8 = u8::MAX;

/// Which of the counter's rules a quota is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Strict,
    Weighted,
    Fixed,
    Marked,
}

/// The counter's rule for one quota: Strict, Weighted or the fixed window over `N` buckets
/// of `G` ns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CounterRule {
    /// Strict, Weighted or the fixed window (a quota of another mode is judged as Strict).
    kind: Kind,
    pub(crate) limit: u64,
    /// `N`, the number of buckets in a window.
    pub(crate) buckets: u64,
    /// `G` in nanoseconds.
    pub(crate) granularity: u64,
    /// `(N + 1)·G` in nanoseconds (saturated): a window is clear of everything it holds this
    /// long after the start of its newest bucket.
    span: u64,
    /// `N·G`, the window, in nanoseconds.
    window: u64,
    /// The length (ns) of one step of a last-admission mark: `⌈G / 254⌉`, so that the marks
    /// 1 ..= 255 of 8 bits reach the end of their bucket (0 is a bucket nothing recorded in).
    pub(crate) mark_step: u64,
}

/// A lazy load of one of a window's tails for the fast paths' judgements
/// ([`CounterRule::judge_fast`], [`CounterRule::judge_denied_fast`]): `None` if the snapshot it
/// reads is torn. A closure is one; the line ring's fast path passes a slot's position
/// instead, whose load is always inlined (its closures, passed to two judgements, were called
/// out of line).
pub(crate) trait Tail: Copy {
    /// The tail, or `None` if its snapshot is torn.
    fn load(self) -> Option<u64>;
}

/// The tails of a reading, each loaded when asked for: `tail(j)` for `1 ≤ j ≤ N`, `None` if
/// its snapshot is torn or raised. As [`Tail`], a type whose load is always inlined, where a
/// closure passed to two judgements was called out of line.
pub(crate) trait Tails: Copy {
    /// `tail(j)`, or `None` if its snapshot is torn or raised.
    fn tail(self, j: u64) -> Option<u64>;
}

impl<F: FnOnce() -> Option<u64> + Copy> Tail for F {
    #[inline(always)]
    fn load(self) -> Option<u64> {
        self()
    }
}

impl CounterRule {
    pub(crate) fn new(quota: Quota) -> CounterRule {
        CounterRule {
            kind: match quota.mode() {
                Mode::Weighted => Kind::Weighted,
                Mode::FixedWindow => Kind::Fixed,
                Mode::StrictMarked => Kind::Marked,
                Mode::Strict | Mode::ExactLog | Mode::Gcra => Kind::Strict,
            },
            limit: quota.limit(),
            buckets: quota.buckets(),
            granularity: quota.granularity_nanos(),
            span: (quota.buckets() + 1).saturating_mul(quota.granularity_nanos()),
            window: quota.window_nanos(),
            mark_step: quota.granularity_nanos().div_ceil(u64::from(MAX_MARK) - 1),
        }
    }

    /// Whether this is Strict with last-admission marks, whose admissions record a mark.
    #[inline]
    pub(crate) fn is_marked(&self) -> bool {
        self.kind == Kind::Marked
    }

    /// The mark an admission at offset `r` needs its bucket to hold: `⌈r / step⌉ + 1`, at
    /// most `MAX_MARK` (`r < G ≤ 254·step`).
    #[inline]
    pub(crate) fn mark_for(&self, r: u64) -> u64 {
        r.div_ceil(self.mark_step) + 1
    }

    /// Where, in nanoseconds into its bucket, a bucket whose mark is `m` had its last
    /// admission at the latest: `(m − 1)·step`, at most `G`; for a mark of 0 (nothing
    /// recorded, though a unit judged a bucket earlier may be counted there) the end, `G`.
    #[inline]
    fn mark_offset(&self, m: u64) -> u64 {
        match m {
            0 => self.granularity,
            m => self.recorded_offset(m),
        }
    }

    /// [`CounterRule::mark_offset`] of a recorded mark (`m ≥ 1`).
    #[inline]
    fn recorded_offset(&self, m: u64) -> u64 {
        ((m - 1) * self.mark_step).min(self.granularity)
    }

    /// Nanoseconds from offset `r` of bucket `b` until the last admission of bucket
    /// `b − N + j`, whose mark is `m`, leaves the window: `j·G + m·step`, less `r`.
    #[inline]
    fn after_mark(&self, j: u64, m: u64, r: u64) -> u64 {
        self.after_buckets(j, 0)
            .saturating_add(self.mark_offset(m))
            .saturating_sub(r)
    }

    /// Whether this is Strict (without marks), whose fast path judges its common denials.
    #[inline]
    pub(crate) fn is_strict(&self) -> bool {
        self.kind == Kind::Strict
    }

    /// Whether this is the fixed window, which counts its current bucket alone.
    #[inline]
    pub(crate) fn is_fixed_window(&self) -> bool {
        self.kind == Kind::Fixed
    }

    /// Whether cost `n` is admitted at offset `r` given the window's tail sums and, for
    /// Strict with marks, `mark(j)`, the mark of bucket `b − N + j`, and the decision reported
    /// for it: with `n` charged when admitted, unless `peek`.
    #[inline]
    pub(crate) fn judge(
        &self,
        r: u64,
        n: u64,
        peek: bool,
        tail: impl Fn(u64) -> u64,
        mark: impl Fn(u64) -> u64,
    ) -> Decision {
        if self.kind == Kind::Marked {
            return self.judge_marked(r, n, peek, &tail, &mark);
        }
        self.judge_unmarked(r, n, peek, tail)
    }

    /// [`CounterRule::judge`] for Strict, Weighted and the fixed window, which a charge's
    /// general loop calls directly (`counter::judge_and_mark`). Always inlined with the
    /// searches of a denial: left to the compiler, the judgement and the searches were called
    /// out of line, each tail through a closure (`check_denied`).
    #[inline(always)]
    pub(crate) fn judge_unmarked(
        &self,
        r: u64,
        n: u64,
        peek: bool,
        tail: impl Fn(u64) -> u64,
    ) -> Decision {
        let d = match self.kind {
            Kind::Weighted => self.judge_weighted(r, n, &tail),
            Kind::Fixed => return self.judge_fixed(r, n, peek, &tail),
            Kind::Strict | Kind::Marked => self.judge_strict(r, n, &tail),
        };
        if peek && d.is_allowed() {
            self.uncharged(d, r, n, tail)
        } else {
            d
        }
    }

    /// An allowed decision as it reads when nothing was charged.
    #[cold]
    fn uncharged(&self, d: Decision, r: u64, n: u64, tail: impl Fn(u64) -> u64) -> Decision {
        Decision::allowed(self.limit, d.remaining() + n, self.reset_after(r, &tail))
    }

    /// Strict with last-admission marks: the oldest bucket is left out of Strict's sum when
    /// its mark says its last admission has left the window. Out of line, so that the other
    /// rules' general path stays as it was.
    #[inline(never)]
    fn judge_marked(
        &self,
        r: u64,
        n: u64,
        peek: bool,
        tail: &impl Fn(u64) -> u64,
        mark: &impl Fn(u64) -> u64,
    ) -> Decision {
        let d = self.judge_marked_charged(r, n, tail, mark);
        if peek && d.is_allowed() {
            // As it reads when nothing was charged: the window clears when its newest
            // non-empty bucket's last admission leaves.
            let reset = self.marked_reset(r, self.newest(tail), mark);
            Decision::allowed(self.limit, d.remaining() + n, reset)
        } else {
            d
        }
    }

    /// [`CounterRule::judge_marked`] for a charge.
    #[inline]
    fn judge_marked_charged(
        &self,
        r: u64,
        n: u64,
        tail: &impl Fn(u64) -> u64,
        mark: &impl Fn(u64) -> u64,
    ) -> Decision {
        let (l, nb) = (self.limit, self.buckets);
        let sum = tail(0);
        let used = if self.has_left(r, mark(0)) {
            tail(1)
        } else {
            sum
        };
        if used + n <= l {
            return self.admitted_marked(used, r, n, mark(nb).max(self.mark_for(r)));
        }
        let (newest, top) = self.newest_and_tail(tail);
        // In bucket `b + j` the request fits once bucket `b − N + j` has left, if
        // `tail(j + 1) + n ≤ L`: the first such `j` (it exists: `tail(newest) = 0`), whose
        // oldest bucket is not empty (else `j − 1` would fit at the start of bucket `b + j`,
        // or, for `j = 0`, the request here), leaves at its mark.
        let j = first_fit_ends(0, newest, |j| {
            (if j + 2 == newest { top } else { tail(j + 1) }) + n > l
        });
        // `max(1)`: at `j = 0` the mark is past `r` (else admitted above), but a concurrent
        // reader may see tails that are not monotone.
        let retry = self.after_mark(j, mark(j), r).max(1);
        Decision::denied(
            l,
            l.saturating_sub(used),
            retry,
            self.marked_reset(r, newest, mark),
        )
    }

    /// Whether, at offset `r`, everything in the oldest bucket, whose mark is `m`, has left
    /// the window: `(m − 1)·step ≤ r`. Not for a mark of 0 (a bucket nothing recorded in:
    /// empty, or holding only units judged a bucket earlier, which count it whole), whose
    /// `(m − 1)·step` wraps to `2⁶⁴ − step > r`.
    #[inline]
    pub(crate) fn has_left(&self, r: u64, m: u64) -> bool {
        m.wrapping_sub(1).wrapping_mul(self.mark_step) <= r
    }

    /// The decision for `n` admitted at offset `r` under marks when the window counts `used`
    /// (`used + n ≤ L`) and the current bucket's mark, this admission's included, is `m`: the
    /// window is clear once that bucket's last admission leaves, `N·G + m·step` after its
    /// start.
    #[inline]
    pub(crate) fn admitted_marked(&self, used: u64, r: u64, n: u64, m: u64) -> Decision {
        let l = self.limit;
        let reset = self
            .window
            .saturating_add(self.recorded_offset(m))
            .saturating_sub(r);
        Decision::allowed(l, l - used - n, reset)
    }

    /// Time until the window holds nothing under marks: the newest non-empty bucket
    /// `b − N + newest − 1` leaves when its last admission does.
    fn marked_reset(&self, r: u64, newest: u64, mark: &impl Fn(u64) -> u64) -> u64 {
        match newest {
            0 => 0,
            j => self.after_mark(j - 1, mark(j - 1), r),
        }
    }

    #[inline(always)]
    fn judge_strict(&self, r: u64, n: u64, tail: impl Fn(u64) -> u64) -> Decision {
        let l = self.limit;
        let sum = tail(0);
        if sum + n <= l {
            return self.admitted(sum, r, n);
        }
        // The newest non-empty bucket, `b − N + newest − 1`: once it has left, nothing is
        // counted, so it bounds the search below and gives `reset_after`.
        let (newest, top) = self.newest_and_tail(&tail);
        // The first j at which the buckets before b − N + j have left and the rest fit. Both
        // ends are tried first: under a steady flood the oldest bucket leaving makes room,
        // after a burst only all of it leaving does, and either spares a bisection of the
        // ring's tails (`check_denied` at N = 3600, `keyed_denied`). The top end's tail is
        // the one the search for `newest` read last.
        let j = first_fit_ends(1, newest, |j| {
            (if j + 1 == newest { top } else { tail(j) }) + n > l
        });
        let retry = self.after_buckets(j, r);
        Decision::denied(
            l,
            l.saturating_sub(sum),
            retry,
            self.after_buckets(newest, r),
        )
    }

    /// The decision for `n` admitted at offset `r` when the window counts `used` as in use
    /// (`used + n ≤ L`): the window is clear `N + 1` bucket ends from now.
    #[inline]
    pub(crate) fn admitted(&self, used: u64, r: u64, n: u64) -> Decision {
        let l = self.limit;
        Decision::allowed(l, l - used - n, self.span.saturating_sub(r))
    }

    /// [`CounterRule::judge`] for the admissions of the ring's fast path, given `tail(0)`
    /// (`all`) at offset `r` and `rest`, which loads `tail(1)`: the decision if `n` is
    /// admitted, `None` if not (or if `rest`, which Weighted and the fixed window read, finds
    /// its snapshot torn), for the general path to judge.
    /// (Strict with marks has its own, `counter::charge_fast_marked`.)
    #[inline(always)]
    pub(crate) fn judge_fast(&self, all: u64, r: u64, rest: impl Tail, n: u64) -> Option<Decision> {
        let used = match self.kind {
            Kind::Marked => return None,
            Kind::Weighted => self.weighted_use(all, rest.load()?, r),
            Kind::Fixed => {
                // Only the current bucket counts: `tail(1)`, with `N = 1`.
                let current = rest.load()?;
                let d = self.judge_fixed(r, n, false, &|_| current);
                return d.is_allowed().then_some(d);
            }
            Kind::Strict => all,
        };
        (used + n <= self.limit).then(|| self.admitted(used, r, n))
    }

    /// [`CounterRule::judge_fast`] and, when it declines, [`CounterRule::judge_denied_fast`],
    /// for a fast path that has all three tails at hand (the line ring's), an admission
    /// charged by `charge` (`false` if the charge failed): the decision, or `None` for the
    /// general path (a failed charge included). Strict, every quota's mode unless it asks for
    /// another, is judged on a branch of its own, its admission's decision made after the
    /// charge: through the two judgements in turn its denial dispatched on the kind twice (a
    /// jump table, then a branch) and compared `all + n` with the limit twice, work that
    /// showed in callgrind's counts of a keyed check (`keyed_denied`, `keyed_allowed`).
    #[inline(always)]
    pub(crate) fn judge_fast_and_charge(
        &self,
        all: u64,
        r: u64,
        (rest, current): (impl Tail, impl Tail),
        n: u64,
        charge: impl FnOnce() -> bool,
    ) -> Option<Decision> {
        if self.kind == Kind::Strict {
            return if all + n <= self.limit {
                charge().then(|| self.admitted(all, r, n))
            } else {
                self.strict_denied_fast(all, r, rest, current, n)
            };
        }
        match self.judge_fast(all, r, rest, n) {
            Some(decision) => charge().then_some(decision),
            None => self.judge_denied_fast(all, r, rest, current, n),
        }
    }

    /// The offset into a bucket from which a leaving bucket's share of `oldest` units,
    /// spread over its `G`, has fallen to `room`: `G − ⌊room·G / oldest⌋` (`G` or more: not
    /// within the bucket), 0 if it holds nothing.
    #[inline(always)]
    fn share_fits_from(&self, room: u64, oldest: u64) -> u64 {
        let g = self.granularity;
        if oldest == 0 {
            0
        } else {
            let fits = u128::from(room) * u128::from(g) / u128::from(oldest);
            u128::from(g).saturating_sub(fits) as u64
        }
    }

    /// [`CounterRule::judge`] for the denials of the ring's fast path, given `tail(0)`
    /// (`all`) at offset `r`, `rest`, which loads `tail(1)`, and `current`, which loads
    /// `tail(N)`, the current bucket's count: the decision if `n` is denied and its
    /// `retry_after` follows from those tails alone, `None` otherwise (an admission, a torn
    /// snapshot, an empty current bucket under `N > 1`, or a first fit between the oldest
    /// bucket's leaving and the current one's), for the general path to judge.
    ///
    /// These are the values `judge` computes from the same tails, its searches skipped. The
    /// current bucket holds something, so the window clears `N + 1` bucket ends from now
    /// (`newest = N + 1`), and the searches for the first fit try their two ends first: the
    /// oldest bucket leaving (`tail(1) + n ≤ L`: a flood that has run for a while) or all but
    /// the current one leaving (`tail(N) + n > L` too: the limit spent in the current bucket,
    /// a burst). With `N = 1` those are the only cases. The fixed window's denial needs
    /// `tail(1)` alone.
    #[inline(always)]
    pub(crate) fn judge_denied_fast(
        &self,
        all: u64,
        r: u64,
        rest: impl Tail,
        current: impl Tail,
        n: u64,
    ) -> Option<Decision> {
        let (l, nb) = (self.limit, self.buckets);
        let (used, rest) = match self.kind {
            Kind::Marked => return None,
            Kind::Fixed => {
                // Only the current bucket counts: `tail(1)`, with `N = 1`.
                let current = rest.load()?;
                let d = self.judge_fixed(r, n, false, &|_| current);
                return (!d.is_allowed()).then_some(d);
            }
            Kind::Strict => return self.strict_denied_fast(all, r, rest, current, n),
            Kind::Weighted => {
                let rest = rest.load()?;
                (self.weighted_use(all, rest, r), rest)
            }
        };
        if used + n <= l {
            return None;
        }
        let current = if nb == 1 { rest } else { current.load()? };
        let newest = if current > 0 {
            nb + 1
        } else if nb == 1 {
            // `tail(1) = 0`: only the oldest bucket holds anything (`all > 0`: denied).
            1
        } else {
            return None;
        };
        // The first fit's two ends: at the lower, the oldest bucket leaving is enough.
        let low = rest + n <= l;
        if !low && nb > 1 && current + n <= l {
            return None;
        }
        let retry = match self.kind {
            Kind::Weighted => {
                // `weighted_retry` at its first `j`: 0 at the lower end, else `N`, where the
                // current bucket is the oldest and nothing is newer. In bucket `b + j` the
                // oldest bucket's share must fall to the room the rest leaves, `A`, from
                // offset `G − ⌊A·G / C⌋` on.
                let (j, oldest, room) = if low {
                    (0, all - rest.min(all), l - n - rest)
                } else {
                    (newest - 1, current, l - n)
                };
                let g = self.granularity;
                let from = self.share_fits_from(room, oldest);
                if from < g {
                    let at = self.after_buckets(j, 0).saturating_add(from);
                    at.saturating_sub(r).max(1)
                } else if j < nb {
                    // The next bucket decides: the general path's search.
                    return None;
                } else {
                    self.span.saturating_sub(r)
                }
            }
            _ => self.after_buckets(if low { 1 } else { newest }, r),
        };
        Some(Decision::denied(
            l,
            l.saturating_sub(used),
            retry,
            self.after_buckets(newest, r),
        ))
    }

    /// [`CounterRule::judge_denied_fast`] for Strict, which the fast path judges itself from
    /// its first loads (`counter::charge_fast`). With the current bucket holding something,
    /// the window clears `N + 1` bucket ends from now (`span`), and the first fit is one
    /// bucket end away when the oldest bucket leaving is enough (`tail(1) + n ≤ L`), else
    /// `span` away when all but the current bucket leaving is not (`tail(N) + n > L`). With
    /// `N = 1` and the current bucket empty, only the oldest holds anything: both are one
    /// bucket end away.
    #[inline(always)]
    pub(crate) fn strict_denied_fast(
        &self,
        all: u64,
        r: u64,
        rest: impl Tail,
        current: impl Tail,
        n: u64,
    ) -> Option<Decision> {
        let (l, nb, g) = (self.limit, self.buckets, self.granularity);
        if all + n <= l {
            return None;
        }
        let rest = rest.load()?;
        let current = if nb == 1 { rest } else { current.load()? };
        // `after_buckets(newest, r)`, with `r < G`.
        let reset = if current > 0 {
            self.span - r
        } else if nb == 1 {
            g - r
        } else {
            return None;
        };
        let retry = if rest + n <= l {
            g - r
        } else if nb == 1 || current + n > l {
            reset
        } else {
            return None;
        };
        Some(Decision::denied(l, l.saturating_sub(all), retry, reset))
    }

    /// Strict's denial of `n` at offset `r` of bucket `b` when its window counts `all`
    /// (`all + n > L`), if `guess` holds `newest` (the least `j` with `tail(j) = 0`) and the
    /// first fit (the least `j ≥ 1` with `tail(j) + n ≤ L`, or `newest`) of this reading:
    /// the decision [`CounterRule::judge`] makes from the same tails, which `tails` loads. `None` if the loads do not confirm the guess, or tear.
    ///
    /// Confirming is exact because tails never increase with `j`: `tail(j − 1) > 0` and
    /// `tail(j) = 0` make `j` the least with `tail(j) = 0`, and `tail(j − 1) + n > L` (or
    /// `j = 1`) with `tail(j) + n ≤ L` (or `j = newest`) the first fit. A flood after a
    /// burst judges bucket after bucket on the same two, the burst's bucket leaving being
    /// what both wait for, so its denials load two tails however long the window.
    #[inline(always)]
    pub(crate) fn strict_denied_guessed(
        &self,
        all: u64,
        r: u64,
        n: u64,
        tails: impl Tails,
        (newest, fit): (u64, u64),
    ) -> Option<Decision> {
        let (l, nb) = (self.limit, self.buckets);
        let tail = |j: u64| match j {
            0 => Some(all),
            j if j > nb => Some(0),
            j => tails.tail(j),
        };
        if newest == 0 || newest > nb + 1 || fit == 0 || fit > newest {
            return None;
        }
        let top = tail(newest - 1)?;
        if top == 0 || tail(newest)? != 0 {
            return None;
        }
        let confirmed = if fit == newest {
            // `tail(newest) + n ≤ L` as `n ≤ L`; the bucket before does not fit.
            fit == 1 || top + n > l
        } else {
            tail(fit)? + n <= l && (fit == 1 || tail(fit - 1)? + n > l)
        };
        confirmed.then(|| self.strict_denial(all, r, newest, fit))
    }

    /// [`CounterRule::strict_denied_guessed`] without a guess: `newest` and the first fit
    /// searched for, as [`CounterRule::judge`] searches, and returned with the decision for
    /// the caller to guess with next time. `None` if a load tore.
    pub(crate) fn strict_denied_searched(
        &self,
        all: u64,
        r: u64,
        n: u64,
        tails: impl Tails,
    ) -> Option<(Decision, (u64, u64))> {
        let (l, nb) = (self.limit, self.buckets);
        let torn = Cell::new(false);
        // A torn load reads as 0 and marks the reading torn: what it decides is dropped.
        let tail = |j: u64| -> u64 {
            match j {
                0 => all,
                j if j > nb => 0,
                j => tails.tail(j).unwrap_or_else(|| {
                    torn.set(true);
                    0
                }),
            }
        };
        let newest = gallop_down(0, nb + 1, |j| tail(j) > 0);
        let fit = first_fit_ends(1, newest, |j| tail(j) + n > l);
        (!torn.get()).then(|| (self.strict_denial(all, r, newest, fit), (newest, fit)))
    }

    /// Strict's denial when the window counts `all`, its newest non-empty bucket is
    /// `b − N + newest − 1` and the first fit is at `j = fit`: as [`CounterRule::judge`]
    /// reports it.
    #[inline(always)]
    fn strict_denial(&self, all: u64, r: u64, newest: u64, fit: u64) -> Decision {
        let l = self.limit;
        Decision::denied(
            l,
            l.saturating_sub(all),
            self.after_buckets(fit, r),
            self.after_buckets(newest, r),
        )
    }

    /// What Weighted counts as in use at offset `r` given `tail(0)` and `tail(1)`.
    #[inline]
    fn weighted_use(&self, all: u64, rest: u64, r: u64) -> u64 {
        let g = self.granularity;
        let oldest = all - rest.min(all);
        // The oldest bucket's weighted share, rounded up: `remaining` is then the largest
        // whole cost that would be admitted now.
        rest.saturating_add(weighted_share(oldest, g - r, g))
    }

    #[inline]
    fn judge_weighted(&self, r: u64, n: u64, tail: impl Fn(u64) -> u64) -> Decision {
        let l = self.limit;
        let used = self.weighted_use(tail(0), tail(1), r);
        if used + n <= l {
            return self.admitted(used, r, n);
        }
        let (newest, top) = self.newest_and_tail(&tail);
        let retry = self.weighted_retry(r, n, (newest, top), &tail);
        Decision::denied(
            l,
            l.saturating_sub(used),
            retry,
            self.after_buckets(newest, r),
        )
    }

    /// The fixed window (`N = 1`, `G = W`): only the current bucket counts, `tail(1)`; a
    /// denied cost fits once the next window starts (it is at most the limit).
    fn judge_fixed(&self, r: u64, n: u64, peek: bool, tail: &impl Fn(u64) -> u64) -> Decision {
        let (l, g) = (self.limit, self.granularity);
        let used = tail(1);
        let next = g - r;
        if used + n > l {
            return Decision::denied(l, l.saturating_sub(used), next, next);
        }
        let charged = if peek { 0 } else { n };
        let reset = if used + charged > 0 { next } else { 0 };
        Decision::allowed(l, l - used - charged, reset)
    }

    /// Earliest wait after which Weighted admits `n`. In bucket `b + j` the oldest bucket
    /// holds `C_j = tail(j) − tail(j+1)` and the rest `S_j = tail(j + 1)`; with
    /// `A_j = L − n − S_j ≥ 0` the request fits from offset `G − ⌊A_j·G / C_j⌋` on. `A_j`
    /// grows with `j`, and once `A_j ≥ 0`, bucket `j + 1` always fits (`A_{j+1} ≥ C_{j+1}`),
    /// so a binary search for the first `A_j ≥ 0` and at most one step decide it. `A_j ≥ 0`
    /// holds by `j = newest − 1` ([`CounterRule::newest`]), where nothing is left but the oldest
    /// bucket, so the search ends there, and tries its ends first as Strict's does.
    fn weighted_retry(
        &self,
        r: u64,
        n: u64,
        (newest, top): (u64, u64),
        tail: &impl Fn(u64) -> u64,
    ) -> u64 {
        let (l, g, nb) = (self.limit, self.granularity, self.buckets);
        let first = first_fit_ends(0, newest.saturating_sub(1), |j| {
            (if j + 2 == newest { top } else { tail(j + 1) }) + n > l
        });
        for j in first..=nb {
            let rest = tail(j + 1);
            let all = tail(j);
            let oldest = all - rest.min(all);
            // `None` only if a concurrent reader saw a tail that is not monotone.
            let Some(room) = l.checked_sub(n + rest) else {
                continue;
            };
            let from = self.share_fits_from(room, oldest);
            if from < g {
                let at = self.after_buckets(j, 0).saturating_add(from);
                // At j = 0 the request was denied at `r`, so `from > r`; `max` keeps the wait
                // positive even if a concurrent reader saw a tail that is not monotone.
                return at.saturating_sub(r).max(1);
            }
        }
        // Bucket N + 1 holds nothing of today's window.
        self.span.saturating_sub(r)
    }

    /// Time until the window holds nothing: the newest non-empty bucket `b − N + j − 1`
    /// leaves when bucket `b + j` starts.
    fn reset_after(&self, r: u64, tail: &impl Fn(u64) -> u64) -> u64 {
        self.after_buckets(self.newest(tail), r)
    }

    /// The least `j` with `tail(j) = 0` (0 for an empty window): the newest non-empty bucket
    /// is `b − N + j − 1`. Usually the current bucket, so searched from the top.
    #[inline]
    fn newest(&self, tail: &impl Fn(u64) -> u64) -> u64 {
        gallop_down(0, self.buckets + 1, |j| tail(j) > 0)
    }

    /// [`CounterRule::newest`] and `tail(newest − 1)`, the newest non-empty bucket's tail (0
    /// for an empty window), so that a search that ends there need not load it again. The
    /// search's last true test is at `newest − 1` (its result is one past the last index it
    /// found non-empty), so the last positive tail it read is that one.
    #[inline(always)]
    fn newest_and_tail(&self, tail: &impl Fn(u64) -> u64) -> (u64, u64) {
        let top = Cell::new(0);
        let newest = gallop_down(0, self.buckets + 1, |j| {
            let t = tail(j);
            if t > 0 {
                top.set(t);
            }
            t > 0
        });
        (newest, top.get())
    }

    /// Nanoseconds from offset `r` of bucket `b` to the start of bucket `b + j`.
    #[inline]
    fn after_buckets(&self, j: u64, r: u64) -> u64 {
        j.saturating_mul(self.granularity).saturating_sub(r)
    }
}

/// The first `x` in `lo..hi` for which `pred(x)` is false, given `pred` is true then false;
/// `hi` if it is true throughout.
#[inline]
fn partition_point(mut lo: u64, mut hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
}

/// `partition_point` that tries both ends first: `lo`, then `hi − 1`. Under steady traffic the
/// oldest bucket leaving is enough; after a burst all but its bucket must leave; otherwise
/// the boundary is anywhere, and bisection is best.
#[inline(always)]
fn first_fit_ends(lo: u64, hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    if lo >= hi || !pred(lo) {
        lo
    } else if hi - 1 == lo || pred(hi - 1) {
        hi
    } else {
        partition_point(lo + 1, hi - 1, pred)
    }
}

/// `partition_point` for a boundary expected near `hi` (the newest non-empty bucket is
/// usually the current one).
#[inline(always)]
fn gallop_down(lo: u64, hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    let (mut to, mut step) = (hi, 1u64);
    while to > lo && !pred(to - 1) {
        let next = to.saturating_sub(step).max(lo);
        if next == lo || pred(next - 1) {
            return partition_point(next, to - 1, pred);
        }
        to = next - 1;
        step = step.saturating_mul(2);
    }
    to
}

/// `⌈oldest · left / g⌉`: the oldest bucket's weighted share, rounded up. A 64-bit division
/// when the product fits (always, for windows under 2 s at the largest limit), else 128-bit.
#[inline]
fn weighted_share(oldest: u64, left: u64, g: u64) -> u64 {
    match oldest.checked_mul(left) {
        Some(p) => p.div_ceil(g),
        None => (u128::from(oldest) * u128::from(left)).div_ceil(u128::from(g)) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn rule(limit: u64, buckets: u64, mode: Mode) -> CounterRule {
        let q = Quota::new(limit, Duration::from_nanos(100 * buckets))
            .unwrap()
            .with_granularity(Duration::from_nanos(100))
            .unwrap()
            .with_mode(mode);
        CounterRule::new(q)
    }

    /// `counts[i]` is the cost in bucket `b − N + i`.
    fn tail_of(counts: &[u64]) -> impl Fn(u64) -> u64 + '_ {
        move |j| counts.iter().skip(j as usize).sum()
    }

    #[test]
    fn strict_retry_waits_for_enough_buckets_to_leave() {
        let r = rule(10, 3, Mode::Strict);
        let counts = [4, 3, 2, 1];
        let d = r.judge(30, 3, false, tail_of(&counts), |_| 0);
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        // Dropping bucket 0 leaves 6 + 3 ≤ 10: one bucket ahead, 70 ns from offset 30.
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(70)));
        assert_eq!(d.reset_after(), Duration::from_nanos(370));
    }

    #[test]
    fn weighted_counts_the_oldest_bucket_in_proportion() {
        let r = rule(10, 1, Mode::Weighted);
        // Oldest bucket 8, current 0, at a quarter of the way in: share = ⌈8·75/100⌉ = 6.
        let d = r.judge(25, 4, false, tail_of(&[8, 0]), |_| 0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        let d = r.judge(25, 5, false, tail_of(&[8, 0]), |_| 0);
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 4);
        // 8·(100 − x)/100 ≤ 5 ⇔ x ≥ 37.5: offset 38, 13 ns after 25.
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(13)));
    }

    /// The fast denial is the general judgement with its searches skipped: on every window
    /// of up to 4 buckets holding 0 ..= 3 each, wherever it answers, it answers as `judge`
    /// does, and it answers a flood's denial.
    #[test]
    fn fast_denial_equals_the_general_judgement() {
        let mut answered = 0;
        for (mode, max_buckets) in [
            (Mode::Strict, 4),
            (Mode::Weighted, 4),
            (Mode::FixedWindow, 1),
        ] {
            for nb in 1..=max_buckets {
                for limit in 1..=6 {
                    let rule = rule(limit, nb, mode);
                    let windows = 4u64.pow(nb as u32 + 1);
                    for w in 0..windows {
                        let counts: Vec<u64> = (0..=nb).map(|i| (w >> (2 * i)) & 3).collect();
                        let tail = tail_of(&counts);
                        for r in [0, 1, 37, 50, 99] {
                            for n in 1..=limit {
                                let fast = rule.judge_denied_fast(
                                    tail(0),
                                    r,
                                    || Some(tail(1)),
                                    || Some(tail(nb)),
                                    n,
                                );
                                let Some(fast) = fast else { continue };
                                answered += 1;
                                let general = rule.judge(r, n, false, &tail, |_| 0);
                                assert_eq!(fast, general, "{mode:?} {counts:?} r {r} n {n}");
                            }
                        }
                    }
                }
            }
        }
        assert!(answered > 1000, "the fast denial answered {answered} times");
        // A flood's denials: the limit spent in the current bucket, or in the oldest with
        // the current one holding some.
        let r = rule(3, 2, Mode::Strict);
        for counts in [[0, 0, 3], [2, 0, 1]] {
            let tail = tail_of(&counts);
            let d = r.judge_denied_fast(tail(0), 10, || Some(tail(1)), || Some(tail(2)), 1);
            assert_eq!(d, Some(r.judge(10, 1, false, tail, |_| 0)), "{counts:?}");
        }
    }

    #[test]
    fn partition_point_finds_the_boundary() {
        assert_eq!(partition_point(0, 10, |x| x < 4), 4);
        assert_eq!(partition_point(0, 10, |_| true), 10);
        assert_eq!(partition_point(3, 10, |_| false), 3);
        for hi in 0..40u64 {
            for b in 0..=hi {
                for lo in 0..=b {
                    let ends = first_fit_ends(lo, hi, |x| x < b);
                    assert_eq!(ends, b, "first {lo}..{hi} at {b}");
                    assert_eq!(gallop_down(lo, hi, |x| x < b), b, "down {lo}..{hi} at {b}");
                }
            }
        }
    }
}
