//! HTTP middleware: a tower layer that rate-limits requests, with the IETF `RateLimit` header
//! fields, spoof-safe client keys and a shadow mode (feature `tower`; `axum` adds reading
//! axum's `ConnectInfo` and `MatchedPath`).
//!
//! [`RateLimitLayer`] wraps any tower service over `http` requests — an axum router or
//! route, a hyper service, a tonic server. Each request is keyed by its policies' extractors
//! ([`key`]), checked against every policy at once ([`Policy`], or several in an [`All`]:
//! admitted only if all admit, charged to none if one denies), and then either passed on or
//! answered `429 Too Many Requests` with `Retry-After`. Responses carry the `RateLimit-Policy`
//! and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11. Clones of the layer
//! and of its service share one limiter state.
//!
//! ```
//! use axum::{routing::get, Router};
//! use slidegate::http::{key::ClientIp, Policy, RateLimitLayer};
//! use slidegate::{KeyedLimiter, Quota};
//! use std::time::Duration;
//!
//! let per_ip = KeyedLimiter::builder(Quota::new(100, Duration::from_secs(60))?)
//!     .max_keys(1_000_000)
//!     .build();
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(Policy::new("per-ip", per_ip)?.key(ClientIp::new())));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The guide, with the header syntax, the trusted-proxy rules, shadow mode and the metric and
//! span names, is `docs/http.md` in the repository.

mod body;
pub mod fields;
mod forwarded;
mod headers;
pub mod key;
mod limiter;
pub mod telemetry;

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;

use crate::sync::Tsc;
use tower_service::Service;
use tracing::Instrument;

pub use body::DenialBody;
pub use limiter::{
    All, Checked, Limiter, LimiterError, LocalLimiter, OnMissingKey, Policies, Policy,
    PolicyNameError,
};

use headers::{FieldBuf, Fields, Meta};
use key::RequestHead;
use limiter::{Now, Report, Verdict};
use telemetry::Metrics;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// What the layer does when its limiter cannot decide (a backend that is down, a cost above
/// a limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLimiterError {
    /// Answer with this status (the default: `503 Service Unavailable`).
    Deny(StatusCode),
    /// Let the request through.
    Allow,
}

/// A denied request, for a custom denial response ([`RateLimitLayer::denial`]).
#[derive(Clone, Debug)]
pub struct Denial {
    /// The name of the policy that denied the request.
    pub policy: Arc<str>,
    /// How long until the request would be admitted, if nothing else arrives.
    pub retry_after: Duration,
}

type DenialFn = dyn Fn(&Denial) -> Response<Bytes> + Send + Sync;

/// A tower layer that rate-limits requests by `P`'s policies. See the [module](self)
/// documentation.
pub struct RateLimitLayer<P> {
    shared: Arc<Shared<P>>,
}

struct Shared<P> {
    policies: P,
    shadow: bool,
    cost: u64,
    headers_on_allowed: bool,
    policy_header: bool,
    on_limiter_error: OnLimiterError,
    denial: Arc<DenialFn>,
    metrics: Metrics,
    /// Times decisions for the latency histogram: raw time-stamp-counter readings, only
    /// their difference scaled to nanoseconds.
    clock: Tsc,
    /// The last `RateLimit-Policy` built, and the quotas it was built for.
    policy_cache: OnceLock<(Vec<(u64, Duration)>, HeaderValue)>,
}

impl<P> Clone for RateLimitLayer<P> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<P: Policies> RateLimitLayer<P> {
    /// A layer enforcing `policies`: one [`Policy`] or an [`All`] of several.
    ///
    /// Defaults: enforcing (not shadow), cost 1 per request, `RateLimit-Policy` and
    /// `RateLimit` on every response, denials answered `429` with a problem+json body, `503`
    /// when the limiter cannot decide, metrics labelled `layer="default"`.
    pub fn new(policies: P) -> Self {
        let metrics = Metrics::new("default", policies.metas());
        RateLimitLayer {
            shared: Arc::new(Shared {
                policies,
                shadow: false,
                cost: 1,
                headers_on_allowed: true,
                policy_header: true,
                on_limiter_error: OnLimiterError::Deny(StatusCode::SERVICE_UNAVAILABLE),
                denial: Arc::new(problem_json),
                metrics,
                clock: Tsc::new(),
                policy_cache: OnceLock::new(),
            }),
        }
    }

    fn edit(self, f: impl FnOnce(&mut Shared<P>)) -> Self {
        // Built once, before any clone: the configuration methods take the only handle.
        let mut shared = Arc::try_unwrap(self.shared)
            .unwrap_or_else(|_| panic!("configure a RateLimitLayer before cloning it"));
        f(&mut shared);
        RateLimitLayer {
            shared: Arc::new(shared),
        }
    }

    /// Shadow (dry-run) mode: every request is decided, counted and given its header fields,
    /// and none is blocked. A request the policies would deny is passed on, counted as
    /// `slidegate_http_shadow_denied_total`, and its response carries the `RateLimit` item of
    /// the policy that would have denied it (without `Retry-After`). Admitted requests are
    /// charged as in enforcing mode, so the limiter sees what it would see live.
    pub fn shadow(self, shadow: bool) -> Self {
        self.edit(|s| s.shadow = shadow)
    }

    /// The cost charged per request (default 1).
    pub fn cost(self, cost: u64) -> Self {
        self.edit(|s| s.cost = cost)
    }

    /// Whether admitted requests' responses carry the header fields (default `true`); denials
    /// always do.
    pub fn headers_on_allowed(self, on: bool) -> Self {
        self.edit(|s| s.headers_on_allowed = on)
    }

    /// Whether responses carry `RateLimit-Policy` beside `RateLimit` (default `true`).
    pub fn policy_header(self, on: bool) -> Self {
        self.edit(|s| s.policy_header = on)
    }

    /// What to do when the limiter cannot decide (default: deny with 503).
    pub fn on_limiter_error(self, outcome: OnLimiterError) -> Self {
        self.edit(|s| s.on_limiter_error = outcome)
    }

    /// The response to a denied request, built by `f` (status, headers and body); the layer
    /// adds `Retry-After`, `RateLimit-Policy` and `RateLimit` to it.
    pub fn denial(self, f: impl Fn(&Denial) -> Response<Bytes> + Send + Sync + 'static) -> Self {
        self.edit(|s| s.denial = Arc::new(f))
    }

    /// The `layer` label of this layer's metrics and events (default `"default"`).
    pub fn name(self, name: &str) -> Self {
        self.edit(|s| s.metrics = Metrics::new(name, s.policies.metas()))
    }

    /// The policies.
    pub fn policies(&self) -> &P {
        &self.shared.policies
    }
}

impl<P> core::fmt::Debug for RateLimitLayer<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("layer", &self.shared.metrics.layer)
            .field("shadow", &self.shared.shadow)
            .field("cost", &self.shared.cost)
            .finish_non_exhaustive()
    }
}

impl<S, P> Layer<S> for RateLimitLayer<P> {
    type Service = RateLimit<S, P>;

    fn layer(&self, inner: S) -> RateLimit<S, P> {
        RateLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another. Clones share one limiter state.
pub struct RateLimit<S, P> {
    inner: S,
    shared: Arc<Shared<P>>,
}

impl<S: Clone, P> Clone for RateLimit<S, P> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: core::fmt::Debug, P> core::fmt::Debug for RateLimit<S, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// A boxed future of a response: a request whose limiter decides asynchronously.
type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The future of [`RateLimit`]'s responses.
    ///
    /// An enum rather than a struct around one so that the inner service's future is written
    /// straight into the value `call` returns: wrapped in a struct it was built in a
    /// temporary and copied (320 bytes for an axum route), a tenth of the layer's own cost.
    /// Its variants are the layer's own: hidden, and not constructible outside this crate.
    #[project = StateProj]
    pub enum ResponseFuture<F, B, E> {
        /// Decided at once and passed on: the inner service's future, and the fields to add.
        #[doc(hidden)]
        #[non_exhaustive]
        Inner {
            #[pin]
            future: F,
            fields: Fields,
        },
        /// Decided at once and passed on, with no fields to add: the inner service's future.
        #[doc(hidden)]
        #[non_exhaustive]
        Pass {
            #[pin]
            future: F,
        },
        /// Decided at once and answered by the layer.
        #[doc(hidden)]
        #[non_exhaustive]
        Respond { response: Option<Response<B>> },
        /// Decided by awaiting the limiter.
        #[doc(hidden)]
        #[non_exhaustive]
        Waiting { future: Boxed<B, E> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            // Without fields the inner service's answer is passed on as it comes, not taken
            // out of its `Poll` and `Result` and put back.
            StateProj::Pass { future } => future.poll(cx),
            StateProj::Inner { future, fields } => {
                // The fields are added to the response where the inner future left it, not
                // to a copy taken out of its `Poll` and `Result` and put back.
                let mut poll = future.poll(cx);
                if let Poll::Ready(Ok(response)) = &mut poll {
                    fields.take().add_to(response.headers_mut());
                }
                poll
            }
            StateProj::Respond { response } => {
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(response))
            }
            StateProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> core::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<S, P, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, P>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    P: Policies,
    ReqBody: Send + 'static,
    ResBody: DenialBody,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let start = shared.start();
        // Only a subscriber that records the span gets one, and otherwise not even a disabled
        // span: creating, entering and dropping one costs its `log` fallback (tracing's `log`
        // feature, which axum's defaults turn on) a tenth of the layer's time per request.
        let span =
            tracing::span_enabled!(target: telemetry::TARGET, tracing::Level::DEBUG).then(|| {
                tracing::debug_span!(
                    target: telemetry::TARGET,
                    "rate_limit",
                    layer = &*shared.metrics.layer
                )
            });
        let entered = span.as_ref().map(tracing::Span::enter);
        let fields = shared.headers_on_allowed;
        // The request is read in place and passed on whole: its head is not moved out and
        // back. In-process limiters decide at once: no future is allocated for the request.
        let mut degraded = false;
        let now = shared.policies.decide_now(
            &RequestHead::from(&req),
            shared.cost,
            fields,
            &mut degraded,
        );
        if degraded {
            shared.metrics.degraded_key();
        }
        let keys = match now {
            Now::Admitted => {
                shared.admitted(start);
                drop(entered);
                return ResponseFuture::Pass {
                    future: self.inner.call(req),
                };
            }
            Now::Reported(reports) => {
                let fields = shared.fields(shared.policies.metas(), &reports, None);
                shared.admitted(start);
                drop(entered);
                return ResponseFuture::Inner {
                    future: self.inner.call(req),
                    fields,
                };
            }
            Now::Decided(verdict) => {
                let outcome = shared.conclude(verdict, start);
                drop(entered);
                return match outcome {
                    Outcome::Pass(fields) => ResponseFuture::Inner {
                        future: self.inner.call(req),
                        fields,
                    },
                    Outcome::Respond(response) => respond(response),
                };
            }
            Now::Refused(status) => {
                drop(entered);
                shared.latency(start);
                return respond(status_only(status));
            }
            Now::Wait(keys) => keys,
        };
        drop(entered);
        // The service that was polled ready answers this request; a fresh clone takes its
        // place for the next poll_ready (tower's documented pattern for async middleware).
        let clone = self.inner.clone();
        let mut inner = core::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        let future = async move {
            let verdict = shared
                .policies
                .check(&keys, shared.cost, fields)
                .instrument(span.unwrap_or_else(tracing::Span::none))
                .await;
            let outcome = shared.conclude(verdict, start);
            let fields = match outcome {
                Outcome::Pass(fields) => fields,
                Outcome::Respond(response) => return Ok(response.map(ResBody::from_bytes)),
            };
            let mut response = inner.call(req).await?;
            fields.add_to(response.headers_mut());
            Ok(response)
        };
        ResponseFuture::Waiting {
            future: Box::pin(future),
        }
    }
}

/// The response future of a request the layer answers itself.
fn respond<F, B: DenialBody, E>(response: Response<Bytes>) -> ResponseFuture<F, B, E> {
    ResponseFuture::Respond {
        response: Some(response.map(B::from_bytes)),
    }
}

/// What the layer does with a request.
enum Outcome {
    /// Pass it on, adding these fields to the response.
    Pass(Fields),
    /// Answer it with this response instead.
    Respond(Response<Bytes>),
}

impl<P: Policies> Shared<P> {
    /// What to do with a request, given its policies' verdict; records the request's
    /// metrics, with the time since `start` as the decision's latency.
    #[inline(always)]
    fn conclude(&self, verdict: Result<Verdict, LimiterError>, start: Option<u64>) -> Outcome {
        // An admission is decided here, in the caller: the verdict is read where the
        // limiter left it rather than moved into a call.
        if let Ok(v) = &verdict {
            if v.denied_by.is_none() && !v.degraded {
                return self.admit(v, start);
            }
        }
        self.conclude_other(verdict, start)
    }

    /// An admitted request passed on: its fields (when configured) and its metrics.
    #[inline(always)]
    fn admit(&self, verdict: &Verdict, start: Option<u64>) -> Outcome {
        let fields = if self.headers_on_allowed {
            self.fields(self.policies.metas(), &verdict.reports, None)
        } else {
            Fields::default()
        };
        self.admitted(start);
        Outcome::Pass(fields)
    }

    /// [`Shared::conclude`] for a denial, a degraded verdict or a limiter error.
    #[inline(never)]
    fn conclude_other(
        &self,
        verdict: Result<Verdict, LimiterError>,
        start: Option<u64>,
    ) -> Outcome {
        let verdict = match verdict {
            Ok(verdict) => verdict,
            Err(error) => {
                telemetry::limiter_failed(&self.metrics.layer, &error);
                self.metrics.degraded_limiter();
                let outcome = match self.on_limiter_error {
                    OnLimiterError::Allow => Outcome::Pass(Fields::default()),
                    OnLimiterError::Deny(status) => Outcome::Respond(status_only(status)),
                };
                self.latency(start);
                return outcome;
            }
        };
        if verdict.degraded {
            self.metrics.degraded_limiter();
        }
        let Some(bound) = verdict.denied_by else {
            return self.admit(&verdict, start);
        };
        let metas = self.policies.metas();
        let name = &metas[bound].name;
        telemetry::denied(&self.metrics.layer, name, verdict.retry_after, self.shadow);
        self.metrics.denied(bound, self.shadow);
        let outcome = if self.shadow {
            Outcome::Pass(self.fields(metas, &verdict.reports, verdict.denied_by))
        } else {
            let denial = Denial {
                policy: Arc::clone(name),
                retry_after: verdict.retry_after,
            };
            let mut response = (self.denial)(&denial);
            let map = response.headers_mut();
            map.reserve(3);
            self.fields(metas, &verdict.reports, verdict.denied_by)
                .add_to(map);
            map.insert(RETRY_AFTER, headers::retry_after(verdict.retry_after));
            Outcome::Respond(response)
        };
        self.latency(start);
        outcome
    }

    /// An admission's metrics: the counter and, if it was timed, the decision's latency.
    #[inline(always)]
    fn admitted(&self, start: Option<u64>) {
        if let Some(start) = start {
            let nanos = self.clock.delta_as_nanos(start, self.clock.raw());
            self.metrics.allowed(nanos);
        }
    }

    /// The start of a decision's timing: the time-stamp counter now, or `None` when no
    /// recorder would take the latency (the clock is then not read at all).
    #[inline(always)]
    fn start(&self) -> Option<u64> {
        telemetry::recording().then(|| self.clock.raw())
    }

    /// Records the latency of a decision timed from `start`, if it was timed.
    fn latency(&self, start: Option<u64>) {
        if let Some(start) = start {
            self.metrics
                .latency(self.clock.delta_as_nanos(start, self.clock.raw()));
        }
    }

    /// The header fields for `verdict`: every policy the request was checked against in
    /// `RateLimit-Policy`; in `RateLimit`, every such policy when admitted, only the policy
    /// that bound it when denied.
    fn fields(
        &self,
        metas: &[Meta],
        reports: &[Option<Report>],
        denied_by: Option<usize>,
    ) -> Fields {
        let mut out = FieldBuf::new();
        for (i, report) in reports.iter().enumerate() {
            let Some(r) = report else { continue };
            if denied_by.is_none_or(|b| b == i) {
                let pk = r.partition.as_deref();
                headers::push_limit_item(&mut out, &metas[i].field, r.remaining, r.reset, pk);
            }
        }
        let limit = out.value();
        Fields {
            policy: self
                .policy_header
                .then(|| self.policy_field(metas, reports))
                .flatten(),
            limit,
        }
    }

    /// `RateLimit-Policy`: every policy the request was checked against. A policy's quota
    /// changes only with a per-key override, so the field built for the first request whose
    /// policies all applied (without `pk`) is kept and reused while the quotas match.
    fn policy_field(&self, metas: &[Meta], reports: &[Option<Report>]) -> Option<HeaderValue> {
        let matches = |(quotas, _): &(Vec<(u64, Duration)>, HeaderValue)| {
            quotas.len() == reports.len()
                && reports.iter().zip(quotas).all(|(r, q)| {
                    r.as_ref()
                        .is_some_and(|r| r.partition.is_none() && (r.limit, r.window) == *q)
                })
        };
        if let Some(cached) = self.policy_cache.get().filter(|c| matches(c)) {
            return Some(cached.1.clone());
        }
        let mut out = FieldBuf::new();
        for (i, report) in reports.iter().enumerate() {
            let Some(r) = report else { continue };
            let pk = r.partition.as_deref();
            headers::push_policy_item(&mut out, &metas[i].field, r.limit, r.window, pk);
        }
        let value = out.value()?;
        let cacheable = reports
            .iter()
            .all(|r| r.as_ref().is_some_and(|r| r.partition.is_none()));
        if cacheable && self.policy_cache.get().is_none() {
            let quotas = reports
                .iter()
                .flatten()
                .map(|r| (r.limit, r.window))
                .collect();
            let _ = self.policy_cache.set((quotas, value.clone()));
        }
        Some(value)
    }
}

fn status_only(status: StatusCode) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    response
}

/// The default denial: `429` with an RFC 9457 problem of the draft's `quota-exceeded` type.
fn problem_json(denial: &Denial) -> Response<Bytes> {
    let mut policy = String::with_capacity(denial.policy.len());
    for c in denial.policy.chars() {
        if c == '"' || c == '\\' {
            policy.push('\\');
        }
        policy.push(c);
    }
    let body = format!(
        "{{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
         \"title\":\"Too Many Requests\",\"status\":429,\"violated-policies\":[\"{policy}\"]}}"
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
