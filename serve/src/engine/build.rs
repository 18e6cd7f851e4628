//! Building a rule set from a rules file's spec: each rule's limiter (kept across a reload
//! when its name and quota are), what the APIs write of it, and the rules made on demand for
//! descriptors that carry their own limit.

use std::sync::Arc;
use std::time::Duration;

use slidegate::redis::{Policy as RedisPolicy, RedisLimiter};
use slidegate::{KeyedLimiter, Quota};

use super::rule_set::{Backend, Limiter, MAX_OVERRIDES, Rule, RuleRef, RuleSet, Unavailable};
use crate::metrics;
use crate::rules::{self, RuleSpec, Spec};
use crate::wire::RuleWire;

impl RuleSet {
    pub(super) fn build(
        spec: Spec,
        old: Option<&RuleSet>,
        backend: &Backend,
    ) -> Result<RuleSet, String> {
        let mut rules = Vec::with_capacity(spec.rules.len());
        for r in spec.rules {
            let kept = old.and_then(|o| {
                o.rules
                    .iter()
                    .find(|x| x.spec.name == r.name && x.spec.quota == r.quota)
                    .map(|x| x.limiter.clone())
            });
            rules.push(Rule::new(r, kept, backend)?);
        }
        Ok(RuleSet {
            replacing: rules.iter().any(|r| !r.spec.replaces.is_empty()),
            rules,
            domains: spec.domains,
            key_default: spec.key_default,
            key_overrides: spec.key_overrides,
            overrides: old.map_or_else(Default::default, |o| Arc::clone(&o.overrides)),
        })
    }

    /// The rule for a descriptor's own limit, made on first use.
    pub(super) fn override_rule(
        &self,
        limit: u64,
        window: Duration,
        backend: &Backend,
    ) -> Result<RuleRef, String> {
        let id = (limit, window.as_secs());
        let mut map = self.overrides.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = map.get(&id) {
            return Ok(RuleRef::Override(Arc::clone(r)));
        }
        if map.len() >= MAX_OVERRIDES {
            return Err(format!(
                "more than {MAX_OVERRIDES} distinct limit overrides"
            ));
        }
        let quota = Quota::new(limit, window).map_err(|e| e.to_string())?;
        let unit = rules::UNITS
            .iter()
            .find(|(_, s)| *s == window.as_secs())
            .map_or("s", |(u, _)| u);
        let name = format!("override-{limit}-per-{unit}");
        let spec = RuleSpec {
            display: name.clone(),
            // The reference service names no override's limit.
            named: false,
            name,
            quota,
            shadow: false,
            replaces: Vec::new(),
        };
        let rule = Arc::new(Rule::new(spec, None, backend)?);
        map.insert(id, Arc::clone(&rule));
        Ok(RuleRef::Override(rule))
    }
}

impl Rule {
    pub(super) fn new(
        spec: RuleSpec,
        kept: Option<Limiter>,
        backend: &Backend,
    ) -> Result<Rule, String> {
        let limiter = match (kept, backend) {
            (Some(l), _) => l,
            (None, Backend::Memory { clock, max_keys }) => Limiter::Memory(Arc::new(
                KeyedLimiter::builder(spec.quota)
                    .clock(clock.clone())
                    .max_keys(*max_keys)
                    .build(),
            )),
            (
                None,
                Backend::Redis {
                    conn,
                    prefix,
                    deadline,
                    unavailable,
                },
            ) => {
                let policy = match unavailable {
                    Unavailable::Allow => RedisPolicy::Allow,
                    Unavailable::Deny => RedisPolicy::Deny,
                    Unavailable::Local => RedisPolicy::Local(spec.quota),
                };
                Limiter::Redis(
                    RedisLimiter::builder(spec.quota)
                        .prefix(redis_prefix(prefix, &spec))
                        .deadline(*deadline)
                        .policy(policy)
                        .build(conn)
                        .map_err(|e| format!("rule {:?}: {e}", spec.name))?,
                )
            }
        };
        Rule::with_limiter(spec, limiter)
    }

    pub(super) fn with_limiter(spec: RuleSpec, limiter: Limiter) -> Result<Rule, String> {
        Ok(Rule {
            wire: RuleWire::new(&spec)?,
            metrics: metrics::RuleMetrics::new(&spec.display),
            limiter,
            spec,
        })
    }
}

/// The Redis key prefix of a rule: the server's prefix and a fingerprint of the rule's name
/// and quota, so servers with the same rule share its counts and a changed quota starts
/// afresh (its state would be read with the wrong shape otherwise).
pub(super) fn redis_prefix(root: &str, spec: &RuleSpec) -> String {
    let q = spec.quota;
    let id = format!(
        "{}\0{}\0{}\0{}\0{:?}",
        spec.name,
        q.limit(),
        q.window().as_nanos(),
        q.granularity().as_nanos(),
        q.mode()
    );
    // FNV-1a: stable across builds and platforms, which std's hashers do not promise.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{root}{h:016x}:")
}
