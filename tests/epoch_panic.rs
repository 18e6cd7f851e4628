//! A drop that panics inside an epoch collection run from a pin (`src/sync/epoch.rs`): the
//! pinning thread is left unpinned, and reclamation goes on. In a binary of its own, so that
//! no other test's collection runs the panicking drop.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use slidegate::__private::epoch::{Owned, pin};
use slidegate::__private::reclaim;

/// Panics when dropped if `panics`, and counts its drops.
struct Object {
    panics: bool,
    drops: Arc<AtomicUsize>,
}

impl Drop for Object {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        assert!(!self.panics, "a drop that panics");
    }
}

/// Retires one object on a thread that then ends (handing its bag over, collecting nothing).
fn retire_on_a_thread(panics: bool, drops: &Arc<AtomicUsize>) {
    let drops = Arc::clone(drops);
    thread::spawn(move || {
        let guard = pin();
        let object = Owned::new(Object { panics, drops }).into_shared(&guard);
        // SAFETY: never linked, retired once.
        unsafe { guard.defer_destroy(object) };
    })
    .join()
    .expect("the retiring thread");
}

#[test]
fn a_drop_that_panics_in_a_pins_collection_leaves_the_thread_unpinned() {
    let drops = Arc::new(AtomicUsize::new(0));
    retire_on_a_thread(true, &drops);
    // Pin until a collection run by one of these pins frees the object and its drop panics.
    let start = Instant::now();
    let mut panicked = false;
    while !panicked && start.elapsed() < Duration::from_secs(20) {
        panicked = catch_unwind(AssertUnwindSafe(|| drop(pin()))).is_err();
    }
    assert!(panicked, "no collection ran the drop");
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    // Were this thread still pinned, no collection could advance past its epoch and the
    // next object would never be freed.
    let later = Arc::new(AtomicUsize::new(0));
    retire_on_a_thread(false, &later);
    let start = Instant::now();
    while later.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(20) {
        reclaim();
        thread::yield_now();
    }
    assert_eq!(later.load(Ordering::SeqCst), 1, "reclamation stopped");
}
