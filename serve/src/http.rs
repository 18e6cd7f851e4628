//! The HTTP/JSON API (axum): `POST /v1/check`, `POST /v1/check/batch`, `GET /v1/rules`,
//! `GET /metrics`, `GET /healthz`, `GET /readyz`. docs/serve.md describes every field.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header::{CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use slidegate::clock::Nanos;
use slidegate::http::fields::{limit_item, write_limit_item};
use slidegate::http::{RATELIMIT, RATELIMIT_POLICY};

use super::engine::{
    self, Descriptor, Engine, Invalid, Outcome, Rule, RuleSet, Status, StoreError,
};
use super::headers;
use super::metrics::{Answer, ApiMetrics, KEYS};
use super::reload::Reloader;
use super::rules;
use super::wire::ceil_ms;

/// The most requests one batch may hold.
pub(crate) const MAX_BATCH: usize = 1000;

pub(crate) struct Api {
    pub(crate) engine: Arc<Engine>,
    pub(crate) reloader: Arc<Reloader>,
    pub(crate) metrics: ApiMetrics,
    pub(crate) prometheus: Option<PrometheusHandle>,
    /// Set on SIGTERM/SIGINT: `/readyz` fails and responses close their connection.
    pub(crate) draining: Arc<AtomicBool>,
}

pub(crate) fn router(api: Arc<Api>, max_body: usize, noop: bool) -> Router {
    let mut router = Router::new()
        .route("/v1/check", post(check))
        .route("/v1/check/batch", post(batch))
        .route("/v1/rules", get(rules_in_force))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready));
    if noop {
        router = router.route("/v1/noop", post(noop_check));
    }
    let draining = Arc::clone(&api.draining);
    router
        .fallback(|| async { error(StatusCode::NOT_FOUND, "", "no such endpoint") })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::map_response(move |mut res: Response| {
            // While draining, every response closes its connection, so keep-alive clients
            // reconnect (to another server) rather than reuse a connection about to close.
            if draining.load(Ordering::Relaxed) {
                res.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            std::future::ready(res)
        }))
        .with_state(api)
}

/// A JSON error: `{"error": message, "field": field}`.
fn error(status: StatusCode, field: &str, message: &str) -> Response {
    #[derive(Serialize)]
    struct Error<'a> {
        error: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        field: &'a str,
    }
    json(
        status,
        &Error {
            error: message,
            field,
        },
    )
}

fn json(status: StatusCode, value: &impl Serialize) -> Response {
    json_body(status, serde_json::to_vec(value).unwrap_or_default())
}

/// A response of JSON already written.
fn json_body(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut res = Response::new(body.into());
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// One check, as JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody<'a> {
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    rules: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow)]
    domain: Option<Cow<'a, str>>,
    #[serde(borrow)]
    descriptors: Option<Vec<DescriptorBody<'a>>>,
    cost: Option<u64>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorBody<'a> {
    #[serde(borrow)]
    entries: Vec<EntryBody<'a>>,
    #[serde(borrow)]
    limit: Option<LimitBody<'a>>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryBody<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitBody<'a> {
    requests_per_unit: u64,
    #[serde(borrow)]
    unit: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody<'a> {
    #[serde(borrow)]
    requests: Vec<CheckBody<'a>>,
}

impl Descriptor for DescriptorBody<'_> {
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.entries.iter().map(|e| (&*e.key, &*e.value))
    }

    fn limit(&self) -> Result<Option<(u64, Duration)>, String> {
        let Some(l) = &self.limit else {
            return Ok(None);
        };
        let window = rules::unit_window(&l.unit).ok_or_else(|| {
            format!(
                "unknown unit {:?}: use second, minute, hour, day, month or year",
                l.unit
            )
        })?;
        Ok(Some((l.requests_per_unit, window)))
    }
}

impl<'a> CheckBody<'a> {
    /// The engine's request; field names in errors are this body's.
    fn request(&'a self) -> Result<(engine::Request<'a, DescriptorBody<'a>>, u64), Invalid> {
        let cost = self.cost.unwrap_or(1);
        let request = match (&self.key, &self.descriptors) {
            (Some(_), Some(_)) => {
                return Err(Invalid::new(
                    "key",
                    "give either key or domain and descriptors, not both",
                ));
            }
            (None, None) => {
                return Err(Invalid::new(
                    "key",
                    "missing: give key, or domain and descriptors",
                ));
            }
            (Some(key), None) => {
                if self.domain.is_some() {
                    return Err(Invalid::new(
                        "domain",
                        "goes with descriptors, not with key",
                    ));
                }
                engine::Request::Key {
                    key,
                    rules: self
                        .rules
                        .as_ref()
                        .map(|r| r.iter().map(|n| &**n).collect()),
                }
            }
            (None, Some(descriptors)) => {
                if self.rules.is_some() {
                    return Err(Invalid::new(
                        "rules",
                        "goes with key; descriptors find their rules",
                    ));
                }
                let Some(domain) = &self.domain else {
                    return Err(Invalid::new("domain", "missing: descriptors need a domain"));
                };
                // Units first, as the body's own fields: the engine reads them again.
                for (i, d) in descriptors.iter().enumerate() {
                    if let Err(message) = d.limit() {
                        return Err(Invalid::new(
                            format!("descriptors[{i}].limit.unit"),
                            message,
                        ));
                    }
                }
                engine::Request::Descriptors {
                    domain,
                    descriptors: Cow::Borrowed(descriptors),
                }
            }
        };
        Ok((request, cost))
    }
}

/// Writes the JSON of a decision (docs/serve.md lists its fields) into `out`, byte for byte
/// what serde_json writes of the same answer (a test holds it to that), without a value per
/// field: the integers by `itoa`, each rule's constant part (`"rule":…,"limit":…,
/// "window_ms":…`) built once with the rules. Through serde, the answer cost more
/// instructions than the decision it reports.
fn write_reply(out: &mut impl Out, set: &RuleSet, o: &Outcome) {
    // The common answer, admitted by one rule: its head written with the rule.
    if let ([s], true) = (&o.statuses[..], o.allowed)
        && let Some(which) = &s.rule
    {
        let r = which.get(set);
        out.put(r.wire.json_admitted.as_bytes());
        write_status_rest(out, r, s);
        out.put(b"]}");
        return;
    }
    out.put(if o.allowed {
        &br#"{"allowed":true,"code":"OK""#[..]
    } else {
        &br#"{"allowed":false,"code":"OVER_LIMIT""#[..]
    });
    if let Some(wait) = o.retry_after.filter(|_| !o.allowed) {
        put_u64(out, br#","retry_after_ms":"#, ceil_ms(wait));
    }
    out.put(br#","statuses":["#);
    for (i, s) in o.statuses.iter().enumerate() {
        if i > 0 {
            out.put(b",");
        }
        let Some(which) = &s.rule else {
            out.put(br#"{"code":"OK","rule":null}"#);
            continue;
        };
        let r = which.get(set);
        out.put(if s.over {
            &br#"{"code":"OVER_LIMIT","#[..]
        } else {
            &br#"{"code":"OK","#[..]
        });
        out.put(r.wire.json.as_bytes());
        write_status_rest(out, r, s);
    }
    out.put(b"]}");
}

/// A status after its rule's constant part: the figures, the flags, the closing brace.
fn write_status_rest(out: &mut impl Out, r: &Rule, s: &Status) {
    put_u64(out, br#","remaining":"#, s.remaining);
    put_u64(out, br#","reset_after_ms":"#, ceil_ms(s.reset_after));
    if let Some(wait) = s.retry_after.filter(|_| s.over) {
        put_u64(out, br#","retry_after_ms":"#, ceil_ms(wait));
    }
    if r.spec.shadow {
        out.put(br#","shadow":true"#);
    }
    if s.shadow_over {
        out.put(br#","would_deny":true"#);
    }
    out.put(b"}");
}

/// Where [`write_reply`] writes: a `Vec` (a batch, an answer too wide for an [`AnswerBuf`]), or
/// an [`AnswerBuf`] with room for it.
trait Out {
    fn put(&mut self, bytes: &[u8]);
}

impl Out for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Room for the JSON answer and the `RateLimit` value of an [`AnswerBuf`]; the answers of the
/// rules in `examples/` take less than 250 bytes.
const ANSWER_ROOM: usize = 384;

/// The JSON answer and its `RateLimit` value side by side, which become one allocation
/// (`Bytes::from_owner`) of which the body and the field's value are two slices: one
/// allocation and one free per answer where a `Bytes` for each took two, and no per-thread
/// buffer to copy the answer from.
struct AnswerBuf {
    len: usize,
    buf: [u8; ANSWER_ROOM],
}

impl Out for AnswerBuf {
    /// Past the room it panics; [`answer`] writes only answers `reply_capacity` says fit.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }
}

impl AsRef<[u8]> for AnswerBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The answer to `o`: its JSON body and its `RateLimit-Policy`, `RateLimit` and
/// `Retry-After` fields. The common answer, with one rule, is one [`AnswerBuf`]; any other is
/// the JSON in its own allocation and the fields of `Outcome::fields`.
fn answer(set: &RuleSet, o: &Outcome) -> Response {
    let status = if o.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let Some((s, r)) = o
        .single(set)
        .filter(|_| reply_capacity(set, o) <= ANSWER_ROOM)
    else {
        let [policy, limit, retry] = headers::fields(o, set);
        return with_fields(json_body(status, reply(set, o)), policy, limit, retry);
    };
    let mut a = AnswerBuf {
        len: 0,
        buf: [0; ANSWER_ROOM],
    };
    write_reply(&mut a, set, o);
    let json = a.len;
    let limit = o.in_limit(s);
    let item = limit
        .then(|| {
            write_limit_item(
                &mut a.buf[json..],
                &r.wire.field,
                s.remaining,
                o.reset_of(s),
            )
        })
        .flatten();
    if let Some(n) = item {
        a.len += n;
    }
    let mut body = Bytes::from_owner(a);
    let value = match item {
        Some(_) => {
            let value = body.split_off(json);
            // SAFETY: `write_limit_item` writes visible ASCII only, bytes a field value may
            // hold.
            Some(unsafe { HeaderValue::from_maybe_shared_unchecked(value) })
        }
        // A name too long for the room left: the item in its own allocation.
        None if limit => limit_item(&r.wire.field, s.remaining, o.reset_of(s)),
        None => None,
    };
    with_fields(
        json_body(status, body),
        Some(r.wire.policy.clone()),
        value,
        headers::retry_field(o),
    )
}

/// `res` with the fields that are present of `RateLimit-Policy`, `RateLimit` and
/// `Retry-After`.
#[inline]
fn with_fields(
    mut res: Response,
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
    retry: Option<HeaderValue>,
) -> Response {
    let h = res.headers_mut();
    if let Some(v) = policy {
        h.insert(RATELIMIT_POLICY, v);
    }
    if let Some(v) = limit {
        h.insert(RATELIMIT, v);
    }
    if let Some(v) = retry {
        h.insert(RETRY_AFTER, v);
    }
    res
}

/// The JSON of `o`, in one allocation of its length: written in a per-thread buffer and
/// copied out, where a `Vec` sized for the widest answer becomes `Bytes` with a second
/// allocation (its length short of its capacity).
fn reply(set: &RuleSet, o: &Outcome) -> Bytes {
    thread_local! {
        static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }
    BUFFER.with(|cell| {
        let mut buf = cell.take();
        buf.clear();
        buf.reserve(reply_capacity(set, o));
        write_reply(&mut buf, set, o);
        let body = Bytes::copy_from_slice(&buf);
        cell.set(buf);
        body
    })
}

/// Room for the JSON of `o`, so `write_reply` writes it without growing the buffer.
fn reply_capacity(set: &RuleSet, o: &Outcome) -> usize {
    // The widest status less its rule's part: a code, three numbers of at most 20 digits
    // with their names, the two flags.
    const STATUS: usize = 160;
    64 + o
        .statuses
        .iter()
        .map(|s| STATUS + s.rule.as_ref().map_or(0, |w| w.get(set).wire.json.len()))
        .sum::<usize>()
}

/// `name` and `value`'s digits.
fn put_u64(out: &mut impl Out, name: &[u8], value: u64) {
    out.put(name);
    out.put(itoa::Buffer::new().format(value).as_bytes());
}

/// The body, refused with 413 beyond the limit, as JSON.
#[allow(clippy::result_large_err)]
async fn body(req: Request) -> Result<Bytes, Response> {
    Bytes::from_request(req, &()).await.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the body is larger than the server accepts (--max-body)".to_owned()
        } else {
            rejection.body_text()
        };
        error(status, "", &message)
    })
}

/// A JSON body, or a 400 naming the field at fault.
#[allow(clippy::result_large_err)] // the error is the response, built once
fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Response> {
    // The plain parse first; the path-tracking one only to explain a failure.
    serde_json::from_slice(bytes).map_err(|_| {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(_) => error(StatusCode::BAD_REQUEST, "", "not valid JSON"),
            Err(e) => {
                let path = e.path().to_string();
                // "." is the root, "?" a place serde could not name (the end of the input).
                let field = if path == "." || path == "?" {
                    String::new()
                } else {
                    path
                };
                error(StatusCode::BAD_REQUEST, &field, &e.inner().to_string())
            }
        }
    })
}

async fn check(State(api): State<Arc<Api>>, req: Request) -> Response {
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(res) => return res,
    };
    let started = api.metrics.start();
    let body: CheckBody<'_> = match parse(&bytes) {
        Ok(b) => b,
        Err(res) => {
            api.metrics.record(Answer::Invalid, started);
            return res;
        }
    };
    let (request, cost) = match body.request() {
        Ok(r) => r,
        Err(e) => {
            api.metrics.record(Answer::Invalid, started);
            return error(StatusCode::BAD_REQUEST, &e.field, &e.message);
        }
    };
    let metrics = &api.metrics;
    if api.engine.is_redis() {
        // Boxed: inline, the Redis call's state would size (and so make costlier to move)
        // the future of every request, in memory too.
        let (set, outcome) = Box::pin(api.engine.decide_remote(&request, cost)).await;
        match outcome {
            Ok(Ok(o)) => respond(metrics, started, &set, Ok(&o)),
            Ok(Err(e)) => respond(metrics, started, &set, Err(Failure::Store(e))),
            Err(e) => respond(metrics, started, &set, Err(Failure::Invalid(e))),
        }
    } else {
        api.engine.decide_local(&request, cost, |set, outcome| {
            respond(metrics, started, set, outcome.map_err(Failure::Invalid))
        })
    }
}

enum Failure {
    Invalid(Invalid),
    Store(StoreError),
}

/// The answer to a decision begun at `started`, counted and timed.
fn respond(
    metrics: &ApiMetrics,
    started: Nanos,
    set: &RuleSet,
    outcome: Result<&Outcome, Failure>,
) -> Response {
    let (res, counted) = match outcome {
        Ok(o) => (
            answer(set, o),
            if o.allowed {
                Answer::Ok
            } else {
                Answer::OverLimit
            },
        ),
        Err(Failure::Invalid(e)) => (
            error(StatusCode::BAD_REQUEST, &e.field, &e.message),
            Answer::Invalid,
        ),
        Err(Failure::Store(e)) => (store_failed(&e), Answer::Error),
    };
    metrics.record(counted, started);
    res
}

async fn batch(State(api): State<Arc<Api>>, req: Request) -> Response {
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(res) => return res,
    };
    let started = api.metrics.start();
    let body: BatchBody<'_> = match parse(&bytes) {
        Ok(b) => b,
        Err(res) => {
            api.metrics.record(Answer::Invalid, started);
            return res;
        }
    };
    if body.requests.len() > MAX_BATCH {
        api.metrics.record(Answer::Invalid, started);
        return error(
            StatusCode::BAD_REQUEST,
            "requests",
            &format!("more than {MAX_BATCH} requests in one batch"),
        );
    }
    let mut requests = Vec::with_capacity(body.requests.len());
    for (i, r) in body.requests.iter().enumerate() {
        match r.request() {
            Ok(r) => requests.push(r),
            Err(e) => return invalid_in_batch(&api, started, i, &e),
        }
    }
    let (set, outcomes) = api.engine.decide_batch(&requests).await;
    match outcomes {
        Ok(Ok(outcomes)) => {
            let room: usize = outcomes.iter().map(|o| reply_capacity(&set, o)).sum();
            let mut body = Vec::with_capacity(16 + room);
            body.extend_from_slice(br#"{"results":["#);
            for (i, o) in outcomes.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                write_reply(&mut body, &set, o);
            }
            body.extend_from_slice(b"]}");
            api.metrics.record(Answer::Ok, started);
            json_body(StatusCode::OK, body)
        }
        Ok(Err(e)) => {
            api.metrics.record(Answer::Error, started);
            store_failed(&e)
        }
        Err((i, e)) => invalid_in_batch(&api, started, i, &e),
    }
}

/// A batch with a bad request: nothing decided, a 400 naming the request and its field.
fn invalid_in_batch(api: &Api, started: Nanos, i: usize, e: &Invalid) -> Response {
    api.metrics.record(Answer::Invalid, started);
    error(
        StatusCode::BAD_REQUEST,
        &format!("requests[{i}].{}", e.field),
        &e.message,
    )
}

fn store_failed(e: &StoreError) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "",
        &format!("the limit store failed: {}", e.0),
    )
}

/// The no-op endpoint of the benchmarks: the same body read and parsed, a fixed answer.
async fn noop_check(req: Request) -> Response {
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(res) => return res,
    };
    match parse::<CheckBody<'_>>(&bytes) {
        Ok(_) => {
            let mut res = Response::new(Body::from(Bytes::from_static(
                br#"{"allowed":true,"code":"OK","statuses":[]}"#,
            )));
            res.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            res
        }
        Err(res) => res,
    }
}

async fn rules_in_force(State(api): State<Arc<Api>>) -> Response {
    #[derive(Serialize)]
    struct RuleReply<'a> {
        name: &'a str,
        id: &'a str,
        limit: u64,
        window_ms: u64,
        granularity_ms: f64,
        mode: String,
        shadow: bool,
    }
    #[derive(Serialize)]
    struct Rules<'a> {
        generation: u64,
        path: String,
        last_error: Option<String>,
        rules: Vec<RuleReply<'a>>,
    }
    let set = api.engine.rules();
    let rules = set
        .rules
        .iter()
        .map(|r| RuleReply {
            name: &r.spec.display,
            id: &r.spec.name,
            limit: r.spec.quota.limit(),
            window_ms: ceil_ms(r.spec.quota.window()),
            granularity_ms: r.spec.quota.granularity().as_secs_f64() * 1e3,
            mode: format!("{:?}", r.spec.quota.mode()),
            shadow: r.spec.shadow,
        })
        .collect();
    json(
        StatusCode::OK,
        &Rules {
            generation: api.engine.generation(),
            path: api.reloader.path().display().to_string(),
            last_error: api.reloader.last_error(),
            rules,
        },
    )
}

async fn metrics(State(api): State<Arc<Api>>) -> Response {
    let Some(handle) = &api.prometheus else {
        return error(StatusCode::NOT_FOUND, "", "metrics are off");
    };
    for (rule, n) in api.engine.key_counts() {
        metrics::gauge!(KEYS, "rule" => rule).set(n as f64);
    }
    let mut res = Response::new(Body::from(super::metrics::render(handle)));
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    res
}

async fn ready(State(api): State<Arc<Api>>) -> impl IntoResponse {
    if api.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Backend, Pairs, ServeClock};
    use crate::rules::toml;
    use futures_util::FutureExt;
    use slidegate::clock::ManualClock;

    /// serde_json's answer: the reference `write_reply` is held to.
    #[derive(Serialize)]
    struct Reply<'a> {
        allowed: bool,
        code: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        statuses: Vec<StatusReply<'a>>,
    }

    #[derive(Serialize)]
    struct StatusReply<'a> {
        code: &'static str,
        rule: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        window_ms: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reset_after_ms: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        shadow: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        would_deny: bool,
    }

    fn reference(set: &RuleSet, o: &Outcome) -> String {
        let code = |over: bool| if over { "OVER_LIMIT" } else { "OK" };
        let reply = Reply {
            allowed: o.allowed,
            code: code(!o.allowed),
            retry_after_ms: o.retry_after.filter(|_| !o.allowed).map(ceil_ms),
            statuses: o
                .statuses
                .iter()
                .map(|s| {
                    let r = s.rule.as_ref().map(|w| w.get(set));
                    StatusReply {
                        code: code(s.over),
                        rule: r.map(|r| &*r.spec.display),
                        limit: r.map(|r| r.spec.quota.limit()),
                        window_ms: r.map(|r| ceil_ms(r.spec.quota.window())),
                        remaining: r.map(|_| s.remaining),
                        reset_after_ms: r.map(|_| ceil_ms(s.reset_after)),
                        retry_after_ms: s.retry_after.filter(|_| s.over).map(ceil_ms),
                        shadow: r.is_some_and(|r| r.spec.shadow),
                        would_deny: s.shadow_over,
                    }
                })
                .collect(),
        };
        serde_json::to_string(&reply).unwrap()
    }

    const RULES: &str = r#"
[rules.user]
limit = 2
window = "10s"
granularity = "1s"

[rules.'q"uo\te']
limit = 2000000000
window = "1500ms"

[rules.trial]
limit = 1
window = "1h"
shadow = true

[keys]
default = ["user", 'q"uo\te']

[[descriptors]]
domain = "api"
match = ["user"]
rule = "user"

[[descriptors]]
domain = "api"
match = ["plan=trial"]
rule = "trial"
"#;

    #[test]
    fn milliseconds_round_up() {
        let reference =
            |d: Duration| u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let top = u64::MAX / 1000;
        for (secs, nanos) in [
            (0, 0),
            (0, 1),
            (0, 999_999),
            (0, 1_000_000),
            (0, 1_000_001),
            (1, 500_000_000),
            (3600, 999_999_999),
            (top, 0),
            (top, 615_000_000),
            (top, 615_000_001),
            (top, 999_999_999),
            (top + 1, 0),
            (u64::MAX, 999_999_999),
        ] {
            let d = Duration::new(secs, nanos);
            assert_eq!(ceil_ms(d), reference(d), "{d:?}");
        }
    }

    /// Every shape of answer — admitted, denied, shadow, no rule, a limit of the request's
    /// own, a cost no window admits, an escaped rule name — written as serde_json writes it.
    #[test]
    fn written_reply_is_serde_jsons() {
        let clock = ManualClock::new();
        let backend = Backend::Memory {
            clock: ServeClock::Manual(clock.clone()),
            max_keys: 100,
        };
        // Rules with long names: answers that fill an `AnswerBuf`, that leave too little room
        // for the `RateLimit` item, that do not fit.
        let mut rules = RULES.to_owned();
        for n in [60, 100, 110, 120, 130, 200] {
            rules.push_str(&format!(
                "[rules.{name}]\nlimit = 1\nwindow = \"1h\"\n\n\
                 [[descriptors]]\ndomain = \"api\"\nmatch = [\"size={n}\"]\nrule = \"{name}\"\n\n",
                name = "n".repeat(n),
            ));
        }
        let engine = Engine::new(toml::parse(&rules).unwrap(), backend).unwrap();
        let descriptors =
            |list: &[&[(&'static str, &'static str)]], limit| engine::Request::Descriptors {
                domain: "api",
                descriptors: list
                    .iter()
                    .map(|e| Pairs {
                        entries: e.to_vec(),
                        limit,
                    })
                    .collect::<Vec<_>>()
                    .into(),
            };
        let requests = [
            (descriptors(&[&[("user", "a")]], None), 1),
            (
                descriptors(&[&[("user", "a")], &[("plan", "trial")]], None),
                1,
            ),
            (
                descriptors(&[&[("user", "a")], &[("nothing", "x")]], None),
                1,
            ),
            (descriptors(&[&[("plan", "trial")]], None), 1),
            (descriptors(&[&[("plan", "trial")]], None), 5),
            (descriptors(&[&[("user", "b")]], None), 3),
            (
                descriptors(&[&[("x", "y")]], Some((7, Duration::from_secs(60)))),
                2,
            ),
            (
                engine::Request::Key {
                    key: "k",
                    rules: None,
                },
                1,
            ),
            (descriptors(&[&[("size", "60")]], None), 1),
            (descriptors(&[&[("size", "100")]], None), 1),
            (descriptors(&[&[("size", "110")]], None), 1),
            (descriptors(&[&[("size", "120")]], None), 1),
            (descriptors(&[&[("size", "130")]], None), 1),
            (descriptors(&[&[("size", "200")]], None), 1),
        ];
        let mut shapes = std::collections::HashSet::new();
        let mut one_allocation = 0;
        for round in 0..3 {
            for (request, cost) in &requests {
                engine.decide_local(request, *cost, |set, o| {
                    let o = o.unwrap();
                    let mut out = Vec::with_capacity(reply_capacity(set, o));
                    let room = out.capacity();
                    write_reply(&mut out, set, o);
                    assert_eq!(String::from_utf8(out.clone()).unwrap(), reference(set, o));
                    assert!(out.len() <= room, "grew past its capacity");
                    // The answer (in one allocation when it names one rule): the same body
                    // and fields.
                    let res = answer(set, o);
                    assert_eq!(res.status().as_u16(), if o.allowed { 200 } else { 429 });
                    let fields = headers::fields(o, set);
                    for (name, value) in ["ratelimit-policy", "ratelimit", "retry-after"]
                        .into_iter()
                        .zip(&fields)
                    {
                        assert_eq!(res.headers().get(name), value.as_ref(), "{name}");
                    }
                    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
                        .now_or_never()
                        .unwrap()
                        .unwrap();
                    assert_eq!(body, out);
                    one_allocation += usize::from(o.single(set).is_some());
                    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
                    for s in value["statuses"].as_array().unwrap() {
                        shapes.insert(format!(
                            "{} {:?}",
                            s["code"],
                            s.as_object().unwrap().keys().collect::<Vec<_>>()
                        ));
                    }
                });
            }
            clock.advance(Duration::from_millis(700 * round));
        }
        assert!(
            one_allocation >= 10,
            "{one_allocation} answers in one allocation"
        );
        // Denied with a wait, shadow and would-deny, no rule: each appeared.
        let all = shapes.into_iter().collect::<Vec<_>>().join("\n");
        for needle in [
            "\"OVER_LIMIT\"",
            "retry_after_ms",
            "would_deny",
            "shadow",
            "[\"code\", \"rule\"]",
        ] {
            assert!(all.contains(needle), "no status with {needle} among\n{all}");
        }
    }
}
