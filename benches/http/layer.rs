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
//! The group `http_floor` measures the pieces of that work apart, each against what
//! tower-governor does for the same piece: the limiter's decision alone (slidegate's
//! `KeyedLimiter` against governor's DashMap-backed keyed limiter, which tower-governor
//! uses), the key extraction alone (`ClientIp` behind a trusted proxy against
//! `SmartIpKeyExtractor`), and the least that writing two header fields can cost (two
//! integers formatted into one value, one allocation for it, two appends to a response's
//! map; `fields/none` is the same response without them, to subtract). `ipv4/…` weighs the
//! parser `ClientIp` reads `X-Forwarded-For` entries with (`slidegate`) against the standard
//! library's, `Ipv4Addr::from_str` (`std_ipv4`) and `IpAddr::from_str` (`std_ip`, what an entry
//! that may be IPv6 needs), on the 1,000 client addresses.
//!
//! ```text
//! cargo bench --features axum --bench http_layer
//! ```

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{BenchmarkId, Criterion};
use http::{HeaderName, HeaderValue, Request};
use slidegate::http::key::{ClientIp, KeyExtractor, ProxyHeader, RequestHead, parse_proxy_entry};
use slidegate::http::{Policy, RateLimitLayer};
use slidegate::{KeyedLimiter, Quota};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{KeyExtractor as _, SmartIpKeyExtractor};

/// The routers, slidegate's limiters over a window of `window` seconds (1,000,000 requests a
/// second of it, at most `MAX_LIMIT`: every request is admitted).
fn routers(window: u64) -> [(&'static str, Router); 5] {
    let hello = || Router::new().route("/", get(|| async { "hello" }));
    let limit = 1_000_000u64
        .saturating_mul(window)
        .min(slidegate::MAX_LIMIT);
    let quota = Quota::new(limit, Duration::from_secs(window)).unwrap();
    // Fixed seeds: a random one moves a check's instruction count from run to run.
    let limiter = || {
        KeyedLimiter::builder(quota)
            .max_keys(100_000)
            .hasher(ahash::RandomState::with_seeds(1, 2, 3, 4))
            .build()
    };
    let key = ClientIp::new()
        .behind_proxies(ProxyHeader::XForwardedFor, ["127.0.0.1"])
        .unwrap();
    let slidegate = RateLimitLayer::new(Policy::new("per-ip", limiter()).unwrap().key(key.clone()));
    let quiet = RateLimitLayer::new(Policy::new("per-ip", limiter()).unwrap().key(key))
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

/// `router` as `axum::serve` runs it: `with_state` turns every route (and the layers over it)
/// into a service once, as `into_make_service` does; `into_service` alone would rebuild the
/// layered route for every request, a cost a served router never pays.
fn served(router: Router) -> axum::routing::RouterIntoService<Body> {
    router.with_state(()).into_service::<Body>()
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
    for (name, router) in routers(1) {
        let mut service = served(router);
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

/// `http_layer loop <router> <requests> [window]`: only that many requests through one
/// router, for `perf` and `valgrind --tool=callgrind`. Count with
/// `--toggle-collect=http_layer::sends` (`http_layer::parses`) to leave the set-up out, whose
/// clock calibration differs from run to run; the difference of two runs leaves out the
/// first requests' one-time work. `loop ipv4/<parser> <n>` parses `n` client addresses with
/// one of the `ipv4/…` parsers instead.
///
/// `window` is slidegate's window in seconds (default 1, as in the criterion groups). Under
/// callgrind a key's next request comes some 50 ms later (1,000 keys in turn), so a 1 s
/// window's 100 ms buckets move on between many of a key's requests, how many depending on
/// the machine's speed and load: the count then moves from run to run by up to ~120
/// instructions, and charges the decision with bucket changes it seldom makes at full speed
/// (a key's next request some 1 µs × 1,000 later). `window` 3600 (360 s buckets) keeps every
/// key in one bucket for the whole run: the count is the same from run to run, the measure
/// for comparing two builds of the layer.
fn bare_loop(name: &str, requests: usize, window: u64) {
    let clients = clients();
    if let Some(parser) = name.strip_prefix("ipv4/") {
        parses(parser, &clients, requests);
        return;
    }
    let (_, router) = routers(window)
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no router {name:?}"));
    let mut service = served(router);
    sends(&mut service, &clients, requests);
}

/// The requests of `loop`, apart from the set-up, for callgrind's `--toggle-collect`.
#[inline(never)]
fn sends(
    service: &mut axum::routing::RouterIntoService<Body>,
    clients: &[HeaderValue],
    requests: usize,
) {
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..requests {
        black_box(one_request(service, &clients[i % clients.len()], &mut cx));
    }
}

/// The parses of `loop ipv4/<parser>`, for callgrind's `--toggle-collect`.
#[inline(never)]
fn parses(parser: &str, clients: &[HeaderValue], requests: usize) {
    for i in 0..requests {
        let entry = black_box(clients[i % clients.len()].as_bytes());
        let text = || std::str::from_utf8(entry).ok();
        black_box(match parser {
            "slidegate" => parse_proxy_entry(entry),
            "std_ipv4" => text().and_then(|t| t.parse::<Ipv4Addr>().ok().map(IpAddr::V4)),
            "std_ip" => text().and_then(|t| t.parse::<IpAddr>().ok()),
            _ => panic!("no parser {parser:?}"),
        });
    }
}

/// The pieces of a layer's work, one at a time (see the crate documentation above).
fn floor(c: &mut Criterion) {
    let clients = clients();
    let ips: Vec<IpAddr> = clients
        .iter()
        .map(|c| c.to_str().unwrap().parse().unwrap())
        .collect();
    let mut group = c.benchmark_group("http_floor");

    let quota = Quota::new(1_000_000, Duration::from_secs(1)).unwrap();
    let ours = KeyedLimiter::<IpAddr>::builder(quota)
        .max_keys(100_000)
        .build();
    let theirs = governor::RateLimiter::keyed(governor::Quota::per_second(
        core::num::NonZeroU32::new(1_000_000).unwrap(),
    ));
    let mut i = 0;
    group.bench_function("decision/slidegate", |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            black_box(ours.check(&ips[i]).is_allowed())
        });
    });
    group.bench_function("decision/governor", |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            black_box(theirs.check_key(&ips[i]).is_ok())
        });
    });

    let requests: Vec<Request<()>> = clients
        .iter()
        .map(|client| {
            let mut request = Request::get("/")
                .header("x-forwarded-for", client.clone())
                .body(())
                .unwrap();
            request
                .extensions_mut()
                .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
            request
        })
        .collect();
    let parts: Vec<http::request::Parts> = requests
        .iter()
        .map(|r| {
            let mut p = Request::get("/").body(()).unwrap().into_parts().0;
            p.headers = r.headers().clone();
            p.extensions = r.extensions().clone();
            p
        })
        .collect();
    let key = ClientIp::new()
        .behind_proxies(ProxyHeader::XForwardedFor, ["127.0.0.1"])
        .unwrap();
    group.bench_function("key/slidegate", |b| {
        b.iter(|| {
            i = (i + 1) % parts.len();
            black_box(key.extract(&RequestHead::from(&parts[i])).ok())
        });
    });
    group.bench_function("key/tower_governor", |b| {
        b.iter(|| {
            i = (i + 1) % requests.len();
            black_box(SmartIpKeyExtractor.extract(&requests[i]).ok())
        });
    });

    let entries: Vec<&[u8]> = clients.iter().map(HeaderValue::as_bytes).collect();
    group.bench_function("ipv4/slidegate", |b| {
        b.iter(|| {
            i = (i + 1) % entries.len();
            black_box(parse_proxy_entry(black_box(entries[i])))
        });
    });
    group.bench_function("ipv4/std_ipv4", |b| {
        b.iter(|| {
            i = (i + 1) % entries.len();
            let text = std::str::from_utf8(black_box(entries[i])).ok();
            black_box(text.and_then(|t| t.parse::<Ipv4Addr>().ok()))
        });
    });
    group.bench_function("ipv4/std_ip", |b| {
        b.iter(|| {
            i = (i + 1) % entries.len();
            let text = std::str::from_utf8(black_box(entries[i])).ok();
            black_box(text.and_then(|t| t.parse::<IpAddr>().ok()))
        });
    });

    let policy = HeaderValue::from_static("\"per-ip\";q=1000000;w=1");
    let ratelimit_policy = HeaderName::from_static("ratelimit-policy");
    let ratelimit = HeaderName::from_static("ratelimit");
    group.bench_function("fields/none", |b| {
        b.iter(|| black_box(axum::response::IntoResponse::into_response("hello")));
    });
    let mut remaining = 1_000_000u64;
    group.bench_function("fields/floor", |b| {
        b.iter(|| {
            let mut response = axum::response::IntoResponse::into_response("hello");
            remaining = remaining.checked_sub(1).unwrap_or(1_000_000);
            let mut text = [0u8; 48];
            let head = b"\"per-ip\";r=";
            text[..head.len()].copy_from_slice(head);
            let mut len = head.len();
            for (prefix, value) in [(&b""[..], remaining), (&b";t="[..], 1)] {
                text[len..len + prefix.len()].copy_from_slice(prefix);
                len += prefix.len();
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(value).as_bytes();
                text[len..len + digits.len()].copy_from_slice(digits);
                len += digits.len();
            }
            let headers = response.headers_mut();
            headers.reserve(2);
            headers.append(ratelimit_policy.clone(), policy.clone());
            headers.append(
                ratelimit.clone(),
                HeaderValue::from_bytes(&text[..len]).unwrap(),
            );
            black_box(response)
        });
    });
    group.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loop") {
        let name = args.get(2).map_or("slidegate", String::as_str);
        let requests = args.get(3).map_or(Ok(1_000_000), |n| n.parse()).unwrap();
        let window = args.get(4).map_or(Ok(1), |w| w.parse()).unwrap();
        bare_loop(name, requests, window);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    floor(&mut c);
    c.final_summary();
}
