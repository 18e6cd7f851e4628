//! Which of a keyed limiter's two stores holds a key, and the moves between them.
//!
//! A limiter whose key type has an inline word ([`Encoding::of`]) and whose default quota
//! fits a line ring ([`Line::fits`]), or else a wide slot (a ring of at most ten buckets
//! that the store would give wide slots: [`Inline::new`]), keeps its keys in an
//! [`InlineTable`]: each key's window in the key's own 64- or 128-byte slot, found without
//! following a pointer. A key lives there while its quota has the table's shape (the
//! default's buckets and granularity, and slot width). Every other key lives in the [`Store`](super::store::Store): a key of
//! another shape (an override), and a key a [`check_all`](crate::check_all) reserves on,
//! whose reservation needs the pending field a line ring has no room for. Such a key is
//! *moved*, in the order of the table's migration: under the table's lock its slot's ring
//! is retired (every later charge on it fails), its state copied into a store entry
//! ([`InlineSlot::copy_to_entry`]) before the entry is published, and only then the slot made a
//! tombstone, so that a lock-free lookup meanwhile finds the retired slot and goes to the
//! lock rather than finding the key in neither store. It stays in the store until it is
//! evicted.
//!
//! # One live window per key
//! Every placement of a key in either store (an insert in the table, an insert or a
//! replacement in the store) runs under the table's writer lock, which looks the key up in
//! both stores first. So a key has at most one live window at a time, as in a limiter of one
//! store:
//! - an insert in the table finds a live store entry of the table's shape and uses it, or
//!   one of another shape and retires it (its counts dropped, as the store drops an entry
//!   of another shape);
//! - an insert in the store moves the key's slot out of the table, copying its counts when
//!   the entry has the table's shape; it makes room only for a key neither store holds.
//!
//! A check that loses a race to a move (its slot retired) goes to the lock and finds the
//! key where it went; the table's own protocol (`keyed::inline`) covers migrations and
//! evictions. Under the lock the key's quota is read again, so a caller that read an older
//! quota does not place the key for it.
//!
//! # One bound
//! `max_keys` bounds the keys of both stores together. A new key at the bound evicts an idle
//! key if the table's sample or the store's has one (sixteen keys each, as a store of its
//! own samples); otherwise it forces out the least recently active key of the table's
//! sample while the table holds a key, else of the store's. The table's keys are forced out
//! first because none holds a `check_all` reservation: a call that makes several new keys at
//! the bound must not force out a key it has just reserved on.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};

use crate::algo::Rule;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::sync::epoch::Guard;
use crate::window::counter;
use crate::window::line::Line;
use crate::window::state::{Shape, State, on_ring};

use super::KeyedLimiter;
use super::entry::Entry;
use super::inline::{InlineSlot, InlineTable, LineSlot, Placing, WIDE_MAX_BUCKETS, WideSlot};
use super::overrides::KeyRule;
use super::word::Encoding;

/// A limiter's inline table, if it has one, of the kind its default quota needs.
pub(super) enum Inline {
    /// No table: the key type has no word, or the default quota's window fits neither kind.
    None,
    /// 64-byte slots of line rings: a quota without marks, a limit of at most 2²¹, at most
    /// ten buckets of at least 2²⁶ ns.
    Line(InlineStore<LineSlot>),
    /// 128-byte slots of three-word rings of wide slots: a quota whose keys the store keeps
    /// in wide slots (a limit above 2²¹, or marks), of at most ten buckets.
    Wide(InlineStore<WideSlot>),
}

/// `$body` on a limiter's inline table of either kind, as `$store`; `$none` without one.
macro_rules! on_inline {
    ($inline:expr, |$store:ident| $body:expr, _ => $none:expr $(,)?) => {
        match $inline {
            $crate::keyed::routing::Inline::Line($store) => $body,
            $crate::keyed::routing::Inline::Wide($store) => $body,
            $crate::keyed::routing::Inline::None => $none,
        }
    };
}
pub(super) use on_inline;

impl Inline {
    /// The inline table of a limiter of `K` keys under `default`: the line kind if `K` has
    /// an inline word and the quota fits a line ring; else the wide kind if the quota's keys
    /// take wide slots in the store (a limit above 2²¹, or marks) and at most
    /// [`WIDE_MAX_BUCKETS`] buckets of any length; else none. A compact quota that misses a
    /// line ring only by its short buckets keeps the store's compact entries (104 bytes at
    /// `N = 10`), smaller than a wide slot.
    pub(super) fn new<K: 'static>(default: &KeyRule, max_keys: usize) -> Inline {
        let Some(encoding) = Encoding::of::<K>() else {
            return Inline::None;
        };
        let Shape::Ring {
            granularity,
            buckets,
            compact,
        } = default.shape
        else {
            return Inline::None;
        };
        if compact
            && !default.rule.counter.is_marked()
            && Line::fits(default.rule.limit, buckets, granularity)
        {
            Inline::Line(InlineStore::new(encoding, default.shape, max_keys))
        } else if !compact && buckets <= WIDE_MAX_BUCKETS {
            Inline::Wide(InlineStore::new(encoding, default.shape, max_keys))
        } else {
            Inline::None
        }
    }

    /// The table's kind: `"line"`, `"wide"` or `"none"` (for the tests).
    #[cfg(test)]
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Inline::Line(_) => "line",
            Inline::Wide(_) => "wide",
            Inline::None => "none",
        }
    }

    /// The keys the table holds (0 without one).
    pub(super) fn len(&self) -> usize {
        on_inline!(self, |inline| inline.len(), _ => 0)
    }

    /// Evicts every key of the table whose window is empty at `now`.
    pub(super) fn retain_recent(&self, now: u64) -> usize {
        on_inline!(self, |inline| inline.retain_recent(now), _ => 0)
    }

    /// Keys evicted while idle, and keys forced out at `max_keys`.
    pub(super) fn evictions(&self) -> (u64, u64) {
        on_inline!(self, |inline| inline.table.evictions(), _ => (0, 0))
    }
}

/// A limiter's inline table of slots of kind `S`, with what tells which keys it holds.
pub(super) struct InlineStore<S: InlineSlot> {
    pub(super) table: InlineTable<S>,
    encoding: Encoding,
    /// The shape of the keys the table holds: the default's ring (compact slots for the
    /// line kind, wide ones for the wide kind).
    shape: Shape,
    granularity: u64,
    buckets: u64,
}

impl<S: InlineSlot> InlineStore<S> {
    /// A table of keys of `shape`, a ring's whose window the kind holds.
    fn new(encoding: Encoding, shape: Shape, max_keys: usize) -> InlineStore<S> {
        let Shape::Ring {
            granularity,
            buckets,
            ..
        } = shape
        else {
            unreachable!("an inline table is made for a ring's shape")
        };
        InlineStore {
            table: InlineTable::with_max_keys(buckets, max_keys),
            encoding,
            shape,
            granularity,
            buckets,
        }
    }

    /// `key`'s word if a key under `keyed` lives in the table. Only an override's shape is
    /// compared: `default`, the limiter's default rule, has the table's shape (the table is
    /// made for it, and it never changes), a pointer comparison. The buckets of the shape
    /// are the table's, and a compact shape implies no marks and a limit of at most 2²¹, so
    /// the quota fits the table's kind. (A borrowed form whose `Hash` breaks the `Borrow`
    /// contract has no word: it goes to the store, where a `HashMap` would not find its
    /// owner either.)
    #[inline]
    pub(super) fn word<Q: Hash + ?Sized>(
        &self,
        keyed: &KeyRule,
        default: &KeyRule,
        key: &Q,
    ) -> Option<u64> {
        debug_assert!(default.shape == self.shape);
        if core::ptr::eq(keyed, default) || keyed.shape == self.shape {
            self.encoding.word(key)
        } else {
            None
        }
    }

    /// The keys the table holds.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Evicts every key of the table whose window is empty at `now`.
    pub(super) fn retain_recent(&self, now: u64) -> usize {
        self.table.retain_recent(self.granularity, now)
    }
}

/// Where a key's window is.
enum Place<'g, K, T> {
    /// In its slot of the inline table.
    Line(&'g T),
    /// In a slot just inserted for it under the table's lock, at this clock reading: the
    /// check judges at it, a reading made after every eviction the lock saw.
    Inserted(&'g T, u64),
    /// In the store, moved there by a `check_all`.
    Entry(&'g Entry<K>),
    /// The key's quota no longer has the table's shape: the store's path decides.
    Elsewhere,
}

impl<K, C, S> KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// A check of `n` (valid under `rule`) on a key of the inline table's shape whose word
    /// is `word`, on its ring's fast path ([`InlineSlot::charge_fast`]): the decision,
    /// or what the general path ([`KeyedLimiter::acquire_line_slow`]) goes on from (the key's
    /// live slot and the clock reading judged at, if the lookup found one). Apart from the
    /// general path's, so that the caller returns this decision straight from the registers
    /// it was built in: where the two paths' decisions met in one stack slot, the caller
    /// copied it with wide loads over narrow stores (`sync::copy_by_words`).
    #[inline]
    pub(super) fn acquire_line<'g, T: InlineSlot>(
        &self,
        inline: &'g InlineStore<T>,
        word: u64,
        hash: u64,
        n: u64,
        rule: &Rule,
        guard: &'g Guard,
    ) -> Result<Decision, Option<(&'g T, u64)>> {
        let slot = inline.table.find(word, hash, guard).ok_or(None)?;
        // One reading for the whole check, passed as a constant: through a closure the
        // clock was called out of line (`<&F as Fn>::call`), a tenth of an allowed check.
        let t = self.clock.now().0;
        slot.charge_fast(inline.buckets, &rule.counter, t, n)
            .ok_or(Some((slot, t)))
    }

    /// [`KeyedLimiter::acquire_line`]'s general path: on the slot it `found` (at the reading
    /// it judged at) through the ring's general loop, else for a key without a live slot the
    /// lock-free lookup found: moved, new, or retired under the check. `None` if the key's
    /// quota changed shape meanwhile (the store's path then decides). Out of line, so that
    /// the common case stays small.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn acquire_line_slow<Q, T: InlineSlot>(
        &self,
        inline: &InlineStore<T>,
        key: &Q,
        word: u64,
        hash: u64,
        n: u64,
        rule: &Rule,
        guard: &Guard,
        found: Option<(&T, u64)>,
    ) -> Option<Decision>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        if let Some((slot, t)) = found {
            let decided = slot.charge_loop(inline.buckets, &rule.counter, || t, n);
            if decided.is_some() {
                return decided;
            }
        }
        let now = || self.clock.now().0;
        let mut place = match self.moved(inline, key, hash, guard) {
            Some(entry) => Place::Entry(entry),
            None => self.place_line(inline, key, word, hash, guard),
        };
        loop {
            let decided = match place {
                Place::Line(slot) => slot.charge(inline.buckets, &rule.counter, now, n),
                Place::Inserted(slot, t) => slot.charge(inline.buckets, &rule.counter, || t, n),
                Place::Entry(entry) => on_ring!(entry.state(),
                    |_, ring| counter::charge(ring, &rule.counter, now, n),
                    _ => return None,
                ),
                Place::Elsewhere => return None,
            };
            if decided.is_some() {
                return decided;
            }
            // Retired: frozen by a migration, evicted, or moved. Under the lock, the key's
            // window as it is now.
            place = self.place_line(inline, key, word, hash, guard);
        }
    }

    /// `key`'s store entry of the table's shape, if a `check_all` moved it there (lock-free).
    /// An empty store is not probed: a key moved since its count was read is found under the
    /// lock.
    #[inline]
    fn moved<'g, Q, T: InlineSlot>(
        &self,
        inline: &InlineStore<T>,
        key: &Q,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<&'g Entry<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.stored(key, hash, guard)
            .filter(|entry| entry.fits(inline.shape))
    }

    /// `key`'s store entry, if any, with no probe of an empty store: beside a table the store
    /// holds only moved keys and overrides of another shape, and is mostly empty. Every
    /// insert in the store holds the table's lock, so under that lock an empty store stays
    /// empty.
    #[inline]
    fn stored<'g, Q>(&self, key: &Q, hash: u64, guard: &'g Guard) -> Option<&'g Entry<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.store.len() == 0 {
            return None;
        }
        self.store.get(key, hash, guard)
    }

    /// The table's writer path: `key`'s window, under the table's lock, in its slot
    /// (inserted if the key has none anywhere) or in the store entry a move left.
    #[cold]
    fn place_line<'g, Q, T: InlineSlot>(
        &'g self,
        inline: &'g InlineStore<T>,
        key: &Q,
        word: u64,
        hash: u64,
        guard: &'g Guard,
    ) -> Place<'g, K, T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut placing = inline.table.lock();
        if self.rule_for(key, guard).shape != inline.shape {
            return Place::Elsewhere;
        }
        if let Some(slot) = placing.find(word, hash, guard) {
            return Place::Line(slot);
        }
        // A retired entry is on its way out (an idle eviction by `retain_recent`, the only
        // writer that runs without this lock): the key has no window.
        let stored = self.stored(key, hash, guard);
        if let Some(entry) = stored.filter(|entry| !entry.state().is_retired()) {
            if entry.fits(inline.shape) {
                return Place::Entry(entry);
            }
            // Made under a quota of another shape: its counts are dropped, as the store
            // drops an entry whose quota changed shape.
            self.store.remove(key, hash, guard);
        }
        let now = self.clock.now().0;
        self.make_room(inline, &mut placing, now, guard);
        let others = self.store.len();
        let slot = placing.insert_absent(word, hash, inline.granularity, now, others, guard);
        Place::Inserted(slot, now)
    }

    /// The store's writer path in a limiter with an inline table: `key`'s live store entry
    /// of its quota's shape, placed under the table's lock. A slot the key has in the table
    /// is moved: its counts copied into the entry when the entry has the table's shape (a
    /// key a `check_all` reserves on), dropped when the quota changed shape.
    pub(super) fn insert_beside<'g, Q, T: InlineSlot>(
        &self,
        inline: &InlineStore<T>,
        key: &Q,
        hash: u64,
        guard: &'g Guard,
    ) -> &'g Entry<K>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let mut placing = inline.table.lock();
        let retired = inline
            .encoding
            .word(key)
            .and_then(|word| placing.retire(word, hash, guard));
        self.store_beside(inline, &mut placing, key, hash, retired, guard)
    }

    /// `key`'s store entry, made under the table's lock (`placing`) from its slot
    /// `retired` (its ring retired by [`Placing::retire`]) if it had one.
    ///
    /// The order is the migration's: the ring frozen, the entry published, and only then the
    /// slot a tombstone, so that a lock-free lookup in between finds the retired slot, not
    /// the key absent from both stores, and goes to the lock. Room is made only for a key
    /// the store does not hold either: a second first check of a key, or a replacement of
    /// an entry of another shape, adds no key.
    fn store_beside<'g, Q, T: InlineSlot>(
        &self,
        inline: &InlineStore<T>,
        placing: &mut Placing<'_, T>,
        key: &Q,
        hash: u64,
        retired: Option<&T>,
        guard: &'g Guard,
    ) -> &'g Entry<K>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = self.clock.now().0;
        let shape = self.rule_for(key, guard).shape;
        // Every insert in the store holds this lock: a key it holds now, it holds until the
        // insert below (or it is retired and unlinked, which only frees a place).
        let stored = self.stored(key, hash, guard).is_some();
        if retired.is_none() && !stored {
            self.make_room(inline, placing, now, guard);
        }
        let copied = retired.filter(|_| shape == inline.shape);
        let init = |words: &[_]| {
            if let Some(slot) = copied {
                slot.copy_to_entry(inline.buckets, words);
            }
        };
        // A moved key is counted once: its slot is still live until it is buried.
        let others = placing.len() - usize::from(retired.is_some());
        let entry = self
            .store
            .get_or_insert_with(key, hash, || shape, now, others, init, guard);
        if let Some(slot) = retired {
            placing.bury(slot, guard);
        }
        entry
    }

    /// Frees one place for a new key if the two stores hold `max_keys` together: an idle
    /// key of the table's sample, else of the store's, else the table's least recently
    /// active, else the store's (see "One bound").
    ///
    /// Both stores' locks are held, so neither store's `retain_recent` evicts meanwhile: a
    /// count read before it had made room would force a key out for nothing.
    fn make_room<T: InlineSlot>(
        &self,
        inline: &InlineStore<T>,
        placing: &mut Placing<'_, T>,
        now: u64,
        guard: &Guard,
    ) {
        // Below the bound without the store's lock: without the table's lock (held) the
        // store's count only falls.
        if placing.len() + self.store.len() < self.store.max_keys() {
            return;
        }
        let mut store = self.store.room();
        if placing.len() + store.len() < self.store.max_keys() {
            return;
        }
        let g = inline.granularity;
        let _ = placing.make_room(g, now, false, guard)
            || store.make_room(now, false, guard)
            || placing.make_room(g, now, true, guard)
            || store.make_room(now, true, guard);
    }

    /// `key`'s store entry of `keyed`'s shape, moved out of the table if it is there (a key
    /// a `check_all` reserves on); `None` if it is in neither store.
    pub(super) fn move_existing<'g, Q>(
        &self,
        keyed: &KeyRule,
        key: &Q,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<&'g Entry<K>>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            let word = inline.word(keyed, &self.default, key)?;
            inline.table.find(word, hash, guard)?;
            // Under the lock the key may be gone (evicted since): then there is nothing to
            // move, and the caller defers the key rather than making it (and perhaps room).
            let mut placing = inline.table.lock();
            let retired = placing.retire(word, hash, guard)?;
            let entry = self.store_beside(inline, &mut placing, key, hash, Some(retired), guard);
            entry.fits(keyed.shape).then_some(entry)
        }, _ => None)
    }

    /// What a check of `n` on a key of the table's shape would decide now, if the key has a
    /// slot; `None` if it has none (the store's path then decides: a moved key, or a fresh
    /// window).
    pub(super) fn peek_line<Q>(
        &self,
        keyed: &KeyRule,
        key: &Q,
        hash: u64,
        n: u64,
        guard: &Guard,
    ) -> Option<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            let word = inline.word(keyed, &self.default, key)?;
            let now = || self.clock.now().0;
            let peek = |slot: &_| InlineSlot::peek(slot, inline.buckets, &keyed.rule.counter, now, n);
            let slot = inline.table.find(word, hash, guard)?;
            // Retired (frozen by a migration, evicted, or moved): under the lock a slot found
            // is live.
            peek(slot).or_else(|| inline.table.lock().find(word, hash, guard).and_then(peek))
        }, _ => None)
    }

    /// Charges `x` unconditionally (a report, debt allowed) to a key of the table's shape
    /// wherever its window is: its slot, placed if it has none, or its entry if a
    /// `check_all` moved it. The units charged and the decision a peek of cost 1 makes after
    /// it; `None` if the key's quota is not of the table's shape (the store's path records).
    pub(super) fn record_line<Q>(
        &self,
        keyed: &KeyRule,
        key: &Q,
        hash: u64,
        x: u64,
        guard: &Guard,
    ) -> Option<(u64, Decision)>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            let word = inline.word(keyed, &self.default, key)?;
            let (rule, ceiling) = (&keyed.rule.counter, keyed.rule.quota.usage_ceiling());
            let now = || self.clock.now().0;
            let mut place = match (inline.table.find(word, hash, guard), self.moved(inline, key, hash, guard)) {
                (Some(slot), _) => Place::Line(slot),
                (None, Some(entry)) => Place::Entry(entry),
                (None, None) => self.place_line(inline, key, word, hash, guard),
            };
            loop {
                let recorded = match place {
                    Place::Line(slot) => slot.record(inline.buckets, rule, now, x, ceiling),
                    Place::Inserted(slot, t) => slot.record(inline.buckets, rule, || t, x, ceiling),
                    Place::Entry(entry) => entry.state().record(&keyed.rule, now, x),
                    Place::Elsewhere => return None,
                };
                if recorded.is_some() {
                    return recorded;
                }
                // Retired: as in `acquire_line_slow`, under the lock the key's window as it
                // is now.
                place = self.place_line(inline, key, word, hash, guard);
            }
        }, _ => None)
    }

    /// Frees up to `n` units of a key of the table's shape; `None` if it has no slot.
    pub(super) fn refund_line<Q>(&self, keyed: &KeyRule, key: &Q, hash: u64, n: u64) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            let word = inline.word(keyed, &self.default, key)?;
            let now = || self.clock.now().0;
            inline.table.refund(word, hash, &keyed.rule.counter, now, n)
        }, _ => None)
    }

    /// The total cost admitted to `key`'s slot (wrapping at 2²⁴ in a line slot, 2³² in a
    /// wide one), if it has one.
    pub(super) fn admitted_line<Q>(
        &self,
        keyed: &KeyRule,
        key: &Q,
        hash: u64,
        guard: &Guard,
    ) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            let word = inline.word(keyed, &self.default, key)?;
            let slot = inline.table.find(word, hash, guard)?;
            Some(slot.admitted(inline.buckets))
        }, _ => None)
    }
}

#[cfg(test)]
mod tests;
