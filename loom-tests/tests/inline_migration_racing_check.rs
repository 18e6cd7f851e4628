// The inline table: a migration racing a check of a key it moves.
//
// Proves: a check racing the migration that moves its key's slot (freeze the ring, copy the
// slot into the next table, mark the old slot moved) loses no admission and counts none
// twice: its charge lands in the old slot before the freeze, and the copy carries it, or
// fails on the frozen ring and is judged again on the copy, which a lookup under the
// writer's lock finds. Every key's window holds its units afterwards.
//
// Would fail if the slot were copied without freezing its ring first (a charge landing
// between the copy and the mark is counted in a window no lookup reaches again).
//
// Checked in scratch builds: without the freeze in `InlineTable::move_slot`, the model
// fails. With the old slot marked moved before its copy is placed, it passes, as it
// should: a lookup that misses the key in both tables takes the writer's lock, which the
// migration holds until the copy is placed.
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

#[test]
fn a_migration_moves_a_key_under_its_checks() {
    model(|| {
        // Two keys fill the first table (4 slots) to load 1/2; the third key's insert moves
        // the table to 8 slots, key 0 with it, in one writer call.
        let table = Arc::new(LoomInline::new(2));
        assert!(table.check(0, at(0, 1), 5, 1));
        assert!(table.check(1, at(0, 1), 5, 1));
        let checks = {
            let table = table.clone();
            thread::spawn(move || table.check(0, at(0, 2), 5, 1))
        };
        assert!(table.check(2, at(0, 1), 5, 1));
        assert!(checks.join().unwrap());
        assert_eq!(table.sum(0, at(0, 3)), Some(2));
        assert_eq!(table.sum(1, at(0, 3)), Some(1));
        assert_eq!(table.sum(2, at(0, 3)), Some(1));
    });
}
