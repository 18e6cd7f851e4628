//! The server of the HTTP load benchmark (`benches/http/run.sh`): an axum hello-world, bare or
//! behind a rate-limit layer keyed by the client address a trusted proxy reports in
//! `X-Forwarded-For`.
//!
//! ```text
//! http_bench <none|slidegate|slidegate_no_headers|governor|governor_headers> <port>
//! ```
//!
//! `slidegate_no_headers` is slidegate with `headers_on_allowed(false)`, `governor_headers`
//! tower-governor with `use_headers()`: each layer with and without its fields on admitted
//! responses.
//!
//! One tokio thread, so that `taskset` can give the server one core and the load generator
//! the other. The limits are high enough that every request is admitted: the benchmark
//! measures what the admitted path costs.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use slidegate::http::key::{ClientIp, ProxyHeader};
use slidegate::http::{Policy, RateLimitLayer};
use slidegate::{KeyedLimiter, Quota};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let port: u16 = args.next().unwrap_or_else(|| "3000".into()).parse()?;
    let app = Router::new().route("/", get(|| async { "hello" }));
    let app = match mode.as_str() {
        "none" => app,
        "slidegate" | "slidegate_no_headers" => {
            let quota = Quota::new(1_000_000, Duration::from_secs(1))?;
            let limiter = KeyedLimiter::builder(quota).max_keys(100_000).build();
            let key = ClientIp::new().behind_proxies(ProxyHeader::XForwardedFor, ["127.0.0.1"])?;
            let layer = RateLimitLayer::new(Policy::new("per-ip", limiter)?.key(key))
                .headers_on_allowed(mode == "slidegate");
            app.layer(layer)
        }
        "governor" | "governor_headers" => {
            let mut config = GovernorConfigBuilder::default().key_extractor(SmartIpKeyExtractor);
            config.per_nanosecond(1_000).burst_size(1_000_000);
            let bad = "bad governor configuration";
            if mode == "governor" {
                app.layer(GovernorLayer::new(config.finish().ok_or(bad)?))
            } else {
                app.layer(GovernorLayer::new(
                    config.use_headers().finish().ok_or(bad)?,
                ))
            }
        }
        other => return Err(format!(
            "mode {other:?}: none, slidegate, slidegate_no_headers, governor or governor_headers"
        )
        .into()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await?;
        Ok(())
    })
}
