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

    /// A decision's way through the breaker; report its outcome with
    /// [`Attempt::success`] or [`Attempt::failure`].
    pub(crate) fn attempt(&self) -> Attempt<'_> {
        Attempt {
            breaker: self,
            pass: self.pass(),
        }
    }

    fn pass(&self) -> Pass {
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

    fn success(&self, pass: Pass) {
        if pass == Pass::Probe || self.open_until.load(Ordering::Relaxed) != 0 {
            self.open_until.store(0, Ordering::Relaxed);
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    fn failure(&self, pass: Pass) {
        let until = self.now().saturating_add(self.cooldown).max(1);
        self.open_until.store(until, Ordering::Relaxed);
        if pass == Pass::Probe {
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    /// A probe that ended without an outcome: the next decision probes instead.
    fn abandon(&self, pass: Pass) {
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

/// A decision's pass through the [`Breaker`]. Dropped without an outcome — its caller's
/// future dropped while it waited for Redis — it gives a half-open breaker's probe back, or
/// the breaker would wait for that probe's answer for ever and stay open.
#[must_use = "report the outcome, or the probe is given back unanswered"]
pub(crate) struct Attempt<'a> {
    breaker: &'a Breaker,
    pass: Pass,
}

impl Attempt<'_> {
    pub(crate) fn pass(&self) -> Pass {
        self.pass
    }

    pub(crate) fn success(mut self) {
        self.breaker.success(self.pass);
        self.pass = Pass::Go;
    }

    pub(crate) fn failure(mut self) {
        self.breaker.failure(self.pass);
        self.pass = Pass::Go;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.breaker.abandon(self.pass);
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

    #[test]
    fn a_probe_dropped_unanswered_is_given_back() {
        let b = Breaker::new(Duration::from_nanos(1));
        b.attempt().failure();
        while b.now() < 2 {}
        let probe = b.attempt();
        assert_eq!(probe.pass(), Pass::Probe);
        assert_eq!(b.attempt().pass(), Pass::Open);
        drop(probe);
        let probe = b.attempt();
        assert_eq!(probe.pass(), Pass::Probe);
        probe.success();
        assert_eq!(b.attempt().pass(), Pass::Go);
    }
}
