//! The memory keyed entries live in: size classes carved from large chunks, on huge pages
//! where the system allows, instead of one `malloc` per key.
//!
//! # Why
//! A check of a held key loads the table's slot, then the key's entry, then a snapshot: at a
//! million keys each load misses the cache, and with 4 KiB pages each also misses the TLB,
//! whose page walk (two-dimensional under a hypervisor) is a dependent load of its own.
//! Entries spread one per `malloc` over some 150 MB of 4 KiB pages; carved from 2 MiB chunks
//! advised to the kernel as huge pages (`MADV_HUGEPAGE`, honoured when transparent huge pages
//! are `madvise` or `always`), the same entries need one TLB entry per 2 MiB. A pooled entry
//! also costs its size exactly, where `malloc` adds a header and rounds up.
//!
//! # How
//! One process-wide pool, shared by every keyed limiter: a size class per 8 bytes up to
//! [`MAX_POOLED`], each a free list (threaded through the free entries themselves) and a bump
//! region, behind its own mutex, and in front of them, per thread, a list and a range of each
//! class ([`Local`]), so that most allocations and frees take no lock, as `malloc`'s
//! per-thread caches do: a thread takes [`REFILL`] entries at once and gives its list back
//! once it holds [`STASH`]. Only inserts and the reclamation of evicted entries use the
//! pool, never a check of a held key. A class takes small chunks first ([`SMALL_CHUNK`], no
//! advice, so that a process with a few small limiters holds little) and huge-page chunks
//! ([`HUGE_CHUNK`], aligned to it) once it has taken [`SMALL_TOTAL`] bytes.
//!
//! Chunks are never returned to the system: an evicted entry's memory goes back to its class
//! for the next key of that size, as a `malloc` arena keeps what it has grown to. Larger
//! entries (an exact log's head, rings of many buckets) and every entry under the loom and
//! shuttle models use the global allocator; so does every entry of a build with
//! `--cfg slidegate_valgrind` (`.ci/valgrind`), so that memcheck sees each entry as an
//! allocation of its own: an entry read after it was freed, or never freed, is an error
//! there, where inside a chunk it would be neither.

use std::alloc::{self, Layout};

/// The granularity of a size class. Its entries are carved at multiples of its size from
/// chunks aligned to their own size, so each is aligned to the largest power of two dividing
/// that size: at least 8, and 16 for a class of a multiple of 16 (the size of every entry
/// whose key is 16-aligned).
const CLASS: usize = 8;

/// The largest entry pooled: a ring of 60 buckets on a `u64` key fits.
const MAX_POOLED: usize = 576;

/// The chunk a class takes while it is small.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
const SMALL_CHUNK: usize = 64 << 10;

/// What a class takes in small chunks before it takes huge-page ones.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
const SMALL_TOTAL: usize = 4 << 20;

/// A chunk on huge pages: the size and alignment of an x86-64 or aarch64 (4 KiB granule)
/// huge page.
const HUGE_CHUNK: usize = 2 << 20;

/// The number of size classes.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
const CLASSES: usize = MAX_POOLED / CLASS;

/// Free entries a thread keeps per class before it gives them all back to the class.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
const STASH: usize = 128;

/// Entries a thread takes from its class at once when it has none.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
const REFILL: usize = 32;

/// One size class, shared by every thread.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
struct Class {
    /// The first free entry (0: none); each free entry holds the address of the next.
    free: usize,
    /// The bump region of the newest chunk, `next ..= end`.
    next: usize,
    end: usize,
    /// Bytes of chunks taken so far.
    taken: usize,
    /// Runs of free entries, `start .. end`, given back together ([`free_run`]): handed out
    /// in address order like a fresh chunk, with no free list to walk.
    runs: Vec<(usize, usize)>,
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
static SHARED: [std::sync::Mutex<Class>; CLASSES] = [const {
    std::sync::Mutex::new(Class {
        free: 0,
        next: 0,
        end: 0,
        taken: 0,
        runs: Vec::new(),
    })
}; CLASSES];

/// What one thread keeps of each class, so that most allocations and frees take no lock (as
/// `malloc`'s per-thread caches do): a free list with its tail and length, and a bump range.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
struct Local {
    free: [Cell<usize>; CLASSES],
    tail: [Cell<usize>; CLASSES],
    len: [Cell<usize>; CLASSES],
    next: [Cell<usize>; CLASSES],
    end: [Cell<usize>; CLASSES],
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
thread_local! {
    static LOCAL: Local = const { Local::new() };
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
use core::cell::Cell;

/// The class of `layout`, if it is pooled.
#[inline]
fn class(layout: Layout) -> Option<usize> {
    let c = layout.size().max(1).div_ceil(CLASS) - 1;
    let pooled = cfg!(not(any(
        slidegate_loom,
        slidegate_shuttle,
        slidegate_valgrind
    ))) && layout.size() <= MAX_POOLED
        // The class's entries are aligned to every power of two that divides its size.
        && ((c + 1) * CLASS) % layout.align() == 0;
    pooled.then_some(c)
}

/// The next free entry after `entry`.
///
/// # Safety
/// `entry` is on a free list: its first word holds the next one's address.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
unsafe fn next_of(entry: usize) -> usize {
    // SAFETY: the caller's contract; free memory is the pool's alone.
    unsafe { *(entry as *const usize) }
}

/// Links `entry` (free, at least a word, aligned) in front of `next`.
///
/// # Safety
/// `entry` is free memory of the pool that no one else uses.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
unsafe fn link(entry: usize, next: usize) {
    // SAFETY: the caller's contract.
    unsafe { *(entry as *mut usize) = next };
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
impl Local {
    /// Empty lists and ranges.
    const fn new() -> Local {
        Local {
            free: [const { Cell::new(0) }; CLASSES],
            tail: [const { Cell::new(0) }; CLASSES],
            len: [const { Cell::new(0) }; CLASSES],
            next: [const { Cell::new(0) }; CLASSES],
            end: [const { Cell::new(0) }; CLASSES],
        }
    }

    /// An entry of class `c` (`size` bytes), from this thread's list or range, refilled from
    /// the class when both are empty; 0 if the system has no memory left.
    fn take(&self, c: usize, size: usize) -> usize {
        let head = self.free[c].get();
        if head != 0 {
            // SAFETY: `head` is on this thread's free list.
            self.free[c].set(unsafe { next_of(head) });
            self.len[c].set(self.len[c].get() - 1);
            return head;
        }
        if self.end[c].get() - self.next[c].get() < size && !self.refill(c, size) {
            return 0;
        }
        if self.free[c].get() != 0 {
            return self.take(c, size);
        }
        let entry = self.next[c].get();
        self.next[c].set(entry + size);
        entry
    }

    /// Takes a range of up to [`REFILL`] entries of class `c` from a run given back, else up
    /// to as many free entries, else a range from its bump region; `false` if the system has
    /// no memory left.
    #[cold]
    fn refill(&self, c: usize, size: usize) -> bool {
        let mut class = lock(c);
        if let Some((start, end)) = class.runs.pop() {
            let range = (REFILL * size).min(end - start);
            if start + range < end {
                class.runs.push((start + range, end));
            }
            self.next[c].set(start);
            self.end[c].set(start + range);
            return true;
        }
        if class.free != 0 {
            let first = class.free;
            let (mut last, mut len) = (first, 1);
            // SAFETY: the class's list holds free entries only, under its lock.
            while len < REFILL && unsafe { next_of(last) } != 0 {
                // SAFETY: as above.
                last = unsafe { next_of(last) };
                len += 1;
            }
            // SAFETY: as above.
            class.free = unsafe { next_of(last) };
            // SAFETY: `last` is now this thread's; the list ends there.
            unsafe { link(last, 0) };
            self.free[c].set(first);
            self.tail[c].set(last);
            self.len[c].set(len);
            return true;
        }
        if class.end - class.next < size {
            let chunk = if class.taken < SMALL_TOTAL {
                SMALL_CHUNK
            } else {
                HUGE_CHUNK
            };
            let Some(base) = take_chunk(chunk) else {
                return false;
            };
            (class.next, class.end) = (base, base + chunk);
            class.taken += chunk;
        }
        let range = (REFILL * size).min((class.end - class.next) / size * size);
        self.next[c].set(class.next);
        self.end[c].set(class.next + range);
        class.next += range;
        true
    }

    /// Keeps `entry` of class `c` on this thread's list, giving the list back to the class
    /// once it holds [`STASH`].
    fn give(&self, c: usize, entry: usize) {
        let head = self.free[c].get();
        // SAFETY: `entry` was just given back by its last user.
        unsafe { link(entry, head) };
        if head == 0 {
            self.tail[c].set(entry);
        }
        self.free[c].set(entry);
        self.len[c].set(self.len[c].get() + 1);
        if self.len[c].get() >= STASH {
            self.give_back(c);
        }
    }

    /// Gives this thread's free list of class `c` back to the class.
    fn give_back(&self, c: usize) {
        let head = self.free[c].get();
        if head == 0 {
            return;
        }
        let mut class = lock(c);
        // SAFETY: the tail is the last entry of this thread's list.
        unsafe { link(self.tail[c].get(), class.free) };
        class.free = head;
        self.free[c].set(0);
        self.len[c].set(0);
    }
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
impl Drop for Local {
    /// A thread that ends gives its entries back, the rest of its ranges as free entries.
    fn drop(&mut self) {
        for c in 0..CLASSES {
            let size = (c + 1) * CLASS;
            let (mut next, end) = (self.next[c].get(), self.end[c].get());
            while end - next >= size {
                self.give(c, next);
                next += size;
            }
            self.next[c].set(next);
            self.give_back(c);
        }
    }
}

/// Allocates memory for `layout` (non-zero size); null if the system has none left.
#[inline]
pub(crate) fn alloc(layout: Layout) -> *mut u8 {
    #[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
    if let Some(c) = class(layout) {
        let size = (c + 1) * CLASS;
        let entry = LOCAL
            .try_with(|local| local.take(c, size))
            // This thread's pool is gone (its locals are being torn down): take one entry
            // from the class itself.
            .unwrap_or_else(|_| {
                let local = Local::new();
                let entry = local.take(c, size);
                drop(local);
                entry
            });
        return entry as *mut u8;
    }
    // SAFETY: the caller's layout has a non-zero size.
    unsafe { alloc::alloc(layout) }
}

/// Returns memory `alloc` gave for `layout`.
///
/// # Safety
/// `ptr` must come from [`alloc()`] with the same `layout`, and not be used again.
#[inline]
pub(crate) unsafe fn free(ptr: *mut u8, layout: Layout) {
    #[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
    if let Some(c) = class(layout) {
        let entry = ptr as usize;
        if LOCAL.try_with(|local| local.give(c, entry)).is_err() {
            // This thread's pool is gone: give the entry to the class itself.
            let mut class = lock(c);
            // SAFETY: the caller gives the memory back; it now links the class's list.
            unsafe { link(entry, class.free) };
            class.free = entry;
        }
        return;
    }
    // SAFETY: the caller's contract: from `alloc::alloc` with `layout`.
    unsafe { alloc::dealloc(ptr, layout) }
}

/// How far apart [`alloc()`] places entries of `layout` carved one after another: its class's
/// size (`layout.size()` rounded up to 8 bytes), `None` if the layout is not pooled.
pub(crate) fn stride(layout: Layout) -> Option<usize> {
    class(layout).map(|c| (c + 1) * CLASS)
}

/// Returns `count` entries of `layout` at `start`, `start + stride`, … (see [`stride`];
/// one entry if the layout is not pooled) together, as [`free`] returns one: to be handed
/// out again in address order.
///
/// # Safety
/// Each must come from [`alloc()`] with `layout`, and not be used again.
pub(crate) unsafe fn free_run(start: *mut u8, count: usize, layout: Layout) {
    #[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
    if let Some(c) = class(layout) {
        let (start, size) = (start as usize, (c + 1) * CLASS);
        lock(c).runs.push((start, start + count * size));
        return;
    }
    debug_assert_eq!(count, 1, "a run of entries that are not pooled");
    // SAFETY: the caller's contract.
    unsafe { free(start, layout) };
}

#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
fn lock(class: usize) -> std::sync::MutexGuard<'static, Class> {
    // Nothing panics under the lock; a poisoned class is still consistent.
    SHARED[class]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A new chunk of `size` bytes, aligned to its size, advised as huge pages if it is one.
#[cfg(not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind)))]
fn take_chunk(size: usize) -> Option<usize> {
    let layout = Layout::from_size_align(size, size).ok()?;
    // SAFETY: a non-zero size.
    let base = unsafe { alloc::alloc(layout) };
    if base.is_null() {
        return None;
    }
    #[cfg(target_os = "linux")]
    if size == HUGE_CHUNK {
        // SAFETY: the range is this fresh allocation, page-aligned; the advice changes how
        // the kernel backs it, never its contents. Refused (no transparent huge pages), it
        // is ordinary memory.
        unsafe { libc::madvise(base.cast(), size, libc::MADV_HUGEPAGE) };
    }
    Some(base as usize)
}

/// An array of `T` that, from [`HUGE_CHUNK`] bytes up, is aligned to it and advised as huge
/// pages: a store's table of slots, so that a probe at a million keys walks one TLB entry per
/// 2 MiB rather than per 4 KiB, as its entries do.
pub(crate) struct Array<T> {
    ptr: core::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: an `Array<T>` owns its elements as a `Box<[T]>` would.
unsafe impl<T: Send> Send for Array<T> {}
// SAFETY: as above: shared access hands out `&T` only.
unsafe impl<T: Sync> Sync for Array<T> {}

impl<T> Array<T> {
    /// `len` (at least 1) elements, each made by `init`.
    pub(crate) fn new(len: usize, init: impl Fn() -> T) -> Array<T> {
        let layout = Self::layout(len);
        // SAFETY: a non-zero size (`T` is a slot of atomics, `len` at least 1).
        let raw = unsafe { alloc::alloc(layout) }.cast::<T>();
        let Some(ptr) = core::ptr::NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        #[cfg(all(target_os = "linux", not(any(slidegate_loom, slidegate_shuttle))))]
        if layout.align() == HUGE_CHUNK {
            // SAFETY: as in `take_chunk`: this fresh allocation, aligned to a huge page.
            unsafe { libc::madvise(raw.cast(), layout.size(), libc::MADV_HUGEPAGE) };
        }
        for i in 0..len {
            // SAFETY: within the allocation, each element written once before any read.
            unsafe { raw.add(i).write(init()) };
        }
        Array { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        let array = match Layout::array::<T>(len) {
            Ok(layout) => layout,
            Err(_) => panic!("a table of {len} slots overflows the address space"),
        };
        if cfg!(any(slidegate_loom, slidegate_shuttle)) || array.size() < HUGE_CHUNK {
            return array;
        }
        array.align_to(HUGE_CHUNK).unwrap_or(array)
    }
}

impl<T> core::ops::Deref for Array<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements, owned by `self`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Array<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialised and dropped once, then the allocation made in
        // `new` with the same layout is freed.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len));
        }
    }
}

#[cfg(all(test, not(any(slidegate_loom, slidegate_shuttle, slidegate_valgrind))))]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_is_handed_out_again_and_live_memory_never_twice() {
        // 9 to 16 bytes: no entry of the tests running beside this one is that small (an
        // entry's header alone is 24 bytes, with a key of no size and no words).
        let layout = Layout::from_size_align(12, 4).unwrap();
        let held: Vec<usize> = (0..10_000).map(|_| alloc(layout) as usize).collect();
        let mut sorted = held.clone();
        sorted.sort_unstable();
        for pair in sorted.windows(2) {
            assert!(pair[1] - pair[0] >= 12, "two live entries overlap");
        }
        assert!(held.iter().all(|&p| p != 0 && p % CLASS == 0));
        for &p in &held[..100] {
            // SAFETY: from `alloc` with `layout`, not used again.
            unsafe { free(p as *mut u8, layout) };
        }
        let again: Vec<usize> = (0..100).map(|_| alloc(layout) as usize).collect();
        let mut freed = held[..100].to_vec();
        freed.sort_unstable();
        let mut reused = again.clone();
        reused.sort_unstable();
        assert_eq!(reused, freed, "the class hands out what was freed first");
        for &p in held[100..].iter().chain(&again) {
            // SAFETY: as above.
            unsafe { free(p as *mut u8, layout) };
        }
    }

    /// Serialises the tests of class 0 (at most 8 bytes: no entry is that small).
    fn class_0() -> std::sync::MutexGuard<'static, ()> {
        static CLASS_0: std::sync::Mutex<()> = std::sync::Mutex::new(());
        CLASS_0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    fn a_run_given_back_is_handed_out_in_address_order() {
        let _class = class_0();
        let layout = Layout::from_size_align(8, 8).unwrap();
        assert_eq!(stride(layout), Some(8));
        // On a thread of its own, so that no list of this thread's is in the way: the entries
        // it is handed, the first of them given back as a run, the rest one by one.
        let (start, count) = std::thread::spawn(move || {
            let mut held: Vec<usize> = (0..REFILL).map(|_| alloc(layout) as usize).collect();
            held.sort_unstable();
            let count = held
                .iter()
                .enumerate()
                .take_while(|&(i, &p)| p == held[0] + 8 * i)
                .count();
            // SAFETY: `count` entries from `alloc`, 8 apart; the rest one by one; none used
            // again.
            unsafe {
                free_run(held[0] as *mut u8, count, layout);
                for &p in &held[count..] {
                    free(p as *mut u8, layout);
                }
            }
            (held[0], count)
        })
        .join()
        .unwrap();
        let again: Vec<usize> = (0..count).map(|_| alloc(layout) as usize).collect();
        let expected: Vec<usize> = (0..count).map(|i| start + 8 * i).collect();
        assert_eq!(again, expected);
        for &p in &again {
            // SAFETY: from `alloc` with `layout`.
            unsafe { free(p as *mut u8, layout) };
        }
    }

    #[test]
    fn a_thread_that_ends_gives_its_entries_back() {
        let _class = class_0();
        let layout = Layout::from_size_align(8, 8).unwrap();
        let theirs = std::thread::spawn(move || {
            let entry = alloc(layout) as usize;
            // SAFETY: from `alloc` with `layout`, not used again.
            unsafe { free(entry as *mut u8, layout) };
            entry
        })
        .join()
        .unwrap();
        // The thread took `REFILL` entries, `theirs` among them, and gave them all back as it
        // ended: the next refill takes them.
        let mut ours: Vec<usize> = (0..REFILL).map(|_| alloc(layout) as usize).collect();
        assert!(ours.contains(&theirs));
        ours.sort_unstable();
        ours.dedup();
        assert_eq!(ours.len(), REFILL);
        for &p in &ours {
            // SAFETY: from `alloc` with `layout`.
            unsafe { free(p as *mut u8, layout) };
        }
    }

    #[test]
    fn a_large_array_is_aligned_to_a_huge_page_and_holds_its_elements() {
        let len = HUGE_CHUNK / 8 * 2;
        let array = Array::new(len, || core::sync::atomic::AtomicUsize::new(7));
        assert_eq!(array.as_ptr() as usize % HUGE_CHUNK, 0);
        assert_eq!(array.len(), len);
        assert!(
            array
                .iter()
                .all(|a| a.load(core::sync::atomic::Ordering::Relaxed) == 7)
        );
        let small = Array::new(3, || 1u64);
        assert_eq!(&*small, &[1, 1, 1]);
    }

    #[test]
    fn large_or_overaligned_entries_use_the_global_allocator() {
        assert_eq!(
            class(Layout::from_size_align(MAX_POOLED + 1, 16).unwrap()),
            None
        );
        assert_eq!(class(Layout::from_size_align(24, 16).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(104, 8).unwrap()), Some(12));
        assert_eq!(class(Layout::from_size_align(160, 16).unwrap()), Some(19));
        let aligned = Layout::from_size_align(48, 16).unwrap();
        let held: Vec<usize> = (0..100).map(|_| alloc(aligned) as usize).collect();
        assert!(held.iter().all(|&p| p != 0 && p % 16 == 0));
        for &p in &held {
            // SAFETY: from `alloc` with `aligned`, not used again.
            unsafe { free(p as *mut u8, aligned) };
        }
        let layout = Layout::from_size_align(4096, 16).unwrap();
        let p = alloc(layout);
        assert!(!p.is_null());
        // SAFETY: from `alloc` with `layout`.
        unsafe { free(p, layout) };
    }
}
