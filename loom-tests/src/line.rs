//! What the line ring's models share: its invariant once every thread has joined.

use slidegate::__private::LoomLine;

/// The internal index of the bucket holding `t` on a ring of `buckets` buckets.
pub fn bucket_of(t: u64, buckets: u64) -> u64 {
    t / LoomLine::GRANULARITY + buckets + 1
}

/// A time `into` ns into bucket `k` (counted from 0, as a clock reads it).
pub fn at(k: u64, into: u64) -> u64 {
    k * LoomLine::GRANULARITY + into
}

/// The ring is quiet and established at `front`: no fill's flag, each slot of the window
/// tagged with its bucket, snapshots monotone and none past the count.
pub fn assert_established(line: &LoomLine, buckets: u64, front: u64) {
    assert!(!line.filling(), "a fill's flag is left set");
    let (seen, slots) = line.window();
    assert_eq!(seen, front, "front");
    for (k, &(tag, _)) in (front - buckets..=front).zip(&slots) {
        assert_eq!(tag, k as u32 & 0xff, "slot of bucket {k}: {slots:?}");
    }
    assert!(
        slots.windows(2).all(|w| w[0].1 <= w[1].1),
        "snapshots not monotone: {slots:?}"
    );
    let admitted = line.admitted() as u32;
    assert!(
        slots.iter().all(|&(_, s)| s <= admitted),
        "a snapshot past the count {admitted}: {slots:?}"
    );
}
