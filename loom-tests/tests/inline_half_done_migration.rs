// The inline table: lookups across a migration that is half done.
//
// Proves: while a migration has moved only some of the old table's slots, a check finds
// its key wherever it is: in the old table (not moved yet), in the next table (moved, or
// inserted since the migration started, behind an empty old slot), or, racing the
// insert that starts the migration and places the key, under the writer's lock. A key
// keeps one window throughout: of two checks of a new key with room for one unit, exactly
// one is admitted, and every key's units are in its window once the migration ends.
//
// Would fail if a lookup that meets an empty slot in the old table stopped there instead
// of going on to the next table (the writer's own lookup would then miss the key inserted
// there, and place a second window for it).
//
// Checked in scratch builds: with `InlineTable::find` following the next table only from a
// moved slot, the model fails (both checks of key 4 are admitted).
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

#[test]
fn checks_across_a_half_done_migration() {
    model(|| {
        // Keys hash to themselves: keys 0 ..= 3 take slots 0 ..= 3 of an 8-slot table (load
        // 1/2). Key 4's insert starts a migration to 16 slots and moves the first chunk of
        // three old slots (keys 0, 1, 2) in its writer call; key 3 stays behind, and key 4
        // goes to the next table.
        let table = Arc::new(LoomInline::new(1));
        for key in 0..4 {
            assert!(table.check(key, at(0, 1), 1, 1));
        }
        let other = {
            let table = table.clone();
            thread::spawn(move || {
                let new = table.check(4, at(0, 2), 1, 1);
                assert!(!table.check(3, at(0, 2), 1, 1), "key 3's window is full");
                new
            })
        };
        let ours = table.check(4, at(0, 2), 1, 1);
        let theirs = other.join().unwrap();
        assert!(
            ours ^ theirs,
            "key 4 has one window: ours {ours}, theirs {theirs}"
        );
        // Two more writer calls move the rest; every key holds its one unit.
        assert!(table.check(5, at(0, 3), 1, 1));
        assert!(table.check(6, at(0, 3), 1, 1));
        for key in 0..7 {
            assert_eq!(table.sum(key, at(0, 4)), Some(1), "key {key}");
        }
    });
}
