//! The floor of a keyed store whose windows live inline in its table slots: a
//! check of a held key with every cost a real check pays and nothing else ([`InlineFloor`]),
//! and a new key's first check with its share of the table's growth ([`InlineInserts`]). Not
//! a store: keys are never evicted or reused, and a check whose bucket has moved on (a fill)
//! is not measured.
//!
//! A slot is one 64-byte, line-aligned block: the hash's low 32 bits beside snapshot 0, the
//! key, one word packing the count (40 bits) with the front bucket (24 bits), and snapshots
//! 1 to 10 (`N = 10`), two per word. A table of twice the keys (load 1/2), on huge pages
//! from 2 MiB up as the store's tables are. A check pins the store's epoch, reads the clock,
//! hashes the key (ahash), probes, reads the count and the oldest snapshot, judges Strict,
//! makes the decision's fields (allowed, remaining, reset after) and, if allowed, CASes the
//! count.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use slidegate::clock::{Clock, QuantaClock};

/// Buckets per window.
const N: u64 = 10;

/// One key's slot.
#[repr(C, align(64))]
struct Slot {
    /// The hash's low 32 bits with bit 0 set (0: empty), and snapshot 0 in the high half.
    tag: AtomicU64,
    key: AtomicU64,
    /// The count (40 bits) above the front bucket (24 bits).
    word: AtomicU64,
    /// Snapshots 1 to 10, two per word.
    snapshots: [AtomicU64; 5],
}

/// What a check decides, as a real decision reports it.
#[derive(Clone, Copy)]
pub struct Decided {
    pub allowed: bool,
    pub remaining: u64,
    pub reset_after: u64,
}

/// The table (see the module documentation).
pub struct InlineFloor {
    hasher: ahash::RandomState,
    table: Table,
    clock: QuantaClock,
    granularity: u64,
    limit: u64,
    /// The bucket a check without a clock reading judges at (`check::<_, false>`).
    fixed: u64,
}

impl InlineFloor {
    /// A table holding keys `0..keys` of `limit` per hour, each charged once.
    pub fn new(keys: u64, limit: u64) -> InlineFloor {
        InlineFloor::at_load(keys, limit, 2)
    }

    /// The same in a table of `load` times the keys' slots (at least 2), rounded up to a
    /// power of two: at load `1/load` or below.
    pub fn at_load(keys: u64, limit: u64, load: u64) -> InlineFloor {
        assert!(load >= 2);
        let capacity = (keys * load).next_power_of_two() as usize;
        let granularity = 3_600_000_000_000 / N;
        let clock = QuantaClock::new();
        let floor = InlineFloor {
            hasher: ahash::RandomState::new(),
            table: Table::new(capacity),
            fixed: clock.now().0 / granularity,
            clock,
            granularity,
            limit,
        };
        for key in 0..keys {
            let hash = floor.hasher.hash_one(key);
            floor
                .table
                .place(hash, key, (1 << 24) | (floor.fixed & 0xff_ffff));
        }
        floor
    }

    /// Snapshot `k mod (N + 1)` of `slot`.
    #[inline]
    fn snapshot(slot: &Slot, k: u64) -> u32 {
        match k % (N + 1) {
            0 => (slot.tag.load(Ordering::Acquire) >> 32) as u32,
            i => {
                let word = slot.snapshots[((i - 1) / 2) as usize].load(Ordering::Acquire);
                (word >> (32 * ((i - 1) % 2))) as u32
            }
        }
    }

    /// A check of `key`, with the epoch pin if `PIN` and quanta's clock if `CLOCK` (else the
    /// bucket the keys were placed in); `None` if the key is absent or its bucket moved on.
    #[inline]
    pub fn check<const PIN: bool, const CLOCK: bool>(&self, key: u64) -> Option<Decided> {
        let _guard = PIN.then(slidegate::__private::epoch::pin);
        let now = if CLOCK {
            self.clock.now().0
        } else {
            black_box(self.fixed * self.granularity)
        };
        let hash = self.hasher.hash_one(key);
        let slots = self.table.slots();
        let (want, mask) = (hash as u32 | 1, slots.len() - 1);
        let mut i = hash as usize & mask;
        let slot = loop {
            let slot = &slots[i];
            let tag = slot.tag.load(Ordering::Acquire) as u32;
            if tag == want && slot.key.load(Ordering::Relaxed) == key {
                break slot;
            }
            if tag == 0 {
                return None;
            }
            i = (i + 1) & mask;
        };
        let bucket = now / self.granularity;
        loop {
            let word = slot.word.load(Ordering::Acquire);
            let front = word & 0xff_ffff;
            if bucket & 0xff_ffff != front {
                return None;
            }
            let count = (word >> 24) as u32;
            let used = u64::from(count.wrapping_sub(Self::snapshot(slot, front + 1)));
            let reset_after = self.granularity - now % self.granularity;
            if used >= self.limit {
                return Some(Decided {
                    allowed: false,
                    remaining: 0,
                    reset_after,
                });
            }
            let charged = word + (1 << 24);
            if slot
                .word
                .compare_exchange(word, charged, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(Decided {
                    allowed: true,
                    remaining: self.limit - used - 1,
                    reset_after,
                });
            }
        }
    }
}

/// The floor of a new key's first check in an inline store: the writer lock, the pin, the
/// clock, ahash, a probe to the first empty slot, the slot written (hash, key, a count of 1
/// at the current bucket) and the decision, in a table that doubles when it would pass load
/// 1/2, each key's slot copied to its home in the new table. Not a store: the probe is made
/// once, under the lock (a store also probes once without it, in vain), the old table is
/// freed at once (a store retires it through the epoch) and there is no eviction sweep.
pub struct InlineInserts {
    hasher: ahash::RandomState,
    writer: std::sync::Mutex<Grown>,
    clock: QuantaClock,
    granularity: u64,
    limit: u64,
}

/// The table of [`InlineInserts`] and its number of keys.
struct Grown {
    table: Table,
    len: usize,
}

/// An owned, zeroed table of slots, on huge pages from 2 MiB up, freed on drop.
struct Table {
    slots: std::ptr::NonNull<Slot>,
    len: usize,
    layout: std::alloc::Layout,
}

impl Table {
    fn new(len: usize) -> Table {
        const HUGE: usize = 2 << 20;
        let size = len * 64;
        let align = if size >= HUGE { HUGE } else { 64 };
        let layout = std::alloc::Layout::from_size_align(size, align).expect("a valid layout");
        // SAFETY: a non-zero size (at least one slot); advised, then zeroed as the store's
        // tables are (every slot empty: atomics of 0). Zeroed by the allocator instead (a
        // large table then faults its pages in during the growth's copy), the new-key floor
        // took 380–488 ns against 193–268.
        let slots = unsafe {
            let base = std::alloc::alloc(layout);
            assert!(!base.is_null(), "out of memory");
            #[cfg(target_os = "linux")]
            if align == HUGE {
                libc::madvise(base.cast(), size, libc::MADV_HUGEPAGE);
            }
            base.write_bytes(0, size);
            std::ptr::NonNull::new_unchecked(base.cast::<Slot>())
        };
        Table { slots, len, layout }
    }

    fn slots(&self) -> &[Slot] {
        // SAFETY: `len` initialised (zeroed) slots, alive until `drop`.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.len) }
    }

    /// The first empty slot from the home of a key whose hash's low 32 bits are `hash`.
    fn empty_from(&self, hash: u32) -> &Slot {
        let slots = self.slots();
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        while slots[i].tag.load(Ordering::Relaxed) != 0 {
            i = (i + 1) & mask;
        }
        &slots[i]
    }

    /// Places `key`, whose hash is `hash`, with its count-and-front `word`, in the first
    /// empty slot from its home; the tag last, with Release, as a store publishes a slot.
    fn place(&self, hash: u64, key: u64, word: u64) {
        let slot = self.empty_from(hash as u32);
        slot.key.store(key, Ordering::Relaxed);
        slot.word.store(word, Ordering::Relaxed);
        slot.tag
            .store(u64::from(hash as u32 | 1), Ordering::Release);
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.slots.as_ptr().cast(), self.layout) }
    }
}

// SAFETY: a table is plain atomics behind an owned allocation.
unsafe impl Send for Table {}
// SAFETY: as above: shared access reads and writes the slots through atomics only.
unsafe impl Sync for Table {}

impl InlineInserts {
    /// An empty table of room for `keys` keys without growing (eight slots at least, the
    /// store's smallest table), for keys of `limit` per hour.
    pub fn new(keys: usize, limit: u64) -> InlineInserts {
        InlineInserts {
            hasher: ahash::RandomState::new(),
            writer: std::sync::Mutex::new(Grown {
                table: Table::new((keys * 2).next_power_of_two().max(8)),
                len: 0,
            }),
            clock: QuantaClock::new(),
            granularity: 3_600_000_000_000 / N,
            limit,
        }
    }

    /// The first check of `key`, which must be new.
    #[inline]
    pub fn check_new(&self, key: u64) -> Decided {
        let mut grown = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let _guard = slidegate::__private::epoch::pin();
        let now = self.clock.now().0;
        let hash = self.hasher.hash_one(key);
        if (grown.len + 1) * 2 > grown.table.len {
            grown.table = Self::grow(&grown.table);
        }
        grown.table.place(
            hash,
            key,
            (1 << 24) | ((now / self.granularity) & 0xff_ffff),
        );
        grown.len += 1;
        Decided {
            allowed: true,
            remaining: self.limit - 1,
            reset_after: self.granularity - now % self.granularity,
        }
    }

    /// `old`'s slots in a table twice its size, each at its home (from its hash's low bits).
    #[cold]
    fn grow(old: &Table) -> Table {
        let fresh = Table::new(old.len * 2);
        for slot in old.slots() {
            let tag = slot.tag.load(Ordering::Relaxed);
            if tag == 0 {
                continue;
            }
            let to: *const Slot = fresh.empty_from(tag as u32);
            // SAFETY: distinct slots of two live tables; a slot is plain atomics, copied
            // whole while no one else reads either table (the writer lock is held).
            unsafe { std::ptr::copy_nonoverlapping(slot, to.cast_mut(), 1) };
        }
        fresh
    }
}
