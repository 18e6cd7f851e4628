//! The inline table's tests: lookups, growth through migrations, eviction.

use core::time::Duration;

use super::*;
use crate::window::line::{self, LINE_MIN_GRANULARITY};
use crate::window::line_counter;

const G: u64 = LINE_MIN_GRANULARITY;

/// A Strict check of `cost` against `limit` on `key` at `t`: whether it was admitted.
fn check<S: InlineSlot>(
    table: &InlineTable<S>,
    key: u64,
    hash: u64,
    t: u64,
    limit: u64,
    cost: u64,
) -> bool {
    let rule = line_counter::strict(limit, table.buckets, G);
    table.check(key, hash, &rule, || t, cost).is_allowed()
}

fn mix(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
}

#[test]
fn a_line_slot_is_one_cache_line_and_a_wide_one_an_aligned_pair() {
    assert_eq!(core::mem::size_of::<LineSlot>(), 64);
    assert_eq!(core::mem::align_of::<LineSlot>(), 64);
    assert_eq!(core::mem::size_of::<WideSlot>(), 128);
    assert_eq!(core::mem::align_of::<WideSlot>(), 128);
}

fn every_key_keeps_its_window_across_migrations<S: InlineSlot>() {
    // L = 2 over N = 10 buckets: two units per key, in several tables as the table grows.
    let table = InlineTable::<S>::new(10);
    let keys = 1000u64;
    for key in 0..keys {
        assert!(check(&table, key, mix(key), 1, 2, 1));
    }
    assert!(
        table.capacity() >= 2 * keys as usize,
        "{}",
        table.capacity()
    );
    for key in 0..keys {
        assert!(check(&table, key, mix(key), 2, 2, 1), "key {key}");
    }
    table.finish_migration();
    for key in 0..keys {
        assert!(
            !check(&table, key, mix(key), 3, 2, 1),
            "key {key} over its limit"
        );
        assert_eq!(table.sum(key, mix(key), G, 3), Some(2), "key {key}");
    }
    assert_eq!(table.sum(keys, mix(keys), G, 3), None, "never checked");
}

fn keys_with_one_hash_are_told_apart_by_their_keys<S: InlineSlot>() {
    let table = InlineTable::<S>::new(2);
    for key in 0..20 {
        for _ in 0..=key % 3 {
            assert!(check(&table, key, 7, 1, 5, 1));
        }
    }
    for key in 0..20 {
        assert_eq!(table.sum(key, 7, G, 1), Some(key % 3 + 1), "key {key}");
    }
}

fn a_check_during_a_migration_finds_its_key_in_either_table<S: InlineSlot>() {
    let table = InlineTable::<S>::at_half_load(2);
    // From four slots, the table doubles when an insert would pass load 1/2: the 33rd key
    // starts a migration from 64 slots to 128, eight old slots per insert, and the 36th
    // key's insert leaves it half done.
    for key in 0..36 {
        assert!(check(&table, key, mix(key), 1, 3, 1));
    }
    let guard = &epoch::pin();
    let current = table.current(guard);
    let migrating = !current.next.load(Ordering::Acquire, guard).is_null();
    // Every key is found, in the old table or the new, and charged once more.
    assert!(migrating);
    for key in 0..36 {
        assert!(check(&table, key, mix(key), 1, 3, 1), "key {key}");
        assert_eq!(table.sum(key, mix(key), G, 1), Some(2), "key {key}");
    }
    table.finish_migration();
    assert_eq!(table.capacity(), 128);
    for key in 0..36 {
        assert_eq!(table.sum(key, mix(key), G, 1), Some(2), "key {key}");
    }
}

fn an_idle_key_is_evicted_and_comes_back_fresh<S: InlineSlot>() {
    let table = InlineTable::<S>::new(2);
    assert!(check(&table, 1, mix(1), 1, 1, 1));
    assert!(
        !table.evict_idle(1, mix(1), G, 2 * G),
        "bucket 0 is still in the window"
    );
    assert!(!check(&table, 1, mix(1), 2 * G, 1, 1));
    assert!(table.evict_idle(1, mix(1), G, 3 * G));
    assert_eq!(table.sum(1, mix(1), G, 3 * G), None, "a tombstone");
    assert!(!table.evict_idle(1, mix(1), G, 3 * G), "absent");
    assert!(check(&table, 1, mix(1), 3 * G, 1, 1));
    assert_eq!(table.sum(1, mix(1), G, 3 * G), Some(1));
    // Tombstones are dropped by the next migration.
    for key in 2..40 {
        assert!(check(&table, key, mix(key), 3 * G, 1, 1));
    }
    table.finish_migration();
    assert_eq!(table.sum(1, mix(1), G, 3 * G), Some(1));
}

#[test]
fn a_fill_frozen_by_a_migration_is_finished_in_the_new_table() {
    let table = InlineTable::<LineSlot>::new(2);
    assert!(check(&table, 0, mix(0), 1, 3, 2));
    // Claim a fill to the next bucket, as a check that stopped right after its claim.
    {
        let guard = &epoch::pin();
        let slot = table.find(0, mix(0), guard).unwrap();
        let word = slot.ring[0].load(Ordering::Relaxed);
        let claimed = line::claim(word, line::front_of(word) + 1);
        slot.ring[0].store(claimed, Ordering::Relaxed);
    }
    for key in 1..40 {
        assert!(check(&table, key, mix(key), 1, 3, 1));
    }
    table.finish_migration();
    // Bucket 1 is established with the count (2): one more unit fits, then none.
    assert!(check(&table, 0, mix(0), G + 1, 3, 1));
    assert!(!check(&table, 0, mix(0), G + 1, 3, 1));
    assert_eq!(
        table.sum(0, mix(0), G, 3 * G + 1),
        Some(1),
        "bucket 1's unit alone"
    );
}

#[test]
fn a_wide_fill_claimed_before_a_freeze_is_finished_before_the_copy() {
    let table = InlineTable::<WideSlot>::new(2);
    assert!(check(&table, 0, mix(0), 1, 3, 2));
    // Claim a fill to the next bucket (`goal`, the ring's second word), as a check that
    // read `cum` before the freeze and stopped right after its claim.
    {
        let guard = &epoch::pin();
        let slot = table.find(0, mix(0), guard).unwrap();
        let front = slot.ring[0].load(Ordering::Relaxed);
        slot.ring[1].store(front + 1, Ordering::Relaxed);
    }
    for key in 1..40 {
        assert!(check(&table, key, mix(key), 1, 3, 1));
    }
    table.finish_migration();
    let guard = &epoch::pin();
    let slot = table.find(0, mix(0), guard).unwrap();
    let (front, goal) = (
        slot.ring[0].load(Ordering::Relaxed),
        slot.ring[1].load(Ordering::Relaxed),
    );
    assert_eq!(front, goal, "the copy holds no fill in progress");
    // Bucket 1 is established with the count (2): one more unit fits, then none.
    assert!(check(&table, 0, mix(0), G + 1, 3, 1));
    assert!(!check(&table, 0, mix(0), G + 1, 3, 1));
    assert_eq!(
        table.sum(0, mix(0), G, 3 * G + 1),
        Some(1),
        "bucket 1's unit alone"
    );
}

#[test]
fn a_wide_slot_holds_a_limit_past_the_compact_range_and_marks() {
    // A limit of 10⁹ over N = 10 buckets, Strict and Strict with marks, through migrations.
    let table = InlineTable::<WideSlot>::new(10);
    let quota = |marked: bool| {
        let g = Duration::from_nanos(G);
        let quota = crate::quota::Quota::new(1_000_000_000, g * 10)
            .and_then(|q| q.with_granularity(g))
            .expect("a valid quota");
        CounterRule::new(if marked {
            quota.with_mode(crate::quota::Mode::StrictMarked)
        } else {
            quota
        })
    };
    for marked in [false, true] {
        let rule = quota(marked);
        let base = if marked { 1000 } else { 0 };
        for key in base..base + 300 {
            let d = table.check(key, mix(key), &rule, || 1, 999_999_999);
            assert!(d.is_allowed(), "key {key}");
            assert_eq!(d.remaining(), 1);
        }
        table.finish_migration();
        for key in base..base + 300 {
            assert!(table.check(key, mix(key), &rule, || 2, 1).is_allowed());
            assert!(!table.check(key, mix(key), &rule, || 3, 1).is_allowed());
            assert_eq!(table.sum(key, mix(key), G, 3), Some(1_000_000_000));
        }
    }
}

fn a_small_next_table_is_filled_only_after_its_migration_ends<S: InlineSlot>() {
    // Many evictions leave a large table of tombstones; its next table is small, so each
    // writer call moves more old slots, and the migration ends before the new keys could
    // fill the next table past load 1/2 (small tables at that load, as the loom models').
    let table = InlineTable::<S>::at_half_load(1);
    for key in 0..64 {
        assert!(check(&table, key, mix(key), 1, 1, 1));
    }
    for key in 2..64 {
        assert!(table.evict_idle(key, mix(key), G, 3 * G));
    }
    // Keys 0 and 1 stay in use (the inserts' sweep would evict them idle).
    for key in 0..2 {
        assert!(check(&table, key, mix(key), 3 * G, 2, 1));
    }
    for key in 100..140 {
        assert!(check(&table, key, mix(key), 3 * G, 1, 1), "key {key}");
    }
    table.finish_migration();
    for key in (0..2).chain(100..140) {
        assert!(table.sum(key, mix(key), G, 3 * G).is_some(), "key {key}");
    }
    assert!(table.capacity() <= 128, "{}", table.capacity());
}

fn a_denial_carries_the_whole_decision<S: InlineSlot>() {
    // L = 1 over N = 2 buckets: a unit at t = 1 leaves the window when bucket 3 starts.
    let table = InlineTable::<S>::new(2);
    let rule = line_counter::strict(1, 2, G);
    assert!(table.check(1, mix(1), &rule, || 1, 1).is_allowed());
    let denied = table.check(1, mix(1), &rule, || 1, 1);
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining(), 0);
    assert_eq!(denied.retry_after(), Some(Duration::from_nanos(3 * G - 1)));
    assert!(table.check(1, mix(1), &rule, || 3 * G, 1).is_allowed());
}

fn the_writer_counts_every_slot_a_table_holds<S: InlineSlot>() {
    // Each round (a bucket) inserts sixteen keys, each followed by the eviction of one of
    // the sixteen of three rounds before: idle by then, though not for the whole window an insert's sweep waits for, so
    // the evictions are these calls'. About fifty keys are live; migrations start on
    // tombstones and run over several writer calls, during which moved keys are evicted
    // from the next table. Whenever no migration is in progress, the writer's counts are
    // the current table's, and the (sparse) table is within its bound, load 1/8,
    // tombstones included.
    let table = InlineTable::<S>::new(2);
    let mut migrating = 0;
    let mut after_each_call = |table: &InlineTable<S>, round: u64| match table.occupancy() {
        Some((counted, scanned)) => {
            assert_eq!(counted, scanned, "round {round}");
            assert!(
                SPARSE_LOAD * (scanned.0 + scanned.1) <= table.capacity(),
                "round {round}"
            );
        }
        None => migrating += 1,
    };
    for round in 0..100u64 {
        let t = round * G;
        for i in 0..16 {
            let key = round * 16 + i;
            assert!(check(&table, key, mix(key), t, 1, 1));
            after_each_call(&table, round);
            if let Some(old) = round.checked_sub(3) {
                let key = old * 16 + i;
                assert!(table.evict_idle(key, mix(key), G, t), "round {round}");
                after_each_call(&table, round);
            }
        }
    }
    // Calls that ended inside a migration: several migrations, each over several calls.
    assert!(migrating >= 50, "{migrating}");
}

fn evictions_alone_finish_a_migration<S: InlineSlot>() {
    // Inserts start a migration and stop; the writer calls of idle evictions move the rest.
    let table = InlineTable::<S>::new(2);
    let mut keys = 0;
    while table.occupancy().is_some() {
        assert!(check(&table, keys, mix(keys), 1, 1, 1));
        keys += 1;
    }
    for key in 0..keys {
        assert!(table.evict_idle(key, mix(key), G, 4 * G), "key {key}");
    }
    let Some(((len, _), (live, _))) = table.occupancy() else {
        panic!("the migration is still in progress after {keys} evictions");
    };
    assert_eq!((len, live), (0, 0));
}

fn a_refund_frees_units_of_its_key_in_either_table<S: InlineSlot>() {
    let table = InlineTable::<S>::new(2);
    let rule = line_counter::strict(3, 2, G);
    assert!(check(&table, 0, mix(0), 1, 3, 3));
    assert_eq!(table.refund(0, mix(0), &rule, || 2, 1), Some(1));
    assert_eq!(table.sum(0, mix(0), G, 2), Some(2));
    assert_eq!(table.refund(99, mix(99), &rule, || 2, 1), None, "no slot");
    // Start a migration and leave it in progress: key 0 may be in either table.
    let mut key = 1;
    while table.occupancy().is_some() {
        assert!(check(&table, key, mix(key), 2, 3, 1));
        key += 1;
    }
    assert_eq!(table.refund(0, mix(0), &rule, || 3, 2), Some(2));
    table.finish_migration();
    assert_eq!(table.sum(0, mix(0), G, 3), Some(0));
    assert!(check(&table, 0, mix(0), 3, 3, 3), "the whole limit is free");
}

fn retain_recent_evicts_exactly_the_idle_keys<S: InlineSlot>() {
    // 1000 keys admit a unit at t = 1; the even ones admit another in bucket 5. At bucket 5
    // (N = 2: buckets 3 ..= 5) the odd ones are idle, the even ones not.
    let table = InlineTable::<S>::new(2);
    for key in 0..1000 {
        assert!(check(&table, key, mix(key), 1, 3, 1));
    }
    // Leave a migration in progress, which the sweep finishes first.
    let mut key = 1000;
    while table.occupancy().is_some() {
        assert!(check(&table, key, mix(key), 1, 3, 1));
        key += 1;
    }
    let t = 5 * G;
    for key in (0..1000).step_by(2) {
        assert!(check(&table, key, mix(key), t, 3, 1));
    }
    // Every key from 1000 on was checked at t = 1 only: idle too.
    assert_eq!(table.retain_recent(G, t), 500 + (key as usize - 1000));
    for k in 0..1000 {
        let expected = (k % 2 == 0).then_some(1);
        assert_eq!(table.sum(k, mix(k), G, t), expected, "key {k}");
    }
    let Some(((len, tombstones), scanned)) = table.occupancy() else {
        panic!("the sweep finishes the migration");
    };
    assert_eq!((len, tombstones), scanned);
    assert_eq!(len, 500);
    assert_eq!(table.retain_recent(G, t), 0, "nothing idle is left");
}

fn inserts_sweep_keys_idle_for_a_whole_window<S: InlineSlot>() {
    // Key k admits a unit in bucket k, N = 2: a window after it, nothing holds it. The
    // inserts' sweep (four slots each) reclaims that churn as it goes: the table stays small.
    let table = InlineTable::<S>::new(2);
    for key in 0..2000u64 {
        assert!(check(&table, key, mix(key), key * G, 1, 1));
    }
    let (evicted, forced) = table.evictions();
    assert_eq!(forced, 0);
    assert!(evicted >= 1900, "{evicted}");
    assert!(table.capacity() <= 256, "{}", table.capacity());
    // The keys of the last window are all there, with their units.
    for key in 1997..2000 {
        assert_eq!(table.sum(key, mix(key), G, 1999 * G), Some(1), "key {key}");
    }
}

fn a_key_idle_for_less_than_a_window_is_not_swept<S: InlineSlot>() {
    // Key 0 admits in bucket 0 (N = 2). In bucket 3 its window is empty, but it has not
    // been for a whole window: a hundred inserts sweep past its slot and leave it, so that
    // a key in steady use is not evicted and inserted again between two of its checks.
    let table = InlineTable::<S>::new(2);
    assert!(check(&table, 0, mix(0), 1, 2, 1));
    for key in 1..100 {
        assert!(check(&table, key, mix(key), 3 * G, 2, 1));
    }
    assert_eq!(
        table.sum(0, mix(0), G, 3 * G),
        Some(0),
        "live, its window empty"
    );
    // Later key 0 is stale, and the inserts' sweeps, going round the table, take it.
    let swept = (100..2000).find(|&key| {
        assert!(check(&table, key, mix(key), 7 * G, 2, 1));
        table.sum(0, mix(0), G, 7 * G).is_none()
    });
    assert!(swept.is_some(), "key 0 is never swept");
}

fn at_max_keys_an_insert_evicts_an_idle_key_else_the_least_recent<S: InlineSlot>() {
    // Four keys at most, N = 10 (none idle for ten buckets). Key 0 was last active in
    // bucket 0, keys 1 ..= 3 in bucket 1: key 4's insert forces key 0 out.
    let table = InlineTable::<S>::with_max_keys(10, 4);
    assert!(check(&table, 0, mix(0), 1, 5, 1));
    for key in 1..4 {
        assert!(check(&table, key, mix(key), G, 5, 1));
    }
    assert!(check(&table, 4, mix(4), G + 1, 5, 1));
    assert_eq!(table.evictions(), (0, 1));
    assert_eq!(table.sum(0, mix(0), G, G + 1), None, "forced out");
    for key in 1..5 {
        assert_eq!(table.sum(key, mix(key), G, G + 1), Some(1), "key {key}");
    }
    // Twenty buckets on, every key is idle: the next insert evicts one, unforced.
    assert!(check(&table, 5, mix(5), 20 * G, 5, 1));
    let (evicted, forced) = table.evictions();
    assert_eq!(forced, 1);
    assert!(evicted >= 1, "{evicted}");
    let Some(((len, _), (live, _))) = table.occupancy() else {
        panic!("no migration in progress");
    };
    assert!(len <= 4, "{len}");
    assert_eq!(len, live);
}

#[test]
fn a_key_s_home_spans_a_table_of_any_size() {
    // A sparse table (a power of two) homes a key by its hash's low bits; a dense one by
    // the high half of `hash · capacity`: the lowest hash homes in the first slot, the
    // highest in the last, whatever the capacity (a mask would need a power of two).
    let sparse = Table::<LineSlot>::for_keys(8, SPARSE_LOAD);
    assert_eq!((sparse.capacity(), sparse.bound), (64, 8));
    assert_eq!(sparse.home(5), 5);
    assert_eq!(sparse.home(64 + 5), 5);
    for keys in [20_000, 50_000] {
        let table = Table::<LineSlot>::for_keys(keys, SPARSE_LOAD);
        let capacity = table.capacity();
        // Three times the keys, rounded up to 64 slots; two thirds of them usable.
        assert_eq!(capacity, (3 * keys).next_multiple_of(64));
        assert_eq!(table.bound, capacity / 3 * 2);
        assert_eq!(table.home(0), 0);
        assert_eq!(table.home(HASH), capacity - 1, "capacity {capacity}");
        assert_eq!(
            table.home(HASH / 2 + 1),
            capacity / 2,
            "capacity {capacity}"
        );
        assert_eq!(table.after(capacity - 1), 0);
    }
}

fn a_large_table_is_sized_to_three_times_its_keys_and_keeps_every_window<S: InlineSlot>() {
    // Up to 2¹⁶ slots a table is a power of two at load 1/8 or below; past that it is
    // sized to three times its keys and fills to 2/3. The 8,193rd key moves the table from
    // 2¹⁶ slots to 24,640 (3 · 8,193 rounded up to 64), which holds 16,426; then 49,344,
    // 98,752, and the 65,835th key moves it to 197,568.
    let table = InlineTable::<S>::new(2);
    let keys = 70_000u64;
    for key in 0..keys {
        assert!(check(&table, key, mix(key), 1, 2, 1), "key {key}");
    }
    table.finish_migration();
    assert_eq!(table.capacity(), 197_568);
    let ((live, tombstones), scanned) = table.occupancy().expect("no migration");
    assert_eq!((live, tombstones), scanned);
    assert_eq!(live, keys as usize);
    // Every key kept its unit through its migrations, and admits one more, not two.
    for key in 0..keys {
        assert!(check(&table, key, mix(key), 1, 2, 1), "key {key}");
        assert!(!check(&table, key, mix(key), 1, 2, 1), "key {key}");
    }
}

fn a_small_table_is_kept_at_load_one_eighth<S: InlineSlot>() {
    // The limiter's tables up to 2¹⁶ slots: no insert takes one past one slot in eight in
    // use, and a thousand keys end in 8,192 slots.
    let table = InlineTable::<S>::new(2);
    for key in 0..1000u64 {
        assert!(check(&table, key, mix(key), 1, 2, 1), "key {key}");
        if let Some((counted, _)) = table.occupancy() {
            assert!(
                (counted.0 + counted.1) * SPARSE_LOAD <= table.capacity(),
                "key {key}"
            );
        }
    }
    table.finish_migration();
    assert_eq!(table.capacity(), 8192);
}

fn threads_inserting_and_checking_across_dense_migrations_keep_one_window_per_key<S: InlineSlot>() {
    // Four threads check every one of 12,000 keys once, each from its own starting key, at
    // a limit of 2: the table grows from sparse tables (powers of two, homes by mask)
    // through the 8,193rd key's move to a dense one (24,640 slots, homes by multiplication)
    // while the others insert and check. A key given two windows would admit more than 2;
    // a check lost in a migration, fewer.
    const KEYS: u64 = 12_000;
    let table = InlineTable::<S>::new(2);
    let admitted: u64 = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let table = &table;
                s.spawn(move || {
                    (0..KEYS)
                        .map(|i| (i + t * KEYS / 4) % KEYS)
                        .filter(|&key| check(table, key, mix(key), 1, 2, 1))
                        .count() as u64
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    assert_eq!(admitted, 2 * KEYS);
    table.finish_migration();
    assert_eq!(table.capacity(), 24_640);
    for key in 0..KEYS {
        assert_eq!(table.sum(key, mix(key), G, 1), Some(2), "key {key}");
    }
    let ((live, _), scanned) = table.occupancy().expect("no migration");
    assert_eq!(live, KEYS as usize);
    assert_eq!(scanned.0, live);
}

/// Runs each generic test on both kinds of slot: `name::line` and `name::wide`.
macro_rules! on_both_kinds {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn line() {
                super::$name::<super::LineSlot>();
            }

            #[test]
            fn wide() {
                super::$name::<super::WideSlot>();
            }
        }
    )*};
}

on_both_kinds!(
    every_key_keeps_its_window_across_migrations,
    keys_with_one_hash_are_told_apart_by_their_keys,
    a_check_during_a_migration_finds_its_key_in_either_table,
    an_idle_key_is_evicted_and_comes_back_fresh,
    a_small_next_table_is_filled_only_after_its_migration_ends,
    a_denial_carries_the_whole_decision,
    the_writer_counts_every_slot_a_table_holds,
    evictions_alone_finish_a_migration,
    a_refund_frees_units_of_its_key_in_either_table,
    retain_recent_evicts_exactly_the_idle_keys,
    inserts_sweep_keys_idle_for_a_whole_window,
    a_key_idle_for_less_than_a_window_is_not_swept,
    at_max_keys_an_insert_evicts_an_idle_key_else_the_least_recent,
    a_large_table_is_sized_to_three_times_its_keys_and_keeps_every_window,
    a_small_table_is_kept_at_load_one_eighth,
    threads_inserting_and_checking_across_dense_migrations_keep_one_window_per_key,
);
