//! The keyed limiter: one window per key, in a lock-free store with bounded memory.
//!
//! Each key's state is the one its quota's algorithm keeps (a snapshot ring, an exact log or
//! a GCRA cell: [`State`]), judged by the same [`Rule`] a direct limiter uses, so a key's
//! decisions are exactly those of a [`SlidingWindow`](crate::SlidingWindow) of the key's
//! quota. Each state documents the retirement protocol that lets an entry be freed without
//! losing an admission.
//!
//! - [`inline`]: the inline table, each key's window in its 64-byte slot, for key types with
//!   a word ([`word`]) under a quota that fits a line ring (`window::line`); [`routing`]:
//!   which store holds a key, and the moves between the two.
//! - [`store`]: the lock-free table of every other key, its reclamation and its eviction;
//!   [`entry`]: one key's allocation; [`pool`]: the memory entries and tables live in.
//! - [`builder`]: [`KeyedLimiterBuilder`]. [`overrides`]: per-key quotas.
//! - [`key_limit`]: [`KeyLimit`], one key as a limit of [`check_all`](crate::check_all).

mod builder;
pub(crate) mod entry;
mod eviction;
pub(crate) mod inline;
mod key_limit;
mod overrides;
mod pool;
mod routing;
pub(crate) mod store;
pub(crate) mod word;

pub use builder::KeyedLimiterBuilder;
pub use key_limit::KeyLimit;

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::time::Duration;

use crate::algo::{Op, Rule};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::quota::Quota;
use crate::sync;
use crate::sync::epoch::{self, Guard};
use crate::usage::Usage;
use crate::wait;
use crate::window::counter;
use crate::window::state::{State, on_ring};

use entry::Entry;
use overrides::{KeyRule, Overrides};
use routing::{Inline, on_inline};
use store::Store;

/// The default hasher of a [`KeyedLimiter`]: ahash, with a random state per limiter, so
/// that an attacker who controls keys cannot predict collisions (HashDoS).
pub type DefaultHashBuilder = ahash::RandomState;

/// A lock-free sliding-window rate limiter with one window per key.
///
/// `Send + Sync`: share it by reference or in an `Arc`. Checking a key the limiter already
/// holds takes no lock and writes nothing shared but that key's own window; a key's first
/// check inserts it under a lock that checks of held keys never wait for (first checks of
/// new keys take turns).
///
/// Every key gets the default quota unless it has an override ([`KeyedLimiter::quota_for`]).
/// Decisions are those of a [`SlidingWindow`](crate::SlidingWindow) of the key's quota.
///
/// # Memory
/// A key whose window is empty is indistinguishable from a key never seen, and is evicted
/// as inserts pass by (and by [`KeyedLimiter::retain_recent`]); eviction of such a key never
/// changes a decision. With [`KeyedLimiterBuilder::max_keys`] the store holds at most that
/// many keys: a new key arriving at the bound evicts an idle key if one of a sample of 16 is
/// idle, else the least recently active key of the sample (approximate LRU). That *forced*
/// eviction forgets the evicted key's admissions — the key may be admitted up to its limit
/// again — and is counted by [`KeyedLimiter::forced_evictions`]. Without `max_keys` the
/// store is unbounded.
///
/// Keys are `'static`: evicted keys are dropped by the epoch collector, possibly after the
/// limiter itself.
///
/// **Keys kept inline.** Keys of the integer types up to 64 bits, `char`, `bool` and
/// [`Ipv4Addr`](std::net::Ipv4Addr), under a Strict, Weighted or fixed-window quota of at
/// most ten buckets of at least 2²⁶ ns (about 67 ms: a one-second window of ten buckets), a
/// limit of at most 2²¹ and no marks, keep their whole window (key, hash and `N + 1`
/// snapshots) in one 64-byte slot of a table kept at load 1/8 or below up to 2¹⁶ slots (4
/// MiB) and 2/3 or below beyond, found with one cache miss: 96 to 192 bytes per key in a
/// large table, 101 at a million keys. Under a quota of at most ten buckets (of any length)
/// whose limit is above 2²¹ (up to the largest, 2³¹ − 1) or that keeps marks, they keep it in
/// one 128-byte slot of two cache lines instead, the general store's ring of 32-bit
/// snapshots without the pointer to it: 192 to 384 bytes per key in a large table. Such a
/// key moves to the
/// general store, with its counts, once a [`check_all`](crate::check_all) reserves on it
/// (a reservation needs a field the slot has no room for), and stays there until it is
/// evicted; a key whose override has another shape lives there too. Decisions are the same
/// in both.
///
/// Entries of up to 576 bytes (a ring of up to 60 buckets on a key of up to 8 bytes) come from
/// a pool shared by every keyed limiter in the process, in chunks that are advised to the
/// kernel as huge pages once a size has taken 4 MiB (Linux, with transparent huge pages
/// `madvise` or `always`); tables of 2 MiB and more are advised the same way. An evicted
/// key's memory is kept for the next key of its size, never returned to the system, as an
/// allocator's arena keeps what it grew to.
///
/// # Borrowed keys
/// As with [`HashMap::get`](std::collections::HashMap::get), every method that takes a key
/// takes any borrowed form `&Q` of it (`K: Borrow<Q>`): a `KeyedLimiter<String>` is checked
/// with a `&str`, a `KeyedLimiter<Vec<u8>>` with a `&[u8]`. `Q`'s `Hash` and `Eq` must agree
/// with `K`'s, as `Borrow` requires. A check of a key the limiter holds allocates nothing; a
/// key new to the limiter is stored as `K::from(key.to_owned())` (so an `Arc<str>` or
/// `Box<str>` key can be checked with a `&str` too). Since the key's type is no longer read
/// from the argument, a limiter whose key type nothing else fixes names it:
/// `KeyedLimiter::<String>::new(quota)`.
///
/// ```
/// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
/// assert!(limiter.check("alice").is_allowed());
/// assert!(limiter.check("alice").is_allowed());
/// assert!(!limiter.check("alice").is_allowed());
/// assert!(limiter.check("bob").is_allowed()); // every key has its own window
///
/// clock.advance(Duration::from_millis(1100));
/// assert!(limiter.check("alice").is_allowed());
/// # Ok::<(), slidegate::ConfigError>(())
/// ```
pub struct KeyedLimiter<K, C = QuantaClock, S = DefaultHashBuilder>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// The rule of every key without an override.
    default: KeyRule,
    store: Store<K, S>,
    /// The inline table, if the key type and the default quota fit one (see `routing`).
    inline: Inline,
    overrides: Overrides<K, S>,
    clock: C,
}

impl<K> KeyedLimiter<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A limiter giving every key `quota`, on the default clock, with no bound on keys.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(100, Duration::from_secs(60))?);
    /// assert!(limiter.check("10.0.0.1").is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        KeyedLimiter::builder(quota).build()
    }

    /// A builder for a limiter giving every key `quota`: choose the clock, the hasher and a
    /// bound on keys.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64>::builder(Quota::new(10, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new())
    ///     .hasher(std::collections::hash_map::RandomState::new())
    ///     .max_keys(100_000)
    ///     .build();
    /// assert!(limiter.check(&42u64).is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn builder(quota: Quota) -> KeyedLimiterBuilder<K> {
        KeyedLimiterBuilder::new(quota)
    }
}

impl<K, C> KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A limiter giving every key `quota`, reading time from `clock`, with no bound on keys.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, ManualClock::new());
    /// assert!(limiter.check(&1).is_allowed());
    /// assert!(!limiter.check(&1).is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        KeyedLimiter::builder(quota).clock(clock).build()
    }
}

impl<K, C, S> KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Checks and, if allowed, charges a cost of 1 to `key`, given as `K` or any borrowed form
    /// of it (see [Borrowed keys](KeyedLimiter#borrowed-keys)).
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(2, Duration::from_secs(60))?);
    /// assert_eq!(limiter.check("k").remaining(), 1);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.acquire(key, 1)
    }

    /// Checks and, if allowed, charges a cost of `n` to `key`. A cost of zero or above the
    /// key's limit is an error, not a denial.
    ///
    /// ```
    /// use slidegate::{CostError, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(10, Duration::from_secs(1))?);
    /// assert!(limiter.check_n("k", 7)?.is_allowed());
    /// assert!(!limiter.check_n("k", 4)?.is_allowed());
    /// assert_eq!(limiter.check_n("k", 0), Err(CostError::Zero));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, n: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.acquire(key, n)
    }

    /// What a check of cost 1 on `key` would decide now, without charging anything. A key
    /// the limiter does not hold is not inserted: it reads as a fresh window.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(5, Duration::from_secs(1))?);
    /// assert_eq!(limiter.peek("k").remaining(), 5);
    /// assert_eq!(limiter.len(), 0);
    /// limiter.check("k");
    /// assert_eq!(limiter.peek("k").remaining(), 4);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.judge_only(key, 1, &epoch::pin())
            .expect("a cost of 1 is within every limit")
    }

    /// What a check of cost `n` on `key` would decide now, without charging anything or
    /// keeping the key; the same meaning as [`SlidingWindow::peek_n`](crate::SlidingWindow::peek_n).
    /// A cost of zero or above the key's limit is an error, as for `check_n`.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(10, Duration::from_secs(60))?);
    /// limiter.check_n("k", 7)?;
    /// assert!(limiter.peek_n("k", 3)?.is_allowed());
    /// assert!(!limiter.peek_n("k", 4)?.is_allowed());
    /// assert!(limiter.peek_n("k", 11).is_err());
    /// assert_eq!(limiter.peek("k").remaining(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n<Q>(&self, key: &Q, n: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.judge_only(key, n, &epoch::pin())
    }

    /// Gives back up to `n` units of room to `key` now, returning how many were freed; the
    /// same meaning as [`SlidingWindow::refund`](crate::SlidingWindow::refund). A key the
    /// limiter does not hold (never seen, or evicted) has nothing to give back: 0.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(2, Duration::from_secs(1))?, ManualClock::new());
    /// limiter.check_n("k", 2)?;
    /// assert!(!limiter.check("k").is_allowed());
    /// assert_eq!(limiter.refund("k", 1), 1);
    /// assert!(limiter.check("k").is_allowed());
    /// assert_eq!(limiter.refund("unknown", 1), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, n: u64) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = &epoch::pin();
        let keyed = self.rule_for(key, guard);
        let hash = self.store.hash(key);
        if let Some(freed) = self.refund_line(keyed, key, hash, n) {
            return freed;
        }
        let KeyRule { rule, shape } = keyed;
        let now = || self.clock.now().0;
        self.store
            .get(key, hash, guard)
            .filter(|e| e.fits(*shape))
            .and_then(|e| e.state().refund(rule, now, n))
            .unwrap_or(0)
    }

    /// Charges `n` units of usage that already happened to `key`, whatever its window
    /// holds: past the limit as debt. Never denies; see
    /// [`SlidingWindow::record`](crate::SlidingWindow::record).
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64, _>::with_clock(Quota::new(1000, Duration::from_secs(60))?, ManualClock::new());
    /// // Tenant 7's response used 1 500 tokens of its 1 000 a minute.
    /// let usage = limiter.record(&7, 1500);
    /// assert_eq!((usage.charged(), usage.remaining()), (1500, 0));
    /// assert!(!limiter.check(&7).is_allowed());
    /// assert!(limiter.check(&8).is_allowed());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn record<Q>(&self, key: &Q, n: u64) -> Usage
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let guard = &epoch::pin();
        let hash = self.store.hash(key);
        let keyed = self.rule_for(key, guard);
        let usage = |(charged, after)| Usage::new(charged, 0, n - charged, after);
        if let Some(recorded) = self.record_line(keyed, key, hash, n, guard) {
            return usage(recorded);
        }
        let now = || self.clock.now().0;
        let mut lookup = true;
        loop {
            let (entry, rule) = self
                .entry_for(key, hash, 1, lookup, guard)
                .expect("a cost of 1 is valid under every quota");
            match entry.state().record(rule, now, n) {
                Some(recorded) => return usage(recorded),
                // Retired: as in `acquire`, the writer path sees the store as it is now.
                None => lookup = false,
            }
        }
    }

    /// Blocks until cost `n` is admitted to `key`, then returns that decision; see
    /// [`SlidingWindow::wait`](crate::SlidingWindow::wait).
    ///
    /// ```
    /// use slidegate::{clock::{Clock, ManualClock, Nanos}, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, clock.clone());
    /// limiter.wait("api.example.com", 1)?;
    /// limiter.wait("api.example.com", 1)?;
    /// assert_eq!(clock.now(), Nanos(1_100_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait<Q>(&self, key: &Q, n: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.wait_with_jitter(key, n, Duration::ZERO)
    }

    /// [`KeyedLimiter::wait`] with a random jitter of up to `jitter` added to each wait.
    ///
    /// ```
    /// use slidegate::{clock::{Clock, ManualClock}, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<u64, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, clock.clone());
    /// limiter.wait_with_jitter(&1, 1, Duration::from_millis(5))?;
    /// limiter.wait_with_jitter(&1, 1, Duration::from_millis(5))?;
    /// assert!((1_100_000_000..=1_105_000_000).contains(&clock.now().as_u64()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_with_jitter<Q>(
        &self,
        key: &Q,
        n: u64,
        jitter: Duration,
    ) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        wait::block(&self.clock, || self.acquire(key, n), jitter)
    }

    /// Waits asynchronously, on tokio's timer, until cost `n` is admitted to `key` (feature
    /// `tokio`); see [`SlidingWindow::until_ready`](crate::SlidingWindow::until_ready).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slidegate::{clock::{Clock, Nanos, TokioClock}, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, TokioClock::new());
    /// limiter.until_ready("host", 1).await?;
    /// limiter.until_ready("host", 1).await?;
    /// assert_eq!(limiter.clock().now(), Nanos(1_100_000_000));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready<Q>(&self, key: &Q, n: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.until_ready_with_jitter(key, n, Duration::ZERO).await
    }

    /// [`KeyedLimiter::until_ready`] with a random jitter of up to `jitter` added to each
    /// wait (feature `tokio`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slidegate::{clock::{Clock, TokioClock}, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64, _>::with_clock(Quota::new(1, Duration::from_secs(1))?, TokioClock::new());
    /// limiter.until_ready_with_jitter(&7, 1, Duration::from_millis(5)).await?;
    /// limiter.until_ready_with_jitter(&7, 1, Duration::from_millis(5)).await?;
    /// assert!(limiter.clock().now().as_u64() >= 1_100_000_000);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready_with_jitter<Q>(
        &self,
        key: &Q,
        n: u64,
        jitter: Duration,
    ) -> Result<Decision, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        wait::ready(&self.clock, || self.acquire(key, n), jitter).await
    }

    /// The number of keys held, idle keys not yet evicted included.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64>::new(Quota::new(5, Duration::from_secs(1))?);
    /// limiter.check(&1);
    /// limiter.check(&2);
    /// limiter.check(&1);
    /// assert_eq!(limiter.len(), 2);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.store.len() + self.inline.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<&str>::new(Quota::new(5, Duration::from_secs(1))?);
    /// assert!(limiter.is_empty());
    /// limiter.check(&"k");
    /// assert!(!limiter.is_empty());
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evicts every key whose window is empty now, returning how many. Such keys are
    /// indistinguishable from keys never seen, so no decision changes. (A fixed-window key
    /// counts as empty once the sliding window of its one bucket is: a window after its own,
    /// so that a quota override to Strict or Weighted, which has the same buckets and keeps
    /// the key's counts, still sees them.) It runs in chunks, letting inserts of new keys
    /// through between them; checks of held keys never wait.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(5, Duration::from_secs(1))?, clock.clone());
    /// limiter.check("a");
    /// assert_eq!(limiter.retain_recent(), 0); // "a" is still in its window
    /// clock.advance(Duration::from_millis(1100));
    /// assert_eq!(limiter.retain_recent(), 1);
    /// assert_eq!(limiter.len(), 0);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn retain_recent(&self) -> usize {
        let now = self.clock.now().0;
        let inline = self.inline.retain_recent(now);
        self.store.retain_recent(now) + inline
    }

    /// Keys evicted because their window was empty (no decision changed), since creation.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(5, Duration::from_secs(1))?, clock.clone());
    /// limiter.check("a");
    /// clock.advance(Duration::from_secs(2));
    /// limiter.retain_recent();
    /// assert_eq!(limiter.evictions(), 1);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn evictions(&self) -> u64 {
        let inline = self.inline.evictions().0;
        self.store.evictions() + inline
    }

    /// Keys forced out by the `max_keys` bound while their window still held admissions;
    /// each one's admissions were forgotten (see the type's documentation).
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u64>::builder(Quota::new(5, Duration::from_secs(1))?)
    ///     .clock(ManualClock::new())
    ///     .max_keys(2)
    ///     .build();
    /// for key in 0..3 {
    ///     limiter.check(&key);
    /// }
    /// assert_eq!(limiter.len(), 2);
    /// assert_eq!(limiter.forced_evictions(), 1);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn forced_evictions(&self) -> u64 {
        let inline = self.inline.evictions().1;
        self.store.forced_evictions() + inline
    }

    /// Gives `key` its own quota from now on, while checks go on.
    ///
    /// What happens to the key's counts: if the key's state has the shape the new quota
    /// needs, its counts are kept and the new limit (and mode) apply from the next check (a
    /// key above a lowered limit is denied until enough leaves the window). The shape is: for
    /// Strict, Weighted and the fixed window (which share one state), the same window and
    /// granularity, and the same side of two lines: Strict with marks or not, and a limit
    /// above 2²¹ or not (a key keeps its snapshots in 32 bits when it needs no marks and its
    /// limit is at most 2²¹, in 64 otherwise; see [`Quota::bytes_per_key`]); for the exact
    /// log, the same window and a limit of the same power-of-two capacity; for GCRA, the same
    /// limit and emission interval (the window over the limit, in whole nanoseconds rounded
    /// up). Otherwise the counts cannot be carried over exactly, so the key
    /// starts afresh under the new quota at its next check.
    ///
    /// Overrides live in one map that each change copies and republishes (checks never wait
    /// for it), so a change costs time in proportion to the number of overrides: meant for
    /// thousands of special keys changed now and then, not for per-request updates.
    ///
    /// ```
    /// use slidegate::{clock::ManualClock, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String, _>::with_clock(Quota::new(2, Duration::from_secs(1))?, ManualClock::new());
    /// limiter.quota_for("vip", Quota::new(100, Duration::from_secs(1))?);
    /// for _ in 0..100 {
    ///     assert!(limiter.check("vip").is_allowed());
    /// }
    /// assert_eq!(limiter.check("guest").limit(), 2);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn quota_for<Q>(&self, key: &Q, quota: Quota)
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        self.overrides.update(self.store.hasher(), |map| {
            map.insert(K::from(key.to_owned()), KeyRule::new(quota));
        });
    }

    /// Gives `key` the default quota again, with the same rule for its counts as
    /// [`KeyedLimiter::quota_for`].
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<String>::new(Quota::new(2, Duration::from_secs(1))?);
    /// limiter.quota_for("k", Quota::new(9, Duration::from_secs(1))?);
    /// assert_eq!(limiter.quota("k").limit(), 9);
    /// limiter.clear_quota_for("k");
    /// assert_eq!(limiter.quota("k").limit(), 2);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn clear_quota_for<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.overrides.update(self.store.hasher(), |map| {
            map.remove(key);
        });
    }

    /// The quota `key` is checked against now.
    ///
    /// ```
    /// use slidegate::{KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let quota = Quota::new(2, Duration::from_secs(1))?;
    /// let limiter = KeyedLimiter::<String>::new(quota);
    /// assert_eq!(limiter.quota("anyone"), quota);
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn quota<Q>(&self, key: &Q) -> Quota
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Without overrides every key has the default quota: no epoch pinned to look.
        if self.overrides.is_empty() {
            return self.default.rule.quota;
        }
        self.rule_for(key, &epoch::pin()).rule.quota
    }

    /// The clock this limiter reads.
    ///
    /// ```
    /// use slidegate::{clock::{Clock, ManualClock, Nanos}, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let limiter = KeyedLimiter::<u32, _>::with_clock(Quota::new(2, Duration::from_secs(1))?, ManualClock::new());
    /// assert_eq!(limiter.clock().now(), Nanos(0));
    /// # Ok::<(), slidegate::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// `key` of this limiter as one [`Limit`](crate::Limit) of a [`check_all`](crate::check_all).
    ///
    /// ```
    /// use slidegate::{check_all, KeyedLimiter, Quota};
    /// use std::time::Duration;
    ///
    /// let per_user = KeyedLimiter::<String>::new(Quota::new(1, Duration::from_secs(1))?);
    /// let per_tenant = KeyedLimiter::<u32>::new(Quota::new(10, Duration::from_secs(1))?);
    /// let (user, tenant) = (per_user.key("alice"), per_tenant.key(&42u32));
    /// assert!(check_all(&[(&user, 1), (&tenant, 1)])?.is_allowed());
    /// assert!(!check_all(&[(&user, 1), (&tenant, 1)])?.is_allowed());
    /// assert_eq!(per_tenant.peek(&42).remaining(), 9); // the denial charged no one
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key<'a, Q>(&'a self, key: &'a Q) -> KeyLimit<'a, K, C, S, Q>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        KeyLimit::new(self, key)
    }

    /// The total cost ever admitted to `key`'s current entry, wrapping at 2³² (0 if it holds
    /// none). For tests.
    #[doc(hidden)]
    pub fn admitted_total<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = &epoch::pin();
        let hash = self.store.hash(key);
        if let Some(admitted) = self.admitted_line(self.rule_for(key, guard), key, hash, guard) {
            return admitted;
        }
        self.store
            .get(key, hash, guard)
            .map_or(0, |entry| entry.state().admitted())
    }

    /// The rule for `key`: its override, else the default.
    #[inline]
    fn rule_for<'g, Q>(&'g self, key: &Q, guard: &'g Guard) -> &'g KeyRule
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.overrides.get(key, guard).unwrap_or(&self.default)
    }

    /// Checks and charges `n`, validated against the key's quota. Separate from `reserve` so
    /// that the decision is returned as it is made: moved through a shared path's tuples and
    /// options it was copied with store-forwarding stalls.
    #[inline]
    fn acquire<Q, R: Outcome>(&self, key: &Q, n: u64) -> R
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let guard = &epoch::pin();
        let hash = self.store.hash(key);
        on_inline!(&self.inline, |inline| {
            let keyed = self.rule_for(key, guard);
            if let Some(word) = inline.word(keyed, &self.default, key) {
                if let Err(e) = keyed.rule.validate(n) {
                    return R::error(e);
                }
                let found = match self.acquire_line(inline, word, hash, n, &keyed.rule, guard) {
                    Ok(decision) => return R::decided(decision),
                    Err(found) => found,
                };
                if let Some(decision) =
                    self.acquire_line_slow(inline, key, word, hash, n, &keyed.rule, guard, found)
                {
                    return R::decided(sync::copy_by_words(&decision));
                }
            }
        }, _ => {});
        let now = || self.clock.now().0;
        let mut lookup = true;
        loop {
            let (entry, rule) = match self.entry_for(key, hash, n, lookup, guard) {
                Ok(found) => found,
                Err(e) => return R::error(e),
            };
            // The sliding-window counter's charge is called directly; the other algorithms
            // go through `acquire_other`, out of line so that this stays small.
            let decided = on_ring!(entry.state(),
                |_, ring| counter::charge(ring, &rule.counter, now, n),
                _ => return self.acquire_other(key, hash, n, entry, rule, guard),
            );
            match decided {
                Some(decision) => return R::decided(sync::copy_by_words(&decision)),
                // Retired: evicted (idle, so a fresh entry decides the same), forced out, or
                // replaced by an entry of a newer shape. The writer path sees the store as it
                // is now.
                None => lookup = false,
            }
        }
    }

    /// [`KeyedLimiter::acquire`] for an algorithm other than the counter, from `entry` (found
    /// under `rule`) on. Out of line: with every algorithm inlined into it, the counter's
    /// check was more than twice as slow (`keyed_allowed`). It returns what `acquire`
    /// returns (see [`Outcome`]).
    #[inline(never)]
    fn acquire_other<'g, Q, R: Outcome>(
        &'g self,
        key: &Q,
        hash: u64,
        n: u64,
        mut entry: &'g Entry<K>,
        mut rule: &'g Rule,
        guard: &'g Guard,
    ) -> R
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let now = || self.clock.now().0;
        loop {
            if let Some((decision, _)) = entry.state().check(rule, now, n, Op::Charge) {
                return R::decided(decision);
            }
            // Retired: as in `acquire`, the writer path sees the store as it is now.
            (entry, rule) = match self.entry_for(key, hash, n, false, guard) {
                Ok(found) => found,
                Err(e) => return R::error(e),
            };
        }
    }

    /// Judges `n` on `key`'s live entry and, if allowed, reserves it for `check_all`.
    /// Returns the decision and, when allowed, the entry's state (alive while `guard` is)
    /// with the reservation's ticket.
    fn reserve<'g, Q>(
        &'g self,
        key: &Q,
        n: u64,
        guard: &'g Guard,
    ) -> Result<(Decision, Option<ReservedState<'g>>), CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let hash = self.store.hash(key);
        let mut lookup = true;
        loop {
            let (entry, rule) = self.entry_for(key, hash, n, lookup, guard)?;
            match self.reserve_on(entry, rule, n) {
                Some(reserved) => return Ok(reserved),
                None => lookup = false,
            }
        }
    }

    /// [`KeyedLimiter::reserve`] on an entry that exists: `None` if `key` has no live entry of
    /// its quota's shape (absent, evicted, or its quota changed shape), which is left as it
    /// is. Making one may evict another key (at `max_keys`), which `check_all` does only
    /// once every other limit has admitted.
    fn reserve_existing<'g, Q>(
        &'g self,
        key: &Q,
        n: u64,
        guard: &'g Guard,
    ) -> Result<Option<(Decision, Option<ReservedState<'g>>)>, CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let keyed = self.rule_for(key, guard);
        let KeyRule { rule, shape } = keyed;
        rule.validate(n)?;
        let hash = self.store.hash(key);
        let found = self.store.get(key, hash, guard);
        Ok(found
            .filter(|entry| entry.fits(*shape))
            .or_else(|| self.move_existing(keyed, key, hash, guard))
            .and_then(|entry| self.reserve_on(entry, rule, n)))
    }

    /// Judges `n` on `entry` under `rule` (which it fits) and reserves it if allowed; `None`
    /// if the entry is retired.
    fn reserve_on<'g>(
        &'g self,
        entry: &'g Entry<K>,
        rule: &Rule,
        n: u64,
    ) -> Option<(Decision, Option<ReservedState<'g>>)> {
        let now = || self.clock.now().0;
        let (decision, ticket) = entry.state().check(rule, now, n, Op::Reserve)?;
        let taken = decision.is_allowed().then_some((entry.state(), ticket));
        Some((decision, taken))
    }

    /// `key`'s live entry and the rule it fits, with `n` validated against that rule: the
    /// entry found by a lookup (if `lookup`), else by the writer path, which inserts it if
    /// need be, in the shape of the key's quota as published when its lock is taken.
    #[inline]
    fn entry_for<'g, Q>(
        &'g self,
        key: &Q,
        hash: u64,
        n: u64,
        lookup: bool,
        guard: &'g Guard,
    ) -> Result<(&'g Entry<K>, &'g Rule), CostError>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        let mut keyed = self.rule_for(key, guard);
        keyed.rule.validate(n)?;
        let found = if lookup {
            self.store.get(key, hash, guard)
        } else {
            None
        };
        let mut entry = match found {
            Some(entry) => entry,
            None => self.insert(key, hash, guard),
        };
        // One shape test on the hot path; an entry of another shape (the key's quota changed)
        // is replaced by the writer path below.
        while !entry.fits(keyed.shape) {
            // The key's quota changed shape (since its rule was read, or since the entry was
            // made): judge under the newest quota, in an entry of its shape.
            keyed = self.rule_for(key, guard);
            keyed.rule.validate(n)?;
            if !entry.fits(keyed.shape) {
                entry = self.insert(key, hash, guard);
            }
        }
        Ok((entry, &keyed.rule))
    }

    /// What a check of `n` on `key` would decide now, without writing anything (a peek).
    fn judge_only<Q>(&self, key: &Q, n: u64, guard: &Guard) -> Result<Decision, CostError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let keyed = self.rule_for(key, guard);
        let KeyRule { rule, shape } = keyed;
        rule.validate(n)?;
        let hash = self.store.hash(key);
        if let Some(decision) = self.peek_line(keyed, key, hash, n, guard) {
            return Ok(decision);
        }
        let now = || self.clock.now().0;
        let live = self.store.get(key, hash, guard).filter(|e| e.fits(*shape));
        if let Some((decision, _)) = live.and_then(|e| e.state().check(rule, now, n, Op::Peek)) {
            return Ok(decision);
        }
        // Absent, retired (so idle or forcibly evicted), or of another shape (the next check
        // starts it afresh): a fresh window.
        Ok(State::peek_fresh(rule, now(), n))
    }

    /// The writer path: `key`'s live entry, inserted if need be, of the shape of the key's
    /// quota as published when the store's lock is taken.
    #[cold]
    fn insert<'g, Q>(&self, key: &Q, hash: u64, guard: &'g Guard) -> &'g Entry<K>
    where
        K: Borrow<Q> + From<Q::Owned>,
        Q: Hash + Eq + ToOwned + ?Sized,
    {
        on_inline!(&self.inline, |inline| {
            return self.insert_beside(inline, key, hash, guard);
        }, _ => {});
        let shape = || self.rule_for(key, guard).shape;
        self.store
            .get_or_insert(key, hash, shape, self.clock.now().0, guard)
    }
}

/// What [`KeyedLimiter::acquire`] returns: a `Result` for `check_n`, the bare decision for
/// `check`, whose cost of 1 is valid under every quota. Built where it is returned, the
/// decision is written once, where the caller reads it: `check` unwrapping a `Result` copied
/// it out with wide loads of what had just been stored in narrower pieces, a
/// store-forwarding stall.
trait Outcome {
    fn decided(decision: Decision) -> Self;
    fn error(error: CostError) -> Self;
}

impl Outcome for Result<Decision, CostError> {
    #[inline]
    fn decided(decision: Decision) -> Self {
        Ok(decision)
    }

    #[inline]
    fn error(error: CostError) -> Self {
        Err(error)
    }
}

impl Outcome for Decision {
    #[inline]
    fn decided(decision: Decision) -> Self {
        decision
    }

    #[inline]
    fn error(_: CostError) -> Self {
        unreachable!("every limit is at least 1")
    }
}

/// The state a reservation was made on, alive while the epoch guard of the check is, and
/// the reservation's ticket (see `State::check`).
type ReservedState<'g> = (State<'g>, u64);

impl<K, C, S> fmt::Debug for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.default.rule.quota)
            .field("keys", &(self.store.len() + self.inline.len()))
            .finish_non_exhaustive()
    }
}
