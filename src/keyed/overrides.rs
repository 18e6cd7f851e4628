//! Per-key quotas, published while checks run.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use std::collections::HashMap;

use crate::algo::Rule;
use crate::quota::Quota;
use crate::sync::epoch::{self, Atomic, Guard, Owned};
use crate::sync::{self, Mutex, Ordering};
use crate::window::state::Shape;

/// A quota's rule with the shape a key's state needs under it, made once when the quota is
/// set: a keyed check tests its entry against `shape` instead of deriving the shape from the
/// rule each time.
#[derive(Clone)]
pub(super) struct KeyRule {
    pub(super) rule: Rule,
    pub(super) shape: Shape,
}

impl KeyRule {
    pub(super) fn new(quota: Quota) -> KeyRule {
        let rule = Rule::new(quota);
        KeyRule {
            shape: Shape::of(&rule),
            rule,
        }
    }
}

/// Per-key quotas: an immutable map, replaced whole (copy on write) and published through
/// an epoch-managed pointer (`crate::sync::epoch`), so checks read it with one Acquire load
/// and never wait for an update. Null when empty, so limiters without overrides pay one load
/// and a branch per check.
pub(super) struct Overrides<K, S> {
    map: Atomic<HashMap<K, KeyRule, S>>,
    /// Serializes updates, so none is lost to a concurrent one.
    writer: Mutex<()>,
}

impl<K, S> Overrides<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    pub(super) fn new() -> Self {
        Overrides {
            map: Atomic::null(),
            writer: Mutex::new(()),
        }
    }

    #[inline]
    pub(super) fn get<'g, Q>(&'g self, key: &Q, guard: &'g Guard) -> Option<&'g KeyRule>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Acquire: pairs with the Release in `update`, so the map's contents are visible.
        let map = self.map.load(Ordering::Acquire, guard);
        if map.is_null() {
            return None;
        }
        // SAFETY: non-null maps are freed by `defer_destroy` after being replaced, so not
        // before `guard` is dropped.
        unsafe { map.deref() }.get(key)
    }

    /// Whether no key has an override: a look at the map's pointer, with no epoch pinned.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        // SAFETY: the unprotected guard only loads the pointer, which is compared with null
        // and never dereferenced.
        let guard = unsafe { epoch::unprotected() };
        // Relaxed: only the pointer's null-ness is read, never the map it publishes.
        self.map.load(Ordering::Relaxed, guard).is_null()
    }

    /// Publishes a copy of the map changed by `change`.
    pub(super) fn update(&self, hasher: &S, change: impl FnOnce(&mut HashMap<K, KeyRule, S>)) {
        // Pinned before the lock: an outermost pin may collect, running other objects' drops,
        // which must not run under this lock.
        let guard = epoch::pin();
        let _writer = sync::lock(&self.writer);
        let old = self.map.load(Ordering::Acquire, &guard);
        // SAFETY: as in `get`.
        let mut map = match unsafe { old.as_ref() } {
            Some(map) => map.clone(),
            None => HashMap::with_hasher(hasher.clone()),
        };
        change(&mut map);
        let new = if map.is_empty() {
            epoch::Shared::null()
        } else {
            Owned::new(map).into_shared(&guard)
        };
        // Release: pairs with the Acquire in `get`, publishing the new map's contents.
        self.map.store(new, Ordering::Release);
        if !old.is_null() {
            // SAFETY: unlinked just now, under the writer lock; readers that loaded it are
            // pinned.
            unsafe { guard.defer_destroy(old) };
        }
    }
}

impl<K, S> Drop for Overrides<K, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader can hold the map.
        let guard = unsafe { epoch::unprotected() };
        let map = self.map.load(Ordering::Relaxed, guard);
        if !map.is_null() {
            // SAFETY: as above; the current map is owned by `self`.
            drop(unsafe { map.into_owned() });
        }
    }
}
