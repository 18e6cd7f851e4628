// Multi-limit checks on a keyed limit — a reservation racing the *forced* eviction of its
// entry at `max_keys`.
//
// Proves that when the store is full and a first check of another key forces out the entry
// a `check_all` is reserving or committing on (`Ring::retire_now`, unlink, `defer_destroy`,
// collect), on every interleaving:
// - the multi-check is admitted and charges its direct limit exactly once (no second commit
//   after a retried reservation, none lost), and the other key's check is admitted;
// - the store ends with exactly one key (the bound holds) and at least one forced eviction
//   counted (the two first checks can force each other out more than once: a check whose
//   entry was forced out looks its key up again and inserts it, forcing the other out);
// - whichever key is live holds exactly its one unit, and nothing pending: a reservation on
//   the retired entry either failed its CAS and was made again on a live one, or was
//   committed (or found retired at commit) on the dead entry and is forgotten with it, as
//   `window/ring.rs` documents for forced retirement; the evicted key reads as fresh.
//
// Would fail if a check or reservation whose entry was retired under it answered from the
// dead entry instead of looking its key up again (a build returning a denial there fails
// the "admitted" assertion), if the multi-check charged its direct limit twice or not at
// all, or if a full store admitted a second key (a build skipping `make_room` fails the
// bound assertion). It runs in about 6 s.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{FixedHasher, model};
use slidegate::clock::ManualClock;
use slidegate::{KeyedLimiter, Limit, Quota, SlidingWindow, check_all};

/// L = 1 in one bucket of 10 ns: nothing leaves the window during the model.
fn quota() -> Quota {
    Quota::new(1, Duration::from_nanos(10))
        .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
        .expect("valid quota")
}

#[test]
fn multi_check_racing_a_forced_eviction_of_its_key() {
    model(|| {
        let clock = ManualClock::new();
        let keyed = Arc::new(
            KeyedLimiter::<u32>::builder(quota())
                .clock(clock.clone())
                .hasher(FixedHasher::default())
                .max_keys(1)
                .build(),
        );
        let direct = SlidingWindow::with_clock(quota(), clock.clone());

        let other = {
            let keyed = Arc::clone(&keyed);
            thread::spawn(move || {
                let d = keyed.check(&2u32);
                slidegate::__private::reclaim();
                d
            })
        };
        let key = keyed.key(&1);
        let d = check_all(&[(&key as &dyn Limit, 1), (&direct, 1)]).expect("valid costs");
        let theirs = other.join().expect("the other check panicked");

        assert!(d.is_allowed(), "{d:?}");
        assert!(theirs.is_allowed(), "{theirs:?}");
        assert_eq!(direct.admitted_total(), 1, "the direct limit charged {d:?}");
        assert_eq!(keyed.len(), 1, "the bound of one key");
        assert!(keyed.forced_evictions() >= 1);
        let (one, two) = (keyed.admitted_total(&1), keyed.admitted_total(&2));
        assert!(
            (one, two) == (1, 0) || (one, two) == (0, 1),
            "live key counts {one} and {two}"
        );
        // The live key holds its unit, nothing pending; the evicted one reads as fresh.
        let live = if one == 1 { 1 } else { 2 };
        assert_eq!(keyed.peek(&live).remaining(), 0);
        assert_eq!(keyed.peek(&(3 - live)).remaining(), 1);
    });
}
