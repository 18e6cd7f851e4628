//! The inline table: each key's window in its own slot, found by linear probing, grown by an
//! incremental migration that never stops a reader of another key.
//!
//! The keyed limiter keeps here the keys whose type has a word ([`super::word`]) and whose
//! quota fits the table's kind of slot ([`slot`]): a 64-byte [`LineSlot`] holding a line
//! ring, or a 128-byte [`WideSlot`] holding the three-word ring of wide slots (any limit,
//! marks), one table per limiter: slots hold the key's word, its hash and its window of
//! `N ≤ 10` buckets; the limiter judges each check with the key's rule (Strict, Weighted or
//! the fixed window; Strict with marks in wide slots). Below, the line slot; the wide one
//! holds the same key and state in words of their own, and its freeze is its ring's
//! ([`slot`], "Freezing a slot"). Which keys live here, and the moves to the store,
//! are the limiter's ([`super::routing`]); `docs/design.md` (4.5) has the design, and
//! `docs/notes/inline-store-measurements.md` its measurements.
//!
//! # A slot
//! `key`, then the seven words of a [`Line`](crate::window::line::Line) ring: its word and six words of compact slots,
//! eleven halves for the ring and the twelfth for the slot's *state*:
//!
//! | state | meaning |
//! |---|---|
//! | 0 | empty: a probe for a key stops here |
//! | 1 | a tombstone: a key was evicted here; probes go on |
//! | `LIVE \| h` | a key whose hash's low 30 bits are `h` |
//! | `LIVE \| MOVED \| h` | that key has moved to the next table |
//!
//! A slot is written by the writer alone (a mutex lookups never take) before its state is
//! published by a Release store; after that its key never changes, and its ring is changed
//! only through the ring's protocol. A tombstone is never reused in its table: the
//! migration that rebuilds the table drops it. So a reader that found a key's slot holds
//! that key's slot for as long as it is pinned, whatever the writer does.
//!
//! # Growth: the migration
//! When an insert would take the table past its bound (tombstones included: load
//! 1/[`SPARSE_LOAD`] for a table of up to [`SPARSE_MAX`] slots, 2/3 for a larger one), the
//! writer makes a next table ([`Table::for_keys`] the keys: [`SPARSE_LOAD`] times them
//! rounded up to a power of two, or three times them beyond [`SPARSE_MAX`]), links it from
//! the current one, and from then on every writer
//! call (an insert or an idle eviction) moves a chunk of old slots (at least [`CHUNK`], more
//! when the next table is small, so that the migration ends before new keys take the next
//! table past its bound):
//! 1. **Freeze**: retire the key's ring (its word's `RETIRED` bit): every charge after it
//!    fails, so the word and slots it leaves are the key's final state in this table. A fill
//!    in progress is frozen with its flag, and finished in the next table by its first
//!    reader, from the word alone (the ring's protocol); a stalled helper's later write to
//!    the old slots is lost with them, and the next table's fill writes the same values.
//! 2. **Copy** the key and the seven words, the word without `RETIRED`, into the next table,
//!    publishing the copy's state last (Release).
//! 3. **Mark** the old slot `MOVED` (a compare-and-swap of the state half, Release).
//!
//! The three steps run under the writer's lock, so their order after the freeze is not what
//! keeps a key whole: a lookup that finds the key in neither table falls to the writer's
//! path and waits for the lock (`loom-tests/tests/inline_migration_racing_check.rs` passes
//! with the mark before the copy). The mark only spares later lookups that path.
//!
//! New keys go to the next table. Once every slot has moved, the next table becomes the
//! current one and the old one is retired through the epoch: readers still probing it are
//! pinned, and it is freed only after they unpin.
//!
//! # Lookups
//! Probe the table a reader loaded: a live slot whose key matches is the key's, a `MOVED` one
//! sends the probe to the next table, and an empty slot ends the probe there: the key is
//! in the next table if there is one (moved, or inserted since the migration started), or
//! absent. A check on a slot whose ring is retired (frozen by a migration, or evicted) looks
//! the key up again under the writer's lock, which the migration's three steps hold: it then
//! finds the key's copy, or inserts a fresh window for an evicted key. Only checks of the
//! keys in the chunk being moved wait for the lock, with a key's first check (its insert)
//! and the first after its eviction; no other reader waits.
//!
//! # Churn and bounds
//! As the store: each insert sweeps [`SWEEP`] slots after a cursor (of the next table
//! during a migration) for keys idle a whole window already, and at `max_keys` evicts an
//! idle key among [`SAMPLE`] live slots, else forces out the least recently active of them
//! (its ring retired whatever it holds, counted apart). `retain_recent` sweeps every slot.
//! Each eviction retires the key's ring before its slot becomes a tombstone.
//!
//! # Why no admission is lost or counted twice
//! A charge is a compare-and-swap of the ring's word from the value it judged on. Before the
//! freeze it lands in the old slot, and the copy (which reads the word after the freeze)
//! carries it; after the freeze it fails, and the check judges again on the copy. An idle
//! eviction retires the ring from a reading whose window is empty, exactly as the store
//! does, and only then marks the slot a tombstone. No key ever has two live slots: the writer
//! inserts a key only after looking it up under its lock, in every table a lookup would
//! reach.
//!
//! [`SWEEP`]: super::eviction::SWEEP
//! [`SAMPLE`]: super::eviction::SAMPLE

use crate::algo::sliding_counter::CounterRule;
#[cfg(any(test, slidegate_loom))]
use crate::decision::Decision;
use crate::sync::epoch::{self, Atomic, Guard, Shared};
use crate::sync::{self, AtomicUsize, Mutex, MutexGuard, Ordering};
#[cfg(slidegate_loom)]
use crate::window::line::LINE_MIN_GRANULARITY;
#[cfg(slidegate_loom)]
use crate::window::line_counter;

use super::pool::Array;

use slot::{HASH, LIVE, MOVED, TOMBSTONE};
pub(crate) use slot::{InlineSlot, LineSlot, WIDE_MAX_BUCKETS, WideSlot};

/// Slots [`InlineTable::retain_recent`] examines per taking of the writer's lock.
const SWEEP_CHUNK: usize = 256;

/// The smallest table.
const MIN_CAPACITY: usize = 4;

/// The largest sparse table: up to 2¹⁶ slots (4 MiB), a table's capacity is a power of two
/// and at most one slot in [`SPARSE_LOAD`] is in use, so that a probe seldom meets another
/// key's line; a larger one is dense, sized to three times its keys when it grows and holding
/// up to 2/3 of its slots, 96 to 192 bytes per key (probes of about 2 slots). Why both: a
/// thousand keys' checks and two threads' pairs are faster at load 1/8, and at a million keys
/// the denser table costs the checks little for a third less memory (`keyed_allowed`,
/// `keyed_2_threads`; `docs/notes/inline-store-measurements.md`, "A table of any size, and
/// sparse small tables").
const SPARSE_MAX: usize = 1 << 16;

/// A sparse table's load, at most: one slot in eight in use.
const SPARSE_LOAD: usize = 8;

/// Old slots a writer call moves while a migration is in progress, at least. One under
/// loom, so that the models' small tables migrate over several writer calls.
const CHUNK: usize = if cfg!(slidegate_loom) { 1 } else { 8 };

struct Table<S> {
    /// `capacity − 1` in a sparse table (a power of two), whose keys are homed by their
    /// hash's low bits; 0 in a dense one, which homes them at `hash · capacity / 2³⁰`.
    mask: usize,
    /// The slots in use (live and tombstones) it may hold.
    bound: usize,
    /// On huge pages from 2 MiB up, as the store's tables.
    slots: Array<S>,
    /// The table this one is migrating to (null when none).
    next: Atomic<Table<S>>,
}

impl<S: InlineSlot> Table<S> {
    /// A table made for `keys` keys in a table whose sparse tables hold one slot in `load`:
    /// sparse, `load` times the keys rounded up to a power of two, while that is at most
    /// [`SPARSE_MAX`] slots; else dense, three times the keys (load 1/3) rounded up to a
    /// whole number of 4 KiB pages.
    fn for_keys(keys: usize, load: usize) -> Table<S> {
        let sparse = (keys.max(1) * load).next_power_of_two().max(MIN_CAPACITY);
        let (capacity, mask, bound) = if sparse <= SPARSE_MAX {
            (sparse, sparse - 1, sparse / load)
        } else {
            let capacity = (keys * 3).next_multiple_of(64);
            (capacity, 0, capacity / 3 * 2)
        };
        debug_assert!(capacity <= 1 << 30, "homes need capacity ≤ 2³⁰");
        Table {
            mask,
            bound,
            slots: Array::new(capacity, S::empty),
            next: Atomic::null(),
        }
    }

    /// Its slots' number.
    #[inline(always)]
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The slot a key of this 30-bit `hash` probes first: its low bits in a sparse table (a
    /// power of two), the high half of `hash · capacity` in a dense one, which can have any
    /// size. Both take every slot as a home; the mask keeps the small tables' layout (the
    /// loom models' keys hash to themselves, and take the slots they name).
    #[inline(always)]
    fn home(&self, hash: u32) -> usize {
        debug_assert!(hash <= HASH);
        if self.mask != 0 {
            hash as usize & self.mask
        } else {
            ((u64::from(hash) * self.capacity() as u64) >> 30) as usize
        }
    }

    /// The slot a probe examines after slot `i`.
    #[inline(always)]
    fn after(&self, i: usize) -> usize {
        if i + 1 == self.capacity() { 0 } else { i + 1 }
    }

    /// Where `key` is in this table.
    #[inline]
    fn probe(&self, key: u64, hash: u32) -> Probe<'_, S> {
        let mut i = self.home(hash);
        for _ in 0..self.capacity() {
            let slot = &self.slots[i];
            let state = slot.state();
            if state == 0 {
                return Probe::Absent;
            }
            // The key was written before the state the Acquire above read.
            if state & LIVE != 0 && state & HASH == hash && slot.key() == key {
                return if state & MOVED != 0 {
                    Probe::Moved
                } else {
                    Probe::Found(slot)
                };
            }
            i = self.after(i);
        }
        Probe::Absent
    }

    /// Writes `key` with the ring's `words` into the first empty slot of its probe (the
    /// writer's, in a table where it is absent), publishing the state `LIVE | hash` last.
    fn place(&self, key: u64, hash: u32, words: &S::Words) -> &S {
        let mut i = self.home(hash);
        let mut probed = 0;
        while self.slots[i].state() != 0 {
            i = self.after(i);
            probed += 1;
            // Unreachable: a table is kept at load 2/3 or below (see `Table::for_keys`).
            debug_assert!(probed < self.capacity(), "a full table");
        }
        let slot = &self.slots[i];
        slot.publish(key, LIVE | hash, words);
        slot
    }
}

enum Probe<'a, S> {
    Found(&'a S),
    Moved,
    Absent,
}

/// State only the writer touches.
struct Writer {
    /// Tombstones in the current table.
    tombstones: usize,
    /// Tombstones in the next table, during a migration: the current table's once it ends.
    next_tombstones: usize,
    /// The next old slot a migration moves.
    cursor: usize,
    /// Old slots a writer call moves in this migration: at least [`CHUNK`], and enough that
    /// the migration ends before the next table's inserts could take it past its bound.
    chunk: usize,
    /// Where the insert-time sweep and the search for room at `max_keys` go on from.
    sweep: usize,
    /// Until this instant no slot can be stale (a window after the first key was made), so
    /// inserts skip the sweep, as the store's do.
    quiet_until: u64,
    /// Keys evicted while idle, and keys forced out at `max_keys` while not.
    evicted: u64,
    forced: u64,
}

/// The table of one quota's keys (see the module documentation), of slots of kind `S`.
pub(crate) struct InlineTable<S: InlineSlot = LineSlot> {
    table: Atomic<Table<S>>,
    /// `N`.
    buckets: u64,
    /// A sparse table's load, at most one slot in this many: [`SPARSE_LOAD`], or 2 for the
    /// tests and loom models that lay keys out in small tables at load 1/2.
    sparse_load: usize,
    /// The most keys the table holds: an insert beyond it evicts a key first.
    max_keys: usize,
    writer: Mutex<Writer>,
    /// The keys the table holds. Written only under the writer's lock, so exact under it;
    /// read without it as a statistic ([`InlineTable::len`]).
    len: AtomicUsize,
    /// A fresh window's words, made once: an insert copies them.
    fresh: S::Words,
}

/// The bits of `hash` a slot keeps.
#[inline]
fn hashed(hash: u64) -> u32 {
    hash as u32 & HASH
}

impl<S: InlineSlot> InlineTable<S> {
    /// An empty table for windows of `buckets` buckets (the tests'), unbounded.
    #[cfg(test)]
    pub(crate) fn new(buckets: u64) -> InlineTable<S> {
        InlineTable::with_max_keys(buckets, usize::MAX)
    }

    /// An empty, unbounded table for windows of `buckets` buckets whose sparse tables are
    /// filled to load 1/2, not [`SPARSE_LOAD`]'s: the tests and loom models that lay keys
    /// out in small tables (an 8-slot table holds four keys, the fifth starts a migration).
    /// The protocols do not depend on the load.
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn at_half_load(buckets: u64) -> InlineTable<S> {
        InlineTable::with_load(buckets, usize::MAX, 2)
    }

    /// An empty table for windows of `buckets` buckets holding at most `max_keys` (at least
    /// one) keys: an insert at the bound evicts an idle key among the next [`SAMPLE`], or
    /// forces out the least recently active of them, as the store does.
    ///
    /// # Panics
    /// If `buckets` is 0 or more than the kind's [`InlineSlot::MAX_BUCKETS`]: the ring would
    /// not fit the slot (the limiter makes a table only for a quota whose window it holds).
    ///
    /// [`SAMPLE`]: super::eviction::SAMPLE
    pub(crate) fn with_max_keys(buckets: u64, max_keys: usize) -> InlineTable<S> {
        InlineTable::with_load(buckets, max_keys, SPARSE_LOAD)
    }

    /// [`InlineTable::with_max_keys`] with sparse tables of at most one slot in
    /// `sparse_load` in use.
    fn with_load(buckets: u64, max_keys: usize, sparse_load: usize) -> InlineTable<S> {
        assert!(
            S::holds(buckets),
            "an inline table holds windows of 1 to {} buckets, not {buckets}",
            S::MAX_BUCKETS
        );
        InlineTable {
            table: Atomic::new(Table::for_keys(1, sparse_load)),
            sparse_load,
            buckets,
            max_keys: max_keys.max(1),
            len: AtomicUsize::new(0),
            fresh: S::fresh(buckets),
            writer: Mutex::new(Writer {
                tombstones: 0,
                next_tombstones: 0,
                cursor: 0,
                chunk: CHUNK,
                sweep: 0,
                quiet_until: u64::MAX,
                evicted: 0,
                forced: 0,
            }),
        }
    }

    #[inline]
    fn current<'g>(&self, guard: &'g Guard) -> &'g Table<S> {
        // Acquire: pairs with the Release store that published the table.
        let table = self.table.load(Ordering::Acquire, guard);
        // SAFETY: never null; a replaced table is freed through the epoch, so not before
        // `guard` is dropped.
        unsafe { table.deref() }
    }

    /// `key`'s live slot, if it has one: lock-free (see "Lookups").
    #[inline]
    pub(crate) fn find<'g>(&self, key: u64, hash: u64, guard: &'g Guard) -> Option<&'g S> {
        let hash = hashed(hash);
        let mut table = self.current(guard);
        loop {
            if let Probe::Found(slot) = table.probe(key, hash) {
                return Some(slot);
            }
            // Moved, or absent here: the next table, if a migration is in progress.
            // Acquire: pairs with the Release store that linked it.
            let next = table.next.load(Ordering::Acquire, guard);
            if next.is_null() {
                return None;
            }
            // SAFETY: a linked next table becomes the current one and is freed through the
            // epoch only after it too is replaced, so not before `guard` is dropped.
            table = unsafe { next.deref() };
        }
    }

    /// `key`'s live slot, inserted with a fresh window if it has none (the writer's path).
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn insert<'g>(
        &self,
        key: u64,
        hash: u64,
        granularity: u64,
        now: u64,
        guard: &'g Guard,
    ) -> &'g S {
        self.lock().insert(key, hash, granularity, now, 0, guard)
    }

    /// The writer's lock, under which keys are placed, taken and evicted.
    pub(crate) fn lock(&self) -> Placing<'_, S> {
        Placing {
            table: self,
            writer: sync::lock(&self.writer),
        }
    }

    /// The writer's count of live slots and tombstones in the current table, and the same
    /// counted slot by slot; `None` during a migration (for the tests).
    #[cfg(test)]
    pub(crate) fn occupancy(&self) -> Option<((usize, usize), (usize, usize))> {
        let guard = &epoch::pin();
        let writer = sync::lock(&self.writer);
        let table = self.current(guard);
        if !table.next.load(Ordering::Relaxed, guard).is_null() {
            return None;
        }
        let states = table.slots.iter().map(S::state);
        let live = states.clone().filter(|s| s & LIVE != 0).count();
        let tombstones = states.filter(|&s| s == TOMBSTONE).count();
        Some(((self.len(), writer.tombstones), (live, tombstones)))
    }

    /// The keys the table holds: exact under the writer's lock, a statistic without it.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: see the field.
        self.len.load(Ordering::Relaxed)
    }

    /// Keys evicted while idle, and keys forced out at `max_keys`.
    pub(crate) fn evictions(&self) -> (u64, u64) {
        let writer = sync::lock(&self.writer);
        (writer.evicted, writer.forced)
    }

    /// The current table's capacity (for the tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.current(&epoch::pin()).capacity()
    }

    /// A check of cost `n` on `key`'s window at `now()` under a counter's `rule` (Strict,
    /// Weighted or the fixed window, of this table's buckets), inserting the key if absent
    /// (the tests' and loom models'; the keyed limiter places keys across its two stores).
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn check(
        &self,
        key: u64,
        hash: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Decision {
        debug_assert_eq!(rule.buckets, self.buckets);
        let guard = &epoch::pin();
        let mut slot = self.find(key, hash, guard);
        loop {
            let found = match slot {
                Some(found) => found,
                None => self.insert(key, hash, rule.granularity, now(), guard),
            };
            if let Some(decision) = found.charge(self.buckets, rule, &now, n) {
                return decision;
            }
            // Retired: frozen by a migration or evicted. Under the lock, the key's copy or a
            // fresh window.
            slot = None;
        }
    }

    /// Frees up to `n` units of `key`'s window at `now()` under a counter's `rule`
    /// ([`InlineSlot::refund`]: the sliding window's oldest units, the fixed window's current
    /// bucket's); `None` if the key has no live slot.
    ///
    /// Under the writer's lock, which every migration step holds: a refund raises the
    /// ring's snapshots, not its word, so the freeze that stops charges does not stop it,
    /// and a raise landing while the copy reads the slots would be lost, or copied in part
    /// (`loom-tests/tests/inline_refund_racing_migration.rs`). Refunds are rarer than
    /// checks; a check never waits for one.
    pub(crate) fn refund(
        &self,
        key: u64,
        hash: u64,
        rule: &CounterRule,
        now: impl Fn() -> u64,
        n: u64,
    ) -> Option<u64> {
        debug_assert_eq!(rule.buckets, self.buckets);
        let guard = &epoch::pin();
        let _writer = sync::lock(&self.writer);
        let slot = self.find(key, hash, guard)?;
        // A slot found under the lock is live: its ring is retired only under the lock.
        slot.refund(self.buckets, rule, now, n)
    }

    /// The window sum of `key` at `now`, if it has a live slot.
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn sum(&self, key: u64, hash: u64, granularity: u64, now: u64) -> Option<u64> {
        let guard = &epoch::pin();
        self.find(key, hash, guard)?
            .sum(self.buckets, granularity, now)
    }
}

/// The table's writer lock, held: the keyed limiter places a key in one of its two stores
/// under it, so that no key has a live window in both.
pub(crate) struct Placing<'t, S: InlineSlot> {
    table: &'t InlineTable<S>,
    writer: MutexGuard<'t, Writer>,
}

impl<S: InlineSlot> Placing<'_, S> {
    /// The keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// `key`'s live slot, if it has one. Under the lock a slot found is live: its ring is
    /// retired (frozen, evicted or taken) only under the lock.
    pub(crate) fn find<'g>(&mut self, key: u64, hash: u64, guard: &'g Guard) -> Option<&'g S> {
        self.table.step(&mut self.writer, guard);
        self.table.find(key, hash, guard)
    }

    /// `key`'s live slot, inserted with a fresh window if it has none (the tests' and loom
    /// models', through [`InlineTable::insert`]).
    #[cfg(any(test, slidegate_loom))]
    pub(crate) fn insert<'g>(
        &mut self,
        key: u64,
        hash: u64,
        granularity: u64,
        now: u64,
        others: usize,
        guard: &'g Guard,
    ) -> &'g S {
        if let Some(slot) = self.find(key, hash, guard) {
            return slot;
        }
        self.insert_absent(key, hash, granularity, now, others, guard)
    }

    /// A fresh window for `key`, which [`Placing::find`] has just found absent under this
    /// same lock.
    ///
    /// Before placing it, it sweeps a few slots for keys idle a whole window already
    /// (`granularity` ns buckets, judged at `now`), and makes room if the table's keys and
    /// `others` (the keys held elsewhere, which count against the same bound) are at
    /// `max_keys`.
    pub(crate) fn insert_absent<'g>(
        &mut self,
        key: u64,
        hash: u64,
        granularity: u64,
        now: u64,
        others: usize,
        guard: &'g Guard,
    ) -> &'g S {
        let (table, writer) = (self.table, &mut *self.writer);
        let window = granularity.saturating_mul(table.buckets);
        if now >= writer.quiet_until {
            table.sweep(writer, granularity, window, now, guard);
        }
        writer.quiet_until = writer.quiet_until.min(now.saturating_add(window));
        let len = table.len();
        if len > 0 && len + others >= table.max_keys {
            table.make_room(writer, granularity, now, true, guard);
        }
        let current = table.current(guard);
        let mut target = current.next.load(Ordering::Acquire, guard);
        if target.is_null() && table.len() + writer.tombstones + 1 > current.bound {
            target = table.start(writer, current, guard);
            table.step(writer, guard);
            if table.table.load(Ordering::Relaxed, guard) == target {
                // The migration finished in this step.
                target = Shared::null();
            }
        }
        let into = if target.is_null() {
            table.current(guard)
        } else {
            // SAFETY: as in `find`.
            unsafe { target.deref() }
        };
        // Relaxed: see the field.
        table.len.store(table.len() + 1, Ordering::Relaxed);
        into.place(key, hashed(hash), &table.fresh)
    }

    /// Retires the ring of `key`'s slot, if the table holds the key, whatever the ring holds:
    /// every later charge on it fails, so its state is final, and a lock-free lookup still
    /// finds the slot, retired, and goes to the lock. The slot, readable while `guard` is, is
    /// returned so that the key's state can be copied where it goes
    /// ([`InlineSlot::copy_to_entry`]); [`Placing::bury`] then ends it, once the key's new
    /// window is published (a lookup that found neither would take the key for absent).
    pub(crate) fn retire<'g>(&mut self, key: u64, hash: u64, guard: &'g Guard) -> Option<&'g S> {
        let slot = self.find(key, hash, guard)?;
        slot.retire_now(self.table.buckets);
        Some(slot)
    }

    /// Makes the slot [`Placing::retire`] retired a tombstone, not counted as an eviction.
    /// No migration step runs between the two (each is under this lock, and only this
    /// writer's own calls step), so the slot is where `retire` found it.
    pub(crate) fn bury(&mut self, slot: &S, guard: &Guard) {
        let in_current = self.table.in_current(slot, guard);
        let buried = self
            .table
            .evict_if(&mut self.writer, slot, in_current, |_| true);
        debug_assert!(buried, "a retired slot is still live until buried");
    }

    /// Frees one place for a key of a limiter whose keys are also held elsewhere, at their
    /// joint bound: an idle key among the next [`SAMPLE`], else, if `force`, the least
    /// recently active of them. Returns whether it evicted one.
    ///
    /// [`SAMPLE`]: super::eviction::SAMPLE
    pub(crate) fn make_room(
        &mut self,
        granularity: u64,
        now: u64,
        force: bool,
        guard: &Guard,
    ) -> bool {
        self.table.len() > 0
            && self
                .table
                .make_room(&mut self.writer, granularity, now, force, guard)
    }
}

impl<S: InlineSlot> Drop for InlineTable<S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no lookup is running and none can start.
        let guard = unsafe { epoch::unprotected() };
        let current = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: as above; the current table and its next, if any, are owned by the store.
        unsafe {
            let next = current.deref().next.load(Ordering::Relaxed, guard);
            if !next.is_null() {
                drop(next.into_owned());
            }
            drop(current.into_owned());
        }
    }
}

mod eviction;
mod migration;
mod slot;
#[cfg(all(test, not(slidegate_loom)))]
mod tests;

/// An inline table of `u64` keys hashed by identity, for the loom models
/// (`loom-tests/tests/inline_*.rs`): Strict checks over buckets of
/// [`LINE_MIN_GRANULARITY`] ns, in slots of either kind, so that a model runs on both.
#[cfg(slidegate_loom)]
pub struct LoomInline(LoomTable, u64);

#[cfg(slidegate_loom)]
enum LoomTable {
    Line(InlineTable<LineSlot>),
    Wide(InlineTable<WideSlot>),
}

/// `$body` on the table of either kind, as `$table`.
#[cfg(slidegate_loom)]
macro_rules! on_loom_table {
    ($inline:expr, |$table:ident| $body:expr) => {
        match &$inline.0 {
            LoomTable::Line($table) => $body,
            LoomTable::Wide($table) => $body,
        }
    };
}

#[cfg(slidegate_loom)]
impl LoomInline {
    /// The length of a bucket (ns).
    pub const GRANULARITY: u64 = LINE_MIN_GRANULARITY;

    /// An empty table of line slots for windows of `buckets` buckets.
    pub fn new(buckets: u64) -> LoomInline {
        LoomInline(LoomTable::Line(InlineTable::at_half_load(buckets)), buckets)
    }

    /// An empty table of wide slots (the three-word ring) for windows of `buckets` buckets.
    pub fn wide(buckets: u64) -> LoomInline {
        LoomInline(LoomTable::Wide(InlineTable::at_half_load(buckets)), buckets)
    }

    /// A Strict check of `cost` against `limit` on `key` at `t`.
    pub fn check(&self, key: u64, t: u64, limit: u64, cost: u64) -> bool {
        let rule = line_counter::strict(limit, self.1, Self::GRANULARITY);
        on_loom_table!(self, |table| table
            .check(key, key, &rule, || t, cost)
            .is_allowed())
    }

    /// A refund of up to `n` units of `key`'s window at `t`: the units freed (`None`: no
    /// live slot).
    pub fn refund(&self, key: u64, t: u64, n: u64) -> Option<u64> {
        let rule = line_counter::strict(1, self.1, Self::GRANULARITY);
        on_loom_table!(self, |table| table.refund(key, key, &rule, || t, n))
    }

    /// `key`'s window sum at `t`, if it has a live slot.
    pub fn sum(&self, key: u64, t: u64) -> Option<u64> {
        on_loom_table!(self, |table| table.sum(key, key, Self::GRANULARITY, t))
    }

    /// Evicts `key` if its window is empty at `t`.
    pub fn evict_idle(&self, key: u64, t: u64) -> bool {
        on_loom_table!(self, |table| table.evict_idle(
            key,
            key,
            Self::GRANULARITY,
            t
        ))
    }

    /// Evicts every key whose window is empty at `t`: how many.
    pub fn retain_recent(&self, t: u64) -> usize {
        on_loom_table!(self, |table| table.retain_recent(Self::GRANULARITY, t))
    }
}
