//! The decision: a request's descriptors (or key) resolved to rules, checked against the
//! rules' limiters all or nothing, and one status per descriptor.
//!
//! - Every enforcing rule a request matches is checked together: the request is admitted
//!   only if all admit, and then charged to all; if one denies, none is charged (the
//!   library's `check_all`, or its Redis twin). Envoy's reference service instead charges
//!   every descriptor even when another is over its limit.
//! - A shadow rule decides and records (its counts, its metrics, its `RateLimit` item) but
//!   always reports OK. It is charged when the request is admitted and it would admit it,
//!   as it would be if it enforced.
//! - A descriptor that matches no rule, a rule marked unlimited, or a rule another matched
//!   rule `replaces` is answered OK with no limit; so is every descriptor of an unknown
//!   domain (the reference service's answer).
//! - A cost above a rule's limit could never be admitted: OVER_LIMIT with no retry time. So
//!   is a rule and key the request lists several times (two equal descriptors, a rule named
//!   twice) whose costs sum above the limit: the library charges a limit listed twice the
//!   sum.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use arc_swap::ArcSwap;
use slidegate::KeyedLimiter;
use slidegate::clock::{Clock, ManualClock, Nanos, QuantaClock};
use slidegate::redis::{Connection, RedisLimiter};

use crate::metrics;
use crate::rules::{self, RuleSpec, Spec};
use crate::wire::RuleWire;
use decide::{decide, decide_one};

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

type MemLimiter = KeyedLimiter<String, ServeClock>;

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
enum Limiter {
    Memory(Arc<MemLimiter>),
    Redis(RedisLimiter),
}

/// A rule with its limiter.
pub(crate) struct Rule {
    pub(crate) spec: RuleSpec,
    limiter: Limiter,
    /// What the APIs write of it, made once here so that no answer builds it again.
    pub(crate) wire: RuleWire,
    pub(crate) metrics: metrics::RuleMetrics,
}

/// The rules in force.
pub(crate) struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    domains: rules::Map<String, rules::Level>,
    key_default: Vec<usize>,
    key_overrides: rules::Map<String, Vec<usize>>,
    /// Whether a rule `replaces` others (Envoy's YAML), which every descriptor request then
    /// looks for.
    replacing: bool,
    /// Rules made for descriptors that carry their own limit (Envoy's `limit` override), by
    /// (limit, window in seconds); kept across reloads.
    overrides: Arc<Mutex<Overrides>>,
}

/// Rules made for descriptors' own limits, by (limit, window in seconds).
type Overrides = HashMap<(u64, u64), Arc<Rule>>;

/// The most distinct `limit` overrides a server makes rules for.
const MAX_OVERRIDES: usize = 64;

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
    pub(crate) fn get<'a>(&'a self, set: &'a RuleSet) -> &'a Rule {
        match self {
            RuleRef::InFile(i) => &set.rules[*i],
            RuleRef::Override(r) => r,
        }
    }
}

/// A check, as both APIs ask it; `D` is the API's own descriptor, read where it was decoded.
pub(crate) enum Request<'a, D: Descriptor + 'a> {
    /// A key, against the named rules (or the file's key rules).
    Key {
        key: &'a str,
        rules: Option<Vec<&'a str>>,
    },
    /// Envoy's descriptors in a domain.
    Descriptors {
        domain: &'a str,
        descriptors: Cow<'a, [D]>,
    },
}

/// One descriptor as an API decoded it: its entries and, perhaps, a limit of its own. The
/// engine reads the API's own values, so a request is checked without a list of entries
/// copied out of it.
pub(crate) trait Descriptor: Clone {
    /// (key, value), outermost first.
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone;
    /// (requests per unit, unit window), or why the unit is not one.
    fn limit(&self) -> Result<Option<(u64, Duration)>, String>;
}

/// A descriptor of entries and a limit already read (the tests' requests).
#[cfg(test)]
#[derive(Clone)]
pub(crate) struct Pairs<'a> {
    pub(crate) entries: Vec<(&'a str, &'a str)>,
    /// (requests per unit, unit window).
    pub(crate) limit: Option<(u64, Duration)>,
}

#[cfg(test)]
impl Descriptor for Pairs<'_> {
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.entries.iter().copied()
    }

    fn limit(&self) -> Result<Option<(u64, Duration)>, String> {
        Ok(self.limit)
    }
}

/// A request that cannot be checked, with the field at fault (in the API's own naming).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl Invalid {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Invalid {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Bounds on one request, so one request cannot make a server build huge keys.
pub(crate) const MAX_DESCRIPTORS: usize = 64;
pub(crate) const MAX_ENTRIES: usize = 32;
pub(crate) const MAX_KEY_BYTES: usize = 4096;

/// The answer for one descriptor (or one rule of a key).
pub(crate) struct Status {
    /// The rule applied; `None` for no limit.
    pub(crate) rule: Option<RuleRef>,
    /// OVER_LIMIT (never for a shadow rule).
    pub(crate) over: bool,
    /// A shadow rule that would have denied.
    pub(crate) shadow_over: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after: Duration,
    /// When over: how long until the request would be admitted; `None` if never (the cost
    /// is above the limit).
    pub(crate) retry_after: Option<Duration>,
    /// Its counter key's index in the request's keys.
    key: usize,
    /// What the request charges this rule and key is above its limit.
    never: bool,
}

/// The answer to a check.
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    pub(crate) statuses: Vec<Status>,
    /// When denied: the longest wait among the rules that deny; `None` if one never admits.
    pub(crate) retry_after: Option<Duration>,
}

impl Outcome {
    /// The status with a rule and its rule, when only one status has one (the common answer).
    pub(crate) fn single<'a>(&'a self, set: &'a RuleSet) -> Option<(&'a Status, &'a Rule)> {
        let mut ruled = self
            .statuses
            .iter()
            .filter_map(|s| Some((s, s.rule.as_ref()?.get(set))));
        match (ruled.next(), ruled.next()) {
            (one, None) => one,
            _ => None,
        }
    }

    /// Whether a status has an item in `RateLimit`: every one when admitted, the ones that
    /// deny when denied.
    pub(crate) fn in_limit(&self, s: &Status) -> bool {
        self.allowed || s.over
    }

    /// The `t` of a status's `RateLimit` item: when a denying rule admits again, else when
    /// its window empties.
    pub(crate) fn reset_of(&self, s: &Status) -> Duration {
        if s.over {
            s.retry_after.unwrap_or(s.reset_after)
        } else {
            s.reset_after
        }
    }
}

/// Redis failed in a way no policy covers (an error reply, a bad script answer).
#[derive(Debug)]
pub(crate) struct StoreError(pub(crate) String);

/// The decision service's core: the rules in force and the backend.
pub(crate) struct Engine {
    rules: ArcSwap<RuleSet>,
    backend: Backend,
    /// 1 at start, +1 per reload, after the reload's rules are stored.
    generation: AtomicU64,
    /// This engine among the process's, so a thread's copy of its rules is not taken for
    /// another's (the tests make many).
    id: u64,
}

impl Engine {
    pub(crate) fn new(spec: Spec, backend: Backend) -> Result<Engine, String> {
        static ENGINES: AtomicU64 = AtomicU64::new(0);
        let set = RuleSet::build(spec, None, &backend)?;
        Ok(Engine {
            rules: ArcSwap::from_pointee(set),
            backend,
            generation: AtomicU64::new(1),
            id: ENGINES.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Puts `spec` in force, keeping the counts of rules whose name and quota it keeps.
    pub(crate) fn reload(&self, spec: Spec) -> Result<u64, String> {
        let old = self.rules.load();
        let set = RuleSet::build(spec, Some(&old), &self.backend)?;
        self.rules.store(Arc::new(set));
        // Release: a thread that reads the new generation (Acquire, `decide_in`) then loads
        // these rules or newer ones.
        Ok(self.generation.fetch_add(1, Ordering::Release) + 1)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    pub(crate) fn rules(&self) -> arc_swap::Guard<Arc<RuleSet>> {
        self.rules.load()
    }

    pub(crate) fn is_redis(&self) -> bool {
        matches!(self.backend, Backend::Redis { .. })
    }

    /// Decides in memory, synchronously: `render` gets the rules the decision used.
    pub(crate) fn decide_local<D: Descriptor, R>(
        &self,
        request: &Request<'_, D>,
        cost: u64,
        render: impl FnOnce(&RuleSet, Result<&Outcome, Invalid>) -> R,
    ) -> R {
        thread_local! {
            static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
        }
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.decide_in(&mut scratch, request, cost, render),
            // A decision made inside `render`.
            Err(_) => self.decide_in(&mut Scratch::new(), request, cost, render),
        })
    }

    fn decide_in<D: Descriptor, R>(
        &self,
        scratch: &mut Scratch,
        request: &Request<'_, D>,
        cost: u64,
        render: impl FnOnce(&RuleSet, Result<&Outcome, Invalid>) -> R,
    ) -> R {
        // The thread's copy of the rules while the generation is the one it was taken at: a
        // load from the `ArcSwap` (its debt list, its guard) costs more than checking.
        let generation = self.generation.load(Ordering::Acquire);
        let set = match scratch.rules.take() {
            Some((id, g, set)) if id == self.id && g == generation => set,
            _ => self.rules.load_full(),
        };
        let outcome = set
            .resolve(request, cost, &self.backend, scratch)
            .map(|mut items| {
                if let Some(outcome) = decide_one(&set, &mut items, &scratch.keys, cost) {
                    return outcome;
                }
                // Polled once where it stands: `now_or_never` took the future by value, a copy
                // of all of it (sized for the Redis calls it may await) on every decision.
                let decision = pin!(decide(&set, items, &scratch.keys, cost));
                let Poll::Ready(outcome) = decision.poll(&mut Context::from_waker(Waker::noop()))
                else {
                    unreachable!("in-memory limiters never wait")
                };
                outcome.expect("in-memory limiters never fail")
            });
        let answer = match outcome {
            Ok(o) => {
                let answer = render(&set, Ok(&o));
                scratch.recycle(o.statuses);
                answer
            }
            Err(e) => render(&set, Err(e)),
        };
        scratch.rules = Some((self.id, generation, set));
        answer
    }

    /// Decides through Redis.
    pub(crate) async fn decide_remote<D: Descriptor>(
        &self,
        request: &Request<'_, D>,
        cost: u64,
    ) -> (Arc<RuleSet>, Result<Result<Outcome, StoreError>, Invalid>) {
        let set = self.rules.load_full();
        let mut scratch = Scratch::new();
        let items = match set.resolve(request, cost, &self.backend, &mut scratch) {
            Ok(items) => items,
            Err(e) => return (set, Err(e)),
        };
        let outcome = decide(&set, items, &scratch.keys, cost).await;
        (set, Ok(outcome))
    }

    /// Decides a batch against one rule set. Every request is resolved (and so checked)
    /// before any is decided: a bad request decides none, with its index, and a reload in
    /// between cannot make a request invalid after others were charged.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn decide_batch<D: Descriptor>(
        &self,
        requests: &[(Request<'_, D>, u64)],
    ) -> (
        Arc<RuleSet>,
        Result<Result<Vec<Outcome>, StoreError>, (usize, Invalid)>,
    ) {
        let set = self.rules.load_full();
        let mut resolved = Vec::with_capacity(requests.len());
        for (i, (request, cost)) in requests.iter().enumerate() {
            let mut scratch = Scratch::new();
            match set.resolve(request, *cost, &self.backend, &mut scratch) {
                Ok(items) => resolved.push((items, scratch, *cost)),
                Err(e) => return (set, Err((i, e))),
            }
        }
        let mut outcomes = Vec::with_capacity(resolved.len());
        for (items, scratch, cost) in resolved {
            match decide(&set, items, &scratch.keys, cost).await {
                Ok(o) => outcomes.push(o),
                Err(e) => return (set, Ok(Err(e))),
            }
        }
        (set, Ok(Ok(outcomes)))
    }

    /// The in-memory rules' key counts, for the metrics.
    pub(crate) fn key_counts(&self) -> Vec<(String, usize)> {
        let set = self.rules.load();
        set.rules
            .iter()
            .filter_map(|r| match &r.limiter {
                Limiter::Memory(l) => Some((r.spec.display.clone(), l.len())),
                Limiter::Redis(_) => None,
            })
            .collect()
    }
}

/// What an in-memory decision reuses from one request to the next on a thread: the list of
/// statuses and the counter keys' `String`s, which would otherwise be two allocations and
/// two frees per request of one descriptor. It holds at most a request's bounds
/// (`MAX_DESCRIPTORS` keys of up to `MAX_KEY_BYTES`) per thread.
pub(crate) struct Scratch {
    /// The rules of the last in-memory decision on the thread: (engine id, generation, rules).
    rules: Option<(u64, u64, Arc<RuleSet>)>,
    statuses: Vec<Status>,
    /// The keys, `Status::key` indexing them; the first `used` are this request's.
    keys: Vec<String>,
    used: usize,
}

mod build;
mod decide;
mod resolve;
#[cfg(test)]
mod tests;
