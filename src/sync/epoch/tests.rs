//! The collector's contract: a retired object is freed exactly once, never while a thread
//! that pinned before its retirement is still pinned, and not lost when its thread ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{Owned, pin, reclaim, unprotected};

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
