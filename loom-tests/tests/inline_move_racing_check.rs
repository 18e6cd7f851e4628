// The keyed limiter's two stores: a `check_all` moving a key out of the inline table while
// a check charges it there.
//
// Proves: a key whose quota fits a line ring lives in the inline table; a `check_all` that
// reserves on it moves it to the store (its slot's ring retired under the table's lock, its
// state copied into a store entry published after the copy). A check racing the move either
// charges the slot before the retirement, and the copy carries the unit, or fails on the
// retired ring and finds the key's store entry under the lock. On every interleaving,
// exactly one of the two requests is admitted (the key held one unit of a limit of two),
// the key has one window holding both units, and a later check is denied.
//
// Would fail if the move made the slot a tombstone without retiring its ring: a check that
// found the slot before the move charges the old slot after the copy, a unit no window
// holds (both requests admitted, and a third after them).
//
// Checked in scratch builds: with the move not retiring the ring (`Placing::retire`), the
// model fails.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{FixedHasher, model};
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Limit, Quota, check_all};

/// A limiter of 2 a second in ten buckets of 100 ms (a line ring's shape, so the key goes
/// inline) whose key 1 holds one unit.
fn holding_one() -> Arc<KeyedLimiter<u32, ManualClock, FixedHasher>> {
    let quota = Quota::new(2, Duration::from_secs(1)).expect("valid quota");
    let keyed = Arc::new(
        KeyedLimiter::<u32>::builder(quota)
            .clock(ManualClock::new())
            .hasher(FixedHasher::default())
            .build(),
    );
    assert!(keyed.check(&1).is_allowed());
    keyed
}

#[test]
fn a_move_racing_a_check() {
    model(|| {
        let keyed = holding_one();
        let checker = {
            let keyed = Arc::clone(&keyed);
            thread::spawn(move || keyed.check(&1).is_allowed())
        };
        let key = keyed.key(&1);
        let all = check_all(&[(&key as &dyn Limit, 1)]).expect("valid cost");
        let checked = checker.join().expect("checker panicked");
        assert!(
            all.is_allowed() != checked,
            "check_all {all:?}, check {checked}"
        );
        assert_eq!(keyed.len(), 1, "one window");
        assert_eq!(keyed.peek(&1).remaining(), 0);
        assert!(!keyed.check(&1).is_allowed(), "a unit was lost");
    });
}

// A peek racing the move: the key is never read as absent from both stores (a fresh window,
// its whole limit left). It reads the slot before the move, the retired slot (and then the
// key where the move put it, under the lock) or the store's entry after it.
//
// Would fail if the slot became a tombstone before the key's store entry was published: a
// lock-free lookup in between finds the key in neither store.
//
// Checked in scratch builds: with the slot buried before the store's insert, the model fails.
#[test]
fn a_move_racing_a_peek() {
    model(|| {
        let keyed = holding_one();
        let peeker = {
            let keyed = Arc::clone(&keyed);
            thread::spawn(move || keyed.peek(&1).remaining())
        };
        let key = keyed.key(&1);
        assert!(
            check_all(&[(&key as &dyn Limit, 1)])
                .expect("valid cost")
                .is_allowed()
        );
        let left = peeker.join().expect("peeker panicked");
        assert!(left <= 1, "the peek read a fresh window ({left} left)");
        assert_eq!(keyed.peek(&1).remaining(), 0);
    });
}
