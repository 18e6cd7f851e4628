//! A check as the engine reads it, and its answer as plain data: a status per descriptor
//! (or rule of a key) with remaining, reset and retry times, for the APIs to translate.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::rule_set::{Rule, RuleRef, RuleSet};

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

/// What a decision does with the request's cost: charges it when admitted (a check), or only
/// judges whether it would be (a peek: `/v1/peek`), charging nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Judge {
    Charge,
    Peek,
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
    /// No limit because the rules say `unlimited` (not because none matched): Envoy's
    /// reference service tells the two apart in `limit_remaining`.
    pub(crate) unlimited: bool,
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
    pub(super) key: usize,
    /// What the request charges this rule and key is above its limit.
    pub(super) never: bool,
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
    #[inline]
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
    #[inline]
    pub(crate) fn in_limit(&self, s: &Status) -> bool {
        self.allowed || s.over
    }

    /// The `t` of a status's `RateLimit` item: when a denying rule admits again, else when
    /// its window empties.
    #[inline]
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

/// What an in-memory decision reuses from one request to the next on a thread: the list of
/// statuses and the counter keys' `String`s, which would otherwise be two allocations and
/// two frees per request of one descriptor. It holds at most a request's bounds
/// (`MAX_DESCRIPTORS` keys of up to `MAX_KEY_BYTES`) per thread.
pub(crate) struct Scratch {
    /// The rules of the last in-memory decision on the thread: (engine id, generation, rules).
    pub(super) rules: Option<(u64, u64, Arc<RuleSet>)>,
    pub(super) statuses: Vec<Status>,
    /// The keys, `Status::key` indexing them; the first `used` are this request's.
    pub(super) keys: Vec<String>,
    pub(super) used: usize,
}
