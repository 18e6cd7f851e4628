// The line ring (the inline store's one-word ring): a fill racing a check.
//
// Proves: a check whose clock is a bucket behind, racing the first check of a new bucket
// (which claims the fill by setting the word's flag and establishes the new slot), is
// either judged and charged before the claim, in its own bucket, or fails its
// compare-and-swap, helps the fill and is judged at the new front; the two never both take
// the window's last unit, and the unit admitted by the new bucket's check is counted in
// that bucket (the new slot's snapshot is the count at the claim, which no charge moves
// while the flag is set). Afterwards the ring is established at the new bucket: no flag
// left, every slot of the window tagged with its bucket, snapshots monotone and none past
// the count.
//
// Would fail if a snapshot were not the claimed count (one below it counts the new
// bucket's admission in the old bucket: the window sums below tell them apart).
//
// Checked in scratch builds: with the new slot's snapshot one below the claimed count, the
// model fails. (With the claim leaving the flag clear, so that charges go on during the
// fill, this model still passes: the one slot the fill writes is not read by the racing
// check. `line_fill_helpers.rs`, whose jump leaves every slot to be filled, fails then.)
#![cfg(slidegate_loom)]

use std::sync::Arc;

use loom::thread;
use loom_tests::{assert_established, at, bucket_of, model};
use slidegate::__private::LoomLine;

const N: u64 = 2;
const L: u64 = 2;

#[test]
fn a_check_a_bucket_behind_races_the_fill_of_a_new_bucket() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        assert_eq!(line.check(at(0, 1), L, 1), Some(true));
        let behind = {
            let line = line.clone();
            thread::spawn(move || line.check(at(0, 2), L, 1).unwrap())
        };
        let ahead = line.check(at(1, 1), L, 1).unwrap();
        let behind = behind.join().unwrap();
        assert!(ahead ^ behind, "one unit of room: {ahead} {behind}");
        assert_eq!(line.admitted(), 2);
        assert_established(&line, N, bucket_of(at(1, 0), N));
        // In the window of bucket 3 only bucket 1's units are left (buckets 1 ..= 3).
        let in_bucket_1 = line.sum(at(3, 0)).unwrap();
        if ahead {
            assert_eq!(in_bucket_1, 1, "judged at bucket 1, counted in bucket 0");
        } else {
            assert!(in_bucket_1 <= 1);
        }
        assert_eq!(line.sum(at(1, 5)), Some(2));
    });
}
