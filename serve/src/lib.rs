//! `slidegate serve`: a rate-limit decision service. Requests name a key or Envoy's
//! descriptors; a rules file (TOML, or the YAML of Envoy's reference rate limit service)
//! says which limits apply; the answer is allow or deny with what remains and when to
//! retry. It speaks HTTP/JSON (`POST /v1/check`) and Envoy's rate limit gRPC API
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), reloads the rules file
//! when it changes, keeps its counts in memory or, with `--redis`, in Redis shared by every
//! instance, and drains gracefully on SIGTERM/SIGINT. The guide is docs/serve.md.
//!
//! The crate is the service as a library ([`run`] on parsed [`Args`]) and the
//! `slidegate-serve` binary; the `slidegate` command's `serve` subcommand is the same [`Args`]
//! and [`run`]. The engine decides and knows no wire format; `http` (JSON) and `grpc` (Envoy's
//! rate limit API) translate.

mod args;
pub mod duration;
mod engine;
mod grpc;
mod headers;
mod http;
mod metrics;
#[doc(hidden)]
pub mod proto;
mod reload;
#[doc(hidden)]
pub mod rules;
mod wire;

pub use args::Args;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

use engine::{Backend, Engine, ServeClock};
use proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use proto::slidegate::serve::v1::noop_server::NoopServer;
use reload::Reloader;

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: &Args) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init()
        .ok();
    let bytes = std::fs::read(&args.rules)
        .map_err(|e| format!("cannot read {}: {e}", args.rules.display()))?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| format!("{}: not UTF-8: {e}", args.rules.display()))?;
    let spec =
        rules::load(&args.rules, text).map_err(|e| format!("{}: {e}", args.rules.display()))?;
    // One worker is a current-thread runtime, as Limitador's: the multi-thread scheduler's
    // bookkeeping for stealing and waking other workers is pure cost when there are none.
    let mut runtime = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        threads => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = threads {
                b.worker_threads(usize::from(n));
            }
            b
        }
    };
    let runtime = runtime
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args, spec, bytes))
}

async fn serve(args: &Args, spec: rules::Spec, bytes: Vec<u8>) -> Result<(), String> {
    let prometheus = metrics::install()?;
    let backend = match args.redis.as_slice() {
        [] => Backend::Memory {
            clock: ServeClock::Quanta(slidegate::clock::QuantaClock::new()),
            max_keys: args.max_keys,
        },
        urls => {
            let conn = if let [url] = urls {
                slidegate::redis::Connection::open(url).await
            } else {
                let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
                slidegate::redis::Connection::open_cluster(&nodes).await
            }
            .map_err(|e| e.to_string())?;
            Backend::Redis {
                conn,
                prefix: args.redis_prefix.clone(),
                deadline: args.redis_deadline,
                unavailable: args.redis_unavailable.into(),
            }
        }
    };
    let engine =
        Arc::new(Engine::new(spec, backend).map_err(|e| format!("{}: {e}", args.rules.display()))?);
    ::metrics::gauge!(metrics::GENERATION).set(1.0);
    ::metrics::gauge!(metrics::LAST_RELOAD_OK).set(1.0);

    let reloader = Arc::new(Reloader::new(
        args.rules.clone(),
        Arc::clone(&engine),
        bytes,
    ));
    let _watcher = reloader.watch()?;
    tokio::spawn(Arc::clone(&reloader).run());
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let poke = Arc::clone(&reloader);
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the rules file");
            poke.poke();
        }
    });

    let bind = |addr: SocketAddr, api: &'static str| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} ({api}): {e}"))
    };
    let http_listener = bind(args.http, "--http").await?;
    let grpc_listener = bind(args.grpc, "--grpc").await?;
    let (http_addr, grpc_addr) = (
        http_listener.local_addr().map_err(|e| e.to_string())?,
        grpc_listener.local_addr().map_err(|e| e.to_string())?,
    );

    let draining = Arc::new(AtomicBool::new(false));
    let api = Arc::new(http::Api {
        engine: Arc::clone(&engine),
        reloader: Arc::clone(&reloader),
        metrics: metrics::ApiMetrics::new("http"),
        prometheus: Some(prometheus.clone()),
        draining: Arc::clone(&draining),
    });
    let router = http::router(api, args.max_body, args.noop_endpoints);
    let service = grpc::Service {
        engine: Arc::clone(&engine),
        metrics: metrics::ApiMetrics::new("grpc"),
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&stop| stop).await;
    };
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let drain = args.drain;
    let flag = Arc::clone(&draining);
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        flag.store(true, Ordering::Relaxed);
        tracing::info!(signal = name, drain = ?drain, "draining: /readyz fails, then the listeners close");
        // A second signal skips the rest of the drain.
        tokio::select! {
            _ = tokio::time::sleep(drain) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("closing the listeners; in-flight requests finish");
        let _ = stop_tx.send(true);
    });

    // Upkeep drains the buffers of any histogram recorded through the facade even if /metrics
    // is never scraped (the decision's own histogram, `metrics::Timing`, keeps none).
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });

    println!(
        "slidegate serve: http={http_addr} grpc={grpc_addr} rules={} ({} rules)",
        args.rules.display(),
        engine.rules().rules.len()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let http_listener = http_listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let http = axum::serve(http_listener, router).with_graceful_shutdown(stopped(stop_rx.clone()));
    let grpc = tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .add_optional_service(
            args.noop_endpoints
                .then(|| NoopServer::new(grpc::NoopService)),
        )
        .serve_with_incoming_shutdown(
            TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            stopped(stop_rx.clone()),
        );
    let both = async {
        let (h, g) = tokio::join!(http.into_future(), grpc);
        h.map_err(|e| format!("HTTP server: {e}"))?;
        g.map_err(|e| format!("gRPC server: {e}"))
    };
    let timeout = args.shutdown_timeout;
    tokio::select! {
        result = both => result?,
        _ = async { stopped(stop_rx).await; tokio::time::sleep(timeout).await } => {
            return Err(format!("requests still in flight after --shutdown-timeout {timeout:?}; stopping anyway"));
        }
    }
    tracing::info!("stopped");
    Ok(())
}
