use std::sync::Barrier;
use std::time::Duration;

use crate::clock::ManualClock;
use crate::quota::{Mode, Quota};
use crate::{KeyedLimiter, Limit, SlidingWindow, check_all};

/// Keys of `u64` under a quota of `limit` a second in ten buckets of 100 ms: the inline
/// table's shape.
fn limiter(limit: u64, clock: &ManualClock) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::builder(Quota::new(limit, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build()
}

/// The keys held in the table and in the store.
fn held<C: crate::clock::Clock>(keyed: &KeyedLimiter<u64, C>) -> (usize, usize) {
    (keyed.inline.len(), keyed.store.len())
}

#[test]
fn a_key_goes_inline_when_its_type_and_quota_fit_a_line_or_a_wide_slot() {
    let clock = ManualClock::new();
    let keyed = limiter(5, &clock);
    let _ = keyed.check(&1);
    assert_eq!(held(&keyed), (1, 0));

    let second = Quota::new(5, Duration::from_secs(1)).unwrap();
    let cases = [
        (
            "buckets of 10 ms",
            Quota::new(5, Duration::from_millis(100)).unwrap(),
            "none",
        ),
        (
            "3,600 buckets",
            Quota::new(5, Duration::from_secs(3600))
                .and_then(|q| q.with_granularity(Duration::from_secs(1)))
                .unwrap(),
            "none",
        ),
        (
            "a limit above 2^21",
            Quota::new(1 << 22, Duration::from_secs(1)).unwrap(),
            "wide",
        ),
        (
            "a limit of 10^9 in buckets of 10 ms",
            Quota::new(1_000_000_000, Duration::from_millis(100)).unwrap(),
            "wide",
        ),
        (
            "a limit of 10^9 in 11 buckets",
            Quota::new(1_000_000_000, Duration::from_secs(11))
                .and_then(|q| q.with_granularity(Duration::from_secs(1)))
                .unwrap(),
            "none",
        ),
        ("marks", second.with_mode(Mode::StrictMarked), "wide"),
        ("GCRA", second.with_mode(Mode::Gcra), "none"),
        ("the exact log", second.with_mode(Mode::ExactLog), "none"),
    ];
    for (case, quota, kind) in cases {
        let keyed = KeyedLimiter::<u64, _>::with_clock(quota, clock.clone());
        let _ = keyed.check(&1);
        assert_eq!(keyed.inline.kind(), kind, "{case}");
        let inline = usize::from(kind != "none");
        assert_eq!(held(&keyed), (inline, 1 - inline), "{case}");
    }
    for mode in [Mode::Weighted, Mode::FixedWindow] {
        let keyed = KeyedLimiter::<u64, _>::with_clock(second.with_mode(mode), clock.clone());
        let _ = keyed.check(&1);
        assert_eq!(held(&keyed), (1, 0), "{mode:?}");
    }
    let strings = KeyedLimiter::<String, _>::with_clock(second, clock.clone());
    assert_eq!(strings.inline.kind(), "none", "a key type without a word");
    let strings = KeyedLimiter::<String, _>::with_clock(
        Quota::new(1 << 30, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    assert_eq!(strings.inline.kind(), "none", "a key type without a word");
}

/// A key `check_all` reserves on leaves the table with its counts: its decisions go on as a
/// direct limiter's of the same quota, through the move and after it.
#[test]
fn check_all_moves_a_key_with_its_counts() {
    for mode in [Mode::Strict, Mode::Weighted, Mode::FixedWindow] {
        let clock = ManualClock::new();
        let quota = Quota::new(6, Duration::from_secs(1))
            .unwrap()
            .with_mode(mode);
        let keyed = KeyedLimiter::<u64, _>::with_clock(quota, clock.clone());
        let direct = SlidingWindow::with_clock(quota, clock.clone());
        for ms in [0, 250, 550] {
            clock.set(Duration::from_millis(ms));
            assert_eq!(
                keyed.check_n(&7, 2),
                direct.check_n(2),
                "{mode:?} at {ms} ms"
            );
        }
        assert_eq!(held(&keyed), (1, 0));
        clock.set(Duration::from_millis(900));
        let key = keyed.key(&7);
        let all = check_all(&[(&key as &dyn Limit, 1)]).unwrap();
        let d = direct.check_n(1).unwrap();
        assert_eq!(
            (all.is_allowed(), all.remaining()),
            (d.is_allowed(), d.remaining()),
            "{mode:?}"
        );
        assert_eq!(held(&keyed), (0, 1), "{mode:?}: moved to the store");
        for ms in [950, 1_100, 1_300, 1_600, 2_000] {
            clock.set(Duration::from_millis(ms));
            assert_eq!(keyed.peek(&7), direct.peek(), "{mode:?} at {ms} ms");
            assert_eq!(keyed.check(&7), direct.check(), "{mode:?} at {ms} ms");
        }
        assert_eq!(held(&keyed), (0, 1), "{mode:?}: the key stays in the store");
        // Idle a whole window: evicted, then back in the table, fresh.
        clock.set(Duration::from_secs(5));
        assert_eq!(keyed.retain_recent(), 1, "{mode:?}");
        assert_eq!(keyed.check(&7).remaining(), 5, "{mode:?}");
        assert_eq!(held(&keyed), (1, 0), "{mode:?}");
    }
}

/// A key a `check_all` names after a limit that denies is moved too (its reservation is
/// judged on the store), and nothing is charged to it.
#[test]
fn a_denied_check_all_charges_a_moved_key_nothing() {
    let clock = ManualClock::new();
    let keyed = limiter(4, &clock);
    let full = SlidingWindow::with_clock(
        Quota::new(1, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    assert!(full.check().is_allowed());
    let _ = keyed.check_n(&3, 2).unwrap();
    let key = keyed.key(&3);
    let d = check_all(&[(&key as &dyn Limit, 1), (&full, 1)]).unwrap();
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!(keyed.peek(&3).remaining(), 2, "the denial charged the key");
    assert_eq!(keyed.len(), 1);
}

/// An override of another shape moves the key to the store afresh, as the store starts an
/// entry of another shape afresh; one of the table's shape keeps the key and its counts.
#[test]
fn a_quota_of_another_shape_moves_the_key_afresh() {
    let clock = ManualClock::new();
    let keyed = limiter(5, &clock);
    let _ = keyed.check_n(&1, 3).unwrap();
    keyed.quota_for(&1, Quota::new(9, Duration::from_secs(1)).unwrap());
    assert_eq!(
        keyed.check(&1).remaining(),
        5,
        "same shape: the counts stay"
    );
    assert_eq!(held(&keyed), (1, 0));

    let gcra = Quota::new(4, Duration::from_secs(1))
        .unwrap()
        .with_mode(Mode::Gcra);
    keyed.quota_for(&1, gcra);
    assert_eq!(keyed.check(&1).remaining(), 3, "another shape: afresh");
    assert_eq!(held(&keyed), (0, 1));
    assert_eq!(
        keyed.refund(&1, 1),
        1,
        "the refund finds the key in the store"
    );

    keyed.clear_quota_for(&1);
    assert_eq!(keyed.check(&1).remaining(), 4, "back in the table, afresh");
    assert_eq!(held(&keyed), (1, 0), "the store's entry is gone");
    assert_eq!(keyed.refund(&1, 1), 1);
    assert_eq!(keyed.peek(&1).remaining(), 5);
}

/// `max_keys` bounds both stores together, and a new key at the bound makes room in the
/// table while it holds keys.
#[test]
fn max_keys_bounds_both_stores_together() {
    let clock = ManualClock::new();
    let quota = Quota::new(5, Duration::from_secs(1)).unwrap();
    let keyed = KeyedLimiter::<u64, _>::builder(quota)
        .clock(clock.clone())
        .max_keys(4)
        .build();
    let gcra = quota.with_mode(Mode::Gcra);
    for key in 100..103 {
        keyed.quota_for(&key, gcra);
        let _ = keyed.check(&key);
    }
    assert_eq!(held(&keyed), (0, 3));
    for key in 0..4 {
        clock.advance(Duration::from_millis(10));
        let _ = keyed.check(&key);
        assert!(keyed.len() <= 4, "{key}: {:?}", held(&keyed));
    }
    // The fourth inline key found the table holding three keys and the store one... the
    // bound held throughout, each key beyond it forcing one out.
    assert_eq!(keyed.len(), 4);
    assert_eq!(keyed.forced_evictions(), 3);
    // With the table's keys gone, the store's make room.
    keyed.quota_for(&200, gcra);
    for key in 200..203 {
        keyed.quota_for(&key, gcra);
        let _ = keyed.check(&key);
        assert_eq!(keyed.len(), 4);
    }
    assert_eq!(held(&keyed).1 + held(&keyed).0, 4);
}

/// Threads checking keys while others move them out with `check_all`, as the table grows
/// through migrations: each key admits exactly its limit, in one window.
#[test]
fn checks_racing_moves_admit_each_limit_exactly() {
    const KEYS: u64 = 200;
    const LIMIT: u64 = 40;
    let clock = ManualClock::new();
    let keyed = limiter(LIMIT, &clock);
    let barrier = Barrier::new(4);
    let admitted: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (keyed, barrier) = (&keyed, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut admitted = vec![0; KEYS as usize];
                    for round in 0..20 {
                        for key in 0..KEYS {
                            let allowed = if key % 3 == 0 && (key / 3 + round + t) % 5 == 0 {
                                let limit = keyed.key(&key);
                                check_all(&[(&limit as &dyn Limit, 1)])
                                    .unwrap()
                                    .is_allowed()
                            } else {
                                keyed.check(&key).is_allowed()
                            };
                            admitted[key as usize] += u64::from(allowed);
                        }
                    }
                    admitted
                })
            })
            .collect();
        let per_thread: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        (0..KEYS as usize)
            .map(|k| per_thread.iter().map(|a| a[k]).sum())
            .collect()
    });
    for (key, &n) in admitted.iter().enumerate() {
        assert_eq!(n, LIMIT, "key {key}");
        assert_eq!(keyed.peek(&(key as u64)).remaining(), 0, "key {key}");
    }
    assert_eq!(keyed.len(), KEYS as usize);
    let (inline, store) = held(&keyed);
    assert!(
        store > 0 && inline > 0,
        "moves and keys left in the table: {inline}, {store}"
    );
}

/// A key the store holds is given a new entry of another shape at `max_keys` without room
/// made for it: the replacement adds no key (it forced out a live key when room was made for
/// every insert in the store).
#[test]
fn replacing_a_stored_key_at_the_bound_forces_no_key_out() {
    let clock = ManualClock::new();
    let quota = Quota::new(5, Duration::from_secs(1)).unwrap();
    let keyed = KeyedLimiter::<u64, _>::builder(quota)
        .clock(clock.clone())
        .max_keys(2)
        .build();
    keyed.quota_for(&1, quota.with_mode(Mode::Gcra));
    assert!(keyed.check(&1).is_allowed());
    assert!(keyed.check(&2).is_allowed());
    assert_eq!(held(&keyed), (1, 1));
    keyed.quota_for(&1, quota.with_mode(Mode::ExactLog));
    assert_eq!(
        keyed.check(&1).remaining(),
        4,
        "afresh in an entry of the new shape"
    );
    assert_eq!(keyed.forced_evictions(), 0);
    assert_eq!(held(&keyed), (1, 1));
    assert_eq!(keyed.peek(&2).remaining(), 4, "key 2 kept its admission");
}
