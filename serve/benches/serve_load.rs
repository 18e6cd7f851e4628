//! The gRPC load generator of serve/benches/serve.sh: `connections` HTTP/2 connections to a
//! `slidegate serve`, each with one `ShouldRateLimit` call in flight at a time, for
//! `duration` seconds; prints `requests_per_second p50_us p99_us errors`.
//!
//! ```sh
//! cargo bench -p slidegate-serve --bench serve_load -- --grpc 127.0.0.1:8081 --method decide
//! ```
//!
//! `--method decide` calls Envoy's RateLimitService; `--method noop` the server's no-op
//! (served with `--noop-endpoints`), which decodes the same request and decides nothing.
//! Each call names one of `--keys` users, in turn. `--http ADDR` instead of `--grpc` sends
//! the same request as JSON to `POST /v1/check` (or `/v1/noop`).
//!
//! `--requests N` sends exactly `N` calls, one after another on one connection, for counting
//! the server's instructions under `valgrind --tool=callgrind` (two runs of different `N`
//! subtract the server's start and stop; docs/serve.md has the method).

use slidegate_serve::proto;

use std::time::{Duration, Instant};

use proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use proto::envoy::service::ratelimit::v3::RateLimitRequest;
use proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use proto::slidegate::serve::v1::noop_client::NoopClient;
use tonic::transport::Channel;

struct Options {
    grpc: String,
    /// The HTTP/JSON API's address, to load it instead of gRPC.
    http: Option<String>,
    requests: Option<usize>,
    noop: bool,
    connections: usize,
    duration: Duration,
    keys: usize,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        grpc: "127.0.0.1:8081".into(),
        http: None,
        requests: None,
        noop: false,
        connections: 64,
        duration: Duration::from_secs(10),
        keys: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--grpc" => o.grpc = value()?,
            "--http" => o.http = Some(value()?),
            "--requests" => {
                o.requests = Some(value()?.parse().map_err(|e| format!("--requests: {e}"))?)
            }
            "--method" => o.noop = value()? == "noop",
            "--connections" => {
                o.connections = value()?
                    .parse()
                    .map_err(|e| format!("--connections: {e}"))?
            }
            "--duration" => {
                o.duration = Duration::from_secs_f64(
                    value()?.parse().map_err(|e| format!("--duration: {e}"))?,
                )
            }
            "--keys" => o.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            // What `cargo bench` adds.
            "--bench" => {}
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

fn request(user: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("user-{user}"),
            }],
            limit: None,
        }],
        hits_addend: 1,
    }
}

/// The JSON of [`request`].
fn json_request(user: usize) -> String {
    format!(
        r#"{{"domain":"bench","descriptors":[{{"entries":[{{"key":"user","value":"user-{user}"}}]}}]}}"#
    )
}

/// `o.requests` calls in sequence on one connection; prints the count of errors.
async fn counted(o: &Options, requests: usize) {
    let mut errors = 0u64;
    if let Some(http) = &o.http {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let path = if o.noop { "noop" } else { "check" };
        let url = format!("http://{http}/v1/{path}");
        for i in 0..requests {
            let res = client
                .post(&url)
                .header("content-type", "application/json")
                .body(json_request(i % o.keys))
                .send()
                .await;
            let ok = match res {
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            errors += u64::from(!ok);
        }
    } else {
        let channel = Channel::from_shared(format!("http://{}", o.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut decide = RateLimitServiceClient::new(channel.clone());
        let mut nothing = NoopClient::new(channel);
        for i in 0..requests {
            let req = request(i % o.keys);
            let ok = if o.noop {
                nothing.should_rate_limit(req).await.is_ok()
            } else {
                decide.should_rate_limit(req).await.is_ok()
            };
            errors += u64::from(!ok);
        }
    }
    println!("{requests} requests, {errors} errors");
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("serve_load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(n) = o.requests {
        runtime.block_on(counted(&o, n));
        return;
    }
    runtime.block_on(async {
        let mut tasks = Vec::with_capacity(o.connections);
        let deadline = Instant::now() + o.duration;
        for c in 0..o.connections {
            let channel = Channel::from_shared(format!("http://{}", o.grpc))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let (noop, keys) = (o.noop, o.keys);
            tasks.push(tokio::spawn(async move {
                let mut decide = RateLimitServiceClient::new(channel.clone());
                let mut nothing = NoopClient::new(channel);
                let (mut latencies, mut errors) = (Vec::with_capacity(1 << 16), 0u64);
                let mut i = c;
                while Instant::now() < deadline {
                    let req = request(i % keys);
                    i += o.connections;
                    let start = Instant::now();
                    let ok = if noop {
                        nothing.should_rate_limit(req).await.is_ok()
                    } else {
                        decide
                            .should_rate_limit(req)
                            .await
                            .is_ok_and(|r| r.get_ref().overall_code == 1)
                    };
                    latencies.push(start.elapsed().as_nanos() as u64);
                    errors += u64::from(!ok);
                }
                (latencies, errors)
            }));
        }
        let started = Instant::now();
        let (mut all, mut errors) = (Vec::new(), 0);
        for t in tasks {
            let (l, e) = t.await.unwrap();
            all.extend(l);
            errors += e;
        }
        let elapsed = started
            .elapsed()
            .as_secs_f64()
            .max(o.duration.as_secs_f64());
        all.sort_unstable();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0) as f64
                / 1e3
        };
        println!(
            "{:.0} {:.1} {:.1} {errors}",
            all.len() as f64 / elapsed,
            pct(0.5),
            pct(0.99)
        );
    });
}
