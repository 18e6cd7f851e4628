//! The state word every cell is judged on, and its retired flag.
//!
//! The ring and the exact log share one layout of their `cum` word:
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 63 | [`RETIRED`] | the cell is retired: every compare-and-swap that expects a word without it fails |
//! | 32..63 | *pending* | cost reserved by `check_all` and not yet committed or released (31 bits) |
//! | 0..32 | *count* | cost ever admitted, mod 2³² (the log's next free position) |
//!
//! A GCRA cell's word is its TAT, below 2⁶³, with the same [`RETIRED`] bit on top.
//!
//! Pending never exceeds a limit (`≤ 2³¹ − 1`: a reservation is judged with pending
//! included), so it fits its 31 bits; the count wraps within its 32 bits and never carries
//! into pending ([`add_count`]). Why a reservation lives in its own field rather than in the
//! count, and why retirement cannot lose an admission, is each cell's to argue: see the
//! ring's "The `cum` word and reservations" and "Retirement".

use crate::sync::{AtomicU64, Backoff, Ordering};

/// The top bit of every cell's state word: set, the cell is retired.
pub(crate) const RETIRED: u64 = 1 << 63;

/// The bits of `cum` that count admitted cost (mod 2³²).
pub(crate) const COUNT: u64 = u32::MAX as u64;

/// The shift of the pending field of `cum` (bits 32..63).
pub(crate) const PENDING_SHIFT: u32 = 32;

/// The bits of `cum` above the count: pending and [`RETIRED`].
pub(crate) const HIGH: u64 = !COUNT;

/// `cum` with `cost` added to its count, wrapping within the count's 32 bits.
#[inline]
pub(crate) fn add_count(cum: u64, cost: u64) -> u64 {
    (cum & HIGH) | (cum.wrapping_add(cost) & COUNT)
}

/// `cum` with `cost` added to its pending field (which stays below 2³¹, so this never
/// reaches [`RETIRED`]).
#[inline]
pub(crate) fn add_pending(cum: u64, cost: u64) -> u64 {
    cum + (cost << PENDING_SHIFT)
}

/// `cum` with a reservation of `cost` committed: `count += cost, pending −= cost`.
#[inline]
pub(crate) fn commit_pending(cum: u64, cost: u64) -> u64 {
    add_count(cum, cost) - (cost << PENDING_SHIFT)
}

/// `cum` with a reservation of `cost` released: `pending −= cost`, the count untouched.
#[inline]
pub(crate) fn release_pending(cum: u64, cost: u64) -> u64 {
    cum - (cost << PENDING_SHIFT)
}

/// The pending field of a `cum` that is not retired.
#[inline]
pub(crate) fn pending_of(cum: u64) -> u64 {
    cum >> PENDING_SHIFT
}

/// Applies `change` to the live `cum` word `word`, which holds a reservation, by a CAS loop;
/// `false`, having written nothing, if it is retired. How a commit and a release change the
/// word, for the ring and the log alike.
pub(crate) fn update_reserved(word: &AtomicU64, change: impl Fn(u64) -> u64) -> bool {
    let backoff = Backoff::new();
    // Relaxed: the CAS below re-validates it.
    let mut cum = word.load(Ordering::Relaxed);
    loop {
        if cum & RETIRED != 0 {
            return false;
        }
        debug_assert!(pending_of(cum) > 0, "no reservation to commit or release");
        // AcqRel: Release publishes a commit like an admission (after the snapshots its
        // reservation was judged on); Acquire orders it after what the CAS read.
        match word.compare_exchange_weak(cum, change(cum), Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => {
                cum = seen;
                backoff.spin();
            }
        }
    }
}

/// Retires the cell whose state word is `word`, whatever it holds; `true` if this call did.
/// Admissions counted in it are forgotten; none made after it is charged to it.
pub(crate) fn retire_now(word: &AtomicU64) -> bool {
    // AcqRel: as each cell's idle retirement; every later charge fails because its expected
    // word lacks the bit.
    word.fetch_or(RETIRED, Ordering::AcqRel) & RETIRED == 0
}

/// Whether the cell whose state word is `word` is retired.
pub(crate) fn is_retired(word: &AtomicU64) -> bool {
    // Relaxed: a hint for stores; decisions go through each cell's Acquire load.
    word.load(Ordering::Relaxed) & RETIRED != 0
}

/// Whether the live word `word` holds a reservation (pending `> 0`); `false` if it is retired.
pub(crate) fn holds_reservation(word: &AtomicU64) -> bool {
    // Relaxed: a hint for the store's choice of a key to force out.
    let cum = word.load(Ordering::Relaxed);
    cum & RETIRED == 0 && pending_of(cum) > 0
}
