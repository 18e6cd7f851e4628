//! The collector's contract: a retired object is freed exactly once, never while a thread
//! that pinned before its retirement is still pinned, and not lost when its thread ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{FENCE_INTERVAL, Owned, pin, reclaim, unprotected};

/// Collections that passed the interval's test and were not `reclaim`'s (counted by
/// `Global::collect`, for `pins_fence_at_most_once_an_interval`).
pub(super) static PACED: AtomicUsize = AtomicUsize::new(0);

/// While set, every collection acts as if its `membarrier` had failed (read by
/// `Global::collect`, for `a_failing_fence_frees_nothing_and_loses_nothing`).
pub(super) static FENCES_FAIL: AtomicBool = AtomicBool::new(false);

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Retires a new `Counted` through a pin of the calling thread.
fn retire(drops: &Arc<AtomicUsize>) {
    let guard = pin();
    let object = Owned::new(Counted(Arc::clone(drops))).into_shared(&guard);
    // SAFETY: never linked anywhere, retired once.
    unsafe { guard.defer_destroy(object) };
}

/// Reclaims until `drops` reaches `want`, for at most 20 s: other tests pin threads of
/// this process too, and a collection cannot advance past a thread pinned elsewhere.
fn reclaim_until(drops: &AtomicUsize, want: usize) {
    let start = Instant::now();
    while drops.load(Ordering::SeqCst) < want && start.elapsed() < Duration::from_secs(20) {
        reclaim();
        thread::yield_now();
    }
}

#[test]
fn retired_objects_are_freed_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    for _ in 0..200 {
        retire(&drops);
    }
    reclaim_until(&drops, 200);
    assert_eq!(drops.load(Ordering::SeqCst), 200);
    for _ in 0..10 {
        reclaim();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 200, "freed twice");
}

#[test]
fn a_pinned_thread_holds_back_what_was_retired_after_its_pin() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let reader = thread::spawn(move || {
        let _guard = pin();
        pinned_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    pinned_rx.recv().unwrap();
    retire(&drops);
    for _ in 0..50 {
        reclaim();
    }
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "freed under a reader's pin"
    );
    release_tx.send(()).unwrap();
    reader.join().unwrap();
    reclaim_until(&drops, 1);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn nested_pins_unpin_with_the_outermost() {
    let outer = pin();
    let inner = pin();
    // SAFETY: this thread's own record, read on its own thread.
    let word = || unsafe { &*outer.local() }.epoch.load(Ordering::Relaxed);
    assert_eq!(word() & 1, 1);
    drop(inner);
    assert_eq!(word() & 1, 1, "unpinned while the outer guard lives");
    let local = outer.local();
    drop(outer);
    // SAFETY: records live as long as the process.
    assert_eq!(unsafe { &*local }.epoch.load(Ordering::Relaxed), 0);
}

#[test]
fn a_thread_that_ends_hands_over_what_it_retired() {
    let drops = Arc::new(AtomicUsize::new(0));
    let retirer = {
        let drops = Arc::clone(&drops);
        // Fewer than a bag: nothing is handed over before the thread ends.
        thread::spawn(move || (0..3).for_each(|_| retire(&drops)))
    };
    retirer.join().unwrap();
    reclaim_until(&drops, 3);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
}

#[test]
fn unprotected_frees_at_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    // SAFETY: the object is this test's alone.
    let guard = unsafe { unprotected() };
    let object = Owned::new(Counted(Arc::clone(&drops))).into_shared(guard);
    // SAFETY: never linked, retired once.
    unsafe { guard.defer_destroy(object) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn handed_over_objects_are_freed_by_other_threads_collections() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let guard = pin();
        let object = Owned::new(Counted(Arc::clone(&drops))).into_shared(&guard);
        // SAFETY: never linked anywhere, retired once.
        unsafe { guard.defer_destroy(object) };
        // Without this the object stays in this thread's bag, which no other thread's
        // collection reaches.
        guard.hand_over();
    }
    let collector = {
        let drops = Arc::clone(&drops);
        thread::spawn(move || reclaim_until(&drops, 1))
    };
    collector.join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failing_fence_frees_nothing_and_loses_nothing() {
    // Other tests' collections fail too while the flag is set; they retry until it is not.
    let drops = Arc::new(AtomicUsize::new(0));
    FENCES_FAIL.store(true, Ordering::SeqCst);
    retire(&drops);
    for _ in 0..20 {
        reclaim();
    }
    let freed_without_a_fence = drops.load(Ordering::SeqCst);
    FENCES_FAIL.store(false, Ordering::SeqCst);
    assert_eq!(freed_without_a_fence, 0, "freed without a fence");
    reclaim_until(&drops, 1);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "lost after a failed fence");
}

#[test]
fn pins_fence_at_most_once_an_interval() {
    // Garbage kept waiting (a retirement handed over every 1000 pins) makes every 128th pin
    // try a collection: 7,800 tries in the loop. The interval is the process's, so other
    // tests' pins count against the same bound.
    let drops = Arc::new(AtomicUsize::new(0));
    let before = PACED.load(Ordering::SeqCst);
    let start = Instant::now();
    for i in 0..1_000_000u32 {
        let guard = pin();
        if i % 1000 == 0 {
            let object = Owned::new(Counted(Arc::clone(&drops))).into_shared(&guard);
            // SAFETY: never linked anywhere, retired once.
            unsafe { guard.defer_destroy(object) };
            guard.hand_over();
        }
    }
    let elapsed = start.elapsed();
    let paced = PACED.load(Ordering::SeqCst) - before;
    let bound = elapsed.as_nanos() / FENCE_INTERVAL.as_nanos() + 1;
    assert!(paced >= 1, "no collection from pins in {elapsed:?}");
    assert!(
        paced as u128 <= bound,
        "{paced} fenced collections from pins in {elapsed:?}"
    );
}
