// Keyed store — lock-free lookups racing an insert that resizes the table.
//
// Proves: a check of a held key, running lock-free while another thread inserts a new key
// and that insert replaces the whole table (the store is one key short of its resize
// threshold), always finds the held key's entry — in the old table or the new one, which
// share entries — and charges it, never a copy; the new key is found by a concurrent peek
// either as absent (a fresh window) or with its admission, never half-initialised; and the
// old table is reclaimed without freeing the entries the new one shares (the counts survive
// and a later check sees them).
//
// Would fail if a resize copied entries instead of sharing them (a charge landing on the old
// table's copy is lost: the final totals disagree), or if a lookup that misses a held key in
// a table being replaced did not fall back to the writer path (the key would be inserted
// twice: `len` and the totals disagree). Publishing a table before its slots are filled is
// caught only as far as a lookup then misses a key: the writer-path fallback makes it a slow
// path, not a wrong answer, which is why the fallback is part of the protocol.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{keyed, model};
use slidegate::Quota;
use slidegate::clock::ManualClock;

/// Keys held before the race: one short of the smallest table's resize threshold (8 slots,
/// load at most 3/4), so the racing insert resizes.
const HELD: u32 = 6;

#[test]
fn lookup_racing_an_insert_that_resizes() {
    model(|| {
        let quota = Quota::new(2, Duration::from_nanos(20))
            .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
            .expect("valid quota");
        let limiter = Arc::new(keyed(quota, ManualClock::new()));
        for key in 0..HELD {
            assert!(limiter.check(&key).is_allowed());
        }
        let inserter = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.check(&100u32).is_allowed())
        };
        // Lock-free lookups of a held key and of the key being inserted.
        assert!(limiter.check(&0).is_allowed());
        let peeked = limiter.peek(&100).remaining();
        assert!(peeked == 2 || peeked == 1, "peeked {peeked}");
        assert!(inserter.join().expect("inserter panicked"));
        assert_eq!(limiter.len(), HELD as usize + 1);
        assert_eq!(limiter.admitted_total(&0), 2);
        assert_eq!(limiter.admitted_total(&100), 1);
        assert!(!limiter.check(&0).is_allowed());
        assert_eq!(limiter.peek(&100).remaining(), 1);
    });
}
