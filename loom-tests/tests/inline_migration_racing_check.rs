// The inline table: a migration racing a check of a key it moves, in slots of either kind
// (the line ring's 64-byte slots and the three-word ring's 128-byte wide slots).
//
// Proves: a check racing the migration that moves its key's slot (freeze the ring, copy the
// slot into the next table, mark the old slot moved) loses no admission and counts none
// twice: its charge lands in the old slot before the freeze, and the copy carries it, or
// fails on the frozen ring and is judged again on the copy, which a lookup under the
// writer's lock finds. Every key's window holds its units afterwards. With the racing
// check in a new bucket, its fill races the freeze too: a wide ring's fill is claimed on
// `goal`, which the retirement of `cum` does not stop, so the freeze helps a claimed fill
// to its end and copies again if one was claimed under the copy.
//
// Would fail if the slot were copied without freezing its ring first (a charge landing
// between the copy and the mark is counted in a window no lookup reaches again).
//
// Checked in scratch builds: without the freeze in `InlineTable::move_slot`, the model
// fails, for both kinds (for the wide kind: `WideSlot::freeze` without `retire_now`). With
// the old slot marked moved before its copy is placed, it passes, as it should: a lookup
// that misses the key in both tables takes the writer's lock, which the migration holds
// until the copy is placed.
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

/// Key 0 checked at bucket `bucket` while key 2's insert moves it to the next table.
fn a_migration_moves_a_key_under_its_checks(table: fn() -> LoomInline, bucket: u64) {
    model(move || {
        // Two keys fill the first table (4 slots) to load 1/2; the third key's insert moves
        // the table to 8 slots, key 0 with it, in one writer call.
        let table = Arc::new(table());
        assert!(table.check(0, at(0, 1), 5, 1));
        assert!(table.check(1, at(0, 1), 5, 1));
        let checks = {
            let table = table.clone();
            thread::spawn(move || table.check(0, at(bucket, 2), 5, 1))
        };
        assert!(table.check(2, at(0, 1), 5, 1));
        assert!(checks.join().unwrap());
        assert_eq!(table.sum(0, at(bucket, 3)), Some(2));
        assert_eq!(table.sum(1, at(bucket, 3)), Some(1));
        assert_eq!(table.sum(2, at(bucket, 3)), Some(1));
    });
}

#[test]
fn a_migration_moves_a_line_key_under_its_checks() {
    a_migration_moves_a_key_under_its_checks(|| LoomInline::new(2), 0);
}

#[test]
fn a_migration_moves_a_wide_key_under_its_checks() {
    a_migration_moves_a_key_under_its_checks(|| LoomInline::wide(2), 0);
}

#[test]
fn a_migration_moves_a_wide_key_under_a_check_that_fills() {
    a_migration_moves_a_key_under_its_checks(|| LoomInline::wide(2), 1);
}
