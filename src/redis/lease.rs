//! Local-first leases: a process takes a slice of a key's window from Redis in one round trip
//! and admits from it locally until it is used up or ends.
//!
//! - **Counted when taken.** A lease of `k` is a charge of `k` in the shared window, in the
//!   bucket of the moment it is taken (GCRA: `k` intervals on the arrival time). So the
//!   shared limit holds exactly: no process admits a unit the window has not counted.
//! - **Used only while it is counted where it is used.** A counter's lease ends with the
//!   bucket it was charged in (the script reports how long that is, and the lease ends that
//!   long after the request was *sent*, so before the bucket ends on the server): a unit
//!   used at `t` is then counted in `t`'s own bucket, and Strict's proof holds as for a
//!   direct admission. A GCRA lease may be used at any later time (admitting later than
//!   charged never breaks the arrival-time rule); it ends after `LeaseConfig::max_duration`.
//! - **Unused units go back** when the lease ends: the next renewal for the key carries the
//!   release in the same script call, which removes them from the bucket they were charged
//!   in (as if never admitted); [`RedisLimiter::return_leases`] does it at once.
//! - **The price** is requests denied elsewhere while units sit unused in leases: at most
//!   `LeaseConfig::max` per process per key, so `processes × max` in all.
//! - **Adaptive size.** A key's lease starts at one unit; a lease used up while still valid
//!   doubles the next one (up to `max`), a lease that ends more than half unused halves it.
//!   A hot key's leases grow until a round trip feeds many admissions; a cold key's stay
//!   small, so they hold little.
//! - **Denials are remembered.** A denial from Redis says no cost of that size fits before its
//!   `retry_after`; until then the process denies such costs locally (only a refund or a
//!   returned lease elsewhere could free room earlier, which is then found at the next
//!   round trip), so an overloaded key costs no round trip per request either.
//! - **Failures never over-admit.** If a renewal fails or its answer is lost, the old lease's
//!   units are not given back (the script may have done it already, and giving back twice
//!   would over-admit): they stay counted until they leave the window, as admissions.
//!
//! [`RedisLimiter::return_leases`]: super::RedisLimiter::return_leases

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Error;
use super::decision::{Path, RedisDecision};
use super::script::{Call, Outcome, Shape, Ticket};
use crate::decision::Decision;

/// Leases: how large a slice of a key's window one process may take at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The largest lease, in units of cost. Each process can hold up to this much of a key's
    /// window unused, so requests elsewhere are denied for at most `processes × max` units
    /// that sit in leases.
    pub max: u64,
    /// The longest a lease is held, for GCRA (counter leases end with their bucket).
    pub max_duration: Duration,
}

/// The leases of one limiter, per key.
pub(crate) struct Leases {
    config: LeaseConfig,
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<KeyLease>>>>,
    round_trips: AtomicU64,
    admitted: AtomicU64,
}

#[derive(Default)]
struct KeyLease {
    left: u64,
    ticket: Ticket,
    until: Option<Instant>,
    size: u64,
    /// The last denial from Redis: no cost of at least `denied_n` fits before this time.
    denied_until: Option<Instant>,
    denied_n: u64,
}

impl KeyLease {
    /// Takes the unused units off the lease, which ends: the units and their charge's
    /// ticket, for the call that gives them back.
    fn take_unused(&mut self) -> (u64, Ticket) {
        self.until = None;
        (core::mem::take(&mut self.left), self.ticket)
    }
}

/// Entries kept before idle ones are swept.
const SWEEP_ABOVE: usize = 1 << 16;

impl Leases {
    pub(crate) fn new(config: LeaseConfig, limit: u64) -> Leases {
        Leases {
            config: LeaseConfig {
                max: config.max.clamp(1, limit),
                ..config
            },
            map: Mutex::new(HashMap::new()),
            round_trips: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
        }
    }

    /// (round trips to Redis, units admitted) through leases so far.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.round_trips.load(Ordering::Relaxed),
            self.admitted.load(Ordering::Relaxed),
        )
    }

    fn entry(&self, key: &str) -> Arc<tokio::sync::Mutex<KeyLease>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get(key) {
            return e.clone();
        }
        if map.len() >= SWEEP_ABOVE {
            let now = Instant::now();
            map.retain(|_, e| {
                Arc::strong_count(e) > 1
                    || e.try_lock()
                        .map_or(true, |h| h.until.is_some_and(|u| now < u))
            });
        }
        let e = Arc::new(tokio::sync::Mutex::new(KeyLease::default()));
        map.insert(key.to_owned(), e.clone());
        e
    }

    /// Cost `n` of `key`, from the key's lease if it can decide (`limit` is the quota's):
    /// `Ok` with the decision, or `Err` with the key's lease locked for a renewal, which the
    /// caller sends ([`Renewal::call`], [`Op::Lease`](super::script::Op::Lease)) and hands
    /// back with its answer to [`Leases::renewed`]. The lock is held across the round trip,
    /// so a key has one renewal in flight at a time.
    pub(crate) async fn take(
        &self,
        key: &str,
        n: u64,
        limit: u64,
    ) -> Result<RedisDecision, Renewal> {
        // A local decision waits on no I/O: see `RedisLimiter::guarded` on the cooperative budget.
        tokio::task::coop::consume_budget().await;
        let mut held = self.entry(key).lock_owned().await;
        let now = Instant::now();
        let valid = held.until.is_some_and(|u| now < u);
        if let Some(until) = held.denied_until.filter(|&u| now < u && n >= held.denied_n) {
            let wait = u64::try_from(until.duration_since(now).as_nanos()).unwrap_or(u64::MAX);
            return Ok(RedisDecision::new(
                Decision::denied(limit, 0, wait.max(1), wait),
                Path::Lease,
            ));
        }
        if valid && held.left >= n {
            held.left -= n;
            self.admitted.fetch_add(n, Ordering::Relaxed);
            let until = held.until.map_or(0, |u| {
                u64::try_from(u.saturating_duration_since(now).as_nanos()).unwrap_or(u64::MAX)
            });
            return Ok(RedisDecision::new(
                Decision::allowed(limit, held.left, until),
                Path::Lease,
            ));
        }
        held.size = if held.size == 0 {
            1
        } else if valid {
            // Used up while still valid: the key is hot.
            (held.size * 2).min(self.config.max)
        } else if held.left > held.size / 2 {
            (held.size / 2).max(1)
        } else {
            held.size
        };
        let (back, ticket) = held.take_unused();
        Err(Renewal {
            n,
            back,
            ticket,
            limit,
            sent: Instant::now(),
            held,
        })
    }

    /// The decision of `renewal` from `answer`, the reply to its call (the time judged at
    /// and the call's outcome), the key's lease updated from it. An error if Redis did not
    /// decide: the old lease's units are not given back (see "Failures never over-admit").
    pub(crate) fn renewed(
        &self,
        mut renewal: Renewal,
        answer: Result<(u64, Vec<Outcome>), Error>,
    ) -> Result<RedisDecision, Error> {
        let (time, out) = answer?;
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let (n, limit, sent) = (renewal.n, renewal.limit, renewal.sent);
        let held = &mut renewal.held;
        let o = out[0];
        let mut d = o.decision;
        if d.is_allowed() {
            let granted = o.extra.max(n);
            self.admitted.fetch_add(n, Ordering::Relaxed);
            held.left = granted - n;
            held.ticket = o.ticket;
            let most = self.config.max_duration;
            let lasts = u64::try_from(o.valid_us)
                .map_or(most, |us| most.min(core::time::Duration::from_micros(us)));
            held.until = Some(sent + lasts);
            d = Decision::allowed(
                limit,
                d.remaining() + held.left,
                d.reset_after().as_nanos() as u64,
            );
            held.denied_until = None;
        } else if let Some(wait) = d.retry_after() {
            // Nothing of cost `n` or more fits before then, unless a refund or a
            // returned lease frees room: deny locally until then.
            held.denied_until = Some(sent + wait);
            held.denied_n = n;
        }
        let mut r = RedisDecision::new(d, Path::Redis);
        r.set_server_time(time);
        Ok(r)
    }

    /// Every key's lease, to be given back one at a time ([`Leased::take`]).
    pub(crate) fn all(&self) -> Vec<Leased> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .map(|(key, entry)| Leased {
                key: key.clone(),
                entry: entry.clone(),
            })
            .collect()
    }
}

/// One key's lease, not locked (see [`Leases::all`]).
pub(crate) struct Leased {
    key: String,
    entry: Arc<tokio::sync::Mutex<KeyLease>>,
}

impl Leased {
    /// The lease locked, for the caller to give its unused units back ([`Returned::call`],
    /// [`Op::Release`](super::script::Op::Release)); `None` if it has none.
    pub(crate) async fn take(self) -> Option<Returned> {
        let held = self.entry.lock_owned().await;
        (held.left > 0).then(|| Returned {
            key: self.key,
            held,
        })
    }
}

/// A key's lease, locked while its renewal is asked of Redis (see [`Leases::take`]).
pub(crate) struct Renewal {
    /// The cost asked for.
    n: u64,
    /// The old lease's unused units, given back in the same call, and their charge's ticket.
    back: u64,
    ticket: Ticket,
    limit: u64,
    /// When the request was sent: a counter's lease ends that long before its bucket does.
    sent: Instant,
    held: tokio::sync::OwnedMutexGuard<KeyLease>,
}

impl Renewal {
    /// The script call that renews the lease, for a limiter of `shape` whose Redis keys for
    /// this key are `keys`.
    pub(crate) fn call<'s>(&self, shape: &'s Shape, keys: (String, String)) -> Call<'s> {
        Call {
            shape,
            keys,
            n: self.held.size.max(self.n),
            back: self.back,
            ticket: self.ticket,
            need: self.n,
        }
    }
}

/// A key's lease being given back, locked until this is dropped (after the call that gives
/// its units back).
pub(crate) struct Returned {
    /// The key (not its Redis keys).
    pub(crate) key: String,
    held: tokio::sync::OwnedMutexGuard<KeyLease>,
}

impl Returned {
    /// The script call that gives the unused units back, as [`Renewal::call`], the units
    /// taken off the lease: made once the key's Redis keys are, so that a key error leaves
    /// the lease as it was.
    pub(crate) fn call<'s>(&mut self, shape: &'s Shape, keys: (String, String)) -> Call<'s> {
        let (back, ticket) = self.held.take_unused();
        Call {
            shape,
            keys,
            n: 0,
            back,
            ticket,
            need: 0,
        }
    }
}
