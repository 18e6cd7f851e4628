//! One key's entry in the store: its hash, its state's head, its key and its state's atomic
//! words, in one allocation from the store's pool ([`super::pool`]), made and freed
//! through crossbeam-epoch's atomic pointers and the store's epoch reclamation.

use core::{mem, ptr};
use std::alloc::{self, Layout};

use super::pool;
use crate::sync::epoch::Pointable;
use crate::sync::{AtomicU64, Liveness};
use crate::window::state::{Head, Shape, State};

/// The alignment of every entry: 8, so that a slot pointing to one has three tag bits for
/// the table (see `store.rs`). Sixteen would give a fourth, but round every entry's size up
/// to 16 bytes: the entry of a compact ring of ten buckets on a `u64` key is 104 bytes
/// (`benches/keyed_memory.rs`).
pub(crate) const ENTRY_ALIGN: usize = 8;

/// One key's entry: hash, state head, key, then the state's words inline, in one allocation
/// (see the `Pointable` impl): a check at a million keys misses on the table slot and then
/// on the entry, whose first lines hold the key and, for a small ring, its words too. With
/// the words in a boxed slice of their own it would miss a third time (`keyed_allowed` at a
/// million keys).
#[repr(C)]
pub(crate) struct Entry<K, W: ?Sized = [AtomicU64]> {
    /// The low 32 bits of the key's hash (all a table of up to 2³² slots homes by), and above
    /// them the number of words: a deref reads the entry's length with one shift rather than
    /// a match on its head (a check derefs every entry it probes).
    tag: u64,
    /// Checked by every use of the entry's state and ended by its drop: under loom, an entry
    /// freed while a reader can still reach it is reported. Zero-sized otherwise.
    live: Liveness,
    head: Head,
    pub(crate) key: K,
    words: W,
}

/// An entry's fields before its words: the same offsets as in `Entry<K>` (`repr(C)`).
type Header<K> = Entry<K, [AtomicU64; 0]>;

impl<K> Entry<K> {
    /// The low 32 bits of the key's hash.
    #[inline]
    pub(super) fn hash(&self) -> u32 {
        self.tag as u32
    }

    /// The key's state.
    #[inline]
    pub(crate) fn state(&self) -> State<'_> {
        self.live.check();
        self.head.packed(&self.words)
    }

    /// The state's words, for a state copied in before the entry is published.
    pub(super) fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// Whether the entry's state has `shape`.
    #[inline]
    pub(crate) fn fits(&self, shape: Shape) -> bool {
        self.state().fits(shape)
    }

    /// The layout of an entry with `len` words: the header, the words at their offset in the
    /// unsized struct, padded to the struct's alignment (so that the allocation holds the
    /// whole value a reference to it spans), at the address alignment of
    /// [`Pointable::ALIGN`]. That is the header's alignment wherever a `u64` is 8-aligned;
    /// where it is larger, the size is not padded to it (the pool places an entry by its
    /// size class, whatever it holds).
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

impl<K> Entry<K> {
    /// Drops the entry at `ptr` in place, leaving its memory to the caller, and returns the
    /// layout it was allocated with (see [`pool::free_run`] for entries freed together).
    ///
    /// # Safety
    /// `ptr` must come from [`Pointable::init`], be referenced by no one, and not be dropped
    /// again.
    pub(super) unsafe fn dispose(ptr: usize) -> Layout {
        // SAFETY: the caller's contract; the length is read before the entry is dropped.
        unsafe {
            let entry = Entry::<K>::fat(ptr);
            let layout = Entry::<K>::layout(((*entry).tag >> 32) as usize);
            (*entry).live.end();
            ptr::drop_in_place(entry);
            layout
        }
    }
}

/// Allocates entries with their words inline, for crossbeam-epoch's `Atomic` (which frees
/// them through `drop` below). The shape fixes the number of words, so each entry's length
/// is read back from its head.
impl<K> Pointable for Entry<K> {
    // At least 8: the low three bits of an entry's address carry its hash's fragment.
    const ALIGN: usize = if mem::align_of::<Header<K>>() > ENTRY_ALIGN {
        mem::align_of::<Header<K>>()
    } else {
        ENTRY_ALIGN
    };

    type Init = (u64, K, Shape);

    unsafe fn init((hash, key, shape): Self::Init) -> usize {
        let len = shape.words();
        let layout = Entry::<K>::layout(len);
        // `layout` has a non-zero size (the header is at least 16 bytes).
        let raw = pool::alloc(layout);
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
            ptr::addr_of_mut!((*entry).live).write(Liveness::new());
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
            let layout = Entry::<K>::dispose(ptr);
            pool::free(ptr as *mut u8, layout);
        }
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    const TEN_COMPACT: Shape = Shape::Ring {
        granularity: 1,
        buckets: 10,
        compact: true,
    };

    /// What `benches/keyed_memory.rs` measures at `N = 10`: a `u64` key's entry is 104
    /// bytes (hash-and-length word, 16-byte head, key, `front`, `goal`, `cum`, six words of
    /// snapshots), and the pool carves entries of it 104 bytes apart.
    #[test]
    fn a_u64_key_of_ten_compact_buckets_takes_104_bytes() {
        let layout = Entry::<u64>::layout(TEN_COMPACT.words());
        assert_eq!((layout.size(), layout.align()), (104, 8));
        #[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
        assert_eq!(pool::stride(layout), Some(104));
    }

    /// A 16-aligned key gives its entry a size that is a multiple of 16, so that the pool's
    /// class of that size keeps every entry 16-aligned.
    #[test]
    fn an_entry_of_a_16_aligned_key_keeps_its_alignment() {
        let layout = Entry::<u128>::layout(TEN_COMPACT.words());
        assert_eq!(layout.align(), 16);
        assert_eq!(layout.size() % 16, 0);
    }
}
