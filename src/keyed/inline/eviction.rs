//! The inline table's evictions: a key idle at an insert's sweep, room made at `max_keys`,
//! and `retain_recent` (see "Churn and bounds" in the parent module).

use crate::sync::epoch::{self, Guard};
use crate::sync::{self, Ordering};

use super::{InlineSlot, InlineTable, LIVE, MOVED, SWEEP_CHUNK, TOMBSTONE, Table, Writer};
use crate::keyed::eviction::{self, SWEEP, Sampled};

impl Writer {
    /// The slot of `table` the sweep examines next, the cursor moved past it: it wraps at
    /// the table's end (and starts over in a table smaller than the last).
    fn swept<S: InlineSlot>(&mut self, table: &Table<S>) -> usize {
        let i = if self.sweep < table.capacity() {
            self.sweep
        } else {
            0
        };
        self.sweep = i + 1;
        i
    }
}

impl<S: InlineSlot> InlineTable<S> {
    /// Evicts `key` if its window is empty at `now`: `true` if it did. The slot becomes a
    /// tombstone.
    ///
    /// A migration in progress moves its next chunk first, so that a table whose keys are
    /// only being evicted still finishes it.
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn evict_idle(&self, key: u64, hash: u64, granularity: u64, now: u64) -> bool {
        let guard = &epoch::pin();
        let mut writer = sync::lock(&self.writer);
        self.step(&mut writer, guard);
        let Some(slot) = self.find(key, hash, guard) else {
            return false;
        };
        let in_current = self.in_current(slot, guard);
        self.evict_if_idle(&mut writer, slot, in_current, granularity, now)
    }

    /// Whether `slot` is in the current table; else it is in the next one (moved, or
    /// inserted since the migration started).
    pub(super) fn in_current(&self, slot: &S, guard: &Guard) -> bool {
        self.current(guard)
            .slots
            .as_ptr_range()
            .contains(&(slot as *const S))
    }

    /// Turns a live slot into a tombstone if `retire` retires its ring, counted in its table
    /// (the current one, or the next); `true` if it did (the writer's, under its lock).
    pub(super) fn evict_if(
        &self,
        writer: &mut Writer,
        slot: &S,
        in_current: bool,
        retire: impl FnOnce(&S) -> bool,
    ) -> bool {
        let state = slot.state();
        if state & LIVE == 0 || state & MOVED != 0 || !retire(slot) {
            return false;
        }
        slot.set_state(state, TOMBSTONE);
        // Relaxed: written only under the writer's lock, which orders it for the writer.
        self.len.store(self.len() - 1, Ordering::Relaxed);
        if in_current {
            writer.tombstones += 1;
        } else {
            writer.next_tombstones += 1;
        }
        true
    }

    /// [`InlineTable::evict_if`] a slot whose window is empty at `now`, counted as evicted.
    pub(super) fn evict_if_idle(
        &self,
        writer: &mut Writer,
        slot: &S,
        in_current: bool,
        granularity: u64,
        now: u64,
    ) -> bool {
        let buckets = self.buckets;
        let evicted = self.evict_if(writer, slot, in_current, |slot| {
            slot.retire_idle(buckets, granularity, now)
        });
        writer.evicted += u64::from(evicted);
        evicted
    }

    /// The policy's sweep ([`eviction::sweep`]): the keys idle for a whole `window` already
    /// among the slots after the sweep's cursor are evicted. During a migration it walks the
    /// next table, where the keys end up: a table that grows for long keeps migrating, and a
    /// sweep of the old one would find its slots moved.
    pub(super) fn sweep(
        &self,
        writer: &mut Writer,
        granularity: u64,
        window: u64,
        now: u64,
        guard: &Guard,
    ) {
        if now < window {
            return;
        }
        let current = self.current(guard);
        let next = current.next.load(Ordering::Relaxed, guard);
        let (table, in_current) = if next.is_null() {
            (current, true)
        } else {
            // SAFETY: linked by this writer; freed only through the epoch.
            (unsafe { next.deref() }, false)
        };
        // A sparse table sweeps more slots per insert, in proportion to its emptiness, so
        // that the sweep goes round it in as many inserts per key as at load 1/2.
        let count = (SWEEP * table.capacity() / (2 * table.bound.max(1))).max(SWEEP);
        let mut slots = Evicting {
            inline: self,
            writer,
            table,
            in_current,
            granularity,
            window,
        };
        eviction::sweep(&mut slots, count, now);
    }

    /// Frees one place for a new key at `max_keys` ([`eviction::make_room`]): the first idle
    /// key among the next [`SAMPLE`](eviction::SAMPLE) live slots after the sweep's cursor,
    /// else, if `force`, the least recently active of them, retired whatever it holds
    /// (forced, counted). A migration in progress is finished first, so that every key is
    /// in the table sampled. Returns whether it evicted one.
    pub(super) fn make_room(
        &self,
        writer: &mut Writer,
        granularity: u64,
        now: u64,
        force: bool,
        guard: &Guard,
    ) -> bool {
        self.finish(writer, guard);
        let mut slots = self.evicting(writer, granularity, guard);
        eviction::make_room(&mut slots, now, force)
    }

    /// Evicts every key whose window is empty at `now`, [`SWEEP_CHUNK`] slots per taking of
    /// the writer's lock, so that inserts interleave with it (checks of live keys never
    /// wait); returns how many. A migration in progress is finished first. A key moved by a
    /// migration that an insert starts meanwhile may be left for the next call, as today's
    /// store leaves an entry a concurrent resize moved.
    pub(crate) fn retain_recent(&self, granularity: u64, now: u64) -> usize {
        eviction::retain_recent(SWEEP_CHUNK, |start, chunk| {
            let guard = &epoch::pin();
            let mut writer = sync::lock(&self.writer);
            if start == 0 {
                self.finish(&mut writer, guard);
            }
            let mut slots = self.evicting(&mut writer, granularity, guard);
            (start < slots.table.capacity())
                .then(|| eviction::evict_idle_in(&mut slots, start..start + chunk, now))
        })
    }

    /// The current table's slots as the eviction policy sees them, under the writer's lock
    /// (no migration in progress: the caller finished it).
    fn evicting<'a>(
        &'a self,
        writer: &'a mut Writer,
        granularity: u64,
        guard: &'a Guard,
    ) -> Evicting<'a, S> {
        Evicting {
            inline: self,
            writer,
            table: self.current(guard),
            in_current: true,
            granularity,
            window: granularity.saturating_mul(self.buckets),
        }
    }
}

/// An inline table under its writer's lock, as the eviction policy sees it: `table` (the
/// current one, or during a migration the next one), and the quota's bucket length and
/// window.
struct Evicting<'a, S: InlineSlot> {
    inline: &'a InlineTable<S>,
    writer: &'a mut Writer,
    table: &'a Table<S>,
    in_current: bool,
    granularity: u64,
    window: u64,
}

impl<S: InlineSlot> eviction::Slots for Evicting<'_, S> {
    /// When the key was last active: the least recently active goes.
    type Rank = u64;

    #[inline]
    fn capacity(&self) -> usize {
        self.table.capacity()
    }

    #[inline]
    fn next(&mut self) -> usize {
        self.writer.swept(self.table)
    }

    #[inline]
    fn evict_if_idle(&mut self, i: usize, now: u64) -> bool {
        let slot = &self.table.slots[i];
        self.inline
            .evict_if_idle(self.writer, slot, self.in_current, self.granularity, now)
    }

    /// Idle for a whole window: its window empty a window ago.
    #[inline]
    fn evict_if_stale(&mut self, i: usize, now: u64) -> bool {
        now.checked_sub(self.window)
            .is_some_and(|then| self.evict_if_idle(i, then))
    }

    #[inline]
    fn sample(&mut self, i: usize, now: u64) -> Sampled<u64> {
        let slot = &self.table.slots[i];
        if slot.state() & LIVE == 0 {
            return Sampled::Empty;
        }
        let (inline, granularity) = (self.inline, self.granularity);
        if inline.evict_if_idle(self.writer, slot, self.in_current, granularity, now) {
            return Sampled::Evicted;
        }
        Sampled::Kept(slot.last_active(inline.buckets, granularity))
    }

    #[inline]
    fn force_out(&mut self, i: usize) -> bool {
        let slot = &self.table.slots[i];
        let buckets = self.inline.buckets;
        let forced = self
            .inline
            .evict_if(self.writer, slot, self.in_current, |slot| {
                slot.retire_now(buckets);
                true
            });
        self.writer.forced += u64::from(forced);
        forced
    }
}
