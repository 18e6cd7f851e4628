//! The admission rules, as pure maths on `(state, now, cost)`: one module per algorithm.
//!
//! Nothing here touches an atomic or knows where a state is kept. Storage (the lock-free
//! cells in [`crate::window`]) reads its state, hands the numbers to a rule, and owns the
//! compare-and-swap. A limiter builds its [`Rule`] from the quota once, with the numbers each
//! rule needs on the hot path precomputed.
//!
//! - [`sliding_counter`]: Strict and Weighted over `N` buckets, and the fixed window.
//! - [`sliding_log`]: the exact sliding log, over the times of the last `L` units admitted.
//! - [`gcra`]: GCRA's theoretical arrival time.

pub(crate) mod gcra;
pub(crate) mod sliding_counter;
pub(crate) mod sliding_log;

use crate::decision::CostError;
use crate::quota::{Mode, Quota};

use gcra::GcraRule;
use sliding_counter::CounterRule;
use sliding_log::LogRule;

/// What a check does with a cost it allows. (`pub` for the sealed trait behind
/// [`Limit`](crate::Limit), which names it; the module is private.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Nothing: report what a check of the cost would decide now, writing nothing at all.
    /// The decision's `remaining` is what could be admitted now (the cost is not taken off).
    Peek,
    /// Admit and charge it.
    Charge,
    /// Reserve it for a check across several limits, to be committed or released.
    Reserve,
}

/// A quota compiled for checking: the rule of its algorithm, with what the hot path needs
/// precomputed. Each algorithm's rule is built, whichever the mode; only the mode's is used.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    pub(crate) quota: Quota,
    /// The quota's limit `L`, which every cost is validated against.
    pub(crate) limit: u64,
    /// Strict, Weighted and the fixed window.
    pub(crate) counter: CounterRule,
    /// The exact sliding log.
    pub(crate) log: LogRule,
    /// GCRA.
    pub(crate) gcra: GcraRule,
}

impl Rule {
    pub(crate) fn new(quota: Quota) -> Rule {
        Rule {
            quota,
            limit: quota.limit(),
            counter: CounterRule::new(quota),
            log: LogRule::new(quota.limit(), quota.window_nanos()),
            gcra: GcraRule::new(quota.limit(), quota.window_nanos()),
        }
    }

    /// The algorithm.
    #[inline]
    pub(crate) fn mode(&self) -> Mode {
        self.quota.mode()
    }

    /// A cost the rule can ever admit, or why not: zero, or above the limit (no wait would
    /// admit it).
    #[inline]
    pub(crate) fn validate(&self, n: u64) -> Result<(), CostError> {
        match n {
            0 => Err(CostError::Zero),
            n if n > self.limit => Err(CostError::ExceedsLimit {
                cost: n,
                limit: self.limit,
            }),
            _ => Ok(()),
        }
    }
}
