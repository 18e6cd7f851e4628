// The line ring (the inline store's one-word ring): helpers of one fill, and a helper that
// wakes up after its fill is over.
//
// Proves: two checks that are the first to see a bucket more than N buckets ahead (a jump
// that replaces the whole window) establish it together: one claims, the other helps from
// the word alone, every slot of the new window ends up tagged with its bucket (snapshots
// monotone, none past the count), and both are charged.
// One of them then checks in the next bucket, claiming a second fill, while the other may
// still be inside the first fill's loop: it must not overwrite a slot of the newer window.
// Afterwards the ring is established at the last bucket, and its window sum is the units of
// the last two buckets.
//
// Would fail if a helper did not re-load the word after each slot load before its
// compare-and-swap (a late helper would write the first fill's bucket into a slot of the
// second fill's window), or if charges went on during a fill (a charge landing mid-fill
// changes the word, every helper stops, and the slots left stale tear every later reading:
// loom reports the livelock as "exceeded maximum number of branches").
//
// Checked in scratch builds: without the re-load in `Line::fill`, the model fails (a slot
// of the second window tagged with the first fill's bucket); with the claim leaving the
// flag clear, it fails with the livelock; with the fast path (`line_counter::charge_fast`)
// not declining a flagged word, it fails too (an admission lands between the fill's first
// and second slot, and the helper that finishes the fill counts it in the oldest bucket).
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{assert_established, at, bucket_of, model};
use slidegate::__private::LoomLine;

const N: u64 = 2;
const L: u64 = 5;

#[test]
fn two_first_seers_of_a_jump_then_the_next_bucket() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        assert_eq!(line.check(at(1, 1), L, 1), Some(true));
        let other = {
            let line = line.clone();
            thread::spawn(move || line.check(at(5, 2), L, 1).unwrap())
        };
        assert_eq!(line.check(at(5, 1), L, 1), Some(true));
        assert_eq!(line.check(at(6, 1), L, 1), Some(true));
        assert!(other.join().unwrap());
        assert_eq!(line.admitted(), 5);
        assert_established(&line, N, bucket_of(at(6, 0), N));
        // Buckets 4 ..= 6 hold the three units of buckets 5 and 6, whichever bucket the
        // other thread's unit landed in.
        assert_eq!(line.sum(at(6, 5)), Some(3));
        // Bucket 6 holds this thread's unit, and the other's if it was judged there (after
        // losing its charge to the second fill); buckets 6 ..= 8 hold nothing else.
        let in_bucket_6 = line.sum(at(8, 0)).unwrap();
        assert!((1..=2).contains(&in_bucket_6), "{in_bucket_6}");
    });
}
