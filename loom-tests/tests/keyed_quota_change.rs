// Keyed limiter — a per-key quota change racing checks of the key.
//
// Proves: when a key's quota changes to one of another window shape (so its entry must be
// replaced) while checks of the key run, a check that read the old quota never replaces the
// entry of the new shape with one of the old (the insert path takes the shape from the
// quota published when it holds the lock, and a check whose entry does not fit its quota
// reads the quota again). So every admission judged under the new quota stays counted:
// with the new limit of 1 and a frozen clock, at most one check is admitted under it —
// the racing checks and a final one included — and the key's entry holds exactly those.
//
// Would fail if a check that read the old quota inserted an entry of the old shape over the
// new one: the new-quota admission would be forgotten, and the final check, finding an entry
// of the wrong shape again, would start afresh and admit a second unit under a limit of 1.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{FixedHasher, model};
use slidegate::clock::ManualClock;
use slidegate::{Decision, KeyedLimiter, Quota};

fn quota(limit: u64, buckets: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(10 * buckets))
        .and_then(|q| q.with_granularity(Duration::from_nanos(10)))
        .expect("valid quota")
}

/// A key held (one unit admitted under the old quota) or not when its quota changes shape.
/// Held, the racing checks find the entry of the old shape and replace it; not held, both go
/// to the insert path, where one that read the old quota before taking the lock would insert
/// an entry of the old shape (a build that reads the shape before the lock is caught here
/// only when the key is not held).
fn race(held: bool) {
    model(move || {
        let (old, new) = (quota(2, 2), quota(1, 3));
        let limiter = Arc::new(
            KeyedLimiter::<u32>::builder(old)
                .clock(ManualClock::new())
                .hasher(FixedHasher::default())
                .build(),
        );
        if held {
            assert!(limiter.check(&1u32).is_allowed());
        }

        let changer = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                limiter.quota_for(&1, new);
                limiter.check(&1)
            })
        };
        let racing = limiter.check(&1);
        let changed = changer.join().expect("changer panicked");
        let last = limiter.check(&1);

        assert_eq!(last.limit(), 1, "the final check ignored the new quota");
        let under_new = |d: &Decision| d.is_allowed() && d.limit() == 1;
        let admitted = [racing, changed, last]
            .iter()
            .filter(|d| under_new(d))
            .count();
        assert!(admitted <= 1, "{racing:?} {changed:?} {last:?}");
        assert_eq!(limiter.admitted_total(&1), admitted as u64);
        // A replaced entry is not counted twice.
        assert_eq!(limiter.len(), 1);
    });
}

#[test]
fn checks_racing_a_change_of_shape_lose_no_admission() {
    race(true);
}

#[test]
fn first_checks_racing_a_change_of_shape_lose_no_admission() {
    race(false);
}
