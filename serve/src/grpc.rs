//! Envoy's rate limit service API over gRPC (tonic):
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::engine::{self, Descriptor, Engine, Invalid, Judge, Outcome, RuleSet};
use super::metrics::{Answer, ApiMetrics};
use super::proto::envoy::config::core::v3::HeaderValue;
use super::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use super::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use super::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::proto::envoy::r#type::v3::RateLimitUnit;
use super::proto::slidegate::serve::v1::noop_server::Noop;
use super::{headers, rules};

pub(crate) struct Service {
    pub(crate) engine: Arc<Engine>,
    pub(crate) metrics: ApiMetrics,
}

impl Descriptor for RateLimitDescriptor {
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
    }

    fn limit(&self) -> Result<Option<(u64, Duration)>, String> {
        let Some(l) = &self.limit else {
            return Ok(None);
        };
        let window = RateLimitUnit::try_from(l.unit)
            .ok()
            .and_then(|u| rules::unit_window(u.as_str_name()))
            .ok_or_else(|| format!("{} is not a known unit", l.unit))?;
        Ok(Some((u64::from(l.requests_per_unit), window)))
    }
}

/// The engine's request for Envoy's, and its cost (`hits_addend`, 0 meaning 1).
#[allow(clippy::type_complexity)]
fn request(
    r: &RateLimitRequest,
) -> Result<(engine::Request<'_, RateLimitDescriptor>, u64), Invalid> {
    // Units first, as the request's own fields: the engine reads them again.
    for (i, d) in r.descriptors.iter().enumerate() {
        if let Err(message) = d.limit() {
            return Err(Invalid::new(
                format!("descriptors[{i}].limit.unit"),
                message,
            ));
        }
    }
    let cost = u64::from(r.hits_addend.max(1));
    Ok((
        engine::Request::Descriptors {
            domain: &r.domain,
            descriptors: Cow::Borrowed(&r.descriptors),
        },
        cost,
    ))
}

fn invalid(e: Invalid) -> Status {
    Status::invalid_argument(format!("{}: {}", e.field, e.message))
}

/// `duration_until_reset` in the reference service's form: whole seconds, rounded up (its
/// fixed window answers the unit's seconds less the whole seconds already past, so it rounds
/// up too), and never more than the window: a sliding window empties later than that only
/// by its last bucket, which a client told the unit is not misled by.
fn until_reset(reset_after: Duration, window: Duration) -> prost_types::Duration {
    let ceil = |d: Duration| d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    prost_types::Duration {
        seconds: i64::try_from(ceil(reset_after).min(ceil(window))).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// A window as Envoy's unit, when it is one exactly.
fn unit(window: Duration) -> Unit {
    match window.as_secs() {
        _ if window.subsec_nanos() != 0 => Unit::Unknown,
        1 => Unit::Second,
        60 => Unit::Minute,
        3_600 => Unit::Hour,
        86_400 => Unit::Day,
        2_592_000 => Unit::Month,
        31_536_000 => Unit::Year,
        _ => Unit::Unknown,
    }
}

fn response(set: &RuleSet, o: &Outcome) -> RateLimitResponse {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let statuses = o
        .statuses
        .iter()
        .map(|s| match &s.rule {
            // The reference service's unlimited answer: OK, nothing of a limit, and the most
            // that remains (u32::MAX), where no matching rule leaves it 0.
            None => DescriptorStatus {
                code: Code::Ok.into(),
                limit_remaining: if s.unlimited { u32::MAX } else { 0 },
                ..Default::default()
            },
            Some(w) => {
                let r = w.get(set);
                let q = r.spec.quota;
                DescriptorStatus {
                    code: if s.over { Code::OverLimit } else { Code::Ok }.into(),
                    current_limit: Some(RateLimit {
                        name: if r.spec.named {
                            r.spec.display.clone()
                        } else {
                            String::new()
                        },
                        requests_per_unit: clamp(q.limit()),
                        unit: unit(q.window()).into(),
                    }),
                    // Over (or, in shadow, would be): 0, as the reference service answers
                    // whatever was left, and Envoy copies into `X-RateLimit-Remaining`; a
                    // cost above what is left is not admitted even when some is.
                    limit_remaining: if s.over || s.shadow_over {
                        0
                    } else {
                        clamp(s.remaining)
                    },
                    duration_until_reset: Some(until_reset(s.reset_after, q.window())),
                }
            }
        })
        .collect();
    let headers = headers::fields(o, set)
        .into_iter()
        .zip(["ratelimit-policy", "ratelimit", "retry-after"])
        .filter_map(|(v, key)| {
            Some(HeaderValue {
                key: key.to_owned(),
                value: v?.to_str().ok()?.to_owned(),
            })
        })
        .collect();
    RateLimitResponse {
        overall_code: if o.allowed { Code::Ok } else { Code::OverLimit }.into(),
        statuses,
        response_headers_to_add: headers,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = self.metrics.start();
        let r = req.get_ref();
        let (result, answer) =
            match request(r) {
                Err(e) => (Err(invalid(e)), Answer::Invalid),
                Ok((request, cost)) => {
                    if self.engine.is_redis() {
                        let (set, outcome) = self
                            .engine
                            .decide_remote(&request, cost, Judge::Charge)
                            .await;
                        match outcome {
                            Ok(Ok(o)) => (Ok(response(&set, &o)), answer(&o)),
                            Ok(Err(e)) => (
                                Err(Status::unavailable(format!(
                                    "the limit store failed: {}",
                                    e.0
                                ))),
                                Answer::Error,
                            ),
                            Err(e) => (Err(invalid(e)), Answer::Invalid),
                        }
                    } else {
                        self.engine
                            .decide_local(&request, cost, Judge::Charge, |set, outcome| {
                                match outcome {
                                    Ok(o) => (Ok(response(set, o)), answer(o)),
                                    Err(e) => (Err(invalid(e)), Answer::Invalid),
                                }
                            })
                    }
                }
            };
        self.metrics.record(answer, started);
        result.map(Response::new)
    }
}

fn answer(o: &Outcome) -> Answer {
    if o.allowed {
        Answer::Ok
    } else {
        Answer::OverLimit
    }
}

/// The benchmarks' no-op: the same request decoded, a fixed OK.
pub(crate) struct NoopService;

#[tonic::async_trait]
impl Noop for NoopService {
    async fn should_rate_limit(
        &self,
        _req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            ..Default::default()
        }))
    }
}
