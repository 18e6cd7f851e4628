//! The HTTP layer against real axum servers, a hyper service and a tonic server on free
//! loopback ports, through a real client (reqwest). Limiters read a `ManualClock`, so time
//! moves only when a test says.
#![cfg(feature = "axum")]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use reqwest::header::HeaderMap;
use slidegate::clock::ManualClock;
use slidegate::http::key::{ClientIp, FromFn, Header, ProxyHeader, RequestHead};
use slidegate::http::{All, OnLimiterError, OnMissingKey, Policy, RateLimitLayer};
use slidegate::{KeyedLimiter, Quota, SlidingWindow};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A server on a free loopback port, stopped when dropped.
struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Serves `app`, with the peer address in `ConnectInfo` when `connect_info`.
    async fn start(app: Router, connect_info: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stopped.await;
            };
            if connect_info {
                let service = app.into_make_service_with_connect_info::<SocketAddr>();
                axum::serve(listener, service)
                    .with_graceful_shutdown(stopped)
                    .await
                    .unwrap();
            } else {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await
                    .unwrap();
            }
        });
        Server {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn hello(layer: RateLimitLayer<impl slidegate::http::Policies>) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

fn quota(limit: u64, secs: u64) -> Quota {
    Quota::new(limit, Duration::from_secs(secs)).unwrap()
}

/// A response's status and the headers the layer writes, each as a string (`None` when
/// absent; field lines of one name joined with ", ", as a recipient combines them).
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    policy: Option<String>,
    limit: Option<String>,
    retry_after: Option<String>,
}

fn field(headers: &HeaderMap, name: &str) -> Option<String> {
    let lines: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    (!lines.is_empty()).then(|| lines.join(", "))
}

fn seen(status: u16, policy: Option<&str>, limit: Option<&str>, retry: Option<&str>) -> Seen {
    Seen {
        status,
        policy: policy.map(Into::into),
        limit: limit.map(Into::into),
        retry_after: retry.map(Into::into),
    }
}

/// Every rate-limit field parses as a Structured Field List of String Items whose parameters
/// are Integers (and `pk` Byte Sequences), and serialises back to the same bytes.
fn assert_structured(headers: &HeaderMap) {
    use sfv::{BareItem, ListEntry, Parser, SerializeValue};
    for name in ["ratelimit", "ratelimit-policy"] {
        let Some(value) = field(headers, name) else {
            continue;
        };
        let list = Parser::new(&value).parse_list().unwrap();
        assert_eq!(list.serialize_value().unwrap(), value, "{name}");
        for entry in &list {
            let ListEntry::Item(item) = entry else {
                panic!("{name}: inner list in {value}")
            };
            assert!(matches!(item.bare_item, BareItem::String(_)), "{value}");
            for (key, v) in &item.params {
                match key.as_str() {
                    "pk" => assert!(matches!(v, BareItem::ByteSequence(_)), "{value}"),
                    _ => assert!(matches!(v, BareItem::Integer(_)), "{value}"),
                }
            }
        }
    }
}

async fn get_with(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> (Seen, String) {
    let mut request = client.get(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let h = response.headers().clone();
    assert_structured(&h);
    let s = Seen {
        status: response.status().as_u16(),
        policy: field(&h, "ratelimit-policy"),
        limit: field(&h, "ratelimit"),
        retry_after: field(&h, "retry-after"),
    };
    (s, response.text().await.unwrap())
}

/// The process-wide debugging recorder: tests tell their metrics apart by the layer name.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// Every metric's total so far, by name and labels: counters summed, histograms counted.
/// (A snapshot takes the values it reads, so every reader folds it into one table.)
fn metric_total(name: &str, labels: &[(&str, &str)]) -> u64 {
    type Table = HashMap<(String, Vec<(String, String)>), u64>;
    static TOTALS: Mutex<Option<Table>> = Mutex::new(None);
    let mut totals = TOTALS.lock().unwrap();
    let totals = totals.get_or_insert_with(HashMap::new);
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let n = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(values) => values.len() as u64,
            DebugValue::Gauge(_) => 0,
        };
        *totals.entry((key.name().to_owned(), labels)).or_default() += n;
    }
    totals
        .iter()
        .filter(|((n, ls), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, total)| total)
        .sum()
}

fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    metric_total(name, labels)
}

const PROBLEM: &str = "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
\"title\":\"Too Many Requests\",\"status\":429,\"violated-policies\":[\"per-ip\"]}";

#[tokio::test]
async fn allowed_and_denied_responses_carry_the_draft_fields_and_retry_after_rounds_up() {
    snapshotter();
    let clock = ManualClock::new();
    // 3 per 60 s in 6 s buckets (Strict): units admitted at t = 0 leave the window at 66 s.
    let limiter = Arc::new(KeyedLimiter::with_clock(quota(3, 60), clock.clone()));
    let layer = RateLimitLayer::new(
        Policy::new("per-ip", limiter.clone())
            .unwrap()
            .key(ClientIp::new()),
    )
    .name("headers");
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let url = server.url("/");
    let policy = Some("\"per-ip\";q=3;w=60");

    for r in [2, 1, 0] {
        let (s, body) = get_with(&client, &url, &[]).await;
        let limit = format!("\"per-ip\";r={r};t=66");
        assert_eq!(s, seen(200, policy, Some(&limit), None));
        assert_eq!(body, "hello");
    }
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let (s, body) = get_with(&client, &url, &[]).await;
    assert_eq!(
        s,
        seen(429, policy, Some("\"per-ip\";r=0;t=66"), Some("66"))
    );
    assert_eq!(body, PROBLEM);

    // 65.5 s on, the limiter's wait is 0.5 s: Retry-After says 1, never 0.
    clock.advance(Duration::from_millis(65_500));
    let wait = limiter
        .peek(&"127.0.0.1".parse().unwrap())
        .retry_after()
        .unwrap();
    assert_eq!(wait, Duration::from_millis(500));
    let (s, _) = get_with(&client, &url, &[]).await;
    assert_eq!(s, seen(429, policy, Some("\"per-ip\";r=0;t=1"), Some("1")));
    // Coming back after Retry-After is admitted.
    clock.advance(Duration::from_secs(1));
    // Admitted at 66.5 s, in the bucket [66 s, 72 s): counted until 132 s.
    let (s, _) = get_with(&client, &url, &[]).await;
    assert_eq!(s, seen(200, policy, Some("\"per-ip\";r=2;t=66"), None));

    assert_eq!(
        counter("slidegate_http_allowed_total", &[("layer", "headers")]),
        4
    );
    assert_eq!(
        counter(
            "slidegate_http_denied_total",
            &[("layer", "headers"), ("policy", "per-ip")]
        ),
        3
    );
    assert_eq!(
        metric_total("slidegate_http_decision_seconds", &[("layer", "headers")]),
        7
    );
    server.stop().await;
}

#[tokio::test]
async fn shadow_mode_decides_and_adds_fields_but_never_blocks() {
    snapshotter();
    let clock = ManualClock::new();
    let limiter = Arc::new(KeyedLimiter::with_clock(quota(2, 10), clock.clone()));
    let layer = RateLimitLayer::new(
        Policy::new("per-ip", limiter.clone())
            .unwrap()
            .key(ClientIp::new()),
    )
    .shadow(true)
    .name("shadow");
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let policy = Some("\"per-ip\";q=2;w=10");
    let mut seen_all = Vec::new();
    for _ in 0..4 {
        let (s, body) = get_with(&client, &server.url("/"), &[]).await;
        assert_eq!(body, "hello");
        seen_all.push(s);
    }
    assert_eq!(
        seen_all,
        [
            seen(200, policy, Some("\"per-ip\";r=1;t=11"), None),
            seen(200, policy, Some("\"per-ip\";r=0;t=11"), None),
            seen(200, policy, Some("\"per-ip\";r=0;t=11"), None),
            seen(200, policy, Some("\"per-ip\";r=0;t=11"), None),
        ]
    );
    // The requests the limit would have denied were not charged: as in enforcing mode.
    assert_eq!(limiter.admitted_total(&"127.0.0.1".parse().unwrap()), 2);
    assert_eq!(
        counter("slidegate_http_allowed_total", &[("layer", "shadow")]),
        2
    );
    assert_eq!(
        counter(
            "slidegate_http_shadow_denied_total",
            &[("layer", "shadow"), ("policy", "per-ip")]
        ),
        2
    );
    assert_eq!(
        counter("slidegate_http_denied_total", &[("layer", "shadow")]),
        0
    );
    server.stop().await;
}

#[tokio::test]
async fn forged_x_forwarded_for_from_one_peer_is_one_key() {
    let limiter = Arc::new(KeyedLimiter::with_clock(quota(10, 60), ManualClock::new()));
    let layer = RateLimitLayer::new(
        Policy::new("per-ip", limiter.clone())
            .unwrap()
            .key(ClientIp::new()),
    );
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for i in 0..1000u32 {
        let forged = format!("198.18.{}.{}", i / 256, i % 256);
        let forwarded = format!("for={forged}");
        let (s, _) = get_with(
            &client,
            &server.url("/"),
            &[("x-forwarded-for", &forged), ("forwarded", &forwarded)],
        )
        .await;
        admitted += u32::from(s.status == 200);
    }
    assert_eq!(admitted, 10);
    assert_eq!(limiter.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_clients_are_keyed_and_forged_hops_lose() {
    let limiter = Arc::new(KeyedLimiter::with_clock(quota(2, 60), ManualClock::new()));
    let key = ClientIp::new()
        .behind_proxies(ProxyHeader::XForwardedFor, ["127.0.0.1"])
        .unwrap();
    let layer = RateLimitLayer::new(Policy::new("per-ip", limiter.clone()).unwrap().key(key));
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let url = server.url("/");

    // 50 clients behind the proxy (the test client's address, 127.0.0.1), 3 requests each.
    for c in 0..50 {
        let xff = format!("203.0.113.{c}");
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(
                get_with(&client, &url, &[("x-forwarded-for", &xff)])
                    .await
                    .0
                    .status,
            );
        }
        assert_eq!(statuses, [200, 200, 429], "client {xff}");
    }
    assert_eq!(limiter.len(), 50);

    // One client forging a new hop left of the proxy's entry each time: still one client.
    let mut admitted = 0;
    for j in 0..100 {
        let xff = format!("198.18.0.{j}, 192.0.2.99");
        admitted += u32::from(
            get_with(&client, &url, &[("x-forwarded-for", &xff)])
                .await
                .0
                .status
                == 200,
        );
    }
    assert_eq!(admitted, 2);
    assert_eq!(limiter.len(), 51);
    assert_eq!(limiter.admitted_total(&"192.0.2.99".parse().unwrap()), 2);
    server.stop().await;
}

#[tokio::test]
async fn ipv6_clients_of_one_64_share_a_key() {
    let limiter = Arc::new(KeyedLimiter::with_clock(quota(3, 60), ManualClock::new()));
    let key = ClientIp::new()
        .behind_proxies(ProxyHeader::Forwarded, ["127.0.0.0/8"])
        .unwrap();
    let layer = RateLimitLayer::new(Policy::new("per-ip", limiter.clone()).unwrap().key(key));
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for i in 1..=40u32 {
        let fwd = format!("for=\"[2001:db8:aa:bb:{i:x}::{i:x}]:443\";proto=https");
        admitted += u32::from(
            get_with(&client, &server.url("/"), &[("forwarded", &fwd)])
                .await
                .0
                .status
                == 200,
        );
    }
    assert_eq!(admitted, 3);
    assert_eq!(limiter.len(), 1);
    // The next /64 is another client.
    let fwd = "for=\"[2001:db8:aa:bc::1]\"";
    assert_eq!(
        get_with(&client, &server.url("/"), &[("forwarded", fwd)])
            .await
            .0
            .status,
        200
    );
    assert_eq!(limiter.len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn per_user_and_global_limits_are_all_or_nothing() {
    let clock = ManualClock::new();
    let global = Arc::new(SlidingWindow::with_clock(quota(5, 60), clock.clone()));
    let users = Arc::new(KeyedLimiter::with_clock(quota(2, 60), clock.clone()));
    let layer = RateLimitLayer::new(All::new((
        Policy::new("global", global.clone()).unwrap(),
        Policy::new("per-user", users.clone())
            .unwrap()
            .key(Header::new("x-user")),
    )));
    let server = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let url = server.url("/");
    let policy = Some("\"global\";q=5;w=60, \"per-user\";q=2;w=60");
    let user = |u| [("x-user", u)];

    let (s, _) = get_with(&client, &url, &user("alice")).await;
    assert_eq!(
        s,
        seen(
            200,
            policy,
            Some("\"global\";r=4;t=66, \"per-user\";r=1;t=66"),
            None
        )
    );
    get_with(&client, &url, &user("alice")).await;
    // alice's third: per-user denies, and global is not charged for it.
    let (s, _) = get_with(&client, &url, &user("alice")).await;
    assert_eq!(
        s,
        seen(429, policy, Some("\"per-user\";r=0;t=66"), Some("66"))
    );
    assert_eq!(global.peek().remaining(), 3);

    for u in ["bob", "bob", "carol"] {
        assert_eq!(get_with(&client, &url, &user(u)).await.0.status, 200);
    }
    // Global is spent: dave is denied by it, and his own budget is not charged.
    let (s, body) = get_with(&client, &url, &user("dave")).await;
    assert_eq!(
        s,
        seen(429, policy, Some("\"global\";r=0;t=66"), Some("66"))
    );
    assert!(
        body.contains("\"violated-policies\":[\"global\"]"),
        "{body}"
    );
    assert_eq!(
        users
            .peek(&http::HeaderValue::from_static("dave"))
            .remaining(),
        2
    );
    server.stop().await;
}

#[tokio::test]
async fn clones_of_a_layer_and_its_service_share_one_state() {
    let limiter = KeyedLimiter::with_clock(quota(4, 60), ManualClock::new());
    let layer = RateLimitLayer::new(Policy::new("per-ip", limiter).unwrap().key(ClientIp::new()));
    // Two servers, each with a clone of the layer (and axum clones the service per request).
    let a = Server::start(hello(layer.clone()), true).await;
    let b = Server::start(hello(layer), true).await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for server in [&a, &b, &a, &b, &a, &b] {
        statuses.push(get_with(&client, &server.url("/"), &[]).await.0.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_missing_peer_address_gets_the_configured_outcome() {
    snapshotter();
    let clock = ManualClock::new();
    let policy = |outcome| {
        let limiter = KeyedLimiter::with_clock(quota(2, 60), clock.clone());
        Policy::new("per-ip", limiter)
            .unwrap()
            .key(ClientIp::new())
            .on_missing_key(outcome)
    };
    // Served without ConnectInfo: the peer address is missing.
    let deny = Server::start(
        hello(RateLimitLayer::new(policy(OnMissingKey::default())).name("no-peer")),
        false,
    )
    .await;
    let allow = Server::start(
        hello(RateLimitLayer::new(policy(OnMissingKey::Allow))),
        false,
    )
    .await;
    let fallback = Server::start(
        hello(RateLimitLayer::new(policy(OnMissingKey::Key(
            "0.0.0.0".parse().unwrap(),
        )))),
        false,
    )
    .await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        assert_eq!(
            get_with(&client, &deny.url("/"), &[]).await.0,
            seen(500, None, None, None)
        );
        assert_eq!(
            get_with(&client, &allow.url("/"), &[]).await.0,
            seen(200, None, None, None)
        );
    }
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get_with(&client, &fallback.url("/"), &[]).await.0.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(
        counter(
            "slidegate_http_degraded_total",
            &[("layer", "no-peer"), ("reason", "key")]
        ),
        3
    );
    deny.stop().await;
    allow.stop().await;
    fallback.stop().await;
}

#[tokio::test]
async fn a_panicking_extractor_gets_the_configured_outcome() {
    let boom = || {
        FromFn::new(|head: &RequestHead<'_>| {
            if head.headers.contains_key("x-boom") {
                panic!("extractor failure (expected by the test)");
            }
            Some(1u8)
        })
    };
    let policy = |outcome| {
        let limiter = KeyedLimiter::with_clock(quota(100, 60), ManualClock::new());
        Policy::new("p", limiter)
            .unwrap()
            .key(boom())
            .on_missing_key(outcome)
    };
    let deny = Server::start(
        hello(RateLimitLayer::new(policy(OnMissingKey::Deny(
            http::StatusCode::BAD_REQUEST,
        )))),
        true,
    )
    .await;
    let allow = Server::start(
        hello(RateLimitLayer::new(policy(OnMissingKey::Allow))),
        true,
    )
    .await;
    let client = reqwest::Client::new();
    let boom_header = [("x-boom", "1")];
    assert_eq!(
        get_with(&client, &deny.url("/"), &boom_header)
            .await
            .0
            .status,
        400
    );
    assert_eq!(
        get_with(&client, &allow.url("/"), &boom_header)
            .await
            .0
            .status,
        200
    );
    // The servers are unharmed.
    assert_eq!(get_with(&client, &deny.url("/"), &[]).await.0.status, 200);
    assert_eq!(get_with(&client, &allow.url("/"), &[]).await.0.status, 200);
    deny.stop().await;
    allow.stop().await;
}

#[tokio::test]
async fn per_route_options_and_limiter_errors() {
    snapshotter();
    let clock = ManualClock::new();
    let per_ip = || {
        let limiter = KeyedLimiter::with_clock(quota(1, 1), clock.clone());
        Policy::new("p", limiter).unwrap().key(ClientIp::new())
    };
    let quiet = RateLimitLayer::new(per_ip())
        .headers_on_allowed(false)
        .policy_header(false);
    // A cost above the limit can never be checked: the limiter-error outcome applies.
    let costly = |outcome| {
        RateLimitLayer::new(per_ip())
            .cost(2)
            .on_limiter_error(outcome)
            .name("costly")
    };
    let app = Router::new()
        .route("/quiet", get(|| async { "q" }).route_layer(quiet))
        .route(
            "/deny",
            get(|| async { "d" }).route_layer(costly(OnLimiterError::Deny(
                http::StatusCode::SERVICE_UNAVAILABLE,
            ))),
        )
        .route(
            "/allow",
            get(|| async { "a" }).route_layer(costly(OnLimiterError::Allow)),
        )
        .route("/free", get(|| async { "f" }));
    let server = Server::start(app, true).await;
    let client = reqwest::Client::new();
    let quiet_url = server.url("/quiet");
    assert_eq!(
        get_with(&client, &quiet_url, &[]).await.0,
        seen(200, None, None, None)
    );
    assert_eq!(
        get_with(&client, &quiet_url, &[]).await.0,
        seen(429, None, Some("\"p\";r=0;t=2"), Some("2"))
    );
    assert_eq!(
        get_with(&client, &server.url("/deny"), &[]).await.0,
        seen(503, None, None, None)
    );
    assert_eq!(
        get_with(&client, &server.url("/allow"), &[]).await,
        (seen(200, None, None, None), "a".into())
    );
    assert_eq!(
        get_with(&client, &server.url("/free"), &[]).await.0,
        seen(200, None, None, None)
    );
    assert_eq!(
        counter(
            "slidegate_http_degraded_total",
            &[("layer", "costly"), ("reason", "limiter")]
        ),
        2
    );
    server.stop().await;
}

/// A limiter that decides only after a round trip, as a distributed backend does: it yields
/// to the runtime before deciding, and is down while `down` is set.
struct RoundTrip {
    inner: KeyedLimiter<std::net::IpAddr, ManualClock>,
    down: std::sync::atomic::AtomicBool,
}

impl slidegate::http::Limiter for RoundTrip {
    type Key = std::net::IpAddr;

    async fn check(
        &self,
        key: &std::net::IpAddr,
        cost: u64,
    ) -> Result<slidegate::http::Checked, slidegate::http::LimiterError> {
        tokio::task::yield_now().await;
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(slidegate::http::LimiterError::Unavailable(
                "connection refused".into(),
            ));
        }
        Ok(self.inner.check_n(key, cost)?.into())
    }

    fn quota(&self, key: &std::net::IpAddr) -> Quota {
        self.inner.quota(key)
    }
}

#[tokio::test]
async fn an_asynchronous_limiter_is_awaited_and_its_failures_get_the_configured_outcome() {
    snapshotter();
    let limiter = Arc::new(RoundTrip {
        inner: KeyedLimiter::with_clock(quota(2, 10), ManualClock::new()),
        down: false.into(),
    });
    let layer = |outcome| {
        RateLimitLayer::new(
            Policy::new("remote", limiter.clone())
                .unwrap()
                .key(ClientIp::new()),
        )
        .on_limiter_error(outcome)
        .name("remote")
    };
    let app = Router::new()
        .route(
            "/",
            get(|| async { "hello" }).route_layer(layer(OnLimiterError::Deny(
                http::StatusCode::SERVICE_UNAVAILABLE,
            ))),
        )
        .route(
            "/open",
            get(|| async { "open" }).route_layer(layer(OnLimiterError::Allow)),
        );
    let server = Server::start(app, true).await;
    let client = reqwest::Client::new();
    let policy = Some("\"remote\";q=2;w=10");
    let (s, body) = get_with(&client, &server.url("/"), &[]).await;
    assert_eq!(
        (s, body.as_str()),
        (
            seen(200, policy, Some("\"remote\";r=1;t=11"), None),
            "hello"
        )
    );
    get_with(&client, &server.url("/"), &[]).await;
    let (s, _) = get_with(&client, &server.url("/"), &[]).await;
    assert_eq!(
        s,
        seen(429, policy, Some("\"remote\";r=0;t=11"), Some("11"))
    );

    limiter
        .down
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        get_with(&client, &server.url("/"), &[]).await.0,
        seen(503, None, None, None)
    );
    let (s, body) = get_with(&client, &server.url("/open"), &[]).await;
    assert_eq!((s, body.as_str()), (seen(200, None, None, None), "open"));
    assert_eq!(
        counter(
            "slidegate_http_degraded_total",
            &[("layer", "remote"), ("reason", "limiter")]
        ),
        2
    );
    server.stop().await;
}

/// The same limit through `layer` over a hyper or tonic server at `url`: two admitted with
/// their fields and the inner service's body, then a denial in the layer's default body.
async fn two_then_denied(url: &str) {
    let client = reqwest::Client::new();
    let policy = Some("\"per-ip\";q=2;w=60");
    for r in [1, 0] {
        let (s, body) = get_with(&client, url, &[]).await;
        let limit = format!("\"per-ip\";r={r};t=66");
        assert_eq!(
            (s, body.as_str()),
            (seen(200, policy, Some(&limit), None), "hello")
        );
    }
    let (s, body) = get_with(&client, url, &[]).await;
    assert_eq!(
        s,
        seen(429, policy, Some("\"per-ip\";r=0;t=66"), Some("66"))
    );
    assert_eq!(body, PROBLEM);
}

#[tokio::test]
async fn a_hyper_service_is_answered_in_its_own_body_type() {
    use bytes::Bytes;
    use http_body_util::Full;
    use tower::{Layer, ServiceExt};

    // 2 per 60 s in 6 s buckets (Strict): units admitted at t = 0 leave the window at 66 s.
    let limiter = KeyedLimiter::with_clock(quota(2, 60), ManualClock::new());
    let layer = RateLimitLayer::new(Policy::new("per-ip", limiter).unwrap().key(ClientIp::new()));
    let inner = tower::service_fn(|_: http::Request<hyper::body::Incoming>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("hello"))))
    });
    let service = layer.layer(inner);
    // Its responses are in the inner service's body type, `Full<Bytes>`, not a wrapper.
    fn answers_in_full_bytes<S>(_: &S)
    where
        S: tower::Service<
                http::Request<hyper::body::Incoming>,
                Response = http::Response<Full<Bytes>>,
            >,
    {
    }
    answers_in_full_bytes(&service);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = service.clone();
            // What a hyper server does for ClientIp: the peer address as an extension.
            let per_request = hyper::service::service_fn(move |mut request| {
                request.extensions_mut().insert(peer);
                service.clone().oneshot(request)
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), per_request),
            );
        }
    });
    two_then_denied(&format!("http://{addr}/")).await;
    server.abort();
}

#[cfg(feature = "tonic")]
#[tokio::test]
async fn a_tonic_server_is_answered_in_its_own_body_type() {
    use bytes::Bytes;
    use http_body_util::Full;

    let limiter = KeyedLimiter::with_clock(quota(2, 60), ManualClock::new());
    // The peer address as docs/http.md reads it for tonic.
    let key = ClientIp::new().peer_from(|head| {
        head.extensions
            .get::<tonic::transport::server::TcpConnectInfo>()?
            .remote_addr()
            .map(|a| a.ip())
    });
    let layer = RateLimitLayer::new(Policy::new("per-ip", limiter).unwrap().key(key));
    let inner = tower::service_fn(|_: http::Request<tonic::body::Body>| async {
        let body = tonic::body::Body::new(Full::new(Bytes::from("hello")));
        Ok::<_, std::convert::Infallible>(http::Response::new(body))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            // reqwest speaks HTTP/1.1 here; the layer sees the same request either way.
            .accept_http1(true)
            .layer(layer)
            .serve_with_incoming_shutdown(
                inner,
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );
    two_then_denied(&format!("http://{addr}/")).await;
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
