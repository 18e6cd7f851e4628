//! The inline table's two kinds of slot: a key, its state half-word and its window, in one
//! cache line ([`LineSlot`], the line ring) or two ([`WideSlot`], the three-word ring of wide
//! slots). The table ([`super::InlineTable`]) is generic over [`InlineSlot`]: its probe,
//! states, migration, eviction and sampling are one code, and each kind brings its ring's
//! protocol, which is already argued (and loom-checked) where the ring is defined.
//!
//! | kind | bytes | window | limit | marks | buckets |
//! |---|---|---|---|---|---|
//! | [`LineSlot`] | 64 | [`Line`]: one word, `N + 1` compact slots | ≤ 2²¹ | no | ≤ 10 of ≥ 2²⁶ ns |
//! | [`WideSlot`] | 128 | [`Ring<Wide>`]: `front`, `goal`, `cum`, `N + 1` wide slots | ≤ `MAX_LIMIT` | yes | ≤ 10, any length |
//!
//! # Freezing a slot (a migration's first step, and a move to the store)
//! A frozen slot's words are its key's final state: the migration copies them into the next
//! table, a move into a store entry.
//! - The line ring's word holds its count and its fill's claim, so retiring it (the
//!   `RETIRED` bit) stops both: a fill frozen mid-way is finished in the copy from the word.
//! - The three-word ring claims a fill on `goal`, not on `cum`: retiring `cum` stops
//!   charges, but a check that loaded `cum` before the retirement may still claim a fill and
//!   write slots. So [`WideSlot`]'s freeze retires `cum`, helps any fill in progress to its
//!   end (the ring's own protocol: any thread may help), copies the words, and takes the copy
//!   only if `goal` and `front` still hold the `front` it copied: `goal` only grows, and
//!   moves only by a claim, so a claim (and every slot write of its fill) made before that
//!   re-load is seen by it, and one made after it writes only the old slot, which no reader
//!   judges on again (its `cum` is retired). A copy with a fill claimed under it is made
//!   again; each retry needs a check that read `cum` before the retirement, and each such
//!   check claims at most one fill before it reads `cum` retired, so the loop ends.
//!   The copy therefore has `front == goal`: no fill in progress. Refunds take the table's
//!   writer lock, as the migration does; a mark raised after the copy belongs to an
//!   admission whose charge then fails on the retired `cum` and is judged again on the copy.

use crate::algo::sliding_counter::CounterRule;
use crate::decision::Decision;
use crate::sync::{AtomicU64, Ordering};
use crate::window::counter;
use crate::window::cum::RETIRED;
use crate::window::line::{self, LINE_MAX_BUCKETS, LINE_MIN_GRANULARITY, Line};
use crate::window::line_counter;
use crate::window::ring::{self, Compact, Ring, Slots, Wide};

/// A live slot's state bit.
pub(super) const LIVE: u32 = 1 << 31;

/// A moved slot's state bit (with [`LIVE`]).
pub(super) const MOVED: u32 = 1 << 30;

/// The hash bits a state keeps, which also home the key (tables of up to 2³⁰ slots).
pub(super) const HASH: u32 = MOVED - 1;

/// A tombstone's state.
pub(super) const TOMBSTONE: u32 = 1;

/// One key's slot in an inline table: the key's word, the slot's state (see the table's
/// documentation) and the key's window. A published slot's key never changes; its window
/// changes only through its ring's protocol.
pub(crate) trait InlineSlot: Sized + Send + Sync + 'static {
    /// The window's words, as a migration copies them.
    type Words: Copy + Send + Sync;

    /// The most buckets a window of this kind holds.
    const MAX_BUCKETS: u64;

    /// An empty slot (state 0).
    fn empty() -> Self;

    /// Whether a table of this kind holds windows of `buckets` buckets.
    fn holds(buckets: u64) -> bool {
        (1..=Self::MAX_BUCKETS).contains(&buckets)
    }

    /// The words of a fresh window of `buckets` buckets.
    fn fresh(buckets: u64) -> Self::Words;

    /// The slot's key.
    fn key(&self) -> u64;

    /// The slot's state. Acquire: pairs with the Release that published it, so the key and
    /// the window's words written before are visible.
    fn state(&self) -> u32;

    /// Changes a published state (the writer's; the window may change meanwhile).
    fn set_state(&self, from: u32, to: u32);

    /// Writes `key` and `words` into an empty, unpublished slot, publishing `state` last
    /// (Release).
    fn publish(&self, key: u64, state: u32, words: &Self::Words);

    /// Retires the window and returns its final state, `RETIRED` cleared (see "Freezing a
    /// slot"). The writer's, under the table's lock.
    fn freeze(&self, buckets: u64) -> Self::Words;

    /// Writes the window of a slot that [`InlineSlot::retire_now`] retired into `ring`, the
    /// unpublished words of a store entry's three-word ring of this table's shape, for a key
    /// that leaves the table (a `check_all` reserves on it). Under the table's lock.
    fn copy_to_entry(&self, buckets: u64, ring: &[AtomicU64]);

    /// Retires the window whatever it holds; `true` if this call retired it.
    fn retire_now(&self, buckets: u64) -> bool;

    /// Retires the window if it is empty at `now` and at every later time; `true` if this
    /// call retired it.
    fn retire_idle(&self, buckets: u64, granularity: u64, now: u64) -> bool;

    /// The start (ns) of the newest bucket in which anything may have been admitted.
    fn last_active(&self, buckets: u64, granularity: u64) -> u64;

    /// A check's common case on the fewest loads, at reading `t`: the decision, or `None`
    /// (having written nothing, or found the window retired) for
    /// [`InlineSlot::charge_loop`].
    fn charge_fast(&self, buckets: u64, rule: &CounterRule, t: u64, n: u64) -> Option<Decision>;

    /// A check's general loop; `None` if the window is retired.
    fn charge_loop(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision>;

    /// A check: the fast path, then the general loop; `None` if the window is retired.
    fn charge(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision>;

    /// What a check of `n` would decide, writing nothing; `None` if retired.
    fn peek(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision>;

    /// Charges `x` at `now()` unconditionally, up to `ceiling` (a report: debt allowed): the
    /// units charged and the decision a peek of cost 1 makes after it; `None` if retired.
    fn record(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        x: u64,
        ceiling: u64,
    ) -> Option<(u64, Decision)>;

    /// Frees up to `n` units of room at `now()`; `None` if retired. Under the table's lock.
    fn refund(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<u64>;

    /// The total cost ever admitted (wrapping at the count's width).
    fn admitted(&self, buckets: u64) -> u64;

    /// The window sum at `now`, read without writing; `None` if retired.
    #[cfg(any(test, slidegate_loom))]
    fn sum(&self, buckets: u64, granularity: u64, now: u64) -> Option<u64>;
}

/// The words of a [`LineSlot`]'s ring: the word and six words of compact slots.
const LINE_RING: usize = 7;

/// The half of a [`LineSlot`]'s ring words that holds the slot's state.
const LINE_STATE: usize = 11;

/// A key's slot of one cache line: `key`, then the seven words of a [`Line`] ring, its
/// word and six words of compact slots, eleven halves for the ring and the twelfth for the
/// slot's state.
#[repr(C, align(64))]
pub(crate) struct LineSlot {
    key: AtomicU64,
    pub(super) ring: [AtomicU64; LINE_RING],
}

impl LineSlot {
    /// The key's ring of `buckets` buckets.
    #[inline]
    pub(crate) fn line(&self, buckets: u64) -> Line<'_> {
        Line::on(&self.ring, buckets)
    }
}

impl InlineSlot for LineSlot {
    type Words = [u64; LINE_RING];

    const MAX_BUCKETS: u64 = LINE_MAX_BUCKETS;

    fn empty() -> LineSlot {
        LineSlot {
            key: AtomicU64::new(0),
            ring: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn fresh(buckets: u64) -> [u64; LINE_RING] {
        debug_assert!(Line::fits(1, buckets, LINE_MIN_GRANULARITY));
        core::array::from_fn(|i| {
            if i < Line::words(buckets) {
                Line::initial(buckets, i)
            } else {
                0
            }
        })
    }

    #[inline(always)]
    fn key(&self) -> u64 {
        // Relaxed: written before the state a caller's Acquire read.
        self.key.load(Ordering::Relaxed)
    }

    #[inline]
    fn state(&self) -> u32 {
        Compact::load(&self.ring[1..], LINE_STATE, Ordering::Acquire) as u32
    }

    fn set_state(&self, from: u32, to: u32) {
        let swapped = Compact::compare_exchange(
            &self.ring[1..],
            LINE_STATE,
            u64::from(from),
            u64::from(to),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        debug_assert!(swapped.is_ok(), "only the writer changes a published state");
    }

    fn publish(&self, key: u64, state: u32, words: &[u64; LINE_RING]) {
        self.key.store(key, Ordering::Relaxed);
        for (word, &value) in self.ring.iter().zip(words).take(LINE_RING - 1) {
            word.store(value, Ordering::Relaxed);
        }
        // The last word holds ring half 10 and the state: stored whole, Release, after
        // everything else (nothing else writes an unpublished slot).
        let last = (words[LINE_RING - 1] & u64::from(u32::MAX)) | (u64::from(state) << 32);
        self.ring[LINE_RING - 1].store(last, Ordering::Release);
    }

    fn freeze(&self, buckets: u64) -> [u64; LINE_RING] {
        self.line(buckets).retire_now();
        // Acquire: every charge and fill write the freeze ordered before is visible.
        let mut words: [u64; LINE_RING] =
            core::array::from_fn(|i| self.ring[i].load(Ordering::Acquire));
        words[0] &= !RETIRED;
        words
    }

    fn copy_to_entry(&self, buckets: u64, ring: &[AtomicU64]) {
        line::copy_to_ring(&self.line(buckets), ring);
    }

    fn retire_now(&self, buckets: u64) -> bool {
        self.line(buckets).retire_now()
    }

    fn retire_idle(&self, buckets: u64, granularity: u64, now: u64) -> bool {
        self.line(buckets).retire_idle(granularity, now)
    }

    fn last_active(&self, buckets: u64, granularity: u64) -> u64 {
        self.line(buckets).last_active(granularity)
    }

    #[inline(always)]
    fn charge_fast(&self, buckets: u64, rule: &CounterRule, t: u64, n: u64) -> Option<Decision> {
        line_counter::charge_fast(&self.line(buckets), rule, || t, n)
    }

    #[inline(always)]
    fn charge_loop(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        line_counter::charge_loop(&self.line(buckets), rule, now, n)
    }

    #[inline(always)]
    fn charge(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        line_counter::charge(&self.line(buckets), rule, now, n)
    }

    fn peek(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        line_counter::peek(&self.line(buckets), rule, now, n)
    }

    fn record(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        x: u64,
        ceiling: u64,
    ) -> Option<(u64, Decision)> {
        line_counter::charge_debt(&self.line(buckets), rule, now, x, ceiling)
    }

    fn refund(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<u64> {
        line_counter::refund(&self.line(buckets), rule, now, n)
    }

    fn admitted(&self, buckets: u64) -> u64 {
        self.line(buckets).admitted()
    }

    #[cfg(any(test, slidegate_loom))]
    fn sum(&self, buckets: u64, granularity: u64, now: u64) -> Option<u64> {
        self.line(buckets)
            .read(granularity, || now, false, |r| r.tail(0))
            .map(|r| r.0)
    }
}

/// The most buckets a [`WideSlot`] holds: as many as a line's, so that the ring's three
/// words and `N + 1` slots, the key and the state fill two cache lines.
pub(crate) const WIDE_MAX_BUCKETS: u64 = 10;

/// The words of a [`WideSlot`]'s ring: `front`, `goal`, `cum` and eleven wide slots.
const WIDE_RING: usize = 3 + WIDE_MAX_BUCKETS as usize + 1;

/// A key's slot of two cache lines (128-aligned, so a pair the processor may fetch
/// together): `key`, the state (its low half; the high half is zero), then a [`Ring<Wide>`]
/// packed as a store entry packs it ([`ring::packed`]), whose 32-bit snapshots take any limit
/// up to `MAX_LIMIT` and whose slots keep marks.
#[repr(C, align(128))]
pub(crate) struct WideSlot {
    key: AtomicU64,
    state: AtomicU64,
    pub(super) ring: [AtomicU64; WIDE_RING],
}

impl WideSlot {
    /// The key's ring of `buckets` buckets.
    #[inline(always)]
    pub(crate) fn ring(&self, buckets: u64) -> Ring<'_, Wide> {
        Ring::from_parts(ring::packed(&self.ring), buckets)
    }
}

impl InlineSlot for WideSlot {
    type Words = [u64; WIDE_RING];

    const MAX_BUCKETS: u64 = WIDE_MAX_BUCKETS;

    fn empty() -> WideSlot {
        WideSlot {
            key: AtomicU64::new(0),
            state: AtomicU64::new(0),
            ring: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn fresh(buckets: u64) -> [u64; WIDE_RING] {
        debug_assert!(Self::holds(buckets));
        core::array::from_fn(|i| {
            if i < Ring::<Wide>::words(buckets) {
                Ring::<Wide>::initial(buckets, i)
            } else {
                0
            }
        })
    }

    #[inline(always)]
    fn key(&self) -> u64 {
        // Relaxed: written before the state a caller's Acquire read.
        self.key.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire) as u32
    }

    fn set_state(&self, from: u32, to: u32) {
        // AcqRel: Release publishes a moved or buried state after the writer's work on the
        // slot; only the writer changes a published state.
        let swapped = self.state.compare_exchange(
            u64::from(from),
            u64::from(to),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        debug_assert!(swapped.is_ok(), "only the writer changes a published state");
    }

    fn publish(&self, key: u64, state: u32, words: &[u64; WIDE_RING]) {
        self.key.store(key, Ordering::Relaxed);
        for (word, &value) in self.ring.iter().zip(words) {
            word.store(value, Ordering::Relaxed);
        }
        // Release: after everything else (nothing else writes an unpublished slot).
        self.state.store(u64::from(state), Ordering::Release);
    }

    fn freeze(&self, buckets: u64) -> [u64; WIDE_RING] {
        let ring = self.ring(buckets);
        ring.retire_now();
        loop {
            // No fill in progress from `front` (helped to its end if there was one).
            let front = ring.settle();
            // Acquire: every charge, fill and mark the retirement and the settling ordered
            // before is visible.
            let mut words: [u64; WIDE_RING] =
                core::array::from_fn(|i| self.ring[i].load(Ordering::Acquire));
            // Acquire: a fill claimed before this load, whose slot write a load above saw, is
            // seen here (see "Freezing a slot").
            if words[0] == front && words[1] == front && ring.settled_at(front) {
                words[2] &= !RETIRED;
                return words;
            }
        }
    }

    fn copy_to_entry(&self, buckets: u64, ring: &[AtomicU64]) {
        debug_assert_eq!(ring.len(), Ring::<Wide>::words(buckets));
        let words = self.freeze(buckets);
        for (to, &from) in ring.iter().zip(&words) {
            // Relaxed: the entry is published later, by its owner's Release.
            to.store(from, Ordering::Relaxed);
        }
    }

    fn retire_now(&self, buckets: u64) -> bool {
        self.ring(buckets).retire_now()
    }

    fn retire_idle(&self, buckets: u64, granularity: u64, now: u64) -> bool {
        self.ring(buckets).retire_idle(granularity, now)
    }

    fn last_active(&self, buckets: u64, granularity: u64) -> u64 {
        self.ring(buckets).last_active(granularity)
    }

    /// The ring's whole check ([`counter::charge`], as the store's entry makes it: the fast
    /// path with Strict's denial inline, else the general loop from its loads): `None` only
    /// for a retired ring.
    #[inline(always)]
    fn charge_fast(&self, buckets: u64, rule: &CounterRule, t: u64, n: u64) -> Option<Decision> {
        counter::charge(self.ring(buckets), rule, || t, n)
    }

    #[inline(always)]
    fn charge_loop(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        counter::charge_loop(self.ring(buckets), None, rule, now, n)
    }

    #[inline(always)]
    fn charge(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        counter::charge(self.ring(buckets), rule, now, n)
    }

    fn peek(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<Decision> {
        counter::decide(self.ring(buckets), rule, now, n, crate::algo::Op::Peek).map(|d| d.0)
    }

    fn record(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        x: u64,
        ceiling: u64,
    ) -> Option<(u64, Decision)> {
        counter::charge_debt(self.ring(buckets), rule, now, x, ceiling)
    }

    fn refund(
        &self,
        buckets: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<u64> {
        counter::refund(self.ring(buckets), rule, now, n)
    }

    fn admitted(&self, buckets: u64) -> u64 {
        self.ring(buckets).admitted()
    }

    #[cfg(any(test, slidegate_loom))]
    fn sum(&self, buckets: u64, granularity: u64, now: u64) -> Option<u64> {
        self.ring(buckets)
            .read(granularity, || now, false, |r| r.tail(0))
            .map(|r| r.0)
    }
}
