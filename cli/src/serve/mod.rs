//! `slidegate serve`: a rate-limit decision service. Requests name a key or Envoy's
//! descriptors; a rules file (TOML, or the YAML of Envoy's reference rate limit service)
//! says which limits apply; the answer is allow or deny with what remains and when to
//! retry. It speaks HTTP/JSON (`POST /v1/check`) and Envoy's rate limit gRPC API
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), reloads the rules file
//! when it changes, keeps its counts in memory or, with `--redis`, in Redis shared by every
//! instance, and drains gracefully on SIGTERM/SIGINT. The guide is docs/serve.md.

mod engine;
mod grpc;
mod http;
mod metrics;
mod proto;
mod reload;
mod rules;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::serve::ListenerExt;
use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

use engine::{Backend, Engine, ServeClock, Unavailable};
use proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use proto::slidegate::serve::v1::noop_server::NoopServer;
use reload::Reloader;

/// The options of `slidegate serve`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Serve {
    /// The rules file: TOML (slidegate's format), or `.yaml`/`.yml` in the format of Envoy's
    /// reference rate limit service. Reloaded when it changes and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    rules: PathBuf,

    /// Where the HTTP/JSON API listens (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    http: SocketAddr,

    /// Where the gRPC API (Envoy's rate limit service) listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,

    /// Keep the counts in Redis (`redis://host:port[/db]`), shared by every server with the
    /// same rules and --redis-prefix. Several URLs: the nodes of a Redis Cluster.
    #[arg(long, value_name = "URL")]
    redis: Vec<String>,

    /// The prefix of every Redis key this server writes (no braces).
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "slidegate:",
        requires = "redis"
    )]
    redis_prefix: String,

    /// How long a Redis decision may take before --redis-unavailable decides.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = crate::duration::parse_duration, requires = "redis")]
    redis_deadline: Duration,

    /// What decides while Redis does not answer: allow, deny, or local (each rule's quota
    /// counted by this server alone).
    #[arg(long, value_enum, default_value_t = Unavailable::Local, requires = "redis")]
    redis_unavailable: Unavailable,

    /// The most keys one rule holds in memory (the least recently active are evicted beyond).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    max_keys: usize,

    /// The largest HTTP request body accepted, in bytes (larger: 413).
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024)]
    max_body: usize,

    /// After SIGTERM/SIGINT, keep serving this long with /readyz failing and every HTTP
    /// response closing its connection, so a load balancer moves traffic away first.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = crate::duration::parse_duration)]
    drain: Duration,

    /// After the listeners close, how long in-flight requests may take to finish.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse_duration)]
    shutdown_timeout: Duration,

    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,

    /// Also serve no-op endpoints (POST /v1/noop, gRPC slidegate.serve.v1.Noop) that parse
    /// a request and decide nothing: the baseline of the load benchmark.
    #[arg(long)]
    noop_endpoints: bool,
}

const AFTER_HELP: &str = "\
The first line on standard output gives the addresses the APIs listen on:
  slidegate serve: http=127.0.0.1:8080 grpc=127.0.0.1:8081 rules=rules.toml (3 rules)
Logs go to standard error (RUST_LOG=debug for more). The API, the rules format and the
metrics are described in docs/serve.md.";

/// Runs the server until SIGTERM or SIGINT.
pub(crate) fn run(args: &Serve) -> Result<(), String> {
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
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(usize::from(n));
    }
    let runtime = runtime
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args, spec, bytes))
}

async fn serve(args: &Serve, spec: rules::Spec, bytes: Vec<u8>) -> Result<(), String> {
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
                unavailable: args.redis_unavailable,
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
