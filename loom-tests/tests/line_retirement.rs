// The line ring (the inline store's one-word ring): retirement racing a check and a fill.
//
// Proves: an idle retirement (a compare-and-swap of the word, from a reading whose window is
// empty, to the word with the retired bit) racing a check that fills a new bucket and admits
// never loses the admission: either the check's charge landed first, and the retirement
// fails (the word moved), or the retirement landed first, and the check finds the ring
// retired (`None`: a store looks the key up again). A forced retirement racing the same
// check leaves no fill's flag to be cleared by anyone: a retired ring is never read again.
//
// Would fail if a claimed fill could clear its flag on a retired ring and so revive it, or
// if a charge could land on a retired word.
//
// Checked in scratch builds: with the fill's clearing compare-and-swap replaced by a plain
// store of the claimed word without its flag, both models fail (a retirement landing during
// a fill is undone, and the ring admits again).
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{at, model};
use slidegate::__private::LoomLine;

const N: u64 = 2;
const L: u64 = 2;

#[test]
fn an_idle_retirement_races_a_check_in_a_new_bucket() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        let retire = {
            let line = line.clone();
            thread::spawn(move || line.retire_idle(at(3, 0)))
        };
        let checked = line.check(at(3, 1), L, 1);
        let retired = retire.join().unwrap();
        match checked {
            Some(admitted) => {
                assert!(admitted);
                assert!(!retired, "an admission landed on a ring then retired");
                assert_eq!(line.admitted(), 2);
            }
            None => assert!(retired),
        }
    });
}

#[test]
fn a_forced_retirement_races_a_check_in_a_new_bucket() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        let retire = {
            let line = line.clone();
            thread::spawn(move || line.retire_now())
        };
        let checked = line.check(at(3, 1), L, 1);
        assert!(retire.join().unwrap());
        assert_eq!(line.check(at(3, 2), L, 1), None, "retired for good");
        let admitted = line.admitted();
        assert_eq!(admitted, 1 + u64::from(checked == Some(true)));
    });
}
