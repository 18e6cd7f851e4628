//! The builder of a keyed limiter: its clock, its hasher and its bound on keys.

use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

use crate::clock::{Clock, QuantaClock};
use crate::quota::Quota;

use super::overrides::{KeyRule, Overrides};
use super::routing::Inline;
use super::store::Store;
use super::{DefaultHashBuilder, KeyedLimiter};

/// Builds a [`KeyedLimiter`]; made by [`KeyedLimiter::builder`].
///
/// ```
/// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
/// use std::time::Duration;
///
/// let limiter = KeyedLimiter::<String, _, _>::builder(Quota::new(10, Duration::from_secs(1))?)
///     .clock(ManualClock::new())
///     .max_keys(1_000)
///     .build();
/// assert!(limiter.check("user-1").is_allowed());
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedLimiterBuilder<K, C = QuantaClock, S = DefaultHashBuilder> {
    quota: Quota,
    clock: C,
    hasher: S,
    max_keys: usize,
    key: PhantomData<fn() -> K>,
}

impl<K> KeyedLimiterBuilder<K> {
    /// A builder of a limiter giving every key `quota`, with the defaults: the default
    /// clock and hasher, no bound on keys.
    pub(super) fn new(quota: Quota) -> Self {
        KeyedLimiterBuilder {
            quota,
            clock: QuantaClock::new(),
            hasher: DefaultHashBuilder::new(),
            max_keys: usize::MAX,
            key: PhantomData,
        }
    }
}

impl<K, C, S> KeyedLimiterBuilder<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Reads time from `clock` (default: [`QuantaClock`]).
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<String>::builder(Quota::new(1, Duration::from_secs(1))?).clock(clock.clone()).build();
    /// assert!(limiter.check("k").is_allowed());
    /// clock.advance(Duration::from_millis(1100));
    /// assert!(limiter.check("k").is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedLimiterBuilder<K, C2, S> {
        KeyedLimiterBuilder {
            quota: self.quota,
            clock,
            hasher: self.hasher,
            max_keys: self.max_keys,
            key: self.key,
        }
    }

    /// Hashes keys with `hasher` (default: [`DefaultHashBuilder`], ahash with a random state).
    /// Keys chosen by untrusted parties need a keyed hasher, as the default is.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::builder(Quota::new(1, Duration::from_secs(1))?)
    ///     .hasher(std::collections::hash_map::RandomState::new())
    ///     .build();
    /// assert!(limiter.check("k").is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn hasher<S2>(self, hasher: S2) -> KeyedLimiterBuilder<K, C, S2>
    where
        S2: BuildHasher + Clone + Send + Sync + 'static,
    {
        KeyedLimiterBuilder {
            quota: self.quota,
            clock: self.clock,
            hasher,
            max_keys: self.max_keys,
            key: self.key,
        }
    }

    /// Holds at most `max_keys` keys (at least 1); see [`KeyedLimiter`]'s "Memory" for what
    /// happens at the bound. Default: unbounded.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64>::builder(Quota::new(1, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new())
    ///     .max_keys(10)
    ///     .build();
    /// for key in 0..100 {
    ///     limiter.check(&key);
    /// }
    /// assert!(limiter.len() <= 10);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn max_keys(self, max_keys: usize) -> Self {
        KeyedLimiterBuilder { max_keys, ..self }
    }

    /// The limiter.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u8>::builder(Quota::new(1, Duration::from_secs(1))?).build();
    /// assert!(limiter.check(&0u8).is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn build(self) -> KeyedLimiter<K, C, S>
    where
        C: Clock,
    {
        let default = KeyRule::new(self.quota);
        KeyedLimiter {
            inline: Inline::new::<K>(&default, self.max_keys),
            default,
            store: Store::new(self.hasher, self.max_keys),
            overrides: Overrides::new(),
            clock: self.clock,
        }
    }
}

impl<K, C, S> fmt::Debug for KeyedLimiterBuilder<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}
