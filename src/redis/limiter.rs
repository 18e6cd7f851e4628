//! [`RedisLimiter`]: the quota of one limiter, shared through Redis by every process.

use core::fmt;
use core::time::Duration;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::breaker::{Breaker, Pass};
use super::conn::Connection;
use super::decision::{Path, RedisDecision};
use super::lease::{LeaseConfig, Leases};
use super::script::{self, Call, Entry, Invocation, Op, Outcome, Shape, Ticket};
use super::{Degraded, Error, batch};
use crate::clock::Clock;
use crate::decision::{CostError, Decision};
use crate::keyed::KeyedLimiter;
use crate::quota::Quota;

/// What a [`RedisLimiter`] does when Redis cannot decide within the deadline (slow, down,
/// failing over) or while its circuit breaker is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Admit every request (fail open): availability over the limit.
    Allow,
    /// Deny every request (fail closed): the limit over availability.
    Deny,
    /// Decide with this quota, counted in this process alone: with `P` processes, up to
    /// `P ×` its limit pass in a window while Redis is away. Set it to the shared limit
    /// divided by the number of processes to keep the total near the shared limit.
    Local(Quota),
}

/// A limit on every key, shared through Redis by every process that builds a `RedisLimiter`
/// with the same quota and prefix.
///
/// Cheap to clone (the clones share the connection, the breaker and the leases). See the
/// [module documentation](super) for the guarantees and the failure modes.
#[derive(Clone)]
pub struct RedisLimiter {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: Connection,
    pub(crate) shape: Shape,
    prefix: String,
    deadline: Duration,
    pub(crate) breaker: Breaker,
    policy: Policy,
    pub(crate) fallback: Option<KeyedLimiter<String>>,
    clock: Option<Arc<dyn Clock>>,
    max_key_len: usize,
    pub(crate) leases: Option<Leases>,
    last_error: Mutex<Option<String>>,
}

/// Builds a [`RedisLimiter`]; see [`RedisLimiter::builder`].
pub struct RedisLimiterBuilder {
    quota: Quota,
    prefix: Option<String>,
    deadline: Duration,
    cooldown: Duration,
    policy: Policy,
    clock: Option<Arc<dyn Clock>>,
    ttl_slack: Duration,
    max_key_len: usize,
    leases: Option<LeaseConfig>,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("quota", &self.inner.shape.quota)
            .field("prefix", &self.inner.prefix)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// A builder for a limiter of `quota`; [`RedisLimiterBuilder::build`] takes the
    /// connection.
    pub fn builder(quota: Quota) -> RedisLimiterBuilder {
        RedisLimiterBuilder {
            quota,
            prefix: None,
            deadline: Duration::from_millis(50),
            cooldown: Duration::from_millis(250),
            policy: Policy::Deny,
            clock: None,
            ttl_slack: Duration::from_secs(1),
            max_key_len: 4096,
            leases: None,
        }
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.inner.shape.quota
    }

    /// The prefix of every Redis key this limiter writes.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis keys that hold `key`'s state (a hash and a sorted set; GCRA uses the hash
    /// alone).
    pub fn redis_keys(&self, key: &str) -> Result<(String, String), Error> {
        self.keys(key)
    }

    /// The last error Redis gave (or the deadline passing), for logs and health checks.
    pub fn last_error(&self) -> Option<String> {
        self.inner.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Whether the circuit breaker is open now (Redis is being left alone).
    pub fn is_degraded(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// Checks one unit for `key`: [`check_n`](RedisLimiter::check_n) with a cost of 1.
    pub async fn check(&self, key: &str) -> Result<RedisDecision, Error> {
        self.check_n(key, 1).await
    }

    /// Checks cost `n` for `key` and charges it if admitted: one round trip to Redis (or
    /// none, from a lease), within the deadline, or the policy's answer.
    ///
    /// Errors only for input no wait can fix: a cost of zero or above the limit, a key that
    /// is empty or too long.
    pub async fn check_n(&self, key: &str, n: u64) -> Result<RedisDecision, Error> {
        self.validate(n)?;
        let keys = self.keys(key)?;
        if let Some(leases) = &self.inner.leases {
            let renewal = match leases.take(key, n, self.inner.shape.quota.limit()).await {
                Ok(decided) => return Ok(decided),
                Err(renewal) => renewal,
            };
            let answer = self
                .run(Op::Lease, &[renewal.call(&self.inner.shape, keys)])
                .await;
            return self.or_policy(key, n, false, leases.renewed(renewal, answer));
        }
        self.decide(key, keys, n, Op::Check).await
    }

    /// Judges cost 1 for `key` without charging anything.
    pub async fn peek(&self, key: &str) -> Result<RedisDecision, Error> {
        let keys = self.keys(key)?;
        self.decide(key, keys, 1, Op::Peek).await
    }

    /// Judges cost `n` for `key` without charging anything: one round trip, as a check, with
    /// the local limiter's `peek_n` meaning; without Redis, the policy's answer for a peek.
    /// A cost of zero or above the limit is an error, as for [`check_n`](Self::check_n).
    pub async fn peek_n(&self, key: &str, n: u64) -> Result<RedisDecision, Error> {
        self.validate(n)?;
        let keys = self.keys(key)?;
        if n == 1 {
            // Batched with the checks, whose calls say a peek by a cost of 0.
            return self.decide(key, keys, 1, Op::Peek).await;
        }
        let decided = self
            .run(Op::Peek, &[self.call(keys, n)])
            .await
            .map(|(time, out)| {
                let mut d = RedisDecision::new(out[0].decision, Path::Redis);
                d.set_server_time(time);
                d
            });
        self.or_policy(key, n, true, decided)
    }

    /// Gives back room for up to `n` units admitted earlier for `key` (a request that failed
    /// upstream): the window counts up to `n` fewer units from now on, the oldest it counts
    /// (GCRA: its arrival time moves back by `n` intervals, not before now), as a local
    /// limiter's `refund`. Returns how many units were freed. Redis being unavailable is an
    /// error here: there is no policy for a refund.
    pub async fn refund(&self, key: &str, n: u64) -> Result<u64, Error> {
        let keys = self.keys(key)?;
        let (_, out) = self.run(Op::Refund, &[self.call(keys, n)]).await?;
        Ok(out[0].extra)
    }

    /// A call of the library's `all` entry on this limiter's one key, of cost `n`.
    fn call(&self, keys: (String, String), n: u64) -> Call<'_> {
        Call {
            shape: &self.inner.shape,
            keys,
            n,
            back: 0,
            ticket: Ticket::default(),
            need: 0,
        }
    }

    /// Gives back every lease this process holds (their unused units go back to the shared
    /// window at once): call it before a process exits, or leases end on their own, their
    /// unused units counted until they leave the window.
    pub async fn return_leases(&self) -> Result<(), Error> {
        let Some(leases) = &self.inner.leases else {
            return Ok(());
        };
        for leased in leases.all() {
            let Some(mut returned) = leased.take().await else {
                continue;
            };
            let keys = self.keys(&returned.key)?;
            let call = returned.call(&self.inner.shape, keys);
            self.run(Op::Release, &[call]).await?;
        }
        Ok(())
    }

    pub(crate) fn validate(&self, n: u64) -> Result<(), Error> {
        let limit = self.inner.shape.quota.limit();
        match n {
            0 => Err(Error::Cost(CostError::Zero)),
            n if n > limit => Err(Error::Cost(CostError::ExceedsLimit { cost: n, limit })),
            _ => Ok(()),
        }
    }

    pub(crate) fn keys(&self, key: &str) -> Result<(String, String), Error> {
        if key.len() > self.inner.max_key_len {
            return Err(Error::Key(format!(
                "a key of {} bytes is longer than the {} this limiter accepts (RedisLimiterBuilder::max_key_len)",
                key.len(),
                self.inner.max_key_len
            )));
        }
        script::keys(&self.inner.prefix, key)
    }

    /// One call of the library's `all` (several limits, or an operation other than check and
    /// peek), within the deadline and through the breaker; an error if Redis did not decide.
    pub(crate) async fn run(
        &self,
        op: Op,
        calls: &[Call<'_>],
    ) -> Result<(u64, Vec<Outcome>), Error> {
        let inv = Invocation::all(op, self.test_time(), calls);
        let slot = script::slot(&calls[0].keys.0);
        let shapes: Vec<&Shape> = calls.iter().map(|c| c.shape).collect();
        self.guarded(Instant::now() + self.inner.deadline, async {
            let v = self.inner.conn.raw.invoke(Entry::All, &inv, slot).await?;
            let reply: Vec<i64> = redis::from_redis_value(v).map_err(redis::RedisError::from)?;
            script::parse(&reply, &shapes)
        })
        .await
    }

    /// The test clock's time in µs, if the limiter has one.
    fn test_time(&self) -> Option<u64> {
        self.inner.clock.as_ref().map(|c| c.now().as_u64() / 1000)
    }

    /// `call`'s answer if it comes by `expires`, asked only if the breaker lets it; a failure
    /// or a late answer opens the breaker.
    async fn guarded<T>(
        &self,
        expires: Instant,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let attempt = self.inner.breaker.attempt();
        if attempt.pass() == Pass::Open {
            // No I/O to wait for: take part in tokio's cooperative budget, or a caller's loop
            // of such decisions would starve the connection's own task of the worker, and
            // the probe that would close the breaker could never finish.
            tokio::task::coop::consume_budget().await;
            return Err(Error::Unavailable(Degraded::BreakerOpen));
        }
        match tokio::time::timeout_at(expires, call).await {
            Ok(Ok(out)) => {
                attempt.success();
                Ok(out)
            }
            // The batch's task gives up on a call at the deadline as well, and may run first.
            Ok(Err(Error::Unavailable(Degraded::Deadline))) | Err(_) => {
                attempt.failure();
                self.note(format!(
                    "no answer within the deadline of {:?}",
                    self.inner.deadline
                ));
                Err(Error::Unavailable(Degraded::Deadline))
            }
            Ok(Err(e)) => {
                attempt.failure();
                self.note(e.to_string());
                Err(e)
            }
        }
    }

    fn note(&self, e: String) {
        if let Ok(mut last) = self.inner.last_error.lock() {
            *last = Some(e);
        }
    }

    /// Checks cost `n` for `key` judging at `at_micros` (µs since the Unix epoch, or since any
    /// origin all callers share) instead of the server's time, and charges it if admitted:
    /// for replaying recorded traffic (`slidegate simulate --redis`) and for tests. Times
    /// must not go back for a key, and keys checked this way must not be checked at the
    /// server's time too. Leases are not used.
    pub async fn check_n_at(
        &self,
        key: &str,
        n: u64,
        at_micros: u64,
    ) -> Result<RedisDecision, Error> {
        self.validate(n)?;
        let keys = self.keys(key)?;
        self.decide_at(key, keys, n, Op::Check, Some(at_micros))
            .await
    }

    /// A single-key decision (a check, or a peek) through the connection's batches (see
    /// `batch.rs`), or the policy's.
    async fn decide(
        &self,
        key: &str,
        keys: (String, String),
        n: u64,
        op: Op,
    ) -> Result<RedisDecision, Error> {
        self.decide_at(key, keys, n, op, None).await
    }

    async fn decide_at(
        &self,
        key: &str,
        keys: (String, String),
        n: u64,
        op: Op,
        at_us: Option<u64>,
    ) -> Result<RedisDecision, Error> {
        let peek = op == Op::Peek;
        let expires = Instant::now() + self.inner.deadline;
        let (reply, answer) = oneshot::channel();
        let request = batch::Request {
            shape: self.inner.shape.clone(),
            keys,
            n: if peek { 0 } else { n },
            at_us: at_us.or_else(|| self.test_time()),
            expires,
            reply,
        };
        let asked = self.guarded(expires, async {
            let gone = || Error::Unavailable(Degraded::Failed);
            self.inner.conn.batches.send(request).map_err(|_| gone())?;
            answer.await.map_err(|_| gone())?
        });
        let decided = asked.await.map(|(time, decision)| {
            let mut d = RedisDecision::new(decision, Path::Redis);
            d.set_server_time(time);
            d
        });
        self.or_policy(key, n, peek, decided)
    }

    /// `decided`, or the policy's decision for cost `n` on `key` if Redis did not decide (no
    /// answer, an error answer or a failed connection); an error no wait can fix as it is.
    fn or_policy(
        &self,
        key: &str,
        n: u64,
        peek: bool,
        decided: Result<RedisDecision, Error>,
    ) -> Result<RedisDecision, Error> {
        match decided {
            Err(Error::Unavailable(why)) => Ok(self.degrade(key, n, peek, why)),
            Err(Error::Redis(_) | Error::Reply(_)) => {
                Ok(self.degrade(key, n, peek, Degraded::Failed))
            }
            decided => decided,
        }
    }

    /// The policy's decision for cost `n` on `key`.
    pub(crate) fn degrade(&self, key: &str, n: u64, peek: bool, why: Degraded) -> RedisDecision {
        let limit = self.inner.shape.quota.limit();
        let (decision, path) = match (&self.inner.policy, &self.inner.fallback) {
            (Policy::Local(_), Some(local)) => {
                let key = key.to_owned();
                let d = if peek {
                    // Validated against the shared limit, as below.
                    local
                        .peek_n(&key, n)
                        .unwrap_or_else(|_| Decision::denied(limit, 0, crate::decision::NEVER, 0))
                } else {
                    // The cost was validated against the shared limit; the fallback's may be
                    // lower, and a cost above it is a denial there, not an error.
                    local
                        .check_n(&key, n)
                        .unwrap_or_else(|_| Decision::denied(limit, 0, crate::decision::NEVER, 0))
                };
                (d, Path::Fallback)
            }
            (Policy::Allow, _) => (Decision::allowed(limit, 0, 0), Path::PolicyAllow),
            _ => {
                let wait =
                    u64::try_from(self.inner.breaker.cooldown().as_nanos()).unwrap_or(u64::MAX);
                (Decision::denied(limit, 0, wait.max(1), 0), Path::PolicyDeny)
            }
        };
        RedisDecision::by_policy(decision, path, why)
    }
}

impl RedisLimiterBuilder {
    /// The prefix of every Redis key the limiter writes (no braces). By default
    /// `slidegate:<limit>/<window µs>/<granularity µs>/<mode>:`, so limiters of different
    /// quotas never share state; name it (`"api:"`) to keep the state across a change of
    /// quota.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How long a decision may wait for Redis before the policy decides (default 50 ms).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long the circuit breaker leaves Redis alone after a failed decision before one
    /// decision probes it again (default 250 ms).
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// What decides while Redis cannot (default [`Policy::Deny`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Local-first leases: each process takes slices of a key's window from Redis and admits
    /// from them without a round trip (see the module documentation). Not for
    /// [`Mode::ExactLog`](crate::Mode::ExactLog), which counts each unit at its own time.
    pub fn leases(mut self, config: LeaseConfig) -> Self {
        self.leases = Some(config);
        self
    }

    /// Judges at this clock's time (in whole microseconds) instead of the server's `TIME`:
    /// for deterministic tests only. Keys then live at least an hour, as the test's time and
    /// the server's need not agree.
    pub fn test_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self.ttl_slack = Duration::from_secs(3600);
        self
    }

    /// How much longer than its window a key lives in Redis after its last write (default
    /// 1 s): the TTL is the time until the key's window is empty plus this slack.
    pub fn ttl_slack(mut self, slack: Duration) -> Self {
        self.ttl_slack = slack;
        self
    }

    /// The longest key accepted, in bytes (default 4096); a longer one is an
    /// [`Error::Key`]. Redis takes keys up to 512 MB, each sent on every decision.
    pub fn max_key_len(mut self, bytes: usize) -> Self {
        self.max_key_len = bytes;
        self
    }

    /// The limiter, deciding through `conn`.
    pub fn build(self, conn: &Connection) -> Result<RedisLimiter, Error> {
        let slack_ms = u64::try_from(self.ttl_slack.as_millis()).unwrap_or(u64::MAX);
        let shape = Shape::of(self.quota, slack_ms)?;
        let q = self.quota;
        let prefix = self.prefix.unwrap_or_else(|| {
            format!(
                "slidegate:{}/{}/{}/{:?}:",
                q.limit(),
                q.window_nanos() / 1000,
                q.granularity_nanos() / 1000,
                q.mode()
            )
        });
        if prefix.contains(['{', '}']) {
            return Err(Error::Key(format!(
                "the prefix {prefix:?} must not hold braces: they would move the hash tag"
            )));
        }
        let fallback = match self.policy {
            Policy::Local(q) => Some(KeyedLimiter::builder(q).max_keys(1 << 20).build()),
            _ => None,
        };
        let leases = match self.leases {
            Some(_) if !shape.leases() => {
                return Err(Error::Quota(
                    "leases need a bucketed quota (Strict, Weighted, fixed window or GCRA), not the exact log".into(),
                ));
            }
            Some(c) => Some(Leases::new(c, q.limit())),
            None => None,
        };
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                conn: conn.clone(),
                shape,
                prefix,
                deadline: self.deadline,
                breaker: Breaker::new(self.cooldown),
                policy: self.policy,
                fallback,
                clock: self.clock,
                max_key_len: self.max_key_len,
                leases,
                last_error: Mutex::new(None),
            }),
        })
    }
}

impl RedisLimiter {
    /// Round trips to Redis made for leases, and units admitted through leases (from Redis
    /// or locally), since the limiter was built: the first over the second, times 1000, is
    /// the round trips per 1000 admitted units. `(0, 0)` without leases.
    pub fn lease_stats(&self) -> (u64, u64) {
        self.inner.leases.as_ref().map_or((0, 0), Leases::stats)
    }
}
