//! The rules in force: each rule with its limiter (in memory or in Redis) and what the APIs
//! write of it, the set a request is resolved against, and references to its rules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slidegate::KeyedLimiter;
use slidegate::clock::{Clock, ManualClock, Nanos, QuantaClock};
use slidegate::redis::{Connection, RedisLimiter};

use crate::metrics;
use crate::rules::{self, RuleSpec};
use crate::wire::RuleWire;

/// The clock of the in-memory limiters: quanta's in service, a manual one in tests.
#[derive(Clone)]
pub(crate) enum ServeClock {
    Quanta(QuantaClock),
    #[allow(dead_code)]
    Manual(ManualClock),
}

impl Clock for ServeClock {
    #[inline]
    fn now(&self) -> Nanos {
        match self {
            ServeClock::Quanta(c) => c.now(),
            ServeClock::Manual(c) => c.now(),
        }
    }
}

pub(super) type MemLimiter = KeyedLimiter<String, ServeClock>;

/// Where the counts live.
pub(crate) enum Backend {
    /// In this process: one keyed limiter per rule.
    Memory { clock: ServeClock, max_keys: usize },
    /// In Redis, shared by every server with the same rules and prefix.
    Redis {
        conn: Connection,
        prefix: String,
        deadline: Duration,
        unavailable: Unavailable,
    },
}

/// What a Redis-backed server answers while Redis cannot decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// Admit every request.
    Allow,
    /// Deny every request.
    Deny,
    /// Each rule's quota counted in this process alone.
    Local,
}

#[derive(Clone)]
pub(super) enum Limiter {
    Memory(Arc<MemLimiter>),
    Redis(RedisLimiter),
}

/// A rule with its limiter.
pub(crate) struct Rule {
    pub(crate) spec: RuleSpec,
    pub(super) limiter: Limiter,
    /// What the APIs write of it, made once here so that no answer builds it again.
    pub(crate) wire: RuleWire,
    pub(crate) metrics: metrics::RuleMetrics,
}

/// The rules in force.
pub(crate) struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    pub(super) domains: rules::Map<String, rules::Level>,
    pub(super) key_default: Vec<usize>,
    pub(super) key_overrides: rules::Map<String, Vec<usize>>,
    /// Whether a rule `replaces` others (Envoy's YAML), which every descriptor request then
    /// looks for.
    pub(super) replacing: bool,
    /// Rules made for descriptors that carry their own limit (Envoy's `limit` override), by
    /// (limit, window in seconds); kept across reloads.
    pub(super) overrides: Arc<Mutex<Overrides>>,
}

/// Rules made for descriptors' own limits, by (limit, window in seconds).
pub(super) type Overrides = HashMap<(u64, u64), Arc<Rule>>;

/// The most distinct `limit` overrides a server makes rules for.
pub(super) const MAX_OVERRIDES: usize = 64;

/// A reference to the rule a status applies: one of the rule set's, or one made for a
/// descriptor's own limit.
#[derive(Clone)]
pub(crate) enum RuleRef {
    /// The rule at this index of [`RuleSet::rules`] (the rules file's).
    InFile(usize),
    /// A rule made for a `limit` override, kept across reloads.
    Override(Arc<Rule>),
}

impl RuleRef {
    #[inline]
    pub(crate) fn get<'a>(&'a self, set: &'a RuleSet) -> &'a Rule {
        match self {
            RuleRef::InFile(i) => &set.rules[*i],
            RuleRef::Override(r) => r,
        }
    }
}
