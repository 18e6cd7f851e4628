//! How a ring keeps its `N + 1` slots: two encodings of one slot, for one protocol.
//!
//! A slot packs a *tag* (the bucket index mod 2^`TAG_BITS`), a *mark* (`MARK_BITS`, for
//! Strict with marks) and a *snapshot* (the count of `cum` when its bucket started, mod
//! 2^`SNAPSHOT_BITS`). The ring's code reads and writes slots only through [`Slots`], as
//! values in a `u64`, so every argument of the ring's documentation holds for both
//! encodings with their widths:
//!
//! - [`Wide`]: a 64-bit word per slot, a 24-bit tag, an 8-bit mark and a 32-bit snapshot.
//!   Any limit up to `MAX_LIMIT`, any `N` up to 2¹⁶, marks. The direct limiter's, and a keyed
//!   key's when its quota needs it.
//! - [`Compact`]: two slots in each 64-bit word, each an 8-bit tag and a 24-bit snapshot, no
//!   mark: half the bytes, for a keyed key whose quota has no marks, a limit of at most
//!   [`COMPACT_MAX_LIMIT`] and at most [`COMPACT_MAX_BUCKETS`] buckets
//!   ([`Shape::of`](crate::window::state::Shape::of) decides). At `N = 10` a key's entry
//!   takes 104 bytes instead of 144.
//!
//! # Why the narrow fields stay exact
//! - **Snapshots.** A tail is the count less a snapshot, mod 2^`SNAPSHOT_BITS`; it is exact
//!   when the true tail is below 2^(`SNAPSHOT_BITS` − 1), which also lets a snapshot above the
//!   count (a refund's raise seen by an older reading) be told by its sign. A window read
//!   consistently holds at most about twice the limit (Weighted), plus pending reservations
//!   (at most the limit): below 3 · 2²¹ < 2²³ for a compact ring, and a refund raises at most
//!   [`Slots::MAX_RAISE`] = 2²³ − 1 at a time.
//! - **Tags.** Two tags that can meet in one slot differ by 1 to `2N` buckets, or by a jump
//!   the fill's goal keeps between `N + 1` and 2^`TAG_BITS` − `N` − 1 (stopping half-way, at
//!   2^(`TAG_BITS` − 1), when the jump is near a multiple of 2^`TAG_BITS`; see
//!   `ring::goal_for`). With 8 bits that needs `2N + 1 < 256` and `N < 128`:
//!   [`COMPACT_MAX_BUCKETS`] is 63, leaving room.
//!
//! # Why half a word is a slot
//! A compact slot's load is a load of its word, with the same ordering, and then a shift: it
//! reads the slot's latest value or an older one, as a load of the slot would. Its
//! compare-and-swap loads the word, fails with the slot's value if that is not the value
//! expected, and otherwise swaps the whole word from the value loaded to the one with the
//! slot replaced, trying again while only the other slot of the word changed. It succeeds
//! exactly when the slot held the expected value at the swap, and fails only when the slot
//! held another value at the load: the compare-and-swap of one slot, with the orderings
//! asked for. Two slots in one word share one modification order, which only adds order
//! between them; the ring relies on none being absent.

use crate::sync::{AtomicU64, Ordering};

/// The largest limit a compact ring counts (2²¹): see "Why the narrow fields stay exact".
pub(crate) const COMPACT_MAX_LIMIT: u64 = 1 << 21;

/// The most buckets a compact ring has (its 8-bit tags allow up to 127).
pub(crate) const COMPACT_MAX_BUCKETS: u64 = 63;

/// A slot encoding (see the module documentation). Slots are handled as `u64` values.
pub(crate) trait Slots: Copy + 'static {
    /// The bits of a tag (the top ones of a slot, unless the encoding places its fields
    /// itself).
    const TAG_BITS: u32;
    /// The bits of a mark (0: the encoding keeps none).
    const MARK_BITS: u32;
    /// The bits of a snapshot.
    const SNAPSHOT_BITS: u32;
    /// The most one raise of a refund expires: the largest tail told from a negative one.
    const MAX_RAISE: u64 = (1 << (Self::SNAPSHOT_BITS - 1)) - 1;
    /// The snapshot's bits of a `u32`.
    const SNAPSHOT_MASK: u32 = u32::MAX >> (32 - Self::SNAPSHOT_BITS);

    /// The number of 64-bit words `len` slots take.
    fn words(len: u64) -> usize;

    /// The initial value of word `w` given the initial value of each slot.
    fn initial_word(w: usize, len: u64, slot: impl Fn(u64) -> u64) -> u64;

    /// Slot `i` of `words`.
    fn load(words: &[AtomicU64], i: usize, order: Ordering) -> u64;

    /// A compare-and-swap of slot `i`: `Err` with the slot's value if it was not `current`.
    fn compare_exchange(
        words: &[AtomicU64],
        i: usize,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;

    /// The bucket index `k` as a tag holds it.
    #[inline(always)]
    fn tag(k: u64) -> u32 {
        (k as u32) & (u32::MAX >> (32 - Self::TAG_BITS))
    }

    /// A slot of bucket `bucket` with `snapshot` and no mark.
    #[inline(always)]
    fn pack(bucket: u64, snapshot: u32) -> u64 {
        (u64::from(Self::tag(bucket)) << (Self::SNAPSHOT_BITS + Self::MARK_BITS))
            | u64::from(snapshot & Self::SNAPSHOT_MASK)
    }

    /// The slot's tag.
    #[inline(always)]
    fn tag_of(slot: u64) -> u32 {
        (slot >> (Self::SNAPSHOT_BITS + Self::MARK_BITS)) as u32
    }

    /// The slot's snapshot.
    #[inline(always)]
    fn snapshot_of(slot: u64) -> u32 {
        slot as u32 & Self::SNAPSHOT_MASK
    }

    /// The slot's mark (0 in an encoding without marks).
    #[inline(always)]
    fn mark_of(slot: u64) -> u64 {
        (slot >> Self::SNAPSHOT_BITS) & ((1 << Self::MARK_BITS) - 1)
    }

    /// `slot` with its mark replaced by `mark` (unchanged in an encoding without marks).
    #[inline(always)]
    fn with_mark(slot: u64, mark: u64) -> u64 {
        let field = ((1 << Self::MARK_BITS) - 1) << Self::SNAPSHOT_BITS;
        (slot & !field) | ((mark << Self::SNAPSHOT_BITS) & field)
    }

    /// `slot` with its snapshot replaced by `snapshot` (its tag and mark kept).
    #[inline(always)]
    fn with_snapshot(slot: u64, snapshot: u32) -> u64 {
        (slot & !u64::from(Self::SNAPSHOT_MASK)) | u64::from(snapshot & Self::SNAPSHOT_MASK)
    }

    /// The count of `cum` as snapshots hold it.
    #[inline(always)]
    fn count(cum: u64) -> u32 {
        cum as u32 & Self::SNAPSHOT_MASK
    }

    /// `a − b` in the snapshots' wrapping arithmetic.
    #[inline(always)]
    fn since(a: u32, b: u32) -> u32 {
        a.wrapping_sub(b) & Self::SNAPSHOT_MASK
    }

    /// `a + n` in the snapshots' wrapping arithmetic.
    #[inline(always)]
    fn ahead(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & Self::SNAPSHOT_MASK
    }

    /// Whether `a` is at or after `b` in the wrapping order (they are always within
    /// [`Slots::MAX_RAISE`] of each other).
    #[inline(always)]
    fn at_or_after(a: u32, b: u32) -> bool {
        u64::from(Self::since(a, b)) <= Self::MAX_RAISE
    }

    /// The later of two snapshots in the wrapping order.
    #[inline(always)]
    fn later(a: u32, b: u32) -> u32 {
        if b != a && Self::at_or_after(b, a) {
            b
        } else {
            a
        }
    }
}

/// A 64-bit word per slot: 24-bit tag, 8-bit mark, 32-bit snapshot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wide;

impl Slots for Wide {
    const TAG_BITS: u32 = 24;
    const MARK_BITS: u32 = 8;
    const SNAPSHOT_BITS: u32 = 32;

    #[inline(always)]
    fn words(len: u64) -> usize {
        len as usize
    }

    fn initial_word(w: usize, _len: u64, slot: impl Fn(u64) -> u64) -> u64 {
        slot(w as u64)
    }

    #[inline(always)]
    fn load(words: &[AtomicU64], i: usize, order: Ordering) -> u64 {
        words[i].load(order)
    }

    #[inline(always)]
    fn compare_exchange(
        words: &[AtomicU64],
        i: usize,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        words[i].compare_exchange(current, new, success, failure)
    }
}

/// Two slots per 64-bit word, each an 8-bit tag (its low bits) and a 24-bit snapshot, no
/// mark: slot `i` is the half `i mod 2` (low, then high) of word `i / 2`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compact;

impl Compact {
    /// The shift of slot `i` in its word.
    #[inline(always)]
    fn shift(i: usize) -> u32 {
        ((i & 1) as u32) * 32
    }
}

impl Slots for Compact {
    const TAG_BITS: u32 = 8;
    const MARK_BITS: u32 = 0;
    const SNAPSHOT_BITS: u32 = 24;

    // The tag in the low 8 bits, the snapshot above it. With the tag in the top 8 bits, as a
    // wide slot has it, an allowed check at a million keys was much slower than the wide
    // slots' with the same instructions and the same simulated cache misses (callgrind,
    // cachegrind); with the tag low, as fast (`keyed_allowed/1000000`, run alternately). Why
    // is not known; the layout is what was measured faster.

    #[inline(always)]
    fn pack(bucket: u64, snapshot: u32) -> u64 {
        u64::from(Self::tag(bucket)) | (u64::from(snapshot & Self::SNAPSHOT_MASK) << 8)
    }

    #[inline(always)]
    fn tag_of(slot: u64) -> u32 {
        slot as u32 & 0xff
    }

    #[inline(always)]
    fn snapshot_of(slot: u64) -> u32 {
        (slot >> 8) as u32 & Self::SNAPSHOT_MASK
    }

    #[inline(always)]
    fn with_snapshot(slot: u64, snapshot: u32) -> u64 {
        (slot & 0xff) | (u64::from(snapshot & Self::SNAPSHOT_MASK) << 8)
    }

    #[inline(always)]
    fn words(len: u64) -> usize {
        len.div_ceil(2) as usize
    }

    fn initial_word(w: usize, len: u64, slot: impl Fn(u64) -> u64) -> u64 {
        let low = 2 * w as u64;
        // An odd ring's last word has a high half that is no slot: left 0, never read.
        let high = if low + 1 < len { slot(low + 1) } else { 0 };
        slot(low) | (high << 32)
    }

    #[inline(always)]
    fn load(words: &[AtomicU64], i: usize, order: Ordering) -> u64 {
        (words[i >> 1].load(order) >> Compact::shift(i)) & u64::from(u32::MAX)
    }

    #[inline]
    fn compare_exchange(
        words: &[AtomicU64],
        i: usize,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        let word = &words[i >> 1];
        let shift = Compact::shift(i);
        let half = u64::from(u32::MAX) << shift;
        let mut seen = word.load(failure);
        loop {
            let slot = (seen & half) >> shift;
            if slot != current {
                return Err(slot);
            }
            match word.compare_exchange(seen, (seen & !half) | (new << shift), success, failure) {
                Ok(_) => return Ok(current),
                // Only the other slot changed, or this one: judged again from the value seen.
                Err(now) => seen = now,
            }
        }
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests {
    use super::*;

    /// A compact slot's compare-and-swap is one slot's: it fails with the slot's value when
    /// that is not the one expected, succeeds while only the other slot of the word differs
    /// from what was first loaded, and never touches the other slot.
    #[test]
    fn a_compact_slot_is_half_a_word() {
        let words = [AtomicU64::new(0), AtomicU64::new(0)];
        let (order, relaxed) = (Ordering::AcqRel, Ordering::Relaxed);
        for i in 0..4 {
            let value = Compact::pack(i as u64 + 7, 100 + i as u32);
            assert_eq!(
                Compact::compare_exchange(&words, i, 0, value, order, relaxed),
                Ok(0)
            );
        }
        for i in 0..4 {
            let value = Compact::load(&words, i, relaxed);
            assert_eq!(Compact::tag_of(value), i as u32 + 7);
            assert_eq!(Compact::snapshot_of(value), 100 + i as u32);
        }
        let one = Compact::load(&words, 1, relaxed);
        assert_eq!(
            Compact::compare_exchange(&words, 1, one + 1, 0, order, relaxed),
            Err(one),
            "a wrong expected value fails with the slot's"
        );
        assert_eq!(
            Compact::compare_exchange(&words, 0, one, 5, order, relaxed),
            Err(Compact::load(&words, 0, relaxed))
        );
        assert_eq!(
            Compact::compare_exchange(
                &words,
                1,
                one,
                Compact::with_snapshot(one, 9),
                order,
                relaxed
            ),
            Ok(one)
        );
        assert_eq!(Compact::snapshot_of(Compact::load(&words, 1, relaxed)), 9);
        assert_eq!(
            Compact::load(&words, 0, relaxed),
            Compact::pack(7, 100),
            "its neighbour kept"
        );
        assert_eq!(Compact::mark_of(Compact::with_mark(one, 3)), 0, "no marks");
    }

    /// The narrow fields wrap at their widths: snapshots at 2²⁴, tags at 2⁸.
    #[test]
    fn compact_fields_wrap_at_their_widths() {
        assert_eq!(Compact::tag(256 + 5), 5);
        assert_eq!(Compact::count((1 << 24) + 3), 3);
        assert_eq!(Compact::since(2, Compact::SNAPSHOT_MASK), 3);
        assert_eq!(Compact::ahead(Compact::SNAPSHOT_MASK, 4), 3);
        assert!(Compact::at_or_after(2, Compact::SNAPSHOT_MASK));
        assert!(!Compact::at_or_after(Compact::SNAPSHOT_MASK, 2));
        assert_eq!(Compact::MAX_RAISE, (1 << 23) - 1);
        assert_eq!(Wide::MAX_RAISE, (1 << 31) - 1);
        assert_eq!(Compact::words(11), 6);
        let word = Compact::initial_word(5, 11, |s| s + 1);
        assert_eq!(
            (word & 0xffff_ffff, word >> 32),
            (11, 0),
            "an odd ring's last half is no slot"
        );
    }
}
