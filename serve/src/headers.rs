//! The `RateLimit-Policy`, `RateLimit` and `Retry-After` header fields of an answer, which
//! HTTP writes as headers and gRPC as Envoy's `response_headers_to_add`.

use axum::http::HeaderValue;
use slidegate::http::fields::{Fields, limit_item, retry_after};

use crate::engine::{Outcome, RuleSet};

/// The `RateLimit-Policy`, `RateLimit` and `Retry-After` values the middleware would
/// write: every rule checked in the policy field; in `RateLimit`, every rule when
/// admitted and only the rules that deny when denied; `Retry-After` when denied and a
/// wait would help.
pub(crate) fn fields(o: &Outcome, set: &RuleSet) -> [Option<HeaderValue>; 3] {
    let retry = retry_field(o);
    // One rule (the common answer): its policy item built once per rule, its `RateLimit`
    // item alone, without the general builder's second buffer.
    if let Some((s, r)) = o.single(set) {
        let limit = o
            .in_limit(s)
            .then(|| limit_item(&r.wire.field, s.remaining, o.reset_of(s)))
            .flatten();
        return [Some(r.wire.policy.clone()), limit, retry];
    }
    let mut fields = Fields::new();
    for s in &o.statuses {
        if let Some(w) = &s.rule {
            let r = w.get(set);
            fields.policy(&r.wire.field, r.spec.quota.limit(), r.spec.quota.window());
            if o.in_limit(s) {
                fields.limit(&r.wire.field, s.remaining, o.reset_of(s));
            }
        }
    }
    let (policy, limit) = fields.into_values();
    [policy, limit, retry]
}

/// `Retry-After`, when denied and a wait would help.
#[inline]
pub(crate) fn retry_field(o: &Outcome) -> Option<HeaderValue> {
    o.retry_after.filter(|_| !o.allowed).map(retry_after)
}
