// Epoch reclamation (`src/sync/epoch.rs`) — a reader racing the unlink, retirement and
// collection of the object it loads.
//
// Proves the protocol itself, apart from the keyed store: one thread pins, loads a shared
// pointer and reads the object behind it; another swaps the pointer out, retires the old
// object (`defer_destroy`), and collects twice (`reclaim`: the first collection tags the
// bag and advances the epoch, the second advances again and frees). On every interleaving
// the object is freed exactly once, and never while the reader can still read it; every
// object the reader sees is whole. The object is a loom cell read by the reader and written
// by its drop, so loom reports a free that races a read.
//
// Would fail, and does in a scratch build of each: without the reader's fence after storing
// its epoch (the collection reads the reader as unpinned while the reader loads the old
// pointer); without the collection's fence before it reads the readers' epochs; if a
// collection advanced past a reader pinned at an older epoch; with a Relaxed unpin, or
// without the collection's Acquire fence after reading the epochs (the reader's read is not
// ordered before the free). Under loom both fences are
// full fences; on Linux the reader's is a compiler fence and the collection's is
// `membarrier`, which runs a full fence on every processor running the process's threads —
// the substitution loom cannot model (see the module's documentation).
#![cfg(slidegate_loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use loom_tests::model;
use slidegate::__private::epoch::{Atomic, Owned, Shared, pin};
use slidegate::__private::reclaim;

/// An object whose reads race its drop as loom sees them.
struct Object {
    value: UnsafeCell<u64>,
    drops: Arc<AtomicUsize>,
}

impl Object {
    fn new(value: u64, drops: &Arc<AtomicUsize>) -> Object {
        Object {
            value: UnsafeCell::new(value),
            drops: Arc::clone(drops),
        }
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        self.value.with_mut(|value| {
            // SAFETY: `&mut self`.
            unsafe { *value = 0 };
        });
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_reader_never_sees_its_object_freed() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Atomic::new(Object::new(7, &drops)));

        let reader = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let guard = pin();
                let object = shared.load(Ordering::Acquire, &guard);
                // SAFETY: loaded under the pin; freed only through the epoch.
                if let Some(object) = unsafe { object.as_ref() } {
                    // SAFETY: written only by the drop, which loom orders after this read.
                    let value = object.value.with(|value| unsafe { *value });
                    assert_eq!(value, 7, "a freed object read");
                }
            })
        };

        let guard = pin();
        let old = shared.swap(Shared::null(), Ordering::AcqRel, &guard);
        // SAFETY: unlinked just now, retired once.
        unsafe { guard.defer_destroy(old) };
        drop(guard);
        reclaim();

        reader.join().expect("reader panicked");
        reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "freed other than once");
    });
}

/// Reads the object `shared` holds, replaces it with a new one holding `value`, reads the
/// first object again (which the other thread may have swapped out, retired and collected
/// meanwhile), retires the one it swapped out, unpins and collects: what each thread of
/// `two_writers_each_retiring_while_the_other_reads` does.
fn read_replace_collect(shared: &Atomic<Object>, value: u64, drops: &Arc<AtomicUsize>) {
    let guard = pin();
    let read = || {
        let current = shared.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under the pin; freed only through the epoch; never null here.
        let object = unsafe { current.deref() };
        move || {
            // SAFETY: written only by the drop, which loom orders after this read.
            let seen = object.value.with(|value| unsafe { *value });
            assert_ne!(seen, 0, "a freed object read");
        }
    };
    let check_first = read();
    check_first();
    let old = shared.swap(
        Owned::new(Object::new(value, drops)),
        Ordering::AcqRel,
        &guard,
    );
    check_first();
    // SAFETY: unlinked by the swap, retired once.
    unsafe { guard.defer_destroy(old) };
    check_first();
    drop(guard);
    reclaim();
}

/// Two threads each reading the object the other may retire: collections racing each other
/// (one takes the lock, the other returns), a hand-over racing a collection's take, each
/// thread's reads checked before and after its own swap and retirement. Fails with each of
/// the five breaks above.
#[test]
fn two_writers_each_retiring_while_the_other_reads() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Atomic::new(Object::new(1, &drops)));
        let other = {
            let (shared, drops) = (Arc::clone(&shared), Arc::clone(&drops));
            thread::spawn(move || read_replace_collect(&shared, 2, &drops))
        };
        read_replace_collect(&shared, 3, &drops);
        other.join().expect("other panicked");
        reclaim();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "a retired object not freed once"
        );
        // The last object retired like the others, with no thread pinned.
        let guard = pin();
        let last = shared.swap(Shared::null(), Ordering::AcqRel, &guard);
        // SAFETY: unlinked just now, retired once.
        unsafe { guard.defer_destroy(last) };
        drop(guard);
        reclaim();
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    });
}
