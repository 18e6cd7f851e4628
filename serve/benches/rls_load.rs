//! The load generator of serve/benches/limitador.sh: Envoy's `ShouldRateLimit` over raw
//! HTTP/2 (the `h2` crate), the same calls for any server of Envoy's rate limit API, so two
//! servers are compared under one client. The requests are encoded once, before the run (one
//! per user); a call is a HEADERS frame and one DATA frame from a shared buffer, so the client
//! costs less per call than either server and its cost is not what is measured.
//!
//! ```sh
//! cargo bench -p slidegate-serve --bench rls_load -- --grpc 127.0.0.1:8081 --pid "$server_pid"
//! ```
//!
//! `--connections` HTTP/2 connections, each with `--streams` calls in flight (64 × 1 by
//! default); each call names one of `--keys` users (domain `bench`, one descriptor
//! `user=user-N`), in turn. After `--warmup` seconds it measures for `--duration` seconds and
//! prints one line:
//!
//! `calls_per_second p50_us p99_us errors server_user_us server_system_us client_us`
//!
//! the last three per call over the measured span, from `/proc/<pid>/stat` of `--pid` (the
//! server; 0 when not given) and of this process. A call that does not answer `OK` with
//! `grpc-status: 0` is an error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use slidegate_serve::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use slidegate_serve::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use slidegate_serve::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

struct Options {
    grpc: String,
    pid: Option<u32>,
    connections: usize,
    streams: usize,
    warmup: Duration,
    duration: Duration,
    keys: usize,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        grpc: "127.0.0.1:8081".into(),
        pid: None,
        connections: 64,
        streams: 1,
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs(10),
        keys: 1000,
    };
    let seconds = |v: String, name: &str| {
        v.parse::<f64>()
            .map(Duration::from_secs_f64)
            .map_err(|e| format!("{name}: {e}"))
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--grpc" => o.grpc = value()?,
            "--pid" => o.pid = Some(value()?.parse().map_err(|e| format!("--pid: {e}"))?),
            "--connections" => {
                o.connections = value()?
                    .parse()
                    .map_err(|e| format!("--connections: {e}"))?
            }
            "--streams" => o.streams = value()?.parse().map_err(|e| format!("--streams: {e}"))?,
            "--warmup" => o.warmup = seconds(value()?, "--warmup")?,
            "--duration" => o.duration = seconds(value()?, "--duration")?,
            "--keys" => o.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            // What `cargo bench` adds.
            "--bench" => {}
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.connections == 0 || o.streams == 0 || o.keys == 0 {
        return Err("--connections, --streams and --keys must be at least 1".into());
    }
    Ok(o)
}

/// One user's call as a gRPC message: the 5-byte prefix (uncompressed, length) and the
/// protobuf.
fn encoded(user: usize) -> Bytes {
    let request = RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("user-{user}"),
            }],
            limit: None,
        }],
        hits_addend: 1,
    };
    let body = request.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + body.len());
    framed.push(0);
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    Bytes::from(framed)
}

/// User and system CPU time of a process so far, in clock ticks (`/proc/<pid>/stat` fields
/// 14 and 15, counted after the parenthesised command name, which may hold spaces).
fn cpu_ticks(pid: &str) -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0, 0);
    };
    let after = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    let mut fields = after.split_whitespace().skip(11);
    let mut next = || fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
    (next(), next())
}

fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The measured span's state, shared by every stream.
struct Span {
    measuring: AtomicBool,
    over: AtomicBool,
    calls: AtomicU64,
    errors: AtomicU64,
}

/// One call: its answer is `OK` and its status 0.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    body: Bytes,
) -> Result<bool, h2::Error> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a well-formed request");
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    let (response, mut stream) = send.send_request(request, false)?;
    stream.send_data(body, true)?;
    let mut body = response.await?.into_body();
    let mut message = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let status_ok = body
        .trailers()
        .await?
        .is_some_and(|t| t.get("grpc-status").is_some_and(|s| s == "0"));
    let code_ok = message.len() >= 5
        && RateLimitResponse::decode(&message[5..]).is_ok_and(|r| r.overall_code == 1);
    Ok(status_ok && code_ok)
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rls_load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(o));
}

async fn run(o: Options) {
    let requests: Arc<Vec<Bytes>> = Arc::new((0..o.keys).map(encoded).collect());
    let uri: http::Uri = format!("http://{}{PATH}", o.grpc)
        .parse()
        .expect("an address");
    let span = Arc::new(Span {
        measuring: AtomicBool::new(false),
        over: AtomicBool::new(false),
        calls: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let in_flight = o.connections * o.streams;
    let mut tasks = Vec::with_capacity(in_flight);
    for c in 0..o.connections {
        let tcp = tokio::net::TcpStream::connect(&o.grpc)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", o.grpc));
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        let (send, connection) = h2::client::handshake(tcp)
            .await
            .expect("an HTTP/2 handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        for s in 0..o.streams {
            let (mut send, uri, requests, span) = (
                send.clone(),
                uri.clone(),
                Arc::clone(&requests),
                Arc::clone(&span),
            );
            let mut i = c * o.streams + s;
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 16);
                while !span.over.load(Ordering::Relaxed) {
                    let body = requests[i % requests.len()].clone();
                    i += in_flight;
                    let measured = span.measuring.load(Ordering::Relaxed);
                    let start = Instant::now();
                    let ok = call(&mut send, &uri, body).await.unwrap_or(false);
                    // Calls that began and ended within the span.
                    if measured && !span.over.load(Ordering::Relaxed) {
                        latencies.push(start.elapsed().as_nanos() as u64);
                        span.calls.fetch_add(1, Ordering::Relaxed);
                        span.errors.fetch_add(u64::from(!ok), Ordering::Relaxed);
                    }
                }
                latencies
            }));
        }
    }
    let server = o.pid.map(|p| p.to_string());
    let server_cpu = || server.as_deref().map_or((0, 0), cpu_ticks);
    tokio::time::sleep(o.warmup).await;
    let (server_before, client_before) = (server_cpu(), cpu_ticks("self"));
    let started = Instant::now();
    span.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(o.duration).await;
    span.over.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let (server_after, client_after) = (server_cpu(), cpu_ticks("self"));
    let calls = span.calls.load(Ordering::Relaxed);
    let errors = span.errors.load(Ordering::Relaxed);

    let mut all = Vec::with_capacity(calls as usize);
    for t in tasks {
        all.extend(t.await.expect("a stream's task"));
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1e3
    };
    let per_call = |ticks: u64| ticks as f64 / ticks_per_second() * 1e6 / calls.max(1) as f64;
    let client = (client_after.0 + client_after.1) - (client_before.0 + client_before.1);
    println!(
        "{:.0} {:.1} {:.1} {errors} {:.2} {:.2} {:.2}",
        calls as f64 / elapsed,
        pct(0.5),
        pct(0.99),
        per_call(server_after.0 - server_before.0),
        per_call(server_after.1 - server_before.1),
        per_call(client),
    );
}
