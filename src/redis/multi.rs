//! Several limits at once, all or nothing: [`check_all`].
//!
//! Limits whose keys share a Cluster slot (every key, on a single server) are judged and
//! charged by one script call, atomically. Across slots no script can see every key, so the
//! call runs a **reserve, then release** protocol:
//!
//! 1. **Reserve**: one script call per slot, all at once; each judges its limits and charges
//!    all of them if all admit (a reservation *is* a charge), and reports where each charge
//!    landed (its ticket).
//! 2. If every slot admitted, the request is admitted: there is nothing to commit.
//!    Otherwise **release** the slots that charged: each charge is removed from the bucket
//!    it landed in (the exact log: from the admission it made; GCRA: the part of it not yet
//!    drained), as if it had never been made.
//!
//! Failure cases, each bounded and none over-admitting:
//! - A concurrent check on a reserved limit sees the reservation as admitted while it is
//!   held, and may be denied for room a release then gives back (only while the two calls
//!   overlap, one round trip).
//! - A process that dies, or a release that times out or fails, between the two steps
//!   leaves its reservation charged: the limit counts up to that request's cost more than
//!   was admitted, until those units leave the window (one window and one bucket at most;
//!   GCRA: until the charge drains). A reservation whose answer was lost (the deadline
//!   passed) may have charged too, with the same bound.
//! - If any slot cannot answer, the request gets the policy of the first limit whose slot
//!   failed, and the slots that charged are released as in step 2.

use core::time::Duration;

use futures_util::future::join_all;

use super::Degraded;
use super::Error;
use super::decision::Path;
use super::limiter::RedisLimiter;
use super::script::{self, Call, Op, Outcome};

/// The answer to a [`check_all`]: allowed (every limit charged) or denied (none charged),
/// which limit denied, and the path that decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a rate-limit decision does nothing unless `is_allowed` is consulted"]
pub struct RedisMultiDecision {
    denied_by: Option<usize>,
    remaining: u64,
    retry_after: u64,
    path: Path,
    degraded: Option<Degraded>,
}

impl RedisMultiDecision {
    /// Whether every limit admitted the request (and was charged).
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// When denied: the index, in the slice given to [`check_all`], of the first limit that
    /// denied.
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// The least room any limit has after this decision (when denied: without this
    /// request's charges).
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When denied: the longest `retry_after` of the limits that deny.
    pub fn retry_after(&self) -> Option<Duration> {
        self.denied_by
            .map(|_| Duration::from_nanos(self.retry_after))
    }

    /// [`Path::Redis`], or the policy's path when Redis could not decide.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Why Redis did not decide, if it did not.
    pub fn degraded(&self) -> Option<Degraded> {
        self.degraded
    }
}

/// Checks one request against several limits — each a [`RedisLimiter`], a key and a cost —
/// and charges all of them or none.
///
/// One round trip when every key shares a slot (always on a single server): one script
/// judges all and charges all or none. Across Cluster slots, one script per slot, all at
/// once, each charging its limits if they all admit (a *reservation*); if every slot
/// admitted, that is the commit, and if one denied, a second round trip *releases* the
/// others' charges, removing them from the buckets they landed in as if never made.
/// Failure cases, none over-admitting: a process that dies, or a release that fails or
/// times out, between the two steps leaves that request's cost counted on the limits that
/// reserved, until it leaves their windows (one window and one bucket at most; GCRA: until
/// it drains); a concurrent check may be denied for room a release then gives back, while
/// the calls overlap. If a slot cannot answer, the policy of the first limit in it decides
/// and the charged slots are released.
///
/// A limiter and key listed more than once are charged the sum of their costs; a sum above
/// the limit is [`Error::Cost`]. Leases are not used here. Keys tagged alike
/// (`"{tenant-7}:alice"`, `"{tenant-7}"`) share a slot on a Cluster.
pub async fn check_all(limits: &[(&RedisLimiter, &str, u64)]) -> Result<RedisMultiDecision, Error> {
    // One entry per distinct (limiter, key), with the caller's first index.
    let mut merged: Vec<(usize, &RedisLimiter, &str, u64)> = Vec::with_capacity(limits.len());
    for (i, &(lim, key, n)) in limits.iter().enumerate() {
        if n == 0 {
            lim.validate(0)?;
        }
        match merged
            .iter_mut()
            .find(|m| std::sync::Arc::ptr_eq(&m.1.inner, &lim.inner) && m.2 == key)
        {
            Some(m) => m.3 += n,
            None => merged.push((i, lim, key, n)),
        }
    }
    for m in &merged {
        m.1.validate(m.3)?;
    }
    let mut calls = Vec::with_capacity(merged.len());
    for m in &merged {
        calls.push(Call {
            shape: &m.1.inner.shape,
            keys: m.1.keys(m.2)?,
            n: m.3,
            back: 0,
            ticket: Default::default(),
            need: 0,
        });
    }
    // Groups of entries one script can judge together: one connection, one slot.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: Vec<(usize, Option<redis::cluster_routing::Slot>)> = Vec::new();
    for (j, m) in merged.iter().enumerate() {
        let conn = m.1.inner.conn.id();
        let slot =
            m.1.inner
                .conn
                .is_cluster()
                .then(|| script::slot(&calls[j].keys.0));
        match group_of.iter().position(|g| *g == (conn, slot)) {
            Some(g) => groups[g].push(j),
            None => {
                group_of.push((conn, slot));
                groups.push(vec![j]);
            }
        }
    }
    let results = join_all(groups.iter().map(|g| {
        let lim = merged[g[0]].1;
        let part: Vec<Call<'_>> = g.iter().map(|&j| calls[j].clone()).collect();
        async move { lim.run(Op::Check, &part).await }
    }))
    .await;

    // Per merged entry: its outcome, if its group answered.
    let mut outcomes: Vec<Option<Outcome>> = vec![None; merged.len()];
    let mut failed: Option<(usize, Degraded)> = None;
    for (g, r) in groups.iter().zip(&results) {
        match r {
            Ok((_, out)) => {
                for (&j, o) in g.iter().zip(out) {
                    outcomes[j] = Some(*o);
                }
            }
            Err(e) => {
                let why = match e {
                    Error::Unavailable(w) => *w,
                    _ => Degraded::Failed,
                };
                let first = g.iter().map(|&j| merged[j].0).min().unwrap_or(0);
                if failed.is_none_or(|(i, _)| first < i) {
                    failed = Some((first, why));
                }
            }
        }
    }
    let all = failed.is_none()
        && outcomes
            .iter()
            .all(|o| o.is_some_and(|o| o.decision.is_allowed()));
    if !all {
        // Release every group that charged (all its limits admitted).
        let charged: Vec<&Vec<usize>> = groups
            .iter()
            .filter(|g| {
                g.iter()
                    .all(|&j| outcomes[j].is_some_and(|o| o.decision.is_allowed()))
            })
            .collect();
        let _ = join_all(charged.iter().map(|g| {
            let lim = merged[g[0]].1;
            let part: Vec<Call<'_>> = g
                .iter()
                .map(|&j| {
                    let mut c = calls[j].clone();
                    c.back = c.n;
                    c.ticket = outcomes[j].map(|o| o.ticket).unwrap_or_default();
                    c
                })
                .collect();
            async move { lim.run(Op::Release, &part).await }
        }))
        .await;
    }
    if let Some((i, why)) = failed {
        let (lim, key, _) = limits[i];
        // The first failing limit's policy decides for the request.
        let total: u64 = merged
            .iter()
            .filter(|m| std::sync::Arc::ptr_eq(&m.1.inner, &lim.inner) && m.2 == key)
            .map(|m| m.3)
            .sum();
        let d = lim.degrade(key, total, false, why);
        return Ok(RedisMultiDecision {
            denied_by: (!d.is_allowed()).then_some(i),
            remaining: d.remaining(),
            retry_after: d.retry_after().map_or(0, |r| r.as_nanos() as u64),
            path: d.path(),
            degraded: Some(why),
        });
    }
    // Entries whose group charged them (every limit of the group admitted).
    let charged_entry: Vec<bool> = {
        let mut c = vec![false; merged.len()];
        for g in &groups {
            let all_in = g
                .iter()
                .all(|&j| outcomes[j].is_some_and(|o| o.decision.is_allowed()));
            for &j in g {
                c[j] = all_in;
            }
        }
        c
    };
    let mut remaining = u64::MAX;
    let mut retry = 0u64;
    let mut denied_by: Option<usize> = None;
    for (j, m) in merged.iter().enumerate() {
        let Some(o) = outcomes[j] else { continue };
        let d = o.decision;
        if all {
            remaining = remaining.min(d.remaining());
        } else if d.is_allowed() {
            // A charged decision, released since: the room without this request. (In a
            // group that denied, the script judged it uncharged already.)
            let back = if charged_entry[j] { m.3 } else { 0 };
            remaining = remaining.min(d.remaining() + back);
        } else {
            remaining = remaining.min(d.remaining());
            retry = retry.max(d.retry_after().map_or(0, |r| r.as_nanos() as u64));
            denied_by = Some(denied_by.map_or(m.0, |b| b.min(m.0)));
        }
    }
    Ok(RedisMultiDecision {
        denied_by: if all { None } else { denied_by.or(Some(0)) },
        remaining,
        retry_after: retry,
        path: Path::Redis,
        degraded: None,
    })
}
