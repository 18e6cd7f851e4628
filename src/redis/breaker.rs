//! The circuit breaker: after a failed decision, Redis is left alone for a cool-down, so a
//! dead server costs one deadline, not one per request.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

/// Closed (every decision goes to Redis) until a decision fails; then open for `cooldown`
/// (every decision gets the policy at once); then half-open: one decision probes Redis, and
/// its success closes the breaker, its failure opens it again.
pub(crate) struct Breaker {
    origin: Instant,
    cooldown: u64,
    /// Nanoseconds since `origin` until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    /// A probe is in flight (half-open).
    probing: AtomicBool,
}

/// What the breaker lets a decision do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Ask Redis.
    Go,
    /// Ask Redis as the one probe of a half-open breaker.
    Probe,
    /// Do not: the breaker is open.
    Open,
}

impl Breaker {
    pub(crate) fn new(cooldown: Duration) -> Breaker {
        Breaker {
            origin: Instant::now(),
            cooldown: u64::try_from(cooldown.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn pass(&self) -> Pass {
        // Relaxed throughout: the breaker only steers traffic; a stale reading sends one
        // decision more or fewer to Redis, and each decision has its own deadline.
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return Pass::Go;
        }
        if self.now() < until {
            return Pass::Open;
        }
        match self
            .probing
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Pass::Probe,
            Err(_) => Pass::Open,
        }
    }

    pub(crate) fn success(&self, pass: Pass) {
        if pass == Pass::Probe || self.open_until.load(Ordering::Relaxed) != 0 {
            self.open_until.store(0, Ordering::Relaxed);
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    pub(crate) fn failure(&self, pass: Pass) {
        let until = self.now().saturating_add(self.cooldown).max(1);
        self.open_until.store(until, Ordering::Relaxed);
        if pass == Pass::Probe {
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    pub(crate) fn cooldown(&self) -> Duration {
        Duration::from_nanos(self.cooldown)
    }

    /// Whether the breaker is open now (for reports).
    pub(crate) fn is_open(&self) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        until != 0 && self.now() < until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_on_failure_and_one_probe_closes_it() {
        let b = Breaker::new(Duration::from_nanos(1));
        assert_eq!(b.pass(), Pass::Go);
        b.failure(Pass::Go);
        // The cool-down of 1 ns has passed by the next reading: one probe, the rest wait.
        while b.now() < 2 {}
        assert_eq!(b.pass(), Pass::Probe);
        assert_eq!(b.pass(), Pass::Open);
        b.success(Pass::Probe);
        assert_eq!(b.pass(), Pass::Go);

        let b = Breaker::new(Duration::from_secs(3600));
        b.failure(Pass::Go);
        assert_eq!(b.pass(), Pass::Open);
        assert!(b.is_open());
    }
}
