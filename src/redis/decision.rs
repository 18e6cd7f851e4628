//! [`RedisDecision`]: a decision of the Redis backend, and the path that made it.

use core::time::Duration;

use super::Degraded;
use crate::decision::Decision;

/// Which path made a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// The script on the Redis server.
    Redis,
    /// A lease this process holds (see [`RedisLimiterBuilder::leases`]).
    ///
    /// [`RedisLimiterBuilder::leases`]: super::RedisLimiterBuilder::leases
    Lease,
    /// [`Policy::Local`](super::Policy::Local): the local fallback quota, Redis being
    /// unavailable.
    Fallback,
    /// [`Policy::Allow`](super::Policy::Allow), Redis being unavailable.
    PolicyAllow,
    /// [`Policy::Deny`](super::Policy::Deny), Redis being unavailable.
    PolicyDeny,
}

/// The answer of a [`RedisLimiter`](super::RedisLimiter): a [`Decision`], and which path made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a rate-limit decision does nothing unless `is_allowed` is consulted"]
pub struct RedisDecision {
    decision: Decision,
    path: Path,
    degraded: Option<Degraded>,
    server_time: u64,
}

impl RedisDecision {
    pub(crate) fn new(decision: Decision, path: Path) -> RedisDecision {
        RedisDecision {
            decision,
            path,
            degraded: None,
            server_time: 0,
        }
    }

    /// The policy's `decision` (made on `path`) for Redis not deciding, for the reason `why`.
    pub(crate) fn by_policy(decision: Decision, path: Path, why: Degraded) -> RedisDecision {
        RedisDecision {
            decision,
            path,
            degraded: Some(why),
            server_time: 0,
        }
    }

    pub(crate) fn set_server_time(&mut self, micros: u64) {
        self.server_time = micros;
    }

    /// The decision: allowed or not, `remaining`, `retry_after`, `reset_after`, as a local
    /// limiter's. A decision of [`Policy::Allow`] or [`Policy::Deny`] reports `remaining` 0
    /// and, when denied, a `retry_after` of the breaker's cool-down.
    ///
    /// [`Policy::Allow`]: super::Policy::Allow
    /// [`Policy::Deny`]: super::Policy::Deny
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the request was admitted (and charged).
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// See [`Decision::remaining`]; for a lease, what this process's lease has left.
    pub fn remaining(&self) -> u64 {
        self.decision.remaining()
    }

    /// See [`Decision::retry_after`].
    pub fn retry_after(&self) -> Option<Duration> {
        self.decision.retry_after()
    }

    /// See [`Decision::reset_after`].
    pub fn reset_after(&self) -> Duration {
        self.decision.reset_after()
    }

    /// The quota's limit.
    pub fn limit(&self) -> u64 {
        self.decision.limit()
    }

    /// Which path made the decision.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Why Redis did not decide, if it did not.
    pub fn degraded(&self) -> Option<Degraded> {
        self.degraded
    }

    /// The time the script judged at, in microseconds since the Unix epoch (the server's
    /// `TIME`, or the test clock's reading), for decisions Redis made; 0 otherwise.
    pub fn server_time_micros(&self) -> u64 {
        self.server_time
    }
}
