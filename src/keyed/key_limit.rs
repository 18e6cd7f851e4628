//! One key of a keyed limiter as a limit of `check_all`.

use core::any::Any;
use core::borrow::Borrow;
use core::cell::OnceCell;
use core::fmt;
use core::hash::{BuildHasher, Hash};

use crate::algo::Op;
use crate::clock::{Clock, QuantaClock};
use crate::decision::{CostError, Decision};
use crate::multi::{Limit, sealed};
use crate::sync::epoch::{self, Guard};

use super::{DefaultHashBuilder, KeyedLimiter, ReservedState};

/// One key of a [`KeyedLimiter`], as a [`Limit`] of a [`check_all`](crate::check_all); made
/// by [`KeyedLimiter::key`]. Keyed limiters with different key types mix freely. `Q` is the
/// form the key was given in: `K` itself or a borrowed form of it (`str` for `String` keys).
///
/// ```
/// use slidegate::{check_all, KeyedLimiter, Limit, Quota};
/// use std::time::Duration;
///
/// let by_ip = KeyedLimiter::<[u8; 4]>::new(Quota::new(100, Duration::from_secs(1))?);
/// let by_token = KeyedLimiter::<String>::new(Quota::new(5, Duration::from_secs(1))?);
/// let token = String::from("t-123");
/// let (ip, tok) = (by_ip.key(&[10u8, 0, 0, 1]), by_token.key(&token));
/// let limits: [(&dyn Limit, u64); 2] = [(&ip, 1), (&tok, 5)];
/// assert!(check_all(&limits)?.is_allowed());
/// assert_eq!(check_all(&limits)?.denied_by(), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyLimit<'a, K, C = QuantaClock, S = DefaultHashBuilder, Q: ?Sized = K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    limiter: &'a KeyedLimiter<K, C, S>,
    key: &'a Q,
    /// The key as a `K`, made only when `check_all` compares this entry with another of the
    /// same limiter (see `same_limit`), so that a call naming each limiter once allocates
    /// nothing for its keys.
    owned: OnceCell<K>,
}

impl<K, C, S, Q> sealed::Reserve for KeyLimit<'_, K, C, S, Q>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q> + From<Q::Owned>,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned + ?Sized,
{
    fn judge_cost<'g>(
        &'g self,
        n: u64,
        op: Op,
        pin: &'g OnceCell<Guard>,
        held: &mut sealed::ReservedCosts<'g>,
    ) -> Result<sealed::Judged, CostError> {
        // The entry stays alive while the guard is pinned, so until the caller commits or
        // releases the reservation.
        let guard = pin.get_or_init(epoch::pin);
        let judged = if op == Op::Reserve {
            match self.limiter.reserve_existing(self.key, n, guard)? {
                Some(reserved) => reserved,
                None => return Ok(sealed::Judged::deferred()),
            }
        } else {
            (self.limiter.judge_only(self.key, n, guard)?, None)
        };
        Ok(self.hold(judged, n, held))
    }

    fn make_and_reserve<'g>(
        &'g self,
        n: u64,
        pin: &'g OnceCell<Guard>,
        held: &mut sealed::ReservedCosts<'g>,
    ) -> Result<sealed::Judged, CostError> {
        let guard = pin.get_or_init(epoch::pin);
        let judged = self.limiter.reserve(self.key, n, guard)?;
        Ok(self.hold(judged, n, held))
    }

    fn keyed_by(&self) -> Option<usize> {
        let limiter: *const KeyedLimiter<K, C, S> = self.limiter;
        Some(limiter as usize)
    }

    fn key(&self) -> Option<&dyn Any> {
        Some(self.owned.get_or_init(|| K::from(self.key.to_owned())))
    }

    fn is_key(&self, key: &dyn Any) -> bool {
        key.downcast_ref::<K>()
            .is_some_and(|key| key.borrow() == self.key)
    }
}

impl<'a, K, C, S, Q> KeyLimit<'a, K, C, S, Q>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: ?Sized,
{
    /// The handle of `key` of `limiter`.
    pub(super) fn new(limiter: &'a KeyedLimiter<K, C, S>, key: &'a Q) -> Self {
        KeyLimit {
            limiter,
            key,
            owned: OnceCell::new(),
        }
    }

    /// The answer of a judgement `(decision, reserved)` of cost `n`, its reservation, if it
    /// made one, pushed onto `held`.
    #[inline]
    fn hold<'g>(
        &'g self,
        (decision, reserved): (Decision, Option<ReservedState<'g>>),
        n: u64,
        held: &mut sealed::ReservedCosts<'g>,
    ) -> sealed::Judged {
        let taken = match reserved {
            Some((state, ticket)) => {
                sealed::hold(held, n, state, ticket, &self.limiter.clock);
                sealed::Taken::Reserved
            }
            None => sealed::Taken::Nothing,
        };
        sealed::Judged { decision, taken }
    }
}

impl<K, C, S, Q> Limit for KeyLimit<'_, K, C, S, Q>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + Borrow<Q> + From<Q::Owned>,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned + ?Sized,
{
}

impl<K, C, S, Q> fmt::Debug for KeyLimit<'_, K, C, S, Q>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
    Q: fmt::Debug + ?Sized,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyLimit")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}
