// The line ring (the inline store's one-word ring): a refund racing a fill, with no
// barrier.
//
// Proves: the three-word ring's refund needs a barrier (a no-op compare-and-swap of `goal`)
// so that no fill establishes a newer bucket below the snapshots a refund raised; the line
// ring's fill takes the count in the word it claims, at least the count the refund read
// (every claim after the refund's load is from a later word), so the barrier is not
// needed. A refund of the window's units at bucket 0 races a check at bucket 1 that fills
// it; whatever the order, room is conserved: the units the refund reports freed, less the
// racing check's admission, are exactly the room a later check finds in bucket 1, and the
// ring ends established with snapshots monotone and none past the count.
//
// Would fail if a refund could raise a snapshot past the count (a fill claimed after it
// would establish a newer bucket below it: the snapshots are no longer monotone), or if a
// refund reported units that a fill had already made count again.
//
// Checked in scratch builds: with a refund's target not capped by the count it read, the
// model fails.
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{assert_established, at, bucket_of, model};
use slidegate::__private::LoomLine;

const N: u64 = 2;
const L: u64 = 2;

#[test]
fn a_refund_races_the_fill_of_a_new_bucket() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        let refund = {
            let line = line.clone();
            thread::spawn(move || line.refund(at(0, 2), 3).unwrap())
        };
        let admitted = line.check(at(1, 1), L, 1).unwrap();
        let freed = refund.join().unwrap();
        // The refund may also free the racing check's unit, admitted between its raises.
        assert!(freed <= 2 + u64::from(admitted), "freed {freed}");
        assert_established(&line, N, bucket_of(at(1, 0), N));
        let mut room = 0;
        while line.check(at(1, 2), L, 1).unwrap() {
            room += 1;
        }
        assert_eq!(
            room + u64::from(admitted),
            freed,
            "room after a refund of {freed} and a check that admitted {admitted}"
        );
    });
}
