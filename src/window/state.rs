//! One key's state, whichever algorithm counts it: the one interface the direct limiter, the
//! keyed store and `check_all` call, and the layout that fixes what a key costs in memory.
//!
//! Each algorithm's atomic protocol lives in its own module ([`ring`] with
//! [`counter`], [`log`](super::log), [`gcra`](super::gcra)); this module only
//! dispatches. The counter's charge is not routed through here: the limiters call
//! [`counter::charge`] (the keyed limiter) or its two halves (the direct limiter) themselves,
//! because through one more layer the check stopped being inlined.

use core::mem;

use crate::algo::gcra::GcraRule;
use crate::algo::{Op, Rule};
use crate::decision::Decision;
use crate::quota::{Mode, Quota};
use crate::sync::AtomicU64;
use crate::window::counter;
use crate::window::gcra::Gcra;
use crate::window::log::Log;
use crate::window::ring::{
    self, COMPACT_MAX_BUCKETS, COMPACT_MAX_LIMIT, Compact, Parts, Ring, Wide,
};

/// What a key's state is made for: a state of another shape cannot carry a key's counts over
/// exactly, so a keyed store replaces it (see `KeyedLimiter::quota_for`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A snapshot ring of `buckets` buckets of `granularity` ns (Strict, Weighted, fixed),
    /// its slots [`Compact`] or [`Wide`].
    Ring {
        granularity: u64,
        buckets: u64,
        compact: bool,
    },
    /// A log of `capacity` slots over a window of `window` ns.
    Log { capacity: u64, window: u64 },
    /// A GCRA cell under `rule`.
    Gcra(GcraRule),
}

impl Shape {
    /// The shape `rule` needs in a keyed store: a counter's slots are compact when the rule
    /// keeps no marks, its limit is at most [`COMPACT_MAX_LIMIT`] and its window has at most
    /// [`COMPACT_MAX_BUCKETS`] buckets (see `window/ring/slots.rs`).
    #[inline]
    pub(crate) fn of(rule: &Rule) -> Shape {
        match rule.mode() {
            Mode::ExactLog => Shape::Log {
                // `Log::new` rounds the same way.
                capacity: rule.log.limit.next_power_of_two(),
                window: rule.log.window,
            },
            Mode::Gcra => Shape::Gcra(rule.gcra),
            Mode::Strict | Mode::StrictMarked | Mode::Weighted | Mode::FixedWindow => Shape::Ring {
                granularity: rule.counter.granularity,
                buckets: rule.counter.buckets,
                compact: !rule.counter.is_marked()
                    && rule.limit <= COMPACT_MAX_LIMIT
                    && rule.counter.buckets <= COMPACT_MAX_BUCKETS,
            },
        }
    }

    /// This shape with wide slots, if a ring: a direct limiter's (one ring, whose few bytes
    /// do not matter, on the wide ring's own inlined check).
    pub(crate) fn wide(self) -> Shape {
        match self {
            Shape::Ring {
                granularity,
                buckets,
                ..
            } => Shape::Ring {
                granularity,
                buckets,
                compact: false,
            },
            other => other,
        }
    }

    /// The number of atomic words a keyed entry of this shape keeps inline after its
    /// [`Head`]: a packed ring, or a GCRA cell's TAT.
    pub(crate) fn words(&self) -> usize {
        match *self {
            Shape::Ring {
                buckets,
                compact: false,
                ..
            } => Ring::<Wide>::words(buckets),
            Shape::Ring {
                buckets,
                compact: true,
                ..
            } => Ring::<Compact>::words(buckets),
            Shape::Log { .. } => 0,
            Shape::Gcra(_) => 1,
        }
    }

    /// The span a state of this shape must have been idle for before an incremental sweep
    /// evicts it ([`State::retire_stale`]): its quota's `W`, GCRA's `τ`.
    pub(crate) fn stale_after(&self) -> u64 {
        match *self {
            Shape::Ring {
                granularity,
                buckets,
                ..
            } => granularity.saturating_mul(buckets),
            Shape::Log { window, .. } => window,
            Shape::Gcra(rule) => rule.tolerance,
        }
    }

    /// The initial value of word `i` of a fresh state of this shape. Inlined into the loop
    /// that initialises a keyed entry's words, which then matches on the shape once.
    #[inline]
    pub(crate) fn initial(&self, i: usize) -> u64 {
        match *self {
            Shape::Ring {
                buckets,
                compact: false,
                ..
            } => Ring::<Wide>::initial(buckets, i),
            Shape::Ring {
                buckets,
                compact: true,
                ..
            } => Ring::<Compact>::initial(buckets, i),
            // A GCRA cell that has admitted nothing holds TAT 0.
            Shape::Log { .. } | Shape::Gcra(_) => 0,
        }
    }

    /// Bytes of a keyed entry's state of this shape: its head and words, plus the log's heap
    /// arrays ([`Quota::bytes_per_key`]).
    pub(crate) fn bytes(&self) -> usize {
        let heap = match *self {
            Shape::Log { capacity, .. } => mem::size_of::<WindowLog>() + capacity as usize * 8,
            Shape::Ring { .. } | Shape::Gcra(_) => 0,
        };
        mem::size_of::<Head>() + self.words() * 8 + heap
    }
}

/// The fixed part of one key's state: what its atomics mean. The atomics themselves are kept
/// by the owner (a keyed entry inline after its key, a direct limiter padded), and
/// [`State`] views the two together.
pub(crate) enum Head {
    /// The sliding-window counter (Strict, Weighted) or the fixed window, on wide slots.
    Ring { granularity: u64 },
    /// The same on compact slots (keyed entries only): the number of buckets kept here, as
    /// the number of words no longer tells it.
    Compact { granularity: u64, buckets: u32 },
    /// The exact sliding log with its window, boxed: its slot array is a second allocation
    /// anyway, and inline it would make every key's head as large as its.
    Log(Box<WindowLog>),
    /// GCRA. The rule's limit (narrowed: at most `MAX_LIMIT`) and interval; its tolerance
    /// `L·T` is computed from them, so that the head stays 16 bytes.
    Gcra { limit: u32, interval: u64 },
}

// Every variant's fields fit in 12 bytes beside the discriminant: a keyed entry's head is
// 16 bytes (the entry of a compact ring of ten buckets on a `u64` key, 104 bytes).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(mem::size_of::<Head>() == 16);

/// An exact log and its window, in the one box a [`Head::Log`] holds.
pub(crate) struct WindowLog {
    window: u64,
    log: Log,
}

impl Head {
    /// The head of a fresh state of `shape`.
    pub(crate) fn new(shape: Shape) -> Head {
        match shape {
            Shape::Ring {
                granularity,
                compact: false,
                ..
            } => Head::Ring { granularity },
            Shape::Ring {
                granularity,
                buckets,
                compact: true,
            } => Head::Compact {
                granularity,
                // At most `COMPACT_MAX_BUCKETS`.
                buckets: buckets as u32,
            },
            Shape::Log { capacity, window } => Head::Log(Box::new(WindowLog {
                window,
                log: Log::new(capacity),
            })),
            Shape::Gcra(rule) => Head::Gcra {
                limit: rule.limit as u32,
                interval: rule.interval,
            },
        }
    }

    /// The state of this head whose atomics are the packed `words` of a keyed entry (see
    /// [`Shape::words`]).
    #[inline]
    pub(crate) fn packed<'a>(&'a self, words: &'a [AtomicU64]) -> State<'a> {
        self.state(|| ring::packed(words), || &words[0])
    }

    /// The state of this head on its owner's atomics: `ring` gives where a counter's ring
    /// words are, `tat` GCRA's word (each asked only for a head of its algorithm). The one
    /// place a head and its atomics become a [`State`], for keyed entries and direct
    /// limiters alike.
    #[inline]
    pub(crate) fn state<'a>(
        &'a self,
        ring: impl FnOnce() -> Parts<'a>,
        tat: impl FnOnce() -> &'a AtomicU64,
    ) -> State<'a> {
        match self {
            Head::Ring { granularity } => {
                let parts = ring();
                // A wide ring has a word per slot.
                let buckets = parts.3.len() as u64 - 1;
                State::Ring {
                    granularity: *granularity,
                    ring: Ring::from_parts(parts, buckets),
                }
            }
            Head::Compact {
                granularity,
                buckets,
            } => State::Compact {
                granularity: *granularity,
                ring: Ring::from_parts(ring(), u64::from(*buckets)),
            },
            Head::Log(boxed) => State::Log {
                window: boxed.window,
                log: &boxed.log,
            },
            Head::Gcra { limit, interval } => State::Gcra {
                rule: GcraRule::from_interval(u64::from(*limit), *interval),
                cell: Gcra::view(tat()),
            },
        }
    }
}

/// One key's state, viewed where its owner keeps it: which algorithm, and its atomics.
#[derive(Clone, Copy)]
pub(crate) enum State<'a> {
    /// The sliding-window counter (Strict, Weighted) or the fixed window.
    Ring { granularity: u64, ring: Ring<'a> },
    /// The same on compact slots.
    Compact {
        granularity: u64,
        ring: Ring<'a, Compact>,
    },
    /// The exact sliding log.
    Log { window: u64, log: &'a Log },
    /// GCRA.
    Gcra { rule: GcraRule, cell: Gcra<'a> },
}

/// A `match` on a state whose counter arms, wide and compact, are one: `$ring` binds the
/// ring and `$granularity` its granularity in `$counter`, written once for both encodings;
/// the other algorithms' arms follow.
macro_rules! on_ring {
    ($state:expr, |$granularity:pat_param, $ring:ident| $counter:expr, $($other:tt)*) => {
        match $state {
            State::Ring { granularity: $granularity, ring: $ring } => $counter,
            State::Compact { granularity: $granularity, ring: $ring } => $counter,
            $($other)*
        }
    };
}
pub(crate) use on_ring;

impl State<'_> {
    /// Whether this state has `shape`. A match on the pair: building the state's own shape
    /// and comparing the two added to every keyed check's work (callgrind, `keyed_allowed`).
    #[inline]
    pub(crate) fn fits(&self, shape: Shape) -> bool {
        match (self, shape) {
            (
                State::Ring { granularity, ring },
                Shape::Ring {
                    granularity: g,
                    buckets,
                    compact: false,
                },
            ) => *granularity == g && ring.buckets() == buckets,
            (
                State::Compact { granularity, ring },
                Shape::Ring {
                    granularity: g,
                    buckets,
                    compact: true,
                },
            ) => *granularity == g && ring.buckets() == buckets,
            (
                State::Log { window, log },
                Shape::Log {
                    capacity,
                    window: w,
                },
            ) => *window == w && log.capacity() == capacity,
            // The tolerance is derived from these two (`GcraRule::from_interval`).
            (State::Gcra { rule, .. }, Shape::Gcra(r)) => {
                (rule.limit, rule.interval) == (r.limit, r.interval)
            }
            _ => false,
        }
    }

    /// Judges cost `n` (validated against `rule`) at `now()` and applies `op` if allowed.
    /// Returns the decision and a ticket for [`State::release`]. `None` if the state is
    /// retired (the caller finds the key's live state instead). `rule` must fit the state.
    #[inline]
    pub(crate) fn check(
        &self,
        rule: &Rule,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<(Decision, u64)> {
        on_ring!(self, |_, ring| match op {
            Op::Charge => counter::charge(*ring, &rule.counter, now, n).map(|d| (d, 0)),
            Op::Peek | Op::Reserve => counter::decide(*ring, &rule.counter, now, n, op),
        },
            State::Log { log, .. } => log.check(&rule.log, now, n, op).map(|d| (d, 0)),
            State::Gcra { cell, .. } => cell.check(&rule.gcra, now, n, op),
        )
    }

    /// What a peek of cost `n` under `rule` decides on a fresh state at `now`, without
    /// making one (a log would allocate).
    pub(crate) fn peek_fresh(rule: &Rule, now: u64, n: u64) -> Decision {
        match rule.mode() {
            Mode::ExactLog => Decision::allowed(rule.limit, rule.limit, 0),
            // A fresh cell's TAT is 0. Judged by the rule, not assumed: at the end of GCRA's
            // time even a fresh cell admits nothing.
            Mode::Gcra => rule.gcra.judge(0, now, n, Op::Peek).decision,
            Mode::Strict | Mode::StrictMarked | Mode::Weighted | Mode::FixedWindow => {
                counter::peek_fresh(&rule.counter, now, n)
            }
        }
    }

    /// Turns a reservation of `n` made with `ticket` into an admission (an exact log's
    /// ticket is its commit's stamp, see `multi.rs`). `false` if the state was retired
    /// (forcibly) since; see `multi.rs` for what that means.
    pub(crate) fn commit(&self, n: u64, ticket: u64) -> bool {
        // Strict with marks (wide slots) records the mark its ticket carries; other rings'
        // tickets are 0, and record nothing.
        on_ring!(self, |_, ring| ring.commit_marked(n, ticket),
            State::Log { log, .. } => log.commit(n, || ticket),
            // A GCRA reservation is a charge already.
            State::Gcra { cell, .. } => !cell.is_retired(),
        )
    }

    /// Gives back a reservation of `n` (made with `ticket`).
    pub(crate) fn release(&self, n: u64, ticket: u64, now: impl Fn() -> u64) {
        on_ring!(self, |_, ring| ring.release(n),
            State::Log { log, .. } => log.release(n),
            State::Gcra { rule, cell } => cell.release(rule, n, ticket, &now),
        )
    }

    /// Frees up to `n` units of room now (see `SlidingWindow::refund`); how many were freed,
    /// `None` if the state is retired.
    pub(crate) fn refund(&self, rule: &Rule, now: impl Fn() -> u64, n: u64) -> Option<u64> {
        on_ring!(self, |_, ring| counter::refund(*ring, &rule.counter, now, n),
            State::Log { window, log } => {
                let t = now();
                (!log.is_retired()).then(|| log.refund(*window, t, n))
            }
            State::Gcra { rule, cell } => {
                let t = now();
                (!cell.is_retired()).then(|| cell.refund(rule, t, n))
            }
        )
    }

    /// Charges `x` at `now()` whatever the window holds, past the limit as debt, up to the
    /// quota's usage ceiling (see `SlidingWindow::record`): the units charged and the
    /// decision a peek of cost 1 makes after it. `None` if the state is retired.
    ///
    /// The exact log counts a report up to its limit only, as units stamped now; its debt
    /// record (`docs/design.md`, "The exact log's debt record") is not built yet, so the rest
    /// is reported as clamped.
    pub(crate) fn record(
        &self,
        rule: &Rule,
        now: impl Fn() -> u64,
        x: u64,
    ) -> Option<(u64, Decision)> {
        let ceiling = rule.quota.usage_ceiling();
        on_ring!(self, |_, ring| counter::charge_debt(*ring, &rule.counter, now, x, ceiling),
            State::Log { log, .. } => loop {
                let peek = log.check(&rule.log, &now, 1, Op::Peek)?;
                let units = x.min(peek.remaining());
                if units == 0 {
                    return Some((0, peek));
                }
                if log.check(&rule.log, &now, units, Op::Charge)?.is_allowed() {
                    return Some((units, log.check(&rule.log, &now, 1, Op::Peek)?));
                }
            },
            State::Gcra { rule: gcra, cell } => cell.charge_debt(gcra, now, x, ceiling),
        )
    }

    /// Retires the state if it is indistinguishable from a fresh one at `now` and later.
    pub(crate) fn retire_idle(&self, now: u64) -> bool {
        on_ring!(self, |granularity, ring| ring.retire_idle(*granularity, now),
            State::Log { window, log } => log.retire_idle(*window, now),
            State::Gcra { cell, .. } => cell.retire_idle(now),
        )
    }

    /// Retires the state if it has been indistinguishable from a fresh one for at least one
    /// more window (its quota's `W`; GCRA's `τ`): what incremental sweeps evict, so that a key
    /// in steady use is not evicted and re-inserted between two of its checks. Earlier than
    /// `now` is always safe to judge at: idle then means idle at `now` and after.
    pub(crate) fn retire_stale(&self, now: u64) -> bool {
        let window = on_ring!(self,
            |granularity, ring| granularity.saturating_mul(ring.buckets()),
            State::Log { window, .. } => *window,
            State::Gcra { rule, .. } => rule.tolerance,
        );
        now.checked_sub(window)
            .is_some_and(|then| self.retire_idle(then))
    }

    /// Retires the state whatever it holds.
    pub(crate) fn retire_now(&self) -> bool {
        on_ring!(self, |_, ring| ring.retire_now(),
            State::Log { log, .. } => log.retire_now(),
            State::Gcra { cell, .. } => cell.retire_now(),
        )
    }

    /// Whether the state is retired.
    pub(crate) fn is_retired(&self) -> bool {
        on_ring!(self, |_, ring| ring.is_retired(),
            State::Log { log, .. } => log.is_retired(),
            State::Gcra { cell, .. } => cell.is_retired(),
        )
    }

    /// Whether a `check_all` holds a reservation on the state, not yet committed or
    /// released: forcing it out would forget what that call is admitting. GCRA's reservation
    /// is its TAT moved ahead, which cannot be told from an admission: `false`.
    pub(crate) fn holds_reservation(&self) -> bool {
        on_ring!(self, |_, ring| ring.holds_reservation(),
            State::Log { log, .. } => log.holds_reservation(),
            State::Gcra { .. } => false,
        )
    }

    /// A recency (ns) for least-recently-used choices.
    pub(crate) fn last_active(&self) -> u64 {
        on_ring!(self, |granularity, ring| ring.last_active(*granularity),
            State::Log { log, .. } => log.last_active(),
            State::Gcra { rule, cell } => cell.last_active(rule.tolerance),
        )
    }

    /// The total cost ever admitted, wrapping at 2³², for tests (GCRA does not count: 0).
    pub(crate) fn admitted(&self) -> u64 {
        on_ring!(self, |_, ring| ring.admitted(),
            State::Log { log, .. } => log.admitted(),
            State::Gcra { .. } => 0,
        )
    }
}

impl Quota {
    /// The bytes of state one key of this quota holds in a
    /// [`KeyedLimiter`](crate::KeyedLimiter), besides the key itself and its slot in the table:
    /// the state inline in the key's entry, plus its heap array if any. For the
    /// sliding-window counter and the fixed window with a limit of at most 2²¹, at most 63
    /// buckets and no marks (every Strict, Weighted or fixed-window quota of that size) it is
    /// `4·(N + 1)` rounded up to 8, plus 40 bytes (`N + 1` snapshots of 32 bits, three more
    /// words and a 16-byte head); for a larger limit or window, or Strict with marks,
    /// `8·(N + 1) + 40` (64-bit snapshots); for GCRA 24; for the exact log `8·L` rounded up
    /// to a power of two, plus 64. A key kept inline (see the
    /// [`KeyedLimiter`](crate::KeyedLimiter)'s "Memory") takes one 64-byte slot instead,
    /// key included.
    ///
    /// ```
    /// use slidegate::{Mode, Quota};
    /// use std::time::Duration;
    ///
    /// let q = Quota::new(100, Duration::from_secs(60))?; // N = 10 buckets
    /// assert_eq!(q.bytes_per_key(), 4 * 12 + 40);
    /// assert_eq!(q.with_mode(Mode::StrictMarked).bytes_per_key(), 8 * (10 + 1) + 40);
    /// assert_eq!(q.with_mode(Mode::Gcra).bytes_per_key(), 24);
    /// assert_eq!(q.with_mode(Mode::ExactLog).bytes_per_key(), 8 * 128 + 64);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn bytes_per_key(&self) -> usize {
        Shape::of(&Rule::new(*self)).bytes()
    }
}
