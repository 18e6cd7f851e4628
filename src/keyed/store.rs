//! The concurrent key store: an open-addressing, linear-probing hash table of epoch-managed
//! entries, each holding a key, its hash and its window in one allocation.
//!
//! # Layout
//! A table is a power-of-two array of slots; a slot is an atomic pointer
//! ([`Atomic`](crate::sync::epoch) from crossbeam-epoch) that is *empty* (null), a *tombstone*
//! (null with tag 1: a key was here, keep probing) or an entry, tagged with the top three bits
//! of its key's hash (see [`TAG_MASK`]). An entry ([`Entry`]) is one allocation: hash, the
//! state's head, the key, then the state's atomic words inline (a ring's `front`, `goal`,
//! `cum` and snapshots; a GCRA cell's TAT); only the exact log keeps its array in a second
//! one. A lookup of an existing key is one dependent load for the table,
//! one per probed slot and then the entry itself — linear probing keeps the probed slots on
//! one or two cache lines, a probe passes the entries of other keys by their tags, and a
//! small ring's words share the entry's first lines.
//!
//! # Why this design
//! - **Lookups write nothing shared.** A lookup pins the epoch (a store to the thread's own
//!   record behind a compiler fence; `crate::sync::epoch`), loads the table and probes:
//!   compare the slot's tag, then the entry's hash and key. No lock, no reference count, no
//!   access timestamp; the only shared writes on a check are the key's own ring.
//! - **One writer at a time.** Inserts, evictions and resizes take `writer`, a mutex that
//!   lookups never take. A key's first check is already a slow path (it allocates); making it
//!   single-writer removes every insert/insert and insert/evict race: two inserts of one key
//!   are serialized, and the second finds the first's entry (exactly one wins). A writer never
//!   blocks lookups: it publishes each change with one Release store of a slot (or of the
//!   table), which a lookup either sees or does not; a lookup that misses a key being inserted
//!   falls to the writer path, which sees it under the lock.
//! - **Resizes never stop readers.** A resize builds a new table holding the same entry
//!   pointers, publishes it with one store and retires the old table with `defer_destroy`,
//!   handing it to the collector at once (`Guard::hand_over`): a large object, not to wait
//!   in the thread's bag. Readers still probing the old table see valid entries; a table's
//!   `Drop` frees only its slot array, never the entries it shares with its successor. The
//!   store's own `Drop` frees the entries of the current table.
//! - **Eviction never changes a decision.** An entry is unlinked only after its ring was
//!   retired (see `window/ring.rs`, "Retirement"): retired while idle, it answers as a fresh
//!   entry would, and a check that found it a moment before fails its charge, looks the key
//!   up again under the lock and is charged to the fresh entry — no admission is lost.
//!   Unlinked entries are freed with `defer_destroy`, so never while a reader holds them.
//! - **Eviction is incremental.** Every insert examines a few slots after a cursor that goes
//!   round the table ([`SWEEP`]), evicting the entries it finds idle for a whole window
//!   already (so that keys in steady use, idle for a moment between checks, are not
//!   evicted and re-inserted over and over). Until the first instant at which an entry
//!   holding an admission can be stale (a window after the store's first insert, for a
//!   store of one quota), inserts skip the sweep, which could find nothing to evict
//!   (`Writer::quiet_until`). A store at `max_keys`
//!   examines up to [`SAMPLE`] entries for an idle one before forcing out the least recently
//!   active of them. [`Store::retain_recent`] sweeps the whole table in chunks, releasing the
//!   lock between chunks. No full scan ever runs under the lock.
//!
//! [`SWEEP`]: super::eviction::SWEEP
//! [`SAMPLE`]: super::eviction::SAMPLE

use core::alloc::Layout;
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};

use crate::sync::epoch::{self, Atomic, Guard, Owned, Pointer, Shared};
use crate::sync::{self, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use crate::window::state::{Shape, State};

use super::entry::{ENTRY_ALIGN, Entry};
use super::eviction::{self, SWEEP, Sampled};
use super::pool::{self, Array};

/// The tag that marks a null slot as a tombstone.
const TOMBSTONE: usize = 1;

/// The tag bits of a slot that points to an entry: entries are aligned to [`ENTRY_ALIGN`],
/// so a slot pointing to one has three tag bits. They hold the top three bits of the key's
/// hash ([`fragment`]). A probe compares them before it dereferences the entry, and so skips
/// all but one in eight of the entries of other keys on its way, each a cache miss in a large
/// table (`keyed_allowed` at a million keys, `keyed_new_key`).
const TAG_MASK: usize = ENTRY_ALIGN - 1;

/// The slot tag of an entry of a key with `hash`: its top bits, which no table homes by. A
/// hasher that leaves them zero (an identity hash of small integers) gives every entry tag 0:
/// probes then load every entry they pass, as before tags, and find the same keys.
#[inline]
fn fragment(hash: u64) -> usize {
    // Truncation intended: three bits.
    (hash >> (64 - ENTRY_ALIGN.trailing_zeros())) as usize
}

/// The smallest table.
const MIN_CAPACITY: usize = 8;

/// Slots `retain_recent` examines per lock acquisition.
const CHUNK: usize = 1024;

struct Table<K> {
    mask: usize,
    slots: Array<Atomic<Entry<K>>>,
}

impl<K> Table<K> {
    fn new(capacity: usize) -> Table<K> {
        debug_assert!(capacity.is_power_of_two());
        Table {
            mask: capacity - 1,
            slots: Array::new(capacity, Atomic::null),
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        // Truncation intended: the low bits pick the slot.
        hash as usize & self.mask
    }
}

/// State only the writer touches.
struct Writer {
    /// Where the next sweep starts.
    cursor: usize,
    /// Tombstones in the current table; with `len`, its load.
    tombstones: usize,
    /// No entry that holds an admission can be stale (idle for a whole window already, what
    /// a sweep evicts) before this instant: the earliest of `t + w` over every entry linked,
    /// made at `t` with a window of `w` (`Shape::stale_after`), since its admissions are at
    /// `t` or later. Inserts before it skip the sweep (`keyed_new_key`: the sweep's loads
    /// were a quarter of a new key's time at a million keys); from it on, every insert
    /// sweeps. An entry whose window holds nothing (made by a `check_all` that another limit
    /// denied, or emptied by refunds) is stale earlier; it waits for those sweeps, or for
    /// `max_keys` or `retain_recent`, which judge idleness at once.
    quiet_until: u64,
}

impl Writer {
    /// Notes an entry of `shape` made at `now`.
    fn made(&mut self, shape: Shape, now: u64) {
        self.quiet_until = self
            .quiet_until
            .min(now.saturating_add(shape.stale_after()));
    }
}

/// The key store. `K` is `'static` because unlinked entries are dropped later, on whichever
/// thread collects the epoch's garbage, possibly after the store itself is gone.
pub(crate) struct Store<K, S> {
    table: Atomic<Table<K>>,
    hasher: S,
    writer: Mutex<Writer>,
    /// Live entries (idle ones not yet evicted included). Written under `writer`.
    len: AtomicUsize,
    max_keys: usize,
    evicted: AtomicU64,
    forced: AtomicU64,
}

impl<K, S> Store<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher,
{
    /// An empty store holding at most `max_keys` (at least 1) entries.
    pub(crate) fn new(hasher: S, max_keys: usize) -> Store<K, S> {
        Store {
            table: Atomic::new(Table::new(MIN_CAPACITY)),
            hasher,
            writer: Mutex::new(Writer {
                cursor: 0,
                tombstones: 0,
                quiet_until: u64::MAX,
            }),
            len: AtomicUsize::new(0),
            max_keys: max_keys.max(1),
            evicted: AtomicU64::new(0),
            forced: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn hash<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.hasher.hash_one(key)
    }

    pub(crate) fn hasher(&self) -> &S {
        &self.hasher
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a statistic.
        self.len.load(Ordering::Relaxed)
    }

    /// The bound on keys.
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Entries evicted because they were idle.
    pub(crate) fn evictions(&self) -> u64 {
        // Relaxed: a statistic.
        self.evicted.load(Ordering::Relaxed)
    }

    /// Entries forced out by the `max_keys` bound while not idle.
    pub(crate) fn forced_evictions(&self) -> u64 {
        // Relaxed: a statistic.
        self.forced.load(Ordering::Relaxed)
    }

    /// The current table.
    #[inline]
    fn table<'g>(&self, guard: &'g Guard) -> &'g Table<K> {
        // Acquire: pairs with the Release store that published the table, so its slots'
        // initial values are visible.
        let table = self.table.load(Ordering::Acquire, guard);
        // SAFETY: the table pointer is never null; a replaced table is freed by
        // `defer_destroy`, so not before `guard` is dropped.
        unsafe { table.deref() }
    }

    /// The entry of `key`, if the store holds one. Lock-free; writes nothing shared. The entry
    /// may be retired (its ring says so); the caller then goes to [`Store::get_or_insert`].
    #[inline]
    pub(crate) fn get<'g, Q>(&self, key: &Q, hash: u64, guard: &'g Guard) -> Option<&'g Entry<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find(self.table(guard), key, hash, guard)
            // SAFETY: non-null slots point to entries freed only by `defer_destroy` after being
            // unlinked, so not before `guard` is dropped.
            .map(|(_, slot)| unsafe { slot.deref() })
    }

    /// The slot index and pointer of `key`'s entry in `table`, probing from its home slot to
    /// the first empty (not tombstone) slot.
    #[inline]
    fn find<'g, Q>(
        &self,
        table: &Table<K>,
        key: &Q,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<(usize, Shared<'g, Entry<K>>)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut i = table.home(hash);
        let fragment = fragment(hash);
        for _ in 0..=table.mask {
            // Acquire: pairs with the Release store that linked the entry, so its fields are
            // initialised.
            let slot = table.slots[i].load(Ordering::Acquire, guard);
            if slot.is_null() {
                if slot.tag() != TOMBSTONE {
                    return None;
                }
            } else if slot.tag() == fragment {
                // SAFETY: as in `get`: linked entries are freed only by `defer_destroy`.
                let entry = unsafe { slot.deref() };
                if entry.hash() == hash as u32 && entry.key.borrow() == key {
                    return Some((i, slot));
                }
            }
            i = (i + 1) & table.mask;
        }
        None
    }

    /// The live entry of `key` with the shape `shape()` returns: the existing one, or a fresh
    /// one inserted now (an entry of another shape is retired and replaced). `shape` is asked
    /// under the lock, so the key's quota it reads is the latest published, and a caller that
    /// read an older quota cannot replace an entry of the newer shape. `now` is the time idle
    /// entries are judged at. Takes the writer lock.
    pub(crate) fn get_or_insert<'g, Q>(
        &self,
        key: &Q,
        hash: u64,
        shape: impl FnOnce() -> Shape,
        now: u64,
        guard: &'g Guard,
    ) -> &'g Entry<K>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.get_or_insert_with(key, hash, shape, now, 0, |_| {}, guard)
    }

    /// [`Store::get_or_insert`], for a limiter that also holds keys elsewhere: `others` of
    /// them count against `max_keys` with the store's, and a fresh entry's words are handed
    /// to `init` before it is published (the state of a key that moves here).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_or_insert_with<'g, Q>(
        &self,
        key: &Q,
        hash: u64,
        shape: impl FnOnce() -> Shape,
        now: u64,
        others: usize,
        init: impl FnOnce(&[AtomicU64]),
        guard: &'g Guard,
    ) -> &'g Entry<K>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let mut writer = self.lock();
        let shape = shape();
        let table = self.table(guard);
        if let Some((i, slot)) = self.find(table, key, hash, guard) {
            // SAFETY: as in `get`.
            let entry = unsafe { slot.deref() };
            // Under the lock an entry in the table is live (retire and unlink happen together
            // under it), so only a change of shape needs a new entry. Its counts are dropped on
            // purpose: see `KeyedLimiter::quota_for`.
            if entry.fits(shape) && !entry.state().is_retired() {
                return entry;
            }
            entry.state().retire_now();
            writer.made(shape, now);
            let fresh = Self::fresh(key, hash, shape, guard);
            // SAFETY: not yet linked; freed only through `defer_destroy` once it is.
            init(unsafe { fresh.deref() }.words());
            // Release: publishes the fresh entry's initialisation to lookups.
            table.slots[i].store(fresh, Ordering::Release);
            // SAFETY: `slot` is unlinked from the only table that is not itself retired, and
            // retired tables never free entries.
            unsafe { guard.defer_destroy(slot) };
            // SAFETY: just linked; freed only through `defer_destroy`.
            return unsafe { fresh.deref() };
        }

        // The key is absent: make room, then link a fresh entry.
        let mut table = table;
        if now >= writer.quiet_until {
            self.sweep(&mut writer, table, now, guard);
        }
        writer.made(shape, now);
        if self.len() > 0 && self.len() + others >= self.max_keys {
            self.make_room(&mut writer, table, now, true, guard);
        }
        if (self.len() + writer.tombstones + 1) * 4 > (table.mask + 1) * 3 {
            table = self.resize(&mut writer, guard);
        }
        let fresh = Self::fresh(key, hash, shape, guard);
        // SAFETY: not yet linked; freed only through `defer_destroy` once it is.
        init(unsafe { fresh.deref() }.words());
        let mut i = table.home(hash);
        loop {
            let slot = table.slots[i].load(Ordering::Relaxed, guard);
            if slot.is_null() {
                if slot.tag() == TOMBSTONE {
                    writer.tombstones -= 1;
                }
                // Release: publishes the entry's initialisation to lookups (their Acquire).
                table.slots[i].store(fresh, Ordering::Release);
                break;
            }
            // The load factor stays at most 3/4, so a free slot is found.
            i = (i + 1) & table.mask;
        }
        // Relaxed: a statistic. Written only under the lock, so a load and a store suffice
        // (no locked read-modify-write on a key's first check).
        self.len.store(self.len() + 1, Ordering::Relaxed);
        // SAFETY: just linked; freed only through `defer_destroy`.
        unsafe { fresh.deref() }
    }

    /// Retires and unlinks `key`'s entry, if the store holds one (a key whose quota moved it
    /// to another store; not counted as an eviction).
    pub(crate) fn remove<Q>(&self, key: &Q, hash: u64, guard: &Guard)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut writer = self.lock();
        let table = self.table(guard);
        if let Some((i, slot)) = self.find(table, key, hash, guard) {
            // SAFETY: as in `get`.
            unsafe { slot.deref() }.state().retire_now();
            self.unlink(&mut writer, table, i, slot, guard);
        }
    }

    /// The writer's lock, held while a limiter whose keys are also held elsewhere makes room
    /// at their joint bound: no eviction of the store's runs meanwhile, so the count it
    /// judged the bound by stays.
    pub(crate) fn room(&self) -> Room<'_, K, S> {
        Room {
            store: self,
            writer: self.lock(),
        }
    }

    /// A new entry for `key`, tagged with its hash's fragment, not yet linked.
    fn fresh<'g, Q>(key: &Q, hash: u64, shape: Shape, guard: &'g Guard) -> Shared<'g, Entry<K>>
    where
        K: From<Q::Owned>,
        Q: ToOwned + ?Sized,
    {
        Owned::<Entry<K>>::init((hash, K::from(key.to_owned()), shape))
            .with_tag(fragment(hash))
            .into_shared(guard)
    }

    /// Evicts every entry that is idle at `now`, a chunk of slots per lock acquisition, so
    /// inserts interleave with it. An entry moved by a concurrent resize may be skipped until
    /// the next call. Returns the number evicted.
    pub(crate) fn retain_recent(&self, now: u64) -> usize {
        eviction::retain_recent(CHUNK, |start, chunk| {
            let guard = epoch::pin();
            let mut writer = self.lock();
            let mut slots = self.evicting(&mut writer, &guard);
            (start < slots.table.mask + 1)
                .then(|| eviction::evict_idle_in(&mut slots, start..start + chunk, now))
        })
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        sync::lock(&self.writer)
    }

    /// The policy's sweep ([`eviction::sweep`]): [`SWEEP`] slots after the cursor, entries
    /// idle for a whole window already evicted (`State::retire_stale`).
    ///
    /// [`SWEEP`]: super::eviction::SWEEP
    fn sweep(&self, writer: &mut Writer, table: &Table<K>, now: u64, guard: &Guard) {
        let mut slots = Evicting {
            store: self,
            writer: &mut *writer,
            table,
            guard,
        };
        eviction::sweep(&mut slots, SWEEP, now);
        // Start loading the entries the next sweep examines, so that it finds them in cache
        // rather than waiting on a miss for each: the sweep's misses are most of a new key's
        // cost without it (`keyed_new_key`). The same prefetch ahead of a resize's re-homing
        // gains nothing.
        for k in 0..SWEEP {
            let i = writer.cursor.wrapping_add(k) & table.mask;
            let slot = table.slots[i].load(Ordering::Relaxed, guard);
            if !slot.is_null() {
                // The entry's head and, a line on, a ring's `front` and `cum`.
                let addr = slot.into_usize() & !TAG_MASK;
                sync::prefetch(addr);
                sync::prefetch(addr + 64);
            }
        }
    }

    /// Frees one place for a new key in a store at its bound ([`eviction::make_room`]): an
    /// entry idle at `now` among the next [`SAMPLE`] after the cursor, else,
    /// if `force`, the least recently active of them (forced, counted). Returns whether it
    /// evicted one.
    ///
    /// [`SAMPLE`]: super::eviction::SAMPLE
    fn make_room(
        &self,
        writer: &mut Writer,
        table: &Table<K>,
        now: u64,
        force: bool,
        guard: &Guard,
    ) -> bool {
        let mut slots = Evicting {
            store: self,
            writer,
            table,
            guard,
        };
        eviction::make_room(&mut slots, now, force)
    }

    /// The table's slots as the eviction policy sees them, under the writer's lock.
    fn evicting<'a>(&'a self, writer: &'a mut Writer, guard: &'a Guard) -> Evicting<'a, K, S> {
        Evicting {
            store: self,
            writer,
            table: self.table(guard),
            guard,
        }
    }

    /// Retires and unlinks the entry in slot `i` if it is idle at `now`.
    #[inline]
    fn evict_if_idle(
        &self,
        writer: &mut Writer,
        table: &Table<K>,
        i: usize,
        now: u64,
        guard: &Guard,
    ) -> bool {
        self.evict_if(writer, table, i, guard, |state| state.retire_idle(now))
    }

    /// Unlinks the entry in slot `i` if `retire` retires its state (an idle retirement).
    #[inline]
    fn evict_if(
        &self,
        writer: &mut Writer,
        table: &Table<K>,
        i: usize,
        guard: &Guard,
        retire: impl FnOnce(State<'_>) -> bool,
    ) -> bool {
        let slot = table.slots[i].load(Ordering::Relaxed, guard);
        if slot.is_null() {
            return false;
        }
        // SAFETY: as in `get`.
        let entry = unsafe { slot.deref() };
        if !retire(entry.state()) {
            return false;
        }
        self.unlink(writer, table, i, slot, guard);
        // Relaxed: a statistic.
        self.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Removes the (retired) entry `slot` from slot `i` and schedules it to be freed.
    fn unlink(
        &self,
        writer: &mut Writer,
        table: &Table<K>,
        i: usize,
        slot: Shared<'_, Entry<K>>,
        guard: &Guard,
    ) {
        let next = table.slots[(i + 1) & table.mask].load(Ordering::Relaxed, guard);
        if next.is_null() && next.tag() != TOMBSTONE {
            // No probe sequence continues past `i`, so it can be empty rather than a
            // tombstone, and so can the tombstones just before it.
            // Release: orders the ring's retirement before the unlinking.
            table.slots[i].store(Shared::null(), Ordering::Release);
            let mut j = i;
            loop {
                j = j.wrapping_sub(1) & table.mask;
                let prev = table.slots[j].load(Ordering::Relaxed, guard);
                if !(prev.is_null() && prev.tag() == TOMBSTONE) || j == i {
                    break;
                }
                // Release: as above (a plain store would do; kept uniform).
                table.slots[j].store(Shared::null(), Ordering::Release);
                writer.tombstones -= 1;
            }
        } else {
            // Release: orders the ring's retirement before the unlinking.
            table.slots[i].store(Shared::null().with_tag(TOMBSTONE), Ordering::Release);
            writer.tombstones += 1;
        }
        // Relaxed: a statistic, written only under the lock (as in `get_or_insert`).
        self.len.store(self.len() - 1, Ordering::Relaxed);
        // SAFETY: the entry is unlinked from the current table; retired tables that still
        // point to it never free it, and readers that reached it are pinned.
        unsafe { guard.defer_destroy(slot) };
    }

    /// Replaces the table by one sized for the live entries at a load of at most 1/2, with no
    /// tombstones, and returns it.
    fn resize<'g>(&self, writer: &mut Writer, guard: &'g Guard) -> &'g Table<K> {
        let old_shared = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: never null; only this writer replaces it.
        let old = unsafe { old_shared.deref() };
        let capacity = ((self.len() + 1) * 2).next_power_of_two().max(MIN_CAPACITY);
        let fresh = Table::new(capacity);
        for slot in old.slots.iter() {
            let entry = slot.load(Ordering::Relaxed, guard);
            if entry.is_null() {
                continue;
            }
            // SAFETY: as in `get`.
            let mut i = fresh.home(u64::from(unsafe { entry.deref() }.hash()));
            while !fresh.slots[i].load(Ordering::Relaxed, guard).is_null() {
                i = (i + 1) & fresh.mask;
            }
            fresh.slots[i].store(entry, Ordering::Relaxed);
        }
        let fresh = Owned::new(fresh).into_shared(guard);
        // Release: pairs with the Acquire in `table`, publishing the new slots' contents.
        self.table.store(fresh, Ordering::Release);
        // SAFETY: unlinked; a table's drop frees only its slot array, and readers still
        // probing it are pinned.
        unsafe { guard.defer_destroy(old_shared) };
        // A table is large (16 MiB at a million keys): handed over now, not when this
        // thread's bag fills, so that it is freed a few collections later.
        guard.hand_over();
        writer.tombstones = 0;
        writer.cursor = 0;
        // SAFETY: just published; freed only through `defer_destroy`.
        unsafe { fresh.deref() }
    }
}

/// A store's table under its writer's lock, as the eviction policy sees it.
struct Evicting<'a, K, S> {
    store: &'a Store<K, S>,
    writer: &'a mut Writer,
    table: &'a Table<K>,
    guard: &'a Guard,
}

impl<K, S> eviction::Slots for Evicting<'_, K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher,
{
    /// A key a `check_all` holds a reservation on is forced out only if every key sampled
    /// holds one: otherwise a call making several new keys at the bound could force out one
    /// it had just made, forgetting its own admission.
    type Rank = (bool, u64);

    #[inline]
    fn capacity(&self) -> usize {
        self.table.mask + 1
    }

    #[inline]
    fn next(&mut self) -> usize {
        let i = self.writer.cursor & self.table.mask;
        self.writer.cursor = self.writer.cursor.wrapping_add(1);
        i
    }

    #[inline]
    fn evict_if_idle(&mut self, i: usize, now: u64) -> bool {
        self.store
            .evict_if_idle(self.writer, self.table, i, now, self.guard)
    }

    #[inline]
    fn evict_if_stale(&mut self, i: usize, now: u64) -> bool {
        self.store
            .evict_if(self.writer, self.table, i, self.guard, |state| {
                state.retire_stale(now)
            })
    }

    #[inline]
    fn sample(&mut self, i: usize, now: u64) -> Sampled<(bool, u64)> {
        let slot = self.table.slots[i].load(Ordering::Relaxed, self.guard);
        if slot.is_null() {
            return Sampled::Empty;
        }
        if self.evict_if_idle(i, now) {
            return Sampled::Evicted;
        }
        // SAFETY: as in `get`; only this writer unlinks, and it did not.
        let state = unsafe { slot.deref() }.state();
        Sampled::Kept((state.holds_reservation(), state.last_active()))
    }

    #[inline]
    fn force_out(&mut self, i: usize) -> bool {
        let slot = self.table.slots[i].load(Ordering::Relaxed, self.guard);
        // SAFETY: as in `get`; the policy forces out a key it sampled live, and only this
        // writer unlinks.
        let entry = unsafe { slot.deref() };
        entry.state().retire_now();
        self.store
            .unlink(self.writer, self.table, i, slot, self.guard);
        // Relaxed: a statistic.
        self.store.forced.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The store's writer lock, held (see [`Store::room`]).
pub(crate) struct Room<'s, K, S> {
    store: &'s Store<K, S>,
    writer: MutexGuard<'s, Writer>,
}

impl<K, S> Room<'_, K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher,
{
    /// The store's entries.
    pub(crate) fn len(&self) -> usize {
        self.store.len()
    }

    /// Frees one place: an idle entry among the next [`SAMPLE`], else, if `force`, the
    /// least recently active of them. Returns whether it evicted one.
    ///
    /// [`SAMPLE`]: super::eviction::SAMPLE
    pub(crate) fn make_room(&mut self, now: u64, force: bool, guard: &Guard) -> bool {
        let store = self.store;
        store.len() > 0 && store.make_room(&mut self.writer, store.table(guard), now, force, guard)
    }
}

impl<K, S> Drop for Store<K, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no lookup is running and none can start, so nothing else
        // can reach the current table or its entries.
        let guard = unsafe { epoch::unprotected() };
        let table = self.table.load(Ordering::Relaxed, guard);
        // SAFETY: as above; never null.
        let slots = &unsafe { table.deref() }.slots;
        let mut entries: Vec<usize> = slots
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed, guard))
            .filter(|entry| !entry.is_null())
            .map(|entry| entry.into_usize() & !TAG_MASK)
            .collect();
        // Given back to the pool in runs of adjacent entries, in address order, so that the
        // pool hands them to the next keys as it would a fresh chunk: one at a time in table
        // order they came back scattered, each new key's entry a load that missed the cache
        // before its allocation could return, and a new key's check took twice as long
        // (`keyed_new_key`, a fresh limiter per sample).
        entries.sort_unstable();
        let mut run: Option<(usize, usize, Layout)> = None;
        for entry in entries {
            // SAFETY: the current table owns its live entries; retired tables never free
            // them and evicted ones are no longer in it. Each is dropped once.
            let layout = unsafe { Entry::<K>::dispose(entry) };
            match run {
                Some((start, count, l))
                    if l == layout
                        && pool::stride(l)
                            .is_some_and(|stride| start + count * stride == entry) =>
                {
                    run = Some((start, count + 1, l));
                }
                _ => {
                    if let Some((start, count, l)) = run {
                        // SAFETY: entries from the pool, dropped above, none used again.
                        unsafe { pool::free_run(start as *mut u8, count, l) };
                    }
                    run = Some((entry, 1, layout));
                }
            }
        }
        if let Some((start, count, l)) = run {
            // SAFETY: as above.
            unsafe { pool::free_run(start as *mut u8, count, l) };
        }
        // SAFETY: as above.
        drop(unsafe { table.into_owned() });
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests;
