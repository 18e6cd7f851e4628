//! A ring whose count, front bucket and flags share one word: the protocol of a key's window
//! kept in one 64-byte line of an inline table.
//!
//! [`super::ring`] keeps three words before its slots (`front`, `goal`, `cum`); with
//! [`Compact`] slots a window of `N = 10` buckets then needs 72 bytes, so a key's window, its
//! key and its hash cannot share one cache line. This ring keeps one word and the `N + 1`
//! compact slots: at `N = 10`, 8 + 44 bytes, leaving 12 for an 8-byte key and a 32-bit hash
//! (the half slot after the eleventh). The keyed limiter's inline table
//! ([`crate::keyed::inline`]) keeps one in each key's slot (see `docs/design.md`, 4.5).
//!
//! # The word
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 63 | [`RETIRED`] | as the ring's: every compare-and-swap expecting a word without it fails |
//! | 62 | [`FILLING`] | a fill to bucket `front` is in progress: every charge fails |
//! | 24..62 | *front* | the newest bucket of the window (38 bits) |
//! | 0..24 | *count* | cost ever admitted, mod 2²⁴, the compact snapshots' width |
//!
//! The front is a bucket's internal index (`t / G + R`, as the ring's), exact in 38 bits when
//! `G ≥ 2²⁶` ns ([`LINE_MIN_GRANULARITY`]): readings stop at 2⁶³ ns, so indices stay below
//! 2³⁷ + R. A quota with shorter buckets, more than [`LINE_MAX_BUCKETS`] of them, or a limit
//! above [`COMPACT_MAX_LIMIT`] keeps the ring of three words. There is no pending field: a
//! key that a check across several limits reserves on keeps that ring too.
//!
//! # Protocol
//! - **Fill** (the first request that sees a bucket newer than `front`): *claim* by one CAS of
//!   the word from `(c, F)` with no flag to `(c, G, FILLING)`, `G` the goal
//!   ([`goal_for`]: the bucket itself, or half-way round the tags after a gap near a multiple
//!   of 2⁸ buckets). While the flag is set every charge fails (its CAS expects no flag), so the
//!   count stays `c` and the fill's work is fixed by the word alone: each slot of `G`'s
//!   window whose tag is not its bucket `k` is set to `(k, c)`, oldest first, by CAS from the
//!   stale value loaded; a slot tagged `k` already is kept (a bucket of `F`'s window, or one a
//!   helper established). Any thread that loads a word with the flag helps: it needs nothing
//!   but the word. The thread that finds every slot established clears the flag with a CAS
//!   from the claimed word. A helper re-loads the word after each slot load and stops if the
//!   fill is over, so a helper that wakes late never overwrites a newer bucket.
//! - **Check**: load the word (a flag: help, or `None` if retired), the slots the judge asks
//!   for (tags must match: otherwise a fill moved the ring, retry); judge; an admission CASes
//!   the word from the value loaded to the count plus the cost. A denial writes nothing.
//!
//! # Why this is the ring's protocol with fewer words
//! The ring's fill needs `goal` because its count keeps moving while it fills: helpers read
//! different counts, and two fills with different goals could interleave. Here fills are
//! serialized by the claim (it is a CAS from a word without the flag), and a claimed fill's
//! count cannot move, so:
//! - **Every snapshot is a count read no earlier than every admission counted in an older
//!   bucket.** The fill's `c` is the count at the claim; every admission judged at a bucket
//!   `≤ F` landed before the claim (it CASed a word without the flag, before the claim's CAS
//!   in the word's modification order), and none lands during the fill. An admission judged
//!   at `F` that had not landed by the claim never does: its CAS expects the word it judged
//!   on, with front `F`, and fails; it is judged again on the established window of `G`.
//!   (In the three-word ring such an admission lands in `G`'s buckets instead, toward
//!   denial; here it cannot.) "Why Strict never over-admits" there holds unchanged.
//! - **Snapshots are monotone across the window.** Kept slots hold counts taken at or before
//!   earlier claims, at most `c` (counts only grow), and refunds raise no snapshot above the
//!   count they read (below). New slots hold `c`.
//! - **Tags never alias** for the ring's reason: `goal_for` keeps a jump's distance from
//!   `front`, mod 2⁸, in `N + 1 ..= 2⁸ − N − 1`, so a stale slot's tag is never its new
//!   bucket's, and a kept slot's tag is.
//! - **Readers see established slots.** The flag is cleared by a Release CAS after the
//!   clearer's Acquire loads found every slot of the window established (by its own CAS or
//!   another helper's Release CAS); a reader's Acquire load of a word without the flag and
//!   front `G` therefore sees them all, or later values of them (a refund's raise, or a
//!   newer fill's, which changes the tag and tears the reading).
//! - **A late helper.** It CASes a slot from the stale value it loaded only after re-loading
//!   the word and finding the same fill still in progress; if the fill completes in between,
//!   the slot holds `(k, c)` or a later value and the CAS fails. (It could succeed only if the
//!   slot came back to the exact value loaded, which takes the tag's 2⁸ buckets of fills while
//!   the helper stalls between two instructions: the ring's assumption too.)
//!
//! # Refunds
//! As the ring's ("Refunds"), without the barrier. The refund reads the word without the flag
//! (count `c`, front `F`) and the oldest snapshot `s`, and raises the window's snapshots,
//! newest first, to `s' ≤ c`. A fill claimed after that load claimed from a word at least as
//! late, so its count, which every new slot gets, is at least `c ≥ s'`; a fill claimed before
//! it had finished (the load found no flag). So no fill establishes a newer bucket below a
//! raised older one, which is what the ring's barrier (a no-op CAS of `goal`) ensures.
//! A reading loads the oldest bucket's slot once, as the ring's reading does: a refund's
//! raises land newest first and on the oldest last, so a judgement that loaded it again
//! after the newer ones moved could count the refund in one tail and not in another
//! (`loom-tests/tests/line_fast_denial.rs`).
//!
//! # Retirement
//! As the ring's: an idle retirement CASes the word from a reading whose window is empty to
//! the word with [`RETIRED`]; a forced one sets the bit. A fill in progress finds it at its
//! next re-load, stops, and its clearing CAS fails: a retired ring is never read again.

use core::cell::Cell;

use crate::algo::sliding_counter::Tail;
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::window::cum::RETIRED;
use crate::window::ring::{
    self, COMPACT_MAX_LIMIT, Compact, MAX_READING, Raised, Ring, Slots, goal_for,
};

/// The flag of a fill in progress (see the module documentation).
pub(crate) const FILLING: u64 = 1 << 62;

/// The bits of the word that count admitted cost (mod 2²⁴, the compact snapshots' width).
const COUNT: u64 = (1 << 24) - 1;

/// The shift of the front field.
const FRONT_SHIFT: u32 = 24;

/// The bits of the front field, before its shift.
const FRONT: u64 = (1 << 38) - 1;

/// The shortest bucket (ns) whose indices fit the front field: 2²⁶ ns, about 67 ms.
pub(crate) const LINE_MIN_GRANULARITY: u64 = 1 << 26;

// The bucket of the latest reading the ring tells apart fits the front field (an internal
// index is `t / G + R`, `R = N + 1`).
const _: () = assert!(MAX_READING / LINE_MIN_GRANULARITY + LINE_MAX_BUCKETS + 1 < FRONT);

/// The most buckets a line ring has: eleven compact slots fill 44 bytes of a 64-byte line.
pub(crate) const LINE_MAX_BUCKETS: u64 = 10;

/// `⌈2⁶⁴ / d⌉` for each divisor `d = N + 1` of a line ring (`2 ..= 11`; 0 elsewhere):
/// `⌊a·m / 2⁶⁴⌋ = ⌊a / d⌋` exactly for every `a < 2⁶⁰`. With `m = 2⁶⁴/d + e`, `0 ≤ e < 1`,
/// `a·m / 2⁶⁴ = a/d + a·e/2⁶⁴`, whose second term is below `2⁻⁴` while the fraction of `a/d`
/// is at most `(d − 1)/d ≤ 1 − 1/11`: the floor does not move. Buckets stay below 2³⁹.
const RECIPROCALS: [u64; LINE_MAX_BUCKETS as usize + 2] = {
    let mut r = [0; LINE_MAX_BUCKETS as usize + 2];
    let mut d = 2;
    while d < r.len() {
        r[d] = u64::MAX / d as u64 + 1;
        d += 1;
    }
    r
};

/// The front bucket of `word`.
#[inline(always)]
pub(crate) fn front_of(word: u64) -> u64 {
    (word >> FRONT_SHIFT) & FRONT
}

/// The word of a fill to bucket `goal` claimed from `word`: its count, front `goal`, the
/// flag.
#[inline(always)]
pub(crate) fn claim(word: u64, goal: u64) -> u64 {
    debug_assert!(goal <= FRONT);
    (word & COUNT) | ((goal & FRONT) << FRONT_SHIFT) | FILLING
}

/// `word` with `cost` added to its count, wrapping within the count's bits.
#[inline(always)]
fn add_count(word: u64, cost: u64) -> u64 {
    (word & !COUNT) | (word.wrapping_add(cost) & COUNT)
}

/// A window of `N` buckets on a state word and the words of its `N + 1` compact slots.
#[derive(Clone, Copy)]
pub(crate) struct Line<'a> {
    pub(super) word: &'a AtomicU64,
    slots: &'a [AtomicU64],
    /// `N`.
    pub(super) buckets: u64,
}

/// A reading of the ring, handed to the judge of [`Line::read`].
pub(crate) struct LineReading<'a> {
    line: &'a Line<'a>,
    front: u64,
    /// The internal index of the bucket judged.
    pub(crate) bucket: u64,
    /// Nanoseconds into that bucket (what Weighted's rule weighs the oldest bucket by; the
    /// models judge Strict only).
    pub(crate) offset: u64,
    /// How far the clock reading lies before the time judged (the ring's `Reading::lag`).
    pub(crate) lag: u64,
    /// The word as read.
    word: u64,
    /// The slot of bucket `front − N` once loaded: a judgement reads it once, as the ring's
    /// reading does, so that every tail it takes counts the oldest bucket alike. A refund
    /// raises the window's snapshots newest first and this one last (its moment); a
    /// judgement that loaded it again after the newer ones were raised could see the
    /// refund's effect in one tail and not in another.
    oldest: Cell<Option<u64>>,
    torn: Cell<bool>,
}

impl LineReading<'_> {
    /// The cost admitted in buckets `b − N + j ..= b`.
    pub(crate) fn tail(&self, j: u64) -> u64 {
        let k = self.bucket - self.line.buckets + j;
        if k > self.front {
            // Nothing is counted in a bucket newer than `front`.
            return 0;
        }
        let slot = if k == self.front - self.line.buckets {
            match self.oldest.get() {
                Some(slot) => slot,
                None => {
                    // Acquire: as below.
                    let slot = self.line.load_slot(k, Ordering::Acquire);
                    self.oldest.set(Some(slot));
                    slot
                }
            }
        } else {
            // Acquire: pairs with the Release of the CAS that established or raised the slot.
            self.line.load_slot(k, Ordering::Acquire)
        };
        tail_under(Compact::count(self.word), k, slot).unwrap_or_else(|| {
            self.torn.set(true);
            0
        })
    }
}

/// The cost counted since bucket `k`'s snapshot, held in `slot`, under a word's `count`:
/// `None` if the reading is torn, when the slot holds another bucket's snapshot (a fill
/// moved the ring since the word was loaded) or one past the count (a refund raised it, only
/// possible if the count moved since): the reader reads again. [`LineReading::tail`]'s and
/// [`charge_fast`]'s.
///
/// [`charge_fast`]: super::line_counter::charge_fast
#[inline(always)]
fn tail_under(count: u32, k: u64, slot: u64) -> Option<u64> {
    let snapshot = Compact::snapshot_of(slot);
    (Compact::tag_of(slot) == Compact::tag(k) && Compact::at_or_after(count, snapshot))
        .then(|| u64::from(Compact::since(count, snapshot)))
}

/// [`charge_fast`]'s tail of `bucket`, whose snapshot is in slot `index` (`bucket mod
/// (N + 1)`), under the word's `count`, loaded when a judgement needs it. A type of its own
/// rather than a closure, so that its load is always inlined: the closures, each passed to
/// two judgements, were called out of line.
///
/// [`charge_fast`]: super::line_counter::charge_fast
#[derive(Clone, Copy)]
pub(super) struct SlotTail<'l> {
    pub(super) line: &'l Line<'l>,
    pub(super) count: u32,
    pub(super) bucket: u64,
    pub(super) index: usize,
}

impl Tail for SlotTail<'_> {
    /// `None` if the reading is torn ([`tail_under`]).
    #[inline(always)]
    fn load(self) -> Option<u64> {
        // Acquire: as `LineReading::tail`'s load.
        let slot = Compact::load(self.line.slots, self.index, Ordering::Acquire);
        tail_under(self.count, self.bucket, slot)
    }
}

impl<'a> Line<'a> {
    /// The number of words a line ring of `buckets` buckets needs: the word and its slots'.
    pub(crate) fn words(buckets: u64) -> usize {
        1 + Compact::words(buckets + 1)
    }

    /// The initial value of word `i` of a line ring of `buckets` buckets that has admitted
    /// nothing: the ring's initial state (front `R`, buckets `1 ..= R` with snapshot 0).
    pub(crate) fn initial(buckets: u64, i: usize) -> u64 {
        match i {
            0 => (buckets + 1) << FRONT_SHIFT,
            _ => Compact::initial_word(i - 1, buckets + 1, |s| {
                Ring::<Compact>::initial_slot(buckets, s as usize)
            }),
        }
    }

    /// Whether a quota of `limit` over `buckets` buckets of `granularity` ns fits a line ring.
    pub(crate) fn fits(limit: u64, buckets: u64, granularity: u64) -> bool {
        limit <= COMPACT_MAX_LIMIT
            && (1..=LINE_MAX_BUCKETS).contains(&buckets)
            && granularity >= LINE_MIN_GRANULARITY
    }

    /// The ring of `buckets` buckets on `words` (at least [`Line::words`], initialised by
    /// [`Line::initial`]).
    #[inline]
    pub(crate) fn on(words: &'a [AtomicU64], buckets: u64) -> Line<'a> {
        let (word, slots) = words.split_first().expect("a line ring has a word");
        Line {
            word,
            slots,
            buckets,
        }
    }

    /// The slot of `bucket`: `bucket mod (N + 1)`, by a multiplication with the divisor's
    /// reciprocal ([`RECIPROCALS`]) rather than a division, which the fast path would take
    /// up to three times per check (a 64-bit division is tens of cycles).
    #[inline(always)]
    pub(super) fn index(&self, bucket: u64) -> usize {
        let d = self.buckets + 1;
        debug_assert!(bucket < 1 << 60, "bucket {bucket}");
        let q = ((u128::from(bucket) * u128::from(RECIPROCALS[d as usize])) >> 64) as u64;
        (bucket - q * d) as usize
    }

    #[inline(always)]
    fn load_slot(&self, bucket: u64, order: Ordering) -> u64 {
        Compact::load(self.slots, self.index(bucket), order)
    }

    /// Reads the ring consistently at time `now()`, hands the reading to `judge`, and returns
    /// what it returned with the word judged on (for [`Line::try_charge`]). With `establish`
    /// the ring is first moved to the bucket of `now`; without it, the only writes are to
    /// help a fill in progress finish (every reader of a flagged word does, so that no
    /// reader waits on a stalled claimer). `None` if the ring is retired.
    pub(crate) fn read<T>(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        establish: bool,
        mut judge: impl FnMut(&LineReading<'_>) -> T,
    ) -> Option<(T, u64)> {
        debug_assert!(granularity >= LINE_MIN_GRANULARITY);
        let len = self.buckets + 1;
        let mut t = None;
        let mut reread = false;
        loop {
            let now_t = (*t.get_or_insert_with(&now)).min(MAX_READING);
            // Acquire: pairs with the Release of the CAS that cleared a fill's flag (every
            // slot of the window is then visible) and of admissions.
            let word = self.word.load(Ordering::Acquire);
            if word & RETIRED != 0 {
                return None;
            }
            if word & FILLING != 0 {
                self.fill(word);
                continue;
            }
            let front = front_of(word);
            // The bucket of `now_t`, without a division when it is bucket `front` (the common
            // case), as the ring's `locate`. `(front − R)·G ≤` some reading already seen.
            let start = (front - len).wrapping_mul(granularity);
            let (mut bucket, mut offset) = match now_t.checked_sub(start) {
                Some(into) if into < granularity => (front, into),
                _ => (now_t / granularity + len, now_t % granularity),
            };
            let mut lag = 0;
            if bucket < front {
                // Someone read a later time: read the clock once more, then judge at the
                // start of bucket `front`, as the ring does.
                if !reread {
                    (t, reread) = (None, true);
                    continue;
                }
                (bucket, offset) = (front, 0);
                // Bucket `front` starts at `(front − R)·G`, after `now_t`.
                lag = start.wrapping_sub(now_t);
            }
            if bucket > front && establish {
                let goal = goal_for::<Compact>(front, bucket, self.buckets);
                let claimed = claim(word, goal);
                // AcqRel: the claim is ordered after every admission it counts (Acquire) and
                // read by helpers (Release). Losing it means the word moved: read again.
                if self
                    .word
                    .compare_exchange(word, claimed, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    self.fill(claimed);
                }
                continue;
            }
            let reading = LineReading {
                line: self,
                front,
                bucket,
                offset,
                lag,
                word,
                oldest: Cell::new(None),
                torn: Cell::new(false),
            };
            let verdict = judge(&reading);
            if !reading.torn.get() {
                return Some((verdict, word));
            }
            (t, reread) = (None, false);
        }
    }

    /// Charges `cost` if the word is still `seen` (the word a judgement was made on).
    #[inline]
    pub(crate) fn try_charge(&self, seen: u64, cost: u64) -> bool {
        // AcqRel: Release publishes the admission to readers of the word; Acquire keeps a
        // later read of this thread after it. Fails on a retired ring or a claimed fill.
        self.word
            .compare_exchange(
                seen,
                add_count(seen, cost),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Completes the fill claimed in `claimed` (a word with [`FILLING`]), unless it is over.
    fn fill(&self, claimed: u64) {
        let goal = front_of(claimed);
        let snapshot = Compact::count(claimed);
        let backoff = Backoff::new();
        for k in goal - self.buckets..=goal {
            let i = self.index(k);
            loop {
                // Acquire: pairs with the Release of another helper's CAS, which the clearing
                // CAS below then publishes on.
                let seen = Compact::load(self.slots, i, Ordering::Acquire);
                if Compact::tag_of(seen) == Compact::tag(k) {
                    break;
                }
                // Acquire: if the fill is over, `seen` may be a newer bucket's.
                if self.word.load(Ordering::Acquire) != claimed {
                    return;
                }
                // AcqRel: Release publishes the slot to the clearer.
                if Compact::compare_exchange(
                    self.slots,
                    i,
                    seen,
                    Compact::pack(k, snapshot),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
                {
                    break;
                }
                backoff.spin();
            }
        }
        // AcqRel: Release publishes every slot of the window to readers of the cleared word.
        // Fails if another helper cleared it, or the ring was retired.
        let _ = self.word.compare_exchange(
            claimed,
            claimed & !FILLING,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Frees up to `n` units of room now by expiring the oldest units counted in buckets
    /// `b − N + skip(reading) ..= b` of the window of `now()` (the ring's [`Ring::refund`]);
    /// returns how many. `None` if the ring is retired.
    pub(crate) fn refund(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        n: u64,
        skip: impl Fn(&LineReading<'_>) -> u64,
    ) -> Option<u64> {
        let backoff = Backoff::new();
        let mut left = n;
        let mut freed = 0;
        while left > 0 {
            let read = self.read(granularity, &now, true, |r| {
                let skip = skip(r);
                let counted = r.tail(skip);
                let oldest = r.bucket - self.buckets + skip;
                // The oldest bucket's snapshot, which `tail(0)` subtracted.
                let from = Compact::since(Compact::count(r.word), counted as u32);
                (r.front.min(r.bucket), oldest, from, counted)
            });
            let Some(((front, oldest, from, counted), _)) = read else {
                return (freed > 0).then_some(freed);
            };
            let raise = left.min(counted).min(Compact::MAX_RAISE);
            if raise == 0 {
                break;
            }
            let to = Compact::ahead(from, raise as u32);
            match ring::raise::<Compact>(self.slots, self.buckets + 1, oldest, front, to) {
                Raised::Oldest(units) => {
                    freed += u64::from(units);
                    left -= u64::from(units);
                }
                Raised::Moved => return Some(freed + raise),
                Raised::Lost => backoff.spin(),
            }
        }
        Some(freed)
    }

    /// Retires the ring if its window is empty at `now` and at every later time (the ring's
    /// [`Ring::retire_idle`]); `true` if this call retired it.
    pub(crate) fn retire_idle(&self, granularity: u64, now: u64) -> bool {
        let Some((empty, seen)) = self.read(granularity, || now, false, |r| r.tail(0) == 0) else {
            return false;
        };
        // AcqRel: success proves nothing was admitted, and no fill claimed, since the load.
        empty
            && self
                .word
                .compare_exchange(seen, seen | RETIRED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The start (ns) of the front bucket, the newest in which anything may have been
    /// admitted: a recency for least-recently-used choices (the ring's
    /// [`Ring::last_active`]).
    pub(crate) fn last_active(&self, granularity: u64) -> u64 {
        // Relaxed: a heuristic; a stale value only makes a worse eviction choice.
        let front = front_of(self.word.load(Ordering::Relaxed));
        (front - (self.buckets + 1)).saturating_mul(granularity)
    }

    /// Retires the ring whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        crate::window::cum::retire_now(self.word)
    }

    /// The total cost ever admitted (wrapping at 2²⁴).
    pub(crate) fn admitted(&self) -> u64 {
        // Acquire: for callers that read after joining.
        self.word.load(Ordering::Acquire) & COUNT
    }

    /// The front bucket and the `(tag, snapshot)` of each slot of its window, oldest first,
    /// read after the ring is quiet (for the tests' invariant checks).
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn window(&self) -> (u64, Vec<(u32, u32)>) {
        let front = front_of(self.word.load(Ordering::Acquire));
        let slots = (front - self.buckets..=front)
            .map(|k| {
                let slot = self.load_slot(k, Ordering::Acquire);
                (Compact::tag_of(slot), Compact::snapshot_of(slot))
            })
            .collect();
        (front, slots)
    }
}

/// Writes into `ring` (the words of a three-word ring of compact slots, [`Ring::words`] of
/// them, not yet published) the state of the retired line ring `line`, for a key that
/// leaves the inline table: a key a `check_all` reserves on needs the pending field the line
/// ring has no room for. `front = goal =` the line's front, `cum` its count, the same slots
/// (the encoding is the same). A fill the retirement froze mid-way is finished in the copy
/// from the word, with the count it claimed, as its first reader finishes it on the line.
/// The caller holds the table's writer lock, so nothing writes the line meanwhile (a
/// refund takes the lock too, and the retirement stops charges and fills).
pub(crate) fn copy_to_ring(line: &Line<'_>, ring: &[AtomicU64]) {
    let n = line.buckets;
    debug_assert_eq!(ring.len(), Ring::<Compact>::words(n));
    // Acquire: every charge, fill and raise ordered before the retirement is visible.
    let word = line.word.load(Ordering::Acquire);
    debug_assert!(word & RETIRED != 0, "a live line ring is not copied");
    let (front, count) = (front_of(word), word & COUNT);
    let (head, slots) = ring.split_at(3);
    // Relaxed: the ring is published later, by its owner's Release.
    head[0].store(front, Ordering::Relaxed);
    head[1].store(front, Ordering::Relaxed);
    head[2].store(count, Ordering::Relaxed);
    for (to, from) in slots.iter().zip(line.slots) {
        // Acquire: as the word's.
        to.store(from.load(Ordering::Acquire), Ordering::Relaxed);
    }
    if word & FILLING != 0 {
        for k in front - n..=front {
            let i = (k % (n + 1)) as usize;
            let seen = Compact::load(slots, i, Ordering::Relaxed);
            if Compact::tag_of(seen) != Compact::tag(k) {
                // Relaxed: single-threaded on unpublished words; it cannot fail.
                let _ = Compact::compare_exchange(
                    slots,
                    i,
                    seen,
                    Compact::pack(k, count as u32),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests;
