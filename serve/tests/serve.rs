//! `slidegate-serve` (what `slidegate serve` runs), as a user runs it: real server processes on free loopback ports, real
//! clients (reqwest for HTTP/JSON; a tonic client built from the same proto for Envoy's
//! gRPC API), a real redis-server for shared state. Windows are long (minutes or hours), so
//! no decision here depends on how fast the machine is.

use slidegate_serve::proto;
use slidegate_testkit::redis_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde_json::{Value, json};
use tonic::transport::Channel;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A `slidegate serve` process with its rules file in a directory of its own; killed and
/// the directory removed on drop.
struct Server {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
    dir: PathBuf,
    rules: PathBuf,
}

impl Server {
    /// Starts a server on `rules` (written to `rules.<ext>`), with extra arguments.
    fn start(rules: &str, ext: &str, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "slidegate-serve-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("rules.{ext}"));
        std::fs::write(&path, rules).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate-serve"))
            .args([
                "--rules",
                path.to_str().unwrap(),
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = |name: &str| -> SocketAddr {
            let err = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
            let at = line
                .find(&format!("{name}="))
                .unwrap_or_else(|| panic!("no {name}= in {line:?}; stderr: {err}"));
            line[at + name.len() + 1..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let (http, grpc) = (addr("http"), addr("grpc"));
        Server {
            child,
            http,
            grpc,
            dir,
            rules: path,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    async fn grpc(&self) -> RateLimitServiceClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        RateLimitServiceClient::new(channel)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for the process to exit, at most `within`.
    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < within,
                "the server did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Replaces the rules file the way deployments do: write aside, then rename over.
    fn write_rules(&self, text: &str) {
        let tmp = self.dir.join("incoming");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.rules).unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// POST a JSON body; (status, headers, JSON body).
async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let res = client.post(url).body(body.to_owned()).send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    (status, headers, value)
}

async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    serde_json::from_slice(&client.get(url).send().await.unwrap().bytes().await.unwrap()).unwrap()
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

const RULES: &str = r#"
[rules.per-user]
limit = 3
window = "1h"
granularity = "1m"

[rules.tenant]
limit = 100
window = "1h"

[rules.trial]
limit = 1
window = "1h"
shadow = true

[keys]
default = ["per-user"]

[[descriptors]]
domain = "api"
match = ["user"]
rule = "per-user"

[[descriptors]]
domain = "api"
match = ["tenant"]
rule = "tenant"

[[descriptors]]
domain = "api"
match = ["plan=trial"]
rule = "trial"

[[descriptors]]
domain = "api"
match = ["user=health"]
unlimited = true
"#;

fn descriptors(list: &[&[(&str, &str)]]) -> String {
    let ds: Vec<Value> = list
        .iter()
        .map(|e| json!({"entries": e.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()}))
        .collect();
    json!({"domain": "api", "descriptors": ds}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_allowed_denied_shadowed_unknown_and_malformed() {
    let server = Server::start(RULES, "toml", &["--max-body", "4096"]);
    let c = reqwest::Client::new();
    let check = server.url("/v1/check");
    let alice = descriptors(&[&[("user", "alice")]]);

    // `/v1/peek` answers as `/v1/check` would, of the request's cost, and charges nothing.
    let peek = server.url("/v1/peek");
    let of = |list: &[&[(&str, &str)]], cost: u64| {
        let mut v: Value = serde_json::from_str(&descriptors(list)).unwrap();
        v["cost"] = json!(cost);
        v.to_string()
    };
    let bob: &[&[(&str, &str)]] = &[&[("user", "bob")]];
    let (status, _, body) = post(&c, &peek, &of(bob, 3)).await;
    assert_eq!((status, &body["allowed"]), (200, &json!(true)), "{body}");
    assert_eq!(body["statuses"][0]["remaining"], 3);
    assert_eq!(
        post(&c, &check, &of(bob, 2)).await.2["statuses"][0]["remaining"],
        1
    );
    let (status, h, body) = post(&c, &peek, &of(bob, 2)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["remaining"], 1);
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((3_600_000..=3_660_000).contains(&retry_ms), "{retry_ms}");
    assert!(header(&h, "retry-after").is_some());
    for _ in 0..2 {
        let (status, _, body) = post(&c, &peek, &of(bob, 1)).await;
        assert_eq!(
            (status, &body["statuses"][0]["remaining"]),
            (200, &json!(1))
        );
    }
    let (status, _, body) = post(&c, &check, &of(bob, 1)).await;
    assert_eq!(
        (status, &body["statuses"][0]["remaining"]),
        (200, &json!(0))
    );
    // Two limits, all or nothing, neither charged: then the check of the same passes.
    let carol: &[&[(&str, &str)]] = &[&[("user", "carol")], &[("tenant", "peek")]];
    let (status, _, body) = post(&c, &peek, &of(carol, 3)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["statuses"][1]["remaining"], 100);
    let (status, _, body) = post(&c, &check, &of(carol, 3)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["statuses"][1]["remaining"], 97);
    let (status, _, body) = post(&c, &peek, &of(carol, 1)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][1]["code"], "OK");
    assert_eq!(body["statuses"][1]["remaining"], 97);

    for left in [2, 1, 0] {
        let (status, h, body) = post(&c, &check, &alice).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["allowed"], true);
        assert_eq!(body["statuses"][0]["remaining"], left);
        assert_eq!(body["statuses"][0]["rule"], "per-user");
        assert_eq!(body["statuses"][0]["limit"], 3);
        assert_eq!(
            header(&h, "ratelimit-policy"),
            Some("\"per-user\";q=3;w=3600")
        );
        assert!(
            header(&h, "ratelimit")
                .unwrap()
                .starts_with(&format!("\"per-user\";r={left};t="))
        );
        assert_eq!(header(&h, "retry-after"), None);
    }
    let (status, h, body) = post(&c, &check, &alice).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["allowed"], false);
    assert_eq!(body["code"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    // Strict, 1 h in 1 min buckets: the first unit leaves between 1 h and 1 h + 1 min.
    assert!((3_600_000..=3_660_000).contains(&retry_ms), "{retry_ms}");
    let retry: u64 = header(&h, "retry-after").unwrap().parse().unwrap();
    assert_eq!(retry, retry_ms.div_ceil(1000));
    assert_eq!(
        header(&h, "ratelimit"),
        Some(format!("\"per-user\";r=0;t={retry}").as_str())
    );

    // Two descriptors: all or nothing (the tenant is not charged for alice's denial).
    let both = descriptors(&[&[("tenant", "t1")], &[("user", "alice")]]);
    let (status, _, body) = post(&c, &check, &both).await;
    assert_eq!(status, 429);
    assert_eq!(body["statuses"][0]["code"], "OK");
    assert_eq!(body["statuses"][0]["remaining"], 100);
    assert_eq!(body["statuses"][1]["code"], "OVER_LIMIT");

    // Shadow: over its limit on the second request, reported OK, admitted.
    let trial = descriptors(&[&[("plan", "trial")]]);
    assert_eq!(
        post(&c, &check, &trial).await.2["statuses"][0]["would_deny"],
        Value::Null
    );
    let (status, _, body) = post(&c, &check, &trial).await;
    assert_eq!(status, 200);
    assert_eq!(body["statuses"][0]["code"], "OK");
    assert_eq!(body["statuses"][0]["shadow"], true);
    assert_eq!(body["statuses"][0]["would_deny"], true);

    // No rule: an unknown domain, an unmatched key, an unlimited value, no entries (as the
    // gRPC API answers it, the reference service's answer): OK with no limit.
    let unknown = json!({"domain": "elsewhere", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
    for body in [
        unknown.to_string(),
        descriptors(&[&[("colour", "red")]]),
        descriptors(&[&[("user", "health")]]),
        descriptors(&[&[]]),
    ] {
        let (status, h, body) = post(&c, &check, &body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["statuses"][0], json!({"code": "OK", "rule": null}));
        assert_eq!(header(&h, "ratelimit-policy"), None);
    }

    // The key form, with the file's default rule and with named rules; and a cost.
    let (status, _, body) = post(&c, &check, r#"{"key": "k1", "cost": 2}"#).await;
    assert_eq!(
        (status, body["statuses"][0]["remaining"].clone()),
        (200, json!(1))
    );
    let (_, _, body) = post(
        &c,
        &check,
        r#"{"key": "k1", "rules": ["tenant", "per-user"]}"#,
    )
    .await;
    assert_eq!(body["statuses"][0]["remaining"], 99);
    assert_eq!(body["statuses"][1]["remaining"], 0);
    // A cost above the limit can never pass: denied with no retry time.
    let (status, h, body) = post(&c, &check, r#"{"key": "k2", "cost": 4}"#).await;
    assert_eq!(status, 429);
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(body.get("retry_after_ms"), None);
    assert_eq!(header(&h, "retry-after"), None);

    // Malformed: a 400 naming the field.
    for (body, field, says) in [
        ("{", "", "EOF"),
        (r#"{"key": 7}"#, "key", "invalid type"),
        (r#"{"key": "a", "cots": 1}"#, "cots", "unknown field"),
        (r#"{"cost": 1}"#, "key", "missing"),
        (r#"{"key": "a", "cost": 0}"#, "cost", "at least 1"),
        (r#"{"key": "a", "cost": -1}"#, "cost", "invalid value"),
        (
            r#"{"key": "a", "rules": ["nope"]}"#,
            "rules[0]",
            "no rule named",
        ),
        (r#"{"key": "a", "descriptors": []}"#, "key", "not both"),
        (
            r#"{"descriptors": [{"entries": [{"key": "u", "value": "v"}]}]}"#,
            "domain",
            "missing",
        ),
        (
            r#"{"domain": "api", "descriptors": []}"#,
            "descriptors",
            "empty",
        ),
        (
            r#"{"domain": "api", "descriptors": [{"entries": [{"key": "u", "value": 5}]}]}"#,
            "descriptors[0].entries[0].value",
            "invalid type",
        ),
        (
            r#"{"domain": "api", "descriptors": [{"entries": [{"key": "", "value": "v"}]}]}"#,
            "descriptors[0].entries[0].key",
            "empty",
        ),
        (
            r#"{"domain": "api", "descriptors": [{"entries": [{"key": "u", "value": "v"}], "limit": {"requests_per_unit": 5, "unit": "week"}}]}"#,
            "descriptors[0].limit.unit",
            "unknown unit",
        ),
    ] {
        let (status, _, reply) = post(&c, &check, body).await;
        assert_eq!(status, 400, "{body} -> {reply}");
        assert_eq!(
            reply["field"].as_str().unwrap_or(""),
            field,
            "{body} -> {reply}"
        );
        assert!(
            reply["error"].as_str().unwrap().contains(says),
            "{body} -> {reply}"
        );
    }
    // Oversized: refused before it is read whole.
    let big = format!(r#"{{"key": "{}"}}"#, "x".repeat(5000));
    let (status, _, reply) = post(&c, &check, &big).await;
    assert_eq!(status, 413, "{reply}");

    // Batch: each decided on its own; one malformed request decides none.
    let batch = server.url("/v1/check/batch");
    let (status, _, body) = post(
        &c,
        &batch,
        r#"{"requests": [{"key": "b"}, {"key": "b", "cost": 3}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["allowed"], true);
    assert_eq!(body["results"][1]["allowed"], false);
    let (status, _, body) = post(
        &c,
        &batch,
        r#"{"requests": [{"key": "b2"}, {"key": "b2", "cost": 0}]}"#,
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str().unwrap()),
        (400, "requests[1].cost")
    );
    let (_, _, body) = post(&c, &check, r#"{"key": "b2"}"#).await;
    assert_eq!(
        body["statuses"][0]["remaining"], 2,
        "the bad batch charged nothing"
    );

    let many = format!(r#"{{"requests": [{}]}}"#, vec!["{}"; 1001].join(","));
    let (status, _, body) = post(&c, &batch, &many).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("requests")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap().contains("more than 1000"),
        "{body}"
    );

    // Health, readiness, metrics.
    assert_eq!(
        c.get(server.url("/healthz")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        c.get(server.url("/readyz")).send().await.unwrap().status(),
        200
    );
    let metrics = c
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        // Three checks and two peeks over the limit.
        "slidegate_serve_requests_total{api=\"http\",outcome=\"over_limit\"} 5",
        "slidegate_serve_rule_checks_total{rule=\"trial\",outcome=\"shadow_over_limit\"} 1",
        "slidegate_serve_rules_generation 1",
        "slidegate_serve_keys{rule=\"per-user\"}",
        "slidegate_serve_decision_seconds_bucket{api=\"http\"",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    let (status, _, _) = post(&c, &server.url("/v2/nothing"), "{}").await;
    assert_eq!(status, 404);
}

fn envoy_request(domain: &str, list: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: list
            .iter()
            .map(|e| RateLimitDescriptor {
                entries: e
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).into(),
                        value: (*v).into(),
                    })
                    .collect(),
                limit: None,
            })
            .collect(),
        hits_addend: hits,
    }
}

async fn should(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(req).await.unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_answers_as_envoys_rate_limit_service() {
    let server = Server::start(RULES, "toml", &[]);
    let mut g = server.grpc().await;

    // hits_addend 0 means 1.
    let r = should(&mut g, envoy_request("api", &[&[("user", "bob")]], 0)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    let s = &r.statuses[0];
    assert_eq!(s.code, Code::Ok as i32);
    assert_eq!(s.limit_remaining, 2);
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (3, Unit::Hour as i32, "per-user")
    );
    // The reference service's fixed window answers the unit's seconds less those past
    // (src/utils/utilities.go, `CalculateReset`: `sec - now%sec`, at envoyproxy/ratelimit
    // f2fb15770f7fd1c88ca6c3a1b58ee513917ace96): whole seconds, 1 to the unit. The sliding
    // window's reset in that form: rounded up to whole seconds, at most the unit (its last
    // bucket would take it to 3,660 s), and no less than the window less its bucket.
    let reset = s.duration_until_reset.unwrap();
    assert_eq!(reset.nanos, 0, "{reset:?}");
    assert!((3540..=3600).contains(&reset.seconds), "{reset:?}");
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers[0],
        ("ratelimit-policy".into(), "\"per-user\";q=3;w=3600".into())
    );
    assert!(
        headers[1].1.starts_with("\"per-user\";r=2;t="),
        "{headers:?}"
    );
    assert_eq!(headers.len(), 2);

    // hits_addend 2 takes the rest; the next is over, with Retry-After for Envoy to forward.
    let r = should(&mut g, envoy_request("api", &[&[("user", "bob")]], 2)).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (Code::Ok as i32, 0)
    );
    let r = should(
        &mut g,
        envoy_request("api", &[&[("tenant", "t")], &[("user", "bob")]], 1),
    )
    .await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0].limit_remaining, 100,
        "a denied request charges no descriptor"
    );
    assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[1].limit_remaining, 0);
    assert!(
        r.response_headers_to_add
            .iter()
            .any(|h| h.key == "retry-after")
    );
    let reset = r.statuses[1].duration_until_reset.unwrap();
    assert!(reset.nanos == 0 && reset.seconds <= 3600, "{reset:?}");

    // A hits_addend above what is left: OVER_LIMIT with limit_remaining 0, the reference
    // service's answer for any OVER_LIMIT (src/limiter/base_limiter.go,
    // `GetResponseDescriptorStatus`, at f2fb15770f7fd1c88ca6c3a1b58ee513917ace96), which
    // Envoy copies into `X-RateLimit-Remaining`; slidegate answered the 1 still left.
    let r = should(&mut g, envoy_request("api", &[&[("user", "dave")]], 2)).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
    let r = should(&mut g, envoy_request("api", &[&[("user", "dave")]], 2)).await;
    assert_eq!(
        (
            r.overall_code,
            r.statuses[0].code,
            r.statuses[0].limit_remaining
        ),
        (Code::OverLimit as i32, Code::OverLimit as i32, 0)
    );
    // The HTTP/JSON API keeps its documented `remaining` (what is left without the request:
    // a cost of 1 would still pass), and nothing was charged.
    let c = reqwest::Client::new();
    let body = json!({"domain": "api", "cost": 2,
                      "descriptors": [{"entries": [{"key": "user", "value": "dave"}]}]});
    let (status, _, v) = post(&c, &server.url("/v1/check"), &body.to_string()).await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["statuses"][0]["remaining"], 1, "{v}");

    // Shadow mode: over, and OK; with limit_remaining 0, as the reference service's shadow
    // mode turns only the code of its OVER_LIMIT status to OK (base_limiter.go, as above).
    should(&mut g, envoy_request("api", &[&[("plan", "trial")]], 1)).await;
    let r = should(&mut g, envoy_request("api", &[&[("plan", "trial")]], 1)).await;
    assert_eq!(
        (
            r.overall_code,
            r.statuses[0].code,
            r.statuses[0].limit_remaining
        ),
        (Code::Ok as i32, Code::Ok as i32, 0)
    );

    // An unlimited descriptor: OK, no current_limit, no duration_until_reset, and
    // limit_remaining the most a u32 holds (src/service/ratelimit.go, `shouldRateLimitWorker`:
    // `LimitRemaining: math.MaxUint32`, at envoyproxy/ratelimit
    // f2fb15770f7fd1c88ca6c3a1b58ee513917ace96); slidegate answered 0.
    let r = should(&mut g, envoy_request("api", &[&[("user", "health")]], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    let s = &r.statuses[0];
    assert_eq!((s.code, s.limit_remaining), (Code::Ok as i32, u32::MAX));
    assert!(s.current_limit.is_none() && s.duration_until_reset.is_none());

    // Unknown domain, unmatched descriptors and a descriptor with no entries: OK, no limit,
    // nothing remaining (the reference service's answer; for no entries its `GetLimit`,
    // src/config/config_impl.go at f2fb15770f7fd1c88ca6c3a1b58ee513917ace96, walks no entry
    // and finds no limit, where slidegate answered INVALID_ARGUMENT).
    for req in [
        envoy_request("elsewhere", &[&[("user", "bob")]], 1),
        envoy_request("api", &[&[("colour", "red")]], 1),
        envoy_request("api", &[&[]], 1),
    ] {
        let r = should(&mut g, req).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses.len(), 1);
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, 0);
        assert!(r.statuses[0].current_limit.is_none());
        assert!(r.response_headers_to_add.is_empty());
    }
    // Beside a limited one, it leaves the other's answer as it is.
    let r = should(
        &mut g,
        envoy_request("api", &[&[], &[("tenant", "t-empty")]], 1),
    )
    .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert!(r.statuses[0].current_limit.is_none());
    assert_eq!(r.statuses[1].limit_remaining, 99);

    // A descriptor with its own limit.
    let mut req = envoy_request("api", &[&[("anything", "x")]], 1);
    req.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 2,
    });
    let r = should(&mut g, req.clone()).await;
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    // The reference service names no override's limit (config_impl.go, `GetLimit`, as above).
    assert_eq!((limit.unit, limit.name.as_str()), (Unit::Minute as i32, ""));
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert!(
        reset.nanos == 0 && (54..=60).contains(&reset.seconds),
        "{reset:?}"
    );
    assert_eq!(
        should(&mut g, req).await.overall_code,
        Code::OverLimit as i32
    );
    // No entries but its own limit: counted against it, as the reference service counts it
    // (`GetLimit` returns the override before it walks any entry).
    let mut req = envoy_request("api", &[&[]], 1);
    req.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 2,
    });
    let r = should(&mut g, req.clone()).await;
    assert!(r.statuses[0].current_limit.is_some());
    assert_eq!(
        should(&mut g, req).await.overall_code,
        Code::OverLimit as i32
    );

    // Malformed: INVALID_ARGUMENT naming the field.
    for (req, says) in [
        (envoy_request("", &[&[("user", "bob")]], 1), "domain"),
        (envoy_request("api", &[], 1), "descriptors"),
        (
            envoy_request("api", &[&[("", "v")]], 1),
            "descriptors[0].entries[0].key",
        ),
    ] {
        let e = g.should_rate_limit(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with(says), "{}", e.message());
    }
}

/// The same rules in both formats, the same requests: the same answers.
/// `--threads 1` runs a current-thread runtime: both APIs decide on it, against one count, and
/// SIGTERM still stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_thread_serves_both_apis_and_stops_on_sigterm() {
    let mut server = Server::start(RULES, "toml", &["--threads", "1"]);
    let mut g = server.grpc().await;
    let r = should(&mut g, envoy_request("api", &[&[("user", "carol")]], 2)).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (Code::Ok as i32, 1)
    );
    assert_eq!(r.response_headers_to_add.len(), 2);
    let c = reqwest::Client::new();
    let body =
        json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "carol"}]}]});
    let (status, _, v) = post(&c, &server.url("/v1/check"), &body.to_string()).await;
    assert_eq!((status, v["allowed"].as_bool()), (200, Some(true)), "{v}");
    let r = should(&mut g, envoy_request("api", &[&[("user", "carol")]], 1)).await;
    assert_eq!(
        r.overall_code,
        Code::OverLimit as i32,
        "gRPC and HTTP share the count"
    );
    server.signal("-TERM");
    assert!(server.wait_exit(Duration::from_secs(30)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_yaml_decides_as_the_equivalent_toml() {
    let yaml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rules.yaml"))
            .unwrap();
    let toml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rules.toml"))
            .unwrap();
    let (a, b) = (
        Server::start(&yaml, "yaml", &[]),
        Server::start(&toml, "toml", &[]),
    );
    let (mut ga, mut gb) = (a.grpc().await, b.grpc().await);
    let requests: Vec<RateLimitRequest> = (0..40)
        .map(|i| {
            let user = format!("u{}", i % 3);
            let ip = format!("10.0.0.{}", i % 2);
            match i % 5 {
                0 => envoy_request("api", &[&[("user", &user)]], 1),
                1 => envoy_request("api", &[&[("user", "alice")]], 1 + i % 3),
                2 => envoy_request("api", &[&[("path", "/login"), ("remote_address", &ip)]], 1),
                3 => envoy_request(
                    "api",
                    &[
                        &[("user", &user)],
                        &[("path", "/login"), ("remote_address", &ip)],
                    ],
                    1,
                ),
                _ => envoy_request("api", &[&[("user", "internal")], &[("client", "batch")]], 1),
            }
        })
        .collect();
    type Summary = (i32, Vec<(i32, u32, Option<(u32, i32)>)>);
    let summary = |r: &RateLimitResponse| -> Summary {
        (
            r.overall_code,
            r.statuses
                .iter()
                .map(|s| {
                    (
                        s.code,
                        s.limit_remaining,
                        s.current_limit
                            .as_ref()
                            .map(|l| (l.requests_per_unit, l.unit)),
                    )
                })
                .collect(),
        )
    };
    let mut over = 0;
    for req in requests {
        let (ra, rb) = (
            should(&mut ga, req.clone()).await,
            should(&mut gb, req.clone()).await,
        );
        assert_eq!(summary(&ra), summary(&rb), "{req:?}");
        over += usize::from(ra.overall_code == Code::OverLimit as i32);
    }
    assert!(
        over >= 4,
        "the sequence reaches the limits ({over} denials)"
    );

    // `current_limit.name`: the reference service fills it from the YAML's `rate_limit.name`
    // alone (src/config/config_impl.go, `NewRateLimit(..., name, ...)` in `loadDescriptors`,
    // at envoyproxy/ratelimit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96), so a YAML rule
    // without one reports "" (slidegate reported its path, `api.user`); a TOML rule's name is
    // the file's own, and reported.
    let req = envoy_request("api", &[&[("user", "u-named")]], 1);
    let name = |r: &RateLimitResponse| r.statuses[0].current_limit.as_ref().unwrap().name.clone();
    assert_eq!(name(&should(&mut ga, req.clone()).await), "");
    assert_eq!(name(&should(&mut gb, req).await), "per-user");
}

const LOAD_RULES: &str = r#"
[rules.bulk]
limit = 1000000
window = "1h"

[rules.tight]
limit = 5
window = "1h"

[keys]
default = ["bulk"]
"#;

/// A rules file changes under load: no request fails, the new limit decides, a bad file is
/// rejected with its line and field while the old rules keep deciding, a deleted file keeps
/// the rules, and unchanged rules keep their counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load() {
    let server = Server::start(LOAD_RULES, "toml", &[]);
    let c = reqwest::Client::new();
    let check = server.url("/v1/check");
    let rules_url = server.url("/v1/rules");

    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for t in 0..4 {
        let (c, check, stop, sent, failed) = (
            c.clone(),
            check.clone(),
            stop.clone(),
            sent.clone(),
            failed.clone(),
        );
        load.push(tokio::spawn(async move {
            let body = format!(r#"{{"key": "load-{t}"}}"#);
            while !stop.load(Ordering::Relaxed) {
                match c.post(&check).body(body.clone()).send().await {
                    Ok(r) if r.status() == 200 => {}
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let tight = |n: u64| format!(r#"{{"key": "t", "rules": ["tight"], "cost": {n}}}"#);
    assert_eq!(
        post(&c, &check, &tight(2)).await.2["statuses"][0]["remaining"],
        3
    );
    let wait_for = |pred: Box<dyn Fn(&Value) -> bool + Send>| {
        let (c, url) = (c.clone(), rules_url.clone());
        async move {
            let start = Instant::now();
            loop {
                let v = get_json(&c, &url).await;
                if pred(&v) {
                    return v;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "rules never reached the state: {v}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // 1. A good file: tight's limit changes (its counts start afresh); bulk is unchanged
    // and keeps its counts.
    let before = post(&c, &check, r#"{"key": "load-0"}"#).await.2["statuses"][0]["remaining"]
        .as_u64()
        .unwrap();
    server.write_rules(&LOAD_RULES.replace("limit = 5\n", "limit = 7\n"));
    wait_for(Box::new(|v| v["generation"] == 2)).await;
    assert_eq!(
        post(&c, &check, &tight(1)).await.2["statuses"][0]["remaining"],
        6
    );
    let after = post(&c, &check, r#"{"key": "load-0"}"#).await.2["statuses"][0]["remaining"]
        .as_u64()
        .unwrap();
    assert!(
        after < before,
        "bulk kept its counts across the reload ({before} -> {after})"
    );

    // 2. A bad file: rejected, with its line and field; the rules in force keep deciding.
    server.write_rules(&LOAD_RULES.replace("limit = 5\n", "limit = 5\ngranularity = \"7m\"\n"));
    let v = wait_for(Box::new(|v| !v["last_error"].is_null())).await;
    let e = v["last_error"].as_str().unwrap();
    assert!(
        e.contains("line 8: rules.tight.granularity") && e.contains("does not divide"),
        "{e}"
    );
    assert_eq!(v["generation"], 2);
    assert_eq!(
        post(&c, &check, &tight(1)).await.2["statuses"][0]["remaining"],
        5
    );
    assert!(server.stderr().contains("rules file rejected"));

    // 3. A deleted file: the rules stay.
    std::fs::remove_file(&server.rules).unwrap();
    wait_for(Box::new(|v| {
        v["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("deleted"))
    }))
    .await;
    assert_eq!(
        post(&c, &check, &tight(1)).await.2["statuses"][0]["remaining"],
        4
    );

    // 4. The file back, changed: in force.
    server.write_rules(&LOAD_RULES.replace("limit = 5\n", "limit = 9\n"));
    wait_for(Box::new(|v| {
        v["generation"] == 3 && v["last_error"].is_null()
    }))
    .await;
    assert_eq!(
        post(&c, &check, &tight(1)).await.2["statuses"][0]["remaining"],
        8
    );

    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 100, "the load ran ({sent} requests)");
    assert_eq!(
        failed, 0,
        "{failed} of {sent} requests failed during the reloads"
    );
}

/// SIGTERM while requests are in flight: they finish; then the listener is closed and the
/// process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_in_flight_requests_finish() {
    let mut server = Server::start(LOAD_RULES, "toml", &["--drain", "1s"]);
    let body = r#"{"key": "slow"}"#;
    // Requests sent in two halves: the server has the head and half the body when the
    // signal arrives, and the rest only after the listener has closed.
    let mut slow: Vec<TcpStream> = (0..16)
        .map(|_| {
            let mut s = TcpStream::connect(server.http).unwrap();
            write!(
                s,
                "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{}",
                body.len(),
                &body[..5]
            )
            .unwrap();
            s
        })
        .collect();
    // Load on both APIs until the server says it is draining (as a load balancer would stop).
    let c = reqwest::Client::new();
    let draining = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for t in 0..4 {
        let (c, url, draining, sent, failed) = (
            c.clone(),
            server.url("/v1/check"),
            draining.clone(),
            sent.clone(),
            failed.clone(),
        );
        let mut g = server.grpc().await;
        load.push(tokio::spawn(async move {
            while !draining.load(Ordering::Relaxed) {
                let ok = if t % 2 == 0 {
                    matches!(c.post(&url).body(r#"{"key": "k"}"#).send().await, Ok(r) if r.status() == 200)
                } else {
                    g.should_rate_limit(envoy_request("api", &[&[("k", "v")]], 1)).await.is_ok()
                };
                sent.fetch_add(1, Ordering::Relaxed);
                failed.fetch_add(u64::from(!ok), Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal("-TERM");
    let start = Instant::now();
    while c
        .get(server.url("/readyz"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok()
        == Some(200)
    {
        assert!(start.elapsed() < Duration::from_secs(10), "never drained");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    draining.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    // The listener closes after the drain.
    while TcpStream::connect(server.http).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the listener never closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The requests in flight complete, and are answered.
    for s in &mut slow {
        s.write_all(&body.as_bytes()[5..]).unwrap();
    }
    for s in &mut slow {
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("\"allowed\":true"), "{reply}");
    }
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {}", server.stderr());
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 10, "{sent}");
    assert_eq!(failed, 0, "{failed} of {sent} requests failed");
}

/// Two servers, one Redis: one limit across both, on both APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_sharing_redis_enforce_one_limit() {
    let redis = redis_server::Server::start();
    let rules = "[rules.shared]\nlimit = 50\nwindow = \"1h\"\ngranularity = \"1m\"\n\n[keys]\ndefault = [\"shared\"]\n\n[[descriptors]]\ndomain = \"api\"\nmatch = [\"user\"]\nrule = \"shared\"\n";
    // A decision Redis could not make is denied, so nothing here can pass on a fallback.
    let args = [
        "--redis",
        &redis.url(),
        "--redis-unavailable",
        "deny",
        "--redis-deadline",
        "2s",
    ];
    let servers = [
        Server::start(rules, "toml", &args),
        Server::start(rules, "toml", &args),
    ];
    let c = reqwest::Client::new();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (n, s) in servers.iter().enumerate() {
        for t in 0..4 {
            let (c, url, admitted) = (c.clone(), s.url("/v1/check"), admitted.clone());
            let mut g = s.grpc().await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    let ok = if (n + t) % 2 == 0 {
                        let r = c
                            .post(&url)
                            .body(descriptors(&[&[("user", "shared-user")]]))
                            .send()
                            .await
                            .unwrap();
                        assert!(r.status() == 200 || r.status() == 429, "{}", r.status());
                        r.status() == 200
                    } else {
                        let r = g
                            .should_rate_limit(envoy_request(
                                "api",
                                &[&[("user", "shared-user")]],
                                1,
                            ))
                            .await
                            .unwrap();
                        r.into_inner().overall_code == Code::Ok as i32
                    };
                    admitted.fetch_add(u64::from(ok), Ordering::Relaxed);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 160 requests for 50 units: exactly 50 admitted across both servers.
    assert_eq!(admitted.load(Ordering::Relaxed), 50);
    let (_, _, body) = post(
        &c,
        &servers[1].url("/v1/check"),
        &descriptors(&[&[("user", "shared-user")]]),
    )
    .await;
    assert_eq!(body["statuses"][0]["remaining"], 0);
    let metrics = c
        .get(servers[0].url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !metrics.contains("slidegate_serve_redis_degraded_total"),
        "{metrics}"
    );
}

/// Startup errors are clear and exit non-zero.
#[test]
fn a_bad_rules_file_at_start_is_an_error_naming_line_and_field() {
    let dir = std::env::temp_dir().join(format!("slidegate-serve-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.yaml");
    std::fs::write(&path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: -1 }\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_slidegate-serve"))
        .args([
            "--rules",
            path.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 4: descriptors[0].rate_limit.requests_per_unit"),
        "{err}"
    );
}
