//! The inline table's growth: a next table linked, the old slots moved a chunk per writer
//! call (see "Growth: the migration" in the parent module).

use crate::sync::Ordering;
use crate::sync::epoch::{Guard, Owned, Shared};

use super::{CHUNK, HASH, InlineSlot, InlineTable, LIVE, MOVED, Table, Writer};

impl<S: InlineSlot> InlineTable<S> {
    /// Links a next table to `current` and returns it, made for the keys
    /// ([`Table::for_keys`]), with the number of old slots each writer call moves.
    pub(super) fn start<'g>(
        &self,
        writer: &mut Writer,
        current: &Table<S>,
        guard: &'g Guard,
    ) -> Shared<'g, Table<S>> {
        let keys = self.len() + 1;
        let next = Table::<S>::for_keys(keys, self.sparse_load);
        // Each writer call inserts at most one key: the migration must end within the
        // inserts that keep the next table within its bound (every moved key, then `slack`
        // new ones), however many of the old slots were tombstones.
        let slack = next.bound.saturating_sub(keys).max(1);
        writer.chunk = current.capacity().div_ceil(slack).max(CHUNK);
        writer.cursor = 0;
        let next = Owned::new(next).into_shared(guard);
        // Release: publishes the empty slots to lookups that follow the link.
        current.next.store(next, Ordering::Release);
        next
    }

    /// Moves the next chunk of old slots of a migration in progress, and ends it after the last.
    pub(super) fn step(&self, writer: &mut Writer, guard: &Guard) {
        let old_shared = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: never null; only this writer replaces it.
        let old = unsafe { old_shared.deref() };
        let next_shared = old.next.load(Ordering::Relaxed, guard);
        if next_shared.is_null() {
            return;
        }
        // SAFETY: linked by this writer; freed only through the epoch.
        let next = unsafe { next_shared.deref() };
        let end = (writer.cursor + writer.chunk).min(old.capacity());
        for slot in &old.slots[writer.cursor..end] {
            self.move_slot(slot, next);
        }
        writer.cursor = end;
        if end == old.capacity() {
            // Release: pairs with the Acquire in `current`.
            self.table.store(next_shared, Ordering::Release);
            // SAFETY: unlinked from the store; readers still probing it are pinned, and its
            // drop frees only its own slots (its next is the current table).
            unsafe { guard.defer_destroy(old_shared) };
            guard.hand_over();
            // The old table's tombstones are dropped with it; those evictions made in the
            // next table count against its load.
            writer.tombstones = core::mem::take(&mut writer.next_tombstones);
            writer.cursor = 0;
        }
    }

    /// Moves every slot of a migration in progress, ending it.
    pub(super) fn finish(&self, writer: &mut Writer, guard: &Guard) {
        while !self
            .current(guard)
            .next
            .load(Ordering::Relaxed, guard)
            .is_null()
        {
            self.step(writer, guard);
        }
    }

    /// Freezes, copies and marks one old slot (see "Growth: the migration").
    pub(super) fn move_slot(&self, slot: &S, next: &Table<S>) {
        let state = slot.state();
        if state & LIVE == 0 || state & MOVED != 0 {
            return;
        }
        let words = slot.freeze(self.buckets);
        next.place(slot.key(), state & HASH, &words);
        slot.set_state(state, state | MOVED);
    }

    /// Moves every slot of a migration in progress (for the tests).
    #[cfg(test)]
    pub(crate) fn finish_migration(&self) {
        let guard = &crate::sync::epoch::pin();
        let mut writer = crate::sync::lock(&self.writer);
        self.finish(&mut writer, guard);
    }
}
