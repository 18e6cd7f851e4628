//! The decision on resolved statuses: checked against the rules' limiters all or nothing,
//! in memory or through Redis, and what each status reports.

use std::sync::Arc;
use std::time::Duration;

use slidegate::redis::RedisLimiter;
use slidegate::{Decision, Limit};

use super::request::{Judge, Outcome, Status, StoreError};
use super::rule_set::{Limiter, Rule, RuleRef, RuleSet};
use crate::metrics;

/// One decision, on whichever backend the rules' limiters use; a peek (`judge`) answers as the
/// check would and charges nothing.
pub(super) async fn decide(
    set: &RuleSet,
    mut statuses: Vec<Status>,
    keys: &[String],
    cost: u64,
    judge: Judge,
) -> Result<Outcome, StoreError> {
    let peek = judge == Judge::Peek;
    // The enforcing statuses: the first apart, so the common request (one rule) allocates
    // no list of them.
    let (mut first, mut more) = (None, Vec::new());
    let mut never = false;
    for i in 0..statuses.len() {
        let Some((limit, shadow)) = statuses[i]
            .rule
            .as_ref()
            .map(|w| (w.get(set).spec.quota.limit(), w.get(set).spec.shadow))
        else {
            continue;
        };
        statuses[i].never = charged(&statuses, keys, i, cost) > limit;
        if !shadow {
            if statuses[i].never {
                never = true;
            } else if first.is_none() {
                first = Some(i);
            } else {
                more.push(i);
            }
        }
    }

    let mut allowed = true;
    let mut retry = None;
    if never {
        allowed = false;
    } else if let (Some(i), true) = (first, more.is_empty()) {
        let s = &mut statuses[i];
        let limiter = &rule_of(set, &s.rule).limiter;
        let d = if peek {
            peek_n(limiter, &keys[s.key], cost).await?
        } else {
            check(limiter, &keys[s.key], cost).await?
        };
        allowed = d.is_allowed();
        retry = d.retry_after();
        s.apply(&d);
    } else if let Some(i) = first {
        let enforcing: Vec<usize> = core::iter::once(i).chain(more).collect();
        let list: Vec<(&Limiter, &String, u64)> = enforcing
            .iter()
            .map(|&i| {
                (
                    &rule_of(set, &statuses[i].rule).limiter,
                    &keys[statuses[i].key],
                    cost,
                )
            })
            .collect();
        let (ok, denied_by, wait, peeks) = if peek {
            // Each limit judged for what the request would charge it (a rule and key listed
            // twice: the sum), all or nothing as a check.
            let charges: Vec<(&Limiter, &String, u64)> = enforcing
                .iter()
                .zip(&list)
                .map(|(&i, &(l, k, _))| (l, k, charged(&statuses, keys, i, cost)))
                .collect();
            let peeks = peek_all(&charges).await?;
            let denied_by = peeks.iter().position(|d| !d.is_allowed());
            let wait = peeks.iter().filter_map(Decision::retry_after).max();
            (denied_by.is_none(), denied_by, wait, peeks)
        } else {
            let (ok, denied_by, wait) = check_all(&list).await?;
            (ok, denied_by, wait, peek_all(&list).await?)
        };
        allowed = ok;
        retry = wait;
        for (n, (&i, d)) in enforcing.iter().zip(peeks).enumerate() {
            let s = &mut statuses[i];
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
            if !allowed && (d.remaining() < cost || denied_by == Some(n)) {
                s.over = true;
                s.retry_after = wait;
            }
        }
    }

    for s in &mut statuses {
        // A clone, so the rule outlives the status's borrow (an `Arc` only for overrides).
        let Some(rule) = s.rule.clone() else {
            continue;
        };
        let r = rule.get(set);
        if s.never {
            // Never admitted: over (or, in shadow, would be), with no time to wait.
            let d = peek_n(&r.limiter, &keys[s.key], 1).await?;
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
            s.retry_after = None;
            if r.spec.shadow {
                s.shadow_over = true;
            } else {
                s.over = true;
            }
        } else if r.spec.shadow {
            let d = if allowed && !peek {
                check(&r.limiter, &keys[s.key], cost).await?
            } else {
                peek_n(&r.limiter, &keys[s.key], cost).await?
            };
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
            s.shadow_over = !d.is_allowed();
        } else if never {
            let d = peek_n(&r.limiter, &keys[s.key], 1).await?;
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
        }
        // A rule's checks count what was charged against it: not peeks.
        if !peek {
            r.metrics.record(s.over, s.shadow_over);
        }
    }
    if never {
        retry = None;
    }
    Ok(Outcome {
        allowed,
        statuses,
        retry_after: if allowed { None } else { retry },
    })
}

/// The common request in memory, one status whose file rule enforces and can admit its cost: its
/// check, without the general decision's future (which answers it alike, a test holds).
/// `None`, and `statuses` left as they were, for any other.
#[inline]
pub(super) fn decide_one(
    set: &RuleSet,
    statuses: &mut Vec<Status>,
    keys: &[String],
    cost: u64,
    judge: Judge,
) -> Option<Outcome> {
    let [s] = &mut statuses[..] else {
        return None;
    };
    let Some(RuleRef::InFile(i)) = s.rule else {
        return None;
    };
    let r = &set.rules[i];
    let Limiter::Memory(limiter) = &r.limiter else {
        return None;
    };
    if r.spec.shadow || cost > r.spec.quota.limit() {
        return None;
    }
    let d = match judge {
        Judge::Charge => limiter.check_n(&keys[s.key], cost),
        Judge::Peek => limiter.peek_n(&keys[s.key], cost),
    }
    .ok()?;
    s.apply(&d);
    if judge == Judge::Charge {
        r.metrics.record(s.over, false);
    }
    Some(Outcome {
        allowed: d.is_allowed(),
        statuses: std::mem::take(statuses),
        retry_after: if d.is_allowed() {
            None
        } else {
            d.retry_after()
        },
    })
}

/// What the request charges status `i`'s rule and key: its cost for each status with the
/// same rule and key.
#[inline]
pub(super) fn charged(statuses: &[Status], keys: &[String], i: usize, cost: u64) -> u64 {
    let s = &statuses[i];
    if statuses.len() == 1 {
        return cost;
    }
    let same = |t: &Status| {
        keys[t.key] == keys[s.key]
            && match (&t.rule, &s.rule) {
                (Some(RuleRef::InFile(a)), Some(RuleRef::InFile(b))) => a == b,
                (Some(RuleRef::Override(a)), Some(RuleRef::Override(b))) => Arc::ptr_eq(a, b),
                _ => false,
            }
    };
    let times = statuses.iter().filter(|t| same(t)).count();
    cost.saturating_mul(times as u64)
}

#[inline]
pub(super) fn rule_of<'a>(set: &'a RuleSet, rule: &'a Option<RuleRef>) -> &'a Rule {
    rule.as_ref()
        .expect("an enforcing status has a rule")
        .get(set)
}

impl Status {
    /// The status of a request for `rule` and `key`, before it is decided.
    #[inline]
    pub(super) fn new(rule: Option<RuleRef>, key: usize) -> Status {
        Status {
            rule,
            unlimited: false,
            over: false,
            shadow_over: false,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
            key,
            never: false,
        }
    }

    #[inline]
    pub(super) fn apply(&mut self, d: &Decision) {
        self.remaining = d.remaining();
        self.reset_after = d.reset_after();
        if !d.is_allowed() {
            self.over = true;
            self.retry_after = d.retry_after();
        }
    }
}

// `&String`: the in-memory limiters are keyed by `String`, and a `&str` would be copied.
#[allow(clippy::ptr_arg)]
pub(super) async fn check(
    limiter: &Limiter,
    key: &String,
    cost: u64,
) -> Result<Decision, StoreError> {
    match limiter {
        Limiter::Memory(l) => l.check_n(key, cost).map_err(|e| StoreError(e.to_string())),
        Limiter::Redis(l) => {
            let d = l
                .check_n(key, cost)
                .await
                .map_err(|e| StoreError(e.to_string()))?;
            metrics::redis_path(d.degraded());
            Ok(d.decision())
        }
    }
}

/// What a check of `cost` would decide, charging nothing; `cost` is within the limit.
#[allow(clippy::ptr_arg)]
pub(super) async fn peek_n(
    limiter: &Limiter,
    key: &String,
    cost: u64,
) -> Result<Decision, StoreError> {
    match limiter {
        Limiter::Memory(l) => l.peek_n(key, cost).map_err(|e| StoreError(e.to_string())),
        Limiter::Redis(l) => {
            let d = l
                .peek_n(key, cost)
                .await
                .map_err(|e| StoreError(e.to_string()))?;
            metrics::redis_path(d.degraded());
            Ok(d.decision())
        }
    }
}

pub(super) async fn peek_all(
    list: &[(&Limiter, &String, u64)],
) -> Result<Vec<Decision>, StoreError> {
    futures_util::future::join_all(list.iter().map(|&(l, k, n)| peek_n(l, k, n)))
        .await
        .into_iter()
        .collect()
}

/// All or nothing: (allowed, index of the first that denied, the longest wait).
pub(super) async fn check_all(
    list: &[(&Limiter, &String, u64)],
) -> Result<(bool, Option<usize>, Option<Duration>), StoreError> {
    match list[0].0 {
        Limiter::Memory(_) => {
            let handles: Vec<_> = list
                .iter()
                .map(|(l, k, _)| match l {
                    Limiter::Memory(l) => l.key(*k),
                    Limiter::Redis(_) => unreachable!("one backend per rule set"),
                })
                .collect();
            let limits: Vec<(&dyn Limit, u64)> = handles
                .iter()
                .zip(list)
                .map(|(h, (_, _, n))| (h as &dyn Limit, *n))
                .collect();
            let m = slidegate::check_all(&limits).map_err(|e| StoreError(e.to_string()))?;
            Ok((m.is_allowed(), m.denied_by(), m.retry_after()))
        }
        Limiter::Redis(_) => {
            let limits: Vec<(&RedisLimiter, &str, u64)> = list
                .iter()
                .map(|(l, k, n)| match l {
                    Limiter::Redis(r) => (r, k.as_str(), *n),
                    Limiter::Memory(_) => unreachable!("one backend per rule set"),
                })
                .collect();
            let m = slidegate::redis::check_all(&limits)
                .await
                .map_err(|e| StoreError(e.to_string()))?;
            metrics::redis_path(m.degraded());
            Ok((m.is_allowed(), m.denied_by(), m.retry_after()))
        }
    }
}
