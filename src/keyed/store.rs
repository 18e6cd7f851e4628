//! The concurrent key store: an open-addressing, linear-probing hash table of epoch-managed
//! entries, each holding a key, its hash and its window in one allocation.
//!
//! # Layout
//! A table is a power-of-two array of slots; a slot is an atomic pointer
//! ([`Atomic`](crate::sync::epoch) from crossbeam-epoch) that is *empty* (null), a *tombstone*
//! (null with tag 1: a key was here, keep probing) or an entry, tagged with the top four bits
//! of its key's hash (see [`ENTRY_ALIGN`]). An entry is one allocation:
//! hash, the state's [`Head`], the key, then the state's atomic words inline (a ring's
//! `front`, `goal`, `cum` and snapshots; a GCRA cell's TAT); only the exact log keeps its
//! array in a second one. A lookup of an existing key is one dependent load for the table,
//! one per probed slot and then the entry itself — linear probing keeps the probed slots on
//! one or two cache lines, a probe passes the entries of other keys by their tags, and a
//! small ring's words share the entry's first lines.
//!
//! # Why this design
//! - **Lookups write nothing shared.** A lookup pins the epoch (a thread-local write),
//!   loads the table and probes: compare the slot's tag, then the entry's hash and key. No
//!   lock, no reference count, no access timestamp; the only shared writes on a check are the
//!   key's own ring.
//! - **One writer at a time.** Inserts, evictions and resizes take `writer`, a mutex that
//!   lookups never take. A key's first check is already a slow path (it allocates); making it
//!   single-writer removes every insert/insert and insert/evict race: two inserts of one key
//!   are serialized, and the second finds the first's entry (exactly one wins). A writer never
//!   blocks lookups: it publishes each change with one Release store of a slot (or of the
//!   table), which a lookup either sees or does not; a lookup that misses a key being inserted
//!   falls to the writer path, which sees it under the lock.
//! - **Resizes never stop readers.** A resize builds a new table holding the same entry
//!   pointers, publishes it with one store and retires the old table with `defer_destroy`.
//!   Readers still probing the old table see valid entries; a table's `Drop` frees only its
//!   slot array, never the entries it shares with its successor. The store's own `Drop` frees
//!   the entries of the current table.
//! - **Eviction never changes a decision.** An entry is unlinked only after its ring was
//!   retired (see `window/ring.rs`, "Retirement"): retired while idle, it answers as a fresh
//!   entry would, and a check that found it a moment before fails its charge, looks the key
//!   up again under the lock and is charged to the fresh entry — no admission is lost.
//!   Unlinked entries are freed with `defer_destroy`, so never while a reader holds them.
//! - **Eviction is incremental.** Every insert examines a few slots after a cursor that goes
//!   round the table ([`SWEEP`]), evicting the entries it finds idle for a whole window
//!   already (so that keys in steady use, idle for a moment between checks, are not
//!   evicted and re-inserted over and over); a store at `max_keys`
//!   examines up to [`SAMPLE`] entries for an idle one before forcing out the least recently
//!   active of them. [`Store::retain_recent`] sweeps the whole table in chunks, releasing the
//!   lock between chunks. No full scan ever runs under the lock.

use core::hash::{BuildHasher, Hash};

use std::alloc::{self, Layout};

use core::{mem, ptr};

use crate::sync::epoch::{self, Atomic, Guard, Owned, Pointable, Pointer, Shared};
use crate::sync::{self, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use crate::window::state::{Head, State};

pub(crate) use crate::window::state::Shape;

/// The tag that marks a null slot as a tombstone.
const TOMBSTONE: usize = 1;

/// Entries are aligned to 16 bytes, so a slot pointing to one has four tag bits; they hold
/// the top four bits of the key's hash ([`fragment`]). A probe compares them before it
/// dereferences the entry, and so skips all but one in sixteen of the entries of other keys
/// on its way, each a cache miss in a large table: at a million keys (a table at load 1/2,
/// about 1.5 slots probed per hit), 359–370 → 309–314 ns a check, old and new builds
/// alternating (`cargo bench --bench keyed -- keyed_allowed/slidegate/1000000`), and a new
/// key's two probes to an empty slot 196–198 → 177–184 ns. 16 is what the system allocator
/// aligns every allocation of this size to anyway, so the alignment costs no memory.
const ENTRY_ALIGN: usize = 16;

/// The tag bits of a slot that points to an entry.
const TAG_MASK: usize = ENTRY_ALIGN - 1;

/// The slot tag of an entry of a key with `hash`: its top bits, which no table homes by. A
/// hasher that leaves them zero (an identity hash of small integers) gives every entry tag 0:
/// probes then load every entry they pass, as before tags, and find the same keys.
#[inline]
fn fragment(hash: u64) -> usize {
    // Truncation intended: four bits.
    (hash >> (64 - ENTRY_ALIGN.trailing_zeros())) as usize
}

/// The smallest table.
const MIN_CAPACITY: usize = 8;

/// Slots an insert examines for idle entries, so that churn is reclaimed as it happens.
const SWEEP: usize = 4;

/// Entries a store at its bound examines for an idle one before forcing one out.
const SAMPLE: usize = 16;

/// Slots `retain_recent` examines per lock acquisition.
const CHUNK: usize = 1024;

/// One key's entry: hash, state head, key, then the state's words inline, in one allocation
/// (see the `Pointable` impl): a check at a million keys misses on the table slot and then
/// on the entry, whose first lines hold the key and, for a small ring, its words too. With
/// the words in a boxed slice of their own it missed a third time: a million keys, N = 10,
/// in a bare loop, 383–409 ns a check against 256–269 inline.
#[repr(C)]
pub(crate) struct Entry<K, W: ?Sized = [AtomicU64]> {
    /// The low 32 bits of the key's hash (all a table of up to 2³² slots homes by), and above
    /// them the number of words: a deref reads the entry's length with one shift rather than
    /// a match on its head (a check derefs every entry it probes).
    tag: u64,
    /// Under loom, a cell read by every use of the entry's state and written by its drop:
    /// loom then reports an entry freed while a reader can still reach it (a use after free
    /// reads memory loom does not track, and went unseen unless the address was reused).
    #[cfg(slidegate_loom)]
    live: loom::cell::UnsafeCell<()>,
    head: Head,
    pub(crate) key: K,
    words: W,
}

/// An entry's fields before its words: the same offsets as in `Entry<K>` (`repr(C)`).
type Header<K> = Entry<K, [AtomicU64; 0]>;

impl<K> Entry<K> {
    /// The low 32 bits of the key's hash.
    #[inline]
    fn hash(&self) -> u32 {
        self.tag as u32
    }

    /// The key's state.
    #[inline]
    pub(crate) fn state(&self) -> State<'_> {
        #[cfg(slidegate_loom)]
        self.live.with(|_| ());
        self.head.packed(&self.words)
    }

    /// Whether the entry's state has `shape`.
    #[inline]
    pub(crate) fn fits(&self, shape: Shape) -> bool {
        self.state().fits(shape)
    }

    /// The layout of an entry with `len` words: the header, the words at their offset in the
    /// unsized struct, padded to the struct's alignment (so that the allocation holds the
    /// whole value a reference to it spans), at the address alignment of
    /// [`Pointable::ALIGN`]. The size is not padded to the latter: padded to 16, an entry of
    /// a ring of ten buckets (152 bytes) took the allocator's next size class, 16 bytes more
    /// per key (`cargo run --release --example keyed_memory`: N = 10, 194 → 210 bytes).
    fn layout(len: usize) -> Layout {
        let size = mem::offset_of!(Header<K>, words) + len * mem::size_of::<AtomicU64>();
        let align = mem::align_of::<Header<K>>();
        match Layout::from_size_align(size.next_multiple_of(align), Self::ALIGN) {
            Ok(layout) => layout,
            Err(_) => panic!("an entry of {len} words overflows the address space"),
        }
    }

    /// The entry at address `ptr` (made by [`Pointable::init`]), as a pointer with its
    /// length.
    ///
    /// # Safety
    /// `ptr` must come from `init` and not yet be dropped.
    unsafe fn fat(ptr: usize) -> *mut Entry<K> {
        // SAFETY: the caller's contract; the header's fields are initialised and sit at the
        // same offsets in `Header<K>` as in the entry (`repr(C)`, same field types).
        let len = unsafe { (*(ptr as *const Header<K>)).tag >> 32 } as usize;
        ptr::slice_from_raw_parts_mut(ptr as *mut AtomicU64, len) as *mut Entry<K>
    }
}

/// Allocates entries with their words inline, for crossbeam-epoch's `Atomic` (which frees
/// them through `drop` below). The shape fixes the number of words, so each entry's length
/// is read back from its head.
impl<K> Pointable for Entry<K> {
    // At least 16: the low four bits of an entry's address carry its hash's fragment.
    const ALIGN: usize = if mem::align_of::<Header<K>>() > ENTRY_ALIGN {
        mem::align_of::<Header<K>>()
    } else {
        ENTRY_ALIGN
    };

    type Init = (u64, K, Shape);

    unsafe fn init((hash, key, shape): Self::Init) -> usize {
        let len = shape.words();
        let layout = Entry::<K>::layout(len);
        // SAFETY: `layout` has a non-zero size (the header is at least 16 bytes).
        let raw = unsafe { alloc::alloc(layout) };
        if raw.is_null() {
            alloc::handle_alloc_error(layout);
        }
        let entry = ptr::slice_from_raw_parts_mut(raw.cast::<AtomicU64>(), len) as *mut Entry<K>;
        // SAFETY: `raw` is a fresh allocation of `layout`, which holds the unsized entry of
        // `len` words (same offsets, size rounded up to the same alignment); each field is
        // written once, in place, before anything reads it.
        unsafe {
            ptr::addr_of_mut!((*entry).tag).write(((len as u64) << 32) | (hash & 0xffff_ffff));
            ptr::addr_of_mut!((*entry).head).write(Head::new(shape));
            #[cfg(slidegate_loom)]
            ptr::addr_of_mut!((*entry).live).write(loom::cell::UnsafeCell::new(()));
            ptr::addr_of_mut!((*entry).key).write(key);
            let words = ptr::addr_of_mut!((*entry).words).cast::<AtomicU64>();
            for i in 0..len {
                words.add(i).write(AtomicU64::new(shape.initial(i)));
            }
        }
        raw as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Self {
        // SAFETY: `ptr` is a live entry (the trait's contract): initialised, and freed only
        // by `drop`, which the caller does not run concurrently.
        unsafe { &*Entry::<K>::fat(ptr) }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Self {
        // SAFETY: as in `deref`, and the caller holds the only reference.
        unsafe { &mut *Entry::<K>::fat(ptr) }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: `ptr` is a live entry no one else references (the trait's contract); it
        // was allocated by `init` with the layout of its length, and is dropped once.
        unsafe {
            let entry = Entry::<K>::fat(ptr);
            let layout = Entry::<K>::layout(((*entry).tag >> 32) as usize);
            #[cfg(slidegate_loom)]
            (*entry).live.with_mut(|_| ());
            ptr::drop_in_place(entry);
            alloc::dealloc(ptr as *mut u8, layout);
        }
    }
}

struct Table<K> {
    mask: usize,
    slots: Box<[Atomic<Entry<K>>]>,
}

impl<K> Table<K> {
    fn new(capacity: usize) -> Table<K> {
        debug_assert!(capacity.is_power_of_two());
        Table {
            mask: capacity - 1,
            slots: (0..capacity).map(|_| Atomic::null()).collect(),
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
            }),
            len: AtomicUsize::new(0),
            max_keys: max_keys.max(1),
            evicted: AtomicU64::new(0),
            forced: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn hash(&self, key: &K) -> u64 {
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
    pub(crate) fn get<'g>(&self, key: &K, hash: u64, guard: &'g Guard) -> Option<&'g Entry<K>> {
        self.find(self.table(guard), key, hash, guard)
            // SAFETY: non-null slots point to entries freed only by `defer_destroy` after being
            // unlinked, so not before `guard` is dropped.
            .map(|(_, slot)| unsafe { slot.deref() })
    }

    /// The slot index and pointer of `key`'s entry in `table`, probing from its home slot to
    /// the first empty (not tombstone) slot.
    #[inline]
    fn find<'g>(
        &self,
        table: &Table<K>,
        key: &K,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<(usize, Shared<'g, Entry<K>>)> {
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
                if entry.hash() == hash as u32 && entry.key == *key {
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
    pub(crate) fn get_or_insert<'g>(
        &self,
        key: &K,
        hash: u64,
        shape: impl FnOnce() -> Shape,
        now: u64,
        guard: &'g Guard,
    ) -> &'g Entry<K> {
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
            let fresh = Self::fresh(key, hash, shape, guard);
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
        self.sweep(&mut writer, table, now, guard);
        if self.len() >= self.max_keys {
            self.make_room(&mut writer, table, now, guard);
        }
        if (self.len() + writer.tombstones + 1) * 4 > (table.mask + 1) * 3 {
            table = self.resize(&mut writer, guard);
        }
        let fresh = Self::fresh(key, hash, shape, guard);
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

    /// A new entry for `key`, tagged with its hash's fragment, not yet linked.
    fn fresh<'g>(key: &K, hash: u64, shape: Shape, guard: &'g Guard) -> Shared<'g, Entry<K>> {
        Owned::<Entry<K>>::init((hash, key.clone(), shape))
            .with_tag(fragment(hash))
            .into_shared(guard)
    }

    /// Evicts every entry that is idle at `now`, a chunk of slots per lock acquisition, so
    /// inserts interleave with it. An entry moved by a concurrent resize may be skipped until
    /// the next call. Returns the number evicted.
    pub(crate) fn retain_recent(&self, now: u64) -> usize {
        let mut evicted = 0;
        let mut start = 0;
        loop {
            let guard = epoch::pin();
            let mut writer = self.lock();
            let table = self.table(&guard);
            if start > table.mask {
                return evicted;
            }
            let end = (start + CHUNK).min(table.mask + 1);
            for i in start..end {
                evicted += usize::from(self.evict_if_idle(&mut writer, table, i, now, &guard));
            }
            start = end;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        sync::lock(&self.writer)
    }

    /// Examines [`SWEEP`] slots after the cursor, evicting entries that have been idle for a
    /// whole window already (`State::retire_stale`). Evicting every idle entry instead made
    /// keys in steady use thrash: a GCRA key is idle a moment after each check, and each
    /// insert evicted up to four such keys, each of which came back as an insert
    /// (`cargo bench --bench algorithms -- keyed_1000/slidegate/gcra`: 139 ns a check).
    fn sweep(&self, writer: &mut Writer, table: &Table<K>, now: u64, guard: &Guard) {
        for _ in 0..SWEEP {
            let i = writer.cursor & table.mask;
            writer.cursor = writer.cursor.wrapping_add(1);
            self.evict_if(writer, table, i, guard, |state| state.retire_stale(now));
        }
        // Start loading the entries the next sweep examines, so that it finds them in cache
        // rather than waiting on a miss for each: the sweep's misses were most of a new
        // key's cost (`cargo bench --bench keyed -- keyed_new_key`: 181–205 ns a new key with
        // the prefetch, 232–252 without; governor's 124–147). The same prefetch ahead of a
        // resize's re-homing measured no gain.
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

    /// Frees one place for a new key in a store at its bound: the first idle entry among the
    /// next [`SAMPLE`] after the cursor, else the least recently active of them (forced,
    /// counted).
    fn make_room(&self, writer: &mut Writer, table: &Table<K>, now: u64, guard: &Guard) {
        let mut oldest: Option<(u64, usize)> = None;
        let mut seen = 0;
        for _ in 0..=table.mask {
            if seen == SAMPLE {
                break;
            }
            let i = writer.cursor & table.mask;
            writer.cursor = writer.cursor.wrapping_add(1);
            let slot = table.slots[i].load(Ordering::Relaxed, guard);
            if slot.is_null() {
                continue;
            }
            seen += 1;
            if self.evict_if_idle(writer, table, i, now, guard) {
                return;
            }
            // SAFETY: as in `get`; only this writer unlinks, and it did not.
            let entry = unsafe { slot.deref() };
            let active = entry.state().last_active();
            if oldest.is_none_or(|(a, _)| active < a) {
                oldest = Some((active, i));
            }
        }
        if let Some((_, i)) = oldest {
            let slot = table.slots[i].load(Ordering::Relaxed, guard);
            // SAFETY: as above.
            let entry = unsafe { slot.deref() };
            entry.state().retire_now();
            self.unlink(writer, table, i, slot, guard);
            // Relaxed: a statistic.
            self.forced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Retires and unlinks the entry in slot `i` if it is idle at `now`.
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
        writer.tombstones = 0;
        writer.cursor = 0;
        // SAFETY: just published; freed only through `defer_destroy`.
        unsafe { fresh.deref() }
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
        for slot in slots.iter() {
            let entry = slot.load(Ordering::Relaxed, guard);
            if !entry.is_null() {
                // SAFETY: the current table owns its live entries; retired tables never free
                // them and evicted ones are no longer in it.
                drop(unsafe { entry.into_owned() });
            }
        }
        // SAFETY: as above.
        drop(unsafe { table.into_owned() });
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests {
    use super::*;
    use core::hash::Hasher;

    /// Sends every key to one hash: every key shares one probe sequence.
    #[derive(Clone, Default)]
    struct OneHash;

    impl BuildHasher for OneHash {
        type Hasher = OneHasher;
        fn build_hasher(&self) -> OneHasher {
            OneHasher
        }
    }

    struct OneHasher;

    impl Hasher for OneHasher {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    const SHAPE: Shape = Shape::Ring {
        granularity: 10,
        buckets: 2,
    };

    /// Inserts `key` at `now` and charges it one unit there.
    fn touch<S: BuildHasher>(store: &Store<u32, S>, key: u32, now: u64) {
        let guard = epoch::pin();
        let hash = store.hash(&key);
        let entry = store.get_or_insert(&key, hash, || SHAPE, now, &guard);
        let State::Ring { ring, .. } = entry.state() else {
            panic!("a ring shape makes a ring")
        };
        let read = ring.read(10, || now, true, |_| ());
        assert!(read.is_some_and(|((), r)| ring.try_charge(r, 1)));
    }

    fn held<S: BuildHasher>(store: &Store<u32, S>, key: u32) -> bool {
        let guard = epoch::pin();
        store.get(&key, store.hash(&key), &guard).is_some()
    }

    #[test]
    fn a_second_insert_of_a_key_finds_the_first() {
        let store = Store::new(OneHash, usize::MAX);
        let guard = epoch::pin();
        let a = store.get_or_insert(&1u32, 7, || SHAPE, 0, &guard) as *const Entry<u32>;
        let b = store.get_or_insert(&1u32, 7, || SHAPE, 0, &guard) as *const Entry<u32>;
        assert_eq!(a, b);
        assert_eq!(store.len(), 1);
    }

    /// Hashes key `k` to `k mod H | k << 60`: `H` home slots at most, low bits shared within
    /// each, and fragments `k mod 16`, so keys 16 apart share a fragment too.
    #[derive(Clone, Default)]
    struct Homes<const H: u64>;

    impl<const H: u64> BuildHasher for Homes<H> {
        type Hasher = HomesHasher<H>;
        fn build_hasher(&self) -> HomesHasher<H> {
            HomesHasher(0)
        }
    }

    struct HomesHasher<const H: u64>(u64);

    impl<const H: u64> Hasher for HomesHasher<H> {
        fn finish(&self) -> u64 {
            (self.0 % H) | (self.0 << 60)
        }
        fn write(&mut self, _: &[u8]) {
            unreachable!("u32 keys hash through write_u32")
        }
        fn write_u32(&mut self, k: u32) {
            self.0 = u64::from(k);
        }
    }

    #[test]
    fn probes_find_keys_past_entries_of_other_fragments() {
        let store = Store::new(Homes::<1>, usize::MAX);
        // One probe sequence of 40 keys whose fragments differ (0..16) and repeat (k, k + 16).
        for key in 0..40 {
            touch(&store, key, 0);
        }
        let guard = epoch::pin();
        for key in 0..40u32 {
            let hash = store.hash(&key);
            let entry = store.get(&key, hash, &guard).expect("every key is held");
            assert_eq!(entry.key, key);
            // The one charge of `touch`, so the entry is this key's own.
            assert_eq!(entry.state().admitted(), 1);
        }
        assert!(store.get(&40, store.hash(&40), &guard).is_none());
        assert_eq!(store.len(), 40);
    }

    #[test]
    fn lookups_probe_past_tombstones() {
        let store = Store::new(OneHash, usize::MAX);
        // Keys 0..4 at time 0, then 4..6 later: 0..4 are idle by t = 30.
        for key in 0..4 {
            touch(&store, key, 0);
        }
        for key in 4..6 {
            touch(&store, key, 25);
        }
        let evicted = store.retain_recent(30);
        assert_eq!(evicted, 4);
        assert_eq!(store.len(), 2);
        // 4 and 5 sit after the four tombstones in the one probe sequence.
        assert!(held(&store, 4) && held(&store, 5));
        assert!(!held(&store, 0));
        // A new key reuses the first tombstone, and every key is still found.
        touch(&store, 9, 30);
        assert!(held(&store, 4) && held(&store, 5) && held(&store, 9));
    }

    #[test]
    fn unlinking_the_end_of_a_probe_sequence_leaves_no_tombstones() {
        let store = Store::new(OneHash, usize::MAX);
        for key in 0..3 {
            touch(&store, key, 0);
        }
        assert_eq!(store.retain_recent(30), 3);
        assert_eq!(crate::sync::lock(&store.writer).tombstones, 0);
    }

    #[test]
    fn resizes_keep_every_entry_and_its_counts() {
        let store = Store::new(ahash::RandomState::new(), usize::MAX);
        for key in 0..1000 {
            touch(&store, key, 0);
        }
        assert_eq!(store.len(), 1000);
        let guard = epoch::pin();
        for key in 0..1000 {
            let entry = store.get(&key, store.hash(&key), &guard);
            assert_eq!(entry.map(|e| e.state().admitted()), Some(1), "key {key}");
        }
        // Load at most 3/4.
        let table = store.table(&guard);
        assert!(4 * 1000 <= 3 * (table.mask + 1));
    }

    #[test]
    fn inserts_evict_only_entries_idle_for_a_whole_window() {
        // SHAPE: W = 20 ns. Keys charged at t = 0 are idle from t = 30 (bucket 3 > 0 + N).
        let store = Store::new(ahash::RandomState::new(), usize::MAX);
        for key in 0..4 {
            touch(&store, key, 0);
        }
        // Idle, but not yet for a window: sweeps pass them by (no thrash of keys in use).
        for key in 100..120 {
            touch(&store, key, 49);
        }
        assert_eq!(store.evictions(), 0);
        assert!((0..4).all(|key| held(&store, key)));
        // Idle since t = 30, a window before t = 50: the sweeps take them.
        for key in 200..240 {
            touch(&store, key, 50);
        }
        assert_eq!(store.evictions(), 4);
        assert!((0..4).all(|key| !held(&store, key)));
    }

    #[test]
    fn a_full_store_forces_out_the_least_recently_active_entry() {
        let store = Store::new(OneHash, 3);
        for (key, t) in [(0, 10), (1, 0), (2, 20)] {
            touch(&store, key, t);
        }
        touch(&store, 3, 25);
        assert_eq!(store.forced_evictions(), 1);
        assert!(!held(&store, 1));
        assert!(held(&store, 0) && held(&store, 2) && held(&store, 3));
    }

    /// Entries of every shape, with keys of a stricter alignment than the header's (`u128`)
    /// and keys that own heap memory (`String`): each keeps its key, its state's words and
    /// its counts through inserts and resizes, and dropping the store frees them all.
    #[test]
    fn entries_of_every_shape_and_key_layout_keep_their_words() {
        fn check_all_shapes<K: Hash + Eq + Clone + Send + Sync + 'static>(key: impl Fn(u32) -> K) {
            let gcra = crate::window::gcra::GcraRule::new(4, 40);
            let shapes = [
                SHAPE,
                Shape::Ring {
                    granularity: 1,
                    buckets: 300,
                },
                Shape::Log {
                    capacity: 4,
                    window: 40,
                },
                Shape::Gcra(gcra),
            ];
            for shape in shapes {
                let store = Store::new(ahash::RandomState::new(), usize::MAX);
                let guard = epoch::pin();
                let rule = crate::algo::sliding_counter::Rule::new(
                    crate::Quota::new(4, core::time::Duration::from_nanos(40)).expect("valid"),
                );
                for k in 0..200 {
                    let key = key(k);
                    let entry = store.get_or_insert(&key, store.hash(&key), || shape, 0, &guard);
                    assert!(entry.state().fits(shape));
                    assert!(entry.key == key);
                    if let State::Ring { granularity, ring } = entry.state() {
                        let read = ring.read(granularity, || 5, true, |_| ());
                        assert!(read.is_some_and(|((), r)| ring.try_charge(r, 1)));
                    } else {
                        let now = || 5;
                        let (d, _) = entry
                            .state()
                            .check(&rule, now, 1, crate::window::Op::Peek)
                            .expect("live");
                        assert!(d.is_allowed());
                    }
                }
                for k in 0..200 {
                    let key = key(k);
                    let entry = store.get(&key, store.hash(&key), &guard).expect("held");
                    assert!(entry.key == key && entry.state().fits(shape));
                    if matches!(shape, Shape::Ring { .. }) {
                        assert_eq!(entry.state().admitted(), 1, "key {k}");
                    }
                }
            }
        }
        check_all_shapes(|k| u128::from(k) << 70);
        check_all_shapes(|k| format!("key number {k}"));
    }

    /// The table's invariants, checked under the writer lock: every linked entry is live, is
    /// tagged with its key's fragment and is reachable from its home slot (no empty slot in
    /// between); `len` and `tombstones` count what the slots hold; a free slot remains.
    fn check_invariants<S: BuildHasher>(store: &Store<u32, S>) {
        let writer = store.lock();
        let guard = epoch::pin();
        let table = store.table(&guard);
        let (mut entries, mut tombstones) = (0, 0);
        for (i, slot) in table.slots.iter().enumerate() {
            let slot = slot.load(Ordering::Relaxed, &guard);
            if slot.is_null() {
                tombstones += usize::from(slot.tag() == TOMBSTONE);
                continue;
            }
            entries += 1;
            // SAFETY: linked, and only the writer (held here) unlinks.
            let entry = unsafe { slot.deref() };
            let hash = store.hash(&entry.key);
            assert_eq!(slot.tag(), fragment(hash), "slot {i}: tag");
            assert!(
                !entry.state().is_retired(),
                "slot {i}: a retired entry is linked"
            );
            let mut j = table.home(hash);
            while j != i {
                let on_way = table.slots[j].load(Ordering::Relaxed, &guard);
                assert!(
                    !(on_way.is_null() && on_way.tag() != TOMBSTONE),
                    "key {} unreachable: slot {j} is empty",
                    entry.key
                );
                j = (j + 1) & table.mask;
            }
        }
        assert_eq!(entries, store.len(), "len");
        assert_eq!(tombstones, writer.tombstones, "tombstones");
        assert!(entries + tombstones <= table.mask, "no free slot");
    }

    /// 20 000 random steps (an insert-or-find with a charge, a clock step, a `retain_recent`)
    /// with the invariants checked after each, and a live key never given a second entry.
    fn random_steps<S: BuildHasher>(store: &Store<u32, S>, seed: u64, keys: u32) {
        let mut x = seed | 1;
        // xorshift64: deterministic, no dependency.
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0;
        for step in 0..20_000 {
            match next() % 10 {
                0 => now += next() % 15,
                1 => {
                    store.retain_recent(now);
                }
                _ => {
                    let key = (next() % u64::from(keys)) as u32;
                    let guard = epoch::pin();
                    let hash = store.hash(&key);
                    let before = store.get(&key, hash, &guard);
                    let entry = store.get_or_insert(&key, hash, || SHAPE, now, &guard);
                    assert_eq!(entry.key, key);
                    if let Some(before) = before.filter(|e| !e.state().is_retired()) {
                        assert!(ptr::eq(before, entry), "step {step}: a second entry");
                    }
                    let State::Ring { ring, .. } = entry.state() else {
                        panic!("a ring shape makes a ring")
                    };
                    if let Some(((), read)) = ring.read(10, || now, true, |_| ()) {
                        ring.try_charge(read, 1);
                    }
                }
            }
            check_invariants(store);
        }
    }

    #[test]
    fn random_inserts_evictions_and_resizes_keep_the_table_invariants() {
        for seed in 1..20u64 {
            // Three home slots, fragments that differ: long shared probe sequences.
            random_steps(&Store::new(Homes::<3>, usize::MAX), seed, 40);
            random_steps(&Store::new(Homes::<3>, 7), seed, 40);
            random_steps(&Store::new(OneHash, 5), seed, 12);
            random_steps(&Store::new(ahash::RandomState::new(), 30), seed, 200);
        }
    }
}
