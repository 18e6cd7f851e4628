// The inline table: a refund racing the migration that moves its key.
//
// Proves: a refund of a key whose slot a migration is moving either lands in the old slot
// before the freeze and copy (which carry its raised snapshots) or in the copy: the units
// it reports freed are free afterwards, never lost with the old table, and the key's
// window holds exactly what was admitted less what was refunded.
//
// Would fail if a refund ran without the writer's lock: it raises the ring's snapshots,
// not its word, so the freeze does not stop it, and a raise landing after the copy read
// the slots is lost with the old table although the refund reported it.
//
// Checked in scratch builds: with `InlineTable::refund` not taking the lock, the model
// fails (the window still holds the refunded unit).
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

#[test]
fn a_refund_races_the_migration_of_its_key() {
    model(|| {
        // As in `inline_migration_racing_check`: two keys fill the 4-slot table to load 1/2,
        // and the third key's insert moves key 0 to an 8-slot table.
        let table = Arc::new(LoomInline::new(2));
        assert!(table.check(0, at(0, 1), 5, 1));
        assert!(table.check(0, at(0, 1), 5, 1));
        assert!(table.check(1, at(0, 1), 5, 1));
        let refund = {
            let table = table.clone();
            thread::spawn(move || table.refund(0, at(0, 2), 1))
        };
        assert!(table.check(2, at(0, 1), 5, 1));
        assert_eq!(refund.join().unwrap(), Some(1));
        assert_eq!(
            table.sum(0, at(0, 3)),
            Some(1),
            "two admitted, one refunded"
        );
        assert_eq!(table.sum(1, at(0, 3)), Some(1));
        assert_eq!(table.sum(2, at(0, 3)), Some(1));
    });
}
