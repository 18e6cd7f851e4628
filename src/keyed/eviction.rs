//! The keyed stores' eviction policy, one for both: the store's entries (`keyed::store`)
//! and the inline table's slots (`keyed::inline`). Each store says what its slots are
//! ([`Slots`]); the policy says which of them go.
//!
//! - **The sweep.** An insert examines [`SWEEP`] slots after a cursor and evicts the keys
//!   idle for a whole window already (stale), not every idle key: a key in steady use is idle
//!   a moment between two checks (a GCRA key a moment after each), and evicting it would
//!   make it come back as an insert (`algorithms_keyed_1000`). A store skips the sweep while
//!   no key can be stale yet.
//! - **Room at `max_keys`.** A new key at the bound samples the next [`SAMPLE`] live slots
//!   after the cursor and evicts the first idle one; if none is, and the caller forces it,
//!   the least recently active of them, retired whatever it holds (counted as forced). A
//!   store ranks keys by more than their last activity where it must (the store puts a key
//!   holding a `check_all` reservation last).
//! - **`retain_recent`.** Every key idle now is evicted, a chunk of slots per taking of the
//!   store's writer lock, so that inserts interleave with it.
//!
//! Every function here runs under the store's writer lock, which [`Slots`] holds, except
//! [`retain_recent`], whose passes each take it.

use core::ops::Range;

/// Slots an insert examines for keys idle a whole window, so that churn is reclaimed as it
/// happens; a sparse inline table (below load 1/2) examines proportionally more.
pub(super) const SWEEP: usize = 4;

/// Live slots an insert at `max_keys` examines for an idle key before forcing one out.
pub(super) const SAMPLE: usize = 16;

/// One store's slots as the policy sees them, under the store's writer lock: a cursor over
/// them, and the evictions the store makes of the slot at an index.
pub(super) trait Slots {
    /// How a key's claim to stay is compared when one must be forced out: the least goes.
    type Rank: Ord + Copy;

    /// The slots of the table examined.
    fn capacity(&self) -> usize;

    /// The slot the cursor is at, the cursor moved past it (wrapping at the table's end).
    fn next(&mut self) -> usize;

    /// Evicts the key in slot `i` if it is idle at `now` (counted as evicted): whether it
    /// did.
    fn evict_if_idle(&mut self, i: usize, now: u64) -> bool;

    /// Evicts the key in slot `i` if it has been idle for a whole window at `now` (the
    /// sweep's test, counted as evicted).
    fn evict_if_stale(&mut self, i: usize, now: u64) -> bool;

    /// Slot `i` as the search for room at `max_keys` sees it: empty, its key evicted as
    /// idle at `now` ([`Slots::evict_if_idle`]), or its key kept, with its rank. One call
    /// per slot, so that a store finds the slot once.
    fn sample(&mut self, i: usize, now: u64) -> Sampled<Self::Rank>;

    /// Evicts the live key in slot `i` whatever its window holds (counted as forced):
    /// whether it did.
    fn force_out(&mut self, i: usize) -> bool;
}

/// What [`Slots::sample`] found in a slot.
pub(super) enum Sampled<R> {
    /// No key.
    Empty,
    /// A key idle at the sample's time, now evicted.
    Evicted,
    /// A key not idle, and its rank.
    Kept(R),
}

/// An insert's sweep: the next `count` slots after the cursor (at least [`SWEEP`]; a store
/// may examine more), each key among them stale at `now` evicted.
#[inline]
pub(super) fn sweep<T: Slots>(slots: &mut T, count: usize, now: u64) {
    for _ in 0..count {
        let i = slots.next();
        slots.evict_if_stale(i, now);
    }
}

/// Frees one place for a new key at the bound: the first key idle at `now` among the next
/// [`SAMPLE`] live slots after the cursor, else, if `force`, the one of least rank among
/// them. Returns whether it evicted one.
pub(super) fn make_room<T: Slots>(slots: &mut T, now: u64, force: bool) -> bool {
    let mut least: Option<(T::Rank, usize)> = None;
    let mut seen = 0;
    for _ in 0..slots.capacity() {
        if seen == SAMPLE {
            break;
        }
        let i = slots.next();
        match slots.sample(i, now) {
            Sampled::Empty => continue,
            Sampled::Evicted => return true,
            Sampled::Kept(rank) => {
                seen += 1;
                if least.is_none_or(|(r, _)| rank < r) {
                    least = Some((rank, i));
                }
            }
        }
    }
    match least.filter(|_| force) {
        Some((_, i)) => slots.force_out(i),
        None => false,
    }
}

/// Evicts every key idle at `now` in `range` of `slots`, clamped to the table: how many,
/// and the slot the clamped range ends at.
pub(super) fn evict_idle_in<T: Slots>(
    slots: &mut T,
    range: Range<usize>,
    now: u64,
) -> (usize, usize) {
    let end = range.end.min(slots.capacity());
    let mut evicted = 0;
    for i in range.start..end {
        evicted += usize::from(slots.evict_if_idle(i, now));
    }
    (evicted, end)
}

/// `retain_recent`'s passes: `pass(start, chunk)` takes the store's lock, evicts the idle
/// keys of slots `start .. start + chunk` ([`evict_idle_in`]) and answers how many and the
/// slot it stopped at, or `None` once `start` is past the table's end. Each pass starts
/// where the last stopped, so a table that grew between two passes is walked on from the
/// old table's end, not from past it. Returns the keys evicted in all.
pub(super) fn retain_recent(
    chunk: usize,
    mut pass: impl FnMut(usize, usize) -> Option<(usize, usize)>,
) -> usize {
    let (mut evicted, mut start) = (0, 0);
    while let Some((n, end)) = pass(start, chunk) {
        evicted += n;
        start = end;
    }
    evicted
}

#[cfg(test)]
mod tests {
    /// A table of 512 slots that grows to 2048 after `retain_recent`'s first pass is walked
    /// on from slot 512, each slot once (with each pass starting a whole chunk after the
    /// last one's start, slots 512..1024 were never examined).
    #[test]
    fn a_table_grown_between_passes_is_walked_on_from_the_old_end() {
        let (mut capacity, mut seen) = (512, Vec::new());
        let evicted = super::retain_recent(1024, |start, chunk| {
            (start < capacity).then(|| {
                let end = (start + chunk).min(capacity);
                seen.extend(start..end);
                capacity = 2048;
                (end - start, end)
            })
        });
        assert_eq!(seen, (0..2048).collect::<Vec<_>>());
        assert_eq!(evicted, 2048);
    }
}
