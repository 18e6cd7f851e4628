//! The CPU cost of the HTTP layer per request, without the network: an axum hello-world
//! router called in process, bare, behind slidegate's `RateLimitLayer` and behind
//! tower-governor's `GovernorLayer`, each keyed by the client address a trusted proxy reports
//! in `X-Forwarded-For` (1,000 clients in turn) — the setup of `benches/http/run.sh`, whose
//! wall-clock figures on a shared 2-core machine vary more than the layers cost.
//!
//! `slidegate_no_headers` is slidegate with `headers_on_allowed(false)`;
//! `tower_governor_headers` is tower-governor with `use_headers()` (its `x-ratelimit-*`
//! fields): each layer with and without the fields it writes on admitted responses.
//!
//! An iteration builds the request (head, `X-Forwarded-For`, the peer's `ConnectInfo`),
//! calls the router and polls the response once (every layer and the handler answer at
//! once); the same for all three, so the differences are what each layer adds.
//!
//! ```text
//! cargo bench --features axum --bench http_layer
//! ```

use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{BenchmarkId, Criterion};
use http::{HeaderValue, Request};
use slidegate::http::key::{ClientIp, ProxyHeader};
use slidegate::http::{Policy, RateLimitLayer};
use slidegate::{KeyedLimiter, Quota};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;

fn routers() -> [(&'static str, Router); 5] {
    let hello = || Router::new().route("/", get(|| async { "hello" }));
    let quota = Quota::new(1_000_000, Duration::from_secs(1)).unwrap();
    let limiter = KeyedLimiter::builder(quota).max_keys(100_000).build();
    let key = ClientIp::new()
        .behind_proxies(ProxyHeader::XForwardedFor, ["127.0.0.1"])
        .unwrap();
    let slidegate = RateLimitLayer::new(Policy::new("per-ip", limiter).unwrap().key(key.clone()));
    let limiter = KeyedLimiter::builder(quota).max_keys(100_000).build();
    let quiet = RateLimitLayer::new(Policy::new("per-ip", limiter).unwrap().key(key))
        .headers_on_allowed(false);
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1_000)
        .burst_size(1_000_000)
        .key_extractor(SmartIpKeyExtractor)
        .finish()
        .unwrap();
    let governor_headers = GovernorConfigBuilder::default()
        .per_nanosecond(1_000)
        .burst_size(1_000_000)
        .key_extractor(SmartIpKeyExtractor)
        .use_headers()
        .finish()
        .unwrap();
    [
        ("none", hello()),
        ("slidegate", hello().layer(slidegate)),
        ("slidegate_no_headers", hello().layer(quiet)),
        (
            "tower_governor",
            hello().layer(GovernorLayer::new(governor)),
        ),
        (
            "tower_governor_headers",
            hello().layer(GovernorLayer::new(governor_headers)),
        ),
    ]
}

/// The 1,000 client addresses, as the trusted proxy writes them.
fn clients() -> Vec<HeaderValue> {
    (0..1000)
        .map(|i| HeaderValue::try_from(format!("10.1.{}.{}", i / 256, i % 256)).unwrap())
        .collect()
}

/// One request through `service` from client `client`, answered at once.
fn one_request(
    service: &mut axum::routing::RouterIntoService<Body>,
    client: &HeaderValue,
    cx: &mut Context<'_>,
) -> http::StatusCode {
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000)));
    let mut request = Request::get("/")
        .header("x-forwarded-for", client.clone())
        .body(Body::empty())
        .unwrap();
    request.extensions_mut().insert(peer);
    let ready = service.ready();
    let Poll::Ready(Ok(service)) = pin!(ready).poll(cx) else {
        panic!("router not ready")
    };
    match pin!(service.call(request)).poll(cx) {
        Poll::Ready(response) => response.unwrap().status(),
        Poll::Pending => panic!("the response was not ready at once"),
    }
}

fn bench(c: &mut Criterion) {
    let clients = clients();
    let mut group = c.benchmark_group("http_layer");
    for (name, router) in routers() {
        let mut service = router.into_service::<Body>();
        let mut cx = Context::from_waker(Waker::noop());
        let mut i = 0;
        group.bench_function(BenchmarkId::new(name, 1000), |b| {
            b.iter(|| {
                i = (i + 1) % clients.len();
                black_box(one_request(&mut service, &clients[i], &mut cx))
            });
        });
    }
    group.finish();
}

/// `http_layer loop <router> <requests>`: only that many requests through one router, for
/// `perf` and `valgrind --tool=callgrind` (instruction counts do not move with the machine's
/// load). A run of 0 requests is the set-up alone, to subtract.
fn bare_loop(name: &str, requests: usize) {
    let (_, router) = routers()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no router {name:?}"));
    let clients = clients();
    let mut service = router.into_service::<Body>();
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..requests {
        black_box(one_request(
            &mut service,
            &clients[i % clients.len()],
            &mut cx,
        ));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loop") {
        let name = args.get(2).map_or("slidegate", String::as_str);
        let requests = args.get(3).map_or(Ok(1_000_000), |n| n.parse()).unwrap();
        bare_loop(name, requests);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
