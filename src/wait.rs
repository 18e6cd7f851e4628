//! Waiting for room: the blocking `wait` and, behind the `tokio` feature, `until_ready`.
//!
//! Both loop on a check ([`block`], and `ready` with the feature; the direct and keyed
//! limiters supply the check): when it is denied they wait its `retry_after` (the earliest time the same request
//! could be admitted if nothing else arrived), plus an optional random jitter so that many
//! clients denied together do not all return at the same instant, and check again. Under
//! contention the wait may repeat; the check that finally passes is charged once.

use core::cell::Cell;
use core::time::Duration;

use crate::clock::Clock;
use crate::decision::{CostError, Decision, NEVER};

/// Runs `check` until it admits, sleeping through the clock's [`Clock::sleep`] after each
/// denial; a cost error ends the wait at once, and so does, returning it, a denial that says
/// the cost never fits (a `retry_after` of `u64::MAX` ns: the algorithm's time has reached
/// its end: see `docs/design.md`), where waiting could never help.
pub(crate) fn block<C: Clock + ?Sized>(
    clock: &C,
    mut check: impl FnMut() -> Result<Decision, CostError>,
    jitter: Duration,
) -> Result<Decision, CostError> {
    loop {
        let decision = check()?;
        if decision.is_allowed() || never(&decision) {
            return Ok(decision);
        }
        clock.sleep(pause(&decision, jitter));
    }
}

/// [`block`], awaiting [`Clock::sleep_async`] (tokio's timer, unless the clock is manual).
#[cfg(feature = "tokio")]
pub(crate) async fn ready<C: Clock + ?Sized>(
    clock: &C,
    mut check: impl FnMut() -> Result<Decision, CostError>,
    jitter: Duration,
) -> Result<Decision, CostError> {
    loop {
        let decision = check()?;
        if decision.is_allowed() || never(&decision) {
            return Ok(decision);
        }
        clock.sleep_async(pause(&decision, jitter)).await;
    }
}

/// Whether a denial says the cost will never fit (see [`block`]).
fn never(denied: &Decision) -> bool {
    denied.retry_after() == Some(Duration::from_nanos(NEVER))
}

/// What to wait before checking again after `denied`: its `retry_after` (at least 1 ns) plus
/// a uniformly random jitter in `0 ..= jitter`.
fn pause(denied: &Decision, jitter: Duration) -> Duration {
    let wait = denied
        .retry_after()
        .unwrap_or_default()
        .max(Duration::from_nanos(1));
    wait.saturating_add(random_up_to(jitter))
}

std::thread_local! {
    /// A per-thread xorshift state, seeded from ahash's random source.
    static RNG: Cell<u64> = Cell::new(ahash::RandomState::new().hash_one(0u64) | 1);
}

/// A uniformly random duration in `0 ..= max` (to the nanosecond; 0 if `max` is zero).
fn random_up_to(max: Duration) -> Duration {
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    let x = RNG.with(|rng| {
        // xorshift64: plenty for spreading retries, not for anything secret.
        let mut x = rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rng.set(x);
        x
    });
    // Multiply-shift maps x uniformly enough onto 0 ..= max.
    Duration::from_nanos(((u128::from(x) * (u128::from(max) + 1)) >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let max = Duration::from_micros(10);
        let draws: Vec<Duration> = (0..1000).map(|_| random_up_to(max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(
            distinct.len() > 900,
            "only {} distinct draws",
            distinct.len()
        );
        assert_eq!(random_up_to(Duration::ZERO), Duration::ZERO);
        assert!(random_up_to(Duration::MAX) <= Duration::MAX);
    }
}
