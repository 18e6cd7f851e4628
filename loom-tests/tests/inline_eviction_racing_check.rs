// The inline table: an idle eviction racing a check of the key it evicts.
//
// Proves: the eviction retires the key's ring from a reading whose window is empty before
// it makes the slot a tombstone, so a check racing it is either charged first (the
// eviction's compare-and-swap then fails: the key stays, with its unit) or fails its charge
// on the retired ring and is charged to a fresh window; either way the unit is counted
// exactly once, in the window that lookups find.
//
// Would fail if the eviction made the slot a tombstone without retiring its ring, or
// retired it whatever it held (a charge landing in between would be lost).
//
// The second model runs the same race through `retain_recent`, the sweep of every idle key,
// which evicts each slot as `evict_idle` does.
//
// Checked in scratch builds: with the eviction's retirement replaced by a peek that the
// window is empty, both models fail.
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

#[test]
fn an_idle_eviction_races_a_check_of_its_key() {
    model(|| {
        let table = Arc::new(LoomInline::new(2));
        assert!(table.check(0, at(0, 1), 1, 1));
        let check = {
            let table = table.clone();
            thread::spawn(move || table.check(0, at(3, 1), 1, 1))
        };
        let evicted = table.evict_idle(0, at(3, 0));
        assert!(check.join().unwrap());
        assert_eq!(table.sum(0, at(3, 2)), Some(1), "evicted: {evicted}");
        assert!(!table.check(0, at(3, 2), 1, 1));
    });
}

#[test]
fn a_sweep_of_idle_keys_races_a_check_of_one() {
    model(|| {
        let table = Arc::new(LoomInline::new(2));
        assert!(table.check(0, at(0, 1), 1, 1));
        assert!(table.check(1, at(0, 1), 1, 1));
        let check = {
            let table = table.clone();
            thread::spawn(move || table.check(0, at(3, 1), 1, 1))
        };
        let evicted = table.retain_recent(at(3, 0));
        assert!((1..=2).contains(&evicted), "key 1 is idle: {evicted}");
        assert!(check.join().unwrap());
        assert_eq!(table.sum(0, at(3, 2)), Some(1), "evicted: {evicted}");
        assert_eq!(table.sum(1, at(3, 2)), None, "key 1 was swept");
        assert!(!table.check(0, at(3, 2), 1, 1));
    });
}
