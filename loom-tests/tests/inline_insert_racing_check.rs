// The inline table: two first checks of one key.
//
// Proves: two threads that check a key no table holds both miss it, and both take the
// writer's path; the second finds the first's slot under the lock instead of inserting a
// second one, so the key has one window and both admissions are counted in it.
//
// Would fail if the writer inserted without looking the key up again under its lock (two
// slots: one admission would be counted in a window no lookup reaches).
//
// Checked in scratch builds: without that lookup in `InlineTable::insert`, the model fails.
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomInline;

#[test]
fn two_first_checks_of_one_key() {
    model(|| {
        let table = Arc::new(LoomInline::new(2));
        let other = {
            let table = table.clone();
            thread::spawn(move || table.check(7, at(0, 1), 2, 1))
        };
        assert!(table.check(7, at(0, 1), 2, 1));
        assert!(other.join().unwrap());
        assert_eq!(table.sum(7, at(0, 2)), Some(2));
        assert!(!table.check(7, at(0, 2), 2, 1), "one window, full");
    });
}
