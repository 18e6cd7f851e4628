// Keyed store — two first checks of the same key.
//
// Proves: when two threads check a key the store does not hold, both miss the lock-free
// lookup and race to the insert path, yet exactly one entry is created for the key (the
// second insert, serialized by the writer lock, finds the first's entry) and both checks are
// judged and charged on that one entry: with a limit of 1 exactly one is admitted, the store
// holds one key, and the entry's total equals the admitted cost.
//
// Would fail if the insert path did not look the key up again under the lock (two entries:
// both checks admitted, or one admission charged to an entry the table no longer links, so
// `admitted_total` would be 0), or if a lookup could see an entry before its fields were
// initialised (the Release store linking it / Acquire load finding it).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{keyed, model};
use slidegate::Quota;
use slidegate::clock::ManualClock;

#[test]
fn exactly_one_entry_wins() {
    model(|| {
        let quota = Quota::new(1, Duration::from_nanos(20))
            .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
            .expect("valid quota");
        let limiter = Arc::new(keyed(quota, ManualClock::new()));
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.check(&7u32).is_allowed())
        };
        let mine = limiter.check(&7u32).is_allowed();
        let theirs = other.join().expect("checker panicked");
        assert!(mine ^ theirs, "admitted: {mine} and {theirs}");
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.admitted_total(&7), 1);
    });
}
