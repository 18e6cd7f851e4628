//! The one place that names atomics, loom and epoch reclamation.
//!
//! Everything else imports its atomic types, locks, cells and epoch reclamation from here,
//! so the same code runs on `std` and, when built with `RUSTFLAGS="--cfg slidegate_loom"`,
//! on [loom]'s model-checked primitives (the wiring tokio's `src/loom` and crossbeam's
//! `crossbeam_loom` use). The cfg is crate-specific so that a user's own `--cfg loom` never
//! changes slidegate.
//!
//! With `RUSTFLAGS="--cfg slidegate_shuttle"` the atomics, the lock and the back-off are
//! [shuttle]'s instead, whose random and PCT schedulers run many threads' interleavings at
//! random (`shuttle-tests/`). Epoch reclamation gives each shuttle thread a record of its own
//! but runs on std's atomics there: shuttle runs its threads one at a time on one OS thread,
//! so they never interleave inside a pin or a collection (reclamation races are loom's to
//! check).
//!
//! Memory reclamation is [`epoch`]: crossbeam-epoch's algorithm and atomic pointers, with
//! the reader's processor fence moved to the reclaimer. Under loom it runs on loom's
//! primitives, and crossbeam-epoch (whose `Atomic` pointers it uses) is built with its
//! `loom` feature and `--cfg crossbeam_loom` (both set by `.ci/test`), so pins, deferred
//! frees and atomic pointers are model-checked too.
//!
//! [loom]: https://docs.rs/loom
//! [shuttle]: https://docs.rs/shuttle

#[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
pub(crate) use std::sync::Arc;
#[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(slidegate_shuttle)]
pub(crate) use shuttle::sync::Arc;
#[cfg(slidegate_shuttle)]
pub(crate) use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(slidegate_shuttle)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};

#[cfg(slidegate_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(slidegate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(slidegate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

pub(crate) mod epoch;

/// The time-stamp counter behind `QuantaClock`: quanta's clock, except under loom, where
/// quanta cannot be built (it needs crossbeam-utils' `AtomicCell`, which `--cfg crossbeam_loom`
/// removes) and a std `Instant` with the same three methods stands in. loom models read a
/// `ManualClock`, so nothing they check depends on it.
#[cfg(not(slidegate_loom))]
pub(crate) type Tsc = quanta::Clock;

/// See the `std` version.
#[cfg(slidegate_loom)]
#[derive(Clone, Debug)]
pub(crate) struct Tsc(std::time::Instant);

#[cfg(slidegate_loom)]
impl Tsc {
    pub(crate) fn new() -> Tsc {
        Tsc(std::time::Instant::now())
    }

    pub(crate) fn raw(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn delta_as_nanos(&self, start: u64, end: u64) -> u64 {
        end.saturating_sub(start)
    }
}

/// A use-after-free detector for memory freed by hand (a keyed entry): every use of the
/// object calls [`Liveness::check`] and its drop calls [`Liveness::end`]. Under loom it is a
/// loom cell, read by each check and written by the end, so loom reports an object freed
/// while a reader can still reach it (a use after free reads memory loom does not track,
/// and goes unseen unless the address is reused). On `std` it is nothing: zero-sized, and
/// its calls compile to nothing.
pub(crate) struct Liveness {
    #[cfg(slidegate_loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl Liveness {
    #[inline]
    pub(crate) fn new() -> Liveness {
        Liveness {
            #[cfg(slidegate_loom)]
            cell: loom::cell::UnsafeCell::new(()),
        }
    }

    /// A use of the object: under loom, a read that must not race its [`Liveness::end`].
    #[inline]
    pub(crate) fn check(&self) {
        #[cfg(slidegate_loom)]
        self.cell.with(|_| ());
    }

    /// The object's end, just before it is freed.
    #[inline]
    pub(crate) fn end(&mut self) {
        #[cfg(slidegate_loom)]
        self.cell.with_mut(|_| ());
    }
}

/// Locks `mutex`. A panic while it was held poisons it; the structures slidegate guards stay
/// consistent through a panic (every change is published with one store), so the poison is
/// ignored rather than propagated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Backs off after a lost compare-and-swap.
///
/// On `std` this is crossbeam's exponential spin; under loom and shuttle it yields, so the
/// scheduler runs the thread that won instead of a spinning one.
pub(crate) struct Backoff {
    #[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Self {
        Backoff {
            #[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    #[inline]
    pub(crate) fn spin(&self) {
        #[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
        self.inner.spin();
        #[cfg(slidegate_loom)]
        loom::thread::yield_now();
        #[cfg(slidegate_shuttle)]
        shuttle::thread::yield_now();
    }

    /// Backs off while waiting for another thread to finish something: spins at first, then
    /// yields the processor (crossbeam's `snooze`), so a writer on the same core can run.
    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(not(any(slidegate_loom, slidegate_shuttle)))]
        self.inner.snooze();
        #[cfg(slidegate_loom)]
        loom::thread::yield_now();
        #[cfg(slidegate_shuttle)]
        shuttle::thread::yield_now();
    }
}

/// Starts loading the cache line at address `addr` without waiting for it: a hint that never
/// faults, whatever the address, and changes nothing else. A no-op off x86-64 and under loom.
#[inline]
pub(crate) fn prefetch(addr: usize) {
    #[cfg(all(target_arch = "x86_64", not(slidegate_loom)))]
    // SAFETY: `prefetcht0` needs SSE, which is in the x86-64 baseline (every x86-64 processor
    // has it); a prefetch reads nothing into the program, writes nothing, and never faults,
    // even on an address that is not mapped.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(all(target_arch = "x86_64", not(slidegate_loom))))]
    let _ = addr;
}

/// A value made only of `u64` fields: no padding, so every byte of it belongs to some word.
///
/// # Safety
/// The implementing type's size is a multiple of 8, it is 8-aligned, and each of its 8-byte
/// words is one of its `u64` fields (none is padding or part of a field of another type).
pub(crate) unsafe trait Words: Copy {}

/// A copy of `*value` made one word at a time, with volatile 8-byte loads that no later pass
/// merges into wider ones. For a value just stored a field at a time and then copied where
/// a check returns it: copied with 16-byte loads, each over two of those stores, no store can
/// forward its data to the load, which waits for both to reach the cache (a
/// store-forwarding stall; `docs/notes/benchmarks-measurements.md`, "Store-forwarding stalls").
#[inline(always)]
pub(crate) fn copy_by_words<T: Words>(value: &T) -> T {
    let mut copy = core::mem::MaybeUninit::<T>::uninit();
    let (from, to) = (
        (value as *const T).cast::<u64>(),
        copy.as_mut_ptr().cast::<u64>(),
    );
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: `T: Words`, so word `i` of `*value` is an initialised, aligned `u64` field,
        // and word `i` of `copy` lies inside it.
        unsafe { to.add(i).write(from.add(i).read_volatile()) };
    }
    // SAFETY: every word of `copy`, hence every byte (`T: Words`: no padding), was written
    // with the same bytes as `*value`, a valid `T`.
    unsafe { copy.assume_init() }
}

#[cfg(test)]
mod tests {
    use crate::decision::Decision;

    /// The word-at-a-time copy copies every word: a decision whose five fields all differ
    /// comes back equal (a copy that stopped a word short, or read one twice, would not).
    #[test]
    fn a_decision_copied_by_words_is_the_same_decision() {
        let decision = Decision::denied(5, 4, 3, 2);
        assert_eq!(super::copy_by_words(&decision), decision);
        let allowed = Decision::allowed(9, 8, 7);
        assert_eq!(super::copy_by_words(&allowed), allowed);
    }
}
