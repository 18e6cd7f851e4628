use super::*;
use crate::window::ring::{COMPACT_MAX_BUCKETS, Ring, Slots};
use core::hash::Hasher;

/// Sends every key to one hash: every key shares one probe sequence.
#[derive(Clone, Default)]
struct OneHash;

impl BuildHasher for OneHash {
    type Hasher = OneHasher;
    fn build_hasher(&self) -> OneHasher {
        OneHasher
    }
}

struct OneHasher;

impl Hasher for OneHasher {
    fn finish(&self) -> u64 {
        7
    }
    fn write(&mut self, _: &[u8]) {}
}

const SHAPE: Shape = Shape::Ring {
    granularity: 10,
    buckets: 2,
    compact: true,
};

/// Charges one unit at `now` on the ring of `state` (granularity 10); `false` if it is
/// retired or not a ring.
fn charge_one(state: State<'_>, now: u64) -> bool {
    fn on<S: Slots>(ring: Ring<'_, S>, granularity: u64, now: u64) -> bool {
        let read = ring.read(granularity, || now, true, |_| ());
        read.is_some_and(|((), r)| ring.try_charge(r, 1))
    }
    match state {
        State::Ring { granularity, ring } => on(ring, granularity, now),
        State::Compact { granularity, ring } => on(ring, granularity, now),
        State::Log { .. } | State::Gcra { .. } => false,
    }
}

/// Inserts `key` at `now` and charges it one unit there.
fn touch<S: BuildHasher>(store: &Store<u32, S>, key: u32, now: u64) {
    let guard = epoch::pin();
    let hash = store.hash(&key);
    let entry = store.get_or_insert(&key, hash, || SHAPE, now, &guard);
    assert!(charge_one(entry.state(), now));
}

fn held<S: BuildHasher>(store: &Store<u32, S>, key: u32) -> bool {
    let guard = epoch::pin();
    store.get(&key, store.hash(&key), &guard).is_some()
}

#[test]
fn a_second_insert_of_a_key_finds_the_first() {
    let store = Store::new(OneHash, usize::MAX);
    let guard = epoch::pin();
    let a = store.get_or_insert(&1u32, 7, || SHAPE, 0, &guard) as *const Entry<u32>;
    let b = store.get_or_insert(&1u32, 7, || SHAPE, 0, &guard) as *const Entry<u32>;
    assert_eq!(a, b);
    assert_eq!(store.len(), 1);
}

/// Hashes key `k` to `k mod H | k << 60`: `H` home slots at most, low bits shared within
/// each, and fragments `k mod 16`, so keys 16 apart share a fragment too.
#[derive(Clone, Default)]
struct Homes<const H: u64>;

impl<const H: u64> BuildHasher for Homes<H> {
    type Hasher = HomesHasher<H>;
    fn build_hasher(&self) -> HomesHasher<H> {
        HomesHasher(0)
    }
}

struct HomesHasher<const H: u64>(u64);

impl<const H: u64> Hasher for HomesHasher<H> {
    fn finish(&self) -> u64 {
        (self.0 % H) | (self.0 << 60)
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("u32 keys hash through write_u32")
    }
    fn write_u32(&mut self, k: u32) {
        self.0 = u64::from(k);
    }
}

#[test]
fn probes_find_keys_past_entries_of_other_fragments() {
    let store = Store::new(Homes::<1>, usize::MAX);
    // One probe sequence of 40 keys whose fragments differ (0..16) and repeat (k, k + 16).
    for key in 0..40 {
        touch(&store, key, 0);
    }
    let guard = epoch::pin();
    for key in 0..40u32 {
        let hash = store.hash(&key);
        let entry = store.get(&key, hash, &guard).expect("every key is held");
        assert_eq!(entry.key, key);
        // The one charge of `touch`, so the entry is this key's own.
        assert_eq!(entry.state().admitted(), 1);
    }
    assert!(store.get(&40, store.hash(&40), &guard).is_none());
    assert_eq!(store.len(), 40);
}

#[test]
fn lookups_probe_past_tombstones() {
    let store = Store::new(OneHash, usize::MAX);
    // Keys 0..4 at time 0, then 4..6 later: 0..4 are idle by t = 30.
    for key in 0..4 {
        touch(&store, key, 0);
    }
    for key in 4..6 {
        touch(&store, key, 25);
    }
    let evicted = store.retain_recent(30);
    assert_eq!(evicted, 4);
    assert_eq!(store.len(), 2);
    // 4 and 5 sit after the four tombstones in the one probe sequence.
    assert!(held(&store, 4) && held(&store, 5));
    assert!(!held(&store, 0));
    // A new key reuses the first tombstone, and every key is still found.
    touch(&store, 9, 30);
    assert!(held(&store, 4) && held(&store, 5) && held(&store, 9));
}

#[test]
fn unlinking_the_end_of_a_probe_sequence_leaves_no_tombstones() {
    let store = Store::new(OneHash, usize::MAX);
    for key in 0..3 {
        touch(&store, key, 0);
    }
    assert_eq!(store.retain_recent(30), 3);
    assert_eq!(crate::sync::lock(&store.writer).tombstones, 0);
}

#[test]
fn resizes_keep_every_entry_and_its_counts() {
    let store = Store::new(ahash::RandomState::new(), usize::MAX);
    for key in 0..1000 {
        touch(&store, key, 0);
    }
    assert_eq!(store.len(), 1000);
    let guard = epoch::pin();
    for key in 0..1000 {
        let entry = store.get(&key, store.hash(&key), &guard);
        assert_eq!(entry.map(|e| e.state().admitted()), Some(1), "key {key}");
    }
    // Load at most 3/4.
    let table = store.table(&guard);
    assert!(4 * 1000 <= 3 * (table.mask + 1));
}

#[test]
fn inserts_evict_only_entries_idle_for_a_whole_window() {
    // SHAPE: W = 20 ns. Keys charged at t = 0 are idle from t = 30 (bucket 3 > 0 + N).
    let store = Store::new(ahash::RandomState::new(), usize::MAX);
    for key in 0..4 {
        touch(&store, key, 0);
    }
    // Idle, but not yet for a window: sweeps pass them by (no thrash of keys in use).
    for key in 100..120 {
        touch(&store, key, 49);
    }
    assert_eq!(store.evictions(), 0);
    assert!((0..4).all(|key| held(&store, key)));
    // Idle since t = 30, a window before t = 50: the sweeps take them.
    for key in 200..240 {
        touch(&store, key, 50);
    }
    assert_eq!(store.evictions(), 4);
    assert!((0..4).all(|key| !held(&store, key)));
}

/// Inserts sweep only from the instant an entry holding an admission can first be stale: the
/// earliest `t + W` over the entries made (the cursor stays put before it), brought forward
/// by an entry of a shorter window.
#[test]
fn inserts_sweep_only_once_an_entry_can_be_stale() {
    let cursor = |store: &Store<u32, _>| crate::sync::lock(&store.writer).cursor;
    // SHAPE: W = 20 ns; the first entry, made at t = 5, can be stale from t = 25.
    let store = Store::new(ahash::RandomState::new(), usize::MAX);
    touch(&store, 0, 5);
    for key in 1..10 {
        touch(&store, key, 24);
    }
    assert_eq!(cursor(&store), 0);
    touch(&store, 10, 25);
    assert_eq!(cursor(&store), SWEEP);

    let store = Store::new(ahash::RandomState::new(), usize::MAX);
    touch(&store, 0, 0);
    let short = Shape::Ring {
        granularity: 1,
        buckets: 2,
        compact: true,
    };
    let guard = epoch::pin();
    store.get_or_insert(&1, store.hash(&1), || short, 3, &guard);
    touch(&store, 2, 4);
    assert_eq!(cursor(&store), 0);
    touch(&store, 3, 5);
    assert_eq!(cursor(&store), SWEEP);
}

#[test]
fn a_full_store_forces_out_the_least_recently_active_entry() {
    let store = Store::new(OneHash, 3);
    for (key, t) in [(0, 10), (1, 0), (2, 20)] {
        touch(&store, key, t);
    }
    touch(&store, 3, 25);
    assert_eq!(store.forced_evictions(), 1);
    assert!(!held(&store, 1));
    assert!(held(&store, 0) && held(&store, 2) && held(&store, 3));
}

/// Entries of every shape, with keys of a stricter alignment than the header's (`u128`)
/// and keys that own heap memory (`String`): each keeps its key, its state's words and
/// its counts through inserts and resizes, and dropping the store frees them all.
#[test]
fn entries_of_every_shape_and_key_layout_keep_their_words() {
    fn check_all_shapes<K: Hash + Eq + Clone + Send + Sync + 'static>(key: impl Fn(u32) -> K) {
        let gcra = crate::algo::gcra::GcraRule::new(4, 40);
        let shapes = [
            SHAPE,
            Shape::Ring {
                granularity: 1,
                buckets: 300,
                compact: false,
            },
            Shape::Ring {
                granularity: 1,
                buckets: 10,
                compact: false,
            },
            Shape::Ring {
                granularity: 1,
                buckets: 10,
                compact: true,
            },
            Shape::Ring {
                granularity: 1,
                buckets: COMPACT_MAX_BUCKETS,
                compact: true,
            },
            Shape::Log {
                capacity: 4,
                window: 40,
            },
            Shape::Gcra(gcra),
        ];
        for shape in shapes {
            let store = Store::<K, _>::new(ahash::RandomState::new(), usize::MAX);
            let guard = epoch::pin();
            let rule = crate::algo::Rule::new(
                crate::Quota::new(4, core::time::Duration::from_nanos(40)).expect("valid"),
            );
            for k in 0..200 {
                let key = key(k);
                let entry = store.get_or_insert(&key, store.hash(&key), || shape, 0, &guard);
                assert!(entry.state().fits(shape));
                assert!(entry.key == key);
                if matches!(shape, Shape::Ring { .. }) {
                    assert!(charge_one(entry.state(), 5));
                } else {
                    let now = || 5;
                    let (d, _) = entry
                        .state()
                        .check(&rule, now, 1, crate::algo::Op::Peek)
                        .expect("live");
                    assert!(d.is_allowed());
                }
            }
            for k in 0..200 {
                let key = key(k);
                let entry = store.get(&key, store.hash(&key), &guard).expect("held");
                assert!(entry.key == key && entry.state().fits(shape));
                if matches!(shape, Shape::Ring { .. }) {
                    assert_eq!(entry.state().admitted(), 1, "key {k}");
                }
            }
        }
    }
    check_all_shapes(|k| u128::from(k) << 70);
    check_all_shapes(|k| format!("key number {k}"));
}

/// The table's invariants, checked under the writer lock: every linked entry is live, is
/// tagged with its key's fragment and is reachable from its home slot (no empty slot in
/// between); `len` and `tombstones` count what the slots hold; a free slot remains.
fn check_invariants<S: BuildHasher>(store: &Store<u32, S>) {
    let writer = store.lock();
    let guard = epoch::pin();
    let table = store.table(&guard);
    let (mut entries, mut tombstones) = (0, 0);
    for (i, slot) in table.slots.iter().enumerate() {
        let slot = slot.load(Ordering::Relaxed, &guard);
        if slot.is_null() {
            tombstones += usize::from(slot.tag() == TOMBSTONE);
            continue;
        }
        entries += 1;
        // SAFETY: linked, and only the writer (held here) unlinks.
        let entry = unsafe { slot.deref() };
        let hash = store.hash(&entry.key);
        assert_eq!(slot.tag(), fragment(hash), "slot {i}: tag");
        assert!(
            !entry.state().is_retired(),
            "slot {i}: a retired entry is linked"
        );
        let mut j = table.home(hash);
        while j != i {
            let on_way = table.slots[j].load(Ordering::Relaxed, &guard);
            assert!(
                !(on_way.is_null() && on_way.tag() != TOMBSTONE),
                "key {} unreachable: slot {j} is empty",
                entry.key
            );
            j = (j + 1) & table.mask;
        }
    }
    assert_eq!(entries, store.len(), "len");
    assert_eq!(tombstones, writer.tombstones, "tombstones");
    assert!(entries + tombstones <= table.mask, "no free slot");
}

/// 20 000 random steps (an insert-or-find with a charge, a clock step, a `retain_recent`)
/// with the invariants checked after each, and a live key never given a second entry.
fn random_steps<S: BuildHasher>(store: &Store<u32, S>, seed: u64, keys: u32) {
    let mut x = seed | 1;
    // xorshift64: deterministic, no dependency.
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut now = 0;
    for step in 0..20_000 {
        match next() % 10 {
            0 => now += next() % 15,
            1 => {
                store.retain_recent(now);
            }
            _ => {
                let key = (next() % u64::from(keys)) as u32;
                let guard = epoch::pin();
                let hash = store.hash(&key);
                let before = store.get(&key, hash, &guard);
                let entry = store.get_or_insert(&key, hash, || SHAPE, now, &guard);
                assert_eq!(entry.key, key);
                if let Some(before) = before.filter(|e| !e.state().is_retired()) {
                    assert!(core::ptr::eq(before, entry), "step {step}: a second entry");
                }
                charge_one(entry.state(), now);
            }
        }
        check_invariants(store);
    }
}

#[test]
fn random_inserts_evictions_and_resizes_keep_the_table_invariants() {
    for seed in 1..20u64 {
        // Three home slots, fragments that differ: long shared probe sequences.
        random_steps(&Store::new(Homes::<3>, usize::MAX), seed, 40);
        random_steps(&Store::new(Homes::<3>, 7), seed, 40);
        random_steps(&Store::new(OneHash, 5), seed, 12);
        random_steps(&Store::new(ahash::RandomState::new(), 30), seed, 200);
    }
}
