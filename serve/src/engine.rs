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

use std::cell::RefCell;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use arc_swap::ArcSwap;

use crate::rules::Spec;
use decide::{decide, decide_one};

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
        judge: Judge,
        render: impl FnOnce(&RuleSet, Result<&Outcome, Invalid>) -> R,
    ) -> R {
        thread_local! {
            static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
        }
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.decide_in(&mut scratch, request, cost, judge, render),
            // A decision made inside `render`.
            Err(_) => self.decide_in(&mut Scratch::new(), request, cost, judge, render),
        })
    }

    fn decide_in<D: Descriptor, R>(
        &self,
        scratch: &mut Scratch,
        request: &Request<'_, D>,
        cost: u64,
        judge: Judge,
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
                if let Some(outcome) = decide_one(&set, &mut items, &scratch.keys, cost, judge) {
                    return outcome;
                }
                // Polled once where it stands: `now_or_never` took the future by value, a copy
                // of all of it (sized for the Redis calls it may await) on every decision.
                let decision = pin!(decide(&set, items, &scratch.keys, cost, judge));
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
        judge: Judge,
    ) -> (Arc<RuleSet>, Result<Result<Outcome, StoreError>, Invalid>) {
        let set = self.rules.load_full();
        let mut scratch = Scratch::new();
        let items = match set.resolve(request, cost, &self.backend, &mut scratch) {
            Ok(items) => items,
            Err(e) => return (set, Err(e)),
        };
        let outcome = decide(&set, items, &scratch.keys, cost, judge).await;
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
            match decide(&set, items, &scratch.keys, cost, Judge::Charge).await {
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

mod build;
mod decide;
mod request;
mod resolve;
mod rule_set;

#[cfg(test)]
pub(crate) use request::Pairs;
pub(crate) use request::{
    Descriptor, Invalid, Judge, Outcome, Request, Scratch, Status, StoreError,
};
use rule_set::Limiter;
pub(crate) use rule_set::{Backend, Rule, RuleSet, ServeClock, Unavailable};
#[cfg(test)]
mod tests;
