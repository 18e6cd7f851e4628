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
use slidegate::clock::{Clock, ManualClock, Nanos, QuantaClock};
use slidegate::redis::{Connection, Policy as RedisPolicy, RedisLimiter};
use slidegate::{Decision, KeyedLimiter, Limit, Quota};

use crate::metrics;
use crate::rules::{self, RuleSpec, Spec};
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

impl RuleSet {
    fn build(spec: Spec, old: Option<&RuleSet>, backend: &Backend) -> Result<RuleSet, String> {
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

    /// Each descriptor's (or named rule's) rule and key, checked for size.
    fn resolve<D: Descriptor>(
        &self,
        request: &Request<'_, D>,
        cost: u64,
        backend: &Backend,
        scratch: &mut Scratch,
    ) -> Result<Vec<Status>, Invalid> {
        if cost == 0 {
            return Err(Invalid::new("cost", "must be at least 1"));
        }
        match request {
            Request::Key { key, rules } => {
                if key.len() + 1 > MAX_KEY_BYTES {
                    return Err(Invalid::new(
                        "key",
                        format!("longer than {} bytes", MAX_KEY_BYTES - 1),
                    ));
                }
                let named: Vec<usize>;
                let indices: &[usize] = match rules {
                    Some(names) => {
                        let mut v = Vec::with_capacity(names.len());
                        for (i, name) in names.iter().enumerate() {
                            let r = self
                                .rules
                                .iter()
                                .position(|r| r.spec.name == *name)
                                .ok_or_else(|| {
                                    Invalid::new(
                                        format!("rules[{i}]"),
                                        format!("no rule named {name:?}"),
                                    )
                                })?;
                            v.push(r);
                        }
                        named = v;
                        &named
                    }
                    None => self.key_overrides.get(*key).unwrap_or(&self.key_default),
                };
                let mut items = scratch.statuses(indices.len());
                // One key for every rule.
                let (at, k) = scratch.key(key.len() + 1);
                k.push('k');
                k.push_str(key);
                for &i in indices {
                    items.push(Status::new(Some(RuleRef::InFile(i)), at));
                }
                Ok(items)
            }
            Request::Descriptors {
                domain,
                descriptors,
            } => {
                if domain.is_empty() {
                    return Err(Invalid::new("domain", "must not be empty"));
                }
                if descriptors.is_empty() {
                    return Err(Invalid::new("descriptors", "must not be empty"));
                }
                if descriptors.len() > MAX_DESCRIPTORS {
                    return Err(Invalid::new(
                        "descriptors",
                        format!("more than {MAX_DESCRIPTORS}"),
                    ));
                }
                let level = rules::get(&self.domains, domain);
                let mut items = scratch.statuses(descriptors.len());
                for (i, d) in descriptors.iter().enumerate() {
                    let at = |f: &str| format!("descriptors[{i}].{f}");
                    let entries = d.entries();
                    if entries.len() == 0 {
                        return Err(Invalid::new(at("entries"), "must not be empty"));
                    }
                    if entries.len() > MAX_ENTRIES {
                        return Err(Invalid::new(
                            at("entries"),
                            format!("more than {MAX_ENTRIES}"),
                        ));
                    }
                    if let Some(j) = entries.clone().position(|(k, _)| k.is_empty()) {
                        return Err(Invalid::new(
                            at(&format!("entries[{j}].key")),
                            "must not be empty",
                        ));
                    }
                    let (key, k) = scratch.key(0);
                    descriptor_key(k, domain, entries.clone());
                    if k.len() > MAX_KEY_BYTES {
                        return Err(Invalid::new(
                            at("entries"),
                            format!("longer than {MAX_KEY_BYTES} bytes in all"),
                        ));
                    }
                    let limit = d.limit().map_err(|m| Invalid::new(at("limit.unit"), m))?;
                    let which = match (level, limit) {
                        (None, _) => None,
                        (Some(_), Some((limit, window))) => Some(
                            self.override_rule(limit, window, backend)
                                .map_err(|m| Invalid::new(at("limit"), m))?,
                        ),
                        (Some(level), None) => match rules::resolve(level, entries) {
                            rules::Target::Rule(r) => Some(RuleRef::InFile(r)),
                            rules::Target::None | rules::Target::Unlimited => None,
                        },
                    };
                    items.push(Status::new(which, key));
                }
                // Envoy's `replaces`: a matched rule switches off the rules it names.
                if self.replacing {
                    let replaced: Vec<String> = items
                        .iter()
                        .filter_map(|s| s.rule.as_ref())
                        .flat_map(|w| w.get(self).spec.replaces.iter().cloned())
                        .collect();
                    for Status { rule: w, .. } in &mut items {
                        if w.as_ref()
                            .is_some_and(|w| replaced.contains(&w.get(self).spec.display))
                        {
                            *w = None;
                        }
                    }
                }
                Ok(items)
            }
        }
    }

    /// The rule for a descriptor's own limit, made on first use.
    fn override_rule(
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
    fn new(spec: RuleSpec, kept: Option<Limiter>, backend: &Backend) -> Result<Rule, String> {
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

    fn with_limiter(spec: RuleSpec, limiter: Limiter) -> Result<Rule, String> {
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
fn redis_prefix(root: &str, spec: &RuleSpec) -> String {
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

/// A descriptor's counter key: the domain and entries, each length-prefixed so no two
/// descriptors share a key.
fn descriptor_key<'a>(
    key: &mut String,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) {
    let len = 1
        + domain.len()
        + entries
            .clone()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>()
        + 4;
    key.reserve(len);
    key.push('d');
    let mut push = |s: &str| {
        // One digit, or itoa: through `fmt` the lengths cost a tenth of a decision.
        match u8::try_from(s.len()) {
            Ok(n @ 0..=9) => key.push(char::from(b'0' + n)),
            _ => key.push_str(itoa::Buffer::new().format(s.len())),
        }
        key.push(':');
        key.push_str(s);
    };
    push(domain);
    for (k, v) in entries {
        push(k);
        push(v);
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

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            rules: None,
            statuses: Vec::new(),
            keys: Vec::new(),
            used: 0,
        }
    }

    /// An empty list with room for `n` statuses.
    fn statuses(&mut self, n: usize) -> Vec<Status> {
        self.used = 0;
        let mut list = std::mem::take(&mut self.statuses);
        list.reserve(n);
        list
    }

    /// The next key, empty with room for `n` bytes, and its index.
    fn key(&mut self, n: usize) -> (usize, &mut String) {
        let at = self.used;
        self.used += 1;
        if at == self.keys.len() {
            self.keys.push(String::with_capacity(n));
        }
        let key = &mut self.keys[at];
        key.clear();
        (at, key)
    }

    /// Takes back a decided request's list.
    fn recycle(&mut self, mut statuses: Vec<Status>) {
        statuses.clear();
        if statuses.capacity() <= MAX_DESCRIPTORS {
            self.statuses = statuses;
        }
    }
}

/// One decision, on whichever backend the rules' limiters use.
async fn decide(
    set: &RuleSet,
    mut statuses: Vec<Status>,
    keys: &[String],
    cost: u64,
) -> Result<Outcome, StoreError> {
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
        let d = check(&rule_of(set, &s.rule).limiter, &keys[s.key], cost).await?;
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
        let (ok, denied_by, wait) = check_all(&list).await?;
        allowed = ok;
        retry = wait;
        let peeks = peek_all(&list).await?;
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
        let Some(which) = s.rule.clone() else {
            continue;
        };
        let r = which.get(set);
        if s.never {
            // Never admitted: over (or, in shadow, would be), with no time to wait.
            let d = peek(&r.limiter, &keys[s.key]).await?;
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
            s.retry_after = None;
            if r.spec.shadow {
                s.shadow_over = true;
            } else {
                s.over = true;
            }
        } else if r.spec.shadow {
            let d = if allowed {
                check(&r.limiter, &keys[s.key], cost).await?
            } else {
                peek(&r.limiter, &keys[s.key]).await?
            };
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
            s.shadow_over = if allowed {
                !d.is_allowed()
            } else {
                d.remaining() < cost
            };
        } else if never {
            let d = peek(&r.limiter, &keys[s.key]).await?;
            s.remaining = d.remaining();
            s.reset_after = d.reset_after();
        }
        r.metrics.record(s.over, s.shadow_over);
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
fn decide_one(
    set: &RuleSet,
    statuses: &mut Vec<Status>,
    keys: &[String],
    cost: u64,
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
    let d = limiter.check_n(&keys[s.key], cost).ok()?;
    s.apply(&d);
    r.metrics.record(s.over, false);
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
fn charged(statuses: &[Status], keys: &[String], i: usize, cost: u64) -> u64 {
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

fn rule_of<'a>(set: &'a RuleSet, which: &'a Option<RuleRef>) -> &'a Rule {
    which
        .as_ref()
        .expect("an enforcing status has a rule")
        .get(set)
}

impl Status {
    /// The status of a request for `which` and `key`, before it is decided.
    fn new(rule: Option<RuleRef>, key: usize) -> Status {
        Status {
            rule,
            over: false,
            shadow_over: false,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
            key,
            never: false,
        }
    }

    fn apply(&mut self, d: &Decision) {
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
async fn check(limiter: &Limiter, key: &String, cost: u64) -> Result<Decision, StoreError> {
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

#[allow(clippy::ptr_arg)]
async fn peek(limiter: &Limiter, key: &String) -> Result<Decision, StoreError> {
    match limiter {
        Limiter::Memory(l) => Ok(l.peek(key)),
        Limiter::Redis(l) => {
            let d = l.peek(key).await.map_err(|e| StoreError(e.to_string()))?;
            metrics::redis_path(d.degraded());
            Ok(d.decision())
        }
    }
}

async fn peek_all(list: &[(&Limiter, &String, u64)]) -> Result<Vec<Decision>, StoreError> {
    futures_util::future::join_all(list.iter().map(|(l, k, _)| peek(l, k)))
        .await
        .into_iter()
        .collect()
}

/// All or nothing: (allowed, index of the first that denied, the longest wait).
async fn check_all(
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

#[cfg(test)]
mod tests;
