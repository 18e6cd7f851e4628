//! Epoch-based reclamation for the keyed store: crossbeam-epoch's algorithm, with the
//! reader's processor fence moved to the reclaimer.
//!
//! # Why not crossbeam-epoch's own pin
//! A check pins once. crossbeam-epoch's pin stores the thread's epoch and then executes a
//! full fence (a locked instruction), so that the check's loads cannot be ordered before the
//! store, and keeps counts of guards and pins in its record. Here the pin stores the epoch
//! and executes only a *compiler* fence; a nested guard is told by the record's epoch word
//! being set already, and pins are counted only while garbage waits. A pin and unpin cost
//! about half of crossbeam-epoch's, and a keyed check is faster for it (`keyed_allowed/1000`;
//! `docs/notes/benchmarks-measurements.md`, "The store's own epoch reclamation"). The
//! processor fence the reader skipped is supplied, when it matters, by the reclaimer: Linux's
//! `membarrier` with `MEMBARRIER_CMD_PRIVATE_EXPEDITED` runs a full fence on every processor
//! running one of the process's threads before it returns — the asymmetric fences of
//! liburcu, folly and the `seize` crate. Reclamation is rare (a bag of evicted entries or a
//! retired table) and each costs one system call; checks are many and each saves its fence.
//!
//! Where `membarrier` is not available (another system, an old kernel, a sandbox that
//! refuses it, valgrind) both sides use a full fence, which is crossbeam-epoch's algorithm
//! exactly. Which one is used is decided once, before the first pin.
//!
//! # The protocol
//! - A thread's record ([`Local`]) holds its epoch word: `(epoch << 1) | 1` while pinned, 0
//!   while not. Pinning loads the global epoch, stores it, and fences (the light fence: a
//!   compiler fence when `membarrier` is in use). Unpinning stores 0 with Release.
//! - Retired objects go into the thread's bag; a full bag is handed to the global queue as
//!   *unfenced*. Nothing is read at that moment: the bag's epoch is the global epoch read by
//!   the next collection *after* its heavy fence, which orders every unlink of the bag's
//!   objects before that read (crossbeam-epoch reads it after a full fence when it seals the
//!   bag; here one heavy fence serves every bag handed over since the last collection).
//! - A collection (one at a time, under `collector`) executes the heavy fence, reads the
//!   global epoch `g`, tags the unfenced bags with `g`, and advances the epoch to `g + 1` if
//!   every pinned record is pinned at `g` (the heavy fence makes each reader's epoch store
//!   visible to it, or else orders the reader's later loads after everything before the
//!   fence). It then runs the bags tagged `t` with `t + 2 <= ` the epoch: no reader pinned
//!   when they were unlinked can still be pinned two advances later.
//! - A full bag is handed over and nothing more: the thread may hold a lock of its own (the
//!   store's writer), under which no fence should wait and no other object's drop run. A
//!   partial bag is handed over when its thread ends, and on [`Guard::hand_over`] (the store
//!   does so after retiring a table). Collections are tried on a thread's every
//!   [`PINS_PER_COLLECT`]th outermost pin made while some bag waits (every outermost pin
//!   reads one shared word, `waiting`, which only hand-overs and collections write), at most
//!   one per [`FENCE_INTERVAL`] (a `membarrier` interrupts every processor running the
//!   process), and on [`reclaim`], which the interval does not hold back.
//! - A drop that panics in a collection leaks the rest of what that collection would have
//!   freed; the pin it ran from has its guard already and unpins on the way out. A
//!   `membarrier` that fails after the process registered for it (not expected; a sandbox
//!   installed later could) makes that collection tag and free nothing: memory then waits,
//!   nothing is freed early.
//!
//! # Checked by
//! loom: under `--cfg slidegate_loom` this module runs on loom's atomics, lock, thread-locals
//! and statics, with full fences on both sides (loom has no asymmetric fence), so the keyed
//! store's models check its pins, hand-overs and collections with every entry's liveness
//! (`loom-tests/`). The asymmetric variant replaces a pair of full fences by a compiler fence
//! and a `membarrier`, whose guarantee is that pair's: that substitution is the part loom
//! cannot check. Under shuttle, which runs every thread on one OS thread, each shuttle thread
//! has a record of its own (shuttle's thread-locals) but the module runs on std's atomics:
//! its steps are never interleaved inside a pin or a collection.

use core::cell::{Cell, UnsafeCell};
use core::mem;
use std::collections::VecDeque;

use crossbeam_utils::CachePadded;

pub(crate) use crossbeam_epoch::{Atomic, Owned, Pointable, Pointer, Shared};

// The crate's primitives (std's, or loom's under loom), but std's under shuttle: see the
// module's documentation.
#[cfg(not(slidegate_shuttle))]
use super::{AtomicUsize, Mutex, Ordering, lock};
#[cfg(slidegate_loom)]
use loom::sync::atomic::fence;
#[cfg(not(slidegate_loom))]
use std::sync::atomic::fence;
#[cfg(slidegate_shuttle)]
use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

/// `sync::lock` for std's lock, which this module keeps under shuttle.
#[cfg(slidegate_shuttle)]
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Objects a thread retires before it hands its bag to the collector.
const BAG: usize = 64;

/// A thread tries a collection at every this many of its outermost pins made while garbage
/// waits (it may be held back by [`FENCE_INTERVAL`] or find another thread collecting).
const PINS_PER_COLLECT: usize = 128;

/// The least time between two fenced collections, but for [`reclaim`]'s. A `membarrier`
/// with another thread of the process running interrupts that thread's processor, and costs
/// microseconds (far more than with none); at most a thousand a second bound its cost to a
/// small share of a processor however fast objects are retired.
#[cfg(not(slidegate_loom))]
const FENCE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// A retired object: its pointer's bits and the function that frees it.
struct Deferred {
    data: usize,
    free: unsafe fn(usize),
}

/// Frees the object `data` points to.
///
/// # Safety
/// `data` comes from `Shared::<T>::into_usize` of an object owned by nobody else.
unsafe fn free<T: ?Sized + Pointable>(data: usize) {
    // SAFETY: the caller's contract.
    drop(unsafe { Owned::<T>::from_usize(data) });
}

type Bag = Vec<Deferred>;

/// Runs every deferred free of `bag`.
fn run(bag: Bag) {
    for deferred in bag {
        // SAFETY: a bag holds each retired object once, and is run only when no reader can
        // reach its objects.
        unsafe { (deferred.free)(deferred.data) };
    }
}

/// A thread's record. Records are never freed while the process runs: a thread that ends
/// gives its record back, and the next thread to register takes it. One line of its own.
#[repr(align(128))]
struct Local {
    /// `(epoch << 1) | 1` while pinned, 0 while not. Written by the owner, read by collections.
    epoch: AtomicUsize,
    /// Whether collections fence with `membarrier`, so that a pin needs only a compiler
    /// fence: decided once for the process, copied here so that a pin reads no other line.
    expedited: bool,
    /// Pins while some garbage waited, to space the owner's collections.
    pins: Cell<usize>,
    /// Objects the owner retired, not yet handed over.
    bag: UnsafeCell<Bag>,
}

impl Local {
    /// Pins the record (not pinned yet).
    #[inline]
    fn pin(&self, global: &Global) {
        // Relaxed: a stale epoch only makes this pin hold back an advance (the collection
        // reads it as pinned at an older epoch), never unsafe.
        let epoch = global.epoch.load(Ordering::Relaxed);
        // Relaxed: ordered before the check's loads by the fence below, and made visible
        // to a collection by its heavy fence.
        self.epoch.store((epoch << 1) | 1, Ordering::Relaxed);
        barrier::light(self.expedited);
    }

    /// After an outermost pin while garbage waits: every [`PINS_PER_COLLECT`]th one tries a
    /// collection.
    #[cold]
    fn waiting(&self, global: &Global) {
        let pins = self.pins.get().wrapping_add(1);
        self.pins.set(pins);
        if pins % PINS_PER_COLLECT == 0 {
            global.collect(false);
        }
    }

    #[inline]
    fn unpin(&self) {
        // Release: every load made while pinned happens before a collection that reads
        // this (with its Acquire fence), so before the frees that follow it.
        self.epoch.store(0, Ordering::Release);
    }

    /// Whether an enclosing guard of the owner has pinned it.
    #[inline]
    fn is_pinned(&self) -> bool {
        // Relaxed: the owner's own last store.
        self.epoch.load(Ordering::Relaxed) != 0
    }

    fn defer(&self, global: &Global, deferred: Deferred) {
        // SAFETY: only the owner touches the bag, and no reference to it outlives this call.
        let bag = unsafe { &mut *self.bag.get() };
        if bag.capacity() == 0 {
            bag.reserve_exact(BAG);
        }
        bag.push(deferred);
        if bag.len() >= BAG {
            // Handed over only: the caller may hold a lock of its own (the store's writer),
            // under which no `membarrier` should wait and no other object's drop should run.
            // The owner's later pins collect it.
            global.hand_over(mem::take(bag));
        }
    }

    /// Hands the bag over, if it holds anything.
    fn flush(&self, global: &Global) {
        // SAFETY: as in `defer`.
        let bag = unsafe { &mut *self.bag.get() };
        if !bag.is_empty() {
            global.hand_over(mem::take(bag));
        }
    }
}

/// The collector's own state.
struct Collector {
    /// Bags with the epoch each was tagged with, oldest first.
    tagged: VecDeque<(usize, Bag)>,
    /// When a collection from a pin last passed the interval's test (whether or not its
    /// fence then succeeded); [`reclaim`]'s neither wait for the interval nor restart it.
    #[cfg(not(slidegate_loom))]
    fenced: Option<std::time::Instant>,
}

struct Global {
    /// The global epoch. Written only by collections, under `collector`.
    epoch: CachePadded<AtomicUsize>,
    /// Bags handed over and not yet run (a hint for pins; exact under `collector`).
    waiting: CachePadded<AtomicUsize>,
    /// Bags handed over since the last collection's heavy fence.
    unfenced: Mutex<Vec<Bag>>,
    collector: Mutex<Collector>,
    /// Every record, and those free to take.
    records: Mutex<Records>,
}

struct Records {
    all: Vec<*const Local>,
    free: Vec<*const Local>,
}

// SAFETY: the records' pointers are to `Local`s owned by the registry, each used by one
// thread at a time (handed over under the `records` lock); the rest is atomics and locks.
unsafe impl Send for Records {}

/// The body of [`Global::new`], written once for its `const` and its loom version.
macro_rules! new_global {
    () => {
        Global {
            epoch: CachePadded::new(AtomicUsize::new(0)),
            waiting: CachePadded::new(AtomicUsize::new(0)),
            unfenced: Mutex::new(Vec::new()),
            collector: Mutex::new(Collector {
                tagged: VecDeque::new(),
                #[cfg(not(slidegate_loom))]
                fenced: None,
            }),
            records: Mutex::new(Records {
                all: Vec::new(),
                free: Vec::new(),
            }),
        }
    };
}

impl Global {
    /// An empty global; `const` on std, for a `static` (loom's types have no `const` new).
    #[cfg(not(slidegate_loom))]
    const fn new() -> Global {
        new_global!()
    }

    #[cfg(slidegate_loom)]
    fn new() -> Global {
        new_global!()
    }

    /// A record for the calling thread.
    fn register(&self) -> *const Local {
        let mut records = lock(&self.records);
        if let Some(local) = records.free.pop() {
            return local;
        }
        let local = Box::into_raw(Box::new(Local {
            epoch: AtomicUsize::new(0),
            expedited: barrier::expedited(),
            pins: Cell::new(0),
            bag: UnsafeCell::new(Vec::new()),
        }));
        records.all.push(local);
        local
    }

    /// Gives back a record whose thread is done with it: its bag handed over, unpinned.
    fn release(&self, local: *const Local) {
        // SAFETY: records live as long as `self`.
        unsafe { &*local }.flush(self);
        lock(&self.records).free.push(local);
    }

    fn hand_over(&self, bag: Bag) {
        let mut unfenced = lock(&self.unfenced);
        unfenced.push(bag);
        // Relaxed: a hint for pins. Under the lock, so that a collection that takes the bag
        // counts it off only after it was counted on.
        self.waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// Tags the bags handed over so far, advances the epoch if every pinned thread is pinned
    /// at the current one, and runs the bags no reader can reach any more. Returns at once if
    /// another thread is collecting, or, unless `now`, if a collection fenced less than
    /// [`FENCE_INTERVAL`] ago.
    fn collect(&self, now: bool) {
        let mut collector = match self.collector.try_lock() {
            Ok(collector) => collector,
            Err(std::sync::TryLockError::WouldBlock) => return,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        // loom's executions have no time: every collection there fences.
        #[cfg(not(slidegate_loom))]
        if !now {
            let at = std::time::Instant::now();
            if collector
                .fenced
                .is_some_and(|last| at - last < FENCE_INTERVAL)
            {
                return;
            }
            collector.fenced = Some(at);
            // Counted for the unit test of the interval.
            #[cfg(all(test, not(slidegate_shuttle)))]
            tests::PACED.fetch_add(1, Ordering::SeqCst);
        }
        #[cfg(slidegate_loom)]
        let _ = now;
        let fresh = mem::take(&mut *lock(&self.unfenced));
        let fenced = barrier::heavy();
        // The unit tests' stand-in for a `membarrier` that fails after registration.
        #[cfg(all(test, not(any(slidegate_loom, slidegate_shuttle))))]
        let fenced = fenced && !tests::FENCES_FAIL.load(Ordering::SeqCst);
        if !fenced {
            // No fence, no tag: the bags wait for a collection whose fence succeeds.
            lock(&self.unfenced).extend(fresh);
            return;
        }
        // Relaxed: only collections write it, one at a time (under `collector`).
        let epoch = self.epoch.load(Ordering::Relaxed);
        collector
            .tagged
            .extend(fresh.into_iter().map(|bag| (epoch, bag)));
        let pinned_elsewhere = lock(&self.records).all.iter().any(|&local| {
            // SAFETY: records live as long as `self`.
            // Relaxed: ordered by the heavy fence before it and the Acquire fence after it.
            let word = unsafe { &*local }.epoch.load(Ordering::Relaxed);
            word & 1 == 1 && word >> 1 != epoch
        });
        let epoch = if pinned_elsewhere {
            epoch
        } else {
            // Acquire: pairs with the Release of every unpin read above, so their loads
            // happen before the frees below.
            fence(Ordering::Acquire);
            // Release: a pin that reads the new epoch reads it after this collection's
            // fences; Relaxed would do for safety, Release costs nothing here.
            self.epoch.store(epoch + 1, Ordering::Release);
            epoch + 1
        };
        let mut ready = Vec::new();
        while let Some(&(tag, _)) = collector.tagged.front() {
            if tag + 2 > epoch {
                break;
            }
            if let Some((_, bag)) = collector.tagged.pop_front() {
                ready.push(bag);
            }
        }
        // Relaxed: a hint for pins.
        self.waiting.fetch_sub(ready.len(), Ordering::Relaxed);
        drop(collector);
        // Outside the lock: a drop may retire more, and a collection it starts must not
        // find the lock held by its own thread. A drop that panics leaks the rest of the
        // bags (safe); the caller's guard, made before it collected, still unpins.
        ready.into_iter().for_each(run);
    }
}

impl Drop for Global {
    /// Runs only under loom, at the end of each execution (a static's drop); no thread is
    /// pinned then.
    fn drop(&mut self) {
        let unfenced = mem::take(&mut *lock(&self.unfenced));
        unfenced.into_iter().for_each(run);
        let tagged = mem::take(&mut lock(&self.collector).tagged);
        tagged.into_iter().for_each(|(_, bag)| run(bag));
        let records = mem::take(&mut lock(&self.records).all);
        for local in records {
            // SAFETY: allocated by `register`; no thread uses a record any more.
            let local = unsafe { Box::from_raw(local.cast_mut()) };
            run(local.bag.into_inner());
        }
    }
}

#[cfg(not(slidegate_loom))]
static GLOBAL: Global = Global::new();

// Under loom the global is a static dropped at the end of each execution, before the main
// thread's locals: each handle keeps a reference of its own, for its drop.
#[cfg(slidegate_loom)]
loom::lazy_static! {
    static ref GLOBAL: std::sync::Arc<Global> = std::sync::Arc::new(Global::new());
}

/// The calling thread's record, and how a pin finds it.
///
/// On std the record's address sits in a thread-local without a destructor (`LOCAL`), so a
/// pin reads it with one load and no check of the thread-local's state; a second
/// thread-local, `HANDLE`, exists only for its destructor, which gives the record back when
/// the thread ends. Under loom and shuttle both are the framework's thread-locals (a shuttle
/// thread is not an OS thread), and one handle holds the record.
#[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
mod current {
    use core::cell::Cell;
    use core::ptr;

    use super::{GLOBAL, Local};

    std::thread_local! {
        static LOCAL: Cell<*const Local> = const { Cell::new(ptr::null()) };
        static HANDLE: Handle = const { Handle };
    }

    /// Gives the thread's record back when the thread ends.
    struct Handle;

    impl Drop for Handle {
        fn drop(&mut self) {
            let local = LOCAL.with(|local| local.replace(ptr::null()));
            // SAFETY: records live as long as the process.
            if !local.is_null() && !unsafe { &*local }.is_pinned() {
                GLOBAL.release(local);
            }
            // A record still pinned (a guard alive while the thread's thread-locals are
            // destroyed) is never given back: leaked, which is safe.
        }
    }

    /// The calling thread's record, and whether it is the caller's alone (the thread's
    /// handle is gone, so nothing would give a record back: the guard does).
    #[inline]
    pub(super) fn record() -> (*const Local, bool) {
        let local = LOCAL.with(Cell::get);
        if local.is_null() {
            register()
        } else {
            (local, false)
        }
    }

    #[cold]
    fn register() -> (*const Local, bool) {
        let local = GLOBAL.register();
        if HANDLE.try_with(|_| ()).is_ok() {
            LOCAL.with(|cell| cell.set(local));
            (local, false)
        } else {
            (local, true)
        }
    }

    /// The calling thread's record, or null if it has none.
    pub(super) fn existing() -> *const Local {
        LOCAL.with(Cell::get)
    }
}

#[cfg(any(slidegate_loom, slidegate_shuttle))]
mod current {
    use core::cell::Cell;
    use core::ptr;

    use super::{GLOBAL, Global, Local};

    /// The thread's record, taken at its first pin and given back when the thread ends.
    struct Handle {
        local: Cell<*const Local>,
        /// Under loom the global is a static dropped at the end of each execution, before
        /// the main thread's locals: a handle keeps a reference of its own, for its drop.
        #[cfg(slidegate_loom)]
        global: std::sync::Arc<Global>,
    }

    impl Drop for Handle {
        fn drop(&mut self) {
            #[cfg(slidegate_loom)]
            let global: &Global = &self.global;
            #[cfg(not(slidegate_loom))]
            let global: &Global = &GLOBAL;
            let local = self.local.get();
            // SAFETY: records live as long as the global.
            if !local.is_null() && !unsafe { &*local }.is_pinned() {
                global.release(local);
            }
        }
    }

    #[cfg(slidegate_loom)]
    loom::thread_local! {
        static HANDLE: Handle = Handle {
            local: Cell::new(ptr::null()),
            global: std::sync::Arc::clone(&GLOBAL),
        };
    }

    #[cfg(slidegate_shuttle)]
    shuttle::thread_local! {
        static HANDLE: Handle = Handle { local: Cell::new(ptr::null()) };
    }

    /// See the std version.
    pub(super) fn record() -> (*const Local, bool) {
        HANDLE
            .try_with(|handle| {
                let mut local = handle.local.get();
                if local.is_null() {
                    local = GLOBAL.register();
                    handle.local.set(local);
                }
                (local, false)
            })
            .unwrap_or_else(|_| (GLOBAL.register(), true))
    }

    /// See the std version.
    pub(super) fn existing() -> *const Local {
        HANDLE
            .try_with(|handle| handle.local.get())
            .unwrap_or(ptr::null())
    }
}

/// A guard's bits beside its record's address (records are aligned to 128 bytes): whether
/// it pinned the record (an enclosing guard of the thread had not), and whether it gives the
/// record back when it is dropped.
const OUTER: usize = 1;
const TRANSIENT: usize = 2;

/// A pinned epoch: while it lives, nothing retired after it was made is freed. Guards of one
/// thread nest: the outermost pins and unpins, and they are dropped innermost first (each
/// lives in a scope of the call that made it).
///
/// It dereferences to crossbeam-epoch's unprotected guard, so that crossbeam-epoch's
/// [`Atomic`] pointers can be loaded with it (their loads take a guard only to bound the
/// lifetime of what they return); the methods that retire or free are this type's own.
pub struct Guard {
    /// The record's address with [`OUTER`] and [`TRANSIENT`]; 0 for [`unprotected`].
    tagged: usize,
    /// Not `Send`: a guard is its thread's.
    _thread: core::marker::PhantomData<*const Local>,
}

/// Pins the calling thread's epoch.
#[inline]
pub fn pin() -> Guard {
    let global: &Global = &GLOBAL;
    let (local, transient) = current::record();
    // SAFETY: records live as long as the global; this thread owns it.
    let record = unsafe { &*local };
    let mut tagged = local as usize;
    if transient {
        tagged |= TRANSIENT;
    }
    let fresh = !record.is_pinned();
    if fresh {
        record.pin(global);
        tagged |= OUTER;
    }
    let guard = Guard {
        tagged,
        _thread: core::marker::PhantomData,
    };
    // Relaxed: a hint; garbage missed now is collected at a later look. Read on every
    // outermost pin (a line that only hand-overs and collections write). After the guard
    // is made, so that a drop that panics in the collection unpins on its way out.
    if fresh && global.waiting.load(Ordering::Relaxed) != 0 {
        record.waiting(global);
    }
    guard
}

/// Hands the calling thread's retired objects to the collector and collects twice: every
/// object retired before the call is freed if no thread is pinned meanwhile and no other
/// thread is collecting at the same moment (the first collection tags and advances, the
/// second advances again and runs them; a collection that finds another running returns).
/// Frees nothing that a pinned thread, the caller included, might still reach. For tests,
/// which count frees and call it until the count is reached.
pub(crate) fn reclaim() {
    let global: &Global = &GLOBAL;
    let local = current::existing();
    if !local.is_null() {
        // SAFETY: records live as long as the global; this thread owns the record.
        unsafe { &*local }.flush(global);
    }
    for _ in 0..2 {
        global.collect(true);
    }
}

/// A guard that pins nothing, for code that owns what it loads (a drop with `&mut self`).
/// Objects retired through it are freed at once.
///
/// # Safety
/// No other thread may free what is loaded through it while it is used.
#[inline]
pub(crate) unsafe fn unprotected() -> &'static Guard {
    struct Unprotected(Guard);
    // SAFETY: its null record is never dereferenced.
    unsafe impl Sync for Unprotected {}
    static UNPROTECTED: Unprotected = Unprotected(Guard {
        tagged: 0,
        _thread: core::marker::PhantomData,
    });
    &UNPROTECTED.0
}

impl Guard {
    #[inline]
    fn local(&self) -> *const Local {
        (self.tagged & !(OUTER | TRANSIENT)) as *const Local
    }

    /// Frees `ptr`'s object once no thread pinned now can still reach it.
    ///
    /// # Safety
    /// The object is unlinked (no thread that pins after this call can reach it), is retired
    /// once, and may be dropped on any thread (as if it were `Send`).
    pub unsafe fn defer_destroy<T: ?Sized + Pointable>(&self, ptr: Shared<'_, T>) {
        let deferred = Deferred {
            data: ptr.into_usize(),
            free: free::<T>,
        };
        let local = self.local();
        if local.is_null() {
            // SAFETY: unprotected: the caller owns the object.
            unsafe { (deferred.free)(deferred.data) };
            return;
        }
        // SAFETY: records live as long as the global; this thread owns the record.
        unsafe { &*local }.defer(&GLOBAL, deferred);
    }

    /// Hands what this thread retired so far to the collector now, rather than when its bag
    /// fills: for a large object (a retired table), which a bag that never fills would
    /// otherwise keep until the thread ends. Collects nothing, so it may be called under a
    /// lock.
    pub(crate) fn hand_over(&self) {
        let local = self.local();
        if !local.is_null() {
            // SAFETY: records live as long as the global; this thread owns the record.
            unsafe { &*local }.flush(&GLOBAL);
        }
    }
}

impl core::ops::Deref for Guard {
    type Target = crossbeam_epoch::Guard;

    #[inline]
    fn deref(&self) -> &crossbeam_epoch::Guard {
        // SAFETY: crossbeam-epoch's unprotected guard is used only to load crossbeam-epoch's
        // atomic pointers, with a lifetime bound to this guard, which pins the epoch that
        // keeps what they point to alive. Retiring goes through this type's own methods.
        unsafe { crossbeam_epoch::unprotected() }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        if self.tagged & OUTER == 0 {
            return;
        }
        let local = self.local();
        // SAFETY: records live as long as the global; this thread owns the record.
        unsafe { &*local }.unpin();
        if self.tagged & TRANSIENT != 0 {
            GLOBAL.release(local);
        }
    }
}

/// The two fences: `membarrier` and a compiler fence where Linux offers the expedited
/// command, full fences on both sides elsewhere.
#[cfg(all(target_os = "linux", not(any(slidegate_loom, slidegate_valgrind))))]
mod barrier {
    use std::sync::LazyLock;
    use std::sync::atomic::{Ordering, compiler_fence, fence};

    const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    fn membarrier(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: `membarrier(cmd, flags = 0, cpu_id = 0)` reads and writes no memory of the
        // caller; an unknown command or a refusing kernel returns -1.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_uint,
                0 as libc::c_int,
            )
        }
    }

    /// Decided once, before the first record is made: the query lists the expedited
    /// command and the process's registration for it succeeds.
    static EXPEDITED: LazyLock<bool> = LazyLock::new(|| {
        let commands = membarrier(MEMBARRIER_CMD_QUERY);
        commands >= 0
            && commands & libc::c_long::from(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    });

    pub(super) fn expedited() -> bool {
        *EXPEDITED
    }

    /// The reader's fence.
    #[inline]
    pub(super) fn light(expedited: bool) {
        if expedited {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The collector's fence, and whether it happened (a failing `membarrier` after a
    /// successful registration is not expected; the collection then frees nothing).
    pub(super) fn heavy() -> bool {
        if *EXPEDITED {
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0
        } else {
            fence(Ordering::SeqCst);
            true
        }
    }
}

/// Full fences on both sides: crossbeam-epoch's algorithm.
#[cfg(not(all(target_os = "linux", not(any(slidegate_loom, slidegate_valgrind)))))]
mod barrier {
    use super::{Ordering, fence};

    pub(super) fn expedited() -> bool {
        false
    }

    #[inline]
    pub(super) fn light(_expedited: bool) {
        fence(Ordering::SeqCst);
    }

    pub(super) fn heavy() -> bool {
        fence(Ordering::SeqCst);
        true
    }
}

#[cfg(all(test, not(any(slidegate_loom, slidegate_shuttle))))]
mod tests;
