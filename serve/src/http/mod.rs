//! The HTTP/JSON API (axum): `POST /v1/check`, `POST /v1/peek` (the same, charging nothing),
//! `POST /v1/check/batch`, `GET /v1/rules`, `GET /metrics`, `GET /healthz`, `GET /readyz`.
//! docs/serve.md describes every field.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{CONNECTION, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use slidegate::clock::Nanos;

use super::engine::{Engine, Invalid, Judge, Outcome, RuleSet, StoreError};
use super::metrics::{Answer, ApiMetrics, KEYS};
use super::reload::Reloader;
use super::wire::ceil_ms;
use body::{BatchBody, CheckBody, body, parse};
use json::{answer, error, json, json_body, reply_capacity, write_reply};

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
        .route("/v1/peek", post(peek))
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

async fn check(State(api): State<Arc<Api>>, req: Request) -> Response {
    decide(&api, req, Judge::Charge).await
}

/// `POST /v1/peek`: the answer `/v1/check` would give now, status and fields included, with
/// nothing charged.
async fn peek(State(api): State<Arc<Api>>, req: Request) -> Response {
    decide(&api, req, Judge::Peek).await
}

async fn decide(api: &Api, req: Request, judge: Judge) -> Response {
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
        let (set, outcome) = Box::pin(api.engine.decide_remote(&request, cost, judge)).await;
        match outcome {
            Ok(Ok(o)) => respond(metrics, started, &set, Ok(&o)),
            Ok(Err(e)) => respond(metrics, started, &set, Err(Failure::Store(e))),
            Err(e) => respond(metrics, started, &set, Err(Failure::Invalid(e))),
        }
    } else {
        api.engine
            .decide_local(&request, cost, judge, |set, outcome| {
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

mod body;
mod json;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Backend, Judge, Pairs, ServeClock};
    use crate::rules::toml;
    use crate::{engine, headers};
    use futures_util::FutureExt;
    use slidegate::clock::ManualClock;
    use std::time::Duration;

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
                engine.decide_local(request, *cost, Judge::Charge, |set, o| {
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
