//! A keyed limiter's calls on a key it holds allocate nothing when the key is given in
//! borrowed form (`&str` for a `String` key): the key is made owned only when it is inserted.
//! Counted by a global allocator that counts the allocations of the calling thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Quota};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the allocator also runs while the thread's locals are torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches only a
// thread-local `Cell` with a const initialiser, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn calls_on_a_held_string_key_by_str_allocate_nothing() {
    let clock = ManualClock::new();
    let quota = Quota::new(100, Duration::from_secs(1)).expect("a valid quota");
    let limiter = KeyedLimiter::<String, _>::with_clock(quota, clock.clone());
    // The first check inserts: the key's `String` and its entry's memory (the first chunk of
    // the keyed pool).
    assert!(allocations(|| assert!(limiter.check("alice").is_allowed())) >= 2);
    let held = allocations(|| {
        for _ in 0..10 {
            assert!(limiter.check("alice").is_allowed());
            assert!(
                limiter
                    .check_n("alice", 2)
                    .expect("within the limit")
                    .is_allowed()
            );
            assert!(limiter.peek("alice").is_allowed());
            assert_eq!(limiter.refund("alice", 1), 1);
            assert_eq!(limiter.quota("alice").limit(), 100);
        }
        // A key the limiter does not hold is not inserted by a peek or a refund.
        assert_eq!(limiter.peek("bob").remaining(), 100);
        assert_eq!(limiter.refund("bob", 1), 0);
        clock.advance(Duration::from_millis(300));
        assert!(limiter.check("alice").is_allowed());
    });
    assert_eq!(held, 0, "a check of a held key by &str allocated");
    assert_eq!(limiter.len(), 1);
    // A new key is made owned when it is inserted (its entry comes from the keyed pool's
    // chunk, which the first insert took).
    assert!(allocations(|| assert!(limiter.check("bob").is_allowed())) >= 1);
    assert_eq!(limiter.len(), 2);
}
